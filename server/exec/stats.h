/*
 * stats.h - the daemon's figures as data. Counters live per worker and are only
 * updated by its thread; stats_gather() reads every figure of the process once into the
 * rows of core/stat.h's table, asking each owning module for its own (memcached's
 * server_stats shape). STATS and memcached's stats render them through stats_result();
 * /metrics and /api walk the same rows: never a second list.
 */
#ifndef BLOOMD_SERVER_STATS_H
#define BLOOMD_SERVER_STATS_H

#include <stdint.h>

#include "proto/request.h"
#include "proto/result.h"
#include "server/core/stat.h"

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

/*
 * Fills every row of out from its source (stat.h's source column): the process, the
 * workers' counters (summed), the registry, the budget, the snapshotter and the journal.
 * Runs on a worker's thread; O(filters).
 */
void stats_gather(const struct server *srv, struct stat_values *out);

/*
 * stats_gather without its one O(filters) row: STAT_ITEMS is left unset, for a caller
 * that sums the filters' items itself off the loop (the HTTP pages). O(1).
 */
void stats_gather_cheap(const struct server *srv, struct stat_values *out);

/*
 * STATS as a result: one field per row in the table's order under its STATS name, with
 * memcached's name as the field's alias where the row has one (proto/memcache.h shows
 * that name).
 */
void stats_result(const struct server *srv, struct result *res);

/*
 * INFO of f as a result: name, the kind's fields, snapshot_time and, for a kind with
 * popcount estimates, estimated_age_ms. The estimates are counted here for a filter of
 * at most FIGURES_INLINE_BYTES (age 0) and come from the figures' cache for a bigger one
 * (NaN, and no estimated_age_ms, until its first count has finished), so INFO never
 * walks a big filter's bits on the loop. Loop thread.
 */
struct filter;
void stats_info(struct server *srv, const struct filter *f, struct result *res);

#endif
