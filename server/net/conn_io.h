/*
 * conn_io.h - how a connection moves its bytes: the seam between conn.c, which parses,
 * executes and answers, and a transport that owns the client's socket. Two transports:
 * plain TCP (conn_plain.c: read(), write() and two events on the descriptor) and TLS
 * (conn_tls.c: a bufferevent_openssl). The contract is the plain socket's, level-triggered,
 * so conn.c cannot tell them apart; a listener reaches a transport only through its accept
 * hook (struct conn_transport), so neither conn.c nor listen.c knows TLS. Loop thread only.
 */
#ifndef BLOOMD_SERVER_CONN_IO_H
#define BLOOMD_SERVER_CONN_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

struct conn_io;
struct conn_proto;
struct worker;

/* read/write: nothing can move now; wait for the callback. */
#define CONN_IO_AGAIN (-2)

enum conn_io_dir {
    CONN_IO_READ,
    CONN_IO_WRITE,
};

/* What a transport calls back: io is readable (on_read) or writable (on_write), or the
 * timeout given to watch() passed without that (timed_out). The callee may close io. */
typedef void conn_io_cb(void *arg, bool timed_out);

struct conn_io_ops {
    /* Up to len bytes into buf. Returns the count, 0 at the end of the input,
     * CONN_IO_AGAIN, or -1 on an error (errno says which). */
    ssize_t (*read)(struct conn_io *io, void *buf, size_t len);
    /* Takes up to len bytes of buf. Returns the count (maybe fewer: call again),
     * CONN_IO_AGAIN when it takes nothing now, or -1 on an error (errno). */
    ssize_t (*write)(struct conn_io *io, const void *buf, size_t len);
    /* Calls back each time io is readable (writable) until unwatch(); timeout > 0: also
     * once timeout seconds pass without that. Watching again restarts the timeout. */
    void (*watch)(struct conn_io *io, enum conn_io_dir dir, unsigned timeout);
    void (*unwatch)(struct conn_io *io, enum conn_io_dir dir);
    /* No more writes: the peer sees the end once what was written has left. */
    void (*shutdown)(struct conn_io *io);
    /* Bytes the transport holds for this connection beyond what it reported (its own
     * buffers, a TLS session), for the memory budget. */
    size_t (*held)(const struct conn_io *io);
    /* Closes and frees io; no callback comes after. What was written still leaves if the
     * transport holds it (TLS sends its buffer and close_notify, for a few seconds). */
    void (*close)(struct conn_io *io);
};

/* A transport; implementations embed it as their first member. */
struct conn_io {
    const struct conn_io_ops *ops;
    conn_io_cb *on_read;  /* set by the connection before it watches anything */
    conn_io_cb *on_write; /* likewise */
    void *arg;            /* their argument: the connection */
};

/*
 * A kind of transport as a listener uses it (Redis's ConnectionType): what turns an accepted
 * socket into a connection. Implementations embed it (and find their context from it).
 */
struct conn_transport {
    /* Takes over the accepted, non-blocking socket fd: does what the transport needs first
     * (a TLS handshake, within its own deadline), then serves the client with proto on w
     * through conn_start() (server/net/conn.h). On failure (logged) fd is closed. Returns 0,
     * or -1 when it failed at once (a later failure is only logged). */
    int (*accept)(const struct conn_transport *t, struct worker *w, const struct conn_proto *proto,
                  int fd, const struct sockaddr *peer, socklen_t peerlen);
};

#endif
