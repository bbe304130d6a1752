/*
 * keys.c - key extraction. The common case (a whole line of printable bytes) is one pass of
 * proto_key_valid; the reason for a refusal is looked up only when a key fails it.
 */
#include "cli/keys.h"

#include <string.h>

#include "proto/url.h"

int cli_key_extract(const struct cli_keyspec *spec, const char *line, size_t len,
                    struct proto_slice *key)
{
    if (len > 0 && line[len - 1] == '\r')
        len--;
    *key = (struct proto_slice){line, len};
    if (spec->field > 0) {
        const char *p = line, *end = line + len;
        for (unsigned f = 1; f < spec->field; f++) {
            const char *d = memchr(p, spec->delim, (size_t)(end - p));
            if (d == NULL) {
                *key = (struct proto_slice){end, 0};
                return CLI_KEY_NOFIELD;
            }
            p = d + 1;
        }
        const char *d = memchr(p, spec->delim, (size_t)(end - p));
        *key = (struct proto_slice){p, (size_t)((d != NULL ? d : end) - p)};
    }
    if (key->len > CLI_KEY_MAX)
        return CLI_KEY_TOOLONG;
    if (proto_key_valid(*key))
        return CLI_KEY_OK;
    if (key->len == 0)
        return CLI_KEY_EMPTY;
    for (size_t i = 0; i < key->len; i++) {
        switch (key->ptr[i]) {
        case ' ':
            return CLI_KEY_SPACE;
        case '\t':
            return CLI_KEY_TAB;
        case '\r':
            return CLI_KEY_CR;
        case '\0':
            return CLI_KEY_NUL;
        default:
            break;
        }
    }
    return CLI_KEY_EMPTY; /* not reached: proto_key_valid refuses only the bytes above */
}

const char *cli_key_strerror(int err)
{
    switch (err) {
    case CLI_KEY_OK:
        return "ok";
    case CLI_KEY_EMPTY:
        return "empty key";
    case CLI_KEY_SPACE:
        return "the key has a space";
    case CLI_KEY_TAB:
        return "the key has a tab";
    case CLI_KEY_CR:
        return "the key has a carriage return";
    case CLI_KEY_NUL:
        return "the key has a NUL byte";
    case CLI_KEY_NOFIELD:
        return "the line has too few fields";
    case CLI_KEY_TOOLONG:
        return "the key is longer than 1 MiB";
    }
    return "bad key";
}

bool cli_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128 || s[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}
