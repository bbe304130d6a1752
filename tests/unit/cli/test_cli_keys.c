/*
 * test_cli_keys.c - the key of an input line (whole line, or --field/--delimiter) and why a
 * key is refused, table-driven over exact-size heap copies; filter-name checks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/keys.h"
#include "proto/url.h"

static void test_extract(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        size_t len; /* 0: strlen(line) */
        unsigned field;
        char delim;
        int rc;
        const char *key; /* when rc is CLI_KEY_OK */
    } cases[] = {
        {"abc", 0, 0, 0, CLI_KEY_OK, "abc"},
        {"abc\r", 0, 0, 0, CLI_KEY_OK, "abc"},
        {"https://a.example/?q=1", 0, 0, 0, CLI_KEY_OK, "https://a.example/?q=1"},
        {"", 0, 0, 0, CLI_KEY_EMPTY, NULL},
        {"\r", 0, 0, 0, CLI_KEY_EMPTY, NULL},
        {"a b", 0, 0, 0, CLI_KEY_SPACE, NULL},
        {"a\tb", 0, 0, 0, CLI_KEY_TAB, NULL},
        {"a\rb", 0, 0, 0, CLI_KEY_CR, NULL},
        {"ab\r\r", 0, 0, 0, CLI_KEY_CR, NULL},
        {"a\0b", 3, 0, 0, CLI_KEY_NUL, NULL},
        {"1\tu1\tx", 0, 2, '\t', CLI_KEY_OK, "u1"},
        {"1\tu1\tx", 0, 1, '\t', CLI_KEY_OK, "1"},
        {"1\tu1\tx\r", 0, 3, '\t', CLI_KEY_OK, "x"},
        {"1,a b,x", 0, 3, ',', CLI_KEY_OK, "x"},
        {"1,a b,x", 0, 2, ',', CLI_KEY_SPACE, NULL},
        {"1 2 3", 0, 2, ' ', CLI_KEY_OK, "2"},
        {"1,,3", 0, 2, ',', CLI_KEY_EMPTY, NULL},
        {"1,2", 0, 3, ',', CLI_KEY_NOFIELD, NULL},
        {"1,2,", 0, 3, ',', CLI_KEY_EMPTY, NULL},
        {"only", 0, 2, ',', CLI_KEY_NOFIELD, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = cases[i].len ? cases[i].len : strlen(cases[i].line);
        char *copy = malloc(n ? n : 1);
        memcpy(copy, cases[i].line, n);
        struct cli_keyspec spec = {cases[i].field, cases[i].delim};
        struct proto_slice key;
        int rc = cli_key_extract(&spec, copy, n, &key);
        if (rc != cases[i].rc)
            fail_msg("case %zu: got %d, want %d", i, rc, cases[i].rc);
        if (rc == CLI_KEY_OK) {
            assert_int_equal(key.len, strlen(cases[i].key));
            assert_memory_equal(key.ptr, cases[i].key, key.len);
        }
        assert_true(key.ptr >= copy && key.ptr + key.len <= copy + n);
        assert_non_null(cli_key_strerror(rc));
        free(copy);
    }
}

static void test_too_long(void **state)
{
    (void)state;
    size_t n = CLI_KEY_MAX + 1;
    char *line = malloc(n);
    memset(line, 'k', n);
    struct cli_keyspec whole = {0, 0};
    struct proto_slice key;
    assert_int_equal(cli_key_extract(&whole, line, n, &key), CLI_KEY_TOOLONG);
    assert_int_equal(cli_key_extract(&whole, line, n - 1, &key), CLI_KEY_OK);
    free(line);
}

/* Model-based: on random keys, cli_key_extract accepts exactly what proto_key_valid does
 * (the word-at-a-time scan against the byte-by-byte one), at every length and alignment. */
static void test_matches_proto(void **state)
{
    (void)state;
    static const char alphabet[] = "ab ~\t\r\0\x7f\xff\x80\x01";
    uint64_t seed = 12345;
    struct cli_keyspec whole = {0, 0};
    for (int round = 0; round < 200000; round++) {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        size_t n = (size_t)(seed >> 58); /* 0..63 */
        char *k = malloc(n ? n : 1);
        for (size_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005u + 1442695040888963407u;
            /* Mostly good bytes, so long valid keys occur too. */
            unsigned r = (unsigned)(seed >> 40);
            k[i] =
                (r % 16 == 0) ? alphabet[(r >> 4) % (sizeof alphabet - 1)] : (char)('a' + r % 26);
        }
        struct proto_slice key;
        int rc = cli_key_extract(&whole, k, n, &key);
        /* One trailing CR is the terminator, not part of the key. */
        struct proto_slice want = {k, n > 0 && k[n - 1] == '\r' ? n - 1 : n};
        assert_int_equal(rc == CLI_KEY_OK, proto_key_valid(want));
        free(k);
    }
}

/* Model-based: cli_line_scan finds what memchr finds, and calls a line clean exactly when
 * cli_key_extract accepts it, on random buffers of every length (the SIMD and tail loops). */
static void test_line_scan(void **state)
{
    (void)state;
    static const char alphabet[] = "ab\n\r \t\0\xff";
    uint64_t seed = 99;
    struct cli_keyspec whole = {0, 0};
    for (int round = 0; round < 200000; round++) {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        size_t n = (size_t)(seed >> 57); /* 0..127 */
        char *p = malloc(n ? n : 1);
        for (size_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005u + 1442695040888963407u;
            unsigned r = (unsigned)(seed >> 40);
            p[i] =
                (r % 24 == 0) ? alphabet[(r >> 5) % (sizeof alphabet - 1)] : (char)('a' + r % 26);
        }
        bool clean = false;
        size_t at = cli_line_scan(p, n, &clean);
        const char *nl = n ? memchr(p, '\n', n) : NULL;
        assert_int_equal(at, nl != NULL ? (size_t)(nl - p) : n);
        if (nl != NULL) {
            struct proto_slice key;
            assert_int_equal(clean, cli_key_extract(&whole, p, at, &key) == CLI_KEY_OK);
        }
        free(p);
    }
}

static void test_names(void **state)
{
    (void)state;
    assert_true(cli_name_valid("crawl"));
    assert_true(cli_name_valid("a.b_c-D9"));
    assert_false(cli_name_valid(""));
    assert_false(cli_name_valid(".hidden"));
    assert_false(cli_name_valid("a b"));
    assert_false(cli_name_valid("a/b"));
    assert_false(cli_name_valid("a\r"));
    char name[130];
    memset(name, 'n', 128);
    name[128] = '\0';
    assert_true(cli_name_valid(name));
    name[128] = 'n';
    name[129] = '\0';
    assert_false(cli_name_valid(name));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extract),       cmocka_unit_test(test_too_long),
        cmocka_unit_test(test_matches_proto), cmocka_unit_test(test_line_scan),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
