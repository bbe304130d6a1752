/*
 * conn_plain.h - the plain TCP transport (conn_plain.c): read() and write() on the socket.
 * Every listener uses it unless lifecycle.c gives it another (listener_set_transport).
 */
#ifndef BLOOMD_SERVER_CONN_PLAIN_H
#define BLOOMD_SERVER_CONN_PLAIN_H

#include "server/net/conn_io.h"

/* Serves an accepted socket at once, as a connection over plain TCP. */
extern const struct conn_transport conn_transport_plain;

#endif
