/*
 * durable.c - the journal wired into the server. Records are appended right after the
 * mutation they describe (checked before it, so a write the disk cannot take changes
 * nothing); an event activated by the pass's first append commits at the end of that
 * loop pass (libevent runs active events in activation order, and every connection made
 * ready by the pass's poll was queued before it), so all of a pass's writes share one
 * write(2) and, in mode always, one fdatasync. It has the ordinary priority on purpose:
 * a lower one would never run while some connection is always ready (libevent serves
 * only the highest non-empty priority per pass). Held replies wait in a FIFO ordered by position;
 * the journal's DURABLE and FAILED events release them from the front.
 *
 * Replay rule: a record about filter f is applied only if its position is above the one
 * f's snapshot covers (f->journal_pos). Adds, unions and clears are idempotent, so a
 * snapshot that caught a little more than it claims is harmless (ADD_NEW keys it caught
 * in an older stage count twice in items: see sbf_add_batch_shard).
 */
#include "server/persist/durable.h"

#include <event2/event.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/le.h"
#include "server/core/clock.h"
#include "server/core/log.h"
#include "server/core/park.h"
#include "server/core/server.h"
#include "server/core/stat.h"
#include "server/persist/journal.h"
#include "server/persist/replay_adds.h"
#include "server/persist/snapfile.h"
#include "server/store/kinds.h"
#include "server/store/registry.h"

/* A windowed filter's clock is journaled at most this often (ROTATE records). */
#define DURABLE_ROTATE_MS 50

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
};

const char *durability_name(int d)
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

/* ---- CREATE parameters: 8 little-endian fields ---- */

#define PARAMS_BYTES 64

size_t durable_encode_params(const struct kind_params *p, unsigned char *out, size_t cap)
{
    if (cap < PARAMS_BYTES)
        return 0;
    le_put64(out, p->sbf.capacity);
    le_put64(out + 8, le_f64_bits(p->sbf.error));
    le_put64(out + 16, (uint64_t)p->sbf.growth);
    le_put64(out + 24, le_f64_bits(p->sbf.scale));
    le_put64(out + 32, le_f64_bits(p->sbf.ratio));
    le_put64(out + 40, p->window_ms);
    le_put64(out + 48, p->generations);
    le_put64(out + 56, (uint64_t)p->now_ms);
    return PARAMS_BYTES;
}

static int decode_params(const void *in, size_t n, struct kind_params *p)
{
    const unsigned char *b = in;
    if (n != PARAMS_BYTES)
        return -1;
    uint64_t growth = le_get64(b + 16);
    if (growth > SBF_GROWTH_LINEAR || le_get64(b + 48) > UINT32_MAX)
        return -1;
    *p = (struct kind_params){
        .sbf = {.capacity = le_get64(b),
                .error = le_bits_f64(le_get64(b + 8)),
                .growth = (enum sbf_growth)growth,
                .scale = le_bits_f64(le_get64(b + 24)),
                .ratio = le_bits_f64(le_get64(b + 32))},
        .window_ms = le_get64(b + 40),
        .generations = (uint32_t)le_get64(b + 48),
        .now_ms = (int64_t)le_get64(b + 56),
    };
    return 0;
}

/* ---- replay ---- */

struct replay {
    struct server *srv;
    uint64_t applied, skipped, unknown;
    struct replay_adds *adds; /* ADD records, gathered until a record of another type */
};

/* The filter a record names, if the record is newer than its snapshot; else NULL. */
static struct filter *target(struct replay *r, const struct journal_record *rec)
{
    struct filter *f = registry_get(r->srv->reg, rec->name.ptr, rec->name.len);
    if (f == NULL) {
        r->unknown++; /* dropped later in the journal, or its CREATE could not be replayed */
        return NULL;
    }
    if (rec->pos <= atomic_load(&f->journal_pos)) {
        filter_unref(f);
        r->skipped++;
        return NULL;
    }
    return f;
}

static int replay_create(struct replay *r, const struct journal_record *rec)
{
    struct server *srv = r->srv;
    struct filter *f = registry_get(srv->reg, rec->name.ptr, rec->name.len);
    if (f != NULL) { /* its snapshot (or an earlier CREATE) has it */
        filter_unref(f);
        r->skipped++;
        return 0;
    }
    const struct kind_ops *ops = kinds_by_tag(rec->kind_tag);
    struct kind_params p;
    void *obj;
    if (ops == NULL || decode_params(rec->params, rec->nparams, &p) != 0 ||
        ops->create(&p, &srv->budget.sbf, &obj) != SBF_OK) {
        log_msg(LOG_ERROR, "journal: cannot replay CREATE %.*s at %llu: skipped",
                (int)rec->name.len, rec->name.ptr, (unsigned long long)rec->pos);
        r->unknown++;
        return 0;
    }
    f = filter_new(rec->name.ptr, rec->name.len, ops, obj);
    if (f == NULL) {
        ops->free(obj);
        return -1;
    }
    int rc = registry_put(srv->reg, f);
    filter_unref(f);
    r->applied++;
    return rc == REGISTRY_OK ? 0 : -1;
}

/* src's filter for a set operation, or NULL. */
static struct filter *source(struct server *srv, struct journal_name n)
{
    return registry_get(srv->reg, n.ptr, n.len);
}

/*
 * UNION/INTERSECT into a missing filter created it as a copy of the first source (that
 * exists here): do the same, so that the record then applies to it. Returns 0, or -1
 * when the table cannot take it.
 */
static int replay_setop_dst(struct server *srv, const struct journal_record *rec)
{
    struct filter *f = registry_get(srv->reg, rec->name.ptr, rec->name.len);
    if (f != NULL) {
        filter_unref(f);
        return 0;
    }
    struct filter *first = NULL;
    for (size_t i = 0; i < rec->nsources && first == NULL; i++)
        first = source(srv, rec->sources[i]);
    if (first == NULL || first->ops->merge == NULL) {
        filter_unref(first);
        return 0; /* nothing to copy: the record is skipped as unknown */
    }
    void *obj = NULL;
    int rc = first->ops->create_like(first->obj, &srv->budget.sbf, &obj);
    if (rc == SBF_OK && (rc = first->ops->merge(obj, first->obj)) != SBF_OK)
        first->ops->free(obj);
    if (rc == SBF_OK && (f = filter_new(rec->name.ptr, rec->name.len, first->ops, obj)) == NULL)
        first->ops->free(obj);
    filter_unref(first);
    if (rc != SBF_OK || f == NULL) {
        log_msg(LOG_ERROR, "journal: cannot replay the creation of %.*s at %llu: %s",
                (int)rec->name.len, rec->name.ptr, (unsigned long long)rec->pos,
                sbf_strerror(rc != SBF_OK ? rc : SBF_ENOMEM));
        return 0; /* the record is skipped as unknown */
    }
    rc = registry_put(srv->reg, f);
    filter_unref(f);
    return rc == REGISTRY_OK ? 0 : -1;
}

static int apply(void *ctx, const struct journal_record *rec)
{
    struct replay *r = ctx;
    struct server *srv = r->srv;
    if (rec->type == JOURNAL_ADD || rec->type == JOURNAL_ADD_NEW) {
        struct filter *f = target(r, rec);
        if (f != NULL) {
            replay_adds_push(r->adds, f, rec->hashes, rec->nhashes, rec->pos,
                             rec->type == JOURNAL_ADD_NEW);
            filter_touch(f); /* the snapshot on disk lacks this */
            filter_unref(f);
            r->applied++;
        }
        return 0;
    }
    replay_adds_flush(r->adds); /* records apply in journal order */
    if (rec->type == JOURNAL_CREATE)
        return replay_create(r, rec);
    if ((rec->type == JOURNAL_UNION || rec->type == JOURNAL_INTERSECT) &&
        replay_setop_dst(srv, rec) != 0)
        return -1;
    if (rec->type == JOURNAL_DROP) {
        struct filter *f = target(r, rec);
        if (f == NULL)
            return 0;
        filter_unref(f);
        registry_remove(srv->reg, rec->name.ptr, rec->name.len);
        /* Its file outlived the crash: it would come back at the next start. */
        char name[JOURNAL_NAME_MAX + 1];
        memcpy(name, rec->name.ptr, rec->name.len);
        name[rec->name.len] = '\0';
        struct snapfile_error err;
        if (snapfile_remove(srv->cfg.data_dir, name, &err) != 0) {
            char msg[512];
            log_msg(LOG_ERROR, "journal: replaying DROP %s: %s", name,
                    snapfile_format(&err, msg, sizeof msg));
        }
        r->applied++;
        return 0;
    }
    struct filter *f = target(r, rec);
    if (f == NULL)
        return 0;
    int rc = SBF_OK;
    switch (rec->type) {
    case JOURNAL_DELETE: {
        size_t deleted;
        if (f->ops->remove_batch != NULL)
            rc = f->ops->remove_batch(f->obj, rec->hashes, rec->nhashes, &deleted);
        break;
    }
    case JOURNAL_CLEAR:
        f->ops->clear(f->obj); /* the loader holds the only other reference */
        break;
    case JOURNAL_UNION:
    case JOURNAL_INTERSECT:
        for (size_t i = 0; i < rec->nsources && rc == SBF_OK; i++) {
            struct filter *src = source(srv, rec->sources[i]);
            if (src != NULL && src != f && src->ops == f->ops &&
                f->ops->compatible(f->obj, src->obj)) {
                if (rec->type == JOURNAL_UNION && f->ops->merge != NULL)
                    rc = f->ops->merge(f->obj, src->obj);
                else if (rec->type == JOURNAL_INTERSECT && f->ops->intersect != NULL)
                    rc = f->ops->intersect(f->obj, src->obj);
            }
            filter_unref(src);
        }
        break;
    case JOURNAL_ROTATE:
        if (f->ops->advance != NULL)
            (void)f->ops->advance(f->obj, rec->time_ms, NULL, NULL);
        break;
    default:
        break;
    }
    if (rc != SBF_OK)
        log_msg(LOG_ERROR, "journal: replaying record %llu into %s: %s",
                (unsigned long long)rec->pos, f->name, sbf_strerror(rc));
    filter_touch(f); /* the snapshot on disk lacks this */
    filter_unref(f);
    r->applied++;
    return 0;
}

static void report(void *ctx, enum journal_replay_event ev, const char *file, const char *moved_to,
                   uint64_t offset, const char *reason)
{
    (void)ctx;
    switch (ev) {
    case JOURNAL_RP_TORN:
        log_msg(LOG_WARN,
                "journal: %s ended mid-record at offset %llu (a crash while writing): "
                "the torn record was dropped",
                file, (unsigned long long)offset);
        break;
    case JOURNAL_RP_DAMAGED:
        log_msg(LOG_ERROR,
                "journal: %s is damaged at offset %llu (%s): the rest of it was NOT replayed; "
                "set aside as %s",
                file, (unsigned long long)offset, reason, moved_to);
        break;
    case JOURNAL_RP_KEPT_BAD:
        log_msg(LOG_ERROR,
                "journal: %s is damaged at offset %llu (%s): the rest of it was NOT replayed; "
                "it could not be set aside",
                file, (unsigned long long)offset, reason);
        break;
    case JOURNAL_RP_IGNORED:
        log_msg(LOG_WARN, "journal: ignoring %s: %s", file, reason);
        break;
    }
}

/* The highest position any loaded snapshot covers. */
static uint64_t max_snapshot_pos(struct server *srv)
{
    struct filter **all;
    size_t n;
    uint64_t max = 0;
    if (registry_collect(srv->reg, NULL, 0, &all, &n) != REGISTRY_OK)
        return 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t p = atomic_load(&all[i]->journal_pos);
        max = p > max ? p : max;
        filter_unref(all[i]);
    }
    free(all);
    return max;
}

int durable_start(struct server *srv)
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
    srv->durable = d;
    struct replay r = {.srv = srv};
    r.adds = replay_adds_new();
    struct journal_replay_ops ops = {.apply = apply, .report = report, .ctx = &r};
    struct journal_replay_report rep;
    struct journal_error err;
    char msg[1200];
    uint64_t t0 = clock_mono_ms();
    int replayed = journal_replay(srv->cfg.data_dir, 0, &ops, &rep, &err);
    replay_adds_flush(r.adds);
    struct replay_adds_figures fig;
    replay_adds_figures(r.adds, &fig);
    replay_adds_free(r.adds);
    if (replayed != 0) {
        log_msg(LOG_ERROR, "journal: replay failed: %s", journal_format(&err, msg, sizeof msg));
        return -1;
    }
    if (rep.records > 0)
        log_msg(LOG_INFO,
                "journal: replayed %llu of %llu records from %llu segments in %llu ms (%llu "
                "covered by snapshots); %llu keys replayed, %llu of them by %u threads; %llu "
                "zero bytes cut off segment ends",
                (unsigned long long)r.applied, (unsigned long long)rep.records,
                (unsigned long long)rep.segments, (unsigned long long)(clock_mono_ms() - t0),
                (unsigned long long)r.skipped, (unsigned long long)fig.keys,
                (unsigned long long)fig.sharded, fig.threads, (unsigned long long)rep.zero_bytes);
    uint64_t min = max_snapshot_pos(srv);
    struct journal_opts o = {
        .mode = mode == DURABILITY_ALWAYS ? JOURNAL_MODE_ALWAYS : JOURNAL_MODE_EVERYSEC,
        .spares = mode == DURABILITY_ALWAYS, /* its fdatasyncs are on every reply's path */
        .min_pos = rep.last_pos > min ? rep.last_pos : min,
    };
    if (journal_open(srv->cfg.data_dir, &o, &d->j, &err) != 0) {
        if (srv->cfg.allow_readonly_data_dir) {
            /* Persistence is off on such a directory anyway (datadir.c warned). */
            log_msg(LOG_WARN, "journal: off, the data directory cannot be written: %s",
                    journal_format(&err, msg, sizeof msg));
            free(d);
            srv->durable = NULL;
            return 0;
        }
        log_msg(LOG_ERROR, "journal: cannot open: %s", journal_format(&err, msg, sizeof msg));
        return -1;
    }
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

static uint64_t append(struct server *srv, const struct journal_record *rec)
{
    struct durable *d = srv->durable;
    uint64_t pos = 0;
    int rc = journal_append(d->j, rec, &pos);
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

uint64_t durable_append(struct server *srv, struct filter *f, const struct journal_record *rec)
{
    if (!durable_on(srv))
        return 0;
    if (f != NULL && f->ops->advance != NULL &&
        (rec->type == JOURNAL_ADD || rec->type == JOURNAL_ADD_NEW)) {
        int64_t now = clock_wall_ms();
        if (now - f->rotated_ms >= DURABLE_ROTATE_MS || now < f->rotated_ms) {
            struct journal_record rot = {.type = JOURNAL_ROTATE, .name = rec->name, .time_ms = now};
            append(srv, &rot);
            f->rotated_ms = now;
        }
    }
    return append(srv, rec);
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
