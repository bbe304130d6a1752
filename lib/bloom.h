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
 * The key's k bits within its block as an 8-word mask. Positions are independent 9-bit
 * chunks of a remixed word (7 per 64-bit word), drawn with replacement: exactly the model
 * bloom_fp() assumes, which is why measured rates match the sizing.
 */
static inline void bloom_mask(struct sbf_hash h, uint32_t stage, uint32_t k,
                              uint64_t mask[BLOOM_BLOCK_WORDS])
{
    uint64_t seed = h.hi ^ bloom_salt(stage);
    uint64_t w = bloom_mix(seed);
    uint32_t left = 7;
    for (unsigned i = 0; i < BLOOM_BLOCK_WORDS; i++)
        mask[i] = 0;
    for (uint32_t i = 0; i < k; i++) {
        if (left == 0) {
            seed += UINT64_C(0x9e3779b97f4a7c15);
            w = bloom_mix(seed);
            left = 7;
        }
        uint32_t pos = (uint32_t)(w & 511u);
        w >>= 9;
        left--;
        mask[pos >> 6] |= UINT64_C(1) << (pos & 63u);
    }
}

/* True if every bit of mask is set in the block. */
static inline bool bloom_test(const _Atomic uint64_t *block, const uint64_t mask[BLOOM_BLOCK_WORDS])
{
    uint64_t miss = 0;
    for (unsigned i = 0; i < BLOOM_BLOCK_WORDS; i++)
        miss |= mask[i] & ~atomic_load_explicit(&block[i], memory_order_relaxed);
    return miss == 0;
}

/*
 * Sets the mask's bits, skipping words that need no change. A relaxed load then a relaxed
 * store of old | mask, not a fetch_or: on x86 a fetch_or is a locked instruction (12% of
 * the server's time), the pair is two plain movs. Correct because a filter has one writer
 * at a time (kind.h): nobody else stores to the word between the load and the store, and
 * concurrent readers see either the old or the new word, never a torn one.
 */
static inline void bloom_set(_Atomic uint64_t *block, const uint64_t mask[BLOOM_BLOCK_WORDS])
{
    for (unsigned i = 0; i < BLOOM_BLOCK_WORDS; i++) {
        uint64_t old = atomic_load_explicit(&block[i], memory_order_relaxed);
        if ((old & mask[i]) != mask[i])
            atomic_store_explicit(&block[i], old | mask[i], memory_order_relaxed);
    }
}

#endif
