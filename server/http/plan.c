/*
 * plan.c - GET /api/plan?capacity=&error=&growth=&scale=&ratio=&kind=&window=&generations=:
 * what bloomd would allocate for a CREATE with those options, before anyone creates it.
 * The options go through CREATE's own parser and the server's defaults, as cmd_create
 * applies them, so the plan's bytes are the bytes INFO reports after that CREATE. Blocked
 * and windowed figures come from the stage geometry (no allocation); an expandable
 * filter is built once and freed, against a budget that refuses what max_memory has no
 * room for. Rare requests (a person sizing a filter): O(stages) each.
 */
#include "server/http/plan.h"

#include <event2/buffer.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lib/kind.h"
#include "lib/sbf.h"
#include "lib/window.h"
#include "proto/proto.h"
#include "proto/url.h"
#include "server/core/budget.h"
#include "server/core/server.h"
#include "server/exec/commands.h"
#include "server/http/http_pages.h"
#include "server/http/json.h"
#include "server/store/kinds.h"

#define PLAN_MAX_LINE 1024
#define PLAN_MAX_VALUE 64

/* The growth factors every plan shows: as created, 10x and 100x the keys planned. */
static const unsigned plan_factors[] = {1, 10, 100};
#define PLAN_NFACTORS (sizeof plan_factors / sizeof plan_factors[0])

struct grown {
    uint32_t stages; /* stages holding keys: 0 when the limit was reached first */
    uint64_t bytes;  /* their bits */
};

/* The stages a scalable filter with p needs for keys: added one by one as each fills. */
static struct grown grow(const struct sbf_params *p, uint64_t keys)
{
    struct grown g = {0, 0};
    uint64_t held = 0;
    for (uint32_t i = 0; i < SBF_MAX_STAGES; i++) {
        uint64_t b = sbf_stage_bytes(p, i);
        if (b == 0)
            return (struct grown){0, g.bytes};
        g.stages = i + 1;
        g.bytes += b;
        held += sbf_stage_capacity(p, i);
        if (held >= keys)
            return g;
    }
    return (struct grown){0, g.bytes};
}

/* A budget for the one trial build: refuses what max_memory has no room for now. */
struct trial {
    uint64_t room;
    uint64_t taken;
};

static bool trial_reserve(void *ctx, size_t bytes)
{
    struct trial *t = ctx;
    if (bytes > t->room - t->taken)
        return false;
    t->taken += bytes;
    return true;
}

static void trial_release(void *ctx, size_t bytes)
{
    struct trial *t = ctx;
    t->taken -= bytes < t->taken ? bytes : t->taken;
}

static void json_grown(struct evbuffer *out, unsigned factor, uint64_t keys, uint32_t stages,
                       const char *unit, uint64_t bytes, bool exact)
{
    evbuffer_add_printf(out, "{\"factor\":%u,\"keys\":%llu,\"%s\":", factor,
                        (unsigned long long)keys, unit);
    if (stages > 0)
        evbuffer_add_printf(out, "%u", stages);
    else
        evbuffer_add(out, "null", 4);
    evbuffer_add_printf(out, ",\"bytes\":%llu,\"bytes_per_key\":", (unsigned long long)bytes);
    json_number(out, keys ? (double)bytes / (double)keys : 0);
    evbuffer_add_printf(out, ",\"exact\":%s}", exact ? "true" : "false");
}

/* The bytes max_memory has room for now, as CREATE would find them. */
static uint64_t room(const struct server *srv)
{
    uint64_t used = budget_used(&srv->budget);
    return srv->budget.limit > used ? srv->budget.limit - used : 0;
}

/* One kind's plan as a JSON object; ops is that kind, p its parameters. */
static void plan_kind(struct server *srv, struct evbuffer *out, const struct kind_ops *ops,
                      const struct kind_params *p)
{
    const struct kind_ops *window = kinds_by_name("window", 6);
    evbuffer_add_printf(out, "{\"kind\":\"%s\",\"capacity\":%llu,\"error\":", ops->name,
                        (unsigned long long)p->sbf.capacity);
    json_number(out, p->sbf.error);
    if (ops == KINDS_DEFAULT || ops == window) {
        evbuffer_add_printf(out, ",\"growth\":\"%s\",\"scale\":", sbf_growth_name(p->sbf.growth));
        json_number(out, p->sbf.scale);
        evbuffer_add_printf(out, ",\"ratio\":");
        json_number(out, p->sbf.ratio);
    }
    if (ops == window) {
        /* Per generation: a scalable filter for capacity/(g-1) keys at error/g; the
         * filter starts with one, and holds g once a window has passed. */
        struct window_params wp = {.sbf = p->sbf,
                                   .window_ms = p->window_ms,
                                   .generations = p->generations ? p->generations
                                                                 : WINDOW_DEFAULT_GENERATIONS};
        struct sbf_params gp;
        window_generation_params(&wp, &gp);
        uint64_t first = sbf_first_stage_bytes(&gp);
        evbuffer_add_printf(out,
                            ",\"window_ms\":%llu,\"generations\":%u,\"generation_capacity\":%llu,"
                            "\"bytes\":%llu,\"fits\":%s,\"bytes_full_window\":%llu,\"grown\":[",
                            (unsigned long long)wp.window_ms, wp.generations,
                            (unsigned long long)gp.capacity, (unsigned long long)first,
                            first <= room(srv) ? "true" : "false",
                            (unsigned long long)first * wp.generations);
        for (size_t i = 0; i < PLAN_NFACTORS; i++) {
            struct grown g = grow(&gp, gp.capacity * plan_factors[i]);
            /* g generations, each taking factor x its planned keys. */
            json_grown(out, plan_factors[i], p->sbf.capacity * plan_factors[i], g.stages,
                       "stages_per_generation", g.bytes * wp.generations, g.stages > 0);
            evbuffer_add(out, i + 1 < PLAN_NFACTORS ? "," : "]}", i + 1 < PLAN_NFACTORS ? 1 : 2);
        }
        return;
    }
    if (ops == KINDS_DEFAULT) {
        uint64_t first = sbf_first_stage_bytes(&p->sbf);
        evbuffer_add_printf(out, ",\"bytes\":%llu,\"fits\":%s,\"grown\":[",
                            (unsigned long long)first, first <= room(srv) ? "true" : "false");
        for (size_t i = 0; i < PLAN_NFACTORS; i++) {
            uint64_t keys = p->sbf.capacity * plan_factors[i];
            struct grown g = grow(&p->sbf, keys);
            json_grown(out, plan_factors[i], keys, g.stages, "stages", g.bytes, g.stages > 0);
            evbuffer_add(out, i + 1 < PLAN_NFACTORS ? "," : "]}", i + 1 < PLAN_NFACTORS ? 1 : 2);
        }
        return;
    }
    /* Another kind (expandable): built once, measured, freed. Its table grows in place at
     * about the same bytes per key, so the grown rows are estimates. */
    struct trial t = {.room = room(srv)};
    struct sbf_budget b = {trial_reserve, trial_release, &t};
    void *obj = NULL;
    struct kind_info info = {0};
    int rc = ops->create(p, &b, &obj);
    if (rc == SBF_OK) {
        ops->info(obj, &info);
        ops->free(obj);
        evbuffer_add_printf(out, ",\"bytes\":%llu,\"fits\":true,\"grown\":[",
                            (unsigned long long)info.bytes);
        for (size_t i = 0; i < PLAN_NFACTORS; i++) {
            uint64_t keys = p->sbf.capacity * plan_factors[i];
            json_grown(out, plan_factors[i], keys, 0, "stages", info.bytes * plan_factors[i],
                       plan_factors[i] == 1);
            evbuffer_add(out, i + 1 < PLAN_NFACTORS ? "," : "]}", i + 1 < PLAN_NFACTORS ? 1 : 2);
        }
        return;
    }
    evbuffer_add_printf(out, ",\"bytes\":null,\"fits\":false,\"refused\":");
    /* CREATE's words for the same refusal: the kind's rule for parameters out of range. */
    const char *why = rc == SBF_ENOMEM                               ? "does not fit max_memory now"
                      : rc == SBF_EINVAL && ops->params_rule != NULL ? ops->params_rule
                                                                     : sbf_strerror(rc);
    json_string(out, why, strlen(why));
    evbuffer_add(out, "}", 1);
}

/* The query as CREATE options: "CREATE plan k=v ...\n" into line; 0 or an HTTP status
 * with the body written. */
static int query_to_create(const char *query, size_t qlen, char *line, size_t cap, size_t *len,
                           struct evbuffer *out)
{
    size_t n = (size_t)snprintf(line, cap, "CREATE plan");
    const char *p = query, *end = query + qlen;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp != NULL ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        if (stop > p) {
            char key[PLAN_MAX_VALUE], val[PLAN_MAX_VALUE];
            size_t klen, vlen = 0;
            struct proto_slice k = {p, (size_t)((eq != NULL ? eq : stop) - p)};
            struct proto_slice v = {eq != NULL ? eq + 1 : stop,
                                    eq != NULL ? (size_t)(stop - eq - 1) : 0};
            if (proto_url_decode(k, key, sizeof key, &klen) != PROTO_URL_OK ||
                proto_url_decode(v, val, sizeof val, &vlen) != PROTO_URL_OK)
                return api_error(out, 400, "bad parameter: too long or a bad %-escape");
            for (size_t i = 0; i < klen + vlen; i++) {
                unsigned char c = (unsigned char)(i < klen ? key[i] : val[i - klen]);
                if (c <= ' ' || c == '=' || c == 0x7f)
                    return api_error(out, 400, "bad parameter: a space or control character");
            }
            if (vlen == 0)
                return api_error(out, 400, "every parameter needs a value, e.g. capacity=1000000");
            if (n + klen + vlen + 4 > cap)
                return api_error(out, 400, "too many parameters");
            line[n++] = ' ';
            memcpy(line + n, key, klen);
            n += klen;
            line[n++] = '=';
            memcpy(line + n, val, vlen);
            n += vlen;
        }
        p = stop + 1;
    }
    line[n++] = '\n';
    *len = n;
    return 0;
}

int api_plan(struct server *srv, const char *query, size_t qlen, struct evbuffer *out)
{
    char line[PLAN_MAX_LINE];
    size_t len = 0;
    int status = query_to_create(query, qlen, line, sizeof line, &len, out);
    if (status != 0)
        return status;
    struct proto_request req;
    size_t used;
    int rc = proto_parse(line, len, NULL, &req, &used);
    if (rc != PROTO_OK || req.cmd != PROTO_CMD_CREATE) {
        /* CREATE's own reason ("unknown option (valid: ...) 'cap'"), without its word. */
        struct proto_buf b = {0};
        proto_reply_parse_error(&b, rc, &req);
        size_t skip = b.len > 13 && memcmp(b.data, "CLIENT_ERROR ", 13) == 0 ? 13 : 0;
        char why[256];
        snprintf(why, sizeof why, "%.*s", (int)(b.len > skip + 2 ? b.len - skip - 2 : 0),
                 b.data != NULL ? b.data + skip : "");
        proto_buf_free(&b);
        return api_error(out, 400, why[0] ? why : "bad options");
    }
    const struct proto_create *o = &req.create;
    const struct kind_ops *ops = KINDS_DEFAULT;
    if (o->set & PROTO_OPT_WINDOW)
        ops = kinds_by_name("window", 6);
    else if (o->set & PROTO_OPT_KIND)
        ops = kinds_by_name(o->kind.ptr, o->kind.len);
    if (ops == NULL) {
        char why[320];
        snprintf(why, sizeof why, "unknown filter kind '%.*s' (kinds: %s)", (int)o->kind.len,
                 o->kind.ptr, kinds_names());
        return api_error(out, 400, why);
    }
    struct kind_params p; /* as CREATE makes them */
    commands_create_params(srv, o, ops, &p);
    if (sbf_params_check(&p.sbf) != SBF_OK)
        return api_error(out, 400, "invalid filter parameters");
    if (p.sbf.growth == SBF_GROWTH_NONE && ops != KINDS_DEFAULT)
        return api_error(out, 400, COMMANDS_WHY_GROWTH_NONE);

    evbuffer_add_printf(out, "{\"plan\":");
    plan_kind(srv, out, ops, &p);
    /* The same keys and error in each kind, the others' options at their defaults. */
    static const char *const kinds[] = {"blocked", "window", "expandable"};
    evbuffer_add_printf(out, ",\"kinds\":[");
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const struct kind_ops *k = kinds_by_name(kinds[i], strlen(kinds[i]));
        struct kind_params q = {0};
        sbf_params_default(&q.sbf);
        if (k->defaults != NULL)
            k->defaults(&q);
        q.sbf.capacity = p.sbf.capacity;
        q.sbf.error = p.sbf.error;
        if (k == ops) {
            q = p;
        } else if (strcmp(kinds[i], "window") == 0) {
            q.window_ms = p.window_ms ? p.window_ms : 3600000; /* 1h when none was asked */
            q.generations = p.generations;
        }
        evbuffer_add(out, i ? "," : "", i ? 1 : 0);
        plan_kind(srv, out, k, &q);
    }
    evbuffer_add_printf(out, "],\"max_memory\":%llu,\"memory_used\":%llu}\n",
                        (unsigned long long)srv->budget.limit,
                        (unsigned long long)budget_used(&srv->budget));
    return 200;
}
