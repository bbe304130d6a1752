/*
 * server.h - all shared state of one bloomd process in one struct, so that every module
 * (connections, commands, snapshots) reaches it the same way. Lifecycle: server_init
 * (no sockets: unit tests stop here), server_run (listen, loop until a signal),
 * server_destroy.
 */
#ifndef BLOOMD_SERVER_SERVER_H
#define BLOOMD_SERVER_SERVER_H

#include <stdbool.h>

#include "server/budget.h"
#include "server/config.h"
#include "server/stats.h"

struct event_base;
struct event;
struct registry;
struct snapshotter;
struct listener;
struct conn;

struct server {
    struct config cfg;        /* final configuration, read-only after start-up */
    struct registry *reg;     /* the named filters */
    struct budget budget;     /* max_memory, shared by every filter */
    struct stats stats;       /* STATS counters */
    struct snapshotter *snap; /* background snapshots; NULL before server_run (unit tests) */
    struct event_base *base;  /* NULL until server_run (and in unit tests) */
    struct listener *lis;     /* listening socket; NULL once we stop accepting */
    struct conn *conns;       /* every open client connection (conn.c's list) */
    char *rbuf;               /* the loop thread's read buffer, SERVER_RBUF bytes */
    struct event *signals[3]; /* SIGTERM, SIGINT, SIGHUP */
    bool stopping;            /* a stop signal arrived */
};

/* Bytes read from a socket at once into srv->rbuf. */
#define SERVER_RBUF (256 * 1024)

enum server_err {
    SERVER_OK = 0,
    SERVER_ENOMEM = -1, /* start-up allocation failed */
    SERVER_EIO = -2,    /* a socket, directory or event-loop call failed (logged) */
};

/* Sets up the registry, budget and counters from cfg (copied). No sockets, no threads. */
int server_init(struct server *srv, const struct config *cfg);

/*
 * Creates the data directory, loads the snapshots, starts the snapshotter, listens, and
 * runs the event loop until SIGTERM/SIGINT (then writes a final snapshot).
 * Returns SERVER_OK after a clean stop, or an error that was logged.
 */
int server_run(struct server *srv);

/* Frees everything server_init and server_run created. */
void server_destroy(struct server *srv);

#endif
