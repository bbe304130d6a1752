/*
 * test_bloom.c - one blocked stage: the sizing formula against an independent libm
 * evaluation, minimal and locally optimal geometries, memory within 1.15x of an ideal
 * standard filter where the design promises it, and uniform, stage-independent positions.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "lib/bloom.h"

/* The same Putze/Sanders/Singler sum, written the textbook way with exp and lgamma. */
static double fp_reference(double lambda, unsigned k)
{
    double sum = 0.0;
    for (unsigned j = 0; j < (unsigned)(4.0 * lambda) + 60u; j++) {
        double pj = exp(-lambda + j * log(lambda) - lgamma(j + 1.0));
        double per_block = pow(1.0 - pow(1.0 - 1.0 / 512.0, (double)k * j), (double)k);
        sum += pj * per_block;
    }
    return sum;
}

static void test_fp_formula(void **state)
{
    (void)state;
    const double lambdas[] = {0.05, 1.0, 10.0, 37.0, 51.2, 100.0, 300.0};
    for (size_t i = 0; i < sizeof(lambdas) / sizeof(lambdas[0]); i++) {
        for (unsigned k = 1; k <= 30; k += 3) {
            double a = bloom_fp(lambdas[i], k), b = fp_reference(lambdas[i], k);
            assert_true(fabs(a - b) <= 1e-9 * b + 1e-300);
        }
        if (i > 0)
            assert_true(bloom_fp(lambdas[i], 7) > bloom_fp(lambdas[i - 1], 7));
    }
}

static void test_geometry(void **state)
{
    (void)state;
    const double targets[] = {0.1, 0.01, 0.002, 0.001, 1e-4, 1e-6, 1e-9};
    const uint64_t caps[] = {1, 1000, 1000000, 1000000000};
    for (size_t t = 0; t < sizeof(targets) / sizeof(targets[0]); t++) {
        for (size_t c = 0; c < sizeof(caps) / sizeof(caps[0]); c++) {
            struct bloom_geom g;
            assert_int_equal(bloom_geom_for(caps[c], targets[t], &g), SBF_OK);
            double n = (double)caps[c];
            assert_true(g.k >= 1 && g.k <= BLOOM_MAX_K);
            assert_true(bloom_fp(n / (double)g.nblocks, g.k) <= targets[t]);
            if (g.nblocks > 1) {
                /* Minimal for its k, and no neighbouring k does it with fewer blocks. */
                double fewer = n / (double)(g.nblocks - 1);
                assert_true(bloom_fp(fewer, g.k) > targets[t]);
                assert_true(bloom_fp(fewer, g.k + 1) > targets[t]);
                if (g.k > 1)
                    assert_true(bloom_fp(fewer, g.k - 1) > targets[t]);
            }
            struct bloom_geom again;
            assert_int_equal(bloom_geom_for(caps[c], targets[t], &again), SBF_OK);
            assert_true(again.nblocks == g.nblocks && again.k == g.k);
        }
    }
    /* Memory against an ideal standard filter, -ln p / ln^2 2 bits per key: the blocked
     * layout costs 3% at 1%, 8% at 0.1% (grows for tighter targets). */
    const double promised[] = {0.01, 0.002, 0.001};
    for (size_t i = 0; i < 3; i++) {
        struct bloom_geom g;
        assert_int_equal(bloom_geom_for(10000000, promised[i], &g), SBF_OK);
        double bpk = (double)g.nblocks * 512.0 / 1e7;
        double ideal = -log(promised[i]) / (log(2.0) * log(2.0));
        print_message("target %g: k=%u %.2f bits/key, ideal %.2f, ratio %.3f\n", promised[i], g.k,
                      bpk, ideal, bpk / ideal);
        assert_true(bpk <= 1.15 * ideal);
    }
    struct bloom_geom g;
    assert_int_equal(bloom_geom_for(0, 0.01, &g), SBF_EINVAL);
    assert_int_equal(bloom_geom_for(BLOOM_MAX_STAGE_CAPACITY + 1, 0.01, &g), SBF_EINVAL);
    assert_int_equal(bloom_geom_for(1000, 0.0, &g), SBF_EINVAL);
    assert_int_equal(bloom_geom_for(1000, 1.0, &g), SBF_EINVAL);
    assert_int_equal(bloom_geom_for(1000, NAN, &g), SBF_EINVAL);
    assert_int_equal(bloom_geom_for(1000, 1e-300, &g), SBF_EINVAL); /* unreachable */
}

static struct sbf_hash hkey(uint64_t i)
{
    uint64_t v[2] = {77, i};
    return sbf_hash_key(v, sizeof(v));
}

/*
 * Positions: over 100,000 keys x k = 10 bits, each of the 512 in-block positions expects
 * ~1953 hits (sigma ~44); a position off by 6 sigma fails. Stages: keys that share a
 * block in stage 0 must not share it in stage 1 more often than chance (expected 10 of
 * 10,000 in 1000 blocks; 40 is > 9 sigma).
 */
static void test_positions(void **state)
{
    (void)state;
    enum { N = 100000, K = 10 };
    static unsigned hits[512];
    unsigned total = 0;
    for (uint64_t i = 0; i < N; i++) {
        uint64_t m[BLOOM_BLOCK_WORDS];
        bloom_mask(hkey(i), 0, K, m);
        unsigned bits = 0;
        for (unsigned w = 0; w < BLOOM_BLOCK_WORDS; w++) {
            bits += (unsigned)__builtin_popcountll(m[w]);
            for (unsigned b = 0; b < 64; b++)
                hits[w * 64 + b] += (unsigned)((m[w] >> b) & 1u);
        }
        assert_true(bits >= 1 && bits <= K);
        total += bits;
    }
    double mean = (double)total / 512.0;
    for (unsigned p = 0; p < 512; p++)
        assert_true(fabs((double)hits[p] - mean) < 6.0 * sqrt(mean));

    unsigned same = 0;
    for (uint64_t i = 0; i < 10000; i++) {
        uint64_t a = bloom_block(hkey(i), 0, 1000), b = bloom_block(hkey(i), 1, 1000);
        assert_true(a < 1000 && b < 1000);
        same += a == b;
    }
    assert_true(same < 40);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp_formula),
        cmocka_unit_test(test_geometry),
        cmocka_unit_test(test_positions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
