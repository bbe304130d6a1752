/*
 * pocket.h - a measuring prototype, not a kind of the daemon: the one-block layout that
 * bench/expandable_growth.md section 3 names as the way to issue 26's memory targets, sized
 * only (no growth), so that bench_grow can set its bytes per key, false-positive rate and
 * cost beside blocked and expandable in one run before a format is built on it.
 *
 * A key goes to one 512-bit block (a prefix filter's "pocket dictionary"): a unary header of
 * POCKET_Q quotients (one 1 per entry, a 0 closing each quotient's run) and up to k
 * remainders of r bits, kept in quotient order: r is the narrowest that keeps the promise
 * (7 at 1%, 10 at 0.1%, 13 at 0.01%) and k = (512 - 64) / (r + 1) (56, 40, 32). A lookup reads one
 * cache line: one select for the run, then compares its entries (under one on average). A
 * key whose block is full goes to the spare, a blocked Bloom filter sized for the expected
 * overflow; a lookup asks it only when the block is full. Blocks are sized for
 * capacity / (k * load), load from $POCKET_LOAD (0.95).
 */
#ifndef BLOOMD_BENCH_POCKET_H
#define BLOOMD_BENCH_POCKET_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/bloom.h"
#include "lib/expandable_internal.h" /* exp_select64 */
#include "lib/kind.h"
#include "lib/sbf.h"

#define POCKET_Q 64u   /* quotients: 6 hash bits */
#define POCKET_AHEAD 8 /* batches prefetch this many keys ahead */

__extension__ typedef unsigned __int128 pocket_u128;

struct pocket {
    unsigned r, k, hdr; /* remainder bits; entries a block holds, (512 - Q) / (r + 1); Q + k */
    unsigned sk;        /* bits a spare key sets */
    uint64_t nblocks, sblocks;
    uint64_t *w;     /* nblocks * 8 words */
    uint64_t *spare; /* sblocks * 8 words */
    uint64_t items, spilled;
};

static inline uint64_t pocket_mulhi(uint64_t a, uint64_t b)
{
    return (uint64_t)(((pocket_u128)a * b) >> 64);
}

/* Position of the k-th (from 0) zero of the header (k < POCKET_Q: the first 64 zeros are
 * in its Q + entries bits, whatever follows them). */
static inline unsigned pocket_select0(const uint64_t *w, unsigned k)
{
    uint64_t z = ~w[0];
    unsigned n0 = (unsigned)__builtin_popcountll(z);
    unsigned base = 0;
    if (k >= n0) {
        k -= n0;
        z = ~w[1];
        base = 64;
    }
    return base + exp_select64(z, k);
}

/* Block primitives, for a header of hdr bits (64 + slots) and slots of width bits. */

static inline uint64_t pocket_hdr_mask(unsigned hdr) /* the header's bits of word 1 */
{
    return hdr == 128 ? ~UINT64_C(0) : (UINT64_C(1) << (hdr - 64)) - 1;
}

static inline unsigned pocket_entries(const uint64_t *w, unsigned hdr)
{
    return (unsigned)(__builtin_popcountll(w[0]) +
                      __builtin_popcountll(w[1] & pocket_hdr_mask(hdr)));
}

static inline unsigned pocket_slot(const uint64_t *w, unsigned hdr, unsigned width, unsigned j)
{
    unsigned pos = hdr + width * j, wi = pos >> 6, off = pos & 63;
    uint64_t v = w[wi] >> off;
    if (off > 64 - width)
        v |= w[wi + 1] << (64 - off);
    return (unsigned)(v & ((UINT64_C(1) << width) - 1));
}

/* Bits >= from of the block move up by `by` (< 64); [from, from + by) becomes 0. */
static inline void pocket_shift_up(uint64_t *w, unsigned from, unsigned by)
{
    unsigned fw = from >> 6, fb = from & 63;
    uint64_t keep = (UINT64_C(1) << fb) - 1;
    for (unsigned k = 7; k > fw; k--) {
        uint64_t below = k - 1 == fw ? w[k - 1] & ~keep : w[k - 1];
        w[k] = (w[k] << by) | (below >> (64 - by));
    }
    w[fw] = (w[fw] & keep) | ((w[fw] & ~keep) << by);
}

/* The run of quotient q: entries [*first, *first + *n); *end: the header bit closing it. */
static inline void pocket_run(const uint64_t *w, unsigned q, unsigned *first, unsigned *n,
                              unsigned *end)
{
    unsigned s = q ? pocket_select0(w, q - 1) + 1 : 0;
    /* The next zero at or after s: the end of the run. */
    uint64_t z0 = ~w[0], z1 = ~w[1];
    unsigned e = s < 64 && (z0 >> s) != 0 ? s + (unsigned)__builtin_ctzll(z0 >> s)
                 : s < 64                 ? 64 + (unsigned)__builtin_ctzll(z1)
                                          : s + (unsigned)__builtin_ctzll(z1 >> (s - 64));
    *first = s - q;
    *n = e - s;
    *end = e;
}

/* Inserts slot value v at the end of q's run, whose closing header bit is e; the block
 * has room. */
static inline void pocket_insert(uint64_t *w, unsigned hdr, unsigned width, unsigned q, unsigned v,
                                 unsigned e)
{
    unsigned j = e - q;
    /* Header: a 1 at e, bits [e, hdr) up by one (the last is free: the block is not full). */
    uint64_t m1 = pocket_hdr_mask(hdr);
    pocket_u128 hmask = (pocket_u128)m1 << 64 | ~UINT64_C(0);
    pocket_u128 h = ((pocket_u128)w[1] << 64 | w[0]) & hmask;
    pocket_u128 low = h & (((pocket_u128)1 << e) - 1);
    h = (low | ((h >> e) << (e + 1)) | ((pocket_u128)1 << e)) & hmask;
    w[0] = (uint64_t)h;
    w[1] = (uint64_t)(h >> 64) | (w[1] & ~m1);
    /* Body: slots from j up by one, v in slot j. */
    unsigned pos = hdr + width * j;
    pocket_shift_up(w, pos, width);
    unsigned wi = pos >> 6, off = pos & 63;
    w[wi] |= (uint64_t)v << off;
    if (off > 64 - width)
        w[wi + 1] |= (uint64_t)v >> (64 - off);
}

/* The sized prototype: slots are the r remainder bits. */

/* Whether q's run holds fp; *end as pocket_run's. */
static inline bool pocket_block_has(const struct pocket *p, const uint64_t *w, unsigned q,
                                    unsigned fp, unsigned *end)
{
    unsigned first, n;
    pocket_run(w, q, &first, &n, end);
    for (unsigned j = first; j < first + n; j++)
        if (pocket_slot(w, p->hdr, p->r, j) == fp)
            return true;
    return false;
}

static inline uint64_t *pocket_block_of(const struct pocket *p, struct sbf_hash h)
{
    return p->w + 8 * pocket_mulhi(h.lo, p->nblocks);
}

/* The spare: sk bits of one 512-bit block, each from 9 bits of its own (double hashing,
 * a + i * step, costs 0.07% here at 15 bits: keys sharing a step share most positions). */
static inline bool pocket_spare(const struct pocket *p, struct sbf_hash h, bool set)
{
    uint64_t x = bloom_mix(h.hi ^ (h.lo * UINT64_C(0x9e3779b97f4a7c15)));
    uint64_t *b = p->spare + 8 * pocket_mulhi(x, p->sblocks);
    uint64_t y = x;
    bool all = true;
    for (unsigned i = 0; i < p->sk; i++) {
        if (i % 7 == 0)
            y = bloom_mix(y + UINT64_C(0x9e3779b97f4a7c15));
        unsigned a = (unsigned)(y >> (9 * (i % 7))) & 511;
        uint64_t bit = UINT64_C(1) << (a & 63);
        all = all && (b[a >> 6] & bit);
        if (set)
            b[a >> 6] |= bit;
    }
    return all;
}

static inline bool pocket_has(const struct pocket *p, struct sbf_hash h)
{
    const uint64_t *w = pocket_block_of(p, h);
    unsigned q = (unsigned)(h.hi >> 58), fp = (unsigned)(h.hi >> (58 - p->r)) & ((1u << p->r) - 1);
    unsigned e;
    if (pocket_block_has(p, w, q, fp, &e))
        return true;
    return pocket_entries(w, p->hdr) == p->k && pocket_spare(p, h, false);
}

static inline bool pocket_checkadd(struct pocket *p, struct sbf_hash h)
{
    uint64_t *w = pocket_block_of(p, h);
    unsigned q = (unsigned)(h.hi >> 58), fp = (unsigned)(h.hi >> (58 - p->r)) & ((1u << p->r) - 1);
    unsigned e;
    if (pocket_block_has(p, w, q, fp, &e))
        return true;
    if (pocket_entries(w, p->hdr) < p->k) {
        pocket_insert(w, p->hdr, p->r, q, fp, e);
        p->items++;
        return false;
    }
    bool had = pocket_spare(p, h, true);
    p->items += !had;
    p->spilled += !had;
    return had;
}

/* ---- as a kind_ops for bench_grow (create, checkadd_batch, check_batch, info, free) ---- */

static inline int pocket_create(const struct kind_params *kp, const struct sbf_budget *budget,
                                void **out)
{
    (void)budget;
    const char *env = getenv("POCKET_LOAD");
    double load = env ? strtod(env, NULL) : 0.95;
    struct pocket *p = calloc(1, sizeof *p);
    if (p == NULL || load <= 0 || load > 1)
        return free(p), SBF_EINVAL;
    /* The narrowest remainder whose rate, entries per quotient times 2^-r, is at most 0.8
     * of the promise (the spare takes the rest). */
    double eps = kp->sbf.error;
    for (p->r = 4; p->r < 24; p->r++) {
        p->k = (512 - POCKET_Q) / (p->r + 1);
        if (p->k > 64)
            p->k = 64;
        if (load * p->k / POCKET_Q / (double)(UINT64_C(1) << p->r) <= 0.8 * eps)
            break;
    }
    p->hdr = POCKET_Q + p->k;
    /* The spare holds what overflows: E[max(X - k, 0)] of X ~ Poisson(k * load) per block,
     * plus a third for headroom; its rate times the share of full blocks (about half) is the
     * 0.2 of the promise left: 0.4 of it, at 1.44 log2(1 / rate) bits per key. */
    double lambda = p->k * load, excess = 0, px = exp(-lambda);
    for (unsigned x = 1; x < p->k + 200; x++) {
        px *= lambda / x;
        if (x > p->k)
            excess += (x - p->k) * px;
    }
    double cap = (double)kp->sbf.capacity;
    double spare_keys = cap * excess / lambda * 4 / 3;
    double spare_bits = 1.44 * log2(1 / (0.4 * eps));
    p->sk = (unsigned)(0.69 * spare_bits + 0.5);
    p->nblocks = (uint64_t)(cap / (p->k * load)) + 1;
    p->sblocks = (uint64_t)(spare_keys * spare_bits / 512) + 1;
    p->w = aligned_alloc(64, p->nblocks * 64);
    p->spare = aligned_alloc(64, p->sblocks * 64);
    if (p->w == NULL || p->spare == NULL) {
        free(p->w);
        free(p->spare);
        free(p);
        return SBF_ENOMEM;
    }
    memset(p->w, 0, p->nblocks * 64);
    memset(p->spare, 0, p->sblocks * 64);
    *out = p;
    return SBF_OK;
}

static inline void pocket_free(void *f)
{
    struct pocket *p = f;
    if (p == NULL)
        return;
    free(p->w);
    free(p->spare);
    free(p);
}

static inline void pocket_check_batch(const void *f, const struct sbf_hash *h, size_t n,
                                      bool *present)
{
    const struct pocket *p = f;
    for (size_t i = 0; i < n && i < POCKET_AHEAD; i++)
        __builtin_prefetch(pocket_block_of(p, h[i]));
    for (size_t i = 0; i < n; i++) {
        if (i + POCKET_AHEAD < n)
            __builtin_prefetch(pocket_block_of(p, h[i + POCKET_AHEAD]));
        present[i] = pocket_has(p, h[i]);
    }
}

static inline int pocket_checkadd_batch(void *f, const struct sbf_hash *h, size_t n, bool *present)
{
    struct pocket *p = f;
    for (size_t i = 0; i < n && i < POCKET_AHEAD; i++)
        __builtin_prefetch(pocket_block_of(p, h[i]), 1);
    for (size_t i = 0; i < n; i++) {
        if (i + POCKET_AHEAD < n)
            __builtin_prefetch(pocket_block_of(p, h[i + POCKET_AHEAD]), 1);
        present[i] = pocket_checkadd(p, h[i]);
    }
    return SBF_OK;
}

static inline void pocket_info(const void *f, struct kind_info *out)
{
    const struct pocket *p = f;
    memset(out, 0, sizeof *out);
    out->bytes = (p->nblocks + p->sblocks) * 64;
    out->items = p->items;
    out->est_error = (double)p->spilled; /* bench_grow prints it for pocket: keys spilled */
}

static const struct kind_ops kind_pocket_proto = {
    .name = "pocket",
    .create = pocket_create,
    .free = pocket_free,
    .check_batch = pocket_check_batch,
    .checkadd_batch = pocket_checkadd_batch,
    .info = pocket_info,
};

#endif
