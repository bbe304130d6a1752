/*
 * sbf_view.c - read-only views of one stage for the metrics and the live page: its
 * figures, its popcount, and where a key's bits fall. Positions are read back from
 * bloom_mask() itself, so the view can never drift from what add and check do.
 * Readers only: every load is the relaxed/acquire pair sbf.h's contract allows.
 */
#include <stdatomic.h>
#include <string.h>

#include "lib/bloom.h"
#include "lib/sbf.h"
#include "lib/sbf_internal.h"

/* The published stage i, or NULL. */
static const struct sbf_stage *stage_at(const struct sbf *f, uint32_t i)
{
    uint32_t n = atomic_load_explicit(&f->nstages, memory_order_acquire);
    return i < n ? &f->stages[i] : NULL;
}

bool sbf_stage(const struct sbf *f, uint32_t i, struct sbf_stage_view *out)
{
    const struct sbf_stage *s = stage_at(f, i);
    if (s == NULL)
        return false;
    double target = sbf_stage_error(&f->params, i);
    out->capacity = s->capacity;
    out->items = atomic_load_explicit(&s->items, memory_order_relaxed);
    out->bytes = s->nblocks * BLOOM_BLOCK_BYTES;
    out->nblocks = s->nblocks;
    out->k = s->k;
    out->error = target;
    return true;
}

uint64_t sbf_stage_ones(const struct sbf *f, uint32_t i)
{
    const struct sbf_stage *s = stage_at(f, i);
    if (s == NULL)
        return 0;
    uint64_t ones = 0;
    uint64_t words = s->nblocks * BLOOM_BLOCK_WORDS;
    for (uint64_t w = 0; w < words; w++)
        ones +=
            (uint64_t)__builtin_popcountll(atomic_load_explicit(&s->bits[w], memory_order_relaxed));
    return ones;
}

bool sbf_probe(const struct sbf *f, uint32_t i, struct sbf_hash h, struct sbf_probe *out)
{
    const struct sbf_stage *s = stage_at(f, i);
    if (s == NULL)
        return false;
    uint64_t mask[BLOOM_BLOCK_WORDS];
    out->block = bloom_block(h, i, s->nblocks);
    bloom_mask(h, i, s->k, mask);
    const _Atomic uint64_t *block = &s->bits[out->block * BLOOM_BLOCK_WORDS];
    out->nbits = 0;
    out->present = true;
    for (unsigned w = 0; w < BLOOM_BLOCK_WORDS; w++) {
        uint64_t have = atomic_load_explicit(&block[w], memory_order_relaxed);
        for (uint64_t m = mask[w]; m != 0; m &= m - 1) {
            unsigned bit = (unsigned)__builtin_ctzll(m);
            bool set = (have >> bit) & 1u;
            out->pos[out->nbits] = (uint16_t)(w * 64u + bit);
            out->set[out->nbits] = set;
            out->nbits++;
            out->present = out->present && set;
        }
    }
    return true;
}
