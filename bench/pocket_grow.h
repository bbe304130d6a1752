/*
 * pocket_grow.h - a measuring prototype, not a kind of the daemon: bench/pocket.h's
 * one-block layout made to grow, so that bench_grow can set its bytes per key, rate and
 * cost at 10x and 100x growth beside blocked before a format is built on it (issue 26,
 * bench/expandable_growth.md section 7).
 *
 * Growth is extendible hashing: a directory of 2^G block numbers indexed by the top G bits
 * of the key's hash h.lo; a block of local depth d holds the keys whose top d bits are its
 * own. The next 6 bits are the quotient and the r after them the remainder, so the hash
 * bits a block stores are the ones its splits will need (InfiniFilter's idea). A full block
 * splits in two by the top quotient bit of each entry; the entry's quotient takes the top
 * bit of its remainder, which shortens by one. Slots are r + 1 bits: (rem << 1 | 1) <<
 * (r - len), so the lowest set bit gives the length; a new entry always gets r bits, and an
 * old one loses a bit per split of its block. An entry with no bits left (void) matches
 * every key of its quotient; a split copies it into both quotients it may stand for.
 * POCKETX_R from $POCKETX_R (7).
 */
#ifndef BLOOMD_BENCH_POCKET_GROW_H
#define BLOOMD_BENCH_POCKET_GROW_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/pocket.h"

#define PX_CHUNK_BLOCKS 16384u /* blocks per allocation (1 MiB) */
#define PX_AHEAD 8u            /* batches prefetch the block this many keys ahead */
#define PX_DIR_AHEAD 16u       /* and the directory entry this many */
#define PX_MAX_DEPTH 40u

struct pocketx {
    unsigned r, s, k;    /* remainder bits, slot bits (r + 1), entries per block */
    unsigned G;          /* directory depth */
    uint32_t *dir;       /* 2^G block numbers */
    uint8_t *depth;      /* per block: local depth */
    uint64_t **chunks;   /* PX_CHUNK_BLOCKS blocks of 8 words each */
    uint64_t nblocks;    /* blocks in use */
    uint64_t cap_blocks; /* blocks the chunks and depth[] hold */
    uint64_t items, voids;
};

static inline uint64_t *px_block(const struct pocketx *p, uint64_t b)
{
    return p->chunks[b / PX_CHUNK_BLOCKS] + 8 * (b % PX_CHUNK_BLOCKS);
}

static inline unsigned px_hdr(const struct pocketx *p)
{
    return POCKET_Q + p->k;
}

/* Whether a slot of q's run matches the key's r remainder bits krem. */
static inline bool px_has(const struct pocketx *p, const uint64_t *w, unsigned q, unsigned krem,
                          unsigned *end)
{
    unsigned first, n;
    pocket_run(w, q, &first, &n, end);
    for (unsigned j = first; j < first + n; j++) {
        unsigned v = pocket_slot(w, px_hdr(p), p->s, j), tz = (unsigned)__builtin_ctz(v);
        if ((v >> (tz + 1)) == (krem >> tz))
            return true;
    }
    return false;
}

static inline uint64_t px_block_of(const struct pocketx *p, uint64_t v)
{
    return p->dir[p->G ? v >> (64 - p->G) : 0];
}

static inline void px_key(const struct pocketx *p, uint64_t v, unsigned d, unsigned *q,
                          unsigned *krem)
{
    uint64_t x = d ? v << d : v;
    *q = (unsigned)(x >> 58);
    *krem = (unsigned)((x << 6) >> (64 - p->r));
}

static inline bool px_check(const struct pocketx *p, struct sbf_hash h)
{
    uint64_t b = px_block_of(p, h.lo);
    unsigned q, krem, e;
    px_key(p, h.lo, p->depth[b], &q, &krem);
    return px_has(p, px_block(p, b), q, krem, &e);
}

static int px_new_block(struct pocketx *p, uint64_t *id)
{
    if (p->nblocks == p->cap_blocks) {
        uint64_t c = p->cap_blocks / PX_CHUNK_BLOCKS;
        uint64_t **ch = realloc(p->chunks, (c + 1) * sizeof *ch);
        uint8_t *dp = realloc(p->depth, (p->cap_blocks + PX_CHUNK_BLOCKS) * sizeof *dp);
        if (ch != NULL)
            p->chunks = ch;
        if (dp != NULL)
            p->depth = dp;
        if (ch == NULL || dp == NULL)
            return SBF_ENOMEM;
        ch[c] = aligned_alloc(64, PX_CHUNK_BLOCKS * 64);
        if (ch[c] == NULL)
            return SBF_ENOMEM;
        p->cap_blocks += PX_CHUNK_BLOCKS;
    }
    *id = p->nblocks++;
    memset(px_block(p, *id), 0, 64);
    return SBF_OK;
}

/* Splits block b (depth d), the block of hash v, by the next address bit: the top bit of
 * each entry's quotient. */
static int px_split(struct pocketx *p, uint64_t b, uint64_t v)
{
    unsigned d = p->depth[b];
    if (d >= PX_MAX_DEPTH)
        return SBF_ELIMIT;
    if (d == p->G) { /* double the directory */
        uint64_t n = UINT64_C(1) << p->G;
        uint32_t *nd = malloc(2 * n * sizeof *nd);
        if (nd == NULL)
            return SBF_ENOMEM;
        for (uint64_t i = 0; i < n; i++)
            nd[2 * i] = nd[2 * i + 1] = p->dir[i];
        free(p->dir);
        p->dir = nd;
        p->G++;
    }
    uint64_t nb;
    int rc = px_new_block(p, &nb);
    if (rc != SBF_OK)
        return rc;
    uint64_t old[8];
    memcpy(old, px_block(p, b), sizeof old);
    uint64_t *w0 = px_block(p, b), *w1 = px_block(p, nb);
    memset(w0, 0, 64);
    p->depth[b] = p->depth[nb] = (uint8_t)(d + 1);
    /* Directory entries of b: the upper half of its range goes to nb. */
    uint64_t span = UINT64_C(1) << (p->G - d);
    uint64_t start = d ? (v >> (64 - d)) << (p->G - d) : 0;
    for (uint64_t i = start + span / 2; i < start + span; i++)
        p->dir[i] = (uint32_t)nb;
    /* Entries, quotient by quotient (each run in order keeps the children's runs in order). */
    unsigned j = 0, pos = 0;
    for (unsigned q = 0; q < POCKET_Q; q++) {
        while ((old[pos >> 6] >> (pos & 63)) & 1) {
            unsigned slot = pocket_slot(old, px_hdr(p), p->s, j++),
                     tz = (unsigned)__builtin_ctz(slot);
            unsigned len = p->r - tz, rem = slot >> (tz + 1);
            uint64_t *w = (q >> 5) ? w1 : w0;
            unsigned nq = (q << 1) & 63;
            unsigned targets[2], nt = 0;
            unsigned nv;
            if (len == 0) { /* void: stands for both quotients */
                targets[nt++] = nq;
                targets[nt++] = nq | 1;
                nv = 1u << p->r;
                p->voids++;
            } else {
                targets[nt++] = nq | (rem >> (len - 1));
                unsigned nlen = len - 1, nrem = rem & ((1u << nlen) - 1);
                nv = ((nrem << 1) | 1) << (p->r - nlen);
            }
            for (unsigned t = 0; t < nt; t++) {
                if (pocket_entries(w, px_hdr(p)) >= p->k)
                    return SBF_ELIMIT; /* voids piled up: not expected this side of 2^r */
                unsigned f, n, e;
                pocket_run(w, targets[t], &f, &n, &e);
                pocket_insert(w, px_hdr(p), p->s, targets[t], nv, e);
            }
            pos++;
        }
        pos++;
    }
    return SBF_OK;
}

static inline int px_checkadd(struct pocketx *p, struct sbf_hash h, bool *present)
{
    for (;;) {
        uint64_t b = px_block_of(p, h.lo);
        unsigned q, krem, e;
        px_key(p, h.lo, p->depth[b], &q, &krem);
        uint64_t *w = px_block(p, b);
        if (px_has(p, w, q, krem, &e)) {
            *present = true;
            return SBF_OK;
        }
        if (pocket_entries(w, px_hdr(p)) < p->k) {
            pocket_insert(w, px_hdr(p), p->s, q, (krem << 1) | 1, e);
            p->items++;
            *present = false;
            return SBF_OK;
        }
        int rc = px_split(p, b, h.lo);
        if (rc != SBF_OK)
            return rc;
    }
}

/* ---- as a kind_ops for bench_grow ---- */

static inline void px_free(void *f)
{
    struct pocketx *p = f;
    if (p == NULL)
        return;
    for (uint64_t c = 0; c < p->cap_blocks / PX_CHUNK_BLOCKS; c++)
        free(p->chunks[c]);
    free(p->chunks);
    free(p->depth);
    free(p->dir);
    free(p);
}

static inline int px_create(const struct kind_params *kp, const struct sbf_budget *budget,
                            void **out)
{
    (void)budget;
    const char *env = getenv("POCKETX_R");
    struct pocketx *p = calloc(1, sizeof *p);
    if (p == NULL)
        return SBF_ENOMEM;
    p->r = env ? (unsigned)atoi(env) : 7;
    if (p->r < 2 || p->r > 20)
        return free(p), SBF_EINVAL;
    p->s = p->r + 1;
    p->k = (512 - POCKET_Q) / (p->s + 1);
    if (p->k > 64)
        p->k = 64;
    /* 2^G blocks, the power of two nearest capacity / (k * 0.7). */
    double want = (double)kp->sbf.capacity / (p->k * 0.7);
    while ((double)(UINT64_C(1) << p->G) * 1.41 < want)
        p->G++;
    p->dir = malloc(((size_t)1 << p->G) * sizeof *p->dir);
    if (p->dir == NULL)
        return px_free(p), SBF_ENOMEM;
    for (uint64_t i = 0; i < (UINT64_C(1) << p->G); i++) {
        uint64_t id;
        if (px_new_block(p, &id) != SBF_OK)
            return px_free(p), SBF_ENOMEM;
        p->dir[i] = (uint32_t)id;
        p->depth[id] = (uint8_t)p->G;
    }
    *out = p;
    return SBF_OK;
}

static inline void px_check_batch(const void *f, const struct sbf_hash *h, size_t n, bool *present)
{
    const struct pocketx *p = f;
    for (size_t i = 0; i < n; i++) {
        if (i + PX_AHEAD < n)
            __builtin_prefetch(px_block(p, px_block_of(p, h[i + PX_AHEAD].lo)));
        present[i] = px_check(p, h[i]);
    }
}

static inline int px_checkadd_batch(void *f, const struct sbf_hash *h, size_t n, bool *present)
{
    struct pocketx *p = f;
    for (size_t i = 0; i < n && i < PX_AHEAD; i++)
        __builtin_prefetch(px_block(p, px_block_of(p, h[i].lo)), 1);
    for (size_t i = 0; i < n; i++) {
        if (i + PX_DIR_AHEAD < n)
            __builtin_prefetch(&p->dir[p->G ? h[i + PX_DIR_AHEAD].lo >> (64 - p->G) : 0]);
        if (i + PX_AHEAD < n)
            __builtin_prefetch(px_block(p, px_block_of(p, h[i + PX_AHEAD].lo)), 1);
        int rc = px_checkadd(p, h[i], &present[i]);
        if (rc != SBF_OK)
            return rc;
    }
    return SBF_OK;
}

static inline void px_info(const void *f, struct kind_info *out)
{
    const struct pocketx *p = f;
    memset(out, 0, sizeof *out);
    /* Blocks in use, their depths, and the directory. */
    out->bytes = p->nblocks * 65 + ((uint64_t)4 << p->G);
    out->items = p->items;
}

static const struct kind_ops kind_pocket_grow_proto = {
    .name = "pocketx",
    .create = px_create,
    .free = px_free,
    .check_batch = px_check_batch,
    .checkadd_batch = px_checkadd_batch,
    .info = px_info,
};

#endif
