/*
 * park.c - the helper every answer-later command uses to hand back its result.
 */
#include "server/core/park.h"

void completion_finish(struct completion *c, enum result_status st, const char *text)
{
    struct result r;
    result_init(&r);
    result_set(&r, st, text);
    c->done(c, &r);
    result_free(&r);
}

void completion_finish_body(struct completion *c, const struct result *r,
                            struct completion_body *body)
{
    if (c->done_body != NULL) {
        c->done_body(c, r, body);
        return;
    }
    body->close(body);
    completion_finish(c, RESULT_SERVER_ERROR, "this listener cannot send a data block");
}
