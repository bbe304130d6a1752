/*
 * bench_lib.c - micro-benchmark of the filter kinds (`make bench-lib`), through their
 * kind_ops tables so both run the same code path: 1M and 10M keys (and 100M with
 * BENCH_100M=1 or the argument "full") into filters created for 1M keys at 1% error, and
 * 1M keys into filters created for 10k (100x growth), for the blocked (sbf) and the
 * expandable kind, plus the bytes per key of a right-sized blocked filter. Prints bytes
 * per key, the measured false-positive rate, keys/s of check-and-add and check, one key
 * per call and in batches (hash included), and the longest single add. Times are the
 * thread's CPU time (the longest add: wall time), so other load distorts them less.
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

/* Usage: bench_lib [full]: "full" (or BENCH_100M=1) adds the 100M-key rows. */
int main(int argc, char **argv)
{
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
    return 0;
}
