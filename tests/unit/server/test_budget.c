/*
 * test_budget.c - the one memory budget: reserve refuses past the limit and takes
 * nothing then, charge counts past it (budget_over), every part adds up to the total, the
 * lib's sbf_budget lands in the filters part, and the registry counts each entry's
 * overhead (kind header, struct, name, node) from put to remove, across replace, and
 * its buckets as they grow, giving everything back when freed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "lib/kind.h"
#include "lib/sbf.h"
#include "server/core/budget.h"
#include "server/store/registry.h"

static uint64_t sum_parts(const struct budget *b)
{
    uint64_t s = 0;
    for (int i = 0; i < BUDGET_NPARTS; i++)
        s += budget_part(b, (enum budget_part)i);
    return s;
}

static void test_reserve_and_charge(void **state)
{
    (void)state;
    struct budget b;
    budget_init(&b, 1000);
    assert_true(budget_reserve(&b, BUDGET_FILTERS, 600));
    assert_false(budget_reserve(&b, BUDGET_OVERHEAD, 401)); /* nothing taken */
    assert_int_equal(budget_used(&b), 600);
    assert_true(budget_fits(&b, 400));
    assert_false(budget_fits(&b, 401));
    assert_true(budget_reserve(&b, BUDGET_OVERHEAD, 400));
    assert_false(budget_over(&b));
    budget_charge(&b, BUDGET_CONNECTIONS, 50); /* already allocated: counted past the limit */
    assert_true(budget_over(&b));
    assert_int_equal(budget_used(&b), 1050);
    assert_int_equal(budget_part(&b, BUDGET_CONNECTIONS), 50);
    assert_int_equal(sum_parts(&b), budget_used(&b));
    assert_false(budget_reserve(&b, BUDGET_FILTERS, 1)); /* over: filters are refused */
    assert_false(budget_fits(&b, 0));
    budget_release(&b, BUDGET_CONNECTIONS, 50);
    budget_release(&b, BUDGET_OVERHEAD, 400);
    budget_release(&b, BUDGET_FILTERS, 600);
    assert_int_equal(budget_used(&b), 0);
    assert_int_equal(sum_parts(&b), 0);
    assert_false(budget_reserve(&b, BUDGET_FILTERS, 1001)); /* larger than the limit itself */
}

static void test_default_limit(void **state)
{
    (void)state;
    struct budget b;
    budget_init(&b, 0); /* the machine's memory */
    assert_true(b.limit > (1u << 20));
}

static void test_sbf_lands_in_filters(void **state)
{
    (void)state;
    struct budget b;
    budget_init(&b, 64u << 20);
    struct sbf_params p;
    sbf_params_default(&p);
    p.capacity = 10000;
    struct sbf *s;
    assert_int_equal(sbf_new(&p, &b.sbf, &s), SBF_OK);
    struct sbf_info info;
    sbf_info(s, &info);
    assert_int_equal(budget_part(&b, BUDGET_FILTERS), info.bytes);
    assert_true(info.header >= 64 * sizeof(void *)); /* the stage table is the header */
    assert_int_equal(budget_part(&b, BUDGET_OVERHEAD), 0);
    sbf_free(s);
    assert_int_equal(budget_used(&b), 0);
}

static struct filter *make(const char *name)
{
    struct sbf_params p;
    sbf_params_default(&p);
    p.capacity = 1;
    struct sbf *s;
    assert_int_equal(sbf_new(&p, NULL, &s), SBF_OK);
    struct filter *f = filter_new(name, strlen(name), &kind_sbf, s);
    assert_non_null(f);
    return f;
}

static void test_registry_overhead(void **state)
{
    (void)state;
    struct budget b;
    budget_init(&b, 1u << 30);
    struct registry *r = registry_new();
    assert_non_null(r);
    registry_set_budget(r, &b);
    uint64_t buckets = budget_part(&b, BUDGET_OVERHEAD);
    assert_true(buckets > 0);

    struct filter *f = make("alpha");
    size_t entry = registry_entry_bytes(f);
    struct kind_info info = {0};
    f->ops->info(f->obj, &info);
    assert_true(entry > info.header + sizeof *f + strlen("alpha"));
    assert_int_equal(registry_put(r, f), REGISTRY_OK);
    assert_int_equal(budget_part(&b, BUDGET_OVERHEAD), buckets + entry);
    assert_int_equal(registry_put(r, f), REGISTRY_EXISTS); /* counted once */
    assert_int_equal(budget_part(&b, BUDGET_OVERHEAD), buckets + entry);

    /* Replace: the fresh struct is counted, the old one given back. */
    struct filter *g = make("alpha");
    registry_replace(r, f, g);
    filter_unref(f);
    filter_unref(g);
    assert_int_equal(budget_part(&b, BUDGET_OVERHEAD), buckets + registry_entry_bytes(g));
    assert_true(registry_remove(r, "alpha", 5));
    assert_int_equal(budget_part(&b, BUDGET_OVERHEAD), buckets);

    /* Many entries: the buckets double and are counted too; free gives all back. */
    size_t total = 0;
    for (int i = 0; i < 500; i++) {
        char name[16];
        snprintf(name, sizeof name, "f%d", i);
        struct filter *x = make(name);
        total += registry_entry_bytes(x);
        assert_int_equal(registry_put(r, x), REGISTRY_OK);
        filter_unref(x);
    }
    assert_true(budget_part(&b, BUDGET_OVERHEAD) > buckets + total); /* bigger bucket array */
    registry_free(r);
    assert_int_equal(budget_used(&b), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_and_charge),
        cmocka_unit_test(test_default_limit),
        cmocka_unit_test(test_sbf_lands_in_filters),
        cmocka_unit_test(test_registry_overhead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
