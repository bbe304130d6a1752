/*
 * conn.h - one client connection of a worker: non-blocking reads, in-place parsing of
 * its complete requests with the connection's protocol, one quantum per turn (more waits
 * in the worker's backlog, server/net/fair.h), execution, replies buffered and written once
 * per turn. Requests whose answer comes later (server/core/park.h)
 * are parked in order: replies always leave in request order. Runs on the worker's
 * thread; every function here must be called from it.
 */
#ifndef BLOOMD_SERVER_CONN_H
#define BLOOMD_SERVER_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "proto/proto.h"

struct worker;
struct conn;
struct conn_io;

/*
 * A wire protocol as the connection layer drives it. serve() parses and executes the
 * complete requests at the start of buf[0..len) while conn_can_execute() says so, placing
 * each reply with the driver calls below, and returns the bytes it consumed. A request
 * that parks (conn_execute returns NULL) is formatted later by format_parked(), given the
 * ctx bytes its driver handed to conn_execute.
 */
struct conn_proto {
    const char *name; /* "bloomd", "memcached" */
    size_t (*serve)(struct conn *c, const char *buf, size_t len);
    void (*format_parked)(struct proto_buf *out, const void *ctx, const struct result *r);
};

/* The bloomd text protocol (server/net/serve_text.c), memcached's (serve_memcache.c) and
 * Redis's RESP (serve_redis.c). */
extern const struct conn_proto conn_proto_text;
extern const struct conn_proto conn_proto_memcache;
extern const struct conn_proto conn_proto_redis;

/* Bytes of protocol context a parked request keeps for format_parked(). */
#define CONN_CTX_MAX 16

/* ---- for protocol drivers, from inside serve() ---- */

struct worker *conn_worker(const struct conn *c);
const char *conn_peer(const struct conn *c); /* "1.2.3.4:5678", for log lines */

/*
 * True while the connection may execute more requests: room for replies, not closing,
 * and some of this turn's quantum left (see conn_spend).
 */
bool conn_can_execute(const struct conn *c);

/*
 * Counts a request the driver consumed: bytes of input and keys executed, against the
 * turn's quantum. Call it once per request (or merged run), after executing it.
 */
void conn_spend(struct conn *c, size_t bytes, size_t keys);

/*
 * True if a request with command cmd may run on c now. When false the driver runs
 * nothing and replies CLIENT_ERROR CONN_WHY_AUTH: a token is configured and c has not
 * sent a good AUTH (only AUTH, HELP, VERSION and QUIT run before it).
 */
bool conn_admit(const struct conn *c, enum proto_cmd cmd);
#define CONN_WHY_AUTH "authentication required"

/* True while a token is configured and c has not authenticated (memcached's driver). */
bool conn_needs_auth(const struct conn *c);

/*
 * The buffer the next reply goes to (the output, or behind a parked request). Append with
 * the proto/ formatters between conn_reply_begin() and conn_reply_end().
 */
struct proto_buf *conn_reply_begin(struct conn *c, size_t *mark);
void conn_reply_end(struct conn *c, struct proto_buf *b, size_t mark);

/* The driver's own per-connection state: CONN_DRIVER_STATE bytes, zero at accept, aligned
 * for any scalar (RESP's protocol version and client name). */
#define CONN_DRIVER_STATE 64
void *conn_driver_state(struct conn *c);

/* Scratch result for a driver's immediate requests (reset it before use). */
struct result *conn_result(struct conn *c);

/*
 * Executes req. Returns the result (conn_result(c)) when it is there at once: the driver
 * formats it as the next reply. Returns NULL when the command parked it: the connection
 * formats it later with proto->format_parked(ctx) and keeps every later reply behind it.
 * ctx (ctx_len <= CONN_CTX_MAX bytes) is copied. AUTH is answered by the connection
 * itself (a failed one parks, to slow guessing down).
 */
const struct result *conn_execute(struct conn *c, const struct proto_request *req, const void *ctx,
                                  size_t ctx_len);

/* No more requests: close once the replies are written (QUIT). */
void conn_finish(struct conn *c);

/* Discard the next n bytes of input before parsing resumes (an oversized data block). */
void conn_skip(struct conn *c, size_t n);

/*
 * A refused RESTORE's data block of n bytes (and its "\r\n"): discarded as it arrives,
 * or, past 2^50 bytes, the connection finishes (no client sends that much).
 */
void conn_skip_block(struct conn *c, uint64_t n);

/*
 * Starts serving a client with proto on worker w over the transport io (server/net/conn_io.h;
 * a transport's accept hook calls it), which it takes over: the connection sets io's
 * callbacks and closes io when it ends, or at once on failure (logged). Returns 0 or -1.
 */
int conn_start(struct worker *w, const struct conn_proto *proto, struct conn_io *io,
               const struct sockaddr *peer, socklen_t peerlen);

/* Closes every connection of w at once (shutdown); parked requests are dropped. */
void conn_close_all(struct worker *w);

/*
 * ---- lifecycle ----
 * Where a connection is between accept and close: one state (memcached's conn_states),
 * beside the directions its transport is watched in and the fairness flags. Every change
 * goes through one function in conn.c that asserts conn_state_legal(); any state may end
 * (the connection is freed) from there.
 */
enum conn_state {
    CONN_OPEN,      /* reading and executing requests */
    CONN_DRAINING,  /* the peer sent everything: executing what is left of it */
    CONN_FINISHING, /* no more requests (QUIT): replies leave, then the write side shuts */
    CONN_CLOSING,   /* no more requests nor input: replies leave, then it closes */
    CONN_LINGERING, /* write side shut: discarding input until the peer's EOF or a timeout */
    CONN_OWED,      /* closed, but a command still owes it a reply: freed when the last comes */
    CONN_NSTATES
};

/* True if a connection may go from `from` to `to`. */
bool conn_state_legal(enum conn_state from, enum conn_state to);

/* "open", "draining", ...; "?" for no state. */
const char *conn_state_name(enum conn_state s);

/* Where c is now (for tests and log lines). */
enum conn_state conn_state_of(const struct conn *c);

#endif
