/*
 * listen.h - the listening socket: accepts clients for conn.c, refuses those beyond
 * max_connections with a one-line error, and keeps a spare descriptor so that running
 * out of descriptors (EMFILE) never makes accept() spin.
 */
#ifndef BLOOMD_SERVER_LISTEN_H
#define BLOOMD_SERVER_LISTEN_H

struct server;

/*
 * Binds srv->cfg.bind:port, listens, logs "listening on <addr>:<port>" (the real port
 * when port is 0) and sets srv->lis. Returns 0, or -1 after logging why.
 */
int listener_open(struct server *srv);

/* Stops accepting and frees srv->lis (may be NULL). */
void listener_close(struct server *srv);

#endif
