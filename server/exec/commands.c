/*
 * commands.c - one function per command, each filling a struct result. Key commands are
 * the hot path (many millions of keys/s): keys are hashed into a stack array
 * COMMANDS_BATCH at a time and handed to the kind's batch calls, which prefetch every
 * block before probing; per-key answers go into the result's reused array, so nothing is
 * allocated per request once warm. A filter is looked up once per request and held by a
 * reference until the request is done. Every filter is reached through its kind's
 * operations (lib/kind.h), so a new kind needs no change here.
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
#include "server/exec/setop.h"
#include "server/exec/stats.h"
#include "server/persist/durable.h"
#include "server/persist/snapshot.h"
#include "server/store/advance.h"
#include "server/store/kinds.h"
#include "server/store/offload.h"
#include "server/store/registry.h"

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
 * none was given), else a CLIENT_ERROR that says what the filter has.
 */
static void exists(struct result *res, const struct filter *f, const struct kind_ops *want,
                   unsigned set, const struct kind_params *p)
{
    struct kind_params have = *p; /* a kind that cannot say matches anything */
    if (f->ops->params != NULL)
        f->ops->params(f->obj, &have);
    bool same = (!(set & (PROTO_OPT_KIND | PROTO_OPT_WINDOW)) || f->ops == want) &&
                (!(set & PROTO_OPT_CAPACITY) || have.sbf.capacity == p->sbf.capacity) &&
                (!(set & PROTO_OPT_ERROR) || have.sbf.error == p->sbf.error) &&
                (!(set & PROTO_OPT_GROWTH) || have.sbf.growth == p->sbf.growth) &&
                (!(set & PROTO_OPT_SCALE) || have.sbf.scale == p->sbf.scale) &&
                (!(set & PROTO_OPT_RATIO) || have.sbf.ratio == p->sbf.ratio) &&
                (!(set & PROTO_OPT_WINDOW) || have.window_ms == p->window_ms) &&
                (!(set & PROTO_OPT_GENERATIONS) || have.generations == p->generations);
    if (same) {
        result_set(res, RESULT_EXISTS, NULL);
        return;
    }
    char msg[256], err[40], scale[40], ratio[40];
    proto_format_double(err, sizeof err, have.sbf.error);
    proto_format_double(scale, sizeof scale, have.sbf.scale);
    proto_format_double(ratio, sizeof ratio, have.sbf.ratio);
    snprintf(msg, sizeof msg,
             "filter exists with other parameters (capacity=%llu error=%s growth=%s scale=%s "
             "ratio=%s)",
             (unsigned long long)have.sbf.capacity, err,
             have.sbf.growth == SBF_GROWTH_LINEAR ? "linear" : "exponential", scale, ratio);
    result_set_copy(res, RESULT_CLIENT_ERROR, msg, strlen(msg));
}

/* ---- the journal's records of mutations (server/persist/durable.h) ---- */

/* The command's answer for a write journaled at pos: held until durable, or now. */
static int durable_reply(struct server *srv, uint64_t pos, const struct result *res,
                         struct completion *later)
{
    return durable_hold(srv, pos, res, later) ? CMD_PENDING : CMD_DONE;
}

static struct journal_name jname(const struct filter *f)
{
    return (struct journal_name){f->name, f->name_len};
}

/* Keys h[0..n) were added to f: the background set operation into f logs them. */
static void note_adds(struct filter *f, const struct sbf_hash *h, size_t n)
{
    if (f->setop != NULL)
        setop_note_adds(f->setop, h, n);
}

/*
 * After an add batch of h[0..n) failed (a growth refused): how many keys it processed.
 * The failing key is the first one still absent: every key before it was added, and the
 * failure changed nothing.
 */
static size_t processed(const struct filter *f, const struct sbf_hash *h, size_t n)
{
    size_t done = 0;
    bool present = true;
    while (done < n) {
        f->ops->check_batch(f->obj, &h[done], 1, &present);
        if (!present)
            break;
        done++;
    }
    return done;
}

/* Journals keys h[0..n) added to f: with bits, only those it did not hold, as ADD_NEW
 * (replay need not probe for them); without, all of them as ADD. Returns the record's
 * position, or 0 when none was written. */
static uint64_t journal_keys(struct server *srv, struct filter *f, const struct sbf_hash *h,
                             size_t n, const bool *bits)
{
    if (!durable_on(srv))
        return 0;
    struct sbf_hash fresh[COMMANDS_BATCH];
    size_t m = n;
    if (bits != NULL) {
        m = 0;
        for (size_t i = 0; i < n; i++)
            if (!bits[i])
                fresh[m++] = h[i];
        h = fresh;
    }
    if (m == 0)
        return 0;
    struct journal_record rec = {.type = bits != NULL ? JOURNAL_ADD_NEW : JOURNAL_ADD,
                                 .name = jname(f),
                                 .hashes = h,
                                 .nhashes = m};
    return durable_append(srv, f, &rec);
}

/* Journals a record naming only f (CLEAR, DROP by name). */
static uint64_t journal_named(struct server *srv, enum journal_type type, struct proto_slice name)
{
    if (!durable_on(srv))
        return 0;
    struct journal_record rec = {.type = type, .name = {name.ptr, name.len}};
    return durable_append(srv, NULL, &rec);
}

/* Journals a successful CLEAR: of name, or of every filter when name is empty. */
static uint64_t journal_clear(struct server *srv, struct proto_slice name)
{
    if (!durable_on(srv))
        return 0;
    if (name.len > 0)
        return journal_named(srv, JOURNAL_CLEAR, name);
    struct filter **all;
    size_t n;
    uint64_t pos = 0;
    if (registry_collect(srv->reg, NULL, 0, &all, &n) != REGISTRY_OK)
        return 0;
    for (size_t i = 0; i < n; i++) {
        pos =
            journal_named(srv, JOURNAL_CLEAR, (struct proto_slice){all[i]->name, all[i]->name_len});
        filter_unref(all[i]);
    }
    free(all);
    return pos;
}

static void cmd_create(struct server *srv, const struct proto_request *req, struct result *res)
{
    const struct proto_create *o = &req->create;
    const struct kind_ops *ops = create_kind(o, res);
    if (ops == NULL)
        return;
    /* Defaults: the library's, the server's, the kind's; then the options given. */
    struct kind_params p = {.now_ms = clock_wall_ms()};
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
        p.sbf.growth =
            o->growth == PROTO_GROWTH_LINEAR ? SBF_GROWTH_LINEAR : SBF_GROWTH_EXPONENTIAL;
    if (o->set & PROTO_OPT_SCALE)
        p.sbf.scale = o->scale;
    if (o->set & PROTO_OPT_RATIO)
        p.sbf.ratio = o->ratio;
    if (o->set & PROTO_OPT_WINDOW)
        p.window_ms = o->window_ms;
    if (o->set & PROTO_OPT_GENERATIONS)
        p.generations = o->generations;

    if (!(p.sbf.scale >= 1 && p.sbf.scale <= 64)) {
        result_set(res, RESULT_CLIENT_ERROR, "scale must be between 1 and 64");
        return;
    }
    if (sbf_params_check(&p.sbf) != SBF_OK) {
        result_set(res, RESULT_CLIENT_ERROR, "invalid filter parameters");
        return;
    }
    struct filter *old = cmdlib_lookup(srv, req->name);
    if (old != NULL) {
        exists(res, old, ops, o->set, &p);
        filter_unref(old);
        return;
    }
    void *obj;
    int rc = ops->create(&p, &srv->budget.sbf, &obj);
    if (rc == SBF_EINVAL) {
        result_set(res, RESULT_CLIENT_ERROR, "invalid filter parameters");
        return;
    }
    if (rc == SBF_OK)
        rc = cmdlib_install(srv, req->name, ops, obj);
    if (rc != SBF_OK) {
        cmdlib_lib_error(res, rc);
        return;
    }
    result_set(res, RESULT_CREATED, NULL);
    if (durable_on(srv)) {
        unsigned char params[128];
        struct journal_record rec = {.type = JOURNAL_CREATE,
                                     .name = {req->name.ptr, req->name.len},
                                     .kind_tag = ops->tag,
                                     .params = params,
                                     .nparams = durable_encode_params(&p, params, sizeof params)};
        res->count = durable_append(srv, NULL, &rec); /* the position, for durable_reply */
    }
}

/* Hashes the next keys of *rest, at most max, into h; returns how many (0: none left). */
static size_t hash_keys(const struct proto_request *req, struct proto_slice *rest,
                        struct sbf_hash *h, size_t max)
{
    struct proto_slice keys[COMMANDS_BATCH];
    size_t n = proto_next_keys(req, rest, keys, max < COMMANDS_BATCH ? max : COMMANDS_BATCH);
    for (size_t i = 0; i < n; i++)
        h[i] = sbf_hash_key(keys[i].ptr, keys[i].len);
    return n;
}

static int cmd_add(struct server *srv, struct stats *st, const struct proto_request *req,
                   struct result *res, struct completion *later)
{
    if (durable_check(srv, res) != 0)
        return CMD_DONE;
    struct filter *f = cmdlib_lookup(srv, req->name);
    if (f == NULL) {
        cmdlib_not_found(res, req->name);
        return CMD_DONE;
    }
    struct sbf_hash h[COMMANDS_BATCH];
    struct proto_slice rest = req->args;
    uint64_t added = 0, pos = 0;
    int rc = SBF_OK;
    size_t n;
    bool bits[COMMANDS_BATCH];
    while (rc == SBF_OK && (n = hash_keys(req, &rest, h, COMMANDS_BATCH)) > 0) {
        /* checkadd tells which keys were new: only those are journaled, as ADD_NEW */
        rc = f->ops->checkadd_batch(f->obj, h, n, bits);
        note_adds(f, h, n);
        /* After a failure the keys before the failing one were added; they count, and
         * the whole batch is journaled (replaying a few more keys is safe). */
        size_t done = rc == SBF_OK ? n : processed(f, h, n), k = 0;
        for (size_t i = 0; i < done; i++)
            k += !bits[i];
        uint64_t p = journal_keys(srv, f, h, n, rc == SBF_OK ? bits : NULL);
        pos = p > 0 ? p : pos; /* a failed append (0) must not release earlier records */
        added += k;
        st->keys_stored += n;
        filter_count_keys(f, n, k);
    }
    if (added > 0)
        filter_touch(f);
    filter_unref(f);
    st->keys_added += added;
    if (rc != SBF_OK) {
        cmdlib_lib_error(res, rc);
        return CMD_DONE;
    }
    res->status = RESULT_COUNT;
    res->count = added;
    return durable_reply(srv, pos, res, later);
}

/*
 * DELETE: expandable filters store fingerprints, so they can remove one. Deleting a key
 * never added may remove another key with the same fingerprint (a false negative): the
 * caller must only delete what it added (PROTOCOL.md).
 */
static int cmd_delete(struct server *srv, const struct proto_request *req, struct result *res,
                      struct completion *later)
{
    if (durable_check(srv, res) != 0)
        return CMD_DONE;
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
    while (rc == SBF_OK && (n = hash_keys(req, &rest, h, COMMANDS_BATCH)) > 0) {
        size_t k = 0;
        rc = f->ops->remove_batch(f->obj, h, n, &k);
        if (k > 0) /* a removal cannot be replayed into a copy made meanwhile */
            setop_note_delete(srv, f);
        if (k > 0 && durable_on(srv)) {
            struct journal_record rec = {
                .type = JOURNAL_DELETE, .name = jname(f), .hashes = h, .nhashes = n};
            pos = durable_append(srv, NULL, &rec);
        }
        removed += k;
    }
    if (removed > 0)
        filter_touch(f);
    filter_unref(f);
    if (rc != SBF_OK) {
        cmdlib_lib_error(res, rc);
        return CMD_DONE;
    }
    res->status = RESULT_REMOVED;
    res->count = removed;
    return durable_reply(srv, pos, res, later);
}

/* CHECK and CHECKADD: one bit per key. */
static int cmd_check(struct server *srv, struct stats *st, const struct proto_request *req,
                     struct result *res, bool add, struct completion *later)
{
    if (add && durable_check(srv, res) != 0)
        return CMD_DONE;
    struct filter *f = cmdlib_lookup(srv, req->name);
    if (f == NULL) {
        cmdlib_not_found(res, req->name);
        return CMD_DONE;
    }
    struct sbf_hash h[COMMANDS_BATCH];
    struct proto_slice rest = req->args;
    uint64_t added = 0, checked = 0, pos = 0;
    int rc = SBF_OK;
    size_t n;
    res->status = RESULT_BITS;
    while (rc == SBF_OK && (n = hash_keys(req, &rest, h, COMMANDS_BATCH)) > 0) {
        bool *bits = result_add_bits(res, n);
        if (bits == NULL)
            break;
        if (add) {
            rc = f->ops->checkadd_batch(f->obj, h, n, bits);
            note_adds(f, h, n);
            if (rc != SBF_OK) {
                uint64_t p = journal_keys(srv, f, h, n, NULL); /* part may be in: all */
                pos = p > 0 ? p : pos;
                filter_touch(f);
                break;
            }
            size_t fresh = 0;
            for (size_t i = 0; i < n; i++)
                fresh += !bits[i];
            added += fresh;
            st->keys_stored += n;
            filter_count_keys(f, n, fresh);
            uint64_t p = journal_keys(srv, f, h, n, bits);
            pos = p > 0 ? p : pos;
        } else {
            f->ops->check_batch(f->obj, h, n, bits);
            size_t present = 0;
            for (size_t i = 0; i < n; i++)
                present += bits[i];
            st->keys_present += present;
            st->keys_absent += n - present;
        }
        checked += n;
    }
    if (added > 0)
        filter_touch(f);
    filter_unref(f);
    st->keys_added += added;
    st->keys_checked += checked;

    /* After a failed growth the keys before the failing batch were added; the client
     * learns of the failure only. */
    if (rc != SBF_OK) {
        cmdlib_lib_error(res, rc);
        return CMD_DONE;
    }
    return durable_reply(srv, pos, res, later);
}

static void clear_exclusive(struct filter *f, void *arg)
{
    (void)arg;
    f->ops->clear(f->obj);
    filter_touch(f);
}

/*
 * Below this many bytes a filter nobody else holds is emptied in place; a larger one gets
 * a fresh object (mapped, zeroed lazily by the kernel: no pass over its bytes) and the
 * old one is freed on the job thread, so CLEAR costs the loop no time per byte.
 */
#define CLEAR_IN_PLACE_BYTES ((uint64_t)1 << 20)

/* Empties f, in place or by swapping in a fresh object; takes over the caller's
 * reference. Returns 0 or an sbf_err. */
static int clear_filter(struct server *srv, struct filter *f)
{
    struct kind_info info = {0};
    f->ops->info(f->obj, &info);
    /* registry_with_exclusive wants exactly one reference of ours. */
    if (info.bytes < CLEAR_IN_PLACE_BYTES &&
        registry_with_exclusive(srv->reg, f, clear_exclusive, NULL)) {
        filter_unref(f);
        return SBF_OK;
    }
    /* Large, or a snapshot holds f and may be reading its bits: swap in a fresh object. */
    void *obj;
    int rc = f->ops->create_like(f->obj, &srv->budget.sbf, &obj);
    if (rc == SBF_OK)
        rc = cmdlib_replace(srv, f, obj);
    offload_release(srv, &f, 1, NULL, NULL); /* ours may be the last reference now */
    return rc;
}

/* CLEAR with no name: every filter (memcached's flush_all). */
static void clear_all(struct server *srv, struct result *res)
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
            rc = clear_filter(srv, all[i]);
        else
            filter_unref(all[i]);
    }
    free(all);
    if (rc != SBF_OK)
        cmdlib_lib_error(res, rc);
    else
        result_set(res, RESULT_OK, NULL);
}

static void cmd_clear(struct server *srv, const struct proto_request *req, struct result *res)
{
    if (req->name.len == 0) {
        clear_all(srv, res);
        return;
    }
    struct filter *f = cmdlib_lookup(srv, req->name);
    if (f == NULL) {
        cmdlib_not_found(res, req->name);
        return;
    }
    int rc = clear_filter(srv, f);
    if (rc != SBF_OK)
        cmdlib_lib_error(res, rc);
    else
        result_set(res, RESULT_OK, NULL);
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
    if (!registry_remove(srv->reg, req->name.ptr, req->name.len)) {
        cmdlib_not_found(res, req->name);
        return CMD_DONE;
    }
    if (srv->snap == NULL) {
        result_set(res, RESULT_DELETED, NULL);
        return CMD_DONE;
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
    if (durable_check(srv, res) != 0)
        return -1;
    cmd_create(srv, &req, res);
    res->count = 0; /* cmd_create leaves the journal position there */
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
    if (req->cmd == PROTO_CMD_ADD)
        cmd_add(srv, st, req, res, NULL);
    else
        cmd_check(srv, st, req, res, req->cmd == PROTO_CMD_CHECKADD, NULL);
}

void commands_execute_run(struct server *srv, struct stats *st, const struct proto_request *reqs,
                          size_t n, struct result *res, commands_each_fn each, void *ctx)
{
    enum proto_cmd cmd = reqs[0].cmd;
    st->commands += n;
    st->cmd[cmd] += n;
    if (cmd != PROTO_CMD_CHECK && durable_check(srv, res) != 0) {
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
        total += hash_keys(&reqs[i], &rest, h + total, COMMANDS_BATCH - total);
        assert(rest.len == 0 || total == COMMANDS_BATCH);
    }
    int rc = SBF_OK;
    if (cmd == PROTO_CMD_CHECK)
        f->ops->check_batch(f->obj, h, total, bits);
    else {
        rc = f->ops->checkadd_batch(f->obj, h, total, bits); /* ADD is CHECKADD, counted */
        note_adds(f, h, total);
    }
    /* Journaled before any reply: the keys that were new (all of them after a failure).
     * Runs are never merged when replies wait for the journal (durable_holds). */
    if (cmd != PROTO_CMD_CHECK)
        journal_keys(srv, f, h, total, rc == SBF_OK ? bits : NULL);
    size_t done = rc == SBF_OK ? total : processed(f, h, total); /* keys [0, done) */
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
            filter_count_keys(f, m, a);
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
    if (added > 0)
        filter_touch(f);
    filter_unref(f);
    /* The rest run alone, exactly as without merging (growth may fail again, or not). */
    while (++i < n) {
        result_reset(res);
        run_alone(srv, st, &reqs[i], res);
        each(ctx, i, res);
    }
}

int commands_execute(struct server *srv, struct stats *st, const struct proto_request *req,
                     struct result *res, struct completion *later)
{
    st->commands++;
    st->cmd[req->cmd]++;
    switch (req->cmd) {
    case PROTO_CMD_CREATE:
        if (durable_check(srv, res) != 0)
            return CMD_DONE;
        cmd_create(srv, req, res);
        if (res->status == RESULT_CREATED) {
            uint64_t pos = res->count;
            res->count = 0;
            return durable_reply(srv, pos, res, later);
        }
        break;
    case PROTO_CMD_ADD:
        return cmd_add(srv, st, req, res, later);
    case PROTO_CMD_CHECK:
        return cmd_check(srv, st, req, res, false, later);
    case PROTO_CMD_CHECKADD:
        return cmd_check(srv, st, req, res, true, later);
    case PROTO_CMD_UNION:
    case PROTO_CMD_INTERSECT:
        if (durable_check(srv, res) != 0)
            return CMD_DONE;
        return setop_execute(srv, req, res, later) ? CMD_PENDING : CMD_DONE;
    case PROTO_CMD_INFO:
        cmd_info(srv, req, res);
        break;
    case PROTO_CMD_LIST:
        cmd_list(srv, req, res);
        break;
    case PROTO_CMD_DROP: {
        if (durable_check(srv, res) != 0)
            return CMD_DONE;
        int r = cmd_drop(srv, req, res, later);
        if (r == CMD_PENDING || res->status == RESULT_DELETED) /* gone from the table */
            journal_named(srv, JOURNAL_DROP, req->name);
        return r;
    }
    case PROTO_CMD_CLEAR:
        if (durable_check(srv, res) != 0)
            return CMD_DONE;
        cmd_clear(srv, req, res);
        if (res->status == RESULT_OK)
            return durable_reply(srv, journal_clear(srv, req->name), res, later);
        break;
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
    case PROTO_CMD_QUIT:
        result_set(res, RESULT_CLOSE, NULL);
        break;
    case PROTO_CMD_AUTH:
        /* Authentication is a connection's state: conn.c answers AUTH before it gets here. */
        result_set(res, RESULT_CLIENT_ERROR, "AUTH is not available on this listener");
        break;
    }
    return CMD_DONE;
}
