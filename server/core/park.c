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
