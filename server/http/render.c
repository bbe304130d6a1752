/*
 * render.c - the HTTP pages' bodies and the shared renderings behind render.h. Workload:
 * many scrapers (Prometheus replicas, dashboards) asking for /metrics at once over
 * thousands of filters. The loop's part of a rendering is one gathering per
 * RENDER_REUSE_MS at most: the server's O(1) figures and a linear copy of the figures
 * entries into one block (about 1 ms for 10,000 filters). The rest runs on the long lane,
 * where the figures' popcount pass and the retired generations' frees also run (so a
 * window's parts cannot be freed under it): taking the filters, pairing, the text. Every
 * request gets a reference to the one buffer: no copy, counted once in the budget.
 */
#include "server/http/render.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/core/budget.h"
#include "server/core/clock.h"
#include "server/core/jobs.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/exec/stats.h"
#include "server/http/http_pages.h"
#include "server/store/figures.h"
#include "server/store/registry.h"

/* ---- bodies ---- */

struct http_body *http_body_new(struct budget *budget, int status, const char *type,
                                struct evbuffer *src)
{
    size_t len = evbuffer_get_length(src);
    size_t cost = sizeof(struct http_body) + len;
    if (budget != NULL && !budget_reserve(budget, BUDGET_CONNECTIONS, cost)) {
        evbuffer_drain(src, len);
        return NULL;
    }
    struct http_body *b = malloc(cost);
    if (b == NULL) {
        if (budget != NULL)
            budget_release(budget, BUDGET_CONNECTIONS, cost);
        evbuffer_drain(src, len);
        return NULL;
    }
    atomic_init(&b->refs, 1);
    b->status = status;
    b->type = type;
    b->budget = budget;
    b->len = len;
    evbuffer_remove(src, b->data, len);
    return b;
}

void http_body_unref(struct http_body *b)
{
    if (b == NULL || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (b->budget != NULL)
        budget_release(b->budget, BUDGET_CONNECTIONS, sizeof *b + b->len);
    free(b);
}

static void body_cleanup(const void *data, size_t len, void *extra)
{
    (void)data;
    (void)len;
    http_body_unref(extra);
}

static const char *reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 414:
        return "URI Too Long";
    case 500:
        return "Internal Server Error";
    default:
        return "Service Unavailable";
    }
}

void http_body_send(struct evhttp_request *req, const struct http_body *b)
{
    struct http_body *mb = (struct http_body *)b; /* the count changes, never the bytes */
    struct evbuffer *out = evbuffer_new();
    if (out == NULL) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
    atomic_fetch_add_explicit(&mb->refs, 1, memory_order_relaxed);
    if (evbuffer_add_reference(out, b->data, b->len, body_cleanup, mb) != 0) {
        http_body_unref(mb);
        evbuffer_free(out);
        evhttp_send_error(req, 500, NULL);
        return;
    }
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", b->type);
    evhttp_add_header(h, "Cache-Control", "no-store");
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_send_reply(req, b->status, reason(b->status), out);
    evbuffer_free(out);
}

/* ---- the gathering (loop) ---- */

/* Bytes of block that entry e takes: its name, its counts and (rings) its samples. */
static size_t copy_bytes(const struct figures_entry *e, bool rings)
{
    size_t b = (strlen(e->name) + 8) & ~(size_t)7;
    b += (size_t)e->nparts * sizeof *e->ones;
    if (rings && e->ring != NULL)
        b += (size_t)e->n * sizeof *e->ring;
    return b;
}

int page_input_gather(struct page_input *in, struct server *srv, bool rings)
{
    memset(in, 0, sizeof *in);
    in->phase = srv->phase;
    in->now_ms = clock_wall_ms();
    in->started_ns = srv->started_ns;
    in->now_ns = clock_mono_ns();
    in->budget = &srv->budget;
    /* While starting, the loader (job thread) is the registry's changing thread. */
    if (srv->phase == SERVER_STARTING)
        return 0;
    stats_gather_cheap(srv, &in->stats); /* STAT_ITEMS: page_input_collect sums it */
    in->reg = srv->reg;
    size_t n;
    struct figures_entry *const *src = figures_entries(srv->figures, &n);
    size_t bytes = n * sizeof *in->copies;
    for (size_t i = 0; i < n; i++)
        bytes += copy_bytes(src[i], rings);
    if (!budget_reserve(in->budget, BUDGET_CONNECTIONS, bytes))
        return -2;
    in->charged = bytes;
    in->block = malloc(bytes ? bytes : 1);
    if (in->block == NULL) {
        page_input_destroy(in);
        return -1;
    }
    in->copies = in->block;
    in->ncopies = n;
    char *at = (char *)(in->copies + n); /* 8-aligned: struct figures_entry has uint64s */
    for (size_t i = 0; i < n; i++) {
        const struct figures_entry *from = src[i];
        struct figures_entry *e = &in->copies[i];
        *e = *from;
        size_t len = strlen(from->name);
        memcpy(at, from->name, len + 1);
        e->name = at;
        at += (len + 8) & ~(size_t)7;
        e->ones = (uint64_t *)(void *)at;
        if (from->nparts > 0)
            memcpy(e->ones, from->ones, (size_t)from->nparts * sizeof *e->ones);
        at += (size_t)from->nparts * sizeof *e->ones;
        e->ring = NULL;
        e->n = e->head = 0;
        if (rings && from->ring != NULL) {
            /* Oldest first from slot 0, so that (head - n + k) mod FIGURES_RING is k. */
            e->ring = (struct figures_sample *)(void *)at;
            for (uint32_t k = 0; k < from->n; k++)
                e->ring[k] = from->ring[(from->head + FIGURES_RING - from->n + k) % FIGURES_RING];
            e->n = e->head = from->n;
            at += (size_t)from->n * sizeof *e->ring;
        }
    }
    return 0;
}

int page_input_collect(struct page_input *in)
{
    if (in->reg == NULL)
        return 0;
    if (registry_collect(in->reg, NULL, 0, &in->f, &in->n) != REGISTRY_OK) {
        in->f = NULL;
        in->n = 0;
        return -1;
    }
    in->ent = calloc(in->n ? in->n : 1, sizeof *in->ent);
    if (in->ent == NULL) {
        for (size_t i = 0; i < in->n; i++)
            filter_unref(in->f[i]);
        free(in->f);
        in->f = NULL;
        in->n = 0;
        return -1;
    }
    /* Both are sorted by name (strcmp's order, which is registry_collect's): merge. */
    uint64_t items = 0;
    size_t c = 0;
    for (size_t i = 0; i < in->n; i++) {
        const struct filter *f = in->f[i];
        while (c < in->ncopies && strcmp(in->copies[c].name, f->name) < 0)
            c++;
        if (c < in->ncopies && strcmp(in->copies[c].name, f->name) == 0)
            in->ent[i] = &in->copies[c];
        struct kind_info info = {0};
        f->ops->info(f->obj, &info);
        items += info.items;
    }
    stat_set_u64(&in->stats, STAT_ITEMS, items);
    return 0;
}

void page_input_destroy(struct page_input *in)
{
    for (size_t i = 0; i < in->n; i++)
        filter_unref(in->f[i]);
    free(in->f);
    free(in->ent);
    free(in->block);
    if (in->charged > 0)
        budget_release(in->budget, BUDGET_CONNECTIONS, in->charged);
    in->f = NULL;
    in->ent = NULL;
    in->block = NULL;
    in->copies = NULL;
    in->n = in->ncopies = 0;
    in->charged = 0;
    in->reg = NULL;
}

/* ---- the shared renderings ---- */

struct render_job;

struct page_cache {
    struct render *r;
    enum render_page page;
    struct http_body *last;       /* the newest good rendering (one reference), or NULL */
    uint64_t last_ms;             /* CLOCK_MONOTONIC ms of its gathering */
    bool running;                 /* a rendering is queued or running */
    struct render_job *job;       /* that rendering, until its done() or free() */
    uint64_t posted_ms;           /* CLOCK_MONOTONIC ms it was posted */
    struct evhttp_request **wait; /* requests waiting for it, in order */
    size_t nwait, cap;
};

struct render {
    struct server *srv;
    struct page_cache page[RENDER_NPAGES];
    uint64_t rendered;  /* renderings made (for the log) */
    uint64_t warned_ms; /* the last "lane busy" line; 0 never */
};

struct render_job {
    struct job job;
    struct page_cache *c;
    struct page_input in;
    uint64_t at_ms; /* CLOCK_MONOTONIC ms of the gathering */
    int status;
    struct http_body *body; /* NULL: it did not fit the budget */
    _Atomic bool started;   /* set by run(): the lane got to it */
};

static const char *const page_type[RENDER_NPAGES] = {
    [RENDER_METRICS] = "text/plain; version=0.0.4; charset=utf-8",
    [RENDER_FILTERS] = "application/json",
};

static int render_into(enum render_page page, const struct page_input *in, struct evbuffer *out)
{
    return page == RENDER_METRICS ? metrics_render(in, out) : api_filters(in, out);
}

/* A short body saying why (not counted: a few dozen bytes). */
static void send_unavailable(struct evhttp_request *req, enum render_page page, const char *why)
{
    struct evbuffer *b = evbuffer_new();
    struct http_body *body = NULL;
    if (b != NULL) {
        if (page == RENDER_METRICS)
            evbuffer_add_printf(b, "%s\n", why);
        else
            api_error(b, 503, why);
        body = http_body_new(
            NULL, 503, page == RENDER_METRICS ? "text/plain; charset=utf-8" : "application/json",
            b);
        evbuffer_free(b);
    }
    if (body == NULL) {
        evhttp_send_error(req, 503, NULL);
        return;
    }
    http_body_send(req, body);
    http_body_unref(body);
}

static const char NO_ROOM[] = "out of memory: the page does not fit max_memory now";

static void render_run(struct job *j)
{
    struct render_job *rj = (struct render_job *)j;
    atomic_store_explicit(&rj->started, true, memory_order_relaxed);
    struct evbuffer *out = page_input_collect(&rj->in) == 0 ? evbuffer_new() : NULL;
    if (out != NULL) {
        rj->status = render_into(rj->c->page, &rj->in, out);
        rj->body = http_body_new(rj->in.budget, rj->status, page_type[rj->c->page], out);
        evbuffer_free(out);
    }
    page_input_destroy(&rj->in); /* a dropped filter is freed now, not at the next scrape */
}

/* Answers every request waiting on c with body, or a 503 when the rendering did not fit. */
static void answer_waiters(struct page_cache *c, const struct http_body *body)
{
    for (size_t i = 0; i < c->nwait; i++) {
        if (body != NULL)
            http_body_send(c->wait[i], body);
        else
            send_unavailable(c->wait[i], c->page, NO_ROOM);
    }
    c->nwait = 0;
}

static void render_done(struct job *j)
{
    struct render_job *rj = (struct render_job *)j;
    struct page_cache *c = rj->c;
    c->running = false;
    c->job = NULL;
    c->r->rendered++;
    if (c->nwait == 0 && c->last != NULL && c->last_ms >= rj->at_ms) {
        /* Its waiters were answered by a newer rendering on the loop (render_tick). */
    } else if (rj->body != NULL && rj->body->status == 200) {
        http_body_unref(c->last);
        c->last = rj->body;
        c->last_ms = rj->at_ms;
        rj->body = NULL;
        answer_waiters(c, c->last);
    } else {
        answer_waiters(c, rj->body);
    }
}

static void render_job_free(struct job *j)
{
    struct render_job *rj = (struct render_job *)j;
    struct page_cache *c = rj->c;
    if (c->job == rj) { /* its done() was skipped (stopping) */
        c->job = NULL;
        c->running = false;
        /* Its requests get what it made now, not nothing at the exit after the last
         * snapshot (render_tick does not answer them while stopping). */
        answer_waiters(c, rj->body);
    }
    page_input_destroy(&rj->in);
    http_body_unref(rj->body);
    free(rj);
}

/* Renders page on the loop: a body with one reference, or NULL and *why. */
static struct http_body *render_here(struct render *r, enum render_page page, const char **why)
{
    struct page_input in;
    int rc = page_input_gather(&in, r->srv, page == RENDER_FILTERS);
    if (rc == 0 && page_input_collect(&in) != 0) {
        page_input_destroy(&in);
        rc = -1;
    }
    *why = rc == -1 ? "out of memory" : NO_ROOM;
    if (rc != 0)
        return NULL;
    struct evbuffer *out = evbuffer_new();
    struct http_body *body = NULL;
    if (out != NULL) {
        int status = render_into(page, &in, out);
        body = http_body_new(&r->srv->budget, status, page_type[page], out);
        evbuffer_free(out);
    }
    page_input_destroy(&in);
    return body;
}

/* Renders on the loop (starting, stopping, no lanes): the pages as they always were. */
static void render_inline(struct render *r, enum render_page page, struct evhttp_request *req)
{
    const char *why;
    struct http_body *body = render_here(r, page, &why);
    if (body == NULL) {
        send_unavailable(req, page, why);
        return;
    }
    http_body_send(req, body);
    http_body_unref(body);
}

void render_serve(struct render *r, enum render_page page, struct evhttp_request *req)
{
    struct server *srv = r->srv;
    struct page_cache *c = &r->page[page];
    if (srv->phase != SERVER_READY || srv->lanes[JOBS_LONG] == NULL) {
        render_inline(r, page, req);
        return;
    }
    uint64_t now = clock_mono_ms();
    if (c->last != NULL && now - c->last_ms < RENDER_REUSE_MS) {
        http_body_send(req, c->last);
        return;
    }
    if (c->last != NULL) {
        /* Too old to reuse: let its memory go now rather than at the next rendering. */
        http_body_unref(c->last);
        c->last = NULL;
    }
    if (!c->running && registry_count(srv->reg) <= RENDER_INLINE_FILTERS) {
        const char *why;
        struct http_body *body = render_here(r, page, &why);
        if (body == NULL) {
            send_unavailable(req, page, why);
            return;
        }
        http_body_send(req, body);
        if (body->status == 200) {
            c->last = body; /* the cache keeps the reference */
            c->last_ms = now;
        } else {
            http_body_unref(body);
        }
        return;
    }
    if (c->nwait == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        struct evhttp_request **w = realloc(c->wait, cap * sizeof *w);
        if (w == NULL) {
            send_unavailable(req, page, "out of memory");
            return;
        }
        c->wait = w;
        c->cap = cap;
    }
    c->wait[c->nwait++] = req;
    if (c->running)
        return;
    struct render_job *rj = calloc(1, sizeof *rj);
    uint64_t t0 = clock_mono_ns();
    int rc = rj != NULL ? page_input_gather(&rj->in, srv, page == RENDER_FILTERS) : -1;
    log_msg(LOG_DEBUG, "http: gathered %zu figures entries for %s in %llu us on the loop",
            rj != NULL ? rj->in.ncopies : 0, page == RENDER_METRICS ? "/metrics" : "/api/filters",
            (unsigned long long)((clock_mono_ns() - t0) / 1000));
    if (rc != 0) {
        free(rj);
        for (size_t i = 0; i < c->nwait; i++)
            send_unavailable(c->wait[i], page, rc == -2 ? NO_ROOM : "out of memory");
        c->nwait = 0;
        return;
    }
    rj->job = (struct job){.run = render_run, .done = render_done, .free = render_job_free};
    rj->c = c;
    rj->at_ms = now;
    c->running = true;
    c->job = rj;
    c->posted_ms = now;
    jobs_post(srv->lanes[JOBS_LONG], &rj->job);
}

void render_tick(struct render *r)
{
    uint64_t now = clock_mono_ms();
    for (int p = 0; p < RENDER_NPAGES; p++) {
        struct page_cache *c = &r->page[p];
        if (c->last != NULL && now - c->last_ms >= RENDER_REUSE_MS) {
            http_body_unref(c->last);
            c->last = NULL;
        }
        if (c->nwait == 0 || c->job == NULL || r->srv->stopping ||
            atomic_load_explicit(&c->job->started, memory_order_relaxed) ||
            now - c->posted_ms < RENDER_WAIT_MS)
            continue;
        /* The long lane is busy (a big snapshot write, say): render on the loop rather
         * than let the scrapers time out. The job still runs and is then dropped. */
        if (r->warned_ms == 0 || now - r->warned_ms >= 10000) {
            log_msg(LOG_WARN,
                    "http: a rendering of %s waited %d ms for the long lane: rendered on the "
                    "loop",
                    p == RENDER_METRICS ? "/metrics" : "/api/filters", RENDER_WAIT_MS);
            r->warned_ms = now;
        }
        const char *why;
        struct http_body *body = render_here(r, (enum render_page)p, &why);
        for (size_t i = 0; i < c->nwait; i++) {
            if (body != NULL)
                http_body_send(c->wait[i], body);
            else
                send_unavailable(c->wait[i], (enum render_page)p, why);
        }
        c->nwait = 0;
        if (body != NULL && body->status == 200) {
            http_body_unref(c->last);
            c->last = body;
            c->last_ms = clock_mono_ms();
        } else {
            http_body_unref(body);
        }
    }
}

struct render *render_new(struct server *srv)
{
    struct render *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->srv = srv;
    for (int p = 0; p < RENDER_NPAGES; p++)
        r->page[p] = (struct page_cache){.r = r, .page = (enum render_page)p};
    return r;
}

void render_free(struct render *r)
{
    if (r == NULL)
        return;
    for (int p = 0; p < RENDER_NPAGES; p++) {
        struct page_cache *c = &r->page[p];
        for (size_t i = 0; i < c->nwait; i++)
            evhttp_send_error(c->wait[i], 503, "stopping");
        free(c->wait);
        http_body_unref(c->last);
    }
    free(r);
}
