/*
 * bloom.h - one blocked Bloom stage (internal to lib/): geometry from (capacity, target
 * error) and the hot-path probe/set of a key's 64-byte block. A key's block and its k
 * in-block bit positions come from its 128-bit hash remixed with the stage index, so
 * stages are independent although the key is hashed once.
 */
#ifndef BLOOMD_LIB_BLOOM_H
#define BLOOMD_LIB_BLOOM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "lib/sbf.h"

#define BLOOM_BLOCK_BITS 512u
#define BLOOM_BLOCK_BYTES 64u
#define BLOOM_BLOCK_WORDS 8u
#define BLOOM_MAX_K 48u
#define BLOOM_MAX_STAGE_CAPACITY (UINT64_C(1) << 48) /* keys in one stage */
#define BLOOM_MAX_NBLOCKS (UINT64_C(1) << 50)        /* 64 PiB: beyond any real budget */

/* Geometry of one stage: nblocks blocks of 512 bits, k bits per key. */
struct bloom_geom {
    uint64_t nblocks;
    uint32_t k;
};

/*
 * Smallest geometry whose expected false-positive rate after `capacity` keys is at most
 * `target` (the blocked filter's own formula). Deterministic: plain IEEE arithmetic, no
 * libm, so the codec can recompute and compare it on any machine. Returns 0, or
 * SBF_EINVAL if no geometry within BLOOM_MAX_K and BLOOM_MAX_NBLOCKS reaches the target.
 */
int bloom_geom_for(uint64_t capacity, double target, struct bloom_geom *out);

/*
 * Expected false-positive rate of a blocked stage holding lambda keys per block on average
 * (lambda in (0, 512]): exact for independent positions drawn with replacement. k in
 * [1, BLOOM_MAX_K] here and below: the rate tables hold no more.
 */
double bloom_fp(double lambda, uint32_t k);

/* The same with the textbook per-block rate (1 - (1-1/512)^kj)^k, a lower bound. */
double bloom_fp_textbook(double lambda, uint32_t k);

/* g[j] = exact rate of one block holding j keys of k bits, for j = 0..jmax (g has jmax+1). */
void bloom_block_rates(uint32_t k, uint32_t jmax, double *g);

/* ---- hot path ---- */

static inline uint64_t bloom_mix(uint64_t x)
{
    /* murmur3 fmix64: a bijection with full avalanche. */
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x *= UINT64_C(0xc4ceb9fe1a85ec53);
    x ^= x >> 33;
    return x;
}

static inline uint64_t bloom_salt(uint32_t stage)
{
    return ((uint64_t)stage + 1) * UINT64_C(0x9e3779b97f4a7c15);
}

/* Block index of hash h in a stage of nblocks blocks (fast range reduction, no modulo). */
static inline uint64_t bloom_block(struct sbf_hash h, uint32_t stage, uint64_t nblocks)
{
    __extension__ typedef unsigned __int128 u128;
    return (uint64_t)(((u128)bloom_mix(h.lo ^ bloom_salt(stage)) * nblocks) >> 64);
}

/*
 * A key's in-block bit positions, in order. Positions are independent 9-bit chunks of a
 * remixed word (7 per 64-bit word), drawn with replacement: exactly the model bloom_fp()
 * assumes, which is why measured rates match the sizing. mask, test and set below all walk
 * them through this, so they can never disagree.
 */
struct bloom_walk {
    uint64_t seed, w;
    uint32_t left;
};

static inline struct bloom_walk bloom_walk_start(struct sbf_hash h, uint32_t stage)
{
    uint64_t seed = h.hi ^ bloom_salt(stage);
    return (struct bloom_walk){seed, bloom_mix(seed), 7};
}

static inline uint32_t bloom_walk_next(struct bloom_walk *p)
{
    if (p->left == 0) {
        p->seed += UINT64_C(0x9e3779b97f4a7c15);
        p->w = bloom_mix(p->seed);
        p->left = 7;
    }
    uint32_t pos = (uint32_t)(p->w & 511u);
    p->w >>= 9;
    p->left--;
    return pos;
}

/* The key's k bits within its block as an 8-word mask (the view and the tests). */
static inline void bloom_mask(struct sbf_hash h, uint32_t stage, uint32_t k,
                              uint64_t mask[BLOOM_BLOCK_WORDS])
{
    struct bloom_walk p = bloom_walk_start(h, stage);
    for (unsigned i = 0; i < BLOOM_BLOCK_WORDS; i++)
        mask[i] = 0;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t pos = bloom_walk_next(&p);
        mask[pos >> 6] |= UINT64_C(1) << (pos & 63u);
    }
}

/*
 * True if all of the key's k bits are set in block. Each bit is tested straight in the
 * block: k loads of one cache line and no branch per bit. Building the 8-word mask first
 * cost a read-modify-write of a stack word per bit, a third of a grown filter's add path.
 */
static inline bool bloom_test_key(const _Atomic uint64_t *block, struct sbf_hash h, uint32_t stage,
                                  uint32_t k)
{
    struct bloom_walk p = bloom_walk_start(h, stage);
    uint64_t miss = 0;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t pos = bloom_walk_next(&p);
        miss |= (UINT64_C(1) << (pos & 63u)) &
                ~atomic_load_explicit(&block[pos >> 6], memory_order_relaxed);
    }
    return miss == 0;
}

/*
 * Sets the key's k bits in block, for a key that is absent (its block changes anyway). A
 * relaxed load then a relaxed store of old | bit, not a fetch_or: on x86 a fetch_or is a
 * locked instruction (12% of the server's time), the pair is two plain movs. Correct
 * because a filter has one writer at a time (kind.h): nobody else stores to the word
 * between the load and the store, and concurrent readers see either the old or the new
 * word, never a torn one.
 */
static inline void bloom_set_key(_Atomic uint64_t *block, struct sbf_hash h, uint32_t stage,
                                 uint32_t k)
{
    struct bloom_walk p = bloom_walk_start(h, stage);
    for (uint32_t i = 0; i < k; i++) {
        uint32_t pos = bloom_walk_next(&p);
        _Atomic uint64_t *word = &block[pos >> 6];
        atomic_store_explicit(
            word, atomic_load_explicit(word, memory_order_relaxed) | (UINT64_C(1) << (pos & 63u)),
            memory_order_relaxed);
    }
}

#endif
