/*
 * serve_memcache.c - the memcached ASCII protocol's driver (proto/memcache.h): add is
 * CHECKADD (STORED if new), set is ADD, get is CHECK, batched per run of keys of one
 * filter; pipelined add/set of one filter are merged into one lib batch, as serve_text
 * merges one-key lines. Filters are created on first use from the config's templates,
 * which is what lets twemproxy or mcrouter shard bloomd unchanged: each shard makes its
 * own part of a filter the first time a key of it arrives. With an auth_token, a
 * connection first authenticates as memcached 1.5.15+ does (a set whose data is
 * "<username> <token>"), through the connection's AUTH state: failures are delayed,
 * counted and logged.
 */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "proto/memcache.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/exec/commands.h"
#include "server/exec/mutate.h"
#include "server/net/conn.h"
#include "server/net/worker.h"

/* What format_parked needs to know of a parked add/set. */
struct mc_ctx {
    enum mc_cmd cmd;
    bool noreply;
};

static void format_parked(struct proto_buf *out, const void *ctx, const struct result *r)
{
    struct mc_ctx x;
    memcpy(&x, ctx, sizeof x); /* the connection keeps ctx as bytes, maybe unaligned */
    struct mc_request m = {.cmd = x.cmd, .noreply = x.noreply};
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

#define MC_RUN 64 /* pipelined add/set of one filter merged into one lib batch */

/* A run of add/set requests: their parsed forms, to format each result. */
struct mc_run {
    struct conn *c;
    struct mc_request m[MC_RUN];
};

static void reply_each(void *ctx, size_t i, const struct result *res)
{
    struct mc_run *run = ctx;
    reply(run->c, &run->m[i], res);
}

/* True if m can start or join a run: an add/set to execute, now (no journal wait). */
static bool runnable(const struct mc_request *m)
{
    return (m->cmd == MC_CMD_ADD || m->cmd == MC_CMD_SET) && m->exec && commands_runnable(&m->req);
}

/*
 * Pipelined add/set of one filter as serve_text merges one-key lines: one lib batch for
 * the run, so the keys' cache misses overlap. run->m[0] is parsed and admitted; parses
 * more from buf[*off + used0..len) while they join. Returns the bytes consumed from *off.
 */
static size_t serve_run(struct conn *c, struct mc_run *run, const char *buf, size_t len,
                        size_t used0, const struct mc_options *opt)
{
    struct worker *w = conn_worker(c);
    struct server *srv = w->srv;
    struct result *res = conn_result(c);
    struct proto_request reqs[MC_RUN];
    size_t n = 1, keys = run->m[0].req.nargs, used = used0;
    reqs[0] = run->m[0].req;
    while (n < MC_RUN && used < len) {
        size_t next_used = 0;
        struct mc_request *m = &run->m[n];
        if (mc_parse(buf + used, len - used, opt, m, &next_used) != MC_OK || !runnable(m) ||
            m->cmd != run->m[0].cmd || !commands_same_run(&reqs[0], &m->req) ||
            keys + m->req.nargs > COMMANDS_BATCH)
            break; /* parsed again by the caller's loop */
        reqs[n++] = m->req;
        keys += m->req.nargs;
        used += next_used;
    }
    result_reset(res);
    if (commands_autocreate(srv, &w->stats, reqs[0].name, res) != 0) {
        reply(c, &run->m[0], res); /* res says why the filter could not be created */
        conn_spend(c, used0, run->m[0].req.nargs);
        return used0;
    }
    commands_execute_run(srv, &w->stats, reqs, n, res, reply_each, run);
    conn_spend(c, used, keys);
    return used;
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
    bool holds = mutate_holds(w->srv); /* replies wait for the journal: no merged runs */
    struct mc_run run; /* not zeroed: 64 requests, each set by mc_parse before use */
    run.c = c;
    while (off < len && conn_can_execute(c)) {
        struct mc_request m;
        size_t used = 0;
        opt.auth = conn_needs_auth(c); /* a set that authenticates changes it */
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
        if (opt.auth && m.cmd != MC_CMD_AUTH) {
            struct result *res = conn_result(c);
            result_reset(res);
            result_set(res, RESULT_CLIENT_ERROR, MC_WHY_UNAUTHENTICATED);
            reply(c, &m, res); /* nothing for noreply, as every error */
        } else if (m.cmd == MC_CMD_GET) {
            serve_get(c, &m);
        } else if (!holds && runnable(&m)) {
            run.m[0] = m;
            off += serve_run(c, &run, buf + off, len - off, used, &opt);
            continue;
        } else {
            serve_one(c, &m);
        }
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
