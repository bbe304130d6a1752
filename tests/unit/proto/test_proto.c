/*
 * test_proto.c - table-driven tests of the protocol parser and reply formatter. Every
 * parser input is also fed cut at every byte offset, and always placed flush against an
 * unreadable page, so an over-read faults instead of passing by luck.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/number.h"
#include "proto/proto.h"

#define GUARD_AREA ((size_t)4 << 20)
#include "tests/unit/proto/expect.h"
#include "tests/unit/proto/guard_page.h"

/* ---- parser cases ---- */

#define LINE ((size_t)-1) /* expected consumed: up to and including the first '\n' */

struct pcase {
    const char *in;
    size_t in_len; /* 0: strlen(in) */
    size_t max_line;
    int status;
    size_t consumed;
    enum proto_cmd cmd;
    const char *name; /* expected name on PROTO_OK */
    size_t nargs;
    const char *args; /* expected args joined by single spaces */
    const char *bad;  /* expected offending token on errors; NULL: not checked */
};

#define OK(in, cmd, name, nargs, args)                                                             \
    {                                                                                              \
        in, 0, 0, PROTO_OK, LINE, cmd, name, nargs, args, NULL                                     \
    }
#define ERR(in, st, bad)                                                                           \
    {                                                                                              \
        in, 0, 0, st, LINE, PROTO_CMD_ADD, NULL, 0, NULL, bad                                      \
    }
#define ERRN(in, n, st, bad)                                                                       \
    {                                                                                              \
        in, n, 0, st, LINE, PROTO_CMD_ADD, NULL, 0, NULL, bad                                      \
    }

static const char name128[] = "n234567890123456789012345678901234567890123456789012345678901234"
                              "5678901234567890123456789012345678901234567890123456789012345678";

static const struct pcase cases[] = {
    OK("ADD f k1 k2\n", PROTO_CMD_ADD, "f", 2, "k1 k2"),
    OK("add f k1\r\n", PROTO_CMD_ADD, "f", 1, "k1"),
    OK("cHeCkAdD f a\n", PROTO_CMD_CHECKADD, "f", 1, "a"),
    OK("  CHECK   f   a  b   c  \r\n", PROTO_CMD_CHECK, "f", 3, "a b c"),
    OK("CHECKADD f a a\n", PROTO_CMD_CHECKADD, "f", 2, "a a"),
    OK("ADD f \x01\xff\x80 k\n", PROTO_CMD_ADD, "f", 2, "\x01\xff\x80 k"),
    OK("ADD f 0123456789abcdef 0123456789abcdefX y\n", PROTO_CMD_ADD, "f", 3,
       "0123456789abcdef 0123456789abcdefX y"),
    OK("ADD f        a                 b       \n", PROTO_CMD_ADD, "f", 2, "a b"),
    OK("CHECK f.x_y-Z9 k=v\n", PROTO_CMD_CHECK, "f.x_y-Z9", 1, "k=v"),
    OK("CREATE f\n", PROTO_CMD_CREATE, "f", 0, ""),
    OK("CREATE f capacity=1000 error=0.01 growth=linear scale=2 ratio=0.5\n", PROTO_CMD_CREATE, "f",
       5, "capacity=1000 error=0.01 growth=linear scale=2 ratio=0.5"),
    OK("CREATE f capacity=1099511627776\n", PROTO_CMD_CREATE, "f", 1, "capacity=1099511627776"),
    OK("CREATE w window=1h generations=4\n", PROTO_CMD_CREATE, "w", 2, "window=1h generations=4"),
    OK("CREATE w generations=16 window=366d kind=blocked\n", PROTO_CMD_CREATE, "w", 3,
       "generations=16 window=366d kind=blocked"),
    OK("CREATE e kind=expandable capacity=10\n", PROTO_CMD_CREATE, "e", 2,
       "kind=expandable capacity=10"),
    OK("UNION d s1 s2\n", PROTO_CMD_UNION, "d", 2, "s1 s2"),
    OK("intersect d s\r\n", PROTO_CMD_INTERSECT, "d", 1, "s"),
    OK("INFO f\n", PROTO_CMD_INFO, "f", 0, ""),
    OK("INFO f   \r\n", PROTO_CMD_INFO, "f", 0, ""),
    OK("LIST\n", PROTO_CMD_LIST, "", 0, ""),
    OK("LIST pre\n", PROTO_CMD_LIST, "pre", 0, ""),
    OK("DROP f\n", PROTO_CMD_DROP, "f", 0, ""),
    OK("Clear f\n", PROTO_CMD_CLEAR, "f", 0, ""),
    OK("FLUSH\n", PROTO_CMD_FLUSH, "", 0, ""),
    OK("FLUSH f\r\n", PROTO_CMD_FLUSH, "f", 0, ""),
    OK("STATS\n", PROTO_CMD_STATS, "", 0, ""),
    OK("version\r\n", PROTO_CMD_VERSION, "", 0, ""),
    OK("QUIT\n", PROTO_CMD_QUIT, "", 0, ""),
    OK("ADD f a\nCHECK f a\n", PROTO_CMD_ADD, "f", 1, "a"),
    {"INFO n234567890123456789012345678901234567890123456789012345678901234"
     "5678901234567890123456789012345678901234567890123456789012345678\n",
     0, 0, PROTO_OK, LINE, PROTO_CMD_INFO, name128, 0, "", NULL},

    {"\n", 0, 0, PROTO_BLANK, 1, PROTO_CMD_ADD, NULL, 0, NULL, NULL},
    {"\r\n", 0, 0, PROTO_BLANK, 2, PROTO_CMD_ADD, NULL, 0, NULL, NULL},
    {"     \n", 0, 0, PROTO_BLANK, 6, PROTO_CMD_ADD, NULL, 0, NULL, NULL},
    {"  \r\nADD f k\n", 0, 0, PROTO_BLANK, 4, PROTO_CMD_ADD, NULL, 0, NULL, NULL},

    {"ADD f k", 0, 0, PROTO_MORE, 0, PROTO_CMD_ADD, NULL, 0, NULL, NULL},
    {"ADD f k\r", 0, 0, PROTO_MORE, 0, PROTO_CMD_ADD, NULL, 0, NULL, NULL},
    {"", 0, 0, PROTO_MORE, 0, PROTO_CMD_ADD, NULL, 0, NULL, NULL},

    ERR("FOO f\n", PROTO_ERR_UNKNOWN_CMD, "FOO"),
    ERR("ADDX f k\n", PROTO_ERR_UNKNOWN_CMD, "ADDX"),
    ERR("\tADD f k\n", PROTO_ERR_UNKNOWN_CMD, "\tADD"),
    ERRN("AD\0D f k\n", 9, PROTO_ERR_UNKNOWN_CMD, NULL),
    ERR("ADD\rf k\n", PROTO_ERR_UNKNOWN_CMD, "ADD\rf"),
    ERR("CHECKADDX f k\n", PROTO_ERR_UNKNOWN_CMD, "CHECKADDX"),

    ERR("ADD\n", PROTO_ERR_ARGS, NULL),
    ERR("ADD f\n", PROTO_ERR_ARGS, NULL),
    ERR("ADD f   \r\n", PROTO_ERR_ARGS, NULL),
    ERR("CHECK f\n", PROTO_ERR_ARGS, NULL),
    ERR("CHECKADD f\n", PROTO_ERR_ARGS, NULL),
    ERR("CREATE\n", PROTO_ERR_ARGS, NULL),
    ERR("UNION d\n", PROTO_ERR_ARGS, NULL),
    ERR("INTERSECT\n", PROTO_ERR_ARGS, NULL),
    ERR("INFO\n", PROTO_ERR_ARGS, NULL),
    ERR("INFO f g\n", PROTO_ERR_ARGS, "g"),
    ERR("DROP\n", PROTO_ERR_ARGS, NULL),
    ERR("CLEAR a b\n", PROTO_ERR_ARGS, "b"),
    ERR("LIST a b\n", PROTO_ERR_ARGS, "b"),
    ERR("FLUSH a b\n", PROTO_ERR_ARGS, "b"),
    ERR("STATS x\n", PROTO_ERR_ARGS, "x"),
    ERR("VERSION 1\n", PROTO_ERR_ARGS, "1"),
    ERR("QUIT now\r\n", PROTO_ERR_ARGS, "now"),
    ERR("INFO f\r x\n", PROTO_ERR_NAME, "f\r"),

    ERR("ADD .f k\n", PROTO_ERR_NAME, ".f"),
    ERR("ADD f/g k\n", PROTO_ERR_NAME, "f/g"),
    ERR("INFO ..\n", PROTO_ERR_NAME, ".."),
    ERRN("ADD f\0 k\n", 9, PROTO_ERR_NAME, NULL),
    ERR("UNION d s/x\n", PROTO_ERR_NAME, "s/x"),
    ERR("UNION d/ s\n", PROTO_ERR_NAME, "d/"),
    ERR("INTERSECT d s .t\n", PROTO_ERR_NAME, ".t"),
    ERR("LIST a/b\n", PROTO_ERR_NAME, "a/b"),
    ERR("FLUSH .x\n", PROTO_ERR_NAME, ".x"),
    ERR("DROP f\tg\n", PROTO_ERR_NAME, "f\tg"),
    ERR("CREATE f\xc3\xa9\n", PROTO_ERR_NAME, "f\xc3\xa9"),
    ERR("INFO n234567890123456789012345678901234567890123456789012345678901234"
        "5678901234567890123456789012345678901234567890123456789012345678X\n",
        PROTO_ERR_NAME, NULL),

    ERR("ADD f a\tb\n", PROTO_ERR_KEY, "a\tb"),
    ERRN("ADD f a\0b c\n", 12, PROTO_ERR_KEY, NULL),
    ERR("CHECK f a b\rc\r\n", PROTO_ERR_KEY, "b\rc"),
    ERR("ADD f a\r \n", PROTO_ERR_KEY, "a\r"),
    ERR("ADD f k\r\r\n", PROTO_ERR_KEY, "k\r"),
    ERR("ADD f 0123456789abcdef 01234567\t9abcdef x\n", PROTO_ERR_KEY, "01234567\t9abcdef"),
    ERR("CHECKADD f 0123456789abcdef 0123456789abcdef 0123456789a\rbcdef0123\r\n", PROTO_ERR_KEY,
        NULL),

    ERR("CREATE f capacity=abc\n", PROTO_ERR_NUMBER, "abc"),
    ERR("CREATE f capacity=-1\n", PROTO_ERR_NUMBER, "-1"),
    ERR("CREATE f capacity=+1\n", PROTO_ERR_NUMBER, "+1"),
    ERR("CREATE f capacity=18446744073709551616\n", PROTO_ERR_NUMBER, NULL),
    ERR("CREATE f capacity=\n", PROTO_ERR_NUMBER, NULL),
    ERR("CREATE f capacity=1.5\n", PROTO_ERR_NUMBER, "1.5"),
    ERR("CREATE f error=nan\n", PROTO_ERR_NUMBER, "nan"),
    ERR("CREATE f error=inf\n", PROTO_ERR_NUMBER, "inf"),
    ERR("CREATE f error=0x1p-3\n", PROTO_ERR_NUMBER, "0x1p-3"),
    ERR("CREATE f error=0.01x\n", PROTO_ERR_NUMBER, "0.01x"),
    ERR("CREATE f error=.\n", PROTO_ERR_NUMBER, "."),
    ERR("CREATE f error=1e\n", PROTO_ERR_NUMBER, "1e"),
    ERR("CREATE f scale=1e999\n", PROTO_ERR_NUMBER, "1e999"),
    ERR("CREATE f ratio=0,5\n", PROTO_ERR_NUMBER, "0,5"),

    ERR("CREATE f foo=1\n", PROTO_ERR_OPTION, "foo"),
    ERR("CREATE f capacity\n", PROTO_ERR_OPTION, "capacity"),
    ERR("CREATE f =1\n", PROTO_ERR_OPTION, ""),
    ERR("CREATE f capacity=0\n", PROTO_ERR_OPTION, "0"),
    ERR("CREATE f capacity=1099511627777\n", PROTO_ERR_OPTION, "1099511627777"),
    ERR("CREATE f error=1\n", PROTO_ERR_OPTION, "1"),
    ERR("CREATE f error=0\n", PROTO_ERR_OPTION, "0"),
    ERR("CREATE f error=-0.1\n", PROTO_ERR_OPTION, "-0.1"),
    ERR("CREATE f ratio=1.5\n", PROTO_ERR_OPTION, "1.5"),
    ERR("CREATE f scale=0\n", PROTO_ERR_OPTION, "0"),
    ERR("CREATE f scale=-2\n", PROTO_ERR_OPTION, "-2"),
    ERR("CREATE f growth=quadratic\n", PROTO_ERR_OPTION, "quadratic"),
    ERR("CREATE f capacity=5 capacity=6\n", PROTO_ERR_OPTION, "capacity"),
    ERR("CREATE f window=\n", PROTO_ERR_NUMBER, NULL),
    ERR("CREATE f window=h\n", PROTO_ERR_NUMBER, "h"),
    ERR("CREATE f window=1.5h\n", PROTO_ERR_NUMBER, "1.5h"),
    ERR("CREATE f window=1w\n", PROTO_ERR_NUMBER, "1w"),
    ERR("CREATE f window=1H\n", PROTO_ERR_NUMBER, "1H"),
    ERR("CREATE f window=-1s\n", PROTO_ERR_NUMBER, "-1s"),
    ERR("CREATE f window=1hh\n", PROTO_ERR_NUMBER, "1hh"),
    ERR("CREATE f window= 1h\n", PROTO_ERR_NUMBER, NULL),
    ERR("CREATE f window=0\n", PROTO_ERR_OPTION, "0"),
    ERR("CREATE f window=0s\n", PROTO_ERR_OPTION, "0s"),
    ERR("CREATE f window=367d\n", PROTO_ERR_OPTION, "367d"),
    ERR("CREATE f window=31622401\n", PROTO_ERR_OPTION, "31622401"),
    ERR("CREATE f window=9999999999999999999d\n", PROTO_ERR_OPTION, "9999999999999999999d"),
    ERR("CREATE f window=99999999999999999999d\n", PROTO_ERR_NUMBER, "99999999999999999999d"),
    ERR("CREATE f window=1h window=2h\n", PROTO_ERR_OPTION, "window"),
    ERR("CREATE f window=1h generations=1\n", PROTO_ERR_OPTION, "1"),
    ERR("CREATE f window=1h generations=17\n", PROTO_ERR_OPTION, "17"),
    ERR("CREATE f window=1h generations=x\n", PROTO_ERR_NUMBER, "x"),
    ERR("CREATE f window=1h generations=+4\n", PROTO_ERR_NUMBER, "+4"),
    ERR("CREATE f generations=4\n", PROTO_ERR_OPTION, "generations=4"),
    ERR("CREATE f generations=4 capacity=9\n", PROTO_ERR_OPTION, "generations=4"),
    ERR("CREATE f kind=a/b\n", PROTO_ERR_OPTION, "a/b"),
    ERR("CREATE f kind=\n", PROTO_ERR_OPTION, ""),
    ERR("CREATE f kind=expandable window=1h\n", PROTO_ERR_OPTION, "kind=expandable"),
    ERR("CREATE f window=1h kind=expandable\n", PROTO_ERR_OPTION, "kind=expandable"),
    ERR("CREATE f kind=blocked kind=blocked\n", PROTO_ERR_OPTION, "kind"),

    OK("DUMP f\r\n", PROTO_CMD_DUMP, "f", 0, ""),
    OK("dump f\n", PROTO_CMD_DUMP, "f", 0, ""),
    OK("RESTORE f 10\r\n0123456789\r\n", PROTO_CMD_RESTORE, "f", 0, ""),
    OK("restore f 0 REPLACE\n", PROTO_CMD_RESTORE, "f", 0, ""),
    OK("RESTORE  f  18446744073709551615  replace  \r\n", PROTO_CMD_RESTORE, "f", 0, ""),
    ERR("DUMP\n", PROTO_ERR_ARGS, NULL),
    ERR("DUMP f g\n", PROTO_ERR_ARGS, "g"),
    ERR("DUMP a/b\n", PROTO_ERR_NAME, "a/b"),
    ERR("RESTORE f\n", PROTO_ERR_ARGS, NULL),
    ERR("RESTORE\n", PROTO_ERR_ARGS, NULL),
    ERR("RESTORE .f 3\n", PROTO_ERR_NAME, ".f"),
    ERR("RESTORE f -3\n", PROTO_ERR_NUMBER, "-3"),
    ERR("RESTORE f 1e3\n", PROTO_ERR_NUMBER, "1e3"),
    ERR("RESTORE f 18446744073709551616\n", PROTO_ERR_NUMBER, "18446744073709551616"),
    ERR("RESTORE f 3 keep\n", PROTO_ERR_OPTION, "keep"),
    ERR("RESTORE f 3 replace now\n", PROTO_ERR_ARGS, "now"),

    /* The line limit counts the terminator: 8 bytes fit, 9 do not. */
    {"ADD f a\n", 0, 8, PROTO_OK, 8, PROTO_CMD_ADD, "f", 1, "a", NULL},
    {"ADD f\n", 0, 8, PROTO_ERR_ARGS, 6, PROTO_CMD_ADD, NULL, 0, NULL, NULL},
    {"ADD f ab\n", 0, 8, PROTO_ERR_TOO_LONG, 0, PROTO_CMD_ADD, NULL, 0, NULL, NULL},
    {"ADD f a\r\n", 0, 8, PROTO_ERR_TOO_LONG, 0, PROTO_CMD_ADD, NULL, 0, NULL, NULL},
    {"ADD f ab", 0, 8, PROTO_ERR_TOO_LONG, 0, PROTO_CMD_ADD, NULL, 0, NULL, NULL},
    {"ADD f a", 0, 8, PROTO_MORE, 0, PROTO_CMD_ADD, NULL, 0, NULL, NULL},
    {"\n", 0, 1, PROTO_BLANK, 1, PROTO_CMD_ADD, NULL, 0, NULL, NULL},
    {"ADD f a\nADD f abcdefgh\n", 0, 8, PROTO_OK, 8, PROTO_CMD_ADD, "f", 1, "a", NULL},
};

static size_t case_len(const struct pcase *c)
{
    return c->in_len ? c->in_len : strlen(c->in);
}

/* Joins the args of req with single spaces into out. */
static void join_args(const struct proto_request *req, char *out, size_t cap, size_t *count)
{
    struct proto_slice rest = req->args, arg;
    size_t n = 0, used = 0;
    out[0] = '\0';
    while (proto_next_arg(&rest, &arg)) {
        assert_true(used + arg.len + 2 < cap);
        if (n > 0)
            out[used++] = ' ';
        memcpy(out + used, arg.ptr, arg.len);
        used += arg.len;
        out[used] = '\0';
        n++;
    }
    *count = n;
}

static void check_full(const struct pcase *c, size_t idx)
{
    size_t len = case_len(c);
    struct proto_limits lim = {c->max_line};
    struct proto_request req;
    size_t consumed = 12345;
    const char *in = guard_place(c->in, len);
    int rc = proto_parse(in, len, &lim, &req, &consumed);
    if (rc != c->status)
        fail_msg("case %zu (%s): status %d, want %d", idx, c->in, rc, c->status);
    size_t want_consumed = c->consumed;
    if (want_consumed == LINE)
        want_consumed = (size_t)((const char *)memchr(c->in, '\n', len) - c->in) + 1;
    assert_int_equal(consumed, want_consumed);
    if (rc == PROTO_OK) {
        assert_int_equal(req.cmd, c->cmd);
        expect_slice(req.name, c->name);
        char joined[512];
        size_t walked;
        join_args(&req, joined, sizeof(joined), &walked);
        assert_string_equal(joined, c->args);
        assert_int_equal(req.nargs, c->nargs);
        assert_int_equal(walked, c->nargs);
    } else if (rc < 0) {
        assert_non_null(req.why);
        if (c->bad != NULL)
            expect_slice(req.bad, c->bad);
    }
}

/* The same input cut at every offset: MORE until the first terminator arrives. */
static void check_prefixes(const struct pcase *c, size_t idx)
{
    size_t len = case_len(c);
    size_t max_line = c->max_line ? c->max_line : PROTO_DEFAULT_MAX_LINE;
    struct proto_limits lim = {c->max_line};
    struct proto_request full, part;
    size_t full_consumed, part_consumed;
    int full_rc = proto_parse(guard_place(c->in, len), len, &lim, &full, &full_consumed);
    for (size_t k = 0; k < len; k++) {
        int rc = proto_parse(guard_place(c->in, k), k, &lim, &part, &part_consumed);
        size_t window = k < max_line ? k : max_line;
        bool has_nl = window > 0 && memchr(c->in, '\n', window) != NULL;
        if (has_nl) {
            if (rc != full_rc)
                fail_msg("case %zu cut at %zu: status %d, want %d", idx, k, rc, full_rc);
            assert_int_equal(part_consumed, full_consumed);
            assert_int_equal(part.nargs, full.nargs);
        } else if (k >= max_line) {
            assert_int_equal(rc, PROTO_ERR_TOO_LONG);
            assert_int_equal(part_consumed, 0);
        } else {
            if (rc != PROTO_MORE)
                fail_msg("case %zu cut at %zu: status %d, want MORE", idx, k, rc);
            assert_int_equal(part_consumed, 0);
        }
    }
}

static void test_parse_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        check_full(&cases[i], i);
        check_prefixes(&cases[i], i);
    }
}

/*
 * RESTORE's line gives the block's length and the replace flag; the block is not the
 * parser's: whatever follows the line (the block, cut anywhere) is left unconsumed, and
 * every cut of the line itself is MORE.
 */
static void test_parse_restore_values(void **state)
{
    (void)state;
    const char *line = "RESTORE snap.1 12 replace\r\n";
    const char *in = "RESTORE snap.1 12 replace\r\nBLOOMD\0\0ab\ncd\r\nADD f k\r\n";
    size_t line_len = strlen(line), len = line_len + 14 + 9;
    for (size_t k = 0; k <= len; k++) {
        struct proto_request req;
        size_t consumed = 99;
        int rc = proto_parse(guard_place(in, k), k, NULL, &req, &consumed);
        if (k < line_len) {
            assert_int_equal(rc, PROTO_MORE);
            assert_int_equal(consumed, 0);
            continue;
        }
        assert_int_equal(rc, PROTO_OK);
        assert_int_equal(consumed, line_len);
        assert_int_equal(req.cmd, PROTO_CMD_RESTORE);
        expect_slice(req.name, "snap.1");
        assert_true(req.data_len == 12);
        assert_true(req.replace);
    }
    struct proto_request req;
    size_t consumed;
    const char *plain = "RESTORE f 7\r\n";
    assert_int_equal(
        proto_parse(guard_place(plain, strlen(plain)), strlen(plain), NULL, &req, &consumed),
        PROTO_OK);
    assert_true(req.data_len == 7);
    assert_false(req.replace);
    /* A request parsed after a RESTORE does not inherit its fields. */
    const char *add = "ADD f k\r\n";
    assert_int_equal(proto_parse(guard_place(add, strlen(add)), strlen(add), NULL, &req, &consumed),
                     PROTO_OK);
    assert_true(req.data_len == 0);
    assert_false(req.replace);
    assert_string_equal(proto_cmd_name(PROTO_CMD_DUMP), "DUMP");
    assert_string_equal(proto_cmd_name(PROTO_CMD_RESTORE), "RESTORE");
}

static void test_parse_create_values(void **state)
{
    (void)state;
    const char *in = "create F Capacity=10 ERROR=1e-3 growth=Linear scale=1.5 ratio=.25\r\n";
    struct proto_request req;
    size_t consumed;
    assert_int_equal(proto_parse(in, strlen(in), NULL, &req, &consumed), PROTO_OK);
    assert_int_equal(req.cmd, PROTO_CMD_CREATE);
    assert_int_equal(req.create.set, PROTO_OPT_CAPACITY | PROTO_OPT_ERROR | PROTO_OPT_GROWTH |
                                         PROTO_OPT_SCALE | PROTO_OPT_RATIO);
    assert_int_equal(req.create.capacity, 10);
    assert_true(req.create.error == 1e-3);
    assert_int_equal(req.create.growth, PROTO_GROWTH_LINEAR);
    assert_true(req.create.scale == 1.5);
    assert_true(req.create.ratio == 0.25);

    in = "CREATE g growth=exponential\n";
    assert_int_equal(proto_parse(in, strlen(in), NULL, &req, &consumed), PROTO_OK);
    assert_int_equal(req.create.set, PROTO_OPT_GROWTH);
    assert_int_equal(req.create.growth, PROTO_GROWTH_EXPONENTIAL);

    in = "CREATE g growth=NONE\n";
    assert_int_equal(proto_parse(in, strlen(in), NULL, &req, &consumed), PROTO_OK);
    assert_int_equal(req.create.set, PROTO_OPT_GROWTH);
    assert_int_equal(req.create.growth, PROTO_GROWTH_NONE);

    /* A later request does not inherit options from an earlier one. */
    in = "CREATE h\n";
    assert_int_equal(proto_parse(in, strlen(in), NULL, &req, &consumed), PROTO_OK);
    assert_int_equal(req.create.set, 0);
}

/* window=, generations= and kind= values as parsed, and their reasons when refused. */
static void test_parse_window_values(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        uint64_t window_ms;
        uint32_t generations; /* 0: not given */
    } ok[] = {
        {"CREATE w window=1\n", 1000, 0},
        {"CREATE w window=1s\n", 1000, 0},
        {"CREATE w window=90s\n", 90000, 0},
        {"CREATE w window=15m generations=2\n", 900000, 2},
        {"CREATE w window=1h generations=4\n", 3600000, 4},
        {"CREATE w Window=7d Generations=16\n", 7ull * 86400000, 16},
        {"CREATE w window=366d\n", 366ull * 86400000, 0},
        {"CREATE w window=31622400\n", 366ull * 86400000, 0},
        {"CREATE w window=0001m\n", 60000, 0},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct proto_request req;
        size_t consumed;
        assert_int_equal(proto_parse(ok[i].in, strlen(ok[i].in), NULL, &req, &consumed), PROTO_OK);
        assert_true(req.create.set & PROTO_OPT_WINDOW);
        assert_int_equal(req.create.window_ms, ok[i].window_ms);
        assert_int_equal(!!(req.create.set & PROTO_OPT_GENERATIONS), ok[i].generations != 0);
        if (ok[i].generations)
            assert_int_equal(req.create.generations, ok[i].generations);
    }

    static const struct {
        const char *in;
        const char *kind;
    } kinds[] = {
        {"CREATE k kind=blocked\n", "blocked"},
        {"CREATE k KIND=Expandable\n", "Expandable"},
        {"CREATE k window=2s kind=blocked\n", "blocked"},
        {"CREATE k kind=bloom\n", "bloom"}, /* the server says which kinds exist */
    };
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        struct proto_request req;
        size_t consumed;
        assert_int_equal(proto_parse(kinds[i].in, strlen(kinds[i].in), NULL, &req, &consumed),
                         PROTO_OK);
        assert_true(req.create.set & PROTO_OPT_KIND);
        assert_int_equal(req.create.kind.len, strlen(kinds[i].kind));
        assert_memory_equal(req.create.kind.ptr, kinds[i].kind, req.create.kind.len);
    }

    static const struct {
        const char *in, *why;
    } bad[] = {
        {"CREATE w window=1x\n", "bad duration (e.g. 90s, 15m, 1h, 7d)"},
        {"CREATE w window=0\n", "window must be in 1s..366d"},
        {"CREATE w window=367d\n", "window must be in 1s..366d"},
        {"CREATE w window=1h generations=1\n", "generations must be in 2..16"},
        {"CREATE w generations=3\n", "generations needs window"},
        {"CREATE w kind=a.b\n", "kind must be a name of 1..31 [a-z0-9_-]"},
        {"CREATE w window=1h kind=expandable\n", "window needs kind=blocked"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct proto_request req;
        size_t consumed;
        assert_true(proto_parse(bad[i].in, strlen(bad[i].in), NULL, &req, &consumed) < 0);
        assert_string_equal(req.why, bad[i].why);
    }

    uint64_t ms = 0;
    assert_int_equal(proto_parse_duration("18446744073709551615d", 21, &ms), 0);
    assert_true(ms == UINT64_MAX);
    assert_int_equal(proto_parse_duration("2m", 2, &ms), 0);
    assert_int_equal(ms, 120000);
    assert_int_equal(proto_parse_duration("", 0, &ms), PROTO_ERR_NUMBER);
    assert_int_equal(proto_parse_duration("s", 1, &ms), PROTO_ERR_NUMBER);
    assert_int_equal(proto_parse_duration("1 s", 3, &ms), PROTO_ERR_NUMBER);
}

/* A pipelined buffer parsed request by request, as the server does. */
static void test_parse_pipeline(void **state)
{
    (void)state;
    const char in[] = "ADD a x y\r\n\nBOGUS\nCHECK a x\nINFO .bad\nQUIT\n";
    const int want[] = {PROTO_OK, PROTO_BLANK, PROTO_ERR_UNKNOWN_CMD, PROTO_OK, PROTO_ERR_NAME,
                        PROTO_OK, PROTO_MORE};
    const char *p = guard_place(in, sizeof(in) - 1);
    size_t left = sizeof(in) - 1;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        struct proto_request req;
        size_t consumed;
        int rc = proto_parse(p, left, NULL, &req, &consumed);
        assert_int_equal(rc, want[i]);
        assert_true(consumed <= left);
        p += consumed;
        left -= consumed;
    }
    assert_int_equal(left, 0);
}

/* The default limit exactly: a line of PROTO_DEFAULT_MAX_LINE bytes fits, one more does not. */
static void test_parse_default_limit(void **state)
{
    (void)state;
    size_t n = PROTO_DEFAULT_MAX_LINE + 1;
    char *line = malloc(n);
    assert_non_null(line);
    memcpy(line, "ADD f ", 6);
    memset(line + 6, 'k', n - 6);
    struct proto_request req;
    size_t consumed;

    line[PROTO_DEFAULT_MAX_LINE - 1] = '\n';
    const char *in = guard_place(line, PROTO_DEFAULT_MAX_LINE);
    assert_int_equal(proto_parse(in, PROTO_DEFAULT_MAX_LINE, NULL, &req, &consumed), PROTO_OK);
    assert_int_equal(consumed, PROTO_DEFAULT_MAX_LINE);
    assert_int_equal(req.nargs, 1);
    assert_int_equal(req.args.len, PROTO_DEFAULT_MAX_LINE - 7);

    line[PROTO_DEFAULT_MAX_LINE - 1] = 'k';
    line[n - 1] = '\n';
    in = guard_place(line, n);
    assert_int_equal(proto_parse(in, n, NULL, &req, &consumed), PROTO_ERR_TOO_LONG);
    assert_int_equal(consumed, 0);
    in = guard_place(line, n - 1);
    assert_int_equal(proto_parse(in, n - 1, NULL, &req, &consumed), PROTO_ERR_TOO_LONG);
    in = guard_place(line, n - 2);
    assert_int_equal(proto_parse(in, n - 2, NULL, &req, &consumed), PROTO_MORE);
    free(line);
}

/* Many keys of every length 1..40, so each lands at every offset of an 8-byte word. */
static void test_parse_key_count(void **state)
{
    (void)state;
    char *line = malloc(64 * 1024);
    assert_non_null(line);
    size_t n = 0, keys = 0;
    n += (size_t)sprintf(line, "CHECKADD f");
    for (size_t len = 1; len <= 40; len++)
        for (size_t rep = 0; rep < 9; rep++) {
            size_t spaces = 1 + (len + rep) % 3;
            memset(line + n, ' ', spaces);
            n += spaces;
            for (size_t i = 0; i < len; i++)
                line[n++] = (char)('a' + (i + rep) % 26);
            keys++;
        }
    line[n++] = '\n';
    struct proto_request req;
    size_t consumed;
    assert_int_equal(proto_parse(guard_place(line, n), n, NULL, &req, &consumed), PROTO_OK);
    assert_int_equal(req.nargs, keys);

    /* A forbidden byte at each position of the keys is found wherever it sits. */
    const char bad[] = {'\0', '\t', '\r'};
    for (size_t pos = 11; pos + 1 < n; pos += 7) {
        if (line[pos] == ' ')
            continue;
        char saved = line[pos];
        line[pos] = bad[pos % 3];
        int rc = proto_parse(guard_place(line, n), n, NULL, &req, &consumed);
        assert_int_equal(rc, PROTO_ERR_KEY);
        assert_true(req.bad.ptr != NULL && req.bad.len > 0);
        line[pos] = saved;
    }
    free(line);
}

static void test_next_arg(void **state)
{
    (void)state;
    struct proto_slice rest = {"  a bb   ccc ", 13}, arg;
    assert_true(proto_next_arg(&rest, &arg));
    expect_slice(arg, "a");
    assert_true(proto_next_arg(&rest, &arg));
    expect_slice(arg, "bb");
    assert_true(proto_next_arg(&rest, &arg));
    expect_slice(arg, "ccc");
    assert_false(proto_next_arg(&rest, &arg));
    assert_int_equal(rest.len, 0);
    struct proto_slice empty = {NULL, 0};
    assert_false(proto_next_arg(&empty, &arg));
}

/* proto_next_keys: keys of every length around the 8-byte scan step, runs of spaces, batch
 * edges and key_skip, against proto_next_arg on the same line. */
static void test_next_keys(void **state)
{
    (void)state;
    char line[4096];
    size_t len = 0, want = 0;
    for (size_t k = 1; k <= 40; k++) {
        for (size_t sp = 0; sp < 1 + k % 3; sp++)
            line[len++] = ' ';
        for (size_t i = 0; i < k; i++)
            line[len++] = (char)('a' + (k + i) % 26);
        want++;
    }
    for (size_t skip = 0; skip <= 3; skip++) {
        for (size_t max = 1; max <= 7; max++) {
            struct proto_request req = {.key_skip = skip};
            struct proto_slice rest = {line, len}, ref = {line, len}, keys[7], arg;
            size_t got = 0, n;
            while ((n = proto_next_keys(&req, &rest, keys, max)) > 0) {
                assert_true(n <= max);
                for (size_t i = 0; i < n; i++) {
                    assert_true(proto_next_arg(&ref, &arg));
                    size_t s = skip < arg.len ? skip : arg.len;
                    assert_ptr_equal(keys[i].ptr, arg.ptr + s);
                    assert_int_equal(keys[i].len, arg.len - s);
                }
                got += n;
            }
            assert_int_equal(got, want);
            assert_int_equal(rest.len, 0);
            assert_false(proto_next_arg(&ref, &arg));
        }
    }
    struct proto_request req = {0};
    struct proto_slice empty = {NULL, 0}, key;
    assert_int_equal(proto_next_keys(&req, &empty, &key, 1), 0);
    /* One key that is all of args (the pipelined one-key request). */
    struct proto_request one = {.args = {"f:key", 5}, .nargs = 1, .key_skip = 2};
    struct proto_slice rest = one.args;
    assert_int_equal(proto_next_keys(&one, &rest, &key, 4), 1);
    expect_slice(key, "key");
    assert_int_equal(rest.len, 0);
    assert_int_equal(proto_next_keys(&one, &rest, &key, 4), 0);
}

static void test_strerror(void **state)
{
    (void)state;
    assert_string_equal(proto_strerror(PROTO_ERR_TOO_LONG), "line too long");
    assert_string_equal(proto_strerror(PROTO_ERR_ARGS), "wrong number of arguments");
    assert_string_equal(proto_strerror(PROTO_ERR_NAME), "invalid filter name");
    assert_string_equal(proto_strerror(PROTO_ERR_KEY), "invalid key");
    assert_string_equal(proto_strerror(PROTO_ERR_NUMBER), "bad number");
    assert_string_equal(proto_error_kind(PROTO_ERR_UNKNOWN_CMD), "ERROR");
    assert_string_equal(proto_error_kind(PROTO_ERR_KEY), "CLIENT_ERROR");
    assert_string_equal(proto_cmd_name(PROTO_CMD_CHECKADD), "CHECKADD");
    assert_string_equal(proto_cmd_name(PROTO_CMD_QUIT), "QUIT");
}

/* ---- numbers ---- */

static void test_numbers(void **state)
{
    (void)state;
    uint64_t u = 0;
    assert_int_equal(proto_parse_u64("0", 1, &u), 0);
    assert_int_equal(u, 0);
    assert_int_equal(proto_parse_u64("18446744073709551615", 20, &u), 0);
    assert_true(u == UINT64_MAX);
    assert_int_equal(proto_parse_u64("18446744073709551616", 20, &u), PROTO_ERR_NUMBER);
    assert_int_equal(proto_parse_u64("99999999999999999999", 20, &u), PROTO_ERR_NUMBER);
    assert_int_equal(proto_parse_u64("000000000000000000001", 21, &u), PROTO_ERR_NUMBER);
    assert_int_equal(proto_parse_u64("", 0, &u), PROTO_ERR_NUMBER);
    assert_int_equal(proto_parse_u64("12 ", 3, &u), PROTO_ERR_NUMBER);
    assert_int_equal(proto_parse_u64("123", 2, &u), 0);
    assert_int_equal(u, 12);

    double d = 0;
    const char *good[] = {"0.01", "1e-3", "1E+3", ".5", "5.", "-2.5", "+7", "0"};
    const double want[] = {0.01, 1e-3, 1e3, 0.5, 5.0, -2.5, 7.0, 0.0};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        assert_int_equal(proto_parse_double(good[i], strlen(good[i]), &d), 0);
        assert_true(d == want[i]);
    }
    const char *bad[] = {"",     ".",    "-",     "e5", "1e", "1e+",   "nan", "inf",
                         "-inf", "0x10", "1.2.3", " 1", "1 ", "1e999", "1,5", "infinity"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(proto_parse_double(bad[i], strlen(bad[i]), &d), PROTO_ERR_NUMBER);
    /* The bound is on the token, not on what follows it in memory. */
    assert_int_equal(proto_parse_double("0.5x", 3, &d), 0);
    assert_true(d == 0.5);
    char longnum[80];
    memset(longnum, '1', sizeof(longnum));
    assert_int_equal(proto_parse_double(longnum, sizeof(longnum), &d), PROTO_ERR_NUMBER);
}

/* ---- formatter ---- */

static void test_format_lines(void **state)
{
    (void)state;
    struct proto_buf b = {0};
    proto_reply_word(&b, "CREATED");
    expect_buf(&b, "CREATED\r\n");
    proto_buf_reset(&b);
    proto_reply_error(&b, "CLIENT_ERROR", "bad number");
    proto_reply_error(&b, "ERROR", NULL);
    proto_reply_error(&b, "SERVER_ERROR", "");
    expect_buf(&b, "CLIENT_ERROR bad number\r\nERROR\r\nSERVER_ERROR\r\n");
    proto_buf_reset(&b);
    proto_reply_count(&b, "ADDED", 0);
    proto_reply_count(&b, "ADDED", 18446744073709551615u);
    expect_buf(&b, "ADDED 0\r\nADDED 18446744073709551615\r\n");
    proto_buf_reset(&b);
    proto_reply_stat_u64(&b, "items", 42);
    proto_reply_stat_double(&b, "error", 0.01);
    proto_reply_stat_double(&b, "sum", 0.1 + 0.2);
    proto_reply_stat_double(&b, "big", 1e300);
    struct proto_slice growth = {"linear", 6};
    proto_reply_stat_str(&b, "growth", growth);
    proto_reply_word(&b, "END");
    expect_buf(&b, "STAT items 42\r\nSTAT error 0.01\r\nSTAT sum 0.30000000000000004\r\n"
                   "STAT big 1e+300\r\nSTAT growth linear\r\nEND\r\n");
    proto_buf_reset(&b);
    struct proto_slice name = {"clicks", 6};
    proto_reply_filter(&b, name, 10, 4096, 1000000, 0.001, 0);
    expect_buf(&b, "FILTER clicks 10 4096 1000000 0.001\r\n");
    proto_buf_reset(&b);
    struct result r;
    result_init(&r);
    r.status = RESULT_DUMP;
    r.count = 1234567890123u;
    proto_format_result(&b, &r); /* the connection sends the data block after the line */
    result_set(&r, RESULT_RESTORED, NULL);
    proto_format_result(&b, &r);
    expect_buf(&b, "DUMP 1234567890123\r\nRESTORED\r\n");
    assert_string_equal(result_status_name(RESULT_DUMP), "DUMP");
    assert_string_equal(result_status_name(RESULT_RESTORED), "RESTORED");
    result_free(&r);
    proto_buf_free(&b);
    assert_null(b.data);
    proto_buf_free(&b); /* twice is harmless */
}

static void test_format_doubles_roundtrip(void **state)
{
    (void)state;
    struct proto_buf b = {0};
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < 2000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double v = (double)(x >> 11) / 9007199254740992.0 * (i % 2 ? 1e-5 : 1e5);
        proto_buf_reset(&b);
        proto_reply_stat_double(&b, "v", v);
        assert_false(b.failed);
        char text[64];
        assert_true(b.len - 9 < sizeof(text));
        memcpy(text, b.data + 7, b.len - 9);
        text[b.len - 9] = '\0';
        assert_true(strtod(text, NULL) == v);
    }
    proto_buf_free(&b);
}

static void test_format_bits_small(void **state)
{
    (void)state;
    struct proto_buf b = {0};
    const bool bits[] = {true, false, true};
    proto_reply_bits(&b, bits, 3, true);
    proto_reply_bits(&b, bits + 1, 2, false);
    proto_reply_bits(&b, bits, 0, false);
    proto_reply_end(&b);
    expect_buf(&b, "1 0 1 0 1\r\n");
    proto_buf_reset(&b);
    proto_reply_bits(&b, bits + 1, 1, true);
    proto_reply_end(&b);
    expect_buf(&b, "0\r\n");
    proto_buf_free(&b);
}

/* 100,000 results written in uneven pieces: exact content, linear growth of the buffer. */
static void test_format_bits_large(void **state)
{
    (void)state;
    enum { N = 100000 };
    bool *bits = malloc(N * sizeof(bool));
    assert_non_null(bits);
    uint32_t x = 12345;
    for (size_t i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        bits[i] = (x >> 16) & 1;
    }
    struct proto_buf b = {0};
    size_t done = 0, piece = 1;
    while (done < N) {
        size_t n = piece < N - done ? piece : N - done;
        proto_reply_bits(&b, bits + done, n, done == 0);
        done += n;
        piece = piece * 3 % 1001 + 1;
    }
    proto_reply_end(&b);
    assert_false(b.failed);
    assert_int_equal(b.len, 2 * N + 1);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(b.data[2 * i], bits[i] ? '1' : '0');
        assert_int_equal(b.data[2 * i + 1], i + 1 < N ? ' ' : '\r');
    }
    assert_int_equal(b.data[2 * N], '\n');
    assert_true(b.cap < 4 * b.len);
    proto_buf_free(&b);
    free(bits);
}

static void test_format_failed(void **state)
{
    (void)state;
    struct proto_buf b = {0};
    proto_reply_word(&b, "OK");
    struct proto_slice huge = {"x", SIZE_MAX - 4};
    proto_reply_stat_str(&b, "f", huge); /* cannot fit: the buffer fails */
    assert_true(b.failed);
    size_t len = b.len;
    proto_reply_word(&b, "OK");
    assert_int_equal(b.len, len);
    proto_buf_reset(&b);
    assert_false(b.failed);
    proto_reply_word(&b, "OK");
    expect_buf(&b, "OK\r\n");
    proto_buf_free(&b);
}

static void expect_error_reply(const char *line, const char *want)
{
    size_t n = strlen(line);
    struct proto_request req;
    size_t consumed;
    struct proto_buf b = {0};
    int rc = proto_parse(line, n, NULL, &req, &consumed);
    assert_true(rc < 0);
    proto_reply_parse_error(&b, rc, &req);
    expect_buf(&b, want);
    proto_buf_free(&b);
}

static void test_format_parse_errors(void **state)
{
    (void)state;
    expect_error_reply("FOO\n", "ERROR unknown command 'FOO'\r\n");
    expect_error_reply("ADD f a\tb\n", "CLIENT_ERROR invalid key (NUL, tab or CR) 'a\\x09b'\r\n");
    expect_error_reply("CREATE f foo=1\n",
                       "CLIENT_ERROR unknown option (valid: capacity error growth scale "
                       "ratio window generations kind seed) 'foo'\r\n");
    expect_error_reply("INFO\n", "CLIENT_ERROR wrong number of arguments: no filter name\r\n");
    expect_error_reply("INFO a'b\n", "CLIENT_ERROR invalid filter name 'a\\x27b'\r\n");
    expect_error_reply("INFO aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/\n",
                       "CLIENT_ERROR invalid filter name "
                       "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'\r\n");
    struct proto_buf b = {0};
    proto_reply_parse_error(&b, PROTO_ERR_TOO_LONG, NULL);
    expect_buf(&b, "CLIENT_ERROR line too long\r\n");
    proto_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_table),
        cmocka_unit_test(test_parse_restore_values),
        cmocka_unit_test(test_parse_create_values),
        cmocka_unit_test(test_parse_window_values),
        cmocka_unit_test(test_parse_pipeline),
        cmocka_unit_test(test_parse_default_limit),
        cmocka_unit_test(test_parse_key_count),
        cmocka_unit_test(test_next_arg),
        cmocka_unit_test(test_next_keys),
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_format_lines),
        cmocka_unit_test(test_format_doubles_roundtrip),
        cmocka_unit_test(test_format_bits_small),
        cmocka_unit_test(test_format_bits_large),
        cmocka_unit_test(test_format_failed),
        cmocka_unit_test(test_format_parse_errors),
    };
    return cmocka_run_group_tests(tests, guard_setup, guard_teardown);
}
