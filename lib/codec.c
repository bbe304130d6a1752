/*
 * codec.c - the on-disk/over-the-wire format of a filter, streamed through callbacks.
 * Format v2, every integer little-endian, doubles as their IEEE-754 binary64 bits:
 *   header  "BLOOMSBF" u32 version=2, u32 nstages, u64 capacity, f64 error, u32 growth,
 *           f64 scale, f64 ratio                                              (52 bytes)
 *   stages  nstages x { u64 capacity, u64 items, u64 nblocks, u32 k }         (28 bytes each)
 *   bits    each stage's nblocks*8 words, in stage order
 *   u64 XXH3-64 of every byte before it, then end of input.
 */
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "lib/sbf.h"
#include "lib/sbf_internal.h"

/* The version names the stage geometry rule too, since the loader recomputes and compares
 * it: v1 sized stages with the textbook per-block rate, v2 with the exact one. */
#define CODEC_VERSION 2u
#define HEADER_BYTES 52u
#define STAGE_BYTES 28u
#define CHUNK_BYTES ((size_t)64 * 1024) /* bits move in chunks of this size */

static const unsigned char codec_magic[8] = {'B', 'L', 'O', 'O', 'M', 'S', 'B', 'F'};

static void put_u32(unsigned char *p, uint32_t v)
{
    for (unsigned i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (unsigned i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (unsigned i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint64_t f64_bits(double d)
{
    uint64_t v;
    memcpy(&v, &d, sizeof(v));
    return v;
}

static double bits_f64(uint64_t v)
{
    double d;
    memcpy(&d, &v, sizeof(d));
    return d;
}

uint32_t sbf_stage_count(const struct sbf *f)
{
    return atomic_load_explicit(&f->nstages, memory_order_acquire);
}

uint64_t sbf_encoded_size(const struct sbf *f)
{
    return sbf_encoded_size_stages(f, sbf_stage_count(f));
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

struct writer {
    sbf_write_fn write;
    void *ctx;
    XXH3_state_t hash;
};

static int emit(struct writer *w, const void *buf, size_t len)
{
    XXH3_64bits_update(&w->hash, buf, len);
    return w->write(w->ctx, buf, len) == 0 ? SBF_OK : SBF_EIO;
}

int sbf_encode(const struct sbf *f, sbf_write_fn write, void *ctx)
{
    return sbf_encode_stages(f, sbf_stage_count(f), write, ctx);
}

int sbf_encode_stages(const struct sbf *f, uint32_t n, sbf_write_fn write, void *ctx)
{
    uint32_t have = sbf_stage_count(f);
    if (n > have)
        n = have;
    const struct sbf_params *p = &f->params;
    unsigned char *buf = malloc(CHUNK_BYTES);
    if (!buf)
        return SBF_ENOMEM;
    struct writer w = {.write = write, .ctx = ctx};
    XXH3_64bits_reset(&w.hash);

    unsigned char *q = buf;
    memcpy(q, codec_magic, sizeof(codec_magic));
    put_u32(q + 8, CODEC_VERSION);
    put_u32(q + 12, n);
    put_u64(q + 16, p->capacity);
    put_u64(q + 24, f64_bits(p->error));
    put_u32(q + 32, (uint32_t)p->growth);
    put_u64(q + 36, f64_bits(p->scale));
    put_u64(q + 44, f64_bits(p->ratio));
    q += HEADER_BYTES;
    for (uint32_t i = 0; i < n; i++, q += STAGE_BYTES) {
        const struct sbf_stage *s = &f->stages[i];
        put_u64(q, s->capacity);
        put_u64(q + 8, atomic_load_explicit(&s->items, memory_order_relaxed));
        put_u64(q + 16, s->nblocks);
        put_u32(q + 24, s->k);
    }
    int rc = emit(&w, buf, (size_t)(q - buf)); /* 52 + 64*28 bytes fit in one chunk */

    for (uint32_t i = 0; i < n && rc == SBF_OK; i++) {
        const struct sbf_stage *s = &f->stages[i];
        uint64_t words = s->nblocks * BLOOM_BLOCK_WORDS;
        for (uint64_t at = 0; at < words && rc == SBF_OK;) {
            size_t len = 0;
            for (; at < words && len < CHUNK_BYTES; at++, len += 8)
                put_u64(buf + len, atomic_load_explicit(&s->bits[at], memory_order_relaxed));
            rc = emit(&w, buf, len);
        }
    }
    if (rc == SBF_OK) {
        put_u64(buf, XXH3_64bits_digest(&w.hash));
        rc = write(ctx, buf, 8) == 0 ? SBF_OK : SBF_EIO;
    }
    free(buf);
    return rc;
}

/* ---- decoding ---- */

struct reader {
    sbf_read_fn read;
    void *ctx;
    XXH3_state_t hash;
};

/* Reads exactly len bytes; SBF_EIO on a callback error or early end. */
static int read_raw(struct reader *r, void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        long got = r->read(r->ctx, p, len);
        if (got <= 0 || (unsigned long)got > len)
            return SBF_EIO;
        p += got;
        len -= (size_t)got;
    }
    return SBF_OK;
}

static int take(struct reader *r, void *buf, size_t len)
{
    int rc = read_raw(r, buf, len);
    if (rc == SBF_OK)
        XXH3_64bits_update(&r->hash, buf, len);
    return rc;
}

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
        d[i].items = get_u64(q + 8);
        if (get_u64(q) != d[i].capacity || get_u64(q + 16) != d[i].g.nblocks ||
            get_u32(q + 24) != d[i].g.k || d[i].items > d[i].g.nblocks * BLOOM_BLOCK_BITS)
            return SBF_ECORRUPT;
        *total += d[i].g.nblocks * BLOOM_BLOCK_BYTES; /* each < 2^56: no overflow */
    }
    return SBF_OK;
}

/* Streams one stage's bits straight into its memory, then fixes byte order in place. */
static int read_bits(struct reader *r, struct sbf_stage *s)
{
    unsigned char *mem = (unsigned char *)s->bits;
    uint64_t bytes = s->nblocks * BLOOM_BLOCK_BYTES;
    for (uint64_t at = 0; at < bytes;) {
        size_t len = bytes - at < CHUNK_BYTES ? (size_t)(bytes - at) : CHUNK_BYTES;
        int rc = take(r, mem + at, len);
        if (rc != SBF_OK)
            return rc;
        for (size_t off = 0; off < len; off += 8) {
            uint64_t v = get_u64(mem + at + off);
            atomic_store_explicit(&s->bits[(at + off) / 8], v, memory_order_relaxed);
        }
        at += len;
    }
    return SBF_OK;
}

int sbf_decode(sbf_read_fn read, void *ctx, uint64_t max_bytes, const struct sbf_budget *budget,
               struct sbf **out)
{
    struct reader r = {.read = read, .ctx = ctx};
    XXH3_64bits_reset(&r.hash);
    unsigned char hdr[HEADER_BYTES];
    int rc = take(&r, hdr, sizeof(hdr));
    if (rc != SBF_OK)
        return rc;
    if (memcmp(hdr, codec_magic, sizeof(codec_magic)) != 0)
        return SBF_ECORRUPT;
    if (get_u32(hdr + 8) != CODEC_VERSION)
        return SBF_EVERSION;
    uint32_t n = get_u32(hdr + 12);
    uint32_t growth = get_u32(hdr + 32);
    if (n < 1 || n > SBF_MAX_STAGES || growth > SBF_GROWTH_LINEAR)
        return SBF_ECORRUPT;
    struct sbf_params p = {
        .capacity = get_u64(hdr + 16),
        .error = bits_f64(get_u64(hdr + 24)),
        .growth = (enum sbf_growth)growth,
        .scale = bits_f64(get_u64(hdr + 36)),
        .ratio = bits_f64(get_u64(hdr + 44)),
    };
    if (!sbf_params_in_range(&p)) /* check_stages plans stage 0, completing the check */
        return SBF_ECORRUPT;

    unsigned char st[STAGE_BYTES * SBF_MAX_STAGES];
    rc = take(&r, st, (size_t)STAGE_BYTES * n);
    if (rc != SBF_OK)
        return rc;
    struct stage_decl decl[SBF_MAX_STAGES];
    uint64_t total;
    rc = check_stages(&p, st, n, decl, &total);
    if (rc != SBF_OK)
        return rc;
    if (total > max_bytes)
        return SBF_ETOOBIG;

    struct sbf *f = sbf_shell_new(&p, budget);
    if (!f)
        return SBF_ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        rc = sbf_stage_alloc(f, i, decl[i].capacity, &decl[i].g);
        if (rc != SBF_OK)
            goto fail;
        atomic_store_explicit(&f->stages[i].items, decl[i].items, memory_order_relaxed);
        atomic_store_explicit(&f->nstages, i + 1, memory_order_release);
        rc = read_bits(&r, &f->stages[i]);
        if (rc != SBF_OK)
            goto fail;
    }
    unsigned char sum[8];
    rc = read_raw(&r, sum, sizeof(sum));
    if (rc != SBF_OK)
        goto fail;
    if (get_u64(sum) != XXH3_64bits_digest(&r.hash)) {
        rc = SBF_ECORRUPT;
        goto fail;
    }
    unsigned char extra;
    long got = read(ctx, &extra, 1);
    if (got != 0) {
        rc = got < 0 ? SBF_EIO : SBF_ECORRUPT;
        goto fail;
    }
    *out = f;
    return SBF_OK;
fail:
    sbf_free(f);
    return rc;
}
