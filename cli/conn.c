/*
 * conn.c - sockets and TLS for bloomd-cli. With TLS, a read may need the socket writable
 * and a write may need it readable (renegotiation, key updates): the two flags below say
 * so, and cli_conn_events turns them into poll() events. SSL_write may be retried from a
 * moved buffer (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER) because the output buffer compacts.
 */
#include "cli/conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "cli/msg.h"

#define READ_CHUNK ((size_t)256 << 10)
#define FILL_MAX ((size_t)4 << 20) /* bytes one cli_conn_fill reads at most */

struct cli_conn {
    int fd;                  /* non-blocking socket */
    SSL_CTX *ctx;            /* TLS only */
    SSL *ssl;                /* TLS only */
    struct cli_buf in;       /* received, not yet taken as lines */
    struct cli_buf out;      /* requests not yet written */
    bool read_wants_write;   /* TLS: the last read needs POLLOUT */
    int timeout_ms;          /* -1: forever */
    char addr[CLI_ADDR_MAX]; /* host:port */
    char err[256];           /* the last failure */
};

int cli_conn_fd(const struct cli_conn *c)
{
    return c->fd;
}

const char *cli_conn_addr(const struct cli_conn *c)
{
    return c->addr;
}

const char *cli_conn_error(const struct cli_conn *c)
{
    return c->err;
}

struct cli_buf *cli_conn_out(struct cli_conn *c)
{
    return &c->out;
}

struct cli_buf *cli_conn_in(struct cli_conn *c)
{
    return &c->in;
}

int cli_conn_timeout(const struct cli_conn *c)
{
    return c->timeout_ms;
}

short cli_conn_events(const struct cli_conn *c)
{
    short ev = POLLIN;
    if (cli_buf_pending(&c->out) > 0 || c->read_wants_write)
        ev |= POLLOUT;
    return ev;
}

int cli_conn_wait(struct cli_conn *c, int timeout_ms)
{
    struct pollfd p = {.fd = c->fd, .events = cli_conn_events(c)};
    int n = poll(&p, 1, timeout_ms);
    return n > 0 || (n < 0 && errno == EINTR);
}

/* The text of the newest OpenSSL error (or what), into c->err. */
static void tls_error(struct cli_conn *c, const char *what)
{
    unsigned long e = ERR_get_error();
    if (e != 0) {
        char buf[200];
        ERR_error_string_n(e, buf, sizeof buf);
        snprintf(c->err, sizeof c->err, "%s: %s", what, buf);
    } else {
        snprintf(c->err, sizeof c->err, "%s: %s", what, errno ? strerror(errno) : "closed");
    }
    ERR_clear_error();
}

int cli_conn_flush(struct cli_conn *c)
{
    while (cli_buf_pending(&c->out) > 0) {
        const char *p = c->out.data + c->out.off;
        size_t n = cli_buf_pending(&c->out);
        if (c->ssl != NULL) {
            int w = SSL_write(c->ssl, p, n > (1u << 30) ? 1 << 30 : (int)n);
            if (w <= 0) {
                int e = SSL_get_error(c->ssl, w);
                if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ)
                    return CLI_CONN_OK;
                tls_error(c, "TLS write");
                return CLI_CONN_ERR;
            }
            cli_buf_consume(&c->out, (size_t)w);
        } else {
            ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
            if (w < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                    return CLI_CONN_OK;
                snprintf(c->err, sizeof c->err, "%s", strerror(errno));
                return CLI_CONN_ERR;
            }
            cli_buf_consume(&c->out, (size_t)w);
        }
    }
    return CLI_CONN_OK;
}

int cli_conn_fill(struct cli_conn *c)
{
    size_t got = 0;
    c->read_wants_write = false;
    while (got < FILL_MAX) {
        char *p = cli_buf_reserve(&c->in, READ_CHUNK);
        if (c->ssl != NULL) {
            int r = SSL_read(c->ssl, p, (int)READ_CHUNK);
            if (r <= 0) {
                int e = SSL_get_error(c->ssl, r);
                if (e == SSL_ERROR_WANT_READ)
                    break;
                if (e == SSL_ERROR_WANT_WRITE) {
                    c->read_wants_write = true;
                    break;
                }
                if (e == SSL_ERROR_ZERO_RETURN ||
                    (e == SSL_ERROR_SYSCALL && r == 0 && ERR_peek_error() == 0)) {
                    snprintf(c->err, sizeof c->err, "server closed the connection");
                    return got > 0 ? CLI_CONN_OK : CLI_CONN_EOF;
                }
                tls_error(c, "TLS read");
                return got > 0 ? CLI_CONN_OK : CLI_CONN_ERR;
            }
            c->in.len += (size_t)r;
            got += (size_t)r;
        } else {
            ssize_t r = recv(c->fd, p, READ_CHUNK, 0);
            if (r < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                    break;
                snprintf(c->err, sizeof c->err, "%s", strerror(errno));
                return got > 0 ? CLI_CONN_OK : CLI_CONN_ERR;
            }
            if (r == 0) {
                snprintf(c->err, sizeof c->err, "server closed the connection");
                return got > 0 ? CLI_CONN_OK : CLI_CONN_EOF;
            }
            c->in.len += (size_t)r;
            got += (size_t)r;
            if ((size_t)r < READ_CHUNK)
                break;
        }
    }
    return got > 0 ? CLI_CONN_OK : CLI_CONN_AGAIN;
}

bool cli_conn_line(struct cli_conn *c, struct proto_slice *line)
{
    const char *p = c->in.data + c->in.off;
    size_t n = cli_buf_pending(&c->in);
    const char *nl = n > 0 ? memchr(p, '\n', n) : NULL;
    if (nl == NULL)
        return false;
    size_t len = (size_t)(nl - p);
    cli_buf_consume(&c->in, len + 1);
    if (len > 0 && p[len - 1] == '\r')
        len--;
    *line = (struct proto_slice){p, len};
    return true;
}

int cli_conn_getline(struct cli_conn *c, struct proto_slice *line)
{
    for (;;) {
        if (cli_conn_flush(c) != CLI_CONN_OK)
            return CLI_CONN_ERR;
        if (cli_conn_line(c, line))
            return CLI_CONN_OK;
        if (!cli_conn_wait(c, c->timeout_ms)) {
            snprintf(c->err, sizeof c->err, "no reply within %d s", c->timeout_ms / 1000);
            return CLI_CONN_ETIMEOUT;
        }
        int rc = cli_conn_fill(c);
        if (rc == CLI_CONN_EOF || rc == CLI_CONN_ERR)
            return cli_conn_line(c, line) ? CLI_CONN_OK : rc;
    }
}

int cli_conn_send(struct cli_conn *c, const char *line, size_t len)
{
    cli_buf_append(&c->out, line, len);
    cli_buf_append(&c->out, "\r\n", 2);
    while (cli_buf_pending(&c->out) > 0) {
        if (cli_conn_flush(c) != CLI_CONN_OK)
            return CLI_CONN_ERR;
        if (cli_buf_pending(&c->out) > 0 && !cli_conn_wait(c, c->timeout_ms)) {
            snprintf(c->err, sizeof c->err, "the server took nothing for %d s",
                     c->timeout_ms / 1000);
            return CLI_CONN_ETIMEOUT;
        }
        if (c->read_wants_write || c->ssl != NULL) {
            int rc = cli_conn_fill(c); /* lets TLS make progress; replies stay buffered */
            if (rc == CLI_CONN_EOF || rc == CLI_CONN_ERR)
                return rc;
        }
    }
    return CLI_CONN_OK;
}

bool cli_conn_alive(struct cli_conn *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0)
        return true;
    int rc = cli_conn_fill(c); /* a TLS session ticket, or the server's goodbye */
    return rc == CLI_CONN_OK || rc == CLI_CONN_AGAIN;
}

/* Connects one address with the timeout; returns the socket or -1 with errno set. */
static int connect_one(const struct addrinfo *ai, int timeout_ms)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
        return -1;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS)
            goto fail;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int n;
        do {
            n = poll(&p, 1, timeout_ms);
        } while (n < 0 && errno == EINTR);
        if (n == 0) {
            errno = ETIMEDOUT;
            goto fail;
        }
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            goto fail;
        if (soerr != 0) {
            errno = soerr;
            goto fail;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
fail:;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

static bool is_ip(const char *host)
{
    unsigned char b[16];
    return inet_pton(AF_INET, host, b) == 1 || inet_pton(AF_INET6, host, b) == 1;
}

static int tls_handshake(struct cli_conn *c, const struct cli_conn_opts *o)
{
    c->ctx = SSL_CTX_new(TLS_client_method());
    if (c->ctx == NULL) {
        tls_error(c, "TLS");
        return -1;
    }
    SSL_CTX_set_min_proto_version(c->ctx, TLS1_2_VERSION);
    if (o->insecure) {
        SSL_CTX_set_verify(c->ctx, SSL_VERIFY_NONE, NULL);
    } else {
        SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
        int ok = o->cacert != NULL ? SSL_CTX_load_verify_locations(c->ctx, o->cacert, NULL)
                                   : SSL_CTX_set_default_verify_paths(c->ctx);
        if (ok != 1) {
            tls_error(c, o->cacert != NULL ? o->cacert : "the system's CA certificates");
            return -1;
        }
    }
    c->ssl = SSL_new(c->ctx);
    if (c->ssl == NULL || SSL_set_fd(c->ssl, c->fd) != 1) {
        tls_error(c, "TLS");
        return -1;
    }
    SSL_set_mode(c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (is_ip(o->host)) {
        if (!o->insecure && X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), o->host) != 1) {
            tls_error(c, "TLS");
            return -1;
        }
    } else {
        SSL_set_tlsext_host_name(c->ssl, o->host);
        if (!o->insecure && SSL_set1_host(c->ssl, o->host) != 1) {
            tls_error(c, "TLS");
            return -1;
        }
    }
    for (;;) {
        int r = SSL_connect(c->ssl);
        if (r == 1)
            return 0;
        int e = SSL_get_error(c->ssl, r);
        short ev = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
        if (ev == 0) {
            long v = SSL_get_verify_result(c->ssl);
            if (v != X509_V_OK) {
                snprintf(c->err, sizeof c->err, "TLS: certificate verify failed: %s",
                         X509_verify_cert_error_string(v));
                ERR_clear_error();
            } else {
                tls_error(c, "TLS handshake");
            }
            return -1;
        }
        struct pollfd p = {.fd = c->fd, .events = ev};
        int n;
        do {
            n = poll(&p, 1, c->timeout_ms);
        } while (n < 0 && errno == EINTR);
        if (n == 0) {
            snprintf(c->err, sizeof c->err, "TLS handshake: timed out");
            return -1;
        }
    }
}

static int auth(struct cli_conn *c, const char *token)
{
    size_t n = strlen(token);
    cli_buf_append(&c->out, "AUTH ", 5);
    int rc = cli_conn_send(c, token, n);
    struct proto_slice line;
    if (rc == CLI_CONN_OK)
        rc = cli_conn_getline(c, &line);
    if (rc != CLI_CONN_OK)
        return CLI_CONN_ECONNECT;
    if (line.len == 2 && memcmp(line.ptr, "OK", 2) == 0)
        return CLI_CONN_OK;
    static const char none[] = "CLIENT_ERROR no auth_token is configured";
    if (line.len == sizeof none - 1 && memcmp(line.ptr, none, line.len) == 0)
        return CLI_CONN_OK; /* the token was not needed */
    snprintf(c->err, sizeof c->err, "authentication failed: %.*s", (int)line.len, line.ptr);
    return CLI_CONN_EAUTH;
}

int cli_conn_open(const struct cli_conn_opts *o, struct cli_conn **out, char *err, size_t errlen)
{
    *out = NULL;
    struct cli_conn *c = cli_alloc(NULL, sizeof *c);
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : -1;
    bool v6 = strchr(o->host, ':') != NULL;
    snprintf(c->addr, sizeof c->addr, v6 ? "[%s]:%u" : "%s:%u", o->host, o->port);

    char port[8];
    snprintf(port, sizeof port, "%u", o->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = CLI_CONN_ECONNECT;
    int gai = getaddrinfo(o->host, port, &hints, &res);
    if (gai != 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", c->addr, gai_strerror(gai));
        goto fail;
    }
    int e = 0;
    for (struct addrinfo *ai = res; ai != NULL && c->fd < 0; ai = ai->ai_next) {
        c->fd = connect_one(ai, c->timeout_ms);
        e = errno;
    }
    freeaddrinfo(res);
    if (c->fd < 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", c->addr, strerror(e));
        goto fail;
    }
    if (o->tls && tls_handshake(c, o) != 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", c->addr, c->err);
        goto fail;
    }
    if (o->token != NULL && (rc = auth(c, o->token)) != CLI_CONN_OK) {
        if (rc == CLI_CONN_EAUTH)
            snprintf(err, errlen, "%s: %s", c->addr, c->err);
        else
            snprintf(err, errlen, "cannot connect to %s: AUTH: %s", c->addr, c->err);
        goto fail;
    }
    *out = c;
    return CLI_CONN_OK;
fail:
    cli_conn_free(c);
    return rc == CLI_CONN_OK ? CLI_CONN_ECONNECT : rc;
}

void cli_conn_free(struct cli_conn *c)
{
    if (c == NULL)
        return;
    if (c->ssl != NULL) {
        if (SSL_is_init_finished(c->ssl))
            SSL_shutdown(c->ssl); /* one try at close_notify: the socket does not block */
        SSL_free(c->ssl);
    }
    if (c->ctx != NULL)
        SSL_CTX_free(c->ctx);
    if (c->fd >= 0)
        close(c->fd);
    cli_buf_destroy(&c->in);
    cli_buf_destroy(&c->out);
    free(c);
}
