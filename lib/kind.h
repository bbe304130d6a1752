/*
 * kind.h - what every filter kind provides: one operations table per kind (the scalable
 * Bloom filter of sbf.h, the windowed filter of window.h, the expandable filter of
 * expandable.h; tables at the end), so the server handles any filter through the same
 * calls and a new kind is one new file in lib/ plus its table. Types shared by the kinds (hash,
 * budget, codec callbacks, error codes) are those of sbf.h. Pure code like the rest of lib/: the
 * server passes in the time.
 *
 * Concurrency, for every kind: one writer at a time (every call taking a non-const
 * filter); while it runs, other threads may call the const ones (check_batch, params,
 * info, fields, encode, encoded_size, create_like, parts, explain) on the same filter and use it as
 * the src of merge() or intersect(). clear, intersect (on its dst) and free need exclusive access.
 */
#ifndef BLOOMD_LIB_KIND_H
#define BLOOMD_LIB_KIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/sbf.h"

/*
 * Creation parameters of every kind in one struct: a kind reads the fields it knows and
 * refuses (SBF_EINVAL) what it cannot use. The server fills it from CREATE's options and
 * its defaults.
 */
struct kind_params {
    struct sbf_params sbf; /* capacity, error, growth, scale, ratio */
    uint64_t window_ms;    /* windowed kind: the window; 0 for the others */
    uint32_t generations;  /* windowed kind: generations kept (0: 4); 0 for the others */
    int64_t now_ms;        /* the time at creation (windowed kind), Unix milliseconds */
};

/* Figures every kind gives, cheaply (no pass over the bits). */
struct kind_info {
    uint64_t window_ms; /* a windowed filter's window; 0 for the others */
    uint64_t bytes;     /* bytes of filter memory allocated */
    uint64_t items;     /* keys added (exact, or an estimate after a merge) */
    uint64_t capacity;  /* keys it holds now at its promised error */
    double error;       /* the promised false-positive rate */
    uint64_t header;    /* bytes of the filter's own structures besides its bits (headers) */
    double est_error;   /* the rate now if the kind knows it cheaply (expandable's bound);
                           NaN for a kind that counts bits for it (kind_ops.estimate) */
};

/* A value of a kind-specific figure, for INFO and the metrics pages. */
enum kind_field_type {
    KIND_FIELD_U64,
    KIND_FIELD_DOUBLE,
    KIND_FIELD_STR, /* NUL-terminated, valid during the callback */
};

/* Called once per figure by kind_ops.fields(); name is static. */
typedef void (*kind_field_fn)(void *ctx, const char *name, enum kind_field_type type, uint64_t u,
                              double d, const char *s);

/*
 * Deferred free: a writer call (advance) hands over memory it removed from a filter but
 * that a concurrent reader (a snapshot, a check on another thread) may still be using.
 * The callee must call release(mem) exactly once, on any thread, after every reader that
 * could have started before the writer call returned has finished (for instance as a job
 * queued behind the snapshot in progress). release may take long (munmap of gigabytes)
 * and returns the bytes to the filter's budget: until then the budget still counts them.
 */
typedef void (*kind_retire_fn)(void *ctx, void (*release)(void *mem), void *mem);

/*
 * One part of a filter as the pages draw it: a stage of a scalable filter, or a stage of
 * one generation of a windowed one. Parts are visited oldest first.
 */
struct kind_part {
    uint32_t index;      /* 0.. in visiting order */
    uint32_t generation; /* window generation, 0 = the newest; 0 for kinds without */
    int64_t started_ms;  /* Unix ms the generation began; 0 for kinds without time */
    uint64_t capacity;   /* keys it takes at its share of the promise */
    uint64_t items;      /* keys it took */
    uint64_t bytes;      /* bytes of bits */
    uint64_t blocks;     /* blocks of block_bits bits */
    uint32_t block_bits; /* bits per block (512 for blocked stages) */
    uint32_t k;          /* bits per key */
    double error;        /* its share of the promised false-positive rate */
    uint64_t ones;       /* bits set: filled only when parts() was asked to count, else 0 */
};

typedef void (*kind_part_fn)(void *ctx, const struct kind_part *part);

/* Where one key falls in one part: the block and bit positions, which are set. */
struct kind_probe {
    uint32_t part;       /* kind_part.index */
    uint64_t block;      /* block index in the part */
    uint32_t nbits;      /* distinct bit positions */
    const uint16_t *pos; /* nbits positions in the block, ascending */
    const bool *set;     /* nbits flags: is pos[j] set */
    bool present;        /* this part answers present */
};

typedef void (*kind_probe_fn)(void *ctx, const struct kind_probe *probe);

struct kind_ops {
    const char *name; /* "blocked": the name CREATE's kind= takes and the pages show */
    uint32_t tag;     /* the snapshot container's kind tag; unique, never reused */
    /* What create() takes, as the end of a refusal ("an expandable filter takes error ...");
     * NULL for a kind whose parameters are those sbf_params_check() already checks. */
    const char *params_rule;

    /* Sets the kind's own defaults in p before the caller applies the options it was given
     * (the windowed kind's tighter ratio); NULL: the caller's defaults stand. */
    void (*defaults)(struct kind_params *p);
    /* Creates an empty filter; returns 0 and sets *out, or SBF_EINVAL, SBF_ENOMEM. */
    int (*create)(const struct kind_params *p, const struct sbf_budget *budget, void **out);
    /* Creates an empty filter with src's parameters (CLEAR by replacement, copies). */
    int (*create_like)(const void *src, const struct sbf_budget *budget, void **out);
    void (*free)(void *f); /* free(NULL) does nothing */

    /*
     * Batch key operations, in order; as sbf.h's. On error the keys before the failing
     * one were processed. check_batch may run beside the writer.
     */
    void (*check_batch)(const void *f, const struct sbf_hash *h, size_t n, bool *present);
    int (*add_batch)(void *f, const struct sbf_hash *h, size_t n, size_t *added);
    int (*checkadd_batch)(void *f, const struct sbf_hash *h, size_t n, bool *present);
    /*
     * Sharded adds for a writer with several threads (start-up replay), as sbf.h's
     * sbf_room and sbf_add_batch_shard: if n <= room(f), threads may each run one shard
     * of the same batch at once, and together they make what add_batch would (fresh:
     * keys known new to the filter, see sbf.h). NULL for kinds without.
     */
    uint64_t (*room)(const void *f);
    int (*add_batch_shard)(void *f, const struct sbf_hash *h, size_t n, unsigned shard,
                           unsigned nshards, bool fresh, size_t *added);

    /*
     * Brings a time-driven filter up to now_ms (Unix ms): the windowed kind drops the
     * generations that fell out of its window and starts the current one. NULL for kinds
     * without time. Writer call; call it before every batch (the time of the latest
     * advance is the time of the keys that follow) and on a timer, and once after decode
     * (generations that expired while the filter was on disk go then). Memory it takes out
     * goes to retire(retire_ctx, ...) (see kind_retire_fn); retire NULL frees it inline,
     * only for a caller that knows no reader runs (after decode, before publishing).
     * Returns 0, or SBF_ENOMEM if the current generation could not be allocated: expired
     * ones are dropped all the same, checks answer from the rest, and adds fail with
     * SBF_ENOMEM (retrying the allocation) until one succeeds.
     */
    int (*advance)(void *f, int64_t now_ms, kind_retire_fn retire, void *retire_ctx);

    void (*clear)(void *f); /* back to empty, parameters kept; exclusive */

    /*
     * Removes keys h[0..n) (DELETE), setting *removed to how many were there. NULL for
     * kinds that cannot forget a key (Bloom filters). Writer call.
     */
    int (*remove_batch)(void *f, const struct sbf_hash *h, size_t n, size_t *removed);

    /* True if merge/intersect between a and b are defined (same kind and parameters). */
    bool (*compatible)(const void *a, const void *b);
    /* dst |= src; as sbf_union. NULL if the kind cannot merge. */
    int (*merge)(void *dst, const void *src);
    /* dst &= src; as sbf_intersect (exclusive on dst). NULL if the kind cannot. */
    int (*intersect)(void *dst, const void *src);
    /* True if an intersect of f would be refused (SBF_EGROWN): checked before any change. */
    bool (*grown)(const void *f);

    /* The parameters f was created with (now_ms: its creation time, or 0 if unknown). */
    void (*params)(const void *f, struct kind_params *out);
    void (*info)(const void *f, struct kind_info *out);
    /*
     * Walks the kind's own figures (parameters, stages, estimates) in a fixed order. Cheap:
     * the popcount figures shown (estimated_items, estimated_error) are est's, NaN when est
     * is NULL; a kind without estimate() ignores est.
     */
    void (*fields)(const void *f, const struct sbf_estimate *est, kind_field_fn fn, void *ctx);
    /* The popcount estimates fields() shows: O(filter bytes), so off the event loop unless
     * the filter is small. NULL for a kind whose figures are all cheap. */
    void (*estimate)(const void *f, struct sbf_estimate *out);
    int (*verify)(const void *f); /* 0 or SBF_ECORRUPT; for tests */

    /* Codec of the kind's payload, inside the snapshot container (see container.h). */
    int (*encode)(const void *f, sbf_write_fn write, void *ctx);
    uint64_t (*encoded_size)(const void *f);
    int (*decode)(sbf_read_fn read, void *ctx, uint64_t max_bytes, const struct sbf_budget *budget,
                  void **out);

    /*
     * Optional views for metrics and the live page; NULL when a kind does not give them.
     * Both are reader calls (allowed beside the writer).
     * parts: calls fn once per part, oldest first; with count_ones the popcount of each
     * part is filled in, which is O(filter bytes): call that only off the event loop.
     * explain: calls fn once per part with where hash h falls in it (the CHECK answer of
     * the filter is "present" iff some part answers present). O(parts * k).
     */
    void (*parts)(const void *f, bool count_ones, kind_part_fn fn, void *ctx);
    void (*explain)(const void *f, struct sbf_hash h, kind_probe_fn fn, void *ctx);
};

/* The scalable Bloom filter (sbf.h) as a kind. Tag 1. */
extern const struct kind_ops kind_sbf;

#define KIND_TAG_SBF 1u

/* The windowed filter (window.h): generations of sbf over time. Tag 2. */
extern const struct kind_ops kind_window;

#define KIND_TAG_WINDOW 2u

/*
 * The expandable filter (expandable.h) as a kind. Tag 3. intersect and advance are NULL;
 * grown() is always true; remove_batch is DELETE (expandable_delete_batch()).
 */
extern const struct kind_ops kind_expandable;

#define KIND_TAG_EXPANDABLE 3u

#endif
