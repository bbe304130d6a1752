/*
 * figures.c - the sample rings and the cached popcount figures behind figures.h, and
 * figures_of, the one place a request gathers a filter's figures.
 * Entries are kept sorted by name (registry_collect's order), so a lookup is a binary
 * search and a tick merges the table with the registry in one pass. Workload: a tick
 * every FIGURES_SAMPLE_S seconds is O(filters); the popcount pass is O(filter bytes)
 * and runs on the job thread at nice 10, at most one queued at a time.
 */
#include "server/store/figures.h"

#include <event2/event.h>
#include <math.h>
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
    size_t skipped;        /* filters the last tick kept no entry for (small, no pages) */
    bool job_queued;       /* a popcount pass is queued or running */
    bool pages;            /* every filter, with rings (else only big ones, for INFO) */
};

/* What the job found for one filter. */
struct count {
    uint32_t nparts;
    uint64_t *ones;
    bool has_estimate;
    struct sbf_estimate est;
};

struct count_job {
    struct job job;
    bool parts; /* count the bits of every part too (the pages' fill), not only estimate */
    struct figures *fg;
    struct filter **f;
    size_t n;
    struct count *c;
    int64_t at_ms;
};

/* What an entry costs, counted in the budget's overhead while it lives (the ring is most). */
static size_t entry_bytes(const struct figures_entry *e)
{
    return sizeof *e + strlen(e->name) + 1 + (e->ring != NULL ? FIGURES_RING * sizeof *e->ring : 0);
}

static void entry_free(struct figures *fg, struct figures_entry *e)
{
    if (e == NULL)
        return;
    budget_release(&fg->srv->budget, BUDGET_OVERHEAD, entry_bytes(e));
    free(e->name);
    free(e->ones);
    free(e->ring);
    free(e);
}

static int by_name(const void *key, const void *elem)
{
    const struct figures_entry *const *e = elem;
    return strcmp(key, (*e)->name);
}

struct figures_entry *const *figures_entries(const struct figures *fg, size_t *n)
{
    *n = fg != NULL ? fg->n : 0;
    return fg != NULL ? fg->e : NULL;
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

struct parts_sum {
    uint32_t n;
    uint64_t bits;
};

static void sum_part(void *ctx, const struct kind_part *part)
{
    struct parts_sum *s = ctx;
    s->n++;
    s->bits += part->blocks * part->block_bits;
}

void figures_of(const struct figures *fg, const struct filter *f, bool count_small,
                struct figures_row *out)
{
    figures_row_of(figures_get(fg, f->name, f->name_len), f, count_small, out);
}

void figures_row_of(const struct figures_entry *e, const struct filter *f, bool count_small,
                    struct figures_row *out)
{
    memset(out, 0, sizeof *out);
    f->ops->info(f->obj, &out->info);
    struct parts_sum ps = {0};
    if (f->ops->parts != NULL)
        f->ops->parts(f->obj, false, sum_part, &ps);
    out->nparts = f->ops->parts != NULL ? ps.n : 1;
    out->bits = ps.bits;
    out->e = e;
    out->counted = e != NULL && e->counted_ms != 0 && e->obj == f->obj;
    if (out->counted)
        for (uint32_t p = 0; p < e->nparts; p++)
            out->ones += e->ones[p];
    if (f->ops->estimate == NULL) {
        /* Its rate is cheap to know (or unknown): never a count, never stale. */
        out->est =
            (struct sbf_estimate){.items = (double)out->info.items, .error = out->info.est_error};
        out->has_estimate = !isnan(out->info.est_error);
        return;
    }
    if (count_small && out->info.bytes <= FIGURES_INLINE_BYTES) {
        f->ops->estimate(f->obj, &out->est);
        out->has_estimate = true;
    } else if (out->counted && e->has_estimate) {
        out->est = e->est;
        out->has_estimate = true;
        int64_t age = clock_wall_ms() - e->counted_ms;
        out->est_age_ms = age > 0 ? age : 0;
    }
}

/* ---- the popcount job (job thread) ---- */

struct count_ctx {
    struct count *c;
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

static void count_run(struct job *j)
{
    struct count_job *cj = (struct count_job *)j;
    for (size_t i = 0; i < cj->n; i++) {
        const struct filter *f = cj->f[i];
        struct count_ctx cc = {.c = &cj->c[i]};
        if (cj->parts && f->ops->parts != NULL)
            f->ops->parts(f->obj, true, on_part, &cc);
        if (f->ops->estimate != NULL) {
            f->ops->estimate(f->obj, &cj->c[i].est);
            cj->c[i].has_estimate = true;
        }
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
        e->obj = cj->f[i]->obj;
        e->counted_ms = cj->at_ms;
        e->nparts = c->nparts;
        e->ones = c->ones;
        e->has_estimate = c->has_estimate;
        e->est = c->est;
        memset(c, 0, sizeof *c);
    }
}

static void count_free(struct job *j)
{
    struct count_job *cj = (struct count_job *)j;
    for (size_t i = 0; i < cj->n; i++) {
        filter_unref(cj->f[i]);
        free(cj->c[i].ones);
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
    if (fg->pages)
        e->ring = calloc(FIGURES_RING, sizeof *e->ring);
    if (e->name == NULL || (fg->pages && e->ring == NULL)) {
        free(e->name);
        free(e->ring);
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
    if (!fg->pages) {
        /* Only INFO reads the cache then, and only for filters it does not count itself. */
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            struct kind_info info = {0};
            f[i]->ops->info(f[i]->obj, &info);
            if (info.bytes > FIGURES_INLINE_BYTES && f[i]->ops->estimate != NULL)
                f[kept++] = f[i];
            else
                filter_unref(f[i]);
        }
        fg->skipped = n - kept;
        n = kept;
    }
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
        if (x->ring != NULL) {
            struct kind_info info = {0};
            f[i]->ops->info(f[i]->obj, &info);
            x->ring[x->head] = (struct figures_sample){.t_ms = now, .items = info.items};
            x->head = (x->head + 1) % FIGURES_RING;
            if (x->n < FIGURES_RING)
                x->n++;
        }
        x->seen_tick = fg->tick;
        e[i] = x;
    }
    while (old < fg->n)
        entry_free(fg, fg->e[old++]);

    /* The filters to count: all of them for the pages; without the pages only those INFO
     * asked for since the last pass or never counted (nobody else reads the cache then,
     * and a pass over gigabytes is not free). f keeps the references the job takes. */
    bool post = !fg->job_queued && srv->lanes[JOBS_LONG] != NULL;
    size_t nc = 0;
    for (size_t i = 0; i < n; i++) {
        const struct figures_entry *x = e[i];
        bool due = post && x != NULL &&
                   (fg->pages || x->wanted || x->counted_ms == 0 || x->obj != f[i]->obj);
        if (due) {
            e[i]->wanted = false;
            f[nc++] = f[i];
        } else {
            filter_unref(f[i]);
        }
    }
    /* Compact the slots an allocation failure left empty. */
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (e[i] != NULL)
            e[m++] = e[i];
    free(fg->e);
    fg->e = e;
    fg->n = m;
    n = nc;

    if (n > 0) {
        struct count_job *cj = calloc(1, sizeof *cj);
        struct count *c = calloc(n, sizeof *c);
        if (cj == NULL || c == NULL) {
            free(cj);
            free(c);
            goto out;
        }
        cj->job = (struct job){.run = count_run, .done = count_done, .free = count_free};
        cj->parts = fg->pages;
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

void figures_want(struct figures *fg, const struct filter *f)
{
    if (fg == NULL || f->ops->estimate == NULL)
        return;
    struct kind_info info = {0};
    f->ops->info(f->obj, &info);
    if (info.bytes <= FIGURES_INLINE_BYTES)
        return; /* INFO counts it itself */
    struct figures_entry *e = (struct figures_entry *)figures_get(fg, f->name, f->name_len);
    if (e != NULL)
        e->wanted = true;
    bool stale = e == NULL || e->counted_ms == 0 || e->obj != f->obj ||
                 clock_wall_ms() - e->counted_ms >= FIGURES_SAMPLE_S * 1000;
    /* A stale count is replaced now rather than at the next tick, at most once a second. */
    if (stale && !fg->job_queued && fg->srv->phase == SERVER_READY &&
        clock_mono_ms() - fg->last_tick_ms >= 1000)
        figures_tick(fg);
}

void figures_poke(struct figures *fg)
{
    if (fg != NULL && fg->srv->phase == SERVER_READY &&
        clock_mono_ms() - fg->last_tick_ms >= 1000 &&
        fg->n + fg->skipped < registry_count(fg->srv->reg))
        figures_tick(fg);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    figures_tick(arg);
}

struct figures *figures_new(struct server *srv, struct event_base *base, bool pages)
{
    struct figures *fg = calloc(1, sizeof *fg);
    if (fg == NULL)
        return NULL;
    fg->srv = srv;
    fg->pages = pages;
    struct timeval tv = {.tv_sec = FIGURES_SAMPLE_S};
    fg->timer = event_new(base, -1, EV_PERSIST, on_timer, fg);
    if (fg->timer == NULL || event_add(fg->timer, &tv) != 0) {
        log_msg(LOG_ERROR, "figures: cannot start the sampling timer");
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
