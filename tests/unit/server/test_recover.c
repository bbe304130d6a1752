/*
 * test_recover.c - start-up loading of files written by earlier releases: the v2
 * snapshots in tests/fixtures/v2/ (written by bloomd 0.1.0) load, answer CHECK for the
 * keys they were given, and are rewritten in the v3 container by the next snapshot.
 */
#include <setjmp.h> /* cmocka needs these first */
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/sbf.h"
#include "proto/proto.h"
#include "server/core/config.h"
#include "server/core/server.h"
#include "server/exec/commands.h"
#include "server/exec/recover.h"
#include "server/exec/stats.h"
#include "server/lifecycle.h"
#include "server/persist/snapshot.h"
#include "server/store/registry.h"

#define FIXTURES "tests/fixtures/v2"

static char dir[64];
static struct server srv;
static struct stats st;
static struct result res;

static void start(void)
{
    struct config cfg;
    config_defaults(&cfg);
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", dir);
    cfg.snapshot_interval = 0;
    assert_int_equal(server_init(&srv, &cfg), SERVER_OK);
    assert_int_equal(recover_load(&srv), 0);
}

/* Runs CHECK name <keys prefix 0..n-1> and returns how many were present. */
static size_t present(const char *name, const char *prefix, int from, int to)
{
    static char line[1 << 16];
    size_t len = (size_t)snprintf(line, sizeof line, "CHECK %s", name);
    for (int i = from; i < to; i++)
        len += (size_t)snprintf(line + len, sizeof line - len, " %s%d", prefix, i);
    len += (size_t)snprintf(line + len, sizeof line - len, "\r\n");
    struct proto_request req;
    size_t used;
    assert_int_equal(proto_parse(line, len, NULL, &req, &used), PROTO_OK);
    result_reset(&res);
    assert_int_equal(commands_execute(&srv, &st, &req, &res, NULL), CMD_DONE);
    assert_int_equal(res.status, RESULT_BITS);
    size_t k = 0;
    for (size_t i = 0; i < res.nbits; i++)
        k += res.bits[i];
    return k;
}

static void head(const char *file, unsigned char *out8)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(out8, 1, 8, f), 8);
    fclose(f);
}

static void test_v2_fixtures_load_and_are_rewritten(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test_recover.XXXXXX");
    assert_non_null(mkdtemp(dir));
    char cmd[256];
    snprintf(cmd, sizeof cmd, "cp " FIXTURES "/*.bloom %s/", dir);
    assert_int_equal(system(cmd), 0);
    result_init(&res);
    start();
    assert_int_equal(registry_count(srv.reg), 3);

    /* Every key added by 0.1.0 is there; keys never added mostly are not. */
    assert_int_equal(present("v2plain", "key", 0, 500), 500);
    assert_true(present("v2plain", "other", 0, 500) < 25); /* 1% promised: 5 expected */
    assert_int_equal(present("v2grown", "g", 0, 400), 400);
    assert_true(present("v2grown", "x", 0, 400) < 10); /* 0.1% promised */
    assert_int_equal(present("v2empty", "key", 0, 500), 0);
    struct filter *f = registry_get(srv.reg, "v2grown", 7);
    assert_non_null(f);
    const struct sbf_params *p = sbf_params(f->obj);
    assert_int_equal(p->capacity, 100);
    assert_int_equal(p->growth, SBF_GROWTH_LINEAR);
    assert_int_equal(sbf_verify(f->obj), 0);
    filter_unref(f);

    unsigned char h[8];
    head("v2plain.bloom", h);
    assert_memory_equal(h, "BLOOMSBF", 8);
    /* The next snapshot (here: the final one at stop) rewrites old files as v3. */
    struct event_base *base = event_base_new();
    assert_non_null(base);
    assert_int_equal(jobs_start_lanes(srv.lanes, base, &srv.stopping), 0);
    assert_int_equal(snapshot_start(&srv, base), 0);
    assert_int_equal(snapshot_stop(&srv), 0);
    static const char *const files[] = {"v2plain.bloom", "v2grown.bloom", "v2empty.bloom"};
    for (size_t i = 0; i < 3; i++) {
        head(files[i], h);
        assert_memory_equal(h, "BLOOMD\0\0", 8);
    }
    server_destroy(&srv);
    event_base_free(base);

    /* And the v3 files load with the same content, clean this time. */
    start();
    assert_int_equal(present("v2plain", "key", 0, 500), 500);
    assert_int_equal(present("v2grown", "g", 0, 400), 400);
    f = registry_get(srv.reg, "v2plain", 7);
    assert_int_equal(atomic_load(&f->changes), 0);
    filter_unref(f);
    server_destroy(&srv);

    result_free(&res);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v2_fixtures_load_and_are_rewritten),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
