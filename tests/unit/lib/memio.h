/*
 * memio.h - the codec callbacks the lib unit tests share: a writer that collects a stream
 * in memory (and can refuse its n-th write), and a reader over a buffer that gives at
 * most `step` bytes a call (odd sizes exercise the decoders' refill loops) and can fail
 * at a position.
 */
#ifndef BLOOMD_TESTS_UNIT_LIB_MEMIO_H
#define BLOOMD_TESTS_UNIT_LIB_MEMIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

struct mem_out {
    unsigned char *data; /* what was written; the caller frees it */
    size_t len, cap;
    int writes;  /* calls so far */
    int fail_at; /* refuse the fail_at-th call (1-based); 0: never */
};

/* An sbf_write_fn appending to a struct mem_out: 0, or -1 when refused or out of memory. */
static inline int mem_write(void *ctx, const void *buf, size_t len)
{
    struct mem_out *o = ctx;
    if (++o->writes == o->fail_at)
        return -1;
    if (o->len + len > o->cap) {
        size_t cap = (o->len + len) * 2;
        unsigned char *d = realloc(o->data, cap);
        if (!d)
            return -1;
        o->data = d;
        o->cap = cap;
    }
    memcpy(o->data + o->len, buf, len);
    o->len += len;
    return 0;
}

struct mem_in {
    const unsigned char *data; /* borrowed */
    size_t len, pos;
    size_t step; /* most bytes a call; 0: no limit */
    bool fail;   /* return -1 once pos reaches fail_at */
    size_t fail_at;
};

/* An sbf_read_fn over a struct mem_in: bytes read, 0 at its end, -1 when told to fail. */
static inline long mem_read(void *ctx, void *buf, size_t len)
{
    struct mem_in *r = ctx;
    if (r->fail && r->pos >= r->fail_at)
        return -1;
    size_t n = r->len - r->pos;
    if (n > len)
        n = len;
    if (r->step != 0 && n > r->step)
        n = r->step;
    memcpy(buf, r->data + r->pos, n);
    r->pos += n;
    return (long)n;
}

#endif
