/*
 * expandable_kind.c - the expandable filter (expandable.h) behind the kind_ops table of
 * kind.h. Thin adapters only: every rule lives in expandable.c and expandable_codec.c.
 * DELETE has no slot in kind_ops: the server calls expandable_delete_batch() directly for
 * filters whose ops are &kind_expandable.
 */
#include "lib/expandable.h"
#include "lib/kind.h"

/*
 * Reads capacity and error from p->sbf. Refused (SBF_EINVAL): window_ms or generations
 * not 0, and any growth, scale or ratio other than sbf_params_default's (exponential, 2,
 * SBF_DEFAULT_RATIO): this kind grows one block at a time and spends its error budget by
 * its own rule, so those knobs have no meaning here and are not silently ignored.
 */
static int k_create(const struct kind_params *p, const struct sbf_budget *budget, void **out)
{
    struct sbf_params d;
    sbf_params_default(&d);
    if (p->window_ms != 0 || p->generations != 0 || p->sbf.growth != d.growth ||
        p->sbf.scale != d.scale || p->sbf.ratio != d.ratio)
        return SBF_EINVAL;
    struct expandable_params ep = {.capacity = p->sbf.capacity, .error = p->sbf.error};
    struct expandable *f;
    int rc = expandable_new(&ep, budget, &f);
    if (rc == SBF_OK)
        *out = f;
    return rc;
}

static int k_create_like(const void *src, const struct sbf_budget *budget, void **out)
{
    struct expandable *f;
    int rc = expandable_new(expandable_params(src), budget, &f);
    if (rc == SBF_OK)
        *out = f;
    return rc;
}

static void k_free(void *f)
{
    expandable_free(f);
}

static void k_check_batch(const void *f, const struct sbf_hash *h, size_t n, bool *present)
{
    expandable_check_batch(f, h, n, present);
}

static int k_add_batch(void *f, const struct sbf_hash *h, size_t n, size_t *added)
{
    return expandable_add_batch(f, h, n, added);
}

static int k_checkadd_batch(void *f, const struct sbf_hash *h, size_t n, bool *present)
{
    return expandable_checkadd_batch(f, h, n, present);
}

static void k_clear(void *f)
{
    expandable_clear(f);
}

static bool k_compatible(const void *a, const void *b)
{
    return expandable_compatible(a, b);
}

static int k_remove_batch(void *f, const struct sbf_hash *h, size_t n, size_t *removed)
{
    return expandable_delete_batch(f, h, n, removed);
}

static int k_merge(void *dst, const void *src)
{
    return expandable_union(dst, src);
}

static bool k_grown(const void *f)
{
    (void)f;
    return true; /* no intersect: every filter reports "grown" so it is refused up front */
}

static void k_params(const void *f, struct kind_params *out)
{
    const struct expandable_params *p = expandable_params(f);
    *out = (struct kind_params){0};
    sbf_params_default(&out->sbf); /* growth, scale, ratio: the only ones it takes */
    out->sbf.capacity = p->capacity;
    out->sbf.error = p->error;
}

static void k_info(const void *f, struct kind_info *out)
{
    *out = (struct kind_info){0};
    struct expandable_info info;
    expandable_info(f, &info);
    out->bytes = info.bytes;
    out->items = info.items;
    out->capacity = info.capacity;
    out->error = expandable_params(f)->error;
    out->header = info.header;
    out->est_error = info.error_bound;
}

/* INFO's fields, in this order. */
static void k_fields(const void *f, const struct sbf_estimate *est, kind_field_fn fn, void *ctx)
{
    (void)est; /* every figure here is cheap */
    const struct expandable_params *p = expandable_params(f);
    struct expandable_info i;
    expandable_info(f, &i);
    fn(ctx, "capacity", KIND_FIELD_U64, p->capacity, 0, NULL);
    fn(ctx, "error", KIND_FIELD_DOUBLE, 0, p->error, NULL);
    fn(ctx, "size", KIND_FIELD_U64, i.blocks, 0, NULL);
    fn(ctx, "load", KIND_FIELD_DOUBLE, 0, i.load, NULL);
    fn(ctx, "fingerprint_bits", KIND_FIELD_U64, i.fingerprint, 0, NULL);
    fn(ctx, "expansions", KIND_FIELD_DOUBLE, 0, i.expansions, NULL);
    fn(ctx, "splits", KIND_FIELD_U64, i.splits, 0, NULL);
    fn(ctx, "level", KIND_FIELD_U64, i.level, 0, NULL);
    fn(ctx, "stash", KIND_FIELD_U64, i.stash, 0, NULL);
    fn(ctx, "stages", KIND_FIELD_U64, i.stages, 0, NULL);
    fn(ctx, "bytes", KIND_FIELD_U64, i.bytes, 0, NULL);
    fn(ctx, "items", KIND_FIELD_U64, i.items, 0, NULL);
    fn(ctx, "entries", KIND_FIELD_U64, i.entries, 0, NULL);
    fn(ctx, "total_capacity", KIND_FIELD_U64, i.capacity, 0, NULL);
    fn(ctx, "estimated_error", KIND_FIELD_DOUBLE, 0, i.error_bound, NULL);
}

static int k_verify(const void *f)
{
    return expandable_verify(f);
}

static int k_encode(const void *f, sbf_write_fn write, void *ctx)
{
    return expandable_encode(f, write, ctx);
}

static uint64_t k_encoded_size(const void *f)
{
    return expandable_encoded_size(f);
}

static int k_decode(sbf_read_fn read, void *ctx, uint64_t max_bytes,
                    const struct sbf_budget *budget, void **out)
{
    struct expandable *f;
    int rc = expandable_decode(read, ctx, max_bytes, budget, &f);
    if (rc == SBF_OK)
        *out = f;
    return rc;
}

const struct kind_ops kind_expandable = {
    .name = "expandable",
    .tag = KIND_TAG_EXPANDABLE,
    /* EXPANDABLE_MIN_ERROR, EXPANDABLE_MAX_ERROR, EXPANDABLE_MAX_CAPACITY (test_kind checks) */
    .params_rule = "an expandable filter takes error 0.0001 to 0.5 and capacity up to "
                   "1099511627776",
    .create = k_create,
    .create_like = k_create_like,
    .free = k_free,
    .check_batch = k_check_batch,
    .add_batch = k_add_batch,
    .checkadd_batch = k_checkadd_batch,
    .advance = NULL,
    .clear = k_clear,
    .remove_batch = k_remove_batch,
    .compatible = k_compatible,
    .merge = k_merge,
    .intersect = NULL,
    .grown = k_grown,
    .params = k_params,
    .info = k_info,
    .fields = k_fields,
    .verify = k_verify,
    .encode = k_encode,
    .encoded_size = k_encoded_size,
    .decode = k_decode,
};
