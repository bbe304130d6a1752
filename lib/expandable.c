/*
 * expandable.c - the expandable filter: a linear-hashing table of 64-byte fingerprint
 * blocks (a "pocket" quotient filter per block), two candidate blocks per key, grown one
 * block split at a time. Tuned for 10^7-10^9 keys with mostly absent lookups: a lookup
 * reads two independent cache lines (prefetched in batches) at any size.
 *
 * Addressing. Level L: the table has 2^L cells; a key's cell is the top L bits of h.lo,
 * its bucket m = h.hi's low 32 bits scaled to M, its fingerprint the next W - 1 bits of
 * h.lo. Its second candidate is the cell XOR (g[m] << (L - l0)), consistent across levels
 * because the offset moves down with the level. g[m] always has the top bit set, so the
 * partner lies in the other half of the round: when the cursor is past the middle every
 * unsplit cell (which holds keys of twice the hash range of a split one) has a split
 * partner to give keys to. With a partner anywhere, (1 - u)^2 of the keys had no split
 * candidate and forced splits held the load at 0.70-0.75; with it, near EXP_LOAD.
 * Growth is a round per level: cells 0, 1, 2, ... of level L are split in order into
 * cells 2x, 2x+1 of level L+1 (a new array), the entry's top stored bit choosing the
 * child, so the cursor x says which cells are split and nothing is rehashed. The writer
 * splits one block whenever entries exceed EXP_LOAD of the slots in use, so memory grows
 * with the keys, 64 bytes at a time: no doubling step, and the longest stall is one split.
 * The old array's chunks behind the cursor go back to the kernel and the budget.
 *
 * False positives. A slot stored for a cell at level lv with ℓ bits matches a random
 * absent key with probability 2 * 2^-(lv + ℓ) / M (two candidates); a split keeps lv + ℓ,
 * so the bound (the sum over slots) only grows with inserts, by 2^-(lv + W - 2) / M each.
 * W is chosen so the bound stays below the promise through EXP_DESIGN_LEVELS levels of
 * growth at EXP_LOAD (>= 2048x). A slot with no bits left (ℓ = 0, after W - 1 splits:
 * keys from 1000x ago) is copied into both children: same bound, one more slot.
 *
 * Stages. The first table may spend EXP_FIRST_SHARE of the promise. When one more key
 * would take it past that (after >= 512x growth; at 1% from the smallest table, at
 * 2 * 10^8 keys), the filter starts a second table, a stage (stage_new), and new keys go there: it
 * starts at 1/8 of the keys so far and gets half of what the first leaves, so its W is 2-3 bits
 * wider; the third gets half of what the first two leave, and so on: the sum stays below the
 * promise however many follow, and each lasts >= 2048x its start, so 3 stages reach 2^40
 * keys from any start. A stage starts early, and small, when a key's cell already holds
 * its share of the stash (stash_crowded: keys that collide in one cell). Stage i > 0
 * files keys under a mix of the hash (exp_stage_hash), so such a run spreads there. A
 * lookup probes every stage, newest first; an add probes the older ones and adds to the
 * newest; an older stage takes no more adds (only deletes), so its readers and encoders
 * work as before, and a stage is published to readers with a release store of nstages.
 * One stage is the filter of before, byte for byte; its add path has one extra load and
 * branch per batch.
 *
 * Overflow: if both candidates are full, the entry goes to a small stash (EXP_STASH
 * self-describing slots, scanned only when non-empty) and is put back after later splits.
 *
 * Concurrency: blocks carry a seqlock count; readers retry a torn block, follow a dead
 * (split) block to its child, and reload the state when a block is not live (its chunk was
 * given back). Arrays are freed only when no reader is inside (the readers count). While
 * an encoder (or a union reading this filter as src) runs, the writer makes no cuckoo
 * step and gives no chunk back; a split block keeps its entries, so the encoder, which
 * copies the stash and then the shape it found at its start block by block (both read
 * with no split between, exp_copy_start), misses no entry present then.
 */
#include "lib/expandable.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "lib/bloom.h"
#include "lib/expandable_internal.h"

/* Target load: a block is split when entries exceed this share of the slots in use. */
#define EXP_LOAD 0.8
/* Levels of growth the fingerprint width is chosen for (2^11 = 2048x). */
#define EXP_DESIGN_LEVELS 11u
/* Stash entries that force a split (lookups scan the stash while it is not empty). */
#define EXP_STASH_HIGH 16u
/* Stash entries tried per drain. */
#define EXP_DRAIN 8u
/* Splits per add at most. */
#define EXP_SPLITS_PER_ADD 2u
/* Batches prefetch this many keys ahead (2 lines each). */
#define EXP_AHEAD 12u
/* Entries of a full block tried for a cuckoo step. */
#define EXP_KICKS 8u
/* Retries of a reader before it answers "present" (never a false negative). */
#define EXP_READ_RETRIES 64u
/* Share of the promise the first table may spend before a second stage starts. */
#define EXP_FIRST_SHARE 0.75
/* Stash entries one cell may hold (see stash_crowded). */
#define EXP_CELL_STASH 8u
/* Keys the initial table of a stage started on overflow holds (the smallest table). */
#define EXP_OVERFLOW_CAPACITY 1u
/* A stage's initial table holds the keys so far / this (it then grows by splits). */
#define EXP_STAGE_START 8u

#define STATE_LEVEL(s) ((uint32_t)((s) >> 48))
#define STATE_CURSOR(s) ((s) & ((UINT64_C(1) << 48) - 1))
#define STATE(l, c) (((uint64_t)(l) << 48) | (c))

__extension__ typedef unsigned __int128 u128;

/* ---- block primitives ---- */

static void meta_get(const uint64_t *b, u128 *m)
{
    *m = ((u128)(b[1] & XB_META_HI) << 64) | b[0];
}

static void meta_put(uint64_t *b, u128 m)
{
    b[0] = (uint64_t)m;
    b[1] = (b[1] & ~XB_META_HI) | ((uint64_t)(m >> 64) & XB_META_HI);
}

/* The 384 slot bits as 6 words: bits at or above `from` move up by w (w in [8, 16]); the
 * top w bits fall off (they are unused: the block had room). */
static void rem_shift_up(uint64_t *r, uint32_t from, uint32_t w)
{
    uint32_t q = from / 64, o = from % 64;
    uint64_t low = o ? (UINT64_C(1) << o) - 1 : 0, hi = r[q] & ~low;
    for (uint32_t i = 5; i > q + 1; i--)
        r[i] = (r[i] << w) | (r[i - 1] >> (64 - w));
    if (q < 5)
        r[q + 1] = (r[q + 1] << w) | (hi >> (64 - w));
    r[q] = (r[q] & low) | (hi << w);
}

/* Bits [from - w, from) are dropped; bits at or above from move down by w. */
static void rem_shift_down(uint64_t *r, uint32_t from, uint32_t w)
{
    uint32_t to = from - w, q = to / 64, o = to % 64;
    uint64_t low = o ? (UINT64_C(1) << o) - 1 : 0;
    uint64_t first = (r[q] >> w) | (q < 5 ? r[q + 1] << (64 - w) : 0);
    for (uint32_t i = q + 1; i < 6; i++)
        r[i] = (r[i] >> w) | (i < 5 ? r[i + 1] << (64 - w) : 0);
    r[q] = (r[q] & low) | (first & ~low);
}

static void xb_set(uint64_t *b, uint32_t w, uint32_t i, uint32_t v)
{
    uint32_t o = i * w, q = 2 + o / 64, r = o % 64;
    uint64_t mask = (UINT64_C(1) << w) - 1;
    b[q] = (b[q] & ~(mask << r)) | ((uint64_t)v << r);
    if (r + w > 64) {
        uint32_t sh = 64 - r;
        b[q + 1] = (b[q + 1] & ~(mask >> sh)) | ((uint64_t)v >> sh);
    }
}

/* Appends slot v to bucket j (the block has room). */
void xb_insert(uint64_t *b, uint32_t w, uint32_t j, uint32_t v)
{
    uint32_t p = xb_select0(b, j), i = p - j, n = xb_count(b);
    u128 m;
    meta_get(b, &m);
    u128 low = ((u128)1 << p) - 1;
    m = (m & low) | ((m & ~low) << 1) | ((u128)1 << p);
    meta_put(b, m);
    if (i < n)
        rem_shift_up(b + 2, i * w, w);
    xb_set(b, w, i, v);
}

/* Removes entry i (which is in bucket j). */
void xb_remove(uint64_t *b, uint32_t w, uint32_t j, uint32_t i)
{
    uint32_t p = i + j, n = xb_count(b);
    u128 m;
    meta_get(b, &m);
    u128 low = ((u128)1 << p) - 1;
    m = (m & low) | ((m >> 1) & ~low);
    meta_put(b, m);
    if (i + 1 < n)
        rem_shift_down(b + 2, (i + 1) * w, w);
    xb_set(b, w, n - 1, 0);
}

int xb_check(const uint64_t *b, uint32_t w, uint32_t c, uint32_t m)
{
    uint32_t n = xb_count(b);
    if (n > c)
        return SBF_ECORRUPT;
    /* The directory is n ones and m zeros in its first n + m bits, then only zeros. */
    u128 meta;
    meta_get(b, &meta);
    if (n + m < XB_META_BITS && (meta >> (n + m)) != 0)
        return SBF_ECORRUPT;
    for (uint32_t i = 0; i < n; i++)
        if (xb_get(b, w, i) == 0)
            return SBF_ECORRUPT;
    /* Unused slot bits are zero. */
    for (uint32_t i = n * w; i < XB_REM_BITS; i++)
        if ((b[2 + i / 64] >> (i % 64)) & 1u)
            return SBF_ECORRUPT;
    return SBF_OK;
}

/* ---- geometry and arrays ---- */

static double design_bound(uint32_t w)
{
    uint32_t c = XB_REM_BITS / w, m = XB_META_BITS - c;
    double x = 2.0 * EXP_LOAD * (double)c / (double)m * (double)(EXP_DESIGN_LEVELS + 1);
    for (uint32_t i = 1; i < w; i++)
        x *= 0.5;
    return x;
}

static uint64_t initial_blocks(uint64_t capacity, uint32_t c);

int exp_geometry(const struct expandable_params *p, uint32_t index, uint32_t *w, uint32_t *c,
                 uint32_t *m, uint32_t *l0)
{
    const double min = index ? 0 : EXPANDABLE_MIN_ERROR;
    const uint32_t max_w = index ? EXP_STAGE_MAX_W : EXP_MAX_W;
    if (!(p->error >= min && p->error <= EXPANDABLE_MAX_ERROR) || p->capacity < 1 ||
        p->capacity > EXPANDABLE_MAX_CAPACITY || index >= EXP_MAX_STAGES)
        return SBF_EINVAL;
    uint32_t ww = EXP_MIN_W;
    while (ww < max_w && design_bound(ww) > p->error)
        ww++;
    if (design_bound(ww) > p->error)
        return SBF_EINVAL;
    *w = ww;
    *c = XB_REM_BITS / ww;
    *m = XB_META_BITS - *c;
    uint64_t blocks = initial_blocks(p->capacity, *c);
    uint32_t l = EXP_MIN_LEVEL;
    while (l + 1 < EXP_MAX_LEVEL && (UINT64_C(1) << (l + 1)) <= blocks)
        l++;
    *l0 = l; /* the largest level at most the blocks: the rest are split cells */
    return SBF_OK;
}

/* Blocks that hold `capacity` keys at the target load, at least 2^EXP_MIN_LEVEL. */
static uint64_t initial_blocks(uint64_t capacity, uint32_t c)
{
    double b = (double)capacity / (EXP_LOAD * (double)c);
    uint64_t n = (uint64_t)b;
    if ((double)n < b)
        n++;
    return n < (UINT64_C(1) << EXP_MIN_LEVEL) ? UINT64_C(1) << EXP_MIN_LEVEL : n;
}

uint64_t exp_initial_cursor(const struct expandable *f)
{
    return initial_blocks(f->p.capacity, f->c) - (UINT64_C(1) << f->l0);
}

struct expandable *exp_shell_new(const struct expandable_params *p, uint32_t index,
                                 const struct sbf_budget *b)
{
    uint32_t w, c, m, l0;
    if (exp_geometry(p, index, &w, &c, &m, &l0) != SBF_OK)
        return NULL;
    struct expandable *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->p = *p;
    if (b)
        f->budget = *b;
    f->index = index;
    f->limit = index ? p->error : EXP_FIRST_SHARE * p->error;
    f->stage[0] = f;
    atomic_store_explicit(&f->nstages, 1, memory_order_relaxed);
    f->w = w;
    f->c = c;
    f->m = m;
    f->l0 = l0;
    uint64_t span = (UINT64_C(1) << l0) - 1;
    for (uint32_t j = 0; j < m; j++) /* in [2^(l0-1), 2^l0): the top bit set, see above */
        f->g[j] =
            (uint32_t)((bloom_mix(j + UINT64_C(0x5bd1e995)) & (span >> 1)) | ((span >> 1) + 1));
    return f;
}

static bool reserve(struct expandable *f, uint64_t bytes)
{
    if (f->budget.reserve && !f->budget.reserve(f->budget.ctx, (size_t)bytes))
        return false;
    atomic_fetch_add_explicit(&f->bytes, bytes, memory_order_relaxed);
    return true;
}

static void release(struct expandable *f, uint64_t bytes)
{
    if (!bytes)
        return;
    if (f->budget.release)
        f->budget.release(f->budget.ctx, (size_t)bytes);
    atomic_fetch_sub_explicit(&f->bytes, bytes, memory_order_relaxed);
}

/* Reservation and release granularity of an array: a huge page in large arrays, so giving
 * memory back never splits one (4 KiB pages in the old array cost TLB misses); 256 KiB
 * below 64 MiB, where a 2 MiB step would be a large share of the filter. */
static uint64_t chunk_of(uint64_t total)
{
    return total >= 32 * EXP_HUGE ? EXP_HUGE : EXP_CHUNK;
}

static uint64_t round_chunk(const struct exp_arr *a, uint64_t bytes)
{
    uint64_t total = a->nblocks * XB_BYTES, chunk = chunk_of(total);
    if (total <= chunk)
        return total;
    uint64_t r = (bytes + chunk - 1) / chunk * chunk;
    return r < total ? r : total;
}

/* Makes sure arr[lv]'s first `bytes` are reserved. */
static int arr_reserve(struct expandable *f, uint32_t lv, uint64_t bytes)
{
    struct exp_arr *a = &f->arr[lv];
    if (bytes <= a->reserved)
        return SBF_OK;
    uint64_t to = round_chunk(a, bytes);
    if (!reserve(f, to - a->reserved))
        return SBF_ENOMEM;
    a->reserved = to;
    return SBF_OK;
}

int exp_arr_alloc(struct expandable *f, uint32_t lv, uint64_t bytes)
{
    struct exp_arr *a = &f->arr[lv];
    uint64_t total = (UINT64_C(1) << lv) * XB_BYTES;
    if (total > SIZE_MAX / 2)
        return SBF_ENOMEM;
    memset(a, 0, sizeof(*a));
    a->nblocks = UINT64_C(1) << lv;
    if (arr_reserve(f, lv, bytes ? bytes : XB_BYTES) != SBF_OK)
        return SBF_ENOMEM;
    uintptr_t at;
    if (total < EXP_CHUNK) {
        a->mem = calloc(1, (size_t)total + XB_BYTES);
        if (!a->mem)
            goto fail;
        at = ((uintptr_t)a->mem + XB_BYTES - 1) & ~(uintptr_t)(XB_BYTES - 1);
    } else {
        /* Lazily zeroed and on huge-page boundaries (as sbf.c's stages): a chunk costs
         * resident memory only once the sweep writes into it. */
        bool huge = total >= EXP_HUGE;
        size_t len = (size_t)total + (huge ? EXP_HUGE : 0);
        void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED)
            goto fail;
        a->mem = mem;
        a->maplen = len;
        at = huge ? ((uintptr_t)mem + EXP_HUGE - 1) & ~(uintptr_t)(EXP_HUGE - 1) : (uintptr_t)mem;
        if (huge)
            (void)madvise((void *)at, (size_t)total, MADV_HUGEPAGE);
    }
    atomic_store_explicit(&a->w, (_Atomic uint64_t *)at, memory_order_release);
    return SBF_OK;
fail:
    release(f, a->reserved);
    memset(a, 0, sizeof(*a));
    return SBF_ENOMEM;
}

void exp_arr_release_to(struct expandable *f, uint32_t lv, uint64_t upto)
{
    struct exp_arr *a = &f->arr[lv];
    uint64_t total = a->nblocks * XB_BYTES, chunk = chunk_of(total);
    if (upto < total)
        upto = upto / chunk * chunk;
    if (upto > a->reserved)
        upto = a->reserved;
    if (upto <= a->released)
        return;
    if (a->maplen) {
        _Atomic uint64_t *w = atomic_load_explicit(&a->w, memory_order_relaxed);
        /* Readers that still look there see zeros (not live) and reload the state. */
        (void)madvise((char *)w + a->released, (size_t)(upto - a->released), MADV_DONTNEED);
    }
    release(f, upto - a->released);
    a->released = upto;
}

static void arr_free(struct expandable *f, uint32_t lv)
{
    struct exp_arr *a = &f->arr[lv];
    if (!a->mem)
        return;
    if (a->maplen)
        munmap(a->mem, a->maplen);
    else
        free(a->mem);
    release(f, a->reserved - a->released);
    memset(a, 0, sizeof(*a));
}

void exp_arrays_free(struct expandable *f)
{
    for (uint32_t lv = 0; lv <= EXP_MAX_LEVEL + 1; lv++)
        arr_free(f, lv);
}

/* Frees the arrays below the level if no reader is inside. */
static void reap(struct expandable *f)
{
    if (!f->retired || atomic_load(&f->readers) != 0)
        return;
    uint32_t l = STATE_LEVEL(atomic_load_explicit(&f->state, memory_order_relaxed));
    for (uint32_t lv = 0; lv < l; lv++)
        arr_free(f, lv);
    f->retired = false;
}

static inline _Atomic uint64_t *blk(const struct expandable *f, uint32_t lv, uint64_t x)
{
    return atomic_load_explicit(&f->arr[lv].w, memory_order_acquire) + x * XB_WORDS;
}

/* ---- hashing ---- */

static inline uint32_t bucket_of(const struct expandable *f, struct sbf_hash h)
{
    return (uint32_t)(((h.hi & 0xffffffffu) * f->m) >> 32);
}

static inline uint64_t cell_of(uint64_t b, uint32_t lv)
{
    return b >> (64 - lv);
}

/* The W - 1 fingerprint bits of a key in a cell at level lv. */
static inline uint32_t fp_of(const struct expandable *f, uint64_t b, uint32_t lv)
{
    return (uint32_t)((b << lv) >> (64 - (f->w - 1)));
}

static inline uint64_t partner(const struct expandable *f, uint64_t x, uint32_t lv, uint32_t j)
{
    return x ^ ((uint64_t)f->g[j] << (lv - f->l0));
}

/* Candidate k of key b under state st: level and cell of its block (no dead blocks). */
static inline void resolve(const struct expandable *f, uint64_t st, uint64_t b, uint32_t j, int k,
                           uint32_t *lv, uint64_t *x)
{
    uint32_t l = STATE_LEVEL(st);
    uint64_t c = cell_of(b, l);
    if (k)
        c = partner(f, c, l, j);
    if (c < STATE_CURSOR(st)) {
        c = (c << 1) | ((b >> (63 - l)) & 1u);
        l++;
    }
    *lv = l;
    *x = c;
}

/* ---- reading ---- */

static void load_block(const _Atomic uint64_t *p, uint64_t *b)
{
    for (unsigned i = 0; i < XB_WORDS; i++)
        b[i] = atomic_load_explicit(&p[i], memory_order_relaxed);
}

/* A consistent copy of a block written by another thread; false if it kept changing. */
static bool read_sync(const _Atomic uint64_t *p, uint64_t *b)
{
    for (unsigned t = 0; t < 1000; t++) {
        uint64_t h1 = atomic_load_explicit(&p[1], memory_order_acquire);
        if ((h1 >> XB_SEQ_SHIFT) & 1u)
            continue;
        load_block(p, b);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&p[1], memory_order_relaxed) == h1 && b[1] == h1)
            return true;
    }
    return false;
}

/* Seqlock write of a whole block (the writer only). */
static void write_block(_Atomic uint64_t *p, const uint64_t *b)
{
    uint64_t h = atomic_load_explicit(&p[1], memory_order_relaxed);
    uint64_t seq = (h >> XB_SEQ_SHIFT) & 0xffu;
    atomic_store_explicit(&p[1], (h & ~XB_SEQ_MASK) | (((seq + 1) & 0xffu) << XB_SEQ_SHIFT),
                          memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    for (unsigned i = 0; i < XB_WORDS; i++)
        if (i != 1)
            atomic_store_explicit(&p[i], b[i], memory_order_relaxed);
    atomic_store_explicit(&p[1], (b[1] & ~XB_SEQ_MASK) | (((seq + 2) & 0xffu) << XB_SEQ_SHIFT),
                          memory_order_release);
}

/* Stash: true if an entry matches key b in bucket j. Writer or (sync) reader. */
static bool stash_has_locked(const struct expandable *f, uint64_t b, uint32_t j)
{
    uint32_t n = atomic_load_explicit(&f->nstash, memory_order_relaxed);
    if (n > EXP_STASH)
        n = EXP_STASH;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t tag = atomic_load_explicit(&f->stash[i].tag, memory_order_relaxed);
        uint64_t cell = atomic_load_explicit(&f->stash[i].cell, memory_order_relaxed);
        uint32_t lv = (uint32_t)(tag & 0xffu), sj = (uint32_t)((tag >> 8) & 0xffu);
        uint32_t v = (uint32_t)(tag >> 16);
        if (sj != j || lv < f->l0 || lv > EXP_MAX_LEVEL + 1 || v == 0)
            continue;
        uint64_t c = cell_of(b, lv);
        if ((c == cell || partner(f, c, lv, j) == cell) && xb_match(v, fp_of(f, b, lv)))
            return true;
    }
    return false;
}

static bool stash_has(const struct expandable *f, uint64_t b, uint32_t j, bool sync)
{
    /* The stash is rarely empty but holds few buckets: most lookups skip the scan. A
     * bit is set before its entry is published and cleared only when the stash empties. */
    uint64_t bits = atomic_load_explicit(&f->stash_buckets[j >> 6], memory_order_acquire);
    if (!((bits >> (j & 63u)) & 1u) || atomic_load_explicit(&f->nstash, memory_order_acquire) == 0)
        return false;
    if (!sync)
        return stash_has_locked(f, b, j);
    for (unsigned t = 0; t < 1000; t++) {
        uint64_t s1 = atomic_load_explicit(&f->stash_seq, memory_order_acquire);
        if (s1 & 1u)
            continue;
        bool r = stash_has_locked(f, b, j);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&f->stash_seq, memory_order_relaxed) == s1)
            return r;
    }
    return true; /* kept changing: "present" is allowed, "absent" might be wrong */
}

/* A reader's lookup (beside the writer). */
static bool has_sync(const struct expandable *f, struct sbf_hash h)
{
    uint32_t j = bucket_of(f, h);
    for (unsigned t = 0; t < EXP_READ_RETRIES; t++) {
        /* An entry moving from the second candidate to the first (or from the stash)
         * while we look could be missed: an "absent" is only trusted if none moved. */
        uint64_t m1 = atomic_load(&f->moves);
        if (m1 & 1u)
            continue;
        uint64_t st = atomic_load(&f->state); /* seq_cst: see split_next */
        bool stale = false;
        for (int k = 0; k < 2 && !stale; k++) {
            uint32_t lv;
            uint64_t x;
            resolve(f, st, h.lo, j, k, &lv, &x);
            for (unsigned d = 0; d < 4; d++) {
                uint64_t b[XB_WORDS];
                if (lv > EXP_MAX_LEVEL + 1 || !f->arr[lv].w || !read_sync(blk(f, lv, x), b) ||
                    !(b[1] & XB_LIVE)) {
                    stale = true;
                    break;
                }
                if (b[1] & XB_DEAD) { /* split after our state: its cell is one level down */
                    x = (x << 1) | ((h.lo >> (63 - lv)) & 1u);
                    lv++;
                    continue;
                }
                if (xb_has(b, f->w, j, fp_of(f, h.lo, lv)))
                    return true;
                break;
            }
        }
        if (stale)
            continue;
        if (stash_has(f, h.lo, j, true))
            return true;
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&f->moves, memory_order_relaxed) == m1)
            return false;
    }
    return true;
}

/* The writer's lookup: no other thread changes the filter. */
static bool has_own(const struct expandable *f, uint64_t st, struct sbf_hash h, uint32_t j,
                    uint32_t *lv, uint64_t *x, uint32_t *count)
{
    bool found = false;
    for (int k = 0; k < 2; k++) {
        resolve(f, st, h.lo, j, k, &lv[k], &x[k]);
        const _Atomic uint64_t *p = blk(f, lv[k], x[k]);
        uint64_t b[XB_WORDS];
        load_block(p, b);
        count[k] = xb_count(b);
        if (!found && xb_has(b, f->w, j, fp_of(f, h.lo, lv[k])))
            found = true;
    }
    return found || stash_has(f, h.lo, j, false);
}

static bool t_check(const struct expandable *f, struct sbf_hash h)
{
    struct expandable *mf = (struct expandable *)f; /* the readers count only */
    atomic_fetch_add(&mf->readers, 1);
    bool r = has_sync(f, h);
    atomic_fetch_sub(&mf->readers, 1);
    return r;
}

__attribute__((always_inline)) static inline void prefetch(const struct expandable *f, uint64_t st,
                                                           struct sbf_hash h)
{
    uint32_t j = bucket_of(f, h);
    for (int k = 0; k < 2; k++) {
        uint32_t lv;
        uint64_t x;
        resolve(f, st, h.lo, j, k, &lv, &x);
        __builtin_prefetch((const void *)blk(f, lv, x), 0, 3);
    }
}

static void t_check_batch(const struct expandable *f, const struct sbf_hash *h, size_t n,
                          bool *present)
{
    struct expandable *mf = (struct expandable *)f;
    atomic_fetch_add(&mf->readers, 1);
    uint64_t st = atomic_load_explicit(&f->state, memory_order_acquire);
    for (size_t i = 0; i < n && i < EXP_AHEAD; i++)
        prefetch(f, st, h[i]);
    for (size_t i = 0; i < n; i++) {
        if (i + EXP_AHEAD < n)
            prefetch(f, st, h[i + EXP_AHEAD]);
        present[i] = has_sync(f, h[i]);
    }
    atomic_fetch_sub(&mf->readers, 1);
}

/* Every stage, newest first; a stage publishes its keys as it publishes nstages. */
bool expandable_check(const struct expandable *f, struct sbf_hash h)
{
    uint32_t n = atomic_load_explicit(&f->nstages, memory_order_acquire);
    for (uint32_t i = n; i-- > 0;)
        if (t_check(f->stage[i], exp_stage_hash(h, i)))
            return true;
    return false;
}

void expandable_check_batch(const struct expandable *f, const struct sbf_hash *h, size_t n,
                            bool *present)
{
    uint32_t ns = atomic_load_explicit(&f->nstages, memory_order_acquire);
    if (ns == 1) {
        t_check_batch(f, h, n, present);
        return;
    }
    enum { CHUNK = 128 };
    struct sbf_hash q[CHUNK];
    bool r[CHUNK];
    size_t at[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        for (size_t k = 0; k < m; k++)
            present[i + k] = false;
        /* Each stage sees only the keys the newer ones did not have. */
        for (uint32_t s = ns; s-- > 0;) {
            size_t left = 0;
            for (size_t k = 0; k < m; k++) {
                if (!present[i + k]) {
                    at[left] = i + k;
                    q[left++] = exp_stage_hash(h[i + k], s);
                }
            }
            if (left == 0)
                break;
            t_check_batch(f->stage[s], q, left, r);
            for (size_t k = 0; k < left; k++)
                present[at[k]] = r[k];
        }
    }
}

/* ---- writing ---- */

static void fp_add(struct expandable *f, double d)
{
    f->fp += d;
    if (f->fp < 0)
        f->fp = 0;
    uint64_t bits;
    memcpy(&bits, &f->fp, sizeof(bits));
    atomic_store_explicit(&f->fp_bits, bits, memory_order_relaxed);
}

/* Release: a reader that sees the new count also sees the block written before it. */
static void count_add(_Atomic uint64_t *c, int64_t d)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + (uint64_t)d,
                          memory_order_release);
}

/* Appends a stash entry; false if full. */
static bool stash_push(struct expandable *f, uint32_t lv, uint64_t cell, uint32_t j, uint32_t v)
{
    uint32_t n = atomic_load_explicit(&f->nstash, memory_order_relaxed);
    if (n >= EXP_STASH)
        return false;
    uint64_t s = atomic_load_explicit(&f->stash_seq, memory_order_relaxed);
    _Atomic uint64_t *bk = &f->stash_buckets[j >> 6];
    atomic_store_explicit(
        bk, atomic_load_explicit(bk, memory_order_relaxed) | (UINT64_C(1) << (j & 63u)),
        memory_order_relaxed);
    atomic_store_explicit(&f->stash_seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&f->stash[n].cell, cell, memory_order_relaxed);
    atomic_store_explicit(&f->stash[n].tag, lv | (uint64_t)j << 8 | (uint64_t)v << 16,
                          memory_order_relaxed);
    atomic_store_explicit(&f->nstash, n + 1, memory_order_relaxed);
    atomic_store_explicit(&f->stash_seq, s + 2, memory_order_release);
    return true;
}

static void stash_del(struct expandable *f, uint32_t i)
{
    uint32_t n = atomic_load_explicit(&f->nstash, memory_order_relaxed);
    uint64_t s = atomic_load_explicit(&f->stash_seq, memory_order_relaxed);
    atomic_store_explicit(&f->stash_seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&f->stash[i].cell,
                          atomic_load_explicit(&f->stash[n - 1].cell, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&f->stash[i].tag,
                          atomic_load_explicit(&f->stash[n - 1].tag, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&f->nstash, n - 1, memory_order_relaxed);
    atomic_store_explicit(&f->stash_seq, s + 2, memory_order_release);
    if (n == 1) {
        atomic_store_explicit(&f->stash_buckets[0], 0, memory_order_relaxed);
        atomic_store_explicit(&f->stash_buckets[1], 0, memory_order_relaxed);
    }
}

/* Moves slot v of a cell at level lv one level up (prepending the cell's low bit). */
static uint32_t slot_up(uint32_t w, uint32_t v, uint32_t bit)
{
    uint32_t l = xb_len(w, v);
    uint32_t r = v >> (w - l); /* the l stored bits (l may be 0) */
    if (l == w - 1) {
        r >>= 1; /* no room: drop the lowest bit (matches more, never fewer) */
        l--;
    }
    r |= bit << l;
    l++;
    return ((r << 1) | 1u) << (w - 1 - l);
}

/* Position of the i-th entry's 1 in the directory. */
static uint32_t select1(const uint64_t *b, uint32_t i)
{
    unsigned n0 = exp_popcount(b[0]);
    if (i < n0)
        return exp_select64(b[0], i);
    return 64 + exp_select64(b[1] & XB_META_HI, i - n0);
}

/*
 * Makes room in the full block of cell x at level lv by moving one of its first
 * EXP_KICKS entries to that entry's other candidate (one cuckoo step). Late in a round
 * the unsplit cells hold twice the keys per cell of the split ones; this lets them hand
 * entries to their split partners. The entry is written there before it is removed here,
 * so a reader always finds it. True if an entry moved. Only through kick().
 */
static bool kick_step(struct expandable *f, uint32_t lv, uint64_t x)
{
    uint64_t st = atomic_load_explicit(&f->state, memory_order_relaxed);
    const uint32_t l = STATE_LEVEL(st), w = f->w, full = (UINT32_C(1) << w) - 1;
    const uint64_t cur = STATE_CURSOR(st);
    _Atomic uint64_t *p = blk(f, lv, x);
    uint64_t b[XB_WORDS];
    load_block(p, b);
    uint32_t n = xb_count(b), nt = 0;
    /* Every candidate's target first, each prefetched: the targets are random lines, and
     * trying them one by one took a cache miss per try (a tenth of the add path's time). */
    struct {
        uint32_t i, j, v, nv, plv;
        uint64_t px;
    } c[EXP_KICKS];
    for (uint32_t t = 0; t < EXP_KICKS && t < n; t++) {
        uint32_t i = (uint32_t)((x + t * 7u) % n);
        uint32_t j = select1(b, i) - i, v = xb_get(b, w, i), nv = v, plv = lv;
        uint64_t px = partner(f, x, lv, j);
        if (lv == l && px < cur) {
            if (xb_len(w, v) == 0)
                continue;
            px = (px << 1) | (v >> (w - 1));
            nv = (v << 1) & full;
            plv = l + 1;
        } else if (lv == l + 1 && (px >> 1) >= cur) {
            nv = slot_up(w, v, (uint32_t)(px & 1u));
            px >>= 1;
            plv = l;
        }
        __builtin_prefetch((const void *)blk(f, plv, px), 0, 3);
        c[nt].i = i;
        c[nt].j = j;
        c[nt].v = v;
        c[nt].nv = nv;
        c[nt].plv = plv;
        c[nt].px = px;
        nt++;
    }
    for (uint32_t t = 0; t < nt; t++) {
        uint32_t i = c[t].i, j = c[t].j, v = c[t].v, nv = c[t].nv, plv = c[t].plv;
        uint64_t px = c[t].px;
        _Atomic uint64_t *q = blk(f, plv, px);
        uint64_t a[XB_WORDS];
        load_block(q, a);
        if (xb_count(a) >= f->c)
            continue;
        xb_insert(a, w, j, nv);
        write_block(q, a);
        xb_remove(b, w, j, i);
        write_block(p, b);
        fp_add(f, exp_contrib(f, plv, nv) - exp_contrib(f, lv, v));
        return true;
    }
    return false;
}

/*
 * A cuckoo step (kick_step) unless an encoder runs: an encoder copies blocks one by one,
 * so an entry moving behind it would be lost. Invariant (Dekker, every access seq_cst):
 * the writer makes moves odd before it reads encoding, the encoder raises encoding before
 * it reads moves, so either the writer sees the encoder and makes no step, or the encoder
 * sees moves odd and waits until the step is over. Reading encoding before moves went
 * odd left a window in which an encoder started, saw moves even, and copied the target
 * block before the entry arrived and the source block after it left.
 */
static bool kick(struct expandable *f, uint32_t lv, uint64_t x)
{
    atomic_fetch_add(&f->moves, 1); /* odd: readers re-check an "absent", encoders wait */
    bool moved = atomic_load(&f->encoding) == 0 && kick_step(f, lv, x);
    atomic_fetch_add(&f->moves, 1);
    return moved;
}

/*
 * Places slot v of cell x at level lv (bucket j; the cell may be either candidate of its
 * key) into the emptier of its two candidate blocks under the current structure, or the
 * stash. A slot with no bits left to go down a level is copied into both children. Counts
 * every slot it stores in entries and adds its share of the bound to *added. Returns 0,
 * or SBF_ENOMEM if the stash is full.
 */
static int place(struct expandable *f, uint32_t lv, uint64_t x, uint32_t j, uint32_t v,
                 unsigned depth, double *added)
{
    uint64_t st = atomic_load_explicit(&f->state, memory_order_relaxed);
    const uint32_t l = STATE_LEVEL(st), w = f->w, full = (UINT32_C(1) << w) - 1;
    const uint64_t cur = STATE_CURSOR(st);
    /* Bring the cell to a level where it is one block: l if unsplit, l + 1 if split. */
    while (lv > l + 1 || (lv == l + 1 && (x >> 1) >= cur)) {
        v = slot_up(w, v, (uint32_t)(x & 1u));
        x >>= 1;
        lv--;
    }
    while (lv < l || (lv == l && x < cur)) {
        if (xb_len(w, v) == 0) {
            if (depth >= 8)
                return SBF_ELIMIT;
            int rc = place(f, lv + 1, x << 1, j, v, depth + 1, added);
            return rc == SBF_OK ? place(f, lv + 1, (x << 1) | 1u, j, v, depth + 1, added) : rc;
        }
        x = (x << 1) | (v >> (w - 1));
        v = (v << 1) & full;
        lv++;
    }
    /* The partner cell, resolved on its own: it may be split while x is not, or not
     * split while x is. */
    uint32_t lvs[2] = {lv, lv}, vs[2] = {v, v}, n[2];
    uint64_t xs[2] = {x, partner(f, x, lv, j)};
    uint64_t blocks[2][XB_WORDS];
    n[1] = UINT32_MAX;
    if (lv == l && xs[1] < cur) {
        if (xb_len(w, v) > 0) {
            xs[1] = (xs[1] << 1) | (v >> (w - 1));
            vs[1] = (v << 1) & full;
            lvs[1] = l + 1;
            n[1] = 0;
        }
    } else if (lv == l + 1 && (xs[1] >> 1) >= cur) {
        vs[1] = slot_up(w, v, (uint32_t)(xs[1] & 1u));
        xs[1] >>= 1;
        lvs[1] = l;
        n[1] = 0;
    } else {
        n[1] = 0;
    }
    for (int k = 0; k < 2; k++) {
        if (n[k] == UINT32_MAX && k == 1)
            break;
        load_block(blk(f, lvs[k], xs[k]), blocks[k]);
        n[k] = xb_count(blocks[k]);
    }
    int k = n[1] < n[0] ? 1 : 0;
    if (n[k] >= f->c) {
        if (!stash_push(f, lv, x, j, v))
            return SBF_ENOMEM;
        *added += exp_contrib(f, lv, v);
    } else {
        xb_insert(blocks[k], w, j, vs[k]);
        write_block(blk(f, lvs[k], xs[k]), blocks[k]);
        *added += exp_contrib(f, lvs[k], vs[k]);
    }
    count_add(&f->entries, 1);
    return SBF_OK;
}

/* Puts stash entries back into blocks where they now fit (after a split). */
static void drain(struct expandable *f)
{
    uint32_t n = atomic_load_explicit(&f->nstash, memory_order_relaxed);
    if (n == 0)
        return;
    atomic_fetch_add(&f->moves, 1); /* odd: readers re-check an "absent" */
    for (uint32_t i = n; i-- > 0 && n - i <= EXP_DRAIN;) {
        uint64_t tag = atomic_load_explicit(&f->stash[i].tag, memory_order_relaxed);
        uint64_t cell = atomic_load_explicit(&f->stash[i].cell, memory_order_relaxed);
        uint32_t lv = (uint32_t)(tag & 0xffu), j = (uint32_t)((tag >> 8) & 0xffu);
        uint32_t v = (uint32_t)(tag >> 16);
        /* Placed before it leaves the stash, so a copy beside the writer (exp_copy_start)
         * finds it in the stash or in its block. If it still does not fit it is pushed
         * again (then moved into slot i by the delete; i only goes down, so it is not seen
         * twice); if the stash is full it stays where it is. */
        double d = 0;
        if (place(f, lv, cell, j, v, 0, &d) == SBF_OK) {
            stash_del(f, i);
            count_add(&f->entries, -1);
            d -= exp_contrib(f, lv, v);
        }
        fp_add(f, d);
    }
    atomic_fetch_add(&f->moves, 1);
}

/* Blocks in use under state st. */
static uint64_t blocks_in_use(uint64_t st)
{
    return (UINT64_C(1) << STATE_LEVEL(st)) + STATE_CURSOR(st);
}

/*
 * Splits the cell at the cursor. Returns 0, SBF_ENOMEM (budget, stash) or SBF_ELIMIT (the
 * level limit). The split block keeps its entries (marked dead), and while an encoder runs
 * no chunk is given back, so an encoder copying blocks one by one still finds every entry
 * in the block of the shape it started from.
 */
static int split_next(struct expandable *f)
{
    uint64_t st = atomic_load_explicit(&f->state, memory_order_relaxed);
    uint32_t l = STATE_LEVEL(st);
    uint64_t x = STATE_CURSOR(st);
    if (l >= EXP_MAX_LEVEL)
        return SBF_ELIMIT;
    if (x == 0 && !f->arr[l + 1].mem) {
        int rc = exp_arr_alloc(f, l + 1, 2 * XB_BYTES);
        if (rc != SBF_OK)
            return rc;
    }
    if (arr_reserve(f, l + 1, (2 * x + 2) * XB_BYTES) != SBF_OK)
        return SBF_ENOMEM;
    const uint32_t w = f->w, full = (UINT32_C(1) << w) - 1;
    uint64_t old[XB_WORDS], ch[2][XB_WORDS];
    load_block(blk(f, l, x), old);
    memset(ch, 0, sizeof(ch));
    /* Slots with no bits left go to both children; what does not fit waits in the stash,
     * which must have room before anything changes. */
    uint32_t n = xb_count(old), want[2] = {0, 0};
    for (uint32_t i = 0; i < n; i++) {
        uint32_t v = xb_get(old, w, i);
        if (xb_len(w, v) == 0) {
            want[0]++;
            want[1]++;
        } else {
            want[v >> (w - 1)]++;
        }
    }
    uint32_t spill = (want[0] > f->c ? want[0] - f->c : 0) + (want[1] > f->c ? want[1] - f->c : 0);
    if (spill && atomic_load_explicit(&f->nstash, memory_order_relaxed) + spill > EXP_STASH)
        return SBF_ENOMEM;

    atomic_fetch_add(&f->epoch, 1); /* odd: a split runs; encoders wait for even */
    const bool hold = atomic_load(&f->encoding) != 0;
    /* Entries come in bucket order, so each child is built by appending: entry k of a
     * child, in bucket j, is the 1 at directory bit j + k (the zeros between are the
     * bucket ends), its slot the next one. The old directory's ones are visited word by
     * word (entry i at bit p is in bucket p - i), not bit by bit: a walk over all 112
     * bits, a branch each, was most of a split's time. */
    struct builder {
        u128 meta;
        uint32_t n;
    } bd[2] = {{0, 0}, {0, 0}};
    uint64_t ones[2] = {old[0], old[1] & XB_META_HI};
    for (uint32_t i = 0, wd = 0; wd < 2; wd++) {
        for (uint64_t bits = ones[wd]; bits != 0; bits &= bits - 1, i++) {
            uint32_t j = 64 * wd + (uint32_t)__builtin_ctzll(bits) - i;
            uint32_t v = xb_get(old, w, i);
            uint32_t lo = 0, hi = 1, nv = v;
            if (xb_len(w, v) == 0) {
                count_add(&f->entries, 1); /* copied into both children */
            } else {
                lo = hi = v >> (w - 1);
                nv = (v << 1) & full;
            }
            for (uint32_t b = lo; b <= hi; b++) {
                if (bd[b].n < f->c) {
                    bd[b].meta |= (u128)1 << (j + bd[b].n);
                    xb_set(ch[b], w, bd[b].n++, nv);
                } else {
                    (void)stash_push(f, l + 1, (2 * x) | b, j, nv); /* room checked above */
                }
            }
        }
    }
    meta_put(ch[0], bd[0].meta);
    meta_put(ch[1], bd[1].meta);
    ch[0][1] |= XB_LIVE;
    ch[1][1] |= XB_LIVE;
    write_block(blk(f, l + 1, 2 * x), ch[0]);
    write_block(blk(f, l + 1, 2 * x + 1), ch[1]);
    old[1] |= XB_DEAD;
    write_block(blk(f, l, x), old);
    x++;
    if (x == (UINT64_C(1) << l)) {
        /* seq_cst, against reap's load of readers: a reader either is counted or sees this
         * state and never looks at arr[l] again. */
        atomic_store(&f->state, STATE(l + 1, 0));
        if (!hold) /* else reap() frees it once the encoder is gone */
            exp_arr_release_to(f, l, f->arr[l].reserved);
        f->retired = true;
    } else {
        atomic_store_explicit(&f->state, STATE(l, x), memory_order_release);
        /* Whole chunks behind the cursor hold dead blocks only (caught up after an
         * encoder: the release is cumulative). */
        if (!hold)
            exp_arr_release_to(f, l, x * XB_BYTES);
    }
    atomic_fetch_add(&f->epoch, 1);
    count_add(&f->splits, 1);
    reap(f);
    return SBF_OK;
}

/*
 * True if the stash already holds EXP_CELL_STASH entries of cell x at level lv. Keys that
 * collide in one cell (both candidates full, so they go to the stash under the first)
 * fill the stash, and a full stash forces split after split; but linear hashing reaches
 * that cell only once the cursor has gone round, so memory would grow with the table
 * (64x for 3,000 such keys), not with the run. So one cell may take only a few stash
 * entries; the next key of it goes to a new stage, which hashes it apart from this table.
 * Random keys put one or two entries of a cell there (measured: bench/expandable_growth.md).
 */
__attribute__((cold, noinline)) static bool stash_crowded(const struct expandable *f, uint32_t lv,
                                                          uint64_t x)
{
    uint32_t n = atomic_load_explicit(&f->nstash, memory_order_relaxed), same = 0;
    for (uint32_t i = 0; i < n; i++)
        same += (atomic_load_explicit(&f->stash[i].tag, memory_order_relaxed) & 0xffu) == lv &&
                atomic_load_explicit(&f->stash[i].cell, memory_order_relaxed) == x;
    return same >= EXP_CELL_STASH;
}

/*
 * Splits while entries exceed the target load, at most EXP_SPLITS_PER_ADD per call. A
 * split that fails (budget) leaves the table fuller; adds then fill the stash and fail
 * with SBF_ENOMEM once it is full, so the key just added is kept either way.
 */
static void grow(struct expandable *f)
{
    for (unsigned i = 0; i < EXP_SPLITS_PER_ADD; i++) {
        uint64_t st = atomic_load_explicit(&f->state, memory_order_relaxed);
        uint32_t ns = atomic_load_explicit(&f->nstash, memory_order_relaxed);
        double slots = (double)blocks_in_use(st) * (double)f->c;
        bool over =
            (double)atomic_load_explicit(&f->entries, memory_order_relaxed) > EXP_LOAD * slots;
        bool forced = ns >= EXP_STASH_HIGH;
        if (!over && !forced)
            return;
        if (split_next(f) != SBF_OK)
            return;
        if (atomic_load_explicit(&f->nstash, memory_order_relaxed))
            drain(f);
    }
}

/* Adds h if absent. Both candidates full: the stash; the stash full too: forced splits
 * (with drains) until there is room, bounded. */
static int add_one(struct expandable *f, struct sbf_hash h, bool *present)
{
    const uint32_t j = bucket_of(f, h);
    for (unsigned attempt = 0; attempt < 1024; attempt++) {
        uint64_t st = atomic_load_explicit(&f->state, memory_order_relaxed);
        uint32_t lv[2], n[2];
        uint64_t x[2];
        if (has_own(f, st, h, j, lv, x, n)) {
            *present = true;
            return SBF_OK;
        }
        *present = false;
        int k = n[1] < n[0] ? 1 : 0;
        uint32_t v = (fp_of(f, h.lo, lv[k]) << 1) | 1u;
        double d = exp_contrib(f, lv[k], v);
        if (f->fp + d > f->limit)
            return SBF_ELIMIT;
        if (n[k] >= f->c && (kick(f, lv[k], x[k]) || kick(f, lv[1 - k], x[1 - k]))) {
            if (has_own(f, st, h, j, lv, x, n))
                continue; /* cannot be: the moved entry matched before too */
            k = n[1] < n[0] ? 1 : 0;
            v = (fp_of(f, h.lo, lv[k]) << 1) | 1u;
            d = exp_contrib(f, lv[k], v);
        }
        if (n[k] < f->c) {
            _Atomic uint64_t *p = blk(f, lv[k], x[k]);
            uint64_t b[XB_WORDS];
            load_block(p, b);
            xb_insert(b, f->w, j, v);
            write_block(p, b);
        } else if (stash_crowded(f, lv[k], x[k])) {
            return EXP_EOVERFLOW; /* the caller starts a stage for it */
        } else if (!stash_push(f, lv[k], x[k], j, v)) {
            int rc = split_next(f);
            if (rc != SBF_OK)
                return rc;
            drain(f);
            continue;
        }
        fp_add(f, d);
        count_add(&f->items, 1);
        count_add(&f->entries, 1);
        grow(f);
        return SBF_OK;
    }
    return SBF_ENOMEM;
}

static int table_init(struct expandable *f);

/* The writer's lookup in a table that takes no more adds (an older stage). */
static bool has_writer(const struct expandable *f, struct sbf_hash h)
{
    uint64_t st = atomic_load_explicit(&f->state, memory_order_relaxed);
    uint32_t lv[2], n[2];
    uint64_t x[2];
    return has_own(f, st, h, bucket_of(f, h), lv, x, n);
}

/*
 * Starts stage n (the writer; n = the stages in use). It takes half of what the stages
 * before it leave of the promise: they take no more adds, so their bound only falls
 * (deletes), and the sum stays below the promise however many follow. It is sized for
 * 1/8 of the keys so far, so the filter's bytes grow by ~1/8 as it starts, not 2x (sized
 * for all of them, B/key went from 2.36 to 4.77 at 2 * 10^8 keys), and its design growth
 * covers ~256x the keys so far. When the last table refused a key because its cell has
 * its share of the stash (overflow), it is the smallest table: its keys are hashed apart
 * from the last table's, so the run spreads. SBF_ELIMIT when no stage is left, the share
 * is below what a slot can hold, or the keys exceed EXPANDABLE_MAX_CAPACITY; SBF_ENOMEM.
 */
static int stage_new(struct expandable *f, bool overflow)
{
    uint32_t n = atomic_load_explicit(&f->nstages, memory_order_relaxed);
    if (n >= EXP_MAX_STAGES)
        return SBF_ELIMIT;
    double used = 0;
    uint64_t items = 0;
    for (uint32_t i = 0; i < n; i++) {
        used += f->stage[i]->fp;
        items += atomic_load_explicit(&f->stage[i]->items, memory_order_relaxed);
    }
    struct expandable_params p = {.capacity = items / EXP_STAGE_START ? items / EXP_STAGE_START : 1,
                                  .error = (f->p.error - used) / 2};
    if (overflow)
        p.capacity = EXP_OVERFLOW_CAPACITY;
    if (p.capacity > EXPANDABLE_MAX_CAPACITY || !(p.error > 0))
        return SBF_ELIMIT;
    uint32_t w, c, m, l0;
    if (exp_geometry(&p, n, &w, &c, &m, &l0) != SBF_OK)
        return SBF_ELIMIT;
    struct expandable *t = exp_shell_new(&p, n, &f->budget);
    if (!t)
        return SBF_ENOMEM;
    int rc = table_init(t);
    if (rc != SBF_OK) {
        free(t);
        return rc;
    }
    f->stage[n] = t;
    atomic_store_explicit(&f->nstages, n + 1, memory_order_release);
    return SBF_OK;
}

/* Adds h to a filter of several stages: present if any has it, else into the last. */
static int staged_add_one(struct expandable *f, struct sbf_hash h, bool *present)
{
    for (;;) {
        uint32_t n = atomic_load_explicit(&f->nstages, memory_order_relaxed);
        for (uint32_t i = n - 1; i-- > 0;) {
            if (has_writer(f->stage[i], exp_stage_hash(h, i))) {
                *present = true;
                return SBF_OK;
            }
        }
        int rc = add_one(f->stage[n - 1], exp_stage_hash(h, n - 1), present);
        if (rc != SBF_ELIMIT && rc != EXP_EOVERFLOW)
            return rc;
        rc = stage_new(f, rc == EXP_EOVERFLOW);
        if (rc != SBF_OK)
            return rc;
    }
}

int expandable_checkadd(struct expandable *f, struct sbf_hash h, bool *present)
{
    if (atomic_load_explicit(&f->nstages, memory_order_relaxed) == 1) {
        int rc = add_one(f, h, present);
        if (rc != SBF_ELIMIT && rc != EXP_EOVERFLOW)
            return rc;
    }
    return staged_add_one(f, h, present);
}

/* Keys from i on, through every stage (after the first one began to refuse). */
static int staged_add_batch(struct expandable *f, const struct sbf_hash *h, size_t n, size_t i,
                            bool *present, size_t *count)
{
    for (; i < n; i++) {
        if (i + EXP_AHEAD < n) {
            uint32_t ns = atomic_load_explicit(&f->nstages, memory_order_relaxed);
            for (uint32_t s = 0; s < ns; s++) {
                const struct expandable *t = f->stage[s];
                prefetch(t, atomic_load_explicit(&t->state, memory_order_relaxed),
                         exp_stage_hash(h[i + EXP_AHEAD], s));
            }
        }
        bool p;
        int rc = staged_add_one(f, h[i], &p);
        if (rc != SBF_OK)
            return rc;
        if (present)
            present[i] = p;
        *count += !p;
    }
    return SBF_OK;
}

static int add_batch(struct expandable *f, const struct sbf_hash *h, size_t n, bool *present,
                     size_t *added)
{
    size_t count = 0, i = 0;
    int rc = SBF_OK;
    if (atomic_load_explicit(&f->nstages, memory_order_relaxed) == 1) {
        /* One table, the common case: as it always was. */
        uint64_t st = atomic_load_explicit(&f->state, memory_order_relaxed);
        for (size_t k = 0; k < n && k < EXP_AHEAD; k++)
            prefetch(f, st, h[k]);
        for (; i < n; i++) {
            if (i + EXP_AHEAD < n) {
                st = atomic_load_explicit(&f->state, memory_order_relaxed);
                prefetch(f, st, h[i + EXP_AHEAD]);
            }
            bool p;
            rc = add_one(f, h[i], &p);
            if (rc != SBF_OK)
                break;
            if (present)
                present[i] = p;
            count += !p;
        }
    }
    if ((rc == SBF_OK && i < n) || rc == SBF_ELIMIT || rc == EXP_EOVERFLOW)
        rc = staged_add_batch(f, h, n, i, present, &count);
    if (added)
        *added = count;
    return rc;
}

int expandable_add_batch(struct expandable *f, const struct sbf_hash *h, size_t n, size_t *added)
{
    return add_batch(f, h, n, NULL, added);
}

int expandable_checkadd_batch(struct expandable *f, const struct sbf_hash *h, size_t n,
                              bool *present)
{
    return add_batch(f, h, n, present, NULL);
}

/* Removes the longest slot matching h; true if one did. */
static bool delete_one(struct expandable *f, struct sbf_hash h)
{
    uint64_t st = atomic_load_explicit(&f->state, memory_order_relaxed);
    uint32_t j = bucket_of(f, h);
    int best_k = -1;
    uint32_t best_i = 0, best_len = 0, best_lv = 0;
    uint64_t best_x = 0;
    for (int k = 0; k < 2; k++) {
        uint32_t lv;
        uint64_t x;
        resolve(f, st, h.lo, j, k, &lv, &x);
        uint64_t b[XB_WORDS];
        load_block(blk(f, lv, x), b);
        uint32_t q = fp_of(f, h.lo, lv), s, e;
        xb_bucket(b, j, &s, &e);
        for (uint32_t i = s; i < e; i++) {
            uint32_t v = xb_get(b, f->w, i);
            /* The most specific match (hash bits covered: level + stored bits): if it is
             * another key's, that key's bits extend ours, so our own slot still covers it. */
            if (xb_match(v, q) && (best_k < 0 || lv + xb_len(f->w, v) > best_len)) {
                best_k = k;
                best_i = i;
                best_len = lv + xb_len(f->w, v);
                best_lv = lv;
                best_x = x;
            }
        }
    }
    if (best_k >= 0) {
        _Atomic uint64_t *p = blk(f, best_lv, best_x);
        uint64_t b[XB_WORDS];
        load_block(p, b);
        fp_add(f, -exp_contrib(f, best_lv, xb_get(b, f->w, best_i)));
        xb_remove(b, f->w, j, best_i);
        write_block(p, b);
        count_add(&f->entries, -1);
        return true;
    }
    uint32_t ns = atomic_load_explicit(&f->nstash, memory_order_relaxed);
    for (uint32_t i = 0; i < ns; i++) {
        uint64_t tag = atomic_load_explicit(&f->stash[i].tag, memory_order_relaxed);
        uint64_t cell = atomic_load_explicit(&f->stash[i].cell, memory_order_relaxed);
        uint32_t lv = (uint32_t)(tag & 0xffu), sj = (uint32_t)((tag >> 8) & 0xffu);
        uint32_t v = (uint32_t)(tag >> 16);
        uint64_t c = cell_of(h.lo, lv);
        if (sj == j && (c == cell || partner(f, c, lv, j) == cell) &&
            xb_match(v, fp_of(f, h.lo, lv))) {
            fp_add(f, -exp_contrib(f, lv, v));
            stash_del(f, i);
            count_add(&f->entries, -1);
            return true;
        }
    }
    return false;
}

/*
 * With several stages the key is removed only where it is the one stage that matches it.
 * Without unions a key is stored in the oldest stage that matches it (it went to a stage
 * only if no older one matched it then, and older stages take no adds after); but a
 * union puts src's stage-i entries into dst's stage i beside dst's own keys, so a key of
 * a later stage may then match an older one through another key's entry, and removing
 * that entry was a false negative for the other key (0.55% of a filter's keys after a
 * staged filter was merged in and its keys deleted). Across stages nothing tells the key's
 * own entry from another's (within one, delete_one's longest match does), so a key that
 * matches in two stages stays: a false positive, never a false negative. Without unions
 * that is the rate of the other stages' false positives.
 */
int expandable_delete_batch(struct expandable *f, const struct sbf_hash *h, size_t n,
                            size_t *deleted)
{
    size_t count = 0;
    uint32_t ns = atomic_load_explicit(&f->nstages, memory_order_relaxed);
    for (size_t i = 0; i < n; i++) {
        uint32_t at = 0, hits = 0;
        for (uint32_t s = 0; ns > 1 && s < ns && hits < 2; s++) {
            if (has_writer(f->stage[s], exp_stage_hash(h[i], s)) && hits++ == 0)
                at = s;
        }
        if (hits > 1 || (ns > 1 && hits == 0))
            continue;
        struct expandable *t = f->stage[at];
        if (delete_one(t, exp_stage_hash(h[i], at))) {
            count++;
            if (atomic_load_explicit(&t->items, memory_order_relaxed) > 0)
                count_add(&t->items, -1);
        }
    }
    if (deleted)
        *deleted = count;
    return SBF_OK;
}

/* ---- lifecycle ---- */

/*
 * The initial table holds the capacity at the target load: 2^l0 cells, the first c0 of
 * them already split (as if a round had begun), so no power-of-two rounding wastes memory.
 */
static int table_init(struct expandable *f)
{
    const uint64_t n0 = UINT64_C(1) << f->l0, c0 = exp_initial_cursor(f);
    int rc = exp_arr_alloc(f, f->l0, n0 * XB_BYTES);
    if (rc != SBF_OK)
        return rc;
    if (c0 && (rc = exp_arr_alloc(f, f->l0 + 1, 2 * c0 * XB_BYTES)) != SBF_OK) {
        exp_arrays_free(f);
        return rc;
    }
    _Atomic uint64_t *w = atomic_load_explicit(&f->arr[f->l0].w, memory_order_relaxed);
    for (uint64_t x = c0; x < n0; x++)
        atomic_store_explicit(&w[x * XB_WORDS + 1], XB_LIVE, memory_order_relaxed);
    if (c0) {
        w = atomic_load_explicit(&f->arr[f->l0 + 1].w, memory_order_relaxed);
        for (uint64_t x = 0; x < 2 * c0; x++)
            atomic_store_explicit(&w[x * XB_WORDS + 1], XB_LIVE, memory_order_relaxed);
        exp_arr_release_to(f, f->l0, c0 * XB_BYTES);
    }
    atomic_store_explicit(&f->state, STATE(f->l0, c0), memory_order_release);
    return SBF_OK;
}

int expandable_new(const struct expandable_params *p, const struct sbf_budget *budget,
                   struct expandable **out)
{
    uint32_t w, c, m, l0;
    if (exp_geometry(p, 0, &w, &c, &m, &l0) != SBF_OK)
        return SBF_EINVAL;
    struct expandable *f = exp_shell_new(p, 0, budget);
    if (!f)
        return SBF_ENOMEM;
    int rc = table_init(f);
    if (rc != SBF_OK) {
        free(f);
        return rc;
    }
    *out = f;
    return SBF_OK;
}

/* Frees the stages after the first (exclusive). */
static void stages_free(struct expandable *f)
{
    uint32_t n = atomic_load_explicit(&f->nstages, memory_order_relaxed);
    for (uint32_t i = 1; i < n; i++) {
        exp_arrays_free(f->stage[i]);
        free(f->stage[i]);
        f->stage[i] = NULL;
    }
    atomic_store_explicit(&f->nstages, 1, memory_order_relaxed);
}

void expandable_free(struct expandable *f)
{
    if (!f)
        return;
    stages_free(f);
    exp_arrays_free(f);
    free(f);
}

const struct expandable_params *expandable_params(const struct expandable *f)
{
    return &f->p;
}

/* Stages both have must have the same parameters: a union is then stage by stage. */
bool expandable_compatible(const struct expandable *a, const struct expandable *b)
{
    uint32_t na = atomic_load_explicit(&a->nstages, memory_order_acquire);
    uint32_t nb = atomic_load_explicit(&b->nstages, memory_order_acquire);
    for (uint32_t i = 0; i < na && i < nb; i++)
        if (a->stage[i]->p.capacity != b->stage[i]->p.capacity ||
            a->stage[i]->p.error != b->stage[i]->p.error)
            return false;
    return true;
}

void expandable_clear(struct expandable *f)
{
    stages_free(f);
    f->limit = EXP_FIRST_SHARE * f->p.error;
    exp_arrays_free(f);
    atomic_store_explicit(&f->items, 0, memory_order_relaxed);
    atomic_store_explicit(&f->entries, 0, memory_order_relaxed);
    atomic_store_explicit(&f->nstash, 0, memory_order_relaxed);
    atomic_store_explicit(&f->stash_buckets[0], 0, memory_order_relaxed);
    atomic_store_explicit(&f->stash_buckets[1], 0, memory_order_relaxed);
    atomic_store_explicit(&f->splits, 0, memory_order_relaxed);
    f->fp = 0;
    fp_add(f, 0);
    f->retired = false;
    /* The initial table was allocated once with these sizes; if memory is short now the
     * filter stays empty with no arrays, and every add reports SBF_ENOMEM. */
    if (table_init(f) != SBF_OK)
        atomic_store_explicit(&f->state, STATE(f->l0, 0), memory_order_release);
}

void exp_recount(struct expandable *f)
{
    uint64_t st = atomic_load_explicit(&f->state, memory_order_relaxed);
    uint32_t l = STATE_LEVEL(st);
    uint64_t cur = STATE_CURSOR(st), entries = 0;
    double fp = 0;
    for (int half = 0; half < 2; half++) {
        uint32_t lv = half ? l + 1 : l;
        uint64_t from = half ? 0 : cur, to = half ? 2 * cur : (UINT64_C(1) << l);
        for (uint64_t x = from; x < to; x++) {
            uint64_t b[XB_WORDS];
            load_block(blk(f, lv, x), b);
            uint32_t n = xb_count(b);
            entries += n;
            for (uint32_t i = 0; i < n; i++)
                fp += exp_contrib(f, lv, xb_get(b, f->w, i));
        }
    }
    uint32_t ns = atomic_load_explicit(&f->nstash, memory_order_relaxed);
    for (uint32_t i = 0; i < ns; i++) {
        uint64_t tag = atomic_load_explicit(&f->stash[i].tag, memory_order_relaxed);
        fp += exp_contrib(f, (uint32_t)(tag & 0xffu), (uint32_t)(tag >> 16));
    }
    atomic_store_explicit(&f->entries, entries + ns, memory_order_relaxed);
    f->fp = 0;
    fp_add(f, fp);
}

/* ---- union ---- */

/*
 * A copy beside the writer reads the shape (state) at its start and then each block of
 * that shape, and the stash. Invariant: no split between the read of the shape and the
 * end of the stash copy (epoch unchanged and even), and the stash is copied before any
 * block. After a split the writer drains the stash into blocks of the new shape, which
 * may lie outside the one read (the children of the cell at the cursor): an entry moved
 * so before the stash copy would be in neither. A drain writes an entry into its block
 * before it leaves the stash, so an entry that leaves after the copy is in it, and one
 * that left before is in a block of the shape; a split keeps the old block's entries, and
 * the writer makes no cuckoo step (kick) while encoding is raised. So: wait out a split
 * or a move that started before the writer saw encoding, read items (every key it counts
 * is then in the blocks or the stash), the shape and the stash, and again until the
 * epoch stayed put. (Not moves: refused kicks change it on every add.)
 */
bool exp_copy_start(const struct expandable *f, struct exp_start *s)
{
    for (uint64_t t = 0; t < UINT64_C(1) << 32; t++) {
        uint64_t e0 = atomic_load(&f->epoch), m0 = atomic_load(&f->moves);
        if ((e0 | m0) & 1u)
            continue;
        s->items = atomic_load_explicit(&f->items, memory_order_acquire);
        s->state = atomic_load_explicit(&f->state, memory_order_acquire);
        uint64_t s1 = atomic_load_explicit(&f->stash_seq, memory_order_acquire);
        if (s1 & 1u)
            continue;
        uint32_t n = atomic_load_explicit(&f->nstash, memory_order_relaxed);
        s->ns = n < EXP_STASH ? n : EXP_STASH;
        for (uint32_t i = 0; i < s->ns; i++) {
            s->cell[i] = atomic_load_explicit(&f->stash[i].cell, memory_order_relaxed);
            s->tag[i] = atomic_load_explicit(&f->stash[i].tag, memory_order_relaxed);
        }
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&f->stash_seq, memory_order_relaxed) == s1 &&
            atomic_load(&f->epoch) == e0)
            return true;
    }
    return false;
}

/* dst |= src, one table into another with the same parameters and stage number. */
static int t_union(struct expandable *dst, const struct expandable *src)
{
    struct expandable *ms = (struct expandable *)src;
    atomic_fetch_add(&ms->readers, 1);
    atomic_fetch_add(&ms->encoding, 1);
    /* As an encoder (see exp_copy_start): the stash as it was with the shape. */
    struct exp_start start;
    int rc = exp_copy_start(src, &start) ? SBF_OK : SBF_EIO;
    uint64_t st = start.state;
    uint32_t l = STATE_LEVEL(st);
    uint64_t cur = STATE_CURSOR(st);
    for (int half = 0; half < 2 && rc == SBF_OK; half++) {
        uint32_t lv = half ? l + 1 : l;
        uint64_t from = half ? 0 : cur, to = half ? 2 * cur : (UINT64_C(1) << l);
        for (uint64_t x = from; x < to && rc == SBF_OK; x++) {
            uint64_t b[XB_WORDS];
            if (!read_sync(blk(src, lv, x), b)) {
                rc = SBF_EIO;
                break;
            }
            for (uint32_t j = 0; j < src->m && rc == SBF_OK; j++) {
                uint32_t s, e;
                xb_bucket(b, j, &s, &e);
                for (uint32_t i = s; i < e && rc == SBF_OK; i++) {
                    double d = 0;
                    rc = place(dst, lv, x, j, xb_get(b, src->w, i), 0, &d);
                    fp_add(dst, d);
                    if (rc == SBF_OK)
                        grow(dst);
                }
            }
        }
    }
    for (uint32_t i = 0; rc == SBF_OK && i < start.ns; i++) {
        uint64_t tag = start.tag[i];
        double d = 0;
        rc = place(dst, (uint32_t)(tag & 0xffu), start.cell[i], (uint32_t)((tag >> 8) & 0xffu),
                   (uint32_t)(tag >> 16), 0, &d);
        fp_add(dst, d);
    }
    atomic_fetch_sub(&ms->encoding, 1);
    atomic_fetch_sub(&ms->readers, 1);
    /* Items: the larger of the two is a lower bound; keys in both count once. */
    uint64_t si = atomic_load_explicit(&src->items, memory_order_relaxed);
    if (si > atomic_load_explicit(&dst->items, memory_order_relaxed))
        atomic_store_explicit(&dst->items, si, memory_order_relaxed);
    return rc;
}

/*
 * Stage by stage: dst first gains (empty) the stages only src has. Stage i of both hashes
 * keys alike, so its entries go into stage i of dst. Then the last stage of dst may only
 * spend what the others leave of the promise, and past the promise: SBF_ELIMIT (as with
 * one table, the union is done and the filter takes no more adds).
 */
int expandable_union(struct expandable *dst, const struct expandable *src)
{
    if (!expandable_compatible(dst, src))
        return SBF_EINCOMPAT;
    if (dst == src)
        return SBF_OK;
    uint32_t ns = atomic_load_explicit(&src->nstages, memory_order_acquire);
    for (uint32_t i = atomic_load_explicit(&dst->nstages, memory_order_relaxed); i < ns; i++) {
        struct expandable *t = exp_shell_new(&src->stage[i]->p, i, &dst->budget);
        int rc = t ? table_init(t) : SBF_ENOMEM;
        if (rc != SBF_OK) {
            free(t);
            return rc;
        }
        dst->stage[i] = t;
        atomic_store_explicit(&dst->nstages, i + 1, memory_order_release);
    }
    int rc = SBF_OK;
    for (uint32_t i = 0; i < ns && rc == SBF_OK; i++)
        rc = t_union(dst->stage[i], src->stage[i]);
    if (exp_stages_loaded(dst) > dst->p.error && rc == SBF_OK)
        rc = SBF_ELIMIT;
    return rc;
}

double exp_stages_loaded(struct expandable *f)
{
    uint32_t n = atomic_load_explicit(&f->nstages, memory_order_relaxed);
    double older = 0;
    for (uint32_t i = 0; i + 1 < n; i++)
        older += f->stage[i]->fp;
    struct expandable *last = f->stage[n - 1];
    double own = n == 1 ? EXP_FIRST_SHARE * f->p.error : last->p.error;
    last->limit = own < f->p.error - older ? own : f->p.error - older;
    return older + last->fp;
}

/* ---- figures ---- */

void exp_table_info(const struct expandable *f, struct expandable_info *out)
{
    uint64_t st = atomic_load_explicit(&f->state, memory_order_acquire);
    memset(out, 0, sizeof(*out));
    out->bytes = atomic_load_explicit(&f->bytes, memory_order_relaxed);
    out->items = atomic_load_explicit(&f->items, memory_order_relaxed);
    out->entries = atomic_load_explicit(&f->entries, memory_order_relaxed);
    out->blocks = blocks_in_use(st);
    out->capacity = (uint64_t)(EXP_LOAD * (double)f->c * (double)out->blocks);
    out->level = STATE_LEVEL(st);
    out->cursor = STATE_CURSOR(st);
    out->splits = atomic_load_explicit(&f->splits, memory_order_relaxed);
    out->expansions =
        log2((double)out->blocks / (double)((UINT64_C(1) << f->l0) + exp_initial_cursor(f)));
    out->fingerprint = f->w - 1;
    out->header = sizeof(*f);
    out->stash = atomic_load_explicit(&f->nstash, memory_order_relaxed);
    out->load = (double)out->entries / ((double)out->blocks * (double)f->c);
    uint64_t bits = atomic_load_explicit(&f->fp_bits, memory_order_relaxed);
    memcpy(&out->error_bound, &bits, sizeof(bits));
}

int exp_table_verify(const struct expandable *f)
{
    uint32_t w, c, m, l0;
    if (exp_geometry(&f->p, f->index, &w, &c, &m, &l0) != SBF_OK || w != f->w || c != f->c ||
        m != f->m || l0 != f->l0)
        return SBF_ECORRUPT;
    uint64_t st = atomic_load_explicit(&f->state, memory_order_acquire);
    uint32_t l = STATE_LEVEL(st);
    uint64_t cur = STATE_CURSOR(st), entries = 0;
    if (l < f->l0 || l > EXP_MAX_LEVEL || cur >= (UINT64_C(1) << l) || !f->arr[l].w ||
        (cur && !f->arr[l + 1].w) ||
        blocks_in_use(st) < (UINT64_C(1) << f->l0) + exp_initial_cursor(f))
        return SBF_ECORRUPT;
    for (int half = 0; half < 2; half++) {
        uint32_t lv = half ? l + 1 : l;
        uint64_t from = half ? 0 : cur, to = half ? 2 * cur : (UINT64_C(1) << l);
        for (uint64_t x = from; x < to; x++) {
            uint64_t b[XB_WORDS];
            load_block(blk(f, lv, x), b);
            if (!(b[1] & XB_LIVE) || (b[1] & XB_DEAD) || xb_check(b, f->w, f->c, f->m))
                return SBF_ECORRUPT;
            entries += xb_count(b);
        }
    }
    uint32_t ns = atomic_load_explicit(&f->nstash, memory_order_relaxed);
    if (ns > EXP_STASH || entries + ns != atomic_load_explicit(&f->entries, memory_order_relaxed))
        return SBF_ECORRUPT;
    return SBF_OK;
}

/* Sums over the stages; the shape (level, cursor, fingerprint) is the last stage's. */
void expandable_info(const struct expandable *f, struct expandable_info *out)
{
    uint32_t n = atomic_load_explicit(&f->nstages, memory_order_acquire);
    exp_table_info(f->stage[n - 1], out);
    out->stages = n;
    if (n == 1)
        return;
    uint64_t slots = out->blocks * f->stage[n - 1]->c;
    for (uint32_t i = 0; i + 1 < n; i++) {
        struct expandable_info t;
        exp_table_info(f->stage[i], &t);
        out->bytes += t.bytes;
        out->items += t.items;
        out->entries += t.entries;
        out->capacity += t.capacity;
        out->blocks += t.blocks;
        out->splits += t.splits;
        out->header += t.header;
        out->stash += t.stash;
        out->error_bound += t.error_bound;
        slots += t.blocks * f->stage[i]->c;
    }
    out->load = (double)out->entries / (double)slots;
    out->expansions =
        log2((double)out->blocks / (double)((UINT64_C(1) << f->l0) + exp_initial_cursor(f)));
}

int expandable_verify(const struct expandable *f)
{
    uint32_t n = atomic_load_explicit(&f->nstages, memory_order_acquire);
    if (f->index != 0 || n < 1 || n > EXP_MAX_STAGES || f->stage[0] != f)
        return SBF_ECORRUPT;
    for (uint32_t i = 0; i < n; i++) {
        const struct expandable *t = f->stage[i];
        if (!t || t->index != i ||
            (i > 0 && (atomic_load_explicit(&t->nstages, memory_order_relaxed) != 1 ||
                       !(t->p.error <= f->p.error / 2))))
            return SBF_ECORRUPT;
        int rc = exp_table_verify(t);
        if (rc != SBF_OK)
            return rc;
    }
    return SBF_OK;
}
