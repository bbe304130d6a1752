/*
 * http_api.c - the JSON under /api: every filter with its parts and sample ring, one
 * filter with INFO's fields (the estimates cached by figures.h: they walk the bits), and
 * where a key falls (CHECK only: the kind's explain op reads, never adds). Names and
 * keys are validated as the text protocol does; every string is escaped. The list of
 * every filter renders from a struct page_input on the long lane (render.c); the one
 * filter and the key pages read the live filter on the loop (O(its parts)).
 */
#include <event2/buffer.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/request.h"
#include "proto/url.h"
#include "server/core/clock.h"
#include "server/core/server.h"
#include "server/http/http_pages.h"
#include "server/http/json.h"
#include "server/store/figures.h"
#include "server/store/registry.h"

int api_error(struct evbuffer *out, int status, const char *why)
{
    evbuffer_add_printf(out, "{\"error\":");
    json_string(out, why, strlen(why));
    evbuffer_add_printf(out, ",\"status\":%d}\n", status);
    return status;
}

struct parts_json {
    struct evbuffer *out;
    const struct figures_entry *e; /* counts of this filter, or NULL */
    uint32_t n;
};

static void part_json(void *ctx, const struct kind_part *p)
{
    struct parts_json *pj = ctx;
    evbuffer_add_printf(pj->out,
                        "%s{\"index\":%u,\"generation\":%u,\"started_ms\":%lld,\"capacity\":%llu,"
                        "\"items\":%llu,\"bytes\":%llu,\"blocks\":%llu,\"block_bits\":%u,\"k\":%u,"
                        "\"error\":",
                        pj->n ? "," : "", p->index, p->generation, (long long)p->started_ms,
                        (unsigned long long)p->capacity, (unsigned long long)p->items,
                        (unsigned long long)p->bytes, (unsigned long long)p->blocks, p->block_bits,
                        p->k);
    json_number(pj->out, p->error);
    evbuffer_add_printf(pj->out, ",\"fill\":");
    uint64_t bits = p->blocks * p->block_bits;
    if (pj->e != NULL && p->index < pj->e->nparts && bits > 0)
        json_number(pj->out, (double)pj->e->ones[p->index] / (double)bits);
    else
        evbuffer_add(pj->out, "null", 4);
    evbuffer_add(pj->out, "}", 1);
    pj->n++;
}

/* kind_field_fn into the members of a JSON object (after the first: each leads with ","). */
static void field_json(void *ctx, const char *name, enum kind_field_type type, uint64_t u, double d,
                       const char *s)
{
    struct parts_json *pj = ctx;
    evbuffer_add_printf(pj->out, "%s", pj->n++ ? "," : "");
    json_string(pj->out, name, strlen(name));
    evbuffer_add(pj->out, ":", 1);
    if (type == KIND_FIELD_U64)
        evbuffer_add_printf(pj->out, "%llu", (unsigned long long)u);
    else if (type == KIND_FIELD_DOUBLE)
        json_number(pj->out, d);
    else
        json_string(pj->out, s, strlen(s));
}

/* One filter's object from its figures entry e (or NULL); with_info adds INFO's fields
 * (the estimates from the cache). now_ms: Unix ms the figures' age is counted to. */
static void filter_json(struct evbuffer *out, const struct filter *f,
                        const struct figures_entry *fe, bool with_info, int64_t now_ms)
{
    struct figures_row row;
    figures_row_of(fe, f, false, &row);
    const struct figures_entry *e = row.e;
    evbuffer_add_printf(out, "{\"name\":");
    json_string(out, f->name, f->name_len);
    evbuffer_add_printf(out, ",\"kind\":");
    json_string(out, f->ops->name, strlen(f->ops->name));
    evbuffer_add_printf(out, ",\"bytes\":%llu,\"items\":%llu,\"capacity\":%llu,\"error\":",
                        (unsigned long long)row.info.bytes, (unsigned long long)row.info.items,
                        (unsigned long long)row.info.capacity);
    json_number(out, row.info.error);
    evbuffer_add_printf(out, ",\"estimated_error\":");
    if (row.has_estimate)
        json_number(out, row.est.error);
    else
        evbuffer_add(out, "null", 4);
    evbuffer_add_printf(out, ",\"figures_age_s\":");
    if (row.counted)
        json_number(out, (double)(now_ms - e->counted_ms) / 1000.0);
    else
        evbuffer_add(out, "null", 4);
    evbuffer_add_printf(out, ",\"parts\":[");
    struct parts_json pj = {.out = out, .e = row.counted ? e : NULL};
    if (f->ops->parts != NULL)
        f->ops->parts(f->obj, false, part_json, &pj);
    evbuffer_add_printf(out, "],\"samples\":[");
    if (e != NULL && e->ring != NULL) {
        for (uint32_t i = 0; i < e->n; i++) {
            const struct figures_sample *s =
                &e->ring[(e->head + FIGURES_RING - e->n + i) % FIGURES_RING];
            evbuffer_add_printf(out, "%s[%lld,%llu]", i ? "," : "", (long long)s->t_ms,
                                (unsigned long long)s->items);
        }
    }
    evbuffer_add(out, "]", 1);
    if (with_info) {
        evbuffer_add_printf(out, ",\"info\":{");
        struct parts_json fj = {.out = out};
        f->ops->fields(f->obj, row.has_estimate ? &row.est : NULL, field_json, &fj);
        evbuffer_add(out, "}", 1);
    }
    evbuffer_add(out, "}", 1);
}

/* The server's figures as members: each row of core/stat.h under its STATS name. */
static void stats_json(struct evbuffer *out, const struct stat_values *v)
{
    for (int i = 0; i < STAT_COUNT; i++) {
        evbuffer_add_printf(out, ",\"%s\":", stat_defs[i].name);
        if (stat_defs[i].type == STAT_U64)
            evbuffer_add_printf(out, "%llu", (unsigned long long)v->v[i].u);
        else
            json_string(out, v->v[i].s != NULL ? v->v[i].s : "",
                        v->v[i].s != NULL ? strlen(v->v[i].s) : 0);
    }
}

int api_filters(const struct page_input *in, struct evbuffer *out)
{
    static const char *const phases[] = {"starting", "ready", "stopping"};
    evbuffer_add_printf(out, "{\"server\":{\"phase\":\"%s\",\"now_ms\":%lld", phases[in->phase],
                        (long long)in->now_ms);
    if (in->phase == SERVER_STARTING) {
        evbuffer_add_printf(out, "},\"filters\":[]}\n");
        return 200;
    }
    stats_json(out, &in->stats);
    evbuffer_add_printf(out, "},\"filters\":[");
    for (size_t i = 0; i < in->n; i++) {
        if (i > 0)
            evbuffer_add(out, ",", 1);
        filter_json(out, in->f[i], in->ent[i], false, in->now_ms);
    }
    evbuffer_add_printf(out, "]}\n");
    return 200;
}

/* The filter named name[0..len) with a reference, or NULL and the error body written. */
static struct filter *lookup(struct server *srv, const char *name, size_t len, struct evbuffer *out,
                             int *status)
{
    if (!proto_name_valid((struct proto_slice){name, len})) {
        *status = api_error(out, 400, "invalid filter name");
        return NULL;
    }
    if (srv->phase == SERVER_STARTING) {
        *status = api_error(out, 503, "loading snapshots");
        return NULL;
    }
    struct filter **f;
    size_t n;
    /* registry_collect, not registry_get: the page's reads take the table lock like any
     * other thread would, so they stay right once there are several workers. */
    if (registry_collect(srv->reg, name, len, &f, &n) != REGISTRY_OK) {
        *status = api_error(out, 503, "out of memory");
        return NULL;
    }
    struct filter *found = NULL;
    for (size_t i = 0; i < n; i++) {
        if (found == NULL && f[i]->name_len == len && memcmp(f[i]->name, name, len) == 0)
            found = f[i];
        else
            filter_unref(f[i]);
    }
    free(f);
    if (found == NULL)
        *status = api_error(out, 404, "no such filter");
    return found;
}

int api_filter(struct server *srv, const struct figures *fg, const char *name, size_t len,
               struct evbuffer *out)
{
    int status;
    struct filter *f = lookup(srv, name, len, out, &status);
    if (f == NULL)
        return status;
    filter_json(out, f, figures_get(fg, f->name, f->name_len), true, clock_wall_ms());
    evbuffer_add(out, "\n", 1);
    filter_unref(f);
    return 200;
}

struct explain_json {
    struct evbuffer *out;
    uint32_t n;
    bool present;
};

static void probe_json(void *ctx, const struct kind_probe *p)
{
    struct explain_json *ej = ctx;
    evbuffer_add_printf(ej->out, "%s{\"part\":%u,\"block\":%llu,\"present\":%s,\"bits\":[",
                        ej->n ? "," : "", p->part, (unsigned long long)p->block,
                        p->present ? "true" : "false");
    for (uint32_t i = 0; i < p->nbits; i++)
        evbuffer_add_printf(ej->out, "%s[%u,%d]", i ? "," : "", p->pos[i], p->set[i] ? 1 : 0);
    evbuffer_add(ej->out, "]}", 2);
    ej->n++;
    ej->present = ej->present || p->present;
}

/* Longest key accepted here: a key longer than a request line could never be added. */
#define API_MAX_KEY 4096

int api_key(struct server *srv, const char *name, size_t len, const char *query, size_t qlen,
            struct evbuffer *out)
{
    struct proto_slice raw;
    if (!proto_query_find((struct proto_slice){query, qlen}, "k", &raw))
        return api_error(out, 400, "missing key: use ?k=<key>");
    char key[API_MAX_KEY];
    size_t klen;
    int rc = proto_url_decode(raw, key, sizeof key, &klen);
    if (rc == PROTO_URL_ETOOLONG || klen + 2 > srv->cfg.max_line)
        return api_error(out, 400, "key too long");
    if (rc != PROTO_URL_OK)
        return api_error(out, 400, "bad %-escape in the key");
    if (!proto_key_valid((struct proto_slice){key, klen}))
        return api_error(out, 400, "invalid key (empty, or a space, tab, NUL, CR or LF)");
    int status;
    struct filter *f = lookup(srv, name, len, out, &status);
    if (f == NULL)
        return status;
    evbuffer_add_printf(out, "{\"filter\":");
    json_string(out, f->name, f->name_len);
    evbuffer_add_printf(out, ",\"key\":");
    json_string(out, key, klen);
    evbuffer_add_printf(out, ",\"parts\":[");
    struct explain_json ej = {.out = out};
    if (f->ops->explain != NULL)
        f->ops->explain(f->obj, sbf_hash_key_seeded(key, klen, f->seed), probe_json, &ej);
    bool present = ej.present;
    if (f->ops->explain == NULL) {
        /* A kind without explain still answers CHECK. */
        struct sbf_hash h = sbf_hash_key_seeded(key, klen, f->seed);
        f->ops->check_batch(f->obj, &h, 1, &present);
    }
    evbuffer_add_printf(out, "],\"explained\":%s,\"present\":%s}\n",
                        f->ops->explain != NULL ? "true" : "false", present ? "true" : "false");
    filter_unref(f);
    return 200;
}
