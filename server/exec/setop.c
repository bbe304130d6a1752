/*
 * setop.c - UNION and INTERSECT. Workload: few operations, each over up to 64 filters of
 * up to gigabytes, while clients keep adding to them; the loop must never spend long on
 * one. Small operations run at once on the loop, as they always did; the others build
 * their result on the job thread:
 *
 *   start (loop)  the checks of the immediate path by name, references to dst and the
 *                 sources, dst->setop set so that adds to dst are logged; the job posted.
 *   job (thread)  a fresh object: a copy of dst (or of the first source when dst is
 *                 missing), then each source merged or intersected in. dst and the
 *                 sources are only read, as the src of merge/intersect, which kind.h
 *                 allows beside their writer on the loop.
 *   done (loop)   if dst and every source are still the filters the table holds, no
 *                 DELETE hit any of them and the log did not overflow, the logged adds go into
 *                 the fresh object, which replaces dst (or is installed), and the
 *                 operation is journaled; otherwise it starts again from the filters as
 *                 they are now, at most SETOP_ROUNDS times.
 *
 * So the result is (dst at the start, op, the sources as read) plus every add made to dst
 * meanwhile; a source key added during the job may or may not be in it. One operation
 * per destination name runs at a time: later ones wait behind it, in order.
 *
 * Journal rule: a background operation is journaled when its result is swapped in (on
 * the loop, position Q), never when it is accepted: one that fails or starts again leaves
 * no record. The adds made to dst during the job were journaled as they came (before Q);
 * for INTERSECT the add log is journaled again right after the record, so replay gives
 * ((dst + adds) & sources at Q) + adds: every key the live result holds (sources only
 * gain keys between the start and Q, or the operation would have started again). Under
 * `durability always` the reply waits for the last of these records.
 */
#include "server/exec/setop.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/kind.h"
#include "server/core/jobs.h"
#include "server/core/park.h"
#include "server/core/server.h"
#include "server/exec/cmdlib.h"
#include "server/exec/mutate.h"
#include "server/store/offload.h"
#include "server/store/registry.h"

/* Times an operation starts again because its filters changed under it, at most. */
#define SETOP_ROUNDS 4

/* Adds to dst logged during a job, at most (16 bytes each); past it: start again. */
#define SETOP_LOG_MAX ((size_t)1 << 20)

/* A background operation. Owned by the loop; by its job while that is queued or running. */
struct setop {
    struct mutate_sources s; /* names point into src_names */
    struct server *srv;
    struct completion *later;
    char dst_name[PROTO_MAX_NAME + 1];
    size_t dst_len;
    char src_names[MUTATE_MAX_SOURCES][PROTO_MAX_NAME + 1];
    struct filter *dst;         /* dst when the job was posted (a reference), or NULL */
    const struct kind_ops *ops; /* the result's kind */
    void *fresh;                /* the result, built by the job */
    struct sbf_hash *log;       /* adds to dst during the job (loop thread only) */
    size_t nlog, caplog;
    bool redo;                   /* the log cannot stand for what happened to dst */
    unsigned rounds;             /* times it started again */
    struct setop *next;          /* srv->setops: the operations under way */
    struct setop *qhead, *qtail; /* waiting behind this one (same dst), oldest first */
    struct setop *wait_next;     /* in such a queue */
};

struct setop_job {
    struct job job;   /* first member */
    struct setop *op; /* NULL once done() took it back */
};

/* ---- the checks and the immediate path ---- */

/* Source names: from a request's arguments, or (op not NULL) from an operation's copies. */
struct name_iter {
    struct proto_slice rest;
    const struct setop *op;
    size_t i;
};

static bool next_name(void *ctx, struct proto_slice *name)
{
    struct name_iter *it = ctx;
    if (it->op == NULL)
        return proto_next_arg(&it->rest, name);
    if (it->i == it->op->s.n)
        return false;
    const char *nm = it->op->src_names[it->i++];
    *name = (struct proto_slice){nm, strlen(nm)};
    return true;
}

/* Bytes of filter memory the operation reads: dst's and each distinct source's. */
static size_t involved_bytes(const struct mutate_sources *s, const struct filter *dst)
{
    struct kind_info info;
    size_t sum = 0;
    if (dst != NULL) {
        dst->ops->info(dst->obj, &info);
        sum += info.bytes;
    }
    for (size_t i = 0; i < s->n; i++) {
        if (s->src[i] != NULL) {
            s->src[i]->ops->info(s->src[i]->obj, &info);
            sum += info.bytes;
        }
    }
    return sum;
}

/* The immediate path: res set, *pos the record's position. */
static void now(struct server *srv, struct proto_slice dst_name, struct mutate_sources *s,
                struct filter *dst, struct result *res, uint64_t *pos)
{
    int rc = mutate_setop(srv, dst_name, s, dst, pos);
    if (rc != SBF_OK)
        cmdlib_lib_error(res, rc);
    else
        result_set(res, RESULT_OK, NULL);
}

/* ---- background operations ---- */

static struct proto_slice dst_of(const struct setop *op)
{
    return (struct proto_slice){op->dst_name, op->dst_len};
}

static struct setop *find_active(struct server *srv, struct proto_slice name)
{
    for (struct setop *op = srv->setops; op != NULL; op = op->next)
        if (op->dst_len == name.len && memcmp(op->dst_name, name.ptr, name.len) == 0)
            return op;
    return NULL;
}

static void unlink_active(struct setop *op)
{
    struct setop **pp = &op->srv->setops;
    while (*pp != NULL && *pp != op)
        pp = &(*pp)->next;
    if (*pp == op)
        *pp = op->next;
    op->next = NULL;
}

/* Copies the names of the sources s found into op (a new round's are there already). */
static void keep_names(struct setop *op, const struct mutate_sources *s)
{
    op->s.n = s->n;
    for (size_t i = 0; i < s->n; i++) {
        memmove(op->src_names[i], s->names[i].ptr, s->names[i].len);
        op->src_names[i][s->names[i].len] = '\0';
        op->s.names[i] = (struct proto_slice){op->src_names[i], s->names[i].len};
    }
}

/* Lets go of the references and the result of the current round, off the loop. */
static void release_round(struct setop *op)
{
    if (op->dst != NULL && op->dst->setop == op)
        op->dst->setop = NULL;
    struct filter *refs[MUTATE_MAX_SOURCES + 1];
    size_t n = 0;
    refs[n++] = op->dst;
    for (size_t i = 0; i < op->s.n; i++)
        refs[n++] = op->s.src[i];
    offload_release(op->srv, refs, n, op->ops, op->fresh); /* gone once posted */
    op->dst = NULL;
    op->fresh = NULL;
    memset(op->s.src, 0, sizeof op->s.src);
    free(op->log);
    op->log = NULL;
    op->nlog = op->caplog = 0;
}

/* Frees op and everything waiting behind it (shutdown), unanswered. */
static void op_free(struct setop *op)
{
    while (op != NULL) {
        struct setop *w = op->qhead;
        if (w != NULL) { /* the waiters inherit the rest of the queue */
            w->qhead = w->wait_next;
            w->qtail = w->qhead != NULL ? op->qtail : NULL;
        }
        unlink_active(op);
        release_round(op);
        free(op);
        op = w;
    }
}

static void job_run(struct job *job)
{
    struct setop *op = ((struct setop_job *)job)->op;
    struct filter *base = op->dst != NULL ? op->dst : op->s.src[0];
    op->s.skip = base;
    op->s.rc = mutate_copy(op->srv, base, &op->fresh);
    if (op->s.rc == SBF_OK)
        mutate_setop_apply(base->ops, op->fresh, &op->s);
    if (op->s.rc != SBF_OK && op->fresh != NULL) {
        base->ops->free(op->fresh);
        op->fresh = NULL;
    }
}

static void job_done(struct job *job);
static void note_adds(struct filter *f, const struct sbf_hash *h, size_t n);
static void note_delete(struct server *srv, const struct filter *f);

static const struct mutate_watch watch = {.added = note_adds, .removed = note_delete};

static void job_free(struct job *job)
{
    struct setop_job *j = (struct setop_job *)job;
    op_free(j->op); /* still set only when done() was skipped: the server is stopping */
    free(j);
}

/*
 * Starts op (mutate_setop_prepare() passed: s and dst): posts its job and returns true; or, when it
 * turns out small or cannot be posted, finishes it at once and returns false with res and
 * *pos set.
 */
static bool post(struct setop *op, struct mutate_sources *s, struct filter *dst, struct result *res,
                 uint64_t *pos)
{
    struct server *srv = op->srv;
    struct setop_job *j = NULL;
    if (srv->lanes[JOBS_LONG] == NULL || involved_bytes(s, dst) < SETOP_BACKGROUND_BYTES ||
        (j = calloc(1, sizeof *j)) == NULL) {
        now(srv, dst_of(op), s, dst, res, pos);
        return false;
    }
    op->s = *s;
    keep_names(op, s);
    op->dst = dst;
    op->ops = dst != NULL ? dst->ops : s->src[0]->ops;
    op->redo = false;
    if (dst != NULL)
        dst->setop = op;
    mutate_set_watch(srv, &watch);
    j->job = (struct job){.run = job_run, .done = job_done, .free = job_free};
    j->op = op;
    jobs_post(srv->lanes[JOBS_LONG], &j->job);
    return true;
}

/* Starts op from its names (a waiter, or a new round): as post(). */
static bool restart(struct setop *op, struct result *res, uint64_t *pos)
{
    struct mutate_sources s = {.intersect = op->s.intersect};
    struct name_iter it = {.op = op};
    struct filter *dst;
    if (!mutate_setop_prepare(op->srv, next_name, &it, dst_of(op), &s, &dst, res))
        return false;
    return post(op, &s, dst, res, pos);
}

/* True if dst and every source of op are still the filters the table holds. */
static bool still_current(const struct setop *op)
{
    struct registry *reg = op->srv->reg;
    struct filter *f = registry_get(reg, op->dst_name, op->dst_len);
    bool ok = f == op->dst;
    filter_unref(f);
    for (size_t i = 0; i < op->s.n && ok; i++) {
        const struct filter *src = op->s.src[i];
        if (src == NULL)
            continue;
        f = registry_get(reg, src->name, src->name_len);
        ok = f == src;
        filter_unref(f);
    }
    return ok;
}

/* The job's result becomes dst: the logged adds applied, swapped in, journaled. */
static void commit(struct setop *op, struct result *res, uint64_t *pos)
{
    void *fresh = op->fresh;
    op->fresh = NULL;
    uint64_t seed = op->dst != NULL ? op->dst->seed : op->s.src[0]->seed;
    int rc = mutate_setop_swap(op->srv, &op->s, dst_of(op), op->dst, op->ops, seed, fresh, op->log,
                               op->nlog, pos);
    if (rc != SBF_OK)
        cmdlib_lib_error(res, rc);
    else
        result_set(res, RESULT_OK, NULL);
}

/* Answers op, frees it and starts what waited behind it, in order. */
static void finish(struct setop *op, struct result *res, uint64_t pos)
{
    while (op != NULL) {
        struct server *srv = op->srv;
        if (!mutate_reply(srv, pos, res, op->later))
            op->later->done(op->later, res); /* may execute more requests: op stays listed */
        struct setop *w = op->qhead;
        if (w != NULL) {
            w->qhead = w->wait_next;
            w->qtail = w->qhead != NULL ? op->qtail : NULL;
            w->wait_next = NULL;
            w->next = srv->setops;
            srv->setops = w;
        }
        op->qhead = op->qtail = NULL;
        unlink_active(op);
        release_round(op);
        free(op);
        op = w;
        result_reset(res);
        pos = 0;
        if (op != NULL && restart(op, res, &pos))
            return;
    }
}

static void job_done(struct job *job)
{
    struct setop_job *j = (struct setop_job *)job;
    struct setop *op = j->op;
    j->op = NULL;
    if (op->dst != NULL)
        op->dst->setop = NULL;
    struct result res;
    result_init(&res);
    uint64_t pos = 0;
    bool again = op->s.rc == SBF_EGROWN || op->redo || !still_current(op);
    if (!again && op->s.rc == SBF_OK) {
        commit(op, &res, &pos);
    } else if (!again) {
        cmdlib_lib_error(&res, op->s.rc);
    } else if (++op->rounds == SETOP_ROUNDS) {
        result_set(&res, RESULT_SERVER_ERROR,
                   "the filters kept changing during the operation; nothing was changed, "
                   "try again");
    } else {
        release_round(op);
        if (restart(op, &res, &pos)) {
            result_free(&res);
            return;
        }
    }
    finish(op, &res, pos);
    result_free(&res);
}

/* The log cannot stand for what happened: the operation starts again once its job ends. */
static void redo(struct setop *op)
{
    op->redo = true;
    free(op->log);
    op->log = NULL;
    op->nlog = op->caplog = 0;
}

/* ---- the entry points ---- */

bool setop_execute(struct server *srv, const struct proto_request *req, struct result *res,
                   struct completion *later)
{
    struct mutate_sources s = {.intersect = req->cmd == PROTO_CMD_INTERSECT};
    struct name_iter it = {.rest = req->args};
    struct filter *dst;
    uint64_t pos = 0;
    if (!mutate_setop_prepare(srv, next_name, &it, req->name, &s, &dst, res))
        return false;
    struct setop *active = find_active(srv, req->name);
    struct setop *op = NULL;
    if (later == NULL ||
        (active == NULL &&
         (srv->lanes[JOBS_LONG] == NULL || involved_bytes(&s, dst) < SETOP_BACKGROUND_BYTES)) ||
        (op = calloc(1, sizeof *op)) == NULL) {
        now(srv, req->name, &s, dst, res, &pos);
        if (active != NULL) /* nobody to answer later, or no memory: dst changed under it */
            redo(active);
        return res->status == RESULT_OK && mutate_reply(srv, pos, res, later);
    }
    op->srv = srv;
    op->later = later;
    op->s.intersect = s.intersect;
    memcpy(op->dst_name, req->name.ptr, req->name.len);
    op->dst_len = req->name.len;
    if (active != NULL) {
        /* Behind the one under way: it starts from its names once that one answered. */
        keep_names(op, &s);
        mutate_setop_release(&s);
        filter_unref(dst);
        if (active->qtail != NULL)
            active->qtail->wait_next = op;
        else
            active->qhead = op;
        active->qtail = op;
        return true;
    }
    op->next = srv->setops;
    srv->setops = op;
    if (post(op, &s, dst, res, &pos))
        return true;
    unlink_active(op);
    free(op);
    return res->status == RESULT_OK && mutate_reply(srv, pos, res, later);
}

/* Keys h[0..n) were added to f, the destination of a background operation (f->setop). */
static void note_adds(struct filter *f, const struct sbf_hash *h, size_t n)
{
    struct setop *op = f->setop;
    if (op->redo)
        return;
    if (op->nlog + n > op->caplog) {
        size_t cap = op->caplog > 0 ? op->caplog : 1024;
        while (cap < op->nlog + n)
            cap *= 2;
        struct sbf_hash *grown = NULL;
        if (cap <= SETOP_LOG_MAX)
            grown = realloc(op->log, cap * sizeof *grown);
        if (grown == NULL) { /* too many, or no memory: the log cannot stand for them */
            redo(op);
            return;
        }
        op->log = grown;
        op->caplog = cap;
    }
    memcpy(op->log + op->nlog, h, n * sizeof *h);
    op->nlog += n;
}

/* A DELETE hit f: an operation reading it starts again (a log of adds cannot stand for a
 * removal). */
static void note_delete(struct server *srv, const struct filter *f)
{
    for (struct setop *op = srv->setops; op != NULL; op = op->next) {
        bool reads = op->dst == f;
        for (size_t i = 0; i < op->s.n && !reads; i++)
            reads = op->s.src[i] == f;
        if (reads)
            redo(op);
    }
}
