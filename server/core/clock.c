/*
 * clock.c - the window clock (clock.h): a base in Unix ms fixed once, plus CLOCK_BOOTTIME
 * elapsed since. Read on every windowed lookup, so it is two atomic loads and one
 * clock_gettime; the base is set under pthread_once and, at start-up, moved forward
 * before any other thread reads it.
 */
#include "server/core/clock.h"

#include <pthread.h>
#include <stdatomic.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static _Atomic int64_t base_ms;  /* window time at boot_ns */
static _Atomic uint64_t boot_ns; /* CLOCK_BOOTTIME when base_ms was read */

static uint64_t boottime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void init(void)
{
    atomic_store(&boot_ns, boottime_ns());
    atomic_store(&base_ms, clock_wall_ms());
}

int64_t clock_window_ms(void)
{
    pthread_once(&once, init);
    uint64_t elapsed = boottime_ns() - atomic_load(&boot_ns);
    return atomic_load(&base_ms) + (int64_t)(elapsed / 1000000u);
}

void clock_window_start(int64_t not_before_ms)
{
    pthread_once(&once, init);
    int64_t now = clock_window_ms();
    if (not_before_ms > now)
        atomic_fetch_add(&base_ms, not_before_ms - now);
}

int64_t clock_window_skew_ms(void)
{
    int64_t window = clock_window_ms();
    return clock_wall_ms() - window;
}
