/*
 * expandable_internal.h - layout of the expandable filter, shared by lib/expandable.c and
 * lib/expandable_codec.c only, and the block primitives both use.
 *
 * A block is 8 little 64-bit words: a 112-bit unary bucket directory (for each of M buckets
 * in order, a 1 per entry then a 0), a 16-bit header (seqlock count, live and dead flags),
 * then C fingerprint slots of W bits (C = 384 / W, M = 112 - C). A slot holds the ℓ stored
 * hash bits of an entry left-aligned, then a 1, then zeros, so ℓ = W - 1 - ctz(slot) and a
 * split can move the top bit into the block index (ℓ shrinks by one) without knowing ℓ.
 */
#ifndef BLOOMD_LIB_EXPANDABLE_INTERNAL_H
#define BLOOMD_LIB_EXPANDABLE_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/expandable.h"

#define XB_WORDS 8u
#define XB_BYTES 64u
#define XB_META_BITS 112u
#define XB_REM_BITS 384u
#define XB_META_HI ((UINT64_C(1) << 48) - 1) /* directory bits in word 1 */
#define XB_SEQ_SHIFT 48
#define XB_SEQ_MASK (UINT64_C(0xff) << XB_SEQ_SHIFT)
#define XB_LIVE (UINT64_C(1) << 56) /* block holds the entries of its cell */
#define XB_DEAD (UINT64_C(1) << 57) /* block was split: its cell lives one level down */
#define XB_HDR_MASK (UINT64_C(0xffff) << 48)

#define EXP_MIN_W 8u
#define EXP_MAX_W 17u       /* the first table's widest slot (EXPANDABLE_MIN_ERROR) */
#define EXP_STAGE_MAX_W 24u /* a later stage's: level + W - 1 <= 64 hash bits at level 41 */
#define EXP_MAX_STAGES 8u   /* tables of one filter (see expandable.c, "Stages") */
#define EXP_MIN_LEVEL 7u    /* at least 128 blocks: partners need distinct offsets */
#define EXP_MAX_LEVEL 40u   /* 2^40 blocks = 64 TiB */
#define EXP_STASH 256u      /* overflow entries */
#define EXP_CHUNK ((uint64_t)256 << 10) /* arrays >= this: mmapped, reserved per chunk */
#define EXP_HUGE ((uint64_t)2 << 20)    /* arrays >= this: on huge-page boundaries */

struct exp_arr {
    _Atomic(_Atomic uint64_t *) w; /* 2^level blocks of XB_WORDS, 64-byte aligned; or NULL */
    void *mem;                     /* the allocation w points into */
    size_t maplen;                 /* mem is an mmap of this length; 0: from calloc */
    uint64_t nblocks;              /* 2^level */
    uint64_t reserved;             /* bytes from the start reserved from the budget */
    uint64_t released;             /* bytes from the start given back (all dead) */
};

/* An overflow entry: a fingerprint slot with the cell it belongs to, at any level. */
struct exp_stash {
    _Atomic uint64_t cell; /* cell index at level lv */
    _Atomic uint64_t tag;  /* lv | bucket << 8 | slot << 16 */
};

/* Returned by add_one when the key's cell has its share of the stash (stash_crowded):
 * the key goes to a new stage instead (internal, never returned by the API). */
#define EXP_EOVERFLOW (-1000)

struct expandable {
    struct expandable_params p; /* this table's: a later stage's error is its share */
    struct sbf_budget budget;
    uint32_t w;               /* slot bits W: a new key stores W - 1 hash bits */
    uint32_t c;               /* slots per block */
    uint32_t m;               /* buckets per block */
    uint32_t l0;              /* level at creation */
    uint32_t g[XB_META_BITS]; /* partner offset of each bucket, in [2^(l0-1), 2^l0) */
    _Atomic uint64_t state;   /* level << 48 | cursor; release-published */
    struct exp_arr arr[EXP_MAX_LEVEL + 2];
    _Atomic uint64_t items;    /* keys added minus deleted */
    _Atomic uint64_t entries;  /* slots in use in blocks and stash */
    _Atomic uint64_t splits;   /* blocks split since creation */
    _Atomic uint64_t bytes;    /* reserved minus released, every array */
    _Atomic uint64_t fp_bits;  /* the false-positive bound, a double's bits */
    double fp;                 /* the same, the writer's copy */
    bool retired;              /* some array below the level waits for readers to leave */
    _Atomic uint32_t readers;  /* threads inside a read (deferred frees wait for 0) */
    _Atomic uint32_t encoding; /* encoders running: the writer defers splits */
    _Atomic uint64_t epoch;    /* odd while a split runs */
    _Atomic uint64_t moves;    /* odd while entries move between blocks (kick, drain) */
    _Atomic uint64_t stash_seq;
    _Atomic uint32_t nstash;
    _Atomic uint64_t stash_buckets[2]; /* bit j: some stash entry may be in bucket j */
    struct exp_stash stash[EXP_STASH];
    /* Behind the fields of the add path, whose layout they would shift: */
    uint32_t index; /* stage number; 0: the first table, hashing keys as they are */
    double limit;   /* the bound adds may reach (writer's): stage 0 3/4 of the promise */
    /* Stage 0 only: the tables in use, stage[0] = this one; a new one is written before
     * nstages is raised (release) and none leaves until clear or free. */
    _Atomic uint32_t nstages;
    struct expandable *stage[EXP_MAX_STAGES];
};

/* ---- geometry ---- */

/* Slots, buckets, initial level for p of stage `index` (a later stage takes errors below
 * EXPANDABLE_MIN_ERROR and slots up to EXP_STAGE_MAX_W); returns 0 or SBF_EINVAL. */
int exp_geometry(const struct expandable_params *p, uint32_t index, uint32_t *w, uint32_t *c,
                 uint32_t *m, uint32_t *l0);

/* Cells split at creation (the initial cursor): 2^l0 + this blocks hold the capacity. */
uint64_t exp_initial_cursor(const struct expandable *f);

/* An empty shell for p as stage `index` (geometry and limit set, no arrays, one
 * stage: itself), NULL if p is invalid or out of memory. */
struct expandable *exp_shell_new(const struct expandable_params *p, uint32_t index,
                                 const struct sbf_budget *b);

/* After a decode or a union (the writer): the last stage may spend only what the others
 * leave of the promise. Returns the filter's bound, the sum over its stages. */
double exp_stages_loaded(struct expandable *f);

/* A table's own figures (expandable_info sums them over the stages). */
void exp_table_info(const struct expandable *f, struct expandable_info *out);

/* A table's own invariants, as expandable_verify. */
int exp_table_verify(const struct expandable *f);

/* The hash stage `index` files a key under: h itself for stage 0; for a later one a
 * three-round Feistel mix of both halves, so keys that collide in one stage (share a
 * cell, a bucket and fingerprint bits) spread over the next. A bijection: distinct keys
 * stay distinct. */
static inline struct sbf_hash exp_stage_hash(struct sbf_hash h, uint32_t index)
{
    if (index == 0)
        return h;
    uint64_t salt = UINT64_C(0x9e3779b97f4a7c15) * index;
    uint64_t lo = h.lo, hi = h.hi;
    for (int r = 0; r < 3; r++) {
        uint64_t x = (r & 1 ? lo : hi) + salt + (uint64_t)r;
        x ^= x >> 33;
        x *= UINT64_C(0xff51afd7ed558ccd);
        x ^= x >> 33;
        x *= UINT64_C(0xc4ceb9fe1a85ec53);
        x ^= x >> 33;
        if (r & 1)
            hi ^= x;
        else
            lo ^= x;
    }
    return (struct sbf_hash){.lo = lo, .hi = hi};
}

/*
 * Allocates arr[lv] (2^lv zeroed blocks) and reserves its first `bytes` bytes (rounded up
 * to a chunk, or the whole array if smaller than one). 0 or SBF_ENOMEM (nothing held).
 */
int exp_arr_alloc(struct expandable *f, uint32_t lv, uint64_t bytes);

/* Gives back arr[lv]'s bytes [released, upto) to the budget (and the kernel); upto is
 * rounded down to the array's release granularity. */
void exp_arr_release_to(struct expandable *f, uint32_t lv, uint64_t upto);

/* Frees every array; counters untouched. */
void exp_arrays_free(struct expandable *f);

/* Recomputes entries and the false-positive bound from the blocks and the stash. */
void exp_recount(struct expandable *f);

/* What a copy beside the writer (an encoder, a union reading src) reads at its start. */
struct exp_start {
    uint64_t items, state;
    uint32_t ns;
    uint64_t cell[EXP_STASH], tag[EXP_STASH];
};

/* With encoding raised: items, then the shape and the stash with no split between them
 * (see expandable.c). False if the writer never let it. */
bool exp_copy_start(const struct expandable *f, struct exp_start *s);

/* ---- blocks ---- */

static inline unsigned exp_popcount(uint64_t x)
{
    return (unsigned)__builtin_popcountll(x);
}

/* Entries in a block. */
static inline uint32_t xb_count(const uint64_t *b)
{
    return exp_popcount(b[0]) + exp_popcount(b[1] & XB_META_HI);
}

/*
 * Position of the k-th (0-based) set bit of x; k < popcount(x). Broadword, no branch: the
 * bytes' running counts in one multiply, the byte holding the bit by one subtraction, then
 * the same inside that byte with its bits spread one to a byte (x86-64-v2 has no pdep).
 * The loop this replaced (clear the lowest bit up to 7 times) was a third of a lookup's
 * time on the add path, mostly mispredicted exits.
 */
static inline unsigned exp_select64(uint64_t x, unsigned k)
{
    const uint64_t ones = UINT64_C(0x0101010101010101), highs = UINT64_C(0x8080808080808080);
    uint64_t s = x - ((x >> 1) & UINT64_C(0x5555555555555555));
    s = (s & UINT64_C(0x3333333333333333)) + ((s >> 2) & UINT64_C(0x3333333333333333));
    s = (s + (s >> 4)) & UINT64_C(0x0f0f0f0f0f0f0f0f);
    uint64_t run = s * ones; /* byte i: set bits in bytes 0..i (<= 64) */
    /* Bytes whose running count is <= k are before the one holding the bit. */
    unsigned byte = exp_popcount(((((uint64_t)k * ones) | highs) - run) & highs);
    unsigned before = (unsigned)(((run << 8) >> (8 * byte)) & 0xffu);
    uint64_t b = (x >> (8 * byte)) & 0xffu;
    /* Byte i of t: 1 if bit i of b is set; times ones, bits 0..i set; bits whose running
     * count is <= the rank inside the byte come before the one wanted. */
    uint64_t t =
        (((b * ones) & UINT64_C(0x8040201008040201)) + UINT64_C(0x7f7f7f7f7f7f7f7f)) & highs;
    uint64_t rb = (t >> 7) * ones;
    unsigned r = k - before;
    return 8 * byte + exp_popcount(((((uint64_t)r * ones) | highs) - rb) & highs);
}

/* Position of the k-th zero of the directory (k < 112 - count: always, for k < M). */
static inline unsigned xb_select0(const uint64_t *b, unsigned k)
{
    uint64_t z0 = ~b[0];
    unsigned n0 = exp_popcount(z0);
    if (k < n0)
        return exp_select64(z0, k);
    return 64 + exp_select64(~b[1] & XB_META_HI, k - n0);
}

/* Entries [*s, *e) of bucket j: one select for the zero before it, then the next zero. */
static inline void xb_bucket(const uint64_t *b, uint32_t j, uint32_t *s, uint32_t *e)
{
    uint32_t p = j ? xb_select0(b, j - 1) + 1 : 0; /* the bucket's first directory bit */
    uint64_t z0 = ~b[0], z1 = ~b[1] & XB_META_HI;
    uint32_t q;
    if (p >= 64)
        q = p + (uint32_t)__builtin_ctzll(z1 >> (p - 64));
    else if ((z0 >> p) != 0)
        q = p + (uint32_t)__builtin_ctzll(z0 >> p);
    else
        q = 64 + (uint32_t)__builtin_ctzll(z1);
    *s = p - j;
    *e = q - j;
}

/* Slot i (W bits). */
static inline uint32_t xb_get(const uint64_t *b, uint32_t w, uint32_t i)
{
    uint32_t o = i * w, q = 2 + o / 64, r = o % 64;
    uint64_t v = b[q] >> r;
    if (r + w > 64)
        v |= b[q + 1] << (64 - r);
    return (uint32_t)(v & ((UINT64_C(1) << w) - 1));
}

/* Stored hash bits of a slot. */
static inline uint32_t xb_len(uint32_t w, uint32_t v)
{
    return w - 1 - (uint32_t)__builtin_ctz(v);
}

/* True if slot v matches the W - 1 hash bits q: its stored prefix equals q's. */
static inline bool xb_match(uint32_t v, uint32_t q)
{
    uint32_t t = (uint32_t)__builtin_ctz(v) + 1;
    return ((((q << 1) | 1u) ^ v) >> t) == 0;
}

/* True if bucket j of the block holds a slot matching q. */
static inline bool xb_has(const uint64_t *b, uint32_t w, uint32_t j, uint32_t q)
{
    uint32_t s, e;
    xb_bucket(b, j, &s, &e);
    for (uint32_t i = s; i < e; i++)
        if (xb_match(xb_get(b, w, i), q))
            return true;
    return false;
}

void xb_insert(uint64_t *b, uint32_t w, uint32_t j, uint32_t v);
void xb_remove(uint64_t *b, uint32_t w, uint32_t j, uint32_t i);

/* Checks a block's directory and slots: 0 or SBF_ECORRUPT. Header bits not checked. */
int xb_check(const uint64_t *b, uint32_t w, uint32_t c, uint32_t m);

/* Bound contribution of one slot v stored for a cell at level lv. */
static inline double exp_contrib(const struct expandable *f, uint32_t lv, uint32_t v)
{
    /* A random absent key lands on the cell with probability 2^-lv through either of its
     * two candidates, on the bucket with 1/M, and matches ℓ bits with 2^-ℓ. */
    uint64_t e = (uint64_t)lv + xb_len(f->w, v) - 1; /* in [0, 55]: 2^-e is exact */
    uint64_t bits = (1023 - e) << 52;
    double x;
    __builtin_memcpy(&x, &bits, sizeof(x));
    return x / (double)f->m;
}

#endif
