/*
 * test_kinds.c - the filter-kind seam: a dummy kind (an exact set, registered only
 * here) is created, filled, queried, listed, cleared and refused for UNION through
 * server/commands, then snapshotted through the real job thread and loaded back by
 * server/recover, with no change to conn, commands' dispatch, snapshot or snapfile.
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

#include "lib/kind.h"
#include "proto/proto.h"
#include "server/core/clock.h"
#include "server/core/config.h"
#include "server/core/park.h"
#include "server/core/server.h"
#include "server/exec/commands.h"
#include "server/exec/recover.h"
#include "server/exec/stats.h"
#include "server/lifecycle.h"
#include "server/persist/snapshot.h"
#include "server/store/kinds.h"
#include "server/store/registry.h"

/* ---- the dummy kind: an exact set of hash.lo values ---- */

struct dummy {
    uint64_t *v;
    size_t n, cap;
};

static const unsigned char dummy_magic[8] = {'D', 'U', 'M', 'M', 'Y', 'K', 'N', 'D'};

static int d_create(const struct kind_params *p, const struct sbf_budget *b, void **out)
{
    (void)p;
    (void)b;
    *out = calloc(1, sizeof(struct dummy));
    return *out != NULL ? SBF_OK : SBF_ENOMEM;
}

static int d_create_like(const void *src, const struct sbf_budget *b, void **out)
{
    (void)src;
    return d_create(NULL, b, out);
}

static void d_free(void *f)
{
    struct dummy *d = f;
    if (d != NULL)
        free(d->v);
    free(d);
}

static bool has(const struct dummy *d, uint64_t x)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->v[i] == x)
            return true;
    return false;
}

static int put(struct dummy *d, uint64_t x)
{
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 8;
        uint64_t *v = realloc(d->v, cap * sizeof *v);
        if (v == NULL)
            return SBF_ENOMEM;
        d->v = v;
        d->cap = cap;
    }
    d->v[d->n++] = x;
    return SBF_OK;
}

static void d_check_batch(const void *f, const struct sbf_hash *h, size_t n, bool *present)
{
    for (size_t i = 0; i < n; i++)
        present[i] = has(f, h[i].lo);
}

static int d_checkadd_batch(void *f, const struct sbf_hash *h, size_t n, bool *present)
{
    for (size_t i = 0; i < n; i++) {
        present[i] = has(f, h[i].lo);
        if (!present[i] && put(f, h[i].lo) != SBF_OK)
            return SBF_ENOMEM;
    }
    return SBF_OK;
}

static int d_add_batch(void *f, const struct sbf_hash *h, size_t n, size_t *added)
{
    *added = 0;
    for (size_t i = 0; i < n; i++) {
        if (has(f, h[i].lo))
            continue;
        if (put(f, h[i].lo) != SBF_OK)
            return SBF_ENOMEM;
        ++*added;
    }
    return SBF_OK;
}

static void d_clear(void *f)
{
    ((struct dummy *)f)->n = 0;
}

static bool d_compatible(const void *a, const void *b)
{
    (void)a;
    (void)b;
    return true;
}

static bool d_grown(const void *f)
{
    (void)f;
    return false;
}

static void d_info(const void *f, struct kind_info *out)
{
    const struct dummy *d = f;
    *out = (struct kind_info){
        .bytes = d->cap * 8, .items = d->n, .capacity = d->n, .error = 0, .est_error = 0};
}

static void d_fields(const void *f, const struct sbf_estimate *est, kind_field_fn fn, void *ctx)
{
    (void)est;
    fn(ctx, "members", KIND_FIELD_U64, ((const struct dummy *)f)->n, 0, NULL);
}

static int d_verify(const void *f)
{
    const struct dummy *d = f;
    return d->n <= d->cap ? SBF_OK : SBF_ECORRUPT;
}

static int d_encode(const void *f, sbf_write_fn write, void *ctx)
{
    const struct dummy *d = f;
    uint64_t n = d->n;
    if (write(ctx, dummy_magic, 8) != 0 || write(ctx, &n, 8) != 0 ||
        (n > 0 && write(ctx, d->v, 8 * n) != 0))
        return SBF_EIO;
    return SBF_OK;
}

static uint64_t d_encoded_size(const void *f)
{
    return 16 + 8 * ((const struct dummy *)f)->n;
}

static int d_decode(sbf_read_fn read, void *ctx, uint64_t max_bytes, const struct sbf_budget *b,
                    void **out)
{
    unsigned char magic[8];
    uint64_t n;
    if (read(ctx, magic, 8) != 8 || memcmp(magic, dummy_magic, 8) != 0 || read(ctx, &n, 8) != 8)
        return SBF_ECORRUPT;
    if (n > max_bytes / 8)
        return SBF_ETOOBIG;
    struct dummy *d;
    if (d_create(NULL, b, (void **)&d) != SBF_OK)
        return SBF_ENOMEM;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t x;
        if (read(ctx, &x, 8) != 8 || put(d, x) != SBF_OK) {
            d_free(d);
            return SBF_EIO;
        }
    }
    *out = d;
    return SBF_OK;
}

static const struct kind_ops kind_dummy = {
    .name = "dummy",
    .tag = 0x7e57,
    .create = d_create,
    .create_like = d_create_like,
    .free = d_free,
    .check_batch = d_check_batch,
    .add_batch = d_add_batch,
    .checkadd_batch = d_checkadd_batch,
    .clear = d_clear,
    .compatible = d_compatible,
    .grown = d_grown,
    .info = d_info,
    .fields = d_fields,
    .verify = d_verify,
    .encode = d_encode,
    .encoded_size = d_encoded_size,
    .decode = d_decode,
};

/* ---- driving it through the server ---- */

static char dir[64];
static struct server srv;
static struct stats st;
static struct result res;
static struct proto_buf out;
static char text[4096];

struct waiter {
    struct completion cpl;
    bool done;
    enum result_status st;
};

static void waiter_done(struct completion *c, const struct result *r)
{
    struct waiter *w = (struct waiter *)c;
    w->done = true;
    w->st = r->status;
}

static void start(void)
{
    struct config cfg;
    config_defaults(&cfg);
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", dir);
    cfg.snapshot_interval = 0;
    assert_int_equal(server_init(&srv, &cfg), SERVER_OK);
    assert_int_equal(recover_load(&srv), 0);
    memset(&st, 0, sizeof st);
}

/* Executes a line (or req when given) and returns the text protocol's reply. */
static const char *exec(const char *line, struct completion *later, int *rc)
{
    struct proto_request req;
    size_t used;
    char buf[512];
    snprintf(buf, sizeof buf, "%s\r\n", line);
    assert_int_equal(proto_parse(buf, strlen(buf), NULL, &req, &used), PROTO_OK);
    result_reset(&res);
    int r = commands_execute(&srv, &st, &req, &res, later);
    if (rc != NULL)
        *rc = r;
    proto_buf_reset(&out);
    proto_format_result(&out, &res);
    assert_true(out.len < sizeof text);
    memcpy(text, out.data, out.len);
    text[out.len] = '\0';
    return text;
}

static const char *run(const char *line)
{
    int rc;
    const char *t = exec(line, NULL, &rc);
    assert_int_equal(rc, CMD_DONE);
    return t;
}

static void create_dummy(const char *name)
{
    struct proto_request req = {.cmd = PROTO_CMD_CREATE,
                                .name = {name, strlen(name)},
                                .create = {.set = PROTO_OPT_KIND, .kind = {"dummy", 5}}};
    result_reset(&res);
    assert_int_equal(commands_execute(&srv, &st, &req, &res, NULL), CMD_DONE);
    assert_int_equal(res.status, RESULT_CREATED);
}

static void test_dummy_kind_end_to_end(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test_kinds.XXXXXX");
    assert_non_null(mkdtemp(dir));
    result_init(&res);
    assert_int_equal(kinds_register(&kind_dummy), 0);
    assert_int_equal(kinds_register(&kind_dummy), -1); /* name and tag are taken */
    assert_ptr_equal(kinds_by_tag(0x7e57), &kind_dummy);
    assert_non_null(strstr(kinds_names(), "dummy"));
    start();

    create_dummy("d");
    assert_string_equal(run("ADD d a b c a"), "ADDED 3\r\n");
    assert_string_equal(run("CHECK d a x c"), "1 0 1\r\n");
    assert_string_equal(run("CHECKADD d x a"), "0 1\r\n");
    assert_string_equal(run("INFO d"),
                        "STAT name d\r\nSTAT members 4\r\nSTAT snapshot_time 0\r\nEND\r\n");
    assert_string_equal(run("LIST"), "FILTER d 4 64 4 0\r\nEND\r\n");
    assert_string_equal(run("CREATE plain"), "CREATED\r\n");
    assert_string_equal(run("UNION plain d"), "CLIENT_ERROR not supported by this filter kind\r\n");
    assert_string_equal(run("UNION d plain"), "CLIENT_ERROR incompatible filters\r\n");
    assert_string_equal(run("CHECK plain a"), "0\r\n");

    /* Snapshot through the real job thread, then load into a fresh server. */
    struct event_base *base = event_base_new();
    assert_non_null(base);
    assert_int_equal(jobs_start_lanes(srv.lanes, base, &srv.stopping), 0);
    assert_int_equal(snapshot_start(&srv, base), 0);
    struct waiter w = {.cpl.done = waiter_done};
    int rc;
    exec("FLUSH", &w.cpl, &rc);
    assert_int_equal(rc, CMD_PENDING);
    uint64_t end = clock_mono_ms() + 5000;
    while (!w.done && clock_mono_ms() < end)
        event_base_loop(base, EVLOOP_ONCE);
    assert_true(w.done);
    assert_int_equal(w.st, RESULT_OK);
    server_destroy(&srv);
    event_base_free(base);

    start();
    struct filter *f = registry_get(srv.reg, "d", 1);
    assert_non_null(f);
    assert_ptr_equal(f->ops, &kind_dummy);
    filter_unref(f);
    assert_string_equal(run("CHECK d a b c x y"), "1 1 1 1 0\r\n");
    assert_string_equal(run("CLEAR d"), "OK\r\n");
    assert_string_equal(run("CHECK d a"), "0\r\n");
    server_destroy(&srv);

    result_free(&res);
    proto_buf_free(&out);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dummy_kind_end_to_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
