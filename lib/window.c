/*
 * window.c - the windowed filter: a ring of sbf generations over a fixed span schedule,
 * and its codec. Tuned for click streams: CHECKADD of mostly new keys, so every batch
 * probes every live generation (one prefetched sbf batch each) and adds to the newest.
 * Invariants: the live generations are the newest `live` ring slots, of strictly
 * decreasing spans, all within the last g spans of the current one; the current span
 * only grows; a generation leaves the ring only to be retired or freed.
 *
 * Codec, version 1, every integer little-endian, doubles as their IEEE-754 bits:
 *   header  "BLOOMWIN" u32 version=1, u32 g, u64 window_ms, i64 epoch_ms, u64 span,
 *           u64 capacity, f64 error, u32 growth, f64 scale, f64 ratio, u32 live (80 bytes)
 *   gens    live x { u64 span, i64 start_ms, u64 stream bytes }, newest first (24 each)
 *   streams each generation's sbf_encode_stages stream (sbf format v2: its length is
 *           known before it is written), in the same order
 *   u64 XXH3-64 of every byte before it, then end of input.
 */
#include "lib/window.h"

#include "lib/le.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "lib/sbf_internal.h"
#include "lib/stream.h"

/* Ring slots: twice the most live generations, so a slot is reused only after the
 * generation it held was dropped at least WINDOW_MAX_GENERATIONS generations ago. */
#define RING 32u
#define CHUNK 256u /* keys per pass over the generations: bounds the stack arrays */

#define CODEC_VERSION 1u
#define HEADER_BYTES 80u
#define GEN_BYTES 24u
/* Most bytes of an sbf stream that are not bits: its header, 64 stage records, checksum. */
#define STREAM_OVERHEAD (52u + 28u * SBF_MAX_STAGES + 8u)

/* The live state in one word, so a reader sees span, head and count together; spans stay
 * below 2^47 (WINDOW_MAX_TIME over spans of at least 66 ms), so 48 bits hold them. */
#define STATE_SPAN_SHIFT 16

static const unsigned char codec_magic[8] = {'B', 'L', 'O', 'O', 'M', 'W', 'I', 'N'};

struct slot {
    struct sbf *_Atomic f; /* the generation, or NULL once dropped */
    _Atomic uint64_t span; /* the span it was started for */
};

struct window {
    struct window_params params;
    struct sbf_params gen;    /* every generation's sbf parameters */
    struct sbf_budget budget; /* copied from creation */
    int64_t epoch;            /* start of span 0, Unix ms */
    _Atomic uint64_t state;   /* span << 16 | head << 8 | live; release-published */
    struct slot ring[RING];   /* live generations: head, head-1, ... (mod RING) */
};

struct state {
    uint64_t span; /* current span: adds go to a generation of this span */
    uint32_t head; /* slot of the newest live generation */
    uint32_t live; /* live generations, 0..g */
};

static struct state unpack(uint64_t v)
{
    return (struct state){.span = v >> STATE_SPAN_SHIFT,
                          .head = (uint32_t)(v >> 8) & (RING - 1),
                          .live = (uint32_t)v & 0xffu};
}

static uint64_t pack(struct state s)
{
    return s.span << STATE_SPAN_SHIFT | (uint64_t)s.head << 8 | s.live;
}

static struct state load_state(const struct window *w)
{
    return unpack(atomic_load_explicit(&w->state, memory_order_acquire));
}

static void publish(struct window *w, struct state s)
{
    atomic_store_explicit(&w->state, pack(s), memory_order_release);
}

/* Slot of the c-th live generation, newest first. */
static const struct slot *slot_at(const struct window *w, struct state s, uint32_t c)
{
    return &w->ring[(s.head + RING - c) & (RING - 1)];
}

static struct sbf *gen_at(const struct window *w, struct state s, uint32_t c)
{
    return atomic_load_explicit(&slot_at(w, s, c)->f, memory_order_relaxed);
}

/* ---- parameters and schedule ---- */

void window_generation_params(const struct window_params *p, struct sbf_params *out)
{
    *out = p->sbf;
    uint64_t g1 = p->generations > 1 ? p->generations - 1 : 1;
    out->capacity = p->sbf.capacity / g1 + (p->sbf.capacity % g1 != 0);
    out->error = p->sbf.error / (double)(p->generations ? p->generations : 1);
}

int window_params_check(const struct window_params *p)
{
    if (p->generations < WINDOW_MIN_GENERATIONS || p->generations > WINDOW_MAX_GENERATIONS ||
        p->window_ms < (uint64_t)WINDOW_MIN_MS || p->window_ms > (uint64_t)WINDOW_MAX_MS ||
        !sbf_params_in_range(&p->sbf) || p->sbf.growth == SBF_GROWTH_NONE)
        return SBF_EINVAL; /* a generation must take every key of its span: it grows */
    struct sbf_params gp;
    window_generation_params(p, &gp);
    return sbf_params_check(&gp);
}

/* floor(i·W/(g-1)) without overflow: i/(g-1) whole windows, then the rest. */
int64_t window_span_start(const struct window_params *p, int64_t epoch_ms, uint64_t i)
{
    uint64_t g1 = p->generations - 1;
    uint64_t whole = (i / g1) * p->window_ms;
    uint64_t part = ((i % g1) * p->window_ms) / g1;
    return epoch_ms + (int64_t)(whole + part);
}

/* The span holding time t >= epoch_ms (t - epoch_ms <= WINDOW_MAX_TIME: fits 48 bits). */
static uint64_t span_of(const struct window_params *p, int64_t epoch_ms, int64_t t)
{
    uint64_t g1 = p->generations - 1;
    uint64_t e = (uint64_t)(t - epoch_ms);
    uint64_t j = (e / p->window_ms) * g1 + ((e % p->window_ms) * g1) / p->window_ms;
    /* The division above may land one span early on a boundary; never later. */
    if (window_span_start(p, epoch_ms, j + 1) <= t)
        j++;
    return j;
}

static uint64_t span_at(const struct window *w, int64_t t)
{
    return span_of(&w->params, w->epoch, t);
}

/* ---- life cycle ---- */

static struct window *shell_new(const struct window_params *p, int64_t epoch,
                                const struct sbf_budget *budget)
{
    struct window *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->params = *p;
    window_generation_params(p, &w->gen);
    if (budget)
        w->budget = *budget;
    w->epoch = epoch;
    atomic_init(&w->state, 0);
    for (uint32_t i = 0; i < RING; i++) {
        atomic_init(&w->ring[i].f, NULL);
        atomic_init(&w->ring[i].span, 0);
    }
    return w;
}

/* Makes sure the current span has a generation; 0 or SBF_ENOMEM. Writer only. */
static int ensure_current(struct window *w)
{
    struct state s = unpack(atomic_load_explicit(&w->state, memory_order_relaxed));
    if (s.live > 0 && atomic_load_explicit(&slot_at(w, s, 0)->span, memory_order_relaxed) == s.span)
        return SBF_OK;
    struct sbf *f;
    int rc = sbf_new(&w->gen, &w->budget, &f);
    if (rc != SBF_OK)
        return SBF_ENOMEM; /* the parameters were checked at creation */
    struct state n = {.span = s.span, .head = (s.head + 1) & (RING - 1), .live = s.live + 1};
    struct slot *sl = &w->ring[n.head];
    atomic_store_explicit(&sl->f, f, memory_order_relaxed);
    atomic_store_explicit(&sl->span, s.span, memory_order_relaxed);
    publish(w, n);
    return SBF_OK;
}

static void release_gen(void *mem)
{
    sbf_free(mem);
}

int window_new(const struct window_params *p, int64_t now_ms, const struct sbf_budget *budget,
               struct window **out)
{
    if (window_params_check(p) != SBF_OK || now_ms < 0 || now_ms > WINDOW_MAX_TIME)
        return SBF_EINVAL;
    struct window *w = shell_new(p, now_ms, budget);
    if (!w)
        return SBF_ENOMEM;
    int rc = ensure_current(w);
    if (rc != SBF_OK) {
        free(w);
        return rc;
    }
    *out = w;
    return SBF_OK;
}

int window_new_like(const struct window *src, const struct sbf_budget *budget, struct window **out)
{
    struct window *w = shell_new(&src->params, src->epoch, budget);
    if (!w)
        return SBF_ENOMEM;
    struct state s = {.span = load_state(src).span, .head = 0, .live = 0};
    publish(w, s);
    int rc = ensure_current(w);
    if (rc != SBF_OK) {
        free(w);
        return rc;
    }
    *out = w;
    return SBF_OK;
}

void window_free(struct window *w)
{
    if (!w)
        return;
    struct state s = unpack(atomic_load_explicit(&w->state, memory_order_relaxed));
    for (uint32_t c = 0; c < s.live; c++)
        sbf_free(gen_at(w, s, c));
    free(w);
}

int window_advance(struct window *w, int64_t now_ms, kind_retire_fn retire, void *ctx)
{
    struct state s = unpack(atomic_load_explicit(&w->state, memory_order_relaxed));
    if (now_ms > WINDOW_MAX_TIME)
        now_ms = WINDOW_MAX_TIME;
    uint64_t j = now_ms < w->epoch ? 0 : span_at(w, now_ms);
    if (j <= s.span)
        return ensure_current(w); /* earlier or same span: nothing expires */

    /* Keep the generations of spans j-g+1 .. j-1; the list is newest first. */
    uint32_t keep = 0;
    while (keep < s.live &&
           j - atomic_load_explicit(&slot_at(w, s, keep)->span, memory_order_relaxed) <
               w->params.generations)
        keep++;
    struct sbf *dropped[WINDOW_MAX_GENERATIONS];
    uint32_t ndropped = 0;
    for (uint32_t c = keep; c < s.live; c++) {
        struct slot *sl = &w->ring[(s.head + RING - c) & (RING - 1)];
        dropped[ndropped++] = atomic_load_explicit(&sl->f, memory_order_relaxed);
        atomic_store_explicit(&sl->f, NULL, memory_order_relaxed);
    }
    publish(w, (struct state){.span = j, .head = s.head, .live = keep});
    /* Only now unreachable for new readers; older ones are the retire callee's care. */
    for (uint32_t i = 0; i < ndropped; i++) {
        if (retire)
            retire(ctx, release_gen, dropped[i]);
        else
            sbf_free(dropped[i]);
    }
    return ensure_current(w);
}

void window_clear(struct window *w)
{
    struct state s = unpack(atomic_load_explicit(&w->state, memory_order_relaxed));
    for (uint32_t c = 0; c < s.live; c++) {
        struct slot *sl = &w->ring[(s.head + RING - c) & (RING - 1)];
        sbf_free(atomic_load_explicit(&sl->f, memory_order_relaxed));
        atomic_store_explicit(&sl->f, NULL, memory_order_relaxed);
    }
    publish(w, (struct state){.span = s.span, .head = s.head, .live = 0});
    /* On failure the window stays empty; the next add or advance retries. */
    (void)ensure_current(w);
}

const struct window_params *window_params(const struct window *w)
{
    return &w->params;
}

bool window_compatible(const struct window *a, const struct window *b)
{
    const struct window_params *x = &a->params, *y = &b->params;
    return x->window_ms == y->window_ms && x->generations == y->generations &&
           x->sbf.capacity == y->sbf.capacity && x->sbf.error == y->sbf.error &&
           x->sbf.growth == y->sbf.growth && x->sbf.scale == y->sbf.scale &&
           x->sbf.ratio == y->sbf.ratio;
}

/* ---- batches ---- */

/* present[i] |= "some generation c in [from, live) holds h[i]". */
static void check_older(const struct window *w, struct state s, uint32_t from,
                        const struct sbf_hash *h, size_t n, bool *present)
{
    bool tmp[CHUNK];
    for (uint32_t c = from; c < s.live; c++) {
        sbf_check_batch(gen_at(w, s, c), h, n, tmp);
        for (size_t i = 0; i < n; i++)
            present[i] |= tmp[i];
    }
}

void window_check_batch(const struct window *w, const struct sbf_hash *h, size_t n, bool *present)
{
    struct state s = load_state(w);
    for (size_t at = 0; at < n; at += CHUNK) {
        size_t m = n - at < CHUNK ? n - at : CHUNK;
        if (s.live == 0) {
            memset(present + at, 0, m * sizeof(bool));
            continue;
        }
        sbf_check_batch(gen_at(w, s, 0), h + at, m, present + at);
        check_older(w, s, 1, h + at, m, present + at);
    }
}

/*
 * The shared loop of add/checkadd: per chunk, the older generations are checked for all
 * keys (they do not change during the batch), then the keys none of them holds go to
 * the newest generation in order, so a key repeated in the batch is present the second
 * time. present may be NULL.
 */
static int add_batch(struct window *w, const struct sbf_hash *h, size_t n, bool *present,
                     size_t *added)
{
    size_t count = 0;
    int rc = ensure_current(w);
    struct state s = unpack(atomic_load_explicit(&w->state, memory_order_relaxed));
    struct sbf *newest = rc == SBF_OK ? gen_at(w, s, 0) : NULL;
    for (size_t at = 0; at < n && rc == SBF_OK; at += CHUNK) {
        size_t m = n - at < CHUNK ? n - at : CHUNK;
        bool old[CHUNK] = {false}, fresh[CHUNK];
        struct sbf_hash pick[CHUNK];
        size_t idx[CHUNK], k = 0, a = 0;
        check_older(w, s, 1, h + at, m, old);
        for (size_t i = 0; i < m; i++)
            if (!old[i]) {
                pick[k] = h[at + i];
                idx[k++] = i;
            }
        if (present) {
            rc = sbf_checkadd_batch(newest, pick, k, fresh);
            for (size_t i = 0; i < k; i++)
                old[idx[i]] = fresh[i];
            memcpy(present + at, old, m * sizeof(bool));
        } else {
            rc = sbf_add_batch(newest, pick, k, &a);
            count += a;
        }
    }
    if (added)
        *added = count;
    return rc;
}

int window_add_batch(struct window *w, const struct sbf_hash *h, size_t n, size_t *added)
{
    return add_batch(w, h, n, NULL, added);
}

int window_checkadd_batch(struct window *w, const struct sbf_hash *h, size_t n, bool *present)
{
    return add_batch(w, h, n, present, NULL);
}

/* ---- figures ---- */

void window_info(const struct window *w, struct window_info *out)
{
    struct state s = load_state(w);
    memset(out, 0, sizeof(*out));
    out->live = s.live;
    out->epoch_ms = w->epoch;
    out->span = s.span;
    out->header = sizeof(*w);
    for (uint32_t c = 0; c < s.live; c++) {
        struct sbf_info si;
        sbf_info(gen_at(w, s, c), &si);
        out->header += si.header;
        out->bytes += si.bytes;
        out->items += si.items;
        out->capacity += si.capacity;
        if (si.stages > out->stages)
            out->stages = si.stages;
    }
}

uint32_t window_generations(const struct window *w, struct window_gen out[WINDOW_MAX_GENERATIONS])
{
    struct state s = load_state(w);
    for (uint32_t c = 0; c < s.live; c++) {
        struct sbf_info si;
        sbf_info(gen_at(w, s, c), &si);
        uint64_t span = atomic_load_explicit(&slot_at(w, s, c)->span, memory_order_relaxed);
        out[c] = (struct window_gen){.sbf = gen_at(w, s, c),
                                     .span = span,
                                     .start_ms = window_span_start(&w->params, w->epoch, span),
                                     .items = si.items,
                                     .bytes = si.bytes,
                                     .stages = si.stages};
    }
    return s.live;
}

void window_estimate(const struct window *w, struct sbf_estimate *out)
{
    struct state s = load_state(w);
    double items = 0.0, pass = 1.0;
    for (uint32_t c = 0; c < s.live; c++) {
        struct sbf_estimate e;
        sbf_estimate(gen_at(w, s, c), &e);
        items += e.items;
        pass *= 1.0 - e.error;
    }
    out->items = items;
    out->error = 1.0 - pass;
}

static bool same_sbf_params(const struct sbf_params *a, const struct sbf_params *b)
{
    return a->capacity == b->capacity && a->error == b->error && a->growth == b->growth &&
           a->scale == b->scale && a->ratio == b->ratio;
}

int window_verify(const struct window *w)
{
    struct state s = load_state(w);
    if (window_params_check(&w->params) != SBF_OK || s.live > w->params.generations ||
        w->epoch < 0 || w->epoch > WINDOW_MAX_TIME)
        return SBF_ECORRUPT;
    struct sbf_params gp;
    window_generation_params(&w->params, &gp);
    if (!same_sbf_params(&gp, &w->gen))
        return SBF_ECORRUPT;
    uint64_t prev = s.span + 1;
    for (uint32_t c = 0; c < s.live; c++) {
        const struct slot *sl = slot_at(w, s, c);
        struct sbf *f = atomic_load_explicit(&sl->f, memory_order_relaxed);
        uint64_t span = atomic_load_explicit(&sl->span, memory_order_relaxed);
        if (!f || span >= prev || s.span - span >= w->params.generations ||
            sbf_verify(f) != SBF_OK || !same_sbf_params(sbf_params(f), &w->gen))
            return SBF_ECORRUPT;
        prev = span;
    }
    /* Dropped slots hold nothing. */
    for (uint32_t c = s.live; c < RING; c++)
        if (atomic_load_explicit(&slot_at(w, s, c)->f, memory_order_relaxed) != NULL)
            return SBF_ECORRUPT;
    return SBF_OK;
}

/* ---- codec ---- */

/* What encode writes, pinned once: the state and every generation's stage count. */
struct plan {
    struct state s;
    struct sbf *gens[WINDOW_MAX_GENERATIONS];
    uint64_t spans[WINDOW_MAX_GENERATIONS];
    uint32_t stages[WINDOW_MAX_GENERATIONS];
};

static void plan_of(const struct window *w, struct plan *pl)
{
    pl->s = load_state(w);
    for (uint32_t c = 0; c < pl->s.live; c++) {
        pl->gens[c] = gen_at(w, pl->s, c);
        pl->spans[c] = atomic_load_explicit(&slot_at(w, pl->s, c)->span, memory_order_relaxed);
        pl->stages[c] = sbf_stage_count(pl->gens[c]);
    }
}

uint64_t window_encoded_size(const struct window *w)
{
    struct plan pl;
    plan_of(w, &pl);
    uint64_t size = HEADER_BYTES + (uint64_t)GEN_BYTES * pl.s.live + 8;
    for (uint32_t c = 0; c < pl.s.live; c++)
        size += sbf_encoded_size_stages(pl.gens[c], pl.stages[c]);
    return size;
}

int window_encode(const struct window *w, sbf_write_fn write, void *ctx)
{
    struct plan pl;
    plan_of(w, &pl);
    const struct window_params *p = &w->params;
    unsigned char buf[HEADER_BYTES + GEN_BYTES * WINDOW_MAX_GENERATIONS];
    memcpy(buf, codec_magic, sizeof(codec_magic));
    le_put32(buf + 8, CODEC_VERSION);
    le_put32(buf + 12, p->generations);
    le_put64(buf + 16, p->window_ms);
    le_put64(buf + 24, (uint64_t)w->epoch);
    le_put64(buf + 32, pl.s.span);
    le_put64(buf + 40, p->sbf.capacity);
    le_put64(buf + 48, le_f64_bits(p->sbf.error));
    le_put32(buf + 56, (uint32_t)p->sbf.growth);
    le_put64(buf + 60, le_f64_bits(p->sbf.scale));
    le_put64(buf + 68, le_f64_bits(p->sbf.ratio));
    le_put32(buf + 76, pl.s.live);
    unsigned char *q = buf + HEADER_BYTES;
    for (uint32_t c = 0; c < pl.s.live; c++, q += GEN_BYTES) {
        le_put64(q, pl.spans[c]);
        le_put64(q + 8, (uint64_t)window_span_start(p, w->epoch, pl.spans[c]));
        le_put64(q + 16, sbf_encoded_size_stages(pl.gens[c], pl.stages[c]));
    }
    struct stream_writer wr;
    stream_writer_init(&wr, write, ctx);
    int rc = stream_write(&wr, buf, (size_t)(q - buf));
    for (uint32_t c = 0; c < pl.s.live && rc == SBF_OK; c++)
        rc = sbf_encode_stages(pl.gens[c], pl.stages[c], stream_write_fn, &wr);
    return rc == SBF_OK ? stream_write_sum(&wr) : rc;
}

/* A generation as the table declares it, once checked. */
struct gen_decl {
    uint64_t span, stream, bits;
};

/* Checks the header and generation table; fills p, epoch, s and d. Allocates nothing. */
static int check_header(struct stream_reader *r, uint64_t max_bytes, struct window_params *p,
                        int64_t *epoch, struct state *s, struct gen_decl *d)
{
    unsigned char hdr[HEADER_BYTES];
    int rc = stream_take(r, hdr, sizeof(hdr));
    if (rc != SBF_OK)
        return rc;
    if (memcmp(hdr, codec_magic, sizeof(codec_magic)) != 0)
        return SBF_ECORRUPT;
    if (le_get32(hdr + 8) != CODEC_VERSION)
        return SBF_EVERSION;
    uint32_t growth = le_get32(hdr + 56);
    if (growth > SBF_GROWTH_LINEAR)
        return SBF_ECORRUPT;
    *p = (struct window_params){
        .sbf = {.capacity = le_get64(hdr + 40),
                .error = le_bits_f64(le_get64(hdr + 48)),
                .growth = (enum sbf_growth)growth,
                .scale = le_bits_f64(le_get64(hdr + 60)),
                .ratio = le_bits_f64(le_get64(hdr + 68))},
        .window_ms = le_get64(hdr + 16),
        .generations = le_get32(hdr + 12),
    };
    *epoch = (int64_t)le_get64(hdr + 24);
    s->span = le_get64(hdr + 32);
    s->live = le_get32(hdr + 76);
    s->head = s->live > 0 ? s->live - 1 : 0;
    if (window_params_check(p) != SBF_OK || *epoch < 0 || *epoch > WINDOW_MAX_TIME ||
        s->span > span_of(p, *epoch, WINDOW_MAX_TIME) || le_get32(hdr + 76) > p->generations)
        return SBF_ECORRUPT;

    unsigned char tab[GEN_BYTES * WINDOW_MAX_GENERATIONS];
    rc = stream_take(r, tab, (size_t)GEN_BYTES * s->live);
    if (rc != SBF_OK)
        return rc;
    struct sbf_params gp;
    window_generation_params(p, &gp);
    uint64_t total = 0, prev = s->span + 1;
    for (uint32_t c = 0; c < s->live; c++) {
        const unsigned char *q = tab + (size_t)GEN_BYTES * c;
        d[c].span = le_get64(q);
        d[c].stream = le_get64(q + 16);
        /* A stream is its bits plus at most STREAM_OVERHEAD: refuse a length that stands
         * for more bits than max_bytes before planning its stages. */
        if (total > max_bytes ||
            (d[c].stream > STREAM_OVERHEAD && d[c].stream - STREAM_OVERHEAD > max_bytes - total))
            return SBF_ETOOBIG;
        if (d[c].span >= prev || s->span - d[c].span >= p->generations ||
            (int64_t)le_get64(q + 8) != window_span_start(p, *epoch, d[c].span) ||
            sbf_stream_stages(&gp, d[c].stream, &d[c].bits) == 0)
            return SBF_ECORRUPT;
        prev = d[c].span;
        total += d[c].bits; /* each < 2^62 (64 stages < 2^56): no overflow over 16 */
    }
    return total > max_bytes ? SBF_ETOOBIG : SBF_OK;
}

int window_decode(sbf_read_fn read, void *ctx, uint64_t max_bytes, const struct sbf_budget *budget,
                  struct window **out)
{
    struct stream_reader r;
    stream_reader_init(&r, read, ctx);
    struct window_params p;
    int64_t epoch;
    struct state s;
    struct gen_decl d[WINDOW_MAX_GENERATIONS];
    int rc = check_header(&r, max_bytes, &p, &epoch, &s, d);
    if (rc != SBF_OK)
        return rc;
    uint64_t total = 0;
    for (uint32_t c = 0; c < s.live; c++)
        total += d[c].bits; /* check_header bounded the sum */
    rc = sbf_budget_try(budget, total);
    if (rc != SBF_OK)
        return rc;

    struct window *w = shell_new(&p, epoch, budget);
    if (!w)
        return SBF_ENOMEM;
    /* Slots newest first from s.head down; published as each one is complete. */
    struct state built = {.span = s.span, .head = s.head, .live = 0};
    for (uint32_t c = 0; c < s.live; c++) {
        stream_reader_limit(&r, d[c].stream);
        struct sbf *f = NULL;
        rc = sbf_decode_fixed(stream_read_fn, &r, d[c].bits, &w->budget, &f);
        if (rc == SBF_OK && (r.left != 0 || !same_sbf_params(sbf_params(f), &w->gen))) {
            sbf_free(f);
            rc = SBF_ECORRUPT;
        }
        if (rc != SBF_OK) {
            /* An inner stream whose bits exceed what its length stands for is corrupt. */
            rc = rc == SBF_ETOOBIG ? SBF_ECORRUPT : rc;
            goto fail;
        }
        struct slot *sl = &w->ring[(s.head + RING - c) & (RING - 1)];
        atomic_store_explicit(&sl->f, f, memory_order_relaxed);
        atomic_store_explicit(&sl->span, d[c].span, memory_order_relaxed);
        /* live counts from the newest: slots head .. head-c hold generations 0..c. */
        built.live = c + 1;
        publish(w, built);
    }
    publish(w, (struct state){.span = s.span, .head = s.head, .live = s.live});
    rc = stream_read_sum(&r);
    if (rc != SBF_OK)
        goto fail;
    *out = w;
    return SBF_OK;
fail:
    window_free(w);
    return rc;
}
