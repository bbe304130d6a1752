/*
 * snapshot.c - the snapshot policy on top of the job thread. The event loop queues jobs
 * (write these filters, delete that file) holding filter references; the job thread
 * runs them in order and hands finished FLUSH and DROP jobs back through their done
 * callbacks, so those commands answer only once their effect is on disk. Workload: few
 * filters, some of them gigabytes, written while clients keep adding to them.
 *
 * Why no stale file can resurrect a dropped filter: a filter leaves the registry (DROP)
 * on the event loop before its delete job is queued, and every write job holds the
 * filter objects it collected when it was queued. So any write of the dropped object was
 * queued earlier and runs earlier than the delete (one thread, FIFO), and a later write
 * job can only hold a newer object of that name (a new CREATE) whose file is meant to
 * exist. The dropped flag, checked before encoding and again just before the rename,
 * only saves work. CLEAR either empties the object in place (no job holds it) or swaps in
 * a fresh object, which starts dirty and is written by the next job; until then the old
 * snapshot stands, exactly as if the CLEAR had come just after it.
 */
#include "server/snapshot.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/request.h"
#include "server/clock.h"
#include "server/durable.h"
#include "server/jobs.h"
#include "server/log.h"
#include "server/registry.h"
#include "server/server.h"
#include "server/snapfile.h"

/* Nice value of the job thread (the event loop keeps the process's, normally 0). */
#define SNAPSHOT_NICE 10

struct snap_job;

struct snapshotter {
    struct server *srv;
    struct jobs *jobs;
    pthread_mutex_t lock;     /* guards periodic_queued, flushes and stats */
    struct snap_job *flushes; /* queued FLUSH <name> jobs not started yet (merge targets) */
    bool periodic_queued;     /* a timer job is queued or running: skip the next tick */
    struct snapshot_stats stats;
    struct event *timer; /* every snapshot_interval seconds; NULL if disabled */
};

/* A FLUSH that arrived while an identical one waited in the queue: it shares that write. */
struct waiter {
    struct waiter *next;
    snapshot_done_fn done;
    void *arg;
};

enum snap_job_kind {
    SNAP_WRITE,  /* write each dirty filter of filters[] */
    SNAP_DELETE, /* remove name's files */
};

struct snap_job {
    struct job job; /* first member */
    struct snapshotter *s;
    enum snap_job_kind kind;
    struct filter **filters; /* SNAP_WRITE: one reference each, dropped once written */
    size_t n;
    char name[PROTO_MAX_NAME + 1]; /* SNAP_DELETE */
    bool periodic;                 /* queued by the timer */
    bool all;                      /* SNAP_WRITE of every dirty filter */
    snapshot_done_fn done;         /* FLUSH, DROP: called on the event loop; else NULL */
    void *arg;
    struct waiter *waiters;      /* more FLUSHes of the same filter merged into this write */
    struct filter *target;       /* FLUSH <name>: the filter; else NULL */
    struct snap_job *next_flush; /* s->flushes */
    bool started;                /* the job thread took it (under s->lock) */
    uint64_t covered; /* SNAP_WRITE: journal position when queued: what the files cover */
    int err;          /* result: 0 or SNAPSHOT_EIO */
    char why[256];    /* the first failure */
};

static void count_failure(struct snapshotter *s)
{
    pthread_mutex_lock(&s->lock);
    s->stats.failures++;
    pthread_mutex_unlock(&s->lock);
}

static void job_fail(struct snap_job *j, const char *why)
{
    if (j->err == 0)
        snprintf(j->why, sizeof j->why, "%s", why);
    j->err = SNAPSHOT_EIO;
}

/* ---- on the job thread ---- */

static bool still_wanted(void *arg)
{
    const struct filter *f = arg;
    return !atomic_load_explicit(&f->dropped, memory_order_acquire);
}

/* Writes f if it changed since its last snapshot. Adds the bytes written to *bytes and
 * returns true if a file was written or a write failed. */
static bool write_filter(struct snap_job *j, struct filter *f, uint64_t *bytes)
{
    struct snapshotter *s = j->s;
    if (atomic_load_explicit(&f->dropped, memory_order_acquire))
        return false;
    /* Read the counter before encoding: a change after this point leaves it different,
     * so the filter stays dirty even if the encoder already passed the changed bits. */
    uint64_t seen = atomic_load_explicit(&f->changes, memory_order_acquire);
    if (seen == 0)
        return false;
    struct snapfile_error err;
    uint64_t n = 0;
    uint64_t t0 = clock_mono_ms();
    int rc = snapfile_write(s->srv->cfg.data_dir, f->name, f->ops, f->obj, j->covered, still_wanted,
                            f, &n, &err);
    if (rc == SNAPFILE_EABANDONED)
        return false;
    if (rc == 0) {
        atomic_store_explicit(&f->journal_pos, j->covered, memory_order_relaxed);
        atomic_compare_exchange_strong_explicit(&f->changes, &seen, 0, memory_order_acq_rel,
                                                memory_order_relaxed);
        atomic_store_explicit(&f->saved_at, (int64_t)time(NULL), memory_order_relaxed);
        *bytes += n;
        uint64_t ms = clock_mono_ms() - t0;
        log_event(LOG_DEBUG,
                  (struct log_field[]){LOG_STR("filter", f->name), LOG_U64("bytes", n),
                                       LOG_DBL("duration_s", (double)ms / 1000.0)},
                  3, "snapshot: wrote %s.bloom, %llu bytes in %llu ms", f->name,
                  (unsigned long long)n, (unsigned long long)ms);
        pthread_mutex_lock(&s->lock);
        s->stats.written++;
        pthread_mutex_unlock(&s->lock);
        return true;
    }
    char msg[sizeof j->why];
    snapfile_format(&err, msg, sizeof msg);
    log_event(LOG_ERROR, (struct log_field[]){LOG_STR("filter", f->name), LOG_STR("error", msg)}, 2,
              "snapshot of filter '%s' failed (%s); previous snapshot kept, retrying "
              "at the next one",
              f->name, msg);
    job_fail(j, msg);
    count_failure(s);
    return true;
}

static void run_write(struct snap_job *j)
{
    struct snapshotter *s = j->s;
    int64_t started = (int64_t)time(NULL);
    uint64_t t0 = clock_mono_ms(), bytes = 0;
    bool any = false;
    for (size_t i = 0; i < j->n; i++) {
        any |= write_filter(j, j->filters[i], &bytes);
        /* Let go as soon as possible: a dropped filter's memory is freed here. */
        filter_unref(j->filters[i]);
        j->filters[i] = NULL;
    }
    uint64_t ms = clock_mono_ms() - t0;
    if (j->all)
        durable_truncate(s->srv, j->covered); /* segments every snapshot now covers */
    pthread_mutex_lock(&s->lock);
    if (j->periodic)
        s->periodic_queued = false;
    if (any) {
        s->stats.last_time = started;
        s->stats.last_duration_ms = ms;
        s->stats.last_bytes = bytes;
    }
    pthread_mutex_unlock(&s->lock);
    if (any && j->err == 0)
        log_event(LOG_INFO,
                  (struct log_field[]){LOG_U64("bytes", bytes),
                                       LOG_DBL("duration_s", (double)ms / 1000.0)},
                  2, "snapshot: %llu bytes in %llu ms", (unsigned long long)bytes,
                  (unsigned long long)ms);
}

static void run_delete(struct snap_job *j)
{
    struct snapfile_error err;
    char msg[sizeof j->why];
    if (snapfile_remove(j->s->srv->cfg.data_dir, j->name, &err) == 0)
        return;
    snapfile_format(&err, msg, sizeof msg);
    log_msg(LOG_ERROR, "snapshot: removing dropped filter '%s' failed (%s)", j->name, msg);
    job_fail(j, msg);
    count_failure(j->s);
}

static void snap_run(struct job *job)
{
    struct snap_job *j = (struct snap_job *)job;
    if (j->target != NULL) { /* from now on a new FLUSH needs a write of its own */
        struct snapshotter *s = j->s;
        pthread_mutex_lock(&s->lock);
        j->started = true;
        struct snap_job **pp = &s->flushes;
        while (*pp != NULL && *pp != j)
            pp = &(*pp)->next_flush;
        if (*pp == j)
            *pp = j->next_flush;
        pthread_mutex_unlock(&s->lock);
    }
    if (j->kind == SNAP_WRITE)
        run_write(j);
    else
        run_delete(j);
}

/* ---- on the event loop ---- */

static void snap_done(struct job *job)
{
    struct snap_job *j = (struct snap_job *)job;
    j->done(j->arg, j->err, j->why);
    for (struct waiter *w = j->waiters; w != NULL; w = w->next)
        w->done(w->arg, j->err, j->why);
}

static void snap_free(struct job *job)
{
    struct snap_job *j = (struct snap_job *)job;
    for (size_t i = 0; i < j->n; i++)
        filter_unref(j->filters[i]);
    free(j->filters);
    while (j->waiters != NULL) {
        struct waiter *w = j->waiters;
        j->waiters = w->next;
        free(w);
    }
    free(j);
}

static struct snap_job *new_job(struct snapshotter *s, enum snap_job_kind kind,
                                snapshot_done_fn done, void *arg)
{
    struct snap_job *j = calloc(1, sizeof *j);
    if (j == NULL)
        return NULL;
    j->job.run = snap_run;
    j->job.done = done != NULL ? snap_done : NULL;
    j->job.free = snap_free;
    j->s = s;
    j->kind = kind;
    j->done = done;
    j->arg = arg;
    return j;
}

/* A write job for f (with a reference), or for every dirty filter when f is NULL. */
static struct snap_job *write_job(struct snapshotter *s, struct filter *f, snapshot_done_fn done,
                                  void *arg)
{
    struct snap_job *j = new_job(s, SNAP_WRITE, done, arg);
    if (j == NULL)
        return NULL;
    /* Read before collecting: a record after this point is replayed over the file. */
    j->covered = durable_last_pos(s->srv);
    j->all = f == NULL;
    if (f != NULL) {
        j->filters = malloc(sizeof *j->filters);
        if (j->filters == NULL) {
            free(j);
            return NULL;
        }
        filter_ref(f);
        j->filters[0] = f;
        j->n = 1;
    } else if (registry_collect(s->srv->reg, NULL, 0, &j->filters, &j->n) != REGISTRY_OK) {
        free(j);
        return NULL;
    } else {
        /* Keep only the dirty ones: a held filter cannot be cleared in place (CLEAR then
         * copies it), so clean filters are let go at once. A change after this point is
         * after the snapshot started and is left to the next one. */
        size_t kept = 0;
        for (size_t i = 0; i < j->n; i++) {
            if (atomic_load_explicit(&j->filters[i]->changes, memory_order_acquire) != 0)
                j->filters[kept++] = j->filters[i];
            else
                filter_unref(j->filters[i]);
        }
        j->n = kept;
    }
    return j;
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct snapshotter *s = arg;
    (void)fd;
    (void)what;
    pthread_mutex_lock(&s->lock);
    bool busy = s->periodic_queued;
    pthread_mutex_unlock(&s->lock);
    if (busy) /* the previous interval's snapshot is still being written */
        return;
    struct snap_job *j = write_job(s, NULL, NULL, NULL);
    if (j == NULL) {
        log_msg(LOG_ERROR, "snapshot: out of memory queueing the periodic snapshot");
        return;
    }
    j->periodic = true;
    pthread_mutex_lock(&s->lock);
    s->periodic_queued = true;
    pthread_mutex_unlock(&s->lock);
    jobs_post(s->jobs, &j->job);
}

/*
 * FLUSH <name> while a FLUSH of the same filter waits in the queue, not started: that
 * write starts after this request arrived, so it covers it too; share it. Returns true if
 * merged. (FLUSH of every filter is not merged: its job collected the filters when it was
 * queued, and a filter created since would not be covered.)
 */
static bool merge_flush(struct snapshotter *s, struct filter *f, snapshot_done_fn done, void *arg)
{
    struct waiter *w = malloc(sizeof *w);
    if (w == NULL)
        return false;
    *w = (struct waiter){.done = done, .arg = arg};
    pthread_mutex_lock(&s->lock);
    struct snap_job *j = s->flushes;
    while (j != NULL && !(j->target == f && !j->started))
        j = j->next_flush;
    if (j != NULL) {
        w->next = j->waiters;
        j->waiters = w;
    }
    pthread_mutex_unlock(&s->lock);
    if (j == NULL)
        free(w);
    return j != NULL;
}

int snapshot_flush(struct snapshotter *s, struct filter *f, snapshot_done_fn done, void *arg)
{
    if (f != NULL && done != NULL && merge_flush(s, f, done, arg))
        return 0;
    struct snap_job *j = write_job(s, f, done, arg);
    if (j == NULL)
        return SNAPSHOT_ENOMEM;
    if (f != NULL && done != NULL) {
        j->target = f; /* j holds a reference to f */
        pthread_mutex_lock(&s->lock);
        j->next_flush = s->flushes;
        s->flushes = j;
        pthread_mutex_unlock(&s->lock);
    }
    jobs_post(s->jobs, &j->job);
    return 0;
}

int snapshot_forget(struct snapshotter *s, const char *name, size_t len, snapshot_done_fn done,
                    void *arg)
{
    struct snap_job *j = len < PROTO_MAX_NAME + 1 ? new_job(s, SNAP_DELETE, done, arg) : NULL;
    if (j == NULL) {
        log_msg(LOG_ERROR,
                "snapshot: out of memory queueing the removal of %.*s.bloom; it "
                "will be loaded again at the next start",
                (int)len, name);
        count_failure(s);
        return SNAPSHOT_ENOMEM;
    }
    memcpy(j->name, name, len);
    j->name[len] = '\0';
    jobs_post(s->jobs, &j->job);
    return 0;
}

struct jobs *snapshot_jobs(struct snapshotter *s)
{
    return s->jobs;
}

void snapshot_get_stats(struct snapshotter *s, struct snapshot_stats *out)
{
    if (s == NULL) {
        memset(out, 0, sizeof *out);
        return;
    }
    pthread_mutex_lock(&s->lock);
    *out = s->stats;
    pthread_mutex_unlock(&s->lock);
    out->running = jobs_running(s->jobs);
}

/* ---- lifecycle ---- */

static void snapshotter_free(struct snapshotter *s)
{
    if (s->timer)
        event_free(s->timer);
    jobs_stop(s->jobs);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int snapshot_start(struct server *srv, struct event_base *base)
{
    struct snapshotter *s = calloc(1, sizeof *s);
    if (s == NULL)
        return SNAPSHOT_ENOMEM;
    s->srv = srv;
    pthread_mutex_init(&s->lock, NULL);
    s->jobs = jobs_start(base, SNAPSHOT_NICE, &srv->stopping);
    if (s->jobs == NULL)
        goto fail;
    if (srv->cfg.snapshot_interval > 0) {
        struct timeval tv = {.tv_sec = srv->cfg.snapshot_interval};
        s->timer = event_new(base, -1, EV_PERSIST, on_timer, s);
        if (s->timer == NULL || event_add(s->timer, &tv) != 0) {
            log_msg(LOG_ERROR, "snapshot: cannot start the timer");
            goto fail;
        }
    }
    srv->snap = s;
    return 0;
fail:
    snapshotter_free(s);
    return SNAPSHOT_ESYS;
}

int snapshot_stop(struct server *srv)
{
    struct snapshotter *s = srv->snap;
    if (s == NULL)
        return 0;
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    uint64_t failures = s->stats.failures;
    pthread_mutex_unlock(&s->lock);
    struct snap_job *j = write_job(s, NULL, NULL, NULL);
    if (j == NULL) {
        log_msg(LOG_ERROR, "snapshot: out of memory for the final snapshot");
        rc = SNAPSHOT_ENOMEM;
    } else {
        jobs_post(s->jobs, &j->job);
    }
    if (s->timer) {
        event_free(s->timer);
        s->timer = NULL;
    }
    jobs_stop(s->jobs); /* runs the final snapshot first */
    s->jobs = NULL;
    if (rc == 0 && s->stats.failures != failures)
        rc = SNAPSHOT_EIO;
    snapshotter_free(s);
    srv->snap = NULL;
    return rc;
}
