/*
 * commands.c - one function per protocol command. Key commands are the hot path (many
 * millions of keys/s): keys are hashed into a stack array COMMANDS_BATCH at a time and
 * handed to the lib batch calls, which prefetch every block before probing; nothing is
 * allocated per request. Filters are looked up once per request.
 */
#include "server/commands.h"

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/sbf.h"
#include "server/registry.h"
#include "server/server.h"
#include "server/snapshot.h"

#define ERR_CLIENT "CLIENT_ERROR"
#define ERR_SERVER "SERVER_ERROR"

static struct filter *lookup(struct server *srv, struct proto_slice name)
{
    return registry_get(srv->reg, name.ptr, name.len);
}

/* The reply to a failed lib call that grows or creates filter bits. */
static void reply_sbf_error(struct proto_buf *out, int err)
{
    if (err == SBF_ENOMEM)
        proto_reply_error(out, ERR_SERVER, "out of memory");
    else if (err == SBF_ELIMIT)
        proto_reply_error(out, ERR_SERVER, "filter cannot grow: stage limit reached");
    else if (err == SBF_EINCOMPAT)
        proto_reply_error(out, ERR_CLIENT, "incompatible filters");
    else if (err == SBF_EGROWN)
        proto_reply_error(out, ERR_CLIENT, "cannot intersect grown filters (more than one stage)");
    else
        proto_reply_error(out, ERR_SERVER, sbf_strerror(err));
}

/*
 * Wraps a new sbf in a filter object and puts it in the table. Returns 0, or SBF_ENOMEM
 * with s freed. On success *out is borrowed from the table.
 */
static int install(struct server *srv, struct proto_slice name, struct sbf *s, struct filter **out)
{
    struct filter *f = filter_new(name.ptr, name.len, s);
    if (f == NULL) {
        sbf_free(s);
        return SBF_ENOMEM;
    }
    int rc = registry_put(srv->reg, f);
    filter_unref(f); /* the table holds it now, or nobody does */
    if (rc != REGISTRY_OK)
        return SBF_ENOMEM;
    *out = f;
    return 0;
}

/*
 * Puts a new object holding s in place of f in the table, for when another thread (a
 * snapshot) may be reading f's bits. Returns 0, or SBF_ENOMEM with s freed and f still
 * in place. On success *out is the new object, borrowed from the table.
 */
static int replace(struct server *srv, struct filter *f, struct sbf *s, struct filter **out)
{
    struct filter *fresh = filter_new(f->name, f->name_len, s);
    if (fresh == NULL) {
        sbf_free(s);
        return SBF_ENOMEM;
    }
    registry_replace(srv->reg, f, fresh);
    filter_unref(fresh); /* the table holds it now */
    *out = fresh;
    return 0;
}

static void cmd_create(struct server *srv, const struct proto_request *req, struct proto_buf *out)
{
    const struct proto_create *o = &req->create;
    struct sbf_params p;
    sbf_params_default(&p);
    p.capacity = srv->cfg.default_capacity;
    p.error = srv->cfg.default_error;
    if (o->set & PROTO_OPT_CAPACITY)
        p.capacity = o->capacity;
    if (o->set & PROTO_OPT_ERROR)
        p.error = o->error;
    if (o->set & PROTO_OPT_GROWTH)
        p.growth = o->growth == PROTO_GROWTH_LINEAR ? SBF_GROWTH_LINEAR : SBF_GROWTH_EXPONENTIAL;
    if (o->set & PROTO_OPT_SCALE)
        p.scale = o->scale;
    if (o->set & PROTO_OPT_RATIO)
        p.ratio = o->ratio;

    if (!(p.scale >= 1 && p.scale <= 64)) {
        proto_reply_error(out, ERR_CLIENT, "scale must be between 1 and 64");
        return;
    }
    if (sbf_params_check(&p) != SBF_OK) {
        proto_reply_error(out, ERR_CLIENT, "invalid filter parameters");
        return;
    }
    if (lookup(srv, req->name) != NULL) {
        proto_reply_word(out, "EXISTS");
        return;
    }
    struct sbf *s;
    int rc = sbf_new(&p, &srv->budget.sbf, &s);
    struct filter *f;
    if (rc == SBF_OK)
        rc = install(srv, req->name, s, &f);
    if (rc != SBF_OK) {
        reply_sbf_error(out, rc);
        return;
    }
    proto_reply_word(out, "CREATED");
}

static void cmd_add(struct server *srv, const struct proto_request *req, struct proto_buf *out)
{
    struct filter *f = lookup(srv, req->name);
    if (f == NULL) {
        proto_reply_word(out, "NOT_FOUND");
        return;
    }
    struct sbf_hash h[COMMANDS_BATCH];
    struct proto_slice rest = req->args, key;
    uint64_t added = 0;
    int rc = SBF_OK;
    bool more = true;
    while (more && rc == SBF_OK) {
        size_t n = 0;
        while (n < COMMANDS_BATCH && (more = proto_next_arg(&rest, &key)))
            h[n++] = sbf_hash_key(key.ptr, key.len);
        size_t k = 0;
        if (n > 0)
            rc = sbf_add_batch(f->sbf, h, n, &k);
        added += k;
    }
    if (added > 0)
        filter_touch(f);
    srv->stats.keys_added += added;
    if (rc != SBF_OK)
        reply_sbf_error(out, rc);
    else
        proto_reply_count(out, "ADDED", added);
}

/* CHECK and CHECKADD: one "0"/"1" per key on one line. */
static void cmd_check(struct server *srv, const struct proto_request *req, struct proto_buf *out,
                      bool add)
{
    struct filter *f = lookup(srv, req->name);
    if (f == NULL) {
        proto_reply_word(out, "NOT_FOUND");
        return;
    }
    struct sbf_hash h[COMMANDS_BATCH];
    bool bits[COMMANDS_BATCH];
    struct proto_slice rest = req->args, key;
    size_t mark = out->len; /* to take back a half-written line if growth fails */
    uint64_t added = 0, checked = 0;
    int rc = SBF_OK;
    bool more = true, first = true;
    while (more && rc == SBF_OK) {
        size_t n = 0;
        while (n < COMMANDS_BATCH && (more = proto_next_arg(&rest, &key)))
            h[n++] = sbf_hash_key(key.ptr, key.len);
        if (n == 0)
            break;
        if (add) {
            rc = sbf_checkadd_batch(f->sbf, h, n, bits);
            if (rc != SBF_OK)
                break;
            for (size_t i = 0; i < n; i++)
                added += !bits[i];
        } else {
            sbf_check_batch(f->sbf, h, n, bits);
        }
        checked += n;
        proto_reply_bits(out, bits, n, first);
        first = false;
    }
    if (added > 0)
        filter_touch(f);
    srv->stats.keys_added += added;
    srv->stats.keys_checked += checked;
    if (rc != SBF_OK) {
        /* Keys before the failing batch were added; the client learns of the failure only. */
        if (out->len > mark)
            out->len = mark;
        reply_sbf_error(out, rc);
        return;
    }
    proto_reply_end(out);
}

struct setop {
    struct proto_slice srcs; /* the source names */
    struct filter *skip;     /* a source whose bits are there already (dst, or its copy) */
    struct registry *reg;
    bool intersect;
    int rc;
};

/* Applies every source to s; sources were checked to exist and be compatible. */
static void apply_sources(struct sbf *s, void *arg)
{
    struct setop *op = arg;
    struct proto_slice rest = op->srcs, name;
    while (op->rc == SBF_OK && proto_next_arg(&rest, &name)) {
        struct filter *src = registry_get(op->reg, name.ptr, name.len);
        if (src == op->skip)
            continue;
        op->rc = op->intersect ? sbf_intersect(s, src->sbf) : sbf_union(s, src->sbf);
    }
}

/* A new filter holding a copy of src's bits. Returns 0 or an sbf_err. */
static int copy_sbf(struct server *srv, const struct sbf *src, struct sbf **out)
{
    int rc = sbf_new(sbf_params(src), &srv->budget.sbf, out);
    if (rc != SBF_OK)
        return rc;
    rc = sbf_union(*out, src);
    if (rc != SBF_OK) {
        sbf_free(*out);
        *out = NULL;
    }
    return rc;
}

static bool grown(const struct filter *f)
{
    struct sbf_info info;
    sbf_info(f->sbf, &info);
    return info.stages > 1;
}

static void cmd_setop(struct server *srv, const struct proto_request *req, struct proto_buf *out,
                      bool intersect)
{
    struct proto_slice rest = req->args, name;
    struct filter *first = NULL;
    bool any_grown = false;
    while (proto_next_arg(&rest, &name)) {
        struct filter *src = lookup(srv, name);
        if (src == NULL) {
            proto_reply_word(out, "NOT_FOUND");
            return;
        }
        if (first == NULL)
            first = src;
        else if (!sbf_compatible(first->sbf, src->sbf))
            goto incompatible;
        any_grown |= grown(src);
    }
    if (first == NULL) { /* the parser guarantees a source; stay safe anyway */
        proto_reply_error(out, ERR_CLIENT, "no source filters");
        return;
    }
    struct filter *dst = lookup(srv, req->name);
    if (dst != NULL && !sbf_compatible(dst->sbf, first->sbf))
        goto incompatible;
    if (intersect && (any_grown || (dst != NULL && grown(dst))))
        goto grown;

    struct setop op = {
        .srcs = req->args, .skip = dst, .reg = srv->reg, .intersect = intersect, .rc = SBF_OK};
    struct sbf *fresh = NULL;
    if (dst == NULL) {
        /* A missing destination starts as a copy of the first source: skip applying it. */
        op.skip = first;
        op.rc = copy_sbf(srv, first->sbf, &fresh);
        if (op.rc == SBF_OK)
            apply_sources(fresh, &op);
        if (op.rc == SBF_OK)
            op.rc = install(srv, req->name, fresh, &dst);
        else
            sbf_free(fresh);
    } else if (!intersect) {
        /* Union only sets bits, which readers may watch happen. */
        apply_sources(dst->sbf, &op);
        filter_touch(dst);
    } else if (registry_with_exclusive(srv->reg, dst, apply_sources, &op)) {
        filter_touch(dst);
    } else {
        /* Someone (a snapshot) is reading dst: intersect a copy and swap it in. */
        op.rc = copy_sbf(srv, dst->sbf, &fresh);
        if (op.rc == SBF_OK)
            apply_sources(fresh, &op);
        if (op.rc == SBF_OK)
            op.rc = replace(srv, dst, fresh, &dst);
        else
            sbf_free(fresh);
    }
    if (op.rc != SBF_OK) {
        reply_sbf_error(out, op.rc);
        return;
    }
    proto_reply_word(out, "OK");
    return;
incompatible:
    reply_sbf_error(out, SBF_EINCOMPAT);
    return;
grown:
    /* Checked before anything changes: lib would refuse too, but maybe after a first source. */
    reply_sbf_error(out, SBF_EGROWN);
}

static void sbf_clear_cb(struct sbf *s, void *arg)
{
    (void)arg;
    sbf_clear(s);
}

static void cmd_clear(struct server *srv, const struct proto_request *req, struct proto_buf *out)
{
    struct filter *f = lookup(srv, req->name);
    if (f == NULL) {
        proto_reply_word(out, "NOT_FOUND");
        return;
    }
    if (!registry_with_exclusive(srv->reg, f, sbf_clear_cb, NULL)) {
        /* A snapshot holds f and may be reading its bits: swap in a fresh object. */
        struct sbf *s;
        int rc = sbf_new(sbf_params(f->sbf), &srv->budget.sbf, &s);
        if (rc == SBF_OK)
            rc = replace(srv, f, s, &f);
        if (rc != SBF_OK) {
            reply_sbf_error(out, rc);
            return;
        }
    }
    filter_touch(f);
    proto_reply_word(out, "OK");
}

static const char *growth_name(enum sbf_growth g)
{
    return g == SBF_GROWTH_LINEAR ? "linear" : "exponential";
}

static void cmd_info(struct server *srv, const struct proto_request *req, struct proto_buf *out)
{
    struct filter *f = lookup(srv, req->name);
    if (f == NULL) {
        proto_reply_word(out, "NOT_FOUND");
        return;
    }
    const struct sbf_params *p = sbf_params(f->sbf);
    struct sbf_info info;
    struct sbf_estimate est;
    sbf_info(f->sbf, &info);
    sbf_estimate(f->sbf, &est);
    const char *growth = growth_name(p->growth);
    proto_reply_stat_str(out, "name", (struct proto_slice){f->name, f->name_len});
    proto_reply_stat_u64(out, "capacity", p->capacity);
    proto_reply_stat_double(out, "error", p->error);
    proto_reply_stat_str(out, "growth", (struct proto_slice){growth, strlen(growth)});
    proto_reply_stat_double(out, "scale", p->scale);
    proto_reply_stat_double(out, "ratio", p->ratio);
    proto_reply_stat_u64(out, "stages", info.stages);
    proto_reply_stat_u64(out, "total_capacity", info.capacity);
    proto_reply_stat_u64(out, "bytes", info.bytes);
    proto_reply_stat_u64(out, "items", info.items);
    proto_reply_stat_double(out, "estimated_items", est.items);
    proto_reply_stat_double(out, "estimated_error", est.error);
    snapshot_write_info(f, out);
    proto_reply_word(out, "END");
}

static void cmd_list(struct server *srv, const struct proto_request *req, struct proto_buf *out)
{
    struct filter **all;
    size_t n;
    if (registry_collect(srv->reg, req->name.ptr, req->name.len, &all, &n) != REGISTRY_OK) {
        proto_reply_error(out, ERR_SERVER, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        struct sbf_info info;
        sbf_info(all[i]->sbf, &info);
        proto_reply_filter(out, (struct proto_slice){all[i]->name, all[i]->name_len}, info.items,
                           info.bytes, info.capacity, sbf_params(all[i]->sbf)->error);
        filter_unref(all[i]);
    }
    free(all);
    proto_reply_word(out, "END");
}

bool commands_runnable(const struct proto_request *req)
{
    return (req->cmd == PROTO_CMD_ADD || req->cmd == PROTO_CMD_CHECK ||
            req->cmd == PROTO_CMD_CHECKADD) &&
           req->nargs <= COMMANDS_RUN_KEYS;
}

bool commands_same_run(const struct proto_request *first, const struct proto_request *next)
{
    return commands_runnable(next) && next->cmd == first->cmd &&
           next->name.len == first->name.len &&
           memcmp(next->name.ptr, first->name.ptr, first->name.len) == 0;
}

void commands_execute_run(struct server *srv, const struct proto_request *reqs, size_t n,
                          struct proto_buf *out)
{
    enum proto_cmd cmd = reqs[0].cmd;
    srv->stats.commands += n;
    srv->stats.cmd[cmd] += n;
    struct filter *f = lookup(srv, reqs[0].name);
    if (f == NULL) {
        for (size_t i = 0; i < n; i++)
            proto_reply_word(out, "NOT_FOUND");
        return;
    }
    struct sbf_hash h[COMMANDS_BATCH];
    bool bits[COMMANDS_BATCH];
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        struct proto_slice rest = reqs[i].args, key;
        while (proto_next_arg(&rest, &key)) {
            assert(total < COMMANDS_BATCH);
            h[total++] = sbf_hash_key(key.ptr, key.len);
        }
    }
    int rc = SBF_OK;
    if (cmd == PROTO_CMD_CHECK)
        sbf_check_batch(f->sbf, h, total, bits);
    else
        rc = sbf_checkadd_batch(f->sbf, h, total, bits); /* ADD is CHECKADD, counted */
    /*
     * Keys [0, done) were processed. After a failed growth the failing key is the first
     * one still absent: every key before it was added, and the failure changed nothing.
     */
    size_t done = total;
    if (rc != SBF_OK) {
        done = 0;
        while (done < total && sbf_check(f->sbf, h[done]))
            done++;
    }
    uint64_t added = 0, checked = 0;
    size_t i = 0, k = 0;
    for (; i < n && k + reqs[i].nargs <= done; k += reqs[i++].nargs) {
        size_t m = reqs[i].nargs;
        uint64_t a = 0;
        if (cmd != PROTO_CMD_CHECK)
            for (size_t j = 0; j < m; j++)
                a += !bits[k + j];
        if (cmd == PROTO_CMD_ADD) {
            proto_reply_count(out, "ADDED", a);
        } else {
            proto_reply_bits(out, bits + k, m, true);
            proto_reply_end(out);
            checked += m;
        }
        added += a;
    }
    if (i < n) {
        /* Request i holds the failing key: its earlier keys were added, as in cmd_add. */
        for (size_t j = k; j < done; j++)
            added += !bits[j];
        reply_sbf_error(out, rc);
    }
    srv->stats.keys_checked += checked;
    srv->stats.keys_added += added;
    if (added > 0)
        filter_touch(f);
    /* The rest run alone, exactly as without merging (growth may fail again, or not). */
    while (++i < n) {
        if (cmd == PROTO_CMD_ADD)
            cmd_add(srv, &reqs[i], out);
        else
            cmd_check(srv, &reqs[i], out, true);
    }
}

int commands_execute(struct server *srv, const struct proto_request *req, struct proto_buf *out,
                     struct conn *conn)
{
    srv->stats.commands++;
    srv->stats.cmd[req->cmd]++;
    switch (req->cmd) {
    case PROTO_CMD_CREATE:
        cmd_create(srv, req, out);
        break;
    case PROTO_CMD_ADD:
        cmd_add(srv, req, out);
        break;
    case PROTO_CMD_CHECK:
        cmd_check(srv, req, out, false);
        break;
    case PROTO_CMD_CHECKADD:
        cmd_check(srv, req, out, true);
        break;
    case PROTO_CMD_UNION:
        cmd_setop(srv, req, out, false);
        break;
    case PROTO_CMD_INTERSECT:
        cmd_setop(srv, req, out, true);
        break;
    case PROTO_CMD_INFO:
        cmd_info(srv, req, out);
        break;
    case PROTO_CMD_LIST:
        cmd_list(srv, req, out);
        break;
    case PROTO_CMD_DROP:
        return snapshot_cmd_drop(srv, req->name, out, conn);
    case PROTO_CMD_CLEAR:
        cmd_clear(srv, req, out);
        break;
    case PROTO_CMD_FLUSH:
        return snapshot_cmd_flush(srv, req->name, out, conn);
    case PROTO_CMD_STATS:
        stats_write(srv, out);
        break;
    case PROTO_CMD_VERSION:
        proto_reply_word(out, "VERSION " BLOOMD_VERSION);
        break;
    case PROTO_CMD_QUIT:
        return CMD_CLOSE;
    }
    return CMD_DONE;
}
