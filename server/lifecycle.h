/*
 * lifecycle.h - start-up and shutdown of the whole daemon (server/lifecycle.c), the one
 * module that knows every other: server_init (no sockets, no threads: unit tests stop
 * here), server_run (load, listen, loop until a signal), server_destroy. The state they
 * manage is struct server (server.h), which every module reads without including this.
 */
#ifndef BLOOMD_SERVER_LIFECYCLE_H
#define BLOOMD_SERVER_LIFECYCLE_H

#include "server/core/server.h"

enum server_err {
    SERVER_OK = 0,
    SERVER_ENOMEM = -1,  /* start-up allocation failed */
    SERVER_EIO = -2,     /* a socket, directory or event-loop call failed (logged) */
    SERVER_ECONFIG = -3, /* a file the configuration names cannot be used (TLS; logged) */
};

/* Sets up the registry and budget from cfg (copied). No sockets, no threads. */
int server_init(struct server *srv, const struct config *cfg);

/*
 * With the data directory created and locked (datadir_open), starts the worker, the
 * snapshotter and the HTTP pages, loads the snapshots and replays the journal on the job
 * thread while the loop answers probes, then listens, and
 * runs the event loop until SIGTERM/SIGINT (then writes a final snapshot while the
 * probes say "stopping"). Returns SERVER_OK after a clean stop, or an error that was logged.
 */
int server_run(struct server *srv);

/* Frees everything server_init and server_run created. */
void server_destroy(struct server *srv);

#endif
