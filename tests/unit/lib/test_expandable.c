/*
 * test_expandable.c - the expandable filter against exact sets: no false negatives through
 * 1000x growth, the measured false-positive rate at every doubling within the promise (and
 * within 4 standard deviations of the filter's own bound), delete, union, the codec (round
 * trip, every single-byte corruption and every truncation refused), readers and an encoder
 * beside the writer, the budget, the kind table, the block primitives against naive ones,
 * and one fixed add sequence against its encoding's digest (the layout is deterministic).
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/expandable.h"
#include "lib/expandable_internal.h"
#include "lib/kind.h"
#include "tests/unit/lib/memio.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* Key i of namespace ns: namespaces never overlap, so "never added" is exact. */
static struct sbf_hash key(uint64_t ns, uint64_t i)
{
    uint64_t v[2] = {ns, i};
    return sbf_hash_key(v, sizeof(v));
}

static struct expandable *make(uint64_t capacity, double error)
{
    struct expandable_params p = {.capacity = capacity, .error = error};
    struct expandable *f = NULL;
    assert_int_equal(expandable_new(&p, NULL, &f), SBF_OK);
    return f;
}

enum { B = 1024 };

/* Check-and-adds keys [from, to) of ns; returns how many were reported present. */
static uint64_t checkadd_range(struct expandable *f, uint64_t ns, uint64_t from, uint64_t to)
{
    struct sbf_hash h[B];
    bool present[B];
    uint64_t hits = 0;
    for (uint64_t i = from; i < to;) {
        size_t n = 0;
        for (; n < B && i < to; n++, i++)
            h[n] = key(ns, i);
        assert_int_equal(expandable_checkadd_batch(f, h, n, present), SBF_OK);
        for (size_t j = 0; j < n; j++)
            hits += present[j];
    }
    return hits;
}

/* Counts keys [from, to) of ns (every step-th) that the filter reports present. */
static uint64_t count_present(const struct expandable *f, uint64_t ns, uint64_t from, uint64_t to,
                              uint64_t step)
{
    struct sbf_hash h[B];
    bool present[B];
    uint64_t hits = 0;
    for (uint64_t i = from; i < to;) {
        size_t n = 0;
        for (; n < B && i < to; n++, i += step)
            h[n] = key(ns, i);
        expandable_check_batch(f, h, n, present);
        for (size_t j = 0; j < n; j++)
            hits += present[j];
    }
    return hits;
}

/* Divides the limit of each stage from *seen up to `upto` by `by` as it appears, so a test
 * sees stage after stage without 2048x growth each. Only lowers limits: the promise holds. */
static void shrink_stages(struct expandable *f, uint32_t *seen, uint32_t upto, double by)
{
    uint32_t n = atomic_load(&f->nstages);
    for (; *seen < n && *seen < upto; (*seen)++)
        f->stage[*seen]->limit /= by;
}

static void test_params(void **state)
{
    (void)state;
    struct expandable *f = NULL;
    struct expandable_params bad[] = {
        {0, 0.01},  {100, 0.0}, {100, 9e-5},
        {100, 0.6}, {100, -1},  {EXPANDABLE_MAX_CAPACITY + 1, 0.01},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(expandable_new(&bad[i], NULL, &f), SBF_EINVAL);
    const double errors[] = {EXPANDABLE_MIN_ERROR, 0.001, 0.01, 0.1, EXPANDABLE_MAX_ERROR};
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
        f = make(1000, errors[i]);
        assert_int_equal(expandable_verify(f), SBF_OK);
        struct expandable_info info;
        expandable_info(f, &info);
        assert_true(info.fingerprint >= EXP_MIN_W - 1 && info.fingerprint <= EXP_MAX_W - 1);
        assert_int_equal(info.items, 0);
        assert_true(info.capacity >= 1000);
        expandable_free(f);
    }
    expandable_free(NULL);
}

/*
 * Grows a filter of capacity `cap` at promise eps to `total` keys. At every doubling of
 * the keys: no false negative over a sample of every added key range, the invariants, and
 * the false-positive rate of never-added keys (200k, more below 0.25%) at most the promise
 * and at most the filter's bound + 4 sigma (sigma of a binomial at the bound: a wrong bound fails,
 * chance alone fails with probability < 1e-4 per check). Any add error (SBF_ELIMIT included) fails.
 */
static void grow_and_check(uint64_t cap, uint64_t total, double eps)
{
    /* Enough never-added keys that a rate at the bound (<= 0.75 eps) sits >= 6 sigma
     * below the promise: 200k at 1%, 5M at 0.01%. */
    const uint64_t absent = 500 / eps > 200000 ? (uint64_t)(500 / eps) : 200000;
    struct expandable *f = make(cap, eps);
    uint64_t at = 0, next = cap, fps_in_adds = 0;
    while (at < total) {
        uint64_t to = next < total ? next : total;
        fps_in_adds += checkadd_range(f, 1, at, to);
        at = to;
        assert_int_equal(expandable_verify(f), SBF_OK);
        /* No false negative: every key of the last doubling, every 7th before. */
        assert_int_equal(count_present(f, 1, at / 2, at, 1), at - at / 2);
        uint64_t sampled = (at / 2 + 6) / 7;
        assert_int_equal(count_present(f, 1, 0, at / 2, 7), sampled);
        struct expandable_info info;
        expandable_info(f, &info);
        uint64_t fp = count_present(f, 2, 0, absent, 1);
        double rate = (double)fp / (double)absent;
        double sigma = __builtin_sqrt(info.error_bound / (double)absent);
        print_message("  %9llu keys (%7.0fx): %2.2f bytes/key, FP %.4f%% (bound %.4f%%), "
                      "load %.3f, level %u, stash %u, stages %u\n",
                      (unsigned long long)at, (double)at / (double)cap,
                      (double)info.bytes / (double)at, rate * 100, info.error_bound * 100,
                      info.load, info.level, info.stash, info.stages);
        assert_true(rate <= eps);
        assert_true(rate <= info.error_bound + 4 * sigma);
        assert_true(info.error_bound <= eps);
        next = at * 2;
    }
    /* Every key, once, at the end. */
    assert_int_equal(count_present(f, 1, 0, total, 1), total);
    struct expandable_info info;
    expandable_info(f, &info);
    /* Check-and-add of new keys said "present" only for false positives. */
    assert_true((double)fps_in_adds <= eps * (double)total);
    assert_int_equal(info.items, total - fps_in_adds);
    /* Repeats are always present and add nothing. */
    assert_int_equal(checkadd_range(f, 1, 0, 100000), 100000);
    expandable_info(f, &info);
    assert_int_equal(info.items, total - fps_in_adds);
    expandable_free(f);
}

/* Growth through 1000x from a small start (10M keys under ASan as well: ~30 s). */
static void test_growth_1000x(void **state)
{
    (void)state;
    grow_and_check(10000, 10000000, 0.01);
}

/* The release-only tests: too slow under ASan, where they skip saying so. `make unit` runs
 * them from the release build of this file (build/rel/tests/test_expandable,
 * TEST_FILTER='test_release_*'). */
static bool release_only(void)
{
    if (UNDER_ASAN)
        print_message("  skipped under ASan: make unit runs it in the release build\n");
    return !UNDER_ASAN;
}

/* Growth through 10^6x: capacity 100 to 10^8 keys at 1% (about 240 MB, ~30 s). */
static void test_release_growth_1000000x(void **state)
{
    (void)state;
    if (!release_only())
        skip();
    grow_and_check(100, 100000000, 0.01);
}

/* The smallest promise, 0.01%: capacity 100 to 3 * 10^7 keys (3 * 10^5x). */
static void test_release_growth_min_error(void **state)
{
    (void)state;
    if (!release_only())
        skip();
    grow_and_check(100, 30000000, EXPANDABLE_MIN_ERROR);
}

/* Single-key calls agree with the batches; a repeat inside one batch is present. */
static void test_single_and_repeats(void **state)
{
    (void)state;
    struct expandable *f = make(1000, 0.01);
    for (uint64_t i = 0; i < 50000; i++) {
        bool present;
        assert_int_equal(expandable_checkadd(f, key(1, i), &present), SBF_OK);
        assert_true(expandable_check(f, key(1, i)));
    }
    struct sbf_hash h[4] = {key(3, 1), key(3, 1), key(3, 2), key(3, 1)};
    bool present[4];
    assert_int_equal(expandable_checkadd_batch(f, h, 4, present), SBF_OK);
    assert_true(present[1] && present[3]);
    size_t added = 0;
    assert_int_equal(expandable_add_batch(f, h, 4, &added), SBF_OK);
    assert_int_equal(added, 0);
    assert_int_equal(count_present(f, 1, 0, 50000, 1), 50000);
    expandable_free(f);
}

/*
 * Deleting added keys. The model is the set of keys the filter stored (check-and-add said
 * new; a false positive at add time stores nothing, and deleting such a key would remove
 * the key it collided with: the documented caveat). Deleting half of the stored keys
 * leaves every other stored key present, and the deleted ones absent but for collisions.
 */
static void test_delete(void **state)
{
    (void)state;
    const uint64_t n = 200000;
    struct expandable *f = make(5000, 0.01);
    bool *stored = calloc(n, sizeof(*stored));
    assert_non_null(stored);
    for (uint64_t i = 0; i < n; i++) {
        bool present;
        assert_int_equal(expandable_checkadd(f, key(1, i), &present), SBF_OK);
        stored[i] = !present;
    }
    struct sbf_hash h[B];
    uint64_t deleted = 0, want = 0;
    for (uint64_t i = 0; i < n;) {
        size_t m = 0;
        for (; m < B && i < n; i += 2)
            if (stored[i])
                h[m++] = key(1, i);
        want += m;
        size_t d = 0;
        assert_int_equal(expandable_delete_batch(f, h, m, &d), SBF_OK);
        deleted += d;
    }
    assert_int_equal(deleted, want);
    assert_int_equal(expandable_verify(f), SBF_OK);
    uint64_t odd = 0, odd_stored = 0, even = 0;
    for (uint64_t i = 0; i < n; i++) {
        bool p = expandable_check(f, key(1, i));
        if (i & 1) {
            odd += p && stored[i];
            odd_stored += stored[i];
        } else {
            even += p;
        }
    }
    assert_int_equal(odd, odd_stored);
    assert_true((double)even <= 0.01 * (double)n);
    /* Deleting a key that is absent deletes nothing. */
    size_t d = 1;
    for (uint64_t i = 0; i < 100; i++) {
        h[0] = key(9, i);
        if (!expandable_check(f, h[0])) {
            assert_int_equal(expandable_delete_batch(f, h, 1, &d), SBF_OK);
            assert_int_equal(d, 0);
        }
    }
    free(stored);
    expandable_free(f);
}

/* Union of two filters of the same parameters grown to different sizes. */
static void test_union(void **state)
{
    (void)state;
    struct expandable *a = make(3000, 0.01), *b = make(3000, 0.01), *c = make(3001, 0.01);
    checkadd_range(a, 1, 0, 20000);
    checkadd_range(b, 2, 0, 300000);
    assert_false(expandable_compatible(a, c));
    assert_int_equal(expandable_union(a, c), SBF_EINCOMPAT);
    assert_int_equal(expandable_union(a, b), SBF_OK);
    assert_int_equal(expandable_verify(a), SBF_OK);
    assert_int_equal(count_present(a, 1, 0, 20000, 1), 20000);
    assert_int_equal(count_present(a, 2, 0, 300000, 1), 300000);
    uint64_t fp = count_present(a, 3, 0, 100000, 1);
    assert_true(fp <= 1000);
    /* And the other way round: the small into the large. */
    struct expandable *d = make(3000, 0.01);
    checkadd_range(d, 4, 0, 5000);
    assert_int_equal(expandable_union(b, d), SBF_OK);
    assert_int_equal(count_present(b, 4, 0, 5000, 1), 5000);
    assert_int_equal(count_present(b, 2, 0, 300000, 1), 300000);
    assert_int_equal(expandable_union(b, b), SBF_OK);
    expandable_free(a);
    expandable_free(b);
    expandable_free(c);
    expandable_free(d);
}

/* ---- codec ---- */

/* Decodes the first limit bytes of what o holds (all of it if fewer). */
static int decode_buf(const struct mem_out *o, size_t limit, struct expandable **out)
{
    struct mem_in r = {.data = o->data, .len = limit < o->len ? limit : o->len};
    return expandable_decode(mem_read, &r, UINT64_C(1) << 32, NULL, out);
}

static void test_codec_round_trip(void **state)
{
    (void)state;
    struct expandable *f = make(2000, 0.01);
    checkadd_range(f, 1, 0, 37000); /* mid-round: two arrays in use */
    struct mem_out e = {0};
    assert_int_equal(expandable_encode(f, mem_write, &e), SBF_OK);
    assert_int_equal(e.len, expandable_encoded_size(f));
    struct expandable *g = NULL;
    assert_int_equal(decode_buf(&e, SIZE_MAX, &g), SBF_OK);
    assert_int_equal(expandable_verify(g), SBF_OK);
    assert_int_equal(count_present(g, 1, 0, 37000, 1), 37000);
    struct expandable_info a, b;
    expandable_info(f, &a);
    expandable_info(g, &b);
    assert_int_equal(a.items, b.items);
    assert_int_equal(a.entries, b.entries);
    assert_int_equal(a.blocks, b.blocks);
    assert_true(a.error_bound - b.error_bound < 1e-12 && b.error_bound - a.error_bound < 1e-12);
    struct mem_out e2 = {0};
    assert_int_equal(expandable_encode(g, mem_write, &e2), SBF_OK);
    assert_int_equal(e2.len, e.len);
    assert_memory_equal(e2.data, e.data, e.len);
    /* It keeps working after a decode. */
    checkadd_range(g, 1, 37000, 80000);
    assert_int_equal(count_present(g, 1, 0, 80000, 1), 80000);
    /* max_bytes below the blocks: refused before allocating. */
    struct mem_in r = {.data = e.data, .len = e.len};
    assert_int_equal(expandable_decode(mem_read, &r, 1000, NULL, &g), SBF_ETOOBIG);
    free(e.data);
    free(e2.data);
    expandable_free(f);
    expandable_free(g);
}

/* Every single-byte change (three values per byte) and every truncation is refused. */
static void test_codec_corruption(void **state)
{
    (void)state;
    struct expandable *f = make(100, 0.01);
    checkadd_range(f, 1, 0, 3700);
    struct mem_out e = {0};
    assert_int_equal(expandable_encode(f, mem_write, &e), SBF_OK);
    struct expandable *g = NULL;
    for (size_t i = 0; i < e.len; i++) {
        const unsigned char flips[] = {0x01, 0x80, 0xff};
        for (size_t k = 0; k < sizeof(flips); k++) {
            e.data[i] ^= flips[k];
            int rc = decode_buf(&e, SIZE_MAX, &g);
            if (rc == SBF_OK)
                fail_msg("byte %zu ^ 0x%02x decoded", i, flips[k]);
            e.data[i] ^= flips[k];
        }
    }
    for (size_t n = 0; n < e.len; n++)
        assert_int_not_equal(decode_buf(&e, n, &g), SBF_OK);
    /* A trailing byte too. */
    mem_write(&e, "x", 1);
    assert_int_equal(decode_buf(&e, SIZE_MAX, &g), SBF_ECORRUPT);
    e.len--;
    assert_int_equal(decode_buf(&e, SIZE_MAX, &g), SBF_OK);
    expandable_free(g);
    free(e.data);
    expandable_free(f);
}

/* ---- beside the writer ---- */

/* The writer adding while an encode runs, from the encode's write callback (between its
 * block copies, on one thread): splits, drains and level changes run behind the copy and
 * no cuckoo step may move an entry there; every key added before the encode is in it. */
struct mid_encode {
    struct mem_out out;
    struct expandable *f;
    uint64_t next;
};

static int mid_write(void *ctx, const void *p, size_t len)
{
    struct mid_encode *m = ctx;
    checkadd_range(m->f, 1, m->next, m->next + 20000);
    m->next += 20000;
    return mem_write(&m->out, p, len);
}

static void test_adds_during_encode(void **state)
{
    (void)state;
    struct mid_encode m = {.f = make(1000, 0.01), .next = 300000};
    checkadd_range(m.f, 1, 0, m.next);
    assert_int_equal(expandable_encode(m.f, mid_write, &m), SBF_OK);
    assert_true(m.next > 300000 + 20000); /* more than one write */
    struct expandable *g = NULL;
    assert_int_equal(decode_buf(&m.out, SIZE_MAX, &g), SBF_OK);
    assert_int_equal(count_present(g, 1, 0, 300000, 1), 300000);
    assert_int_equal(count_present(m.f, 1, 0, m.next, 1), m.next);
    expandable_free(g);
    free(m.out.data);
    expandable_free(m.f);
}

struct race {
    struct expandable *f;
    _Atomic uint64_t done; /* keys [0, done) were added before the reader looks */
    _Atomic int stop;
    uint64_t misses, encodes, unions, torn, bad_snapshots;
};

static void *reader_main(void *arg)
{
    struct race *r = arg;
    uint64_t x = 1;
    /* Not counted in the iterations: a reader that ran ahead of a starved writer ended
     * with no encode at all (release build, busy machine). */
    while (atomic_load(&r->done) == 0 && !atomic_load(&r->stop))
        sched_yield();
    for (unsigned it = 0; it < 1000000 && !atomic_load(&r->stop); it++) {
        uint64_t done = atomic_load(&r->done);
        struct sbf_hash h[64];
        bool present[64];
        for (int i = 0; i < 64; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            h[i] = key(1, (x >> 11) % done);
        }
        expandable_check_batch(r->f, h, 64, present);
        for (int i = 0; i < 64; i++)
            r->misses += !present[i];
        if (it % 64 == 0) {
            /* An encode beside the writer decodes to a filter with every key before it. */
            struct mem_out e = {0};
            uint64_t before = atomic_load(&r->done);
            int rc = expandable_encode(r->f, mem_write, &e);
            if (rc == SBF_OK) {
                struct expandable *g = NULL;
                int drc = decode_buf(&e, SIZE_MAX, &g);
                uint64_t got = drc == SBF_OK ? count_present(g, 1, 0, before, 1) : 0;
                if (drc != SBF_OK || got != before) {
                    print_message("  bad snapshot: decode %s, %llu of %llu keys\n",
                                  sbf_strerror(drc), (unsigned long long)got,
                                  (unsigned long long)before);
                    r->bad_snapshots++;
                }
                expandable_free(g);
                r->encodes++;
            } else {
                print_message("  encode beside the writer: %s\n", sbf_strerror(rc));
                r->torn++;
            }
            free(e.data);
        }
        if (it % 256 == 128 && r->unions < 8 && atomic_load(&r->done) < 100000) {
            /* So does a union reading the filter beside its writer (or it refuses). A
             * few small ones only: a union holds off cuckoo steps for long, and adds
             * with none fill the stash (SBF_ENOMEM, seen in release builds). */
            r->unions++;
            uint64_t before = atomic_load(&r->done);
            struct expandable *g = make(1000, 0.01);
            int rc = expandable_union(g, r->f);
            uint64_t got = rc == SBF_OK ? count_present(g, 1, 0, before, 1) : before;
            if (got != before) {
                print_message("  bad union: %llu of %llu keys\n", (unsigned long long)got,
                              (unsigned long long)before);
                r->bad_snapshots++;
            }
            r->torn += rc != SBF_OK;
            expandable_free(g);
        }
    }
    return NULL;
}

/* The writer adds while a reader checks, encodes and unions; with `stages` > 0 it cuts
 * the first stages' limits short (shrink_stages), so new stages start beside the reader. */
static void race_run(uint32_t stages)
{
    struct race r = {.f = make(1000, 0.01)};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, reader_main, &r), 0);
    const uint64_t n = UNDER_ASAN ? 400000 : 2000000;
    uint32_t seen = 0;
    for (uint64_t i = 0; i < n; i += 256) {
        checkadd_range(r.f, 1, i, i + 256);
        if (stages)
            shrink_stages(r.f, &seen, stages, 16);
        atomic_store(&r.done, i + 256);
    }
    atomic_store(&r.stop, 1);
    pthread_join(t, NULL);
    struct expandable_info info;
    expandable_info(r.f, &info);
    print_message("  reader: %llu encodes, %llu unions, %llu refused as torn, %llu misses, "
                  "%llu bad; %u stages\n",
                  (unsigned long long)r.encodes, (unsigned long long)r.unions,
                  (unsigned long long)r.torn, (unsigned long long)r.misses,
                  (unsigned long long)r.bad_snapshots, info.stages);
    expandable_free(r.f); /* before the checks: a failing one returns at once */
    assert_int_equal(r.misses, 0);
    assert_int_equal(r.bad_snapshots, 0);
    assert_true(r.encodes > 0);
    assert_true(stages == 0 ? info.stages == 1 : info.stages > 2);
}

static void test_readers_beside_writer(void **state)
{
    (void)state;
    race_run(0);
}

static void test_readers_beside_stages(void **state)
{
    (void)state;
    race_run(4);
}

/* ---- budget ---- */

struct budget_state {
    size_t used, limit;
};

static bool b_reserve(void *ctx, size_t bytes)
{
    struct budget_state *b = ctx;
    if (b->used + bytes > b->limit)
        return false;
    b->used += bytes;
    return true;
}

static void b_release(void *ctx, size_t bytes)
{
    struct budget_state *b = ctx;
    b->used -= bytes;
}

static void test_budget(void **state)
{
    (void)state;
    struct budget_state bs = {.limit = (size_t)4 << 20};
    struct sbf_budget budget = {b_reserve, b_release, &bs};
    struct expandable_params p = {.capacity = 1000, .error = 0.01};
    struct expandable *f = NULL;
    assert_int_equal(expandable_new(&p, &budget, &f), SBF_OK);
    struct expandable_info info;
    expandable_info(f, &info);
    assert_int_equal(info.bytes, bs.used);
    /* Fill until the budget refuses: then SBF_ENOMEM, and every key added so far stays. */
    uint64_t i = 0;
    int rc = SBF_OK;
    for (; i < 10000000 && rc == SBF_OK; i++) {
        bool present;
        rc = expandable_checkadd(f, key(1, i), &present);
    }
    assert_int_equal(rc, SBF_ENOMEM);
    assert_true(bs.used <= bs.limit);
    expandable_info(f, &info);
    assert_int_equal(info.bytes, bs.used);
    assert_int_equal(count_present(f, 1, 0, i - 1, 1), i - 1);
    expandable_clear(f);
    expandable_info(f, &info);
    assert_int_equal(info.items, 0);
    assert_int_equal(info.bytes, bs.used);
    assert_int_equal(count_present(f, 1, 0, 1000, 1) <= 20, true);
    expandable_free(f);
    assert_int_equal(bs.used, 0);
}

/* ---- kind table ---- */

static void field_count(void *ctx, const char *name, enum kind_field_type type, uint64_t u,
                        double d, const char *s)
{
    (void)name, (void)type, (void)u, (void)d, (void)s;
    (*(int *)ctx)++;
}

static void test_kind(void **state)
{
    (void)state;
    const struct kind_ops *k = &kind_expandable;
    assert_string_equal(k->name, "expandable");
    assert_int_equal(k->tag, KIND_TAG_EXPANDABLE);
    assert_null(k->intersect);
    assert_null(k->advance);
    char rule[160]; /* the refusal's words follow the limits */
    snprintf(rule, sizeof rule, "an expandable filter takes error %g to %g and capacity up to %llu",
             EXPANDABLE_MIN_ERROR, EXPANDABLE_MAX_ERROR,
             (unsigned long long)EXPANDABLE_MAX_CAPACITY);
    assert_string_equal(k->params_rule, rule);
    struct kind_params p = {0};
    sbf_params_default(&p.sbf);
    p.sbf.capacity = 5000;
    void *a = NULL, *b = NULL;
    assert_int_equal(k->create(&p, NULL, &a), SBF_OK);
    p.window_ms = 1000;
    assert_int_equal(k->create(&p, NULL, &b), SBF_EINVAL);
    p.window_ms = 0;
    p.sbf.scale = 4;
    assert_int_equal(k->create(&p, NULL, &b), SBF_EINVAL);
    p.sbf.scale = 2;
    p.sbf.growth = SBF_GROWTH_LINEAR;
    assert_int_equal(k->create(&p, NULL, &b), SBF_EINVAL);
    p.sbf.growth = SBF_GROWTH_EXPONENTIAL;
    p.sbf.ratio = 0.5;
    assert_int_equal(k->create(&p, NULL, &b), SBF_EINVAL);
    assert_int_equal(k->create_like(a, NULL, &b), SBF_OK);
    struct sbf_hash h[100];
    bool present[100];
    for (int i = 0; i < 100; i++)
        h[i] = key(1, (uint64_t)i);
    assert_int_equal(k->checkadd_batch(a, h, 100, present), SBF_OK);
    assert_true(k->compatible(a, b));
    assert_int_equal(k->merge(b, a), SBF_OK);
    k->check_batch(b, h, 100, present);
    for (int i = 0; i < 100; i++)
        assert_true(present[i]);
    assert_true(k->grown(a));
    struct kind_info info;
    k->info(b, &info);
    assert_true(info.items >= 100 && info.bytes > 0 && info.error == 0.01);
    int fields = 0;
    assert_null(k->estimate); /* every figure is cheap */
    k->fields(b, NULL, field_count, &fields);
    assert_int_equal(fields, 15);
    assert_int_equal(k->verify(b), SBF_OK);
    struct mem_out e = {0};
    assert_int_equal(k->encode(b, mem_write, &e), SBF_OK);
    assert_int_equal(e.len, k->encoded_size(b));
    void *c = NULL;
    struct mem_in r = {.data = e.data, .len = e.len};
    assert_int_equal(k->decode(mem_read, &r, UINT64_C(1) << 30, NULL, &c), SBF_OK);
    k->check_batch(c, h, 100, present);
    for (int i = 0; i < 100; i++)
        assert_true(present[i]);
    k->clear(c);
    k->info(c, &info);
    assert_int_equal(info.items, 0);
    free(e.data);
    k->free(a);
    k->free(b);
    k->free(c);
    k->free(NULL);
}

/* The k-th set bit, one bit at a time. */
static unsigned naive_select(uint64_t x, unsigned k)
{
    for (unsigned i = 0; i < 64; i++)
        if ((x >> i) & 1u && k-- == 0)
            return i;
    return 64;
}

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* exp_select64 (branch-free) and xb_bucket (one select and a count of trailing zeros)
 * against naive versions, on random words and random valid directories. */
static void test_block_primitives(void **state)
{
    (void)state;
    uint64_t s = UINT64_C(88172645463325252);
    for (unsigned k = 0; k < 64; k++)
        assert_int_equal(exp_select64(~UINT64_C(0), k), k);
    for (unsigned t = 0; t < 200000; t++) {
        uint64_t x = xorshift(&s);
        if (t % 3 == 1)
            x &= xorshift(&s); /* sparse */
        else if (t % 3 == 2)
            x |= xorshift(&s); /* dense */
        for (unsigned k = 0, n = (unsigned)__builtin_popcountll(x); k < n; k++)
            assert_int_equal(exp_select64(x, k), naive_select(x, k));
    }
    for (uint32_t w = EXP_MIN_W; w <= EXP_STAGE_MAX_W; w++) { /* every width a stage uses */
        uint32_t c = XB_REM_BITS / w, m = XB_META_BITS - c;
        for (unsigned t = 0; t < 2000; t++) {
            uint64_t b[XB_WORDS] = {0};
            uint32_t n = t % (c + 1), ones = 0, zeros = 0, pos = 0;
            uint32_t start[XB_META_BITS], end[XB_META_BITS];
            start[0] = 0;
            while (ones < n || zeros < m) {
                bool one = ones < n && (zeros == m || xorshift(&s) % 4 == 0);
                if (one) {
                    b[pos / 64] |= UINT64_C(1) << (pos % 64);
                    ones++;
                } else {
                    end[zeros] = ones;
                    if (zeros + 1 < m)
                        start[zeros + 1] = ones;
                    zeros++;
                }
                pos++;
            }
            assert_int_equal(xb_count(b), n);
            for (uint32_t j = 0; j < m; j++) {
                uint32_t bs, be;
                xb_bucket(b, j, &bs, &be);
                assert_int_equal(bs, start[j]);
                assert_int_equal(be, end[j]);
            }
        }
    }
}

static uint64_t digest_of;

static int digest_write(void *ctx, const void *buf, size_t len)
{
    (void)ctx;
    for (size_t i = 0; i < len; i++) {
        digest_of ^= ((const unsigned char *)buf)[i];
        digest_of *= UINT64_C(1099511628211);
    }
    return 0;
}

/*
 * One fixed sequence of check-and-adds (300x growth, a sixth repeats, splits, cuckoo steps)
 * gives one filter: its encoding's FNV-1a digest is pinned, so a change meant to be only
 * faster that moves any entry (which would make a replica or a replayed journal differ
 * from a filter built by an older binary) fails here. Update the digest only with a
 * format or placement change that says so.
 */
static void test_deterministic_layout(void **state)
{
    (void)state;
    struct expandable *f = make(1000, 0.01);
    struct sbf_hash h[100];
    bool present[100];
    uint64_t hits = 0;
    for (uint64_t i = 0; i < 300000; i += 100) {
        for (unsigned j = 0; j < 100; j++)
            h[j] = key(7, (i + j) % 250000);
        assert_int_equal(expandable_checkadd_batch(f, h, 100, present), SBF_OK);
        for (unsigned j = 0; j < 100; j++)
            hits += present[j];
    }
    struct expandable_info info;
    expandable_info(f, &info);
    assert_int_equal(info.splits, 9039);
    assert_int_equal(info.entries, 249334);
    assert_int_equal(hits, 50666);
    digest_of = UINT64_C(1469598103934665603);
    assert_int_equal(expandable_encode(f, digest_write, NULL), SBF_OK);
    assert_int_equal(digest_of, UINT64_C(0x0432e8442f158188));
    expandable_free(f);
}

/* ---- stages ---- */

/*
 * Grows f (ns 1) to `total` keys, checking at every doubling as test_growth_1000x: no
 * false negative (the last doubling whole, a sample before), invariants, the rate on 200k
 * never-added keys (ns 2) at most the promise and the bound + 4 sigma, the bound at most
 * the promise. With `by` > 1 the first `upto` stages get their limit divided by it.
 */
static void grow_checked(struct expandable *f, uint64_t total, uint32_t upto, double by)
{
    const double eps = expandable_params(f)->error;
    const uint64_t absent = 200000;
    uint32_t seen = 0;
    shrink_stages(f, &seen, upto, by);
    uint64_t at = 0, next = 4096, fps = 0;
    while (at < total) {
        uint64_t to = next < total ? next : total;
        for (uint64_t i = at; i < to; i += B) {
            uint64_t e = i + B < to ? i + B : to;
            fps += checkadd_range(f, 1, i, e); /* fails on any error, SBF_ELIMIT included */
            shrink_stages(f, &seen, upto, by);
        }
        at = to;
        assert_int_equal(expandable_verify(f), SBF_OK);
        assert_int_equal(count_present(f, 1, at / 2, at, 1), at - at / 2);
        assert_int_equal(count_present(f, 1, 0, at / 2, 7), (at / 2 + 6) / 7);
        struct expandable_info info;
        expandable_info(f, &info);
        uint64_t fp = count_present(f, 2, 0, absent, 1);
        double rate = (double)fp / (double)absent;
        double sigma = __builtin_sqrt(info.error_bound / (double)absent);
        print_message("  %9llu keys: %u stages, %5.2f bytes/key, FP %.4f%% (bound %.4f%%), "
                      "fingerprint %u, stash %u\n",
                      (unsigned long long)at, info.stages, (double)info.bytes / (double)at,
                      rate * 100, info.error_bound * 100, info.fingerprint, info.stash);
        assert_true(rate <= eps);
        assert_true(rate <= info.error_bound + 4 * sigma);
        assert_true(info.error_bound <= eps);
        assert_int_equal(info.items, at - fps);
        next = at * 2;
    }
}

/* The filter of test_stages: the first five stages cut short (limits / 8). */
static struct expandable *make_staged(uint64_t keys)
{
    struct expandable *f = make(16, 0.01);
    grow_checked(f, keys, 5, 8);
    return f;
}

/*
 * Many stages, from the smallest table to 100x-300x its size: adds never fail, no false
 * negative, the rate at most the promise at every doubling; then codec, union, delete,
 * clear. A stage's limit is cut short here so that each lasts a few doublings; without
 * that the second stage starts after ~2048x growth, the third after ~2048x more: see
 * bench_grow's run to 10^8 keys in bench/expandable_growth.md.
 */
static void test_stages(void **state)
{
    (void)state;
    const uint64_t n = UNDER_ASAN ? 500000 : 4000000;
    struct expandable *f = make_staged(n);
    struct expandable_info info;
    expandable_info(f, &info);
    assert_true(info.stages >= 5);

    /* Codec: v2, round trip byte for byte, the same keys, and it keeps growing. */
    struct mem_out e = {0};
    assert_int_equal(expandable_encode(f, mem_write, &e), SBF_OK);
    assert_int_equal(e.len, expandable_encoded_size(f));
    assert_int_equal(e.data[8], 2);
    struct expandable *g = NULL;
    assert_int_equal(decode_buf(&e, SIZE_MAX, &g), SBF_OK);
    assert_int_equal(expandable_verify(g), SBF_OK);
    assert_int_equal(count_present(g, 1, 0, n, 1), n);
    struct expandable_info gi;
    expandable_info(g, &gi);
    assert_int_equal(gi.stages, info.stages);
    assert_int_equal(gi.items, info.items);
    assert_int_equal(gi.bytes, info.bytes);
    struct mem_out e2 = {0};
    assert_int_equal(expandable_encode(g, mem_write, &e2), SBF_OK);
    assert_int_equal(e2.len, e.len);
    assert_memory_equal(e2.data, e.data, e.len);
    free(e2.data);
    checkadd_range(g, 1, n, n + 100000);
    assert_int_equal(count_present(g, 1, 0, n + 100000, 1), n + 100000);
    expandable_free(g);
    /* Truncations and the stage count refused; max_bytes counts every stage. */
    for (size_t cut = 0; cut < e.len; cut += 997)
        assert_int_not_equal(decode_buf(&e, cut, &g), SBF_OK);
    struct mem_in r = {.data = e.data, .len = e.len};
    assert_int_equal(expandable_decode(mem_read, &r, info.blocks * 64 - 64, NULL, &g), SBF_ETOOBIG);
    for (uint32_t bad = 0; bad < 12; bad += 11) { /* 0, 11: out of [2, EXP_MAX_STAGES] */
        uint32_t was;
        memcpy(&was, e.data + 12, 4);
        memcpy(e.data + 12, &bad, 4);
        assert_int_equal(decode_buf(&e, SIZE_MAX, &g), SBF_ECORRUPT);
        memcpy(e.data + 12, &was, 4);
    }
    free(e.data);

    /* Union: into a fresh filter of the same parameters (which gains the stages), and
     * refused between filters whose stages differ. */
    struct expandable *u = make(16, 0.01);
    assert_true(expandable_compatible(u, f));
    assert_int_equal(expandable_union(u, f), SBF_OK);
    assert_int_equal(expandable_verify(u), SBF_OK);
    assert_int_equal(count_present(u, 1, 0, n, 1), n);
    struct expandable *other = make(16, 0.01);
    uint32_t other_seen = 0;
    for (uint64_t i = 0; i < 100000; i += B) {
        checkadd_range(other, 3, i, i + B);
        shrink_stages(other, &other_seen, 5, 4); /* other stage sizes than f's */
    }
    assert_true(atomic_load(&other->nstages) > 1);
    assert_false(expandable_compatible(other, f));
    assert_int_equal(expandable_union(other, f), SBF_EINCOMPAT);
    expandable_free(other);
    expandable_free(u);

    /* Delete half of the stored keys (the model as test_delete): the rest stay. */
    const uint64_t m = 200000;
    struct expandable *d = make(16, 0.01);
    bool *stored = calloc(m, sizeof(*stored));
    assert_non_null(stored);
    uint32_t seen = 0;
    for (uint64_t i = 0; i < m; i++) {
        bool present;
        assert_int_equal(expandable_checkadd(d, key(1, i), &present), SBF_OK);
        stored[i] = !present;
        if (i % 1024 == 0)
            shrink_stages(d, &seen, 5, 8);
    }
    expandable_info(d, &info);
    assert_true(info.stages >= 4);
    struct sbf_hash h[B];
    uint64_t deleted = 0, want = 0;
    for (uint64_t i = 0; i < m;) {
        size_t k = 0;
        for (; k < B && i < m; i += 2)
            if (stored[i])
                h[k++] = key(1, i);
        want += k;
        size_t got = 0;
        assert_int_equal(expandable_delete_batch(d, h, k, &got), SBF_OK);
        deleted += got;
    }
    /* A key that also matches another stage stays (see expandable_delete_batch). */
    assert_true(deleted <= want && (double)(want - deleted) <= 0.01 * (double)want);
    assert_int_equal(expandable_verify(d), SBF_OK);
    uint64_t odd = 0, odd_stored = 0, even = 0;
    for (uint64_t i = 0; i < m; i++) {
        bool p = expandable_check(d, key(1, i));
        if (i & 1) {
            odd += p && stored[i];
            odd_stored += stored[i];
        } else {
            even += p;
        }
    }
    print_message("  delete over %u stages: %llu deleted, %llu of %llu kept keys present, "
                  "%llu deleted keys present\n",
                  info.stages, (unsigned long long)deleted, (unsigned long long)odd,
                  (unsigned long long)odd_stored, (unsigned long long)even);
    assert_int_equal(odd, odd_stored);
    assert_true((double)even <= 0.01 * (double)m);
    free(stored);
    expandable_free(d);

    /* Clear: back to one stage. */
    expandable_clear(f);
    expandable_info(f, &info);
    assert_int_equal(info.stages, 1);
    assert_int_equal(info.items, 0);
    assert_int_equal(expandable_verify(f), SBF_OK);
    expandable_free(f);
}

/*
 * A filter of several stages merged into one with keys of its own, then every key of the
 * merged one deleted: no key of the other goes missing. (Removing a key from the oldest
 * stage that matched it took other keys' entries there: 552 of 100,000 were lost.)
 */
static void test_union_then_delete_across_stages(void **state)
{
    (void)state;
    const uint64_t n = 200000, own = 100000;
    struct expandable *src = make(16, 0.01);
    bool *stored = calloc(n, sizeof(*stored));
    assert_non_null(stored);
    uint32_t seen = 0;
    for (uint64_t i = 0; i < n; i++) {
        bool present;
        assert_int_equal(expandable_checkadd(src, key(1, i), &present), SBF_OK);
        stored[i] = !present;
        if (i % 1024 == 0)
            shrink_stages(src, &seen, 5, 8);
    }
    assert_true(atomic_load(&src->nstages) > 2);
    struct expandable *dst = make(16, 0.01);
    checkadd_range(dst, 5, 0, own);
    assert_int_equal(expandable_union(dst, src), SBF_OK);
    uint64_t want = 0, deleted = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (!stored[i])
            continue;
        struct sbf_hash h = key(1, i);
        size_t got = 0;
        assert_int_equal(expandable_delete_batch(dst, &h, 1, &got), SBF_OK);
        deleted += got;
        want++;
    }
    assert_int_equal(expandable_verify(dst), SBF_OK);
    uint64_t kept = count_present(dst, 5, 0, own, 1);
    print_message("  union, then delete over %u stages: %llu of %llu deleted, %llu of %llu "
                  "other keys present\n",
                  atomic_load(&dst->nstages), (unsigned long long)deleted, (unsigned long long)want,
                  (unsigned long long)kept, (unsigned long long)own);
    assert_int_equal(kept, own);
    assert_true((double)(want - deleted) <= 0.01 * (double)want);
    free(stored);
    expandable_free(src);
    expandable_free(dst);
}

/*
 * Issue 27: keys that collide in one cell (the top `level` bits of h.lo fixed; bucket
 * and fingerprint bits random) against as many random keys, each run on a copy of the
 * same filter: the colliding run grows the filter (blocks in use) less than 4x as much,
 * at least 95% of it counts as new, and every key of it reads present.
 */
static void test_colliding_cell(void **state)
{
    (void)state;
    const uint64_t pre = 20000, run = 3000;
    uint64_t growth[2], fresh[2];
    for (int crafted = 0; crafted < 2; crafted++) {
        struct expandable *f = make(pre, 0.01);
        checkadd_range(f, 1, 0, pre);
        struct expandable_info before;
        expandable_info(f, &before);
        uint32_t lv = before.level;
        uint64_t cell = UINT64_C(0x5ad3) % (UINT64_C(1) << lv);
        struct sbf_hash h[3000];
        bool present[3000];
        for (uint64_t i = 0; i < run; i++) {
            h[i] = key(5, i);
            if (crafted)
                h[i].lo = (cell << (64 - lv)) | (h[i].lo >> lv);
        }
        for (uint64_t i = 0; i < run; i += 100)
            assert_int_equal(expandable_checkadd_batch(f, h + i, 100, present + i), SBF_OK);
        fresh[crafted] = 0;
        for (uint64_t i = 0; i < run; i++)
            fresh[crafted] += !present[i];
        expandable_check_batch(f, h, run, present);
        for (uint64_t i = 0; i < run; i++)
            assert_true(present[i]);
        assert_int_equal(count_present(f, 1, 0, pre, 1), pre);
        assert_int_equal(expandable_verify(f), SBF_OK);
        struct expandable_info after;
        expandable_info(f, &after);
        growth[crafted] = after.blocks - before.blocks;
        print_message("  %s: +%llu blocks, +%llu bytes, %llu of %llu new, %u stages, "
                      "stash %u\n",
                      crafted ? "one cell" : "random  ", (unsigned long long)growth[crafted],
                      (unsigned long long)(after.bytes - before.bytes),
                      (unsigned long long)fresh[crafted], (unsigned long long)run, after.stages,
                      after.stash);
        expandable_free(f);
    }
    assert_true(growth[0] > 0);
    assert_true(growth[1] < 4 * growth[0]);
    assert_true(fresh[1] >= run * 95 / 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_block_primitives),
        cmocka_unit_test(test_deterministic_layout),
        cmocka_unit_test(test_single_and_repeats),
        cmocka_unit_test(test_delete),
        cmocka_unit_test(test_union),
        cmocka_unit_test(test_codec_round_trip),
        cmocka_unit_test(test_codec_corruption),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_kind),
        cmocka_unit_test(test_adds_during_encode),
        cmocka_unit_test(test_readers_beside_writer),
        cmocka_unit_test(test_readers_beside_stages),
        cmocka_unit_test(test_growth_1000x),
        cmocka_unit_test(test_release_growth_1000000x),
        cmocka_unit_test(test_release_growth_min_error),
        cmocka_unit_test(test_stages),
        cmocka_unit_test(test_union_then_delete_across_stages),
        cmocka_unit_test(test_colliding_cell),
    };
    if (getenv("TEST_FILTER")) /* e.g. TEST_FILTER='test_union' for one test */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
