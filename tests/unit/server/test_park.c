/*
 * test_park.c - the answer-later path end to end inside one process: a real worker
 * loop, a real connection on a socketpair and the real snapshot job thread, held back by
 * a blocking job so that the order of events is forced, not hoped for. Covers replies
 * held behind parked requests in request order, a client that leaves before its answer
 * comes, and shutdown with answers still owed (ASan checks nothing leaks or is used after
 * being freed).
 */
#include <setjmp.h> /* cmocka needs these first */
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/core/clock.h"
#include "server/core/config.h"
#include "server/core/jobs.h"
#include "server/core/server.h"
#include "server/exec/recover.h"
#include "server/lifecycle.h"
#include "server/net/conn.h"
#include "server/net/conn_plain.h"
#include "server/net/worker.h"
#include "server/persist/snapshot.h"
#include "server/store/registry.h"

#define WAIT_MS 3000 /* longest wait for an expected event */

#include "tests/unit/server/conn_fixture.h"

static int setup(void **state)
{
    struct fixture *fx = fixture_new("/tmp/test_park.XXXXXX");
    *state = fx;
    return 0;
}

/* Runs the loop and collects what the client receives, for about ms milliseconds or
 * until `want` bytes arrived (want 0: the whole time). */
static void spin(struct fixture *fx, unsigned ms, size_t want)
{
    uint64_t end = clock_mono_ms() + ms;
    while (clock_mono_ms() < end) {
        event_base_loop(fx->srv.worker->base, EVLOOP_NONBLOCK);
        if (fx->peer >= 0) {
            ssize_t n = read(fx->peer, fx->got + fx->got_len, sizeof fx->got - 1 - fx->got_len);
            if (n > 0)
                fx->got_len += (size_t)n;
        }
        fx->got[fx->got_len] = '\0';
        if (want > 0 && fx->got_len >= want)
            return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static void send_text(struct fixture *fx, const char *s)
{
    assert_int_equal(write(fx->peer, s, strlen(s)), (ssize_t)strlen(s));
}

/* Replies behind a parked FLUSH wait for it; two FLUSHes answer in order. */
static void test_replies_stay_in_order(void **state)
{
    struct fixture *fx = *state;
    hold_jobs(fx);
    send_text(fx, "CREATE f\r\nFLUSH\r\nCHECK nosuch k\r\nFLUSH f\r\nVERSION\r\n");
    spin(fx, 100, 0);
    /* CREATE was answered; everything after the first FLUSH is held behind it. */
    assert_string_equal(fx->got, "CREATED\r\n");
    release_jobs(fx);
    const char *want = "CREATED\r\nOK\r\nNOT_FOUND\r\nOK\r\nVERSION " BLOOMD_VERSION "\r\n";
    spin(fx, WAIT_MS, strlen(want));
    assert_string_equal(fx->got, want);
}

/* A client that leaves while its FLUSH is parked: the connection lives until the answer
 * comes, then goes (its write fails with EPIPE and closes it). */
static void test_peer_leaves_before_answer(void **state)
{
    struct fixture *fx = *state;
    struct worker *w = fx->srv.worker;
    hold_jobs(fx);
    send_text(fx, "FLUSH\r\nVERSION\r\n");
    spin(fx, 50, 0);
    assert_int_equal(fx->got_len, 0);
    close(fx->peer);
    fx->peer = -1;
    spin(fx, 50, 0);
    assert_int_equal(w->stats.conn_current, 1); /* still owed an answer */
    release_jobs(fx);
    uint64_t end = clock_mono_ms() + WAIT_MS;
    while (w->stats.conn_current > 0 && clock_mono_ms() < end)
        spin(fx, 10, 0);
    assert_int_equal(w->stats.conn_current, 0);
    assert_null(w->conns);
}

/* Shutdown with an answer owed: the parked request is dropped with its connection. */
static void test_shutdown_with_answer_owed(void **state)
{
    struct fixture *fx = *state;
    hold_jobs(fx);
    send_text(fx, "FLUSH\r\nCHECK x y\r\n");
    spin(fx, 50, 0);
    assert_int_equal(fx->got_len, 0);
    fx->srv.stopping = true;
    conn_close_all(fx->srv.worker);
    assert_null(fx->srv.worker->conns);
    release_jobs(fx);
    spin(fx, 50, 0); /* the FLUSH job finishes; its done() step is skipped */
}

/* The bytes of a DUMP reply at the start of fx->got: its block into out, returns its size. */
static size_t take_dump(struct fixture *fx, char *out, size_t cap)
{
    spin(fx, WAIT_MS, 0 + 8);
    unsigned long long n = 0;
    int used = 0;
    assert_int_equal(sscanf(fx->got, "DUMP %llu\r\n%n", &n, &used), 1);
    assert_true(used > 0 && n < cap);
    spin(fx, WAIT_MS, (size_t)used + (size_t)n + 2);
    assert_true(fx->got_len == (size_t)used + n + 2);
    memcpy(out, fx->got + used, (size_t)n);
    assert_memory_equal(fx->got + used + n, "\r\n", 2);
    fx->got_len = 0;
    return (size_t)n;
}

/*
 * A RESTORE answers once its block is decoded (on the long lane, held here), and the
 * requests after it wait for it: the CHECK sees the restored filter, not NOT_FOUND.
 */
static void test_restore_holds_later_requests(void **state)
{
    struct fixture *fx = *state;
    send_text(fx, "CREATE f capacity=1000\r\nADD f k\r\n");
    spin(fx, WAIT_MS, strlen("CREATED\r\nADDED 1\r\n"));
    assert_string_equal(fx->got, "CREATED\r\nADDED 1\r\n");
    fx->got_len = 0;
    send_text(fx, "DUMP f\r\n");
    char data[2048];
    size_t n = take_dump(fx, data, sizeof data);
    hold_jobs(fx);
    char line[64];
    snprintf(line, sizeof line, "RESTORE g %zu\r\n", n);
    send_text(fx, line);
    assert_int_equal(write(fx->peer, data, n), (ssize_t)n);
    send_text(fx, "\r\nCHECK g k\r\nVERSION\r\n");
    spin(fx, 100, 0);
    assert_int_equal(fx->got_len, 0); /* the decode waits behind the blocker */
    release_jobs(fx);
    const char *want = "RESTORED\r\n1\r\nVERSION " BLOOMD_VERSION "\r\n";
    spin(fx, WAIT_MS, strlen(want));
    assert_string_equal(fx->got, want);
}

/*
 * The snapshot a RESTORE waits for is skipped when its object is swapped out first (a
 * CLEAR from another client while the snapshot holds it): RESTORED still waits for a
 * file of the name that covers the RESTORE record (the filter now there is written).
 */
static void test_restore_waits_for_a_covering_file(void **state)
{
    struct fixture *fx = *state;
    assert_int_equal(recover_journal(&fx->srv), RECOVER_OK); /* records get positions */
    send_text(fx, "CREATE f capacity=1000\r\nADD f k\r\n");
    spin(fx, WAIT_MS, strlen("CREATED\r\nADDED 1\r\n"));
    fx->got_len = 0;
    send_text(fx, "DUMP f\r\n");
    char data[2048];
    size_t n = take_dump(fx, data, sizeof data);
    /* The quick lane (small filters' snapshots) waits; the decode (long lane) runs. */
    fx->block.job = (struct job){.run = blocker_run, .free = blocker_free};
    jobs_post(fx->srv.lanes[JOBS_QUICK], &fx->block.job);
    char line[64];
    snprintf(line, sizeof line, "RESTORE g %zu\r\n", n);
    send_text(fx, line);
    assert_int_equal(write(fx->peer, data, n), (ssize_t)n);
    send_text(fx, "\r\n");
    uint64_t end = clock_mono_ms() + WAIT_MS;
    struct filter *g = NULL;
    while (g == NULL && clock_mono_ms() < end) {
        spin(fx, 5, 0);
        g = registry_get(fx->srv.reg, "g", 1);
    }
    assert_non_null(g); /* installed; its snapshot waits on the quick lane */
    filter_unref(g);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    struct sockaddr sa = {.sa_family = AF_UNIX};
    assert_int_equal(conn_transport_plain.accept(&conn_transport_plain, fx->srv.worker,
                                                 &conn_proto_text, sv[0], &sa, sizeof sa),
                     0);
    assert_int_equal(write(sv[1], "CLEAR g\r\n", 9), 9);
    char other[64] = {0};
    end = clock_mono_ms() + WAIT_MS;
    while (strstr(other, "\r\n") == NULL && clock_mono_ms() < end) {
        spin(fx, 5, 0);
        ssize_t k = read(sv[1], other + strlen(other), sizeof other - 1 - strlen(other));
        (void)k;
    }
    assert_string_equal(other, "OK\r\n");
    assert_int_equal(fx->got_len, 0);
    release_jobs(fx);
    spin(fx, WAIT_MS, strlen("RESTORED\r\n"));
    assert_string_equal(fx->got, "RESTORED\r\n");
    char path[128];
    snprintf(path, sizeof path, "%s/g.bloom", fx->dir);
    assert_int_equal(access(path, F_OK), 0);
    close(sv[1]);
}

/*
 * Shutdown with a DUMP owed (its FLUSH of a time-driven filter waits on the long lane)
 * and with a RESTORE's block half sent: nothing is leaked (ASan) or used after it is freed.
 */
static void test_shutdown_with_dump_and_restore_owed(void **state)
{
    struct fixture *fx = *state;
    send_text(fx, "CREATE w window=1h\r\nADD w k\r\n");
    spin(fx, WAIT_MS, strlen("CREATED\r\nADDED 1\r\n"));
    hold_jobs(fx);
    send_text(fx, "DUMP w\r\n");
    spin(fx, 50, 0);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    struct sockaddr sa = {.sa_family = AF_UNIX};
    assert_int_equal(conn_transport_plain.accept(&conn_transport_plain, fx->srv.worker,
                                                 &conn_proto_text, sv[0], &sa, sizeof sa),
                     0);
    const char *half = "RESTORE h 100\r\nBLOOMD";
    assert_int_equal(write(sv[1], half, strlen(half)), (ssize_t)strlen(half));
    spin(fx, 50, 0);
    fx->srv.stopping = true;
    conn_close_all(fx->srv.worker);
    assert_null(fx->srv.worker->conns);
    close(sv[1]);
    release_jobs(fx);
    spin(fx, 50, 0); /* the FLUSH job finishes; its done() step is skipped */
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as the daemon does: a write to a gone peer is EPIPE */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_replies_stay_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peer_leaves_before_answer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_with_answer_owed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restore_holds_later_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restore_waits_for_a_covering_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_with_dump_and_restore_owed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
