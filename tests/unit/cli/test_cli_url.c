/*
 * test_cli_url.c - bloomd:// URLs as clients/python reads them, table-driven. Inputs are
 * exact-size heap copies (no NUL after them), so under ASan any over-read faults.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/url.h"

static int parse(const char *s, struct cli_url *u)
{
    size_t n = strlen(s);
    char *copy = malloc(n ? n : 1);
    memcpy(copy, s, n);
    int rc = cli_url_parse(copy, n, u);
    free(copy);
    return rc;
}

static void test_good(void **state)
{
    (void)state;
    static const struct {
        const char *url, *host, *token; /* token NULL: none */
        unsigned port;
        bool tls;
    } cases[] = {
        {"bloomd://127.0.0.1:8673", "127.0.0.1", NULL, 8673, false},
        {"bloomd://localhost", "localhost", NULL, 8673, false},
        {"bloomd://h:1/", "h", NULL, 1, false},
        {"BLOOMD://h:65535", "h", NULL, 65535, false},
        {"bloomds://db.example:9000", "db.example", NULL, 9000, true},
        {"bloomd://[::1]:7000", "::1", NULL, 7000, false},
        {"bloomd://[fe80::1]", "fe80::1", NULL, 8673, false},
        {"bloomd://:s3cret@h:1", "h", "s3cret", 1, false},
        {"bloomd://user:a%40b+c@h", "h", "a@b+c", 8673, false},
        {"bloomd://:p@ss@h", "h", "p@ss", 8673, false},
        {"bloomd://user@h", "h", NULL, 8673, false},
        {"bloomd://:@h", "h", "", 8673, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cli_url u;
        assert_int_equal(parse(cases[i].url, &u), CLI_URL_OK);
        assert_string_equal(u.host, cases[i].host);
        assert_int_equal(u.port, cases[i].port);
        assert_int_equal(u.tls, cases[i].tls);
        assert_int_equal(u.has_token, cases[i].token != NULL);
        if (cases[i].token != NULL) {
            assert_int_equal(u.token_len, strlen(cases[i].token));
            assert_string_equal(u.token, cases[i].token);
        }
    }
}

static void test_bad(void **state)
{
    (void)state;
    static const struct {
        const char *url;
        int rc;
    } cases[] = {
        {"", CLI_URL_ESCHEME},
        {"http://h:1", CLI_URL_ESCHEME},
        {"bloomd:/h", CLI_URL_ESCHEME},
        {"bloomd://", CLI_URL_EHOST},
        {"bloomd://:1", CLI_URL_EHOST},
        {"bloomd://[::1", CLI_URL_EHOST},
        {"bloomd://[::1]x", CLI_URL_EHOST},
        {"bloomd://h:0", CLI_URL_EPORT},
        {"bloomd://h:65536", CLI_URL_EPORT},
        {"bloomd://h:-1", CLI_URL_EPORT},
        {"bloomd://h:", CLI_URL_EPORT},
        {"bloomd://h:12ab", CLI_URL_EPORT},
        {"bloomd://:%4@h", CLI_URL_ETOKEN},
        {"bloomd://:%zz@h", CLI_URL_ETOKEN},
        {"bloomd://:%@h", CLI_URL_ETOKEN},
        {"bloomd://h:1/x", CLI_URL_EPATH},
        {"bloomd://h?x=1", CLI_URL_EPATH},
        {"bloomd://h//", CLI_URL_EPATH},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cli_url u;
        int rc = parse(cases[i].url, &u);
        if (rc != cases[i].rc)
            fail_msg("%s: got %d, want %d", cases[i].url, rc, cases[i].rc);
        assert_non_null(cli_url_strerror(rc));
    }
}

static void test_limits(void **state)
{
    (void)state;
    struct cli_url u;
    char url[CLI_TOKEN_MAX + 64];
    /* A host of CLI_HOST_MAX bytes fits; one more does not. */
    memcpy(url, "bloomd://", 9);
    memset(url + 9, 'h', CLI_HOST_MAX + 1);
    url[9 + CLI_HOST_MAX] = '\0';
    assert_int_equal(parse(url, &u), CLI_URL_OK);
    assert_int_equal(strlen(u.host), CLI_HOST_MAX);
    url[9 + CLI_HOST_MAX] = 'h';
    url[10 + CLI_HOST_MAX] = '\0';
    assert_int_equal(parse(url, &u), CLI_URL_EHOST);
    /* A token of CLI_TOKEN_MAX bytes fits; one more does not. */
    memcpy(url, "bloomd://:", 10);
    memset(url + 10, 't', CLI_TOKEN_MAX);
    memcpy(url + 10 + CLI_TOKEN_MAX, "@h", 3);
    assert_int_equal(parse(url, &u), CLI_URL_OK);
    assert_int_equal(u.token_len, CLI_TOKEN_MAX);
    memset(url + 10, 't', CLI_TOKEN_MAX + 1);
    memcpy(url + 11 + CLI_TOKEN_MAX, "@h", 3);
    assert_int_equal(parse(url, &u), CLI_URL_ETOKEN);
    /* A NUL in the token is kept (the caller refuses to send it). */
    assert_int_equal(parse("bloomd://:a%00b@h", &u), CLI_URL_OK);
    assert_int_equal(u.token_len, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),
        cmocka_unit_test(test_bad),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
