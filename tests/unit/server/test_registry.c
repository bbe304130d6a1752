/*
 * test_registry.c - the table of named filters against a naive model (an array of
 * names), reference counting (DROP and CLEAR while a holder keeps the old object),
 * the exclusive-access rule, sorted prefix collection, and the reference registry_get()
 * hands to its caller.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/sbf.h"
#include "server/store/registry.h"

static struct filter *make(const char *name)
{
    struct sbf_params p;
    sbf_params_default(&p);
    p.capacity = 100;
    struct sbf *s;
    assert_int_equal(sbf_new(&p, NULL, &s), SBF_OK);
    struct filter *f = filter_new(name, strlen(name), &kind_sbf, s);
    assert_non_null(f);
    assert_ptr_equal(f->ops, &kind_sbf);
    assert_ptr_equal(f->obj, s);
    assert_int_equal(atomic_load(&f->refs), 1);
    return f;
}

/* Puts a new filter and drops the caller's reference: the table owns it. */
static struct filter *put(struct registry *r, const char *name)
{
    struct filter *f = make(name);
    assert_int_equal(registry_put(r, f), REGISTRY_OK);
    filter_unref(f);
    return f;
}

static void test_model(void **state)
{
    (void)state;
    enum { N = 3000 };
    static bool in[N];
    memset(in, 0, sizeof(in));
    struct registry *r = registry_new();
    assert_non_null(r);
    uint64_t x = 88172645463325252u; /* xorshift: fixed sequence */
    size_t count = 0;
    for (int step = 0; step < 20000; step++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int k = (int)(x % N);
        char name[32];
        snprintf(name, sizeof(name), "f%d", k);
        switch (x >> 60 & 3) {
        case 0:
        case 1:
            if (in[k]) {
                struct filter *f = make(name);
                assert_int_equal(registry_put(r, f), REGISTRY_EXISTS);
                filter_unref(f);
            } else {
                put(r, name);
                in[k] = true;
                count++;
            }
            break;
        case 2:
            assert_int_equal(registry_remove(r, name, strlen(name)), in[k]);
            count -= in[k];
            in[k] = false;
            break;
        default: {
            struct filter *f = registry_get(r, name, strlen(name));
            assert_int_equal(f != NULL, in[k]);
            if (f != NULL) {
                assert_string_equal(f->name, name);
                assert_int_equal(atomic_load(&f->refs), 2); /* the table's and ours */
                filter_unref(f);
            }
        }
        }
        assert_int_equal(registry_count(r), count);
    }
    /* A name that is a prefix of another is a different key. */
    assert_null(registry_get(r, "f", 1));
    registry_free(r);
}

static void test_refcount(void **state)
{
    (void)state;
    struct registry *r = registry_new();
    struct filter *f = put(r, "a");
    filter_ref(f); /* a snapshot holds it */
    assert_true(registry_remove(r, "a", 1));
    assert_true(atomic_load(&f->dropped));
    assert_null(registry_get(r, "a", 1));
    assert_int_equal(atomic_load(&f->refs), 1);
    assert_true(sbf_check(f->obj, sbf_hash_key("x", 1)) == false); /* still valid memory */
    filter_unref(f);                                               /* freed here (ASan) */

    f = put(r, "b");
    struct filter *fresh = make("b");
    filter_ref(f);
    registry_replace(r, f, fresh);
    filter_unref(fresh);
    struct filter *got = registry_get(r, "b", 1);
    assert_ptr_equal(got, fresh);
    assert_int_equal(atomic_load(&got->refs), 2); /* the table's and ours */
    filter_unref(got);
    assert_int_equal(atomic_load(&fresh->refs), 1); /* the table's */
    assert_false(atomic_load(&f->dropped));
    assert_int_equal(atomic_load(&f->refs), 1);
    filter_unref(f);
    registry_free(r);
}

struct mark {
    struct filter *want;
    int calls;
};

static void mark(struct filter *f, void *arg)
{
    struct mark *m = arg;
    assert_ptr_equal(f, m->want);
    m->calls++;
}

/* The caller holds exactly one reference (from registry_get); any other holder refuses. */
static void test_exclusive(void **state)
{
    (void)state;
    struct registry *r = registry_new();
    put(r, "x");
    struct filter *f = registry_get(r, "x", 1);
    assert_non_null(f);
    struct mark m = {.want = f};
    assert_true(registry_with_exclusive(r, f, mark, &m));
    assert_int_equal(m.calls, 1);
    filter_ref(f); /* a snapshot holds it */
    assert_false(registry_with_exclusive(r, f, mark, &m));
    assert_int_equal(m.calls, 1);
    filter_unref(f);
    assert_true(registry_with_exclusive(r, f, mark, &m));
    assert_int_equal(m.calls, 2);
    /* A collector's references count as holders too. */
    struct filter **all;
    size_t n;
    assert_int_equal(registry_collect(r, NULL, 0, &all, &n), REGISTRY_OK);
    assert_int_equal(n, 1);
    assert_false(registry_with_exclusive(r, f, mark, &m));
    filter_unref(all[0]);
    free(all);
    assert_true(registry_with_exclusive(r, f, mark, &m));
    assert_int_equal(m.calls, 3);
    filter_unref(f);
    registry_free(r);
}

static void test_collect(void **state)
{
    (void)state;
    struct registry *r = registry_new();
    static const char *const names[] = {"web-2", "api", "web-10", "web", "w", "zeta", "web-1"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        put(r, names[i]);
    struct filter **all;
    size_t n;
    assert_int_equal(registry_collect(r, NULL, 0, &all, &n), REGISTRY_OK);
    assert_int_equal(n, 7);
    static const char *const sorted[] = {"api", "w", "web", "web-1", "web-10", "web-2", "zeta"};
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(all[i]->name, sorted[i]);
        assert_int_equal(atomic_load(&all[i]->refs), 2); /* table + ours */
        filter_unref(all[i]);
    }
    free(all);
    assert_int_equal(registry_collect(r, "web", 3, &all, &n), REGISTRY_OK);
    assert_int_equal(n, 4);
    assert_string_equal(all[0]->name, "web");
    assert_string_equal(all[3]->name, "web-2");
    /* The collected filters outlive the table. */
    registry_free(r);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(atomic_load(&all[i]->refs), 1);
        filter_unref(all[i]);
    }
    free(all);
}

static void test_changes(void **state)
{
    (void)state;
    struct filter *f = make("c");
    uint64_t c0 = atomic_load(&f->changes);
    assert_true(c0 > 0); /* a new filter starts dirty */
    filter_touch(f);
    assert_int_equal(atomic_load(&f->changes), c0 + 1);
    filter_unref(f);
    filter_unref(NULL);
    registry_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model),     cmocka_unit_test(test_refcount),
        cmocka_unit_test(test_exclusive), cmocka_unit_test(test_collect),
        cmocka_unit_test(test_changes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
