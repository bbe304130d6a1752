/*
 * window.h - time-windowed filter: "seen in the last window?" with memory that stays
 * bounded. A window of W ms keeps g generations (2..16), each a scalable filter (sbf.h);
 * the newest takes the adds, and every span of W/(g-1) the oldest is dropped and a fresh
 * one starts. Time is always an argument (Unix ms): nothing here reads a clock.
 *
 * Promise, for a key whose first sighting (first add while absent) is at t, where t is
 * the now_ms of the latest window_advance() before that add:
 *   - every check before t + W finds it (never a false negative inside the window);
 *   - from t + W·g/(g-1) (rounded up to the ms) on it is present only by false positive;
 *   - a check against the whole window is a false positive with probability <= error.
 * A key found in any live generation is not added again: a repeat does not extend its
 * life. Span boundaries are fixed at creation: span i starts at
 * epoch + floor(i·W/(g-1)), epoch being the creation time, so a generation's end never
 * moves: a clock that jumps backwards neither resurrects nor lengthens one (advance
 * ignores times before the current span), and one that jumps forwards drops what expired.
 *
 * Concurrency as kind.h: one writer (window_advance, the add calls, window_clear,
 * window_free); readers (window_check_batch, window_info, window_generations,
 * window_estimate, window_encode, window_encoded_size) may run beside it. The live list
 * is published by one release store; a dropped generation is handed to a retire callback
 * rather than freed, so a reader that still holds it stays safe (see kind_retire_fn).
 */
#ifndef BLOOMD_LIB_WINDOW_H
#define BLOOMD_LIB_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/kind.h"
#include "lib/sbf.h"

#define WINDOW_MIN_GENERATIONS 2u
#define WINDOW_MAX_GENERATIONS 16u
#define WINDOW_DEFAULT_GENERATIONS 4u
#define WINDOW_MIN_MS INT64_C(1000)                 /* 1 s */
#define WINDOW_MAX_MS (INT64_C(366) * 86400 * 1000) /* 366 days */
#define WINDOW_MAX_TIME (INT64_C(1) << 53)          /* latest Unix ms accepted (year 285k) */

/*
 * Tightening ratio the server should give a windowed filter when CREATE sets none: a
 * generation lives one span at the planned rate far more often than it grows, so more
 * of its budget goes to its first stage than sbf's 0.8 gives (bits per window key at
 * 1%, g=4, from the real geometries: r=0.8 23.2, 0.5 19.9, 0.4 19.3).
 */
#define WINDOW_DEFAULT_RATIO 0.5

struct window_params {
    struct sbf_params sbf; /* capacity: keys per window; error: promise for the window;
                              growth, scale, ratio: of every generation */
    uint64_t window_ms;    /* W, in [WINDOW_MIN_MS, WINDOW_MAX_MS] */
    uint32_t generations;  /* g, in [WINDOW_MIN_GENERATIONS, WINDOW_MAX_GENERATIONS] */
};

/* Returns 0 if p is usable, SBF_EINVAL otherwise. */
int window_params_check(const struct window_params *p);

/*
 * The parameters of each generation's sbf: capacity ceil(capacity/(g-1)) (a span's keys),
 * error error/g (the union of g generations, each at most error/g, stays below error; an
 * equal split is the cheapest, since bits go as -log of each share), growth, scale and
 * ratio as given.
 */
void window_generation_params(const struct window_params *p, struct sbf_params *out);

struct window;

/*
 * Creates an empty window whose first span starts at now_ms (in [0, WINDOW_MAX_TIME]),
 * with one empty generation. budget as for sbf_new. Returns 0 and sets *out (the caller
 * frees it with window_free), or SBF_EINVAL, SBF_ENOMEM.
 */
int window_new(const struct window_params *p, int64_t now_ms, const struct sbf_budget *budget,
               struct window **out);

/* An empty window with src's parameters and span schedule (same epoch, same current span). */
int window_new_like(const struct window *src, const struct sbf_budget *budget, struct window **out);

/* Frees w and every generation it holds, inline. window_free(NULL) does nothing. */
void window_free(struct window *w);

/*
 * Brings w to now_ms: if now_ms falls in a later span than the current one, drops every
 * generation that span expires and starts an empty one for it (only one, however many
 * spans passed). Earlier or equal times change nothing. O(g), no zeroing: a fresh
 * generation is new, lazily zeroed memory. Dropped generations go to
 * retire(ctx, release, gen) (release(gen) frees it), or are freed inline if retire is
 * NULL. Returns 0, or SBF_ENOMEM if the new generation could not be allocated (expired
 * ones are dropped anyway; adds retry the allocation and fail with SBF_ENOMEM meanwhile).
 */
int window_advance(struct window *w, int64_t now_ms, kind_retire_fn retire, void *ctx);

/*
 * Batch operations over n hashes, in order, as sbf.h's: each checks every live
 * generation (one sbf batch per generation, so blocks are prefetched); adds go to the
 * newest generation and only for keys no live generation holds. *added counts those.
 * On error (SBF_ENOMEM, SBF_ELIMIT) the keys before the failing one were processed.
 */
void window_check_batch(const struct window *w, const struct sbf_hash *h, size_t n, bool *present);
int window_add_batch(struct window *w, const struct sbf_hash *h, size_t n, size_t *added);
int window_checkadd_batch(struct window *w, const struct sbf_hash *h, size_t n, bool *present);

/* Drops every generation (inline: exclusive access) and starts an empty one for the
 * current span; parameters and schedule kept. */
void window_clear(struct window *w);

const struct window_params *window_params(const struct window *w);

/* True if a and b have the same parameters. */
bool window_compatible(const struct window *a, const struct window *b);

/* Cheap figures, O(g). */
struct window_info {
    uint64_t bytes;    /* filter bits of the live generations */
    uint64_t items;    /* keys in the live generations */
    uint64_t capacity; /* sum of the live generations' capacities */
    uint32_t live;     /* live generations, 0..g */
    uint32_t stages;   /* the most stages of any live generation */
    int64_t epoch_ms;  /* start of span 0 */
    uint64_t span;     /* index of the current span */
    uint64_t header;   /* bytes of its own structs and the live generations' headers */
};
void window_info(const struct window *w, struct window_info *out);

/* One live generation, for INFO. */
struct window_gen {
    const struct sbf *sbf; /* its filter: valid while the caller may read w (kind.h) */
    uint64_t span;         /* the span it was started for */
    int64_t start_ms;      /* that span's start, Unix ms */
    uint64_t items, bytes;
    uint32_t stages;
};

/* Fills out[0..live) with the live generations, newest first; returns live (<= g). */
uint32_t window_generations(const struct window *w, struct window_gen out[WINDOW_MAX_GENERATIONS]);

/* Start of span i of a window with parameters p created at epoch_ms. */
int64_t window_span_start(const struct window_params *p, int64_t epoch_ms, uint64_t i);

/* Popcount figures, O(bytes): estimated items, and the rate a random absent key would see
 * now against the union of the live generations. */
void window_estimate(const struct window *w, struct sbf_estimate *out);

/*
 * Checks the invariants: parameters usable, at most g live generations of strictly
 * decreasing spans, all within the last g spans, each a valid sbf with the generation
 * parameters. Returns 0 or SBF_ECORRUPT. O(g · stages); for tests.
 */
int window_verify(const struct window *w);

/*
 * Codec: a versioned, little-endian, checksummed stream (layout in window.c), the
 * generations' bits as sbf streams inside it. Encode may run beside the writer.
 * window_decode validates every field, and the byte size of every generation, against
 * max_bytes (bits) before allocating anything; trailing bytes give SBF_ECORRUPT. It does
 * not drop expired generations: call window_advance(now) next. Returns 0 and sets *out
 * (caller frees), or an sbf_err with nothing allocated.
 */
int window_encode(const struct window *w, sbf_write_fn write, void *ctx);
uint64_t window_encoded_size(const struct window *w);
int window_decode(sbf_read_fn read, void *ctx, uint64_t max_bytes, const struct sbf_budget *budget,
                  struct window **out);

#endif
