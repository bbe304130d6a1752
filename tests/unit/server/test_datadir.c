/*
 * test_datadir.c - datadir_open in one process: creates missing parents, a second open
 * of a locked directory is DATADIR_EBUSY naming our pid (flock locks belong to the open
 * file, so two opens in one process conflict as two daemons would), closing frees it,
 * a stale LOCK file does not block, and a file in the directory's place is DATADIR_EIO.
 */
#include <setjmp.h> /* cmocka needs these first */
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/persist/datadir.h"

static char top[64];
static char err[8192];

static int setup(void **state)
{
    (void)state;
    snprintf(top, sizeof(top), "/tmp/bloomd-test-datadir.XXXXXX");
    return mkdtemp(top) != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_lock(void **state)
{
    (void)state;
    char dir[128], pid[32];
    snprintf(dir, sizeof(dir), "%s/a/b/data", top);
    struct datadir a, b;
    assert_int_equal(datadir_open(&a, dir, false, err, sizeof(err)), DATADIR_OK);
    assert_int_equal(datadir_open(&b, dir, false, err, sizeof(err)), DATADIR_EBUSY);
    snprintf(pid, sizeof(pid), "(pid %ld,", (long)getpid());
    assert_non_null(strstr(err, pid));
    assert_non_null(strstr(err, "in use by another bloomd"));
    datadir_close(&b); /* after a failed open: nothing to do */
    datadir_close(&a);
    datadir_close(&a); /* twice: nothing to do */
    /* The LOCK file stays, with a pid in it; it does not block once unlocked. */
    char lock[160];
    snprintf(lock, sizeof(lock), "%s/LOCK", dir);
    assert_int_equal(access(lock, F_OK), 0);
    assert_int_equal(datadir_open(&b, dir, false, err, sizeof(err)), DATADIR_OK);
    datadir_close(&b);
}

static void test_not_a_directory(void **state)
{
    (void)state;
    char file[128];
    snprintf(file, sizeof(file), "%s/file", top);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    struct datadir d;
    assert_int_equal(datadir_open(&d, file, false, err, sizeof(err)), DATADIR_EIO);
    assert_non_null(strstr(err, "Not a directory"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_a_directory, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
