/*
 * tls.h - the TLS listener's context: certificates, protocol versions and ciphers, reloaded
 * on SIGHUP, and the transport a TLS listener is given (tls_transport): its accepted
 * clients are handshaken and served by server/net/conn_tls.c, a connection's transport over
 * libevent's bufferevent_openssl. Loop thread only.
 */
#ifndef BLOOMD_SERVER_TLS_H
#define BLOOMD_SERVER_TLS_H

struct config;
struct conn_transport;
struct tls;

/*
 * Builds a server context from cfg's tls_cert_file, tls_key_file and (client certificates
 * required) tls_ca_file: TLS 1.2 and later, forward-secret AEAD ciphers only. Returns it,
 * or NULL after logging why. The caller frees it with tls_free().
 */
struct tls *tls_new(const struct config *cfg);

/*
 * Reads the files again (SIGHUP). New handshakes use the new certificate; on failure
 * (logged) the old one stays. Returns 0 or -1.
 */
int tls_reload(struct tls *t);

/*
 * The transport of a TLS listener (listener_set_transport): its accept hook handshakes with
 * t's current certificate, then serves the client as a connection (conn_tls.h). It lives as
 * long as t.
 */
const struct conn_transport *tls_transport(struct tls *t);

/* Drops at once (shutdown) every TLS client no connection owns: those still handshaking
 * and those sending their last bytes. Connections are closed by conn_close_all() first. */
void tls_close_all(struct tls *t);

/* Drops every client and frees t. tls_free(NULL) does nothing. */
void tls_free(struct tls *t);

#endif
