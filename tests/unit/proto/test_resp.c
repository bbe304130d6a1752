/*
 * test_resp.c - table-driven tests of the RESP parser, the mapping onto requests and the
 * reply formatters. Every parser input is also fed cut at every byte offset, always placed
 * flush against an unreadable page, so an over-read faults instead of passing by luck.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/proto.h"
#include "proto/resp.h"

#define GUARD_AREA ((size_t)4 << 20)
#include "tests/unit/proto/expect.h"
#include "tests/unit/proto/guard_page.h"

/* ---- parser ---- */

#define ALL ((size_t)-1) /* expected consumed: the whole input */

struct pcase {
    const char *in;
    size_t in_len;    /* 0: strlen(in) */
    size_t max_frame; /* 0: default */
    int status;
    size_t consumed; /* ALL: in_len */
    size_t argc;
    const char *args; /* the first arguments joined by '|' (OK only) */
};

#define OK(in, argc, args)                                                                         \
    {                                                                                              \
        in, 0, 0, RESP_OK, ALL, argc, args                                                         \
    }
#define OKN(in, n, argc, args)                                                                     \
    {                                                                                              \
        in, n, 0, RESP_OK, ALL, argc, args                                                         \
    }
#define BLANK(in)                                                                                  \
    {                                                                                              \
        in, 0, 0, RESP_BLANK, ALL, 0, NULL                                                         \
    }
#define ERR(in, st)                                                                                \
    {                                                                                              \
        in, 0, 0, st, 0, 0, NULL                                                                   \
    }

static const struct pcase cases[] = {
    OK("*1\r\n$4\r\nPING\r\n", 1, "PING"),
    OK("*3\r\n$6\r\nBF.ADD\r\n$1\r\nf\r\n$3\r\na b\r\n", 3, "BF.ADD|f|a b"),
    OK("*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", 2, "ECHO|"),
    OKN("*2\r\n$4\r\nECHO\r\n$4\r\n\0\r\n\xff\r\n", 24, 2, "ECHO|\0\r\n\xff"),
    OK("*2\r\n$4\r\nECHO\r\n$0000000003\r\nabc\r\n", 2, "ECHO|abc"),
    OK("*2\r\n$4\r\nECHO\r\n$00016\r\n0123456789abcdef\r\n", 2, "ECHO|0123456789abcdef"),
    OK("*2\r\n$4\r\nECHO\r\n$000016\r\n0123456789abcdef\r\n", 2, "ECHO|0123456789abcdef"),
    ERR("*2\r\n$-0\r\n\r\n$1\r\na\r\n", RESP_ERR_PROTOCOL), /* 8+ bytes after the '$' */
    ERR("*2\r\n$\r\n\r\n$1\r\na\r\n", RESP_ERR_PROTOCOL),
    ERR("*2\r\n$1\r\r\na\r\n$1\r\na\r\n", RESP_ERR_PROTOCOL),
    OK("PING\r\n", 1, "PING"),
    OK("PING\n", 1, "PING"),
    OK("  BF.ADD  f   x y \r\n", 4, "BF.ADD|f|x|y"),
    BLANK("\r\n"),
    BLANK("   \n"),
    BLANK("*0\r\n"),
    BLANK("*-1\r\n"),
    ERR("*x\r\n", RESP_ERR_PROTOCOL),
    ERR("*\r\n", RESP_ERR_PROTOCOL),
    ERR("*1\n", RESP_ERR_PROTOCOL),
    ERR("*1\r\n:1\r\n", RESP_ERR_PROTOCOL),
    ERR("*1\r\n*1\r\n$1\r\na\r\n", RESP_ERR_PROTOCOL), /* nesting */
    ERR("*1\r\n$-1\r\n", RESP_ERR_PROTOCOL),
    ERR("*1\r\n$-0\r\n\r\n", RESP_ERR_PROTOCOL), /* the keys walk reads digits only */
    ERR("*1\r\n$-5\r\n", RESP_ERR_PROTOCOL),
    ERR("*1\r\n$1\r\nab\r\n", RESP_ERR_PROTOCOL),
    ERR("*1\r\n$3\r\nabc\n\n", RESP_ERR_PROTOCOL),
    ERR("*1\r\n$1234567890123456789\r\n", RESP_ERR_PROTOCOL),
    ERR("*12345678901234567890\r\n", RESP_ERR_PROTOCOL),
    ERR("*1\r\n$1x\r\n", RESP_ERR_PROTOCOL),
    ERR("*1\r\n$1000000000\r\n", RESP_ERR_TOO_LONG), /* 1 GB declared: refused at once */
    ERR("*2000000\r\n", RESP_ERR_TOO_LONG),
    ERR("*200000\r\n", RESP_ERR_TOO_LONG), /* 200000 elements cannot fit in 1 MiB */
    {"*1\r\n$20\r\n", 0, 16, RESP_ERR_TOO_LONG, 0, 0, NULL},
    {"*3\r\n$1\r\na\r\n", 0, 16, RESP_ERR_TOO_LONG, 0, 0, NULL},
    {"*1\r\n$1\r\na\r\n", 0, 16, RESP_OK, ALL, 1, "a"},
    {"PING PING PING PING\r\n", 0, 16, RESP_ERR_TOO_LONG, 0, 0, NULL},
};

/* Checks cmd's first arguments against want, '|'-separated (argument bytes never hold '|'). */
static void expect_args(const struct resp_command *cmd, const char *want, size_t want_len)
{
    size_t i = 0, at = 0;
    while (at <= want_len && i < cmd->argc && i < RESP_MAX_HEAD) {
        const char *bar = memchr(want + at, '|', want_len - at);
        size_t n = bar != NULL ? (size_t)(bar - (want + at)) : want_len - at;
        assert_int_equal(cmd->argv[i].len, n);
        if (n > 0)
            assert_memory_equal(cmd->argv[i].ptr, want + at, n);
        i++;
        at += n + 1;
        if (bar == NULL)
            break;
    }
    assert_true(at > want_len);
}

static void test_parse_cases(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const struct pcase *k = &cases[c];
        size_t n = k->in_len ? k->in_len : strlen(k->in);
        struct resp_limits lim = {.max_frame = k->max_frame};
        struct resp_command cmd;
        size_t used = 99;
        const char *p = guard_place(k->in, n);
        int st = resp_parse(p, n, &lim, &cmd, &used);
        if (st != k->status)
            fail_msg("case %zu '%s': status %d, want %d", c, k->in, st, k->status);
        size_t want = k->consumed == ALL ? n : k->consumed;
        assert_int_equal(used, want);
        if (st < 0)
            assert_non_null(cmd.why);
        if (st == RESP_OK) {
            assert_int_equal(cmd.argc, k->argc);
            size_t wl = k->args ? strlen(k->args) : 0;
            if (c == 3)
                wl = 9; /* "ECHO|\0\r\n\xff" holds a NUL */
            expect_args(&cmd, k->args, wl);
        }
        /* Every cut: incomplete frames need more, never an error they do not have. */
        for (size_t cut = 0; cut < n; cut++) {
            p = guard_place(k->in, cut);
            used = 99;
            st = resp_parse(p, cut, &lim, &cmd, &used);
            if (st != RESP_MORE && st != k->status)
                fail_msg("case %zu cut %zu: status %d", c, cut, st);
            if (st == RESP_MORE)
                assert_int_equal(used, 0);
        }
    }
}

static void test_parse_pipelined(void **state)
{
    (void)state;
    const char in[] = "*2\r\n$4\r\nECHO\r\n$1\r\nx\r\nPING\r\n*1\r\n$4\r\nQUIT\r\n";
    size_t n = sizeof in - 1, off = 0, used;
    const char *p = guard_place(in, n);
    struct resp_command cmd;
    const char *want[] = {"ECHO", "PING", "QUIT"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(resp_parse(p + off, n - off, NULL, &cmd, &used), RESP_OK);
        expect_slice(cmd.argv[0], want[i]);
        off += used;
    }
    assert_int_equal(off, n);
    assert_int_equal(resp_parse(p + off, 0, NULL, &cmd, &used), RESP_MORE);
}

/* A frame with more arguments than RESP_MAX_HEAD: the tail walks them all. */
static void test_tail_keys(void **state)
{
    (void)state;
    char in[4096];
    size_t n = (size_t)snprintf(in, sizeof in, "*%d\r\n$7\r\nBF.MADD\r\n$1\r\nf\r\n", 2 + 40);
    /* Headers of 1 to 7 digits (zero-padded): up to 5 take the parser's short path, the
     * others its careful one, in the parse and in the keys' walk alike. */
    for (int i = 0; i < 40; i++)
        n += (size_t)snprintf(in + n, sizeof in - n, "$%0*d\r\nk %d\r\n", 1 + i % 7, i < 10 ? 3 : 4,
                              i);
    const char *p = guard_place(in, n);
    struct resp_command cmd;
    size_t used;
    assert_int_equal(resp_parse(p, n, NULL, &cmd, &used), RESP_OK);
    assert_int_equal(used, n);
    assert_int_equal(cmd.argc, 42);
    struct resp_mapped m;
    resp_map(&cmd, &m);
    assert_null(m.why);
    assert_int_equal(m.op, RESP_OP_BF_MADD);
    assert_int_equal(m.req.cmd, PROTO_CMD_CHECKADD);
    assert_true(m.req.args_resp);
    assert_int_equal(m.req.nargs, 40);
    expect_slice(m.req.name, "f");
    struct proto_slice rest = m.req.args, keys[7];
    size_t total = 0, got;
    while ((got = proto_next_keys(&m.req, &rest, keys, 7)) > 0) {
        for (size_t i = 0; i < got; i++) {
            char want[8];
            snprintf(want, sizeof want, "k %zu", total + i);
            expect_slice(keys[i], want);
        }
        total += got;
    }
    assert_int_equal(total, 40);
    assert_int_equal(rest.len, 0);
}

static void test_inline_keys(void **state)
{
    (void)state;
    const char in[] = "bf.madd f a bb  ccc\r\n";
    struct resp_command cmd;
    size_t used;
    assert_int_equal(resp_parse(guard_place(in, sizeof in - 1), sizeof in - 1, NULL, &cmd, &used),
                     RESP_OK);
    struct resp_mapped m;
    resp_map(&cmd, &m);
    assert_null(m.why);
    assert_false(m.req.args_resp);
    assert_int_equal(m.req.nargs, 3);
    struct proto_slice rest = m.req.args, keys[4];
    assert_int_equal(proto_next_keys(&m.req, &rest, keys, 4), 3);
    expect_slice(keys[0], "a");
    expect_slice(keys[1], "bb");
    expect_slice(keys[2], "ccc");
}

/* ---- mapping ---- */

/* Parses in (an inline command), maps it, and returns the mapping in *m. */
static void map_inline(const char *in, struct resp_mapped *m)
{
    static char line[512];
    snprintf(line, sizeof line, "%s\r\n", in);
    struct resp_command cmd;
    size_t used;
    assert_int_equal(resp_parse(line, strlen(line), NULL, &cmd, &used), RESP_OK);
    resp_map(&cmd, m);
}

static void expect_why(const char *in, const char *why)
{
    struct resp_mapped m;
    map_inline(in, &m);
    if (m.why == NULL || strcmp(m.why, why) != 0)
        fail_msg("'%s': why '%s', want '%s'", in, m.why ? m.why : "(none)", why);
}

static void test_map_errors(void **state)
{
    (void)state;
    expect_why("FOO a b", "ERR unknown command 'FOO', with args beginning with: 'a' 'b' ");
    expect_why("BF.ADD f", "ERR wrong number of arguments for 'bf.add' command");
    expect_why("bf.add f a b", "ERR wrong number of arguments for 'bf.add' command");
    expect_why("BF.MADD f", "ERR wrong number of arguments for 'bf.madd' command");
    expect_why("BF.EXISTS f", "ERR wrong number of arguments for 'bf.exists' command");
    expect_why("BF.RESERVE f 0.01", "ERR wrong number of arguments for 'bf.reserve' command");
    expect_why("BF.RESERVE f x 100", "ERR bad error rate");
    expect_why("BF.RESERVE f 1 100", "ERR (0 < error rate range < 1) ");
    expect_why("BF.RESERVE f 0.01 x", "ERR bad capacity");
    expect_why("BF.RESERVE f 0.01 0", "ERR (capacity should be larger than 0)");
    expect_why("BF.RESERVE f 0.01 -4", "ERR (capacity should be larger than 0)");
    expect_why("BF.RESERVE f 0.01 100 EXPANSION", "ERR no expansion");
    expect_why("BF.RESERVE f 0.01 100 EXPANSION x", "ERR bad expansion");
    expect_why("BF.RESERVE f 0.01 100 EXPANSION 2 NONSCALING", "Nonscaling filters cannot expand");
    expect_why("BF.RESERVE f 0.01 100 EXPANSION 65",
               "ERR expansion too large: bloomd filters grow by at most 64 per stage");
    expect_why("BF.RESERVE f 0.01 100 BOGUS", "ERR unknown argument");
    expect_why("BF.RESERVE .f 0.01 100",
               "ERR invalid filter name: bloomd names are 1-128 bytes of [A-Za-z0-9._-], not "
               "starting with '.'");
    expect_why("BF.INSERT f ITEMS", "ERR wrong number of arguments for 'bf.insert' command");
    expect_why("BF.INSERT f CAPACITY x ITEMS a", "Bad capacity");
    expect_why("BF.INSERT f ERROR x ITEMS a", "Bad error rate");
    expect_why("BF.INSERT f ERROR 2 ITEMS a", "Bad argument received");
    expect_why("BF.INSERT f EXPANSION x ITEMS a", "Bad expansion");
    expect_why("BF.INSERT f WHAT ITEMS a", "Unknown argument received");
    expect_why("BF.INSERT f CAPACITY 10 a", "Unknown argument received");
    expect_why("BF.INFO f BOGUS", "Invalid information value");
    expect_why("BF.INFO f SIZE x", "ERR wrong number of arguments for 'bf.info' command");
    expect_why("BF.SCANDUMP f x", "ERR Second argument must be numeric");
    expect_why("BF.SCANDUMP f -1", "ERR Second argument must be numeric");
    expect_why("BF.SCANDUMP f", "ERR wrong number of arguments for 'bf.scandump' command");
    expect_why("BF.LOADCHUNK f 0 data", "ERR received bad data");
    expect_why("BF.LOADCHUNK f 1", "ERR wrong number of arguments for 'bf.loadchunk' command");
    expect_why("PING a b", "ERR wrong number of arguments for 'ping' command");
    expect_why("DBSIZE x", "ERR wrong number of arguments for 'dbsize' command");
}

static void test_map_commands(void **state)
{
    (void)state;
    struct resp_mapped m;
    map_inline("BF.RESERVE f 0.001 5000 EXPANSION 4", &m);
    assert_null(m.why);
    assert_int_equal(m.req.cmd, PROTO_CMD_CREATE);
    assert_int_equal(m.req.create.capacity, 5000);
    assert_true(m.req.create.error == 0.001);
    assert_true(m.req.create.scale == 4);
    assert_int_equal(m.req.create.set, PROTO_OPT_CAPACITY | PROTO_OPT_ERROR | PROTO_OPT_SCALE);

    map_inline("BF.RESERVE w 0.01 100 WINDOW 1h GENERATIONS 4", &m);
    assert_null(m.why);
    assert_int_equal(m.req.create.window_ms, 3600000);
    assert_int_equal(m.req.create.generations, 4);

    map_inline("bf.reserve f 0.01 100 nonscaling", &m);
    assert_null(m.why);
    assert_true(m.nonscaling);
    assert_true(m.req.create.set & PROTO_OPT_GROWTH);
    assert_int_equal(m.req.create.growth, PROTO_GROWTH_NONE);
    expect_why("BF.RESERVE f 0.01 100 NONSCALING WINDOW 1h",
               "ERR NONSCALING makes a filter of one stage: a window's generations grow");
    expect_why("BF.RESERVE f 0.01 100 NONSCALING KIND expandable",
               "ERR NONSCALING is for KIND blocked: an expandable filter grows in place");
    map_inline("BF.RESERVE f 0.01 100 NONSCALING KIND blocked", &m);
    assert_null(m.why);
    map_inline("BF.RESERVE f 0.01 100", &m);
    assert_false(m.req.create.set & PROTO_OPT_GROWTH);

    map_inline("BF.INSERT f CAPACITY 1000 ERROR 0.001 EXPANSION 3 NONSCALING ITEMS a b", &m);
    assert_null(m.why);
    assert_int_equal(m.op, RESP_OP_BF_INSERT);
    assert_true(m.create);
    assert_int_equal(m.req.cmd, PROTO_CMD_CHECKADD);
    assert_int_equal(m.req.create.capacity, 1000);
    assert_int_equal(m.req.create.growth, PROTO_GROWTH_NONE);
    assert_int_equal(m.req.nargs, 2);

    map_inline("BF.INSERT f NOCREATE ITEMS a", &m);
    assert_null(m.why);
    assert_false(m.create);
    assert_int_equal(m.req.create.set, 0);

    map_inline("BF.INFO f expansion", &m);
    assert_null(m.why);
    assert_int_equal(m.field, RESP_INFO_EXPANSION);

    /* BF.SCANDUMP and BF.LOADCHUNK ride on DUMP (server/exec/dump.h). */
    map_inline("BF.SCANDUMP f 0", &m);
    assert_null(m.why);
    assert_int_equal(m.req.cmd, PROTO_CMD_DUMP);
    assert_int_equal(m.req.data_len, 1);
    assert_false(m.req.replace);
    map_inline("BF.SCANDUMP f 1048577", &m);
    assert_int_equal(m.req.data_len, 1048578);
    map_inline("BF.LOADCHUNK f 25 abc", &m);
    assert_null(m.why);
    assert_int_equal(m.req.cmd, PROTO_CMD_DUMP);
    assert_true(m.req.replace);
    assert_int_equal(m.req.data_len, 25);
    expect_slice(m.req.args, "abc");

    map_inline("AUTH user secret", &m);
    assert_int_equal(m.req.cmd, PROTO_CMD_AUTH);
    expect_slice(m.req.args, "secret");

    map_inline("unlink a b", &m);
    assert_int_equal(m.op, RESP_OP_DEL);
    map_inline("BF.EXISTS f k", &m);
    assert_int_equal(m.req.cmd, PROTO_CMD_CHECK);
    assert_int_equal(m.req.nargs, 1);
}

/* ---- replies ---- */

static void test_format(void **state)
{
    (void)state;
    struct proto_buf b = {0};
    resp_reply_simple(&b, "OK");
    resp_reply_int(&b, -7);
    resp_reply_int(&b, 42);
    resp_reply_bulk_str(&b, "hi");
    resp_reply_null(&b, 2);
    resp_reply_null(&b, 3);
    resp_reply_map(&b, 2, 2);
    resp_reply_map(&b, 2, 3);
    resp_reply_double(&b, 0.5, 3);
    resp_reply_double(&b, 0.5, 2);
    resp_reply_error(&b, "ERR a\r\nb");
    resp_reply_bulk_head(&b, 16777216);
    expect_buf(&b, "+OK\r\n:-7\r\n:42\r\n$2\r\nhi\r\n$-1\r\n_\r\n*4\r\n%2\r\n,0.5\r\n$3\r\n0.5\r\n"
                   "-ERR a  b\r\n$16777216\r\n");
    proto_buf_reset(&b);
    bool bits[300];
    for (size_t i = 0; i < 300; i++)
        bits[i] = i % 3 == 0;
    resp_reply_bits(&b, bits, 300, false);
    resp_reply_bits(&b, bits, 2, true);
    assert_int_equal(b.len, 6 + 300 * 4 + 4 + 2 * 4);
    assert_memory_equal(b.data + b.len - 12, "*2\r\n:0\r\n:1\r\n", 12);
    assert_memory_equal(b.data, "*300\r\n:1\r\n:0\r\n:0\r\n:1\r\n", 22);
    proto_buf_free(&b);
}

static void expect_result(enum resp_shape shape, size_t nkeys, const struct result *r,
                          const char *want)
{
    struct proto_buf b = {0};
    resp_format_result(&b, shape, nkeys, r);
    expect_buf(&b, want);
    proto_buf_free(&b);
}

static void test_format_results(void **state)
{
    (void)state;
    struct result r;
    result_init(&r);
    result_set(&r, RESULT_CREATED, NULL);
    expect_result(RESP_SHAPE_OK, 0, &r, "+OK\r\n");
    result_set(&r, RESULT_EXISTS, NULL);
    expect_result(RESP_SHAPE_OK, 0, &r, "-ERR item exists\r\n");
    result_set(&r, RESULT_NOT_FOUND, "f");
    expect_result(RESP_SHAPE_BITS, 2, &r, "-ERR not found\r\n");
    expect_result(RESP_SHAPE_MISSING0, 1, &r, ":0\r\n");
    expect_result(RESP_SHAPE_MISSING_ZEROS, 2, &r, "*2\r\n:0\r\n:0\r\n");
    expect_result(RESP_SHAPE_DELETED, 1, &r, ":0\r\n");
    result_set(&r, RESULT_DELETED, NULL);
    expect_result(RESP_SHAPE_DELETED, 1, &r, ":1\r\n");
    result_set(&r, RESULT_READONLY, "127.0.0.1:8673");
    expect_result(RESP_SHAPE_BIT, 1, &r,
                  "-READONLY You can't write against a read only replica.\r\n");
    result_set(&r, RESULT_CLIENT_ERROR, "filter is full");
    expect_result(RESP_SHAPE_BITS, 1, &r, "-ERR filter is full\r\n");
    result_reset(&r);
    r.status = RESULT_BITS;
    bool *bits = result_add_bits(&r, 2);
    bits[0] = true;
    bits[1] = false;
    expect_result(RESP_SHAPE_BITS, 2, &r, "*2\r\n:1\r\n:0\r\n");
    expect_result(RESP_SHAPE_NEWS, 2, &r, "*2\r\n:0\r\n:1\r\n");
    r.nbits = 1;
    expect_result(RESP_SHAPE_BIT, 1, &r, ":1\r\n");
    expect_result(RESP_SHAPE_NEW, 1, &r, ":0\r\n");
    r.failed = true;
    expect_result(RESP_SHAPE_BIT, 1, &r, "-ERR out of memory\r\n");
    result_free(&r);
}

static void test_glob(void **state)
{
    (void)state;
    static const struct {
        const char *pat, *name;
        bool match;
    } g[] = {
        {"*", "abc", true},       {"a*", "abc", true},       {"a*c", "abc", true},
        {"a*d", "abc", false},    {"?b?", "abc", true},      {"[ab]bc", "bbc", true},
        {"[^a]bc", "abc", false}, {"[a-c]x", "bx", true},    {"h\\*", "h*", true},
        {"h\\*", "hx", false},    {"*a*a*", "banana", true}, {"", "", true},
        {"", "a", false},         {"abc", "ab", false},      {"ab*", "ab", true},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        if (resp_glob_match(g[i].pat, strlen(g[i].pat), g[i].name, strlen(g[i].name)) != g[i].match)
            fail_msg("glob '%s' on '%s'", g[i].pat, g[i].name);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_cases), cmocka_unit_test(test_parse_pipelined),
        cmocka_unit_test(test_tail_keys),   cmocka_unit_test(test_inline_keys),
        cmocka_unit_test(test_map_errors),  cmocka_unit_test(test_map_commands),
        cmocka_unit_test(test_format),      cmocka_unit_test(test_format_results),
        cmocka_unit_test(test_glob),
    };
    return cmocka_run_group_tests(tests, guard_setup, guard_teardown);
}
