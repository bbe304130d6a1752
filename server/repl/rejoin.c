/*
 * rejoin.c - an old primary's filters go to its new primary before its full sync drops
 * them. Per filter, one request at a time on the link, every reply checked:
 *   the primary has none by that name (LIST):  RESTORE <name> <n>
 *   it has one:                                RESTORE <tmp> <n> replace, UNION <name> <tmp>,
 *                                              DROP <tmp>
 * where <tmp> is "rejoin-" and this server's stream id (no user's name, and the same on
 * every try, so `replace` and the DROP tidy up after a link lost midway). A windowed filter
 * the primary has cannot be merged (UNION refuses windows); a filter with another seed or
 * other parameters is refused by UNION: each is logged at WARN and the rest go on. Once a
 * rejoin has given up on a filter it does not try it again: the full sync follows.
 *
 * Workload: once per failover, a few filters of up to gigabytes. Each is encoded on the
 * long lane (as a full sync's are), held counted in the budget, and handed to the link's
 * output by reference (no copy), one at a time.
 */
#include "server/repl/rejoin.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/container.h"
#include "lib/kind.h"
#include "proto/request.h"
#include "server/core/budget.h"
#include "server/core/clock.h"
#include "server/core/jobs.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/repl/repl_internal.h"
#include "server/store/offload.h"
#include "server/store/registry.h"

#define REJOIN_TRIES 3        /* links begun on before it gives up */
#define REJOIN_ENCODE_TRIES 3 /* encodings of one filter (it needed more room) */
#define REJOIN_PREFIX "rejoin-"

enum rejoin_phase {
    RJ_IDLE,        /* no link */
    RJ_LIST,        /* LIST's lines: which filters the primary has */
    RJ_ENCODE,      /* filters[next] is encoded on the long lane */
    RJ_RESTORE_OWN, /* RESTORE <name>: the primary had none */
    RJ_RESTORE_TMP, /* RESTORE <tmp> replace */
    RJ_UNION,       /* UNION <name> <tmp> */
    RJ_DROP,        /* DROP <tmp> */
    RJ_DONE,
};

struct rejoin_job;

struct repl_rejoin {
    struct repl *r;
    struct server *srv;
    void (*done)(void *arg);
    void *arg;
    struct filter **filters; /* references, sorted by name */
    bool *there;             /* filters[i] is on the primary (its LIST) */
    size_t n, next;          /* filters; the one being sent */
    struct bufferevent *bev; /* the link, or NULL while it is down */
    enum rejoin_phase phase;
    unsigned tries;         /* links begun on */
    unsigned encodes;       /* encodings of filters[next] begun */
    struct rejoin_job *job; /* the encoding under way, or NULL */
    uint64_t size_hint;     /* bytes the lane said filters[next] needs, or 0 */
    size_t len;             /* bytes of filters[next] sent */
    char tmp[PROTO_MAX_NAME + 1];
    size_t merged, restored, windowed, failed; /* filters, for the log */
    uint64_t bytes;                            /* bytes of the filters merged or restored */
    uint64_t start_ms;
};

static int by_name(const void *a, const void *b)
{
    const struct filter *x = *(struct filter *const *)a, *y = *(struct filter *const *)b;
    return strcmp(x->name, y->name);
}

void repl_rejoin_at_start(struct repl *r)
{
    size_t n = registry_count(r->srv->reg);
    if (r->id[0] != '\0' || r->was_replica || n == 0)
        return;
    r->rejoin = true;
    log_msg(LOG_INFO,
            "replication: %zu filters here and no replica.state: they are an old primary's, "
            "sent to the primary before the full sync",
            n);
}

struct repl_rejoin *repl_rejoin_new(struct repl *r, void (*done)(void *arg), void *arg)
{
    struct repl_rejoin *j = calloc(1, sizeof *j);
    if (j == NULL || registry_collect(r->srv->reg, NULL, 0, &j->filters, &j->n) != REGISTRY_OK)
        goto nomem;
    if ((j->there = calloc(j->n ? j->n : 1, sizeof *j->there)) == NULL)
        goto nomem;
    qsort(j->filters, j->n, sizeof *j->filters, by_name);
    j->r = r;
    j->srv = r->srv;
    j->done = done;
    j->arg = arg;
    char id[REPL_ID_LEN + 1];
    if (r->id[0] != '\0')
        memcpy(id, r->id, sizeof id);
    else
        repl_new_id(id);
    snprintf(j->tmp, sizeof j->tmp, REJOIN_PREFIX "%s", id);
    j->start_ms = clock_mono_ms();
    return j;
nomem:
    log_msg(LOG_ERROR, "replication: out of memory for sending this server's filters to the "
                       "primary: their keys not on the primary are lost in the full sync");
    repl_rejoin_free(j);
    return NULL;
}

/* ---- encoding on the long lane ---- */

struct rejoin_job {
    struct job job;
    struct server *srv;
    struct repl_rejoin *j; /* NULL once the rejoin let go of it */
    struct filter *flt;
    size_t index; /* flt's place in the rejoin's filters */
    unsigned char *buf;
    size_t len, cap;
    size_t charged; /* budget charged for it, >= cap */
    uint64_t need;  /* REJOIN_LARGER: bytes it needs */
    int rc;
};

enum { REJOIN_GREW = -1, REJOIN_LARGER = -2, REJOIN_NOMEM = -3 };

static int job_write(void *ctx, const void *p, size_t n)
{
    struct rejoin_job *e = ctx;
    if (e->len + n > e->cap)
        return -1;
    memcpy(e->buf + e->len, p, n);
    e->len += n;
    return 0;
}

static void job_run(struct job *job)
{
    struct rejoin_job *e = (struct rejoin_job *)job;
    uint64_t need = container_encoded_size(e->flt->ops, e->flt->obj);
    if (need > e->charged) {
        e->need = need;
        e->rc = REJOIN_LARGER;
        return;
    }
    e->cap = (size_t)need;
    if ((e->buf = malloc(e->cap ? e->cap : 1)) == NULL) {
        e->rc = REJOIN_NOMEM;
        return;
    }
    if (container_encode(e->flt->ops, e->flt->obj, 0, e->flt->seed, job_write, e) != 0)
        e->rc = REJOIN_GREW;
}

static void job_free(struct job *job)
{
    struct rejoin_job *e = (struct rejoin_job *)job;
    if (e->charged != 0)
        budget_release(&e->srv->budget, BUDGET_OVERHEAD, e->charged);
    free(e->buf); /* done() was skipped (shutdown), or it let go of the buffer */
    filter_unref(e->flt);
    free(e);
}

/* The link's output let go of a filter's bytes (sent, or the link closed). */
static void sent_cleanup(const void *data, size_t len, void *extra)
{
    struct server *srv = extra;
    budget_release(&srv->budget, BUDGET_OVERHEAD, len);
    offload_free(srv, (void *)(uintptr_t)data);
}

static void next_filter(struct repl_rejoin *j);

static const char *cur_name(const struct repl_rejoin *j)
{
    return j->filters[j->next]->name;
}

/* filters[next] is done with (sent, or given up on): on to the next one. */
static void advance(struct repl_rejoin *j)
{
    j->next++;
    j->encodes = 0;
    j->size_hint = 0;
    next_filter(j);
}

static void give_up_filter(struct repl_rejoin *j, const char *why)
{
    log_msg(LOG_WARN,
            "replication: filter %s not sent to the primary: %s; its keys not on the primary "
            "are lost in the full sync",
            cur_name(j), why);
    j->failed++;
    advance(j);
}

static void send_line(struct repl_rejoin *j, const char *line)
{
    bufferevent_write(j->bev, line, strlen(line));
}

/* Sends filters[next]'s encoding (taken over) under its own name or the temporary one. */
static void send_filter(struct repl_rejoin *j, unsigned char *buf, size_t len)
{
    bool merge = j->there[j->next];
    char head[64 + 2 * PROTO_MAX_NAME];
    if (merge)
        snprintf(head, sizeof head, "RESTORE %s %zu replace\r\n", j->tmp, len);
    else
        snprintf(head, sizeof head, "RESTORE %s %zu\r\n", cur_name(j), len);
    /* Built apart, then moved into the output whole: nothing half written on a failure. */
    struct evbuffer *out = evbuffer_new();
    if (out == NULL || evbuffer_add(out, head, strlen(head)) != 0) {
        evbuffer_free(out);
        sent_cleanup(buf, len, j->srv);
        give_up_filter(j, "out of memory");
        return;
    }
    if (evbuffer_add_reference(out, buf, len, sent_cleanup, j->srv) != 0) {
        sent_cleanup(buf, len, j->srv);
        evbuffer_free(out);
        give_up_filter(j, "out of memory");
        return;
    }
    if (evbuffer_add(out, "\r\n", 2) != 0 || bufferevent_write_buffer(j->bev, out) != 0) {
        evbuffer_free(out); /* lets go of buf through sent_cleanup */
        give_up_filter(j, "out of memory");
        return;
    }
    evbuffer_free(out);
    j->len = len;
    j->phase = merge ? RJ_RESTORE_TMP : RJ_RESTORE_OWN;
}

static void encode(struct repl_rejoin *j);

static void job_done(struct job *job)
{
    struct rejoin_job *e = (struct rejoin_job *)job;
    struct repl_rejoin *j = e->j;
    if (j == NULL)
        return;
    j->job = NULL;
    e->j = NULL;
    if (j->phase != RJ_ENCODE || e->rc != 0) {
        /* The link went down meanwhile (the next one encodes again), or it failed. */
        budget_release(&e->srv->budget, BUDGET_OVERHEAD, e->charged);
        e->charged = 0;
        offload_free(e->srv, e->buf); /* a big filter's encoding: its munmap is long */
        e->buf = NULL;
        if (j->phase != RJ_ENCODE)
            return;
        if (e->rc == REJOIN_NOMEM) {
            give_up_filter(j, "no memory to encode it");
            return;
        }
        j->size_hint = e->rc == REJOIN_LARGER ? e->need : 0;
        encode(j);
        return;
    }
    budget_release(&e->srv->budget, BUDGET_OVERHEAD, e->charged - e->len);
    e->charged = 0;
    unsigned char *buf = e->buf;
    e->buf = NULL;
    send_filter(j, buf, e->len);
}

/* Starts encoding filters[next] on the long lane. */
static void encode(struct repl_rejoin *j)
{
    struct server *srv = j->srv;
    struct filter *flt = j->filters[j->next];
    if (j->encodes++ == REJOIN_ENCODE_TRIES) {
        give_up_filter(j, "its encoding kept outgrowing its room");
        return;
    }
    struct kind_info info = {0};
    flt->ops->info(flt->obj, &info);
    /* As a full sync's (repl.c): the filter's memory and headers bound its encoding; a
     * hint from the lane (it needed more) wins. */
    uint64_t bound = info.bytes + info.header + 65536;
    if (j->size_hint > bound)
        bound = j->size_hint;
    struct rejoin_job *e = NULL;
    if (bound > SIZE_MAX || !budget_fits(&srv->budget, (size_t)bound) ||
        srv->lanes[JOBS_LONG] == NULL || (e = calloc(1, sizeof *e)) == NULL) {
        give_up_filter(j, "its encoding does not fit max_memory now");
        return;
    }
    budget_charge(&srv->budget, BUDGET_OVERHEAD, (size_t)bound);
    e->charged = (size_t)bound;
    e->srv = srv;
    e->j = j;
    e->flt = flt;
    e->index = j->next;
    filter_ref(flt);
    e->job = (struct job){.run = job_run, .done = job_done, .free = job_free};
    j->job = e;
    j->phase = RJ_ENCODE;
    jobs_post(srv->lanes[JOBS_LONG], &e->job);
}

/* ---- the steps ---- */

static void finish(struct repl_rejoin *j)
{
    double s = (double)(clock_mono_ms() - j->start_ms) / 1000.0;
    log_msg(LOG_INFO,
            "replication: sent %zu of %zu filters to the primary before the full sync "
            "(%zu merged by UNION, %zu restored as new, %zu windowed not merged, %zu failed): "
            "%llu bytes in %.2f s",
            j->merged + j->restored, j->n, j->merged, j->restored, j->windowed, j->failed,
            (unsigned long long)j->bytes, s);
    j->phase = RJ_DONE;
    j->done(j->arg); /* may free j */
}

static void next_filter(struct repl_rejoin *j)
{
    while (j->next < j->n) {
        const struct filter *f = j->filters[j->next];
        if (f->ops == &kind_window && j->there[j->next]) {
            log_msg(LOG_WARN,
                    "replication: filter %s is windowed: UNION cannot merge it into the "
                    "primary's, so its keys that never reached the primary are lost in the "
                    "full sync",
                    f->name);
            j->windowed++;
            j->next++;
            continue;
        }
        if (j->job != NULL && j->job->index == j->next) {
            j->phase = RJ_ENCODE; /* an encoding begun before the link went down: its result */
            return;
        }
        if (j->job != NULL) { /* of a filter now skipped */
            j->job->j = NULL;
            j->job = NULL;
        }
        encode(j);
        return;
    }
    finish(j);
}

void repl_rejoin_begin(struct repl_rejoin *j, struct bufferevent *bev)
{
    if (j->tries++ == REJOIN_TRIES) {
        log_msg(LOG_ERROR,
                "replication: gave up sending filters to the primary after %u links lost "
                "midway: the keys of %zu filters not sent that are not on the primary are "
                "lost in the full sync (a temporary filter %s may be left there)",
                REJOIN_TRIES, j->n - j->next, j->tmp);
        j->failed += j->n - j->next;
        j->next = j->n;
        finish(j);
        return;
    }
    j->bev = bev;
    memset(j->there, 0, j->n * sizeof *j->there);
    j->phase = RJ_LIST;
    log_msg(LOG_INFO, "replication: sending this server's %zu filters to the primary first%s",
            j->n - j->next, j->tries > 1 ? " (again: the last link went down)" : "");
    send_line(j, "LIST\r\n");
}

/* One filter's name from a LIST line, marked as the primary's. */
static void mark_there(struct repl_rejoin *j, const char *line)
{
    char name[PROTO_MAX_NAME + 2];
    if (sscanf(line, "FILTER %129s", name) != 1)
        return;
    size_t lo = 0, hi = j->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(j->filters[mid]->name, name);
        if (c == 0) {
            j->there[mid] = true;
            return;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
}

static void step_failed(struct repl_rejoin *j, const char *what, const char *line)
{
    log_msg(LOG_WARN,
            "replication: filter %s not merged into the primary's: %s answered '%.200s'; its "
            "keys not on the primary are lost in the full sync",
            cur_name(j), what, line);
    j->failed++;
}

static void drop_tmp(struct repl_rejoin *j)
{
    char line[32 + PROTO_MAX_NAME];
    snprintf(line, sizeof line, "DROP %s\r\n", j->tmp);
    send_line(j, line);
    j->phase = RJ_DROP;
}

void repl_rejoin_line(struct repl_rejoin *j, const char *line)
{
    char req[64 + 2 * PROTO_MAX_NAME];
    switch (j->phase) {
    case RJ_LIST:
        if (strcmp(line, "END") == 0) {
            next_filter(j);
        } else if (strncmp(line, "FILTER ", 7) == 0) {
            mark_there(j, line);
        } else {
            log_msg(LOG_WARN,
                    "replication: the primary answered LIST with '%.200s': no filter is sent, "
                    "and their keys not on the primary are lost in the full sync",
                    line);
            j->failed += j->n - j->next;
            j->next = j->n;
            finish(j);
        }
        return;
    case RJ_RESTORE_OWN:
        if (strcmp(line, "RESTORED") == 0) {
            j->restored++;
            j->bytes += j->len;
            advance(j);
        } else if (strcmp(line, "EXISTS") == 0) {
            j->there[j->next] = true; /* made there meanwhile: merge it instead */
            next_filter(j);
        } else {
            step_failed(j, "RESTORE", line);
            advance(j);
        }
        return;
    case RJ_RESTORE_TMP:
        if (strcmp(line, "RESTORED") == 0) {
            snprintf(req, sizeof req, "UNION %s %s\r\n", cur_name(j), j->tmp);
            send_line(j, req);
            j->phase = RJ_UNION;
        } else {
            step_failed(j, "RESTORE", line);
            drop_tmp(j); /* what an earlier try left, if anything */
        }
        return;
    case RJ_UNION:
        if (strcmp(line, "OK") == 0) {
            j->merged++;
            j->bytes += j->len;
        } else {
            step_failed(j, "UNION", line);
        }
        drop_tmp(j);
        return;
    case RJ_DROP:
        if (strcmp(line, "DELETED") != 0 && strcmp(line, "NOT_FOUND") != 0)
            log_msg(LOG_WARN,
                    "replication: DROP %s on the primary answered '%.200s': drop it by hand",
                    j->tmp, line);
        advance(j);
        return;
    default:
        log_msg(LOG_WARN, "replication: an unexpected line from the primary: '%.200s'", line);
        return;
    }
}

void repl_rejoin_lost(struct repl_rejoin *j)
{
    j->bev = NULL;
    j->phase = RJ_IDLE;
    j->encodes = 0;
}

void repl_rejoin_free(struct repl_rejoin *j)
{
    if (j == NULL)
        return;
    if (j->job != NULL)
        j->job->j = NULL; /* its done() and free() let go of what it made */
    for (size_t i = 0; i < j->n; i++)
        filter_unref(j->filters[i]);
    free(j->filters);
    free(j->there);
    free(j);
}
