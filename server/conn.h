/*
 * conn.h - one client connection of a worker: non-blocking reads, in-place parsing of
 * every complete request with the connection's protocol, execution, replies buffered
 * and written once per read batch. Requests whose answer comes later (server/park.h)
 * are parked in order: replies always leave in request order. Runs on the worker's
 * thread; every function here must be called from it.
 */
#ifndef BLOOMD_SERVER_CONN_H
#define BLOOMD_SERVER_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "proto/proto.h"

struct worker;

/* A wire protocol as the connection layer drives it: bytes -> request, result -> bytes. */
struct conn_proto {
    const char *name; /* "bloomd" */
    /* As proto_parse(); `ctx` is the connection's protocol context (conn_start's). */
    int (*parse)(const void *ctx, const char *buf, size_t len, size_t max_line,
                 struct proto_request *req, size_t *consumed);
    /* Appends the reply to a parse error; sets *close if the connection must end. */
    void (*parse_error)(struct proto_buf *out, int status, const struct proto_request *req,
                        bool *close);
    /* Appends the reply for a result. */
    void (*format)(struct proto_buf *out, const struct result *r);
};

/* The bloomd text protocol (proto/proto.h). */
extern const struct conn_proto conn_proto_text;

/*
 * Takes over the connected, non-blocking socket fd and starts serving it with proto on
 * worker w. On failure (logged) fd is closed. Returns 0 or -1.
 */
int conn_start(struct worker *w, const struct conn_proto *proto, int fd,
               const struct sockaddr *peer, socklen_t peerlen);

/* Closes every connection of w at once (shutdown); parked requests are dropped. */
void conn_close_all(struct worker *w);

#endif
