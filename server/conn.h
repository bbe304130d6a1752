/*
 * conn.h - one client connection: non-blocking reads, in-place parsing of every complete
 * line, execution, replies buffered and written once per read batch. Runs on the
 * event-loop thread; all functions here must be called from it.
 */
#ifndef BLOOMD_SERVER_CONN_H
#define BLOOMD_SERVER_CONN_H

#include <sys/socket.h>

struct server;
struct conn;
struct proto_buf;

/*
 * Takes over the connected, non-blocking socket fd and starts serving it. On failure
 * (logged) fd is closed. Returns 0 or -1.
 */
int conn_start(struct server *srv, int fd, const struct sockaddr *peer, socklen_t peerlen);

/* Closes every connection at once (shutdown). */
void conn_close_all(struct server *srv);

/*
 * Asynchronous replies. A command that cannot answer at once returns CMD_PENDING; the
 * connection then stops parsing its input (requests stay buffered, so replies keep
 * their order) and stays alive even if the peer goes away. Later, on the loop thread,
 * the command appends its reply to conn_output(c) and calls conn_resume(c), which
 * writes it and carries on with the buffered requests.
 */
struct proto_buf *conn_output(struct conn *c);
void conn_resume(struct conn *c);

#endif
