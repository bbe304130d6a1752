/*
 * test_url.c - query lookup, percent-decoding and key validation, table-driven. Inputs
 * are exact-size heap copies (no NUL after them), so under ASan any over-read faults.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/url.h"

static struct proto_slice sl(const char *s)
{
    return (struct proto_slice){s, strlen(s)};
}

static void test_query_find(void **state)
{
    (void)state;
    static const struct {
        const char *query, *name, *want; /* want NULL: not found */
    } cases[] = {
        {"k=abc", "k", "abc"},  {"a=1&k=x%20y", "k", "x%20y"},
        {"kk=1&k=2", "k", "2"}, {"k", "k", ""},
        {"k=", "k", ""},        {"a=1", "k", NULL},
        {"", "k", NULL},        {"&&k=1&", "k", "1"},
        {"k=1&k=2", "k", "1"},  {"key=1", "k", NULL},
        {"=k&k=z", "k", "z"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].query);
        char *copy = malloc(n + 1);
        memcpy(copy, cases[i].query, n + 1);
        struct proto_slice raw;
        bool found = proto_query_find((struct proto_slice){copy, n}, cases[i].name, &raw);
        assert_int_equal(found, cases[i].want != NULL);
        if (found) {
            assert_int_equal(raw.len, strlen(cases[i].want));
            assert_memory_equal(raw.ptr, cases[i].want, raw.len);
        }
        free(copy);
    }
}

static void test_decode(void **state)
{
    (void)state;
    static const struct {
        const char *in, *want;
        int rc;
    } cases[] = {
        {"abc", "abc", PROTO_URL_OK},   {"a%20b", "a b", PROTO_URL_OK},
        {"a+b", "a b", PROTO_URL_OK},   {"%2f%2F", "//", PROTO_URL_OK},
        {"%", "", PROTO_URL_EESCAPE},   {"a%2", "a", PROTO_URL_EESCAPE},
        {"%zz", "", PROTO_URL_EESCAPE}, {"%00", "\0", PROTO_URL_OK},
        {"", "", PROTO_URL_OK},         {"caf%C3%A9", "caf\xc3\xa9", PROTO_URL_OK},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].in);
        char *copy = malloc(n ? n : 1);
        memcpy(copy, cases[i].in, n);
        char out[32];
        size_t len;
        assert_int_equal(proto_url_decode((struct proto_slice){copy, n}, out, sizeof out, &len),
                         cases[i].rc);
        if (cases[i].rc == PROTO_URL_OK) {
            size_t wl = strcmp(cases[i].in, "%00") == 0 ? 1 : strlen(cases[i].want);
            assert_int_equal(len, wl);
            assert_memory_equal(out, cases[i].want, wl);
        }
        free(copy);
    }
    char small[3];
    size_t len;
    assert_int_equal(proto_url_decode(sl("abcd"), small, sizeof small, &len), PROTO_URL_ETOOLONG);
    assert_int_equal(len, 3);
    assert_int_equal(proto_url_decode(sl("abc"), small, sizeof small, &len), PROTO_URL_OK);
}

static void test_key_valid(void **state)
{
    (void)state;
    assert_true(proto_key_valid(sl("user:42")));
    assert_true(proto_key_valid(sl("caf\xc3\xa9")));
    assert_false(proto_key_valid(sl("")));
    assert_false(proto_key_valid(sl("a b")));
    assert_false(proto_key_valid(sl("a\tb")));
    assert_false(proto_key_valid(sl("a\r")));
    assert_false(proto_key_valid(sl("\n")));
    assert_false(proto_key_valid((struct proto_slice){"a\0b", 3}));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_query_find),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_key_valid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
