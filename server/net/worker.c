/*
 * worker.c - one event loop's resources: created before listening, freed after the loop
 * ended. The loop itself is run by lifecycle.c.
 */
#include "server/net/worker.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "server/core/clock.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/store/advance.h"

/*
 * Rotates every windowed filter, so memory of expired generations comes back even if no
 * request touches the filter (requests also rotate on access). O(filters) per tick.
 */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct worker *w = arg;
    /* Not while the loader fills the table; never on a replica: its windows rotate only
     * through its primary's records, so both hold the same generations. */
    if (w->srv->phase == SERVER_READY && w->srv->repl.role == SERVER_PRIMARY)
        advance_all(w->srv, clock_wall_ms(), true);
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
