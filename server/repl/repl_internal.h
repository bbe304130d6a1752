/*
 * repl_internal.h - what repl.c (the primary's side, the role) and replica.c (the link to
 * a primary) share. Not for other modules: they use repl.h.
 */
#ifndef BLOOMD_SERVER_REPL_INTERNAL_H
#define BLOOMD_SERVER_REPL_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

struct server;
struct event_base;
struct event;
struct backlog;
struct repl_feed;
struct repl_link;
struct repl_held;

#define REPL_ID_LEN 40

struct repl {
    struct server *srv;
    struct event_base *base;
    char id[REPL_ID_LEN + 1];      /* the stream this server writes or follows */
    char prev_id[REPL_ID_LEN + 1]; /* the stream it followed before a promotion; "" none */
    uint64_t prev_offset;          /* where that one ended here */
    struct backlog *backlog;
    bool backlog_on;                    /* records go to it: once a replica asked, or as a replica
                                           (a primary never followed pays nothing per record) */
    struct repl_feed *feeds;            /* replicas connected to this server */
    struct repl_held *held, *held_tail; /* replies waiting for acknowledgements */
    struct event *hold_timer;           /* the oldest held reply's deadline */
    struct event *feed_timer;           /* sends the records not yet fed (repl.c) */
    bool feed_armed;                    /* feed_timer is pending */
    size_t unfed;                       /* bytes of records appended since the last feed */
    uint64_t fed;                       /* the offset the last feed sent up to */
    struct repl_link *link;             /* the link to this server's primary; NULL on a primary */
    bool was_replica; /* a replica.state without a journal here: its filters are a copy */
    bool rejoin;      /* its own filters go to its primary before the next full sync (rejoin.c):
                         set when a primary becomes a replica, cleared once they were sent */
    /* The journal as the backlog's older part (repl.c): the record at offset o is the one
     * at journal position o - jdelta, for positions from jfrom on (this run's, since the
     * offsets last moved apart from the journal's). */
    uint64_t jdelta, jfrom;
};

/* A new random stream id into id[REPL_ID_LEN + 1]. */
void repl_new_id(char *id);

/* Closes every feed (a new role, a full resync of this server). */
void repl_close_feeds(struct repl *r, const char *why);

/*
 * A replica's place in its primary's stream, kept in <data_dir>/replica.state so that a
 * restart resyncs partially: the stream id and the shift between the primary's offsets
 * and this server's journal positions. Written once a full sync is on disk (its
 * snapshot), removed when one starts; read at start-up (0, or -1: none or not valid).
 */
int repl_state_save(struct repl *r);
void repl_state_remove(struct repl *r);
int repl_state_load(struct repl *r);

/*
 * At start-up with replica_of, after repl_state_load(): a data dir that holds filters but
 * no replica.state of a stream it followed (r->id is "") is an old primary's, so
 * r->rejoin is set (rejoin.c).
 */
void repl_rejoin_at_start(struct repl *r);

/* The replica's link (replica.c): started towards host:port, stopped. */
int repl_link_start(struct repl *r, const char *host, const char *port);
void repl_link_stop(struct repl *r);

#endif
