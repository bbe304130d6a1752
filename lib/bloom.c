/*
 * bloom.c - sizing math of one blocked Bloom stage. The false-positive rate of a blocked
 * filter is the Poisson-weighted average, over block loads j, of the rate of one 512-bit
 * filter holding j keys (Putze, Sanders, Singler 2007). That per-block rate is computed
 * exactly, E[(X/512)^k] over the distribution of X, the bits set by k*j positions; the
 * textbook (1 - (1-1/512)^kj)^k is only its Jensen lower bound, and sizing with it left
 * measured rates 3-8% above target at 1% and 0.1%. Plain IEEE arithmetic, no libm, so
 * every machine derives the same geometry (the codec compares it).
 */
#include "lib/bloom.h"

#include <stdbool.h>

#define M BLOOM_BLOCK_BITS
/* Search range of the mean load per block: 1/64 key (32768 bits/key) to 512 (1 bit/key). */
#define LAMBDA_MIN (1.0 / 64.0)
#define LAMBDA_MAX 512.0
/* Loads above 2*lambda + 40 weigh < 1e-30 for lambda <= 512: the Poisson sums stop there. */
#define JMAX(lambda) ((uint32_t)(2.0 * (lambda)) + 40u)
#define JMAX_LIMIT (2u * 512u + 40u)
/* The exact search walks k away from the textbook's best until this many are no better. */
#define K_PAST_BEST 3

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

/*
 * Conditioned on the k query positions being d distinct bits (probability pd[d]), a false
 * positive needs those d bits all set: h[d] after t = k*j key positions, by the backward
 * equation h_{t+1}(e) = e/512 * h_t(e-1) + (1 - e/512) * h_t(e), h(0) = 1. All terms are
 * probabilities (no cancellation) and each position costs O(k), not O(512).
 */
void bloom_block_rates(uint32_t k, uint32_t jmax, double *g)
{
    double pd[BLOOM_MAX_K + 1] = {1.0}, h[BLOOM_MAX_K + 1] = {1.0};
    for (uint32_t b = 0; b < k; b++) {
        for (uint32_t d = b + 1; d >= 1; d--)
            pd[d] = pd[d] * ((double)d / M) + pd[d - 1] * ((double)(M + 1 - d) / M);
        pd[0] = 0.0;
    }
    g[0] = 0.0;
    for (uint32_t j = 1; j <= jmax; j++) {
        for (uint32_t b = 0; b < k; b++)
            for (uint32_t e = k; e >= 1; e--)
                h[e] = h[e] * (1.0 - (double)e / M) + h[e - 1] * ((double)e / M);
        double sum = 0.0;
        for (uint32_t d = 1; d <= k; d++)
            sum += pd[d] * h[d];
        g[j] = sum;
    }
}

/*
 * Poisson mixture of per-block rates: g[j] if given (exact), else the textbook rate.
 * Unnormalised weights lambda^j / j!, divided by their sum, avoid exp(); the largest
 * (about e^512) stays far below DBL_MAX.
 */
static double mixture(double lambda, uint32_t k, const double *g)
{
    const double z = ipow(1.0 - 1.0 / M, k); /* a bit stays 0 after one key */
    const uint32_t jmax = JMAX(lambda);
    double w = 1.0, zj = 1.0, sum = 0.0, fp = 0.0;
    for (uint32_t j = 0; j <= jmax; j++) {
        sum += w;
        fp += w * (g ? g[j] : ipow(1.0 - zj, k));
        w *= lambda / (double)(j + 1);
        zj *= z;
    }
    return fp / sum;
}

double bloom_fp(double lambda, uint32_t k)
{
    double g[JMAX_LIMIT + 1];
    if (lambda > LAMBDA_MAX)
        lambda = LAMBDA_MAX;
    bloom_block_rates(k, JMAX(lambda), g);
    return mixture(lambda, k, g);
}

double bloom_fp_textbook(double lambda, uint32_t k)
{
    return mixture(lambda, k, NULL);
}

static bool fits(double n, uint64_t nb, double target, uint32_t k, const double *g)
{
    return mixture(n / (double)nb, k, g) <= target;
}

/* Fewest blocks in [lo, hi] that fit, given that hi fits: the rate falls as blocks grow. */
static uint64_t fewest(double n, double target, uint32_t k, const double *g, uint64_t lo,
                       uint64_t hi)
{
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (fits(n, mid, target, k, g))
            hi = mid;
        else
            lo = mid + 1;
    }
    return hi;
}

/* Fewest blocks for n keys at k bits with the textbook rate (a lower bound); 0 if none. */
static uint64_t blocks_textbook(double n, double target, uint32_t k)
{
    /* Loads from LAMBDA_MAX down to LAMBDA_MIN keys per block. */
    double dlo = n / LAMBDA_MAX, dhi = n / LAMBDA_MIN;
    if (dhi > (double)BLOOM_MAX_NBLOCKS)
        dhi = (double)BLOOM_MAX_NBLOCKS;
    /* Rounded up, so no load above LAMBDA_MAX (the rate tables' limit) is evaluated. */
    uint64_t lo = (uint64_t)dlo, hi = (uint64_t)dhi;
    if ((double)lo < dlo || lo == 0)
        lo++;
    if (hi < lo || !fits(n, hi, target, k, NULL))
        return 0;
    return fewest(n, target, k, NULL, lo, hi);
}

/* Fewest blocks with the exact rate, starting from the textbook count nb0 (a lower bound:
 * the exact rate is never below the textbook one); 0 if none. */
static uint64_t blocks_exact(double n, double target, uint32_t k, uint64_t nb0)
{
    double g[JMAX_LIMIT + 1];
    /* The largest load evaluated below; <= LAMBDA_MAX as nb0 >= n / LAMBDA_MAX. */
    bloom_block_rates(k, JMAX(n / (double)nb0), g);
    uint64_t lo = nb0, step = nb0 / 32 + 1;
    uint64_t hi = lo;
    while (!fits(n, hi, target, k, g)) {
        lo = hi + 1;
        if (hi > BLOOM_MAX_NBLOCKS - step)
            return 0;
        hi += step;
        step *= 2;
    }
    return fewest(n, target, k, g, lo, hi);
}

/* bloom_geom_for with its arguments checked: ~0.05 ms at 1%, 0.2 ms at 1e-12. */
static int search(uint64_t capacity, double target, struct bloom_geom *out)
{
    const double n = (double)capacity; /* exact: capacity < 2^53 */
    /* The textbook rates are cheap: they pick the k to start from and a lower bound on
     * the blocks for every k near it. */
    uint64_t text[BLOOM_MAX_K + 2] = {0};
    uint32_t k0 = 0;
    for (uint32_t k = 1; k <= BLOOM_MAX_K && !(k0 && k > k0 + K_PAST_BEST); k++) {
        text[k] = blocks_textbook(n, target, k);
        if (text[k] && (!k0 || text[k] < text[k0]))
            k0 = k;
    }
    if (!k0)
        return SBF_EINVAL;
    /* Then the exact rates, walking from k0 both ways while they improve. */
    uint64_t best_nb = blocks_exact(n, target, k0, text[k0]);
    uint32_t best_k = k0;
    for (int dir = -1; dir <= 1; dir += 2) {
        int misses = 0;
        for (int64_t k = (int64_t)k0 + dir; k >= 1 && k <= BLOOM_MAX_K && misses < K_PAST_BEST;
             k += dir) {
            uint32_t kk = (uint32_t)k;
            if (!text[kk])
                text[kk] = blocks_textbook(n, target, kk);
            /* The exact count is at least the textbook one: skip hopeless k cheaply. */
            uint64_t nb = text[kk] && (!best_nb || text[kk] <= best_nb)
                              ? blocks_exact(n, target, kk, text[kk])
                              : 0;
            if (nb && (!best_nb || nb < best_nb || (nb == best_nb && kk < best_k))) {
                best_nb = nb;
                best_k = kk;
                misses = 0;
            } else {
                misses++;
            }
        }
    }
    if (best_nb == 0 || best_nb > BLOOM_MAX_NBLOCKS)
        return SBF_EINVAL;
    out->nblocks = best_nb;
    out->k = best_k;
    return SBF_OK;
}

int bloom_geom_for(uint64_t capacity, double target, struct bloom_geom *out)
{
    if (capacity == 0 || capacity > BLOOM_MAX_STAGE_CAPACITY || !(target > 0.0 && target < 1.0))
        return SBF_EINVAL;
    return search(capacity, target, out);
}
