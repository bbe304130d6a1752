/*
 * fuzz_io.h - the codec callbacks the decoder harnesses share: a reader over the fuzz
 * input that returns odd-sized pieces (decided by the input itself, to exercise refill
 * loops), a writer that compares against the input instead of storing, and the checksum
 * repair that lets mutations reach the code behind a payload's checksum test.
 */
#ifndef BLOOMD_TESTS_FUZZ_IO_H
#define BLOOMD_TESTS_FUZZ_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

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

/* Writes the XXH3-64 of buf[0..len) at out, little-endian, as lib/ writes its checksums. */
static inline void fuzz_put_sum(uint8_t *out, const uint8_t *buf, size_t len)
{
    uint64_t sum = XXH3_64bits(buf, len);
    for (unsigned i = 0; i < 8; i++)
        out[i] = (uint8_t)(sum >> (8 * i));
}

/*
 * A copy of data whose last 8 bytes are replaced by the right checksum of the bytes from
 * `from` up to them (a payload's stream starts at from), so mutations of headers and bits
 * also pass the checksum test. NULL if size < from + 8 or out of memory; caller frees.
 */
static inline uint8_t *fuzz_resummed(const uint8_t *data, size_t size, size_t from)
{
    if (size < from + 8)
        return NULL;
    uint8_t *fixed = malloc(size);
    if (fixed) {
        memcpy(fixed, data, size);
        fuzz_put_sum(fixed + size - 8, fixed + from, size - 8 - from);
    }
    return fixed;
}

/* Calls fn on the input as is, then on fuzz_resummed(data, size, 0) (a whole-payload
 * harness: the input is one checksummed stream). */
static inline void fuzz_both(void (*fn)(const uint8_t *data, size_t size), const uint8_t *data,
                             size_t size)
{
    fn(data, size);
    uint8_t *fixed = fuzz_resummed(data, size, 0);
    if (fixed)
        fn(fixed, size);
    free(fixed);
}

#endif
