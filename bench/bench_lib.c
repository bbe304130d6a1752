/*
 * bench_lib.c - micro-benchmark of the filter kinds (`make bench-lib`), through their
 * kind_ops tables so both run the same code path: 1M and 10M keys (and 100M with
 * BENCH_100M=1 or the argument "full") into filters created for 1M keys at 1% error, and
 * 1M keys into filters created for 10k (100x growth), for the blocked (sbf) and the
 * expandable kind, plus the bytes per key of a right-sized blocked filter. Prints bytes
 * per key, the measured false-positive rate, keys/s of check-and-add and check, one key
 * per call and in batches (hash included), and the longest single add. Times are the
 * thread's CPU time (the longest add: wall time), so other load distorts them less.
 * Then the windowed filter (window=1h, generations=4, 1%, sized for one window's keys)
 * against the plain filter in the same run, and a simulated click stream over 10 windows.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/kind.h"
#include "lib/sbf.h"
#include "lib/window.h"

#define BATCH 256
#define QUERIES 2000000ull /* check queries per mode */
#define SAMPLE 1000000ull  /* new keys timed per insert mode */
#define ABSENT 1000000ull  /* never-added keys for the false-positive rate */
#define PROBE 200000ull    /* single adds timed one by one for the longest add */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
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

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_lib: %s: %s\n", what, sbf_strerror(rc));
    exit(1);
}

/* Check-and-adds keys [from, to) of namespace 1; returns ns per key. */
static double insert(const struct kind_ops *k, void *f, bool batched, uint64_t from, uint64_t to)
{
    static struct sbf_hash h[BATCH];
    static bool present[BATCH];
    double t0 = now();
    size_t step = batched ? BATCH : 1;
    for (uint64_t i = from; i < to;) {
        size_t n = 0;
        for (; n < step && i < to; n++, i++)
            h[n] = key(1, i);
        int rc = k->checkadd_batch(f, h, n, present);
        if (rc != SBF_OK)
            die("checkadd", rc);
    }
    return (now() - t0) * 1e9 / (double)(to - from);
}

/* Checks QUERIES mixed keys; returns ns per key. sink keeps the work observable. */
static double check(const struct kind_ops *k, const void *f, uint64_t n, bool batched,
                    uint64_t *sink)
{
    static struct sbf_hash h[BATCH];
    static bool present[BATCH];
    size_t step = batched ? BATCH : 1;
    double t0 = now();
    for (uint64_t i = 0; i < QUERIES;) {
        size_t m = 0;
        for (; m < step && i < QUERIES; m++, i++)
            h[m] = query(n, i);
        k->check_batch(f, h, m, present);
        for (size_t j = 0; j < m; j++)
            *sink += present[j];
    }
    return (now() - t0) * 1e9 / (double)QUERIES;
}

struct row {
    double bpk, fp, cadd1, caddb, chk1, chkb, max_us;
};

static void scenario(const char *name, const struct kind_ops *k, uint64_t n, uint64_t capacity,
                     struct row *r)
{
    struct kind_params p = {0};
    sbf_params_default(&p.sbf);
    p.sbf.capacity = capacity;
    void *f = NULL;
    int rc = k->create(&p, NULL, &f);
    if (rc != SBF_OK)
        die("create", rc);
    /* Fill without timing, then time each insert mode on SAMPLE new keys as the filter
     * reaches n keys, so both run against a filter of about the final size. */
    uint64_t sample = n / 4 < SAMPLE ? n / 4 : SAMPLE;
    uint64_t at = n - 2 * sample - PROBE;
    insert(k, f, true, 0, at);
    /* The longest single add, wall time, over PROBE adds. */
    double worst = 0;
    for (uint64_t i = at; i < at + PROBE; i++) {
        struct sbf_hash h = key(1, i);
        bool present;
        double t0 = wall();
        rc = k->checkadd_batch(f, &h, 1, &present);
        double t = wall() - t0;
        if (rc != SBF_OK)
            die("checkadd", rc);
        if (t > worst)
            worst = t;
    }
    at += PROBE;
    r->cadd1 = insert(k, f, false, at, at + sample);
    r->caddb = insert(k, f, true, at + sample, n);
    uint64_t sink = 0;
    r->chk1 = check(k, f, n, false, &sink);
    r->chkb = check(k, f, n, true, &sink);
    uint64_t fps = 0;
    static struct sbf_hash h[BATCH];
    static bool present[BATCH];
    for (uint64_t i = 0; i < ABSENT;) {
        size_t m = 0;
        for (; m < BATCH && i < ABSENT; m++, i++)
            h[m] = key(3, i);
        k->check_batch(f, h, m, present);
        for (size_t j = 0; j < m; j++)
            fps += present[j];
    }
    struct kind_info info;
    k->info(f, &info);
    r->bpk = (double)info.bytes / (double)n;
    r->fp = (double)fps / (double)ABSENT;
    r->max_us = worst * 1e6;
    printf("%-11s %-10s %5.0fM %4.0fx | %5.2f %7.4f%% | %6.2f %6.2f | %6.2f %6.2f | %7.1f\n", name,
           k->name, (double)n / 1e6, (double)n / (double)capacity, r->bpk, r->fp * 100,
           1e3 / r->cadd1, 1e3 / r->caddb, 1e3 / r->chk1, 1e3 / r->chkb, r->max_us);
    if (sink == 0)
        printf("(no key found?)\n");
    k->free(f);
}

/* Bytes per key of a blocked filter sized for n keys up front. */
static double right_sized(uint64_t n)
{
    struct sbf_params p;
    sbf_params_default(&p);
    p.capacity = n;
    return (double)sbf_first_stage_bytes(&p) / (double)n;
}

/*
 * The sizing table of the README: bytes per key and measured false positives of a blocked
 * filter holding 1M keys, by promised error, created for them (1x) or for a tenth and
 * grown 10x exponentially or linearly (the defaults otherwise).
 */
static void sizing_table(void)
{
    static const double errors[] = {0.1, 0.01, 0.001, 0.0001};
    const uint64_t n = 1000000;
    printf("sizing: bytes per key (measured false positives) of a blocked filter holding %.0fM "
           "keys\n%-8s | %-18s | %-18s | %-18s\n",
           (double)n / 1e6, "error", "sized 1x", "grown 10x exp.", "grown 10x linear");
    for (size_t e = 0; e < sizeof errors / sizeof errors[0]; e++) {
        printf("%-8g", errors[e]);
        for (int mode = 0; mode < 3; mode++) {
            struct sbf_params p;
            sbf_params_default(&p);
            p.error = errors[e];
            p.capacity = mode == 0 ? n : n / 10;
            if (mode == 2)
                p.growth = SBF_GROWTH_LINEAR;
            struct sbf *f = NULL;
            int rc = sbf_new(&p, NULL, &f);
            if (rc != SBF_OK)
                die("sbf_new", rc);
            for (uint64_t i = 0; i < n; i++)
                if ((rc = sbf_add(f, key(11, i), NULL)) != SBF_OK)
                    die("sbf_add", rc);
            uint64_t fps = 0;
            for (uint64_t i = 0; i < ABSENT; i++)
                fps += sbf_check(f, key(12, i));
            struct sbf_info info;
            sbf_info(f, &info);
            printf(" | %6.2f (%7.4f%%)  ", (double)info.bytes / (double)n,
                   100.0 * (double)fps / (double)ABSENT);
            sbf_free(f);
        }
        printf("\n");
    }
}

/* Usage: bench_lib [full|sizing]: "full" (or BENCH_100M=1) adds the 100M-key rows;
 * "sizing" prints only the README's sizing table. */
#define WIN_MS 3600000 /* window=1h */
#define WIN_G 4
#define WIN_BATCH 100 /* keys per CHECKADD line */

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
    if (argc > 1 && strcmp(argv[1], "sizing") == 0) {
        sizing_table();
        return 0;
    }
    bool full = (argc > 1 && strcmp(argv[1], "full") == 0) ||
                (getenv("BENCH_100M") && strcmp(getenv("BENCH_100M"), "1") == 0);
    printf("bench_lib: error 1%%; keys/s in millions, hash included; batches of %d; check = "
           "50%% present / 50%% absent;\nFP over %llu never-added keys; max add = longest "
           "single check-and-add (wall, us) over %llu.\n\n",
           BATCH, ABSENT, PROBE);
    printf("%-11s %-10s %6s %5s | %5s %8s | %6s %6s | %6s %6s | %7s\n", "grown", "kind", "keys",
           "x", "B/key", "FP", "cadd1", "caddB", "chk1", "chkB", "max add");
    struct {
        const char *name;
        uint64_t n, cap;
    } rows[] = {
        {"from 1M", 1000000, 1000000},
        {"from 1M", 10000000, 1000000},
        {"from 1M", 100000000, 1000000},
        {"from 10k", 1000000, 10000},
    };
    struct row res[4][2];
    bool ran[4] = {false};
    const struct kind_ops *kinds[2] = {&kind_sbf, &kind_expandable};
    for (size_t i = 0; i < 4; i++) {
        if (rows[i].n > 10000000 && !full)
            continue;
        for (size_t k = 0; k < 2; k++)
            scenario(rows[i].name, kinds[k], rows[i].n, rows[i].cap, &res[i][k]);
        printf("%-11s %-10s %5.0fM       | %5.2f  (right-sized blocked reference)\n", "", "sized",
               (double)rows[i].n / 1e6, right_sized(rows[i].n));
        ran[i] = true;
    }
    printf("\nexpandable / blocked: bytes/key, caddB and chkB keys/s\n");
    for (size_t i = 0; i < 4; i++)
        if (ran[i])
            printf("  %-9s %5.0fM: bytes %.2fx, caddB %.2fx, chkB %.2fx\n", rows[i].name,
                   (double)rows[i].n / 1e6, res[i][1].bpk / res[i][0].bpk,
                   res[i][0].caddb / res[i][1].caddb, res[i][0].chkb / res[i][1].chkb);
    if (ran[2])
        printf("  flat cost, caddB 100M / 10M: blocked %.2fx, expandable %.2fx\n",
               res[1][0].caddb / res[2][0].caddb, res[1][1].caddb / res[2][1].caddb);
    /* The windowed kind against the plain one in the same run, and the click stream. */
    window_vs_plain(10000000);
    click_stream(1000000);
    return 0;
}
