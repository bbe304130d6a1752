/*
 * url.c - bloomd:// URLs. Like Python's urlsplit: the user information ends at the last
 * '@' of the authority; the password starts after its first ':'. Unlike form decoding
 * (proto/url.h), '+' stays '+': base64 tokens contain it.
 */
#include "cli/url.h"

#include <string.h>

#include "proto/number.h"

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..n) into u->token. */
static int decode_token(const char *s, size_t n, struct cli_url *u)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (n - i < 3 || hexval(s[i + 1]) < 0 || hexval(s[i + 2]) < 0)
                return CLI_URL_ETOKEN;
            c = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            i += 2;
        }
        if (o == CLI_TOKEN_MAX)
            return CLI_URL_ETOKEN;
        u->token[o++] = c;
    }
    u->token[o] = '\0';
    u->token_len = o;
    return CLI_URL_OK;
}

static bool has_prefix(const char *s, size_t len, const char *p)
{
    size_t n = strlen(p);
    if (len < n)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != p[i])
            return false;
    }
    return true;
}

int cli_url_parse(const char *s, size_t len, struct cli_url *u)
{
    memset(u, 0, sizeof *u);
    u->port = CLI_DEFAULT_PORT;
    size_t i;
    if (has_prefix(s, len, "bloomd://")) {
        i = 9;
    } else if (has_prefix(s, len, "bloomds://")) {
        i = 10;
        u->tls = true;
    } else {
        return CLI_URL_ESCHEME;
    }
    /* The authority ends at the first '/', '?' or '#'. */
    size_t end = i;
    while (end < len && s[end] != '/' && s[end] != '?' && s[end] != '#')
        end++;
    if (end < len && !(s[end] == '/' && end + 1 == len))
        return CLI_URL_EPATH;
    size_t at = end;
    for (size_t j = i; j < end; j++)
        if (s[j] == '@')
            at = j;
    if (at < end) {
        const char *colon = memchr(s + i, ':', at - i);
        if (colon != NULL) {
            u->has_token = true;
            size_t from = (size_t)(colon - s) + 1;
            int rc = decode_token(s + from, at - from, u);
            if (rc != CLI_URL_OK)
                return rc;
        }
        i = at + 1;
    }
    size_t host_from = i, host_len;
    if (i < end && s[i] == '[') {
        const char *close = memchr(s + i, ']', end - i);
        if (close == NULL)
            return CLI_URL_EHOST;
        host_from = i + 1;
        host_len = (size_t)(close - s) - host_from;
        i = (size_t)(close - s) + 1;
        if (i < end && s[i] != ':')
            return CLI_URL_EHOST;
    } else {
        while (i < end && s[i] != ':')
            i++;
        host_len = i - host_from;
    }
    if (host_len == 0 || host_len > CLI_HOST_MAX)
        return CLI_URL_EHOST;
    memcpy(u->host, s + host_from, host_len);
    u->host[host_len] = '\0';
    if (memchr(u->host, '\0', host_len) != NULL)
        return CLI_URL_EHOST;
    if (i < end) { /* s[i] == ':' */
        uint64_t port;
        if (proto_parse_u64(s + i + 1, end - i - 1, &port) != 0 || port < 1 || port > 65535)
            return CLI_URL_EPORT;
        u->port = (unsigned)port;
    }
    return CLI_URL_OK;
}

const char *cli_url_strerror(int err)
{
    switch (err) {
    case CLI_URL_OK:
        return "ok";
    case CLI_URL_ESCHEME:
        return "expected bloomd://[:token@]host[:port] (or bloomds:// for TLS)";
    case CLI_URL_EHOST:
        return "bad host";
    case CLI_URL_EPORT:
        return "bad port (1..65535)";
    case CLI_URL_ETOKEN:
        return "bad token (a %XX escape, or longer than 4096 bytes)";
    case CLI_URL_EPATH:
        return "unexpected path after host:port";
    }
    return "bad URL";
}
