/*
 * codec.c - the on-disk/over-the-wire format of a filter, streamed through callbacks.
 * Every integer little-endian, doubles as their IEEE-754 binary64 bits:
 *   header  "BLOOMSBF" u32 version, u32 nstages, u64 capacity, f64 error, u32 growth,
 *           f64 scale, f64 ratio                                              (52 bytes)
 *   stages  nstages x { u64 capacity, u64 items, u64 nblocks, u32 k }         (28 bytes each)
 *   bits    v2: each stage's nblocks*8 words, in stage order (fixed size: the window kind
 *           writes this, since it states each stream's length before the stream).
 *           v3 (sbf_encode): each stage cut into 4 KiB chunks (the last one shorter), as
 *           runs: u8 type, u64 count; type 0 = count all-zero chunks, no bytes; type 1 =
 *           count (1..16) raw chunks, their words follow. Canonical, and refused otherwise:
 *           no zero run after a zero run, no raw run after a raw run of fewer than 16, no
 *           all-zero raw chunk, runs never cross a stage's end.
 *   u64 XXH3-64 of every byte before it (as written, runs included), then end of input.
 * Workload: mostly empty filters of hundreds of MiB; loading stores only non-zero 64-byte
 * blocks into the fresh (zeroed, lazily mapped) stage memory, so zero pages stay untouched.
 */
#include <stdlib.h>
#include <string.h>

#include "lib/le.h"
#include "lib/sbf.h"
#include "lib/sbf_internal.h"
#include "lib/stream.h"

/* The version names the stage geometry rule too, since the loader recomputes and compares
 * it: v1 sized stages with the textbook per-block rate, v2 with the exact one; v3 is v2's
 * geometry with zero runs. */
#define CODEC_VERSION 3u
#define CODEC_VERSION_FIXED 2u
#define HEADER_BYTES 52u
#define STAGE_BYTES 28u
#define CHUNK_BYTES ((size_t)64 * 1024) /* bits move in chunks of this size */
#define RUN_CHUNK ((size_t)4096)        /* v3: one page of bits per chunk */
#define RUN_MAX_RAW 16u                 /* v3: raw chunks per run (fills CHUNK_BYTES) */
#define RUN_BYTES 9u                    /* v3: u8 type + u64 count */
#define RUN_ZERO 0u
#define RUN_RAW 1u

static const unsigned char codec_magic[8] = {'B', 'L', 'O', 'O', 'M', 'S', 'B', 'F'};

uint32_t sbf_stage_count(const struct sbf *f)
{
    return atomic_load_explicit(&f->nstages, memory_order_acquire);
}

uint64_t sbf_encoded_size_stages(const struct sbf *f, uint32_t n)
{
    uint32_t have = sbf_stage_count(f);
    if (n > have)
        n = have;
    uint64_t size = HEADER_BYTES + (uint64_t)STAGE_BYTES * n + 8;
    for (uint32_t i = 0; i < n; i++)
        size += f->stages[i].nblocks * BLOOM_BLOCK_BYTES;
    return size;
}

uint32_t sbf_stream_stages(const struct sbf_params *p, uint64_t len, uint64_t *bits)
{
    uint64_t size = HEADER_BYTES + 8;
    *bits = 0;
    for (uint32_t n = 1; n <= SBF_MAX_STAGES; n++) {
        uint64_t cap;
        struct bloom_geom g;
        if (sbf_stage_plan(p, n - 1, &cap, &g) != SBF_OK)
            return 0;
        *bits += g.nblocks * BLOOM_BLOCK_BYTES; /* each < 2^56: no overflow */
        size += STAGE_BYTES + g.nblocks * BLOOM_BLOCK_BYTES;
        if (size > len)
            return 0;
        if (size == len)
            return n;
    }
    return 0;
}

/* ---- encoding ---- */

/* Copies words [at, at + len/8) of s into buf, little-endian; true if any is non-zero. */
static bool load_words(const struct sbf_stage *s, uint64_t at, unsigned char *buf, size_t len)
{
    uint64_t any = 0;
    for (size_t off = 0; off < len; off += 8, at++) {
        uint64_t v = atomic_load_explicit(&s->bits[at], memory_order_relaxed);
        any |= v;
        le_put64(buf + off, v);
    }
    return any != 0;
}

/* Bytes of a buffer for the headers and the chunks of stages of at most nblocks blocks,
 * so small filters take a small buffer. */
static size_t buf_bytes(uint64_t nblocks)
{
    size_t head = HEADER_BYTES + (size_t)STAGE_BYTES * SBF_MAX_STAGES;
    if (nblocks >= CHUNK_BYTES / BLOOM_BLOCK_BYTES)
        return CHUNK_BYTES;
    size_t bits = (size_t)nblocks * BLOOM_BLOCK_BYTES;
    return bits > head ? bits : head;
}

/* Header and stage records of the first n stages, as version, into buf. */
static size_t put_header(const struct sbf *f, uint32_t n, uint32_t version, unsigned char *buf)
{
    const struct sbf_params *p = &f->params;
    unsigned char *q = buf;
    memcpy(q, codec_magic, sizeof(codec_magic));
    le_put32(q + 8, version);
    le_put32(q + 12, n);
    le_put64(q + 16, p->capacity);
    le_put64(q + 24, le_f64_bits(p->error));
    le_put32(q + 32, (uint32_t)p->growth);
    le_put64(q + 36, le_f64_bits(p->scale));
    le_put64(q + 44, le_f64_bits(p->ratio));
    q += HEADER_BYTES;
    for (uint32_t i = 0; i < n; i++, q += STAGE_BYTES) {
        const struct sbf_stage *s = &f->stages[i];
        le_put64(q, s->capacity);
        le_put64(q + 8, atomic_load_explicit(&s->items, memory_order_relaxed));
        le_put64(q + 16, s->nblocks);
        le_put32(q + 24, s->k);
    }
    return (size_t)(q - buf); /* 52 + 64*28 bytes fit in one chunk */
}

static int emit_run(struct stream_writer *w, unsigned type, uint64_t count)
{
    unsigned char r[RUN_BYTES];
    r[0] = (unsigned char)type;
    le_put64(r + 1, count);
    return stream_write(w, r, sizeof(r));
}

/* One stage as v3 runs. A chunk is judged on the copy that is written, so a writer setting
 * bits meanwhile cannot make the stream disagree with itself. */
static int encode_runs(struct stream_writer *w, const struct sbf_stage *s, unsigned char *buf)
{
    uint64_t words = s->nblocks * BLOOM_BLOCK_WORDS, zeros = 0;
    size_t raw = 0, len = 0; /* raw chunks waiting in buf, and their bytes */
    int rc = SBF_OK;
    for (uint64_t at = 0; at < words && rc == SBF_OK;) {
        size_t n = words - at < RUN_CHUNK / 8 ? (size_t)(words - at) * 8 : RUN_CHUNK;
        bool set = load_words(s, at, buf + len, n);
        at += n / 8;
        if (!set) {
            if (raw > 0)
                rc = emit_run(w, RUN_RAW, raw) == SBF_OK ? stream_write(w, buf, len) : SBF_EIO;
            raw = len = 0;
            zeros++;
            continue;
        }
        if (zeros > 0) {
            rc = emit_run(w, RUN_ZERO, zeros);
            zeros = 0;
            if (rc != SBF_OK)
                break;
        }
        raw++;
        len += n;
        if (raw == RUN_MAX_RAW) {
            rc = emit_run(w, RUN_RAW, raw) == SBF_OK ? stream_write(w, buf, len) : SBF_EIO;
            raw = len = 0;
        }
    }
    if (rc == SBF_OK && zeros > 0)
        rc = emit_run(w, RUN_ZERO, zeros);
    if (rc == SBF_OK && raw > 0)
        rc = emit_run(w, RUN_RAW, raw) == SBF_OK ? stream_write(w, buf, len) : SBF_EIO;
    return rc;
}

/* The first n stages in version (v2 fixed size, or v3 runs). */
static int encode_version(const struct sbf *f, uint32_t n, uint32_t version, sbf_write_fn write,
                          void *ctx)
{
    uint32_t have = sbf_stage_count(f);
    if (n > have)
        n = have;
    uint64_t largest = 0;
    for (uint32_t i = 0; i < n; i++)
        largest = f->stages[i].nblocks > largest ? f->stages[i].nblocks : largest;
    unsigned char *buf = malloc(buf_bytes(largest));
    if (!buf)
        return SBF_ENOMEM;
    struct stream_writer w;
    stream_writer_init(&w, write, ctx);
    int rc = stream_write(&w, buf, put_header(f, n, version, buf));

    for (uint32_t i = 0; i < n && rc == SBF_OK; i++) {
        const struct sbf_stage *s = &f->stages[i];
        if (version != CODEC_VERSION_FIXED) {
            rc = encode_runs(&w, s, buf);
            continue;
        }
        uint64_t words = s->nblocks * BLOOM_BLOCK_WORDS;
        for (uint64_t at = 0; at < words && rc == SBF_OK;) {
            size_t len = words - at < CHUNK_BYTES / 8 ? (size_t)(words - at) * 8 : CHUNK_BYTES;
            load_words(s, at, buf, len);
            at += len / 8;
            rc = stream_write(&w, buf, len);
        }
    }
    if (rc == SBF_OK)
        rc = stream_write_sum(&w);
    free(buf);
    return rc;
}

int sbf_encode(const struct sbf *f, sbf_write_fn write, void *ctx)
{
    return encode_version(f, sbf_stage_count(f), CODEC_VERSION, write, ctx);
}

int sbf_encode_stages(const struct sbf *f, uint32_t n, sbf_write_fn write, void *ctx)
{
    return encode_version(f, n, CODEC_VERSION_FIXED, write, ctx);
}

static int count_write(void *ctx, const void *buf, size_t len)
{
    (void)buf;
    *(uint64_t *)ctx += len;
    return 0;
}

uint64_t sbf_encoded_size(const struct sbf *f)
{
    uint64_t size = 0;
    if (sbf_encode(f, count_write, &size) != SBF_OK)
        return sbf_encoded_size_stages(f, sbf_stage_count(f)) + 1; /* out of memory: a bound */
    return size;
}

/* ---- decoding ---- */

/* A stage as its header declares it, once checked against the parameters. */
struct stage_decl {
    uint64_t capacity, items;
    struct bloom_geom g;
};

/* Checks every stage header against the geometry recomputed from p; sums the bytes. */
static int check_stages(const struct sbf_params *p, const unsigned char *q, uint32_t n,
                        struct stage_decl *d, uint64_t *total)
{
    *total = 0;
    for (uint32_t i = 0; i < n; i++, q += STAGE_BYTES) {
        if (sbf_stage_plan(p, i, &d[i].capacity, &d[i].g) != SBF_OK)
            return SBF_ECORRUPT;
        d[i].items = le_get64(q + 8);
        if (le_get64(q) != d[i].capacity || le_get64(q + 16) != d[i].g.nblocks ||
            le_get32(q + 24) != d[i].g.k || d[i].items > d[i].g.nblocks * BLOOM_BLOCK_BITS)
            return SBF_ECORRUPT;
        *total += d[i].g.nblocks * BLOOM_BLOCK_BYTES; /* each < 2^56: no overflow */
    }
    return SBF_OK;
}

/*
 * Stores buf (len bytes, a multiple of one block) as the words from word at on, skipping
 * all-zero blocks: the stage memory is fresh zeros, and writing them would make the kernel
 * back every page. Returns whether any word was non-zero.
 */
static bool store_words(struct sbf_stage *s, uint64_t at, const unsigned char *buf, size_t len)
{
    bool any = false;
    for (size_t off = 0; off < len; off += BLOOM_BLOCK_BYTES, at += BLOOM_BLOCK_WORDS) {
        uint64_t w[BLOOM_BLOCK_WORDS], acc = 0;
        for (unsigned j = 0; j < BLOOM_BLOCK_WORDS; j++) {
            w[j] = le_get64(buf + off + 8 * j);
            acc |= w[j];
        }
        if (acc == 0)
            continue;
        any = true;
        for (unsigned j = 0; j < BLOOM_BLOCK_WORDS; j++)
            atomic_store_explicit(&s->bits[at + j], w[j], memory_order_relaxed);
    }
    return any;
}

/* v2: one stage's bits, every word in the stream. */
static int read_fixed(struct stream_reader *r, struct sbf_stage *s, unsigned char *buf)
{
    uint64_t words = s->nblocks * BLOOM_BLOCK_WORDS;
    for (uint64_t at = 0; at < words;) {
        size_t len = words - at < CHUNK_BYTES / 8 ? (size_t)(words - at) * 8 : CHUNK_BYTES;
        int rc = stream_take(r, buf, len);
        if (rc != SBF_OK)
            return rc;
        store_words(s, at, buf, len);
        at += len / 8;
    }
    return SBF_OK;
}

/* v3: one stage's runs (format at the top), refusing any non-canonical one. */
static int read_runs(struct stream_reader *r, struct sbf_stage *s, unsigned char *buf)
{
    uint64_t words = s->nblocks * BLOOM_BLOCK_WORDS;
    uint64_t chunks = (words * 8 + RUN_CHUNK - 1) / RUN_CHUNK;
    unsigned prev = 2;   /* type of the previous run: none yet */
    uint64_t prev_n = 0; /* its count */
    for (uint64_t c = 0; c < chunks;) {
        unsigned char run[RUN_BYTES];
        int rc = stream_take(r, run, sizeof(run));
        if (rc != SBF_OK)
            return rc;
        unsigned type = run[0];
        uint64_t n = le_get64(run + 1);
        if (type > RUN_RAW || n == 0 || n > chunks - c || (type == RUN_ZERO && prev == RUN_ZERO) ||
            (type == RUN_RAW && (n > RUN_MAX_RAW || (prev == RUN_RAW && prev_n < RUN_MAX_RAW))))
            return SBF_ECORRUPT;
        prev = type;
        prev_n = n;
        if (type == RUN_ZERO) {
            c += n;
            continue;
        }
        uint64_t at = c * (RUN_CHUNK / 8);
        uint64_t end = (c + n) * (RUN_CHUNK / 8) < words ? (c + n) * (RUN_CHUNK / 8) : words;
        size_t len = (size_t)(end - at) * 8;
        rc = stream_take(r, buf, len);
        if (rc != SBF_OK)
            return rc;
        for (size_t off = 0; off < len; off += RUN_CHUNK) {
            size_t m = len - off < RUN_CHUNK ? len - off : RUN_CHUNK;
            if (!store_words(s, at + off / 8, buf + off, m))
                return SBF_ECORRUPT; /* the encoder writes a zero chunk as a zero run */
        }
        c += n;
    }
    return SBF_OK;
}

/* sbf_decode, reading only the fixed-size v2 stream when fixed_only (the window kind's). */
static int decode(sbf_read_fn read, void *ctx, uint64_t max_bytes, const struct sbf_budget *budget,
                  bool fixed_only, struct sbf **out)
{
    struct stream_reader r;
    stream_reader_init(&r, read, ctx);
    unsigned char hdr[HEADER_BYTES];
    int rc = stream_take(&r, hdr, sizeof(hdr));
    if (rc != SBF_OK)
        return rc;
    if (memcmp(hdr, codec_magic, sizeof(codec_magic)) != 0)
        return SBF_ECORRUPT;
    uint32_t version = le_get32(hdr + 8);
    if (version != CODEC_VERSION_FIXED && (version != CODEC_VERSION || fixed_only))
        return SBF_EVERSION;
    uint32_t n = le_get32(hdr + 12);
    uint32_t growth = le_get32(hdr + 32);
    if (n < 1 || n > SBF_MAX_STAGES || growth > SBF_GROWTH_NONE ||
        (growth == SBF_GROWTH_NONE && n != 1))
        return SBF_ECORRUPT;
    struct sbf_params p = {
        .capacity = le_get64(hdr + 16),
        .error = le_bits_f64(le_get64(hdr + 24)),
        .growth = (enum sbf_growth)growth,
        .scale = le_bits_f64(le_get64(hdr + 36)),
        .ratio = le_bits_f64(le_get64(hdr + 44)),
    };
    if (!sbf_params_in_range(&p)) /* check_stages plans stage 0, completing the check */
        return SBF_ECORRUPT;

    unsigned char st[STAGE_BYTES * SBF_MAX_STAGES];
    rc = stream_take(&r, st, (size_t)STAGE_BYTES * n);
    if (rc != SBF_OK)
        return rc;
    struct stage_decl decl[SBF_MAX_STAGES];
    uint64_t total;
    rc = check_stages(&p, st, n, decl, &total);
    if (rc != SBF_OK)
        return rc;
    if (total > max_bytes)
        return SBF_ETOOBIG;
    rc = sbf_budget_try(budget, total);
    if (rc != SBF_OK)
        return rc;

    uint64_t largest = 0;
    for (uint32_t i = 0; i < n; i++)
        largest = decl[i].g.nblocks > largest ? decl[i].g.nblocks : largest;
    unsigned char *buf = malloc(buf_bytes(largest));
    struct sbf *f = buf ? sbf_shell_new(&p, budget) : NULL;
    if (!f) {
        free(buf);
        return SBF_ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++) {
        rc = sbf_stage_alloc(f, i, decl[i].capacity, &decl[i].g);
        if (rc != SBF_OK)
            goto fail;
        atomic_store_explicit(&f->stages[i].items, decl[i].items, memory_order_relaxed);
        atomic_store_explicit(&f->nstages, i + 1, memory_order_release);
        rc = version == CODEC_VERSION_FIXED ? read_fixed(&r, &f->stages[i], buf)
                                            : read_runs(&r, &f->stages[i], buf);
        if (rc != SBF_OK)
            goto fail;
    }
    rc = stream_read_sum(&r);
    if (rc != SBF_OK)
        goto fail;
    free(buf);
    *out = f;
    return SBF_OK;
fail:
    free(buf);
    sbf_free(f);
    return rc;
}

int sbf_decode(sbf_read_fn read, void *ctx, uint64_t max_bytes, const struct sbf_budget *budget,
               struct sbf **out)
{
    return decode(read, ctx, max_bytes, budget, false, out);
}

int sbf_decode_fixed(sbf_read_fn read, void *ctx, uint64_t max_bytes,
                     const struct sbf_budget *budget, struct sbf **out)
{
    return decode(read, ctx, max_bytes, budget, true, out);
}
