/*
 * bench_grow.c - the kinds' own cost on the daemon's add path: check-and-add of N keys
 * from a filter of capacity C (growth included, as bench/loadgen drives the daemon), in
 * batches of B (the keys of one request line), with a share of repeats as loadgen's
 * default. Hashes are computed before the clock starts, so only the kind is timed: the
 * figure to hold against the server CPU per key of bench/run_ab.sh.
 * After the fill: bytes per distinct key (INFO's bytes), the false-positive rate on 1M
 * never-added keys, and false negatives over every 64th distinct key. BENCH_ERROR sets
 * the promised rate (0.01); BENCH_DOUBLINGS=1 also prints, at every doubling of the
 * distinct keys, the rate on 100k never-added keys, B/key and the stages (untimed).
 * Hashes are made a million ops at a time outside the clock, so N may be 10^8.
 * KIND `pocket` is the measuring prototype of bench/pocket.h (sized only: C >= N; its
 * "stages" column counts the keys it sent to its spare).
 *   bench_grow [N [C [B [KIND...]]]]   (10000000 1000000 100 blocked expandable)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/pocket.h"
#include "bench/pocket_grow.h"
#include "lib/expandable.h"
#include "lib/kind.h"
#include "lib/sbf.h"

#define ABSENT 1000000u /* never-added keys probed for the false-positive rate */
#define REPEAT_PER_10 2 /* two keys in ten repeat an earlier one (loadgen --repeat 0.2) */
#define CHUNK 1000000u  /* ops hashed at a time, outside the clock */

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
    if (strcmp(name, kind_pocket_proto.name) == 0)
        return &kind_pocket_proto; /* sized only: capacity C must be >= N */
    if (strcmp(name, kind_pocket_grow_proto.name) == 0)
        return &kind_pocket_grow_proto;
    return NULL;
}

/* The operation stream: fresh keys in order, two in ten ops a repeat of an earlier one.
 * The next n ops' hashes into h (NULL: only count them). */
struct opgen {
    uint64_t fresh, x;
};

static void ops_make(struct opgen *g, struct sbf_hash *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t k = g->fresh;
        g->x = g->x * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
        if (g->fresh > 0 && (g->x >> 33) % 10 < REPEAT_PER_10)
            k = (g->x >> 11) % g->fresh;
        else
            g->fresh++;
        uint64_t v[2] = {1, k};
        if (h)
            h[i] = sbf_hash_key(v, sizeof(v));
    }
}

/* Keys [from, to) of namespace ns, every step-th, that f reports present. */
static uint64_t present_in(const struct kind_ops *ko, const void *f, uint64_t ns, uint64_t from,
                           uint64_t to, uint64_t step, struct sbf_hash *q, bool *present,
                           size_t batch)
{
    uint64_t hits = 0;
    for (uint64_t i = from; i < to;) {
        size_t m = 0;
        for (; m < batch && i < to; m++, i += step) {
            uint64_t v[2] = {ns, i};
            q[m] = sbf_hash_key(v, sizeof(v));
        }
        ko->check_batch(f, q, m, present);
        for (size_t j = 0; j < m; j++)
            hits += present[j];
    }
    return hits;
}

/* Stages of an expandable filter (the blocked kind reports 0 here; the pocket prototype
 * its keys sent to the spare). */
static unsigned stages_of(const struct kind_ops *ko, const void *f)
{
    if (ko == &kind_pocket_proto)
        return (unsigned)((const struct pocket *)f)->spilled;
    if (ko == &kind_pocket_grow_proto)
        return ((const struct pocketx *)f)->G;
    if (ko != &kind_expandable)
        return 0;
    struct expandable_info info;
    expandable_info(f, &info);
    return info.stages;
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
    uint64_t ops = n + n * REPEAT_PER_10 / (10 - REPEAT_PER_10);
    struct sbf_hash *h = malloc(CHUNK * sizeof(*h));
    struct sbf_hash *q = malloc(batch * sizeof(*q)); /* never-added keys */
    bool *present = malloc(batch * sizeof(*present));
    if (!h || !q || !present)
        return 1;
    struct opgen count = {0, 1};
    for (uint64_t i = 0; i < ops; i += CHUNK)
        ops_make(&count, NULL, ops - i < CHUNK ? (size_t)(ops - i) : CHUNK);
    const uint64_t fresh = count.fresh;
    printf("bench_grow: %llu ops (%llu distinct keys) from capacity %llu, batch %zu\n",
           (unsigned long long)ops, (unsigned long long)fresh, (unsigned long long)cap, batch);
    double error = getenv("BENCH_ERROR") ? strtod(getenv("BENCH_ERROR"), NULL) : 0.01;
    bool doublings = getenv("BENCH_DOUBLINGS") && atoi(getenv("BENCH_DOUBLINGS"));
    printf("%-11s %9s %8s %7s %9s %6s %6s (error %g)\n", "kind", "ns/op", "B/key", "fresh", "FP",
           "FN", "stages", error);
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
        uint64_t added = 0, next = 2 * cap;
        double t = 0;
        struct opgen g = {0, 1};
        for (uint64_t c = 0; c < ops; c += CHUNK) {
            size_t len = ops - c < CHUNK ? (size_t)(ops - c) : CHUNK;
            ops_make(&g, h, len);
            double t0 = now();
            for (size_t i = 0; i < len; i += batch) {
                size_t m = len - i < batch ? len - i : batch;
                rc = ko->checkadd_batch(f, h + i, m, present);
                if (rc != SBF_OK) {
                    fprintf(stderr, "bench_grow: checkadd: %s after %llu keys\n", sbf_strerror(rc),
                            (unsigned long long)g.fresh);
                    return 1;
                }
                for (size_t j = 0; j < m; j++)
                    added += !present[j];
            }
            t += now() - t0;
            if (doublings && (g.fresh >= next || c + len == ops)) {
                struct kind_info info;
                ko->info(f, &info);
                uint64_t fps = present_in(ko, f, 3, 0, 100000, 1, q, present, batch);
                printf("  %11llu keys: %6.3f B/key, FP %.4f%% (bound %.4f%%), %u stages\n",
                       (unsigned long long)g.fresh, (double)info.bytes / (double)g.fresh,
                       (double)fps / 1000.0, 100 * info.est_error, stages_of(ko, f));
                fflush(stdout);
                while (next <= g.fresh)
                    next *= 2;
            }
        }
        uint64_t fps = present_in(ko, f, 2, 0, ABSENT, 1, q, present, batch);
        uint64_t sampled = (fresh + 63) / 64;
        uint64_t fns = sampled - present_in(ko, f, 1, 0, fresh, 64, q, present, batch);
        struct kind_info info;
        ko->info(f, &info);
        printf("%-11s %9.1f %8.3f %7.4f %8.4f%% %6llu %6u\n", ko->name, t * 1e9 / (double)ops,
               (double)info.bytes / (double)fresh, (double)added / (double)fresh,
               100.0 * (double)fps / ABSENT, (unsigned long long)fns, stages_of(ko, f));
        ko->free(f);
    }
    free(h);
    free(q);
    free(present);
    return 0;
}
