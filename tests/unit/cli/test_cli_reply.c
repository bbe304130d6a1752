/*
 * test_cli_reply.c - request shapes (how many reply lines the server sends, from its own
 * parser) and reply-line parsing, table-driven over exact-size heap copies.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/reply.h"

static char *copy_of(const char *s, size_t n)
{
    char *c = malloc(n ? n : 1);
    memcpy(c, s, n);
    return c;
}

static void test_shape(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        size_t len; /* 0: strlen */
        enum cli_shape shape;
    } cases[] = {
        {"\n", 0, CLI_SHAPE_NONE},
        {"\r\n", 0, CLI_SHAPE_NONE},
        {"    \r\n", 0, CLI_SHAPE_NONE},
        {"  \r\r\n", 0, CLI_SHAPE_LINE}, /* only the last \r is the terminator */
        {"\t\n", 0, CLI_SHAPE_LINE},     /* a tab is no separator: an unknown command */
        {"VERSION\r\n", 0, CLI_SHAPE_LINE},
        {"add f a b\n", 0, CLI_SHAPE_LINE},
        {"INFO f\r\n", 0, CLI_SHAPE_BLOCK},
        {"info f g\r\n", 0, CLI_SHAPE_LINE}, /* refused: one error line */
        {"LIST\n", 0, CLI_SHAPE_BLOCK},
        {"list pre\n", 0, CLI_SHAPE_BLOCK},
        {"STATS\n", 0, CLI_SHAPE_BLOCK},
        {"STATS x\n", 0, CLI_SHAPE_LINE},
        {"Help\n", 0, CLI_SHAPE_BLOCK},
        {"QUIT\r\n", 0, CLI_SHAPE_CLOSE},
        {"quit now\r\n", 0, CLI_SHAPE_LINE},
        {"FOO\n", 0, CLI_SHAPE_LINE},
        {"AUTH tok en\n", 0, CLI_SHAPE_LINE},
        {"\0\0\n", 3, CLI_SHAPE_LINE},
        {"ADD f a\0b\n", 10, CLI_SHAPE_LINE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = cases[i].len ? cases[i].len : strlen(cases[i].line);
        char *c = copy_of(cases[i].line, n);
        enum cli_shape got = cli_request_shape(c, n);
        if (got != cases[i].shape)
            fail_msg("case %zu: got %d, want %d", i, got, cases[i].shape);
        free(c);
    }
}

static bool is_error(const char *s)
{
    char *c = copy_of(s, strlen(s));
    bool e = cli_reply_is_error(c, strlen(s));
    free(c);
    return e;
}

static bool ends(const char *s, bool first)
{
    char *c = copy_of(s, strlen(s));
    bool e = cli_block_ends(c, strlen(s), first);
    free(c);
    return e;
}

static void test_errors_and_blocks(void **state)
{
    (void)state;
    assert_true(is_error("ERROR unknown command 'X'"));
    assert_true(is_error("ERROR"));
    assert_true(is_error("CLIENT_ERROR invalid token"));
    assert_true(is_error("SERVER_ERROR out of memory"));
    assert_false(is_error("NOT_FOUND"));
    assert_false(is_error("ERRORS 1"));
    assert_false(is_error("STAT errors 0"));
    assert_false(is_error(""));
    assert_true(ends("END", false));
    assert_true(ends("END", true));
    assert_true(ends("NOT_FOUND", true));
    assert_true(ends("CLIENT_ERROR x", true));
    assert_false(ends("NOT_FOUND", false));
    assert_false(ends("STAT name f", true));
    assert_false(ends("ENDS", false));
    assert_false(ends("FILTER END 1 2 3 0.01", false));
}

static void test_added_and_bits(void **state)
{
    (void)state;
    uint64_t n;
    char *c = copy_of("ADDED 42", 8);
    assert_int_equal(cli_parse_added(c, 8, &n), 0);
    assert_int_equal(n, 42);
    assert_int_equal(cli_parse_added(c, 6, &n), -1);
    free(c);
    c = copy_of("ADDED x", 7);
    assert_int_equal(cli_parse_added(c, 7, &n), -1);
    free(c);

    unsigned char bits[4];
    static const struct {
        const char *line;
        size_t nkeys;
        int rc;
        unsigned char want[4];
    } cases[] = {
        {"1", 1, 0, {1}},     {"0 1 1 0", 4, 0, {0, 1, 1, 0}},
        {"0 1", 3, -1, {0}},  {"0 1 1", 2, -1, {0}},
        {"0  1", 2, -1, {0}}, {"2", 1, -1, {0}},
        {"01 ", 2, -1, {0}},  {"NOT_FOUND", 5, -1, {0}},
        {"", 0, -1, {0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = strlen(cases[i].line);
        c = copy_of(cases[i].line, len);
        int rc = cli_parse_bits(c, len, cases[i].nkeys, bits);
        if (rc != cases[i].rc)
            fail_msg("case %zu: got %d", i, rc);
        if (rc == 0)
            assert_memory_equal(bits, cases[i].want, cases[i].nkeys);
        free(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape),
        cmocka_unit_test(test_errors_and_blocks),
        cmocka_unit_test(test_added_and_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
