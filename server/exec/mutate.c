/*
 * mutate.c - every change to the named filters, applied, journaled and positioned in
 * one place (see mutate.h). The add path is the hot one (millions of keys/s): one call
 * per batch of up to COMMANDS_BATCH keys, the kind's checkadd batch (hash once,
 * prefetch, probe), then one ADD_NEW record holding only the keys that were new.
 *
 * Replay rule (mutate_apply_record): a record about filter f is applied only if its
 * position is above the one f's snapshot covers (f->journal_pos). Adds, unions and
 * clears are idempotent, so a snapshot that caught a little more than it claims is
 * harmless (ADD_NEW keys it caught in an older stage count twice in items: see
 * sbf_add_batch_shard).
 */
#include "server/exec/mutate.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "lib/le.h"
#include "server/core/clock.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/exec/cmdlib.h"
#include "server/exec/replay_adds.h"
#include "server/persist/durable.h"
#include "server/persist/snapfile.h"
#include "server/persist/snapshot.h"
#include "server/store/advance.h"
#include "server/store/kinds.h"
#include "server/store/offload.h"
#include "server/store/registry.h"

/* A windowed filter's clock is journaled at most this often (ROTATE records). */
#define MUTATE_ROTATE_MS 50

/*
 * Below this many bytes a filter nobody else holds is emptied in place; a larger one gets
 * a fresh object (mapped, zeroed lazily by the kernel: no pass over its bytes) and the
 * old one is freed on the job lane, so CLEAR costs the loop no time per byte.
 */
#define CLEAR_IN_PLACE_BYTES ((uint64_t)1 << 20)

/* ---- the journal's side ---- */

int mutate_check(struct server *srv, struct result *res)
{
    if (srv->propagate != NULL && srv->propagate->check(srv, res) != 0)
        return -1;
    return durable_check(srv, res);
}

void mutate_set_propagate(struct server *srv, const struct mutate_propagate *p)
{
    srv->propagate = p;
}

bool mutate_holds(const struct server *srv)
{
    /* min_replica_acks: replies wait for replicas, even without a journal. */
    return durable_holds(srv) || srv->cfg.min_replica_acks > 0;
}

bool mutate_reply(struct server *srv, uint64_t pos, const struct result *res,
                  struct completion *later)
{
    if (srv->propagate != NULL && srv->propagate->hold(srv, pos, res, later))
        return true;
    return mutate_hold_journal(srv, pos, res, later);
}

bool mutate_hold_journal(struct server *srv, uint64_t pos, const struct result *res,
                         struct completion *later)
{
    return pos > srv->repl.delta && durable_hold(srv, pos - srv->repl.delta, res, later);
}

static struct journal_name jname(const struct filter *f)
{
    return (struct journal_name){f->name, f->name_len};
}

/* True when records are wanted: by the journal, or by replication. */
static bool recording(const struct server *srv)
{
    return durable_on(srv) || srv->propagate != NULL;
}

/*
 * Journals and propagates rec with the next offset; *pos becomes it. A record the journal
 * could not take (logged) is not propagated either: replicas hold what the disk holds.
 * While a record from elsewhere is applied (srv->applying), its parts are not recorded:
 * the stream records that record itself (apply_live).
 */
static void journal(struct server *srv, const struct journal_record *rec, uint64_t *pos)
{
    if (srv->applying || !recording(srv))
        return;
    uint64_t p;
    const void *frame = NULL;
    size_t n = 0;
    if (durable_on(srv)) {
        /* The journal's frame is the stream's when its positions are the offsets. */
        if (srv->propagate != NULL && srv->repl.delta == 0 && srv->propagate->frames(srv))
            p = durable_append_frame(srv, rec, &frame, &n);
        else
            p = durable_append(srv, rec);
        if (p == 0)
            return;
        p += srv->repl.delta;
    } else {
        p = srv->repl.offset + 1;
    }
    srv->repl.offset = p;
    if (srv->propagate != NULL)
        srv->propagate->record(srv, rec, p, frame, n);
    if (pos != NULL)
        *pos = p;
}

/* CREATE's parameter bytes: 8 little-endian fields, then (since the seeded format) the
 * seed; 64-byte parameters (older journals) mean seed 0. */
#define PARAMS_BYTES_V1 64
#define PARAMS_BYTES 72

static size_t encode_params(const struct kind_params *p, uint64_t seed, unsigned char *out)
{
    le_put64(out, p->sbf.capacity);
    le_put64(out + 8, le_f64_bits(p->sbf.error));
    le_put64(out + 16, (uint64_t)p->sbf.growth);
    le_put64(out + 24, le_f64_bits(p->sbf.scale));
    le_put64(out + 32, le_f64_bits(p->sbf.ratio));
    le_put64(out + 40, p->window_ms);
    le_put64(out + 48, p->generations);
    le_put64(out + 56, (uint64_t)p->now_ms);
    le_put64(out + 64, seed);
    return PARAMS_BYTES;
}

static int decode_params(const void *in, size_t n, struct kind_params *p, uint64_t *seed)
{
    const unsigned char *b = in;
    if (n != PARAMS_BYTES && n != PARAMS_BYTES_V1)
        return -1;
    *seed = n == PARAMS_BYTES ? le_get64(b + 64) : 0;
    uint64_t growth = le_get64(b + 16);
    if (growth > SBF_GROWTH_NONE || le_get64(b + 48) > UINT32_MAX)
        return -1;
    *p = (struct kind_params){
        .sbf = {.capacity = le_get64(b),
                .error = le_bits_f64(le_get64(b + 8)),
                .growth = (enum sbf_growth)growth,
                .scale = le_bits_f64(le_get64(b + 24)),
                .ratio = le_bits_f64(le_get64(b + 32))},
        .window_ms = le_get64(b + 40),
        .generations = (uint32_t)le_get64(b + 48),
        .now_ms = (int64_t)le_get64(b + 56),
    };
    return 0;
}

/* ---- putting objects into the table ---- */

/* A new filter named name holding obj (taken over), hashing with seed. Returns SBF_OK or
 * SBF_ENOMEM. */
static int install(struct server *srv, struct proto_slice name, const struct kind_ops *ops,
                   void *obj, uint64_t seed)
{
    int rc = registry_install(srv->reg, name.ptr, name.len, ops, obj, seed, true, NULL);
    return rc == REGISTRY_OK ? SBF_OK : SBF_ENOMEM;
}

/*
 * Puts a new filter holding obj in place of f, for when another thread (a snapshot) may
 * be reading f. Returns SBF_OK, or SBF_ENOMEM with obj freed and f in place.
 */
static int replace(struct server *srv, struct filter *f, void *obj, uint64_t seed)
{
    struct filter *fresh = filter_new(f->name, f->name_len, f->ops, obj);
    if (fresh == NULL) {
        f->ops->free(obj);
        return SBF_ENOMEM;
    }
    fresh->seed = seed;
    registry_replace(srv->reg, f, fresh);
    filter_unref(fresh); /* the table holds it now */
    return SBF_OK;
}

/* ---- the changes ---- */

/* Journals a filter made (CREATE) or put in place (RESTORE): its kind and parameters. */
static void journal_made(struct server *srv, enum journal_type type, struct proto_slice name,
                         const struct kind_ops *ops, const struct kind_params *p, uint64_t seed,
                         uint64_t *pos)
{
    unsigned char params[PARAMS_BYTES];
    struct journal_record rec = {.type = type,
                                 .name = {name.ptr, name.len},
                                 .kind_tag = ops->tag,
                                 .params = params,
                                 .nparams = encode_params(p, seed, params)};
    journal(srv, &rec, pos);
}

int mutate_create(struct server *srv, struct proto_slice name, const struct kind_ops *ops,
                  const struct kind_params *p, uint64_t seed, uint64_t *pos)
{
    void *obj;
    int rc = ops->create(p, &srv->budget.sbf, &obj);
    if (rc == SBF_OK)
        rc = install(srv, name, ops, obj, seed);
    if (rc != SBF_OK)
        return rc;
    journal_made(srv, JOURNAL_CREATE, name, ops, p, seed, pos);
    return SBF_OK;
}

void mutate_rotate(struct server *srv, struct filter *f, int64_t now_ms, uint64_t *pos)
{
    if (f->ops->advance == NULL)
        return;
    if (srv->phase == SERVER_STARTING)
        (void)f->ops->advance(f->obj, now_ms, NULL, NULL); /* no reader yet: freed at once */
    else
        advance_filter(srv, f, now_ms);
    if (!recording(srv) || (now_ms - f->rotated_ms < MUTATE_ROTATE_MS && now_ms >= f->rotated_ms))
        return;
    struct journal_record rec = {.type = JOURNAL_ROTATE, .name = jname(f), .time_ms = now_ms};
    journal(srv, &rec, pos);
    f->rotated_ms = now_ms;
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
 * (replay need not probe for them); without, all of them as ADD. */
static void journal_keys(struct server *srv, struct filter *f, const struct sbf_hash *h, size_t n,
                         const bool *bits, uint64_t *pos)
{
    if (!recording(srv))
        return;
    struct sbf_hash *fresh = NULL;
    struct sbf_hash stack[256];
    size_t m = n;
    if (bits != NULL) {
        fresh = n <= sizeof stack / sizeof stack[0] ? stack : malloc(n * sizeof *fresh);
        if (fresh == NULL) {
            bits = NULL; /* no room to pick the new ones: journal them all */
        } else {
            m = 0;
            for (size_t i = 0; i < n; i++)
                if (!bits[i])
                    fresh[m++] = h[i];
            h = fresh;
        }
    }
    for (size_t i = 0; i < m; i += JOURNAL_MAX_HASHES) {
        size_t k = m - i < JOURNAL_MAX_HASHES ? m - i : JOURNAL_MAX_HASHES;
        struct journal_record rec = {.type = bits != NULL ? JOURNAL_ADD_NEW : JOURNAL_ADD,
                                     .name = jname(f),
                                     .hashes = h + i,
                                     .nhashes = k};
        journal(srv, &rec, pos);
    }
    if (fresh != stack)
        free(fresh);
}

static const struct mutate_watch *watch_of(const struct server *srv)
{
    return srv->watch;
}

int mutate_add(struct server *srv, struct filter *f, const struct sbf_hash *h, size_t n, bool *bits,
               size_t *done, size_t *fresh, uint64_t *pos)
{
    if (f->ops->advance != NULL && recording(srv))
        mutate_rotate(srv, f, clock_window_ms(), pos); /* the ROTATE record goes first */
    int rc = f->ops->checkadd_batch(f->obj, h, n, bits);
    if (f->setop != NULL && watch_of(srv) != NULL)
        watch_of(srv)->added(f, h, n);
    /* After a failure the keys before the failing one were added; the whole batch is
     * journaled (replaying a few more keys is safe), except past a full filter that does
     * not grow: the refused key and those after it must stay out (and a client retrying
     * against it must not grow the journal), so only the d processed keys are. */
    size_t d = rc == SBF_OK ? n : processed(f, h, n), k = 0;
    for (size_t i = 0; i < d; i++)
        k += !bits[i];
    if (rc == SBF_EFULL)
        journal_keys(srv, f, h, d, bits, pos);
    else
        journal_keys(srv, f, h, n, rc == SBF_OK ? bits : NULL, pos);
    filter_count_keys(f, d, k);
    if (k > 0 || (rc != SBF_OK && rc != SBF_EFULL))
        filter_touch(f);
    *done = d;
    *fresh = k;
    return rc;
}

int mutate_delete(struct server *srv, struct filter *f, const struct sbf_hash *h, size_t n,
                  size_t *removed, uint64_t *pos)
{
    *removed = 0;
    if (f->ops->remove_batch == NULL)
        return SBF_ENOTSUP;
    int rc = f->ops->remove_batch(f->obj, h, n, removed);
    if (*removed == 0)
        return rc;
    if (watch_of(srv) != NULL) /* a removal cannot be replayed into a copy made meanwhile */
        watch_of(srv)->removed(srv, f);
    struct journal_record rec = {
        .type = JOURNAL_DELETE, .name = jname(f), .hashes = h, .nhashes = n};
    journal(srv, &rec, pos);
    filter_touch(f);
    return rc;
}

static void clear_exclusive(struct filter *f, void *arg)
{
    (void)arg;
    f->ops->clear(f->obj);
    filter_touch(f);
}

int mutate_clear(struct server *srv, struct filter *f, uint64_t *pos)
{
    struct kind_info info = {0};
    f->ops->info(f->obj, &info);
    struct journal_record rec = {.type = JOURNAL_CLEAR, .name = jname(f)};
    /* registry_with_exclusive wants exactly one reference of ours. */
    if (info.bytes < CLEAR_IN_PLACE_BYTES &&
        registry_with_exclusive(srv->reg, f, clear_exclusive, NULL)) {
        journal(srv, &rec, pos);
        filter_unref(f);
        return SBF_OK;
    }
    /* Large, or a snapshot holds f and may be reading its bits: swap in a fresh object. */
    void *obj;
    int rc = f->ops->create_like(f->obj, &srv->budget.sbf, &obj);
    if (rc == SBF_OK)
        rc = replace(srv, f, obj, f->seed);
    if (rc == SBF_OK)
        journal(srv, &rec, pos);
    offload_release(srv, &f, 1, NULL, NULL); /* ours may be the last reference now */
    return rc;
}

bool mutate_drop(struct server *srv, struct proto_slice name, uint64_t *pos)
{
    struct filter *f = registry_get(srv->reg, name.ptr, name.len);
    if (f != NULL && f->auto_created && srv->auto_filters > 0)
        srv->auto_filters--;
    filter_unref(f);
    if (!registry_remove(srv->reg, name.ptr, name.len))
        return false;
    struct journal_record rec = {.type = JOURNAL_DROP, .name = {name.ptr, name.len}};
    journal(srv, &rec, pos);
    return true;
}

int mutate_restore(struct server *srv, struct proto_slice name, const struct kind_ops *ops,
                   void *obj, uint64_t seed, bool replace_old, uint64_t *pos)
{
    struct kind_params p = {0};
    if (ops->params != NULL)
        ops->params(obj, &p); /* read before obj is shared */
    struct filter *old = registry_get(srv->reg, name.ptr, name.len);
    int rc;
    if (old != NULL && !replace_old) {
        offload_release(srv, &old, 1, ops, obj);
        return SBF_EINVAL;
    }
    if (old != NULL) {
        if (watch_of(srv) != NULL) /* a background copy of old must not land over this */
            watch_of(srv)->removed(srv, old);
        rc = replace(srv, old, obj, seed);
        offload_release(srv, &old, 1, NULL, NULL); /* ours may be the last reference */
    } else {
        rc = install(srv, name, ops, obj, seed);
    }
    if (rc != SBF_OK)
        return rc;
    journal_made(srv, JOURNAL_RESTORE, name, ops, &p, seed, pos);
    return SBF_OK;
}

/* ---- set operations ---- */

void mutate_set_watch(struct server *srv, const struct mutate_watch *w)
{
    srv->watch = w;
}

void mutate_setop_release(struct mutate_sources *s)
{
    for (size_t i = 0; i < s->n; i++)
        filter_unref(s->src[i]);
    s->n = 0;
}

/* Why a windowed filter takes no part in a set operation. */
#define WHY_WINDOWED                                                                               \
    "UNION and INTERSECT do not apply to windowed filters: their generations cover different "     \
    "spans of time, so no bitwise merge keeps both promises"

/* Slots of the table that finds a repeated source name without a lookup (> 2 * 64). */
#define SEEN_SLOTS 256

/*
 * Collects the distinct sources into s: each exists, has the kind and parameters of the
 * first, and can be merged. A name given again is found in a small table of the names
 * seen (a 1 MiB line names a source ~100k times; names and filters map one to one), so
 * it costs one hash, not a lookup. Returns true, or false with res set (nothing held).
 */
static bool check_sources(struct server *srv, mutate_name_fn next, void *ctx, struct result *res,
                          struct mutate_sources *s, bool *any_grown)
{
    struct {
        uint64_t h;
        size_t idx; /* into s: + 1, 0 for an empty slot */
    } seen[SEEN_SLOTS] = {{0, 0}};
    struct proto_slice name;
    *any_grown = false;
    while (next(ctx, &name)) {
        uint64_t h = XXH3_64bits(name.ptr, name.len);
        size_t slot = (size_t)h & (SEEN_SLOTS - 1);
        bool again = false;
        for (; seen[slot].idx != 0 && !again; slot = (slot + 1) & (SEEN_SLOTS - 1)) {
            const struct proto_slice *n = &s->names[seen[slot].idx - 1];
            again =
                seen[slot].h == h && n->len == name.len && memcmp(n->ptr, name.ptr, name.len) == 0;
        }
        if (again)
            continue;
        if (s->n == MUTATE_MAX_SOURCES) {
            result_set(res, RESULT_CLIENT_ERROR, "too many source filters (at most 64 distinct)");
            goto fail;
        }
        struct filter *src = cmdlib_lookup(srv, name);
        if (src == NULL) {
            cmdlib_not_found(res, name);
            goto fail;
        }
        struct filter *first = s->n > 0 ? s->src[0] : src;
        if (first->seed != src->seed) {
            s->names[s->n] = name;
            s->src[s->n++] = src;
            result_set(res, RESULT_CLIENT_ERROR, MUTATE_WHY_SEEDS);
            goto fail;
        }
        bool ok = first->ops == src->ops && src->ops->compatible(first->obj, src->obj);
        bool can = s->intersect ? src->ops->intersect != NULL : src->ops->merge != NULL;
        s->names[s->n] = name;
        s->src[s->n++] = src;
        seen[slot].h = h;
        seen[slot].idx = s->n;
        *any_grown |= src->ops->grown(src->obj);
        if (!can && src->ops->advance != NULL) {
            result_set(res, RESULT_CLIENT_ERROR, WHY_WINDOWED);
            goto fail;
        }
        if (!can) {
            cmdlib_lib_error(res, SBF_ENOTSUP);
            goto fail;
        }
        if (!ok) {
            cmdlib_lib_error(res, SBF_EINCOMPAT);
            goto fail;
        }
    }
    if (s->n > 0)
        return true;
    result_set(res, RESULT_CLIENT_ERROR, "no source filters"); /* the parser prevents it */
fail:
    mutate_setop_release(s);
    return false;
}

bool mutate_setop_prepare(struct server *srv, mutate_name_fn next, void *ctx,
                          struct proto_slice dst_name, struct mutate_sources *s,
                          struct filter **dstp, struct result *res)
{
    bool any_grown;
    if (!check_sources(srv, next, ctx, res, s, &any_grown))
        return false;
    struct filter *first = s->src[0];
    struct filter *dst = cmdlib_lookup(srv, dst_name);
    int rc = SBF_OK;
    if (dst != NULL && dst->ops->advance != NULL) {
        filter_unref(dst);
        mutate_setop_release(s);
        result_set(res, RESULT_CLIENT_ERROR, WHY_WINDOWED);
        return false;
    }
    if (dst != NULL && dst->seed != first->seed) {
        filter_unref(dst);
        mutate_setop_release(s);
        result_set(res, RESULT_CLIENT_ERROR, MUTATE_WHY_SEEDS);
        return false;
    }
    if (dst != NULL && !(dst->ops == first->ops && dst->ops->compatible(dst->obj, first->obj)))
        rc = SBF_EINCOMPAT;
    else if (s->intersect && (any_grown || (dst != NULL && dst->ops->grown(dst->obj))))
        rc = SBF_EGROWN; /* checked before anything changes: lib might refuse part-way */
    if (rc != SBF_OK) {
        filter_unref(dst);
        mutate_setop_release(s);
        cmdlib_lib_error(res, rc);
        return false;
    }
    for (size_t i = 0; i < s->n && dst != NULL; i++) {
        if (s->src[i] == dst) {
            filter_unref(s->src[i]);
            s->src[i] = NULL;
        }
    }
    *dstp = dst;
    return true;
}

void mutate_setop_apply(const struct kind_ops *ops, void *obj, struct mutate_sources *s)
{
    for (size_t i = 0; i < s->n && s->rc == SBF_OK; i++) {
        struct filter *src = s->src[i];
        if (src != NULL && src != s->skip)
            s->rc = s->intersect ? ops->intersect(obj, src->obj) : ops->merge(obj, src->obj);
    }
}

static void apply_exclusive(struct filter *f, void *arg)
{
    mutate_setop_apply(f->ops, f->obj, arg);
}

int mutate_copy(const struct server *srv, const struct filter *src, void **out)
{
    int rc = src->ops->create_like(src->obj, &srv->budget.sbf, out);
    if (rc != SBF_OK)
        return rc;
    rc = src->ops->merge(*out, src->obj);
    if (rc != SBF_OK) {
        src->ops->free(*out);
        *out = NULL;
    }
    return rc;
}

/*
 * Journals a successful operation: dst and its sources, in order. Replay applies it to
 * the sources as they are then: dst's setop_pos makes the snapshotter write dst before any
 * source's newer snapshot (or file removal) could change what that is.
 */
static void journal_setop(struct server *srv, const struct mutate_sources *s,
                          struct proto_slice dst, uint64_t *pos)
{
    if (!recording(srv))
        return;
    uint64_t at = 0;
    struct journal_name src[MUTATE_MAX_SOURCES];
    for (size_t i = 0; i < s->n; i++)
        src[i] = (struct journal_name){s->names[i].ptr, s->names[i].len};
    struct journal_record rec = {.type = s->intersect ? JOURNAL_INTERSECT : JOURNAL_UNION,
                                 .name = {dst.ptr, dst.len},
                                 .sources = src,
                                 .nsources = s->n};
    journal(srv, &rec, &at);
    if (at == 0)
        return;
    *pos = at;
    struct filter *f = durable_on(srv) ? registry_get(srv->reg, dst.ptr, dst.len) : NULL;
    if (f != NULL)
        atomic_store(&f->setop_pos, at - srv->repl.delta); /* as a journal position */
    filter_unref(f);
}

int mutate_setop(struct server *srv, struct proto_slice dst_name, struct mutate_sources *s,
                 struct filter *dst, uint64_t *pos)
{
    struct filter *first = s->src[0];
    void *fresh = NULL;
    s->skip = dst;
    s->rc = SBF_OK;
    if (dst == NULL) {
        /* A missing destination starts as a copy of the first source: skip applying it. */
        s->skip = first;
        s->rc = mutate_copy(srv, first, &fresh);
        if (s->rc == SBF_OK)
            mutate_setop_apply(first->ops, fresh, s);
        if (s->rc == SBF_OK)
            s->rc = install(srv, dst_name, first->ops, fresh, first->seed);
        else if (fresh != NULL)
            first->ops->free(fresh);
    } else if (!s->intersect) {
        /* Union only sets bits, which readers may watch happen. */
        mutate_setop_apply(dst->ops, dst->obj, s);
        filter_touch(dst);
    } else if (registry_with_exclusive(srv->reg, dst, apply_exclusive, s)) {
        filter_touch(dst);
    } else {
        /* Someone (a snapshot) is reading dst: intersect a copy and swap it in. */
        s->rc = mutate_copy(srv, dst, &fresh);
        if (s->rc == SBF_OK)
            mutate_setop_apply(dst->ops, fresh, s);
        if (s->rc == SBF_OK)
            s->rc = replace(srv, dst, fresh, dst->seed);
        else if (fresh != NULL)
            dst->ops->free(fresh);
    }
    int rc = s->rc;
    if (rc == SBF_OK)
        journal_setop(srv, s, dst_name, pos);
    mutate_setop_release(s);
    filter_unref(dst);
    return rc;
}

/* Logged adds per lib call when they are applied to a swapped-in result. */
#define MUTATE_LOG_BATCH 4096

int mutate_setop_swap(struct server *srv, const struct mutate_sources *s,
                      struct proto_slice dst_name, struct filter *dst, const struct kind_ops *ops,
                      uint64_t seed, void *fresh, const struct sbf_hash *log, size_t nlog,
                      uint64_t *pos)
{
    int rc = SBF_OK;
    for (size_t i = 0; i < nlog && rc == SBF_OK; i += MUTATE_LOG_BATCH) {
        size_t m = nlog - i < MUTATE_LOG_BATCH ? nlog - i : MUTATE_LOG_BATCH, k;
        rc = ops->add_batch(fresh, log + i, m, &k);
    }
    if (rc != SBF_OK)
        offload_release(srv, NULL, 0, ops, fresh);
    else if (dst != NULL)
        rc = replace(srv, dst, fresh, dst->seed);
    else
        rc = install(srv, dst_name, ops, fresh, seed);
    if (rc != SBF_OK)
        return rc;
    journal_setop(srv, s, dst_name, pos);
    /* The adds made to dst during the job were journaled as they came, before this
     * record; replay of an INTERSECT would lose them, so they follow it again. */
    for (size_t i = 0; s->intersect && i < nlog && recording(srv); i += JOURNAL_MAX_HASHES) {
        size_t m = nlog - i < JOURNAL_MAX_HASHES ? nlog - i : JOURNAL_MAX_HASHES;
        struct journal_record rec = {.type = JOURNAL_ADD,
                                     .name = {dst_name.ptr, dst_name.len},
                                     .hashes = log + i,
                                     .nhashes = m};
        journal(srv, &rec, pos);
    }
    return SBF_OK;
}

/* ---- replay ---- */

struct mutate_stream {
    struct server *srv;
    bool replay;
    struct mutate_stream_figures fig;
    struct replay_adds *adds; /* ADD records, gathered until a record of another type */
};

struct mutate_stream *mutate_stream_new(struct server *srv, bool replay)
{
    struct mutate_stream *st = calloc(1, sizeof *st);
    if (st == NULL)
        return NULL;
    st->srv = srv;
    st->replay = replay;
    st->adds = replay ? replay_adds_new() : NULL; /* NULL: adds apply at once */
    return st;
}

void mutate_stream_free(struct mutate_stream *st, struct mutate_stream_figures *out)
{
    if (st == NULL)
        return;
    replay_adds_flush(st->adds);
    struct replay_adds_figures af;
    replay_adds_figures(st->adds, &af);
    replay_adds_free(st->adds);
    st->fig.keys = af.keys;
    st->fig.sharded = af.sharded;
    st->fig.threads = af.threads;
    if (out != NULL)
        *out = st->fig;
    free(st);
}

static struct proto_slice slice(struct journal_name n)
{
    return (struct proto_slice){n.ptr, n.len};
}

/* The filter a record names, if the record is newer than its snapshot; else NULL. */
static struct filter *target(struct mutate_stream *st, const struct journal_record *rec)
{
    struct filter *f = registry_get(st->srv->reg, rec->name.ptr, rec->name.len);
    if (f == NULL) {
        st->fig.unknown++; /* dropped later in the journal, or its CREATE was refused */
        return NULL;
    }
    if (st->replay && rec->pos <= atomic_load(&f->journal_pos)) {
        filter_unref(f);
        st->fig.skipped++;
        return NULL;
    }
    return f;
}

/* Logs a record the state refused, as the live command would have refused it. */
static void refused(const struct journal_record *rec, const char *why)
{
    log_msg(LOG_ERROR, "journal: record %llu (type %d) for %.*s refused: %s: skipped",
            (unsigned long long)rec->pos, (int)rec->type, (int)rec->name.len, rec->name.ptr, why);
}

static int replay_create(struct mutate_stream *st, const struct journal_record *rec)
{
    struct server *srv = st->srv;
    struct filter *f = registry_get(srv->reg, rec->name.ptr, rec->name.len);
    if (f != NULL) { /* its snapshot (or an earlier CREATE) has it */
        filter_unref(f);
        st->fig.skipped++;
        return 0;
    }
    const struct kind_ops *ops = kinds_by_tag(rec->kind_tag);
    struct kind_params p;
    uint64_t pos = 0, seed = 0;
    int rc = SBF_EINVAL;
    if (ops != NULL && decode_params(rec->params, rec->nparams, &p, &seed) == 0)
        rc = mutate_create(srv, slice(rec->name), ops, &p, seed, &pos);
    if (rc != SBF_OK) {
        refused(rec, ops == NULL ? "unknown kind" : sbf_strerror(rc));
        st->fig.unknown++; /* as the live CREATE, refused: what names it is skipped too */
        return 0;
    }
    st->fig.applied++;
    return 0;
}

/*
 * A RESTORE record whose filter's snapshot does not cover it: the snapshot forced after
 * the RESTORE never landed, so the RESTORE was not acknowledged (see mutate.h). The filter
 * that was there stays; with none, an empty one of the restored kind and parameters is
 * made, so the changes journaled after the record (acknowledged, maybe) have their filter.
 */
static int replay_restore(struct mutate_stream *st, const struct journal_record *rec)
{
    struct filter *f = registry_get(st->srv->reg, rec->name.ptr, rec->name.len);
    if (f != NULL && rec->pos <= atomic_load(&f->journal_pos)) {
        filter_unref(f); /* its snapshot holds the restored bits (or later ones) */
        st->fig.skipped++;
        return 0;
    }
    if (f != NULL) {
        filter_unref(f);
        refused(rec, "its snapshot was not written before the stop (RESTORE was not "
                     "acknowledged): the filter before it stays");
        st->fig.unknown++;
        return 0;
    }
    log_msg(LOG_WARN,
            "journal: record %llu: RESTORE of %.*s did not reach its snapshot before the stop "
            "(it was not acknowledged): an empty filter of its kind takes the changes after it",
            (unsigned long long)rec->pos, (int)rec->name.len, rec->name.ptr);
    return replay_create(st, rec);
}

/* Source names of a UNION/INTERSECT record, one at a time. */
struct record_names {
    const struct journal_record *rec;
    size_t i;
};

static bool next_record_name(void *ctx, struct proto_slice *name)
{
    struct record_names *it = ctx;
    if (it->i == it->rec->nsources)
        return false;
    *name = slice(it->rec->sources[it->i++]);
    return true;
}

static int replay_setop(struct mutate_stream *st, const struct journal_record *rec)
{
    struct server *srv = st->srv;
    struct filter *dst = registry_get(srv->reg, rec->name.ptr, rec->name.len);
    if (st->replay && dst != NULL && rec->pos <= atomic_load(&dst->journal_pos)) {
        filter_unref(dst);
        st->fig.skipped++;
        return 0;
    }
    filter_unref(dst);
    struct mutate_sources s = {.intersect = rec->type == JOURNAL_INTERSECT};
    struct record_names it = {.rec = rec};
    struct result res;
    result_init(&res);
    uint64_t pos = 0;
    int rc = SBF_OK;
    if (!mutate_setop_prepare(srv, next_record_name, &it, slice(rec->name), &s, &dst, &res)) {
        refused(rec, res.text != NULL ? res.text : "its sources do not fit");
        st->fig.unknown++;
    } else if ((rc = mutate_setop(srv, slice(rec->name), &s, dst, &pos)) != SBF_OK) {
        refused(rec, sbf_strerror(rc));
        st->fig.unknown++;
    } else {
        st->fig.applied++;
    }
    result_free(&res);
    return 0;
}

/*
 * A replayed DROP's file may have outlived the crash: it would come back at the next
 * start. Removed at once while starting (nobody else touches files), else through the
 * snapshotter, in turn with its writes of that name.
 */
static void drop_file(struct server *srv, struct journal_name n)
{
    char name[JOURNAL_NAME_MAX + 1];
    memcpy(name, n.ptr, n.len);
    name[n.len] = '\0';
    if (srv->phase != SERVER_STARTING && srv->snap != NULL) {
        if (snapshot_forget(srv->snap, n.ptr, n.len, NULL, NULL) != 0)
            log_msg(LOG_ERROR, "journal: replaying DROP %s: out of memory removing its file", name);
        return;
    }
    struct snapfile_error err;
    if (snapfile_remove(srv->cfg.data_dir, name, &err) != 0) {
        char msg[512];
        log_msg(LOG_ERROR, "journal: replaying DROP %s: %s", name,
                snapfile_format(&err, msg, sizeof msg));
    }
}

static int apply(struct mutate_stream *st, const struct journal_record *rec);

int mutate_apply_record(struct mutate_stream *st, const struct journal_record *rec)
{
    if (st->replay)
        return apply(st, rec);
    /* Live: the record's parts are not recorded; the record is, as it came. */
    struct server *srv = st->srv;
    srv->applying = true;
    int rc = apply(st, rec);
    srv->applying = false;
    uint64_t local = durable_on(srv) ? durable_append(srv, rec) : 0;
    if (local > 0) /* the journal's positions follow the primary's offsets, shifted */
        srv->repl.delta = rec->pos - local;
    srv->repl.offset = rec->pos;
    if (srv->propagate != NULL)
        srv->propagate->record(srv, rec, rec->pos, NULL, 0);
    return rc;
}

static int apply(struct mutate_stream *st, const struct journal_record *rec)
{
    struct server *srv = st->srv;
    uint64_t pos = 0;
    if (rec->type == JOURNAL_ADD || rec->type == JOURNAL_ADD_NEW) {
        struct filter *f = target(st, rec);
        if (f == NULL)
            return 0;
        if (st->adds != NULL) {
            replay_adds_push(st->adds, f, rec->hashes, rec->nhashes, rec->pos,
                             rec->type == JOURNAL_ADD_NEW);
        } else {
            size_t added;
            int rc = f->ops->add_batch(f->obj, rec->hashes, rec->nhashes, &added);
            if (rc != SBF_OK)
                refused(rec, sbf_strerror(rc));
        }
        filter_touch(f); /* the snapshot on disk lacks this */
        filter_unref(f);
        st->fig.applied++;
        return 0;
    }
    replay_adds_flush(st->adds); /* records apply in journal order */
    switch (rec->type) {
    case JOURNAL_CREATE:
        return replay_create(st, rec);
    case JOURNAL_RESTORE:
        return replay_restore(st, rec);
    case JOURNAL_UNION:
    case JOURNAL_INTERSECT:
        return replay_setop(st, rec);
    case JOURNAL_DROP: {
        struct filter *f = target(st, rec);
        if (f == NULL)
            return 0;
        filter_unref(f);
        mutate_drop(srv, slice(rec->name), &pos);
        drop_file(srv, rec->name);
        st->fig.applied++;
        return 0;
    }
    default:
        break;
    }
    struct filter *f = target(st, rec);
    if (f == NULL)
        return 0;
    int rc = SBF_OK;
    switch (rec->type) {
    case JOURNAL_DELETE: {
        size_t removed;
        rc = mutate_delete(srv, f, rec->hashes, rec->nhashes, &removed, &pos);
        break;
    }
    case JOURNAL_CLEAR:
        /* mutate_clear takes our reference over and marks what it leaves changed. */
        if ((rc = mutate_clear(srv, f, &pos)) != SBF_OK)
            refused(rec, sbf_strerror(rc));
        st->fig.applied++;
        return 0;
    case JOURNAL_ROTATE:
        mutate_rotate(srv, f, rec->time_ms, &pos);
        break;
    default:
        st->fig.unknown++; /* a type this build does not know (decode refuses those) */
        filter_unref(f);
        return 0;
    }
    if (rc != SBF_OK)
        refused(rec, sbf_strerror(rc));
    filter_touch(f); /* the snapshot on disk lacks this */
    filter_unref(f);
    st->fig.applied++;
    return 0;
}
