/*
 * repl.h - replication (Redis's replication.c in shape): a primary streams the records
 * exec/mutate.c makes to its replicas; a replica applies them with the functions start-up
 * replay uses (mutate_apply_record), so it is "recovery that never ends".
 *
 * The stream: a replication id (40 hex digits, new at every start and promotion) and an
 * offset (one per record). A replica connects to the primary's bloomd port and sends
 * `PSYNC <id>|? <offset>`; the primary answers
 *   CONTINUE <id> <offset>              the records after offset follow (partial resync)
 *   FULLSYNC <id> <offset> <nfilters> <secret>   then nfilters times `FILTER <name>
 *                                       <nbytes>\r\n`
 *                                       and a snapshot file's bytes, then the records
 *                                       after offset (full sync)
 * Records are journal frames (lib/journal_record.h: framed, checksummed); a replica that
 * sees a damaged one drops the link and resyncs. The replica acknowledges with
 * `REPLCONF ACK <offset>` lines on the same connection. A promoted replica keeps its old
 * id and the offset it reached as history, so its siblings resync partially from it.
 *
 * The connection layer (net/) answers ROLE, REPLICAOF, PSYNC and REPLCONF through the
 * calls below, and turns a connection that sent PSYNC into a feed: it hands this module
 * a struct repl_sink and tells it when the output drained and when it closed.
 * Loop thread only.
 */
#ifndef BLOOMD_SERVER_REPL_REPL_H
#define BLOOMD_SERVER_REPL_REPL_H

#include <stdbool.h>
#include <stddef.h>

#include "proto/request.h"
#include "proto/result.h"

struct server;
struct event_base;
struct repl_feed;

/*
 * Starts replication on base: the primary's state and, with cfg.replica_of set, the link
 * to the primary. Installs mutate's propagation. Returns 0 or -1 (logged).
 */
int repl_start(struct server *srv, struct event_base *base);

/* Closes the link and every feed; frees the state. NULL state does nothing. */
void repl_stop(struct server *srv);

/* ROLE: `ROLE primary <replicas> <offset>` or `ROLE replica <host>:<port> <link> <offset>`. */
void repl_role(struct server *srv, struct result *res);

/* REPLICAOF <host> <port> (become a replica of it) or REPLICAOF NO ONE (be promoted). */
void repl_replicaof(struct server *srv, const struct proto_request *req, struct result *res);

/* How a feed writes to its connection (net/conn.c provides it). */
struct repl_sink {
    void *conn;
    /* Appends n bytes to the connection's output. false: it is closing, stop. */
    bool (*write)(void *conn, const void *p, size_t n);
    /* Output bytes not yet written to the socket. */
    size_t (*unsent)(const void *conn);
    /* Cuts the connection off (a slow replica), logging why. */
    void (*close)(void *conn, const char *why);
};

/*
 * PSYNC from a connection: res gets the reply line (CONTINUE or FULLSYNC), or an error
 * (then NULL is returned and the connection stays an ordinary one). On success the
 * connection becomes a feed: everything after the reply goes out through sink, which
 * the returned feed keeps; the connection calls repl_feed_drained() whenever its output
 * was written out, repl_feed_ack() for REPLCONF ACK, repl_feed_closed() when it ends.
 */
struct repl_feed *repl_psync(struct server *srv, const struct repl_sink *sink,
                             const struct proto_request *req, struct result *res);
void repl_feed_drained(struct repl_feed *f);
void repl_feed_ack(struct repl_feed *f, const struct proto_request *req);
void repl_feed_closed(struct repl_feed *f);

#endif
