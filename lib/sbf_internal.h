/*
 * sbf_internal.h - the layout of a scalable filter, shared by lib/sbf.c, lib/codec.c and
 * lib/sbf_view.c only; lib/window.c uses just the stream and budget helpers at the end. Stages live
 * in a fixed array; the writer fills stages[n] completely, then publishes it with a release store
 * of nstages = n + 1, so a reader that acquire-loads nstages may read every field of
 * stages[0..nstages) without locks.
 */
#ifndef BLOOMD_LIB_SBF_INTERNAL_H
#define BLOOMD_LIB_SBF_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "lib/bloom.h"
#include "lib/sbf.h"

struct sbf_stage {
    _Atomic uint64_t *bits; /* nblocks * 8 words, 64-byte aligned; NULL if not allocated */
    void *mem;              /* the allocation bits points into */
    size_t maplen;          /* mem is an mmap of this length; 0: mem is from calloc */
    uint64_t nblocks;       /* 512-bit blocks */
    uint64_t capacity;      /* new keys this stage takes before the next is added */
    _Atomic uint64_t items; /* new keys taken (popcount estimate after union/intersect) */
    uint32_t k;             /* bits per key */
};

struct sbf {
    struct sbf_params params;
    struct sbf_budget budget;
    _Atomic uint32_t nstages; /* stages in use, >= 1 once built; release-published */
    struct sbf_stage stages[SBF_MAX_STAGES];
};

/*
 * True if every field of p is in its documented range. sbf_params_check also needs stage 0
 * to have a geometry; this is the part of it that does not plan one.
 */
bool sbf_params_in_range(const struct sbf_params *p);

/* The false-positive rate stage i is sized for: p*(1-r)*r^i, or all of p when the filter
 * does not grow. */
double sbf_stage_error(const struct sbf_params *p, uint32_t i);

/*
 * Capacity and geometry of stage i under params p (p at least in range). Returns 0, or
 * SBF_ELIMIT if that stage cannot exist (capacity or target error out of range).
 */
int sbf_stage_plan(const struct sbf_params *p, uint32_t i, uint64_t *capacity,
                   struct bloom_geom *g);

/*
 * Reserves and allocates zeroed bits for f->stages[i] with the capacity and geometry
 * sbf_stage_plan gave, and sets its fields, items = 0. Does not publish it. Returns 0 or
 * SBF_ENOMEM (then nothing is held).
 */
int sbf_stage_alloc(struct sbf *f, uint32_t i, uint64_t capacity, const struct bloom_geom *g);

/*
 * The stage count n for which sbf_encode_stages (format v2, fixed size) writes exactly
 * len bytes for a filter of parameters p (in range), and in *bits the bytes of filter bits
 * among them; 0 if there is none. O(n): a container checks a declared stream length, and
 * the bits it stands for, before anything is allocated.
 */
uint32_t sbf_stream_stages(const struct sbf_params *p, uint64_t len, uint64_t *bits);

/*
 * Asks budget (may be NULL) whether bytes more would fit now, and gives them back: 0, or
 * SBF_EBUDGET. A decoder's check before it allocates anything; the stages still reserve.
 */
int sbf_budget_try(const struct sbf_budget *budget, uint64_t bytes);

/* sbf_decode that reads only the fixed-size v2 stream (what the window kind writes). */
int sbf_decode_fixed(sbf_read_fn read, void *ctx, uint64_t max_bytes,
                     const struct sbf_budget *budget, struct sbf **out);

/* An empty shell with no stages (nstages = 0); NULL if out of memory. */
struct sbf *sbf_shell_new(const struct sbf_params *p, const struct sbf_budget *budget);

#endif
