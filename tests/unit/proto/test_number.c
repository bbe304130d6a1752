/*
 * test_number.c - proto_parse_count, the one count grammar of the protocol, the flags,
 * the environment and the config file: table-driven, every input placed flush against
 * an unreadable page so an over-read faults, and the exact integer forms checked at the
 * edges of uint64_t.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "proto/number.h"
#include "proto/proto.h"

static char *page_end; /* one past a readable page, followed by a PROT_NONE page */

static int guard_setup(void **state)
{
    (void)state;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m + page, page, PROT_NONE) != 0)
        return -1;
    page_end = m + page;
    return 0;
}

/* Parses text placed so that its last byte is the last readable one. */
static int count_at_guard(const char *text, uint64_t *out)
{
    size_t n = strlen(text);
    char *p = page_end - n;
    memcpy(p, text, n);
    return proto_parse_count(p, n, out);
}

static void test_count_good(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        uint64_t want;
    } good[] = {
        {"0", 0},
        {"1", 1},
        {"1000000", 1000000},
        {"007", 7},
        {"1e6", 1000000},
        {"1E6", 1000000},
        {"1e+6", 1000000},
        {"2.5e3", 2500},
        {"1000e-3", 1},
        {"1.000000000000000000000000000000e3", 1000},
        {"0e5", 0},
        {"0.0", 0},
        {"1k", 1000},
        {"1K", 1000},
        {"10k", 10000},
        {"1M", 1000000},
        {"1.5M", 1500000},
        {"1G", 1000000000},
        {"0.000001G", 1000},
        {"18446744073709551615", UINT64_MAX},
        {"18446744073709551615e0", UINT64_MAX},
        {"1.8446744073709551615e19", UINT64_MAX},
        {"1e19", UINT64_C(10000000000000000000)},
        {"18446744073G", UINT64_C(18446744073000000000)},
        {"00000000000000000000000000001", 1},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        uint64_t v = 12345;
        if (count_at_guard(good[i].in, &v) != 0 || v != good[i].want)
            fail_msg("'%s': got %llu, want %llu", good[i].in, (unsigned long long)v,
                     (unsigned long long)good[i].want);
    }
}

static void test_count_bad(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "-1",
        "+1",
        " 1",
        "1 ",
        "1.",
        ".5",
        "1.5",
        "1e-1",
        "1e",
        "1e+",
        "e6",
        "1m",
        "1g",
        "1T",
        "1kb",
        "1ki",
        "1Mk",
        "1e6k",
        "0x10",
        "1,000",
        "1_000",
        "nan",
        "inf",
        "1e20",
        "1e100",
        "1e1000",
        "18446744073709551616",
        "1.8446744073709551616e19",
        "18446744074G",
        "1.0001k",
        "99999999999999999999",
        "123456789012345678901234567890e-10",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 777;
        if (count_at_guard(bad[i], &v) != PROTO_ERR_NUMBER)
            fail_msg("'%s' accepted as %llu", bad[i], (unsigned long long)v);
        assert_true(v == 777); /* *out untouched on failure */
    }
    /* At most 63 bytes, like proto_parse_double. */
    char longnum[65];
    memset(longnum, '0', sizeof(longnum) - 2);
    longnum[sizeof(longnum) - 2] = '1';
    longnum[sizeof(longnum) - 1] = '\0';
    uint64_t v;
    assert_int_equal(count_at_guard(longnum, &v), PROTO_ERR_NUMBER);
    assert_int_equal(count_at_guard(longnum + 2, &v), 0);
    assert_true(v == 1);
}

/* The bound is the token's length, not a NUL: what follows in memory is never read. */
static void test_count_borrowed_range(void **state)
{
    (void)state;
    uint64_t v = 0;
    assert_int_equal(proto_parse_count("1M extra", 2, &v), 0);
    assert_true(v == 1000000);
    assert_int_equal(proto_parse_count("1e6x", 3, &v), 0);
    assert_true(v == 1000000);
    assert_int_equal(proto_parse_count("12", 0, &v), PROTO_ERR_NUMBER);
}

/* Every form of the same value agrees with the plain digits (a naive model). */
static void test_count_forms_agree(void **state)
{
    (void)state;
    static const char *const suffix[] = {"", "k", "M", "G"};
    char buf[64];
    for (uint64_t m = 0; m < 2000; m += 7) {
        for (unsigned s = 0; s < 4; s++) {
            uint64_t want = m;
            for (unsigned k = 0; k < 3 * s; k++)
                want *= 10;
            uint64_t a = 1, b = 2, c = 3;
            snprintf(buf, sizeof(buf), "%llu%s", (unsigned long long)m, suffix[s]);
            assert_int_equal(count_at_guard(buf, &a), 0);
            snprintf(buf, sizeof(buf), "%llue%u", (unsigned long long)m, 3 * s);
            assert_int_equal(count_at_guard(buf, &b), 0);
            snprintf(buf, sizeof(buf), "%llu.%03llu%s", (unsigned long long)m / 1000,
                     (unsigned long long)m % 1000, s > 0 ? suffix[s] : "e3");
            assert_int_equal(count_at_guard(buf, &c), 0);
            assert_true(a == want && b == want);
            assert_true(c == (s > 0 ? want / 1000 : m)); /* "1.234k" = 1234 */
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_good),
        cmocka_unit_test(test_count_bad),
        cmocka_unit_test(test_count_borrowed_range),
        cmocka_unit_test(test_count_forms_agree),
    };
    return cmocka_run_group_tests(tests, guard_setup, NULL);
}
