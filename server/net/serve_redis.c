/*
 * serve_redis.c - Redis's RESP driver (proto/resp.h): RedisBloom's BF.* commands onto the
 * shared requests (BF.ADD/MADD are CHECKADD, BF.EXISTS/MEXISTS CHECK, BF.RESERVE CREATE,
 * BF.INSERT CREATE then CHECKADD, DEL/UNLINK DROP), through the same execute and mutation
 * path as the other protocols, plus the Redis commands clients and tools send on connect
 * (HELLO, AUTH, CLIENT, COMMAND, INFO, SELECT 0) and the keyspace ones that make sense
 * for filters (DBSIZE, EXISTS, TYPE, SCAN, KEYS). A filter missing on BF.ADD/MADD/INSERT is
 * created on first use: from a matching config template, else with RedisBloom's defaults
 * (error 0.01, capacity 100, expansion 2). Pipelined BF.ADD/BF.EXISTS of one filter are
 * merged into one lib batch, as serve_text merges one-key lines.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "proto/number.h"
#include "proto/resp.h"
#include "server/core/config.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/exec/commands.h"
#include "server/exec/mutate.h"
#include "server/exec/stats.h"
#include "server/net/conn.h"
#include "server/net/worker.h"
#include "server/store/registry.h"

/* RedisBloom's BF.RESERVE defaults, used when a BF.ADD creates a filter. */
#define REDIS_BF_ERROR 0.01
#define REDIS_BF_CAPACITY 100
#define REDIS_VERSION_SHOWN "7.2.0" /* redis_version in INFO and HELLO, for version-gated tools */
#define REDIS_RUN 64                /* pipelined BF.ADD/BF.EXISTS merged into one lib batch */

/* A connection's RESP state (conn_driver_state). */
struct redis_state {
    uint64_t id;       /* CLIENT ID, given on first use */
    unsigned char ver; /* 2 or 3; 0 before HELLO: 2 */
    unsigned char name_len;
    char name[46]; /* CLIENT SETNAME, truncated */
};

/* What format_parked needs of a parked request. */
struct redis_ctx {
    unsigned char shape; /* enum resp_shape, or a REDIS_SHAPE_* */
    unsigned char ver;
    uint32_t nkeys;
    uint64_t iter; /* BF.SCANDUMP's */
};
_Static_assert(sizeof(struct redis_ctx) <= CONN_CTX_MAX, "a parked request keeps redis_ctx");

#define REDIS_SHAPE_AUTH 200      /* AUTH: +OK, else WRONGPASS */
#define REDIS_SHAPE_SCANDUMP 201  /* RESULT_DUMP of a chunk: [next iter, its bytes (streamed)] */
#define REDIS_SHAPE_LOADCHUNK 202 /* RESULT_OK or RESTORED: +OK */

static struct redis_state *state_of(struct conn *c)
{
    struct redis_state *s = conn_driver_state(c);
    if (s->ver == 0)
        s->ver = 2;
    if (s->id == 0) {
        static uint64_t next_id; /* the loop thread only */
        s->id = ++next_id;
    }
    return s;
}

static void format(struct proto_buf *b, const struct redis_ctx *x, const struct result *r)
{
    if (x->shape == REDIS_SHAPE_AUTH) {
        if (!r->failed && r->status == RESULT_OK)
            resp_reply_simple(b, "OK");
        else if (!r->failed && r->status == RESULT_CLIENT_ERROR && r->text != NULL &&
                 strncmp(r->text, "invalid token", 13) == 0)
            resp_reply_error(b, "WRONGPASS invalid username-password pair or user is disabled.");
        else
            resp_reply_result_error(b, r);
        return;
    }
    if (x->shape == REDIS_SHAPE_SCANDUMP && !r->failed && r->status == RESULT_DUMP) {
        /* RedisBloom's iterator: 1 after the header, offset + 1 after a chunk, 0 at the end;
         * the chunk's bytes and their "\r\n" follow as the body (server/exec/dump.h). */
        uint64_t next = x->iter == 0 ? 1 : r->count == 0 ? 0 : x->iter + r->count;
        resp_reply_array(b, 2);
        resp_reply_int(b, (int64_t)next);
        resp_reply_bulk_head(b, r->count);
        return;
    }
    if (x->shape == REDIS_SHAPE_LOADCHUNK && !r->failed &&
        (r->status == RESULT_OK || r->status == RESULT_RESTORED)) {
        resp_reply_simple(b, "OK");
        return;
    }
    if (x->shape == REDIS_SHAPE_SCANDUMP || x->shape == REDIS_SHAPE_LOADCHUNK) {
        resp_reply_result_error(b, r);
        return;
    }
    resp_format_result(b, (enum resp_shape)x->shape, x->nkeys, r);
}

static void format_parked(struct proto_buf *out, const void *ctx, const struct result *r)
{
    struct redis_ctx x;
    memcpy(&x, ctx, sizeof x); /* the connection keeps ctx as bytes, maybe unaligned */
    format(out, &x, r);
}

/* Runs req and replies in shape, now or once it completes (parked). */
static void execute_iter(struct conn *c, const struct proto_request *req, unsigned shape,
                         size_t nkeys, uint64_t iter)
{
    struct redis_ctx x = {.shape = (unsigned char)shape,
                          .ver = state_of(c)->ver,
                          .nkeys = (uint32_t)(nkeys > UINT32_MAX ? UINT32_MAX : nkeys),
                          .iter = iter};
    const struct result *r = conn_execute(c, req, &x, sizeof x);
    if (r == NULL)
        return; /* parked: formatted when it completes */
    size_t mark;
    struct proto_buf *b = conn_reply_begin(c, &mark);
    format(b, &x, r);
    conn_reply_end(c, b, mark);
}

static void execute(struct conn *c, const struct proto_request *req, unsigned shape, size_t nkeys)
{
    execute_iter(c, req, shape, nkeys, 0);
}

/* A reply built by hand: begin, then end with done(). */
static struct proto_buf *begin(struct conn *c, size_t *mark)
{
    return conn_reply_begin(c, mark);
}

static void done(struct conn *c, struct proto_buf *b, size_t mark)
{
    conn_reply_end(c, b, mark);
}

static void reply_error(struct conn *c, const char *err)
{
    size_t mark;
    struct proto_buf *b = begin(c, &mark);
    resp_reply_error(b, err);
    done(c, b, mark);
}

static void reply_result_error(struct conn *c, const struct result *r)
{
    size_t mark;
    struct proto_buf *b = begin(c, &mark);
    resp_reply_result_error(b, r);
    done(c, b, mark);
}

static void reply_simple(struct conn *c, const char *s)
{
    size_t mark;
    struct proto_buf *b = begin(c, &mark);
    resp_reply_simple(b, s);
    done(c, b, mark);
}

static void reply_int(struct conn *c, int64_t v)
{
    size_t mark;
    struct proto_buf *b = begin(c, &mark);
    resp_reply_int(b, v);
    done(c, b, mark);
}

static bool filter_exists(struct server *srv, struct proto_slice name)
{
    struct filter *f = registry_get(srv->reg, name.ptr, name.len);
    if (f == NULL)
        return false;
    filter_unref(f);
    return true;
}

/*
 * Makes sure the filter exists: with opts (BF.INSERT's options over RedisBloom's defaults),
 * or, without, from a matching template (commands_autocreate) or RedisBloom's defaults.
 * Returns 0, or -1 with the failure in res.
 */
static int autocreate(struct conn *c, struct proto_slice name, const struct proto_create *opts,
                      struct result *res)
{
    struct worker *w = conn_worker(c);
    struct server *srv = w->srv;
    if (filter_exists(srv, name))
        return 0;
    char nm[PROTO_MAX_NAME + 1];
    memcpy(nm, name.ptr, name.len); /* resp_map checked the name: at most PROTO_MAX_NAME */
    nm[name.len] = '\0';
    if (opts == NULL && config_template_for(&srv->cfg, nm) != NULL)
        return commands_autocreate(srv, &w->stats, name, res);
    struct proto_request req = {.cmd = PROTO_CMD_CREATE, .name = name};
    if (opts != NULL)
        req.create = *opts;
    if (!(req.create.set & PROTO_OPT_CAPACITY)) {
        req.create.capacity = REDIS_BF_CAPACITY;
        req.create.set |= PROTO_OPT_CAPACITY;
    }
    if (!(req.create.set & PROTO_OPT_ERROR)) {
        req.create.error = REDIS_BF_ERROR;
        req.create.set |= PROTO_OPT_ERROR;
    }
    /* No completion: the request that caused it waits for its own, later record. */
    commands_execute(srv, &w->stats, &req, res, NULL);
    if (res->status != RESULT_CREATED && res->status != RESULT_EXISTS)
        return -1;
    result_reset(res);
    return 0;
}

/* ---- BF.* ---- */

/* The value of INFO field name in r, or def. */
static uint64_t field_u64(const struct result *r, const char *name, uint64_t def)
{
    for (size_t i = 0; i < r->nfields; i++) {
        const struct result_field *f = &r->fields[i];
        if (strcmp(f->name, name) != 0)
            continue;
        if (f->type == RESULT_U64)
            return f->u;
        if (f->type == RESULT_DOUBLE && f->d >= 0)
            return (uint64_t)(f->d + 0.5);
    }
    return def;
}

/* True if INFO field name in r is the string want. */
static bool field_is(const struct result *r, const char *name, const char *want)
{
    for (size_t i = 0; i < r->nfields; i++)
        if (strcmp(r->fields[i].name, name) == 0 && r->fields[i].str != NULL)
            return strcmp(r->fields[i].str, want) == 0;
    return false;
}

static void bf_info(struct conn *c, const struct resp_mapped *m, bool card)
{
    struct worker *w = conn_worker(c);
    struct result *res = conn_result(c);
    result_reset(res);
    commands_execute(w->srv, &w->stats, &m->req, res, NULL);
    size_t mark;
    struct proto_buf *b = begin(c, &mark);
    int ver = state_of(c)->ver;
    if (res->status == RESULT_NOT_FOUND && card) {
        resp_reply_int(b, 0);
    } else if (res->status != RESULT_FIELDS || res->failed) {
        resp_reply_result_error(b, res);
    } else {
        uint64_t items = field_u64(res, "items", 0);
        uint64_t v[5] = {
            field_u64(res, "total_capacity", field_u64(res, "capacity", 0)),
            field_u64(res, "bytes", 0),
            field_u64(res, "stages", field_u64(res, "live_generations", 1)),
            items,
            field_u64(res, "scale", 0),
        };
        static const char *const names[5] = {"Capacity", "Size", "Number of filters",
                                             "Number of items inserted", "Expansion rate"};
        bool fixed = field_is(res, "growth", "none"); /* NONSCALING: no expansion rate */
        if (card) {
            resp_reply_int(b, (int64_t)items);
        } else if (m->field != RESP_INFO_ALL) {
            resp_reply_array(b, 1);
            if (fixed && m->field == RESP_INFO_EXPANSION)
                resp_reply_null(b, ver);
            else
                resp_reply_int(b, (int64_t)v[m->field - 1]);
        } else {
            resp_reply_map(b, 5, ver);
            for (size_t i = 0; i < 5; i++) {
                if (ver >= 3)
                    resp_reply_bulk_str(b, names[i]);
                else
                    resp_reply_simple(b, names[i]);
                if (fixed && i == 4)
                    resp_reply_null(b, ver);
                else
                    resp_reply_int(b, (int64_t)v[i]);
            }
        }
    }
    done(c, b, mark);
}

static void bf_reserve(struct conn *c, const struct resp_mapped *m)
{
    if (filter_exists(conn_worker(c)->srv, m->req.name)) {
        reply_error(c, "ERR item exists");
        return;
    }
    execute(c, &m->req, RESP_SHAPE_OK, 0);
}

/* BF.ADD, BF.MADD, BF.INSERT: create on first use, then CHECKADD. */
static void bf_add(struct conn *c, const struct resp_mapped *m)
{
    struct result *res = conn_result(c);
    result_reset(res);
    bool creates = m->op != RESP_OP_BF_INSERT || m->create;
    const struct proto_create *opts =
        m->op == RESP_OP_BF_INSERT && m->req.create.set != 0 ? &m->req.create : NULL;
    if (creates && autocreate(c, m->req.name, opts, res) != 0) {
        reply_result_error(c, res);
        return;
    }
    execute(c, &m->req, m->op == RESP_OP_BF_ADD ? RESP_SHAPE_NEW : RESP_SHAPE_NEWS, m->req.nargs);
}

/* ---- keyspace ---- */

/* The next name of *rest: bulk strings (array) or spaced words (inline). */
static bool next_name(const struct resp_command *cmd, struct proto_slice *rest,
                      struct proto_slice *name)
{
    if (cmd->inline_form)
        return proto_next_arg(rest, name);
    return resp_next_keys(rest, name, 1) == 1;
}

static void key_exists(struct conn *c, const struct resp_command *cmd)
{
    struct server *srv = conn_worker(c)->srv;
    struct proto_slice rest = resp_tail(cmd, 1), name;
    int64_t n = 0;
    while (next_name(cmd, &rest, &name))
        n += proto_name_valid(name) && filter_exists(srv, name);
    reply_int(c, n);
}

static void key_del(struct conn *c, const struct resp_command *cmd, const struct resp_mapped *m)
{
    struct worker *w = conn_worker(c);
    if (cmd->argc == 2) { /* one name: the DROP's own reply, parked while its file goes */
        struct proto_request req = m->req;
        req.name = cmd->argv[1];
        if (!proto_name_valid(req.name)) {
            reply_int(c, 0);
            return;
        }
        execute(c, &req, RESP_SHAPE_DELETED, 1);
        return;
    }
    struct proto_slice rest = resp_tail(cmd, 1), name;
    struct result *res = conn_result(c);
    int64_t n = 0;
    while (next_name(cmd, &rest, &name)) {
        if (!proto_name_valid(name))
            continue;
        struct proto_request req = {.cmd = PROTO_CMD_DROP, .name = name};
        result_reset(res);
        /* No completion: answered at once, the file removed in the background. */
        commands_execute(w->srv, &w->stats, &req, res, NULL);
        if (res->status == RESULT_DELETED)
            n++;
        else if (res->status != RESULT_NOT_FOUND) {
            reply_result_error(c, res);
            return;
        }
    }
    reply_int(c, n);
}

static int by_name(const void *a, const void *b)
{
    const struct filter *x = *(struct filter *const *)a, *y = *(struct filter *const *)b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int d = memcmp(x->name, y->name, n);
    return d != 0 ? d : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

/*
 * SCAN cursor [MATCH p] [COUNT n] [TYPE t] and KEYS p. The cursor is a position in the
 * names in byte order: a filter created or dropped between calls may shift it, so a scan
 * can miss or repeat a name that changed meanwhile (Redis promises more; see PROTOCOL.md).
 */
static void key_scan(struct conn *c, const struct resp_command *cmd, bool keys)
{
    struct server *srv = conn_worker(c)->srv;
    struct proto_slice pat = {"*", 1};
    uint64_t cursor = 0, count = 10;
    bool type_ok = true;
    if (keys) {
        pat = cmd->argv[1];
    } else {
        if (proto_parse_u64(cmd->argv[1].ptr, cmd->argv[1].len, &cursor) != 0) {
            reply_error(c, "ERR invalid cursor");
            return;
        }
        for (size_t i = 2; i < cmd->argc; i += 2) {
            if (i + 1 >= cmd->argc || i + 1 >= RESP_MAX_HEAD) {
                reply_error(c, "ERR syntax error");
                return;
            }
            struct proto_slice v = cmd->argv[i + 1];
            if (resp_arg_is(cmd->argv[i], "MATCH")) {
                pat = v;
            } else if (resp_arg_is(cmd->argv[i], "COUNT")) {
                if (proto_parse_u64(v.ptr, v.len, &count) != 0 || count == 0) {
                    reply_error(c, "ERR value is not an integer or out of range");
                    return;
                }
            } else if (resp_arg_is(cmd->argv[i], "TYPE")) {
                type_ok = v.len == 9 && memcmp(v.ptr, "MBbloom--", 9) == 0;
            } else {
                reply_error(c, "ERR syntax error");
                return;
            }
        }
    }
    struct filter **all;
    size_t n;
    if (registry_collect(srv->reg, NULL, 0, &all, &n) != REGISTRY_OK) {
        reply_error(c, "ERR out of memory");
        return;
    }
    qsort(all, n, sizeof *all, by_name);
    size_t mark;
    struct proto_buf *b = begin(c, &mark);
    size_t from = keys ? 0 : (cursor < n ? (size_t)cursor : n);
    size_t to = keys || count >= n - from ? n : from + (size_t)count;
    size_t hits = 0;
    for (size_t i = from; i < to && type_ok; i++)
        hits += resp_glob_match(pat.ptr, pat.len, all[i]->name, all[i]->name_len);
    if (!keys) {
        char next[24];
        snprintf(next, sizeof next, "%zu", to >= n ? (size_t)0 : to);
        resp_reply_array(b, 2);
        resp_reply_bulk_str(b, next);
    }
    resp_reply_array(b, hits);
    for (size_t i = from; i < to && type_ok; i++)
        if (resp_glob_match(pat.ptr, pat.len, all[i]->name, all[i]->name_len))
            resp_reply_bulk(b, all[i]->name, all[i]->name_len);
    for (size_t i = 0; i < n; i++)
        filter_unref(all[i]);
    free(all);
    done(c, b, mark);
}

/* ---- connection and server commands ---- */

static void hello(struct conn *c, const struct resp_command *cmd)
{
    struct redis_state *s = state_of(c);
    struct server *srv = conn_worker(c)->srv;
    int ver = s->ver;
    size_t i = 1;
    if (cmd->argc > 1) {
        struct proto_slice v = cmd->argv[1];
        if (v.len != 1 || (v.ptr[0] != '2' && v.ptr[0] != '3')) {
            reply_error(c, "NOPROTO unsupported protocol version");
            return;
        }
        ver = v.ptr[0] - '0';
        i = 2;
    }
    struct proto_slice token = {NULL, 0}, name = {NULL, 0};
    bool auth = false, setname = false;
    for (; i < cmd->argc && i < RESP_MAX_HEAD; i++) {
        if (resp_arg_is(cmd->argv[i], "AUTH") && i + 2 < cmd->argc && i + 2 < RESP_MAX_HEAD) {
            token = cmd->argv[i + 2];
            auth = true;
            i += 2;
        } else if (resp_arg_is(cmd->argv[i], "SETNAME") && i + 1 < cmd->argc &&
                   i + 1 < RESP_MAX_HEAD) {
            name = cmd->argv[++i];
            setname = true;
        } else {
            reply_error(c, "ERR Syntax error in HELLO option");
            return;
        }
    }
    if (auth) {
        struct proto_request req = {.cmd = PROTO_CMD_AUTH, .args = token, .nargs = 1};
        struct redis_ctx x = {.shape = REDIS_SHAPE_AUTH, .ver = s->ver};
        const struct result *r = conn_execute(c, &req, &x, sizeof x);
        if (r == NULL)
            return; /* a failed AUTH parks: its WRONGPASS is the reply */
        if (r->status != RESULT_OK) {
            size_t mark;
            struct proto_buf *b = begin(c, &mark);
            format(b, &x, r);
            done(c, b, mark);
            return;
        }
    } else if (conn_needs_auth(c)) {
        reply_error(c, "NOAUTH HELLO must be called with the client already authenticated, "
                       "otherwise the HELLO <proto> AUTH <user> <pass> option can be used to "
                       "authenticate the client and select the RESP protocol version at the "
                       "same time");
        return;
    }
    if (setname) {
        s->name_len = (unsigned char)(name.len < sizeof s->name ? name.len : sizeof s->name);
        memcpy(s->name, name.ptr, s->name_len);
    }
    s->ver = (unsigned char)ver;
    size_t mark;
    struct proto_buf *b = begin(c, &mark);
    resp_reply_map(b, 7, ver);
    resp_reply_bulk_str(b, "server");
    resp_reply_bulk_str(b, "redis");
    resp_reply_bulk_str(b, "version");
    resp_reply_bulk_str(b, REDIS_VERSION_SHOWN);
    resp_reply_bulk_str(b, "proto");
    resp_reply_int(b, ver);
    resp_reply_bulk_str(b, "id");
    resp_reply_int(b, (int64_t)s->id);
    resp_reply_bulk_str(b, "mode");
    resp_reply_bulk_str(b, "standalone");
    resp_reply_bulk_str(b, "role");
    resp_reply_bulk_str(b, srv->repl.role == SERVER_REPLICA ? "replica" : "master");
    resp_reply_bulk_str(b, "modules");
    resp_reply_array(b, 1);
    resp_reply_map(b, 2, ver);
    resp_reply_bulk_str(b, "name");
    resp_reply_bulk_str(b, "bf");
    resp_reply_bulk_str(b, "ver");
    resp_reply_int(b, 20400);
    done(c, b, mark);
}

static void client_line(struct proto_buf *b, struct conn *c)
{
    struct redis_state *s = state_of(c);
    char line[256];
    int n = snprintf(line, sizeof line, "id=%llu addr=%s name=%.*s db=0 resp=%u\n",
                     (unsigned long long)s->id, conn_peer(c), (int)s->name_len, s->name,
                     (unsigned)s->ver);
    resp_reply_bulk(b, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : 0);
}

static void client(struct conn *c, const struct resp_command *cmd)
{
    struct redis_state *s = state_of(c);
    struct proto_slice sub = cmd->argv[1];
    size_t mark;
    if (resp_arg_is(sub, "SETNAME") && cmd->argc == 3) {
        struct proto_slice name = cmd->argv[2];
        for (size_t i = 0; i < name.len; i++)
            if (name.ptr[i] <= ' ' || name.ptr[i] == 0x7f) {
                reply_error(c, "ERR Client names cannot contain spaces, newlines or special "
                               "characters.");
                return;
            }
        s->name_len = (unsigned char)(name.len < sizeof s->name ? name.len : sizeof s->name);
        memcpy(s->name, name.ptr, s->name_len);
        reply_simple(c, "OK");
    } else if (resp_arg_is(sub, "GETNAME") && cmd->argc == 2) {
        struct proto_buf *b = begin(c, &mark);
        if (s->name_len == 0)
            resp_reply_null(b, s->ver);
        else
            resp_reply_bulk(b, s->name, s->name_len);
        done(c, b, mark);
    } else if (resp_arg_is(sub, "ID") && cmd->argc == 2) {
        reply_int(c, (int64_t)s->id);
    } else if (resp_arg_is(sub, "SETINFO") && cmd->argc == 4) {
        reply_simple(c, "OK");
    } else if ((resp_arg_is(sub, "INFO") && cmd->argc == 2) ||
               (resp_arg_is(sub, "LIST") && cmd->argc == 2)) {
        struct proto_buf *b = begin(c, &mark);
        client_line(b, c); /* LIST shows this connection only */
        done(c, b, mark);
    } else if (resp_arg_is(sub, "NO-EVICT") || resp_arg_is(sub, "NO-TOUCH")) {
        reply_simple(c, "OK");
    } else {
        char msg[160];
        snprintf(msg, sizeof msg, "ERR unknown subcommand or wrong number of arguments for '%.*s'",
                 (int)(sub.len < 32 ? sub.len : 32), sub.ptr);
        for (char *p = msg; *p; p++)
            if (*p == '\r' || *p == '\n')
                *p = ' ';
        reply_error(c, msg);
    }
}

/* The commands COMMAND lists: name, arity, flags, summary, group. */
static const struct {
    const char *name;
    int arity;
    bool write;
    const char *summary;
} commands_shown[] = {
    {"bf.add", 3, true, "Adds an item to a Bloom filter"},
    {"bf.madd", -3, true, "Adds one or more items to a Bloom filter"},
    {"bf.exists", 3, false, "Checks whether an item exists in a Bloom filter"},
    {"bf.mexists", -3, false, "Checks whether one or more items exist in a Bloom filter"},
    {"bf.insert", -4, true,
     "Adds items to a Bloom filter, creating it with the options if missing"},
    {"bf.reserve", -4, true, "Creates a new Bloom filter"},
    {"bf.info", -2, false, "Returns information about a Bloom filter"},
    {"bf.card", 2, false, "Returns the number of items added to a Bloom filter"},
    {"bf.scandump", 3, false, "Begins an incremental save of the Bloom filter"},
    {"bf.loadchunk", 4, true, "Restores a filter previously saved using SCANDUMP"},
    {"ping", -1, false, "Returns the server's liveliness response"},
    {"echo", 2, false, "Returns the given string"},
    {"hello", -1, false, "Handshakes with the server"},
    {"auth", -2, false, "Authenticates the connection"},
    {"select", 2, false, "Changes the selected database (only 0)"},
    {"quit", -1, false, "Closes the connection"},
    {"client", -2, false, "Connection commands: SETNAME, GETNAME, ID, SETINFO, INFO"},
    {"command", -1, false, "Returns detailed information about all commands"},
    {"info", -1, false, "Returns information and statistics about the server"},
    {"dbsize", 1, false, "Returns the number of filters"},
    {"exists", -2, false, "Counts the filters that exist"},
    {"del", -2, true, "Drops filters"},
    {"unlink", -2, true, "Drops filters"},
    {"type", 2, false, "Returns the type of a filter (MBbloom--)"},
    {"scan", -2, false, "Iterates over filter names"},
    {"keys", 2, false, "Returns the filter names that match a pattern"},
};
#define NSHOWN (sizeof commands_shown / sizeof commands_shown[0])

static void command_entry(struct proto_buf *b, size_t i)
{
    bool key = strncmp(commands_shown[i].name, "bf.", 3) == 0 ||
               strcmp(commands_shown[i].name, "type") == 0;
    resp_reply_array(b, 10);
    resp_reply_bulk_str(b, commands_shown[i].name);
    resp_reply_int(b, commands_shown[i].arity);
    resp_reply_array(b, 1);
    resp_reply_simple(b, commands_shown[i].write ? "write" : "readonly");
    resp_reply_int(b, key ? 1 : 0);
    resp_reply_int(b, key ? 1 : 0);
    resp_reply_int(b, key ? 1 : 0);
    resp_reply_array(b, 0);
    resp_reply_array(b, 0);
    resp_reply_array(b, 0);
    resp_reply_array(b, 0);
}

static void command(struct conn *c, const struct resp_command *cmd)
{
    int ver = state_of(c)->ver;
    size_t mark;
    struct proto_buf *b = begin(c, &mark);
    if (cmd->argc == 1) {
        resp_reply_array(b, NSHOWN);
        for (size_t i = 0; i < NSHOWN; i++)
            command_entry(b, i);
    } else if (resp_arg_is(cmd->argv[1], "COUNT")) {
        resp_reply_int(b, (int64_t)NSHOWN);
    } else if (resp_arg_is(cmd->argv[1], "DOCS") || resp_arg_is(cmd->argv[1], "INFO")) {
        bool docs = resp_arg_is(cmd->argv[1], "DOCS");
        bool want[NSHOWN];
        size_t n = 0;
        for (size_t i = 0; i < NSHOWN; i++) {
            want[i] = cmd->argc == 2;
            for (size_t a = 2; a < cmd->argc && a < RESP_MAX_HEAD && !want[i]; a++)
                want[i] =
                    resp_arg_is(cmd->argv[a], commands_shown[i].name) ||
                    (cmd->argv[a].len == strlen(commands_shown[i].name) &&
                     strncasecmp(cmd->argv[a].ptr, commands_shown[i].name, cmd->argv[a].len) == 0);
            n += want[i];
        }
        if (docs)
            resp_reply_map(b, n, ver);
        else
            resp_reply_array(b, n);
        for (size_t i = 0; i < NSHOWN; i++) {
            if (!want[i])
                continue;
            if (!docs) {
                command_entry(b, i);
                continue;
            }
            resp_reply_bulk_str(b, commands_shown[i].name);
            resp_reply_map(b, 3, ver);
            resp_reply_bulk_str(b, "summary");
            resp_reply_bulk_str(b, commands_shown[i].summary);
            resp_reply_bulk_str(b, "since");
            resp_reply_bulk_str(b, "1.0.0");
            resp_reply_bulk_str(b, "group");
            resp_reply_bulk_str(b,
                                strncmp(commands_shown[i].name, "bf.", 3) == 0 ? "bf" : "generic");
        }
    } else {
        resp_reply_error(b, "ERR unknown subcommand for 'command'. Try COMMAND HELP.");
    }
    done(c, b, mark);
}

/* Appends "name:value\r\n" to the INFO text. */
static void info_line(char *t, size_t cap, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void info_line(char *t, size_t cap, size_t *at, const char *fmt, ...)
{
    if (*at >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t + *at, cap - *at, fmt, ap);
    va_end(ap);
    if (n > 0)
        *at = *at + (size_t)n < cap ? *at + (size_t)n : cap;
}

static bool section_wanted(const struct resp_command *cmd, const char *name)
{
    if (cmd->argc <= 1)
        return true;
    for (size_t i = 1; i < cmd->argc && i < RESP_MAX_HEAD; i++) {
        struct proto_slice a = cmd->argv[i];
        if (resp_arg_is(a, "ALL") || resp_arg_is(a, "EVERYTHING") || resp_arg_is(a, "DEFAULT"))
            return true;
        if (a.len == strlen(name) && strncasecmp(a.ptr, name, a.len) == 0)
            return true;
    }
    return false;
}

/* INFO [section ...]: Redis's sections from the daemon's figures (stats_gather). */
static void info(struct conn *c, const struct resp_command *cmd)
{
    struct server *srv = conn_worker(c)->srv;
    struct stat_values *v = malloc(sizeof *v);
    char *t = malloc(8192);
    if (v == NULL || t == NULL) {
        free(v);
        free(t);
        reply_error(c, "ERR out of memory");
        return;
    }
    stats_gather(srv, v);
#define U(id) ((unsigned long long)v->v[STAT_##id].u)
    size_t at = 0, cap = 8192;
    if (section_wanted(cmd, "server")) {
        struct utsname u;
        bool un = uname(&u) == 0;
        info_line(t, cap, &at,
                  "# Server\r\nredis_version:%s\r\nbloomd_version:%s\r\nredis_mode:standalone\r\n"
                  "os:%s %s %s\r\narch_bits:%d\r\nprocess_id:%llu\r\ntcp_port:%u\r\n"
                  "uptime_in_seconds:%llu\r\nuptime_in_days:%llu\r\n\r\n",
                  REDIS_VERSION_SHOWN, BLOOMD_VERSION, un ? u.sysname : "?", un ? u.release : "",
                  un ? u.machine : "", (int)(sizeof(void *) * 8), U(PID), srv->cfg.redis_port,
                  U(UPTIME), U(UPTIME) / 86400);
    }
    if (section_wanted(cmd, "clients"))
        info_line(t, cap, &at,
                  "# Clients\r\nconnected_clients:%llu\r\nmaxclients:%u\r\nblocked_clients:0\r\n"
                  "\r\n",
                  U(CURR_CONNECTIONS), srv->cfg.max_connections);
    if (section_wanted(cmd, "memory"))
        info_line(t, cap, &at,
                  "# Memory\r\nused_memory:%llu\r\nused_memory_human:%.2fM\r\nmaxmemory:%llu\r\n"
                  "maxmemory_policy:noeviction\r\n\r\n",
                  U(MEMORY_BYTES), (double)U(MEMORY_BYTES) / (1024.0 * 1024.0),
                  (unsigned long long)srv->budget.limit);
    if (section_wanted(cmd, "stats"))
        info_line(t, cap, &at,
                  "# Stats\r\ntotal_connections_received:%llu\r\ntotal_commands_processed:%llu\r\n"
                  "rejected_connections:%llu\r\ntotal_net_input_bytes:%llu\r\n"
                  "total_net_output_bytes:%llu\r\nkeyspace_hits:%llu\r\nkeyspace_misses:%llu\r\n"
                  "total_error_replies:%llu\r\n\r\n",
                  U(TOTAL_CONNECTIONS), U(COMMANDS), U(REJECTED_CONNECTIONS), U(BYTES_READ),
                  U(BYTES_WRITTEN), U(KEYS_PRESENT), U(KEYS_ABSENT), U(PROTOCOL_ERRORS));
    if (section_wanted(cmd, "replication")) {
        const struct server_repl *r = &srv->repl;
        if (r->role == SERVER_REPLICA) {
            char host[300];
            snprintf(host, sizeof host, "%s", r->primary);
            char *colon = strrchr(host, ':');
            const char *port = "0";
            if (colon != NULL) {
                *colon = '\0';
                port = colon + 1;
            }
            info_line(t, cap, &at,
                      "# Replication\r\nrole:slave\r\nmaster_host:%s\r\nmaster_port:%s\r\n"
                      "master_link_status:%s\r\nslave_repl_offset:%llu\r\nslave_read_only:1\r\n"
                      "connected_slaves:%u\r\nmaster_repl_offset:%llu\r\n\r\n",
                      host, port, r->link == SERVER_LINK_DOWN ? "down" : "up",
                      (unsigned long long)r->offset, r->connected,
                      (unsigned long long)r->primary_offset);
        } else {
            info_line(t, cap, &at,
                      "# Replication\r\nrole:master\r\nconnected_slaves:%u\r\n"
                      "master_repl_offset:%llu\r\n\r\n",
                      r->connected, (unsigned long long)r->offset);
        }
    }
    if (section_wanted(cmd, "keyspace")) {
        info_line(t, cap, &at, "# Keyspace\r\n");
        if (U(FILTERS) > 0)
            info_line(t, cap, &at, "db0:keys=%llu,expires=0,avg_ttl=0\r\n", U(FILTERS));
    }
#undef U
    while (at >= 2 && t[at - 1] == '\n' && t[at - 2] == '\r' && at >= 4 && t[at - 3] == '\n')
        at -= 2; /* no blank line after the last section */
    size_t mark;
    struct proto_buf *b = begin(c, &mark);
    resp_reply_bulk(b, t, at);
    done(c, b, mark);
    free(t);
    free(v);
}

/* ---- the loop ---- */

/* True if m may run before the connection authenticated (Redis's no-auth commands). */
static bool before_auth(enum resp_op op)
{
    return op == RESP_OP_AUTH || op == RESP_OP_HELLO || op == RESP_OP_QUIT;
}

static void serve_one(struct conn *c, const struct resp_command *cmd, const struct resp_mapped *m)
{
    struct worker *w = conn_worker(c);
    struct server *srv = w->srv;
    struct redis_state *s = state_of(c);
    size_t mark;
    struct proto_buf *b;
    switch (m->op) {
    case RESP_OP_BF_RESERVE:
        bf_reserve(c, m);
        break;
    case RESP_OP_BF_ADD:
    case RESP_OP_BF_MADD:
    case RESP_OP_BF_INSERT:
        bf_add(c, m);
        break;
    case RESP_OP_BF_EXISTS:
        execute(c, &m->req, RESP_SHAPE_MISSING0, 1);
        break;
    case RESP_OP_BF_MEXISTS:
        execute(c, &m->req, RESP_SHAPE_MISSING_ZEROS, m->req.nargs);
        break;
    case RESP_OP_BF_INFO:
        bf_info(c, m, false);
        break;
    case RESP_OP_BF_CARD:
        bf_info(c, m, true);
        break;
    case RESP_OP_BF_SCANDUMP: /* a DUMP of one chunk (server/exec/dump.h) */
        execute_iter(c, &m->req, REDIS_SHAPE_SCANDUMP, 0, m->req.data_len - 1);
        break;
    case RESP_OP_BF_LOADCHUNK: /* a RESTORE in chunks, the last one parked until installed */
        execute(c, &m->req, REDIS_SHAPE_LOADCHUNK, 0);
        break;
    case RESP_OP_DEL:
        key_del(c, cmd, m);
        break;
    case RESP_OP_EXISTS:
        key_exists(c, cmd);
        break;
    case RESP_OP_TYPE:
        reply_simple(c, proto_name_valid(cmd->argv[1]) && filter_exists(srv, cmd->argv[1])
                            ? "MBbloom--"
                            : "none");
        break;
    case RESP_OP_PING:
        b = begin(c, &mark);
        if (cmd->argc == 2)
            resp_reply_bulk(b, cmd->argv[1].ptr, cmd->argv[1].len);
        else
            resp_reply_simple(b, "PONG");
        done(c, b, mark);
        break;
    case RESP_OP_ECHO:
        b = begin(c, &mark);
        resp_reply_bulk(b, cmd->argv[1].ptr, cmd->argv[1].len);
        done(c, b, mark);
        break;
    case RESP_OP_HELLO:
        hello(c, cmd);
        break;
    case RESP_OP_AUTH:
        execute(c, &m->req, REDIS_SHAPE_AUTH, 0);
        break;
    case RESP_OP_SELECT:
        if (cmd->argv[1].len == 1 && cmd->argv[1].ptr[0] == '0')
            reply_simple(c, "OK");
        else
            reply_error(c, "ERR DB index is out of range");
        break;
    case RESP_OP_QUIT:
        execute(c, &m->req, RESP_SHAPE_OK, 0);
        break;
    case RESP_OP_CLIENT:
        client(c, cmd);
        break;
    case RESP_OP_COMMAND:
        command(c, cmd);
        break;
    case RESP_OP_INFO:
        info(c, cmd);
        break;
    case RESP_OP_DBSIZE:
        w->stats.commands++;
        reply_int(c, (int64_t)registry_count(srv->reg));
        break;
    case RESP_OP_SCAN:
        key_scan(c, cmd, false);
        break;
    case RESP_OP_KEYS:
        key_scan(c, cmd, true);
        break;
    case RESP_OP_UNKNOWN:
    default:
        reply_error(c, "ERR unknown command");
        break;
    }
    (void)s;
}

/* A run of pipelined one-key BF.ADD or BF.EXISTS of one filter, formatted each. */
struct redis_run {
    struct conn *c;
    enum resp_shape shape;
};

static void reply_each(void *ctx, size_t i, const struct result *res)
{
    (void)i;
    struct redis_run *run = ctx;
    size_t mark;
    struct proto_buf *b = begin(run->c, &mark);
    resp_format_result(b, run->shape, 1, res);
    done(run->c, b, mark);
}

/* True if m can start or join a run: BF.ADD or BF.EXISTS, mapped without error. */
static bool runnable(const struct resp_mapped *m)
{
    return m->why == NULL && (m->op == RESP_OP_BF_ADD || m->op == RESP_OP_BF_EXISTS);
}

/*
 * Pipelined BF.ADD/BF.EXISTS of one filter as one lib batch. first is parsed, mapped and
 * admitted, taking used0 bytes; parses more from buf[used0..len) while they join. Returns
 * the bytes consumed.
 */
static size_t serve_run(struct conn *c, const struct resp_mapped *first, const char *buf,
                        size_t len, size_t used0, const struct resp_limits *lim)
{
    struct worker *w = conn_worker(c);
    struct server *srv = w->srv;
    struct result *res = conn_result(c);
    struct proto_request reqs[REDIS_RUN];
    size_t n = 1, used = used0;
    reqs[0] = first->req;
    while (n < REDIS_RUN && used < len) {
        struct resp_command cmd;
        struct resp_mapped m;
        size_t next = 0;
        if (resp_parse(buf + used, len - used, lim, &cmd, &next) != RESP_OK)
            break;
        resp_map(&cmd, &m);
        if (!runnable(&m) || m.op != first->op || !commands_same_run(&reqs[0], &m.req))
            break; /* parsed again by the caller's loop */
        reqs[n++] = m.req;
        used += next;
    }
    result_reset(res);
    if (first->op == RESP_OP_BF_ADD && autocreate(c, reqs[0].name, NULL, res) != 0) {
        reply_result_error(c, res); /* why the filter could not be created */
        conn_spend(c, used0, 1);
        return used0;
    }
    struct redis_run run = {
        .c = c, .shape = first->op == RESP_OP_BF_ADD ? RESP_SHAPE_NEW : RESP_SHAPE_MISSING0};
    commands_execute_run(srv, &w->stats, reqs, n, res, reply_each, &run);
    conn_spend(c, used, n);
    return used;
}

static size_t serve_redis(struct conn *c, const char *buf, size_t len)
{
    struct worker *w = conn_worker(c);
    struct server *srv = w->srv;
    const struct resp_limits lim = {.max_frame = srv->cfg.max_line};
    bool holds = mutate_holds(srv); /* replies wait for the journal: no merged runs */
    size_t off = 0;
    while (off < len && conn_can_execute(c)) {
        struct resp_command cmd;
        size_t used = 0;
        int st = resp_parse(buf + off, len - off, &lim, &cmd, &used);
        if (st == RESP_MORE)
            break;
        if (st < 0) {
            size_t mark;
            struct proto_buf *b = begin(c, &mark);
            w->stats.errors++;
            resp_reply_errorf2(b, "ERR Protocol error: ", cmd.why);
            done(c, b, mark);
            log_msg(LOG_INFO, "client %s: RESP protocol error (%s), closing", conn_peer(c),
                    cmd.why);
            conn_finish(c);
            return len; /* the rest of the stream cannot be framed */
        }
        if (st == RESP_BLANK) {
            conn_spend(c, used, 0);
            off += used;
            continue;
        }
        struct resp_mapped m;
        resp_map(&cmd, &m);
        if (m.why != NULL) {
            w->stats.errors++;
            reply_error(c, m.why);
        } else if (conn_needs_auth(c) && !before_auth(m.op)) {
            reply_error(c, "NOAUTH Authentication required.");
        } else if (!holds && runnable(&m) && commands_runnable(&m.req)) {
            off += serve_run(c, &m, buf + off, len - off, used, &lim);
            continue;
        } else {
            serve_one(c, &cmd, &m);
        }
        conn_spend(c, used, m.req.nargs);
        off += used;
    }
    return off;
}

const struct conn_proto conn_proto_redis = {
    .name = "RESP",
    .serve = serve_redis,
    .format_parked = format_parked,
};
