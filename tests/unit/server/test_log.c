/*
 * test_log.c - the log's one table of level names: log_level_name and log_level_parse
 * round-trip every level (any case, "warning" too), unknown names are refused, and text
 * and json lines name the level from the same table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/core/log.h"

static const enum log_level levels[] = {LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR};
static const char *const names[] = {"debug", "info", "warn", "error"};
#define NLEVELS (sizeof(levels) / sizeof(levels[0]))

static void test_names_round_trip(void **state)
{
    (void)state;
    for (size_t i = 0; i < NLEVELS; i++) {
        assert_string_equal(log_level_name(levels[i]), names[i]);
        assert_int_equal(log_level_parse(names[i]), levels[i]);
        char upper[16];
        size_t n = strlen(names[i]);
        for (size_t j = 0; j <= n; j++)
            upper[j] = (char)(names[i][j] >= 'a' ? names[i][j] - 'a' + 'A' : names[i][j]);
        assert_int_equal(log_level_parse(upper), levels[i]);
    }
    assert_int_equal(log_level_parse("warning"), LOG_WARN);
    assert_int_equal(log_level_parse("Warning"), LOG_WARN);
    assert_int_equal(log_level_parse(""), -1);
    assert_int_equal(log_level_parse("chatty"), -1);
    assert_int_equal(log_level_parse("inf"), -1);
    assert_int_equal(log_level_parse("errors"), -1);
}

/* Logs one line per level into a fresh file in format fmt and returns the file (caller
 * frees). */
static char *log_every_level(enum log_format fmt)
{
    char path[] = "/tmp/test_log.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    log_set_format(fmt);
    assert_int_equal(log_open(path, LOG_DEBUG), 0);
    for (size_t i = 0; i < NLEVELS; i++)
        log_msg(levels[i], "line %zu", i);
    log_close();
    log_set_format(LOG_FORMAT_TEXT);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    static char buf[4096];
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    unlink(path);
    return strdup(buf);
}

static void test_lines_name_the_level(void **state)
{
    (void)state;
    char *text = log_every_level(LOG_FORMAT_TEXT);
    char *json = log_every_level(LOG_FORMAT_JSON);
    const char *t = text, *j = json;
    for (size_t i = 0; i < NLEVELS; i++) {
        char want[64];
        /* "<ts> INFO line 1" */
        snprintf(want, sizeof want, " %s line %zu\n", names[i], i);
        for (char *c = want + 1; *c != ' '; c++)
            *c = (char)(*c - 'a' + 'A');
        t = strstr(t, want);
        assert_non_null(t);
        snprintf(want, sizeof want, "\"level\":\"%s\",\"msg\":\"line %zu\"", names[i], i);
        j = strstr(j, want);
        assert_non_null(j);
    }
    free(text);
    free(json);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_round_trip),
        cmocka_unit_test(test_lines_name_the_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
