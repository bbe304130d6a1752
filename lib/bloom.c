/*
 * bloom.c - sizing math of one blocked Bloom stage. The false-positive rate of a blocked
 * filter is the Poisson-weighted average, over block loads j, of the rate of one 512-bit
 * standard filter holding j keys (Putze, Sanders, Singler 2007). It is evaluated with
 * plain IEEE arithmetic (no libm) so every machine derives the same geometry.
 */
#include "lib/bloom.h"

#include <string.h>

/* Search range of the mean load per block: 1/64 key (32768 bits/key) to 512 (1 bit/key). */
#define LAMBDA_MIN (1.0 / 64.0)
#define LAMBDA_MAX 512.0
#define BISECT_STEPS 48
/* k is unimodal in practice; stop this far past the best k seen. */
#define K_PAST_BEST 4u

static double ipow(double x, uint32_t n)
{
    double r = 1.0;
    while (n) {
        if (n & 1u)
            r *= x;
        x *= x;
        n >>= 1;
    }
    return r;
}

double bloom_fp(double lambda, uint32_t k)
{
    /* Probability a given bit stays 0 after one key: (1 - 1/512)^k. */
    const double z = ipow(1.0 - 1.0 / BLOOM_BLOCK_BITS, k);
    /* Unnormalised Poisson weights w_j = lambda^j / j!, normalised by their sum, avoid
     * exp(). Up to 2*lambda + 40 the omitted tail is below 1e-30 for lambda <= 512, and
     * the largest weight (about e^512) stays far below DBL_MAX. */
    const uint32_t jmax = (uint32_t)(2.0 * lambda) + 40u;
    double w = 1.0, zj = 1.0, sum = 0.0, fp = 0.0;
    for (uint32_t j = 0; j <= jmax; j++) {
        sum += w;
        fp += w * ipow(1.0 - zj, k);
        w *= lambda / (double)(j + 1);
        zj *= z;
    }
    return fp / sum;
}

/* Largest mean load per block in [LAMBDA_MIN, LAMBDA_MAX] with fp <= target, 0 if none. */
static double lambda_max(double target, uint32_t k)
{
    if (bloom_fp(LAMBDA_MIN, k) > target)
        return 0.0;
    if (bloom_fp(LAMBDA_MAX, k) <= target)
        return LAMBDA_MAX;
    double lo = LAMBDA_MIN, hi = LAMBDA_MAX;
    for (int i = 0; i < BISECT_STEPS; i++) {
        double mid = 0.5 * (lo + hi);
        if (bloom_fp(mid, k) <= target)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* bloom_geom_for without the memo; arguments already checked. */
static int search(uint64_t capacity, double target, struct bloom_geom *out)
{
    const double n = (double)capacity; /* exact: capacity < 2^53 */
    uint64_t best_nb = 0;
    uint32_t best_k = 0;
    for (uint32_t k = 1; k <= BLOOM_MAX_K; k++) {
        if (best_nb && k > best_k + K_PAST_BEST)
            break;
        double lam = lambda_max(target, k);
        if (lam == 0.0)
            continue;
        double d = n / lam;
        if (d > (double)BLOOM_MAX_NBLOCKS)
            continue;
        uint64_t nb = (uint64_t)d;
        if ((double)nb < d || nb == 0)
            nb++;
        /* n / nb <= lam, so this holds unless division rounded up; bounded anyway. */
        for (int i = 0; i < 4 && bloom_fp(n / (double)nb, k) > target; i++)
            nb++;
        if (bloom_fp(n / (double)nb, k) > target)
            continue;
        if (best_nb == 0 || nb < best_nb) {
            best_nb = nb;
            best_k = k;
        }
    }
    if (best_nb == 0 || best_nb > BLOOM_MAX_NBLOCKS)
        return SBF_EINVAL;
    out->nblocks = best_nb;
    out->k = best_k;
    return SBF_OK;
}

/* The search costs ~0.1-1 ms; every load of a snapshot repeats it for every stage, and
 * filters share parameters, so each thread remembers recent answers (pure function). */
#define CACHE_SLOTS 128u
struct geom_memo {
    uint64_t capacity;
    double target;
    struct bloom_geom g; /* nblocks 0: no answer (target unreachable) */
};
static _Thread_local struct geom_memo geom_cache[CACHE_SLOTS];

int bloom_geom_for(uint64_t capacity, double target, struct bloom_geom *out)
{
    if (capacity == 0 || capacity > BLOOM_MAX_STAGE_CAPACITY || !(target > 0.0 && target < 1.0))
        return SBF_EINVAL;
    uint64_t t;
    memcpy(&t, &target, sizeof(t));
    struct geom_memo *m =
        &geom_cache[(bloom_mix(capacity ^ bloom_mix(t)) >> 32) & (CACHE_SLOTS - 1)];
    if (m->capacity != capacity || m->target != target) {
        m->capacity = capacity;
        m->target = target;
        if (search(capacity, target, &m->g) != SBF_OK)
            m->g.nblocks = 0;
    }
    if (m->g.nblocks == 0)
        return SBF_EINVAL;
    *out = m->g;
    return SBF_OK;
}
