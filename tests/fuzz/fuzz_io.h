/*
 * fuzz_io.h - the codec callbacks the decoder harnesses share: a reader over the fuzz
 * input that returns odd-sized pieces (decided by the input itself, to exercise refill
 * loops), and a writer that compares against the input instead of storing.
 */
#ifndef BLOOMD_TESTS_FUZZ_IO_H
#define BLOOMD_TESTS_FUZZ_IO_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct fuzz_in {
    const uint8_t *data;
    size_t len, pos;
};

static inline long fuzz_read(void *ctx, void *buf, size_t len)
{
    struct fuzz_in *r = ctx;
    size_t n = r->len - r->pos;
    if (n > len)
        n = len;
    if (n > 1 && r->len > 0 && (r->data[r->len - 1] & 1u))
        n = n / 2 + 1;
    memcpy(buf, r->data + r->pos, n);
    r->pos += n;
    return (long)n;
}

struct fuzz_cmp {
    const uint8_t *want;
    size_t len, pos;
};

/* Fails (non-zero) at the first byte that differs from want, or past its end. */
static inline int fuzz_cmp_write(void *ctx, const void *buf, size_t len)
{
    struct fuzz_cmp *c = ctx;
    if (len > c->len - c->pos || memcmp(c->want + c->pos, buf, len) != 0)
        return -1;
    c->pos += len;
    return 0;
}

#endif
