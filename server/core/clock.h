/*
 * clock.h - the daemon's two clocks, written once: monotonic for durations and
 * deadlines, wall-clock (Unix) for what is saved or shown (snapshot times, window
 * generations). lib/ never reads a clock; the server passes these values in.
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

#endif
