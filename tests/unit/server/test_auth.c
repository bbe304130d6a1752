/*
 * test_auth.c - the token check and the token file: a match needs the exact bytes (no
 * prefix, no extension, no case folding), an unset key matches nothing, the file loses
 * one line end only, and bad files are refused with the file's name in the reason. The
 * check's constant time is by construction (fixed-length digests, CRYPTO_memcmp); here
 * we check it returns the same answer for near and far misses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/core/auth.h"

static void test_matches_exact_bytes_only(void **state)
{
    (void)state;
    struct auth_key k;
    auth_key_init(&k, "s3cret token", 12);
    assert_true(k.set);
    assert_true(auth_key_matches(&k, "s3cret token", 12));
    assert_false(auth_key_matches(&k, "s3cret toke", 11));
    assert_false(auth_key_matches(&k, "s3cret token ", 13));
    assert_false(auth_key_matches(&k, "S3CRET TOKEN", 12));
    assert_false(auth_key_matches(&k, "", 0));
    assert_false(auth_key_matches(&k, NULL, 0));
    static char big[1 << 20];
    memset(big, 'x', sizeof big);
    assert_false(auth_key_matches(&k, big, sizeof big));
}

static void test_unset_key_matches_nothing(void **state)
{
    (void)state;
    struct auth_key k;
    auth_key_init(&k, "", 0);
    assert_false(k.set);
    assert_false(auth_key_matches(&k, "", 0));
    /* The digest of "" is not the all-zero digest an unset key holds, but check anyway. */
    unsigned char zero[AUTH_DIGEST_LEN] = {0};
    assert_false(auth_key_matches(&k, zero, sizeof zero));
}

static void test_binary_tokens(void **state)
{
    (void)state;
    const char tok[] = {'a', '\0', 'b'};
    struct auth_key k;
    auth_key_init(&k, tok, sizeof tok);
    assert_true(auth_key_matches(&k, tok, sizeof tok));
    assert_false(auth_key_matches(&k, "a", 1));
}

static void test_token_rules(void **state)
{
    (void)state;
    assert_null(auth_token_invalid("ok token"));
    assert_non_null(auth_token_invalid(""));
    assert_non_null(auth_token_invalid("a\nb"));
    assert_non_null(auth_token_invalid("a\rb"));
    char longest[AUTH_TOKEN_MAX + 2];
    memset(longest, 't', sizeof longest);
    longest[AUTH_TOKEN_MAX] = '\0';
    assert_null(auth_token_invalid(longest));
    longest[AUTH_TOKEN_MAX] = 't';
    longest[AUTH_TOKEN_MAX + 1] = '\0';
    assert_non_null(auth_token_invalid(longest));
}

/* Writes text to a fresh temporary file; returns its path (static storage). */
static const char *temp_file(const char *text, size_t len)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/bloomd-test-token-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    return path;
}

static void test_read_file(void **state)
{
    (void)state;
    char tok[AUTH_TOKEN_MAX + 1], why[256];
    static const struct {
        const char *text;
        const char *want; /* NULL: refused */
    } cases[] = {
        {"abc\n", "abc"},  {"abc", "abc"}, {"abc\r\n", "abc"}, {"a b c \n", "a b c "},
        {"abc\n\n", NULL}, {"", NULL},     {"\n", NULL},       {"a\nb\n", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *p = temp_file(cases[i].text, strlen(cases[i].text));
        int rc = auth_read_token_file(p, tok, sizeof tok, why, sizeof why);
        if (cases[i].want != NULL) {
            assert_int_equal(rc, 0);
            assert_string_equal(tok, cases[i].want);
        } else {
            assert_int_equal(rc, -1);
            assert_non_null(strstr(why, p));
        }
        unlink(p);
    }
    /* A NUL inside, and a file longer than any token. */
    const char *p = temp_file("ab\0cd", 5);
    assert_int_equal(auth_read_token_file(p, tok, sizeof tok, why, sizeof why), -1);
    unlink(p);
    static char big[4096];
    memset(big, 'x', sizeof big);
    p = temp_file(big, sizeof big);
    assert_int_equal(auth_read_token_file(p, tok, sizeof tok, why, sizeof why), -1);
    assert_non_null(strstr(why, "longer"));
    unlink(p);
    assert_int_equal(auth_read_token_file("/nonexistent/tok", tok, sizeof tok, why, sizeof why),
                     -1);
    assert_non_null(strstr(why, "No such file"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_exact_bytes_only),
        cmocka_unit_test(test_unset_key_matches_nothing),
        cmocka_unit_test(test_binary_tokens),
        cmocka_unit_test(test_token_rules),
        cmocka_unit_test(test_read_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
