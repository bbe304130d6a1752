/*
 * setop.h - UNION and INTERSECT. Small ones (every filter involved smaller than
 * SETOP_BACKGROUND_BYTES together) run on the loop at once; larger ones build their result
 * on the job thread and answer later through the park path (park.h), while every filter
 * involved stays in use: adds to the destination meanwhile are logged and land in the
 * result. Loop thread only.
 */
#ifndef BLOOMD_SERVER_SETOP_H
#define BLOOMD_SERVER_SETOP_H

#include <stdbool.h>
#include <stddef.h>

#include "proto/request.h"
#include "proto/result.h"

struct server;
struct completion;
struct filter;
struct setop;

/* Below this many filter bytes (destination and distinct sources) an operation runs at once. */
#define SETOP_BACKGROUND_BYTES ((size_t)1 << 20)

/*
 * Executes UNION or INTERSECT req (mutate_check() passed), journals it and fills res.
 * Returns false, or true when later->done() answers instead (a background operation, or a
 * reply held for the journal). With later NULL, or before snapshots run, every operation
 * runs at once.
 */
bool setop_execute(struct server *srv, const struct proto_request *req, struct result *res,
                   struct completion *later);

#endif
