/*
 * stat.h - the one table of the daemon's figures (twemproxy's nc_stats.h shape): one row
 * per figure with its STATS name, type, the module that fills it, its memcached name,
 * its Prometheus family and its help text. STATS, memcached's stats, /metrics and /api
 * are rendered from these rows in this order, so adding a figure is one row here plus
 * the line of its source that sets it, and no renderer can forget it.
 *
 * A module that owns figures fills its rows of a struct stat_values by id (stats_gather
 * in exec/stats.c asks every source once); nothing matches figures by name.
 */
#ifndef BLOOMD_SERVER_STAT_H
#define BLOOMD_SERVER_STAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Who fills a row (see stats_gather). */
enum stat_source {
    STAT_SRC_SERVER,   /* exec/stats.c: the process, the registry */
    STAT_SRC_WORKERS,  /* the workers' counters (struct stats), summed */
    STAT_SRC_BUDGET,   /* core/budget.h */
    STAT_SRC_SNAPSHOT, /* persist/snapshot.h: snapshot_get_stats */
    STAT_SRC_JOURNAL,  /* persist/durable.h: durable_visit */
    STAT_SRC_REPL,     /* core/server.h's struct server_repl, filled by server/repl/ */
};

enum stat_type {
    STAT_U64,
    STAT_STR, /* a static string */
};

/* How /metrics shows a row. */
enum stat_prom {
    STAT_PROM_NONE,    /* not exported (a sum of another family, or the clock) */
    STAT_PROM_GAUGE,   /* family value*scale */
    STAT_PROM_COUNTER, /* family value*scale; the family name ends in _total */
    STAT_PROM_INFO,    /* a STR: family{<label>="<value>"} 1 */
};

/* The help of bloomd_commands_total, shared by its cmd_* rows. */
#define STAT_HELP_CMD "Requests executed, by command."

/* One command's counter: STATS cmd_<lower>, bloomd_commands_total{cmd="<lower>"}. */
#define STAT_CMD_ROW(X, ID, lower)                                                                 \
    X(CMD_##ID, "cmd_" #lower, STAT_U64, STAT_SRC_WORKERS, NULL, STAT_PROM_COUNTER,                \
      "bloomd_commands_total", 1, "cmd=\"" #lower "\"", STAT_HELP_CMD)

/*
 * X(id, STATS name, type, source, memcached name or NULL, prom kind, prom family, scale,
 *   label, help). label: for a GAUGE or COUNTER the sample's labels as written
 *   (`cmd="add"`) or NULL; for an INFO the name of the label that carries the value.
 *   Rows of one family are adjacent and share its kind and help. The STATS order is the
 *   table's: clients parse the names, so a name never changes.
 */
#define STATS_TABLE(X)                                                                             \
    X(PID, "pid", STAT_U64, STAT_SRC_SERVER, "pid", STAT_PROM_NONE, NULL, 1, NULL, "Process id.")  \
    X(UPTIME, "uptime", STAT_U64, STAT_SRC_SERVER, "uptime", STAT_PROM_GAUGE,                      \
      "bloomd_uptime_seconds", 1, NULL, "Seconds since the daemon started.")                       \
    X(TIME, "time", STAT_U64, STAT_SRC_SERVER, "time", STAT_PROM_NONE, NULL, 1, NULL,              \
      "The server's Unix time.")                                                                   \
    X(VERSION, "version", STAT_STR, STAT_SRC_SERVER, "version", STAT_PROM_INFO,                    \
      "bloomd_build_info", 1, "version", "Always 1; the version as a label.")                      \
    X(THREADS, "threads", STAT_U64, STAT_SRC_SERVER, "threads", STAT_PROM_GAUGE, "bloomd_threads", \
      1, NULL, "Worker threads (event loops).")                                                    \
    X(CURR_CONNECTIONS, "curr_connections", STAT_U64, STAT_SRC_WORKERS, "curr_connections",        \
      STAT_PROM_GAUGE, "bloomd_connected_clients", 1, NULL, "Open client connections.")            \
    X(TOTAL_CONNECTIONS, "total_connections", STAT_U64, STAT_SRC_WORKERS, "total_connections",     \
      STAT_PROM_COUNTER, "bloomd_connections_total", 1, NULL, "Client connections accepted.")      \
    X(REJECTED_CONNECTIONS, "rejected_connections", STAT_U64, STAT_SRC_WORKERS,                    \
      "rejected_connections", STAT_PROM_COUNTER, "bloomd_rejected_connections_total", 1, NULL,     \
      "Client connections refused (max_connections or out of descriptors).")                       \
    X(SHED_CONNECTIONS, "shed_connections", STAT_U64, STAT_SRC_WORKERS, NULL, STAT_PROM_COUNTER,   \
      "bloomd_shed_connections_total", 1, NULL,                                                    \
      "Client connections closed for holding the most buffers with max_memory exceeded.")          \
    X(HTTP_CONNECTIONS, "http_connections", STAT_U64, STAT_SRC_SERVER, NULL, STAT_PROM_GAUGE,      \
      "bloomd_http_connections", 1, NULL, "Open HTTP connections.")                                \
    X(HTTP_REJECTED, "http_rejected_connections", STAT_U64, STAT_SRC_SERVER, NULL,                 \
      STAT_PROM_COUNTER, "bloomd_http_rejected_connections_total", 1, NULL,                        \
      "HTTP connections over http_max_connections, answered 503 or closed.")                       \
    X(COMMANDS, "commands", STAT_U64, STAT_SRC_WORKERS, NULL, STAT_PROM_NONE, NULL, 1, NULL,       \
      "Requests executed (the sum of bloomd_commands_total).")                                     \
    STAT_CMD_ROW(X, CREATE, create)                                                                \
    STAT_CMD_ROW(X, ADD, add)                                                                      \
    STAT_CMD_ROW(X, CHECK, check)                                                                  \
    STAT_CMD_ROW(X, CHECKADD, checkadd)                                                            \
    STAT_CMD_ROW(X, UNION, union)                                                                  \
    STAT_CMD_ROW(X, INTERSECT, intersect)                                                          \
    STAT_CMD_ROW(X, INFO, info)                                                                    \
    STAT_CMD_ROW(X, LIST, list)                                                                    \
    STAT_CMD_ROW(X, DROP, drop)                                                                    \
    STAT_CMD_ROW(X, CLEAR, clear)                                                                  \
    STAT_CMD_ROW(X, FLUSH, flush)                                                                  \
    STAT_CMD_ROW(X, STATS, stats)                                                                  \
    STAT_CMD_ROW(X, VERSION, version)                                                              \
    STAT_CMD_ROW(X, HELP, help)                                                                    \
    STAT_CMD_ROW(X, QUIT, quit)                                                                    \
    STAT_CMD_ROW(X, AUTH, auth)                                                                    \
    STAT_CMD_ROW(X, DELETE, delete)                                                                \
    STAT_CMD_ROW(X, DUMP, dump)                                                                    \
    STAT_CMD_ROW(X, RESTORE, restore)                                                              \
    X(PROTOCOL_ERRORS, "protocol_errors", STAT_U64, STAT_SRC_WORKERS, NULL, STAT_PROM_COUNTER,     \
      "bloomd_protocol_errors_total", 1, NULL, "Requests that failed to parse.")                   \
    X(KEYS_ADDED, "keys_added", STAT_U64, STAT_SRC_WORKERS, "total_items", STAT_PROM_COUNTER,      \
      "bloomd_keys_added_total", 1, NULL, "New keys added by ADD and CHECKADD (result new).")      \
    X(KEYS_CHECKED, "keys_checked", STAT_U64, STAT_SRC_WORKERS, "cmd_get", STAT_PROM_COUNTER,      \
      "bloomd_keys_checked_total", 1, NULL, "Keys looked up by CHECK and CHECKADD.")               \
    X(KEYS_STORED, "keys_stored", STAT_U64, STAT_SRC_WORKERS, "cmd_set", STAT_PROM_COUNTER,        \
      "bloomd_keys_stored_total", 1, NULL,                                                         \
      "Keys given to ADD and CHECKADD (memcached add and set), new or not.")                       \
    X(KEYS_PRESENT, "keys_present", STAT_U64, STAT_SRC_WORKERS, "get_hits", STAT_PROM_COUNTER,     \
      "bloomd_keys_present_total", 1, NULL, "Keys CHECK (memcached get) found present.")           \
    X(KEYS_ABSENT, "keys_absent", STAT_U64, STAT_SRC_WORKERS, "get_misses", STAT_PROM_COUNTER,     \
      "bloomd_keys_absent_total", 1, NULL, "Keys CHECK (memcached get) found absent.")             \
    X(BYTES_READ, "bytes_read", STAT_U64, STAT_SRC_WORKERS, "bytes_read", STAT_PROM_COUNTER,       \
      "bloomd_read_bytes_total", 1, NULL, "Bytes read from clients.")                              \
    X(BYTES_WRITTEN, "bytes_written", STAT_U64, STAT_SRC_WORKERS, "bytes_written",                 \
      STAT_PROM_COUNTER, "bloomd_written_bytes_total", 1, NULL, "Bytes written to clients.")       \
    X(LOOP_MAX_STALL_US, "loop_max_stall_us", STAT_U64, STAT_SRC_WORKERS, NULL, STAT_PROM_GAUGE,   \
      "bloomd_loop_max_stall_seconds", 0.000001, NULL,                                             \
      "The event loop's longest single callback since start-up.")                                  \
    X(FILTERS, "filters", STAT_U64, STAT_SRC_SERVER, NULL, STAT_PROM_GAUGE, "bloomd_filters", 1,   \
      NULL, "Filters in memory.")                                                                  \
    X(ITEMS, "items", STAT_U64, STAT_SRC_SERVER, "curr_items", STAT_PROM_GAUGE, "bloomd_items", 1, \
      NULL, "Keys held by every filter (the sum of bloomd_filter_items).")                         \
    X(MEMORY_BYTES, "memory_bytes", STAT_U64, STAT_SRC_BUDGET, "bytes", STAT_PROM_GAUGE,           \
      "bloomd_memory_used_bytes", 1, NULL,                                                         \
      "Bytes of the memory budget in use (filters, their overhead and connection buffers).")       \
    X(MEMORY_FILTERS, "memory_filters", STAT_U64, STAT_SRC_BUDGET, NULL, STAT_PROM_GAUGE,          \
      "bloomd_memory_filters_bytes", 1, NULL, "Bytes of the memory budget in filter bits.")        \
    X(MEMORY_FILTER_OVERHEAD, "memory_filter_overhead", STAT_U64, STAT_SRC_BUDGET, NULL,           \
      STAT_PROM_GAUGE, "bloomd_memory_filter_overhead_bytes", 1, NULL,                             \
      "Bytes of the memory budget in per-filter structures and the daemon's tables.")              \
    X(MEMORY_CONNECTIONS, "memory_connections", STAT_U64, STAT_SRC_BUDGET, NULL, STAT_PROM_GAUGE,  \
      "bloomd_memory_connections_bytes", 1, NULL,                                                  \
      "Bytes of the memory budget in client connections and their buffers.")                       \
    X(MEMORY_LIMIT, "memory_limit", STAT_U64, STAT_SRC_BUDGET, "limit_maxbytes", STAT_PROM_GAUGE,  \
      "bloomd_memory_max_bytes", 1, NULL, "The memory budget (max_memory).")                       \
    X(SNAPSHOT_LAST_TIME, "snapshot_last_time", STAT_U64, STAT_SRC_SNAPSHOT, NULL,                 \
      STAT_PROM_GAUGE, "bloomd_last_snapshot_timestamp_seconds", 1, NULL,                          \
      "Unix time the last snapshot started, 0 if none.")                                           \
    X(SNAPSHOT_LAST_DURATION_MS, "snapshot_last_duration_ms", STAT_U64, STAT_SRC_SNAPSHOT, NULL,   \
      STAT_PROM_GAUGE, "bloomd_snapshot_duration_seconds", 0.001, NULL,                            \
      "Duration of the last snapshot.")                                                            \
    X(SNAPSHOT_LAST_BYTES, "snapshot_last_bytes", STAT_U64, STAT_SRC_SNAPSHOT, NULL,               \
      STAT_PROM_GAUGE, "bloomd_last_snapshot_bytes", 1, NULL, "Bytes the last snapshot wrote.")    \
    X(SNAPSHOT_FAILURES, "snapshot_failures", STAT_U64, STAT_SRC_SNAPSHOT, NULL,                   \
      STAT_PROM_COUNTER, "bloomd_snapshot_failures_total", 1, NULL,                                \
      "Filter writes or deletions that failed.")                                                   \
    X(SNAPSHOTS_WRITTEN, "snapshots_written", STAT_U64, STAT_SRC_SNAPSHOT, NULL,                   \
      STAT_PROM_COUNTER, "bloomd_snapshots_written_total", 1, NULL, "Filter files written.")       \
    X(SNAPSHOT_RUNNING, "snapshot_running", STAT_U64, STAT_SRC_SNAPSHOT, NULL, STAT_PROM_GAUGE,    \
      "bloomd_snapshot_running", 1, NULL, "1 while a snapshot job runs.")                          \
    X(DURABILITY, "durability", STAT_STR, STAT_SRC_JOURNAL, NULL, STAT_PROM_INFO,                  \
      "bloomd_durability_info", 1, "mode", "Always 1; the durability mode as a label.")            \
    X(JOURNAL_RECORDS, "journal_records", STAT_U64, STAT_SRC_JOURNAL, NULL, STAT_PROM_COUNTER,     \
      "bloomd_journal_records_total", 1, NULL, "Records appended to the journal.")                 \
    X(JOURNAL_BYTES, "journal_bytes", STAT_U64, STAT_SRC_JOURNAL, NULL, STAT_PROM_COUNTER,         \
      "bloomd_journal_bytes_total", 1, NULL, "Bytes appended to the journal, framing included.")   \
    X(JOURNAL_SYNCS, "journal_syncs", STAT_U64, STAT_SRC_JOURNAL, NULL, STAT_PROM_COUNTER,         \
      "bloomd_journal_syncs_total", 1, NULL, "Journal fdatasync calls that succeeded.")            \
    X(JOURNAL_SYNC_MAX_MS, "journal_sync_max_ms", STAT_U64, STAT_SRC_JOURNAL, NULL,                \
      STAT_PROM_GAUGE, "bloomd_journal_sync_max_seconds", 0.001, NULL,                             \
      "The longest journal fdatasync since start-up.")                                             \
    X(JOURNAL_FAILURES, "journal_failures", STAT_U64, STAT_SRC_JOURNAL, NULL, STAT_PROM_COUNTER,   \
      "bloomd_journal_failures_total", 1, NULL, "Journal writes or syncs that failed.")            \
    X(JOURNAL_BUFFERED_BYTES, "journal_buffered_bytes", STAT_U64, STAT_SRC_JOURNAL, NULL,          \
      STAT_PROM_GAUGE, "bloomd_journal_buffered_bytes", 1, NULL,                                   \
      "Bytes appended to the journal and not yet durable.")                                        \
    X(JOURNAL_BROKEN, "journal_broken", STAT_U64, STAT_SRC_JOURNAL, NULL, STAT_PROM_GAUGE,         \
      "bloomd_journal_broken", 1, NULL,                                                            \
      "1 once the journal failed for good: changes are refused.")                                  \
    X(JOURNAL_DURABLE_POS, "journal_durable_pos", STAT_U64, STAT_SRC_JOURNAL, NULL,                \
      STAT_PROM_GAUGE, "bloomd_journal_durable_position", 1, NULL,                                 \
      "The journal position known to be on disk.")                                                 \
    X(ROLE, "role", STAT_STR, STAT_SRC_REPL, NULL, STAT_PROM_INFO, "bloomd_role_info", 1, "role",  \
      "1, labelled with this server's role: primary or replica.")                                  \
    X(REPLICATION_OFFSET, "replication_offset", STAT_U64, STAT_SRC_REPL, NULL, STAT_PROM_GAUGE,    \
      "bloomd_replication_offset", 1, NULL,                                                        \
      "Records written (a primary) or applied (a replica) in the replication stream.")             \
    X(CONNECTED_REPLICAS, "connected_replicas", STAT_U64, STAT_SRC_REPL, NULL, STAT_PROM_GAUGE,    \
      "bloomd_connected_replicas", 1, NULL, "Replicas following this server's stream.")            \
    X(REPLICATION_FULL_SYNCS, "replication_full_syncs", STAT_U64, STAT_SRC_REPL, NULL,             \
      STAT_PROM_COUNTER, "bloomd_replication_full_syncs_total", 1, NULL,                           \
      "Full syncs this server sent to replicas.")                                                  \
    X(REPLICATION_PARTIAL_SYNCS, "replication_partial_syncs", STAT_U64, STAT_SRC_REPL, NULL,       \
      STAT_PROM_COUNTER, "bloomd_replication_partial_syncs_total", 1, NULL,                        \
      "Partial resyncs this server served from its backlog.")                                      \
    X(REPLICATION_JOURNAL_RESYNCS, "replication_journal_resyncs", STAT_U64, STAT_SRC_REPL, NULL,   \
      STAT_PROM_COUNTER, "bloomd_replication_journal_resyncs_total", 1, NULL,                      \
      "Of the partial resyncs, those that began older than the in-memory backlog, read back "      \
      "from the journal's segments.")                                                              \
    X(PRIMARY_LINK, "primary_link", STAT_STR, STAT_SRC_REPL, NULL, STAT_PROM_INFO,                 \
      "bloomd_primary_link_info", 1, "link",                                                       \
      "1, labelled with a replica's link to its primary: up, sync, down (none on a primary).")     \
    X(REPLICATION_LAG_RECORDS, "replication_lag_records", STAT_U64, STAT_SRC_REPL, NULL,           \
      STAT_PROM_GAUGE, "bloomd_replication_lag_records", 1, NULL,                                  \
      "A replica: records its primary wrote that it has not applied yet, as last heard.")

enum stat_id {
#define STAT_ENUM(id, ...) STAT_##id,
    STATS_TABLE(STAT_ENUM)
#undef STAT_ENUM
        STAT_COUNT
};

/* One row of the table. */
struct stat_def {
    const char *name;    /* STATS field */
    enum stat_type type; /* u or s in struct stat_value */
    enum stat_source source;
    const char *mc;      /* memcached's name for it, or NULL: shown under name */
    enum stat_prom prom; /* how /metrics shows it */
    const char *family;  /* Prometheus family; NULL with STAT_PROM_NONE */
    double scale;        /* exported value = value * scale (ms -> s) */
    const char *label;   /* see STATS_TABLE */
    const char *help;    /* Prometheus HELP, and what the figure means */
};

extern const struct stat_def stat_defs[STAT_COUNT];

struct stat_value {
    uint64_t u;    /* STAT_U64 */
    const char *s; /* STAT_STR: static storage */
    bool set;      /* its source filled it */
};

/* Every figure once: stats_gather fills it, the renderers read it. */
struct stat_values {
    struct stat_value v[STAT_COUNT];
};

static inline void stat_set_u64(struct stat_values *out, enum stat_id id, uint64_t u)
{
    out->v[id] = (struct stat_value){.u = u, .set = true};
}

static inline void stat_set_str(struct stat_values *out, enum stat_id id, const char *s)
{
    out->v[id] = (struct stat_value){.s = s, .set = true};
}

#endif
