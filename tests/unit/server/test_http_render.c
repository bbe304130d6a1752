/*
 * test_http_render.c - the HTTP pages' bodies and the input of the shared renderings
 * (server/http/render.h, http_pages.h): a body is counted in the budget's connection
 * part from its making to its last reference and refused (nothing taken) when it does
 * not fit; the filters a rendering collected stay referenced, so one dropped meanwhile
 * still renders and is freed with the gathering; the rendering reads only its input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <event2/buffer.h>

#include "proto/proto.h"
#include "server/core/budget.h"
#include "server/core/config.h"
#include "server/core/server.h"
#include "server/exec/commands.h"
#include "server/exec/stats.h"
#include "server/http/http_pages.h"
#include "server/http/render.h"
#include "server/lifecycle.h"
#include "server/store/registry.h"

static struct server srv;
static struct stats counters;
static struct result res;

static int setup(void **state)
{
    (void)state;
    struct config cfg;
    config_defaults(&cfg);
    cfg.max_memory = 64u << 20;
    assert_int_equal(server_init(&srv, &cfg), SERVER_OK);
    memset(&counters, 0, sizeof counters);
    srv.counters = &counters;
    srv.phase = SERVER_READY;
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

static void test_body_counted_until_last_reference(void **state)
{
    (void)state;
    struct budget b;
    budget_init(&b, 4096);
    struct evbuffer *src = evbuffer_new();
    assert_non_null(src);
    char bytes[1000];
    memset(bytes, 'x', sizeof bytes);
    evbuffer_add(src, bytes, sizeof bytes);
    struct http_body *body = http_body_new(&b, 200, "text/plain", src);
    assert_non_null(body);
    assert_int_equal(evbuffer_get_length(src), 0);
    assert_int_equal(body->len, sizeof bytes);
    assert_memory_equal(body->data, bytes, sizeof bytes);
    uint64_t cost = sizeof *body + sizeof bytes;
    assert_int_equal(budget_part(&b, BUDGET_CONNECTIONS), cost);
    atomic_fetch_add(&body->refs, 1); /* a request holds it too */
    http_body_unref(body);
    assert_int_equal(budget_part(&b, BUDGET_CONNECTIONS), cost);
    http_body_unref(body);
    assert_int_equal(budget_used(&b), 0);

    /* Too big for what is left: refused, nothing taken, the source drained. */
    char big[5000];
    memset(big, 'y', sizeof big);
    evbuffer_add(src, big, sizeof big);
    assert_null(http_body_new(&b, 200, "text/plain", src));
    assert_int_equal(budget_used(&b), 0);
    assert_int_equal(evbuffer_get_length(src), 0);
    http_body_unref(NULL);
    evbuffer_free(src);
}

static void test_gathering_outlives_a_drop(void **state)
{
    (void)state;
    exec_line("CREATE alpha capacity=1000");
    exec_line("CREATE beta capacity=1000");
    exec_line("ADD beta k1 k2 k3");
    uint64_t before = budget_part(&srv.budget, BUDGET_CONNECTIONS);
    struct page_input in;
    assert_int_equal(page_input_gather(&in, &srv, true), 0);
    assert_int_equal(in.n, 0); /* the filters are taken by the rendering's thread */
    assert_int_equal(page_input_collect(&in), 0);
    assert_int_equal(in.n, 2);
    exec_line("DROP beta");
    assert_int_equal(registry_count(srv.reg), 1);

    struct evbuffer *out = evbuffer_new();
    assert_int_equal(metrics_render(&in, out), 200);
    size_t len = evbuffer_get_length(out);
    char *text = malloc(len + 1);
    assert_non_null(text);
    evbuffer_remove(out, text, len);
    text[len] = '\0';
    /* Rendered from the gathering: beta as it was, with its 3 keys. */
    assert_non_null(strstr(text, "bloomd_filter_items{filter=\"beta\"} 3\n"));
    assert_non_null(strstr(text, "bloomd_filter_items{filter=\"alpha\"} 0\n"));
    assert_non_null(strstr(text, "bloomd_filters 2\n"));
    assert_non_null(strstr(text, "bloomd_items 3\n")); /* summed by page_input_collect */
    free(text);

    assert_int_equal(api_filters(&in, out), 200);
    len = evbuffer_get_length(out);
    text = malloc(len + 1);
    assert_non_null(text);
    evbuffer_remove(out, text, len);
    text[len] = '\0';
    assert_non_null(strstr(text, "\"name\":\"beta\""));
    free(text);
    evbuffer_free(out);

    page_input_destroy(&in);
    page_input_destroy(&in); /* twice is harmless */
    assert_int_equal(budget_part(&srv.budget, BUDGET_CONNECTIONS), before);
}

static void test_gathering_while_starting_shows_no_filter(void **state)
{
    (void)state;
    exec_line("CREATE gamma capacity=1000");
    srv.phase = SERVER_STARTING;
    struct page_input in;
    assert_int_equal(page_input_gather(&in, &srv, false), 0);
    assert_int_equal(page_input_collect(&in), 0);
    assert_int_equal(in.n, 0);
    struct evbuffer *out = evbuffer_new();
    assert_int_equal(metrics_render(&in, out), 200);
    struct evbuffer_ptr p = evbuffer_search(out, "gamma", 5, NULL);
    assert_true(p.pos < 0);
    p = evbuffer_search(out, "bloomd_ready 0\n", 15, NULL);
    assert_true(p.pos >= 0);
    evbuffer_free(out);
    page_input_destroy(&in);
    srv.phase = SERVER_READY;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_body_counted_until_last_reference),
        cmocka_unit_test_setup_teardown(test_gathering_outlives_a_drop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gathering_while_starting_shows_no_filter, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
