/*
 * fuzz_cli_parse.c - libFuzzer harness for bloomd-cli's pure parsers (cli/url.h,
 * cli/keys.h, cli/reply.h). The first byte picks a field number and a delimiter; the rest
 * is read as a URL, as an input buffer of key lines, and as a request and a reply line.
 * Checks that a parsed URL is within its limits, that the one-pass line scan agrees with
 * memchr plus cli_key_extract, that an extracted key is a view inside its line and free of
 * the bytes the protocol cannot carry, and that reply parsing stays in bounds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_check.h"

#include "cli/keys.h"
#include "cli/reply.h"
#include "cli/url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void url(const char *s, size_t n)
{
    struct cli_url u;
    if (cli_url_parse(s, n, &u) != CLI_URL_OK)
        return;
    size_t hl = strlen(u.host);
    CHECK(hl > 0 && hl <= CLI_HOST_MAX);
    CHECK(u.port >= 1 && u.port <= 65535);
    CHECK(u.token_len <= CLI_TOKEN_MAX && u.token[u.token_len] == '\0');
    CHECK(u.has_token || u.token_len == 0);
}

static void lines(const char *s, size_t n, struct cli_keyspec spec)
{
    struct cli_keyspec whole = {0, 0};
    size_t off = 0;
    while (off < n) {
        bool clean = false;
        size_t at = cli_line_scan(s + off, n - off, &clean);
        const char *nl = memchr(s + off, '\n', n - off);
        CHECK(at == (nl != NULL ? (size_t)(nl - (s + off)) : n - off));
        struct proto_slice key;
        int rc = cli_key_extract(&whole, s + off, at, &key);
        if (nl != NULL)
            CHECK(clean == (rc == CLI_KEY_OK));
        rc = cli_key_extract(&spec, s + off, at, &key);
        CHECK(key.ptr >= s + off && key.ptr + key.len <= s + off + at);
        if (rc == CLI_KEY_OK) {
            CHECK(key.len > 0 && key.len <= CLI_KEY_MAX);
            for (size_t i = 0; i < key.len; i++)
                CHECK(key.ptr[i] != ' ' && key.ptr[i] != '\t' && key.ptr[i] != '\r' &&
                      key.ptr[i] != '\0' && key.ptr[i] != '\n');
        }
        off += at + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    struct cli_keyspec spec = {data[0] % 4u, (char)(data[0] & 1u ? ',' : '\t')};
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    url(s, n);
    lines(s, n, spec);

    /* One request line: the input up to its first '\n' (or all of it, plus a '\n'). */
    const char *nl = memchr(s, '\n', n);
    size_t len = nl != NULL ? (size_t)(nl - s) + 1 : n + 1;
    char *req = malloc(len);
    memcpy(req, s, len - 1);
    req[len - 1] = '\n';
    enum cli_shape shape = cli_request_shape(req, len);
    CHECK(shape == CLI_SHAPE_NONE || shape == CLI_SHAPE_LINE || shape == CLI_SHAPE_BLOCK ||
          shape == CLI_SHAPE_CLOSE);
    free(req);

    /* The same bytes as a reply line. */
    uint64_t v;
    (void)cli_parse_added(s, n, &v);
    (void)cli_reply_is_error(s, n);
    (void)cli_block_ends(s, n, data[0] & 2u);
    size_t nkeys = (n + 1) / 2;
    unsigned char *bits = malloc(nkeys ? nkeys : 1);
    if (cli_parse_bits(s, n, nkeys, bits) == 0)
        for (size_t i = 0; i < nkeys; i++)
            CHECK(bits[i] <= 1);
    free(bits);
    return 0;
}
