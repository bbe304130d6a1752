/*
 * test_conn.c - a connection's lifecycle (enum conn_state, server/net/conn.h): the table of
 * legal moves checked pair by pair against the list below, then real connections on a
 * socketpair, served by a real worker loop over the plain transport's accept hook, walked
 * through each way a connection ends and checked state by state. The job lane is held by a
 * blocking job where a request must stay parked.
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
#include "server/lifecycle.h"
#include "server/net/conn.h"
#include "server/net/conn_plain.h"
#include "server/net/worker.h"
#include "server/persist/snapshot.h"

#define WAIT_MS 3000 /* longest wait for an expected event */

/* ---- the table ---- */

/* Every legal move, written out independently of conn.c's table. */
static const struct {
    enum conn_state from, to;
} legal[] = {
    {CONN_OPEN, CONN_DRAINING},       /* EOF */
    {CONN_OPEN, CONN_FINISHING},      /* QUIT */
    {CONN_OPEN, CONN_OWED},           /* error with an answer owed */
    {CONN_DRAINING, CONN_CLOSING},    /* what it sent is done, or QUIT */
    {CONN_DRAINING, CONN_OWED},       /* error with an answer owed */
    {CONN_FINISHING, CONN_LINGERING}, /* replies out: half-close */
    {CONN_FINISHING, CONN_OWED},      /* error with an answer owed */
    {CONN_CLOSING, CONN_OWED},        /* error with an answer owed */
};

static bool listed(enum conn_state from, enum conn_state to)
{
    for (size_t i = 0; i < sizeof legal / sizeof legal[0]; i++)
        if (legal[i].from == from && legal[i].to == to)
            return true;
    return false;
}

static void test_legal_moves_are_exactly_the_list(void **state)
{
    (void)state;
    for (int from = 0; from < CONN_NSTATES; from++)
        for (int to = 0; to < CONN_NSTATES; to++) {
            bool want = listed((enum conn_state)from, (enum conn_state)to);
            if (conn_state_legal((enum conn_state)from, (enum conn_state)to) != want)
                fail_msg("%s -> %s: legal is %d, want %d", conn_state_name((enum conn_state)from),
                         conn_state_name((enum conn_state)to), !want, want);
        }
    /* No state stays put through set_state, and nothing leaves the ends but freeing. */
    for (int s = 0; s < CONN_NSTATES; s++) {
        assert_false(conn_state_legal((enum conn_state)s, (enum conn_state)s));
        assert_false(conn_state_legal(CONN_LINGERING, (enum conn_state)s));
        assert_false(conn_state_legal(CONN_OWED, (enum conn_state)s));
        assert_false(conn_state_legal((enum conn_state)s, CONN_OPEN));
    }
    assert_false(conn_state_legal(CONN_NSTATES, CONN_OPEN));
    assert_false(conn_state_legal(CONN_OPEN, CONN_NSTATES));
}

static void test_names_are_distinct(void **state)
{
    (void)state;
    for (int a = 0; a < CONN_NSTATES; a++) {
        assert_string_not_equal(conn_state_name((enum conn_state)a), "?");
        for (int b = a + 1; b < CONN_NSTATES; b++)
            assert_string_not_equal(conn_state_name((enum conn_state)a),
                                    conn_state_name((enum conn_state)b));
    }
    assert_string_equal(conn_state_name(CONN_NSTATES), "?");
}

/* ---- real connections ---- */

#include "tests/unit/server/conn_fixture.h"

static int setup(void **state)
{
    struct fixture *fx = fixture_new("/tmp/test_conn.XXXXXX");
    assert_non_null(fx->srv.worker->conns);
    assert_int_equal(conn_state_of(fx->srv.worker->conns), CONN_OPEN);
    *state = fx;
    return 0;
}

/* Runs the loop for about ms milliseconds, or until done(fx) holds; the client reads what
 * arrives when `read_replies`. Returns done(fx) at the end (NULL done: true). */
static bool spin(struct fixture *fx, unsigned ms, bool read_replies, bool (*done)(struct fixture *))
{
    uint64_t end = clock_mono_ms() + ms;
    for (;;) {
        event_base_loop(fx->srv.worker->base, EVLOOP_NONBLOCK);
        if (read_replies && fx->peer >= 0 && !fx->peer_eof) {
            ssize_t n = read(fx->peer, fx->got + fx->got_len, sizeof fx->got - 1 - fx->got_len);
            if (n > 0)
                fx->got_len += (size_t)n;
            else if (n == 0)
                fx->peer_eof = true;
        }
        fx->got[fx->got_len] = '\0';
        if (done != NULL && done(fx))
            return true;
        if (clock_mono_ms() >= end)
            return done == NULL;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static bool gone(struct fixture *fx)
{
    return fx->srv.worker->conns == NULL;
}

static bool saw_eof(struct fixture *fx)
{
    return fx->peer_eof;
}

static enum conn_state state_now(struct fixture *fx)
{
    assert_non_null(fx->srv.worker->conns);
    return conn_state_of(fx->srv.worker->conns);
}

static void send_text(struct fixture *fx, const char *s)
{
    assert_int_equal(write(fx->peer, s, strlen(s)), (ssize_t)strlen(s));
}

/* QUIT: OPEN -> FINISHING -> LINGERING (the client sees the end after its replies), freed
 * when the client closes. */
static void test_quit_lingers_until_the_peer_closes(void **state)
{
    struct fixture *fx = *state;
    send_text(fx, "VERSION\r\nQUIT\r\nVERSION\r\n");
    assert_true(spin(fx, WAIT_MS, true, saw_eof));
    assert_string_equal(fx->got, "VERSION " BLOOMD_VERSION "\r\n"); /* nothing after QUIT */
    assert_int_equal(state_now(fx), CONN_LINGERING);
    send_text(fx, "VERSION\r\n"); /* discarded */
    spin(fx, 50, false, NULL);
    assert_int_equal(state_now(fx), CONN_LINGERING);
    close(fx->peer);
    fx->peer = -1;
    assert_true(spin(fx, WAIT_MS, false, gone));
    assert_int_equal(fx->srv.worker->stats.conn_current, 0);
}

/* The client half-closes: OPEN -> DRAINING -> CLOSING while its FLUSH is parked; the reply
 * still comes, then the connection closes (no half-close of its own). */
static void test_eof_drains_then_closes(void **state)
{
    struct fixture *fx = *state;
    hold_jobs(fx);
    send_text(fx, "CREATE f\r\nFLUSH\r\n");
    assert_int_equal(shutdown(fx->peer, SHUT_WR), 0);
    spin(fx, 100, true, NULL);
    assert_string_equal(fx->got, "CREATED\r\n");
    assert_false(fx->peer_eof);
    assert_int_equal(state_now(fx), CONN_CLOSING);
    release_jobs(fx);
    assert_true(spin(fx, WAIT_MS, true, gone));
    assert_true(spin(fx, WAIT_MS, true, saw_eof));
    assert_string_equal(fx->got, "CREATED\r\nOK\r\n");
}

/*
 * The client goes away with a reply unread (AF_UNIX then reports ECONNRESET) while a FLUSH
 * is parked: OPEN -> OWED, watching nothing; freed when the FLUSH's answer comes.
 */
static void test_reset_while_owed(void **state)
{
    struct fixture *fx = *state;
    hold_jobs(fx);
    send_text(fx, "CREATE f\r\nFLUSH\r\n");
    spin(fx, 100, false, NULL); /* CREATED waits, unread, in the client's socket */
    assert_int_equal(state_now(fx), CONN_OPEN);
    close(fx->peer);
    fx->peer = -1;
    spin(fx, 100, false, NULL);
    assert_int_equal(state_now(fx), CONN_OWED);
    assert_int_equal(fx->srv.worker->stats.conn_current, 1);
    release_jobs(fx);
    assert_true(spin(fx, WAIT_MS, false, gone));
    assert_int_equal(fx->srv.worker->stats.conn_current, 0);
}

/* Shutdown drops a connection in any state: here one owed an answer. */
static void test_close_all_while_owed(void **state)
{
    struct fixture *fx = *state;
    hold_jobs(fx);
    send_text(fx, "CREATE f\r\nFLUSH\r\n");
    spin(fx, 100, false, NULL);
    close(fx->peer);
    fx->peer = -1;
    spin(fx, 100, false, NULL);
    assert_int_equal(state_now(fx), CONN_OWED);
    fx->srv.stopping = true;
    conn_close_all(fx->srv.worker);
    assert_null(fx->srv.worker->conns);
    release_jobs(fx);
    spin(fx, 50, false, NULL); /* the FLUSH job finishes; its done() step is skipped */
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as the daemon does: a write to a gone peer is EPIPE */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_legal_moves_are_exactly_the_list),
        cmocka_unit_test(test_names_are_distinct),
        cmocka_unit_test_setup_teardown(test_quit_lingers_until_the_peer_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eof_drains_then_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reset_while_owed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_all_while_owed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
