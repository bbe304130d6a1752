/*
 * tls.c - TLS through bufferevent_openssl, bridged to conn.c over a socketpair.
 * Why a bridge rather than SSL calls inside conn.c: conn.c's read path is tuned (shared
 * read buffer, in-place parsing) and being changed by others; a TLS read can need a write
 * and decrypted bytes can wait inside OpenSSL without the socket being readable, which
 * would add states to every read and write there. Here libevent's tested state machine
 * does all of that, and conn.c is unchanged. The price: two descriptors and one extra copy
 * through a unix socket per batch (bench/run_tls.sh measures it).
 *
 * A bridge: `tls` (the client's socket) <-> `plain` (our end of the pair). Each direction
 * stops reading once BRIDGE_HIGH bytes wait for the other side and resumes when they are
 * written, so a slow reader holds back its writer, as conn.c does with max_output.
 */
#include "server/tls.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/config.h"
#include "server/conn.h"
#include "server/log.h"
#include "server/netaddr.h"
#include "server/worker.h"

#define BRIDGE_HIGH (256 * 1024) /* bytes waiting in one direction before reading stops */
#define HANDSHAKE_SECONDS 10     /* a client must finish its handshake this fast */

/* Mozilla's "intermediate" TLS 1.2 list; TLS 1.3 suites are OpenSSL's defaults (all AEAD). */
#define TLS12_CIPHERS                                                                              \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"     \
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

struct bridge {
    struct tls *t;
    struct worker *w;
    const struct conn_proto *proto;
    struct bufferevent *tls;   /* the client's socket, encrypted */
    struct bufferevent *plain; /* our end of the socketpair; NULL until the handshake is done */
    bool tls_eof;              /* the client sent everything it will send */
    bool plain_eof;            /* conn.c closed or shut its write side */
    struct sockaddr_storage peer;
    socklen_t peerlen;
    char name[NETADDR_MAX]; /* peer, for log lines */
    struct bridge *prev, *next;
};

struct tls {
    SSL_CTX *ctx;               /* what new handshakes use; live SSLs hold their own ref */
    char cert[CONFIG_PATH_MAX]; /* the files, for tls_reload */
    char key[CONFIG_PATH_MAX];
    char ca[CONFIG_PATH_MAX]; /* "" = no client certificates */
    struct bridge *bridges;   /* every TLS client */
};

/* The oldest queued OpenSSL error as text ("unknown error" if none), and clears the queue. */
static const char *ssl_error(char *buf, size_t len)
{
    unsigned long e = ERR_get_error();
    if (e == 0)
        snprintf(buf, len, "unknown error");
    else
        ERR_error_string_n(e, buf, len);
    ERR_clear_error();
    return buf;
}

/* A context from the files, or NULL after logging (step says which file failed). */
static SSL_CTX *make_ctx(const struct tls *t)
{
    char why[256];
    const char *step = "create context";
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL)
        goto error;
    step = "set protocol version";
    if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1)
        goto error;
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                                 SSL_OP_NO_COMPRESSION);
    step = "set ciphers";
    if (SSL_CTX_set_cipher_list(ctx, TLS12_CIPHERS) != 1)
        goto error;
    step = t->cert;
    if (SSL_CTX_use_certificate_chain_file(ctx, t->cert) != 1)
        goto error;
    step = t->key;
    if (SSL_CTX_use_PrivateKey_file(ctx, t->key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1)
        goto error;
    if (t->ca[0] != '\0') {
        step = t->ca;
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(t->ca);
        if (names == NULL || SSL_CTX_load_verify_locations(ctx, t->ca, NULL) != 1) {
            sk_X509_NAME_pop_free(names, X509_NAME_free);
            goto error;
        }
        SSL_CTX_set_client_CA_list(ctx, names);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        static const unsigned char sid[] = "bloomd";
        SSL_CTX_set_session_id_context(ctx, sid, sizeof sid - 1);
    }
    X509 *x = SSL_CTX_get0_certificate(ctx);
    if (x != NULL && X509_cmp_current_time(X509_get0_notAfter(x)) < 0)
        log_msg(LOG_WARN, "TLS certificate %s has expired: clients will refuse it", t->cert);
    return ctx;
error:
    log_msg(LOG_ERROR, "TLS: %s: %s", step, ssl_error(why, sizeof why));
    SSL_CTX_free(ctx);
    return NULL;
}

struct tls *tls_new(const struct config *cfg)
{
    struct tls *t = calloc(1, sizeof *t);
    if (t == NULL) {
        log_msg(LOG_ERROR, "TLS: out of memory");
        return NULL;
    }
    snprintf(t->cert, sizeof t->cert, "%s", cfg->tls_cert_file);
    snprintf(t->key, sizeof t->key, "%s", cfg->tls_key_file);
    snprintf(t->ca, sizeof t->ca, "%s", cfg->tls_ca_file);
    t->ctx = make_ctx(t);
    if (t->ctx == NULL) {
        free(t);
        return NULL;
    }
    return t;
}

int tls_reload(struct tls *t)
{
    SSL_CTX *ctx = make_ctx(t);
    if (ctx == NULL) {
        log_msg(LOG_ERROR, "SIGHUP: TLS certificate not reloaded; the old one stays");
        return -1;
    }
    SSL_CTX_free(t->ctx);
    t->ctx = ctx;
    log_msg(LOG_INFO, "SIGHUP: TLS certificate reloaded from %s", t->cert);
    return 0;
}

static void bridge_free(struct bridge *b)
{
    if (b->prev != NULL)
        b->prev->next = b->next;
    else
        b->t->bridges = b->next;
    if (b->next != NULL)
        b->next->prev = b->prev;
    if (b->plain != NULL)
        bufferevent_free(b->plain); /* conn.c's end sees EOF */
    bufferevent_free(b->tls);       /* frees the SSL and closes the client's socket */
    log_msg(LOG_DEBUG, "TLS client %s gone", b->name);
    free(b);
}

/* Everything conn.c wrote is out: say goodbye (close_notify, best effort) and close. */
static void bridge_finish(struct bridge *b)
{
    SSL *ssl = bufferevent_openssl_get_ssl(b->tls);
    if (ssl != NULL)
        SSL_shutdown(ssl);
    bridge_free(b);
}

/* Moves what src read to dst's output; stops src reading while dst is behind. */
static void relay(struct bufferevent *src, struct bufferevent *dst)
{
    evbuffer_add_buffer(bufferevent_get_output(dst), bufferevent_get_input(src));
    if (evbuffer_get_length(bufferevent_get_output(dst)) >= BRIDGE_HIGH)
        bufferevent_disable(src, EV_READ);
}

static void on_tls_read(struct bufferevent *bev, void *arg)
{
    struct bridge *b = arg;
    if (b->plain != NULL)
        relay(bev, b->plain);
}

static void on_plain_read(struct bufferevent *bev, void *arg)
{
    struct bridge *b = arg;
    relay(bev, b->tls);
}

/* conn.c took everything (output empty): read the client again, or pass its EOF on. */
static void on_plain_written(struct bufferevent *bev, void *arg)
{
    struct bridge *b = arg;
    if (b->tls_eof)
        shutdown(bufferevent_getfd(bev), SHUT_WR);
    else
        bufferevent_enable(b->tls, EV_READ);
}

/* The client took everything: read conn.c's replies again, or finish after its EOF. */
static void on_tls_written(struct bufferevent *bev, void *arg)
{
    (void)bev;
    struct bridge *b = arg;
    if (b->plain == NULL)
        return;
    if (b->plain_eof)
        bridge_finish(b);
    else
        bufferevent_enable(b->plain, EV_READ);
}

static void on_plain_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct bridge *b = arg;
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    b->plain_eof = true;
    if ((what & BEV_EVENT_ERROR) || evbuffer_get_length(bufferevent_get_output(b->tls)) == 0)
        bridge_finish(b);
}

/* Handshake done: give conn.c its end of a socketpair. Returns -1 if the bridge was freed. */
static int bridge_start(struct bridge *b)
{
    int sv[2];
    bufferevent_set_timeouts(b->tls, NULL, NULL);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
        log_msg(LOG_ERROR, "TLS client %s: socketpair: %s", b->name, strerror(errno));
        bridge_free(b);
        return -1;
    }
    b->plain = bufferevent_socket_new(b->w->base, sv[1], BEV_OPT_CLOSE_ON_FREE);
    if (b->plain == NULL) {
        close(sv[0]);
        close(sv[1]);
        log_msg(LOG_ERROR, "TLS client %s: out of memory", b->name);
        bridge_free(b);
        return -1;
    }
    /* libevent reads and writes 16 KiB at a time by default: a pipelined client sends more. */
    bufferevent_set_max_single_read(b->plain, BRIDGE_HIGH);
    bufferevent_set_max_single_write(b->plain, BRIDGE_HIGH);
    bufferevent_set_max_single_read(b->tls, BRIDGE_HIGH);
    bufferevent_set_max_single_write(b->tls, BRIDGE_HIGH);
    bufferevent_setcb(b->plain, on_plain_read, on_plain_written, on_plain_event, b);
    bufferevent_enable(b->plain, EV_READ | EV_WRITE);
    log_msg(LOG_DEBUG, "TLS client %s: %s, %s", b->name,
            SSL_get_version(bufferevent_openssl_get_ssl(b->tls)),
            SSL_get_cipher_name(bufferevent_openssl_get_ssl(b->tls)));
    /* On failure conn_start closed sv[0]: our end then reads EOF and the bridge ends. */
    conn_start(b->w, b->proto, sv[0], (struct sockaddr *)&b->peer, b->peerlen);
    on_tls_read(b->tls, b); /* bytes that came with the handshake's last flight */
    return 0;
}

static void on_tls_event(struct bufferevent *bev, short what, void *arg)
{
    struct bridge *b = arg;
    if (what & BEV_EVENT_CONNECTED) {
        bridge_start(b);
        return;
    }
    if (b->plain == NULL) { /* the handshake failed or timed out */
        char why[256] = "timed out";
        unsigned long e = bufferevent_get_openssl_error(bev);
        if (e != 0)
            ERR_error_string_n(e, why, sizeof why);
        else if (!(what & BEV_EVENT_TIMEOUT))
            snprintf(why, sizeof why, "%s", (what & BEV_EVENT_EOF) ? "closed" : strerror(errno));
        log_msg(LOG_INFO, "TLS handshake with %s failed: %s", b->name, why);
        bridge_free(b);
        return;
    }
    if (what & BEV_EVENT_ERROR) {
        log_msg(LOG_DEBUG, "TLS client %s: connection error", b->name);
        bridge_free(b);
        return;
    }
    if (what & BEV_EVENT_EOF) {
        b->tls_eof = true;
        if (evbuffer_get_length(bufferevent_get_output(b->plain)) == 0)
            shutdown(bufferevent_getfd(b->plain), SHUT_WR);
    }
}

int tls_accept(struct tls *t, struct worker *w, const struct conn_proto *proto, int fd,
               const struct sockaddr *peer, socklen_t peerlen)
{
    struct bridge *b = calloc(1, sizeof *b);
    SSL *ssl = SSL_new(t->ctx);
    if (b == NULL || ssl == NULL)
        goto error;
    b->t = t;
    b->w = w;
    b->proto = proto;
    if (peerlen > sizeof b->peer)
        peerlen = sizeof b->peer;
    memcpy(&b->peer, peer, peerlen);
    b->peerlen = peerlen;
    netaddr_format(peer, peerlen, b->name, sizeof b->name);
    b->tls = bufferevent_openssl_socket_new(w->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                            BEV_OPT_CLOSE_ON_FREE);
    if (b->tls == NULL) {
        ssl = NULL; /* libevent may have freed it already: a leak beats a double free */
        goto error;
    }
    ssl = NULL; /* the bufferevent owns it now */
    /* A client that closes without close_notify is an EOF, not an error. */
    bufferevent_openssl_set_allow_dirty_shutdown(b->tls, 1);
    struct timeval tv = {.tv_sec = HANDSHAKE_SECONDS, .tv_usec = 0};
    bufferevent_set_timeouts(b->tls, &tv, &tv);
    bufferevent_setcb(b->tls, on_tls_read, on_tls_written, on_tls_event, b);
    bufferevent_enable(b->tls, EV_READ | EV_WRITE);
    b->next = t->bridges;
    if (b->next != NULL)
        b->next->prev = b;
    t->bridges = b;
    return 0;
error:
    log_msg(LOG_ERROR, "TLS accept: out of memory for a new connection");
    SSL_free(ssl);
    if (b == NULL || b->tls == NULL)
        close(fd);
    free(b);
    return -1;
}

void tls_close_all(struct tls *t)
{
    if (t == NULL)
        return;
    while (t->bridges != NULL)
        bridge_free(t->bridges);
}

void tls_free(struct tls *t)
{
    if (t == NULL)
        return;
    tls_close_all(t);
    SSL_CTX_free(t->ctx);
    free(t);
}
