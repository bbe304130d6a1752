/*
 * worker.c - one event loop's resources: created before listening, freed after the loop
 * ended. The loop itself is run by server.c.
 */
#include "server/worker.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "server/conn.h"
#include "server/listen.h"
#include "server/log.h"

int worker_init(struct worker *w, struct server *srv)
{
    memset(w, 0, sizeof *w);
    w->srv = srv;
    w->rbuf = malloc(WORKER_RBUF);
    w->base = event_base_new();
    if (w->rbuf == NULL || w->base == NULL) {
        log_msg(LOG_ERROR, "cannot create the event loop");
        return -1;
    }
    return 0;
}

void worker_close_listeners(struct worker *w)
{
    for (size_t i = 0; i < WORKER_MAX_LISTENERS; i++) {
        listener_close(w->lis[i]);
        w->lis[i] = NULL;
    }
}

void worker_destroy(struct worker *w)
{
    worker_close_listeners(w);
    if (w->base != NULL)
        conn_close_all(w);
    if (w->base != NULL)
        event_base_free(w->base);
    free(w->rbuf);
    memset(w, 0, sizeof *w);
}
