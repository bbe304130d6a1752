/*
 * test_stats.c - the one table of figures (core/stat.h) and what is rendered from it:
 * names unique in STATS and in memcached's stats, Prometheus families well formed
 * (adjacent rows, one kind and help each, counters ending in _total), every row filled
 * by its source, STATS in the table's order with memcached's aliases; and INFO's
 * estimates: counted inline (exact) for a small filter, never for a big one without a
 * cached count.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>

#include "lib/kind.h"
#include "proto/proto.h"
#include "server/core/config.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/core/stat.h"
#include "server/exec/commands.h"
#include "server/exec/stats.h"
#include "server/lifecycle.h"
#include "server/store/figures.h"
#include "server/store/registry.h"

static struct server srv;
static struct stats counters;
static struct result res;

static int setup(void **state)
{
    (void)state;
    struct config cfg;
    config_defaults(&cfg);
    cfg.max_memory = 256u << 20;
    assert_int_equal(server_init(&srv, &cfg), SERVER_OK);
    memset(&counters, 0, sizeof counters);
    srv.counters = &counters;
    result_init(&res);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    srv.counters = NULL;
    server_destroy(&srv);
    result_free(&res);
    return 0;
}

/* Parses and executes one request line (without its CRLF) into res. */
static void exec_line(const char *line)
{
    char buf[512];
    size_t len = (size_t)snprintf(buf, sizeof buf, "%s\r\n", line);
    struct proto_limits lim = {.max_line = PROTO_DEFAULT_MAX_LINE};
    struct proto_request req;
    size_t used;
    assert_int_equal(proto_parse(buf, len, &lim, &req, &used), PROTO_OK);
    result_reset(&res);
    assert_int_equal(commands_execute(&srv, &counters, &req, &res, NULL), CMD_DONE);
}

static const struct result_field *field(const char *name)
{
    for (size_t i = 0; i < res.nfields; i++)
        if (strcmp(res.fields[i].name, name) == 0)
            return &res.fields[i];
    return NULL;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

static void test_table(void **state)
{
    (void)state;
    for (int i = 0; i < STAT_COUNT; i++) {
        const struct stat_def *d = &stat_defs[i];
        assert_non_null(d->name);
        assert_non_null(d->help);
        const char *shown = d->mc != NULL ? d->mc : d->name;
        for (int j = i + 1; j < STAT_COUNT; j++) {
            const struct stat_def *o = &stat_defs[j];
            assert_string_not_equal(d->name, o->name);
            assert_string_not_equal(shown, o->mc != NULL ? o->mc : o->name);
            /* A family's rows are adjacent and agree on kind and help. */
            if (d->family != NULL && o->family != NULL && strcmp(d->family, o->family) == 0) {
                for (int k = i; k <= j; k++)
                    assert_true(stat_defs[k].family != NULL &&
                                strcmp(stat_defs[k].family, d->family) == 0);
                assert_int_equal(d->prom, o->prom);
                assert_string_equal(d->help, o->help);
                assert_non_null(d->label); /* samples of one family differ by label */
            }
        }
        switch (d->prom) {
        case STAT_PROM_NONE:
            assert_null(d->family);
            break;
        case STAT_PROM_COUNTER:
            assert_true(ends_with(d->family, "_total"));
            assert_int_equal(d->type, STAT_U64);
            break;
        case STAT_PROM_GAUGE:
            assert_false(ends_with(d->family, "_total"));
            assert_int_equal(d->type, STAT_U64);
            break;
        case STAT_PROM_INFO:
            assert_true(ends_with(d->family, "_info"));
            assert_int_equal(d->type, STAT_STR);
            assert_non_null(d->label);
            break;
        }
        if (d->family != NULL)
            assert_int_equal(strncmp(d->family, "bloomd_", 7), 0);
        assert_true(d->scale > 0);
    }
    assert_string_equal(stat_defs[STAT_CMD_CREATE].name, "cmd_create");
    assert_string_equal(stat_defs[STAT_CMD_DELETE].name, "cmd_delete");
}

static void test_gather_and_stats(void **state)
{
    (void)state;
    counters.keys_checked = 7;
    counters.cmd[PROTO_CMD_CHECKADD] = 3;
    exec_line("CREATE f capacity=1000");
    struct stat_values v;
    stats_gather(&srv, &v);
    for (int i = 0; i < STAT_COUNT; i++) {
        assert_true(v.v[i].set); /* its source filled it */
        if (stat_defs[i].type == STAT_STR)
            assert_non_null(v.v[i].s);
    }
    assert_int_equal(v.v[STAT_KEYS_CHECKED].u, 7);
    assert_int_equal(v.v[STAT_CMD_CHECKADD].u, 3);
    assert_int_equal(v.v[STAT_FILTERS].u, 1);
    assert_string_equal(v.v[STAT_DURABILITY].s, "everysec");

    /* STATS: every row in order under its name, memcached's as the alias. */
    exec_line("STATS");
    assert_int_equal(res.status, RESULT_FIELDS);
    assert_int_equal(res.nfields, STAT_COUNT);
    for (int i = 0; i < STAT_COUNT; i++) {
        assert_string_equal(res.fields[i].name, stat_defs[i].name);
        if (stat_defs[i].mc != NULL)
            assert_string_equal(res.fields[i].alias, stat_defs[i].mc);
        else
            assert_null(res.fields[i].alias);
    }
    assert_int_equal(field("cmd_create")->u, 1);
    assert_string_equal(field("keys_checked")->alias, "cmd_get");
    assert_string_equal(field("version")->str, BLOOMD_VERSION);
}

static double dfield(const char *name)
{
    const struct result_field *f = field(name);
    assert_non_null(f);
    assert_int_equal(f->type, RESULT_DOUBLE);
    return f->d;
}

static void test_info_estimates(void **state)
{
    (void)state;
    /* Small: counted inline, exactly the kind's estimate, age 0. */
    exec_line("CREATE small capacity=1000");
    exec_line("ADD small a b c d e f g");
    exec_line("INFO small");
    struct filter *f = registry_get(srv.reg, "small", 5);
    assert_non_null(f);
    struct sbf_estimate est;
    f->ops->estimate(f->obj, &est);
    assert_true(dfield("estimated_items") == est.items);
    assert_true(dfield("estimated_error") == est.error);
    assert_true(est.items > 6 && est.items < 8);
    assert_int_equal(field("estimated_age_ms")->u, 0);
    assert_int_equal(field("items")->u, 7);
    assert_string_equal(res.fields[res.nfields - 1].name, "estimated_age_ms");
    filter_unref(f);

    /* Over FIGURES_INLINE_BYTES, no cached count (no figures in a unit test): the
     * estimates are NaN, never a pass over the bits on the loop. */
    exec_line("CREATE big capacity=4000000 error=0.001");
    exec_line("ADD big a b c");
    exec_line("INFO big");
    assert_true(field("bytes")->u > FIGURES_INLINE_BYTES);
    assert_int_equal(field("items")->u, 3);
    assert_true(isnan(dfield("estimated_items")));
    assert_true(isnan(dfield("estimated_error")));
    assert_null(field("estimated_age_ms"));

    /* A kind without popcount estimates shows its own figures and no age. */
    exec_line("CREATE ex kind=expandable capacity=1000");
    exec_line("INFO ex");
    assert_non_null(field("estimated_error"));
    assert_false(isnan(dfield("estimated_error")));
    assert_null(field("estimated_age_ms"));
    /* ... and the pages get that rate without a count (figures_of, no cache). */
    f = registry_get(srv.reg, "ex", 2);
    assert_non_null(f);
    struct figures_row row;
    figures_of(NULL, f, false, &row);
    assert_true(row.has_estimate);
    assert_true(row.est.error == dfield("estimated_error"));
    filter_unref(f);
    /* A blocked filter's without a count: nothing to show yet. */
    f = registry_get(srv.reg, "big", 3);
    figures_of(NULL, f, false, &row);
    assert_false(row.has_estimate);
    assert_false(row.counted);
    assert_int_equal(row.nparts, 1);
    assert_true(row.bits > 0);
    filter_unref(f);
}

int main(void)
{
    log_open(NULL, LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test_setup_teardown(test_gather_and_stats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_info_estimates, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
