/*
 * listen.c - accept loop. Level-triggered: each readiness event accepts up to
 * ACCEPT_BATCH clients so a connection storm cannot starve established clients. Under
 * EMFILE the spare /dev/null descriptor is closed, the pending client accepted and told
 * why, and the spare reopened; without a spare we pause accepting briefly instead.
 */
#include "server/net/listen.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/core/log.h"
#include "server/core/server.h"
#include "server/net/conn.h"
#include "server/net/conn_io.h"
#include "server/net/conn_plain.h"
#include "server/net/netaddr.h"
#include "server/net/worker.h"

#define ACCEPT_BATCH 64
#define ACCEPT_PAUSE_MS 100
#define TOO_MANY "SERVER_ERROR too many connections\r\n"
#define PROTECTED "SERVER_ERROR protected mode: set auth_token or protected_mode no\r\n"

struct listener {
    struct worker *w;
    const struct conn_proto *proto; /* what accepted clients speak */
    int fd;
    int spare;            /* /dev/null, given up to accept under EMFILE; -1 if lost */
    struct event *ev;     /* readable listening socket */
    struct event *resume; /* timer: accept again after a pause */
    const struct conn_transport *transport; /* makes accepted sockets connections */
};

static void refuse(struct worker *w, int fd, const char *line)
{
    /* Best effort: a fresh socket's send buffer always takes one short line. */
    ssize_t n = send(fd, line, strlen(line), MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)n;
    close(fd);
    w->stats.conn_rejected++;
}

static void pause_accepting(struct listener *l)
{
    struct timeval tv = {.tv_sec = 0, .tv_usec = ACCEPT_PAUSE_MS * 1000};
    event_del(l->ev);
    event_add(l->resume, &tv);
}

/* Out of descriptors: use the spare to accept and refuse one client. */
static void accept_emfile(struct listener *l)
{
    if (l->spare < 0) {
        l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (l->spare < 0) {
            pause_accepting(l);
            return;
        }
    }
    close(l->spare);
    l->spare = -1;
    int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) {
        log_msg(LOG_WARN, "out of file descriptors: refusing a client");
        refuse(l->w, fd, TOO_MANY);
    }
    l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    (void)what;
    struct listener *l = arg;
    struct worker *w = l->w;
    const struct config *cfg = &w->srv->cfg;
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE) {
                accept_emfile(l);
                return;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                log_msg(LOG_ERROR, "accept: %s", strerror(errno));
                pause_accepting(l);
            }
            return;
        }
        /* Per worker: with several workers, each would get its share of the limit. */
        if (w->stats.conn_current >= cfg->max_connections) {
            log_msg(LOG_WARN, "max_connections (%u) reached: refusing a client",
                    cfg->max_connections);
            refuse(w, fd, TOO_MANY);
            continue;
        }
        if (w->srv->protect && !netaddr_is_loopback((struct sockaddr *)&ss, len)) {
            char peer[NETADDR_MAX];
            netaddr_format((struct sockaddr *)&ss, len, peer, sizeof peer);
            log_msg(LOG_WARN, "protected mode: refusing %s (not loopback, no auth_token)", peer);
            refuse(w, fd, PROTECTED);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        l->transport->accept(l->transport, w, l->proto, fd, (struct sockaddr *)&ss, len);
    }
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct listener *l = arg;
    event_add(l->ev, NULL);
}

/* Returns a listening socket for host:port, or -1 after logging why. */
static int open_socket(const char *host, unsigned port)
{
    char service[16];
    snprintf(service, sizeof(service), "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res;
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        log_msg(LOG_ERROR, "bind address %s: %s", host, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    int err = 0;
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        log_msg(LOG_ERROR, "listen on %s:%u: %s", host, port, strerror(err));
    return fd;
}

struct listener *listener_open(struct worker *w, const struct conn_proto *proto, const char *host,
                               unsigned port)
{
    struct listener *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        log_msg(LOG_ERROR, "listen: out of memory");
        return NULL;
    }
    l->w = w;
    l->proto = proto;
    l->transport = &conn_transport_plain;
    l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
    l->fd = open_socket(host, port);
    if (l->fd < 0)
        goto error;
    l->ev = event_new(w->base, l->fd, EV_READ | EV_PERSIST, on_accept, l);
    l->resume = evtimer_new(w->base, on_resume, l);
    if (l->ev == NULL || l->resume == NULL || event_add(l->ev, NULL) != 0) {
        log_msg(LOG_ERROR, "listen: cannot register the listening socket");
        goto error;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char addr[NETADDR_MAX] = "?";
    if (getsockname(l->fd, (struct sockaddr *)&ss, &len) == 0)
        netaddr_format((struct sockaddr *)&ss, len, addr, sizeof(addr));
    log_msg(LOG_INFO, "listening on %s (%s protocol)", addr, proto->name);
    if (w->srv->protect && !netaddr_is_loopback((struct sockaddr *)&ss, len))
        log_msg(LOG_WARN,
                "protected mode: %s is not a loopback address and no auth_token is set, so "
                "only clients on this host are served; others get an error. Set auth_token "
                "(or --auth-token-file), or --protected-mode no if the network is trusted",
                addr);
    return l;
error:
    listener_close(l);
    return NULL;
}

void listener_close(struct listener *l)
{
    if (l == NULL)
        return;
    if (l->ev != NULL)
        event_free(l->ev);
    if (l->resume != NULL)
        event_free(l->resume);
    if (l->fd >= 0)
        close(l->fd);
    if (l->spare >= 0)
        close(l->spare);
    free(l);
}

void listener_set_transport(struct listener *l, const struct conn_transport *t)
{
    l->transport = t;
}
