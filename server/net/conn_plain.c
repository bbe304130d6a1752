/*
 * conn_plain.c - the plain TCP transport of a connection (server/net/conn_io.h): read() and
 * write() on the descriptor, and one persistent libevent event per direction, added while
 * the connection watches it. This is the hot path of every plain client: one indirect call
 * around each system call, nothing else. Its accept hook serves a socket at once.
 */
#include "server/net/conn_plain.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/core/log.h"
#include "server/net/conn.h"
#include "server/net/conn_io.h"
#include "server/net/worker.h"

struct plain_io {
    struct conn_io io; /* first member */
    int fd;
    struct event *ev_read;  /* EV_READ|EV_PERSIST, added while watched */
    struct event *ev_write; /* EV_WRITE|EV_PERSIST, added while watched */
};

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    struct conn_io *io = arg;
    io->on_read(io->arg, (what & EV_TIMEOUT) != 0);
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    struct conn_io *io = arg;
    io->on_write(io->arg, (what & EV_TIMEOUT) != 0);
}

static ssize_t plain_read(struct conn_io *io, void *buf, size_t len)
{
    ssize_t n = read(((struct plain_io *)io)->fd, buf, len);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return CONN_IO_AGAIN; /* level-triggered: an interrupted read is retried by the loop */
    return n;
}

static ssize_t plain_write(struct conn_io *io, const void *buf, size_t len)
{
    for (;;) {
        ssize_t n = write(((struct plain_io *)io)->fd, buf, len);
        if (n >= 0)
            return n;
        if (errno != EINTR)
            return errno == EAGAIN || errno == EWOULDBLOCK ? CONN_IO_AGAIN : -1;
    }
}

/* Adding an event that is on again only moves its timeout (a heap operation, no system call). */
static void plain_watch(struct conn_io *io, enum conn_io_dir dir, unsigned timeout)
{
    struct plain_io *p = (struct plain_io *)io;
    struct timeval tv = {.tv_sec = timeout, .tv_usec = 0};
    event_add(dir == CONN_IO_READ ? p->ev_read : p->ev_write, timeout > 0 ? &tv : NULL);
}

static void plain_unwatch(struct conn_io *io, enum conn_io_dir dir)
{
    struct plain_io *p = (struct plain_io *)io;
    event_del(dir == CONN_IO_READ ? p->ev_read : p->ev_write);
}

static void plain_shutdown(struct conn_io *io)
{
    shutdown(((struct plain_io *)io)->fd, SHUT_WR);
}

static size_t plain_held(const struct conn_io *io)
{
    (void)io;
    return sizeof(struct plain_io); /* the kernel holds the socket's buffers */
}

static void plain_close(struct conn_io *io)
{
    struct plain_io *p = (struct plain_io *)io;
    event_free(p->ev_read);
    event_free(p->ev_write);
    close(p->fd);
    free(p);
}

static const struct conn_io_ops plain_ops = {
    .read = plain_read,
    .write = plain_write,
    .watch = plain_watch,
    .unwatch = plain_unwatch,
    .shutdown = plain_shutdown,
    .held = plain_held,
    .close = plain_close,
};

/* The transport over fd (not taken over), or NULL when out of memory. */
static struct conn_io *plain_new(struct event_base *base, int fd)
{
    struct plain_io *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    p->io.ops = &plain_ops;
    p->fd = fd;
    p->ev_read = event_new(base, fd, EV_READ | EV_PERSIST, on_readable, &p->io);
    p->ev_write = event_new(base, fd, EV_WRITE | EV_PERSIST, on_writable, &p->io);
    if (p->ev_read == NULL || p->ev_write == NULL) {
        if (p->ev_read != NULL)
            event_free(p->ev_read);
        if (p->ev_write != NULL)
            event_free(p->ev_write);
        free(p);
        return NULL;
    }
    return &p->io;
}

static int plain_accept(const struct conn_transport *t, struct worker *w,
                        const struct conn_proto *proto, int fd, const struct sockaddr *peer,
                        socklen_t peerlen)
{
    (void)t;
    struct conn_io *io = plain_new(w->base, fd);
    if (io == NULL) {
        log_msg(LOG_ERROR, "accept: out of memory for a new connection");
        close(fd);
        return -1;
    }
    return conn_start(w, proto, io, peer, peerlen);
}

const struct conn_transport conn_transport_plain = {.accept = plain_accept};
