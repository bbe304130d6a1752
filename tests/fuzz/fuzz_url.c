/*
 * fuzz_url.c - libFuzzer harness for proto/url.h: the first byte picks a small output
 * size; the rest is a query string. Checks that a found value is a view inside the
 * query, that decoding never writes past its output or claims more than it wrote, that
 * a value without '%' decodes to its own length, and that key validation agrees with a
 * byte-by-byte reading of the rule.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_check.h"

#include "proto/url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t cap = data[0] % 64u;
    struct proto_slice q = {(const char *)data + 1, size - 1};
    struct proto_slice raw;
    if (!proto_query_find(q, "k", &raw))
        raw = q;
    CHECK(raw.len == 0 || (raw.ptr >= q.ptr && raw.ptr + raw.len <= q.ptr + q.len));
    char *out = malloc(cap ? cap : 1);
    size_t len = 0;
    int rc = proto_url_decode(raw, out, cap, &len);
    CHECK(len <= cap && len <= raw.len);
    CHECK(rc == PROTO_URL_OK || rc == PROTO_URL_EESCAPE || rc == PROTO_URL_ETOOLONG);
    if (rc == PROTO_URL_OK && memchr(raw.ptr, '%', raw.len) == NULL)
        CHECK(len == raw.len);
    if (rc == PROTO_URL_OK) {
        bool ok = len > 0;
        for (size_t i = 0; i < len; i++)
            ok = ok && out[i] != ' ' && out[i] != '\t' && out[i] != '\0' && out[i] != '\r' &&
                 out[i] != '\n';
        CHECK(ok == proto_key_valid((struct proto_slice){out, len}));
    }
    free(out);
    return 0;
}
