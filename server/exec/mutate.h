/*
 * mutate.h - the one place where the named filters change (Redis's call() with its
 * propagation, and its AOF loading through the same command procs). Each change is one
 * function: it applies the change through the kind's operations, writes its journal
 * record and returns the record's position. Live commands (commands.c, setop.c), journal
 * replay at start-up (recover.c, through mutate_apply_record) and a replica call the same
 * functions with the same checks, so they cannot disagree.
 *
 * Journaling and propagation: every record gets the next replication offset (the journal
 * position when the journal is open), is written to the journal when it is open, and is
 * handed to replication (struct mutate_propagate). During start-up replay the journal is
 * not open and nothing is propagated; a replica applying its primary's records journals
 * and propagates each of those records as it came. A position of 0 means no record.
 *
 * Threads: the loop thread, or the loader (the long lane's first job) before the loop
 * serves any client. Callers hold a reference to every filter they pass.
 */
#ifndef BLOOMD_SERVER_EXEC_MUTATE_H
#define BLOOMD_SERVER_EXEC_MUTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/journal_record.h"
#include "lib/kind.h"
#include "proto/request.h"
#include "proto/result.h"

struct server;
struct filter;
struct completion;

/* The refusal of a set operation over filters whose keys hash with different seeds. */
#define MUTATE_WHY_SEEDS                                                                           \
    "the filters hash their keys with different seeds: create them with the same seed= to "        \
    "combine them"

/* At most this many distinct sources (a name repeated counts once) per set operation. */
#define MUTATE_MAX_SOURCES 64

/*
 * Before a command that changes anything: 0 if it may run, else -1 with res set to
 * SERVER_ERROR journal: <why> (the disk cannot take records: nothing is changed).
 */
int mutate_check(struct server *srv, struct result *res);

/* True when replies to changes wait for their records: on disk (durability always), or on
 * min_replica_acks replicas. Drivers then run each request with its own completion. */
bool mutate_holds(const struct server *srv);

/*
 * The reply of a change whose last record is at pos: held until pos is on disk (later's
 * done() gets res then) and true returned, or false when res is the reply now.
 */
bool mutate_reply(struct server *srv, uint64_t pos, const struct result *res,
                  struct completion *later);

/*
 * Replication's part in every change (server/repl/ sets it; mutate knows no sockets):
 * check() before a change (a read-only replica, too few replicas: res set, -1), record()
 * after each record with its offset, hold() for the reply of a change whose last record
 * is at offset: true when it holds the reply until enough replicas have it (then it
 * hands it on to the journal's hold, or to later). record() gets the record's frame at
 * offset too when frames() said it wants them and the journal made it (its positions
 * are the offsets), so a record is encoded once; else frame is NULL and n 0.
 */
struct mutate_propagate {
    int (*check)(struct server *srv, struct result *res);
    bool (*frames)(const struct server *srv);
    void (*record)(struct server *srv, const struct journal_record *rec, uint64_t offset,
                   const void *frame, size_t n);
    bool (*hold)(struct server *srv, uint64_t offset, const struct result *res,
                 struct completion *later);
};
void mutate_set_propagate(struct server *srv, const struct mutate_propagate *p);

/*
 * The journal's part of a reply's hold (mutate_reply without replication's): pos is an
 * offset, turned into the journal's position. For replication's hold to hand on to.
 */
bool mutate_hold_journal(struct server *srv, uint64_t pos, const struct result *res,
                         struct completion *later);

/* ---- the changes ---- */

/*
 * CREATE name of kind ops with parameters p (checked), its keys hashed with seed. Returns SBF_OK,
 * SBF_EINVAL (the kind refuses p) or SBF_ENOMEM (the budget or the table said no); a filter by that
 * name must not exist (the caller looked).
 */
int mutate_create(struct server *srv, struct proto_slice name, const struct kind_ops *ops,
                  const struct kind_params *p, uint64_t seed, uint64_t *pos);

/*
 * Adds the n keys h[0..n) to f: bits[i] (n entries) tells whether key i was present
 * already. Journals the new ones as ADD_NEW, or, after a failure, every key of the batch
 * as ADD (replaying a few more is harmless); a time-driven f gets a ROTATE record first
 * when its clock moved. *done: keys processed (n, or those before the failing one);
 * *fresh: how many of them were new. Returns SBF_OK or the error of the failing key.
 */
int mutate_add(struct server *srv, struct filter *f, const struct sbf_hash *h, size_t n, bool *bits,
               size_t *done, size_t *fresh, uint64_t *pos);

/*
 * DELETE: removes keys h[0..n) from f, which must have remove_batch (expandable).
 * *removed: how many were found. Returns SBF_OK or an sbf_err.
 */
int mutate_delete(struct server *srv, struct filter *f, const struct sbf_hash *h, size_t n,
                  size_t *removed, uint64_t *pos);

/*
 * CLEAR: empties f (in place when small and nobody else holds it, else a fresh object is
 * swapped in and the old one freed on the job lane). Takes over the caller's reference.
 * Returns SBF_OK or an sbf_err (f unchanged).
 */
int mutate_clear(struct server *srv, struct filter *f, uint64_t *pos);

/*
 * DROP: removes the filter named name from the table. Its file is the caller's to remove
 * (the snapshotter live, at once in replay). Returns false if there is none.
 */
bool mutate_drop(struct server *srv, struct proto_slice name, uint64_t *pos);

/*
 * Brings time-driven f to now_ms; journaled as ROTATE (replay gives the time back).
 * Generations it drops are freed on the job lane once the server serves clients (a
 * snapshot may be reading them), at once before.
 */
void mutate_rotate(struct server *srv, struct filter *f, int64_t now_ms, uint64_t *pos);

/*
 * RESTORE: installs obj (of kind ops, decoded from a DUMP; taken over) under name, or,
 * with replace_old, in place of the filter of that name. Returns SBF_OK, SBF_EINVAL (a
 * filter by that name exists and replace_old is false: obj freed, nothing changed) or
 * SBF_ENOMEM (obj freed, nothing changed). Journals a RESTORE record: the kind and
 * parameters, not the bits, which may be gigabytes.
 *
 * The crash rule, which the caller keeps: the new filter is dirty, and the RESTORE is
 * acknowledged only once a snapshot of its name that covers the record (its journal
 * position is at or after it) is durable: the one queued right after this call, before
 * any other record can name it, or, when that write is skipped because the object was
 * swapped out first (CLEAR, INTERSECT), one of the filter then under the name. Replay of a
 * RESTORE record:
 *   - the filter's snapshot covers it: skipped, the file holds the restored bits;
 *   - it does not (kill -9 before the snapshot landed; the RESTORE was never
 *     acknowledged): the filter that was there before stays, or, with none, an empty one of
 *     the record's kind and parameters is made. Either way the changes journaled after the
 *     record, which other clients may have had acknowledged meanwhile, are applied to a
 *     filter of that name and none is lost; only the unacknowledged bits are.
 * Why not the bits in the journal: a multi-GB RESTORE would be rewritten through the
 * journal (chunked across ~1 MiB records) and again into the snapshot; the snapshot alone
 * is one write. A replica cannot apply this record alone: the primary must send the
 * filter's encoding after it (as a full sync does for every filter).
 */
int mutate_restore(struct server *srv, struct proto_slice name, const struct kind_ops *ops,
                   void *obj, uint64_t seed, bool replace_old, uint64_t *pos);

/* ---- set operations: the checks, the immediate path and the background swap-in ---- */

/* The distinct sources of one UNION/INTERSECT, as checked. */
struct mutate_sources {
    struct filter *src[MUTATE_MAX_SOURCES];       /* one reference each; NULL where dst */
    struct proto_slice names[MUTATE_MAX_SOURCES]; /* their names, in request order */
    size_t n;
    struct filter *skip; /* a source whose bits are there already (dst, or its copy) */
    bool intersect;
    int rc;
};

/* Source names, one at a time: from a request's arguments or a record's list. */
typedef bool (*mutate_name_fn)(void *ctx, struct proto_slice *name);

/*
 * Every check made before a set operation changes anything: the sources (named by
 * next(ctx, ...)) into s (s->intersect set by the caller), dst (a reference, or NULL
 * when missing) into *dstp, and dst named as a source dropped from s->src. Returns true,
 * or false with res set and nothing held.
 */
bool mutate_setop_prepare(struct server *srv, mutate_name_fn next, void *ctx,
                          struct proto_slice dst_name, struct mutate_sources *s,
                          struct filter **dstp, struct result *res);

/*
 * Runs a prepared operation at once: dst gets the sources (a missing dst starts as a
 * copy of the first source), and the record is journaled. Releases s and dst. Returns
 * SBF_OK or an sbf_err (nothing changed, nothing journaled).
 */
int mutate_setop(struct server *srv, struct proto_slice dst_name, struct mutate_sources *s,
                 struct filter *dst, uint64_t *pos);

/* Drops the references s holds (s->n becomes 0). */
void mutate_setop_release(struct mutate_sources *s);

/* Applies every source of s to obj (of kind ops), as mutate_setop does; s->rc says how. */
void mutate_setop_apply(const struct kind_ops *ops, void *obj, struct mutate_sources *s);

/* A new object holding a copy of src (of src's kind). Returns SBF_OK or an sbf_err. */
int mutate_copy(const struct server *srv, const struct filter *src, void **out);

/*
 * The swap-in of a background operation: fresh (of kind ops and seed; taken over) gets the
 * nlog keys added to dst while it was built, replaces dst (or is installed under
 * dst_name when dst is NULL), and the operation is journaled, then for INTERSECT those
 * keys again as ADD records. Returns SBF_OK or an sbf_err (fresh freed, nothing changed).
 */
int mutate_setop_swap(struct server *srv, const struct mutate_sources *s,
                      struct proto_slice dst_name, struct filter *dst, const struct kind_ops *ops,
                      uint64_t seed, void *fresh, const struct sbf_hash *log, size_t nlog,
                      uint64_t *pos);

/*
 * Whoever builds a copy of a filter in the background (setop.c) is told of every change
 * made to it meanwhile: adds to a filter with f->setop set, and removals from any.
 */
struct mutate_watch {
    void (*added)(struct filter *f, const struct sbf_hash *h, size_t n);
    void (*removed)(struct server *srv, const struct filter *f);
};
void mutate_set_watch(struct server *srv, const struct mutate_watch *w);

/* ---- replay ---- */

/* Applying journal records: one per start-up replay (or replica link). */
struct mutate_stream;

/*
 * A stream applying records into srv; NULL without memory. replay: start-up replay (a
 * record about a filter whose snapshot covers its position is skipped, adds are batched
 * and sharded); otherwise a live stream from a primary: every record applies at once and
 * is journaled and propagated as it came, its position being the primary's offset.
 */
struct mutate_stream *mutate_stream_new(struct server *srv, bool replay);

/*
 * Applies rec as the live command did, through the functions above: in replay a record
 * about a filter whose snapshot covers its position is skipped (idempotent either way),
 * and a record the state refuses (a CREATE of a kind this build lacks, a set operation whose
 * sources do not fit) is logged and skipped. ADD records are gathered and applied in
 * large sharded batches before the next record of another type. Returns 0, or -1 when
 * the table cannot grow (replay must stop).
 */
int mutate_apply_record(struct mutate_stream *st, const struct journal_record *rec);

/* What a stream did. */
struct mutate_stream_figures {
    uint64_t applied, skipped, unknown; /* records */
    uint64_t keys, sharded;             /* keys of ADD records, and how many by threads */
    unsigned threads;
};

/* Applies what is gathered, fills *out (may be NULL) and frees st; NULL does nothing. */
void mutate_stream_free(struct mutate_stream *st, struct mutate_stream_figures *out);

#endif
