/*
 * worker.c - one event loop's resources: created before listening, freed after the loop
 * ended. The loop itself is run by lifecycle.c.
 */
#include "server/net/worker.h"

#include <malloc.h>

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "server/core/budget.h"
#include "server/core/clock.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/store/advance.h"

/* A change of the wall clock against the window clock of more than this between two ticks
 * is a step (NTP slews far slower: at most 0.5 ms per second). */
#define STEP_WARN_MS 1000

/* Connection memory given back since the last trim past which malloc_trim runs. */
#define TRIM_AFTER_BYTES ((uint64_t)16 << 20)

/*
 * Clients that pipelined without reading leave their buffers' pages in malloc's arenas
 * when they go (freed, not returned: RSS stays at the burst's peak). Once connection
 * memory fell by TRIM_AFTER_BYTES from its high mark, malloc_trim hands them back. It
 * runs at most once a tick, and only after such a fall: an idle daemon never pays it.
 */
static void give_back(struct worker *w)
{
    uint64_t now = budget_part(&w->srv->budget, BUDGET_CONNECTIONS);
    if (now > w->conn_mem_high)
        w->conn_mem_high = now;
    if (w->conn_mem_high - now < TRIM_AFTER_BYTES)
        return;
    malloc_trim(0);
    w->conn_mem_high = now;
}

/*
 * Rotates every windowed filter, so memory of expired generations comes back even if no
 * request touches the filter (requests also rotate on access). O(filters) per tick. Windows
 * follow the window clock, so a step of the wall clock changes nothing but is logged.
 */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct worker *w = arg;
    if (w->srv->phase != SERVER_READY) /* the loader still fills the table */
        return;
    int64_t skew = clock_window_skew_ms();
    if (w->skew_known && (skew - w->skew_ms > STEP_WARN_MS || w->skew_ms - skew > STEP_WARN_MS))
        log_msg(LOG_WARN,
                "clock: the wall clock stepped by %+.3f s; windowed filters go on by the "
                "monotonic clock (the wall clock is %+.3f s from it now)",
                (double)(skew - w->skew_ms) / 1000.0, (double)skew / 1000.0);
    w->skew_ms = skew;
    w->skew_known = true;
    /* Never on a replica: its windows rotate only through its primary's records, so both
     * hold the same generations. */
    if (w->srv->repl.role == SERVER_PRIMARY)
        advance_all(w->srv, clock_window_ms(), true);
    give_back(w);
}

int worker_init(struct worker *w, struct server *srv)
{
    memset(w, 0, sizeof *w);
    w->srv = srv;
    srv->counters = &w->stats; /* one worker today: STATS reads its counters */
    w->rbuf = malloc(WORKER_RBUF);
    w->base = event_base_new();
    /* One priority for every event: a lower one could starve (server/persist/durable.c). */
    if (w->rbuf == NULL || w->base == NULL) {
        log_msg(LOG_ERROR, "cannot create the event loop");
        return -1;
    }
    if (fair_init(&w->fair, w->base, &w->stats.loop_max_stall_us) != 0) {
        log_msg(LOG_ERROR, "cannot create the event loop's backlog timer");
        return -1;
    }
    struct timeval tv = {.tv_sec = 0, .tv_usec = WORKER_TICK_MS * 1000};
    w->tick = event_new(w->base, -1, EV_PERSIST, on_tick, w);
    if (w->tick == NULL || event_add(w->tick, &tv) != 0) {
        log_msg(LOG_ERROR, "cannot start the worker's timer");
        return -1;
    }
    return 0;
}

void worker_destroy(struct worker *w)
{
    if (w->tick != NULL)
        event_free(w->tick);
    fair_destroy(&w->fair);
    if (w->base != NULL)
        event_base_free(w->base);
    free(w->rbuf);
    memset(w, 0, sizeof *w);
}
