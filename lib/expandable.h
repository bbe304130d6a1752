/*
 * expandable.h - the expandable filter: short fingerprints in 64-byte blocks, a table that
 * grows in place one block split at a time, so memory per key and the cost of a lookup stay
 * flat however far it grows. Keys are hashed once (sbf_hash_key); every block index, bucket
 * and fingerprint comes from that one 128-bit hash. After ~2048x growth (when the first
 * table has spent its share of the promise), or when keys collide in one cell, new keys go
 * to a further table (a stage, at most 8) with a tighter share; lookups probe every stage.
 *
 * Concurrency, as kind.h: one writer at a time (every non-const call). While it runs, other
 * threads may call expandable_check(), expandable_check_batch(), expandable_info(),
 * expandable_params(), expandable_encode() and expandable_encoded_size() on the
 * same filter, and use it as the src of expandable_union(). Readers and encoders see
 * every add that completed before they started (and maybe later ones). expandable_clear()
 * and expandable_free() are exclusive.
 */
#ifndef BLOOMD_LIB_EXPANDABLE_H
#define BLOOMD_LIB_EXPANDABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/sbf.h"

/* Errors promised below this are refused: the first table's fingerprints are at most 16
 * bits (a later stage's, with a share of the promise, up to 23). */
#define EXPANDABLE_MIN_ERROR 1e-4
#define EXPANDABLE_MAX_ERROR 0.5
#define EXPANDABLE_MAX_CAPACITY (UINT64_C(1) << 40)

struct expandable_params {
    uint64_t capacity; /* keys the initial table holds at its target load, >= 1 */
    double error;      /* promised false-positive rate, in [MIN_ERROR, MAX_ERROR] */
};

struct expandable;

/*
 * Creates an empty filter. budget may be NULL (no limit); it is copied. Returns 0 and sets
 * *out (free with expandable_free), or SBF_EINVAL, SBF_ENOMEM.
 */
int expandable_new(const struct expandable_params *p, const struct sbf_budget *budget,
                   struct expandable **out);

/* Frees f and releases its bytes to its budget. expandable_free(NULL) does nothing. */
void expandable_free(struct expandable *f);

/* The parameters (valid as long as f). */
const struct expandable_params *expandable_params(const struct expandable *f);

/* True if a and b have the same parameters and so have the stages both have (a stage's
 * parameters follow from when it started), so a union is defined. */
bool expandable_compatible(const struct expandable *a, const struct expandable *b);

/*
 * Key operations, as sbf.h's: batches run in order (a key repeated in a batch is present
 * the second time), prefetch every block they will touch, and on error the keys before
 * the failing one were processed. Adding fails with SBF_ENOMEM if the budget refuses the
 * next block (or a new stage) and the small overflow area is full, or SBF_ELIMIT once no
 * stage is left (beyond 2^40 keys; or a union left no share of the promise, see below).
 */
bool expandable_check(const struct expandable *f, struct sbf_hash h);
int expandable_checkadd(struct expandable *f, struct sbf_hash h, bool *present);
void expandable_check_batch(const struct expandable *f, const struct sbf_hash *h, size_t n,
                            bool *present);
int expandable_add_batch(struct expandable *f, const struct sbf_hash *h, size_t n, size_t *added);
int expandable_checkadd_batch(struct expandable *f, const struct sbf_hash *h, size_t n,
                              bool *present);

/*
 * Deletes each key: removes one stored fingerprint that matches it (the longest). *deleted
 * (may be NULL) counts the keys that matched. Caveat: deleting a key that was never added
 * but collides with an added one removes that one, which then reads absent: a false
 * negative. Delete only keys you added. Never fails (returns 0).
 */
int expandable_delete_batch(struct expandable *f, const struct sbf_hash *h, size_t n,
                            size_t *deleted);

/*
 * dst |= src, stage by stage: every fingerprint of src's stage i is inserted into dst's
 * stage i (dst first gains empty copies of the stages only src has). Needs compatible
 * filters (else SBF_EINCOMPAT, dst unchanged). May fail part way with SBF_ENOMEM (dst then
 * holds a subset of src's keys); SBF_ELIMIT if the union is done but its bound exceeds
 * the promise (dst then refuses adds).
 */
int expandable_union(struct expandable *dst, const struct expandable *src);

/* Back to an empty initial table, parameters kept. Exclusive. */
void expandable_clear(struct expandable *f);

/* Cheap figures (no pass over the blocks), summed over the stages but for the shape
 * (level, cursor, fingerprint: the last stage's). */
struct expandable_info {
    uint64_t bytes;       /* bytes of blocks reserved from the budget (≈ resident) */
    uint64_t items;       /* keys added minus keys deleted */
    uint64_t entries;     /* fingerprints stored (a key is duplicated rarely, see .c) */
    uint64_t capacity;    /* keys the blocks in use hold at the target load */
    uint64_t blocks;      /* 64-byte blocks in use */
    uint32_t level;       /* log2 of the table's cells before the current round */
    uint64_t cursor;      /* cells of the current round already split */
    uint64_t splits;      /* block splits since creation (expansion work done) */
    double expansions;    /* doublings since creation, fractional: level - level0 + round */
    uint32_t fingerprint; /* stored fingerprint bits of a new key */
    uint64_t header;      /* bytes of the filter's own struct, besides its blocks */
    uint32_t stash;       /* entries in the overflow area */
    double load;          /* entries / (blocks * slots per block) */
    double error_bound;   /* the current false-positive bound (<= the promise) */
    uint32_t stages;      /* tables in use (see below); 1 until ~2048x growth */
};
void expandable_info(const struct expandable *f, struct expandable_info *out);

/* Checks every invariant, O(blocks): for tests. Returns 0 or SBF_ECORRUPT. Exclusive. */
int expandable_verify(const struct expandable *f);

/*
 * Codec, as sbf.h's: versioned, little-endian, checksummed. encode may run beside the
 * writer (see above). decode validates every header field before allocating, refuses
 * more than max_bytes of blocks (SBF_ETOOBIG), validates every block, and returns 0 and
 * *out, or an sbf_err with nothing allocated.
 */
int expandable_encode(const struct expandable *f, sbf_write_fn write, void *ctx);
uint64_t expandable_encoded_size(const struct expandable *f);
int expandable_decode(sbf_read_fn read, void *ctx, uint64_t max_bytes,
                      const struct sbf_budget *budget, struct expandable **out);

#endif
