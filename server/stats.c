/*
 * stats.c - counters and the STATS reply. Field names follow memcached where one exists
 * (uptime, curr_connections, total_connections) so existing dashboards read them.
 */
#include "server/stats.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "server/registry.h"
#include "server/server.h"
#include "server/snapshot.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void stats_init(struct stats *s)
{
    memset(s, 0, sizeof(*s));
    s->started_ns = now_ns();
}

/* Seconds since stats_init. */
static uint64_t stats_uptime(const struct stats *s)
{
    return (now_ns() - s->started_ns) / 1000000000u;
}

void stats_write(const struct server *srv, struct proto_buf *out)
{
    const struct stats *s = &srv->stats;
    struct proto_slice version = {BLOOMD_VERSION, strlen(BLOOMD_VERSION)};
    proto_reply_stat_u64(out, "uptime", stats_uptime(s));
    proto_reply_stat_str(out, "version", version);
    proto_reply_stat_u64(out, "curr_connections", s->conn_current);
    proto_reply_stat_u64(out, "total_connections", s->conn_total);
    proto_reply_stat_u64(out, "rejected_connections", s->conn_rejected);
    proto_reply_stat_u64(out, "commands", s->commands);
    for (int c = 0; c < STATS_NCMD; c++) {
        char field[32] = "cmd_";
        const char *name = proto_cmd_name((enum proto_cmd)c);
        size_t n = strlen(field);
        for (; *name != '\0' && n < sizeof(field) - 1; name++)
            field[n++] = (char)tolower((unsigned char)*name);
        field[n] = '\0';
        proto_reply_stat_u64(out, field, s->cmd[c]);
    }
    proto_reply_stat_u64(out, "protocol_errors", s->errors);
    proto_reply_stat_u64(out, "keys_added", s->keys_added);
    proto_reply_stat_u64(out, "keys_checked", s->keys_checked);
    proto_reply_stat_u64(out, "bytes_read", s->bytes_read);
    proto_reply_stat_u64(out, "bytes_written", s->bytes_written);
    proto_reply_stat_u64(out, "filters", registry_count(srv->reg));
    proto_reply_stat_u64(out, "memory_bytes", budget_used(&srv->budget));
    proto_reply_stat_u64(out, "memory_limit", srv->budget.limit);
    snapshot_write_stats(srv->snap, out);
    proto_reply_word(out, "END");
}
