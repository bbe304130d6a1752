/*
 * test_codec.c - the filter codec: round trips through odd-sized reads, every single-byte
 * corruption (v3 and v2) and every truncation of a small encoding rejected, v3's zero runs
 * (sizes, canonical form, no page of zeros touched by a load), trailing bytes, version,
 * size limits, callback failures, hostile headers that must not allocate, and an encode
 * running beside the writer thread.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "lib/sbf.h"
#include "lib/sbf_internal.h"
#include "tests/unit/lib/memio.h"

static struct sbf_hash key(uint64_t ns, uint64_t i)
{
    uint64_t v[2] = {ns, i};
    return sbf_hash_key(v, sizeof(v));
}

static int decode(const unsigned char *data, size_t len, size_t step, uint64_t max_bytes,
                  struct sbf **out)
{
    struct mem_in r = {.data = data, .len = len, .step = step};
    *out = NULL;
    return sbf_decode(mem_read, &r, max_bytes, NULL, out);
}

static struct mem_out encode(const struct sbf *f)
{
    struct mem_out o = {0};
    assert_int_equal(sbf_encode(f, mem_write, &o), SBF_OK);
    assert_int_equal(o.len, sbf_encoded_size(f));
    return o;
}

/* A filter of capacity cap grown by adding n keys of namespace ns. */
static struct sbf *filled(uint64_t cap, enum sbf_growth g, uint64_t ns, uint64_t n)
{
    struct sbf_params p;
    sbf_params_default(&p);
    p.capacity = cap;
    p.growth = g;
    struct sbf *f = NULL;
    assert_int_equal(sbf_new(&p, NULL, &f), SBF_OK);
    for (uint64_t i = 0; i < n; i++)
        assert_int_equal(sbf_add(f, key(ns, i), NULL), SBF_OK);
    return f;
}

static void test_round_trip(void **state)
{
    (void)state;
    struct sbf *fs[] = {filled(100000, SBF_GROWTH_EXPONENTIAL, 1, 0),
                        filled(50, SBF_GROWTH_EXPONENTIAL, 2, 400),
                        filled(1000, SBF_GROWTH_LINEAR, 3, 5000)};
    const uint64_t nkeys[] = {0, 400, 5000}, ns[] = {1, 2, 3};
    for (size_t t = 0; t < 3; t++) {
        struct mem_out o = encode(fs[t]);
        const size_t steps[] = {1, 7, 4096, SIZE_MAX};
        for (size_t s = 0; s < 4; s++) {
            if (steps[s] == 1 && o.len > 100000)
                continue;
            struct sbf *g = NULL;
            assert_int_equal(decode(o.data, o.len, steps[s], UINT64_MAX, &g), SBF_OK);
            assert_int_equal(sbf_verify(g), SBF_OK);
            struct mem_out o2 = encode(g);
            assert_int_equal(o2.len, o.len);
            assert_memory_equal(o2.data, o.data, o.len);
            free(o2.data);

            assert_true(sbf_compatible(fs[t], g));
            struct sbf_info a, b;
            sbf_info(fs[t], &a);
            sbf_info(g, &b);
            assert_memory_equal(&a, &b, sizeof(a));
            for (uint64_t i = 0; i < nkeys[t]; i++)
                assert_true(sbf_check(g, key(ns[t], i)));
            /* The decoded filter keeps growing with the same geometry as the original. */
            for (uint64_t i = nkeys[t]; i < nkeys[t] + 2000; i++) {
                bool x, y;
                assert_int_equal(sbf_checkadd(fs[t], key(ns[t], i), &x), SBF_OK);
                assert_int_equal(sbf_checkadd(g, key(ns[t], i), &y), SBF_OK);
                assert_int_equal(x, y);
            }
            o2 = encode(g);
            struct mem_out o3 = encode(fs[t]);
            assert_int_equal(o2.len, o3.len);
            assert_memory_equal(o2.data, o3.data, o3.len);
            free(o2.data);
            free(o3.data);
            sbf_free(g);
            /* Put the original back to its encoded state for the next read size. */
            sbf_free(fs[t]);
            assert_int_equal(decode(o.data, o.len, SIZE_MAX, UINT64_MAX, &fs[t]), SBF_OK);
        }
        free(o.data);
        sbf_free(fs[t]);
    }
}

/* Small enough to try every byte: capacity 20, grown to 3 stages. */
static struct mem_out small_encoding(void)
{
    struct sbf *f = filled(20, SBF_GROWTH_EXPONENTIAL, 4, 100);
    struct sbf_info info;
    sbf_info(f, &info);
    assert_int_equal(info.stages, 3);
    struct mem_out o = encode(f);
    sbf_free(f);
    return o;
}

static uint64_t get_le(const unsigned char *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Marks in structural[] the bytes of o that are fields (headers, stage records, v3 run
 * records) rather than bits or the checksum, walking the format. */
static void mark_structure(const struct mem_out *o, bool *structural)
{
    uint32_t n = (uint32_t)get_le(o->data + 12, 4);
    size_t at = 52 + (size_t)28 * n;
    for (size_t i = 0; i < at; i++)
        structural[i] = true;
    if (get_le(o->data + 8, 4) != 3)
        return;
    for (uint32_t st = 0; st < n; st++) {
        uint64_t bytes = get_le(o->data + 52 + 28 * st + 16, 8) * 64;
        for (uint64_t c = 0, chunks = (bytes + 4095) / 4096; c < chunks;) {
            for (size_t i = 0; i < 9; i++)
                structural[at + i] = true;
            uint64_t cnt = get_le(o->data + at + 1, 8);
            at += 9;
            if (o->data[at - 9] == 1) {
                uint64_t end = (c + cnt) * 4096 < bytes ? (c + cnt) * 4096 : bytes;
                at += (size_t)(end - c * 4096);
            }
            c += cnt;
        }
    }
}

/*
 * Corruptions of o, each refused with nothing allocated: every wrong value of every field
 * byte; in the bits and the checksum, which only the checksum guards, every single-bit
 * flip and all bits.
 */
static size_t refuse_every_byte(struct mem_out *o)
{
    bool *structural = calloc(o->len, 1);
    assert_non_null(structural);
    mark_structure(o, structural);
    const unsigned flips[] = {0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xff};
    size_t tried = 0;
    for (size_t i = 0; i < o->len; i++) {
        size_t nv = structural[i] ? 255 : sizeof(flips) / sizeof(flips[0]);
        for (size_t j = 0; j < nv; j++) {
            unsigned x = structural[i] ? (unsigned)j + 1 : flips[j];
            o->data[i] ^= (unsigned char)x;
            struct sbf *f = NULL;
            int rc = decode(o->data, o->len, SIZE_MAX, UINT64_MAX, &f);
            if (rc == SBF_OK)
                fail_msg("byte %zu ^ 0x%02x accepted", i, x);
            assert_null(f);
            o->data[i] ^= (unsigned char)x;
            tried++;
        }
    }
    free(structural);
    return tried;
}

/* The fixed-size v2 stream of f (what bloomd 0.1.0 and the window kind write). */
static struct mem_out encode_v2(const struct sbf *f)
{
    struct mem_out o = {0};
    assert_int_equal(sbf_encode_stages(f, sbf_stage_count(f), mem_write, &o), SBF_OK);
    assert_int_equal(o.len, sbf_encoded_size_stages(f, sbf_stage_count(f)));
    return o;
}

/* growth=none survives the codec: the decoded filter is full where the original is. */
static void test_round_trip_nonscaling(void **state)
{
    (void)state;
    struct sbf *f = filled(1000, SBF_GROWTH_NONE, 4, 0);
    int rc = SBF_OK;
    uint64_t i = 0;
    for (; rc == SBF_OK; i++)
        rc = sbf_add(f, key(4, i), NULL);
    assert_int_equal(rc, SBF_EFULL);
    struct mem_out o = encode(f);
    struct sbf *g = NULL;
    assert_int_equal(decode(o.data, o.len, 7, UINT64_MAX, &g), SBF_OK);
    assert_int_equal(sbf_params(g)->growth, SBF_GROWTH_NONE);
    assert_true(sbf_compatible(f, g));
    bool present = false;
    assert_int_equal(sbf_checkadd(g, key(4, 0), &present), SBF_OK);
    assert_true(present);
    assert_int_equal(sbf_checkadd(g, key(4, i - 1), &present), SBF_EFULL);
    struct mem_out o2 = encode(g);
    assert_int_equal(o2.len, o.len);
    assert_memory_equal(o2.data, o.data, o.len);
    free(o.data);
    free(o2.data);
    sbf_free(f);
    sbf_free(g);
}

static void test_every_corruption(void **state)
{
    (void)state;
    struct mem_out o = small_encoding();
    size_t tried = refuse_every_byte(&o);
    print_message("v3: %zu corruptions of %zu bytes rejected\n", tried, o.len);
    free(o.data);
    struct sbf *f = filled(20, SBF_GROWTH_EXPONENTIAL, 4, 100);
    o = encode_v2(f);
    tried = refuse_every_byte(&o);
    print_message("v2: %zu corruptions of %zu bytes rejected\n", tried, o.len);
    free(o.data);
    sbf_free(f);
}

static void test_every_truncation(void **state)
{
    (void)state;
    struct mem_out o = small_encoding();
    for (size_t len = 0; len < o.len; len++) {
        struct sbf *f = NULL;
        assert_int_not_equal(decode(o.data, len, 13, UINT64_MAX, &f), SBF_OK);
        assert_null(f);
    }
    /* One byte too many is as bad as one too few. */
    unsigned char *longer = malloc(o.len + 1);
    assert_non_null(longer);
    memcpy(longer, o.data, o.len);
    longer[o.len] = 0;
    struct sbf *f = NULL;
    assert_int_equal(decode(longer, o.len + 1, SIZE_MAX, UINT64_MAX, &f), SBF_ECORRUPT);
    assert_null(f);
    free(longer);
    free(o.data);
}

static void test_version_and_limits(void **state)
{
    (void)state;
    struct mem_out o = small_encoding();
    struct sbf *f = NULL;
    const unsigned char versions[] = {0, 1, 4, 0xff}; /* this build reads 2 and 3 */
    for (size_t i = 0; i < sizeof(versions); i++) {
        o.data[8] = versions[i];
        assert_int_equal(decode(o.data, o.len, SIZE_MAX, UINT64_MAX, &f), SBF_EVERSION);
    }
    o.data[8] = 3;

    assert_int_equal(decode(o.data, o.len, SIZE_MAX, UINT64_MAX, &f), SBF_OK);
    struct sbf_info info;
    sbf_info(f, &info);
    sbf_free(f);
    assert_int_equal(decode(o.data, o.len, SIZE_MAX, info.bytes - 1, &f), SBF_ETOOBIG);
    assert_null(f);
    assert_int_equal(decode(o.data, o.len, SIZE_MAX, info.bytes, &f), SBF_OK);
    sbf_free(f);
    free(o.data);
}

/* Counts reservations; refuses everything when refuse is set, and from the refuse_from-th
 * reservation on (1-based) when that is not 0. */
struct budget {
    int reserves, refuse_from;
    bool refuse;
    size_t used;
};

static bool reserve(void *ctx, size_t bytes)
{
    struct budget *b = ctx;
    b->reserves++;
    if (b->refuse || (b->refuse_from && b->reserves >= b->refuse_from))
        return false;
    b->used += bytes;
    return true;
}

static void release(void *ctx, size_t bytes)
{
    struct budget *b = ctx;
    b->used -= bytes;
}

static void test_callback_failures(void **state)
{
    (void)state;
    struct sbf *f = filled(20, SBF_GROWTH_EXPONENTIAL, 5, 100);
    struct mem_out o = encode(f);
    int writes = o.writes;
    assert_true(writes >= 2);
    for (int i = 1; i <= writes; i++) {
        struct mem_out bad = {.fail_at = i};
        assert_int_equal(sbf_encode(f, mem_write, &bad), SBF_EIO);
        free(bad.data);
    }
    /* A read failing anywhere, also after some stages were reserved: nothing held. */
    struct budget b = {0};
    struct sbf_budget sb = {.reserve = reserve, .release = release, .ctx = &b};
    for (size_t at = 0; at <= o.len; at += 17) {
        struct mem_in r = {.data = o.data, .len = o.len, .step = 64, .fail = true, .fail_at = at};
        struct sbf *g = NULL;
        assert_int_equal(sbf_decode(mem_read, &r, UINT64_MAX, &sb, &g), SBF_EIO);
        assert_null(g);
        assert_int_equal(b.used, 0);
    }
    assert_true(b.reserves > 0);
    /* The budget refusing the bits: SBF_EBUDGET before any bit is read, nothing held. */
    b.refuse = true;
    struct mem_in r = {.data = o.data, .len = o.len};
    struct sbf *g = NULL;
    assert_int_equal(sbf_decode(mem_read, &r, UINT64_MAX, &sb, &g), SBF_EBUDGET);
    assert_true(r.pos < 52 + 3 * 28 + 1);
    assert_null(g);
    assert_int_equal(b.used, 0);
    /* Refusing a later stage after earlier ones were reserved (reservation 1 is the whole
     * filter's, tried and given back): their bytes come back. */
    b.refuse = false;
    for (int from = 2; from <= 3; from++) {
        b.reserves = 0;
        b.refuse_from = from;
        r.pos = 0;
        assert_int_equal(sbf_decode(mem_read, &r, UINT64_MAX, &sb, &g), SBF_ENOMEM);
        assert_null(g);
        assert_int_equal(b.reserves, from);
        assert_int_equal(b.used, 0);
    }
    b.refuse_from = 0;
    r.pos = 0;
    assert_int_equal(sbf_decode(mem_read, &r, UINT64_MAX, &sb, &g), SBF_OK);
    struct sbf_info info;
    sbf_info(g, &info);
    assert_int_equal(b.used, info.bytes);
    sbf_free(g);
    assert_int_equal(b.used, 0);
    free(o.data);
    sbf_free(f);
}

/* ---- hostile headers, built by hand from the format description ---- */

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

static uint64_t dbits(double d)
{
    uint64_t v;
    memcpy(&v, &d, sizeof(v));
    return v;
}

/* Header + n stage headers whose geometry is right for p: only the sizes are hostile. */
static size_t hostile(unsigned char *buf, const struct sbf_params *p, uint32_t n,
                      uint32_t declared_n)
{
    memcpy(buf, "BLOOMSBF", 8);
    put_u32(buf + 8, 2);
    put_u32(buf + 12, declared_n);
    put_u64(buf + 16, p->capacity);
    put_u64(buf + 24, dbits(p->error));
    put_u32(buf + 32, (uint32_t)p->growth);
    put_u64(buf + 36, dbits(p->scale));
    put_u64(buf + 44, dbits(p->ratio));
    unsigned char *q = buf + 52;
    for (uint32_t i = 0; i < n; i++, q += 28) {
        uint64_t cap;
        struct bloom_geom g;
        assert_int_equal(sbf_stage_plan(p, i, &cap, &g), SBF_OK);
        put_u64(q, cap);
        put_u64(q + 8, 0);
        put_u64(q + 16, g.nblocks);
        put_u32(q + 24, g.k);
    }
    memset(q, 0, 64); /* a little of the bits */
    return (size_t)(q - buf) + 64;
}

static void test_hostile_headers(void **state)
{
    (void)state;
    static unsigned char buf[52 + 28 * 70 + 64];
    struct budget b = {0};
    struct sbf_budget sb = {.reserve = reserve, .release = release, .ctx = &b};
    struct sbf_params p;
    sbf_params_default(&p);
    p.capacity = SBF_MAX_CAPACITY; /* terabytes of bits: must never be allocated */
    struct sbf *f = NULL;
    struct mem_in r = {.data = buf};

    r.len = hostile(buf, &p, 1, 1);
    assert_int_equal(sbf_decode(mem_read, &r, 1 << 20, &sb, &f), SBF_ETOOBIG);
    /* 64 stages, 1 GiB each would pass a budget of 2^40 but not max_bytes. */
    p.capacity = 500000000;
    p.scale = 1;
    r.pos = 0;
    r.len = hostile(buf, &p, 64, 64);
    assert_int_equal(sbf_decode(mem_read, &r, (uint64_t)1 << 36, &sb, &f), SBF_ETOOBIG);
    assert_int_equal(b.reserves, 0);

    /* Wrong counts and fields. */
    sbf_params_default(&p);
    const uint32_t counts[] = {0, 65, UINT32_MAX};
    for (size_t i = 0; i < 3; i++) {
        r.pos = 0;
        r.len = hostile(buf, &p, 1, counts[i]);
        assert_int_equal(sbf_decode(mem_read, &r, UINT64_MAX, &sb, &f), SBF_ECORRUPT);
    }
    const double bad_errors[] = {0.0, 1.0, -0.5, 2.0, 1e-300}; /* 1e-300: no geometry */
    for (size_t i = 0; i < 5; i++) {
        r.pos = 0;
        r.len = hostile(buf, &p, 1, 1);
        put_u64(buf + 24, dbits(bad_errors[i]));
        assert_int_equal(sbf_decode(mem_read, &r, UINT64_MAX, &sb, &f), SBF_ECORRUPT);
    }
    put_u64(buf + 24, UINT64_C(0x7ff8000000000001)); /* NaN */
    r.pos = 0;
    assert_int_equal(sbf_decode(mem_read, &r, UINT64_MAX, &sb, &f), SBF_ECORRUPT);
    r.pos = 0;
    r.len = hostile(buf, &p, 1, 1);
    put_u32(buf + 32, 3); /* growth */
    assert_int_equal(sbf_decode(mem_read, &r, UINT64_MAX, &sb, &f), SBF_ECORRUPT);
    r.pos = 0;
    r.len = hostile(buf, &p, 2, 2);
    put_u32(buf + 32, SBF_GROWTH_NONE); /* a filter that does not grow, with two stages */
    assert_int_equal(sbf_decode(mem_read, &r, UINT64_MAX, &sb, &f), SBF_ECORRUPT);
    r.pos = 0;
    r.len = hostile(buf, &p, 1, 1);
    put_u64(buf + 52 + 16, 1); /* nblocks that does not match the parameters */
    assert_int_equal(sbf_decode(mem_read, &r, UINT64_MAX, &sb, &f), SBF_ECORRUPT);
    r.pos = 0;
    r.len = hostile(buf, &p, 1, 1);
    memcpy(buf, "BLOOMSBX", 8);
    assert_int_equal(sbf_decode(mem_read, &r, UINT64_MAX, &sb, &f), SBF_ECORRUPT);
    assert_int_equal(b.reserves, 0);
    assert_null(f);
}

/*
 * Encoding beside the writer: every key added before the encode started must be in the
 * decoded copy (bits are read with relaxed atomics, stages published with release).
 */
struct race {
    struct sbf *f;
    atomic_ullong done;
    atomic_bool stop;
    int rounds, misses;
};

static void *encoder(void *arg)
{
    struct race *r = arg;
    while (!atomic_load(&r->stop) || r->rounds == 0) {
        uint64_t n = atomic_load_explicit(&r->done, memory_order_acquire);
        struct mem_out o = {0};
        struct sbf *g = NULL;
        /* No cmocka asserts off the main thread: failures are counted as misses. The
         * header's item counts may lag the bits; it is still a valid encoding. */
        if (sbf_encode(r->f, mem_write, &o) != SBF_OK ||
            decode(o.data, o.len, SIZE_MAX, UINT64_MAX, &g) != SBF_OK) {
            r->misses++;
            free(o.data);
            break;
        }
        for (uint64_t i = 0; i < n; i++)
            r->misses += !sbf_check(g, key(9, i));
        sbf_free(g);
        free(o.data);
        r->rounds++;
    }
    return NULL;
}

static void test_encode_beside_writer(void **state)
{
    (void)state;
    struct race r = {.f = filled(1000, SBF_GROWTH_EXPONENTIAL, 8, 0)};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, encoder, &r), 0);
    for (uint64_t i = 0; i < 20000; i++) {
        assert_int_equal(sbf_add(r.f, key(9, i), NULL), SBF_OK);
        atomic_store_explicit(&r.done, i + 1, memory_order_release);
    }
    atomic_store(&r.stop, true);
    pthread_join(t, NULL);
    assert_int_equal(r.misses, 0);
    assert_true(r.rounds > 0);
    sbf_free(r.f);
}

/* The invariant checker notices damaged internals (and so can fail the other tests). */
static void test_verify_detects(void **state)
{
    (void)state;
    struct sbf *f = filled(20, SBF_GROWTH_EXPONENTIAL, 10, 100);
    assert_int_equal(sbf_verify(f), SBF_OK);
    f->stages[1].k++;
    assert_int_equal(sbf_verify(f), SBF_ECORRUPT);
    f->stages[1].k--;
    f->stages[2].nblocks--;
    assert_int_equal(sbf_verify(f), SBF_ECORRUPT);
    f->stages[2].nblocks++;
    atomic_store(&f->stages[0].items, f->stages[0].nblocks * 512 + 1);
    assert_int_equal(sbf_verify(f), SBF_ECORRUPT);
    atomic_store(&f->stages[0].items, 20);
    atomic_store(&f->nstages, 2); /* stage 2 allocated beyond the count */
    assert_int_equal(sbf_verify(f), SBF_ECORRUPT);
    atomic_store(&f->nstages, 3);
    assert_int_equal(sbf_verify(f), SBF_OK);
    sbf_free(f);
}

/* ---- v3 zero runs ---- */

static void fix_checksum(struct mem_out *o)
{
    put_u64(o->data + o->len - 8, XXH3_64bits(o->data, o->len - 8));
}

/* Pages of stage 0 of f that are resident (its memory must be an mmap). */
static size_t resident_pages(const struct sbf *f)
{
    const struct sbf_stage *s = &f->stages[0];
    assert_true(s->maplen > 0);
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (s->maplen + page - 1) / page, in = 0;
    unsigned char *vec = malloc(n);
    assert_non_null(vec);
    assert_int_equal(mincore(s->mem, s->maplen, vec), 0);
    for (size_t i = 0; i < n; i++)
        in += vec[i] & 1u;
    free(vec);
    return in;
}

static void test_v3_sizes(void **state)
{
    (void)state;
    /* Empty: a 12 MB stage (an mmap) is one zero run. */
    struct sbf *f = filled(10000000, SBF_GROWTH_EXPONENTIAL, 6, 0);
    struct sbf_info info;
    sbf_info(f, &info);
    struct mem_out o = encode(f);
    assert_int_equal(o.len, 52 + 28 + 9 + 8);
    struct sbf *g = NULL;
    assert_int_equal(decode(o.data, o.len, 1, UINT64_MAX, &g), SBF_OK);
    assert_int_equal(sbf_verify(g), SBF_OK);
    assert_int_equal(resident_pages(g), 0);
    sbf_free(g);
    /* The same filter as v2 (every zero written out) decodes without touching a page. */
    struct mem_out v2 = encode_v2(f);
    assert_int_equal(v2.len, 52 + 28 + info.bytes + 8);
    assert_int_equal(decode(v2.data, v2.len, SIZE_MAX, UINT64_MAX, &g), SBF_OK);
    assert_int_equal(resident_pages(g), 0);
    struct mem_out o2 = encode(g);
    assert_int_equal(o2.len, o.len);
    assert_memory_equal(o2.data, o.data, o.len);
    free(o2.data);
    sbf_free(g);
    free(v2.data);
    free(o.data);

    /* Sparse: 50 keys touch at most 50 chunks; the stream holds those and their runs, and
     * the copy is as resident as the original (a huge page may back each touched chunk). */
    for (uint64_t i = 0; i < 50; i++)
        assert_int_equal(sbf_add(f, key(6, i), NULL), SBF_OK);
    o = encode(f);
    assert_true(o.len <= 52 + 28 + 8 + 50 * (4096 + 18) + 9);
    assert_int_equal(decode(o.data, o.len, 4096, UINT64_MAX, &g), SBF_OK);
    assert_true(resident_pages(g) <= resident_pages(f) + 512);
    for (uint64_t i = 0; i < 50; i++)
        assert_true(sbf_check(g, key(6, i)));
    o2 = encode(g);
    assert_memory_equal(o2.data, o.data, o.len);
    free(o2.data);
    sbf_free(g);
    free(o.data);
    sbf_free(f);

    /* Full: every chunk raw, runs of 16, the last one shorter; still exact. */
    f = filled(1000, SBF_GROWTH_EXPONENTIAL, 7, 1000);
    sbf_info(f, &info);
    o = encode(f);
    size_t chunks = (size_t)(info.bytes + 4095) / 4096;
    assert_int_equal(o.len, 52 + 28 + 8 + info.bytes + 9 * ((chunks + 15) / 16));
    assert_int_equal(decode(o.data, o.len, 7, UINT64_MAX, &g), SBF_OK);
    o2 = encode(g);
    assert_memory_equal(o2.data, o.data, o.len);
    free(o2.data);
    sbf_free(g);
    free(o.data);
    sbf_free(f);
}

static void test_v3_not_canonical(void **state)
{
    (void)state;
    struct sbf *f = filled(1000000, SBF_GROWTH_EXPONENTIAL, 8, 0);
    struct mem_out o = encode(f); /* header, 1 stage, one zero run of every chunk, checksum */
    size_t run = 52 + 28;
    uint64_t chunks =
        o.data[run + 1] | (uint64_t)o.data[run + 2] << 8 | (uint64_t)o.data[run + 3] << 16;
    struct sbf *g = NULL;
    struct mem_out bad = {0};
    /* Two zero runs where one would do. */
    unsigned char r[9] = {0};
    assert_int_equal(mem_write(&bad, o.data, run), 0);
    put_u64(r + 1, 1);
    assert_int_equal(mem_write(&bad, r, 9), 0);
    put_u64(r + 1, chunks - 1);
    assert_int_equal(mem_write(&bad, r, 9), 0);
    assert_int_equal(mem_write(&bad, o.data + o.len - 8, 8), 0);
    fix_checksum(&bad);
    assert_int_equal(decode(bad.data, bad.len, SIZE_MAX, UINT64_MAX, &g), SBF_ECORRUPT);
    /* A raw chunk of zeros. */
    bad.len = run;
    r[0] = 1;
    put_u64(r + 1, 1);
    assert_int_equal(mem_write(&bad, r, 9), 0);
    static unsigned char zero[4096];
    assert_int_equal(mem_write(&bad, zero, sizeof(zero)), 0);
    r[0] = 0;
    put_u64(r + 1, chunks - 1);
    assert_int_equal(mem_write(&bad, r, 9), 0);
    assert_int_equal(mem_write(&bad, o.data + o.len - 8, 8), 0);
    fix_checksum(&bad);
    assert_int_equal(decode(bad.data, bad.len, SIZE_MAX, UINT64_MAX, &g), SBF_ECORRUPT);
    /* Raw after a short raw run (the same chunks as one run of 2). */
    zero[0] = 1;
    bad.len = run;
    for (int i = 0; i < 2; i++) {
        r[0] = 1;
        put_u64(r + 1, 1);
        assert_int_equal(mem_write(&bad, r, 9), 0);
        assert_int_equal(mem_write(&bad, zero, sizeof(zero)), 0);
    }
    r[0] = 0;
    put_u64(r + 1, chunks - 2);
    assert_int_equal(mem_write(&bad, r, 9), 0);
    assert_int_equal(mem_write(&bad, o.data + o.len - 8, 8), 0);
    fix_checksum(&bad);
    assert_int_equal(decode(bad.data, bad.len, SIZE_MAX, UINT64_MAX, &g), SBF_ECORRUPT);
    /* Runs past the stage's end, of count 0, of an unknown type. */
    const uint64_t counts[] = {chunks + 1, 0, UINT64_MAX};
    for (size_t i = 0; i < 4; i++) {
        bad.len = 0;
        assert_int_equal(mem_write(&bad, o.data, o.len), 0);
        if (i < 3)
            put_u64(bad.data + run + 1, counts[i]);
        else
            bad.data[run] = 2;
        fix_checksum(&bad);
        assert_int_equal(decode(bad.data, bad.len, SIZE_MAX, UINT64_MAX, &g), SBF_ECORRUPT);
    }
    assert_null(g);
    free(bad.data);
    free(o.data);
    sbf_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),         cmocka_unit_test(test_round_trip_nonscaling),
        cmocka_unit_test(test_every_corruption),   cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_version_and_limits), cmocka_unit_test(test_callback_failures),
        cmocka_unit_test(test_hostile_headers),    cmocka_unit_test(test_encode_beside_writer),
        cmocka_unit_test(test_verify_detects),     cmocka_unit_test(test_v3_sizes),
        cmocka_unit_test(test_v3_not_canonical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
