/*
 * conn.c - client connections. Workload: a few hundred clients, some pipelining
 * thousands of 100-key lines, most idle. A read goes into the server's shared buffer and
 * is parsed there in place; only an unfinished tail (or requests held back by
 * backpressure) is copied into the connection's own buffer, so idle clients hold no
 * input memory. Replies accumulate in one proto_buf per connection and are written once
 * per read batch. When more than max_output reply bytes are unsent we stop parsing and
 * reading that client until the socket drains.
 */
#include "server/conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/proto.h"
#include "server/commands.h"
#include "server/log.h"
#include "server/server.h"

#define CONN_MIN_IN 1024     /* input buffers up to this size are kept while idle */
#define CONN_KEEP_OUT 4096   /* larger reply buffers are freed once drained */
#define CONN_RUN 64          /* pipelined small key requests merged into one lib batch */
#define CONN_CLOSE_SECONDS 5 /* wait for a closing client to read its last reply */

struct conn {
    struct server *srv;
    struct conn *prev, *next; /* srv->conns */
    int fd;
    struct event *ev_read;  /* EV_READ|EV_PERSIST, with the idle timeout */
    struct event *ev_write; /* EV_WRITE|EV_PERSIST, added while output is unsent */
    char *in;               /* unparsed input that outlived a read; NULL when none */
    size_t in_len, in_cap;
    struct proto_buf out; /* replies; out.data[out_sent..out.len) not yet written */
    size_t out_sent;
    bool reading;   /* ev_read is added */
    bool writing;   /* ev_write is added */
    bool eof;       /* the peer sent everything it will send */
    bool closing;   /* no more requests: close once the output is written */
    bool lingering; /* write side shut: discarding input until EOF or timeout */
    bool pending;   /* a command answers later: parse nothing until it does */
    char peer[64];  /* address for log lines */
};

static void on_read(evutil_socket_t fd, short what, void *arg);
static void on_write(evutil_socket_t fd, short what, void *arg);
static void pump(struct conn *c);

static size_t unsent(const struct conn *c)
{
    return c->out.len - c->out_sent;
}

static void conn_free(struct conn *c)
{
    struct server *srv = c->srv;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    event_free(c->ev_read);
    event_free(c->ev_write);
    close(c->fd);
    free(c->in);
    proto_buf_free(&c->out);
    srv->stats.conn_current--;
    log_msg(LOG_DEBUG, "closed connection from %s", c->peer);
    free(c);
}

/* Closes now, unless a command still owes this connection a reply (then at resume). */
static void conn_close(struct conn *c)
{
    if (c->pending) {
        c->closing = true;
        c->lingering = true; /* nothing more to send to a peer that is gone */
        if (c->reading)
            event_del(c->ev_read);
        if (c->writing)
            event_del(c->ev_write);
        c->reading = c->writing = false;
        return;
    }
    conn_free(c);
}

/*
 * Adds or removes ev. Adding again an event that is on only updates its timeout (a heap
 * operation, no system call), so a closing client gets the shorter close deadline.
 */
static void set_event(struct event *ev, bool *on, bool want, unsigned timeout)
{
    if (want && (!*on || timeout > 0)) {
        struct timeval tv = {.tv_sec = timeout, .tv_usec = 0};
        event_add(ev, timeout > 0 ? &tv : NULL);
    } else if (!want && *on) {
        event_del(ev);
    }
    *on = want;
}

int conn_start(struct server *srv, int fd, const struct sockaddr *peer, socklen_t peerlen)
{
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        goto error;
    c->srv = srv;
    c->fd = fd;
    c->ev_read = event_new(srv->base, fd, EV_READ | EV_PERSIST, on_read, c);
    c->ev_write = event_new(srv->base, fd, EV_WRITE | EV_PERSIST, on_write, c);
    if (c->ev_read == NULL || c->ev_write == NULL)
        goto error;
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (peer->sa_family == AF_INET && peerlen >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *sin = (const void *)peer;
        inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
        port = ntohs(sin->sin_port);
    } else if (peer->sa_family == AF_INET6 && peerlen >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *sin6 = (const void *)peer;
        inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
        port = ntohs(sin6->sin6_port);
    }
    snprintf(c->peer, sizeof(c->peer), "%s:%u", host, port);
    c->next = srv->conns;
    if (c->next != NULL)
        c->next->prev = c;
    srv->conns = c;
    srv->stats.conn_current++;
    srv->stats.conn_total++;
    set_event(c->ev_read, &c->reading, true, srv->cfg.idle_timeout);
    log_msg(LOG_DEBUG, "connection from %s", c->peer);
    return 0;
error:
    log_msg(LOG_ERROR, "accept: out of memory for a new connection");
    if (c != NULL) {
        if (c->ev_read != NULL)
            event_free(c->ev_read);
        if (c->ev_write != NULL)
            event_free(c->ev_write);
        free(c);
    }
    close(fd);
    return -1;
}

/*
 * Parses and executes the complete requests in buf[0..len) until the input runs out,
 * the connection closes or pauses, or too much output is waiting. Returns the bytes
 * consumed.
 */
static size_t execute_all(struct conn *c, const char *buf, size_t len)
{
    struct server *srv = c->srv;
    const struct proto_limits lim = {.max_line = srv->cfg.max_line};
    struct proto_request run[CONN_RUN];
    size_t off = 0, used = 0;
    int st = PROTO_MORE;
    bool parsed = false; /* run[0], st and used already hold the request at off */
    while (off < len && !c->closing && !c->pending && unsent(c) <= srv->cfg.max_output) {
        struct proto_request *req = &run[0];
        if (!parsed)
            st = proto_parse(buf + off, len - off, &lim, req, &used);
        parsed = false;
        if (st == PROTO_MORE)
            break;
        if (st == PROTO_OK && commands_runnable(req)) {
            /* Merge the small key requests that follow into one lib batch. */
            size_t n = 1, keys = req->nargs, next_used = 0;
            int next = PROTO_MORE;
            while (n < CONN_RUN && off + used < len) {
                next = proto_parse(buf + off + used, len - off - used, &lim, &run[n], &next_used);
                if (next != PROTO_OK || !commands_same_run(req, &run[n]) ||
                    keys + run[n].nargs > COMMANDS_BATCH)
                    break;
                keys += run[n++].nargs;
                used += next_used;
                next = PROTO_MORE;
            }
            commands_execute_run(srv, run, n, &c->out);
            off += used;
            if (next != PROTO_MORE) {
                /* The request that ended the run is parsed already: do not parse it again. */
                run[0] = run[n];
                st = next;
                used = next_used;
                parsed = true;
            }
            continue;
        }
        if (st == PROTO_OK) {
            int r = commands_execute(srv, req, &c->out, c);
            if (r == CMD_CLOSE)
                c->closing = true;
            else if (r == CMD_PENDING)
                c->pending = true;
        } else if (st == PROTO_ERR_TOO_LONG) {
            srv->stats.errors++;
            log_msg(LOG_INFO, "client %s: line longer than %llu bytes, closing", c->peer,
                    (unsigned long long)srv->cfg.max_line);
            proto_reply_parse_error(&c->out, st, req);
            c->closing = true;
            used = len - off; /* the rest of the stream is discarded */
        } else if (st != PROTO_BLANK) {
            srv->stats.errors++;
            proto_reply_parse_error(&c->out, st, req);
        }
        off += used;
    }
    return off;
}

/* Parses what the connection's own buffer holds. Returns true if anything was consumed. */
static bool execute_buffered(struct conn *c)
{
    if (c->in_len == 0)
        return false;
    size_t used = execute_all(c, c->in, c->in_len);
    if (used == 0)
        return false;
    c->in_len -= used;
    memmove(c->in, c->in + used, c->in_len);
    if (c->in_len == 0 && c->in_cap > CONN_MIN_IN) {
        free(c->in); /* held a long line or a backlog: do not keep it */
        c->in = NULL;
        c->in_cap = 0;
    }
    return true;
}

/* Makes room for `more` bytes after in_len. Returns false on allocation failure. */
static bool reserve_in(struct conn *c, size_t more)
{
    if (c->in_cap - c->in_len >= more)
        return true;
    size_t cap = c->in_cap > 0 ? c->in_cap : CONN_MIN_IN;
    while (cap - c->in_len < more)
        cap *= 2;
    char *p = realloc(c->in, cap);
    if (p == NULL)
        return false;
    c->in = p;
    c->in_cap = cap;
    return true;
}

/* Writes as much output as the socket takes. Returns -1 on a socket error. */
static int flush_out(struct conn *c)
{
    while (unsent(c) > 0) {
        ssize_t n = write(c->fd, c->out.data + c->out_sent, unsent(c));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            log_msg(LOG_DEBUG, "write to %s: %s", c->peer, strerror(errno));
            return -1;
        }
        c->out_sent += (size_t)n;
        c->srv->stats.bytes_written += (uint64_t)n;
    }
    if (c->out.cap > CONN_KEEP_OUT) {
        proto_buf_free(&c->out);
        memset(&c->out, 0, sizeof(c->out));
    } else {
        proto_buf_reset(&c->out);
    }
    c->out_sent = 0;
    return 0;
}

/*
 * Brings the connection up to date after any event: runs buffered requests that output
 * room allows, writes, and chooses which events to wait for. May free c.
 */
static void pump(struct conn *c)
{
    struct server *srv = c->srv;
    for (;;) {
        bool progress = !c->lingering && execute_buffered(c);
        bool blocked = unsent(c) > srv->cfg.max_output; /* parsing waits for output room */
        if (c->out.failed) {
            log_msg(LOG_ERROR, "client %s: out of memory for replies, closing", c->peer);
            conn_close(c);
            return;
        }
        if (!c->lingering && flush_out(c) < 0) {
            conn_close(c);
            return;
        }
        /*
         * Go round again while requests may still be waiting in the buffer: after
         * progress, or when the write just made room for parsing that was blocked.
         */
        if ((!progress && !blocked) || unsent(c) > srv->cfg.max_output || c->closing || c->pending)
            break;
    }
    /* After EOF, once nothing executable is left (an unfinished line is dropped). */
    if (c->eof && !c->pending && unsent(c) <= srv->cfg.max_output)
        c->closing = true;
    if (c->closing && unsent(c) == 0 && !c->lingering && !c->pending) {
        if (c->eof) {
            conn_close(c);
            return;
        }
        /*
         * Half-close and keep reading (discarding) until the peer closes: closing with
         * unread input would send a reset that can destroy our last reply in flight.
         */
        shutdown(c->fd, SHUT_WR);
        c->lingering = true;
        free(c->in);
        c->in = NULL;
        c->in_len = c->in_cap = 0;
        set_event(c->ev_read, &c->reading, false, 0);
    }
    if (c->pending) {
        set_event(c->ev_read, &c->reading, false, 0);
        set_event(c->ev_write, &c->writing, unsent(c) > 0, 0);
        return;
    }
    bool want_write = unsent(c) > 0 && !c->lingering;
    bool want_read = c->lingering || (!c->closing && !c->eof && unsent(c) <= srv->cfg.max_output);
    unsigned idle = srv->cfg.idle_timeout;
    set_event(c->ev_write, &c->writing, want_write, c->closing ? CONN_CLOSE_SECONDS : idle);
    set_event(c->ev_read, &c->reading, want_read, c->lingering ? CONN_CLOSE_SECONDS : idle);
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    struct server *srv = c->srv;
    if (what & EV_TIMEOUT) {
        if (!c->lingering)
            log_msg(LOG_INFO, "client %s idle for %u s, closing", c->peer, srv->cfg.idle_timeout);
        conn_close(c);
        return;
    }
    if (c->lingering) {
        ssize_t n = read(fd, srv->rbuf, SERVER_RBUF);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            conn_close(c);
        return;
    }
    /*
     * Usually the unfinished tail (a part of one line) is copied in front of the shared
     * buffer and the read goes after it. Only a line longer than half the shared buffer
     * grows in the connection's own buffer, up to max_line.
     */
    bool shared = c->in_len <= SERVER_RBUF / 2;
    char *dst = srv->rbuf + c->in_len;
    size_t room = SERVER_RBUF - c->in_len;
    if (shared) {
        if (c->in_len > 0)
            memcpy(srv->rbuf, c->in, c->in_len);
    } else {
        size_t want = c->in_len < srv->cfg.max_line ? srv->cfg.max_line - c->in_len : 1;
        if (want > SERVER_RBUF)
            want = SERVER_RBUF;
        if (!reserve_in(c, want)) {
            log_msg(LOG_ERROR, "client %s: out of memory for input, closing", c->peer);
            conn_close(c);
            return;
        }
        dst = c->in + c->in_len;
        room = c->in_cap - c->in_len;
    }
    ssize_t n = read(fd, dst, room);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return;
        log_msg(LOG_DEBUG, "read from %s: %s", c->peer, strerror(errno));
        conn_close(c);
        return;
    }
    if (n == 0) {
        /* The peer finished sending: answer what it sent (pump), then close. */
        c->eof = true;
        pump(c);
        return;
    }
    srv->stats.bytes_read += (uint64_t)n;
    if (!shared) {
        c->in_len += (size_t)n;
        /*
         * Reading is on only while the buffer holds nothing but one unfinished line, so
         * without a newline in the new bytes there is nothing to parse yet: re-scanning
         * the whole line on every read would cost O(line) per read to a trickling client.
         */
        if (memchr(dst, '\n', (size_t)n) == NULL && c->in_len < srv->cfg.max_line)
            return;
    } else {
        size_t total = c->in_len + (size_t)n;
        c->in_len = 0;
        if (c->in_cap > CONN_MIN_IN) {
            free(c->in); /* it held a long tail; a new one gets a fitting buffer */
            c->in = NULL;
            c->in_cap = 0;
        }
        size_t used = execute_all(c, srv->rbuf, total);
        size_t left = total - used;
        if (left > 0 && !c->closing) {
            if (!reserve_in(c, left)) {
                log_msg(LOG_ERROR, "client %s: out of memory for input, closing", c->peer);
                conn_close(c);
                return;
            }
            memcpy(c->in, srv->rbuf + used, left);
            c->in_len = left;
        }
    }
    pump(c);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    struct conn *c = arg;
    if (what & EV_TIMEOUT) {
        log_msg(LOG_INFO, "client %s has not read its replies, closing", c->peer);
        conn_close(c);
        return;
    }
    pump(c);
}

struct proto_buf *conn_output(struct conn *c)
{
    return &c->out;
}

void conn_resume(struct conn *c)
{
    c->pending = false;
    if (c->lingering && c->closing && !c->reading) {
        conn_free(c); /* the peer left while we were waiting */
        return;
    }
    pump(c);
}

void conn_close_all(struct server *srv)
{
    while (srv->conns != NULL) {
        srv->conns->pending = false;
        conn_free(srv->conns);
    }
}
