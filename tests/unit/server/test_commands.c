/*
 * test_commands.c - command execution without sockets: a request line is parsed with
 * proto, executed against a real server struct (registry, budget) with the test's own
 * counters, and the result formatted by the text protocol; the reply bytes are compared.
 * Covers every command, every error, the batch boundaries of the key commands, the
 * copy-on-write paths taken while a snapshot holds a filter, and the answer-later path
 * of FLUSH, DROP and background UNION/INTERSECT through a struct completion.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <event2/event.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/sbf.h"
#include "proto/proto.h"
#include "server/core/config.h"
#include "server/core/log.h"
#include "server/core/park.h"
#include "server/core/server.h"
#include "server/exec/commands.h"
#include "server/exec/stats.h"
#include "server/lifecycle.h"
#include "server/persist/snapshot.h"
#include "server/store/registry.h"

static struct server srv;
/* The counters commands_execute() is given; srv.counters points STATS at them. */
static struct stats counters;
static struct stats *const st = &counters;
static struct result res;
static struct proto_buf out;
static char reply[1 << 20];

static void start(uint64_t max_memory)
{
    struct config cfg;
    config_defaults(&cfg);
    cfg.max_memory = max_memory;
    assert_int_equal(server_init(&srv, &cfg), SERVER_OK);
    memset(&counters, 0, sizeof(counters));
    srv.counters = &counters;
    result_init(&res);
    memset(&out, 0, sizeof(out));
}

static int setup(void **state)
{
    (void)state;
    start(0);
    return 0;
}

static int setup_small_memory(void **state)
{
    (void)state;
    start(256 * 1024);
    return 0;
}

/*
 * Every filter must be held by the table alone by now (a test that kept a reference
 * from registry_get() leaks its filter); removing them all must then give every byte
 * back to the budget (the table's buckets stay, in the overhead part). Measured while the
 * server is still alive: server_destroy() frees the filters whatever their count and
 * zeroes the budget.
 */
static int teardown(void **state)
{
    (void)state;
    struct filter **all;
    size_t n, held = 0;
    assert_int_equal(registry_collect(srv.reg, NULL, 0, &all, &n), REGISTRY_OK);
    for (size_t i = 0; i < n; i++) {
        held += atomic_load(&all[i]->refs) != 2; /* the table's and collect's */
        registry_remove(srv.reg, all[i]->name, all[i]->name_len);
        filter_unref(all[i]);
    }
    free(all);
    size_t left = registry_count(srv.reg);
    uint64_t used = budget_part(&srv.budget, BUDGET_FILTERS);
    /* Asserted once everything is freed, so a failure here leaks nothing else. */
    srv.counters = NULL;
    server_destroy(&srv);
    result_free(&res);
    proto_buf_free(&out);
    assert_int_equal(held, 0);
    assert_int_equal(left, 0);
    assert_int_equal(used, 0);
    return 0;
}

/* Formats each result of a run into out, checking they come in order. */
struct each_ctx {
    size_t next;
};

static void each_format(void *ctx, size_t i, const struct result *r)
{
    struct each_ctx *c = ctx;
    assert_int_equal(i, c->next);
    c->next++;
    proto_format_result(&out, r);
}

/* Executes reqs[0..n) as one merged run, appending the replies to out. */
static void execute_run(const struct proto_request *reqs, size_t n)
{
    struct each_ctx c = {0};
    commands_execute_run(&srv, st, reqs, n, &res, each_format, &c);
    assert_int_equal(c.next, n);
}

/* Executes one request and appends its reply to out; returns commands_execute's value. */
static int execute(const struct proto_request *req, struct completion *later)
{
    result_reset(&res);
    int rc = commands_execute(&srv, st, req, &res, later);
    if (rc == CMD_DONE)
        proto_format_result(&out, &res);
    return rc;
}

/* Parses and executes one line; returns the reply (NUL-terminated) and sets *result. */
static const char *run_later(const char *line, int *result, struct completion *later)
{
    struct proto_limits lim = {.max_line = PROTO_DEFAULT_MAX_LINE};
    struct proto_request req;
    size_t used;
    size_t len = strlen(line);
    char *buf = malloc(len + 2);
    assert_non_null(buf);
    memcpy(buf, line, len);
    memcpy(buf + len, "\r\n", 2);
    int pst = proto_parse(buf, len + 2, &lim, &req, &used);
    proto_buf_reset(&out);
    if (pst == PROTO_OK) {
        *result = execute(&req, later);
    } else {
        proto_reply_parse_error(&out, pst, &req);
        *result = pst;
    }
    free(buf);
    assert_false(out.failed);
    assert_true(out.len < sizeof(reply));
    memcpy(reply, out.data, out.len);
    reply[out.len] = '\0';
    return reply;
}

static const char *run_r(const char *line, int *result)
{
    return run_later(line, result, NULL);
}

static const char *run(const char *line)
{
    int result;
    const char *r = run_r(line, &result);
    assert_true(result == CMD_DONE || result < 0);
    return r;
}

#define expect(line, want) assert_string_equal(run(line), want "\r\n")

/* The filter named name, with a reference the caller drops with filter_unref; or NULL. */
static struct filter *get(const char *name)
{
    return registry_get(srv.reg, name, strlen(name));
}

static bool exists(const char *name)
{
    struct filter *f = get(name);
    filter_unref(f);
    return f != NULL;
}

/* The creation parameters of filter name (kind sbf: its obj is a struct sbf). */
static struct sbf_params params(const char *name)
{
    struct filter *f = get(name);
    assert_non_null(f);
    assert_ptr_equal(f->ops, &kind_sbf);
    struct sbf_params p = *sbf_params(f->obj);
    filter_unref(f);
    return p;
}

/* The change counter of filter name. */
static uint64_t changes(const char *name)
{
    struct filter *f = get(name);
    assert_non_null(f);
    uint64_t c = atomic_load(&f->changes);
    filter_unref(f);
    return c;
}

/* "ADD f k<from> ... k<to-1>" (or another command) into a static buffer. */
static const char *keys_line(const char *cmd, const char *name, int from, int to)
{
    static char line[1 << 19];
    size_t n = (size_t)snprintf(line, sizeof(line), "%s %s", cmd, name);
    for (int i = from; i < to; i++)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " k%d", i);
    assert_true(n < sizeof(line));
    return line;
}

/* Parses each line of text (terminated) into reqs; returns how many. */
static size_t parse_lines(const char *text, struct proto_request *reqs, size_t max)
{
    struct proto_limits lim = {.max_line = PROTO_DEFAULT_MAX_LINE};
    size_t n = 0, off = 0, len = strlen(text), used;
    while (off < len && n < max) {
        assert_int_equal(proto_parse(text + off, len - off, &lim, &reqs[n], &used), PROTO_OK);
        off += used;
        n++;
    }
    return n;
}

static void test_create(void **state)
{
    (void)state;
    expect("CREATE f", "CREATED");
    expect("CREATE f", "EXISTS");
    expect("CREATE g capacity=5000 error=0.001 growth=linear scale=3 ratio=0.5", "CREATED");
    struct sbf_params p = params("g");
    assert_int_equal(p.capacity, 5000);
    assert_true(p.error == 0.001 && p.scale == 3 && p.ratio == 0.5);
    assert_int_equal(p.growth, SBF_GROWTH_LINEAR);
    p = params("f");
    assert_int_equal(p.capacity, srv.cfg.default_capacity);
    assert_true(p.error == srv.cfg.default_error);
    expect("CREATE h scale=0.5", "CLIENT_ERROR scale must be between 1 and 64 '0.5'");
    expect("CREATE h scale=65", "CLIENT_ERROR scale must be between 1 and 64 '65'");
    assert_non_null(strstr(run("CREATE h capacity=1099511627777"), "CLIENT_ERROR"));
    assert_false(exists("h"));
    assert_int_equal(registry_count(srv.reg), 2);
}

static void test_create_default_params(void **state)
{
    (void)state;
    srv.cfg.default_capacity = 777;
    srv.cfg.default_error = 0.2;
    expect("CREATE d", "CREATED");
    assert_int_equal(params("d").capacity, 777);
    assert_true(params("d").error == 0.2);
}

static void test_keys(void **state)
{
    (void)state;
    expect("ADD f a", "NOT_FOUND");
    expect("CHECK f a", "NOT_FOUND");
    expect("CHECKADD f a", "NOT_FOUND");
    expect("CREATE f", "CREATED");
    uint64_t c0 = changes("f");
    expect("CHECK f a b", "0 0");
    assert_int_equal(changes("f"), c0); /* reads change nothing */
    expect("ADD f a b c", "ADDED 3");
    assert_true(changes("f") > c0);
    c0 = changes("f");
    expect("ADD f a b", "ADDED 0");
    assert_int_equal(changes("f"), c0); /* nothing new: still clean */
    expect("CHECK f a b c d", "1 1 1 0");
    expect("CHECKADD f d d a e", "0 1 1 0");
    expect("CHECK f d e", "1 1");
    assert_int_equal(st->keys_added, 5);
    assert_int_equal(st->keys_checked, 12);
}

/* Key lists longer than one COMMANDS_BATCH, with a repeat straddling a batch boundary. */
static void test_keys_across_batches(void **state)
{
    (void)state;
    expect("CREATE f capacity=100000", "CREATED");
    int n = COMMANDS_BATCH * 3 + 17;
    char want[64];
    snprintf(want, sizeof(want), "ADDED %d\r\n", n);
    assert_string_equal(run(keys_line("ADD", "f", 0, n)), want);
    const char *r = run(keys_line("CHECK", "f", n - 10, n + 10));
    assert_string_equal(r, "1 1 1 1 1 1 1 1 1 1 0 0 0 0 0 0 0 0 0 0\r\n");

    /* CHECKADD of keys n.. with key n repeated right after the first batch boundary. */
    static char line[1 << 16];
    size_t len = (size_t)snprintf(line, sizeof(line), "CHECKADD f");
    for (int i = 0; i < COMMANDS_BATCH; i++)
        len += (size_t)snprintf(line + len, sizeof(line) - len, " new%d", i);
    len += (size_t)snprintf(line + len, sizeof(line) - len, " new0");
    r = run(line);
    size_t rl = strlen(r);
    assert_int_equal(rl, (COMMANDS_BATCH + 1) * 2 + 1); /* "0 " per key, last "1\r\n" */
    for (int i = 0; i < COMMANDS_BATCH; i++)
        assert_int_equal(r[2 * i], '0');
    assert_string_equal(r + 2 * COMMANDS_BATCH, "1\r\n");
}

static void test_union_intersect(void **state)
{
    (void)state;
    expect("CREATE a", "CREATED");
    expect("CREATE b", "CREATED");
    expect("CREATE small capacity=10", "CREATED");
    expect("ADD a 1 2 3", "ADDED 3");
    expect("ADD b 3 4", "ADDED 2");
    expect("UNION u a b", "OK");
    expect("CHECK u 1 2 3 4 5", "1 1 1 1 0");
    struct filter *u = get("u"), *a = get("a");
    assert_true(sbf_compatible(u->obj, a->obj));
    filter_unref(u);
    filter_unref(a);
    expect("INTERSECT i a b", "OK");
    expect("CHECK i 1 2 3 4", "0 0 1 0");
    expect("CHECK a 4", "0"); /* sources untouched */
    expect("UNION a a b", "OK");
    expect("CHECK a 1 4", "1 1");
    /* Nobody else holds a: intersected in place, the same struct stays in the table. */
    a = get("a");
    const struct filter *before = a;
    uint64_t c = atomic_load(&a->changes);
    filter_unref(a);
    expect("INTERSECT a a b", "OK");
    expect("CHECK a 1 2 3 4", "0 0 1 1");
    a = get("a");
    assert_ptr_equal(a, before);
    assert_true(atomic_load(&a->changes) > c);
    filter_unref(a);
    expect("UNION small a", "CLIENT_ERROR incompatible filters");
    expect("UNION a small", "CLIENT_ERROR incompatible filters");
    expect("INTERSECT x a small", "CLIENT_ERROR incompatible filters");
    assert_false(exists("x"));
    expect("UNION a nope", "NOT_FOUND");
    expect("INTERSECT nope2 a nope", "NOT_FOUND");
    assert_false(exists("nope2"));
}

/* While something (a snapshot) holds a filter, CLEAR and INTERSECT must not touch its bits. */
static void test_copy_on_write_when_shared(void **state)
{
    (void)state;
    expect("CREATE f", "CREATED");
    expect("CREATE g", "CREATED");
    expect("ADD f a b", "ADDED 2");
    expect("ADD g b", "ADDED 1");
    struct filter *held = get("f"); /* our reference: like a snapshot's */
    expect("INTERSECT f g", "OK");
    struct filter *now = get("f");
    assert_ptr_not_equal(now, held);
    filter_unref(now);
    assert_true(sbf_check(held->obj, sbf_hash_key("a", 1))); /* old bits intact */
    assert_int_equal(atomic_load(&held->refs), 1);           /* the table let go of it */
    expect("CHECK f a b", "0 1");
    filter_unref(held);

    held = get("f");
    expect("CLEAR f", "OK");
    now = get("f");
    assert_ptr_not_equal(now, held);
    filter_unref(now);
    assert_true(sbf_check(held->obj, sbf_hash_key("b", 1)));
    assert_false(atomic_load(&held->dropped));
    assert_int_equal(atomic_load(&held->refs), 1);
    expect("CHECK f b", "0");
    filter_unref(held);

    /* Not shared: cleared in place, same object, counter bumped. */
    held = get("f");
    const struct filter *before = held;
    const void *obj = held->obj;
    filter_unref(held); /* the table's reference keeps it */
    expect("ADD f z", "ADDED 1");
    uint64_t c = changes("f");
    expect("CLEAR f", "OK");
    now = get("f");
    assert_ptr_equal(now, before);
    assert_ptr_equal(now->obj, obj);
    assert_true(atomic_load(&now->changes) > c);
    filter_unref(now);
    expect("CHECK f z", "0");
    expect("CLEAR nope", "NOT_FOUND");
}

static void test_drop_while_held(void **state)
{
    (void)state;
    expect("CREATE f", "CREATED");
    expect("ADD f k", "ADDED 1");
    struct filter *held = get("f");
    expect("DROP f", "DELETED");
    assert_false(exists("f"));
    assert_true(atomic_load(&held->dropped));
    assert_int_equal(atomic_load(&held->refs), 1);           /* ours alone */
    assert_true(sbf_check(held->obj, sbf_hash_key("k", 1))); /* still readable */
    expect("DROP f", "NOT_FOUND");
    expect("CREATE f", "CREATED"); /* a new filter of the same name is independent */
    expect("CHECK f k", "0");
    filter_unref(held);
}

static void test_info_list(void **state)
{
    (void)state;
    expect("INFO f", "NOT_FOUND");
    expect("LIST", "END");
    expect("CREATE web-2 capacity=1000", "CREATED");
    expect("CREATE web-10 capacity=1000", "CREATED");
    expect("CREATE api capacity=1000 error=0.05", "CREATED");
    expect("ADD api x y", "ADDED 2");
    const char *r = run("LIST");
    assert_non_null(strstr(r, "FILTER api 2 "));
    assert_true(strstr(r, "FILTER api") < strstr(r, "FILTER web-10"));
    assert_true(strstr(r, "FILTER web-10") < strstr(r, "FILTER web-2"));
    r = run("LIST web");
    assert_null(strstr(r, "api"));
    assert_non_null(strstr(r, "web-10"));
    expect("LIST zz", "END");
    r = run("INFO api");
    static const char *const fields[] = {"name api",           "capacity 1000",   "error 0.05",
                                         "growth exponential", "scale ",          "ratio ",
                                         "stages 1",           "bytes ",          "items 2",
                                         "estimated_items ",   "estimated_error "};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        char want[64];
        snprintf(want, sizeof(want), "STAT %s", fields[i]);
        assert_non_null(strstr(r, want));
    }
    assert_non_null(strstr(r, "\r\nEND\r\n"));
}

static void test_misc(void **state)
{
    (void)state;
    expect("VERSION", "VERSION " BLOOMD_VERSION);
    /* No snapshotter in a unit test: FLUSH must fail, never pretend. */
    assert_int_equal(strncmp(run("FLUSH"), "SERVER_ERROR ", 13), 0);
    int result;
    run_r("QUIT", &result);
    assert_int_equal(result, CMD_DONE);
    assert_int_equal(res.status, RESULT_CLOSE);
    assert_int_equal(out.len, 0);
    expect("CREATE f", "CREATED");
    const char *r = run("STATS");
    assert_non_null(strstr(r, "STAT filters 1\r\n"));
    assert_non_null(strstr(r, "STAT cmd_create 1\r\n"));
    assert_non_null(strstr(r, "STAT memory_bytes "));
    assert_null(strstr(r, "STAT memory_bytes 0\r\n"));
    assert_true(strlen(r) > 5 && strcmp(r + strlen(r) - 5, "END\r\n") == 0);
    assert_string_equal(run("NOPE"), "ERROR unknown command 'NOPE'\r\n");
}

/* With a 256 KiB budget: CREATE and growth fail cleanly, data stays intact. */
static void test_out_of_memory(void **state)
{
    (void)state;
    expect("CREATE big capacity=10000000", "SERVER_ERROR out of memory");
    assert_false(exists("big"));
    expect("CREATE f capacity=1000", "CREATED");
    int added = 0;
    const char *r = "";
    for (int i = 0; i < 400; i++) {
        r = run(keys_line("ADD", "f", i * 1000, i * 1000 + 1000));
        if (strncmp(r, "SERVER_ERROR", 12) == 0)
            break;
        added = i * 1000 + 1000;
    }
    assert_string_equal(r, "SERVER_ERROR out of memory\r\n");
    assert_true(added > 0);
    /* Everything acknowledged is still there. */
    for (int i = 0; i < added; i += 1000) {
        r = run(keys_line("CHECK", "f", i, i + 1000));
        assert_null(strchr(r, '0'));
    }
    /* CHECKADD that needs to grow: the whole reply is the error, no partial bit line. */
    r = run(keys_line("CHECKADD", "f", 1000000, 1000000 + 5000));
    assert_string_equal(r, "SERVER_ERROR out of memory\r\n");
    /* A merged run that needs to grow: every request of it gets the error. */
    struct proto_request reqs[3];
    parse_lines("CHECKADD f n1\nCHECKADD f n2\nCHECKADD f n3\n", reqs, 3);
    proto_buf_reset(&out);
    execute_run(reqs, 3);
    assert_int_equal(out.len, 3 * strlen("SERVER_ERROR out of memory\r\n"));
    assert_memory_equal(out.data, "SERVER_ERROR out of memory\r\nSERVER_ERROR", 40);
    assert_true(budget_used(&srv.budget) <= 256 * 1024);
    expect("DROP f", "DELETED");
    assert_int_equal(budget_part(&srv.budget, BUDGET_FILTERS), 0);
}

/*
 * With a 256 KiB budget: two filters fit, a third copy would not. INTERSECT into one of
 * its own sources that nobody else holds works in place, so it must not need a copy.
 */
static void test_intersect_in_place_fits_budget(void **state)
{
    (void)state;
    expect("CREATE a capacity=55000", "CREATED");
    expect("CREATE b capacity=55000", "CREATED");
    assert_true(budget_used(&srv.budget) * 3 / 2 > srv.budget.limit);
    expect("ADD a 1 2 3", "ADDED 3");
    expect("ADD b 2 3 4", "ADDED 3");
    expect("INTERSECT a a b", "OK");
    expect("CHECK a 1 2 3 4", "0 1 1 0");
    expect("INTERSECT b a b", "OK");
    expect("CHECK b 1 2 3 4", "0 1 1 0");
    expect("INTERSECT c a b", "SERVER_ERROR out of memory"); /* a new filter does not fit */
}

/* A merged run answers byte for byte like the same requests one at a time. */
static void test_run_matches_single(void **state)
{
    (void)state;
    static const char *const runs[] = {
        "CHECKADD a x\nCHECKADD a y\nCHECKADD a x\nCHECKADD a y z x\nCHECKADD a q\n",
        "ADD a x\nADD a x y\nADD a p p p\nADD a x\n",
        "CHECK a x\nCHECK a nope\nCHECK a y z p q r\n",
        "ADD missing k\nADD missing k\n",
    };
    expect("CREATE a capacity=50", "CREATED");
    expect("CREATE b capacity=50", "CREATED");
    static char single[4096], merged[4096];
    for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
        struct proto_request reqs[16];
        size_t n = parse_lines(runs[r], reqs, 16);
        for (size_t i = 0; i < n; i++)
            assert_true(commands_runnable(&reqs[i]) && commands_same_run(&reqs[0], &reqs[i]));
        /* One at a time against filter a ... */
        proto_buf_reset(&out);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(execute(&reqs[i], NULL), CMD_DONE);
        memcpy(single, out.data, out.len);
        single[out.len] = '\0';
        /* ... and merged against filter b, which has seen the same history. */
        for (size_t i = 0; i < n; i++) {
            if (reqs[i].name.len == 1 && reqs[i].name.ptr[0] == 'a')
                reqs[i].name.ptr = "b";
        }
        proto_buf_reset(&out);
        execute_run(reqs, n);
        memcpy(merged, out.data, out.len);
        merged[out.len] = '\0';
        assert_string_equal(merged, single);
    }
    struct proto_request two[2];
    parse_lines("ADD a k\nCHECK a k\n", two, 2);
    assert_false(commands_same_run(&two[0], &two[1]));
    parse_lines("ADD a k\nADD b k\n", two, 2);
    assert_false(commands_same_run(&two[0], &two[1]));
    parse_lines("INFO a\nADD a k\n", two, 2);
    assert_false(commands_runnable(&two[0]));
}

/* Executes the lines of text one request at a time into dst (NUL-terminated). */
static void run_single(const char *text, char *dst, size_t cap)
{
    struct proto_request reqs[16];
    size_t n = parse_lines(text, reqs, 16);
    proto_buf_reset(&out);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(execute(&reqs[i], NULL), CMD_DONE);
    assert_true(out.len < cap);
    memcpy(dst, out.data, out.len);
    dst[out.len] = '\0';
}

/* Executes the lines of text as one merged run into dst (NUL-terminated). */
static void run_merged(const char *text, char *dst, size_t cap)
{
    struct proto_request reqs[16];
    size_t n = parse_lines(text, reqs, 16);
    proto_buf_reset(&out);
    execute_run(reqs, n);
    assert_true(out.len < cap);
    memcpy(dst, out.data, out.len);
    dst[out.len] = '\0';
}

/*
 * A merged run in which growth fails part-way answers like the same requests one at a
 * time: requests before the failing key keep their replies (their keys were stored),
 * the failing one gets the error, and the rest run alone (present keys need no growth).
 */
static void test_run_growth_failure_matches_single(void **state)
{
    (void)state;
    static const char *const cmds[] = {"ADD", "CHECKADD"};
    for (size_t c = 0; c < 2; c++) {
        /* Learn how many keys f takes before it cannot grow any more. */
        expect("CREATE f capacity=1000", "CREATED");
        int fit = 0;
        char line[64];
        for (;; fit++) {
            snprintf(line, sizeof(line), "ADD f k%d", fit);
            if (strncmp(run(line), "SERVER_ERROR", 12) == 0)
                break;
        }
        assert_true(fit > 1000);
        char text[256];
        snprintf(text, sizeof(text), "%s f k%d\n%s f k%d zz\n%s f k0\n%s f k1 k2\n", cmds[c],
                 fit - 1, cmds[c], fit, cmds[c], cmds[c]);
        static char single[1024], merged[1024];
        for (int pass = 0; pass < 2; pass++) {
            /* The same history each time: a fresh f one key short of full. */
            expect("DROP f", "DELETED");
            expect("CREATE f capacity=1000", "CREATED");
            for (int i = 0; i < fit - 1; i += 500) {
                int to = i + 500 < fit - 1 ? i + 500 : fit - 1;
                assert_int_equal(strncmp(run(keys_line("ADD", "f", i, to)), "ADDED", 5), 0);
            }
            if (pass == 0)
                run_single(text, single, sizeof(single));
            else
                run_merged(text, merged, sizeof(merged));
        }
        assert_non_null(strstr(single, "SERVER_ERROR"));
        assert_string_equal(merged, single);
        snprintf(line, sizeof(line), "CHECK f k%d", fit - 1);
        expect(line, "1");
        expect("DROP f", "DELETED");
    }
}

/* ---- FLUSH and DROP answering later, with a snapshotter on a loop of the test's ---- */

static char data_dir[64];
static struct event_base *base;

static int setup_snapshots(void **state)
{
    (void)state;
    snprintf(data_dir, sizeof data_dir, "/tmp/test_commands.XXXXXX");
    assert_non_null(mkdtemp(data_dir));
    start(0);
    snprintf(srv.cfg.data_dir, sizeof srv.cfg.data_dir, "%s", data_dir);
    srv.cfg.snapshot_interval = 0;
    base = event_base_new();
    assert_non_null(base);
    assert_int_equal(jobs_start_lanes(srv.lanes, base, &srv.stopping), 0);
    assert_int_equal(snapshot_start(&srv, base), 0);
    return 0;
}

static int teardown_snapshots(void **state)
{
    char cmd[128];
    teardown(state); /* server_destroy stops the snapshotter, which needs the loop */
    event_base_free(base);
    base = NULL;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", data_dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

/* A completion that records what it was given, formatted as the text protocol would. */
struct later {
    struct completion c; /* first member */
    int calls;
    enum result_status status;
    char reply[512];
};

static void later_done(struct completion *c, const struct result *r)
{
    struct later *l = (struct later *)c;
    struct proto_buf b = {0};
    proto_format_result(&b, r);
    assert_false(b.failed);
    assert_true(b.len < sizeof l->reply);
    memcpy(l->reply, b.data, b.len);
    l->reply[b.len] = '\0';
    proto_buf_free(&b);
    l->status = r->status;
    l->calls++;
    event_base_loopbreak(base);
}

/* Runs line with l as its completion: it must be parked (no reply yet). */
static void submit(const char *line, struct later *l)
{
    int result;
    memset(l, 0, sizeof *l);
    l->c.done = later_done;
    assert_string_equal(run_later(line, &result, &l->c), "");
    assert_int_equal(result, CMD_PENDING);
    assert_int_equal(l->calls, 0); /* never before the command returned */
}

/* Runs the loop until l was answered, once; returns that answer. */
static const char *wait_later(struct later *l)
{
    struct timeval guard = {.tv_sec = 10};
    event_base_loopexit(base, &guard);
    while (l->calls == 0 && event_base_dispatch(base) == 0 && !event_base_got_exit(base))
        ;
    assert_int_equal(l->calls, 1);
    return l->reply;
}

/* Runs line with l as its completion: parked, then answered once by the loop; returns
 * that answer. */
static const char *run_parked(const char *line, struct later *l)
{
    submit(line, l);
    return wait_later(l);
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool file_exists(const char *file)
{
    char path[256];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", data_dir, file);
    return stat(path, &sb) == 0;
}

static void test_flush_drop_later(void **state)
{
    (void)state;
    struct later l;
    int result;
    expect("CREATE f", "CREATED");
    expect("CREATE g", "CREATED");
    expect("ADD f a", "ADDED 1");
    /* FLUSH of one filter, then of all, each answered once its files are durable. */
    assert_string_equal(run_parked("FLUSH f", &l), "OK\r\n");
    assert_int_equal(l.status, RESULT_OK);
    assert_true(file_exists("f.bloom"));
    assert_false(file_exists("g.bloom"));
    assert_int_equal(changes("f"), 0);
    assert_string_equal(run_parked("FLUSH", &l), "OK\r\n");
    assert_true(file_exists("g.bloom"));
    /* Answered at once: a missing filter, and nobody to answer later. */
    assert_string_equal(run_later("FLUSH nope", &result, &l.c), "NOT_FOUND\r\n");
    assert_int_equal(result, CMD_DONE);
    assert_int_equal(strncmp(run("FLUSH"), "SERVER_ERROR ", 13), 0);

    /* DROP leaves the table at once and answers once the file is gone. */
    assert_string_equal(run_parked("DROP f", &l), "DELETED\r\n");
    assert_int_equal(l.status, RESULT_DELETED);
    assert_false(file_exists("f.bloom"));
    expect("DROP f", "NOT_FOUND");
    /* Without a completion: DELETED at once, the file goes in the background (FIFO). */
    expect("DROP g", "DELETED");
    assert_false(exists("g"));
    expect("CREATE h", "CREATED");
    assert_string_equal(run_parked("FLUSH", &l), "OK\r\n");
    assert_false(file_exists("g.bloom"));
    assert_true(file_exists("h.bloom"));

    /* Failures reach the client as SERVER_ERROR with the reason. */
    char moved[96];
    snprintf(moved, sizeof moved, "%s.away", data_dir);
    assert_int_equal(rename(data_dir, moved), 0);
    FILE *blocker = fopen(data_dir, "w"); /* a file where the directory was */
    assert_non_null(blocker);
    fclose(blocker);
    expect("ADD h x", "ADDED 1");
    const char *r = run_parked("FLUSH h", &l);
    assert_int_equal(l.status, RESULT_SERVER_ERROR);
    assert_true(starts_with(r, "SERVER_ERROR open directory "));
    r = run_parked("DROP h", &l);
    assert_true(starts_with(r, "SERVER_ERROR filter dropped from memory, but its file could not "
                               "be removed: open directory "));
    assert_false(exists("h"));
    assert_int_equal(unlink(data_dir), 0);
    assert_int_equal(rename(moved, data_dir), 0);
    assert_true(file_exists("h.bloom")); /* set aside for the next start, as logged */

    /* A data directory deleted meanwhile is created again by the next snapshot. */
    expect("CREATE k", "CREATED");
    expect("ADD k x", "ADDED 1");
    assert_int_equal(rename(data_dir, moved), 0);
    assert_string_equal(run_parked("FLUSH k", &l), "OK\r\n");
    assert_true(file_exists("k.bloom"));
    assert_false(file_exists("h.bloom"));
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mv '%s' '%s'", data_dir, moved, data_dir);
    assert_int_equal(system(cmd), 0);
}

/*
 * UNION/INTERSECT of filters of 1 MiB or more run on the job thread: answered later,
 * while the filters answer; adds to dst meanwhile are kept; a second operation into the
 * same dst waits for the first; a CLEAR of dst or a DROP of a source meanwhile makes the
 * operation start again from the filters as they are.
 */
static void test_setop_background(void **state)
{
    (void)state;
    struct later l, l2;
    expect("CREATE a capacity=1000000", "CREATED"); /* ~1.2 MB each */
    expect("CREATE b capacity=1000000", "CREATED");
    expect("ADD a 1 2 3", "ADDED 3");
    expect("ADD b 3 4", "ADDED 2");
    submit("UNION u a b", &l);
    expect("CHECK a 1 4", "1 0"); /* the sources answer meanwhile */
    expect("CHECK u 1", "NOT_FOUND");
    assert_string_equal(wait_later(&l), "OK\r\n");
    expect("CHECK u 1 2 3 4 5", "1 1 1 1 0");

    expect("CREATE d capacity=1000000", "CREATED");
    expect("ADD d 3 9", "ADDED 2");
    submit("INTERSECT d a b", &l);
    expect("ADD d 7", "ADDED 1"); /* during the job: kept */
    expect("CHECKADD d 9", "1");  /* present before the job, added again: kept too */
    submit("UNION d a", &l2);     /* waits behind the INTERSECT */
    assert_string_equal(wait_later(&l), "OK\r\n");
    expect("CHECK d 3 7 9 4", "1 1 1 0");
    assert_string_equal(wait_later(&l2), "OK\r\n");
    expect("CHECK d 1 2 3 7 9 4", "1 1 1 1 1 0");

    submit("UNION d b", &l);
    expect("CLEAR d", "OK"); /* d is swapped out under the job: it starts again */
    assert_string_equal(wait_later(&l), "OK\r\n");
    expect("CHECK d 3 4 1 7", "1 1 0 0");

    submit("UNION e a b", &l);
    expect("DROP b", "DELETED");
    assert_string_equal(wait_later(&l), "NOT_FOUND\r\n");
    assert_false(exists("e"));
    /* The references the jobs let go of are dropped on the job thread: wait for it. */
    assert_string_equal(run_parked("FLUSH", &l), "OK\r\n");
}

int main(void)
{
    log_open(NULL, LOG_ERROR); /* the expected snapshot failures are logged; the rest is noise */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_default_params, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keys_across_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_union_intersect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_on_write_when_shared, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drop_while_held, setup, teardown),
        cmocka_unit_test_setup_teardown(test_info_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_misc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_matches_single, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_of_memory, setup_small_memory, teardown),
        cmocka_unit_test_setup_teardown(test_run_growth_failure_matches_single, setup_small_memory,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_intersect_in_place_fits_budget, setup_small_memory,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_flush_drop_later, setup_snapshots, teardown_snapshots),
        cmocka_unit_test_setup_teardown(test_setop_background, setup_snapshots, teardown_snapshots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
