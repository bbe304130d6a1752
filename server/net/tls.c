/*
 * tls.c - the TLS listener's certificates: one SSL_CTX built from the files (TLS 1.2 and
 * later, forward-secret AEAD ciphers, client certificates when a CA file is given), rebuilt
 * on SIGHUP; each accepted client gets an SSL from it and is handed to conn_tls.c, which
 * handshakes and then serves it as a connection's transport (no bridge, no second socket).
 * Live SSLs hold their own reference to the context they were made from.
 */
#include "server/net/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "server/core/config.h"
#include "server/core/log.h"
#include "server/net/conn_io.h"
#include "server/net/conn_tls.h"

/* Mozilla's "intermediate" TLS 1.2 list; TLS 1.3 in its order too (all AEAD): AES-128-GCM
 * first, which costs both ends less than AES-256 per byte (the server's choice decides). */
#define TLS12_CIPHERS                                                                              \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"     \
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
#define TLS13_SUITES "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

struct tls {
    struct conn_transport transport; /* first member: the listener's accept hook */
    SSL_CTX *ctx;                    /* what new handshakes use; live SSLs hold their own ref */
    char cert[CONFIG_PATH_MAX];      /* the files, for tls_reload */
    char key[CONFIG_PATH_MAX];
    char ca[CONFIG_PATH_MAX];    /* "" = no client certificates */
    struct conn_tls_set clients; /* handshaking, or sending their last bytes */
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
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    /*
     * OpenSSL 3 reports a TCP end without close_notify as an error, which libevent 2.1's
     * dirty-shutdown setting does not catch: the client's half-close would then throw away
     * the requests it sent before it. Treat it as the end of input (the replies still go).
     */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
    step = "set ciphers";
    if (SSL_CTX_set_cipher_list(ctx, TLS12_CIPHERS) != 1 ||
        SSL_CTX_set_ciphersuites(ctx, TLS13_SUITES) != 1)
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

static int tls_accept(const struct conn_transport *tr, struct worker *w,
                      const struct conn_proto *proto, int fd, const struct sockaddr *peer,
                      socklen_t peerlen);

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
    t->transport.accept = tls_accept;
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

const struct conn_transport *tls_transport(struct tls *t)
{
    return &t->transport;
}

/* The accept hook: a new SSL from the current context, then the handshake (conn_tls.c). */
static int tls_accept(const struct conn_transport *tr, struct worker *w,
                      const struct conn_proto *proto, int fd, const struct sockaddr *peer,
                      socklen_t peerlen)
{
    struct tls *t = (struct tls *)(void *)tr; /* tr is its first member */
    SSL *ssl = SSL_new(t->ctx);
    if (ssl == NULL) {
        log_msg(LOG_ERROR, "TLS accept: out of memory for a new connection");
        close(fd);
        return -1;
    }
    return conn_tls_accept(&t->clients, w, proto, ssl, fd, peer, peerlen);
}

void tls_close_all(struct tls *t)
{
    if (t != NULL)
        conn_tls_close_all(&t->clients);
}

void tls_free(struct tls *t)
{
    if (t == NULL)
        return;
    tls_close_all(t);
    SSL_CTX_free(t->ctx);
    free(t);
}
