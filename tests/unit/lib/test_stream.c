/*
 * test_stream.c - the checksummed framing of every payload (lib/stream.h): what the
 * writer frames the reader accepts, through any read sizes; a changed byte, a byte more,
 * a cut inside the checksum and a failing callback are each told apart; an inner stream
 * of stated length ends where it was told to, hashed into the outer one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <xxhash.h>

#include "lib/sbf.h"
#include "lib/stream.h"
#include "tests/unit/lib/memio.h"

/* 1000 bytes framed: a 10-byte head, then the rest through stream_write_fn. */
static struct mem_out framed(void)
{
    unsigned char msg[1000];
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (unsigned char)(i * 7 + 3);
    struct mem_out o = {0};
    struct stream_writer w;
    stream_writer_init(&w, mem_write, &o);
    assert_int_equal(stream_write(&w, msg, 10), SBF_OK);
    assert_int_equal(stream_write_fn(&w, msg + 10, sizeof(msg) - 10), SBF_OK);
    assert_int_equal(stream_write_sum(&w), SBF_OK);
    assert_int_equal(o.len, sizeof(msg) + 8);
    assert_memory_equal(o.data, msg, sizeof(msg));
    /* The checksum is XXH3-64 of every byte before it, little-endian. */
    uint64_t sum = XXH3_64bits(msg, sizeof(msg));
    for (unsigned i = 0; i < 8; i++)
        assert_int_equal(o.data[sizeof(msg) + i], (unsigned char)(sum >> (8 * i)));
    return o;
}

/* Reads o's first len bytes as a 1000-byte payload (step bytes a call); the result of
 * stream_read_sum, or the first error. */
static int read_framed(const unsigned char *data, size_t len, size_t step, bool fail,
                       size_t fail_at)
{
    struct mem_in in = {.data = data, .len = len, .step = step, .fail = fail, .fail_at = fail_at};
    struct stream_reader r;
    stream_reader_init(&r, mem_read, &in);
    unsigned char buf[1000];
    int rc = stream_take(&r, buf, 10);
    if (rc == SBF_OK)
        rc = stream_take(&r, buf + 10, sizeof(buf) - 10);
    return rc == SBF_OK ? stream_read_sum(&r) : rc;
}

static void test_round_trip_and_refusals(void **state)
{
    (void)state;
    struct mem_out o = framed();
    const size_t steps[] = {0, 1, 7, 64, 999};
    for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++)
        assert_int_equal(read_framed(o.data, o.len, steps[s], false, 0), SBF_OK);
    for (size_t i = 0; i < o.len; i++) { /* payload or checksum: either way corrupt */
        o.data[i] ^= 0x10;
        assert_int_equal(read_framed(o.data, o.len, 13, false, 0), SBF_ECORRUPT);
        o.data[i] ^= 0x10;
    }
    for (size_t n = 0; n < o.len; n++) /* any cut: the input ended early */
        assert_int_equal(read_framed(o.data, n, 13, false, 0), SBF_EIO);
    assert_int_equal(read_framed(o.data, o.len, 13, true, 500), SBF_EIO);
    assert_int_equal(read_framed(o.data, o.len, 13, true, 1004), SBF_EIO);
    unsigned char *more = malloc(o.len + 1);
    assert_non_null(more);
    memcpy(more, o.data, o.len);
    more[o.len] = 0;
    assert_int_equal(read_framed(more, o.len + 1, 0, false, 0), SBF_ECORRUPT);
    /* a failure when looking for the end is the callback's, not corruption */
    assert_int_equal(read_framed(o.data, o.len, 0, true, o.len), SBF_EIO);
    free(more);
    free(o.data);
}

static void test_refused_writes(void **state)
{
    (void)state;
    for (int at = 1; at <= 3; at++) {
        struct mem_out o = {.fail_at = at};
        struct stream_writer w;
        stream_writer_init(&w, mem_write, &o);
        int rc = stream_write(&w, "abc", 3);
        if (rc == SBF_OK)
            rc = stream_write_fn(&w, "def", 3);
        if (rc == SBF_OK)
            rc = stream_write_sum(&w);
        assert_int_equal(rc, SBF_EIO);
        free(o.data);
    }
}

/* An inner stream: stream_read_fn gives exactly the limit, then end of input, and the
 * bytes it gave are in the outer checksum. */
static void test_inner_stream(void **state)
{
    (void)state;
    struct mem_out o = framed();
    struct mem_in in = {.data = o.data, .len = o.len, .step = 7};
    struct stream_reader r;
    stream_reader_init(&r, mem_read, &in);
    unsigned char buf[1000];
    assert_int_equal(stream_take(&r, buf, 10), SBF_OK);
    stream_reader_limit(&r, 600);
    size_t got = 0;
    for (;;) {
        long n = stream_read_fn(&r, buf + 10 + got, 1000);
        assert_true(n >= 0);
        if (n == 0)
            break;
        got += (size_t)n;
    }
    assert_int_equal(got, 600);
    assert_int_equal(r.left, 0);
    assert_int_equal(stream_read_fn(&r, buf, 1), 0);
    assert_int_equal(stream_take(&r, buf + 610, 390), SBF_OK);
    assert_memory_equal(buf, o.data, 1000);
    assert_int_equal(stream_read_sum(&r), SBF_OK);
    free(o.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_refusals),
        cmocka_unit_test(test_refused_writes),
        cmocka_unit_test(test_inner_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
