/*
 * repl.c - the primary's side of replication and the role. Every record exec/mutate.c
 * makes enters the backlog and goes from there to each replica that is up to date: at
 * once with min_replica_acks (replies wait for it), else in batches of 256 KiB or 5 ms
 * (one write and one wake-up of the replica per batch, not per loop pass); a replica
 * behind (its output full, or catching up after a sync) is fed from the backlog as its
 * output drains, and cut off once the backlog no longer holds what it needs: a slow
 * replica costs the primary its output bound, never more.
 *
 * Where the journal runs, its segments are the backlog's older part: a replica whose
 * offset the ring no longer holds, but the journal's segments do, is fed from them, read
 * back on the long lane FEED_READ bytes at a time (in the budget while held), until it
 * reaches the ring. A read that fails, or finds a record damaged, missing or truncated
 * away, cuts the feed (the replica resyncs in full): no gap is ever sent.
 *
 * A full sync sends every filter's snapshot encoding, made one filter at a time on the
 * long lane (beside the writer, as snapshots are), counted in the memory budget while
 * held, then the records after the sync's offset from the backlog.
 *
 * With min_replica_acks N, a change's reply is held (in order) until N replicas
 * acknowledged its record, then handed to the journal's hold; after replica_ack_timeout
 * it fails with SERVER_ERROR instead.
 */
#include "server/repl/repl.h"

#include <errno.h>
#include <event2/event.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "lib/container.h"
#include "proto/number.h"
#include "server/core/budget.h"
#include "server/core/clock.h"
#include "server/core/jobs.h"
#include "server/core/log.h"
#include "server/core/park.h"
#include "server/core/server.h"
#include "server/exec/mutate.h"
#include "server/persist/durable.h"
#include "server/persist/journal.h"
#include "server/repl/backlog.h"
#include "server/repl/repl_internal.h"
#include "server/store/offload.h"
#include "server/store/registry.h"

/* A feed writes while its connection holds less than this unsent. */
#define FEED_WINDOW ((size_t)1 << 20)
/* Without min_replica_acks, new records go to the replicas once this many bytes of them
 * wait, or after FEED_DELAY_US: one write, and one wake-up of the replica, per batch. */
#define FEED_BATCH ((size_t)256 << 10)
#define FEED_DELAY_US 5000
/* Bytes of frames one job reads back from the journal for a replica behind the ring. */
#define FEED_READ ((size_t)4 << 20)
/* A replica behind the ring waits this long for the journal's disk to hold what it needs
 * (under everysec the newest records are written before they are synced). */
#define FEED_RETRY_US 20000

enum feed_state {
    FEED_SYNCING,   /* sending filters */
    FEED_STREAMING, /* sending records */
};

struct repl_feed {
    struct repl_feed *next, *prev;
    struct repl *r;
    struct server *srv;
    struct repl_sink sink;
    enum feed_state state;
    uint64_t sent;  /* offset of the last record sent */
    uint64_t acked; /* offset it acknowledged */
    bool cut;       /* cut off: waiting for its connection to close */
    /* full sync */
    struct filter **filters; /* references, the ones not sent yet from next on */
    size_t nfilters, next_filter;
    unsigned char *buf; /* the filter being sent, encoded; counted in the budget */
    size_t len, off, cap;
    bool encoding;         /* a job is encoding filters[next] */
    uint64_t size_hint;    /* the bytes the last try at filters[next] needed, or 0 */
    unsigned encode_tries; /* tries at filters[next] that did not fit */
    bool orphaned;         /* the connection closed while the job ran: done() frees */
    /* behind the ring: read back from the journal */
    bool reading;               /* a job reads the journal for it */
    struct journal_cursor jcur; /* where the last read ended (jcur.next: a position) */
    struct event *retry;        /* waiting for the journal's disk; NULL until needed */
};

struct repl_held {
    struct repl_held *next;
    uint64_t offset;
    uint64_t deadline_ms;
    struct completion *later;
    struct result res;
};

void repl_new_id(char *id)
{
    unsigned char raw[REPL_ID_LEN / 2];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        uint64_t t = clock_mono_ns() ^ (uint64_t)clock_wall_ms() << 20;
        for (size_t i = 0; i < sizeof raw; i++)
            raw[i] = (unsigned char)(t >> (8 * (i % 8))) ^ (unsigned char)(i * 151);
    }
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(id + 2 * i, 3, "%02x", raw[i]);
}

/* ---- the replica's place in the stream, on disk ---- */

static void state_path(const struct repl *r, char *out, size_t cap, const char *suffix)
{
    snprintf(out, cap, "%s/replica.state%s", r->srv->cfg.data_dir, suffix);
}

int repl_state_save(struct repl *r)
{
    char path[CONFIG_PATH_MAX + 32], tmp[CONFIG_PATH_MAX + 32];
    state_path(r, path, sizeof path, "");
    state_path(r, tmp, sizeof tmp, ".tmp");
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        goto fail;
    fprintf(f, "bloomd-replica 1 %s %llu\n", r->id, (unsigned long long)r->srv->repl.delta);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        fclose(f);
        goto fail;
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        goto fail;
    return 0;
fail:
    log_msg(LOG_WARN, "replication: cannot write %s: %s (a restart resyncs in full)", path,
            strerror(errno));
    unlink(tmp);
    return -1;
}

void repl_state_remove(struct repl *r)
{
    char path[CONFIG_PATH_MAX + 32];
    state_path(r, path, sizeof path, "");
    if (unlink(path) != 0 && errno != ENOENT)
        log_msg(LOG_WARN, "replication: cannot remove %s: %s", path, strerror(errno));
}

int repl_state_load(struct repl *r)
{
    char path[CONFIG_PATH_MAX + 32], id[REPL_ID_LEN + 8];
    unsigned long long delta;
    int version;
    state_path(r, path, sizeof path, "");
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int n = fscanf(f, "bloomd-replica %d %47s %llu", &version, id, &delta);
    fclose(f);
    if (n != 3 || version != 1 || strlen(id) != REPL_ID_LEN) {
        log_msg(LOG_WARN, "replication: ignoring %s (not valid)", path);
        return -1;
    }
    if (!durable_on(r->srv)) {
        /* Without a journal the snapshot may lack records since: a full sync, but these
         * filters are a replica's copy, not an old primary's to send (rejoin.c). */
        r->was_replica = true;
        log_msg(LOG_INFO, "replication: %s with no journal here: this replica resyncs in full",
                path);
        return -1;
    }
    memcpy(r->id, id, REPL_ID_LEN + 1);
    r->srv->repl.delta = delta;
    r->srv->repl.offset = durable_last_pos(r->srv) + delta;
    log_msg(LOG_INFO, "replication: this replica holds stream %s up to offset %llu", r->id,
            (unsigned long long)r->srv->repl.offset);
    return 0;
}

/* ---- feeds ---- */

static unsigned streaming(const struct repl *r)
{
    unsigned n = 0;
    for (const struct repl_feed *f = r->feeds; f != NULL; f = f->next)
        n += f->state == FEED_STREAMING && !f->cut;
    return n;
}

static void count_connected(struct repl *r)
{
    r->srv->repl.connected = streaming(r);
}

static void drop_buf(struct repl_feed *f)
{
    if (f->buf != NULL)
        budget_release(&f->srv->budget, BUDGET_OVERHEAD, f->cap);
    offload_free(f->srv, f->buf); /* a big filter's encoding: its munmap took 0.5 s */
    f->buf = NULL;
    f->len = f->off = f->cap = 0;
}

static void release_filters(struct repl_feed *f)
{
    for (size_t i = f->next_filter; i < f->nfilters; i++)
        filter_unref(f->filters[i]);
    free(f->filters);
    f->filters = NULL;
    f->nfilters = f->next_filter = 0;
}

static void cut(struct repl_feed *f, const char *why)
{
    if (f->cut)
        return;
    f->cut = true;
    count_connected(f->r);
    f->sink.close(f->sink.conn, why);
}

static void journal_forget(struct repl *r);

void repl_close_feeds(struct repl *r, const char *why)
{
    journal_forget(r);
    for (struct repl_feed *f = r->feeds; f != NULL; f = f->next)
        cut(f, why);
}

static void journal_catch_up(struct repl_feed *f);

/* Sends records from the backlog while the connection has room. */
static void catch_up(struct repl_feed *f)
{
    struct repl *r = f->r;
    while (!f->cut && !f->reading && f->sent < r->srv->repl.offset &&
           f->sink.unsent(f->sink.conn) < FEED_WINDOW) {
        if (!backlog_has(r->backlog, f->sent)) {
            journal_catch_up(f);
            return;
        }
        const void *p;
        size_t n;
        uint64_t last;
        backlog_read(r->backlog, f->sent, FEED_WINDOW, &p, &n, &last);
        if (n == 0 || !f->sink.write(f->sink.conn, p, n))
            return;
        f->sent = last;
    }
}

/* ---- behind the ring: the journal's segments ---- */

static void feed_free(struct repl_feed *f);

/* The journal position of the record after offset, if the journal holds it as the
 * stream's record (jfrom on, not truncated), else 0. */
static uint64_t journal_pos_after(const struct repl *r, uint64_t offset)
{
    const struct journal *j = durable_journal(r->srv);
    if (j == NULL)
        return 0;
    uint64_t pos = offset + 1 - r->jdelta; /* modulo 2^64, as srv->repl.delta */
    bool held = pos >= r->jfrom && pos >= journal_first_pos(j) && pos <= journal_last_pos(j);
    return held ? pos : 0;
}

/*
 * Keeps jdelta and jfrom true to the journal, for each record made or applied here (the
 * journal took it already): once offsets and positions move apart (a full sync of this
 * server, a record the journal did not take), the stretch the journal serves begins
 * after this record.
 */
static void journal_track(struct repl *r, uint64_t offset)
{
    const struct journal *j = durable_journal(r->srv);
    if (j == NULL)
        return;
    uint64_t last = journal_last_pos(j);
    if (offset - last != r->jdelta) {
        r->jdelta = offset - last;
        r->jfrom = last + 1;
    }
}

/* The journal serves no record made so far: a new role, a RESTORE, a full resync. */
static void journal_forget(struct repl *r)
{
    const struct journal *j = durable_journal(r->srv);
    r->jdelta = r->srv->repl.delta;
    r->jfrom = j != NULL ? journal_last_pos(j) + 1 : 0;
}

struct read_job {
    struct job job;
    struct server *srv;
    struct repl_feed *f;
    struct journal_cursor cur; /* from f->jcur; given back to it */
    uint64_t upto;             /* the last position to read: on disk when posted */
    uint64_t delta;            /* offsets minus positions */
    unsigned char *buf;        /* FEED_READ bytes: frames */
    unsigned char *frame;      /* delta != 0: one frame re-encoded */
    struct journal_scratch *scratch;
    size_t len;
    int rc;
    bool done_ran;
    struct journal_error err;
};

/* What a read job holds, counted in the budget from its post to its free. */
#define READ_CHARGE (FEED_READ + JOURNAL_RECORD_MAX + sizeof(struct journal_scratch))

static void read_run(struct job *job)
{
    struct read_job *j = (struct read_job *)job;
    j->buf = malloc(FEED_READ);
    j->scratch = malloc(sizeof *j->scratch);
    if (j->buf == NULL || j->scratch == NULL) {
        j->rc = JOURNAL_ENOMEM;
        return;
    }
    j->rc = journal_read_frames(j->srv->cfg.data_dir, &j->cur, j->upto, j->buf, FEED_READ, &j->len,
                                j->scratch, &j->err);
    if (j->rc != 0 || j->delta == 0)
        return;
    /* A promoted replica's journal: positions are the offsets shifted. A frame that decodes
     * re-encodes to exactly its bytes, so at its offset it is the one its primary sent. */
    if ((j->frame = malloc(JOURNAL_RECORD_MAX)) == NULL) {
        j->rc = JOURNAL_ENOMEM;
        return;
    }
    for (size_t at = 0; at < j->len;) {
        struct journal_record rec;
        long n = journal_record_decode(j->buf + at, j->len - at, j->scratch, &rec);
        if (n <= 0 ||
            journal_record_encode(&rec, rec.pos + j->delta, j->frame, JOURNAL_RECORD_MAX) != n) {
            j->rc = JOURNAL_EDAMAGED;
            j->err = (struct journal_error){.step = JOURNAL_STEP_READ, .code = JOURNAL_EDAMAGED};
            snprintf(j->err.file, sizeof j->err.file, "%s", JOURNAL_SUBDIR);
            return;
        }
        memcpy(j->buf + at, j->frame, (size_t)n);
        at += (size_t)n;
    }
}

static void read_done(struct job *job)
{
    struct read_job *j = (struct read_job *)job;
    struct repl_feed *f = j->f;
    struct repl *r = f->r;
    j->done_ran = true;
    f->reading = false;
    if (f->orphaned) {
        j->f = NULL;
        feed_free(f);
        return;
    }
    if (f->cut)
        return;
    if (j->rc != 0) {
        char msg[1200], why[1400];
        if (j->rc == JOURNAL_EGONE || j->rc == JOURNAL_EDAMAGED)
            r->jfrom = j->cur.next + 1 > r->jfrom ? j->cur.next + 1 : r->jfrom; /* not again */
        snprintf(
            why, sizeof why, "reading the journal back for it failed: %s (it will resync in full)",
            j->rc == JOURNAL_ENOMEM ? "out of memory" : journal_format(&j->err, msg, sizeof msg));
        cut(f, why);
        return;
    }
    f->jcur = j->cur;
    if (j->len > 0) {
        if (!f->sink.write(f->sink.conn, j->buf, j->len))
            return;
        f->sent = j->cur.next - 1 + j->delta;
    }
    catch_up(f);
}

/*
 * A job's free() when its done() was skipped (shutdown) and f is its feed: frees f if its
 * connection closed meanwhile (orphaned), else clears the job's flag so that the close
 * frees it. f NULL: done() ran, nothing to do.
 */
static void skipped_done(struct repl_feed *f, bool encoding)
{
    if (f == NULL)
        return;
    if (encoding)
        f->encoding = false;
    else
        f->reading = false;
    if (f->orphaned)
        feed_free(f);
}

static void read_free(struct job *job)
{
    struct read_job *j = (struct read_job *)job;
    budget_release(&j->srv->budget, BUDGET_OVERHEAD, READ_CHARGE);
    free(j->buf);
    free(j->frame);
    free(j->scratch);
    skipped_done(j->done_ran ? NULL : j->f, false);
    free(j);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    catch_up(arg);
}

/* The records after f->sent are older than the ring: from the journal, or cut off. */
static void journal_catch_up(struct repl_feed *f)
{
    struct repl *r = f->r;
    struct server *srv = f->srv;
    struct jobs *lane = srv->lanes[JOBS_LONG]; /* NULL in unit tests */
    uint64_t pos = journal_pos_after(r, f->sent);
    if (pos == 0 || lane == NULL) {
        cut(f, "it fell behind the replication backlog (it will resync in full)");
        return;
    }
    uint64_t upto = journal_durable_pos(durable_journal(srv));
    if (pos > upto) {
        /* Written, not yet synced: its bytes may be half there. Soon they are. */
        if (f->retry == NULL)
            f->retry = evtimer_new(r->base, on_retry, f);
        struct timeval tv = {.tv_sec = 0, .tv_usec = FEED_RETRY_US};
        if (f->retry == NULL || evtimer_add(f->retry, &tv) != 0)
            cut(f, "out of memory");
        return;
    }
    struct read_job *j = budget_fits(&srv->budget, READ_CHARGE) ? calloc(1, sizeof *j) : NULL;
    if (j == NULL) {
        cut(f, "no memory within max_memory to read the journal back for it");
        return;
    }
    if (f->jcur.next != pos)
        f->jcur = (struct journal_cursor){.next = pos};
    budget_charge(&srv->budget, BUDGET_OVERHEAD, READ_CHARGE);
    *j = (struct read_job){
        .job = {.run = read_run, .done = read_done, .free = read_free},
        .srv = srv,
        .f = f,
        .cur = f->jcur,
        .upto = upto,
        .delta = r->jdelta,
    };
    f->reading = true;
    jobs_post(lane, &j->job);
}

/* ---- full sync: one filter at a time, encoded on the long lane ---- */

/*
 * The loop charges the budget for a bound of the encoding (the filter's memory and some
 * room), and the lane sizes it exactly (sizing runs the encoder: 0.5 s for 1 GB, which the
 * loop must not spend), allocates and encodes. done() gives back what the bound had over.
 */
struct encode_job {
    struct job job;
    struct server *srv;
    struct repl_feed *f;
    struct filter *flt;
    unsigned char *buf;
    size_t len, cap;
    size_t charged; /* budget charged for it, >= cap */
    uint64_t need;  /* ENCODE_LARGER: bytes it needs */
    int rc;
    bool done_ran;
};

enum { ENCODE_GREW = -1, ENCODE_LARGER = -2, ENCODE_NOMEM = -3 };
#define ENCODE_TRIES 5 /* encodings of one filter in a row that may fail to fit */

static int grow_write(void *ctx, const void *p, size_t n)
{
    struct encode_job *j = ctx;
    if (j->len + n > j->cap)
        return -1; /* sized first: the filter grew meanwhile (it is written again) */
    memcpy(j->buf + j->len, p, n);
    j->len += n;
    return 0;
}

/* Bytes to allocate for an encoding of size bytes: room for keys added meanwhile. */
static uint64_t encode_room(uint64_t size)
{
    return size + size / 64 + 4096;
}

static void encode_run(struct job *job)
{
    struct encode_job *j = (struct encode_job *)job;
    uint64_t need = encode_room(container_encoded_size(j->flt->ops, j->flt->obj));
    if (need > j->charged) {
        j->need = need;
        j->rc = ENCODE_LARGER;
        return;
    }
    j->cap = (size_t)need;
    if ((j->buf = malloc(j->cap)) == NULL) {
        j->rc = ENCODE_NOMEM;
        return;
    }
    if (container_encode(j->flt->ops, j->flt->obj, 0, j->flt->seed, grow_write, j) != 0)
        j->rc = ENCODE_GREW;
}

static void sync_next(struct repl_feed *f);
static void count_connected(struct repl *r);

static void encode_done(struct job *job)
{
    struct encode_job *j = (struct encode_job *)job;
    struct repl_feed *f = j->f;
    j->done_ran = true;
    f->encoding = false;
    if (f->orphaned) {
        j->f = NULL;
        feed_free(f);
        return;
    }
    if (f->cut)
        return; /* waiting for its connection to close: free() lets go of the encoding */
    if (j->rc != 0) {
        /* It grew while encoded, or needs more than its bound: again, larger. */
        budget_release(&j->srv->budget, BUDGET_OVERHEAD, j->charged);
        j->charged = 0;
        offload_free(j->srv, j->buf);
        j->buf = NULL;
        if (j->rc == ENCODE_NOMEM) {
            cut(f, "no memory for a full sync");
            return;
        }
        if (++f->encode_tries > ENCODE_TRIES) {
            cut(f, "a filter grew faster than it could be encoded (it will resync in full)");
            return;
        }
        /* Grown: a quarter more room each time. */
        f->size_hint = j->rc == ENCODE_LARGER ? j->need : (uint64_t)j->cap + j->cap / 4;
        sync_next(f);
        return;
    }
    f->encode_tries = 0;
    budget_release(&j->srv->budget, BUDGET_OVERHEAD, j->charged - j->cap);
    j->charged = 0;
    char head[64 + PROTO_MAX_NAME];
    int hn = snprintf(head, sizeof head, "FILTER %s %zu\r\n", j->flt->name, j->len);
    f->buf = j->buf;
    f->len = j->len;
    f->cap = j->cap;
    f->off = 0;
    j->buf = NULL;
    filter_unref(f->filters[f->next_filter]);
    f->filters[f->next_filter++] = NULL;
    if (!f->sink.write(f->sink.conn, head, (size_t)hn))
        return;
    repl_feed_drained(f);
}

static void encode_free(struct job *job)
{
    struct encode_job *j = (struct encode_job *)job;
    if (j->charged != 0)
        budget_release(&j->srv->budget, BUDGET_OVERHEAD, j->charged);
    free(j->buf); /* not yet handed to the feed: done() was skipped (shutdown) */
    skipped_done(j->done_ran ? NULL : j->f, true);
    filter_unref(j->flt);
    free(j);
}

/* Starts encoding the next filter, or ends the sync. */
static void sync_next(struct repl_feed *f)
{
    struct server *srv = f->srv;
    if (f->next_filter == f->nfilters) {
        release_filters(f);
        f->state = FEED_STREAMING;
        count_connected(f->r);
        log_msg(LOG_INFO, "replication: full sync sent, streaming from offset %llu",
                (unsigned long long)f->sent);
        catch_up(f);
        return;
    }
    struct filter *flt = f->filters[f->next_filter];
    struct kind_info info = {0};
    flt->ops->info(flt->obj, &info);
    /* An encoding holds the filter's memory and headers at most; a hint from the lane
     * (it needed more) wins. */
    uint64_t bound = encode_room(info.bytes + info.header + 65536);
    if (f->size_hint > bound)
        bound = f->size_hint;
    f->size_hint = 0;
    struct encode_job *j = calloc(1, sizeof *j);
    if (j == NULL || bound > SIZE_MAX || !budget_fits(&srv->budget, bound)) {
        free(j);
        cut(f, "no memory within max_memory for a full sync");
        return;
    }
    budget_charge(&srv->budget, BUDGET_OVERHEAD, bound);
    j->charged = (size_t)bound;
    j->srv = srv;
    j->f = f;
    j->flt = flt;
    filter_ref(flt);
    j->job = (struct job){.run = encode_run, .done = encode_done, .free = encode_free};
    f->encoding = true;
    jobs_post(srv->lanes[JOBS_LONG], &j->job);
}

void repl_feed_drained(struct repl_feed *f)
{
    if (f->cut)
        return;
    if (f->state == FEED_STREAMING) {
        /* Up to the last batch: the next one waits for its timer or its size. */
        if (!f->r->feed_armed || f->sent != f->r->fed)
            catch_up(f);
        return;
    }
    if (f->encoding)
        return;
    while (f->buf != NULL && f->sink.unsent(f->sink.conn) < FEED_WINDOW) {
        size_t n = f->len - f->off < FEED_WINDOW ? f->len - f->off : FEED_WINDOW;
        if (!f->sink.write(f->sink.conn, f->buf + f->off, n))
            return;
        f->off += n;
        if (f->off == f->len)
            drop_buf(f);
    }
    if (f->buf == NULL)
        sync_next(f);
}

static void feed_free(struct repl_feed *f)
{
    if (f->retry != NULL)
        event_free(f->retry);
    drop_buf(f);
    release_filters(f);
    free(f);
}

void repl_feed_closed(struct repl_feed *f)
{
    struct repl *r = f->r;
    if (f->prev != NULL)
        f->prev->next = f->next;
    else if (r->feeds == f)
        r->feeds = f->next;
    if (f->next != NULL)
        f->next->prev = f->prev;
    f->cut = true;
    count_connected(r);
    if (f->encoding || f->reading)
        f->orphaned = true; /* the job's done() frees it */
    else
        feed_free(f);
}

/* ---- the backlog's memory, made ready on the long lane ---- */

struct spares_job {
    struct job job;
    struct server *srv;
    size_t bytes;
    struct backlog_spares *spares;
};

static void spares_run(struct job *job)
{
    struct spares_job *j = (struct spares_job *)job;
    j->spares = backlog_spares_make(j->bytes);
}

static void spares_done(struct job *job)
{
    struct spares_job *j = (struct spares_job *)job;
    if (j->srv->replication != NULL) { /* NULL: replication stopped meanwhile */
        backlog_spares_adopt(j->srv->replication->backlog, j->spares);
        j->spares = NULL;
    }
}

static void spares_free(struct job *job)
{
    struct spares_job *j = (struct spares_job *)job;
    backlog_spares_free(j->spares);
    free(j);
}

/*
 * Records go to the backlog from now on. The first time, its memory is faulted in on the
 * long lane: filling it on the loop took a page fault per 4 KiB (or a 2 MiB zeroing) of
 * the first 64 MiB of the stream, 3-36 ns per key of the primary's CPU (measured in the
 * commit that added this), paid while clients wait.
 */
static void backlog_start(struct repl *r)
{
    if (r->backlog_on)
        return;
    r->backlog_on = true;
    size_t want = backlog_spares_wanted(r->backlog);
    struct jobs *lane = r->srv->lanes[JOBS_LONG]; /* NULL in unit tests */
    struct spares_job *j = want > 0 && lane != NULL ? calloc(1, sizeof *j) : NULL;
    if (j == NULL)
        return; /* it faults in as it fills */
    j->srv = r->srv;
    j->bytes = want;
    j->job = (struct job){.run = spares_run, .done = spares_done, .free = spares_free};
    jobs_post(lane, &j->job);
}

/* ---- PSYNC ---- */

static bool parse_u64(struct proto_slice s, uint64_t *out)
{
    return proto_parse_u64(s.ptr, s.len, out) == 0;
}

struct repl_feed *repl_psync(struct server *srv, const struct repl_sink *sink,
                             const struct proto_request *req, struct result *res)
{
    struct repl *r = srv->replication;
    struct proto_slice rest = req->args, id, off;
    uint64_t offset;
    if (r == NULL) {
        result_set(res, RESULT_CLIENT_ERROR, "replication is not running");
        return NULL;
    }
    if (!proto_next_arg(&rest, &id) || !proto_next_arg(&rest, &off) || !parse_u64(off, &offset)) {
        result_set(res, RESULT_CLIENT_ERROR, "PSYNC <replication-id>|? <offset>");
        return NULL;
    }
    if (srv->repl.role == SERVER_REPLICA && srv->repl.link != SERVER_LINK_UP) {
        result_set(res, RESULT_SERVER_ERROR, "this replica is not in sync with its primary");
        return NULL;
    }
    struct repl_feed *f = calloc(1, sizeof *f);
    if (f == NULL) {
        result_set(res, RESULT_SERVER_ERROR, "out of memory");
        return NULL;
    }
    f->r = r;
    f->srv = srv;
    f->sink = *sink;
    backlog_start(r); /* from now on, for this replica's next resync and the others' */
    uint64_t now = srv->repl.offset;
    bool ours = id.len == REPL_ID_LEN && memcmp(id.ptr, r->id, REPL_ID_LEN) == 0;
    bool history = id.len == REPL_ID_LEN && r->prev_id[0] != '\0' &&
                   memcmp(id.ptr, r->prev_id, REPL_ID_LEN) == 0 && offset <= r->prev_offset;
    char line[160];
    bool ring = offset == now || backlog_has(r->backlog, offset);
    bool journal =
        !ring && offset < now && srv->lanes[JOBS_LONG] != NULL && journal_pos_after(r, offset) != 0;
    if ((ours || history) && offset <= now && (ring || journal)) {
        f->state = FEED_STREAMING;
        f->sent = offset;
        srv->repl.partial_syncs++;
        srv->repl.from_journal += journal;
        snprintf(line, sizeof line, "CONTINUE %s %llu", r->id, (unsigned long long)offset);
        log_msg(LOG_INFO, "replication: partial resync from offset %llu (%llu records behind)%s",
                (unsigned long long)offset, (unsigned long long)(now - offset),
                journal ? ", from the journal" : "");
    } else {
        if (registry_collect(srv->reg, NULL, 0, &f->filters, &f->nfilters) != REGISTRY_OK) {
            free(f);
            result_set(res, RESULT_SERVER_ERROR, "out of memory");
            return NULL;
        }
        f->state = FEED_SYNCING;
        f->sent = now;
        srv->repl.full_syncs++;
        /* The data dir's secret too: a promoted replica's new filters then combine with the
         * primary's. The link is the primary's own clients' (AUTH), like its data. */
        snprintf(line, sizeof line, "FULLSYNC %s %llu %zu %llu", r->id, (unsigned long long)now,
                 f->nfilters, (unsigned long long)srv->seed);
        log_msg(LOG_INFO, "replication: full sync of %zu filters at offset %llu", f->nfilters,
                (unsigned long long)now);
    }
    result_set_copy(res, RESULT_LINE, line, strlen(line));
    f->next = r->feeds;
    if (r->feeds != NULL)
        r->feeds->prev = f;
    r->feeds = f;
    count_connected(r);
    return f;
}

/* ---- acknowledgements and held replies ---- */

/* How many replicas acknowledged offset. */
static unsigned acks_for(const struct repl *r, uint64_t offset)
{
    unsigned n = 0;
    for (const struct repl_feed *f = r->feeds; f != NULL; f = f->next)
        n += !f->cut && f->acked >= offset;
    return n;
}

/* Hands a held reply on: to the journal's hold, or to its client. */
static void hand_on(struct repl *r, struct repl_held *h, const char *error)
{
    if (error != NULL)
        completion_finish(h->later, RESULT_SERVER_ERROR, error);
    else if (!mutate_hold_journal(r->srv, h->offset, &h->res, h->later))
        h->later->done(h->later, &h->res);
    result_free(&h->res);
    free(h);
}

static void arm_timer(struct repl *r)
{
    if (r->held == NULL) {
        evtimer_del(r->hold_timer);
        return;
    }
    uint64_t now = clock_mono_ms();
    uint64_t wait = r->held->deadline_ms > now ? r->held->deadline_ms - now : 0;
    struct timeval tv = {.tv_sec = (time_t)(wait / 1000),
                         .tv_usec = (suseconds_t)(wait % 1000) * 1000};
    evtimer_add(r->hold_timer, &tv);
}

/* Releases the held replies whose records enough replicas have, and the expired ones. */
static void release_held(struct repl *r)
{
    unsigned need = r->srv->cfg.min_replica_acks;
    uint64_t now = clock_mono_ms();
    while (r->held != NULL) {
        struct repl_held *h = r->held;
        const char *error = NULL;
        if (acks_for(r, h->offset) < need) {
            if (h->deadline_ms > now)
                break;
            error = "not enough replicas acknowledged the change in time: it is applied here, "
                    "and may or may not be on a replica";
        }
        r->held = h->next;
        if (r->held == NULL)
            r->held_tail = NULL;
        hand_on(r, h, error);
    }
    arm_timer(r);
}

static void on_hold_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    release_held(arg);
}

void repl_feed_ack(struct repl_feed *f, const struct proto_request *req)
{
    struct proto_slice rest = req->args, word, off;
    uint64_t offset;
    if (!proto_next_arg(&rest, &word) || !proto_next_arg(&rest, &off) || !parse_u64(off, &offset))
        return;
    if (offset > f->sent) /* it cannot hold what it was not sent: no credit for it */
        offset = f->sent;
    if (offset > f->acked)
        f->acked = offset;
    if (f->r->held != NULL)
        release_held(f->r);
}

static bool prop_hold(struct server *srv, uint64_t offset, const struct result *res,
                      struct completion *later)
{
    struct repl *r = srv->replication;
    if (srv->cfg.min_replica_acks == 0 || later == NULL || offset == 0 || r == NULL ||
        acks_for(r, offset) >= srv->cfg.min_replica_acks)
        return false;
    struct repl_held *h = calloc(1, sizeof *h);
    if (h == NULL)
        return false;
    h->offset = offset;
    h->later = later;
    h->deadline_ms = clock_mono_ms() + srv->cfg.replica_ack_timeout;
    result_init(&h->res);
    h->res.status = res->status;
    h->res.count = res->count;
    if (res->status == RESULT_BITS) {
        bool *b = result_add_bits(&h->res, res->nbits);
        if (b != NULL && res->nbits > 0)
            memcpy(b, res->bits, res->nbits * sizeof *b);
    }
    if (r->held_tail != NULL)
        r->held_tail->next = h;
    else
        r->held = h;
    r->held_tail = h;
    if (r->held == h)
        arm_timer(r);
    return true;
}

/* ---- mutate's propagation ---- */

static int prop_check(struct server *srv, struct result *res)
{
    if (srv->repl.role == SERVER_REPLICA) {
        result_set_copy(res, RESULT_READONLY, srv->repl.primary, strlen(srv->repl.primary));
        return -1;
    }
    unsigned need = srv->cfg.min_replica_acks;
    if (need > 0 && srv->repl.connected < need) {
        char msg[96];
        snprintf(msg, sizeof msg, "not enough replicas (have %u, need %u)", srv->repl.connected,
                 need);
        result_set_copy(res, RESULT_SERVER_ERROR, msg, strlen(msg));
        return -1;
    }
    return 0;
}

/* Sends every up-to-date replica what the backlog holds beyond what it was sent. */
static void feed_all(struct repl *r)
{
    r->unfed = 0;
    r->fed = r->srv->repl.offset;
    if (r->feed_armed) {
        evtimer_del(r->feed_timer);
        r->feed_armed = false;
    }
    for (struct repl_feed *f = r->feeds; f != NULL; f = f->next) {
        if (f->cut || f->state != FEED_STREAMING)
            continue;
        /* Behind (its output full): it catches up from the backlog as its output drains,
         * from the journal once the ring lost what it needs, or is cut off when neither
         * holds it (a replica that stopped reading). */
        catch_up(f);
    }
}

static void on_feed_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct repl *r = arg;
    r->feed_armed = false;
    feed_all(r);
}

static bool prop_frames(const struct server *srv)
{
    return srv->replication->backlog_on;
}

static void prop_record(struct server *srv, const struct journal_record *rec, uint64_t offset,
                        const void *frame, size_t n)
{
    struct repl *r = srv->replication;
    journal_track(r, offset);
    if (rec->type == JOURNAL_RESTORE) {
        /* The record names the filter, not its bits (mutate.h): replicas take the restored
         * filter in a full sync. The backlog starts after it, so none resumes before it. */
        backlog_clear(r->backlog);
        repl_close_feeds(r, "a RESTORE: it resyncs in full to get the restored filter");
        return;
    }
    if (!r->backlog_on)
        return; /* no replica ever asked: none follows, and the first will sync in full */
    if ((frame != NULL ? backlog_append_frame(r->backlog, frame, n, offset)
                       : backlog_append(r->backlog, rec, offset)) != 0)
        log_msg(LOG_ERROR, "replication: out of memory for the backlog: replicas resync in full");
    if (r->feeds == NULL)
        return;
    r->unfed += frame != NULL ? n : journal_record_size(rec);
    if (srv->cfg.min_replica_acks == 0 && r->unfed < FEED_BATCH) {
        if (!r->feed_armed) {
            struct timeval tv = {.tv_sec = 0, .tv_usec = FEED_DELAY_US};
            r->feed_armed = evtimer_add(r->feed_timer, &tv) == 0;
            if (!r->feed_armed)
                feed_all(r);
        }
        return;
    }
    feed_all(r);
}

static const struct mutate_propagate propagate = {
    .check = prop_check, .frames = prop_frames, .record = prop_record, .hold = prop_hold};

/* ---- the role ---- */

/* Splits "host:port" (the last colon; [v6]:port) into host and port. */
static int split_hostport(const char *s, char *host, size_t hcap, char *port, size_t pcap)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon == s || colon[1] == '\0')
        return -1;
    size_t hl = (size_t)(colon - s);
    const char *h = s;
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl >= hcap || strlen(colon + 1) >= pcap)
        return -1;
    memcpy(host, h, hl);
    host[hl] = '\0';
    snprintf(port, pcap, "%s", colon + 1);
    return 0;
}

static int become_replica(struct repl *r, const char *host, const char *port)
{
    struct server *srv = r->srv;
    repl_link_stop(r);
    repl_close_feeds(r, "this server became a replica");
    srv->repl.role = SERVER_REPLICA;
    backlog_start(r); /* once promoted, its siblings resume from what it applied */
    /* An IPv6 address in brackets, so that ROLE's <host>:<port> reads back as one. */
    snprintf(srv->repl.primary, sizeof srv->repl.primary,
             strchr(host, ':') != NULL ? "[%s]:%s" : "%s:%s", host, port);
    log_msg(LOG_INFO, "replication: replica of %s", srv->repl.primary);
    return repl_link_start(r, host, port);
}

static void promote(struct repl *r)
{
    struct server *srv = r->srv;
    repl_link_stop(r);
    memcpy(r->prev_id, r->id, sizeof r->prev_id);
    r->prev_offset = srv->repl.offset;
    repl_new_id(r->id);
    srv->repl.role = SERVER_PRIMARY;
    srv->repl.link = SERVER_LINK_DOWN;
    srv->repl.primary[0] = '\0';
    repl_state_remove(r); /* a primary's offsets go on from its journal */
    log_msg(LOG_INFO,
            "replication: promoted to primary at offset %llu (stream %s; the old "
            "stream %s is history up to there)",
            (unsigned long long)r->prev_offset, r->id, r->prev_id);
}

void repl_role(struct server *srv, struct result *res)
{
    char line[400];
    static const char *const links[] = {"down", "sync", "up"};
    if (srv->repl.role == SERVER_REPLICA)
        snprintf(line, sizeof line, "ROLE replica %s %s %llu", srv->repl.primary,
                 links[srv->repl.link], (unsigned long long)srv->repl.offset);
    else
        snprintf(line, sizeof line, "ROLE primary %u %llu", srv->repl.connected,
                 (unsigned long long)srv->repl.offset);
    result_set_copy(res, RESULT_LINE, line, strlen(line));
}

static bool slice_is(struct proto_slice s, const char *w)
{
    size_t n = strlen(w);
    if (s.len != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((s.ptr[i] | 0x20) != (w[i] | 0x20))
            return false;
    return true;
}

void repl_replicaof(struct server *srv, const struct proto_request *req, struct result *res)
{
    struct repl *r = srv->replication;
    struct proto_slice rest = req->args, a, b;
    if (r == NULL) {
        result_set(res, RESULT_CLIENT_ERROR, "replication is not running");
        return;
    }
    (void)proto_next_arg(&rest, &a);
    (void)proto_next_arg(&rest, &b);
    if (slice_is(a, "NO") && slice_is(b, "ONE")) {
        if (srv->repl.role == SERVER_REPLICA)
            promote(r);
        result_set(res, RESULT_OK, NULL);
        return;
    }
    uint64_t port;
    char host[256], ps[8];
    if (a.len == 0 || a.len >= sizeof host || !parse_u64(b, &port) || port == 0 || port > 65535) {
        result_set(res, RESULT_CLIENT_ERROR, "REPLICAOF <host> <port> | REPLICAOF NO ONE");
        return;
    }
    memcpy(host, a.ptr, a.len);
    host[a.len] = '\0';
    snprintf(ps, sizeof ps, "%u", (unsigned)port);
    r->rejoin = r->rejoin || srv->repl.role == SERVER_PRIMARY; /* its filters go first */
    if (become_replica(r, host, ps) != 0) {
        result_set(res, RESULT_SERVER_ERROR, "cannot start the link to the primary");
        return;
    }
    result_set(res, RESULT_OK, NULL);
}

int repl_start(struct server *srv, struct event_base *base)
{
    struct repl *r = calloc(1, sizeof *r);
    if (r == NULL || (r->backlog = backlog_new(srv->cfg.replication_backlog)) == NULL ||
        (r->hold_timer = evtimer_new(base, on_hold_timer, r)) == NULL ||
        (r->feed_timer = evtimer_new(base, on_feed_timer, r)) == NULL) {
        if (r != NULL && r->hold_timer != NULL)
            event_free(r->hold_timer);
        event_free(r->feed_timer);
        if (r != NULL)
            backlog_free(r->backlog);
        free(r);
        log_msg(LOG_ERROR, "replication: out of memory");
        return -1;
    }
    r->srv = srv;
    r->base = base;
    repl_new_id(r->id);
    srv->replication = r;
    mutate_set_propagate(srv, &propagate);
    journal_forget(r); /* a new stream id: the journal so far is no part of it */
    if (srv->cfg.replica_of[0] == '\0')
        return 0;
    char host[256], port[8];
    if (split_hostport(srv->cfg.replica_of, host, sizeof host, port, sizeof port) != 0) {
        log_msg(LOG_ERROR, "replica_of must be HOST:PORT, not '%s'", srv->cfg.replica_of);
        return -1;
    }
    if (repl_state_load(r) != 0)
        r->id[0] = '\0'; /* nothing held: PSYNC ? asks for a full sync */
    journal_forget(r);
    repl_rejoin_at_start(r);
    return become_replica(r, host, port);
}

void repl_stop(struct server *srv)
{
    struct repl *r = srv->replication;
    if (r == NULL)
        return;
    repl_link_stop(r);
    while (r->held != NULL) { /* shutdown: whoever waited is gone */
        struct repl_held *h = r->held;
        r->held = h->next;
        result_free(&h->res);
        free(h);
    }
    /* Feeds are connections, closed before this (conn_close_all tells repl_feed_closed). */
    mutate_set_propagate(srv, NULL);
    event_free(r->hold_timer);
    event_free(r->feed_timer);
    backlog_free(r->backlog);
    free(r);
    srv->replication = NULL;
}
