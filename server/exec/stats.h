/*
 * stats.h - the daemon's figures as data. Counters live per worker and are only
 * updated by its thread; stats_visit() walks every figure of the process once, by name,
 * calling one callback per figure (memcached's server_stats(ADD_STAT, c) shape): STATS
 * renders them as STAT lines, and any other page (Prometheus) is another callback,
 * never a second list.
 */
#ifndef BLOOMD_SERVER_STATS_H
#define BLOOMD_SERVER_STATS_H

#include <stdint.h>

#include "lib/kind.h"
#include "proto/request.h"

#define STATS_NCMD (PROTO_CMD_RESTORE + 1)

struct stats {
    uint64_t conn_current;      /* open client connections */
    uint64_t conn_total;        /* accepted since start-up */
    uint64_t conn_rejected;     /* refused by max_connections or EMFILE */
    uint64_t commands;          /* requests executed (parse errors excluded) */
    uint64_t cmd[STATS_NCMD];   /* requests per command */
    uint64_t errors;            /* requests that failed to parse */
    uint64_t keys_added;        /* new keys added by ADD and CHECKADD */
    uint64_t keys_checked;      /* keys looked up by CHECK and CHECKADD */
    uint64_t keys_stored;       /* keys given to ADD and CHECKADD (new or not) */
    uint64_t keys_present;      /* CHECK keys found present */
    uint64_t keys_absent;       /* CHECK keys found absent */
    uint64_t bytes_read;        /* from clients */
    uint64_t bytes_written;     /* to clients */
    uint64_t conn_shed;         /* closed for holding the most with max_memory exceeded */
    uint64_t loop_max_stall_us; /* the longest single callback of the loop since start */
};

struct server;

/* The stat name of a command ("cmd_checkadd"). */
const char *stats_cmd_name(enum proto_cmd cmd);

/*
 * Calls fn(ctx, name, ...) for every figure of STATS, in STATS's order: uptime, version,
 * connection and command counters (summed over the workers), filters, memory, then the
 * snapshotter's figures. Runs on a worker's thread.
 */
void stats_visit(const struct server *srv, kind_field_fn fn, void *ctx);

#endif
