/*
 * serve_memcache.c - the memcached ASCII protocol's driver (proto/memcache.h): add is
 * CHECKADD (STORED if new), set is ADD, get is CHECK, batched per run of keys of one
 * filter; filters are created on first use from the config's templates, which is what
 * lets twemproxy or mcrouter shard bloomd unchanged: each shard makes its own part of a
 * filter the first time a key of it arrives.
 */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "proto/memcache.h"
#include "server/commands.h"
#include "server/conn.h"
#include "server/log.h"
#include "server/server.h"
#include "server/worker.h"

#define MC_WHY_AUTH                                                                                \
    CONN_WHY_AUTH ": this server has an auth_token and its memcached listener cannot AUTH; "       \
                  "use the bloomd port"

/* What format_parked needs to know of a parked add/set. */
struct mc_ctx {
    enum mc_cmd cmd;
    bool noreply;
};

static void format_parked(struct proto_buf *out, const void *ctx, const struct result *r)
{
    const struct mc_ctx *x = ctx;
    struct mc_request m = {.cmd = x->cmd, .noreply = x->noreply};
    mc_format_result(out, &m, r);
}

static void reply(struct conn *c, const struct mc_request *m, const struct result *r)
{
    size_t mark;
    struct proto_buf *b = conn_reply_begin(c, &mark);
    mc_format_result(b, m, r);
    conn_reply_end(c, b, mark);
}

/* get/gets: one CHECK per run of keys of one filter; a missing filter holds no key. */
static void serve_get(struct conn *c, const struct mc_request *m)
{
    struct worker *w = conn_worker(c);
    struct result *res = conn_result(c);
    size_t mark;
    struct proto_buf *b = conn_reply_begin(c, &mark);
    struct mc_get g;
    mc_get_begin(&g, b);
    struct proto_slice rest = m->req.args;
    struct proto_request group;
    while (mc_next_group(m, &rest, &group)) {
        result_reset(res);
        /* CHECK never answers later, so no completion is needed. */
        commands_execute(w->srv, &w->stats, &group, res, NULL);
        if (!mc_get_group(b, &g, m, &group, res))
            break;
    }
    mc_get_end(b, &g);
    conn_reply_end(c, b, mark);
}

/* Every command but get. */
static void serve_one(struct conn *c, const struct mc_request *m)
{
    struct worker *w = conn_worker(c);
    struct server *srv = w->srv;
    struct result *res = conn_result(c);
    result_reset(res);
    if (m->cmd == MC_CMD_FLUSH_ALL && !srv->cfg.memcache_flush_all) {
        result_set(res, RESULT_CLIENT_ERROR, MC_WHY_FLUSH_DISABLED);
    } else if (!m->exec) {
        result_set(res, RESULT_OK, NULL);
    } else if ((m->cmd == MC_CMD_ADD || m->cmd == MC_CMD_SET) &&
               commands_autocreate(srv, &w->stats, m->req.name, res) != 0) {
        /* res says why the filter could not be created */
    } else {
        struct mc_ctx ctx = {.cmd = m->cmd, .noreply = m->noreply};
        const struct result *r = conn_execute(c, &m->req, &ctx, sizeof ctx);
        if (r == NULL)
            return; /* parked: formatted when it completes */
        res = (struct result *)r;
    }
    reply(c, m, res);
}

static size_t serve_memcache(struct conn *c, const char *buf, size_t len)
{
    struct worker *w = conn_worker(c);
    const struct config *cfg = &w->srv->cfg;
    /* A data block and its command line must fit in one connection's input (max_line). */
    struct mc_options opt = {
        .default_filter = {cfg->memcache_default_filter, strlen(cfg->memcache_default_filter)},
        .max_line = cfg->max_line,
        .max_data = cfg->max_line > 8192 ? cfg->max_line - 4096 : cfg->max_line / 2,
    };
    size_t off = 0;
    while (off < len && conn_can_execute(c)) {
        struct mc_request m;
        size_t used = 0;
        int st = mc_parse(buf + off, len - off, &opt, &m, &used);
        if (st == MC_MORE)
            break;
        if (st != MC_OK) {
            size_t mark;
            struct proto_buf *b = conn_reply_begin(c, &mark);
            w->stats.errors++;
            mc_reply_parse_error(b, st, &m);
            conn_reply_end(c, b, mark);
            if (st == MC_ERR_TOO_LONG) {
                log_msg(LOG_INFO, "client %s: line longer than %llu bytes, closing", conn_peer(c),
                        (unsigned long long)cfg->max_line);
                conn_finish(c);
                return len;
            }
            conn_spend(c, used, 0);
            off += used;
            if (m.swallow > 0) { /* an oversized data block: drop it as it arrives */
                size_t now = m.swallow < len - off ? m.swallow : len - off;
                off += now;
                conn_skip(c, m.swallow - now);
            }
            continue;
        }
        if (!conn_admit(c, m.req.cmd)) {
            /* memcached's ASCII auth is not offered here: no client we know of speaks it. */
            size_t mark;
            struct proto_buf *b = conn_reply_begin(c, &mark);
            proto_reply_error(b, "CLIENT_ERROR", MC_WHY_AUTH);
            conn_reply_end(c, b, mark);
        } else if (m.cmd == MC_CMD_GET)
            serve_get(c, &m);
        else
            serve_one(c, &m);
        conn_spend(c, used, m.req.nargs);
        off += used;
    }
    return off;
}

const struct conn_proto conn_proto_memcache = {
    .name = "memcached",
    .serve = serve_memcache,
    .format_parked = format_parked,
};
