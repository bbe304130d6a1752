/*
 * stat.h - --stat: one line of live figures per interval, from the deltas of STATS
 * (like redis-cli --stat): keys/s, connections, memory, filters, items, journal lag.
 */
#ifndef BLOOMD_CLI_STAT_H
#define BLOOMD_CLI_STAT_H

#include "cli/conn.h"

/*
 * Prints a line every interval seconds, count lines (0: until interrupted). A lost
 * connection prints a line saying so and is retried each interval. Returns the exit status:
 * CLI_EXIT_CONN if the first connection fails.
 */
int stat_run(const struct cli_conn_opts *o, double interval, unsigned long count);

#endif
