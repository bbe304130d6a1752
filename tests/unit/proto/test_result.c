/*
 * test_result.c - the neutral result model (proto/result.h) and its text rendering
 * (proto_format_result): every status renders to the exact words of PROTOCOL.md, copied
 * strings outlive their source, arrays are reused across resets, and a failed
 * allocation renders as a server error rather than a partial reply.
 */
#include <setjmp.h> /* cmocka needs these first */
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/result.h"

static struct result res;
static struct proto_buf out;
static char text[1 << 16];

static int setup(void **state)
{
    (void)state;
    result_init(&res);
    memset(&out, 0, sizeof out);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    result_free(&res);
    proto_buf_free(&out);
    return 0;
}

/* The text protocol's bytes for res, NUL-terminated. */
static const char *render(void)
{
    proto_buf_reset(&out);
    proto_format_result(&out, &res);
    assert_false(out.failed);
    assert_true(out.len < sizeof text);
    memcpy(text, out.data, out.len);
    text[out.len] = '\0';
    return text;
}

static void test_simple_statuses(void **state)
{
    (void)state;
    static const struct {
        enum result_status st;
        const char *text;
        const char *want;
    } cases[] = {
        {RESULT_OK, NULL, "OK\r\n"},
        {RESULT_CREATED, NULL, "CREATED\r\n"},
        {RESULT_EXISTS, NULL, "EXISTS\r\n"},
        {RESULT_NOT_FOUND, "somename", "NOT_FOUND\r\n"},
        {RESULT_DELETED, NULL, "DELETED\r\n"},
        {RESULT_RESTORED, NULL, "RESTORED\r\n"},
        {RESULT_VERSION, "1.2.3", "VERSION 1.2.3\r\n"},
        {RESULT_CLOSE, NULL, ""},
        {RESULT_CLIENT_ERROR, "bad thing", "CLIENT_ERROR bad thing\r\n"},
        {RESULT_CLIENT_ERROR, NULL, "CLIENT_ERROR\r\n"},
        {RESULT_SERVER_ERROR, "out of memory", "SERVER_ERROR out of memory\r\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        result_reset(&res);
        result_set(&res, cases[i].st, cases[i].text);
        assert_string_equal(render(), cases[i].want);
        assert_string_not_equal(result_status_name(cases[i].st), "?");
    }
}

static void test_count_and_bits(void **state)
{
    (void)state;
    res.status = RESULT_COUNT;
    res.count = 42;
    assert_string_equal(render(), "ADDED 42\r\n");
    result_reset(&res);
    assert_int_equal(res.status, RESULT_OK);
    assert_int_equal(res.count, 0);
    bool *b = result_add_bits(&res, 3);
    assert_non_null(b);
    b[0] = true;
    b[1] = false;
    b[2] = true;
    b = result_add_bits(&res, 1);
    assert_non_null(b);
    *b = false;
    assert_int_equal(res.nbits, 4);
    assert_string_equal(render(), "1 0 1 0\r\n");
}

/* Bits grow past any first allocation, and stay correct. */
static void test_many_bits(void **state)
{
    (void)state;
    size_t n = 10000;
    for (size_t i = 0; i < n; i += 100) {
        bool *b = result_add_bits(&res, 100);
        assert_non_null(b);
        for (size_t j = 0; j < 100; j++)
            b[j] = ((i + j) % 3) == 0;
    }
    assert_int_equal(res.nbits, n);
    const char *t = render();
    assert_int_equal(strlen(t), 2 * n + 1);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(t[2 * i], (i % 3) == 0 ? '1' : '0');
    /* A big array is let go at reset; a small one is kept. */
    result_reset(&res);
    assert_null(res.bits);
    assert_non_null(result_add_bits(&res, 10));
    bool *kept = res.bits;
    result_reset(&res);
    assert_ptr_equal(res.bits, kept);
}

static void test_fields_are_copied(void **state)
{
    (void)state;
    char name[16] = "dyn_name", value[16] = "hello";
    result_field_str(&res, "name", value, strlen(value));
    result_field_u64(&res, name, 7);
    result_field_double(&res, "error", 0.01);
    memset(name, 'x', sizeof name - 1); /* the result must not point at the caller's bytes */
    memset(value, 'y', sizeof value - 1);
    assert_int_equal(res.status, RESULT_FIELDS);
    assert_string_equal(render(),
                        "STAT name hello\r\nSTAT dyn_name 7\r\nSTAT error 0.01\r\nEND\r\n");
}

/* Strings larger than a chunk, and many of them, stay valid until the reset. */
static void test_arena_growth(void **state)
{
    (void)state;
    char big[9000];
    memset(big, 'b', sizeof big);
    result_field_str(&res, "big", big, sizeof big);
    for (int i = 0; i < 500; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "field_%d", i);
        result_field_u64(&res, nm, (uint64_t)i);
    }
    assert_int_equal(res.nfields, 501);
    assert_int_equal(strlen(res.fields[0].str), sizeof big);
    for (int i = 0; i < 500; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "field_%d", i);
        assert_string_equal(res.fields[i + 1].name, nm);
        assert_int_equal(res.fields[i + 1].u, (uint64_t)i);
    }
    result_reset(&res);
    assert_int_equal(res.nfields, 0);
}

static void test_rows(void **state)
{
    (void)state;
    res.status = RESULT_ROWS;
    assert_string_equal(render(), "END\r\n"); /* LIST with no filter */
    result_row(&res, "a", 1, 1, 2, 3, 0.5, 0);
    result_row(&res, "bb", 2, 10, 20, 30, 0.25, 3600000);
    assert_string_equal(render(),
                        "FILTER a 1 2 3 0.5\r\nFILTER bb 10 20 30 0.25 window=3600s\r\nEND\r\n");
}

static void test_copied_text(void **state)
{
    (void)state;
    char why[32] = "file x: No space";
    result_set_copy(&res, RESULT_SERVER_ERROR, why, strlen(why));
    memset(why, 0, sizeof why);
    assert_string_equal(render(), "SERVER_ERROR file x: No space\r\n");
}

static void test_failed_renders_server_error(void **state)
{
    (void)state;
    res.status = RESULT_BITS;
    res.failed = true;
    assert_string_equal(render(), "SERVER_ERROR out of memory\r\n");
    result_reset(&res);
    assert_false(res.failed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_simple_statuses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_count_and_bits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_bits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fields_are_copied, setup, teardown),
        cmocka_unit_test_setup_teardown(test_arena_growth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copied_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_renders_server_error, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
