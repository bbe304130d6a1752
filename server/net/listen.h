/*
 * listen.h - a listening socket of a worker: accepts clients for conn.c with the
 * listener's protocol, refuses those beyond max_connections with a one-line error, and
 * keeps a spare descriptor so that running out of descriptors (EMFILE) never makes
 * accept() spin.
 */
#ifndef BLOOMD_SERVER_LISTEN_H
#define BLOOMD_SERVER_LISTEN_H

struct worker;
struct listener;
struct conn_proto;
struct conn_transport;

/*
 * Binds host:port, listens, logs "listening on <addr>:<port> (<protocol>)" (the real
 * port when port is 0) and serves accepted clients with proto on w, over plain TCP
 * (conn_transport_plain) until told otherwise. Returns the listener, or NULL after logging
 * why.
 */
struct listener *listener_open(struct worker *w, const struct conn_proto *proto, const char *host,
                               unsigned port);

/* Clients accepted from now on go through t's accept hook (server/net/conn_io.h), e.g. a
 * TLS handshake first (tls_transport). t is not taken over and must outlive l. */
void listener_set_transport(struct listener *l, const struct conn_transport *t);

/* Stops accepting and frees l. listener_close(NULL) does nothing. */
void listener_close(struct listener *l);

#endif
