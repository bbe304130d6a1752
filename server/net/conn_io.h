/*
 * conn_io.h - how a connection moves its bytes: the seam between conn.c, which parses,
 * executes and answers, and a transport that owns the client's socket. Two transports:
 * plain TCP (conn_io.c: read(), write() and two events on the descriptor) and TLS
 * (conn_tls.c: a bufferevent_openssl). The contract is the plain socket's, level-triggered,
 * so conn.c cannot tell them apart. Loop thread only.
 */
#ifndef BLOOMD_SERVER_CONN_IO_H
#define BLOOMD_SERVER_CONN_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct event_base;
struct conn_io;

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
 * The plain transport over the connected, non-blocking socket fd, which it takes over.
 * Returns it, or NULL when out of memory (fd is then not closed). Close it with ops->close.
 */
struct conn_io *conn_io_plain_new(struct event_base *base, int fd);

#endif
