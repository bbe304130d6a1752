/*
 * bench_grow.c - the kinds' own cost on the daemon's add path: check-and-add of N keys
 * from a filter of capacity C (growth included, as bench/loadgen drives the daemon), in
 * batches of B (the keys of one request line), with a share of repeats as loadgen's
 * default. Hashes are computed before the clock starts, so only the kind is timed: the
 * figure to hold against the server CPU per key of bench/run_ab.sh.
 * After the fill: bytes per distinct key (INFO's bytes) and the false-positive rate on
 * 1M never-added keys. BENCH_ERROR sets the promised rate (0.01).
 *   bench_grow [N [C [B [KIND...]]]]   (10000000 1000000 100 blocked expandable)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/kind.h"
#include "lib/sbf.h"

#define ABSENT 1000000u /* never-added keys probed for the false-positive rate */
#define REPEAT_PER_10 2 /* two keys in ten repeat an earlier one (loadgen --repeat 0.2) */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const struct kind_ops *kind_named(const char *name)
{
    if (strcmp(name, kind_sbf.name) == 0)
        return &kind_sbf;
    if (strcmp(name, kind_expandable.name) == 0)
        return &kind_expandable;
    return NULL;
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
    uint64_t cap = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000000;
    size_t batch = argc > 3 ? (size_t)strtoull(argv[3], NULL, 10) : 100;
    const char *defaults[] = {"blocked", "expandable"};
    const char **names = argc > 4 ? (const char **)argv + 4 : defaults;
    int nkinds = argc > 4 ? argc - 4 : 2;
    if (n == 0 || cap == 0 || batch == 0) {
        fprintf(stderr, "usage: bench_grow [N [C [B [KIND...]]]]\n");
        return 2;
    }
    /* The operation stream: fresh keys in order, two in ten ops a repeat of an earlier one. */
    uint64_t ops = n + n * REPEAT_PER_10 / (10 - REPEAT_PER_10);
    struct sbf_hash *h = malloc(ops * sizeof(*h));
    struct sbf_hash *q = malloc(batch * sizeof(*q)); /* never-added keys */
    bool *present = malloc(batch * sizeof(*present));
    if (!h || !q || !present)
        return 1;
    uint64_t fresh = 0, x = 1;
    for (uint64_t i = 0; i < ops; i++) {
        uint64_t k = fresh;
        x = x * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
        if (fresh > 0 && (x >> 33) % 10 < REPEAT_PER_10)
            k = (x >> 11) % fresh;
        else
            fresh++;
        uint64_t v[2] = {1, k};
        h[i] = sbf_hash_key(v, sizeof(v));
    }
    printf("bench_grow: %llu ops (%llu distinct keys) from capacity %llu, batch %zu\n",
           (unsigned long long)ops, (unsigned long long)fresh, (unsigned long long)cap, batch);
    double error = getenv("BENCH_ERROR") ? strtod(getenv("BENCH_ERROR"), NULL) : 0.01;
    printf("%-11s %9s %8s %7s %9s (error %g)\n", "kind", "ns/op", "B/key", "fresh", "FP", error);
    for (int k = 0; k < nkinds; k++) {
        const struct kind_ops *ko = kind_named(names[k]);
        if (!ko) {
            fprintf(stderr, "bench_grow: no kind %s\n", names[k]);
            return 2;
        }
        struct kind_params p = {0};
        sbf_params_default(&p.sbf);
        p.sbf.capacity = cap;
        p.sbf.error = error;
        void *f = NULL;
        int rc = ko->create(&p, NULL, &f);
        if (rc != SBF_OK) {
            fprintf(stderr, "bench_grow: create: %s\n", sbf_strerror(rc));
            return 1;
        }
        uint64_t added = 0;
        double t0 = now();
        for (uint64_t i = 0; i < ops; i += batch) {
            size_t m = ops - i < batch ? (size_t)(ops - i) : batch;
            rc = ko->checkadd_batch(f, h + i, m, present);
            if (rc != SBF_OK) {
                fprintf(stderr, "bench_grow: checkadd: %s\n", sbf_strerror(rc));
                return 1;
            }
            for (size_t j = 0; j < m; j++)
                added += !present[j];
        }
        double t = now() - t0;
        uint64_t fps = 0;
        for (uint64_t i = 0; i < ABSENT; i += batch) {
            size_t m = ABSENT - i < batch ? (size_t)(ABSENT - i) : batch;
            for (size_t j = 0; j < m; j++) {
                uint64_t v[2] = {2, i + j}; /* namespace 2: never added */
                q[j] = sbf_hash_key(v, sizeof(v));
            }
            ko->check_batch(f, q, m, present);
            for (size_t j = 0; j < m; j++)
                fps += present[j];
        }
        struct kind_info info;
        ko->info(f, &info);
        printf("%-11s %9.1f %8.3f %7.4f %8.4f%%\n", ko->name, t * 1e9 / (double)ops,
               (double)info.bytes / (double)fresh, (double)added / (double)fresh,
               100.0 * (double)fps / ABSENT);
        ko->free(f);
    }
    free(h);
    free(q);
    free(present);
    return 0;
}
