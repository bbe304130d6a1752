/*
 * window_kind.c - the windowed filter (window.h) behind the kind_ops table of kind.h.
 * Adapters and INFO's figures only: every rule lives in window.c. Merge and intersect
 * are not defined for windows (generations of two filters cover different spans), so
 * they are NULL and the server refuses them.
 */
#include <math.h>
#include <string.h>

#include "lib/kind.h"
#include "lib/window.h"

static int k_create(const struct kind_params *p, const struct sbf_budget *budget, void **out)
{
    struct window_params wp = {
        .sbf = p->sbf,
        .window_ms = p->window_ms,
        .generations = p->generations ? p->generations : WINDOW_DEFAULT_GENERATIONS,
    };
    struct window *w;
    int rc = window_new(&wp, p->now_ms, budget, &w);
    if (rc == SBF_OK)
        *out = w;
    return rc;
}

static void k_defaults(struct kind_params *p)
{
    p->sbf.ratio = WINDOW_DEFAULT_RATIO;
    p->generations = WINDOW_DEFAULT_GENERATIONS;
}

static void k_params(const void *f, struct kind_params *out)
{
    const struct window_params *wp = window_params(f);
    *out = (struct kind_params){
        .sbf = wp->sbf, .window_ms = wp->window_ms, .generations = wp->generations};
}

static int k_create_like(const void *src, const struct sbf_budget *budget, void **out)
{
    struct window *w;
    int rc = window_new_like(src, budget, &w);
    if (rc == SBF_OK)
        *out = w;
    return rc;
}

static void k_free(void *f)
{
    window_free(f);
}

static void k_check_batch(const void *f, const struct sbf_hash *h, size_t n, bool *present)
{
    window_check_batch(f, h, n, present);
}

static int k_add_batch(void *f, const struct sbf_hash *h, size_t n, size_t *added)
{
    return window_add_batch(f, h, n, added);
}

static int k_checkadd_batch(void *f, const struct sbf_hash *h, size_t n, bool *present)
{
    return window_checkadd_batch(f, h, n, present);
}

static int k_advance(void *f, int64_t now_ms, kind_retire_fn retire, void *ctx)
{
    return window_advance(f, now_ms, retire, ctx);
}

static void k_clear(void *f)
{
    window_clear(f);
}

static bool k_compatible(const void *a, const void *b)
{
    return window_compatible(a, b);
}

static bool k_grown(const void *f)
{
    struct window_info info;
    window_info(f, &info);
    return info.stages > 1;
}

static void k_info(const void *f, struct kind_info *out)
{
    struct window_info info;
    window_info(f, &info);
    out->window_ms = window_params(f)->window_ms;
    out->bytes = info.bytes;
    out->items = info.items;
    /* What CREATE asked for, keys per window: LIST, /api, the page and templates show the
     * one number the user gave. What the live generations could take is INFO's
     * gen<i>_capacity. */
    out->capacity = window_params(f)->sbf.capacity;
    out->error = window_params(f)->sbf.error;
    out->header = info.header;
    out->est_error = NAN;
}

/* Static names for the per-generation figures: kind_field_fn wants static names. */
#define GEN_NAMES(i)                                                                               \
    {                                                                                              \
        "gen" #i "_start", "gen" #i "_items", "gen" #i "_bytes", "gen" #i "_capacity"              \
    }
static const char *const gen_names[WINDOW_MAX_GENERATIONS][4] = {
    GEN_NAMES(0),  GEN_NAMES(1),  GEN_NAMES(2),  GEN_NAMES(3),  GEN_NAMES(4),  GEN_NAMES(5),
    GEN_NAMES(6),  GEN_NAMES(7),  GEN_NAMES(8),  GEN_NAMES(9),  GEN_NAMES(10), GEN_NAMES(11),
    GEN_NAMES(12), GEN_NAMES(13), GEN_NAMES(14), GEN_NAMES(15),
};

/*
 * INFO's fields of a windowed filter. Times and durations in milliseconds (window,
 * generation_span, gen<i>_start as Unix ms); gen0 is the newest generation. capacity is
 * the one the user gave (keys per window); every per-generation figure says so in its
 * name: generation_capacity (keys a generation is planned for, capacity/(g-1) rounded up)
 * and gen<i>_capacity (what generation i takes now at its share of the error, more once
 * it grew).
 */
static void k_fields(const void *f, const struct sbf_estimate *e, kind_field_fn fn, void *ctx)
{
    const struct window_params *p = window_params(f);
    struct window_info info;
    struct sbf_estimate est = e != NULL ? *e : (struct sbf_estimate){NAN, NAN};
    struct window_gen gens[WINDOW_MAX_GENERATIONS];
    window_info(f, &info);
    uint32_t live = window_generations(f, gens);
    fn(ctx, "window", KIND_FIELD_U64, p->window_ms, 0, NULL);
    fn(ctx, "generations", KIND_FIELD_U64, p->generations, 0, NULL);
    fn(ctx, "generation_span", KIND_FIELD_U64, p->window_ms / (p->generations - 1), 0, NULL);
    struct sbf_params gp;
    window_generation_params(p, &gp);
    fn(ctx, "capacity", KIND_FIELD_U64, p->sbf.capacity, 0, NULL);
    fn(ctx, "generation_capacity", KIND_FIELD_U64, gp.capacity, 0, NULL);
    fn(ctx, "error", KIND_FIELD_DOUBLE, 0, p->sbf.error, NULL);
    fn(ctx, "growth", KIND_FIELD_STR, 0, 0, sbf_growth_name(p->sbf.growth));
    fn(ctx, "scale", KIND_FIELD_DOUBLE, 0, p->sbf.scale, NULL);
    fn(ctx, "ratio", KIND_FIELD_DOUBLE, 0, p->sbf.ratio, NULL);
    fn(ctx, "live_generations", KIND_FIELD_U64, live, 0, NULL);
    fn(ctx, "bytes", KIND_FIELD_U64, info.bytes, 0, NULL);
    fn(ctx, "items", KIND_FIELD_U64, info.items, 0, NULL);
    fn(ctx, "estimated_items", KIND_FIELD_DOUBLE, 0, est.items, NULL);
    fn(ctx, "estimated_error", KIND_FIELD_DOUBLE, 0, est.error, NULL);
    for (uint32_t i = 0; i < live; i++) {
        /* Start times are >= 0 (window.h): the cast keeps them. */
        fn(ctx, gen_names[i][0], KIND_FIELD_U64, (uint64_t)gens[i].start_ms, 0, NULL);
        fn(ctx, gen_names[i][1], KIND_FIELD_U64, gens[i].items, 0, NULL);
        fn(ctx, gen_names[i][2], KIND_FIELD_U64, gens[i].bytes, 0, NULL);
        struct sbf_info si;
        sbf_info(gens[i].sbf, &si);
        fn(ctx, gen_names[i][3], KIND_FIELD_U64, si.capacity, 0, NULL);
    }
}

static void k_estimate(const void *f, struct sbf_estimate *out)
{
    window_estimate(f, out);
}

static int k_verify(const void *f)
{
    return window_verify(f);
}

static int k_encode(const void *f, sbf_write_fn write, void *ctx)
{
    return window_encode(f, write, ctx);
}

static uint64_t k_encoded_size(const void *f)
{
    return window_encoded_size(f);
}

static int k_decode(sbf_read_fn read, void *ctx, uint64_t max_bytes,
                    const struct sbf_budget *budget, void **out)
{
    struct window *w;
    int rc = window_decode(read, ctx, max_bytes, budget, &w);
    if (rc == SBF_OK)
        *out = w;
    return rc;
}

/* Every stage of every live generation, oldest generation first (generation 0 = newest). */
static void k_parts(const void *f, bool count_ones, kind_part_fn fn, void *ctx)
{
    struct window_gen gens[WINDOW_MAX_GENERATIONS];
    uint32_t live = window_generations(f, gens), index = 0;
    for (uint32_t g = live; g-- > 0;) {
        for (uint32_t i = 0; i < gens[g].stages; i++) {
            struct sbf_stage_view v;
            if (!sbf_stage(gens[g].sbf, i, &v))
                break;
            struct kind_part part = {
                .index = index++,
                .generation = g,
                .started_ms = gens[g].start_ms,
                .capacity = v.capacity,
                .items = v.items,
                .bytes = v.bytes,
                .blocks = v.nblocks,
                .block_bits = SBF_BLOCK_BITS,
                .k = v.k,
                .error = v.error,
                .ones = count_ones ? sbf_stage_ones(gens[g].sbf, i) : 0,
            };
            fn(ctx, &part);
        }
    }
}

static void k_explain(const void *f, struct sbf_hash h, kind_probe_fn fn, void *ctx)
{
    struct window_gen gens[WINDOW_MAX_GENERATIONS];
    uint32_t live = window_generations(f, gens), index = 0;
    for (uint32_t g = live; g-- > 0;) {
        struct sbf_probe pr;
        for (uint32_t i = 0; i < gens[g].stages && sbf_probe(gens[g].sbf, i, h, &pr); i++) {
            struct kind_probe kp = {
                .part = index++,
                .block = pr.block,
                .nbits = pr.nbits,
                .pos = pr.pos,
                .set = pr.set,
                .present = pr.present,
            };
            fn(ctx, &kp);
        }
    }
}

const struct kind_ops kind_window = {
    .name = "window",
    .tag = KIND_TAG_WINDOW,
    .defaults = k_defaults,
    .create = k_create,
    .create_like = k_create_like,
    .free = k_free,
    .check_batch = k_check_batch,
    .add_batch = k_add_batch,
    .checkadd_batch = k_checkadd_batch,
    .advance = k_advance,
    .clear = k_clear,
    .compatible = k_compatible,
    .merge = NULL,
    .intersect = NULL,
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
