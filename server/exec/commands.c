/*
 * commands.c - one function per command, each filling a struct result. Key commands are
 * the hot path (many millions of keys/s): keys are hashed into a stack array
 * COMMANDS_BATCH at a time and handed to the kind's batch calls, which prefetch every
 * block before probing; per-key answers go into the result's reused array, so nothing is
 * allocated per request once warm. A filter is looked up once per request and held by a
 * reference until the request is done. Every filter is reached through its kind's
 * operations (lib/kind.h), so a new kind needs no change here. Every change goes through
 * exec/mutate.h, which applies, journals and positions it; this file decides only what
 * to change and what to answer.
 */
#include "server/exec/commands.h"

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/kind.h"
#include "proto/number.h"
#include "server/core/clock.h"
#include "server/core/config.h"
#include "server/core/log.h"
#include "server/core/park.h"
#include "server/core/server.h"
#include "server/exec/cmdlib.h"
#include "server/exec/dump.h"
#include "server/exec/mutate.h"
#include "server/exec/setop.h"
#include "server/exec/stats.h"
#include "server/persist/snapshot.h"
#include "server/store/advance.h"
#include "server/store/kinds.h"
#include "server/store/registry.h"

void commands_create_params(const struct server *srv, const struct proto_create *o,
                            const struct kind_ops *ops, struct kind_params *out)
{
    /* Defaults: the library's, the server's, the kind's; then the options given. */
    struct kind_params p = {.now_ms = clock_window_ms()};
    sbf_params_default(&p.sbf);
    p.sbf.capacity = srv->cfg.default_capacity;
    p.sbf.error = srv->cfg.default_error;
    if (ops->defaults != NULL)
        ops->defaults(&p);
    if (o->set & PROTO_OPT_CAPACITY)
        p.sbf.capacity = o->capacity;
    if (o->set & PROTO_OPT_ERROR)
        p.sbf.error = o->error;
    if (o->set & PROTO_OPT_GROWTH)
        p.sbf.growth = o->growth == PROTO_GROWTH_LINEAR ? SBF_GROWTH_LINEAR
                       : o->growth == PROTO_GROWTH_NONE ? SBF_GROWTH_NONE
                                                        : SBF_GROWTH_EXPONENTIAL;
    if (o->set & PROTO_OPT_SCALE)
        p.sbf.scale = o->scale;
    if (o->set & PROTO_OPT_RATIO)
        p.sbf.ratio = o->ratio;
    if (o->set & PROTO_OPT_WINDOW)
        p.window_ms = o->window_ms;
    if (o->set & PROTO_OPT_GENERATIONS)
        p.generations = o->generations;
    *out = p;
}

#define AUTO_WHY_MEMORY                                                                            \
    "out of memory for a filter created on first use (the last 10% of max_memory is kept for "     \
    "explicit CREATE)"

/* The kind a CREATE asks for, or NULL (res set) if there is none by that name. */
static const struct kind_ops *create_kind(const struct proto_create *o, struct result *res)
{
    const struct kind_ops *ops = KINDS_DEFAULT;
    if (o->set & PROTO_OPT_WINDOW) /* the parser saw to it that kind= is blocked, if given */
        ops = kinds_by_name("window", 6);
    else if (o->set & PROTO_OPT_KIND)
        ops = kinds_by_name(o->kind.ptr, o->kind.len);
    if (ops == NULL) {
        char msg[320];
        snprintf(msg, sizeof msg, "unknown filter kind '%.*s' (kinds: %s)", (int)o->kind.len,
                 o->kind.ptr, kinds_names());
        result_set_copy(res, RESULT_CLIENT_ERROR, msg, strlen(msg));
    }
    return ops;
}

/*
 * CREATE of a name that exists: EXISTS if every option given matches the filter (or
 * none was given), else a CLIENT_ERROR that names the first option that differs, with
 * what the filter has and what was asked ("window: exists without, asked 1h"), then all
 * of the filter's parameters.
 */
static void exists(struct result *res, const struct filter *f, const struct kind_ops *want,
                   unsigned set, const struct kind_params *p, uint64_t seed)
{
    struct kind_params have = *p; /* a kind that cannot say matches anything */
    if (f->ops->params != NULL)
        f->ops->params(f->obj, &have);
    bool windowed = have.window_ms > 0 && f->ops->params != NULL;
    /* The first option that differs (the kind first: the others mean little across
     * kinds); had and asked are its two values as CREATE spells them. */
    const char *opt = NULL;
    char had[40] = "", asked[40] = "";
    uint64_t dur[3] = {0, 0, 0};
    bool window_differs = false;
    if ((set & PROTO_OPT_WINDOW) && (f->ops != want || have.window_ms != p->window_ms)) {
        opt = "window";
        window_differs = true;
        dur[0] = f->ops == want ? have.window_ms : 0; /* 0: "without" */
        dur[1] = p->window_ms;
    } else if ((set & PROTO_OPT_KIND) && f->ops != want) {
        opt = "kind";
        snprintf(had, sizeof had, "%s", f->ops->name);
        snprintf(asked, sizeof asked, "%s", want->name);
    } else if ((set & PROTO_OPT_CAPACITY) && have.sbf.capacity != p->sbf.capacity) {
        opt = "capacity";
        snprintf(had, sizeof had, "%llu", (unsigned long long)have.sbf.capacity);
        snprintf(asked, sizeof asked, "%llu", (unsigned long long)p->sbf.capacity);
    } else if ((set & PROTO_OPT_ERROR) && have.sbf.error != p->sbf.error) {
        opt = "error";
        proto_format_double(had, sizeof had, have.sbf.error);
        proto_format_double(asked, sizeof asked, p->sbf.error);
    } else if ((set & PROTO_OPT_GROWTH) && have.sbf.growth != p->sbf.growth) {
        opt = "growth";
        snprintf(had, sizeof had, "%s", sbf_growth_name(have.sbf.growth));
        snprintf(asked, sizeof asked, "%s", sbf_growth_name(p->sbf.growth));
    } else if ((set & PROTO_OPT_SCALE) && have.sbf.scale != p->sbf.scale) {
        opt = "scale";
        proto_format_double(had, sizeof had, have.sbf.scale);
        proto_format_double(asked, sizeof asked, p->sbf.scale);
    } else if ((set & PROTO_OPT_RATIO) && have.sbf.ratio != p->sbf.ratio) {
        opt = "ratio";
        proto_format_double(had, sizeof had, have.sbf.ratio);
        proto_format_double(asked, sizeof asked, p->sbf.ratio);
    } else if ((set & PROTO_OPT_GENERATIONS) && have.generations != p->generations) {
        opt = "generations";
        snprintf(had, sizeof had, "%u", (unsigned)have.generations);
        snprintf(asked, sizeof asked, "%u", (unsigned)p->generations);
    } else if ((set & PROTO_OPT_SEED) && f->seed != seed) {
        opt = "seed"; /* its own is not shown: it keys the placement of its keys */
        snprintf(had, sizeof had, "another");
        snprintf(asked, sizeof asked, "%llu", (unsigned long long)seed);
    }
    if (opt == NULL) {
        result_set(res, RESULT_EXISTS, NULL);
        return;
    }
    /* Durations as CREATE takes them (the largest unit that divides them), 0 as "without":
     * the window option's two values, then the filter's own window for the list below. */
    char hwin[40] = "", win[64] = "";
    char *dur_out[3] = {had, asked, hwin};
    dur[2] = windowed ? have.window_ms : 0;
    static const struct {
        uint64_t ms;
        char unit;
    } units[] = {{86400000, 'd'}, {3600000, 'h'}, {60000, 'm'}, {1000, 's'}};
    for (int i = window_differs ? 0 : 2; i < 3; i++) {
        size_t u = 0;
        while (u < 3 && dur[i] % units[u].ms != 0)
            u++;
        if (dur[i] == 0)
            snprintf(dur_out[i], sizeof hwin, "without");
        else
            snprintf(dur_out[i], sizeof hwin, "%llu%c", (unsigned long long)(dur[i] / units[u].ms),
                     units[u].unit);
    }
    char msg[512], err[40], scale[40], ratio[40];
    proto_format_double(err, sizeof err, have.sbf.error);
    proto_format_double(scale, sizeof scale, have.sbf.scale);
    proto_format_double(ratio, sizeof ratio, have.sbf.ratio);
    if (windowed)
        snprintf(win, sizeof win, " window=%s generations=%u", hwin, (unsigned)have.generations);
    else if (f->ops != KINDS_DEFAULT)
        snprintf(win, sizeof win, " kind=%s", f->ops->name);
    snprintf(msg, sizeof msg,
             "%s: exists %s, asked %s; filter exists with other parameters (capacity=%llu "
             "error=%s growth=%s scale=%s ratio=%s%s)",
             opt, had, asked, (unsigned long long)have.sbf.capacity, err,
             sbf_growth_name(have.sbf.growth), scale, ratio, win);
    result_set_copy(res, RESULT_CLIENT_ERROR, msg, strlen(msg));
}

/* The command's answer for a change whose last record is at pos: held, or now. */
static int reply(struct server *srv, uint64_t pos, const struct result *res,
                 struct completion *later)
{
    return mutate_reply(srv, pos, res, later) ? CMD_PENDING : CMD_DONE;
}

/* CREATE; *pos: its record's position when it created the filter. */
static void cmd_create(struct server *srv, const struct proto_request *req, struct result *res,
                       uint64_t *pos)
{
    const struct proto_create *o = &req->create;
    const struct kind_ops *ops = create_kind(o, res);
    if (ops == NULL)
        return;
    struct kind_params p;
    commands_create_params(srv, o, ops, &p);

    if (!(p.sbf.scale >= 1 && p.sbf.scale <= 64)) {
        result_set(res, RESULT_CLIENT_ERROR, "scale must be between 1 and 64");
        return;
    }
    if (sbf_params_check(&p.sbf) != SBF_OK) {
        result_set(res, RESULT_CLIENT_ERROR, "invalid filter parameters");
        return;
    }
    if (p.sbf.growth == SBF_GROWTH_NONE && ops != KINDS_DEFAULT) {
        result_set(res, RESULT_CLIENT_ERROR, COMMANDS_WHY_GROWTH_NONE);
        return;
    }
    /* The data dir's secret, unless seed= asks for another (filters of separate daemons
     * combine only when their seeds are the same). */
    uint64_t seed = (o->set & PROTO_OPT_SEED) ? o->seed : srv->seed;
    struct filter *old = cmdlib_lookup(srv, req->name);
    if (old != NULL) {
        exists(res, old, ops, o->set, &p, seed);
        filter_unref(old);
        return;
    }
    if (registry_count(srv->reg) >= srv->cfg.max_filters) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "too many filters (%zu of max_filters %u: DROP some, or raise it)",
                 registry_count(srv->reg), srv->cfg.max_filters);
        result_set_copy(res, RESULT_SERVER_ERROR, msg, strlen(msg));
        return;
    }
    int rc = mutate_create(srv, req->name, ops, &p, seed, pos);
    if (rc == SBF_EINVAL && ops->params_rule != NULL) {
        char msg[200];
        snprintf(msg, sizeof msg, "invalid filter parameters: %s", ops->params_rule);
        result_set_copy(res, RESULT_CLIENT_ERROR, msg, strlen(msg));
    } else if (rc == SBF_EINVAL)
        result_set(res, RESULT_CLIENT_ERROR, "invalid filter parameters");
    else if (rc != SBF_OK)
        cmdlib_lib_error(res, rc);
    else
        result_set(res, RESULT_CREATED, NULL);
}

/* Hashes the next keys of *rest, at most max, into h; returns how many (0: none left). */
static size_t hash_keys(const struct filter *f, const struct proto_request *req,
                        struct proto_slice *rest, struct sbf_hash *h, size_t max)
{
    struct proto_slice keys[COMMANDS_BATCH];
    size_t n = proto_next_keys(req, rest, keys, max < COMMANDS_BATCH ? max : COMMANDS_BATCH);
    uint64_t seed = f->seed;
    for (size_t i = 0; i < n; i++)
        h[i] = sbf_hash_key_seeded(keys[i].ptr, keys[i].len, seed);
    return n;
}

/*
 * ADD and CHECKADD, one loop: ADD answers how many keys were new, CHECKADD (per_key) one
 * bit per key. After a failed growth the keys before the failing one were added; the
 * client learns of the failure only.
 */
static int cmd_add(struct server *srv, struct stats *st, const struct proto_request *req,
                   struct result *res, bool per_key, struct completion *later)
{
    struct filter *f = cmdlib_lookup(srv, req->name);
    if (f == NULL) {
        cmdlib_not_found(res, req->name);
        return CMD_DONE;
    }
    struct sbf_hash h[COMMANDS_BATCH];
    bool scratch[COMMANDS_BATCH];
    struct proto_slice rest = req->args;
    uint64_t added = 0, pos = 0;
    int rc = SBF_OK;
    size_t n;
    if (per_key)
        res->status = RESULT_BITS;
    while (rc == SBF_OK && (n = hash_keys(f, req, &rest, h, COMMANDS_BATCH)) > 0) {
        bool *bits = per_key ? result_add_bits(res, n) : scratch;
        if (bits == NULL)
            break;
        size_t done, fresh;
        rc = mutate_add(srv, f, h, n, bits, &done, &fresh, &pos);
        added += fresh;
        st->keys_stored += done;
        st->keys_checked += per_key ? n : 0;
    }
    filter_unref(f);
    st->keys_added += added;
    if (rc != SBF_OK) {
        cmdlib_lib_error(res, rc);
        return CMD_DONE;
    }
    if (!per_key) {
        res->status = RESULT_COUNT;
        res->count = added;
    }
    return reply(srv, pos, res, later);
}

/*
 * DELETE: expandable filters store fingerprints, so they can remove one. Deleting a key
 * never added may remove another key with the same fingerprint (a false negative): the
 * caller must only delete what it added (PROTOCOL.md).
 */
static int cmd_delete(struct server *srv, const struct proto_request *req, struct result *res,
                      struct completion *later)
{
    struct filter *f = cmdlib_lookup(srv, req->name);
    if (f == NULL) {
        cmdlib_not_found(res, req->name);
        return CMD_DONE;
    }
    if (f->ops->remove_batch == NULL) {
        filter_unref(f);
        result_set(res, RESULT_CLIENT_ERROR,
                   "DELETE needs an expandable filter (CREATE ... kind=expandable): a Bloom "
                   "filter cannot forget a key");
        return CMD_DONE;
    }
    struct sbf_hash h[COMMANDS_BATCH];
    struct proto_slice rest = req->args;
    uint64_t removed = 0, pos = 0;
    int rc = SBF_OK;
    size_t n;
    while (rc == SBF_OK && (n = hash_keys(f, req, &rest, h, COMMANDS_BATCH)) > 0) {
        size_t k = 0;
        rc = mutate_delete(srv, f, h, n, &k, &pos);
        removed += k;
    }
    filter_unref(f);
    if (rc != SBF_OK) {
        cmdlib_lib_error(res, rc);
        return CMD_DONE;
    }
    res->status = RESULT_REMOVED;
    res->count = removed;
    return reply(srv, pos, res, later);
}

/* CHECK: one bit per key; changes nothing. */
static void cmd_check(struct stats *st, struct server *srv, const struct proto_request *req,
                      struct result *res)
{
    struct filter *f = cmdlib_lookup(srv, req->name);
    if (f == NULL) {
        cmdlib_not_found(res, req->name);
        return;
    }
    struct sbf_hash h[COMMANDS_BATCH];
    struct proto_slice rest = req->args;
    size_t n;
    res->status = RESULT_BITS;
    while ((n = hash_keys(f, req, &rest, h, COMMANDS_BATCH)) > 0) {
        bool *bits = result_add_bits(res, n);
        if (bits == NULL)
            break;
        f->ops->check_batch(f->obj, h, n, bits);
        size_t present = 0;
        for (size_t i = 0; i < n; i++)
            present += bits[i];
        st->keys_present += present;
        st->keys_absent += n - present;
        st->keys_checked += n;
    }
    filter_unref(f);
}

/* CLEAR with no name: every filter (memcached's flush_all). */
static void clear_all(struct server *srv, struct result *res, uint64_t *pos)
{
    struct filter **all;
    size_t n;
    if (registry_collect(srv->reg, NULL, 0, &all, &n) != REGISTRY_OK) {
        result_set(res, RESULT_SERVER_ERROR, "out of memory");
        return;
    }
    int rc = SBF_OK;
    for (size_t i = 0; i < n; i++) {
        if (rc == SBF_OK)
            rc = mutate_clear(srv, all[i], pos);
        else
            filter_unref(all[i]);
    }
    free(all);
    if (rc != SBF_OK)
        cmdlib_lib_error(res, rc);
    else
        result_set(res, RESULT_OK, NULL);
}

static int cmd_clear(struct server *srv, const struct proto_request *req, struct result *res,
                     struct completion *later)
{
    uint64_t pos = 0;
    if (req->name.len == 0) {
        clear_all(srv, res, &pos);
        return res->status == RESULT_OK ? reply(srv, pos, res, later) : CMD_DONE;
    }
    struct filter *f = cmdlib_lookup(srv, req->name);
    if (f == NULL) {
        cmdlib_not_found(res, req->name);
        return CMD_DONE;
    }
    int rc = mutate_clear(srv, f, &pos);
    if (rc != SBF_OK) {
        cmdlib_lib_error(res, rc);
        return CMD_DONE;
    }
    result_set(res, RESULT_OK, NULL);
    return reply(srv, pos, res, later);
}

static void cmd_info(struct server *srv, const struct proto_request *req, struct result *res)
{
    struct filter *f = cmdlib_lookup(srv, req->name);
    if (f == NULL) {
        cmdlib_not_found(res, req->name);
        return;
    }
    stats_info(srv, f, res);
    filter_unref(f);
}

static void cmd_list(struct server *srv, const struct proto_request *req, struct result *res)
{
    struct filter **all;
    size_t n;
    if (registry_collect(srv->reg, req->name.ptr, req->name.len, &all, &n) != REGISTRY_OK) {
        result_set(res, RESULT_SERVER_ERROR, "out of memory");
        return;
    }
    res->status = RESULT_ROWS;
    for (size_t i = 0; i < n; i++) {
        struct kind_info info = {0};
        all[i]->ops->info(all[i]->obj, &info);
        result_row(res, all[i]->name, all[i]->name_len, info.items, info.bytes, info.capacity,
                   info.error, info.window_ms);
        filter_unref(all[i]);
    }
    free(all);
}

/* ---- commands that answer once the disk has their effect ---- */

#define DROP_LEAD "filter dropped from memory, but its file could not be removed: "

/* The snapshotter's answer, as the result of the parked request. */
static void finish(struct completion *later, int err, enum result_status ok, const char *lead,
                   const char *why)
{
    if (err == 0) {
        completion_finish(later, ok, NULL);
        return;
    }
    char msg[512];
    snprintf(msg, sizeof msg, "%s%s", lead, why);
    completion_finish(later, RESULT_SERVER_ERROR, msg);
}

static void flush_done(void *arg, int err, const char *why)
{
    finish(arg, err, RESULT_OK, "", why);
}

static void drop_done(void *arg, int err, const char *why)
{
    finish(arg, err, RESULT_DELETED, DROP_LEAD, why);
}

static int cmd_drop(struct server *srv, const struct proto_request *req, struct result *res,
                    struct completion *later)
{
    uint64_t pos = 0; /* the reply waits for the file's removal, which is later */
    if (!mutate_drop(srv, req->name, &pos)) {
        cmdlib_not_found(res, req->name);
        return CMD_DONE;
    }
    if (srv->snap == NULL) {
        result_set(res, RESULT_DELETED, NULL);
        return reply(srv, pos, res, later);
    }
    if (mutate_holds(srv)) {
        /* The reply waits for the record (on disk under always, on the replicas with
         * min_replica_acks), the file goes meanwhile: a DROP whose file outlives a crash
         * is replayed, and the file removed then. */
        if (snapshot_forget(srv->snap, req->name.ptr, req->name.len, NULL, NULL) != 0) {
            result_set(res, RESULT_SERVER_ERROR, DROP_LEAD "out of memory");
            return CMD_DONE;
        }
        result_set(res, RESULT_DELETED, NULL);
        return reply(srv, pos, res, later);
    }
    /* Without anyone to answer later, the file goes in the background. */
    if (snapshot_forget(srv->snap, req->name.ptr, req->name.len, later != NULL ? drop_done : NULL,
                        later) != 0) {
        result_set(res, RESULT_SERVER_ERROR, DROP_LEAD "out of memory");
        return CMD_DONE;
    }
    if (later == NULL) {
        result_set(res, RESULT_DELETED, NULL);
        return CMD_DONE;
    }
    return CMD_PENDING;
}

static int cmd_flush(struct server *srv, const struct proto_request *req, struct result *res,
                     struct completion *later)
{
    struct filter *f = NULL;
    if (req->name.len > 0 && (f = cmdlib_lookup(srv, req->name)) == NULL) {
        cmdlib_not_found(res, req->name);
        return CMD_DONE;
    }
    int rc = CMD_PENDING;
    if (srv->snap == NULL || later == NULL) {
        result_set(res, RESULT_SERVER_ERROR, "snapshots are not running");
        rc = CMD_DONE;
    } else if (snapshot_flush(srv->snap, f, flush_done, later) != 0) {
        result_set(res, RESULT_SERVER_ERROR, "out of memory");
        rc = CMD_DONE;
    }
    filter_unref(f);
    return rc;
}

static void cmd_stats(struct server *srv, struct result *res)
{
    stats_result(srv, res);
}

int commands_autocreate(struct server *srv, struct stats *st, struct proto_slice name,
                        struct result *res)
{
    struct filter *f = registry_get(srv->reg, name.ptr, name.len);
    if (f != NULL) {
        filter_unref(f);
        return 0;
    }
    char nm[PROTO_MAX_NAME + 1];
    if (name.len >= sizeof nm) {
        result_set(res, RESULT_CLIENT_ERROR, "invalid filter name");
        return -1;
    }
    memcpy(nm, name.ptr, name.len);
    nm[name.len] = '\0';
    const struct config_template *t = config_template_for(&srv->cfg, nm);
    struct proto_request req = {.cmd = PROTO_CMD_CREATE, .name = name};
    if (t != NULL) {
        req.create = t->create;
        req.create.kind = (struct proto_slice){t->kind, strlen(t->kind)};
    }
    st->cmd[PROTO_CMD_CREATE]++;
    uint64_t pos = 0; /* the request that caused it waits for its own record */
    if (mutate_check(srv, res) != 0)
        return -1;
    /* Clients that may not CREATE must not crowd out those who do: a bound on the filters
     * made on first use, and never the last tenth of max_memory. */
    if (srv->auto_filters >= srv->cfg.memcache_max_auto_filters) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "too many filters created on first use (%u: memcache_max_auto_filters; CREATE "
                 "it explicitly)",
                 srv->auto_filters);
        result_set_copy(res, RESULT_SERVER_ERROR, msg, strlen(msg));
        return -1;
    }
    uint64_t spare = srv->budget.limit / 10;
    if (srv->budget.limit > 0 && budget_used(&srv->budget) + spare > srv->budget.limit) {
        result_set(res, RESULT_SERVER_ERROR, AUTO_WHY_MEMORY);
        return -1;
    }
    cmd_create(srv, &req, res, &pos);
    if (res->status == RESULT_CREATED) {
        struct filter *made = registry_get(srv->reg, name.ptr, name.len);
        bool over = srv->budget.limit > 0 && budget_used(&srv->budget) + spare > srv->budget.limit;
        if (made != NULL && !over) {
            made->auto_created = true;
            srv->auto_filters++;
        }
        filter_unref(made);
        if (over) { /* it took the reserve: it goes again, and the request fails */
            (void)mutate_drop(srv, name, &pos);
            result_set(res, RESULT_SERVER_ERROR, AUTO_WHY_MEMORY);
            return -1;
        }
    }
    if (res->status != RESULT_CREATED && res->status != RESULT_EXISTS)
        return -1;
    result_reset(res);
    return 0;
}

/* ---- runs of pipelined small requests ---- */

bool commands_runnable(const struct proto_request *req)
{
    return (req->cmd == PROTO_CMD_ADD || req->cmd == PROTO_CMD_CHECK ||
            req->cmd == PROTO_CMD_CHECKADD) &&
           req->nargs <= COMMANDS_RUN_KEYS;
}

bool commands_same_run(const struct proto_request *first, const struct proto_request *next)
{
    return commands_runnable(next) && next->cmd == first->cmd &&
           next->key_skip == first->key_skip && next->name.len == first->name.len &&
           memcmp(next->name.ptr, first->name.ptr, first->name.len) == 0;
}

/* Runs request i alone, as commands_execute would. */
static void run_alone(struct server *srv, struct stats *st, const struct proto_request *req,
                      struct result *res)
{
    if (req->cmd == PROTO_CMD_CHECK)
        cmd_check(st, srv, req, res);
    else
        cmd_add(srv, st, req, res, req->cmd == PROTO_CMD_CHECKADD, NULL);
}

void commands_execute_run(struct server *srv, struct stats *st, const struct proto_request *reqs,
                          size_t n, struct result *res, commands_each_fn each, void *ctx)
{
    enum proto_cmd cmd = reqs[0].cmd;
    st->commands += n;
    st->cmd[cmd] += n;
    if (cmd != PROTO_CMD_CHECK && mutate_check(srv, res) != 0) {
        for (size_t i = 0; i < n; i++) /* res holds the journal's error: the same for all */
            each(ctx, i, res);
        return;
    }
    struct filter *f = cmdlib_lookup(srv, reqs[0].name);
    if (f == NULL) {
        for (size_t i = 0; i < n; i++) {
            result_reset(res);
            cmdlib_not_found(res, reqs[i].name);
            each(ctx, i, res);
        }
        return;
    }
    struct sbf_hash h[COMMANDS_BATCH];
    bool bits[COMMANDS_BATCH];
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        struct proto_slice rest = reqs[i].args;
        total += hash_keys(f, &reqs[i], &rest, h + total, COMMANDS_BATCH - total);
        assert(rest.len == 0 || total == COMMANDS_BATCH);
    }
    int rc = SBF_OK;
    size_t done = total, fresh; /* keys [0, done) were processed */
    uint64_t pos = 0;           /* runs are never merged when replies wait (mutate_holds) */
    if (cmd == PROTO_CMD_CHECK)
        f->ops->check_batch(f->obj, h, total, bits);
    else
        rc = mutate_add(srv, f, h, total, bits, &done, &fresh, &pos); /* journaled first */
    uint64_t added = 0, checked = 0;
    size_t i = 0, k = 0;
    for (; i < n && k + reqs[i].nargs <= done; k += reqs[i++].nargs) {
        size_t m = reqs[i].nargs;
        uint64_t a = 0;
        if (cmd != PROTO_CMD_CHECK)
            for (size_t j = 0; j < m; j++)
                a += !bits[k + j];
        /* A result on the stack that borrows bits: valid during each(), which is all
         * each() may rely on; no reset, no copy per request. */
        struct result one = {.status = RESULT_COUNT, .count = a};
        if (cmd != PROTO_CMD_ADD) {
            one.status = RESULT_BITS;
            one.bits = bits + k;
            one.nbits = m;
            checked += m;
        }
        if (cmd == PROTO_CMD_CHECK) {
            size_t present = 0;
            for (size_t j = 0; j < m; j++)
                present += bits[k + j];
            st->keys_present += present;
            st->keys_absent += m - present;
        } else {
            st->keys_stored += m;
        }
        added += a;
        each(ctx, i, &one);
    }
    if (i < n) {
        /* Request i holds the failing key: its earlier keys were added, as in cmd_add. */
        for (size_t j = k; j < done; j++)
            added += !bits[j];
        result_reset(res);
        cmdlib_lib_error(res, rc);
        each(ctx, i, res);
    }
    st->keys_checked += checked;
    st->keys_added += added;
    filter_unref(f);
    /* The rest run alone, exactly as without merging (growth may fail again, or not). */
    while (++i < n) {
        result_reset(res);
        run_alone(srv, st, &reqs[i], res);
        each(ctx, i, res);
    }
}

/* True for the commands that change filters: they need the journal to take records. */
static bool changes(enum proto_cmd cmd)
{
    switch (cmd) {
    case PROTO_CMD_CREATE:
    case PROTO_CMD_ADD:
    case PROTO_CMD_CHECKADD:
    case PROTO_CMD_UNION:
    case PROTO_CMD_INTERSECT:
    case PROTO_CMD_DROP:
    case PROTO_CMD_CLEAR:
    case PROTO_CMD_DELETE:
        return true;
    default:
        return false;
    }
}

int commands_execute(struct server *srv, struct stats *st, const struct proto_request *req,
                     struct result *res, struct completion *later)
{
    st->commands++;
    if (req->cmd < STATS_NCMD)
        st->cmd[req->cmd]++;
    if (changes(req->cmd) && mutate_check(srv, res) != 0)
        return CMD_DONE;
    uint64_t pos = 0;
    switch (req->cmd) {
    case PROTO_CMD_CREATE:
        cmd_create(srv, req, res, &pos);
        return res->status == RESULT_CREATED ? reply(srv, pos, res, later) : CMD_DONE;
    case PROTO_CMD_ADD:
        return cmd_add(srv, st, req, res, false, later);
    case PROTO_CMD_CHECK:
        cmd_check(st, srv, req, res);
        break;
    case PROTO_CMD_CHECKADD:
        return cmd_add(srv, st, req, res, true, later);
    case PROTO_CMD_UNION:
    case PROTO_CMD_INTERSECT:
        return setop_execute(srv, req, res, later) ? CMD_PENDING : CMD_DONE;
    case PROTO_CMD_INFO:
        cmd_info(srv, req, res);
        break;
    case PROTO_CMD_LIST:
        cmd_list(srv, req, res);
        break;
    case PROTO_CMD_DROP:
        return cmd_drop(srv, req, res, later);
    case PROTO_CMD_CLEAR:
        return cmd_clear(srv, req, res, later);
    case PROTO_CMD_FLUSH:
        return cmd_flush(srv, req, res, later);
    case PROTO_CMD_STATS:
        cmd_stats(srv, res);
        break;
    case PROTO_CMD_VERSION:
        result_set(res, RESULT_VERSION, BLOOMD_VERSION);
        break;
    case PROTO_CMD_HELP:
        result_set(res, RESULT_HELP, NULL);
        break;
    case PROTO_CMD_DELETE:
        return cmd_delete(srv, req, res, later);
    case PROTO_CMD_DUMP:
        return dump_execute(srv, req, res, later) ? CMD_PENDING : CMD_DONE;
    case PROTO_CMD_RESTORE:
        /* Its data block is the connection's to read: conn.c runs it (server/exec/dump.h). */
        result_set(res, RESULT_CLIENT_ERROR, "RESTORE needs a data block");
        break;
    case PROTO_CMD_QUIT:
        result_set(res, RESULT_CLOSE, NULL);
        break;
    case PROTO_CMD_AUTH:
        /* Authentication is a connection's state: conn.c answers AUTH before it gets here. */
        result_set(res, RESULT_CLIENT_ERROR, "AUTH is not available on this listener");
        break;
    case PROTO_CMD_ROLE:
    case PROTO_CMD_REPLICAOF:
    case PROTO_CMD_PSYNC:
    case PROTO_CMD_REPLCONF:
        /* Replication is answered by the connection layer (server/repl/repl.h). */
        result_set(res, RESULT_CLIENT_ERROR, "not available on this listener");
        break;
    }
    return CMD_DONE;
}
