/*
 * conn_tls.h - one TLS client: the handshake through libevent's bufferevent_openssl, then
 * the connection's transport (server/net/conn_io.h) over that same bufferevent, so conn.c
 * serves it as it serves a plain socket. The clients that no connection owns (still
 * handshaking, or sending their last bytes after their connection closed) are kept on a
 * set, so that shutdown can drop them. Loop thread only.
 */
#ifndef BLOOMD_SERVER_CONN_TLS_H
#define BLOOMD_SERVER_CONN_TLS_H

#include <openssl/ssl.h>
#include <sys/socket.h>

struct conn_proto;
struct conn_tls;
struct worker;

/* The TLS clients no connection owns; zero-initialised storage is an empty set. */
struct conn_tls_set {
    struct conn_tls *head;
};

/*
 * Takes over ssl (a new server SSL) and the accepted, non-blocking socket fd: handshakes
 * (within a few seconds), then serves the client with proto on w through conn_start().
 * On failure (logged) both are freed and fd closed. Returns 0 or -1.
 */
int conn_tls_accept(struct conn_tls_set *set, struct worker *w, const struct conn_proto *proto,
                    SSL *ssl, int fd, const struct sockaddr *peer, socklen_t peerlen);

/* Frees every client on set at once (shutdown); the set is empty after. */
void conn_tls_close_all(struct conn_tls_set *set);

#endif
