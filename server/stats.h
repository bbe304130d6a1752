/*
 * stats.h - the server's counters for STATS. Only the event-loop thread updates them,
 * so they are plain integers; figures owned by other modules (memory, filters) are read
 * from those modules when the reply is written.
 */
#ifndef BLOOMD_SERVER_STATS_H
#define BLOOMD_SERVER_STATS_H

#include <stdint.h>

#include "proto/proto.h"

#define STATS_NCMD (PROTO_CMD_QUIT + 1)

struct stats {
    uint64_t started_ns;      /* CLOCK_MONOTONIC at start-up */
    uint64_t conn_current;    /* open client connections */
    uint64_t conn_total;      /* accepted since start-up */
    uint64_t conn_rejected;   /* refused by max_connections or EMFILE */
    uint64_t commands;        /* requests executed (parse errors excluded) */
    uint64_t cmd[STATS_NCMD]; /* requests per command */
    uint64_t errors;          /* requests that failed to parse */
    uint64_t keys_added;      /* new keys added by ADD and CHECKADD */
    uint64_t keys_checked;    /* keys looked up by CHECK and CHECKADD */
    uint64_t bytes_read;      /* from clients */
    uint64_t bytes_written;   /* to clients */
};

struct server;

/* Zeroes the counters and records the start time. */
void stats_init(struct stats *s);

/* Appends the STATS reply ("STAT <field> <value>" lines, then "END"). */
void stats_write(const struct server *srv, struct proto_buf *out);

#endif
