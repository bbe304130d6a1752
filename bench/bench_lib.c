/*
 * bench_lib.c - micro-benchmark of the filter library (`make bench-lib`): for 10M and
 * 100M keys at 1% error, a right-sized filter and one grown 10x from a tenth of the
 * capacity. Prints ns per key (hash included) for add, check and check-and-add as a
 * single-key loop and in batches, bits per key, the measured false-positive rate and the
 * ratio to an ideal standard Bloom filter at that same rate. Then the windowed filter
 * (window=1h, generations=4, 1%, sized for one window's keys) against the plain filter in
 * the same run, and a simulated click stream over 10 windows. Times are the thread's CPU
 * time, so other load on the shared machine distorts them less than wall time.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "lib/sbf.h"
#include "lib/window.h"

#define BATCH 256
#define QUERIES 2000000ull /* check queries per mode */
#define SAMPLE 1000000ull  /* new keys timed per insert mode */
#define ABSENT 1000000ull  /* never-added keys for the false-positive rate */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static struct sbf_hash key(uint64_t ns, uint64_t i)
{
    uint64_t v[2] = {ns, i};
    return sbf_hash_key(v, sizeof(v));
}

/* The i-th query of a check: alternately a random added key and a never-added one. */
static struct sbf_hash query(uint64_t n, uint64_t i)
{
    uint64_t x = (i + 1) * UINT64_C(0x9e3779b97f4a7c15);
    x ^= x >> 31;
    return i & 1 ? key(2, i) : key(1, x % n);
}

enum op { OP_ADD, OP_CHECKADD };

/* Inserts keys [from, to) of namespace 1; returns ns per key. */
static double insert(struct sbf *f, enum op op, bool batched, uint64_t from, uint64_t to)
{
    static struct sbf_hash h[BATCH];
    static bool present[BATCH];
    double t0 = now();
    if (!batched) {
        for (uint64_t i = from; i < to; i++) {
            bool b;
            int rc = op == OP_ADD ? sbf_add(f, key(1, i), &b) : sbf_checkadd(f, key(1, i), &b);
            if (rc != SBF_OK) {
                fprintf(stderr, "bench_lib: %s\n", sbf_strerror(rc));
                exit(1);
            }
        }
    } else {
        for (uint64_t i = from; i < to;) {
            size_t n = 0, added;
            for (; n < BATCH && i < to; n++, i++)
                h[n] = key(1, i);
            int rc = op == OP_ADD ? sbf_add_batch(f, h, n, &added)
                                  : sbf_checkadd_batch(f, h, n, present);
            if (rc != SBF_OK) {
                fprintf(stderr, "bench_lib: %s\n", sbf_strerror(rc));
                exit(1);
            }
        }
    }
    return (now() - t0) * 1e9 / (double)(to - from);
}

/* Checks QUERIES mixed keys; returns ns per key. sink keeps the work observable. */
static double check(const struct sbf *f, uint64_t n, bool batched, uint64_t *sink)
{
    static struct sbf_hash h[BATCH];
    static bool present[BATCH];
    double t0 = now();
    if (!batched) {
        for (uint64_t i = 0; i < QUERIES; i++)
            *sink += sbf_check(f, query(n, i));
    } else {
        for (uint64_t i = 0; i < QUERIES;) {
            size_t m = 0;
            for (; m < BATCH && i < QUERIES; m++, i++)
                h[m] = query(n, i);
            sbf_check_batch(f, h, m, present);
            for (size_t j = 0; j < m; j++)
                *sink += present[j];
        }
    }
    return (now() - t0) * 1e9 / (double)QUERIES;
}

static void scenario(const char *name, uint64_t n, uint64_t capacity)
{
    struct sbf_params p;
    sbf_params_default(&p);
    p.capacity = capacity;
    struct sbf *f = NULL;
    double t0 = now();
    if (sbf_new(&p, NULL, &f) != SBF_OK) {
        fprintf(stderr, "bench_lib: cannot create %s\n", name);
        exit(1);
    }
    double create_ms = (now() - t0) * 1e3;

    /* Fill without timing, then time each insert mode on SAMPLE new keys as the filter
     * reaches n keys, so every mode runs against a filter of about the final size. */
    uint64_t at = n - 4 * SAMPLE;
    insert(f, OP_ADD, true, 0, at);
    double add1 = insert(f, OP_ADD, false, at, at + SAMPLE);
    double addb = insert(f, OP_ADD, true, at + SAMPLE, at + 2 * SAMPLE);
    double ca1 = insert(f, OP_CHECKADD, false, at + 2 * SAMPLE, at + 3 * SAMPLE);
    double cab = insert(f, OP_CHECKADD, true, at + 3 * SAMPLE, n);

    uint64_t sink = 0;
    double chk1 = check(f, n, false, &sink);
    double chkb = check(f, n, true, &sink);

    uint64_t fps = 0;
    for (uint64_t i = 0; i < ABSENT; i++)
        fps += sbf_check(f, key(3, i));
    double fp = (double)fps / (double)ABSENT;

    struct sbf_info info;
    sbf_info(f, &info);
    double bpk = (double)info.bytes * 8.0 / (double)n;
    double ideal = fps ? -log(fp) / (log(2.0) * log(2.0)) : NAN;
    printf("%-14s %5.0fM %2u %6.2f %7.4f%% %6.2f %5.2fx | %6.1f %6.1f | %6.1f %6.1f %5.2fx | "
           "%6.1f %6.1f | %7.1f\n",
           name, (double)n / 1e6, info.stages, bpk, fp * 100.0, ideal, bpk / ideal, add1, addb,
           chk1, chkb, chk1 / chkb, ca1, cab, create_ms);
    if (sink == 0)
        printf("(no key found?)\n");
    sbf_free(f);
}

#define WIN_MS 3600000 /* window=1h */
#define WIN_G 4
#define WIN_BATCH 100 /* keys per CHECKADD line */

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_lib: %s: %s\n", what, sbf_strerror(rc));
    exit(1);
}

static struct window *window_make(uint64_t capacity, int64_t t0)
{
    struct window_params p;
    sbf_params_default(&p.sbf);
    p.sbf.capacity = capacity;
    p.sbf.ratio = WINDOW_DEFAULT_RATIO;
    p.window_ms = WIN_MS;
    p.generations = WIN_G;
    struct window *w = NULL;
    int rc = window_new(&p, t0, NULL, &w);
    if (rc != SBF_OK)
        die("window_new", rc);
    return w;
}

/*
 * CHECKADD of keys ns:[from, to) in 100-key batches, the clock moving so that `per_ms`
 * keys arrive each simulated millisecond... expressed as keys per window: time of key i
 * is t0 + i * WIN_MS / per_window. Returns ns per key.
 */
static double window_feed(struct window *w, uint64_t ns, uint64_t from, uint64_t to, int64_t t0,
                          uint64_t per_window)
{
    static struct sbf_hash h[WIN_BATCH];
    static bool present[WIN_BATCH];
    double start = now();
    for (uint64_t i = from; i < to;) {
        int64_t t = t0 + (int64_t)((double)i * WIN_MS / (double)per_window);
        int rc = window_advance(w, t, NULL, NULL);
        if (rc != SBF_OK)
            die("window_advance", rc);
        size_t n = 0;
        for (; n < WIN_BATCH && i < to; n++, i++)
            h[n] = key(ns, i);
        rc = window_checkadd_batch(w, h, n, present);
        if (rc != SBF_OK)
            die("window_checkadd_batch", rc);
    }
    return (now() - start) * 1e9 / (double)(to - from);
}

static double window_fpr(const struct window *w, uint64_t n)
{
    static struct sbf_hash h[WIN_BATCH];
    static bool present[WIN_BATCH];
    uint64_t fps = 0;
    for (uint64_t i = 0; i < n;) {
        size_t m = 0;
        for (; m < WIN_BATCH && i < n; m++, i++)
            h[m] = key(7, i);
        window_check_batch(w, h, m, present);
        for (size_t j = 0; j < m; j++)
            fps += present[j];
    }
    return (double)fps / (double)n;
}

/*
 * The windowed filter at its peak (all g generations live and full, just before a
 * rotation) against a plain filter sized for the same keys, CHECKADD of new keys in
 * 100-key batches timed in the last span / the last third of the plain fill.
 */
static void window_vs_plain(uint64_t c)
{
    const int64_t t0 = INT64_C(1767225600000);
    struct window *w = window_make(c, t0);
    uint64_t span = c / (WIN_G - 1), at = (WIN_G - 1) * span;
    window_feed(w, 1, 0, at, t0, c);
    double wns = window_feed(w, 1, at, at + span, t0, c);
    struct window_info info;
    window_info(w, &info);
    double wfp = window_fpr(w, ABSENT);

    struct sbf_params p;
    sbf_params_default(&p);
    p.capacity = c;
    struct sbf *f = NULL;
    int rc = sbf_new(&p, NULL, &f);
    if (rc != SBF_OK)
        die("sbf_new", rc);
    uint64_t pre = c - span;
    static struct sbf_hash h[WIN_BATCH];
    static bool present[WIN_BATCH];
    for (uint64_t i = 0; i < pre;) {
        size_t n = 0;
        for (; n < WIN_BATCH && i < pre; n++, i++)
            h[n] = key(2, i);
        if ((rc = sbf_checkadd_batch(f, h, n, present)) != SBF_OK)
            die("sbf_checkadd_batch", rc);
    }
    double t = now();
    for (uint64_t i = pre; i < c;) {
        size_t n = 0;
        for (; n < WIN_BATCH && i < c; n++, i++)
            h[n] = key(2, i);
        if ((rc = sbf_checkadd_batch(f, h, n, present)) != SBF_OK)
            die("sbf_checkadd_batch", rc);
    }
    double sns = (now() - t) * 1e9 / (double)span;
    struct sbf_info si;
    sbf_info(f, &si);
    uint64_t fps = 0;
    for (uint64_t i = 0; i < ABSENT; i++)
        fps += sbf_check(f, key(7, i));

    printf("\nwindow=1h generations=%d capacity=%.0fM (keys per window), error 1%%, ratio %.2f; "
           "CHECKADD batches of %d new keys\n",
           WIN_G, (double)c / 1e6, WINDOW_DEFAULT_RATIO, WIN_BATCH);
    printf("%-22s %10s %8s %12s %12s %9s\n", "filter", "Mkeys/s", "ratio", "B/key held",
           "B/window key", "FP");
    printf("%-22s %10.2f %8s %12.2f %12.2f %8.4f%%\n", "plain sbf", 1e3 / sns, "1.00",
           (double)si.bytes / (double)c, (double)si.bytes / (double)c,
           (double)fps / (double)ABSENT * 100.0);
    printf("%-22s %10.2f %8.2f %12.2f %12.2f %8.4f%%\n", "window (4 gens full)", 1e3 / wns,
           sns / wns, (double)info.bytes / (double)info.items, (double)info.bytes / (double)c,
           wfp * 100.0);
    sbf_free(f);
    window_free(w);
}

/*
 * The click stream: a steady stream of 10x the window's capacity over 10 windows (one
 * capacity's worth per window), simulated clock; memory and FP at each window's end.
 */
static void click_stream(uint64_t c)
{
    const int64_t t0 = INT64_C(1767225600000);
    struct window *w = window_make(c, t0);
    printf("\nclick stream: %.1fM keys per window=1h, generations=%d, 1%%, 10 windows\n",
           (double)c / 1e6, WIN_G);
    printf("%-7s %10s %8s %10s %10s %9s\n", "window", "keys", "ns/key", "MiB", "live", "FP");
    for (uint64_t win = 0; win < 10; win++) {
        /* Fed up to just before the window's end, the moment of most generations. */
        double ns = window_feed(w, 3, win * c, (win + 1) * c, t0, c);
        struct window_info info;
        window_info(w, &info);
        printf("%-7llu %10llu %8.1f %10.2f %10u %8.4f%%\n", (unsigned long long)win + 1,
               (unsigned long long)((win + 1) * c), ns, (double)info.bytes / 1048576.0, info.live,
               window_fpr(w, ABSENT / 4) * 100.0);
    }
    window_free(w);
}

/* Usage: bench_lib [max keys]: the sizes above max keys are skipped (quick runs). */
int main(int argc, char **argv)
{
    uint64_t max = argc > 1 ? strtoull(argv[1], NULL, 10) : UINT64_MAX;
    struct sbf_params p;
    sbf_params_default(&p);
    printf("bench_lib: error 1%%, exponential growth x%.0f, ratio %.2f; ns/key include the "
           "XXH3 hash;\nbatches of %d; check = 50%% present / 50%% absent keys; FP over %llu "
           "never-added keys;\nideal = -ln(FP)/ln(2)^2 bits/key of a standard Bloom filter at "
           "the measured FP.\n\n",
           p.scale, p.ratio, BATCH, ABSENT);
    printf("%-14s %6s %2s %6s %8s %6s %6s | %6s %6s | %6s %6s %6s | %6s %6s | %7s\n", "filter",
           "keys", "st", "bits/k", "FP", "ideal", "ratio", "add1", "addB", "chk1", "chkB",
           "speedup", "cadd1", "caddB", "new ms");
    const uint64_t sizes[] = {10000000, 100000000};
    for (size_t i = 0; i < 2; i++) {
        uint64_t n = sizes[i];
        if (n > max)
            continue;
        scenario("right-sized", n, n);
        scenario("grown 10x", n, n / 10);
    }
    uint64_t wc = max < 10000000 ? (max < 30000 ? 30000 : max) : 10000000;
    window_vs_plain(wc);
    click_stream(wc / 10);
    return 0;
}
