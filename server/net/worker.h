/*
 * worker.h - one event loop and what belongs to it alone: its libevent base, listening
 * socket, client connections, read buffer and counters. Everything here is touched only
 * by the worker's own thread; shared state is reached through w->srv (server.h). There
 * is one worker today; nothing in it assumes it is the only one, except that it also
 * runs the snapshotter's timer and completions (lifecycle.c decides that).
 */
#ifndef BLOOMD_SERVER_WORKER_H
#define BLOOMD_SERVER_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "server/exec/stats.h"
#include "server/net/fair.h"

struct server;
struct event_base;
struct listener;
struct conn;

/* Listening sockets per worker: one per protocol (bloomd, memcached, ...). */
#define WORKER_MAX_LISTENERS 4

struct worker {
    struct server *srv;                         /* shared state */
    struct event_base *base;                    /* this worker's loop */
    struct listener *lis[WORKER_MAX_LISTENERS]; /* one per protocol; NULL when closed */
    struct conn *conns;                         /* every open client connection (conn.c's list) */
    size_t conns_big;       /* of them, charged CONN_SHED_MIN or more: shed() has a candidate */
    char *rbuf;             /* read buffer shared by this worker's connections */
    struct stats stats;     /* this worker's counters (STATS sums the workers) */
    struct event *tick;     /* brings time-driven (windowed) filters up to date */
    int64_t skew_ms;        /* the wall clock minus the window clock at the last tick */
    bool skew_known;        /* skew_ms was measured (once ready) */
    uint64_t conn_mem_high; /* connection memory's high mark since the last malloc_trim */
    uint64_t auth_next_ms;  /* when the next failed AUTH may be answered (conn.c) */
    struct fair fair;       /* backlogged connections and the pass's time slice */
};

/* Period of the tick that rotates windowed filters between requests. */
#define WORKER_TICK_MS 250

/* Bytes read from a socket at once into w->rbuf. */
#define WORKER_RBUF (256 * 1024)

/* Creates w's loop and read buffer. Returns 0, or -1 (logged). */
int worker_init(struct worker *w, struct server *srv);

/* Frees w's loop and read buffer; its listeners and connections are closed already
 * (lifecycle.c does that, at SIGTERM and in server_destroy). */
void worker_destroy(struct worker *w);

#endif
