/*
 * clock.h - the daemon's clocks, written once: monotonic for durations and deadlines,
 * wall-clock (Unix) for what is shown or stamped (snapshot times, figures), and the window
 * clock for what must not step (window rotation). lib/ never reads a clock; the server
 * passes these values in.
 */
#ifndef BLOOMD_SERVER_CLOCK_H
#define BLOOMD_SERVER_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC in milliseconds. */
static inline uint64_t clock_mono_ms(void)
{
    return clock_mono_ns() / 1000000u;
}

/* Unix time in milliseconds. */
static inline int64_t clock_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * The window clock, in Unix ms: the wall clock read once at start-up, then advanced by
 * CLOCK_BOOTTIME (monotonic, and counting suspend), so a step of the wall clock (NTP, an
 * operator, a VM restored) changes nothing: windows neither drop keys early after a step
 * forward nor keep them late after a step back. It drifts from the wall clock only by the
 * steps taken since start-up. Every window rotation, and the times in the journal's
 * ROTATE records, read it. Any thread; the first call (or clock_window_start) fixes the
 * base.
 */
int64_t clock_window_ms(void);

/*
 * At start-up, once snapshots and journal are loaded and before clients: makes the window
 * clock read at least not_before_ms now (the latest time a window had reached). The wall
 * clock is the only link to the time before start-up, and it may have stepped back while
 * the daemon was down: then windows go on from where they were, on elapsed time, instead
 * of waiting for the wall clock to catch up with them (keeping their keys that long).
 * Moves the clock forward only. Call before other threads read it.
 */
void clock_window_start(int64_t not_before_ms);

/*
 * The wall clock minus the window clock, in ms: the sum of the wall clock's steps since
 * start-up (and of the start-up correction above, negated).
 */
int64_t clock_window_skew_ms(void);

#endif
