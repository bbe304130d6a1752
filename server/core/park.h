/*
 * park.h - the one answer-later path. A command that cannot answer at once (FLUSH and
 * DROP wait for the disk; a journal fsync and background set operations will too)
 * returns CMD_PENDING and keeps the struct completion it was given; later, on the same
 * event-loop thread, it calls done() exactly once with the result. The owner of the
 * completion (the connection layer) decides what to do with it: format it in request
 * order, or drop it because the client left. Whoever finishes the work sees only this
 * header: no connection, no protocol.
 */
#ifndef BLOOMD_SERVER_PARK_H
#define BLOOMD_SERVER_PARK_H

#include "proto/result.h"

struct completion_body;

struct completion {
    /*
     * Delivers the result; r is valid during the call only. Loop thread only, and never
     * before the command that took the completion has returned CMD_PENDING.
     */
    void (*done)(struct completion *c, const struct result *r);
    /*
     * As done, for a result whose reply line is followed by bytes the owner pulls from
     * body (DUMP), which it takes over: it reads body until the end and then closes it,
     * or closes it early (the client left). NULL when the owner cannot stream one.
     */
    void (*done_body)(struct completion *c, const struct result *r, struct completion_body *body);
};

/* read() has nothing now: the body calls wake(owner) once it has. */
#define COMPLETION_BODY_AGAIN (-2L)

/*
 * Bytes that follow a reply, produced in the background and pulled by the owner of the
 * completion in pieces, so a large body never sits whole in memory. Loop thread only.
 */
struct completion_body {
    /* Copies up to cap bytes into buf: returns the count (> 0), 0 at the end,
     * COMPLETION_BODY_AGAIN, or -1 when the body failed (the owner must close the
     * connection: the reply promised bytes that will not come). */
    long (*read)(struct completion_body *b, void *buf, size_t cap);
    void (*close)(struct completion_body *b); /* the owner is done with it; frees b */
    void (*wake)(void *owner);                /* set by the owner before the first read */
    void *owner;
};

/*
 * Completes c with a status and a static or transient text (copied as needed by the
 * owner during the call).
 */
void completion_finish(struct completion *c, enum result_status st, const char *text);

/*
 * Completes c with r followed by body (taken over). When c cannot stream bodies, body
 * is closed and c gets SERVER_ERROR instead.
 */
void completion_finish_body(struct completion *c, const struct result *r,
                            struct completion_body *body);

#endif
