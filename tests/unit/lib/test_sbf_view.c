/*
 * test_sbf_view.c - the per-stage views (sbf_stage, sbf_stage_ones, sbf_probe) and the
 * kind's optional parts/explain ops, against the filter's own answers: a key's probe is
 * present in some stage exactly when CHECK says present, every added key lights all its
 * bits in a stage, and the stage figures add up to sbf_info.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lib/kind.h"
#include "lib/sbf.h"

static struct sbf_hash key(uint64_t ns, uint64_t i)
{
    uint64_t v[2] = {ns, i};
    return sbf_hash_key(v, sizeof(v));
}

static struct sbf *grown_filter(uint64_t nkeys)
{
    struct sbf_params p;
    sbf_params_default(&p);
    p.capacity = 1000;
    struct sbf *f;
    assert_int_equal(sbf_new(&p, NULL, &f), SBF_OK);
    for (uint64_t i = 0; i < nkeys; i++)
        assert_int_equal(sbf_add(f, key(1, i), NULL), SBF_OK);
    return f;
}

static void test_stage_figures(void **state)
{
    (void)state;
    struct sbf *f = grown_filter(5000);
    struct sbf_info info;
    sbf_info(f, &info);
    assert_true(info.stages > 1);
    uint64_t bytes = 0, items = 0, cap = 0;
    double err = 0.0;
    for (uint32_t i = 0; i < info.stages; i++) {
        struct sbf_stage_view v;
        assert_true(sbf_stage(f, i, &v));
        bytes += v.bytes;
        items += v.items;
        cap += v.capacity;
        err += v.error;
        assert_int_equal(v.bytes, v.nblocks * 64);
        uint64_t ones = sbf_stage_ones(f, i);
        /* Every key sets between 1 and k bits of its stage. */
        assert_true(ones <= v.items * v.k);
        assert_true(v.items == 0 || ones >= v.items / 8);
        assert_true(ones <= v.nblocks * 512);
    }
    assert_int_equal(bytes, info.bytes);
    assert_int_equal(items, info.items);
    assert_int_equal(cap, info.capacity);
    assert_true(err < sbf_params(f)->error);
    struct sbf_stage_view v;
    assert_false(sbf_stage(f, info.stages, &v));
    assert_int_equal(sbf_stage_ones(f, info.stages), 0);
    sbf_free(f);
}

static void test_probe_matches_check(void **state)
{
    (void)state;
    struct sbf *f = grown_filter(5000);
    struct sbf_info info;
    sbf_info(f, &info);
    static struct sbf_probe pr;
    /* Added keys: all bits set in at least one stage; others: OR of stages == check. */
    for (uint64_t ns = 1; ns <= 2; ns++) {
        for (uint64_t i = 0; i < 3000; i++) {
            struct sbf_hash h = key(ns, i);
            bool any = false;
            for (uint32_t s = 0; s < info.stages; s++) {
                assert_true(sbf_probe(f, s, h, &pr));
                assert_true(pr.nbits >= 1 && pr.nbits <= 64);
                bool all = true;
                for (uint32_t j = 0; j < pr.nbits; j++) {
                    assert_true(pr.pos[j] < SBF_BLOCK_BITS);
                    if (j > 0)
                        assert_true(pr.pos[j] > pr.pos[j - 1]);
                    all = all && pr.set[j];
                }
                assert_int_equal(all, pr.present);
                any = any || pr.present;
            }
            assert_int_equal(any, sbf_check(f, h));
            if (ns == 1)
                assert_true(any);
        }
    }
    assert_false(sbf_probe(f, info.stages, key(1, 0), &pr));
    sbf_free(f);
}

struct parts_seen {
    uint32_t n;
    uint64_t items, ones;
    uint32_t probes, present;
};

static void on_part(void *ctx, const struct kind_part *part)
{
    struct parts_seen *s = ctx;
    assert_int_equal(part->index, s->n);
    assert_int_equal(part->block_bits, 512);
    assert_int_equal(part->bytes, part->blocks * 64);
    s->n++;
    s->items += part->items;
    s->ones += part->ones;
}

static void on_probe(void *ctx, const struct kind_probe *probe)
{
    struct parts_seen *s = ctx;
    assert_int_equal(probe->part, s->probes);
    s->probes++;
    s->present += probe->present;
}

static void test_kind_ops(void **state)
{
    (void)state;
    assert_non_null(kind_sbf.parts);
    assert_non_null(kind_sbf.explain);
    struct sbf *f = grown_filter(5000);
    struct sbf_info info;
    sbf_info(f, &info);
    struct parts_seen s = {0};
    kind_sbf.parts(f, false, on_part, &s);
    assert_int_equal(s.n, info.stages);
    assert_int_equal(s.items, info.items);
    assert_int_equal(s.ones, 0);
    memset(&s, 0, sizeof s);
    kind_sbf.parts(f, true, on_part, &s);
    assert_true(s.ones > 0);
    memset(&s, 0, sizeof s);
    kind_sbf.explain(f, key(1, 42), on_probe, &s);
    assert_int_equal(s.probes, info.stages);
    assert_true(s.present >= 1);
    sbf_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stage_figures),
        cmocka_unit_test(test_probe_matches_check),
        cmocka_unit_test(test_kind_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
