/*
 * fuzz_codec.c - libFuzzer harness for the filter loader: any bytes go to sbf_decode
 * through a memory reader with a 1 MiB limit on bits. Whatever decodes must re-encode to
 * exactly the input (every field is validated, so nothing may be silently normalised).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/sbf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct in {
    const uint8_t *data;
    size_t len, pos;
};

static long mem_read(void *ctx, void *buf, size_t len)
{
    struct in *r = ctx;
    size_t n = r->len - r->pos;
    if (n > len)
        n = len;
    /* Odd-sized reads, decided by the input itself, exercise the refill loops. */
    if (n > 1 && r->len > 0 && (r->data[r->len - 1] & 1u))
        n = n / 2 + 1;
    memcpy(buf, r->data + r->pos, n);
    r->pos += n;
    return (long)n;
}

struct cmp {
    const uint8_t *want;
    size_t len, pos;
};

/* A writer that compares instead of storing: fails at the first differing byte. */
static int cmp_write(void *ctx, const void *buf, size_t len)
{
    struct cmp *c = ctx;
    if (len > c->len - c->pos || memcmp(c->want + c->pos, buf, len) != 0)
        return -1;
    c->pos += len;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct in r = {.data = data, .len = size};
    struct sbf *f = NULL;
    if (sbf_decode(mem_read, &r, 1u << 20, NULL, &f) != SBF_OK)
        return 0;
    struct cmp c = {.want = data, .len = size};
    if (sbf_encode(f, cmp_write, &c) != SBF_OK || c.pos != size || sbf_encoded_size(f) != size)
        abort();
    struct sbf_info info;
    sbf_info(f, &info);
    if (info.stages < 1 || info.stages > SBF_MAX_STAGES || info.bytes > (1u << 20))
        abort();
    sbf_free(f);
    return 0;
}
