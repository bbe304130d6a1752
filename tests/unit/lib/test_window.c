/*
 * test_window.c - the windowed filter against an exact model with a fake clock: no false
 * negative inside a key's window across many rotations, every key forgotten by
 * window·g/(g-1), the false-positive rate at full load and under a 10x burst, downtime,
 * backwards clocks, deferred frees, the codec (round trip, every corruption and
 * truncation) and the kind table. Fixed seeds; margins stated at each bound.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/container.h"
#include "lib/kind.h"
#include "lib/window.h"
#include "tests/unit/lib/memio.h"

#define T0 INT64_C(1767225600000) /* 2026-01-01, Unix ms */

static struct sbf_hash key(uint64_t ns, uint64_t i)
{
    uint64_t v[2] = {ns, i};
    return sbf_hash_key(v, sizeof(v));
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static struct window *make(uint64_t capacity, double error, uint64_t window_ms, uint32_t g,
                           int64_t now)
{
    struct window_params p;
    sbf_params_default(&p.sbf);
    p.sbf.capacity = capacity;
    p.sbf.error = error;
    p.sbf.ratio = WINDOW_DEFAULT_RATIO;
    p.window_ms = window_ms;
    p.generations = g;
    struct window *w = NULL;
    assert_int_equal(window_new(&p, now, NULL, &w), SBF_OK);
    assert_int_equal(window_verify(w), SBF_OK);
    return w;
}

static void advance(struct window *w, int64_t now)
{
    assert_int_equal(window_advance(w, now, NULL, NULL), SBF_OK);
}

static bool has(const struct window *w, struct sbf_hash h)
{
    bool p;
    window_check_batch(w, &h, 1, &p);
    return p;
}

/* Counts present keys ns:[from, to). */
static uint64_t count_present(const struct window *w, uint64_t ns, uint64_t from, uint64_t to)
{
    struct sbf_hash h[128];
    bool p[128];
    uint64_t n = 0;
    for (uint64_t i = from; i < to;) {
        size_t m = 0;
        for (; m < 128 && i < to; m++, i++)
            h[m] = key(ns, i);
        window_check_batch(w, h, m, p);
        for (size_t j = 0; j < m; j++)
            n += p[j];
    }
    return n;
}

static void add_range(struct window *w, uint64_t ns, uint64_t from, uint64_t to)
{
    struct sbf_hash h[100];
    for (uint64_t i = from; i < to;) {
        size_t m = 0, added;
        for (; m < 100 && i < to; m++, i++)
            h[m] = key(ns, i);
        assert_int_equal(window_add_batch(w, h, m, &added), SBF_OK);
    }
}

static void test_params(void **state)
{
    (void)state;
    struct window_params p;
    sbf_params_default(&p.sbf);
    p.window_ms = 3600000;
    p.generations = 4;
    assert_int_equal(window_params_check(&p), SBF_OK);
    struct sbf_params gp;
    window_generation_params(&p, &gp);
    assert_int_equal(gp.capacity, 33334); /* ceil(100000 / 3) */
    assert_true(gp.error == 0.01 / 4);

    struct window *w = NULL;
    const uint32_t bad_g[] = {0, 1, 17, 1000};
    for (size_t i = 0; i < 4; i++) {
        struct window_params q = p;
        q.generations = bad_g[i];
        assert_int_equal(window_new(&q, T0, NULL, &w), SBF_EINVAL);
    }
    const uint64_t bad_w[] = {0, 999, (uint64_t)WINDOW_MAX_MS + 1, UINT64_MAX};
    for (size_t i = 0; i < 4; i++) {
        struct window_params q = p;
        q.window_ms = bad_w[i];
        assert_int_equal(window_new(&q, T0, NULL, &w), SBF_EINVAL);
    }
    struct window_params q = p;
    q.sbf.capacity = 0;
    assert_int_equal(window_new(&q, T0, NULL, &w), SBF_EINVAL);
    q = p;
    q.sbf.error = 1.0;
    assert_int_equal(window_new(&q, T0, NULL, &w), SBF_EINVAL);
    assert_int_equal(window_new(&p, -1, NULL, &w), SBF_EINVAL);
    assert_int_equal(window_new(&p, WINDOW_MAX_TIME + 1, NULL, &w), SBF_EINVAL);
    assert_int_equal(window_new(&p, 0, NULL, &w), SBF_OK);
    window_free(w);
    window_free(NULL);

    /* Span starts: epoch + floor(i·W/(g-1)), exact over long times. */
    p.window_ms = 1000;
    p.generations = 4; /* spans of 333.33 ms */
    assert_int_equal(window_span_start(&p, 5, 0), 5);
    assert_int_equal(window_span_start(&p, 5, 1), 5 + 333);
    assert_int_equal(window_span_start(&p, 5, 2), 5 + 666);
    assert_int_equal(window_span_start(&p, 5, 3), 5 + 1000);
    assert_int_equal(window_span_start(&p, 5, 3000001), 5 + 1000000333);
}

/*
 * The model: keys added at random times from a fake clock moving by random steps (some
 * longer than a span), each key's first sighting recorded. At every step, each key still
 * inside its window must be present, and each key past window·g/(g-1) counts toward the
 * false-positive tally. W = 60 s, g = 4: rotation every 20 s, ~150 rotations.
 */
#define MODEL_KEYS 60000u
static void test_model_windows(void **state)
{
    (void)state;
    const uint64_t W = 60000;
    const uint32_t g = 4;
    const int64_t forget = (int64_t)(W * g / (g - 1)); /* 80 s, exact here */
    static int64_t first[MODEL_KEYS];
    struct window *w = make(3000, 0.01, W, g, T0);
    uint64_t seed = 11, nkeys = 0, expired_checks = 0, expired_hits = 0, live_checks = 0;
    int64_t now = T0;
    for (int step = 0; step < 3000 && nkeys < MODEL_KEYS; step++) {
        now += (int64_t)(rng_next(&seed) % (step % 97 == 0 ? 45000 : 2000));
        advance(w, now);
        /* New keys and repeats of old ones (a repeat must not extend life). */
        for (int j = 0; j < 20 && nkeys < MODEL_KEYS; j++) {
            uint64_t i =
                (rng_next(&seed) % 4 == 0 && nkeys > 0) ? rng_next(&seed) % nkeys : nkeys++;
            bool present;
            struct sbf_hash h = key(1, i);
            assert_int_equal(window_checkadd_batch(w, &h, 1, &present), SBF_OK);
            if (first[i] == 0 || now - first[i] >= forget) {
                /* New to the model (or forgotten): it now counts from here, unless a false
                 * positive kept it from being added, which the model cannot know. */
                if (!present)
                    first[i] = now;
            } else {
                assert_true(present || now - first[i] >= (int64_t)W);
                if (now - first[i] >= (int64_t)W && !present)
                    first[i] = now; /* forgotten early is allowed past W */
            }
        }
        if (step % 10 != 0)
            continue;
        for (uint64_t i = 0; i < nkeys; i++) {
            if (first[i] == 0 || now - first[i] >= 2 * forget)
                continue; /* long forgotten: enough of them are checked below 2x */
            int64_t age = now - first[i];
            if (age < (int64_t)W) {
                live_checks++;
                if (!has(w, key(1, i)))
                    fail_msg("key %llu added at +%lld ms missing at age %lld ms",
                             (unsigned long long)i, (long long)(first[i] - T0), (long long)age);
            } else if (age >= forget) {
                expired_checks++;
                expired_hits += has(w, key(1, i));
            }
        }
        assert_int_equal(window_verify(w), SBF_OK);
    }
    assert_true(live_checks > 100000 && expired_checks > 100000);
    /* Forgotten keys are absent keys: hits are false positives, promised <= 1%. The union
     * of 4 generations at 1/4 each is ~0.5% at this load; 1% is > 20 sigma above. */
    double fpr = (double)expired_hits / (double)expired_checks;
    print_message("live checks %llu, expired checks %llu, expired present %.5f\n",
                  (unsigned long long)live_checks, (unsigned long long)expired_checks, fpr);
    assert_true(fpr <= 0.01);
    window_free(w);
}

/* Forgetting exactly on schedule: a key added at t is gone from t + W·g/(g-1) on. */
static void test_forget_schedule(void **state)
{
    (void)state;
    const uint64_t W = 30000;
    struct window *w = make(3000, 0.001, W, 3, T0); /* spans of 15 s */
    for (int64_t t = 0; t < 15000; t += 1000) {     /* keys all over the first span */
        advance(w, T0 + t);
        add_range(w, 2, (uint64_t)t, (uint64_t)t + 100);
    }
    /* Every key is still there just before t + W for the latest t (14 s): at 43.999 s. */
    advance(w, T0 + 14000 + (int64_t)W - 1);
    for (int64_t t = 0; t < 15000; t += 1000)
        assert_int_equal(count_present(w, 2, (uint64_t)t, (uint64_t)t + 100), 100);
    /* All added in span 0 [0, 15 s): dropped at 45 s = the start of span 3. */
    advance(w, T0 + 44999);
    assert_int_equal(count_present(w, 2, 0, 100), 100);
    advance(w, T0 + 45000);
    uint64_t left = 0;
    for (int64_t t = 0; t < 15000; t += 1000)
        left += count_present(w, 2, (uint64_t)t, (uint64_t)t + 100);
    /* 1500 absent keys at <= 0.1%: more than 5 false positives is > 4 sigma. */
    assert_true(left <= 5);
    struct window_info info;
    window_info(w, &info);
    assert_int_equal(info.live, 2); /* spans 2 and 3: span 1 never had a generation */
    window_free(w);
}

/* A repeat inside the window does not extend a key's life. */
static void test_repeat_does_not_extend(void **state)
{
    (void)state;
    const uint64_t W = 60000;
    struct window *w = make(1000, 0.001, W, 4, T0);
    bool p[200];
    struct sbf_hash h[200];
    for (uint64_t i = 0; i < 200; i++)
        h[i] = key(3, i);
    assert_int_equal(window_checkadd_batch(w, h, 200, p), SBF_OK);
    int fresh = 0;
    for (int i = 0; i < 200; i++)
        fresh += !p[i];
    assert_true(fresh >= 198); /* new keys: absent but for false positives */
    for (int64_t t = 1000; t < (int64_t)W; t += 1000) { /* seen again every second */
        advance(w, T0 + t);
        assert_int_equal(window_checkadd_batch(w, h, 200, p), SBF_OK);
        for (int i = 0; i < 200; i++)
            assert_true(p[i]);
    }
    advance(w, T0 + 80000); /* 60 s · 4/3 after the first sighting */
    window_check_batch(w, h, 200, p);
    int still = 0;
    for (int i = 0; i < 200; i++)
        still += p[i];
    assert_true(still <= 2); /* 200 absent keys at 0.1%: > 2 is > 4 sigma */
    window_free(w);
}

/* Rate of n never-added keys reported present. */
static double fpr_of(const struct window *w, uint64_t n)
{
    return (double)count_present(w, 99, 0, n) / (double)n;
}

/*
 * Every generation filled to its planned load just before a rotation (the peak: g full
 * generations), then 10x the rate: the measured rate stays within error either way.
 */
static void load_fpr(uint64_t rate_factor, double error)
{
    const uint64_t C = 30000, W = 60000;
    const uint32_t g = 4;
    struct window *w = make(C, error, W, g, T0);
    uint64_t per_span = C / (g - 1) * rate_factor, next = 0;
    for (uint32_t s = 0; s < g; s++) {
        advance(w, window_span_start(window_params(w), T0, s));
        add_range(w, 4, next, next + per_span);
        next += per_span;
    }
    struct window_info info;
    window_info(w, &info);
    assert_int_equal(info.live, g);
    /* A key a false positive shows as present is not added: items may fall short by the
     * false positives of adding, well under 1% of them. */
    assert_true(info.items <= per_span * g && info.items >= per_span * g * 99 / 100);
    assert_int_equal(count_present(w, 4, 0, next), next);
    double fpr = fpr_of(w, 400000);
    print_message("x%llu load, error %g: %u stages, %.2f bytes per key held, fpr %.5f\n",
                  (unsigned long long)rate_factor, error, info.stages,
                  (double)info.bytes / (double)info.items, fpr);
    if (rate_factor > 1)
        assert_true(info.stages > 1);
    /* 400000 absent keys: at 1% the standard deviation is 0.016%, so a filter truly at
     * error would fail this with odds of 1/2; the sizing leaves it near error/2 (for
     * r = 0.5 the first stage of each generation gets error/(2g)): > 30 sigma apart. */
    assert_true(fpr <= error);
    window_free(w);
}

static void test_fpr_full_load(void **state)
{
    (void)state;
    load_fpr(1, 0.01);
    load_fpr(1, 0.001);
}

static void test_fpr_burst(void **state)
{
    (void)state;
    load_fpr(10, 0.01);
}

/* Deferred frees: dropped generations go to the callback, and only its release frees. */
struct retired {
    void (*release[64])(void *);
    void *mem[64];
    int n;
};

static void retire(void *ctx, void (*release)(void *), void *mem)
{
    struct retired *r = ctx;
    assert_true(r->n < 64);
    r->release[r->n] = release;
    r->mem[r->n++] = mem;
}

struct budget {
    size_t used;
};

static bool reserve(void *ctx, size_t bytes)
{
    ((struct budget *)ctx)->used += bytes;
    return true;
}

static void release_bytes(void *ctx, size_t bytes)
{
    ((struct budget *)ctx)->used -= bytes;
}

static void test_retire_and_memory(void **state)
{
    (void)state;
    struct budget b = {0};
    struct sbf_budget sb = {.reserve = reserve, .release = release_bytes, .ctx = &b};
    struct window_params p;
    sbf_params_default(&p.sbf);
    p.sbf.capacity = 3000;
    p.window_ms = 60000;
    p.generations = 4;
    struct window *w = NULL;
    assert_int_equal(window_new(&p, T0, &sb, &w), SBF_OK);
    struct retired r = {0};
    size_t one = b.used;
    /* Steady stream over 10 windows (30 spans): memory flat at g generations. */
    for (int s = 1; s <= 30; s++) {
        add_range(w, 5, (uint64_t)s * 1000, (uint64_t)s * 1000 + 1000);
        assert_int_equal(window_advance(w, window_span_start(&p, T0, (uint64_t)s), retire, &r),
                         SBF_OK);
        struct window_info info;
        window_info(w, &info);
        assert_int_equal(info.live, s < 4 ? s + 1 : 4);
        assert_int_equal(info.bytes, one * info.live);
        assert_int_equal(r.n, s < 4 ? 0 : s - 3);
    }
    /* Retired memory is still counted until released, then it is given back. */
    assert_int_equal(b.used, one * (4 + 27));
    for (int i = 0; i < r.n; i++)
        r.release[i](r.mem[i]);
    assert_int_equal(b.used, one * 4);
    /* A jump past everything drops all, retired in one call. */
    r.n = 0;
    assert_int_equal(window_advance(w, T0 + 10000000, retire, &r), SBF_OK);
    assert_int_equal(r.n, 4);
    for (int i = 0; i < r.n; i++)
        r.release[i](r.mem[i]);
    assert_int_equal(b.used, one);
    window_free(w);
    assert_int_equal(b.used, 0);
}

/* A budget that refuses: advance drops what expired, adds fail until memory comes back. */
static bool refuse(void *ctx, size_t bytes)
{
    (void)bytes;
    return !*(bool *)ctx;
}

static void test_advance_enomem(void **state)
{
    (void)state;
    bool refusing = false;
    struct sbf_budget sb = {.reserve = refuse, .ctx = &refusing};
    struct window_params p;
    sbf_params_default(&p.sbf);
    p.sbf.capacity = 300;
    p.window_ms = 3000;
    p.generations = 4;
    struct window *w = NULL;
    assert_int_equal(window_new(&p, T0, &sb, &w), SBF_OK);
    add_range(w, 6, 0, 100);
    refusing = true;
    assert_int_equal(window_advance(w, T0 + 1000, NULL, NULL), SBF_ENOMEM);
    assert_int_equal(count_present(w, 6, 0, 100), 100); /* the old one still answers */
    struct sbf_hash h = key(6, 1000);
    size_t added = 7;
    assert_int_equal(window_add_batch(w, &h, 1, &added), SBF_ENOMEM);
    assert_int_equal(added, 0);
    assert_int_equal(window_verify(w), SBF_OK);
    refusing = false;
    assert_int_equal(window_add_batch(w, &h, 1, &added), SBF_OK); /* retried */
    assert_int_equal(added, 1);
    struct window_info info;
    window_info(w, &info);
    assert_int_equal(info.live, 2);
    window_free(w);
}

/* A clock that goes back changes nothing; the schedule is the same as without it. */
static void test_backwards_clock(void **state)
{
    (void)state;
    const uint64_t W = 60000;
    struct window *a = make(3000, 0.01, W, 4, T0), *b = make(3000, 0.01, W, 4, T0);
    const int64_t times[] = {5000, 25000, -3600000, 1000, 30000, 41000, 2000, 64000, 81000};
    for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
        advance(a, T0 + times[i]);
        if (times[i] >= 0 && (i == 0 || times[i] > times[i - 1]))
            advance(b, T0 + times[i]);
        add_range(a, 7, i * 100, i * 100 + 100);
        add_range(b, 7, i * 100, i * 100 + 100);
        struct window_gen ga[WINDOW_MAX_GENERATIONS], gb[WINDOW_MAX_GENERATIONS];
        uint32_t na = window_generations(a, ga), nb = window_generations(b, gb);
        assert_int_equal(na, nb);
        for (uint32_t c = 0; c < na; c++) {
            assert_int_equal(ga[c].span, gb[c].span);
            assert_int_equal(ga[c].start_ms, gb[c].start_ms);
            assert_int_equal(ga[c].items, gb[c].items);
        }
    }
    /* Going back before the epoch, even to 0 or negative times, is ignored too. */
    struct window_info before, after;
    window_info(a, &before);
    advance(a, 0);
    advance(a, -5);
    advance(a, INT64_MIN);
    window_info(a, &after);
    assert_memory_equal(&before, &after, sizeof(before));
    window_free(a);
    window_free(b);
}

/* ---- codec ---- */

static struct mem_out encode(const struct window *w)
{
    struct mem_out o = {0};
    assert_int_equal(window_encode(w, mem_write, &o), SBF_OK);
    assert_int_equal(o.len, window_encoded_size(w));
    return o;
}

static int decode(const struct mem_out *o, size_t len, size_t step, uint64_t max_bytes,
                  struct window **w)
{
    struct mem_in r = {.data = o->data, .len = len, .step = step};
    *w = NULL;
    return window_decode(mem_read, &r, max_bytes, NULL, w);
}

/* Three live generations, the newest grown to three stages. */
static struct window *small_window(void)
{
    struct window *w = make(30, 0.1, 3000, 3, T0); /* 15 keys a generation */
    add_range(w, 8, 0, 10);
    advance(w, T0 + 1500);
    add_range(w, 8, 10, 20);
    advance(w, T0 + 3000);
    add_range(w, 8, 20, 90);
    struct window_info info;
    window_info(w, &info);
    assert_int_equal(info.live, 3);
    assert_int_equal(info.stages, 3);
    return w;
}

static void test_codec_round_trip(void **state)
{
    (void)state;
    struct window *w = small_window();
    struct mem_out o = encode(w);
    const size_t steps[] = {1, 7, 4096, SIZE_MAX};
    for (size_t s = 0; s < 4; s++) {
        struct window *d;
        assert_int_equal(decode(&o, o.len, steps[s], UINT64_MAX, &d), SBF_OK);
        assert_int_equal(window_verify(d), SBF_OK);
        assert_true(window_compatible(w, d));
        assert_int_equal(count_present(d, 8, 0, 90), 90);
        struct window_gen ga[WINDOW_MAX_GENERATIONS], gb[WINDOW_MAX_GENERATIONS];
        uint32_t na = window_generations(w, ga);
        assert_int_equal(window_generations(d, gb), na);
        for (uint32_t c = 0; c < na; c++) {
            assert_int_equal(ga[c].span, gb[c].span);
            assert_int_equal(ga[c].start_ms, gb[c].start_ms);
            assert_int_equal(ga[c].items, gb[c].items);
            assert_int_equal(ga[c].bytes, gb[c].bytes);
            assert_int_equal(ga[c].stages, gb[c].stages);
        }
        struct mem_out again = encode(d);
        assert_int_equal(again.len, o.len);
        assert_memory_equal(again.data, o.data, o.len);
        free(again.data);
        /* The decoded filter keeps its schedule: the first span drops at 4.5 s. */
        advance(d, T0 + 4499);
        assert_int_equal(count_present(d, 8, 0, 10), 10);
        advance(d, T0 + 4500);
        window_free(d);
    }
    /* An empty window (every generation dropped, the new one refused) round-trips too. */
    free(o.data);
    window_free(w);
}

/* After a downtime: shorter than the window, keys stay; longer, the filter is empty. */
static void test_codec_downtime(void **state)
{
    (void)state;
    const uint64_t W = 60000;
    struct window *w = make(3000, 0.01, W, 4, T0);
    add_range(w, 9, 0, 1000);
    struct mem_out o = encode(w);
    window_free(w);

    struct window *d;
    assert_int_equal(decode(&o, o.len, SIZE_MAX, UINT64_MAX, &d), SBF_OK);
    advance(d, T0 + (int64_t)W - 1);
    assert_int_equal(count_present(d, 9, 0, 1000), 1000);
    window_free(d);

    assert_int_equal(decode(&o, o.len, SIZE_MAX, UINT64_MAX, &d), SBF_OK);
    advance(d, T0 + 86400000); /* a day later */
    struct window_info info;
    window_info(d, &info);
    assert_int_equal(info.live, 1);
    assert_int_equal(info.items, 0);
    assert_true(count_present(d, 9, 0, 1000) <= 5); /* 1000 absent at ~0.5%: > 4 sigma */
    assert_int_equal(window_verify(d), SBF_OK);
    /* And it takes keys again on the same schedule. */
    add_range(d, 9, 5000, 5100);
    assert_int_equal(count_present(d, 9, 5000, 5100), 100);
    window_free(d);
    free(o.data);
}

static void test_codec_every_corruption(void **state)
{
    (void)state;
    struct window *w = small_window();
    struct mem_out o = encode(w);
    window_free(w);
    /* Every value of every byte of the header and table (80 + 3·24); elsewhere (the sbf
     * streams and checksum) the low bit, high bit and all bits. */
    const unsigned flips[] = {0x01, 0x80, 0xff};
    size_t tried = 0;
    for (size_t i = 0; i < o.len; i++) {
        size_t nv = i < 80 + 3 * 24 ? 255 : 3;
        for (size_t j = 0; j < nv; j++) {
            unsigned x = nv == 255 ? (unsigned)j + 1 : flips[j];
            o.data[i] ^= (unsigned char)x;
            struct window *d;
            int rc = decode(&o, o.len, SIZE_MAX, 1u << 20, &d);
            if (rc == SBF_OK)
                fail_msg("byte %zu ^ 0x%02x accepted", i, x);
            assert_null(d);
            o.data[i] ^= (unsigned char)x;
            tried++;
        }
    }
    print_message("%zu corruptions of %zu bytes rejected\n", tried, o.len);
    assert_true(tried > 0);
    free(o.data);
}

static void test_codec_truncation_and_limits(void **state)
{
    (void)state;
    struct window *w = small_window();
    struct mem_out o = encode(w);
    struct window_info info;
    window_info(w, &info);
    window_free(w);
    struct window *d;
    for (size_t len = 0; len < o.len; len++) {
        assert_int_not_equal(decode(&o, len, 13, 1u << 20, &d), SBF_OK);
        assert_null(d);
    }
    assert_int_equal(mem_write(&o, "", 1), 0); /* one byte too many */
    assert_int_equal(decode(&o, o.len, SIZE_MAX, UINT64_MAX, &d), SBF_ECORRUPT);
    o.len--;
    assert_int_equal(decode(&o, o.len, SIZE_MAX, info.bytes - 1, &d), SBF_ETOOBIG);
    assert_null(d);
    assert_int_equal(decode(&o, o.len, SIZE_MAX, info.bytes, &d), SBF_OK);
    window_free(d);
    o.data[8] = 2;
    assert_int_equal(decode(&o, o.len, SIZE_MAX, UINT64_MAX, &d), SBF_EVERSION);
    o.data[8] = 1;
    o.data[0] = 'X';
    assert_int_equal(decode(&o, o.len, SIZE_MAX, UINT64_MAX, &d), SBF_ECORRUPT);
    free(o.data);
}

/* ---- the kind table ---- */

struct fields {
    char names[128][24];
    uint64_t u[128];
    int n;
};

static void field(void *ctx, const char *name, enum kind_field_type type, uint64_t u, double d,
                  const char *s)
{
    (void)type;
    (void)d;
    (void)s;
    struct fields *f = ctx;
    assert_true(f->n < 128 && strlen(name) < 24);
    strcpy(f->names[f->n], name);
    f->u[f->n++] = u;
}

static uint64_t field_u(const struct fields *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->names[i], name) == 0)
            return f->u[i];
    fail_msg("no field %s", name);
    return 0;
}

static const struct kind_ops *find_kind(void *ctx, uint32_t tag)
{
    (void)ctx;
    return tag == KIND_TAG_WINDOW ? &kind_window : tag == KIND_TAG_SBF ? &kind_sbf : NULL;
}

static void test_kind_table(void **state)
{
    (void)state;
    const struct kind_ops *k = &kind_window;
    assert_string_equal(k->name, "window");
    assert_int_equal(k->tag, 2);
    assert_null(k->merge);
    assert_null(k->intersect);
    struct kind_params p = {.window_ms = 60000, .generations = 0, .now_ms = T0};
    sbf_params_default(&p.sbf);
    p.sbf.capacity = 3000;
    void *f = NULL;
    assert_int_equal(kind_sbf.create(&p, NULL, &f), SBF_EINVAL); /* sbf refuses a window */
    p.window_ms = 0;
    assert_int_equal(k->create(&p, NULL, &f), SBF_EINVAL);
    p.window_ms = 60000;
    assert_int_equal(k->create(&p, NULL, &f), SBF_OK);
    assert_int_equal(window_params(f)->generations, 4);

    struct sbf_hash h[50];
    bool present[50];
    for (uint64_t i = 0; i < 50; i++)
        h[i] = key(10, i);
    assert_int_equal(k->checkadd_batch(f, h, 50, present), SBF_OK);
    assert_int_equal(k->advance(f, T0 + 20000, NULL, NULL), SBF_OK);
    size_t added;
    assert_int_equal(k->add_batch(f, h, 50, &added), SBF_OK);
    assert_int_equal(added, 0); /* already in a live generation */
    k->check_batch(f, h, 50, present);
    for (int i = 0; i < 50; i++)
        assert_true(present[i]);
    assert_int_equal(k->verify(f), SBF_OK);
    assert_false(k->grown(f));

    struct kind_info info;
    k->info(f, &info);
    assert_int_equal(info.items, 50);
    assert_true(info.error == 0.01);
    struct fields fl = {0};
    struct sbf_estimate est;
    k->estimate(f, &est);
    assert_true(est.items > 40 && est.items < 60);
    k->fields(f, &est, field, &fl);
    const char *want[] = {
        "window",     "generations",  "generation_span", "capacity",        "generation_capacity",
        "error",      "growth",       "scale",           "ratio",           "live_generations",
        "bytes",      "items",        "estimated_items", "estimated_error", "gen0_start",
        "gen0_items", "gen0_bytes",   "gen0_capacity",   "gen1_start",      "gen1_items",
        "gen1_bytes", "gen1_capacity"};
    size_t nwant = sizeof want / sizeof want[0];
    assert_int_equal(fl.n, nwant);
    for (size_t i = 0; i < nwant; i++)
        assert_string_equal(fl.names[i], want[i]);
    /* One capacity, the one given (per window), in INFO and in the kind's info (LIST,
     * /api, the page); per-generation figures are named so. */
    assert_int_equal(info.capacity, field_u(&fl, "capacity"));
    assert_int_equal(info.capacity, 3000);
    assert_int_equal(field_u(&fl, "generation_capacity"), 1000); /* g = 4: 3000 / (g - 1) */
    assert_true(field_u(&fl, "gen0_capacity") >= field_u(&fl, "generation_capacity"));
    assert_int_equal(field_u(&fl, "window"), 60000);
    assert_int_equal(field_u(&fl, "generation_span"), 20000);
    assert_int_equal(field_u(&fl, "gen0_start"), T0 + 20000);
    assert_int_equal(field_u(&fl, "gen1_start"), T0);
    assert_int_equal(field_u(&fl, "gen0_items"), 0);
    assert_int_equal(field_u(&fl, "gen1_items"), 50);

    /* Through the snapshot container and back. */
    struct mem_out o = {0};
    assert_int_equal(container_encode(k, f, 42, 0, mem_write, &o), SBF_OK);
    assert_int_equal(o.len, container_encoded_size(k, f));
    struct mem_in r = {.data = o.data, .len = o.len};
    const struct kind_ops *ko;
    void *g;
    struct container_header hdr;
    assert_int_equal(
        container_decode(mem_read, &r, find_kind, NULL, UINT64_MAX, NULL, &ko, &g, &hdr), SBF_OK);
    assert_ptr_equal(ko, k);
    assert_int_equal(hdr.tag, KIND_TAG_WINDOW);
    assert_int_equal(hdr.journal_pos, 42);
    assert_true(k->compatible(f, g));
    k->check_batch(g, h, 50, present);
    for (int i = 0; i < 50; i++)
        assert_true(present[i]);

    void *l;
    assert_int_equal(k->create_like(f, NULL, &l), SBF_OK);
    k->check_batch(l, h, 50, present);
    assert_true(k->compatible(f, l));
    struct window_gen gl[WINDOW_MAX_GENERATIONS];
    assert_int_equal(window_generations(l, gl), 1);
    assert_int_equal(gl[0].start_ms, T0 + 20000); /* same schedule */

    k->clear(g);
    k->info(g, &info);
    assert_int_equal(info.items, 0);
    assert_int_equal(k->verify(g), SBF_OK);
    k->free(l);
    k->free(g);
    k->free(f);
    k->free(NULL);
    free(o.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_model_windows),
        cmocka_unit_test(test_forget_schedule),
        cmocka_unit_test(test_repeat_does_not_extend),
        cmocka_unit_test(test_fpr_full_load),
        cmocka_unit_test(test_fpr_burst),
        cmocka_unit_test(test_retire_and_memory),
        cmocka_unit_test(test_advance_enomem),
        cmocka_unit_test(test_backwards_clock),
        cmocka_unit_test(test_codec_round_trip),
        cmocka_unit_test(test_codec_downtime),
        cmocka_unit_test(test_codec_every_corruption),
        cmocka_unit_test(test_codec_truncation_and_limits),
        cmocka_unit_test(test_kind_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
