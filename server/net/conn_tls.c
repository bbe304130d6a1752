/*
 * conn_tls.c - a TLS client over libevent's bufferevent_openssl, which owns the socket and
 * does the handshake, records, WANT_READ/WANT_WRITE and close_notify. Once the handshake is
 * done the client becomes a connection's transport (server/net/conn_io.h): reads copy plaintext
 * out of the bufferevent's input, writes append to its output until TLS_OUT_HIGH bytes wait
 * there (then CONN_IO_AGAIN, the socket's EAGAIN, so conn.c's max_output backpressure works
 * unchanged), and the bufferevent's callbacks drive the connection's on_read/on_write.
 *
 * The contract is level-triggered, as a socket is: bytes left in the input after a read, an
 * end of input or an error are told again at once (ev_ready), not only when more arrives;
 * new records are told once a loop pass brings no more (on_input), so a pipelined batch
 * is parsed in one read and answered in one record. The bufferevent reads only while the
 * connection watches reading, and no read watermark is set: libevent could then stop
 * mid-record and leave plaintext inside OpenSSL that no socket event would ever report.
 * A closed connection's last replies still leave (TLS_CLOSING), then close_notify.
 *
 * Before any of that the first byte is looked at (TLS_PEEK): a TLS client starts with a
 * handshake record (0x16); anything else is someone typing the text protocol at the wrong
 * port, who is told so in one plain line and closed (TLS_REFUSED), where OpenSSL would
 * only drop the connection.
 */
#include "server/net/conn_tls.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/core/clock.h"
#include "server/core/log.h"
#include "server/net/conn.h"
#include "server/net/conn_io.h"
#include "server/net/netaddr.h"
#include "server/net/worker.h"

#define TLS_HANDSHAKE_SECONDS 10       /* a client must finish its handshake this fast */
#define TLS_OUT_HIGH (256 * 1024)      /* unsent bytes before a write says AGAIN; read size */
#define TLS_OUT_LOW (TLS_OUT_HIGH / 2) /* ... and writable again at or below this */
#define TLS_CLOSE_SECONDS 5            /* a closed connection's last bytes get this long */
#define TLS_RECORD_HANDSHAKE 0x16      /* the first byte of every TLS ClientHello */
#define TLS_REFUSED_DRAIN (64 * 1024)  /* plain text read and dropped before the close */
#define TLS_REFUSED_SECONDS 2          /* ... for this long at most */
#define TLS_REFUSED_LINE "CLIENT_ERROR this port speaks TLS\r\n"

enum tls_state {
    TLS_PEEK,      /* on the set; waiting for the first byte: a handshake or plain text? */
    TLS_REFUSED,   /* on the set; plain text, told so: reading to the client's end, then gone */
    TLS_HANDSHAKE, /* on the set; no connection yet */
    TLS_OPEN,      /* a connection's transport */
    TLS_CLOSING,   /* the connection closed; on the set until the output has left */
};

/* Where a goodbye is: close_notify and the TCP FIN, after the replies. */
enum tls_bye {
    TLS_BYE_NONE,   /* not asked for */
    TLS_BYE_WANTED, /* once the output has left */
    TLS_BYE_DONE,   /* close_notify sent, write side shut */
};

struct conn_tls {
    struct conn_io io; /* first member: what the connection holds */
    enum tls_state state;
    enum tls_bye bye;
    struct conn_tls_set *set;
    struct conn_tls *prev, *next; /* on set (all but TLS_OPEN) */
    struct bufferevent *bev;      /* the client's socket, its SSL, plaintext input and output */
    SSL *ssl;                     /* TLS_PEEK, TLS_REFUSED: the SSL no bufferevent has yet */
    int fd;                       /* ... and the socket */
    struct event *ev_peek;        /* ... and the event that reads it */
    size_t drained;               /* TLS_REFUSED: plain bytes read and dropped */
    uint64_t refused_until;       /* TLS_REFUSED: clock_mono_ms() after which it goes */
    struct event *ev_ready;       /* every call into the connection comes from here */
    struct worker *w;
    const struct conn_proto *proto;
    struct sockaddr_storage peer;
    socklen_t peerlen;
    char name[NETADDR_MAX]; /* peer, for log lines */
    struct timeval rto;     /* the read timeout, when rto_on */
    struct timeval wto;     /* the write timeout, when wto_on */
    bool rto_on, wto_on;
    bool reading;       /* the connection watches reading */
    bool writing;       /* the connection watches writing */
    bool read_timeout;  /* the read timeout passed: tell the connection */
    bool write_timeout; /* the write timeout passed: tell the connection */
    bool eof;           /* the client sent everything it will send */
    bool failed;        /* a TLS or socket error: reads and writes fail */
};

static void link_on(struct conn_tls *t)
{
    t->prev = NULL;
    t->next = t->set->head;
    if (t->next != NULL)
        t->next->prev = t;
    t->set->head = t;
}

static void unlink_from(struct conn_tls *t)
{
    if (t->prev != NULL)
        t->prev->next = t->next;
    else
        t->set->head = t->next;
    if (t->next != NULL)
        t->next->prev = t->prev;
    t->prev = t->next = NULL;
}

static void client_free(struct conn_tls *t)
{
    if (t->state != TLS_OPEN)
        unlink_from(t);
    if (t->ev_ready != NULL)
        event_free(t->ev_ready);
    if (t->ev_peek != NULL)
        event_free(t->ev_peek);
    if (t->bev != NULL) {
        bufferevent_free(t->bev); /* frees the SSL and closes the socket */
    } else {
        SSL_free(t->ssl);
        close(t->fd);
    }
    log_msg(LOG_DEBUG, "TLS client %s gone", t->name);
    free(t);
}

/* Bytes written and not yet encrypted and sent. */
static size_t unsent(const struct conn_tls *t)
{
    return evbuffer_get_length(bufferevent_get_output(t->bev));
}

/* Moves a goodbye on as far as the output allows. */
static void advance_bye(struct conn_tls *t)
{
    if (t->failed || t->bye != TLS_BYE_WANTED || unsent(t) > 0)
        return;
    /* Straight to the socket, best effort: a full socket buffer drops it. */
    SSL_shutdown(bufferevent_openssl_get_ssl(t->bev));
    shutdown(bufferevent_getfd(t->bev), SHUT_WR);
    t->bye = TLS_BYE_DONE;
}

static bool readable(const struct conn_tls *t)
{
    return t->read_timeout || t->eof || t->failed ||
           evbuffer_get_length(bufferevent_get_input(t->bev)) > 0;
}

static bool writable(const struct conn_tls *t)
{
    return t->write_timeout || t->failed || unsent(t) <= TLS_OUT_LOW;
}

/*
 * Calls back from the loop if something is to be done, never from inside a call of the
 * connection's (a read, a watch), which calling it back would re-enter.
 */
static void poke(struct conn_tls *t)
{
    if (t->state == TLS_CLOSING || t->bye == TLS_BYE_WANTED || (t->reading && readable(t)) ||
        (t->writing && writable(t)))
        event_active(t->ev_ready, EV_READ, 0);
}

/* Tells the connection what is ready; one call (each ends in a pump). May free t. */
static void on_ready(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct conn_tls *t = arg;
    advance_bye(t);
    if (t->state == TLS_CLOSING) {
        if (t->failed || t->bye == TLS_BYE_DONE)
            client_free(t);
        return;
    }
    if (t->reading && readable(t)) {
        bool timed_out = t->read_timeout && !t->eof && !t->failed;
        t->read_timeout = false;
        t->io.on_read(t->io.arg, timed_out);
    } else if (t->writing && writable(t)) {
        bool timed_out = t->write_timeout && !t->failed;
        t->write_timeout = false;
        t->io.on_write(t->io.arg, timed_out);
    }
}

static void apply_timeouts(struct conn_tls *t)
{
    bufferevent_set_timeouts(t->bev, t->rto_on ? &t->rto : NULL, t->wto_on ? &t->wto : NULL);
}

/* ---- the transport ---- */

static ssize_t tls_read(struct conn_io *io, void *buf, size_t len)
{
    struct conn_tls *t = (struct conn_tls *)io;
    int n = evbuffer_remove(bufferevent_get_input(t->bev), buf, len);
    if (n > 0) {
        poke(t); /* more is left, or the end follows it */
        return n;
    }
    if (t->failed) {
        errno = ECONNRESET;
        return -1;
    }
    return t->eof ? 0 : CONN_IO_AGAIN;
}

static ssize_t tls_write(struct conn_io *io, const void *buf, size_t len)
{
    struct conn_tls *t = (struct conn_tls *)io;
    size_t have = unsent(t);
    if (!t->failed && have >= TLS_OUT_HIGH)
        return CONN_IO_AGAIN;
    size_t n = len < TLS_OUT_HIGH - have ? len : TLS_OUT_HIGH - have;
    if (!t->failed && evbuffer_add(bufferevent_get_output(t->bev), buf, n) != 0)
        t->failed = true;
    if (t->failed) {
        errno = EPIPE;
        return -1;
    }
    return (ssize_t)n;
}

static void tls_watch(struct conn_io *io, enum conn_io_dir dir, unsigned timeout)
{
    struct conn_tls *t = (struct conn_tls *)io;
    bool on = timeout > 0;
    if (dir == CONN_IO_READ) {
        t->reading = true;
        if (on != t->rto_on || t->rto.tv_sec != (time_t)timeout) {
            t->rto_on = on;
            t->rto = (struct timeval){.tv_sec = timeout, .tv_usec = 0};
            apply_timeouts(t);
        }
        if (!t->eof && !t->failed)
            bufferevent_enable(t->bev, EV_READ); /* restarts the read timeout */
    } else {
        t->writing = true;
        t->wto_on = on;
        t->wto = (struct timeval){.tv_sec = timeout, .tv_usec = 0};
        apply_timeouts(t); /* restarts the write timeout */
    }
    poke(t);
}

static void tls_unwatch(struct conn_io *io, enum conn_io_dir dir)
{
    struct conn_tls *t = (struct conn_tls *)io;
    if (dir == CONN_IO_READ) {
        t->reading = false;
        bufferevent_disable(t->bev, EV_READ); /* the socket is not read meanwhile */
    } else {
        t->writing = false;
        if (t->wto_on) {
            t->wto_on = false; /* what is buffered still leaves, with the read's deadline */
            apply_timeouts(t);
        }
    }
}

static void tls_shutdown(struct conn_io *io)
{
    struct conn_tls *t = (struct conn_tls *)io;
    if (t->bye == TLS_BYE_NONE)
        t->bye = TLS_BYE_WANTED;
    advance_bye(t);
}

/* What an OpenSSL server session holds beside our buffers (its record buffers). */
#define TLS_SESSION_BYTES (40 * 1024)

static size_t tls_held(const struct conn_io *io)
{
    const struct conn_tls *t = (const struct conn_tls *)io;
    return sizeof *t + TLS_SESSION_BYTES + evbuffer_get_length(bufferevent_get_input(t->bev)) +
           evbuffer_get_length(bufferevent_get_output(t->bev));
}

static void tls_close(struct conn_io *io)
{
    struct conn_tls *t = (struct conn_tls *)io;
    if (t->bye == TLS_BYE_NONE)
        t->bye = TLS_BYE_WANTED;
    advance_bye(t);
    if (t->failed || t->bye == TLS_BYE_DONE) {
        client_free(t);
        return;
    }
    /* The replies still buffered leave first, then close_notify (on_ready). */
    t->state = TLS_CLOSING;
    t->reading = t->writing = false;
    link_on(t);
    event_del(t->ev_ready);
    bufferevent_disable(t->bev, EV_READ);
    t->rto_on = false;
    t->wto_on = true;
    t->wto = (struct timeval){.tv_sec = TLS_CLOSE_SECONDS, .tv_usec = 0};
    apply_timeouts(t);
}

static const struct conn_io_ops tls_ops = {
    .read = tls_read,
    .write = tls_write,
    .watch = tls_watch,
    .unwatch = tls_unwatch,
    .shutdown = tls_shutdown,
    .held = tls_held,
    .close = tls_close,
};

/* ---- the bufferevents' callbacks: they record, on_ready acts ---- */

/*
 * New plaintext in the input (libevent decrypts one record per readiness event). The
 * connection hears of it once a loop pass brings no more, or TLS_OUT_HIGH bytes wait: a
 * pipelined batch arrives as several records, and parsed together they get one reply
 * record instead of one each (fewer, larger reads and writes, as plain TCP's one read).
 */
static void on_input(struct bufferevent *bev, void *arg)
{
    struct conn_tls *t = arg;
    static const struct timeval next_pass = {0, 0};
    if (t->state != TLS_OPEN || !t->reading)
        return;
    event_del(t->ev_ready);
    if (evbuffer_get_length(bufferevent_get_input(bev)) >= TLS_OUT_HIGH)
        event_active(t->ev_ready, EV_READ, 0);
    else
        event_add(t->ev_ready, &next_pass);
}

/* The output is down to TLS_OUT_LOW bytes or fewer: a writer or a goodbye may go on. */
static void on_written(struct bufferevent *bev, void *arg)
{
    (void)bev;
    struct conn_tls *t = arg;
    if (t->state != TLS_HANDSHAKE)
        poke(t);
}

/* Handshake done: the client becomes a connection. */
static void open_conn(struct conn_tls *t)
{
    unlink_from(t);
    t->state = TLS_OPEN;
    t->io.ops = &tls_ops;
    t->ev_ready = event_new(t->w->base, -1, 0, on_ready, t);
    if (t->ev_ready == NULL) {
        log_msg(LOG_ERROR, "TLS client %s: out of memory", t->name);
        client_free(t);
        return;
    }
    bufferevent_set_timeouts(t->bev, NULL, NULL);
    bufferevent_setwatermark(t->bev, EV_WRITE, TLS_OUT_LOW, 0);
    /* libevent writes 16 KiB at a time by default: a pipelined client reads more. */
    bufferevent_set_max_single_write(t->bev, TLS_OUT_HIGH);
    bufferevent_disable(t->bev, EV_READ); /* until the connection watches reading */
    SSL *ssl = bufferevent_openssl_get_ssl(t->bev);
    log_msg(LOG_DEBUG, "TLS client %s: %s, %s", t->name, SSL_get_version(ssl),
            SSL_get_cipher_name(ssl));
    conn_start(t->w, t->proto, &t->io, (struct sockaddr *)&t->peer, t->peerlen);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct conn_tls *t = arg;
    if (t->state == TLS_HANDSHAKE) {
        if (what & BEV_EVENT_CONNECTED) {
            open_conn(t);
            return;
        }
        char why[256] = "timed out";
        unsigned long e = bufferevent_get_openssl_error(bev);
        if (e != 0)
            ERR_error_string_n(e, why, sizeof why);
        else if (!(what & BEV_EVENT_TIMEOUT))
            snprintf(why, sizeof why, "%s", (what & BEV_EVENT_EOF) ? "closed" : strerror(errno));
        log_msg(LOG_INFO, "TLS handshake with %s failed: %s", t->name, why);
        client_free(t);
        return;
    }
    if (what & BEV_EVENT_TIMEOUT) {
        if (t->state == TLS_CLOSING)
            t->failed = true; /* not reading its last replies: give up */
        else if (what & BEV_EVENT_READING)
            t->read_timeout = true;
        else
            t->write_timeout = true;
    } else if (what & BEV_EVENT_ERROR) {
        unsigned long e = bufferevent_get_openssl_error(bev);
        char why[256];
        if (e != 0)
            ERR_error_string_n(e, why, sizeof why);
        else
            snprintf(why, sizeof why, "%s", strerror(errno));
        log_msg(LOG_DEBUG, "TLS client %s: %s", t->name, why);
        t->failed = true;
    } else if (what & BEV_EVENT_EOF) {
        t->eof = true;
        if (t->state == TLS_CLOSING)
            t->failed = true; /* gone: nothing more will be read */
    }
    poke(t);
}

/* The first byte was a handshake record's: from here on the bufferevent owns both. */
static void start_handshake(struct conn_tls *t)
{
    event_free(t->ev_peek);
    t->ev_peek = NULL;
    SSL *ssl = t->ssl;
    t->ssl = NULL;
    t->bev = bufferevent_openssl_socket_new(t->w->base, t->fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                            BEV_OPT_CLOSE_ON_FREE);
    if (t->bev == NULL) { /* libevent freed the SSL; the socket is still ours */
        log_msg(LOG_ERROR, "TLS accept: out of memory for a new connection");
        client_free(t);
        return;
    }
    t->state = TLS_HANDSHAKE;
    /* A client that closes without close_notify is an EOF, not an error. */
    bufferevent_openssl_set_allow_dirty_shutdown(t->bev, 1);
    struct timeval tv = {.tv_sec = TLS_HANDSHAKE_SECONDS, .tv_usec = 0};
    bufferevent_set_timeouts(t->bev, &tv, &tv);
    bufferevent_setcb(t->bev, on_input, on_written, on_event, t);
    bufferevent_enable(t->bev, EV_READ | EV_WRITE);
}

/* Reads and drops what a refused client sends; true once it is done with (its end, an
 * error, or more than TLS_REFUSED_DRAIN bytes: then the close may reset). */
static bool drain_refused(struct conn_tls *t)
{
    char buf[4096];
    for (;;) {
        ssize_t n = recv(t->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
            t->drained += (size_t)n;
            if (t->drained > TLS_REFUSED_DRAIN)
                return true;
            continue;
        }
        return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
}

/*
 * TLS_PEEK: the first byte decides; TLS_REFUSED: the plain-text client's input is read to
 * its end (so that closing sends a FIN after our line, not a reset that could overtake
 * it), for TLS_REFUSED_SECONDS at most. May free t.
 */
static void on_peek(evutil_socket_t fd, short what, void *arg)
{
    struct conn_tls *t = arg;
    if (t->state == TLS_REFUSED) {
        if ((what & EV_TIMEOUT) || clock_mono_ms() > t->refused_until || drain_refused(t))
            client_free(t);
        return;
    }
    if (what & EV_TIMEOUT) {
        log_msg(LOG_INFO, "TLS handshake with %s failed: timed out", t->name);
        client_free(t);
        return;
    }
    unsigned char first;
    ssize_t n = recv(fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return; /* still persistent: the next readiness tells */
    if (n <= 0) {
        log_msg(LOG_INFO, "TLS handshake with %s failed: %s", t->name,
                n == 0 ? "closed" : strerror(errno));
        client_free(t);
        return;
    }
    if (first == TLS_RECORD_HANDSHAKE) {
        start_handshake(t);
        return;
    }
    log_msg(LOG_INFO, "TLS handshake with %s failed: plain text, not TLS (told so, closed)",
            t->name);
    /* Best effort and without waiting: a fresh socket's buffer holds one line. */
    (void)send(fd, TLS_REFUSED_LINE, sizeof TLS_REFUSED_LINE - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    shutdown(fd, SHUT_WR);
    t->state = TLS_REFUSED;
    t->refused_until = clock_mono_ms() + TLS_REFUSED_SECONDS * 1000;
    struct timeval tv = {.tv_sec = TLS_REFUSED_SECONDS, .tv_usec = 0};
    if (drain_refused(t) || event_add(t->ev_peek, &tv) != 0)
        client_free(t);
}

int conn_tls_accept(struct conn_tls_set *set, struct worker *w, const struct conn_proto *proto,
                    SSL *ssl, int fd, const struct sockaddr *peer, socklen_t peerlen)
{
    struct conn_tls *t = calloc(1, sizeof *t);
    if (t == NULL)
        goto error;
    t->set = set;
    t->w = w;
    t->proto = proto;
    t->ssl = ssl;
    t->fd = fd;
    if (peerlen > sizeof t->peer)
        peerlen = sizeof t->peer;
    memcpy(&t->peer, peer, peerlen);
    t->peerlen = peerlen;
    netaddr_format(peer, peerlen, t->name, sizeof t->name);
    t->state = TLS_PEEK;
    /* Persistent: a readiness that turns out empty (EAGAIN) waits for the next. The
     * timeout restarts at each, so TLS_REFUSED keeps its own deadline. */
    t->ev_peek = event_new(w->base, fd, EV_READ | EV_PERSIST, on_peek, t);
    struct timeval tv = {.tv_sec = TLS_HANDSHAKE_SECONDS, .tv_usec = 0};
    if (t->ev_peek == NULL || event_add(t->ev_peek, &tv) != 0) {
        if (t->ev_peek != NULL)
            event_free(t->ev_peek);
        goto error;
    }
    link_on(t);
    return 0;
error:
    log_msg(LOG_ERROR, "TLS accept: out of memory for a new connection");
    SSL_free(ssl);
    close(fd);
    free(t);
    return -1;
}

void conn_tls_close_all(struct conn_tls_set *set)
{
    while (set->head != NULL)
        client_free(set->head);
}
