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

struct completion {
    /*
     * Delivers the result; r is valid during the call only. Loop thread only, and never
     * before the command that took the completion has returned CMD_PENDING.
     */
    void (*done)(struct completion *c, const struct result *r);
};

/*
 * Completes c with a status and a static or transient text (copied as needed by the
 * owner during the call).
 */
void completion_finish(struct completion *c, enum result_status st, const char *text);

#endif
