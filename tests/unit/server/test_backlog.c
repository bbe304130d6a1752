/*
 * test_backlog.c - the replication backlog against a naive model: every record's frame kept
 * apart, in order. Records of mixed sizes (up to the largest ADD frame), encoded by it or
 * handed over as frames, go in past the capacity many times over, so chunks are dropped
 * and reused; after each, reads from sampled offsets with sampled limits must give
 * exactly the model's frames, at least one and whole ones, and the held records must be a
 * suffix of the stream that covers most of the capacity. Also: a gap in the offsets
 * empties it, clear, the last offset, spare chunks made ahead.
 */
#include <setjmp.h> /* cmocka needs these first */
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/journal_record.h"
#include "server/repl/backlog.h"

#define CAP ((size_t)16 << 20)
#define CHUNK ((size_t)2 << 20) /* backlog.c's */

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static struct sbf_hash hashes[JOURNAL_MAX_HASHES];

/* The model: frame i (offset base + i) at bytes[at[i], at[i + 1]). */
struct model {
    unsigned char *bytes;
    size_t len, cap;
    size_t *at;
    size_t n, ncap;
    uint64_t base; /* offset of frame 0 */
};

static void model_add(struct model *m, const struct journal_record *rec, uint64_t offset)
{
    size_t sz = journal_record_size(rec);
    assert_true(sz > 0);
    if (m->n == 0)
        m->base = offset;
    assert_int_equal(offset, m->base + m->n);
    if (m->len + sz > m->cap) {
        m->cap = (m->len + sz) * 2;
        m->bytes = realloc(m->bytes, m->cap);
        assert_non_null(m->bytes);
    }
    if (m->n + 2 > m->ncap) {
        m->ncap = (m->n + 2) * 2;
        m->at = realloc(m->at, m->ncap * sizeof *m->at);
        assert_non_null(m->at);
    }
    long w = journal_record_encode(rec, offset, m->bytes + m->len, sz);
    assert_int_equal(w, (long)sz);
    m->at[m->n] = m->len;
    m->len += sz;
    m->at[++m->n] = m->len;
}

static void model_free(struct model *m)
{
    free(m->bytes);
    free(m->at);
}

/* A record of a random type and size: mostly ADDs of ~100 hashes, a few of the largest. */
static struct journal_record random_record(void)
{
    static const char *const names[] = {"f", "clicks", "a-much-longer-filter-name.2026"};
    const char *name = names[next_rand() % 3];
    struct journal_record r = {.type = JOURNAL_ADD_NEW, .name = {name, strlen(name)}};
    uint64_t pick = next_rand() % 1000;
    if (pick < 5) {
        r.hashes = hashes;
        r.nhashes = JOURNAL_MAX_HASHES;
    } else if (pick < 50) {
        r.type = JOURNAL_DROP;
    } else if (pick < 100) {
        r.type = JOURNAL_ROTATE;
        r.time_ms = (int64_t)(next_rand() % 1000000);
    } else {
        r.type = pick < 500 ? JOURNAL_ADD : JOURNAL_ADD_NEW;
        size_t k = 1 + next_rand() % 200;
        r.hashes = hashes + next_rand() % (JOURNAL_MAX_HASHES - k);
        r.nhashes = k;
    }
    return r;
}

/* Checks b (of capacity cap) against m: the held records are a suffix covering most of the
 * capacity (or all), and reads from sampled offsets give the model's frames. */
static void check(const struct backlog *b, const struct model *m, size_t cap, unsigned reads)
{
    /* All chunks but the newest are held, each at least about half full of frames (a chunk
     * is closed when the next frame, at most half a chunk, does not fit; its index takes
     * up to a tenth for the smallest frames). */
    size_t held_at_least = (cap - CHUNK) * 2 / 5;
    uint64_t last = m->base + m->n - 1;
    assert_int_equal(backlog_last(b), last);
    assert_true(backlog_bytes(b) <= cap);
    assert_true(backlog_has(b, last));
    /* The oldest held offset o (o + 1 is the first record a read from o gives). */
    size_t lo = 0, hi = m->n; /* in frames: records from index lo on are held */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (backlog_has(b, m->base + mid - 1))
            hi = mid;
        else
            lo = mid + 1;
    }
    size_t first = lo;
    assert_true(m->len - m->at[first] >= held_at_least || first == 0);
    for (size_t i = 0; i < m->n; i += 1 + m->n / 64) /* a suffix: none held before first */
        assert_int_equal(backlog_has(b, m->base + i - 1), i >= first);
    for (unsigned k = 0; k < reads; k++) {
        size_t i = first + next_rand() % (m->n - first);
        uint64_t from = m->base + i - 1;
        size_t max = next_rand() % 4 == 0 ? SIZE_MAX : 1 + next_rand() % (256 << 10);
        if (next_rand() % 3 == 0) { /* exactly k frames: all k, unless a chunk ends first */
            size_t nk = 1 + next_rand() % 50;
            max = m->at[i + nk < m->n ? i + nk : m->n] - m->at[i];
        }
        const void *p;
        size_t n;
        uint64_t got_last;
        backlog_read(b, from, max, &p, &n, &got_last);
        assert_true(got_last > from);
        size_t j = (size_t)(got_last - m->base); /* frames i..j */
        assert_true(j < m->n);
        assert_int_equal(n, m->at[j + 1] - m->at[i]);
        assert_true(n <= max || j == i); /* within max, but at least one whole frame */
        assert_memory_equal(p, m->bytes + m->at[i], n);
        if (j + 1 < m->n && max != SIZE_MAX && n + (m->at[j + 2] - m->at[j + 1]) <= max) {
            /* It stopped early: only at the end of a chunk, where the next read goes on. */
            const void *p2;
            size_t n2;
            uint64_t l2;
            backlog_read(b, got_last, SIZE_MAX, &p2, &n2, &l2);
            assert_true(n2 > 0);
            assert_ptr_not_equal(p2, (const unsigned char *)p + n);
        }
    }
    /* From the last offset: nothing. */
    const void *p;
    size_t n;
    uint64_t l;
    backlog_read(b, last, SIZE_MAX, &p, &n, &l);
    assert_int_equal(n, 0);
    assert_int_equal(l, last);
}

static void test_model(void **state)
{
    (void)state;
    struct backlog *b = backlog_new(CAP);
    assert_non_null(b);
    struct model m = {0};
    uint64_t offset = 1000;
    size_t appended = 0;
    for (unsigned i = 0; appended < 5 * CAP; i++) {
        struct journal_record r = random_record();
        model_add(&m, &r, offset);
        if (i % 2 == 0) /* encoded here, or handed over encoded (the journal's frame) */
            assert_int_equal(backlog_append(b, &r, offset), 0);
        else
            assert_int_equal(
                backlog_append_frame(b, m.bytes + m.at[m.n - 1], m.at[m.n] - m.at[m.n - 1], offset),
                0);
        appended += journal_record_size(&r);
        offset++;
        if (i % 997 == 0 || r.nhashes == JOURNAL_MAX_HASHES)
            check(b, &m, CAP, 8);
    }
    check(b, &m, CAP, 400);
    model_free(&m);
    backlog_free(b);
}

static void test_gap_and_clear(void **state)
{
    (void)state;
    struct backlog *b = backlog_new(0); /* the smallest: one chunk */
    assert_non_null(b);
    assert_false(backlog_has(b, 0));
    assert_int_equal(backlog_last(b), 0);
    struct journal_record r = {
        .type = JOURNAL_ADD, .name = {"f", 1}, .hashes = hashes, .nhashes = 10};
    for (uint64_t o = 1; o <= 5; o++)
        assert_int_equal(backlog_append(b, &r, o), 0);
    assert_true(backlog_has(b, 0)); /* a replica with nothing resumes from the first */
    assert_true(backlog_has(b, 5));
    assert_false(backlog_has(b, 6));
    const void *p;
    size_t n;
    uint64_t last;
    backlog_read(b, 2, SIZE_MAX, &p, &n, &last);
    assert_int_equal(last, 5);
    assert_int_equal(n, 3 * journal_record_size(&r));
    /* A frame decodes as the record at its offset. */
    static struct journal_scratch scratch;
    struct journal_record got;
    assert_int_equal(journal_record_decode(p, n, &scratch, &got), (long)journal_record_size(&r));
    assert_int_equal(got.pos, 3);
    /* Offsets that do not follow: the backlog starts again from there. */
    assert_int_equal(backlog_append(b, &r, 9), 0);
    assert_false(backlog_has(b, 5));
    assert_true(backlog_has(b, 8));
    assert_int_equal(backlog_last(b), 9);
    backlog_clear(b);
    assert_false(backlog_has(b, 9));
    assert_int_equal(backlog_bytes(b), 0);
    assert_int_equal(backlog_append(b, &r, 10), 0);
    assert_true(backlog_has(b, 9));
    backlog_free(b);
    backlog_free(NULL);
}

/* Spare chunks made ahead: as many as wanted, used before any new one, never past the
 * capacity (ASan's leak check: the ones that do not fit are freed). */
static void test_spares(void **state)
{
    (void)state;
    size_t cap = (size_t)8 << 20;
    struct backlog *b = backlog_new(cap);
    assert_non_null(b);
    assert_int_equal(backlog_spares_wanted(b), cap);
    backlog_spares_adopt(b, backlog_spares_make(cap));
    assert_int_equal(backlog_spares_wanted(b), 0);
    backlog_spares_adopt(b, backlog_spares_make((size_t)4 << 20)); /* too many: freed */
    backlog_spares_adopt(b, NULL);
    backlog_spares_free(NULL);
    backlog_spares_free(backlog_spares_make((size_t)2 << 20));
    struct model m = {0};
    uint64_t offset = 1;
    for (size_t appended = 0; appended < 3 * cap; offset++) {
        struct journal_record r = random_record();
        assert_int_equal(backlog_append(b, &r, offset), 0);
        model_add(&m, &r, offset);
        appended += journal_record_size(&r);
        assert_true(backlog_bytes(b) <= cap);
        assert_int_equal(backlog_spares_wanted(b), 0);
    }
    check(b, &m, cap, 50);
    /* Cleared, its chunks are spares again: nothing more wanted, and it fills as before. */
    backlog_clear(b);
    assert_int_equal(backlog_bytes(b), 0);
    assert_int_equal(backlog_spares_wanted(b), 0);
    model_free(&m);
    memset(&m, 0, sizeof m);
    for (int i = 0; i < 100; i++, offset++) {
        struct journal_record r = random_record();
        assert_int_equal(backlog_append(b, &r, offset), 0);
        model_add(&m, &r, offset);
    }
    check(b, &m, cap, 20);
    model_free(&m);
    backlog_free(b);
}

int main(void)
{
    for (size_t i = 0; i < JOURNAL_MAX_HASHES; i++)
        hashes[i] = (struct sbf_hash){next_rand(), next_rand()};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model),
        cmocka_unit_test(test_gap_and_clear),
        cmocka_unit_test(test_spares),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
