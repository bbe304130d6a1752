/*
 * snapshot.c - the snapshot policy on top of the job thread. The event loop queues jobs
 * (write these filters, delete that file) holding filter references; the job thread
 * runs them in order and hands finished FLUSH and DROP jobs back through their done
 * callbacks, so those commands answer only once their effect is on disk. Workload: few
 * filters, some of them gigabytes, written while clients keep adding to them.
 *
 * Two lanes (two job threads), so that a DROP or the FLUSH of a small filter never waits
 * behind a long write of another: the quick lane takes file removals and FLUSHes of
 * filters under SNAPSHOT_QUICK_BYTES (but time-driven ones); the long lane everything else (the
 * timer's and FLUSH-all's writes, big FLUSHes). The lanes are the server's (srv->lanes,
 * core/jobs.h); other modules post their own background work on them.
 *
 * Why no stale file can come back, with two lanes: per name, the two lanes take turns
 * (claim(): a lane works on a name only while the other does not), so a write's last
 * check of its filter and its rename happen wholly before or after a removal or another
 * write of that name. A filter leaves the table (DROP: dropped) or is swapped out (CLEAR,
 * INTERSECT, background set operations: replaced) on the loop before any later job is
 * queued, and a write checks both flags before encoding and again just before the
 * rename, under its turn: so a write of a dropped or replaced object never lands after
 * the removal or the newer write. The one order the flags cannot give, a removal of an
 * old object's file landing after the write of a newer object of the same name (DROP
 * then CREATE), is kept by claim(): the long lane does not touch a name while a removal
 * of it queued earlier is pending (the quick lane keeps its own FIFO order). A swapped
 * object's replacement starts dirty and is written by the next job; until then the old
 * snapshot stands, exactly as if the CLEAR had come just after it.
 */
#include "server/persist/snapshot.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/request.h"
#include "server/core/clock.h"
#include "server/core/jobs.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/persist/durable.h"
#include "server/persist/snapfile.h"
#include "server/store/registry.h"

/* A FLUSH of a filter with fewer bytes than this goes to the quick lane. */
#define SNAPSHOT_QUICK_BYTES ((uint64_t)4 << 20)

enum lane {
    LANE_LONG = JOBS_LONG,
    LANE_QUICK = JOBS_QUICK,
};

struct snap_job;

struct snapshotter {
    struct server *srv;
    pthread_mutex_t lock;      /* guards everything below but timer */
    pthread_cond_t turn;       /* broadcast when a lane lets go of a name or a removal ends */
    const char *busy[2];       /* the name each lane works on now, or NULL */
    uint64_t seq;              /* lane jobs posted so far */
    struct snap_job *removals; /* removal jobs posted and not finished */
    struct snap_job *flushes;  /* queued FLUSH <name> jobs not started yet (merge targets) */
    bool periodic_queued;      /* a timer job is queued or running: skip the next tick */
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
    void (*drop)(void *arg);       /* called instead of done when that is skipped; or NULL */
    bool done_called;              /* done ran (drop must not) */
    void *arg;
    struct waiter *waiters;      /* more FLUSHes of the same filter merged into this write */
    struct filter *target;       /* FLUSH <name>: the filter; else NULL */
    struct snap_job *next_flush; /* s->flushes */
    bool started;                /* the job thread took it (under s->lock) */
    enum lane lane;
    uint64_t seq;                  /* order of posting, across both lanes */
    struct snap_job *next_removal; /* s->removals */
    uint64_t covered;    /* SNAP_WRITE: journal position when queued: what the files cover */
    uint64_t dropped_at; /* SNAP_DELETE: the journal's last position when queued (its DROP) */
    int err;             /* result: 0 or SNAPSHOT_EIO */
    char why[256];       /* the first failure */
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
    return !atomic_load_explicit(&f->dropped, memory_order_acquire) &&
           !atomic_load_explicit(&f->replaced, memory_order_acquire);
}

/* Waits for j's lane's turn on name (see the top of the file), then takes it. */
static void claim(struct snap_job *j, const char *name)
{
    struct snapshotter *s = j->s;
    enum lane other = j->lane == LANE_LONG ? LANE_QUICK : LANE_LONG;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        bool wait = s->busy[other] != NULL && strcmp(s->busy[other], name) == 0;
        for (const struct snap_job *r = s->removals; r != NULL && !wait && j->lane == LANE_LONG;
             r = r->next_removal)
            wait = r->seq < j->seq && strcmp(r->name, name) == 0;
        if (!wait)
            break;
        pthread_cond_wait(&s->turn, &s->lock);
    }
    s->busy[j->lane] = name;
    pthread_mutex_unlock(&s->lock);
}

/* Waits until every removal posted before j has finished (FLUSH of every filter covers
 * the DROPs before it, as when one thread ran everything). */
static void wait_removals(struct snap_job *j)
{
    struct snapshotter *s = j->s;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        bool wait = false;
        for (const struct snap_job *r = s->removals; r != NULL && !wait; r = r->next_removal)
            wait = r->seq < j->seq;
        if (!wait)
            break;
        pthread_cond_wait(&s->turn, &s->lock);
    }
    pthread_mutex_unlock(&s->lock);
}

/* Lets go of j's turn; a removal also leaves s->removals. */
static void unclaim(struct snap_job *j)
{
    struct snapshotter *s = j->s;
    pthread_mutex_lock(&s->lock);
    s->busy[j->lane] = NULL;
    if (j->kind == SNAP_DELETE) {
        struct snap_job **pp = &s->removals;
        while (*pp != NULL && *pp != j)
            pp = &(*pp)->next_removal;
        if (*pp == j)
            *pp = j->next_removal;
    }
    pthread_cond_broadcast(&s->turn);
    pthread_mutex_unlock(&s->lock);
}

/* Writes f if it changed since its last snapshot. Adds the bytes written to *bytes and
 * returns true if a file was written or a write failed. */
static bool write_filter(struct snap_job *j, struct filter *f, uint64_t *bytes)
{
    struct snapshotter *s = j->s;
    if (!still_wanted(f))
        return false;
    /* Read the counter before encoding: a change after this point leaves it different,
     * so the filter stays dirty even if the encoder already passed the changed bits. */
    uint64_t seen = atomic_load_explicit(&f->changes, memory_order_acquire);
    if (seen == 0)
        return false;
    struct snapfile_error err;
    uint64_t n = 0;
    uint64_t t0 = clock_mono_ms();
    int rc = snapfile_write(s->srv->cfg.data_dir, f->name, f->ops, f->obj, j->covered, f->seed,
                            still_wanted, f, &n, &err);
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
        claim(j, j->filters[i]->name);
        any |= write_filter(j, j->filters[i], &bytes);
        unclaim(j);
        /* Let go as soon as possible: a dropped filter's memory is freed here. */
        filter_unref(j->filters[i]);
        j->filters[i] = NULL;
    }
    if (j->all)
        wait_removals(j);
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
    /* Not before the DROP record is on disk: a crash between the two would bring the
     * filter back from the journal's records, though it was dropped (and answered). */
    if (durable_wait(j->s->srv, j->dropped_at, msg, sizeof msg) != 0) {
        log_msg(LOG_ERROR,
                "snapshot: the file of dropped filter '%s' stays until its DROP is on "
                "disk (%s)",
                j->name, msg);
        job_fail(j, msg);
        count_failure(j->s);
        return;
    }
    claim(j, j->name);
    int rc = snapfile_remove(j->s->srv->cfg.data_dir, j->name, &err);
    unclaim(j);
    if (rc == 0)
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
    j->done_called = true;
    j->done(j->arg, j->err, j->why);
    for (struct waiter *w = j->waiters; w != NULL; w = w->next)
        w->done(w->arg, j->err, j->why);
}

static void snap_free(struct job *job)
{
    struct snap_job *j = (struct snap_job *)job;
    if (j->drop != NULL && !j->done_called)
        j->drop(j->arg);
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
/*
 * The filters holding a UNION/INTERSECT result no snapshot has yet (setop_pos above
 * journal_pos), but skip, as references in a malloc'd array (*n of them; NULL when none).
 * Replay applies such a record to its sources as they are at that point of the journal:
 * a source written (FLUSH) or removed (DROP) before them would give them other keys.
 */
static struct filter **pending_setops(struct snapshotter *s, const struct filter *skip, size_t *n)
{
    struct filter **all;
    size_t m, k = 0;
    *n = 0;
    if (registry_collect(s->srv->reg, NULL, 0, &all, &m) != REGISTRY_OK)
        return NULL;
    for (size_t i = 0; i < m; i++) {
        struct filter *f = all[i];
        if (f != skip && atomic_load(&f->setop_pos) > atomic_load(&f->journal_pos))
            all[k++] = f;
        else
            filter_unref(f);
    }
    if (k == 0) {
        free(all);
        return NULL;
    }
    *n = k;
    return all;
}

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
        /* Set operation results waiting for their first snapshot go first (see above). */
        size_t np;
        struct filter **pend = pending_setops(s, f, &np);
        j->filters = malloc((np + 1) * sizeof *j->filters);
        if (j->filters == NULL) {
            for (size_t i = 0; i < np; i++)
                filter_unref(pend[i]);
            free(pend);
            free(j);
            return NULL;
        }
        if (np > 0)
            memcpy(j->filters, pend, np * sizeof *pend);
        free(pend);
        filter_ref(f);
        j->filters[np] = f;
        j->n = np + 1;
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

/* Queues j on a lane, numbered; a removal is listed until it finished. */
static void post(struct snapshotter *s, struct snap_job *j, enum lane lane)
{
    pthread_mutex_lock(&s->lock);
    j->lane = lane;
    j->seq = ++s->seq;
    if (j->kind == SNAP_DELETE) {
        j->next_removal = s->removals;
        s->removals = j;
    }
    pthread_mutex_unlock(&s->lock);
    jobs_post(s->srv->lanes[lane], &j->job);
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
    post(s, j, LANE_LONG);
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

static int flush(struct snapshotter *s, struct filter *f, snapshot_done_fn done,
                 void (*drop)(void *arg), void *arg)
{
    if (f != NULL && done != NULL && drop == NULL && merge_flush(s, f, done, arg))
        return 0;
    struct snap_job *j = write_job(s, f, done, arg);
    if (j == NULL)
        return SNAPSHOT_ENOMEM;
    j->drop = drop;
    if (f != NULL && done != NULL) {
        j->target = f; /* j holds a reference to f */
        pthread_mutex_lock(&s->lock);
        j->next_flush = s->flushes;
        s->flushes = j;
        pthread_mutex_unlock(&s->lock);
    }
    /* A time-driven filter's dropped generations are freed by a job on the long lane
     * (advance.c), after the jobs queued before it there: its writes stay on that lane. */
    struct kind_info info = {0};
    if (f != NULL)
        f->ops->info(f->obj, &info);
    bool quick = f != NULL && f->ops->advance == NULL && info.bytes < SNAPSHOT_QUICK_BYTES;
    post(s, j, quick ? LANE_QUICK : LANE_LONG);
    return 0;
}

int snapshot_flush(struct snapshotter *s, struct filter *f, snapshot_done_fn done, void *arg)
{
    return flush(s, f, done, NULL, arg);
}

int snapshot_flush_owned(struct snapshotter *s, struct filter *f, snapshot_done_fn done,
                         void (*drop)(void *arg), void *arg)
{
    return flush(s, f, done, drop, arg);
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
    j->dropped_at = durable_last_pos(s->srv);
    /* Set operation results waiting for their first snapshot are written before the
     * file goes, on the same lane: replay may need this filter's records to apply them. */
    size_t np;
    struct filter **pend = pending_setops(s, NULL, &np);
    if (pend != NULL) {
        struct snap_job *w = new_job(s, SNAP_WRITE, NULL, NULL);
        if (w != NULL) {
            w->covered = durable_last_pos(s->srv);
            w->filters = pend;
            w->n = np;
            post(s, w, LANE_QUICK);
        } else {
            for (size_t i = 0; i < np; i++)
                filter_unref(pend[i]);
            free(pend);
        }
    }
    post(s, j, LANE_QUICK);
    return 0;
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
    out->running =
        jobs_running(s->srv->lanes[JOBS_LONG]) || jobs_running(s->srv->lanes[JOBS_QUICK]);
}

/* ---- lifecycle ---- */

static void snapshotter_free(struct snapshotter *s)
{
    if (s->timer)
        event_free(s->timer);
    pthread_cond_destroy(&s->turn);
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
    pthread_cond_init(&s->turn, NULL);
    if (srv->lanes[JOBS_LONG] == NULL || srv->lanes[JOBS_QUICK] == NULL) {
        log_msg(LOG_ERROR, "snapshot: the server's job lanes are not running");
        goto fail;
    }
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

/* Wakes wait_long_lane once every job queued on the long lane before it has run. It
 * signals from free(), the job thread's last touch of a job: b lives on the waiter's stack. */
struct barrier {
    struct job job;
    pthread_mutex_t *lock;
    pthread_cond_t *cond;
    bool *passed;
};

static void barrier_run(struct job *job)
{
    (void)job;
}

static void barrier_free(struct job *job)
{
    struct barrier *b = (struct barrier *)job;
    pthread_mutex_t *lock = b->lock;
    pthread_mutex_lock(lock);
    *b->passed = true;
    pthread_cond_broadcast(b->cond);
    pthread_mutex_unlock(lock);
}

/* Blocks until the long lane ran every job queued so far. Loop thread, at the end. */
static void wait_long_lane(struct snapshotter *s)
{
    bool passed = false;
    struct barrier b = {.job = {.run = barrier_run, .free = barrier_free},
                        .lock = &s->lock,
                        .cond = &s->turn,
                        .passed = &passed};
    jobs_post(s->srv->lanes[JOBS_LONG], &b.job);
    pthread_mutex_lock(&s->lock);
    while (!passed)
        pthread_cond_wait(&s->turn, &s->lock);
    pthread_mutex_unlock(&s->lock);
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
        post(s, j, LANE_LONG);
    }
    if (s->timer) {
        event_free(s->timer);
        s->timer = NULL;
    }
    wait_long_lane(s); /* the final snapshot is written (the quick lane still runs) */
    if (rc == 0 && s->stats.failures != failures)
        rc = SNAPSHOT_EIO;
    snapshotter_free(s);
    srv->snap = NULL;
    return rc;
}
