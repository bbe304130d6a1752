/*
 * bench_journal.c - micro-benchmark of the journal on this disk (`build/rel/bench/
 * bench_journal [dir]`, default a temporary directory under /tmp): append cost on the
 * loop (records of 100 hashes), write throughput, group-commit latency under `always`
 * with 1, 4 and 64 writers per loop pass (each pass waits for its fdatasync, as held
 * replies do), appending and over spares (zeros made ahead, as the daemon under always),
 * pipelined runs (passes keep coming while the thread syncs) under `always`,
 * `everysec` and appends alone (the loop's baseline), and
 * replay speed with a no-op apply and with sbf_add_batch into a filter.
 */
#include <dirent.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/sbf.h"
#include "server/persist/journal.h"

#define HASHES 100
#define APPENDS 100000u /* records for the append and replay runs: 10M keys */

static struct sbf_hash hashes[HASHES * 64];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const struct journal_error *e)
{
    char msg[300];
    fprintf(stderr, "%s: %s\n", what, e ? journal_format(e, msg, sizeof msg) : "failed");
    exit(1);
}

static void clean(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/" JOURNAL_SUBDIR, dir);
    DIR *d = opendir(path);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        char f[1400];
        if (de->d_name[0] == '.')
            continue;
        snprintf(f, sizeof f, "%s/%s", path, de->d_name);
        unlink(f);
    }
    if (d)
        closedir(d);
    rmdir(path);
}

static struct journal *open_mode(const char *dir, enum journal_mode mode, bool spares)
{
    struct journal_opts o = {.mode = mode, .max_buffer = (uint64_t)1 << 30, .spares = spares};
    struct journal *j;
    struct journal_error e;
    if (journal_open(dir, &o, &j, &e) != 0)
        die("journal_open", &e);
    return j;
}

static struct journal_record rec_of(size_t i)
{
    return (struct journal_record){.type = JOURNAL_ADD,
                                   .name = {"clicks", 6},
                                   .hashes = hashes + (i % 64) * HASHES,
                                   .nhashes = HASHES};
}

static void bench_append(const char *dir)
{
    struct journal *j = open_mode(dir, JOURNAL_MODE_MANUAL, false);
    struct journal_error e;
    /* Steady state on the loop: 64 appends per pass, then the flusher takes the buffer
     * (its write is not the loop's time, so it is not counted here). */
    double appending = 0;
    for (size_t i = 0; i < APPENDS; i += 64) {
        double t = now();
        for (size_t k = i; k < i + 64 && k < APPENDS; k++) {
            struct journal_record r = rec_of(k);
            if (journal_append(j, &r, NULL) != 0)
                die("append", NULL);
        }
        appending += now() - t;
        if (journal_write(j, &e) != 0)
            die("write", &e);
    }
    struct journal_stats st;
    journal_stats(j, &st);
    printf("append   %u records x %d hashes, 64 per pass: %.0f ns/record = %.0f ns/key on the "
           "loop; %.2f bytes/key on disk\n",
           APPENDS, HASHES, appending * 1e9 / APPENDS, appending * 1e9 / APPENDS / HASHES,
           (double)st.bytes / (APPENDS * (double)HASHES));
    /* The flusher's side: one big write, then its fdatasync. */
    for (size_t i = 0; i < APPENDS; i++) {
        struct journal_record r = rec_of(i);
        if (journal_append(j, &r, NULL) != 0)
            die("append", NULL);
    }
    double t1 = now();
    if (journal_write(j, &e) != 0)
        die("write", &e);
    double t2 = now();
    uint64_t d;
    if (journal_sync(j, &d, &e) != 0)
        die("sync", &e);
    double t3 = now();
    double mib = (double)st.bytes / (1 << 20);
    printf("write    %.0f MiB in one write(2): %.0f MiB/s; the fdatasync after it %.1f ms\n", mib,
           mib / (t2 - t1), (t3 - t2) * 1e3);
    if (journal_close(j, &e) != 0)
        die("close", &e);
}

struct waiter {
    uint64_t durable;
    int failed;
};

static void on_event(void *ctx, const struct journal_event *ev)
{
    struct waiter *w = ctx;
    if (ev->type == JOURNAL_EV_DURABLE && ev->last > w->durable)
        w->durable = ev->last;
    if (ev->type == JOURNAL_EV_FAILED)
        w->failed = 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Passes of `writers` appends, each pass waiting for its own fdatasync; with spares, once
 * the journal writes over one (the daemon's way under always). */
static void bench_always(const char *dir, int writers, int passes, bool spares)
{
    struct journal *j = open_mode(dir, JOURNAL_MODE_ALWAYS, spares);
    struct waiter w = {.durable = journal_durable_pos(j)};
    double *lat = malloc((size_t)passes * sizeof *lat);
    for (int tries = 0; spares && tries < 1000; tries++) { /* bounded: ~10 s */
        struct journal_stats st;
        journal_stats(j, &st);
        if (st.spare_segments > 0)
            break;
        struct journal_record r = rec_of(0);
        uint64_t pos = 0;
        if (journal_append(j, &r, &pos) != 0)
            die("append", NULL);
        journal_commit(j);
        usleep(10000);
        journal_poll(j, on_event, &w);
    }
    double t0 = now();
    for (int p = 0; p < passes; p++) {
        uint64_t pos = 0;
        for (int k = 0; k < writers; k++) {
            struct journal_record r = rec_of((size_t)k);
            if (journal_append(j, &r, &pos) != 0)
                die("append", NULL);
        }
        double s = now();
        journal_commit(j);
        while (w.durable < pos && !w.failed) {
            struct pollfd pf = {.fd = journal_fd(j), .events = POLLIN};
            if (poll(&pf, 1, 5000) == 1)
                journal_poll(j, on_event, &w);
            else
                die("no completion within 5 s", NULL);
        }
        if (w.failed)
            die("journal write failed", NULL);
        lat[p] = (now() - s) * 1e3;
    }
    double t = now() - t0;
    qsort(lat, (size_t)passes, sizeof *lat, cmp_double);
    printf("always%s %2d writers/pass: %5.2f ms median, %5.2f ms p99 commit->durable; "
           "%6.0f records/s = %5.2f M keys/s\n",
           spares ? " over spares" : "            ", writers, lat[passes / 2],
           lat[passes * 99 / 100], writers * (double)passes / t,
           writers * (double)passes * HASHES / t / 1e6);
    free(lat);
    struct journal_error e;
    if (journal_close(j, &e) != 0)
        die("close", &e);
}

/* Passes never wait: the thread's fdatasyncs each take every pass appended meanwhile. */
static void bench_pipelined(const char *dir, enum journal_mode mode, int writers, double seconds,
                            bool spares)
{
    struct journal *j = open_mode(dir, mode, spares);
    struct waiter w = {0};
    double t0 = now();
    uint64_t passes = 0, pos = 0;
    while (now() - t0 < seconds) {
        for (int k = 0; k < writers; k++) {
            struct journal_record r = rec_of((size_t)k);
            if (journal_append(j, &r, &pos) != 0)
                die("append", NULL);
        }
        journal_commit(j);
        passes++;
        journal_poll(j, on_event, &w);
        usleep(50); /* a loop pass of real work */
    }
    struct journal_stats st;
    journal_stats(j, &st);
    struct journal_error e;
    if (journal_close(j, &e) != 0)
        die("close", &e);
    double t = now() - t0;
    printf("pipelined %-8s%s %d writers/pass, a pass every ~50 us: %.0f passes/s, %.1f passes "
           "per fdatasync (%.2f ms mean), %.2f M keys/s\n",
           mode == JOURNAL_MODE_ALWAYS     ? "always"
           : mode == JOURNAL_MODE_EVERYSEC ? "everysec"
                                           : "(append only)",
           spares ? " over spares" : "", writers, (double)passes / t,
           (double)passes / (double)(st.syncs ? st.syncs : 1),
           (double)st.sync_ns_sum / 1e6 / (double)(st.syncs ? st.syncs : 1),
           (double)pos * HASHES / t / 1e6);
}

static struct sbf *filter;

static int apply_noop(void *ctx, const struct journal_record *rec)
{
    (void)ctx;
    return rec->nhashes == 0;
}

static int apply_add(void *ctx, const struct journal_record *rec)
{
    (void)ctx;
    size_t added;
    return sbf_add_batch(filter, rec->hashes, rec->nhashes, &added);
}

static void bench_replay(const char *dir)
{
    clean(dir);
    /* Distinct keys: 10M of them, as the day's journal of a busy filter. */
    struct journal *j = open_mode(dir, JOURNAL_MODE_MANUAL, false);
    struct sbf_hash *h = malloc(HASHES * sizeof *h);
    struct journal_error e;
    for (uint64_t i = 0; i < APPENDS; i++) {
        for (uint64_t k = 0; k < HASHES; k++) {
            uint64_t v[2] = {i, k};
            h[k] = sbf_hash_key(v, sizeof v);
        }
        struct journal_record r = {
            .type = JOURNAL_ADD, .name = {"clicks", 6}, .hashes = h, .nhashes = HASHES};
        if (journal_append(j, &r, NULL) != 0)
            die("append", NULL);
        if (i % 10000 == 9999 && journal_write(j, &e) != 0)
            die("write", &e);
    }
    if (journal_close(j, &e) != 0)
        die("close", &e);
    free(h);
    struct journal_replay_ops ops = {.apply = apply_noop};
    struct journal_replay_report rep;
    double t0 = now();
    if (journal_replay(dir, 0, &ops, &rep, &e) != 0)
        die("replay", &e);
    double t1 = now();
    printf("replay   %.0f M keys (%" PRIu64 " segments), no-op apply: %.2f s = %.0f M keys/s "
           "(100M keys: %.1f s)\n",
           rep.applied * (double)HASHES / 1e6, rep.segments, t1 - t0,
           rep.applied * (double)HASHES / (t1 - t0) / 1e6, (t1 - t0) * 1e8 / (rep.applied * 100.0));
    struct sbf_params p;
    sbf_params_default(&p);
    p.capacity = APPENDS * HASHES;
    if (sbf_new(&p, NULL, &filter) != 0)
        die("sbf_new", NULL);
    ops.apply = apply_add;
    t0 = now();
    if (journal_replay(dir, 0, &ops, &rep, &e) != 0)
        die("replay", &e);
    t1 = now();
    printf("replay   into an sbf (sbf_add_batch): %.2f s = %.0f M keys/s (100M keys: %.1f s)\n",
           t1 - t0, rep.applied * (double)HASHES / (t1 - t0) / 1e6,
           (t1 - t0) * 1e8 / (rep.applied * 100.0));
    sbf_free(filter);
}

int main(int argc, char **argv)
{
    char tmp[] = "/tmp/bench_journal.XXXXXX";
    const char *dir = argc > 1 ? argv[1] : mkdtemp(tmp);
    if (!dir)
        die("mkdtemp", NULL);
    for (size_t i = 0; i < sizeof hashes / sizeof hashes[0]; i++)
        hashes[i] = sbf_hash_key(&i, sizeof i);
    printf("journal benchmark in %s\n", dir);
    bench_append(dir);
    clean(dir);
    for (int spares = 0; spares < 2; spares++) {
        bench_always(dir, 1, 300, spares);
        bench_always(dir, 4, 300, spares);
        bench_always(dir, 64, 200, spares);
        clean(dir);
    }
    /* Long enough for rotations: spares are made while the journal writes. */
    bench_pipelined(dir, JOURNAL_MODE_ALWAYS, 4, 6.0, false);
    clean(dir);
    bench_pipelined(dir, JOURNAL_MODE_ALWAYS, 4, 6.0, true);
    clean(dir);
    bench_pipelined(dir, JOURNAL_MODE_EVERYSEC, 4, 2.0, false);
    clean(dir);
    bench_pipelined(dir, JOURNAL_MODE_MANUAL, 4, 2.0, false);
    bench_replay(dir);
    clean(dir);
    if (argc <= 1)
        rmdir(dir);
    return 0;
}
