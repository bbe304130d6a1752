/*
 * kinds.h - the filter kinds this daemon knows (lib/kind.h), by name for CREATE's kind=
 * and by tag for snapshot files. The built-in kinds are always there; kinds_register()
 * adds one at start-up (unit tests register a dummy kind this way). Not thread-safe:
 * register before any worker or the snapshot loader runs.
 */
#ifndef BLOOMD_SERVER_KINDS_H
#define BLOOMD_SERVER_KINDS_H

#include <stddef.h>
#include <stdint.h>

#include "lib/kind.h"

/* The kind CREATE makes without kind= or window=: the scalable blocked filter. */
#define KINDS_DEFAULT (&kind_sbf)

/* Adds ops (static storage) under its name and tag. Returns 0, or -1 if the table is
 * full or the name or tag is taken. */
int kinds_register(const struct kind_ops *ops);

/* The kind with that user-facing name ("blocked", ...) or tag; NULL if none. */
const struct kind_ops *kinds_by_name(const char *name, size_t len);
const struct kind_ops *kinds_by_tag(uint32_t tag);

/* The user-facing names of every kind, space separated (for error messages). */
const char *kinds_names(void);

#endif
