/*
 * durable.c - the journal's loop side: records are appended right after the mutation
 * they describe (exec/mutate.c; checked before it, so a write the disk cannot take
 * changes nothing); an event activated by the pass's first append commits at the end of
 * that loop pass (libevent runs active events in activation order, and every connection
 * made ready by the pass's poll was queued before it), so all of a pass's writes share
 * one write(2) and, in mode always, one fdatasync. It has the ordinary priority on
 * purpose: a lower one would never run while some connection is always ready (libevent
 * serves only the highest non-empty priority per pass). Held replies wait in a FIFO
 * ordered by position; the journal's DURABLE and FAILED events release them from the
 * front. Replay is not here: exec/recover.c runs the records through exec/mutate.c.
 */
#include "server/persist/durable.h"

#include <event2/event.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/core/log.h"
#include "server/core/park.h"
#include "server/core/server.h"
#include "server/core/stat.h"
#include "server/persist/journal.h"
#include "server/store/registry.h"

/* A reply waiting for its record. */
struct held {
    struct held *next;
    uint64_t pos;
    struct completion *later;
    struct result res;
};

struct durable {
    struct journal *j;
    int mode;                 /* enum durability */
    struct event *commit;     /* active: runs at the end of this loop pass */
    struct event *events;     /* journal_fd readable */
    bool commit_armed;        /* commit is active for this pass */
    struct held *head, *tail; /* held replies, positions increasing */
    bool failing;             /* an append failed: logged once until one succeeds */
    unsigned char *frame;     /* durable_append_frame's last frame */
    size_t frame_cap;
};

static const char *durability_name(int d)
{
    return d == DURABILITY_ALWAYS ? "always" : d == DURABILITY_EVERYSEC ? "everysec" : "snapshot";
}

bool durable_on(const struct server *srv)
{
    return srv->durable != NULL && srv->durable->j != NULL;
}

bool durable_holds(const struct server *srv)
{
    return durable_on(srv) && srv->durable->mode == DURABILITY_ALWAYS;
}

int durable_start(struct server *srv, uint64_t min_pos)
{
    int mode = srv->cfg.durability;
    if (mode == DURABILITY_SNAPSHOT)
        return 0;
    struct durable *d = calloc(1, sizeof *d);
    if (d == NULL) {
        log_msg(LOG_ERROR, "journal: out of memory");
        return -1;
    }
    d->mode = mode;
    struct journal_opts o = {
        .mode = mode == DURABILITY_ALWAYS ? JOURNAL_MODE_ALWAYS : JOURNAL_MODE_EVERYSEC,
        .spares = mode == DURABILITY_ALWAYS, /* its fdatasyncs are on every reply's path */
        .min_pos = min_pos,
    };
    struct journal_error err;
    char msg[1200];
    if (journal_open(srv->cfg.data_dir, &o, &d->j, &err) != 0) {
        free(d);
        if (srv->cfg.allow_readonly_data_dir) {
            /* Persistence is off on such a directory anyway (datadir.c warned). */
            log_msg(LOG_WARN, "journal: off, the data directory cannot be written: %s",
                    journal_format(&err, msg, sizeof msg));
            return 0;
        }
        log_msg(LOG_ERROR, "journal: cannot open: %s", journal_format(&err, msg, sizeof msg));
        return -1;
    }
    srv->durable = d;
    log_msg(LOG_INFO, "journal: durability %s", durability_name(mode));
    return 0;
}

/* ---- the loop's side ---- */

static void release(struct durable *d, uint64_t upto, const struct journal_error *failed)
{
    char msg[1200], why[1300];
    if (failed != NULL)
        snprintf(why, sizeof why, "journal: %s", journal_format(failed, msg, sizeof msg));
    while (d->head != NULL && d->head->pos <= upto) {
        struct held *h = d->head;
        d->head = h->next;
        if (d->head == NULL)
            d->tail = NULL;
        if (failed != NULL) {
            completion_finish(h->later, RESULT_SERVER_ERROR, why);
        } else {
            h->later->done(h->later, &h->res);
        }
        result_free(&h->res);
        free(h);
    }
}

static void on_event(void *ctx, const struct journal_event *ev)
{
    struct durable *d = ctx;
    if (ev->type == JOURNAL_EV_DURABLE)
        release(d, ev->last, NULL);
    else if (ev->type == JOURNAL_EV_FAILED)
        release(d, ev->last, &ev->err);
    else
        log_msg(LOG_INFO, "journal: writing again after a failure");
}

static void on_events(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct server *srv = arg;
    if (srv->stopping)
        return; /* the connections waiting are gone */
    journal_poll(srv->durable->j, on_event, srv->durable);
}

static void on_commit(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct durable *d = arg;
    d->commit_armed = false;
    journal_commit(d->j);
}

int durable_attach(struct server *srv, struct event_base *base)
{
    struct durable *d = srv->durable;
    if (d == NULL || d->j == NULL)
        return 0;
    d->commit = event_new(base, -1, 0, on_commit, d);
    d->events = event_new(base, journal_fd(d->j), EV_READ | EV_PERSIST, on_events, srv);
    if (d->commit == NULL || d->events == NULL || event_add(d->events, NULL) != 0) {
        log_msg(LOG_ERROR, "journal: cannot watch the journal's events");
        return -1;
    }
    return 0;
}

void durable_stop(struct server *srv)
{
    struct durable *d = srv->durable;
    if (d == NULL)
        return;
    if (d->commit != NULL)
        event_free(d->commit);
    if (d->events != NULL)
        event_free(d->events);
    struct journal_error err;
    char msg[1200];
    if (d->j != NULL && journal_close(d->j, &err) != 0)
        log_msg(LOG_ERROR, "journal: final write failed: %s",
                journal_format(&err, msg, sizeof msg));
    while (d->head != NULL) { /* shutdown: whoever waited is gone */
        struct held *h = d->head;
        d->head = h->next;
        result_free(&h->res);
        free(h);
    }
    free(d->frame);
    free(d);
    srv->durable = NULL;
}

int durable_check(struct server *srv, struct result *res)
{
    if (!durable_on(srv))
        return 0;
    struct journal_error err;
    if (journal_check(srv->durable->j, &err) == 0)
        return 0;
    char msg[1200], why[1300];
    snprintf(why, sizeof why, "journal: %s", journal_format(&err, msg, sizeof msg));
    result_set_copy(res, RESULT_SERVER_ERROR, why, strlen(why));
    return -1;
}

/* After journal_append or journal_append_frame said rc: the position, or 0 (logged). */
static uint64_t appended(struct server *srv, int rc, uint64_t pos)
{
    struct durable *d = srv->durable;
    if (rc != 0) {
        if (!d->failing)
            log_msg(LOG_ERROR,
                    "journal: a record could not be buffered (%s): a crash now "
                    "loses that change",
                    journal_strerror(rc));
        d->failing = true;
        return 0;
    }
    d->failing = false;
    if (!d->commit_armed && d->commit != NULL) {
        d->commit_armed = true;
        event_active(d->commit, 0, 0);
    }
    return pos;
}

static uint64_t append(struct server *srv, const struct journal_record *rec)
{
    uint64_t pos = 0;
    int rc = journal_append(srv->durable->j, rec, &pos);
    return appended(srv, rc, pos);
}

uint64_t durable_append(struct server *srv, const struct journal_record *rec)
{
    return durable_on(srv) ? append(srv, rec) : 0;
}

uint64_t durable_append_frame(struct server *srv, const struct journal_record *rec,
                              const void **frame, size_t *n)
{
    *frame = NULL;
    *n = 0;
    if (!durable_on(srv))
        return 0;
    struct durable *d = srv->durable;
    size_t size = journal_record_size(rec); /* 0: the journal splits it, or refuses it */
    if (size > d->frame_cap) {
        size_t cap = size < 64 * 1024 ? 64 * 1024 : size;
        unsigned char *p = realloc(d->frame, cap);
        if (p != NULL) {
            d->frame = p;
            d->frame_cap = cap;
        }
    }
    if (size == 0 || size > d->frame_cap)
        return append(srv, rec);
    long w = journal_record_encode(rec, journal_last_pos(d->j) + 1, d->frame, d->frame_cap);
    uint64_t pos = 0;
    int rc = w > 0 ? journal_append_frame(d->j, d->frame, (size_t)w, &pos) : JOURNAL_EINVAL;
    if (rc == JOURNAL_EINVAL)
        return append(srv, rec); /* as it always was: journal_append says what is wrong */
    if ((pos = appended(srv, rc, pos)) != 0) {
        *frame = d->frame;
        *n = (size_t)w;
    }
    return pos;
}

bool durable_hold(struct server *srv, uint64_t pos, const struct result *res,
                  struct completion *later)
{
    if (!durable_holds(srv) || later == NULL || pos == 0 ||
        pos <= journal_durable_pos(srv->durable->j))
        return false;
    struct held *h = calloc(1, sizeof *h);
    if (h == NULL)
        return false; /* answered before it is durable: logged by nobody, rare */
    h->pos = pos;
    h->later = later;
    result_init(&h->res);
    h->res.status = res->status;
    h->res.count = res->count;
    h->res.text = NULL;
    if (res->status == RESULT_BITS) {
        bool *b = result_add_bits(&h->res, res->nbits);
        if (b != NULL && res->nbits > 0)
            memcpy(b, res->bits, res->nbits * sizeof *b);
    }
    struct durable *d = srv->durable;
    if (d->tail != NULL)
        d->tail->next = h;
    else
        d->head = h;
    d->tail = h;
    return true;
}

int durable_wait(struct server *srv, uint64_t pos, char *why, size_t len)
{
    if (!durable_on(srv) || pos == 0)
        return 0;
    struct journal_error err;
    if (journal_wait_durable(srv->durable->j, pos, &err) == 0)
        return 0;
    char msg[1200];
    snprintf(why, len, "journal: %s", journal_format(&err, msg, sizeof msg));
    return -1;
}

uint64_t durable_last_pos(const struct server *srv)
{
    return durable_on(srv) ? journal_last_pos(srv->durable->j) : 0;
}

void durable_truncate(struct server *srv, uint64_t covered)
{
    if (!durable_on(srv))
        return;
    /* Every dirty filter still needs the records after its own snapshot. */
    struct filter **all;
    size_t n;
    if (registry_collect(srv->reg, NULL, 0, &all, &n) != REGISTRY_OK)
        return;
    uint64_t min = covered;
    for (size_t i = 0; i < n; i++) {
        if (atomic_load(&all[i]->changes) != 0) {
            uint64_t p = atomic_load(&all[i]->journal_pos);
            min = p < min ? p : min;
        }
        filter_unref(all[i]);
    }
    free(all);
    unsigned removed = 0;
    struct journal_error err;
    char msg[1200];
    if (min > 0 && journal_truncate_before(srv->durable->j, min, &removed, &err) != 0)
        log_msg(LOG_ERROR, "journal: removing covered segments failed: %s",
                journal_format(&err, msg, sizeof msg));
    else if (removed > 0)
        log_msg(LOG_DEBUG, "journal: removed %u segments covered by snapshots", removed);
}

const struct journal *durable_journal(const struct server *srv)
{
    return durable_on(srv) ? srv->durable->j : NULL;
}

void durable_visit(const struct server *srv, struct stat_values *out)
{
    struct journal_stats js;
    memset(&js, 0, sizeof js);
    if (durable_on(srv))
        journal_stats(srv->durable->j, &js);
    stat_set_str(out, STAT_DURABILITY, durability_name(srv->cfg.durability));
    stat_set_u64(out, STAT_JOURNAL_RECORDS, js.records);
    stat_set_u64(out, STAT_JOURNAL_BYTES, js.bytes);
    stat_set_u64(out, STAT_JOURNAL_SYNCS, js.syncs);
    stat_set_u64(out, STAT_JOURNAL_SYNC_MAX_MS, js.sync_ns_max / 1000000u);
    stat_set_u64(out, STAT_JOURNAL_FAILURES, js.failures);
    stat_set_u64(out, STAT_JOURNAL_BUFFERED_BYTES, js.buffered);
    stat_set_u64(out, STAT_JOURNAL_BROKEN, js.broken);
    stat_set_u64(out, STAT_JOURNAL_DURABLE_POS,
                 durable_on(srv) ? journal_durable_pos(srv->durable->j) : 0);
}
