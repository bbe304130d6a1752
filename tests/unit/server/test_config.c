/*
 * test_config.c - configuration sources and validation: defaults, INI file, BLOOMD_*
 * environment and flags in increasing precedence; size suffixes; every bad value
 * rejected with a message naming the option; bloomd.conf.example matches the defaults.
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

#include "server/core/config.h"
#include "server/core/log.h"

static char err[2048];

#define ARGV(...) ((char *[]){"bloomd", __VA_ARGS__, NULL})

static int load(int argc, char **argv, struct config *c, enum config_action *a)
{
    return config_load(c, argc, argv, a, err, sizeof(err));
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void clear_env(void)
{
    static const char *const vars[] = {"BLOOMD_CONFIG", "BLOOMD_PORT", "BLOOMD_MAX_MEMORY",
                                       "BLOOMD_BIND", "BLOOMD_IDLE_TIMEOUT"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
}

static void test_defaults(void **state)
{
    (void)state;
    clear_env();
    struct config c;
    enum config_action a;
    char *argv[] = {"bloomd", NULL};
    assert_int_equal(load(1, argv, &c, &a), CONFIG_OK);
    assert_int_equal(a, CONFIG_RUN);
    assert_int_equal(c.port, 8673);
    assert_string_equal(c.bind, "127.0.0.1");
    assert_string_equal(c.data_dir, "./data");
    assert_int_equal(c.snapshot_interval, 60);
    assert_int_equal(c.max_connections, 1024);
    assert_int_equal(c.max_line, 1 << 20);
    assert_int_equal(c.max_memory, 0);
    assert_int_equal(c.idle_timeout, 0);
    assert_int_equal(c.log_level, LOG_INFO);
    assert_string_equal(c.log_file, "");
}

static void test_flags_both_forms(void **state)
{
    (void)state;
    clear_env();
    struct config c;
    enum config_action a;
    char *argv[] = {"bloomd",
                    "--port",
                    "0",
                    "--bind=0.0.0.0",
                    "--data-dir",
                    "/tmp/x",
                    "--max-memory",
                    "2G",
                    "--max-line=64K",
                    "--log-level",
                    "debug",
                    "--max_output",
                    "1M",
                    NULL};
    assert_int_equal(load(13, argv, &c, &a), CONFIG_OK);
    assert_int_equal(c.port, 0);
    assert_string_equal(c.bind, "0.0.0.0");
    assert_string_equal(c.data_dir, "/tmp/x");
    assert_int_equal(c.max_memory, UINT64_C(2) << 30);
    assert_int_equal(c.max_line, 64 << 10);
    assert_int_equal(c.max_output, 1 << 20);
    assert_int_equal(c.log_level, LOG_DEBUG);
}

/* Counts take proto_parse_count's forms (powers of 1000); sizes keep binary suffixes. */
static void test_count_forms(void **state)
{
    (void)state;
    clear_env();
    static const struct {
        const char *in;
        uint64_t want;
    } cases[] = {{"1000000", 1000000}, {"1e6", 1000000}, {"1M", 1000000},
                 {"2.5k", 2500},       {"10K", 10000},   {"1G", 1000000000}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct config c;
        enum config_action a;
        char **argv = ARGV("--default-capacity", (char *)cases[i].in, "--max-memory", "1M");
        assert_int_equal(load(5, argv, &c, &a), CONFIG_OK);
        assert_true(c.default_capacity == cases[i].want);
        assert_true(c.max_memory == UINT64_C(1) << 20);
    }
    setenv("BLOOMD_DEFAULT_CAPACITY", "5e5", 1);
    struct config c;
    enum config_action a;
    char *v[] = {"bloomd", NULL};
    assert_int_equal(load(1, v, &c, &a), CONFIG_OK);
    assert_true(c.default_capacity == 500000);
    static const char *const bad[] = {"1.5", "1e-3", "1m", "1Mi", "-1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("BLOOMD_DEFAULT_CAPACITY", bad[i], 1);
        assert_int_equal(load(1, v, &c, &a), CONFIG_EINVAL);
        assert_non_null(strstr(err, "BLOOMD_DEFAULT_CAPACITY"));
    }
    unsetenv("BLOOMD_DEFAULT_CAPACITY");
}

static void test_actions(void **state)
{
    (void)state;
    clear_env();
    struct config c;
    enum config_action a;
    char **v1 = ARGV("--version");
    assert_int_equal(load(2, v1, &c, &a), CONFIG_OK);
    assert_int_equal(a, CONFIG_VERSION);
    char **v2 = ARGV("--port", "9", "--help");
    assert_int_equal(load(4, v2, &c, &a), CONFIG_OK);
    assert_int_equal(a, CONFIG_HELP);
    char **v3 = ARGV("--ping", "--port", "9");
    assert_int_equal(load(4, v3, &c, &a), CONFIG_OK);
    assert_int_equal(a, CONFIG_PING);
    assert_int_equal(c.port, 9);
    assert_non_null(strstr(config_usage(), "--max-memory"));
    assert_non_null(strstr(config_usage(), "--snapshot-interval"));
    assert_non_null(strstr(config_usage(), "[default: 4M]"));   /* max_output */
    assert_non_null(strstr(config_usage(), "[default: 8673]")); /* port */
    assert_non_null(strstr(config_usage(), "[default: 0.01]")); /* default_error */
}

static void test_precedence(void **state)
{
    (void)state;
    clear_env();
    const char *path = "build/test_config_precedence.conf";
    write_file(path, "; comment\n[bloomd]\nport = 1111\nmax_memory = 1M\nbind = 10.0.0.1\n"
                     "idle_timeout = 5\n");
    struct config c;
    enum config_action a;

    char **v1 = ARGV("--config", (char *)path);
    assert_int_equal(load(3, v1, &c, &a), CONFIG_OK);
    assert_int_equal(c.port, 1111);
    assert_int_equal(c.max_memory, 1 << 20);
    assert_string_equal(c.bind, "10.0.0.1");

    setenv("BLOOMD_PORT", "2222", 1);
    setenv("BLOOMD_MAX_MEMORY", "3M", 1);
    assert_int_equal(load(3, v1, &c, &a), CONFIG_OK);
    assert_int_equal(c.port, 2222);          /* env over file */
    assert_int_equal(c.max_memory, 3 << 20); /* env over file */
    assert_string_equal(c.bind, "10.0.0.1"); /* file over default */

    char **v2 = ARGV("--port", "3333");
    setenv("BLOOMD_CONFIG", path, 1);
    assert_int_equal(load(3, v2, &c, &a), CONFIG_OK);
    assert_int_equal(c.port, 3333);          /* flag over env */
    assert_int_equal(c.max_memory, 3 << 20); /* env */
    assert_int_equal(c.idle_timeout, 5);     /* file named by BLOOMD_CONFIG */
    clear_env();
    remove(path);
}

/* Each bad input fails and the message names the option. */
static void test_bad_values(void **state)
{
    (void)state;
    clear_env();
    static const char *const cases[][3] = {
        {"--port", "65536", "port"},
        {"--port", "-1", "port"},
        {"--port", "", "port"},
        {"--port", "8o", "port"},
        {"--max-memory", "1X", "max_memory"},
        {"--max-memory", "99999999999T", "max_memory"},
        {"--max-line", "10", "max_line"},
        {"--max-connections", "0", "max_connections"},
        {"--log-level", "chatty", "log_level"},
        {"--default-error", "1", "default_error"},
        {"--default-error", "nan", "default_error"},
        {"--default-error", "1e-300", "default_error"}, /* in (0, 1), but no filter can have it */
        {"--default-capacity", "0", "default_capacity"},
        {"--bind", "", "bind"},
        {"--data-dir", "", "data_dir"},
        {"--colour", "red", "--colour"},
        {"--auth-token", "x", "cannot be a flag"},
        {"--auth_token", "x", "cannot be a flag"},
        {"--auth-token-file", "/nonexistent/tok", "auth token file"},
        {"--tls-port", "8675", "tls_cert_file"},
        {"--protected-mode=maybe", "", "protected_mode"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct config c;
        enum config_action a;
        char *argv[] = {"bloomd", (char *)cases[i][0], (char *)cases[i][1], NULL};
        assert_int_equal(load(3, argv, &c, &a), CONFIG_EINVAL);
        if (strstr(err, cases[i][2]) == NULL)
            fail_msg("case %zu: '%s' does not name %s", i, err, cases[i][2]);
    }
    struct config c;
    enum config_action a;
    char **v1 = ARGV("--port");
    assert_int_equal(load(2, v1, &c, &a), CONFIG_EINVAL);
    assert_non_null(strstr(err, "--port"));
    char **v2 = ARGV("stray");
    assert_int_equal(load(2, v2, &c, &a), CONFIG_EINVAL);
    assert_non_null(strstr(err, "stray"));
    setenv("BLOOMD_IDLE_TIMEOUT", "soon", 1);
    char *v3[] = {"bloomd", NULL};
    assert_int_equal(load(1, v3, &c, &a), CONFIG_EINVAL);
    assert_non_null(strstr(err, "BLOOMD_IDLE_TIMEOUT"));
    clear_env();
}

static void test_bad_files(void **state)
{
    (void)state;
    clear_env();
    const char *path = "build/test_config_bad.conf";
    static const char *const cases[][2] = {
        {"[bloomd]\nport = 1\nmax_line = huge\n", "line 3"},
        {"[server]\nport = 1\n", "server"},
        {"volume = 11\n", "volume"},
        {"config = other.conf\n", "config"},
        {"port\n", "line 1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_file(path, cases[i][0]);
        struct config c;
        enum config_action a;
        char *argv[] = {"bloomd", "--config", (char *)path, NULL};
        assert_int_equal(load(3, argv, &c, &a), CONFIG_EINVAL);
        if (strstr(err, cases[i][1]) == NULL)
            fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i][1]);
    }
    remove(path);
    struct config c;
    enum config_action a;
    char **v = ARGV("--config", "build/no/such/file.conf");
    assert_int_equal(load(3, v, &c, &a), CONFIG_EINVAL);
    assert_non_null(strstr(err, "build/no/such/file.conf"));
}

/* What the INI reader would mishandle is refused with the line, or the kind of file. */
static void test_refused_files(void **state)
{
    (void)state;
    clear_env();
    const char *path = "build/test_config_refused.conf";
    char long_line[400];
    memset(long_line, 'x', sizeof long_line);
    memcpy(long_line, "[bloomd]\nlog_file = /", 21);
    memcpy(long_line + 21 + 200, "\n", 2);
    static const char *const cases[][2] = {
        {"[bloomd]\nport = 1\nport = 2\n", "duplicate key 'port'"},
        {"port = 1\n[bloomd]\nport = 2\n", "duplicate key 'port'"}, /* same namespace */
        {"[filter a*]\ncapacity = 1\ncapacity = 2\n", "duplicate key 'capacity'"},
        {NULL, "line 2 is longer than 199 bytes"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_file(path, cases[i][0] != NULL ? cases[i][0] : long_line);
        struct config c;
        enum config_action a;
        char *argv[] = {"bloomd", "--config", (char *)path, NULL};
        assert_int_equal(load(3, argv, &c, &a), CONFIG_EINVAL);
        if (strstr(err, cases[i][1]) == NULL)
            fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i][1]);
    }
    /* A NUL inside a value. */
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite("[bloomd]\nbind = 127.0.0.1\0junk\n", 1, 32, f);
    assert_int_equal(fclose(f), 0);
    struct config c;
    enum config_action a;
    char *argv[] = {"bloomd", "--config", (char *)path, NULL};
    assert_int_equal(load(3, argv, &c, &a), CONFIG_EINVAL);
    assert_non_null(strstr(err, "line 2 holds a NUL byte"));
    /* Keys in different templates, and a line of exactly the limit, are fine. */
    char ok[300];
    int n = snprintf(ok, sizeof ok,
                     "[filter a*]\ncapacity = 1\n[filter b*]\ncapacity = 2\n"
                     "[bloomd]\nlog_file = /");
    memset(ok + n, 'y', (size_t)(199 - 12));
    snprintf(ok + n + 199 - 12, sizeof ok - (size_t)n - 187, "\n");
    write_file(path, ok);
    if (load(3, argv, &c, &a) != CONFIG_OK)
        fail_msg("%s", err);
    assert_int_equal(strlen(c.log_file), 199 - 11);
    remove(path);
    /* Not regular files: a character device that never ends, a directory. */
    char *dev[] = {"bloomd", "--config", "/dev/zero", NULL};
    assert_int_equal(load(3, dev, &c, &a), CONFIG_EINVAL);
    assert_non_null(strstr(err, "not a regular file"));
    char *dir[] = {"bloomd", "--config", "build", NULL};
    assert_int_equal(load(3, dir, &c, &a), CONFIG_EINVAL);
    assert_non_null(strstr(err, "is a directory"));
}

static void test_unknown_env_warned(void **state)
{
    (void)state;
    clear_env();
    setenv("BLOOMD_MAX_MEMROY", "1G", 1);
    setenv("BLOOMD_PORT", "99", 1);
    setenv("BLOOMD_FROBNICATE", "1", 1);
    struct config c;
    enum config_action a;
    assert_int_equal(load(1, ARGV(NULL), &c, &a), CONFIG_OK);
    assert_int_equal(c.port, 99);
    /* One line each (the order is the environment's), the near one with a hint. */
    assert_non_null(strstr(c.warnings, "unknown environment variable BLOOMD_MAX_MEMROY (no such "
                                       "option, ignored); did you mean BLOOMD_MAX_MEMORY?"));
    const char *frob = strstr(c.warnings, "unknown environment variable BLOOMD_FROBNICATE");
    assert_non_null(frob);
    assert_true(frob[strcspn(frob, "\n;")] != ';'); /* nothing near it */
    assert_non_null(strchr(c.warnings, '\n'));
    assert_null(strchr(strchr(c.warnings, '\n') + 1, '\n'));
    assert_null(strstr(c.warnings, "BLOOMD_PORT"));
    unsetenv("BLOOMD_MAX_MEMROY");
    unsetenv("BLOOMD_FROBNICATE");
    clear_env();
    assert_int_equal(load(1, ARGV(NULL), &c, &a), CONFIG_OK);
    assert_string_equal(c.warnings, "");
    /* A yes/no flag alone means yes; with a yes/no word it takes it. */
    char **v = ARGV("--allow-readonly-data-dir", "--port", "5");
    assert_int_equal(load(4, v, &c, &a), CONFIG_OK);
    assert_int_equal(c.allow_readonly_data_dir, 1);
    assert_int_equal(c.port, 5);
    v = ARGV("--allow-readonly-data-dir", "no");
    assert_int_equal(load(3, v, &c, &a), CONFIG_OK);
    assert_int_equal(c.allow_readonly_data_dir, 0);
}

/* The shipped example documents the real defaults: loading it changes nothing. */
/* The token comes from the environment, the config file or a file, never a flag. */
static void test_token_sources(void **state)
{
    (void)state;
    clear_env();
    struct config c;
    enum config_action a;
    setenv("BLOOMD_AUTH_TOKEN", "from env", 1);
    assert_int_equal(load(1, (char *[]){"bloomd", NULL}, &c, &a), CONFIG_OK);
    assert_string_equal(c.auth_token, "from env");
    write_file("/tmp/bloomd-test-token", "from file\n");
    char **v = ARGV("--auth-token-file", "/tmp/bloomd-test-token");
    assert_int_equal(load(3, v, &c, &a), CONFIG_OK);
    assert_string_equal(c.auth_token, "from file"); /* the file wins over the environment */
    setenv("BLOOMD_AUTH_TOKEN", "a\rb", 1);
    assert_int_equal(load(1, (char *[]){"bloomd", NULL}, &c, &a), CONFIG_EINVAL);
    unsetenv("BLOOMD_AUTH_TOKEN");
    write_file("/tmp/bloomd-test-token.ini", "auth_token = in ini\nprotected_mode = no\n");
    v = ARGV("--config", "/tmp/bloomd-test-token.ini");
    assert_int_equal(load(3, v, &c, &a), CONFIG_OK);
    assert_string_equal(c.auth_token, "in ini");
    assert_int_equal(c.protected_mode, 0);
    unlink("/tmp/bloomd-test-token");
    unlink("/tmp/bloomd-test-token.ini");
}

static void test_example_matches_defaults(void **state)
{
    (void)state;
    clear_env();
    struct config def, c;
    enum config_action a;
    config_defaults(&def);
    char **v = ARGV("--config", "bloomd.conf.example");
    assert_int_equal(load(3, v, &c, &a), CONFIG_OK);
    memset(c.config, 0, sizeof(c.config));
    assert_memory_equal(&c, &def, sizeof(c));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),           cmocka_unit_test(test_flags_both_forms),
        cmocka_unit_test(test_count_forms),        cmocka_unit_test(test_actions),
        cmocka_unit_test(test_precedence),         cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_bad_files),          cmocka_unit_test(test_example_matches_defaults),
        cmocka_unit_test(test_token_sources),      cmocka_unit_test(test_refused_files),
        cmocka_unit_test(test_unknown_env_warned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
