/*
 * plan.h - GET /api/plan (plan.c): what a CREATE with the query's options would allocate,
 * as created and grown 10x and 100x, for its kind and for each kind. Read-only: it creates
 * no filter. Loop thread only.
 */
#ifndef BLOOMD_SERVER_HTTP_PLAN_H
#define BLOOMD_SERVER_HTTP_PLAN_H

#include <stddef.h>

struct evbuffer;
struct server;

/* Appends the plan as JSON for query[0..qlen) (CREATE's options as parameters, e.g.
 * "capacity=1000000&error=0.01"); returns 200, or 400 with {"error": CREATE's reason}. */
int api_plan(struct server *srv, const char *query, size_t qlen, struct evbuffer *out);

#endif
