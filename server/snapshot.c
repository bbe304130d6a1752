/*
 * snapshot.c - the snapshot thread and its FIFO job queue. The event loop posts jobs
 * (write these filters, delete that file) holding filter references; the one thread runs
 * them in order and hands finished FLUSH and DROP jobs back through an eventfd, so those
 * commands answer only once their effect is on disk. Workload: few filters, some of them
 * gigabytes, written while clients keep adding to them.
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

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "proto/proto.h"
#include "server/commands.h"
#include "server/conn.h"
#include "server/log.h"
#include "server/registry.h"
#include "server/server.h"
#include "server/snapfile.h"

/* Nice value of the snapshot thread (the event loop keeps the process's, normally 0). */
#define SNAPSHOT_NICE 10

enum job_kind {
    JOB_WRITE,  /* write each dirty filter of filters[] */
    JOB_DELETE, /* remove name's files */
};

struct job {
    struct job *next;
    enum job_kind kind;
    struct filter **filters; /* JOB_WRITE: one reference each, dropped once written */
    size_t n;
    char name[PROTO_MAX_NAME + 1]; /* JOB_DELETE */
    bool periodic;                 /* queued by the timer */
    snapshot_done_fn done;         /* FLUSH, DROP: called on the event loop; else NULL */
    void *arg;
    int err;       /* result: 0 or SNAPSHOT_EIO */
    char why[256]; /* the first failure */
};

struct snapshotter {
    struct server *srv;
    pthread_t thread;
    pthread_mutex_t lock;         /* guards everything down to `stats` */
    pthread_cond_t cond;          /* signalled when a job is queued or quit is set */
    struct job *head, *tail;      /* queued jobs, oldest first */
    struct job *done, *done_tail; /* finished jobs with a done callback, in order */
    bool quit;                    /* the thread exits once the queue is empty */
    bool periodic_queued;         /* a timer job is queued or running: skip the next tick */
    struct snapshot_stats stats;
    int efd;               /* eventfd: the thread wakes the event loop */
    struct event *done_ev; /* reads efd, runs the done callbacks */
    struct event *timer;   /* every snapshot_interval seconds; NULL if disabled */
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void job_free(struct job *j)
{
    if (j == NULL)
        return;
    for (size_t i = 0; i < j->n; i++)
        filter_unref(j->filters[i]);
    free(j->filters);
    free(j);
}

static void job_fail(struct job *j, const char *why)
{
    if (j->err == 0)
        snprintf(j->why, sizeof j->why, "%s", why);
    j->err = SNAPSHOT_EIO;
}

/* ---- the thread ---- */

static bool still_wanted(void *arg)
{
    const struct filter *f = arg;
    return !atomic_load_explicit(&f->dropped, memory_order_acquire);
}

/* Writes f if it changed since its last snapshot. Adds the bytes written to *bytes and
 * returns true if a file was written or a write failed. */
static bool write_filter(struct snapshotter *s, struct job *j, struct filter *f, uint64_t *bytes)
{
    if (atomic_load_explicit(&f->dropped, memory_order_acquire))
        return false;
    /* Read the counter before encoding: a change after this point leaves it different,
     * so the filter stays dirty even if the encoder already passed the changed bits. */
    uint64_t seen = atomic_load_explicit(&f->changes, memory_order_acquire);
    if (seen == 0)
        return false;
    struct snapfile_error err;
    uint64_t n = 0;
    uint64_t t0 = now_ms();
    int rc = snapfile_write(s->srv->cfg.data_dir, f->name, f->sbf, still_wanted, f, &n, &err);
    if (rc == SNAPFILE_EABANDONED)
        return false;
    if (rc == 0) {
        atomic_compare_exchange_strong_explicit(&f->changes, &seen, 0, memory_order_acq_rel,
                                                memory_order_relaxed);
        atomic_store_explicit(&f->saved_at, (int64_t)time(NULL), memory_order_relaxed);
        *bytes += n;
        log_msg(LOG_DEBUG, "snapshot: wrote %s.bloom, %llu bytes in %llu ms", f->name,
                (unsigned long long)n, (unsigned long long)(now_ms() - t0));
        pthread_mutex_lock(&s->lock);
        s->stats.written++;
        pthread_mutex_unlock(&s->lock);
        return true;
    }
    char msg[sizeof j->why];
    snapfile_format(&err, msg, sizeof msg);
    log_msg(LOG_ERROR,
            "snapshot of filter '%s' failed (%s); previous snapshot kept, retrying "
            "at the next one",
            f->name, msg);
    job_fail(j, msg);
    pthread_mutex_lock(&s->lock);
    s->stats.failures++;
    pthread_mutex_unlock(&s->lock);
    return true;
}

static void run_write(struct snapshotter *s, struct job *j)
{
    int64_t started = (int64_t)time(NULL);
    uint64_t t0 = now_ms(), bytes = 0;
    bool any = false;
    for (size_t i = 0; i < j->n; i++) {
        any |= write_filter(s, j, j->filters[i], &bytes);
        /* Let go as soon as possible: a dropped filter's memory is freed here. */
        filter_unref(j->filters[i]);
        j->filters[i] = NULL;
    }
    uint64_t ms = now_ms() - t0;
    if (!any)
        return;
    pthread_mutex_lock(&s->lock);
    s->stats.last_time = started;
    s->stats.last_duration_ms = ms;
    s->stats.last_bytes = bytes;
    pthread_mutex_unlock(&s->lock);
    if (j->err == 0)
        log_msg(LOG_INFO, "snapshot: %llu bytes in %llu ms", (unsigned long long)bytes,
                (unsigned long long)ms);
}

static void run_delete(struct snapshotter *s, struct job *j)
{
    struct snapfile_error err;
    char msg[sizeof j->why];
    if (snapfile_remove(s->srv->cfg.data_dir, j->name, &err) == 0)
        return;
    snapfile_format(&err, msg, sizeof msg);
    log_msg(LOG_ERROR, "snapshot: removing dropped filter '%s' failed (%s)", j->name, msg);
    job_fail(j, msg);
    pthread_mutex_lock(&s->lock);
    s->stats.failures++;
    pthread_mutex_unlock(&s->lock);
}

static void *snap_thread(void *arg)
{
    struct snapshotter *s = arg;
    /* Linux nice is per thread: on a busy machine clients go first, the disk waits. */
    if (setpriority(PRIO_PROCESS, (id_t)gettid(), SNAPSHOT_NICE) != 0)
        log_msg(LOG_DEBUG, "snapshot: cannot lower the thread's priority: %s", strerror(errno));
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->head == NULL && !s->quit)
            pthread_cond_wait(&s->cond, &s->lock);
        struct job *j = s->head;
        if (j == NULL)
            break; /* quit, and nothing left to do */
        s->head = j->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->stats.running = true;
        pthread_mutex_unlock(&s->lock);

        if (j->kind == JOB_WRITE)
            run_write(s, j);
        else
            run_delete(s, j);

        pthread_mutex_lock(&s->lock);
        s->stats.running = false;
        if (j->periodic)
            s->periodic_queued = false;
        if (j->done != NULL) {
            j->next = NULL;
            if (s->done_tail)
                s->done_tail->next = j;
            else
                s->done = j;
            s->done_tail = j;
            uint64_t one = 1;
            /* Cannot fail short of a counter overflow; the loop drains it every time. */
            if (write(s->efd, &one, sizeof one) < 0)
                log_msg(LOG_ERROR, "snapshot: eventfd write: %s", strerror(errno));
        } else {
            pthread_mutex_unlock(&s->lock);
            job_free(j);
            pthread_mutex_lock(&s->lock);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ---- the event loop's side ---- */

static void enqueue(struct snapshotter *s, struct job *j)
{
    pthread_mutex_lock(&s->lock);
    if (s->tail)
        s->tail->next = j;
    else
        s->head = j;
    s->tail = j;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

/* A write job for f (with a reference), or for every filter when f is NULL. */
static struct job *write_job(struct snapshotter *s, struct filter *f)
{
    struct job *j = calloc(1, sizeof *j);
    if (j == NULL)
        return NULL;
    j->kind = JOB_WRITE;
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

static void on_done(evutil_socket_t fd, short what, void *arg)
{
    struct snapshotter *s = arg;
    uint64_t count;
    (void)what;
    if (read(fd, &count, sizeof count) < 0 && errno != EAGAIN)
        log_msg(LOG_ERROR, "snapshot: eventfd read: %s", strerror(errno));
    pthread_mutex_lock(&s->lock);
    struct job *list = s->done;
    s->done = s->done_tail = NULL;
    pthread_mutex_unlock(&s->lock);
    while (list != NULL) {
        struct job *j = list;
        list = j->next;
        /* Stopping: the connections waiting for these answers are gone. */
        if (!s->srv->stopping)
            j->done(j->arg, j->err, j->why);
        job_free(j);
    }
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
    struct job *j = write_job(s, NULL);
    if (j == NULL) {
        log_msg(LOG_ERROR, "snapshot: out of memory queueing the periodic snapshot");
        return;
    }
    j->periodic = true;
    pthread_mutex_lock(&s->lock);
    s->periodic_queued = true;
    pthread_mutex_unlock(&s->lock);
    enqueue(s, j);
}

int snapshot_flush(struct snapshotter *s, struct filter *f, snapshot_done_fn done, void *arg)
{
    struct job *j = write_job(s, f);
    if (j == NULL)
        return SNAPSHOT_ENOMEM;
    j->done = done;
    j->arg = arg;
    enqueue(s, j);
    return 0;
}

int snapshot_forget(struct snapshotter *s, const char *name, size_t len, snapshot_done_fn done,
                    void *arg)
{
    struct job *j = calloc(1, sizeof *j);
    if (j == NULL || len >= sizeof j->name) {
        free(j);
        log_msg(LOG_ERROR,
                "snapshot: out of memory queueing the removal of %.*s.bloom; it "
                "will be loaded again at the next start",
                (int)len, name);
        pthread_mutex_lock(&s->lock);
        s->stats.failures++;
        pthread_mutex_unlock(&s->lock);
        return SNAPSHOT_ENOMEM;
    }
    j->kind = JOB_DELETE;
    memcpy(j->name, name, len);
    j->name[len] = '\0';
    j->done = done;
    j->arg = arg;
    enqueue(s, j);
    return 0;
}

/* Appends word, or SERVER_ERROR <lead><why> if err, to conn's output and resumes it. */
static void answer(struct conn *c, int err, const char *word, const char *lead, const char *why)
{
    struct proto_buf *out = conn_output(c);
    if (err == 0) {
        proto_reply_word(out, word);
    } else {
        char msg[512];
        snprintf(msg, sizeof msg, "%s%s", lead, why);
        proto_reply_error(out, "SERVER_ERROR", msg);
    }
    conn_resume(c);
}

static void flush_done(void *arg, int err, const char *why)
{
    answer(arg, err, "OK", "", why);
}

#define DROP_LEAD "filter dropped from memory, but its file could not be removed: "

static void drop_done(void *arg, int err, const char *why)
{
    answer(arg, err, "DELETED", DROP_LEAD, why);
}

int snapshot_cmd_drop(struct server *srv, struct proto_slice name, struct proto_buf *out,
                      struct conn *conn)
{
    if (!registry_remove(srv->reg, name.ptr, name.len)) {
        proto_reply_word(out, "NOT_FOUND");
        return CMD_DONE;
    }
    if (srv->snap == NULL) {
        proto_reply_word(out, "DELETED");
        return CMD_DONE;
    }
    /* Without a connection to answer later, the file goes in the background. */
    bool later = conn != NULL;
    if (snapshot_forget(srv->snap, name.ptr, name.len, later ? drop_done : NULL, conn) != 0) {
        proto_reply_error(out, "SERVER_ERROR", DROP_LEAD "out of memory");
        return CMD_DONE;
    }
    if (!later) {
        proto_reply_word(out, "DELETED");
        return CMD_DONE;
    }
    return CMD_PENDING;
}

int snapshot_cmd_flush(struct server *srv, struct proto_slice name, struct proto_buf *out,
                       struct conn *conn)
{
    struct filter *f = NULL;
    if (name.len > 0 && (f = registry_get(srv->reg, name.ptr, name.len)) == NULL) {
        proto_reply_word(out, "NOT_FOUND");
        return CMD_DONE;
    }
    if (srv->snap == NULL || conn == NULL) {
        proto_reply_error(out, "SERVER_ERROR", "snapshots are not running");
        return CMD_DONE;
    }
    if (snapshot_flush(srv->snap, f, flush_done, conn) != 0) {
        proto_reply_error(out, "SERVER_ERROR", "out of memory");
        return CMD_DONE;
    }
    return CMD_PENDING;
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
}

void snapshot_write_stats(struct snapshotter *s, struct proto_buf *out)
{
    struct snapshot_stats st;
    snapshot_get_stats(s, &st);
    proto_reply_stat_u64(out, "snapshot_last_time", (uint64_t)st.last_time);
    proto_reply_stat_u64(out, "snapshot_last_duration_ms", st.last_duration_ms);
    proto_reply_stat_u64(out, "snapshot_last_bytes", st.last_bytes);
    proto_reply_stat_u64(out, "snapshot_failures", st.failures);
    proto_reply_stat_u64(out, "snapshots_written", st.written);
    proto_reply_stat_u64(out, "snapshot_running", st.running);
}

void snapshot_write_info(const struct filter *f, struct proto_buf *out)
{
    int64_t t = atomic_load_explicit(&f->saved_at, memory_order_relaxed);
    proto_reply_stat_u64(out, "snapshot_time", (uint64_t)t);
}

/* ---- start-up and shutdown ---- */

static int on_loaded(void *ctx, const char *name, struct sbf *f, uint64_t bytes, int64_t mtime)
{
    struct server *srv = ctx;
    struct filter *flt = filter_new(name, strlen(name), f);
    if (flt == NULL) {
        sbf_free(f);
        log_msg(LOG_ERROR, "snapshot: out of memory loading %s.bloom", name);
        return SNAPSHOT_ENOMEM;
    }
    /* Clean: the file holds exactly this content. */
    atomic_store(&flt->changes, 0);
    atomic_store(&flt->saved_at, mtime);
    int rc = registry_put(srv->reg, flt);
    filter_unref(flt);
    if (rc != REGISTRY_OK) {
        log_msg(LOG_ERROR, "snapshot: cannot register %s.bloom: %s", name,
                rc == REGISTRY_EXISTS ? "name taken" : "out of memory");
        return SNAPSHOT_ENOMEM;
    }
    log_msg(LOG_INFO, "snapshot: loaded filter '%s' (%llu bytes)", name, (unsigned long long)bytes);
    return 0;
}

static void on_report(void *ctx, enum snapfile_event ev, const char *file, const char *moved_to,
                      const char *reason)
{
    (void)ctx;
    switch (ev) {
    case SNAPFILE_EV_TMP_REMOVED:
        log_msg(LOG_INFO, "snapshot: removed stale %s (an interrupted snapshot)", file);
        break;
    case SNAPFILE_EV_QUARANTINED:
        log_msg(LOG_ERROR, "snapshot: %s is damaged (%s); moved aside to %s, not loaded", file,
                reason, moved_to);
        break;
    case SNAPFILE_EV_KEPT_BAD:
        log_msg(LOG_ERROR, "snapshot: %s is damaged (%s); not loaded", file, reason);
        break;
    case SNAPFILE_EV_IGNORED:
        log_msg(LOG_WARN, "snapshot: ignoring %s: %s", file, reason);
        break;
    }
}

int snapshot_load(struct server *srv)
{
    struct snapfile_load_ops ops = {.loaded = on_loaded, .report = on_report, .ctx = srv};
    struct snapfile_error err;
    char msg[512];
    int rc = snapfile_load_dir(srv->cfg.data_dir, 0, &srv->budget.sbf, &ops, &err);
    if (rc == 0)
        return 0;
    if (rc != SNAPFILE_ECALLER) {
        snapfile_format(&err, msg, sizeof msg);
        log_msg(LOG_ERROR, "snapshot: loading the data directory failed: %s", msg);
    }
    return SNAPSHOT_EIO;
}

static void snapshotter_free(struct snapshotter *s)
{
    if (s->timer)
        event_free(s->timer);
    if (s->done_ev)
        event_free(s->done_ev);
    if (s->efd >= 0)
        close(s->efd);
    while (s->done) {
        struct job *j = s->done;
        s->done = j->next;
        job_free(j);
    }
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int snapshot_start(struct server *srv)
{
    struct snapshotter *s = calloc(1, sizeof *s);
    if (s == NULL)
        return SNAPSHOT_ENOMEM;
    s->srv = srv;
    s->efd = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd < 0) {
        log_msg(LOG_ERROR, "snapshot: eventfd: %s", strerror(errno));
        goto fail;
    }
    s->done_ev = event_new(srv->base, s->efd, EV_READ | EV_PERSIST, on_done, s);
    if (s->done_ev == NULL || event_add(s->done_ev, NULL) != 0) {
        log_msg(LOG_ERROR, "snapshot: cannot watch the eventfd");
        goto fail;
    }
    if (srv->cfg.snapshot_interval > 0) {
        struct timeval tv = {.tv_sec = srv->cfg.snapshot_interval};
        s->timer = event_new(srv->base, -1, EV_PERSIST, on_timer, s);
        if (s->timer == NULL || event_add(s->timer, &tv) != 0) {
            log_msg(LOG_ERROR, "snapshot: cannot start the timer");
            goto fail;
        }
    }
    int e = pthread_create(&s->thread, NULL, snap_thread, s);
    if (e != 0) {
        log_msg(LOG_ERROR, "snapshot: cannot start the thread: %s", strerror(e));
        goto fail;
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
    struct job *j = write_job(s, NULL);
    if (j == NULL) {
        log_msg(LOG_ERROR, "snapshot: out of memory for the final snapshot");
        rc = SNAPSHOT_ENOMEM;
    } else {
        enqueue(s, j);
    }
    pthread_mutex_lock(&s->lock);
    s->quit = true;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    if (rc == 0 && s->stats.failures != failures)
        rc = SNAPSHOT_EIO;
    snapshotter_free(s);
    srv->snap = NULL;
    return rc;
}
