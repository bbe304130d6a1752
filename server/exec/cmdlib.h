/*
 * cmdlib.h - what the command modules (mutate.c, commands.c, setop.c) share: a lookup
 * that brings a time-driven filter to now, and the results of a missing filter and of a
 * failed lib call. Loop thread only, like the commands.
 */
#ifndef BLOOMD_SERVER_CMDLIB_H
#define BLOOMD_SERVER_CMDLIB_H

#include "lib/kind.h"
#include "proto/request.h"
#include "proto/result.h"

struct server;
struct filter;

/* The filter named name with a reference, brought up to the current time; or NULL. */
struct filter *cmdlib_lookup(struct server *srv, struct proto_slice name);

/* NOT_FOUND naming name. */
void cmdlib_not_found(struct result *res, struct proto_slice name);

/* The result of a failed lib call that grows, creates or combines filters. */
void cmdlib_lib_error(struct result *res, int err);

#endif
