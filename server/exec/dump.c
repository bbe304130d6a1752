/*
 * dump.c - DUMP and RESTORE (see dump.h). Workload: rare requests moving whole filters,
 * some of them gigabytes, while other clients keep their latency: the loop only copies
 * chunks (CHUNK bytes per read job) and never decodes, encodes or touches the disk.
 *
 * DUMP sends the filter's snapshot file after a FLUSH of it. The reply line must give the
 * size before the first byte, and the encoding's size changes with every add (runs of
 * zero pages are compressed), so a live encode cannot be announced; the file, once
 * renamed into place, never changes (a later snapshot replaces it by rename, and the open
 * descriptor keeps the old one), so its size is exact. Two chunk buffers: one drained by
 * the connection while the quick lane reads the next.
 */
#include "server/exec/dump.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/container.h"
#include "server/core/budget.h"
#include "server/core/clock.h"
#include "server/core/jobs.h"
#include "server/core/log.h"
#include "server/core/park.h"
#include "server/core/server.h"
#include "server/exec/cmdlib.h"
#include "server/exec/mutate.h"
#include "server/exec/stats.h"
#include "server/persist/snapshot.h"
#include "server/store/kinds.h"
#include "server/store/offload.h"
#include "server/store/registry.h"

#define CHUNK ((size_t)1 << 20) /* bytes of the file read per job */

/* ---- DUMP ---- */

struct dump;

/* A job of a dump. A job struct is never posted again from its own done step (jobs.c
 * frees it after that step), so the reads alternate between two. */
struct dump_job {
    struct job job; /* first member */
    struct dump *d;
};

struct dump {
    struct completion_body body; /* first member: handed to the connection */
    struct dump_job open;        /* opens the file */
    struct dump_job reads[2];    /* one read in flight at a time, alternating */
    unsigned next_read;          /* the reads[] entry the next read uses */
    struct server *srv;
    struct completion *later; /* until the reply line is given */
    _Atomic int refs;         /* the owner's, and one while the job is in flight */
    char name[PROTO_MAX_NAME + 1];
    int fd;
    uint64_t size;    /* of the file: what the reply line announced */
    uint64_t read_at; /* bytes read by finished jobs */
    unsigned char *cur, *next;
    size_t cur_len, cur_pos; /* cur[cur_pos..cur_len) not yet handed out */
    size_t next_len;         /* the job's result in next */
    bool next_ready;         /* next holds a finished read */
    bool reading;            /* a read job is in flight */
    bool failed;             /* a read failed: the body cannot be completed */
    bool closed;             /* the owner closed the body */
    size_t tail_sent;        /* bytes of the "\r\n" after the file handed out */
    int err;                 /* errno of the job, 0 if none */
    bool scan;               /* BF.SCANDUMP: one chunk (dump.h), not the whole file */
    uint64_t iter;           /* its iterator: 0 the header, else the offset + 1 */
    size_t bound;            /* its chunk's bytes at most */
};

static void dump_release(struct dump *d)
{
    if (atomic_fetch_sub(&d->refs, 1) != 1)
        return;
    if (d->fd >= 0)
        close(d->fd);
    free(d->cur);
    free(d->next);
    budget_release(&d->srv->budget, BUDGET_CONNECTIONS, 2 * CHUNK);
    free(d);
}

static struct dump *dump_of_job(struct job *j)
{
    return ((struct dump_job *)j)->d;
}

static void job_free(struct job *j)
{
    dump_release(dump_of_job(j));
}

static void post_job(struct dump *d, struct dump_job *dj, void (*run)(struct job *),
                     void (*done)(struct job *), void (*free_fn)(struct job *))
{
    atomic_fetch_add(&d->refs, 1);
    *dj = (struct dump_job){.job = {.run = run, .done = done, .free = free_fn}, .d = d};
    jobs_post(d->srv->lanes[JOBS_QUICK], &dj->job);
}

/* On the quick lane: the next chunk into d->next. */
static void read_run(struct job *j)
{
    struct dump *d = dump_of_job(j);
    uint64_t left = d->size - d->read_at;
    size_t want = left < CHUNK ? (size_t)left : CHUNK, got = 0;
    d->err = 0;
    while (got < want) {
        ssize_t n = pread(d->fd, d->next + got, want - got, (off_t)(d->read_at + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            d->err = n < 0 ? errno : EIO; /* the file cannot shrink: an early end is an error */
            break;
        }
        got += (size_t)n;
    }
    d->next_len = got;
}

static void read_done(struct job *j)
{
    struct dump *d = dump_of_job(j);
    d->reading = false;
    if (d->err != 0) {
        log_msg(LOG_ERROR, "dump: reading %s.bloom: %s", d->name, strerror(d->err));
        d->failed = true;
    } else {
        d->read_at += d->next_len;
        d->next_ready = true;
    }
    if (!d->closed && d->body.wake != NULL)
        d->body.wake(d->body.owner);
}

/* Starts the read of the next chunk if next is free and bytes are left. */
static void kick(struct dump *d)
{
    if (!d->reading && !d->next_ready && !d->failed && d->read_at < d->size) {
        d->reading = true;
        struct dump_job *dj = &d->reads[d->next_read];
        d->next_read ^= 1u;
        post_job(d, dj, read_run, read_done, job_free);
    }
}

static long body_read(struct completion_body *b, void *buf, size_t cap)
{
    struct dump *d = (struct dump *)b;
    if (d->failed)
        return -1;
    if (d->cur_pos == d->cur_len && d->next_ready) {
        unsigned char *t = d->cur;
        d->cur = d->next;
        d->next = t;
        d->cur_len = d->next_len;
        d->cur_pos = 0;
        d->next_ready = false;
    }
    kick(d);
    if (d->cur_pos == d->cur_len) {
        if (d->reading)
            return COMPLETION_BODY_AGAIN;
        /* Every byte of the file went out: the protocol's "\r\n" ends the block. */
        size_t t = 2 - d->tail_sent < cap ? 2 - d->tail_sent : cap;
        memcpy(buf, "\r\n" + d->tail_sent, t);
        d->tail_sent += t;
        return (long)t;
    }
    size_t n = d->cur_len - d->cur_pos < cap ? d->cur_len - d->cur_pos : cap;
    memcpy(buf, d->cur + d->cur_pos, n);
    d->cur_pos += n;
    return (long)n;
}

static void body_close(struct completion_body *b)
{
    struct dump *d = (struct dump *)b;
    d->closed = true;
    dump_release(d);
}

/* On the quick lane: opens the file the flush made durable. */
static void open_run(struct job *j)
{
    struct dump *d = dump_of_job(j);
    char path[CONFIG_PATH_MAX + PROTO_MAX_NAME + 16];
    snprintf(path, sizeof path, "%s/%s.bloom", d->srv->cfg.data_dir, d->name);
    d->err = 0;
    d->fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat sb;
    if (d->fd < 0 || fstat(d->fd, &sb) != 0) {
        d->err = errno;
        return;
    }
    d->size = (uint64_t)sb.st_size;
    if (!d->scan)
        return;
    if (d->iter == 0) {
        /* The header: what the loading side needs before the bytes, no read. */
        unsigned char *h = d->cur;
        memset(h, 0, DUMP_CHUNK_HEADER);
        memcpy(h, "bloomdSC", 8);
        h[8] = 1;
        for (int i = 0; i < 8; i++)
            h[16 + i] = (unsigned char)(d->size >> (8 * i));
        d->cur_len = DUMP_CHUNK_HEADER;
        d->read_at = d->size;
        return;
    }
    uint64_t from = d->iter - 1 < d->size ? d->iter - 1 : d->size;
    d->read_at = from;
    d->size = d->size - from > d->bound ? from + d->bound : d->size;
}

/* The open job's end: the owner's reference too when open_done was skipped (stopping). */
static void open_free(struct job *j)
{
    struct dump *d = dump_of_job(j);
    if (d->later != NULL)
        dump_release(d);
    dump_release(d);
}

static void open_done(struct job *j)
{
    struct dump *d = dump_of_job(j);
    struct completion *later = d->later;
    d->later = NULL;
    if (d->err != 0) {
        char msg[300];
        if (d->err == ENOENT)
            snprintf(msg, sizeof msg, "dump: %s.bloom is gone (dropped meanwhile?)", d->name);
        else
            snprintf(msg, sizeof msg, "dump: open %s.bloom: %s", d->name, strerror(d->err));
        completion_finish(later, RESULT_SERVER_ERROR, msg);
        dump_release(d); /* the owner's reference: nobody took the body */
        return;
    }
    struct result r;
    result_init(&r);
    r.status = RESULT_DUMP;
    r.count = d->scan && d->iter == 0 ? DUMP_CHUNK_HEADER : d->size - d->read_at;
    kick(d); /* the first chunk is read while the reply line goes out */
    completion_finish_body(later, &r, &d->body);
    result_free(&r);
}

/* The server stopped before the flush answered: nobody takes the body. */
static void dump_dropped(void *arg)
{
    dump_release(arg);
}

static void dump_flushed(void *arg, int err, const char *why)
{
    struct dump *d = arg;
    if (err != 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "dump: snapshot of %s failed: %s", d->name, why);
        completion_finish(d->later, RESULT_SERVER_ERROR, msg);
        dump_release(d);
        return;
    }
    post_job(d, &d->open, open_run, open_done, open_free);
}

size_t dump_chunk_bound(const struct server *srv)
{
    size_t m = srv->cfg.max_line;
    size_t b = m > 4096 ? m - 1024 : m / 2; /* room for LOADCHUNK's framing and name */
    b = b < DUMP_CHUNK_MAX ? b : DUMP_CHUNK_MAX;
    return b > 0 ? b : 1;
}

static bool load_chunk(struct server *srv, const struct proto_request *req, struct result *res,
                       struct completion *later);

bool dump_execute(struct server *srv, const struct proto_request *req, struct result *res,
                  struct completion *later)
{
    if (req->replace)
        return load_chunk(srv, req, res, later);
    if (srv->snap == NULL || later == NULL || srv->lanes[JOBS_QUICK] == NULL) {
        result_set(res, RESULT_SERVER_ERROR, "snapshots are not running");
        return false;
    }
    struct filter *f = cmdlib_lookup(srv, req->name);
    if (f == NULL) {
        cmdlib_not_found(res, req->name);
        return false;
    }
    struct dump *d = calloc(1, sizeof *d);
    if (d != NULL) {
        d->cur = malloc(CHUNK);
        d->next = malloc(CHUNK);
    }
    if (d == NULL || d->cur == NULL || d->next == NULL) {
        if (d != NULL) {
            free(d->cur);
            free(d->next);
        }
        free(d);
        filter_unref(f);
        result_set(res, RESULT_SERVER_ERROR, "out of memory");
        return false;
    }
    budget_charge(&srv->budget, BUDGET_CONNECTIONS, 2 * CHUNK);
    d->body.read = body_read;
    d->body.close = body_close;
    d->srv = srv;
    d->later = later;
    d->fd = -1;
    atomic_init(&d->refs, 1);
    memcpy(d->name, req->name.ptr, req->name.len);
    d->name[req->name.len] = '\0';
    d->scan = req->data_len != 0;
    d->iter = d->scan ? req->data_len - 1 : 0;
    d->bound = dump_chunk_bound(srv);
    if (d->scan && d->iter > 0) {
        /* A later chunk: the file the first call's FLUSH wrote, not a new one. */
        filter_unref(f);
        post_job(d, &d->open, open_run, open_done, open_free);
        return true;
    }
    int rc = snapshot_flush_owned(srv->snap, f, dump_flushed, dump_dropped, d);
    filter_unref(f);
    if (rc != 0) {
        dump_release(d);
        result_set(res, RESULT_SERVER_ERROR, "out of memory");
        return false;
    }
    return true;
}

/* ---- RESTORE ---- */

#define RESTORE_FREE_INLINE ((uint64_t)16 << 20) /* larger blocks are freed on the long lane */
#define RESTORE_FAULT_STEP ((size_t)32 << 20)    /* block bytes faulted in per quick-lane job */

struct restore;

/* A job faulting in the next step of a block; two alternate (see struct dump_job). */
struct fault_job {
    struct job job; /* first member */
    struct restore *r;
};

struct restore {
    struct job job; /* first member: the decode, on the long lane */
    struct server *srv;
    uint64_t seed;    /* the dump's hash seed (its container header), once decoded */
    _Atomic int refs; /* the owner's (the connection, then the decode), and a fault job's */
    struct fault_job faults[2];
    unsigned next_fault;       /* the faults[] entry the next job uses */
    bool faulting;             /* a fault job is in flight */
    bool aborted;              /* the client left: nobody feeds or waits */
    uint64_t ready;            /* block bytes faulted in (loop thread, from the jobs' done) */
    uint64_t fault_at;         /* where the job in flight starts */
    void (*wake)(void *owner); /* more of the block can be fed now */
    void *owner;
    struct completion *later;
    char name[PROTO_MAX_NAME + 1];
    size_t name_len;
    bool replace;
    unsigned char *data; /* the block, size bytes, counted in BUDGET_CONNECTIONS */
    uint64_t size, have; /* bytes of it, and received so far */
    uint64_t read;       /* the decoder's position in data */
    char tail[2];        /* the bytes after the block: must be "\r\n" */
    size_t tail_have;    /* of them received */
    const struct kind_ops *ops;
    void *obj;                          /* decoded, until installed */
    int rc;                             /* the decode's sbf_err */
    uint64_t t_begin, t_end, t_decoded; /* clock_mono_ms: line read, block in, decoded */
    char why[160]; /* why the decode refused, for CLIENT_ERROR bad dump (...) */
};

/* Frees the block's memory and gives its bytes back to the budget (any thread). */
static void free_block(struct restore *r)
{
    if (r->data == NULL)
        return;
    munmap(r->data, (size_t)r->size);
    r->data = NULL;
    budget_release(&r->srv->budget, BUDGET_CONNECTIONS, (size_t)r->size);
}

static void restore_free(struct restore *r)
{
    if (atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    free_block(r);
    if (r->obj != NULL)
        r->ops->free(r->obj);
    free(r);
}

/* On the quick lane: the next step of the block, one write per page. */
static void fault_run(struct job *j)
{
    struct restore *r = ((struct fault_job *)j)->r;
    uint64_t end =
        r->fault_at + RESTORE_FAULT_STEP < r->size ? r->fault_at + RESTORE_FAULT_STEP : r->size;
    long page = sysconf(_SC_PAGESIZE);
    size_t step = page > 0 ? (size_t)page : 4096;
    for (uint64_t at = r->fault_at; at < end; at += step)
        ((volatile unsigned char *)r->data)[at] = 0;
}

static void fault_more(struct restore *r);

static void fault_done(struct job *j)
{
    struct restore *r = ((struct fault_job *)j)->r;
    r->faulting = false;
    uint64_t end = r->fault_at + RESTORE_FAULT_STEP;
    r->ready = end < r->size ? end : r->size;
    if (r->aborted)
        return;
    fault_more(r);
    if (r->wake != NULL)
        r->wake(r->owner);
}

static void noop_run(struct job *j);
static void decode_free(struct job *j);

static void fault_free(struct job *j)
{
    struct restore *r = ((struct fault_job *)j)->r;
    /* The last reference of a block the client left: unmapped on the long lane, not here. */
    if (r->aborted && atomic_load(&r->refs) == 1 && r->size >= RESTORE_FREE_INLINE &&
        r->srv->lanes[JOBS_LONG] != NULL) {
        r->job = (struct job){.run = noop_run, .free = decode_free};
        jobs_post(r->srv->lanes[JOBS_LONG], &r->job);
        return;
    }
    restore_free(r);
}

/* Starts faulting the next step in unless one is in flight or the block is ready. */
static void fault_more(struct restore *r)
{
    if (r->faulting || r->ready >= r->size || r->aborted)
        return;
    struct fault_job *fj = &r->faults[r->next_fault];
    r->next_fault ^= 1u;
    r->faulting = true;
    r->fault_at = r->ready;
    atomic_fetch_add(&r->refs, 1);
    *fj = (struct fault_job){.job = {.run = fault_run, .done = fault_done, .free = fault_free},
                             .r = r};
    jobs_post(r->srv->lanes[JOBS_QUICK], &fj->job);
}

/* restore_begin's checks and block; pieces: BF.LOADCHUNK's (later comes at the end, and
 * each request's chunk, bounded, is faulted in on the loop as it is copied). */
static struct restore *restore_open(struct server *srv, const struct proto_request *req,
                                    struct result *res, struct completion *later, bool pieces)
{
    if (mutate_check(srv, res) != 0)
        return NULL;
    if ((later == NULL && !pieces) || srv->lanes[JOBS_LONG] == NULL) {
        result_set(res, RESULT_SERVER_ERROR, "background jobs are not running");
        return NULL;
    }
    if (req->data_len < CONTAINER_HEADER_BYTES) {
        result_set(res, RESULT_CLIENT_ERROR, "bad dump (shorter than a snapshot header)");
        return NULL;
    }
    if (req->data_len > srv->budget.limit) {
        char msg[160];
        snprintf(msg, sizeof msg, "dump too large (%llu bytes; max_memory is %llu)",
                 (unsigned long long)req->data_len, (unsigned long long)srv->budget.limit);
        result_set_copy(res, RESULT_CLIENT_ERROR, msg, strlen(msg));
        return NULL;
    }
    struct filter *f = req->replace ? NULL : registry_get(srv->reg, req->name.ptr, req->name.len);
    if (f != NULL) {
        filter_unref(f);
        result_set(res, RESULT_EXISTS, NULL);
        return NULL;
    }
    size_t n = (size_t)req->data_len;
    struct restore *r = calloc(1, sizeof *r);
    if (r == NULL || !budget_reserve(&srv->budget, BUDGET_CONNECTIONS, n)) {
        free(r);
        char msg[160];
        snprintf(msg, sizeof msg, "out of memory (a %llu-byte dump does not fit max_memory)",
                 (unsigned long long)req->data_len);
        result_set_copy(res, RESULT_SERVER_ERROR, msg, strlen(msg));
        return NULL;
    }
    /* Its own mapping: touched ahead of the data on the quick lane, unmapped at once. */
    r->data =
        mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r->data == MAP_FAILED) {
        r->data = NULL;
        budget_release(&srv->budget, BUDGET_CONNECTIONS, n);
        free(r);
        result_set(res, RESULT_SERVER_ERROR, "out of memory");
        return NULL;
    }
    r->srv = srv;
    atomic_init(&r->refs, 1);
    r->later = later;
    r->t_begin = clock_mono_ms();
    r->size = req->data_len;
    r->replace = req->replace;
    memcpy(r->name, req->name.ptr, req->name.len);
    r->name[req->name.len] = '\0';
    r->name_len = req->name.len;
    if (!pieces && srv->lanes[JOBS_QUICK] != NULL && n > RESTORE_FAULT_STEP)
        fault_more(r);
    else
        r->ready = r->size; /* small, or in pieces: faulted on the loop as it comes */
    return r;
}

struct restore *restore_begin(struct server *srv, struct stats *st, const struct proto_request *req,
                              struct result *res, struct completion *later)
{
    st->commands++;
    st->cmd[req->cmd]++;
    return restore_open(srv, req, res, later, false);
}

void restore_set_wake(struct restore *r, void (*wake)(void *owner), void *owner)
{
    r->wake = wake;
    r->owner = owner;
}

size_t restore_feed(struct restore *r, const char *buf, size_t len)
{
    uint64_t room = r->ready - r->have;
    size_t n = room < len ? (size_t)room : len;
    memcpy(r->data + r->have, buf, n);
    r->have += n;
    if (r->have < r->size)
        return n; /* the rest waits for the fault jobs */
    size_t t = 0;
    for (size_t i = n; i < len && r->tail_have < sizeof r->tail; i++, t++)
        r->tail[r->tail_have++] = buf[i];
    return n + t;
}

static void noop_run(struct job *j)
{
    (void)j;
}

void restore_abort(struct restore *r)
{
    r->aborted = true; /* a fault job in flight keeps r until its free */
    /* Freeing gigabytes of touched pages takes the loop long: the long lane does it. */
    if (r->size >= RESTORE_FREE_INLINE && r->srv->lanes[JOBS_LONG] != NULL) {
        r->job = (struct job){.run = noop_run, .free = decode_free};
        jobs_post(r->srv->lanes[JOBS_LONG], &r->job);
        return;
    }
    restore_free(r);
}

/* The decoder's reader: the block in memory. */
static long read_mem(void *ctx, void *buf, size_t len)
{
    struct restore *r = ctx;
    uint64_t left = r->size - r->read;
    size_t n = left < len ? (size_t)left : len;
    memcpy(buf, r->data + r->read, n);
    r->read += n;
    return (long)n;
}

static const struct kind_ops *find_kind(void *ctx, uint32_t tag)
{
    (void)ctx;
    return kinds_by_tag(tag);
}

/* On the long lane: decodes and checks everything before anything is installed. */
static void decode_run(struct job *j)
{
    struct restore *r = (struct restore *)j;
    struct container_header hdr;
    r->rc = container_decode(read_mem, r, find_kind, NULL, r->srv->budget.limit,
                             &r->srv->budget.sbf, &r->ops, &r->obj, &hdr);
    r->seed = r->rc == SBF_OK ? hdr.seed : 0; /* the dump's own: its keys hash with it */
    if (r->rc == SBF_OK && r->read != r->size) {
        r->ops->free(r->obj);
        r->obj = NULL;
        r->rc = SBF_ECORRUPT;
        snprintf(r->why, sizeof r->why, "%llu bytes after the filter's end",
                 (unsigned long long)(r->size - r->read));
    } else if (r->rc != SBF_OK) {
        snprintf(r->why, sizeof r->why, "%s", sbf_strerror(r->rc));
    }
    /* The block is not needed any more: its memory goes back before the reply. */
    free_block(r);
    if (r->obj != NULL && r->ops->advance != NULL) /* not published yet: no reader */
        (void)r->ops->advance(r->obj, clock_window_ms(), NULL, NULL);
    r->t_decoded = clock_mono_ms();
}

/* Writes of the name tried before RESTORED is given up on (each covers the record). */
#define RESTORE_FLUSH_TRIES 4

/* A RESTORE waiting for a snapshot of its name that covers its record. */
struct restore_wait {
    struct server *srv;
    struct completion *later;
    uint64_t pos; /* the RESTORE record's */
    int tries;
    size_t name_len;
    char name[PROTO_MAX_NAME + 1];
};

static void wait_drop(void *arg)
{
    free(arg);
}

/*
 * A flush of the name finished. The write is skipped when the object was swapped out
 * meanwhile (a CLEAR or INTERSECT of it while the snapshot held it): then the filter now
 * under the name is written, whose file also covers the record; a name dropped
 * meanwhile needs nothing (the DROP is journaled after the record).
 */
static void restored(void *arg, int err, const char *why)
{
    struct restore_wait *w = arg;
    if (err != 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "restored in memory, but its snapshot failed: %s", why);
        completion_finish(w->later, RESULT_SERVER_ERROR, msg);
        free(w);
        return;
    }
    struct server *srv = w->srv;
    struct filter *f = registry_get(srv->reg, w->name, w->name_len);
    bool again = f != NULL && atomic_load(&f->journal_pos) < w->pos && srv->snap != NULL;
    if (again && ++w->tries > RESTORE_FLUSH_TRIES) {
        completion_finish(w->later, RESULT_SERVER_ERROR,
                          "restored in memory, but the filter kept changing before its "
                          "snapshot; it is written at the next one");
        free(w);
    } else if (again && snapshot_flush_owned(srv->snap, f, restored, wait_drop, w) == 0) {
        /* answered when that write is done */
    } else {
        completion_finish(w->later, again ? RESULT_SERVER_ERROR : RESULT_RESTORED,
                          again ? "restored in memory, but its snapshot could not be queued"
                                : NULL);
        free(w);
    }
    filter_unref(f);
}

static void decode_done(struct job *j)
{
    struct restore *r = (struct restore *)j;
    struct server *srv = r->srv;
    struct completion *later = r->later;
    char msg[256];
    if (r->rc == SBF_EBUDGET || r->rc == SBF_ENOMEM || r->rc == SBF_ETOOBIG) {
        snprintf(msg, sizeof msg, "out of memory (the restored filter does not fit max_memory)");
        completion_finish(later, RESULT_SERVER_ERROR, msg);
        return;
    }
    if (r->rc != SBF_OK) {
        snprintf(msg, sizeof msg, "bad dump (%s)", r->why);
        completion_finish(later, RESULT_CLIENT_ERROR, msg);
        return;
    }
    struct proto_slice name = {r->name, r->name_len};
    struct result res;
    result_init(&res);
    if (mutate_check(srv, &res) != 0) {
        completion_finish(later, res.status, res.text);
        result_free(&res);
        return;
    }
    result_free(&res);
    struct filter *f = registry_get(srv->reg, r->name, r->name_len);
    filter_unref(f);
    if (f != NULL && !r->replace) {                    /* created while the block was decoded */
        offload_release(srv, NULL, 0, r->ops, r->obj); /* maybe gigabytes: not on the loop */
        r->obj = NULL;
        completion_finish(later, RESULT_EXISTS, NULL);
        return;
    }
    uint64_t pos = 0;
    void *obj = r->obj;
    r->obj = NULL; /* taken over by mutate_restore, whatever it returns */
    int rc = mutate_restore(srv, name, r->ops, obj, r->seed, r->replace, &pos);
    if (rc != SBF_OK) {
        completion_finish(later, rc == SBF_EINVAL ? RESULT_EXISTS : RESULT_SERVER_ERROR,
                          rc == SBF_EINVAL ? NULL : "out of memory");
        return;
    }
    log_msg(LOG_INFO,
            "restore: installed %s (%s) from %llu bytes: received in %llu ms, decoded in %llu ms",
            r->name, r->ops->name, (unsigned long long)r->size,
            (unsigned long long)(r->t_end - r->t_begin),
            (unsigned long long)(r->t_decoded - r->t_end));
    /* The crash rule (mutate.h): the answer waits for the new filter's snapshot, queued now,
     * before any other record can name it. */
    f = registry_get(srv->reg, r->name, r->name_len);
    if (srv->snap == NULL || f == NULL) {
        filter_unref(f);
        completion_finish(later, RESULT_RESTORED, NULL);
        return;
    }
    struct restore_wait *w = calloc(1, sizeof *w);
    if (w != NULL) {
        *w = (struct restore_wait){.srv = srv, .later = later, .pos = pos, .name_len = r->name_len};
        memcpy(w->name, r->name, r->name_len + 1);
    }
    if (w == NULL || snapshot_flush_owned(srv->snap, f, restored, wait_drop, w) != 0) {
        free(w);
        completion_finish(later, RESULT_SERVER_ERROR,
                          "restored in memory, but its snapshot could not be queued");
    }
    filter_unref(f);
}

static void decode_free(struct job *j)
{
    restore_free((struct restore *)j);
}

void restore_end(struct restore *r)
{
    if (r->tail_have != 2 || r->tail[0] != '\r' || r->tail[1] != '\n') {
        completion_finish(r->later, RESULT_CLIENT_ERROR,
                          "bad data chunk (the block must end with \\r\\n)");
        restore_free(r);
        return;
    }
    r->t_end = clock_mono_ms();
    r->job = (struct job){.run = decode_run, .done = decode_done, .free = decode_free};
    jobs_post(r->srv->lanes[JOBS_LONG], &r->job);
}

/* ---- BF.LOADCHUNK ---- */

/* A load in progress: its restore takes the chunks (loop thread only). */
struct chunk_load {
    struct restore *r; /* NULL: the slot is free */
    uint64_t used_ms;  /* clock_mono_ms of its last chunk */
};

static struct chunk_load loads[DUMP_LOADS];

static void load_drop(struct chunk_load *l)
{
    restore_abort(l->r);
    l->r = NULL;
}

static struct chunk_load *load_of(struct proto_slice name)
{
    for (size_t i = 0; i < DUMP_LOADS; i++)
        if (loads[i].r != NULL && loads[i].r->name_len == name.len &&
            memcmp(loads[i].r->name, name.ptr, name.len) == 0)
            return &loads[i];
    return NULL;
}

static bool load_refuse(struct result *res, const char *why)
{
    result_set_copy(res, RESULT_CLIENT_ERROR, why, strlen(why));
    return false;
}

static bool load_chunk(struct server *srv, const struct proto_request *req, struct result *res,
                       struct completion *later)
{
    uint64_t now = clock_mono_ms(), iter = req->data_len;
    const unsigned char *p = (const unsigned char *)req->args.ptr;
    size_t len = req->args.len;
    for (size_t i = 0; i < DUMP_LOADS; i++)
        if (loads[i].r != NULL && now - loads[i].used_ms > DUMP_LOAD_IDLE_MS)
            load_drop(&loads[i]); /* its client went away: the budget gets its bytes back */
    struct chunk_load *l = load_of(req->name);
    if (iter == 1) {
        if (l != NULL)
            load_drop(l); /* a header again: the load starts over */
        if (len != DUMP_CHUNK_HEADER || memcmp(p, "bloomdSC", 8) != 0)
            return load_refuse(res, "bad data chunk (not a BF.SCANDUMP header of bloomd)");
        if (p[8] != 1 || p[9] != 0 || p[10] != 0 || p[11] != 0)
            return load_refuse(res, "bad data chunk (a BF.SCANDUMP header of a later version)");
        uint64_t total = 0;
        for (int i = 0; i < 8; i++)
            total |= (uint64_t)p[16 + i] << (8 * i);
        struct chunk_load *free_slot = NULL;
        for (size_t i = 0; i < DUMP_LOADS && free_slot == NULL; i++)
            if (loads[i].r == NULL)
                free_slot = &loads[i];
        if (free_slot == NULL) {
            result_set(res, RESULT_SERVER_ERROR, "too many BF.LOADCHUNK loads in progress");
            return false;
        }
        struct proto_request rq = {.cmd = PROTO_CMD_RESTORE, .name = req->name, .data_len = total};
        struct restore *r = restore_open(srv, &rq, res, NULL, true);
        if (r == NULL)
            return false; /* EXISTS, too large, out of budget, read only */
        *free_slot = (struct chunk_load){.r = r, .used_ms = now};
        result_set(res, RESULT_OK, NULL);
        return false;
    }
    if (l == NULL)
        return load_refuse(res, "bad data chunk (no load of this key: its header chunk, "
                                "iter 1, comes first)");
    struct restore *r = l->r;
    if (iter - 1 < len || iter - 1 - len != r->have || len > r->size - r->have || len == 0) {
        char why[200];
        snprintf(why, sizeof why,
                 "bad data chunk (%zu bytes ending at iter %llu; the load has %llu of %llu)", len,
                 (unsigned long long)iter, (unsigned long long)r->have,
                 (unsigned long long)r->size);
        load_drop(l);
        return load_refuse(res, why);
    }
    size_t n = restore_feed(r, req->args.ptr, len);
    assert(n == len); /* in pieces, the whole block is ready at once */
    (void)n;
    l->used_ms = now;
    if (r->have < r->size) {
        result_set(res, RESULT_OK, NULL);
        return false;
    }
    (void)restore_feed(r, "\r\n", 2); /* the block's end, as RESTORE's client sends */
    l->r = NULL;
    if (later == NULL) {
        restore_abort(r);
        result_set(res, RESULT_SERVER_ERROR, "background jobs are not running");
        return false;
    }
    r->later = later;
    restore_end(r);
    return true;
}
