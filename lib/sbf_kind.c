/*
 * sbf_kind.c - the scalable Bloom filter (sbf.h) behind the kind_ops table of kind.h.
 * Thin adapters only: every rule lives in sbf.c and codec.c.
 */
#include <math.h>
#include <string.h>

#include "lib/kind.h"
#include "lib/sbf.h"

static int k_create(const struct kind_params *p, const struct sbf_budget *budget, void **out)
{
    if (p->window_ms != 0 || p->generations != 0)
        return SBF_EINVAL;
    struct sbf *s;
    int rc = sbf_new(&p->sbf, budget, &s);
    if (rc == SBF_OK)
        *out = s;
    return rc;
}

static int k_create_like(const void *src, const struct sbf_budget *budget, void **out)
{
    struct sbf *s;
    int rc = sbf_new(sbf_params(src), budget, &s);
    if (rc == SBF_OK)
        *out = s;
    return rc;
}

static void k_free(void *f)
{
    sbf_free(f);
}

static void k_check_batch(const void *f, const struct sbf_hash *h, size_t n, bool *present)
{
    sbf_check_batch(f, h, n, present);
}

static int k_add_batch(void *f, const struct sbf_hash *h, size_t n, size_t *added)
{
    return sbf_add_batch(f, h, n, added);
}

static int k_checkadd_batch(void *f, const struct sbf_hash *h, size_t n, bool *present)
{
    return sbf_checkadd_batch(f, h, n, present);
}

static uint64_t k_room(const void *f)
{
    return sbf_room(f);
}

static int k_add_batch_shard(void *f, const struct sbf_hash *h, size_t n, unsigned shard,
                             unsigned nshards, bool fresh, size_t *added)
{
    return sbf_add_batch_shard(f, h, n, shard, nshards, fresh, added);
}

static void k_clear(void *f)
{
    sbf_clear(f);
}

static bool k_compatible(const void *a, const void *b)
{
    return sbf_compatible(a, b);
}

static int k_merge(void *dst, const void *src)
{
    return sbf_union(dst, src);
}

static int k_intersect(void *dst, const void *src)
{
    return sbf_intersect(dst, src);
}

static bool k_grown(const void *f)
{
    struct sbf_info info;
    sbf_info(f, &info);
    return info.stages > 1;
}

static void k_params(const void *f, struct kind_params *out)
{
    *out = (struct kind_params){.sbf = *sbf_params(f)};
}

static void k_info(const void *f, struct kind_info *out)
{
    struct sbf_info info;
    sbf_info(f, &info);
    out->window_ms = 0;
    out->bytes = info.bytes;
    out->items = info.items;
    out->capacity = info.capacity;
    out->error = sbf_params(f)->error;
    out->header = info.header;
    out->est_error = NAN;
}

/* INFO's fields of a plain filter, in the order INFO has always listed them. */
static void k_fields(const void *f, const struct sbf_estimate *e, kind_field_fn fn, void *ctx)
{
    const struct sbf_params *p = sbf_params(f);
    struct sbf_info info;
    struct sbf_estimate est = e != NULL ? *e : (struct sbf_estimate){NAN, NAN};
    sbf_info(f, &info);
    fn(ctx, "capacity", KIND_FIELD_U64, p->capacity, 0, NULL);
    fn(ctx, "error", KIND_FIELD_DOUBLE, 0, p->error, NULL);
    fn(ctx, "growth", KIND_FIELD_STR, 0, 0, sbf_growth_name(p->growth));
    fn(ctx, "scale", KIND_FIELD_DOUBLE, 0, p->scale, NULL);
    fn(ctx, "ratio", KIND_FIELD_DOUBLE, 0, p->ratio, NULL);
    fn(ctx, "stages", KIND_FIELD_U64, info.stages, 0, NULL);
    fn(ctx, "total_capacity", KIND_FIELD_U64, info.capacity, 0, NULL);
    fn(ctx, "bytes", KIND_FIELD_U64, info.bytes, 0, NULL);
    fn(ctx, "items", KIND_FIELD_U64, info.items, 0, NULL);
    fn(ctx, "estimated_items", KIND_FIELD_DOUBLE, 0, est.items, NULL);
    fn(ctx, "estimated_error", KIND_FIELD_DOUBLE, 0, est.error, NULL);
}

static void k_estimate(const void *f, struct sbf_estimate *out)
{
    sbf_estimate(f, out);
}

static int k_verify(const void *f)
{
    return sbf_verify(f);
}

static int k_encode(const void *f, sbf_write_fn write, void *ctx)
{
    return sbf_encode(f, write, ctx);
}

static uint64_t k_encoded_size(const void *f)
{
    return sbf_encoded_size(f);
}

static int k_decode(sbf_read_fn read, void *ctx, uint64_t max_bytes,
                    const struct sbf_budget *budget, void **out)
{
    struct sbf *s;
    int rc = sbf_decode(read, ctx, max_bytes, budget, &s);
    if (rc == SBF_OK)
        *out = s;
    return rc;
}

/* Stages are the parts; a scalable filter has no generations. */
static void k_parts(const void *f, bool count_ones, kind_part_fn fn, void *ctx)
{
    struct sbf_info info;
    sbf_info(f, &info);
    for (uint32_t i = 0; i < info.stages; i++) {
        struct sbf_stage_view v;
        if (!sbf_stage(f, i, &v))
            break;
        struct kind_part part = {
            .index = i,
            .capacity = v.capacity,
            .items = v.items,
            .bytes = v.bytes,
            .blocks = v.nblocks,
            .block_bits = SBF_BLOCK_BITS,
            .k = v.k,
            .error = v.error,
            .ones = count_ones ? sbf_stage_ones(f, i) : 0,
        };
        fn(ctx, &part);
    }
}

static void k_explain(const void *f, struct sbf_hash h, kind_probe_fn fn, void *ctx)
{
    struct sbf_info info;
    sbf_info(f, &info);
    struct sbf_probe pr;
    for (uint32_t i = 0; i < info.stages && sbf_probe(f, i, h, &pr); i++) {
        struct kind_probe kp = {
            .part = i,
            .block = pr.block,
            .nbits = pr.nbits,
            .pos = pr.pos,
            .set = pr.set,
            .present = pr.present,
        };
        fn(ctx, &kp);
    }
}

const struct kind_ops kind_sbf = {
    .name = "blocked",
    .tag = KIND_TAG_SBF,
    .create = k_create,
    .create_like = k_create_like,
    .free = k_free,
    .check_batch = k_check_batch,
    .add_batch = k_add_batch,
    .checkadd_batch = k_checkadd_batch,
    .room = k_room,
    .add_batch_shard = k_add_batch_shard,
    .advance = NULL,
    .clear = k_clear,
    .compatible = k_compatible,
    .merge = k_merge,
    .intersect = k_intersect,
    .grown = k_grown,
    .params = k_params,
    .info = k_info,
    .fields = k_fields,
    .estimate = k_estimate,
    .verify = k_verify,
    .encode = k_encode,
    .encoded_size = k_encoded_size,
    .decode = k_decode,
    .parts = k_parts,
    .explain = k_explain,
};
