/*
 * stats.c - gathers the rows of core/stat.h from their sources. Field names follow
 * memcached where one exists (uptime, curr_connections, total_connections) so existing
 * dashboards read them; the table says so per row.
 */
#include "server/exec/stats.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/core/clock.h"
#include "server/core/server.h"
#include "server/persist/durable.h"
#include "server/persist/snapshot.h"
#include "server/store/figures.h"
#include "server/store/registry.h"

/* The cmd_* rows follow enum proto_cmd, so cmd[c] is row STAT_CMD_CREATE + c. */
_Static_assert(STAT_CMD_RESTORE - STAT_CMD_CREATE == PROTO_CMD_RESTORE - PROTO_CMD_CREATE &&
                   STAT_CMD_STATS - STAT_CMD_CREATE == PROTO_CMD_STATS - PROTO_CMD_CREATE &&
                   STAT_CMD_INFO - STAT_CMD_CREATE == PROTO_CMD_INFO - PROTO_CMD_CREATE,
               "the cmd_* rows of stat.h are in enum proto_cmd's order");

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

static void workers(const struct server *srv, struct stat_values *out)
{
    struct stats s;
    memset(&s, 0, sizeof s);
    if (srv->counters != NULL)
        add_worker(&s, srv->counters);
    stat_set_u64(out, STAT_CURR_CONNECTIONS, s.conn_current);
    stat_set_u64(out, STAT_TOTAL_CONNECTIONS, s.conn_total);
    stat_set_u64(out, STAT_REJECTED_CONNECTIONS, s.conn_rejected);
    stat_set_u64(out, STAT_SHED_CONNECTIONS, s.conn_shed);
    stat_set_u64(out, STAT_COMMANDS, s.commands);
    for (int c = 0; c < STATS_NCMD; c++)
        stat_set_u64(out, (enum stat_id)(STAT_CMD_CREATE + c), s.cmd[c]);
    stat_set_u64(out, STAT_PROTOCOL_ERRORS, s.errors);
    stat_set_u64(out, STAT_KEYS_ADDED, s.keys_added);
    stat_set_u64(out, STAT_KEYS_CHECKED, s.keys_checked);
    stat_set_u64(out, STAT_KEYS_STORED, s.keys_stored);
    stat_set_u64(out, STAT_KEYS_PRESENT, s.keys_present);
    stat_set_u64(out, STAT_KEYS_ABSENT, s.keys_absent);
    stat_set_u64(out, STAT_BYTES_READ, s.bytes_read);
    stat_set_u64(out, STAT_BYTES_WRITTEN, s.bytes_written);
    stat_set_u64(out, STAT_LOOP_MAX_STALL_US, s.loop_max_stall_us);
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

static void process(const struct server *srv, struct stat_values *out, bool items)
{
    stat_set_u64(out, STAT_PID, (uint64_t)getpid());
    stat_set_u64(out, STAT_UPTIME, (clock_mono_ns() - srv->started_ns) / 1000000000u);
    stat_set_u64(out, STAT_TIME, (uint64_t)(clock_wall_ms() / 1000));
    stat_set_str(out, STAT_VERSION, BLOOMD_VERSION);
    stat_set_u64(out, STAT_THREADS, srv->counters != NULL ? 1 : 0);
    stat_set_u64(out, STAT_FILTERS, registry_count(srv->reg));
    if (items)
        stat_set_u64(out, STAT_ITEMS, total_items(srv));
    stat_set_u64(out, STAT_HTTP_CONNECTIONS, srv->http_conns.current);
    stat_set_u64(out, STAT_HTTP_REJECTED, srv->http_conns.rejected);
}

static void budget(const struct server *srv, struct stat_values *out)
{
    stat_set_u64(out, STAT_MEMORY_BYTES, budget_used(&srv->budget));
    stat_set_u64(out, STAT_MEMORY_FILTERS, budget_part(&srv->budget, BUDGET_FILTERS));
    stat_set_u64(out, STAT_MEMORY_FILTER_OVERHEAD, budget_part(&srv->budget, BUDGET_OVERHEAD));
    stat_set_u64(out, STAT_MEMORY_CONNECTIONS, budget_part(&srv->budget, BUDGET_CONNECTIONS));
    stat_set_u64(out, STAT_MEMORY_LIMIT, srv->budget.limit);
}

static void snapshots(const struct server *srv, struct stat_values *out)
{
    struct snapshot_stats st;
    snapshot_get_stats(srv->snap, &st);
    stat_set_u64(out, STAT_SNAPSHOT_LAST_TIME, (uint64_t)st.last_time);
    stat_set_u64(out, STAT_SNAPSHOT_LAST_DURATION_MS, st.last_duration_ms);
    stat_set_u64(out, STAT_SNAPSHOT_LAST_BYTES, st.last_bytes);
    stat_set_u64(out, STAT_SNAPSHOT_FAILURES, st.failures);
    stat_set_u64(out, STAT_SNAPSHOTS_WRITTEN, st.written);
    stat_set_u64(out, STAT_SNAPSHOT_RUNNING, st.running);
}

static void replication(const struct server *srv, struct stat_values *out)
{
    static const char *const links[] = {"down", "sync", "up"};
    const struct server_repl *r = &srv->repl;
    bool replica = r->role == SERVER_REPLICA;
    stat_set_str(out, STAT_ROLE, replica ? "replica" : "primary");
    stat_set_u64(out, STAT_REPLICATION_OFFSET, r->offset);
    stat_set_u64(out, STAT_CONNECTED_REPLICAS, r->connected);
    stat_set_u64(out, STAT_REPLICATION_FULL_SYNCS, r->full_syncs);
    stat_set_u64(out, STAT_REPLICATION_PARTIAL_SYNCS, r->partial_syncs);
    stat_set_u64(out, STAT_REPLICATION_JOURNAL_RESYNCS, r->from_journal);
    stat_set_str(out, STAT_PRIMARY_LINK, replica ? links[r->link] : "none");
    stat_set_u64(out, STAT_REPLICATION_LAG_RECORDS,
                 replica && r->primary_offset > r->offset ? r->primary_offset - r->offset : 0);
}

static void gather(const struct server *srv, struct stat_values *out, bool items)
{
    memset(out, 0, sizeof *out);
    process(srv, out, items);
    workers(srv, out);
    budget(srv, out);
    snapshots(srv, out);
    durable_visit(srv, out);
    replication(srv, out);
}

void stats_gather(const struct server *srv, struct stat_values *out)
{
    gather(srv, out, true);
}

void stats_gather_cheap(const struct server *srv, struct stat_values *out)
{
    gather(srv, out, false);
}

void stats_result(const struct server *srv, struct result *res)
{
    struct stat_values v;
    stats_gather(srv, &v);
    res->status = RESULT_FIELDS;
    for (int i = 0; i < STAT_COUNT; i++) {
        const struct stat_def *d = &stat_defs[i];
        if (d->type == STAT_STR) {
            const char *s = v.v[i].s != NULL ? v.v[i].s : "";
            result_field_str(res, d->name, s, strlen(s));
        } else {
            result_field_u64(res, d->name, v.v[i].u);
        }
        if (d->mc != NULL)
            result_field_alias(res, d->mc);
    }
}

/* kind_field_fn into a result. */
static void add_field(void *ctx, const char *name, enum kind_field_type type, uint64_t u, double d,
                      const char *s)
{
    struct result *res = ctx;
    if (type == KIND_FIELD_U64)
        result_field_u64(res, name, u);
    else if (type == KIND_FIELD_DOUBLE)
        result_field_double(res, name, d);
    else
        result_field_str(res, name, s, strlen(s));
}

void stats_info(struct server *srv, const struct filter *f, struct result *res)
{
    figures_want(srv->figures, f); /* a big filter's next count, if its own is stale */
    struct figures_row row;
    figures_of(srv->figures, f, true, &row);
    result_field_str(res, "name", f->name, f->name_len);
    f->ops->fields(f->obj, row.has_estimate ? &row.est : NULL, add_field, res);
    int64_t saved = atomic_load_explicit(&f->saved_at, memory_order_relaxed);
    result_field_u64(res, "snapshot_time", (uint64_t)saved);
    if (f->ops->estimate != NULL && row.has_estimate)
        result_field_u64(res, "estimated_age_ms", (uint64_t)row.est_age_ms);
}
