/*
 * bench_lib.c - micro-benchmark of the filter library (`make bench-lib`): for 10M and
 * 100M keys at 1% error, a right-sized filter and one grown 10x from a tenth of the
 * capacity. Prints ns per key (hash included) for add, check and check-and-add as a
 * single-key loop and in batches, bits per key, the measured false-positive rate and the
 * ratio to an ideal standard Bloom filter at that same rate. Times are the thread's CPU
 * time, so other load on the shared machine distorts them less than wall time.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "lib/sbf.h"

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
    return 0;
}
