/*
 * stats.c - the one list of the daemon's figures. Field names follow memcached where one
 * exists (uptime, curr_connections, total_connections) so existing dashboards read them.
 */
#include "server/exec/stats.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/core/clock.h"
#include "server/core/server.h"
#include "server/persist/durable.h"
#include "server/persist/snapshot.h"
#include "server/store/registry.h"

static const char *const cmd_names[STATS_NCMD] = {
    [PROTO_CMD_CREATE] = "cmd_create",   [PROTO_CMD_ADD] = "cmd_add",
    [PROTO_CMD_CHECK] = "cmd_check",     [PROTO_CMD_CHECKADD] = "cmd_checkadd",
    [PROTO_CMD_UNION] = "cmd_union",     [PROTO_CMD_INTERSECT] = "cmd_intersect",
    [PROTO_CMD_INFO] = "cmd_info",       [PROTO_CMD_LIST] = "cmd_list",
    [PROTO_CMD_DROP] = "cmd_drop",       [PROTO_CMD_CLEAR] = "cmd_clear",
    [PROTO_CMD_FLUSH] = "cmd_flush",     [PROTO_CMD_STATS] = "cmd_stats",
    [PROTO_CMD_VERSION] = "cmd_version", [PROTO_CMD_HELP] = "cmd_help",
    [PROTO_CMD_QUIT] = "cmd_quit",       [PROTO_CMD_AUTH] = "cmd_auth",
    [PROTO_CMD_DELETE] = "cmd_delete",   [PROTO_CMD_DUMP] = "cmd_dump",
    [PROTO_CMD_RESTORE] = "cmd_restore",
};

const char *stats_cmd_name(enum proto_cmd cmd)
{
    return cmd_names[cmd];
}

static void u64(kind_field_fn fn, void *ctx, const char *name, uint64_t v)
{
    fn(ctx, name, KIND_FIELD_U64, v, 0, NULL);
}

/* Adds every counter of w into sum. */
static void add_worker(struct stats *sum, const struct stats *w)
{
    sum->conn_current += w->conn_current;
    sum->conn_total += w->conn_total;
    sum->conn_rejected += w->conn_rejected;
    sum->commands += w->commands;
    for (int c = 0; c < STATS_NCMD; c++)
        sum->cmd[c] += w->cmd[c];
    sum->errors += w->errors;
    sum->keys_added += w->keys_added;
    sum->keys_checked += w->keys_checked;
    sum->keys_stored += w->keys_stored;
    sum->keys_present += w->keys_present;
    sum->keys_absent += w->keys_absent;
    sum->bytes_read += w->bytes_read;
    sum->bytes_written += w->bytes_written;
    sum->conn_shed += w->conn_shed;
    if (w->loop_max_stall_us > sum->loop_max_stall_us)
        sum->loop_max_stall_us = w->loop_max_stall_us;
}

/* Keys held by every filter (each kind's cheap count). */
static uint64_t total_items(const struct server *srv)
{
    struct filter **all;
    size_t n;
    uint64_t sum = 0;
    if (registry_collect(srv->reg, NULL, 0, &all, &n) != REGISTRY_OK)
        return 0;
    for (size_t i = 0; i < n; i++) {
        struct kind_info info = {0};
        all[i]->ops->info(all[i]->obj, &info);
        sum += info.items;
        filter_unref(all[i]);
    }
    free(all);
    return sum;
}

void stats_visit(const struct server *srv, kind_field_fn fn, void *ctx)
{
    struct stats s;
    memset(&s, 0, sizeof s);
    if (srv->counters != NULL)
        add_worker(&s, srv->counters);
    u64(fn, ctx, "pid", (uint64_t)getpid());
    u64(fn, ctx, "uptime", (clock_mono_ns() - srv->started_ns) / 1000000000u);
    u64(fn, ctx, "time", (uint64_t)(clock_wall_ms() / 1000));
    fn(ctx, "version", KIND_FIELD_STR, 0, 0, BLOOMD_VERSION);
    u64(fn, ctx, "threads", srv->counters != NULL ? 1 : 0);
    u64(fn, ctx, "curr_connections", s.conn_current);
    u64(fn, ctx, "total_connections", s.conn_total);
    u64(fn, ctx, "rejected_connections", s.conn_rejected);
    u64(fn, ctx, "shed_connections", s.conn_shed);
    u64(fn, ctx, "commands", s.commands);
    for (int c = 0; c < STATS_NCMD; c++)
        u64(fn, ctx, cmd_names[c], s.cmd[c]);
    u64(fn, ctx, "protocol_errors", s.errors);
    u64(fn, ctx, "keys_added", s.keys_added);
    u64(fn, ctx, "keys_checked", s.keys_checked);
    u64(fn, ctx, "keys_stored", s.keys_stored);
    u64(fn, ctx, "keys_present", s.keys_present);
    u64(fn, ctx, "keys_absent", s.keys_absent);
    u64(fn, ctx, "bytes_read", s.bytes_read);
    u64(fn, ctx, "bytes_written", s.bytes_written);
    u64(fn, ctx, "loop_max_stall_us", s.loop_max_stall_us);
    u64(fn, ctx, "filters", registry_count(srv->reg));
    u64(fn, ctx, "items", total_items(srv));
    u64(fn, ctx, "memory_bytes", budget_used(&srv->budget));
    u64(fn, ctx, "memory_filters", budget_part(&srv->budget, BUDGET_FILTERS));
    u64(fn, ctx, "memory_filter_overhead", budget_part(&srv->budget, BUDGET_OVERHEAD));
    u64(fn, ctx, "memory_connections", budget_part(&srv->budget, BUDGET_CONNECTIONS));
    u64(fn, ctx, "memory_limit", srv->budget.limit);
    struct snapshot_stats st;
    snapshot_get_stats(srv->snap, &st);
    u64(fn, ctx, "snapshot_last_time", (uint64_t)st.last_time);
    u64(fn, ctx, "snapshot_last_duration_ms", st.last_duration_ms);
    u64(fn, ctx, "snapshot_last_bytes", st.last_bytes);
    u64(fn, ctx, "snapshot_failures", st.failures);
    u64(fn, ctx, "snapshots_written", st.written);
    u64(fn, ctx, "snapshot_running", st.running);
    durable_visit(srv, fn, ctx);
}
