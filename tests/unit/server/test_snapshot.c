/*
 * test_snapshot.c - unit tests of the snapshot thread (server/persist/snapshot.c) with a real
 * event loop and registry but no sockets: dirty tracking, FIFO order of writes and
 * deletes, the quick lane (removals and small FLUSHes never behind a long write; a
 * removal before a newer write of the same name; replaced filters not written), failures that keep
 * the filter dirty and are retried, failed deletes reported to the caller, the final snapshot at
 * stop, and loading it back clean (recover.c). The test owns the event loop the job thread hands
 * its answers to, as a worker would.
 */
#include <setjmp.h> /* cmocka needs these first */
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/kind.h"
#include "lib/sbf.h"
#include "server/core/config.h"
#include "server/core/jobs.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/exec/recover.h"
#include "server/lifecycle.h"
#include "server/persist/snapshot.h"
#include "server/store/registry.h"

struct fixture {
    char dir[64];
    struct server srv;
    struct event_base *base; /* the loop the snapshotter answers on; outlives srv */
    int calls;               /* done callbacks seen */
    int last_err;            /* of the last one */
    char last_why[256];
};

static void start(struct fixture *fx)
{
    struct config cfg;
    config_defaults(&cfg);
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", fx->dir);
    cfg.snapshot_interval = 0;
    assert_int_equal(server_init(&fx->srv, &cfg), SERVER_OK);
    if (fx->base == NULL)
        fx->base = event_base_new();
    assert_non_null(fx->base);
    assert_int_equal(recover_load(&fx->srv), 0);
    assert_int_equal(jobs_start_lanes(fx->srv.lanes, fx->base, &fx->srv.stopping), 0);
    assert_int_equal(snapshot_start(&fx->srv, fx->base), 0);
    assert_non_null(fx->srv.snap);
}

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/test_snapshot.XXXXXX");
    assert_non_null(mkdtemp(fx->dir));
    start(fx);
    *state = fx;
    return 0;
}

static void remove_files(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    server_destroy(&fx->srv); /* stops the snapshotter, which still needs the loop */
    event_base_free(fx->base);
    remove_files(fx->dir);
    free(fx);
    return 0;
}

static void on_done(void *arg, int err, const char *why)
{
    struct fixture *fx = arg;
    fx->calls++;
    fx->last_err = err;
    snprintf(fx->last_why, sizeof fx->last_why, "%s", why);
    event_base_loopbreak(fx->base);
}

/* Runs the loop until `calls` done callbacks were seen in all (10 s guard). */
static void wait_for(struct fixture *fx, int calls)
{
    struct timeval guard = {.tv_sec = 10};
    event_base_loopexit(fx->base, &guard);
    while (fx->calls < calls && event_base_dispatch(fx->base) == 0 &&
           !event_base_got_exit(fx->base))
        ;
    assert_int_equal(fx->calls, calls);
}

/* FLUSH f (NULL: all) and waits for its answer; returns its error. */
static int flush(struct fixture *fx, struct filter *f)
{
    assert_int_equal(snapshot_flush(fx->srv.snap, f, on_done, fx), 0);
    wait_for(fx, fx->calls + 1);
    return fx->last_err;
}

static struct sbf_hash hash_of(const char *prefix, int i)
{
    char key[32];
    int n = snprintf(key, sizeof key, "%s%d", prefix, i);
    return sbf_hash_key(key, (size_t)n);
}

/* Creates and registers a filter with keys prefix0..prefix(n-1); borrowed from the table
 * (valid while it is there). */
static struct filter *make(struct fixture *fx, const char *name, const char *prefix, int n)
{
    struct sbf_params p;
    struct sbf *s;
    sbf_params_default(&p);
    p.capacity = 1000;
    assert_int_equal(sbf_new(&p, &fx->srv.budget.sbf, &s), 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(sbf_add(s, hash_of(prefix, i), NULL), 0);
    struct filter *f = filter_new(name, strlen(name), &kind_sbf, s);
    assert_non_null(f);
    assert_int_equal(registry_put(fx->srv.reg, f), REGISTRY_OK);
    filter_unref(f);
    return f;
}

static void add(struct filter *f, const char *prefix, int n)
{
    for (int i = 0; i < n; i++)
        assert_int_equal(sbf_add(f->obj, hash_of(prefix, i), NULL), 0);
    filter_touch(f);
}

static bool exists(const struct fixture *fx, const char *file)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", fx->dir, file);
    return stat(path, &st) == 0;
}

static struct snapshot_stats stats(struct fixture *fx)
{
    struct snapshot_stats st;
    snapshot_get_stats(fx->srv.snap, &st);
    return st;
}

static void test_dirty_filters_written_once(void **state)
{
    struct fixture *fx = *state;
    struct filter *a = make(fx, "a", "a", 100);
    make(fx, "b", "b", 10);
    assert_int_equal(flush(fx, NULL), 0);
    assert_true(exists(fx, "a.bloom"));
    assert_true(exists(fx, "b.bloom"));
    struct snapshot_stats st = stats(fx);
    assert_int_equal(st.written, 2);
    assert_int_equal(st.failures, 0);
    assert_true(st.last_time > 0);
    assert_true(st.last_bytes > 0);
    assert_int_equal(atomic_load(&a->changes), 0);
    assert_true(atomic_load(&a->saved_at) > 0);
    /* Nothing changed: nothing written. */
    assert_int_equal(flush(fx, NULL), 0);
    assert_int_equal(stats(fx).written, 2);
    /* One changed: only it is written, also by a FLUSH of just that filter. */
    add(a, "more", 10);
    assert_int_equal(flush(fx, a), 0);
    assert_int_equal(stats(fx).written, 3);
    assert_int_equal(flush(fx, NULL), 0);
    assert_int_equal(stats(fx).written, 3);
}

static void test_drop_deletes_after_queued_writes(void **state)
{
    struct fixture *fx = *state;
    struct filter *d = make(fx, "doomed", "d", 100);
    assert_int_equal(flush(fx, NULL), 0);
    assert_true(exists(fx, "doomed.bloom"));
    add(d, "e", 10);
    /* A write holding the object is queued first, then the DROP: the file must go. */
    int before = fx->calls;
    assert_int_equal(snapshot_flush(fx->srv.snap, d, on_done, fx), 0);
    assert_true(registry_remove(fx->srv.reg, "doomed", 6));
    assert_int_equal(snapshot_forget(fx->srv.snap, "doomed", 6, NULL, NULL), 0);
    assert_int_equal(snapshot_flush(fx->srv.snap, NULL, on_done, fx), 0);
    wait_for(fx, before + 2);
    assert_int_equal(fx->last_err, 0);
    assert_false(exists(fx, "doomed.bloom"));
    assert_false(exists(fx, "doomed.bloom.tmp"));
    /* With a callback (DROP's answer): called once done; a file already gone is fine. */
    assert_int_equal(snapshot_forget(fx->srv.snap, "doomed", 6, on_done, fx), 0);
    wait_for(fx, before + 3);
    assert_int_equal(fx->last_err, 0);
}

/* A regular file where the data directory was: every snapshot step there fails. */
static void block_dir(struct fixture *fx)
{
    FILE *f = fopen(fx->dir, "w");
    assert_non_null(f);
    assert_int_equal(fclose(f), 0);
}

static void test_failed_delete_is_reported(void **state)
{
    struct fixture *fx = *state;
    make(fx, "stuck", "s", 100);
    assert_int_equal(flush(fx, NULL), 0);
    assert_true(registry_remove(fx->srv.reg, "stuck", 5));
    char moved[80];
    snprintf(moved, sizeof moved, "%s.away", fx->dir);
    assert_int_equal(rename(fx->dir, moved), 0);
    block_dir(fx); /* a missing directory would be fine: nothing to remove */
    int before = fx->calls;
    assert_int_equal(snapshot_forget(fx->srv.snap, "stuck", 5, on_done, fx), 0);
    wait_for(fx, before + 1);
    assert_int_equal(unlink(fx->dir), 0);
    assert_int_equal(rename(moved, fx->dir), 0);
    assert_int_equal(fx->last_err, SNAPSHOT_EIO);
    assert_non_null(strstr(fx->last_why, "open directory "));
    assert_int_equal(stats(fx).failures, 1);
    assert_true(exists(fx, "stuck.bloom"));
}

static void test_failure_keeps_dirty_and_retries(void **state)
{
    struct fixture *fx = *state;
    struct filter *f = make(fx, "f", "f", 100);
    char moved[80];
    snprintf(moved, sizeof moved, "%s.away", fx->dir);
    assert_int_equal(rename(fx->dir, moved), 0);
    block_dir(fx); /* a missing directory would be created again */
    assert_int_equal(flush(fx, NULL), SNAPSHOT_EIO);
    assert_non_null(strstr(fx->last_why, "open directory "));
    assert_non_null(strstr(fx->last_why, "Not a directory"));
    assert_int_equal(stats(fx).failures, 1);
    assert_int_equal(stats(fx).written, 0);
    assert_int_not_equal(atomic_load(&f->changes), 0);
    assert_int_equal(unlink(fx->dir), 0);
    assert_int_equal(rename(moved, fx->dir), 0);
    assert_int_equal(flush(fx, NULL), 0);
    assert_int_equal(stats(fx).written, 1);
    assert_true(exists(fx, "f.bloom"));
}

static void test_stop_writes_and_load_restores(void **state)
{
    struct fixture *fx = *state;
    make(fx, "kept", "k", 500);
    struct filter *g = make(fx, "grown", "g", 100);
    assert_int_equal(flush(fx, NULL), 0);
    add(g, "h", 3000); /* dirty at stop */
    assert_int_equal(snapshot_stop(&fx->srv), 0);
    assert_null(fx->srv.snap);
    server_destroy(&fx->srv);

    start(fx);
    assert_int_equal(registry_count(fx->srv.reg), 2);
    struct filter *k = registry_get(fx->srv.reg, "kept", 4);
    g = registry_get(fx->srv.reg, "grown", 5);
    assert_non_null(k);
    assert_non_null(g);
    assert_ptr_equal(k->ops, &kind_sbf);
    assert_ptr_equal(g->ops, &kind_sbf);
    for (int i = 0; i < 500; i++)
        assert_true(sbf_check(k->obj, hash_of("k", i)));
    for (int i = 0; i < 3000; i++)
        assert_true(sbf_check(g->obj, hash_of("h", i)));
    /* Loaded means clean, with the file's time. */
    assert_int_equal(atomic_load(&g->changes), 0);
    assert_int_equal(atomic_load(&k->changes), 0);
    assert_true(atomic_load(&g->saved_at) > 0);
    filter_unref(k);
    filter_unref(g);
    assert_int_equal(flush(fx, NULL), 0);
    assert_int_equal(stats(fx).written, 0);
}

/* Stopping with FLUSH and DROP answers owed: the work is done and durable, the callbacks
 * (whose connections are gone by then) are not called, nothing leaks. */
static void test_stop_with_answers_pending(void **state)
{
    struct fixture *fx = *state;
    struct filter *f = make(fx, "flushed", "f", 100);
    make(fx, "dropped", "d", 100);
    assert_int_equal(flush(fx, NULL), 0);
    add(f, "g", 100);
    int before = fx->calls;
    assert_int_equal(snapshot_flush(fx->srv.snap, f, on_done, fx), 0);
    assert_true(registry_remove(fx->srv.reg, "dropped", 7));
    assert_int_equal(snapshot_forget(fx->srv.snap, "dropped", 7, on_done, fx), 0);
    assert_int_equal(snapshot_stop(&fx->srv), 0);
    assert_int_equal(fx->calls, before);
    assert_false(exists(fx, "dropped.bloom"));
    server_destroy(&fx->srv);

    start(fx);
    assert_int_equal(registry_count(fx->srv.reg), 1);
    f = registry_get(fx->srv.reg, "flushed", 7);
    assert_non_null(f);
    for (int i = 0; i < 100; i++)
        assert_true(sbf_check(f->obj, hash_of("g", i)));
    filter_unref(f);
}

/* A job that holds the long lane until released: what a long write of a big filter does. */
struct blocker {
    struct job job;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool go;
};

static void blocker_run(struct job *j)
{
    struct blocker *b = (struct blocker *)j;
    pthread_mutex_lock(&b->lock);
    while (!b->go)
        pthread_cond_wait(&b->cond, &b->lock);
    pthread_mutex_unlock(&b->lock);
}

static void blocker_free(struct job *j)
{
    (void)j; /* owned by the test */
}

/* Puts b on the long lane: it holds it until blocker_release(). */
static void blocker_post(struct fixture *fx, struct blocker *b)
{
    *b = (struct blocker){.job = {.run = blocker_run, .free = blocker_free}};
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->cond, NULL);
    jobs_post(fx->srv.lanes[JOBS_LONG], &b->job);
}

static void blocker_release(struct blocker *b)
{
    pthread_mutex_lock(&b->lock);
    b->go = true;
    pthread_cond_signal(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

/* Once a later job on the long lane answered, b is done with. */
static void blocker_destroy(struct blocker *b)
{
    pthread_cond_destroy(&b->cond);
    pthread_mutex_destroy(&b->lock);
}

/* A DROP and a FLUSH of a small filter answer while the long lane is busy elsewhere. */
static void test_quick_lane_not_behind_long_write(void **state)
{
    struct fixture *fx = *state;
    struct filter *small = make(fx, "small", "s", 10);
    make(fx, "gone", "g", 10);
    assert_int_equal(flush(fx, NULL), 0);
    struct blocker b;
    blocker_post(fx, &b);
    add(small, "t", 10);
    int before = fx->calls;
    assert_int_equal(snapshot_flush(fx->srv.snap, small, on_done, fx), 0);
    wait_for(fx, before + 1);
    assert_int_equal(fx->last_err, 0);
    assert_int_equal(atomic_load(&small->changes), 0);
    assert_true(registry_remove(fx->srv.reg, "gone", 4));
    assert_int_equal(snapshot_forget(fx->srv.snap, "gone", 4, on_done, fx), 0);
    wait_for(fx, before + 2);
    assert_false(exists(fx, "gone.bloom"));
    blocker_release(&b);
    assert_int_equal(flush(fx, NULL), 0); /* behind the blocker: it ran */
    blocker_destroy(&b);
}

/* DROP then CREATE of one name: the long lane's write of the new filter waits for the
 * quick lane's removal of the old file, so the new file stays. */
static void test_removal_before_newer_write(void **state)
{
    struct fixture *fx = *state;
    make(fx, "x", "old", 10);
    assert_int_equal(flush(fx, NULL), 0);
    /* The blocker holds the long lane while the removal (quick lane) and the write of the
     * new filter (long lane, behind the blocker) are queued. */
    struct blocker b;
    blocker_post(fx, &b);
    assert_true(registry_remove(fx->srv.reg, "x", 1));
    assert_int_equal(snapshot_forget(fx->srv.snap, "x", 1, NULL, NULL), 0);
    make(fx, "x", "new", 10);
    int before = fx->calls;
    assert_int_equal(snapshot_flush(fx->srv.snap, NULL, on_done, fx), 0);
    blocker_release(&b);
    wait_for(fx, before + 1);
    assert_int_equal(fx->last_err, 0);
    assert_true(exists(fx, "x.bloom"));
    blocker_destroy(&b);
    assert_int_equal(snapshot_stop(&fx->srv), 0);
    server_destroy(&fx->srv);
    start(fx);
    struct filter *x = registry_get(fx->srv.reg, "x", 1);
    assert_non_null(x);
    assert_true(sbf_check(x->obj, hash_of("new", 3)));
    filter_unref(x);
}

/* A filter swapped out of the table (CLEAR of a held filter) is not written any more: its
 * file would be older than its replacement's. */
static void test_replaced_filter_not_written(void **state)
{
    struct fixture *fx = *state;
    struct filter *old = make(fx, "r", "r", 10);
    filter_ref(old); /* like a queued job's */
    struct sbf_params p;
    struct sbf *s;
    sbf_params_default(&p);
    p.capacity = 1000;
    assert_int_equal(sbf_new(&p, &fx->srv.budget.sbf, &s), 0);
    struct filter *fresh = filter_new("r", 1, &kind_sbf, s);
    assert_non_null(fresh);
    registry_replace(fx->srv.reg, old, fresh);
    filter_unref(fresh);
    assert_true(atomic_load(&old->replaced));
    assert_int_equal(flush(fx, old), 0);
    assert_false(exists(fx, "r.bloom"));
    assert_int_equal(stats(fx).written, 0);
    filter_unref(old);
    assert_int_equal(flush(fx, NULL), 0);
    assert_true(exists(fx, "r.bloom"));
    assert_int_equal(stats(fx).written, 1);
}

int main(void)
{
    log_open(NULL, LOG_ERROR); /* the expected failure is logged; the rest is noise */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dirty_filters_written_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drop_deletes_after_queued_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_delete_is_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failure_keeps_dirty_and_retries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_writes_and_load_restores, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_with_answers_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quick_lane_not_behind_long_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_removal_before_newer_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_filter_not_written, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
