/*
 * sbf.c - scalable filter: stages, growth, single and batched operations, union and
 * intersection, figures. Tuned for lookups of mostly absent keys over 10^7-10^9 keys: each
 * stage costs one cache miss, so batches prefetch the blocks of keys ahead of the probe.
 * Invariants: stages only grow until sbf_clear; bits only go 0 -> 1 until clear/intersect.
 */
#include "lib/sbf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "lib/sbf_internal.h"

/* Cache lines in flight during a batch: keys are prefetched PREFETCH_LINES / stages
 * ahead of their probe, enough to cover a ~400 ns miss at ~15 ns of work a key, while
 * staying near the core's miss buffers so prefetches are not dropped. */
#define PREFETCH_LINES 32u

/* The same for sharded adds, whose threads share the machine's misses: 16 replayed a
 * 100M-key journal in 8.8-9.3 s where 32 took 9.4-10.2 s (2 cores, 8 runs). */
#define SHARD_LINES 16u

/* Stages of at least this many bytes are mapped on huge-page boundaries (2 MiB). */
#define HUGE_BYTES ((size_t)2 << 20)

const char *sbf_strerror(int err)
{
    switch (err) {
    case SBF_OK:
        return "ok";
    case SBF_ENOMEM:
        return "out of memory";
    case SBF_EINVAL:
        return "invalid parameters";
    case SBF_ELIMIT:
        return "stage limit reached";
    case SBF_EINCOMPAT:
        return "incompatible filters";
    case SBF_EIO:
        return "read or write failed";
    case SBF_ECORRUPT:
        return "corrupt data";
    case SBF_EVERSION:
        return "unsupported format version";
    case SBF_ETOOBIG:
        return "filter too big";
    case SBF_EGROWN:
        return "cannot intersect a filter that has grown beyond one stage";
    case SBF_EFULL:
        return "non scaling filter is full";
    case SBF_ENOTSUP:
        return "not supported by this filter kind";
    case SBF_EKIND:
        return "unknown filter kind";
    case SBF_EBUDGET:
        return "does not fit the memory budget";
    default:
        return "unknown error";
    }
}

/*
 * SBF_DEFAULT_RATIO = 0.8. r sets how fast stage errors tighten; the stage count depends
 * only on the growth. Bits per key actually added, 1% error, c0 = 1M, scale 2 (from the
 * real stage geometries; the last stage is partly filled, hence 10x > 100x):
 *   r     1x (1 stage)  10x (4)  100x (7)  1000x (10)
 *   0.5   11.54         23.21    26.52     28.08
 *   0.7   12.76         22.20    22.16     20.90
 *   0.8   13.78         22.59    21.21     18.94
 *   0.9   15.55         24.27    21.54     18.22
 * Small r is cheapest if the filter never grows, but each stage then costs ~1.4 more
 * bits per key; large r pays 1.8 bits up front. Filters here grow by unknown factors
 * into the hundreds of millions, so 0.8: within 2% of the best from 10x up, 8% above
 * the best at 1x.
 */
void sbf_params_default(struct sbf_params *p)
{
    p->capacity = 100000;
    p->error = 0.01;
    p->growth = SBF_GROWTH_EXPONENTIAL;
    p->scale = 2.0;
    p->ratio = SBF_DEFAULT_RATIO;
}

const char *sbf_growth_name(enum sbf_growth g)
{
    return g == SBF_GROWTH_LINEAR ? "linear" : g == SBF_GROWTH_NONE ? "none" : "exponential";
}

/* Stage capacity c0*s^i or c0*s*i, 0 if it exceeds what one stage may hold (or if i > 0
 * for a filter that does not grow). */
static uint64_t stage_capacity(const struct sbf_params *p, uint32_t i)
{
    double c = (double)p->capacity;
    if (p->growth == SBF_GROWTH_NONE && i > 0)
        return 0;
    if (p->growth == SBF_GROWTH_EXPONENTIAL) {
        for (uint32_t j = 0; j < i; j++)
            c *= p->scale;
    } else if (i > 0) {
        c = c * p->scale * (double)i;
    }
    if (c > (double)BLOOM_MAX_STAGE_CAPACITY)
        return 0;
    uint64_t n = (uint64_t)c;
    return n ? n : 1;
}

double sbf_stage_error(const struct sbf_params *p, uint32_t i)
{
    /* Stage i gets p*(1-r)*r^i, so the compound rate is below p*(1-r)*sum r^i = p. The
     * one stage of a filter that does not grow gets all of p. */
    if (p->growth == SBF_GROWTH_NONE)
        return p->error;
    double target = p->error * (1.0 - p->ratio);
    for (uint32_t j = 0; j < i; j++)
        target *= p->ratio;
    return target;
}

int sbf_stage_plan(const struct sbf_params *p, uint32_t i, uint64_t *capacity, struct bloom_geom *g)
{
    double target = sbf_stage_error(p, i);
    uint64_t cap = stage_capacity(p, i);
    if (cap == 0 || bloom_geom_for(cap, target, g) != SBF_OK)
        return SBF_ELIMIT;
    *capacity = cap;
    return SBF_OK;
}

bool sbf_params_in_range(const struct sbf_params *p)
{
    /* Written so NaN fails every test. */
    return p->capacity >= 1 && p->capacity <= SBF_MAX_CAPACITY &&
           (p->error > 0.0 && p->error < 1.0) && (p->ratio > 0.0 && p->ratio < 1.0) &&
           (p->scale >= 1.0 && p->scale <= 64.0) &&
           (p->growth == SBF_GROWTH_EXPONENTIAL || p->growth == SBF_GROWTH_LINEAR ||
            p->growth == SBF_GROWTH_NONE);
}

int sbf_params_check(const struct sbf_params *p)
{
    return sbf_first_stage_bytes(p) ? SBF_OK : SBF_EINVAL;
}

uint64_t sbf_stage_capacity(const struct sbf_params *p, uint32_t i)
{
    uint64_t cap;
    struct bloom_geom g;
    if (!sbf_params_in_range(p) || sbf_stage_plan(p, i, &cap, &g) != SBF_OK)
        return 0;
    return cap;
}

uint64_t sbf_stage_bytes(const struct sbf_params *p, uint32_t i)
{
    uint64_t cap;
    struct bloom_geom g;
    if (!sbf_params_in_range(p) || sbf_stage_plan(p, i, &cap, &g) != SBF_OK)
        return 0;
    return g.nblocks * BLOOM_BLOCK_BYTES;
}

uint64_t sbf_first_stage_bytes(const struct sbf_params *p)
{
    return sbf_stage_bytes(p, 0);
}

/*
 * Zeroed, 64-byte aligned bits for s. Small stages come from calloc. Large ones are
 * anonymous mappings, zeroed lazily by the kernel so resident memory grows only as
 * blocks are touched, aligned to 2 MiB and advised to use huge pages: every probe is a
 * random access, and with 4 KiB pages each one also misses the TLB. 30M keys: batched
 * fill 108 vs 126 ns/key, batched check 33 vs 40 ns/key with and without the advice.
 */
static int bits_alloc(struct sbf_stage *s, size_t bytes)
{
    if (bytes < HUGE_BYTES) {
        void *mem = calloc(1, bytes + BLOOM_BLOCK_BYTES);
        if (!mem)
            return SBF_ENOMEM;
        uintptr_t a =
            ((uintptr_t)mem + BLOOM_BLOCK_BYTES - 1) & ~(uintptr_t)(BLOOM_BLOCK_BYTES - 1);
        s->mem = mem;
        s->maplen = 0;
        s->bits = (_Atomic uint64_t *)a;
        return SBF_OK;
    }
    if (bytes > SIZE_MAX - HUGE_BYTES)
        return SBF_ENOMEM;
    size_t len = bytes + HUGE_BYTES;
    void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return SBF_ENOMEM;
    uintptr_t a = ((uintptr_t)mem + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1);
    /* Advice only: without huge pages the filter works, just slower. */
    (void)madvise((void *)a, bytes, MADV_HUGEPAGE);
    s->mem = mem;
    s->maplen = len;
    s->bits = (_Atomic uint64_t *)a;
    return SBF_OK;
}

int sbf_stage_alloc(struct sbf *f, uint32_t i, uint64_t capacity, const struct bloom_geom *g)
{
    struct sbf_stage *s = &f->stages[i];
    uint64_t bytes = g->nblocks * BLOOM_BLOCK_BYTES; /* nblocks <= 2^50: no overflow */
    if (bytes > SIZE_MAX - BLOOM_BLOCK_BYTES)
        return SBF_ENOMEM;
    if (f->budget.reserve && !f->budget.reserve(f->budget.ctx, (size_t)bytes))
        return SBF_ENOMEM;
    if (bits_alloc(s, (size_t)bytes) != SBF_OK) {
        if (f->budget.release)
            f->budget.release(f->budget.ctx, (size_t)bytes);
        return SBF_ENOMEM;
    }
    s->nblocks = g->nblocks;
    s->k = g->k;
    s->capacity = capacity;
    atomic_store_explicit(&s->items, 0, memory_order_relaxed);
    return SBF_OK;
}

/* Plans and allocates stage i from f's parameters: 0, SBF_ELIMIT or SBF_ENOMEM. */
static int stage_new(struct sbf *f, uint32_t i)
{
    uint64_t cap;
    struct bloom_geom g;
    int rc = sbf_stage_plan(&f->params, i, &cap, &g);
    return rc == SBF_OK ? sbf_stage_alloc(f, i, cap, &g) : rc;
}

static void stage_free(struct sbf *f, struct sbf_stage *s)
{
    if (!s->mem)
        return;
    if (s->maplen)
        munmap(s->mem, s->maplen);
    else
        free(s->mem);
    if (f->budget.release)
        f->budget.release(f->budget.ctx, (size_t)(s->nblocks * BLOOM_BLOCK_BYTES));
    memset(s, 0, sizeof(*s));
}

int sbf_budget_try(const struct sbf_budget *budget, uint64_t bytes)
{
    if (!budget || !budget->reserve)
        return SBF_OK;
    if (bytes > SIZE_MAX || !budget->reserve(budget->ctx, (size_t)bytes))
        return SBF_EBUDGET;
    if (budget->release)
        budget->release(budget->ctx, (size_t)bytes);
    return SBF_OK;
}

struct sbf *sbf_shell_new(const struct sbf_params *p, const struct sbf_budget *budget)
{
    struct sbf *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->params = *p;
    if (budget)
        f->budget = *budget;
    atomic_init(&f->nstages, 0);
    return f;
}

int sbf_new(const struct sbf_params *p, const struct sbf_budget *budget, struct sbf **out)
{
    if (!sbf_params_in_range(p))
        return SBF_EINVAL;
    struct sbf *f = sbf_shell_new(p, budget);
    if (!f)
        return SBF_ENOMEM;
    int rc = stage_new(f, 0); /* plans stage 0: SBF_ELIMIT if p has no first stage */
    if (rc != SBF_OK) {
        free(f);
        return rc == SBF_ELIMIT ? SBF_EINVAL : rc;
    }
    atomic_store_explicit(&f->nstages, 1, memory_order_release);
    *out = f;
    return SBF_OK;
}

void sbf_free(struct sbf *f)
{
    if (!f)
        return;
    for (uint32_t i = 0; i < SBF_MAX_STAGES; i++)
        stage_free(f, &f->stages[i]);
    free(f);
}

const struct sbf_params *sbf_params(const struct sbf *f)
{
    return &f->params;
}

bool sbf_compatible(const struct sbf *a, const struct sbf *b)
{
    const struct sbf_params *x = &a->params, *y = &b->params;
    /* Scale and ratio shape later stages, which a filter that does not grow never has. */
    return x->capacity == y->capacity && x->error == y->error && x->growth == y->growth &&
           (x->growth == SBF_GROWTH_NONE || (x->scale == y->scale && x->ratio == y->ratio));
}

/* ---- probing ---- */

static inline _Atomic uint64_t *stage_block(const struct sbf_stage *s, uint32_t i,
                                            struct sbf_hash h)
{
    return s->bits + bloom_block(h, i, s->nblocks) * BLOOM_BLOCK_WORDS;
}

static inline bool stage_has(const struct sbf_stage *s, uint32_t i, struct sbf_hash h)
{
    return bloom_test_key(stage_block(s, i, h), h, i, s->k);
}

/* Newest first: recent keys are the likeliest repeats, and the newest stage is largest. */
static inline bool has(const struct sbf *f, uint32_t n, struct sbf_hash h)
{
    for (uint32_t i = n; i-- > 0;)
        if (stage_has(&f->stages[i], i, h))
            return true;
    return false;
}

/*
 * Must be inlined: GCC 12 finds a non-inlined function whose only effect is a prefetch
 * "const" and deletes its calls (batches ran without a single prefetch until this).
 * A read prefetch even for adds: the line is read before it is written anyway.
 */
__attribute__((always_inline)) static inline void prefetch(const struct sbf *f, uint32_t n,
                                                           struct sbf_hash h)
{
    for (uint32_t i = 0; i < n; i++)
        __builtin_prefetch((const void *)stage_block(&f->stages[i], i, h), 0, 3);
}

/* add_one's probe: h's block in the newest of n stages; true if h is there or, if older,
 * in an older stage. Probes newest first like has(), keeping the block for the set. */
__attribute__((always_inline)) static inline bool newest_probe(const struct sbf *f, uint32_t n,
                                                               struct sbf_hash h, bool older,
                                                               _Atomic uint64_t **block)
{
    const struct sbf_stage *s = &f->stages[n - 1];
    *block = stage_block(s, n - 1, h);
    return bloom_test_key(*block, h, n - 1, s->k) || (older && has(f, n - 1, h));
}

static int add_one(struct sbf *f, struct sbf_hash h, bool *present)
{
    uint32_t n = atomic_load_explicit(&f->nstages, memory_order_relaxed);
    struct sbf_stage *s = &f->stages[n - 1];
    uint32_t stage = n - 1;
    _Atomic uint64_t *block;
    if (newest_probe(f, n, h, true, &block)) {
        *present = true;
        return SBF_OK;
    }
    uint64_t items = atomic_load_explicit(&s->items, memory_order_relaxed);
    if (items >= s->capacity) {
        if (f->params.growth == SBF_GROWTH_NONE)
            return SBF_EFULL;
        if (n == SBF_MAX_STAGES)
            return SBF_ELIMIT;
        int rc = stage_new(f, n);
        if (rc != SBF_OK)
            return rc;
        atomic_store_explicit(&f->nstages, n + 1, memory_order_release);
        s = &f->stages[n];
        stage = n;
        block = stage_block(s, n, h);
        items = 0;
    }
    bloom_set_key(block, h, stage, s->k);
    atomic_store_explicit(&s->items, items + 1, memory_order_relaxed);
    *present = false;
    return SBF_OK;
}

bool sbf_check(const struct sbf *f, struct sbf_hash h)
{
    return has(f, atomic_load_explicit(&f->nstages, memory_order_acquire), h);
}

int sbf_add(struct sbf *f, struct sbf_hash h, bool *added)
{
    bool present = false;
    int rc = add_one(f, h, &present);
    if (added)
        *added = rc == SBF_OK && !present;
    return rc;
}

int sbf_checkadd(struct sbf *f, struct sbf_hash h, bool *present)
{
    return add_one(f, h, present);
}

/*
 * Opens a batch's prefetch window over ns stages: prefetches the first keys and returns
 * how many keys ahead of its probe each key is prefetched (PREFETCH_LINES / ns, at least
 * 2). The batch loop then prefetches h[i + ahead] before probing h[i].
 */
/* Keys a batch prefetches ahead of their probe when each touches `stages` cache lines and
 * `lines` may be in flight: at least 2. */
static inline size_t lines_ahead(uint32_t lines, uint32_t stages)
{
    return stages >= lines / 2 ? 2 : lines / stages;
}

__attribute__((always_inline)) static inline size_t
prefetch_window(const struct sbf *f, uint32_t ns, const struct sbf_hash *h, size_t n)
{
    size_t ahead = lines_ahead(PREFETCH_LINES, ns);
    for (size_t i = 0; i < n && i < ahead; i++)
        prefetch(f, ns, h[i]);
    return ahead;
}

void sbf_check_batch(const struct sbf *f, const struct sbf_hash *h, size_t n, bool *present)
{
    uint32_t ns = atomic_load_explicit(&f->nstages, memory_order_acquire);
    size_t ahead = prefetch_window(f, ns, h, n);
    for (size_t i = 0; i < n; i++) {
        if (i + ahead < n)
            prefetch(f, ns, h[i + ahead]);
        present[i] = has(f, ns, h[i]);
    }
}

/* The shared loop of add/checkadd batches; present may be NULL. A stage appended
 * mid-batch is simply not prefetched for the keys already ahead. */
static int add_batch(struct sbf *f, const struct sbf_hash *h, size_t n, bool *present,
                     size_t *added)
{
    size_t count = 0;
    int rc = SBF_OK;
    uint32_t ns = atomic_load_explicit(&f->nstages, memory_order_relaxed);
    size_t ahead = prefetch_window(f, ns, h, n);
    for (size_t i = 0; i < n; i++) {
        if (i + ahead < n)
            prefetch(f, ns, h[i + ahead]);
        bool p;
        rc = add_one(f, h[i], &p);
        if (rc != SBF_OK)
            break;
        if (present)
            present[i] = p;
        count += !p;
        ns = atomic_load_explicit(&f->nstages, memory_order_relaxed);
    }
    if (added)
        *added = count;
    return rc;
}

int sbf_add_batch(struct sbf *f, const struct sbf_hash *h, size_t n, size_t *added)
{
    return add_batch(f, h, n, NULL, added);
}

int sbf_checkadd_batch(struct sbf *f, const struct sbf_hash *h, size_t n, bool *present)
{
    return add_batch(f, h, n, present, NULL);
}

/* ---- sharded adds (replay from several threads) ---- */

uint64_t sbf_room(const struct sbf *f)
{
    uint32_t n = atomic_load_explicit(&f->nstages, memory_order_acquire);
    const struct sbf_stage *s = &f->stages[n - 1];
    uint64_t items = atomic_load_explicit(&s->items, memory_order_relaxed);
    return items < s->capacity ? s->capacity - items : 0;
}

/* The probe of add_one() without growth, for a key whose newest-stage block this shard
 * owns (older stages unprobed if fresh); counts it in *count instead of the stage. */
static inline void shard_add_one(struct sbf *f, uint32_t n, struct sbf_hash h, bool fresh,
                                 size_t *count)
{
    _Atomic uint64_t *block;
    if (newest_probe(f, n, h, !fresh, &block))
        return;
    bloom_set_key(block, h, n - 1, f->stages[n - 1].k);
    (*count)++;
}

/*
 * Walks the whole batch but probes only the keys whose newest-stage block lies in this
 * shard's slice of blocks, through a ring of keys whose blocks were prefetched.
 */
int sbf_add_batch_shard(struct sbf *f, const struct sbf_hash *h, size_t n, unsigned shard,
                        unsigned nshards, bool fresh, size_t *added)
{
    __extension__ typedef unsigned __int128 u128;
    if (nshards == 0 || shard >= nshards)
        return SBF_EINVAL; /* n <= sbf_room() is the caller's to check: shards that have
                              finished already count their keys */
    uint32_t ns = atomic_load_explicit(&f->nstages, memory_order_acquire);
    const struct sbf_stage *s = &f->stages[ns - 1];
    uint64_t lo = (uint64_t)(((u128)s->nblocks * shard) / nshards);
    uint64_t hi = (uint64_t)(((u128)s->nblocks * (shard + 1)) / nshards);
    size_t ahead = lines_ahead(SHARD_LINES, fresh ? 1 : ns); /* fresh: the newest only */
    struct sbf_hash ring[SHARD_LINES];
    size_t head = 0, len = 0, count = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t b = bloom_block(h[i], ns - 1, s->nblocks);
        if (b < lo || b >= hi)
            continue;
        if (len == ahead) {
            shard_add_one(f, ns, ring[head], fresh, &count);
            head = (head + 1) % ahead;
            len--;
        }
        if (fresh)
            __builtin_prefetch((const void *)stage_block(s, ns - 1, h[i]), 0, 3);
        else
            prefetch(f, ns, h[i]);
        ring[(head + len) % ahead] = h[i];
        len++;
    }
    for (; len > 0; len--, head = (head + 1) % ahead)
        shard_add_one(f, ns, ring[head], fresh, &count);
    atomic_fetch_add_explicit(&f->stages[ns - 1].items, count, memory_order_relaxed);
    if (added)
        *added = count;
    return SBF_OK;
}

/* ---- figures ---- */

/* The keys a stage holds, estimated from its bits set. */
static double items_of(const struct sbf_stage *s, uint64_t set)
{
    static const double bits = BLOOM_BLOCK_BITS;
    double total = (double)s->nblocks * bits;
    double zero = 1.0 - (double)set / total;
    double per_key = 1.0 - pow(1.0 - 1.0 / bits, (double)s->k);
    /* A saturated stage says only "at least this many"; cap at one key per bit. */
    return zero > 0.0 ? fmin(-log(zero) / per_key * (double)s->nblocks, total) : total;
}

/*
 * One pass over a stage: items estimated from the fill (for a blocked stage the expected
 * zero fraction is exp(-lambda * (1 - (1-1/512)^k)), inverted for lambda = keys per block)
 * and the exact rate a random absent key would see now: the mean over blocks of
 * (set bits / 512)^k.
 */
static void stage_scan(const struct sbf_stage *s, double *items, double *fp)
{
    static const double bits = BLOOM_BLOCK_BITS;
    uint64_t hist[BLOOM_BLOCK_BITS + 1] = {0};
    uint64_t set = 0;
    for (uint64_t b = 0; b < s->nblocks; b++) {
        unsigned c = 0;
        for (unsigned w = 0; w < BLOOM_BLOCK_WORDS; w++)
            c += (unsigned)__builtin_popcountll(
                atomic_load_explicit(&s->bits[b * BLOOM_BLOCK_WORDS + w], memory_order_relaxed));
        hist[c]++;
        set += c;
    }
    double sum = 0.0;
    for (unsigned c = 1; c <= BLOOM_BLOCK_BITS; c++)
        if (hist[c])
            sum += (double)hist[c] * pow((double)c / bits, (double)s->k);
    *fp = sum / (double)s->nblocks;
    *items = items_of(s, set);
}

void sbf_info(const struct sbf *f, struct sbf_info *out)
{
    uint32_t n = atomic_load_explicit(&f->nstages, memory_order_acquire);
    memset(out, 0, sizeof(*out));
    out->stages = n;
    out->header = sizeof(*f);
    for (uint32_t i = 0; i < n; i++) {
        const struct sbf_stage *s = &f->stages[i];
        out->bytes += s->nblocks * BLOOM_BLOCK_BYTES;
        out->capacity += s->capacity;
        out->items += atomic_load_explicit(&s->items, memory_order_relaxed);
    }
}

int sbf_verify(const struct sbf *f)
{
    uint32_t n = atomic_load_explicit(&f->nstages, memory_order_acquire);
    /* The loop plans stage 0 too, so the range check suffices for the parameters. */
    if (n < 1 || n > SBF_MAX_STAGES || !sbf_params_in_range(&f->params))
        return SBF_ECORRUPT;
    for (uint32_t i = 0; i < SBF_MAX_STAGES; i++) {
        const struct sbf_stage *s = &f->stages[i];
        if (i >= n) {
            if (s->mem || s->bits)
                return SBF_ECORRUPT;
            continue;
        }
        uint64_t cap;
        struct bloom_geom g;
        if (sbf_stage_plan(&f->params, i, &cap, &g) != SBF_OK || s->capacity != cap ||
            s->nblocks != g.nblocks || s->k != g.k || !s->mem || !s->bits ||
            ((uintptr_t)s->bits & (BLOOM_BLOCK_BYTES - 1)) != 0 ||
            atomic_load_explicit(&s->items, memory_order_relaxed) > s->nblocks * BLOOM_BLOCK_BITS)
            return SBF_ECORRUPT;
    }
    return SBF_OK;
}

void sbf_estimate(const struct sbf *f, struct sbf_estimate *out)
{
    uint32_t n = atomic_load_explicit(&f->nstages, memory_order_acquire);
    double items = 0.0, pass = 1.0;
    for (uint32_t i = 0; i < n; i++) {
        double it, fp;
        stage_scan(&f->stages[i], &it, &fp);
        items += it;
        pass *= 1.0 - fp;
    }
    out->items = items;
    out->error = 1.0 - pass;
}

/* ---- set operations ---- */

static void set_items_from_estimate(struct sbf_stage *s)
{
    double it, fp;
    stage_scan(s, &it, &fp);
    atomic_store_explicit(&s->items, (uint64_t)llround(it), memory_order_relaxed);
}

/* True if dst | src, one stage each, would hold more keys than dst's capacity (by the
 * estimate from its bits): a filter that does not grow refuses such a union, as it refuses
 * the key past its capacity, instead of breaking its promise. */
static bool union_overfills(const struct sbf *dst, const struct sbf *src)
{
    const struct sbf_stage *d = &dst->stages[0], *s = &src->stages[0];
    uint64_t words = d->nblocks * BLOOM_BLOCK_WORDS, set = 0;
    for (uint64_t w = 0; w < words; w++)
        set +=
            (uint64_t)__builtin_popcountll(atomic_load_explicit(&d->bits[w], memory_order_relaxed) |
                                           atomic_load_explicit(&s->bits[w], memory_order_relaxed));
    return items_of(d, set) > (double)d->capacity;
}

int sbf_union(struct sbf *dst, const struct sbf *src)
{
    if (!sbf_compatible(dst, src))
        return SBF_EINCOMPAT;
    if (dst->params.growth == SBF_GROWTH_NONE && union_overfills(dst, src))
        return SBF_EFULL;
    uint32_t nd = atomic_load_explicit(&dst->nstages, memory_order_relaxed);
    uint32_t ns = atomic_load_explicit(&src->nstages, memory_order_acquire);
    for (uint32_t i = nd; i < ns; i++) {
        int rc = stage_new(dst, i);
        if (rc != SBF_OK) {
            while (i-- > nd)
                stage_free(dst, &dst->stages[i]);
            return rc;
        }
    }
    for (uint32_t i = 0; i < ns; i++) {
        struct sbf_stage *d = &dst->stages[i];
        const struct sbf_stage *s = &src->stages[i];
        uint64_t words = s->nblocks * BLOOM_BLOCK_WORDS;
        /* dst's writer is this call (union is a writer call on dst, kind.h), so a load
         * and a store suffice, as in bloom_set_key; src may have its own writer, whose
         * words are only read here. */
        for (uint64_t w = 0; w < words; w++) {
            uint64_t v = atomic_load_explicit(&s->bits[w], memory_order_relaxed);
            uint64_t o = atomic_load_explicit(&d->bits[w], memory_order_relaxed);
            if ((o | v) != o)
                atomic_store_explicit(&d->bits[w], o | v, memory_order_relaxed);
        }
    }
    if (ns > nd)
        atomic_store_explicit(&dst->nstages, ns, memory_order_release);
    for (uint32_t i = 0; i < ns; i++)
        set_items_from_estimate(&dst->stages[i]);
    return SBF_OK;
}

int sbf_intersect(struct sbf *dst, const struct sbf *src)
{
    if (!sbf_compatible(dst, src))
        return SBF_EINCOMPAT;
    /* Which stage a key went to depends on when each filter grew, so only single-stage
     * filters can be intersected without losing keys held by both. */
    if (atomic_load_explicit(&dst->nstages, memory_order_relaxed) != 1 ||
        atomic_load_explicit(&src->nstages, memory_order_acquire) != 1)
        return SBF_EGROWN;
    struct sbf_stage *d = &dst->stages[0];
    const struct sbf_stage *s = &src->stages[0];
    uint64_t words = d->nblocks * BLOOM_BLOCK_WORDS;
    for (uint64_t w = 0; w < words; w++) {
        /* Exclusive on dst: a plain load and store, as in bloom_set_key. */
        uint64_t v = atomic_load_explicit(&s->bits[w], memory_order_relaxed);
        uint64_t o = atomic_load_explicit(&d->bits[w], memory_order_relaxed);
        atomic_store_explicit(&d->bits[w], o & v, memory_order_relaxed);
    }
    set_items_from_estimate(d);
    return SBF_OK;
}

void sbf_clear(struct sbf *f)
{
    uint32_t n = atomic_load_explicit(&f->nstages, memory_order_relaxed);
    for (uint32_t i = 1; i < n; i++)
        stage_free(f, &f->stages[i]);
    struct sbf_stage *s = &f->stages[0];
    size_t bytes = (size_t)(s->nblocks * BLOOM_BLOCK_BYTES);
    struct sbf_stage fresh = {0};
    /* A fresh lazily-zeroed mapping gives the resident memory back; memset if that fails. */
    if (s->maplen && bits_alloc(&fresh, bytes) == SBF_OK) {
        munmap(s->mem, s->maplen);
        s->mem = fresh.mem;
        s->maplen = fresh.maplen;
        s->bits = fresh.bits;
    } else {
        memset((void *)s->bits, 0, bytes);
    }
    atomic_store_explicit(&s->items, 0, memory_order_relaxed);
    atomic_store_explicit(&f->nstages, 1, memory_order_release);
}
