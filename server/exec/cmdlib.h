/*
 * cmdlib.h - what the command modules (commands.c, setop.c) share: a lookup that brings a
 * time-driven filter to now, the results of a missing filter and of a failed lib call,
 * and putting a new object into the table. Loop thread only, like the commands.
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

/*
 * Wraps obj of kind ops in a filter and puts it in the table. Returns 0, or SBF_ENOMEM
 * with obj freed.
 */
int cmdlib_install(struct server *srv, struct proto_slice name, const struct kind_ops *ops,
                   void *obj);

/*
 * Puts a new filter holding obj in place of f in the table, for when another thread (a
 * snapshot) may be reading f. Returns 0, or SBF_ENOMEM with obj freed and f in place.
 */
int cmdlib_replace(struct server *srv, struct filter *f, void *obj);

#endif
