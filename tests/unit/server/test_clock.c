/*
 * test_clock.c - the window clock: it starts at the wall clock, never goes back, moves
 * only forward at start-up (clock_window_start), and the skew says by how much it and the
 * wall clock differ. Steps of the wall clock are tested against the daemon under
 * libfaketime (tests/integration/test_clock.py).
 */
#include <setjmp.h> /* cmocka needs these first */
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdint.h>
#include <time.h>

#include "server/core/clock.h"

static void test_window_clock(void **state)
{
    (void)state;
    int64_t wall = clock_wall_ms(), w = clock_window_ms();
    assert_true(w - wall <= 50 && wall - w <= 50); /* the base is the wall clock */
    assert_true(clock_window_skew_ms() <= 50 && clock_window_skew_ms() >= -50);
    clock_window_start(w - 60000); /* earlier: nothing changes */
    assert_true(clock_window_ms() - w < 50);
    clock_window_start(w + 10000); /* later: the clock moves forward to it */
    int64_t moved = clock_window_ms();
    assert_true(moved >= w + 10000 && moved < w + 10050);
    int64_t skew = clock_window_skew_ms();
    assert_true(skew <= -9950 && skew > -10050);
    /* And from there on elapsed time: 20 ms of sleep, 20 ms more. */
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 20000000};
    nanosleep(&ts, NULL);
    int64_t later = clock_window_ms();
    assert_true(later - moved >= 20 && later - moved < 200);
    for (int i = 0; i < 1000; i++) { /* never back */
        int64_t now = clock_window_ms();
        assert_true(now >= later);
        later = now;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
