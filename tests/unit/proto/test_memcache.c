/*
 * test_memcache.c - table-driven tests of the memcached protocol parser and formatter.
 * Every parser input is also fed cut at every byte offset, always flush against an
 * unreadable page, so an over-read faults instead of passing by luck. Replies are
 * compared byte for byte.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/memcache.h"

#define GUARD_AREA ((size_t)1 << 20)
#include "tests/unit/proto/expect.h"
#include "tests/unit/proto/guard_page.h"

/* ---- parser cases ---- */

#define LINE ((size_t)-1) /* expected consumed: up to and including the first '\n' */
#define ALL ((size_t)-2)  /* expected consumed: the whole input */

enum { F_NOREPLY = 1, F_CAS = 2, F_NODEFAULT = 4 };

struct mcase {
    const char *in;
    size_t in_len;   /* 0: strlen(in) */
    size_t max_line; /* 0: default */
    size_t max_data; /* 0: default */
    unsigned flags;  /* F_*: expected noreply/cas; F_NODEFAULT: no default filter */
    int status;
    size_t consumed; /* LINE, ALL or a count */
    enum mc_cmd cmd;
    const char *name; /* expected req.name on MC_OK */
    const char *args; /* expected req.args, keys joined by single spaces */
    size_t nargs;
    size_t key_skip;
    const char *bad; /* expected offending token on errors; NULL: not checked */
};

#define OK(in, fl, cmd, name, args, nargs, skip)                                                   \
    {                                                                                              \
        in, 0, 0, 0, fl, MC_OK, ALL, cmd, name, args, nargs, skip, NULL                            \
    }
#define PLAIN(in, fl, cmd)                                                                         \
    {                                                                                              \
        in, 0, 0, 0, fl, MC_OK, ALL, cmd, "", "", 0, 0, NULL                                       \
    }
#define ERR(in, fl, st, used, bad)                                                                 \
    {                                                                                              \
        in, 0, 0, 0, fl, st, used, MC_CMD_NOOP, NULL, NULL, 0, 0, bad                              \
    }

#define K250                                                                                       \
    "k234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901"  \
    "2345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012"  \
    "34567890123456789012345678901234567890123456789012345678901234567890"

static const struct mcase cases[] = {
    OK("add clicks:u1 0 0 1\r\nx\r\n", 0, MC_CMD_ADD, "clicks", "clicks:u1", 1, 7),
    OK("add u1 0 0 1\r\nx\r\n", 0, MC_CMD_ADD, "default", "u1", 1, 0),
    OK("add u1 5 -1 0 noreply\r\n\r\n", F_NOREPLY, MC_CMD_ADD, "default", "u1", 1, 0),
    OK("add  k   0 0   2\nab\r\n", 0, MC_CMD_ADD, "default", "k", 1, 0),
    OK("add k 0 0 3\r\n\r\n\n\r\n", 0, MC_CMD_ADD, "default", "k", 1, 0),
    OK("set a:b:c 4294967295 -9223372036854775808 3\r\nabc\r\n", 0, MC_CMD_SET, "a", "a:b:c", 1, 2),
    OK("set f.x_y-Z9:k 0 9223372036854775807 1 noreply\r\n1\r\n", F_NOREPLY, MC_CMD_SET, "f.x_y-Z9",
       "f.x_y-Z9:k", 1, 9),
    OK("add " K250 " 0 0 1\r\nx\r\n", 0, MC_CMD_ADD, "default", K250, 1, 0),
    OK("add noreply 0 0 1\r\nx\r\n", 0, MC_CMD_ADD, "default", "noreply", 1, 0),
    OK("get a:x b:y a:z k\r\n", 0, MC_CMD_GET, "", "a:x b:y a:z k", 4, 0),
    OK("gets k\r\n", F_CAS, MC_CMD_GET, "", "k", 1, 0),
    OK("get   k1    k2  \r\n", 0, MC_CMD_GET, "", "k1 k2", 2, 0),
    OK("get caf\xc3\xa9 \x80\xff\n", 0, MC_CMD_GET, "", "caf\xc3\xa9 \x80\xff", 2, 0),
    OK("get a::b\r\n", 0, MC_CMD_GET, "", "a::b", 1, 0),
    OK("get noreply\r\n", 0, MC_CMD_GET, "", "noreply", 1, 0),
    {"get f:k\r\n", 0, 0, 0, F_NODEFAULT, MC_OK, ALL, MC_CMD_GET, "", "f:k", 1, 0, NULL},
    PLAIN("version\r\n", 0, MC_CMD_VERSION),
    PLAIN("stats\r\n", 0, MC_CMD_STATS),
    PLAIN("quit\n", 0, MC_CMD_QUIT),
    /* memcached 1.6 answers version and quit whatever follows (memccapable checks it). */
    PLAIN("version foo bar\r\n", 0, MC_CMD_VERSION),
    PLAIN("version noreply\r\n", 0, MC_CMD_VERSION),
    PLAIN("quit foo\r\n", 0, MC_CMD_QUIT),
    PLAIN("verbosity 1\r\n", 0, MC_CMD_VERBOSITY),
    PLAIN("verbosity 0 noreply\r\n", F_NOREPLY, MC_CMD_VERBOSITY),
    PLAIN("flush_all\r\n", 0, MC_CMD_FLUSH_ALL),
    PLAIN("flush_all 0\r\n", 0, MC_CMD_FLUSH_ALL),
    PLAIN("flush_all noreply\r\n", F_NOREPLY, MC_CMD_FLUSH_ALL),
    PLAIN("flush_all 0 noreply\r\n", F_NOREPLY, MC_CMD_FLUSH_ALL),
    PLAIN("mn\r\n", 0, MC_CMD_NOOP),
    {"mn\r\nmn\r\n", 0, 0, 0, 0, MC_OK, LINE, MC_CMD_NOOP, "", "", 0, 0, NULL},
    {"add k 0 0 1\r\nx\r\nget k\r\n", 0, 0, 0, 0, MC_OK, 16, MC_CMD_ADD, "default", "k", 1, 0,
     NULL},

    ERR("\r\n", 0, MC_ERR_UNKNOWN_CMD, LINE, NULL),
    ERR("   \n", 0, MC_ERR_UNKNOWN_CMD, LINE, NULL),
    ERR("foo bar\r\n", 0, MC_ERR_UNKNOWN_CMD, LINE, "foo"),
    ERR("GET k\r\n", 0, MC_ERR_UNKNOWN_CMD, LINE, "GET"),
    ERR("get\tk\r\n", 0, MC_ERR_UNKNOWN_CMD, LINE, "get\tk"),
    ERR("mg k v\r\n", 0, MC_ERR_UNKNOWN_CMD, LINE, "mg"),

    ERR("get\r\n", 0, MC_ERR_FORMAT, LINE, NULL),
    ERR("get  \r\n", 0, MC_ERR_FORMAT, LINE, NULL),
    ERR("get a\tb\r\n", 0, MC_ERR_KEY, LINE, "a\tb"),
    ERR("get a\x7f\r\n", 0, MC_ERR_KEY, LINE, "a\x7f"),
    ERR("get ok a\r\r\n", 0, MC_ERR_KEY, LINE, "a\r"),
    ERR("get " K250 "9\r\n", 0, MC_ERR_KEY, LINE, K250 "9"),
    ERR("get .a:x\r\n", 0, MC_ERR_NAME, LINE, ".a:x"),
    ERR("get a/b:x\r\n", 0, MC_ERR_NAME, LINE, "a/b:x"),
    ERR("get :x\r\n", 0, MC_ERR_NAME, LINE, ":x"),
    ERR("get k a:\r\n", 0, MC_ERR_KEY, LINE, "a:"),
    ERR("get k\r\n", F_NODEFAULT, MC_ERR_KEY, LINE, "k"),

    ERR("add k 0 0\r\n", 0, MC_ERR_FORMAT, LINE, NULL),
    ERR("add k 0 0 noreply\r\n", F_NOREPLY, MC_ERR_FORMAT, LINE, NULL),
    ERR("add k x 0 1\r\nx\r\n", 0, MC_ERR_FORMAT, LINE, "x"),
    ERR("add k 4294967296 0 1\r\nx\r\n", 0, MC_ERR_FORMAT, LINE, "4294967296"),
    ERR("add k 0 - 1\r\nx\r\n", 0, MC_ERR_FORMAT, LINE, "-"),
    ERR("add k 0 9223372036854775808 1\r\nx\r\n", 0, MC_ERR_FORMAT, LINE, "9223372036854775808"),
    ERR("add k 0 0 -1\r\nx\r\n", 0, MC_ERR_FORMAT, LINE, "-1"),
    ERR("add k 0 0 2147483646\r\n", 0, MC_ERR_FORMAT, LINE, "2147483646"),
    ERR("add k 0 0 1 extra\r\nx\r\n", 0, MC_ERR_FORMAT, LINE, "extra"),
    ERR("add k 0 0 1 noreply x\r\nx\r\n", 0, MC_ERR_FORMAT, LINE, "noreply"),
    ERR("add k 0 0 2\r\nabc\r\n", 0, MC_ERR_DATA, 17, NULL),
    ERR("add k 0 0 1 noreply\r\nxy\r\n", F_NOREPLY, MC_ERR_DATA, 24, NULL),
    ERR("set k 0 0 0\r\nx\r\n", 0, MC_ERR_DATA, 15, NULL),
    ERR("add a\tb 0 0 1\r\nx\r\n", 0, MC_ERR_KEY, ALL, "a\tb"),
    ERR("add .x:k 0 0 1\r\nx\r\n", 0, MC_ERR_NAME, ALL, ".x:k"),
    ERR("add .x:k 0 0 1\r\nxyz\r\n", 0, MC_ERR_NAME, 19, ".x:k"),
    ERR("set " K250 "9 0 0 1\r\nx\r\n", 0, MC_ERR_KEY, ALL, NULL),
    ERR("set k 0 0 1\r\nx\r\n", F_NODEFAULT, MC_ERR_KEY, ALL, "k"),

    ERR("delete k\r\n", 0, MC_ERR_REFUSED, LINE, NULL),
    ERR("delete k noreply\r\n", F_NOREPLY, MC_ERR_REFUSED, LINE, NULL),
    ERR("delete k 0 noreply\r\n", F_NOREPLY, MC_ERR_REFUSED, LINE, NULL),
    ERR("incr k 1\r\n", 0, MC_ERR_REFUSED, LINE, NULL),
    ERR("decr k 1 noreply\r\n", F_NOREPLY, MC_ERR_REFUSED, LINE, NULL),
    ERR("touch k 10\r\n", 0, MC_ERR_REFUSED, LINE, NULL),
    ERR("gat 10 k\r\n", 0, MC_ERR_REFUSED, LINE, NULL),
    ERR("gats 10 k\r\n", 0, MC_ERR_REFUSED, LINE, NULL),
    ERR("replace k 0 0 1\r\nx\r\n", 0, MC_ERR_REFUSED, ALL, NULL),
    ERR("append k 0 0 1 noreply\r\nx\r\n", F_NOREPLY, MC_ERR_REFUSED, ALL, NULL),
    ERR("prepend k 0 0 1\r\nx\r\n", 0, MC_ERR_REFUSED, ALL, NULL),
    ERR("cas k 0 0 1 99\r\nx\r\n", 0, MC_ERR_REFUSED, ALL, NULL),
    ERR("cas k 0 0 1 99 noreply\r\nx\r\n", F_NOREPLY, MC_ERR_REFUSED, ALL, NULL),
    ERR("cas k 0 0 1\r\nx\r\n", 0, MC_ERR_FORMAT, LINE, NULL),
    ERR("cas k 0 0 1 x\r\nx\r\n", 0, MC_ERR_FORMAT, LINE, "x"),
    ERR("flush_all 10\r\n", 0, MC_ERR_REFUSED, LINE, "10"),
    ERR("flush_all 1 2\r\n", 0, MC_ERR_FORMAT, LINE, "2"),
    ERR("flush_all x\r\n", 0, MC_ERR_FORMAT, LINE, "x"),
    ERR("stats noreply\r\n", 0, MC_ERR_FORMAT, LINE, "noreply"),
    ERR("stats items\r\n", 0, MC_ERR_FORMAT, LINE, "items"),
    ERR("mn x\r\n", 0, MC_ERR_FORMAT, LINE, "x"),
    ERR("verbosity\r\n", 0, MC_ERR_FORMAT, LINE, NULL),
    ERR("verbosity x\r\n", 0, MC_ERR_FORMAT, LINE, "x"),
    ERR("verbosity 1 2\r\n", 0, MC_ERR_FORMAT, LINE, NULL),

    /* Incomplete: no line end, or the data block not all there. */
    ERR("", 0, MC_MORE, 0, NULL),
    ERR("get k", 0, MC_MORE, 0, NULL),
    ERR("get k\r", 0, MC_MORE, 0, NULL),
    ERR("add k 0 0 5\r\nhel", 0, MC_MORE, 0, NULL),
    ERR("add k 0 0 5\r\nhello\r", 0, MC_MORE, 0, NULL),

    /* Limits: the line limit counts the terminator; the data limit is memcached's. */
    {"get abc\n", 0, 8, 0, 0, MC_OK, ALL, MC_CMD_GET, "", "abc", 1, 0, NULL},
    {"get abcd\n", 0, 8, 0, 0, MC_ERR_TOO_LONG, 0, MC_CMD_NOOP, NULL, NULL, 0, 0, NULL},
    {"get abc\r\n", 0, 8, 0, 0, MC_ERR_TOO_LONG, 0, MC_CMD_NOOP, NULL, NULL, 0, 0, NULL},
    {"get abcd", 0, 8, 0, 0, MC_ERR_TOO_LONG, 0, MC_CMD_NOOP, NULL, NULL, 0, 0, NULL},
    {"add k 0 0 4\r\nabcd\r\n", 0, 0, 4, 0, MC_OK, ALL, MC_CMD_ADD, "default", "k", 1, 0, NULL},
    {"add k 0 0 5\r\nhello\r\n", 0, 0, 4, 0, MC_ERR_TOO_LARGE, LINE, MC_CMD_NOOP, NULL, NULL, 0, 0,
     "5"},
    {"add k 0 0 5 noreply\r\n", 0, 0, 4, F_NOREPLY, MC_ERR_TOO_LARGE, LINE, MC_CMD_NOOP, NULL, NULL,
     0, 0, "5"},
};

static size_t case_len(const struct mcase *c)
{
    return c->in_len ? c->in_len : strlen(c->in);
}

static size_t want_consumed(const struct mcase *c)
{
    size_t len = case_len(c);
    if (c->consumed == ALL)
        return len;
    if (c->consumed == LINE)
        return (size_t)((const char *)memchr(c->in, '\n', len) - c->in) + 1;
    return c->consumed;
}

static struct mc_options case_options(const struct mcase *c)
{
    struct mc_options o = {{"default", 7}, c->max_line, c->max_data, false};
    if (c->flags & F_NODEFAULT)
        o.default_filter.len = 0;
    return o;
}

/* Joins the tokens of s with single spaces into out. */
static size_t join_tokens(struct proto_slice s, char *out, size_t cap)
{
    struct proto_slice arg;
    size_t n = 0, used = 0;
    out[0] = '\0';
    while (proto_next_arg(&s, &arg)) {
        assert_true(used + arg.len + 2 < cap);
        if (n > 0)
            out[used++] = ' ';
        memcpy(out + used, arg.ptr, arg.len);
        used += arg.len;
        out[used] = '\0';
        n++;
    }
    return n;
}

static void check_full(const struct mcase *c, size_t idx)
{
    size_t len = case_len(c);
    struct mc_options o = case_options(c);
    struct mc_request m;
    size_t consumed = 12345;
    const char *in = guard_place(c->in, len);
    int rc = mc_parse(in, len, &o, &m, &consumed);
    if (rc != c->status)
        fail_msg("case %zu (%s): status %d, want %d", idx, c->in, rc, c->status);
    assert_int_equal(consumed, want_consumed(c));
    if (rc != MC_MORE && rc != MC_ERR_TOO_LONG) {
        if (m.noreply != ((c->flags & F_NOREPLY) != 0))
            fail_msg("case %zu (%s): noreply %d", idx, c->in, m.noreply);
    }
    if (rc == MC_OK) {
        assert_int_equal(m.cmd, c->cmd);
        assert_int_equal(m.cas, (c->flags & F_CAS) != 0);
        expect_slice(m.req.name, c->name);
        char joined[1024];
        size_t n = join_tokens(m.req.args, joined, sizeof(joined));
        assert_string_equal(joined, c->args);
        assert_int_equal(m.req.nargs, c->nargs);
        assert_int_equal(n, c->nargs);
        assert_int_equal(m.req.key_skip, c->key_skip);
        assert_int_equal(m.exec, c->cmd != MC_CMD_NOOP && c->cmd != MC_CMD_VERBOSITY);
    } else if (rc < 0) {
        assert_non_null(m.req.why);
        if (c->bad != NULL)
            expect_slice(m.req.bad, c->bad);
        assert_int_equal(m.swallow, rc == MC_ERR_TOO_LARGE ? 7 : 0);
    }
}

/*
 * The same input cut at every offset: MORE until the whole request is there (or the line
 * limit is reached), then the same answer. Once the line of a storage command is there,
 * MORE says how many bytes the request needs.
 */
static void check_prefixes(const struct mcase *c, size_t idx)
{
    size_t len = case_len(c);
    size_t max_line = c->max_line ? c->max_line : MC_DEFAULT_MAX_LINE;
    struct mc_options o = case_options(c);
    struct mc_request full, part;
    size_t full_used, part_used;
    int full_rc = mc_parse(guard_place(c->in, len), len, &o, &full, &full_used);
    const char *nl = memchr(c->in, '\n', len);
    size_t line_len = nl != NULL ? (size_t)(nl - c->in) + 1 : 0;
    for (size_t k = 0; k < len; k++) {
        int rc = mc_parse(guard_place(c->in, k), k, &o, &part, &part_used);
        if (full_used > 0 && k >= full_used) {
            if (rc != full_rc)
                fail_msg("case %zu cut at %zu: status %d, want %d", idx, k, rc, full_rc);
            assert_int_equal(part_used, full_used);
            assert_int_equal(part.req.nargs, full.req.nargs);
        } else if (full_rc == MC_ERR_TOO_LONG && k >= max_line) {
            assert_int_equal(rc, MC_ERR_TOO_LONG);
            assert_int_equal(part_used, 0);
        } else {
            if (rc != MC_MORE)
                fail_msg("case %zu cut at %zu: status %d, want MORE", idx, k, rc);
            assert_int_equal(part_used, 0);
            if (line_len > 0 && k >= line_len && full_used > line_len)
                assert_int_equal(part.need, full_used);
            else if (k < line_len || line_len == 0)
                assert_int_equal(part.need, 0);
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

static void test_parse_fields(void **state)
{
    (void)state;
    struct mc_options o = {{"d", 1}, 0, 0, false};
    struct mc_request m;
    size_t used;
    const char *in = "set f:k 0 0 5\r\nhello\r\n";
    assert_int_equal(mc_parse(in, strlen(in), &o, &m, &used), MC_OK);
    assert_int_equal(m.req.cmd, PROTO_CMD_ADD);
    assert_int_equal(m.data_len, 5);
    struct proto_slice rest = m.req.args, key;
    assert_int_equal(proto_next_keys(&m.req, &rest, &key, 1), 1);
    expect_slice(key, "k");
    assert_int_equal(proto_next_keys(&m.req, &rest, &key, 1), 0);

    in = "add k 0 0 1\r\nx\r\n";
    assert_int_equal(mc_parse(in, strlen(in), &o, &m, &used), MC_OK);
    assert_int_equal(m.req.cmd, PROTO_CMD_CHECKADD);
    expect_slice(m.req.name, "d");

    const struct {
        const char *in;
        enum proto_cmd exec;
    } execs[] = {{"get k\r\n", PROTO_CMD_CHECK},
                 {"version\r\n", PROTO_CMD_VERSION},
                 {"stats\r\n", PROTO_CMD_STATS},
                 {"quit\r\n", PROTO_CMD_QUIT},
                 {"flush_all\r\n", PROTO_CMD_CLEAR}};
    for (size_t i = 0; i < sizeof(execs) / sizeof(execs[0]); i++) {
        assert_int_equal(mc_parse(execs[i].in, strlen(execs[i].in), &o, &m, &used), MC_OK);
        assert_int_equal(m.req.cmd, execs[i].exec);
        assert_true(m.exec);
    }
    in = "flush_all\r\n";
    assert_int_equal(mc_parse(in, strlen(in), &o, &m, &used), MC_OK);
    assert_int_equal(m.req.name.len, 0);

    /* No options: no default filter, so a key needs its filter. */
    in = "get k\r\n";
    assert_int_equal(mc_parse(in, strlen(in), NULL, &m, &used), MC_ERR_KEY);
    in = "get f:k\r\n";
    assert_int_equal(mc_parse(in, strlen(in), NULL, &m, &used), MC_OK);
    /* An invalid default filter counts as none. */
    struct mc_options bad = {{".x", 2}, 0, 0, false};
    in = "get k\r\n";
    assert_int_equal(mc_parse(in, strlen(in), &bad, &m, &used), MC_ERR_KEY);
}

/* A pipelined stream parsed as the server does, including memcached's resync after a
 * bad data chunk: exactly <bytes>+2 bytes are taken, the rest is parsed as commands. */
static void test_parse_pipeline(void **state)
{
    (void)state;
    const char in[] = "add k 0 0 2\r\nabc\r\nget k\r\nbogus\r\nset k 0 0 1 noreply\r\nx\r\n"
                      "delete k\r\nmn\r\nadd k 0";
    const int want[] = {MC_ERR_DATA, MC_ERR_UNKNOWN_CMD, MC_OK, MC_ERR_UNKNOWN_CMD,
                        MC_OK,       MC_ERR_REFUSED,     MC_OK, MC_MORE};
    const char *p = guard_place(in, sizeof(in) - 1);
    size_t left = sizeof(in) - 1;
    struct mc_options o = {{"d", 1}, 0, 0, false};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        struct mc_request m;
        size_t used;
        int rc = mc_parse(p, left, &o, &m, &used);
        if (rc != want[i])
            fail_msg("request %zu: status %d, want %d", i, rc, want[i]);
        assert_true(used <= left);
        p += used;
        left -= used;
    }
    assert_int_equal(left, 7);
}

/* An oversized block: the line is consumed and the server swallows bytes+2 more. */
static void test_parse_swallow(void **state)
{
    (void)state;
    struct mc_options o = {{"d", 1}, 0, 3, false};
    const char in[] = "add k 0 0 10 noreply\r\n0123456789\r\nget k\r\n";
    struct mc_request m;
    size_t used;
    assert_int_equal(mc_parse(in, sizeof(in) - 1, &o, &m, &used), MC_ERR_TOO_LARGE);
    assert_int_equal(used, 22);
    assert_int_equal(m.swallow, 12);
    assert_true(m.noreply);
    assert_int_equal(
        mc_parse(in + used + m.swallow, sizeof(in) - 1 - used - m.swallow, &o, &m, &used), MC_OK);
    assert_int_equal(m.cmd, MC_CMD_GET);
}

/* ---- multi-key get: runs of one filter ---- */

struct want_group {
    const char *name;
    size_t skip;
    const char *keys; /* Bloom keys (prefix removed), joined by spaces */
    const char *args; /* the tokens as sent */
};

static void expect_groups(const char *line, const struct want_group *want, size_t n)
{
    struct mc_options o = {{"default", 7}, 0, 0, false};
    struct mc_request m;
    size_t used;
    size_t len = strlen(line);
    assert_int_equal(mc_parse(guard_place(line, len), len, &o, &m, &used), MC_OK);
    struct proto_slice rest = m.req.args;
    struct proto_request g;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(mc_next_group(&m, &rest, &g));
        assert_int_equal(g.cmd, PROTO_CMD_CHECK);
        expect_slice(g.name, want[i].name);
        assert_int_equal(g.key_skip, want[i].skip);
        char joined[1024];
        size_t nt = join_tokens(g.args, joined, sizeof(joined));
        assert_string_equal(joined, want[i].args);
        assert_int_equal(nt, g.nargs);
        /* Keys through proto_next_keys, as server/commands reads them (one at a time
         * here, so batch edges are crossed too). */
        struct proto_slice kr = g.args, key;
        char keys[1024];
        size_t used_k = 0, nk = 0;
        keys[0] = '\0';
        while (proto_next_keys(&g, &kr, &key, 1) == 1) {
            if (nk++ > 0)
                keys[used_k++] = ' ';
            memcpy(keys + used_k, key.ptr, key.len);
            used_k += key.len;
            keys[used_k] = '\0';
        }
        assert_string_equal(keys, want[i].keys);
        assert_int_equal(nk, g.nargs);
        total += g.nargs;
    }
    assert_false(mc_next_group(&m, &rest, &g));
    assert_int_equal(total, m.req.nargs);
}

static void test_groups(void **state)
{
    (void)state;
    const struct want_group g1[] = {
        {"a", 2, "x y", "a:x a:y"},
        {"b", 2, "z", "b:z"},
        {"a", 2, "w", "a:w"},
        {"default", 0, "k1 k2", "k1 k2"},
        {"default", 8, "k3", "default:k3"},
        {"ab", 3, "c:d", "ab:c:d"},
    };
    expect_groups("get a:x  a:y b:z a:w k1 k2 default:k3 ab:c:d  \r\n", g1, 6);
    const struct want_group g2[] = {{"default", 0, "k", "k"}};
    expect_groups("gets k\r\n", g2, 1);
    /* Filters that share a prefix are different filters. */
    const struct want_group g3[] = {{"a", 2, "1", "a:1"}, {"aa", 3, "1", "aa:1"}};
    expect_groups("get a:1 aa:1\n", g3, 2);

    /* 100 keys of one filter are one batch. */
    char line[2048];
    size_t n = (size_t)sprintf(line, "get");
    for (int i = 0; i < 100; i++)
        n += (size_t)sprintf(line + n, " clicks:u%d", i);
    memcpy(line + n, "\r\n", 3);
    struct mc_options o = {{"default", 7}, 0, 0, false};
    struct mc_request m;
    size_t used;
    assert_int_equal(mc_parse(line, strlen(line), &o, &m, &used), MC_OK);
    struct proto_slice rest = m.req.args;
    struct proto_request g;
    assert_true(mc_next_group(&m, &rest, &g));
    assert_int_equal(g.nargs, 100);
    expect_slice(g.name, "clicks");
    assert_false(mc_next_group(&m, &rest, &g));
}

/* ---- formatter ---- */

/* Parses line (which must succeed) into *m with default filter "d". */
static void parse_ok(const char *line, struct mc_request *m)
{
    struct mc_options o = {{"d", 1}, 0, 0, false};
    size_t used;
    assert_int_equal(mc_parse(line, strlen(line), &o, m, &used), MC_OK);
}

static void set_bits(struct result *r, const char *bits)
{
    result_reset(r);
    r->status = RESULT_BITS;
    size_t n = strlen(bits);
    bool *p = result_add_bits(r, n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = bits[i] == '1';
}

static void test_format_storage(void **state)
{
    (void)state;
    struct proto_buf b = {0};
    struct result r;
    result_init(&r);
    struct mc_request m;

    parse_ok("add k 0 0 1\r\nx\r\n", &m);
    set_bits(&r, "0");
    mc_format_result(&b, &m, &r);
    set_bits(&r, "1");
    mc_format_result(&b, &m, &r);
    expect_buf(&b, "STORED\r\nNOT_STORED\r\n");

    proto_buf_reset(&b);
    parse_ok("add k 0 0 1 noreply\r\nx\r\n", &m);
    mc_format_result(&b, &m, &r);
    result_set(&r, RESULT_SERVER_ERROR, "memory limit");
    mc_format_result(&b, &m, &r);
    expect_buf(&b, "");

    parse_ok("set k 0 0 1\r\nx\r\n", &m);
    result_reset(&r);
    r.status = RESULT_COUNT;
    r.count = 0;
    mc_format_result(&b, &m, &r);
    parse_ok("add k 0 0 1\r\nx\r\n", &m);
    mc_format_result(&b, &m, &r); /* an add executed as ADD: 0 new */
    result_set(&r, RESULT_SERVER_ERROR, "memory limit reached");
    mc_format_result(&b, &m, &r);
    result_set(&r, RESULT_CLIENT_ERROR, "filter is read-only");
    mc_format_result(&b, &m, &r);
    result_set(&r, RESULT_NOT_FOUND, NULL);
    mc_format_result(&b, &m, &r);
    result_reset(&r);
    r.failed = true;
    mc_format_result(&b, &m, &r);
    result_reset(&r);
    mc_format_result(&b, &m, &r);
    expect_buf(&b, "STORED\r\nNOT_STORED\r\nSERVER_ERROR memory limit reached\r\n"
                   "CLIENT_ERROR filter is read-only\r\nCLIENT_ERROR no such filter\r\n"
                   "SERVER_ERROR out of memory\r\nSERVER_ERROR unexpected result\r\n");
    result_free(&r);
    proto_buf_free(&b);
}

static void test_format_get(void **state)
{
    (void)state;
    struct proto_buf b = {0};
    struct result r;
    result_init(&r);
    struct mc_request m;
    struct mc_get g;
    struct proto_request grp;

    /* Runs a:2, b:1, d:1: the server executes each and formats it in turn; the last
     * filter does not exist, so its key is absent. */
    parse_ok("get a:x a:y b:z k\r\n", &m);
    const char *bits[] = {"10", "1", NULL};
    struct proto_slice rest = m.req.args;
    mc_get_begin(&g, &b);
    size_t runs = 0;
    while (mc_next_group(&m, &rest, &grp)) {
        assert_true(runs < 3);
        if (bits[runs] != NULL)
            set_bits(&r, bits[runs]);
        else
            result_set(&r, RESULT_NOT_FOUND, NULL);
        assert_true(mc_get_group(&b, &g, &m, &grp, &r));
        runs++;
    }
    mc_get_end(&b, &g);
    assert_int_equal(runs, 3);
    expect_buf(&b, "VALUE a:x 0 1\r\n1\r\nVALUE b:z 0 1\r\n1\r\nEND\r\n");

    /* gets carries a cas unique; a miss everywhere is a bare END. */
    proto_buf_reset(&b);
    parse_ok("gets k1 k2\r\n", &m);
    set_bits(&r, "01");
    mc_format_result(&b, &m, &r);
    set_bits(&r, "00");
    mc_format_result(&b, &m, &r);
    result_set(&r, RESULT_NOT_FOUND, NULL);
    mc_format_result(&b, &m, &r);
    expect_buf(&b, "VALUE k2 0 1 0\r\n1\r\nEND\r\nEND\r\nEND\r\n");

    /* An error in a later run replaces the whole get, but not earlier replies. */
    proto_buf_reset(&b);
    proto_reply_word(&b, "STORED");
    parse_ok("get a:x b:y c:z\r\n", &m);
    rest = m.req.args;
    mc_get_begin(&g, &b);
    assert_true(mc_next_group(&m, &rest, &grp));
    set_bits(&r, "1");
    assert_true(mc_get_group(&b, &g, &m, &grp, &r));
    assert_true(mc_next_group(&m, &rest, &grp));
    result_set(&r, RESULT_SERVER_ERROR, "memory limit reached");
    assert_false(mc_get_group(&b, &g, &m, &grp, &r));
    assert_true(mc_next_group(&m, &rest, &grp));
    set_bits(&r, "1");
    assert_false(mc_get_group(&b, &g, &m, &grp, &r));
    mc_get_end(&b, &g);
    expect_buf(&b, "STORED\r\nSERVER_ERROR memory limit reached\r\n");

    /* A bit count that does not match the run is the server's bug, said as such. */
    proto_buf_reset(&b);
    parse_ok("get a b\r\n", &m);
    set_bits(&r, "1");
    mc_format_result(&b, &m, &r);
    expect_buf(&b, "SERVER_ERROR unexpected result\r\n");
    result_free(&r);
    proto_buf_free(&b);
}

static void test_format_misc(void **state)
{
    (void)state;
    struct proto_buf b = {0};
    struct result r;
    result_init(&r);
    struct mc_request m;

    parse_ok("version\r\n", &m);
    result_set(&r, RESULT_VERSION, "0.1.0");
    mc_format_result(&b, &m, &r);
    parse_ok("verbosity 1\r\n", &m);
    result_reset(&r);
    mc_format_result(&b, &m, &r);
    parse_ok("verbosity 1 noreply\r\n", &m);
    mc_format_result(&b, &m, &r);
    parse_ok("mn\r\n", &m);
    mc_format_result(&b, &m, &r);
    parse_ok("flush_all\r\n", &m);
    mc_format_result(&b, &m, &r);
    result_set(&r, RESULT_CLIENT_ERROR, MC_WHY_FLUSH_DISABLED);
    mc_format_result(&b, &m, &r);
    parse_ok("quit\r\n", &m);
    result_set(&r, RESULT_CLOSE, NULL);
    mc_format_result(&b, &m, &r);
    expect_buf(&b, "VERSION 1.6.0-bloomd-0.1.0\r\nOK\r\nMN\r\nOK\r\n"
                   "CLIENT_ERROR flush_all is disabled: it would clear every filter\r\n");
    result_free(&r);
    proto_buf_free(&b);
}

/* memcached's ASCII authentication: a set whose block is "<username> <password>". */
static void test_auth(void **state)
{
    (void)state;
    struct mc_options o = {{"", 0}, 0, 0, true}; /* no default filter: any key still works */
    struct mc_request m;
    size_t used;
    const char *in = "set anything 0 0 13\r\nuser s3cr3t x\r\nget a\r\n";
    assert_int_equal(mc_parse(in, strlen(in), &o, &m, &used), MC_OK);
    assert_int_equal(used, strlen(in) - strlen("get a\r\n"));
    assert_int_equal(m.cmd, MC_CMD_AUTH);
    assert_int_equal(m.req.cmd, PROTO_CMD_AUTH);
    assert_true(m.exec);
    expect_slice(m.req.args, "s3cr3t x"); /* everything after the first space */
    in = "set k 0 0 4\r\nuser\r\n";
    assert_int_equal(mc_parse(in, strlen(in), &o, &m, &used), MC_OK);
    assert_int_equal(m.req.args.len, 0);
    in = "set k 0 0 4\r\nuserXX";
    assert_int_equal(mc_parse(in, strlen(in), &o, &m, &used), MC_ERR_DATA);
    in = "set k 0 0 4\r\nus";
    assert_int_equal(mc_parse(in, strlen(in), &o, &m, &used), MC_MORE);
    in = "add k 0 0 1\r\nx\r\n"; /* only set authenticates: the server refuses the rest */
    o.default_filter = (struct proto_slice){"d", 1};
    assert_int_equal(mc_parse(in, strlen(in), &o, &m, &used), MC_OK);
    assert_int_equal(m.cmd, MC_CMD_ADD);

    struct proto_buf b = {0};
    struct result r;
    result_init(&r);
    in = "set k 0 0 3\r\nu p\r\n";
    assert_int_equal(mc_parse(in, strlen(in), &o, &m, &used), MC_OK);
    result_set(&r, RESULT_OK, NULL);
    mc_format_result(&b, &m, &r);
    result_set(&r, RESULT_CLIENT_ERROR, "invalid token");
    mc_format_result(&b, &m, &r);
    expect_buf(&b, "STORED\r\nCLIENT_ERROR authentication failure\r\n");
    result_free(&r);
    proto_buf_free(&b);
}

static void test_format_stats(void **state)
{
    (void)state;
    struct proto_buf b = {0};
    struct result r;
    result_init(&r);
    struct mc_request m;
    parse_ok("stats\r\n", &m);
    /* In the result's order; a field with an alias (memcached's name) shows that name. */
    result_field_u64(&r, "uptime", 42);
    result_field_str(&r, "version", "0.1.0", 5);
    result_field_u64(&r, "memory_bytes", 4096);
    result_field_alias(&r, "bytes");
    result_field_u64(&r, "filters", 3);
    result_field_u64(&r, "keys_checked", 7);
    result_field_alias(&r, "cmd_get");
    result_field_double(&r, "fill", 0.25);
    result_field_str(&r, "durability", "always", 6);
    mc_format_result(&b, &m, &r);
    expect_buf(&b, "STAT uptime 42\r\nSTAT version 0.1.0\r\nSTAT bytes 4096\r\nSTAT filters 3\r\n"
                   "STAT cmd_get 7\r\nSTAT fill 0.25\r\nSTAT durability always\r\nEND\r\n");
    proto_buf_reset(&b);
    result_reset(&r);
    r.status = RESULT_FIELDS;
    mc_format_result(&b, &m, &r);
    expect_buf(&b, "END\r\n");
    /* An alias is copied, and the text protocol never shows it. */
    result_reset(&r);
    char alias[] = "curr_items";
    result_field_u64(&r, "items", 5);
    result_field_alias(&r, alias);
    alias[0] = 'X';
    assert_string_equal(r.fields[0].alias, "curr_items");
    assert_string_equal(r.fields[0].name, "items");
    result_free(&r);
    proto_buf_free(&b);
}

static void expect_error_reply(const char *in, size_t max_data, const char *want)
{
    struct mc_options o = {{"d", 1}, 0, max_data, false};
    struct mc_request m;
    size_t used;
    struct proto_buf b = {0};
    int rc = mc_parse(in, strlen(in), &o, &m, &used);
    assert_true(rc < 0);
    mc_reply_parse_error(&b, rc, &m);
    expect_buf(&b, want);
    proto_buf_free(&b);
}

static void test_format_parse_errors(void **state)
{
    (void)state;
    expect_error_reply("foo\r\n", 0, "ERROR\r\n");
    expect_error_reply("\r\n", 0, "ERROR\r\n");
    expect_error_reply("add k 0 0 2\r\nabc\r\n", 0, "CLIENT_ERROR bad data chunk\r\n");
    expect_error_reply("add k 0 0 2 noreply\r\nabc\r\n", 0, "");
    expect_error_reply("delete k noreply\r\n", 0, "");
    expect_error_reply("add k 0 0 5\r\nhello\r\n", 4,
                       "SERVER_ERROR object too large for cache\r\n");
    expect_error_reply("get a\tb\r\n", 0,
                       "CLIENT_ERROR invalid key (control character) 'a\\x09b'\r\n");
    expect_error_reply("get .a:b\r\n", 0, "CLIENT_ERROR invalid filter name before ':' '.a:b'\r\n");
    expect_error_reply("add k x 0 1\r\n", 0, "CLIENT_ERROR bad command line format: flags 'x'\r\n");
    expect_error_reply("get\r\n", 0, "CLIENT_ERROR bad command line format: no keys\r\n");
    expect_error_reply("stats cachedump 1 0\r\n", 0,
                       "CLIENT_ERROR stats takes no group: a Bloom filter has no items, slabs or "
                       "keys to list 'cachedump'\r\n");
    expect_error_reply("stats noreply\r\n", 0,
                       "CLIENT_ERROR bad command line format: stats has no noreply 'noreply'\r\n");
    expect_error_reply("mn x\r\n", 0,
                       "CLIENT_ERROR bad command line format: too many arguments 'x'\r\n");
    expect_error_reply("delete k\r\n", 0,
                       "CLIENT_ERROR delete is not supported: a Bloom filter cannot forget one key "
                       "(a windowed filter forgets keys by itself as they age out of its "
                       "window)\r\n");
    expect_error_reply("incr k 1\r\n", 0,
                       "CLIENT_ERROR incr is not supported: a Bloom filter stores no values, only "
                       "whether a key was seen\r\n");
    expect_error_reply("replace k 0 0 1\r\nx\r\n", 0,
                       "CLIENT_ERROR replace is not supported: a Bloom filter cannot tell a stored "
                       "key from a false positive (use add or set)\r\n");

    struct proto_buf b = {0};
    struct mc_options o = {{"d", 1}, 4, 0, false};
    struct mc_request m;
    size_t used;
    assert_int_equal(mc_parse("get abc", 7, &o, &m, &used), MC_ERR_TOO_LONG);
    mc_reply_parse_error(&b, MC_ERR_TOO_LONG, &m);
    mc_reply_parse_error(&b, MC_ERR_FORMAT, NULL);
    expect_buf(&b, "CLIENT_ERROR line too long\r\nCLIENT_ERROR bad command line format\r\n");
    proto_buf_free(&b);
    assert_string_equal(mc_strerror(MC_ERR_DATA), "bad data chunk");
    assert_string_equal(mc_strerror(MC_ERR_REFUSED), "not supported");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_table),    cmocka_unit_test(test_parse_fields),
        cmocka_unit_test(test_parse_pipeline), cmocka_unit_test(test_parse_swallow),
        cmocka_unit_test(test_groups),         cmocka_unit_test(test_format_storage),
        cmocka_unit_test(test_format_get),     cmocka_unit_test(test_format_misc),
        cmocka_unit_test(test_format_stats),   cmocka_unit_test(test_format_parse_errors),
        cmocka_unit_test(test_auth),
    };
    return cmocka_run_group_tests(tests, guard_setup, guard_teardown);
}
