/*
 * test_commands.c - command execution without sockets: a request line is parsed with
 * proto, executed against a real server struct (registry, budget, stats) and the reply
 * bytes compared. Covers every command, every error, the batch boundaries of the key
 * commands, and the copy-on-write paths taken while a snapshot holds a filter.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/sbf.h"
#include "proto/proto.h"
#include "server/commands.h"
#include "server/config.h"
#include "server/registry.h"
#include "server/server.h"

static struct server srv;
static struct proto_buf out;
static char reply[1 << 20];

static int setup(void **state)
{
    (void)state;
    struct config cfg;
    config_defaults(&cfg);
    assert_int_equal(server_init(&srv, &cfg), SERVER_OK);
    memset(&out, 0, sizeof(out));
    return 0;
}

static int setup_small_memory(void **state)
{
    (void)state;
    struct config cfg;
    config_defaults(&cfg);
    cfg.max_memory = 256 * 1024;
    assert_int_equal(server_init(&srv, &cfg), SERVER_OK);
    memset(&out, 0, sizeof(out));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    server_destroy(&srv);
    proto_buf_free(&out);
    assert_int_equal(budget_used(&srv.budget), 0);
    return 0;
}

/* Parses and executes one line; returns the reply (NUL-terminated) and sets *result. */
static const char *run_r(const char *line, int *result)
{
    struct proto_limits lim = {.max_line = PROTO_DEFAULT_MAX_LINE};
    struct proto_request req;
    size_t used;
    size_t len = strlen(line);
    char *buf = malloc(len + 2);
    assert_non_null(buf);
    memcpy(buf, line, len);
    memcpy(buf + len, "\r\n", 2);
    int st = proto_parse(buf, len + 2, &lim, &req, &used);
    proto_buf_reset(&out);
    if (st == PROTO_OK) {
        *result = commands_execute(&srv, &req, &out, NULL);
    } else {
        proto_reply_parse_error(&out, st, &req);
        *result = st;
    }
    free(buf);
    assert_false(out.failed);
    assert_true(out.len < sizeof(reply));
    memcpy(reply, out.data, out.len);
    reply[out.len] = '\0';
    return reply;
}

static const char *run(const char *line)
{
    int result;
    const char *r = run_r(line, &result);
    assert_true(result == CMD_DONE || result < 0);
    return r;
}

#define expect(line, want) assert_string_equal(run(line), want "\r\n")

static struct filter *get(const char *name)
{
    return registry_get(srv.reg, name, strlen(name));
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
    const struct sbf_params *p = sbf_params(get("g")->sbf);
    assert_int_equal(p->capacity, 5000);
    assert_true(p->error == 0.001 && p->scale == 3 && p->ratio == 0.5);
    assert_int_equal(p->growth, SBF_GROWTH_LINEAR);
    p = sbf_params(get("f")->sbf);
    assert_int_equal(p->capacity, srv.cfg.default_capacity);
    assert_true(p->error == srv.cfg.default_error);
    expect("CREATE h scale=0.5", "CLIENT_ERROR scale must be between 1 and 64");
    expect("CREATE h scale=65", "CLIENT_ERROR scale must be between 1 and 64");
    assert_non_null(strstr(run("CREATE h capacity=1099511627777"), "CLIENT_ERROR"));
    assert_null(get("h"));
    assert_int_equal(registry_count(srv.reg), 2);
}

static void test_create_default_params(void **state)
{
    (void)state;
    srv.cfg.default_capacity = 777;
    srv.cfg.default_error = 0.2;
    expect("CREATE d", "CREATED");
    assert_int_equal(sbf_params(get("d")->sbf)->capacity, 777);
    assert_true(sbf_params(get("d")->sbf)->error == 0.2);
}

static void test_keys(void **state)
{
    (void)state;
    expect("ADD f a", "NOT_FOUND");
    expect("CHECK f a", "NOT_FOUND");
    expect("CHECKADD f a", "NOT_FOUND");
    expect("CREATE f", "CREATED");
    uint64_t c0 = atomic_load(&get("f")->changes);
    expect("CHECK f a b", "0 0");
    assert_int_equal(atomic_load(&get("f")->changes), c0); /* reads change nothing */
    expect("ADD f a b c", "ADDED 3");
    assert_true(atomic_load(&get("f")->changes) > c0);
    c0 = atomic_load(&get("f")->changes);
    expect("ADD f a b", "ADDED 0");
    assert_int_equal(atomic_load(&get("f")->changes), c0); /* nothing new: still clean */
    expect("CHECK f a b c d", "1 1 1 0");
    expect("CHECKADD f d d a e", "0 1 1 0");
    expect("CHECK f d e", "1 1");
    assert_int_equal(srv.stats.keys_added, 5);
    assert_int_equal(srv.stats.keys_checked, 12);
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
    assert_true(sbf_compatible(get("u")->sbf, get("a")->sbf));
    expect("INTERSECT i a b", "OK");
    expect("CHECK i 1 2 3 4", "0 0 1 0");
    expect("CHECK a 4", "0"); /* sources untouched */
    expect("UNION a a b", "OK");
    expect("CHECK a 1 4", "1 1");
    expect("INTERSECT a a b", "OK");
    expect("CHECK a 1 2 3 4", "0 0 1 1");
    expect("UNION small a", "CLIENT_ERROR incompatible filters");
    expect("UNION a small", "CLIENT_ERROR incompatible filters");
    expect("INTERSECT x a small", "CLIENT_ERROR incompatible filters");
    assert_null(get("x"));
    expect("UNION a nope", "NOT_FOUND");
    expect("INTERSECT nope2 a nope", "NOT_FOUND");
    assert_null(get("nope2"));
}

/* While something (a snapshot) holds a filter, CLEAR and INTERSECT must not touch its bits. */
static void test_copy_on_write_when_shared(void **state)
{
    (void)state;
    expect("CREATE f", "CREATED");
    expect("CREATE g", "CREATED");
    expect("ADD f a b", "ADDED 2");
    expect("ADD g b", "ADDED 1");
    struct filter *held = get("f");
    filter_ref(held);
    expect("INTERSECT f g", "OK");
    assert_ptr_not_equal(get("f"), held);
    assert_true(sbf_check(held->sbf, sbf_hash_key("a", 1))); /* old bits intact */
    expect("CHECK f a b", "0 1");
    filter_unref(held);

    held = get("f");
    filter_ref(held);
    expect("CLEAR f", "OK");
    assert_ptr_not_equal(get("f"), held);
    assert_true(sbf_check(held->sbf, sbf_hash_key("b", 1)));
    assert_false(atomic_load(&held->dropped));
    expect("CHECK f b", "0");
    filter_unref(held);

    /* Not shared: cleared in place, same object, counter bumped. */
    held = get("f");
    expect("ADD f z", "ADDED 1");
    uint64_t c = atomic_load(&held->changes);
    expect("CLEAR f", "OK");
    assert_ptr_equal(get("f"), held);
    assert_true(atomic_load(&held->changes) > c);
    expect("CHECK f z", "0");
    expect("CLEAR nope", "NOT_FOUND");
}

static void test_drop_while_held(void **state)
{
    (void)state;
    expect("CREATE f", "CREATED");
    expect("ADD f k", "ADDED 1");
    struct filter *held = get("f");
    filter_ref(held);
    expect("DROP f", "DELETED");
    assert_null(get("f"));
    assert_true(atomic_load(&held->dropped));
    assert_true(sbf_check(held->sbf, sbf_hash_key("k", 1))); /* still readable */
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
    assert_int_equal(result, CMD_CLOSE);
    assert_int_equal(out.len, 0);
    expect("CREATE f", "CREATED");
    const char *r = run("STATS");
    assert_non_null(strstr(r, "STAT filters 1\r\n"));
    assert_non_null(strstr(r, "STAT cmd_create 1\r\n"));
    assert_non_null(strstr(r, "STAT memory_bytes "));
    assert_null(strstr(r, "STAT memory_bytes 0\r\n"));
    assert_true(strlen(r) > 5 && strcmp(r + strlen(r) - 5, "END\r\n") == 0);
    assert_string_equal(run("NOPE"), "ERROR\r\n");
}

/* With a 256 KiB budget: CREATE and growth fail cleanly, data stays intact. */
static void test_out_of_memory(void **state)
{
    (void)state;
    expect("CREATE big capacity=10000000", "SERVER_ERROR out of memory");
    assert_null(get("big"));
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
    commands_execute_run(&srv, reqs, 3, &out);
    assert_int_equal(out.len, 3 * strlen("SERVER_ERROR out of memory\r\n"));
    assert_memory_equal(out.data, "SERVER_ERROR out of memory\r\nSERVER_ERROR", 40);
    assert_true(budget_used(&srv.budget) <= 256 * 1024);
    expect("DROP f", "DELETED");
    assert_int_equal(budget_used(&srv.budget), 0);
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
            assert_int_equal(commands_execute(&srv, &reqs[i], &out, NULL), CMD_DONE);
        memcpy(single, out.data, out.len);
        single[out.len] = '\0';
        /* ... and merged against filter b, which has seen the same history. */
        for (size_t i = 0; i < n; i++) {
            if (reqs[i].name.len == 1 && reqs[i].name.ptr[0] == 'a')
                reqs[i].name.ptr = "b";
        }
        proto_buf_reset(&out);
        commands_execute_run(&srv, reqs, n, &out);
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
        assert_int_equal(commands_execute(&srv, &reqs[i], &out, NULL), CMD_DONE);
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
    commands_execute_run(&srv, reqs, n, &out);
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

int main(void)
{
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
