/*
 * figures.c - the sample rings and the cached popcount figures behind figures.h.
 * Entries are kept sorted by name (registry_collect's order), so a lookup is a binary
 * search and a tick merges the table with the registry in one pass. Workload: a tick
 * every FIGURES_SAMPLE_S seconds is O(filters); the popcount pass is O(filter bytes)
 * and runs on the job thread at nice 10, at most one queued at a time.
 */
#include "server/store/figures.h"

#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/core/budget.h"
#include "server/core/clock.h"
#include "server/core/jobs.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/store/registry.h"

struct figures {
    struct server *srv;
    struct event *timer;
    struct figures_entry **e; /* sorted by name */
    size_t n, cap;
    uint64_t tick;
    uint64_t last_tick_ms; /* CLOCK_MONOTONIC of the last tick */
    bool job_queued;       /* a popcount pass is queued or running */
};

/* What the job found for one filter. */
struct count {
    uint32_t nparts;
    uint64_t *ones;
    bool has_estimate;
    double est_error, est_items;
    char *info_json;
};

struct count_job {
    struct job job;
    struct figures *fg;
    struct filter **f;
    size_t n;
    struct count *c;
    int64_t at_ms;
};

/* What an entry costs, counted in the budget's overhead while it lives (the ring is most). */
static size_t entry_bytes(const struct figures_entry *e)
{
    return sizeof *e + strlen(e->name) + 1;
}

static void entry_free(struct figures *fg, struct figures_entry *e)
{
    if (e == NULL)
        return;
    budget_release(&fg->srv->budget, BUDGET_OVERHEAD, entry_bytes(e));
    free(e->name);
    free(e->ones);
    free(e->info_json);
    free(e);
}

static int by_name(const void *key, const void *elem)
{
    const struct figures_entry *const *e = elem;
    return strcmp(key, (*e)->name);
}

const struct figures_entry *figures_get(const struct figures *fg, const char *name, size_t len)
{
    char buf[256];
    if (fg == NULL || len >= sizeof buf)
        return NULL;
    memcpy(buf, name, len);
    buf[len] = '\0';
    struct figures_entry **e = bsearch(buf, fg->e, fg->n, sizeof *fg->e, by_name);
    return e != NULL ? *e : NULL;
}

/* ---- the popcount job (job thread) ---- */

struct grow_buf {
    char *p;
    size_t len, cap;
    bool failed;
};

static void buf_printf(struct grow_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void buf_printf(struct grow_buf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (int tries = 0; tries < 2; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (m < 0) {
            b->failed = true;
            return;
        }
        if (b->len + (size_t)m < b->cap) {
            b->len += (size_t)m;
            return;
        }
        size_t cap = (b->len + (size_t)m + 1) * 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

struct count_ctx {
    struct count *c;
    struct grow_buf info;
    uint32_t cap;
};

static void on_part(void *ctx, const struct kind_part *part)
{
    struct count_ctx *cc = ctx;
    if (cc->c->nparts == cc->cap) {
        uint32_t cap = cc->cap ? cc->cap * 2 : 8;
        uint64_t *ones = realloc(cc->c->ones, cap * sizeof *ones);
        if (ones == NULL)
            return;
        cc->c->ones = ones;
        cc->cap = cap;
    }
    cc->c->ones[cc->c->nparts++] = part->ones;
}

static void on_field(void *ctx, const char *name, enum kind_field_type type, uint64_t u, double d,
                     const char *s)
{
    struct count_ctx *cc = ctx;
    /* Field names are static identifiers and string values are words: no escaping needed
     * beyond refusing a quote or backslash, which no kind writes. */
    buf_printf(&cc->info, "%s\"%s\":", cc->info.len ? "," : "", name);
    if (type == KIND_FIELD_U64) {
        buf_printf(&cc->info, "%llu", (unsigned long long)u);
    } else if (type == KIND_FIELD_DOUBLE) {
        if (d == d && d - d == 0)
            buf_printf(&cc->info, "%.9g", d);
        else
            buf_printf(&cc->info, "null");
    } else {
        buf_printf(&cc->info, "\"%s\"", strpbrk(s, "\"\\") == NULL ? s : "?");
    }
    if (type == KIND_FIELD_DOUBLE && strcmp(name, "estimated_error") == 0) {
        cc->c->has_estimate = true;
        cc->c->est_error = d;
    } else if (type == KIND_FIELD_DOUBLE && strcmp(name, "estimated_items") == 0) {
        cc->c->est_items = d;
    }
}

static void count_run(struct job *j)
{
    struct count_job *cj = (struct count_job *)j;
    for (size_t i = 0; i < cj->n; i++) {
        const struct filter *f = cj->f[i];
        struct count_ctx cc = {.c = &cj->c[i]};
        if (f->ops->parts != NULL)
            f->ops->parts(f->obj, true, on_part, &cc);
        f->ops->fields(f->obj, on_field, &cc);
        if (!cc.info.failed)
            cj->c[i].info_json = cc.info.p;
        else
            free(cc.info.p);
    }
}

static void count_done(struct job *j)
{
    struct count_job *cj = (struct count_job *)j;
    struct figures *fg = cj->fg;
    fg->job_queued = false;
    for (size_t i = 0; i < cj->n; i++) {
        struct figures_entry *e =
            (struct figures_entry *)figures_get(fg, cj->f[i]->name, cj->f[i]->name_len);
        if (e == NULL)
            continue; /* dropped meanwhile */
        struct count *c = &cj->c[i];
        free(e->ones);
        free(e->info_json);
        e->obj = cj->f[i]->obj;
        e->counted_ms = cj->at_ms;
        e->nparts = c->nparts;
        e->ones = c->ones;
        e->has_estimate = c->has_estimate;
        e->est_error = c->est_error;
        e->est_items = c->est_items;
        e->info_json = c->info_json;
        memset(c, 0, sizeof *c);
    }
}

static void count_free(struct job *j)
{
    struct count_job *cj = (struct count_job *)j;
    for (size_t i = 0; i < cj->n; i++) {
        filter_unref(cj->f[i]);
        free(cj->c[i].ones);
        free(cj->c[i].info_json);
    }
    free(cj->f);
    free(cj->c);
    free(cj);
}

/* ---- sampling (loop thread) ---- */

static struct figures_entry *entry_new(struct figures *fg, const struct filter *f)
{
    struct figures_entry *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->name = strdup(f->name);
    if (e->name == NULL) {
        free(e);
        return NULL;
    }
    budget_charge(&fg->srv->budget, BUDGET_OVERHEAD, entry_bytes(e));
    return e;
}

void figures_tick(struct figures *fg)
{
    struct server *srv = fg->srv;
    if (srv->phase != SERVER_READY)
        return;
    struct filter **f;
    size_t n;
    if (registry_collect(srv->reg, NULL, 0, &f, &n) != REGISTRY_OK)
        return;
    struct figures_entry **e = calloc(n ? n : 1, sizeof *e);
    if (e == NULL)
        goto out;
    fg->tick++;
    fg->last_tick_ms = clock_mono_ms();
    int64_t now = clock_wall_ms();
    /* Merge: both lists are sorted by name. */
    size_t old = 0;
    for (size_t i = 0; i < n; i++) {
        while (old < fg->n && strcmp(fg->e[old]->name, f[i]->name) < 0)
            entry_free(fg, fg->e[old++]);
        struct figures_entry *x = NULL;
        if (old < fg->n && strcmp(fg->e[old]->name, f[i]->name) == 0)
            x = fg->e[old++];
        else
            x = entry_new(fg, f[i]);
        if (x == NULL) {
            /* Out of memory: keep what was merged, lose this filter's history. */
            continue;
        }
        struct kind_info info = {0};
        f[i]->ops->info(f[i]->obj, &info);
        x->ring[x->head] = (struct figures_sample){.t_ms = now, .items = info.items};
        x->head = (x->head + 1) % FIGURES_RING;
        if (x->n < FIGURES_RING)
            x->n++;
        x->seen_tick = fg->tick;
        e[i] = x;
    }
    while (old < fg->n)
        entry_free(fg, fg->e[old++]);
    /* Compact the slots an allocation failure left empty. */
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (e[i] != NULL)
            e[m++] = e[i];
    free(fg->e);
    fg->e = e;
    fg->n = m;

    if (!fg->job_queued && srv->lanes[JOBS_LONG] != NULL && n > 0) {
        struct count_job *cj = calloc(1, sizeof *cj);
        struct count *c = calloc(n, sizeof *c);
        if (cj == NULL || c == NULL) {
            free(cj);
            free(c);
            goto out;
        }
        cj->job = (struct job){.run = count_run, .done = count_done, .free = count_free};
        cj->fg = fg;
        cj->f = f; /* the job takes the references */
        cj->n = n;
        cj->c = c;
        cj->at_ms = now;
        fg->job_queued = true;
        jobs_post(srv->lanes[JOBS_LONG], &cj->job);
        return;
    }
out:
    for (size_t i = 0; i < n; i++)
        filter_unref(f[i]);
    free(f);
}

void figures_poke(struct figures *fg)
{
    if (fg != NULL && fg->srv->phase == SERVER_READY &&
        clock_mono_ms() - fg->last_tick_ms >= 1000 && fg->n < registry_count(fg->srv->reg))
        figures_tick(fg);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    figures_tick(arg);
}

struct figures *figures_new(struct server *srv, struct event_base *base)
{
    struct figures *fg = calloc(1, sizeof *fg);
    if (fg == NULL)
        return NULL;
    fg->srv = srv;
    struct timeval tv = {.tv_sec = FIGURES_SAMPLE_S};
    fg->timer = event_new(base, -1, EV_PERSIST, on_timer, fg);
    if (fg->timer == NULL || event_add(fg->timer, &tv) != 0) {
        log_msg(LOG_ERROR, "http: cannot start the sampling timer");
        figures_free(fg);
        return NULL;
    }
    return fg;
}

void figures_free(struct figures *fg)
{
    if (fg == NULL)
        return;
    if (fg->timer != NULL)
        event_free(fg->timer);
    for (size_t i = 0; i < fg->n; i++)
        entry_free(fg, fg->e[i]);
    free(fg->e);
    free(fg);
}
