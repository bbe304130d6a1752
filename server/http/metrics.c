/*
 * metrics.c - GET /metrics: Prometheus text exposition format 0.0.4. The daemon's
 * figures come from stats_visit() (the one list; the table below only names them in
 * Prometheus' terms, and a figure it does not know still appears as bloomd_<stat>), the
 * per-filter figures from the kinds' cheap info and parts, and from figures.h's cache
 * for the popcount ones; process_* from /proc. A scrape is O(filters), never O(bytes).
 */
#include <dirent.h>
#include <event2/buffer.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "server/core/clock.h"
#include "server/core/server.h"
#include "server/exec/stats.h"
#include "server/http/http_pages.h"
#include "server/store/figures.h"
#include "server/store/registry.h"

struct prom_name {
    const char *stat; /* STATS field */
    const char *name; /* metric family; NULL: not exported (a sum of another family) */
    const char *type;
    const char *help;
    double scale; /* value = stat * scale (ms -> s) */
};

static const struct prom_name prom_names[] = {
    {"uptime", "bloomd_uptime_seconds", "gauge", "Seconds since the daemon started.", 1},
    {"curr_connections", "bloomd_connected_clients", "gauge", "Open client connections.", 1},
    {"total_connections", "bloomd_connections_total", "counter", "Client connections accepted.", 1},
    {"rejected_connections", "bloomd_rejected_connections_total", "counter",
     "Client connections refused (max_connections or out of descriptors).", 1},
    {"shed_connections", "bloomd_shed_connections_total", "counter",
     "Client connections closed for holding the most buffers with max_memory exceeded.", 1},
    {"loop_max_stall_us", "bloomd_loop_max_stall_seconds", "gauge",
     "The event loop's longest single callback since start-up.", 0.000001},
    {"commands", NULL, NULL, NULL, 1}, /* the sum of bloomd_commands_total */
    {"protocol_errors", "bloomd_protocol_errors_total", "counter", "Requests that failed to parse.",
     1},
    {"keys_added", "bloomd_keys_added_total", "counter",
     "New keys added by ADD and CHECKADD (result new).", 1},
    {"keys_checked", "bloomd_keys_checked_total", "counter",
     "Keys looked up by CHECK and CHECKADD.", 1},
    {"bytes_read", "bloomd_read_bytes_total", "counter", "Bytes read from clients.", 1},
    {"bytes_written", "bloomd_written_bytes_total", "counter", "Bytes written to clients.", 1},
    {"filters", "bloomd_filters", "gauge", "Filters in memory.", 1},
    {"memory_bytes", "bloomd_memory_used_bytes", "gauge",
     "Bytes of the memory budget in use (filters, their overhead and connection buffers).", 1},
    {"memory_filters", "bloomd_memory_filters_bytes", "gauge",
     "Bytes of the memory budget in filter bits.", 1},
    {"memory_filter_overhead", "bloomd_memory_filter_overhead_bytes", "gauge",
     "Bytes of the memory budget in per-filter structures and the daemon's tables.", 1},
    {"memory_connections", "bloomd_memory_connections_bytes", "gauge",
     "Bytes of the memory budget in client connections and their buffers.", 1},
    {"memory_limit", "bloomd_memory_max_bytes", "gauge", "The memory budget (max_memory).", 1},
    {"snapshot_last_time", "bloomd_last_snapshot_timestamp_seconds", "gauge",
     "Unix time the last snapshot started, 0 if none.", 1},
    {"snapshot_last_duration_ms", "bloomd_snapshot_duration_seconds", "gauge",
     "Duration of the last snapshot.", 0.001},
    {"snapshot_last_bytes", "bloomd_last_snapshot_bytes", "gauge", "Bytes the last snapshot wrote.",
     1},
    {"snapshot_failures", "bloomd_snapshot_failures_total", "counter",
     "Filter writes or deletions that failed.", 1},
    {"snapshots_written", "bloomd_snapshots_written_total", "counter", "Filter files written.", 1},
    {"snapshot_running", "bloomd_snapshot_running", "gauge", "1 while a snapshot job runs.", 1},
};

struct render {
    struct evbuffer *out;
    const char *family; /* the family whose header was written last */
};

static void header(struct render *r, const char *family, const char *type, const char *help)
{
    if (r->family != NULL && strcmp(r->family, family) == 0)
        return;
    r->family = family;
    evbuffer_add_printf(r->out, "# HELP %s %s\n# TYPE %s %s\n", family, help, family, type);
}

static void value(struct render *r, double v)
{
    if (v == (double)(uint64_t)v && v < 9007199254740992.0)
        evbuffer_add_printf(r->out, " %llu\n", (unsigned long long)v);
    else
        evbuffer_add_printf(r->out, " %.17g\n", v);
}

/* A label value: names are [A-Za-z0-9._-] already; escape anyway as 0.0.4 says. */
static void label(struct render *r, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\' || *s == '"')
            evbuffer_add_printf(r->out, "\\%c", *s);
        else if (*s == '\n')
            evbuffer_add(r->out, "\\n", 2);
        else
            evbuffer_add(r->out, s, 1);
    }
}

static void on_stat(void *ctx, const char *stat, enum kind_field_type type, uint64_t u, double d,
                    const char *s)
{
    struct render *r = ctx;
    if (strcmp(stat, "version") == 0) {
        header(r, "bloomd_build_info", "gauge", "Always 1; the version as a label.");
        evbuffer_add_printf(r->out, "bloomd_build_info{version=\"");
        label(r, s);
        evbuffer_add_printf(r->out, "\"} 1\n");
        return;
    }
    double v = type == KIND_FIELD_U64 ? (double)u : type == KIND_FIELD_DOUBLE ? d : 0;
    if (type == KIND_FIELD_STR)
        return; /* no other string figure has a numeric reading */
    if (strncmp(stat, "cmd_", 4) == 0) {
        header(r, "bloomd_commands_total", "counter", "Requests executed, by command.");
        evbuffer_add_printf(r->out, "bloomd_commands_total{cmd=\"");
        label(r, stat + 4);
        evbuffer_add_printf(r->out, "\"}");
        value(r, v);
        return;
    }
    for (size_t i = 0; i < sizeof prom_names / sizeof prom_names[0]; i++) {
        const struct prom_name *p = &prom_names[i];
        if (strcmp(p->stat, stat) != 0)
            continue;
        if (p->name == NULL)
            return;
        header(r, p->name, p->type, p->help);
        evbuffer_add_printf(r->out, "%s", p->name);
        value(r, v * p->scale);
        return;
    }
    /* A figure added to STATS later: exported as is until it gets a proper name. */
    char family[96];
    snprintf(family, sizeof family, "bloomd_%s", stat);
    for (char *c = family; *c != '\0'; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')))
            *c = '_';
    evbuffer_add_printf(r->out, "# HELP %s STATS field %s.\n# TYPE %s gauge\n%s", family, stat,
                        family, family);
    r->family = NULL;
    value(r, v);
}

/* ---- per filter ---- */

struct parts_sum {
    uint32_t n;
    uint64_t bits;
};

static void count_part(void *ctx, const struct kind_part *part)
{
    struct parts_sum *s = ctx;
    s->n++;
    s->bits += part->blocks * part->block_bits;
}

enum filter_metric {
    FM_INFO,
    FM_BYTES,
    FM_ITEMS,
    FM_CAPACITY,
    FM_STAGES,
    FM_PROMISED,
    FM_ESTIMATED,
    FM_FILL,
    FM_AGE,
    FM_COUNT
};

static const struct {
    const char *name, *help;
} filter_metrics[FM_COUNT] = {
    [FM_INFO] = {"bloomd_filter_info", "Always 1; the filter's kind as a label."},
    [FM_BYTES] = {"bloomd_filter_bytes", "Bytes of filter memory."},
    [FM_ITEMS] = {"bloomd_filter_items", "Keys added to the filter (new keys)."},
    [FM_CAPACITY] = {"bloomd_filter_capacity", "Keys the filter holds now at its promised rate."},
    [FM_STAGES] = {"bloomd_filter_stages", "Stages (parts) of the filter."},
    [FM_PROMISED] = {"bloomd_filter_promised_fpr_ratio", "The promised false-positive rate."},
    [FM_ESTIMATED] = {"bloomd_filter_estimated_fpr_ratio",
                      "False-positive rate estimated from the bits set (job thread, cached)."},
    [FM_FILL] = {"bloomd_filter_fill_ratio", "Fraction of the filter's bits set (cached)."},
    [FM_AGE] = {"bloomd_filter_figures_age_seconds",
                "Age of the cached popcount figures of the filter."},
};

static void filter_metrics_render(struct render *r, struct server *srv, const struct figures *fg)
{
    struct filter **f;
    size_t n;
    if (registry_collect(srv->reg, NULL, 0, &f, &n) != REGISTRY_OK)
        return;
    int64_t now = clock_wall_ms();
    for (int m = 0; m < FM_COUNT; m++) {
        header(r, filter_metrics[m].name, "gauge", filter_metrics[m].help);
        for (size_t i = 0; i < n; i++) {
            struct kind_info info = {0};
            f[i]->ops->info(f[i]->obj, &info);
            struct parts_sum ps = {0};
            if (f[i]->ops->parts != NULL)
                f[i]->ops->parts(f[i]->obj, false, count_part, &ps);
            const struct figures_entry *e = figures_get(fg, f[i]->name, f[i]->name_len);
            bool counted = e != NULL && e->counted_ms != 0 && e->obj == f[i]->obj;
            double v;
            switch (m) {
            case FM_INFO:
                evbuffer_add_printf(r->out, "%s{filter=\"%s\",kind=\"%s\"} 1\n",
                                    filter_metrics[m].name, f[i]->name, f[i]->ops->name);
                continue;
            case FM_BYTES:
                v = (double)info.bytes;
                break;
            case FM_ITEMS:
                v = (double)info.items;
                break;
            case FM_CAPACITY:
                v = (double)info.capacity;
                break;
            case FM_STAGES:
                v = f[i]->ops->parts != NULL ? ps.n : 1;
                break;
            case FM_PROMISED:
                v = info.error;
                break;
            case FM_ESTIMATED:
                if (!counted || !e->has_estimate)
                    continue;
                v = e->est_error;
                break;
            case FM_FILL: {
                if (!counted || ps.bits == 0)
                    continue;
                uint64_t ones = 0;
                for (uint32_t p = 0; p < e->nparts; p++)
                    ones += e->ones[p];
                v = (double)ones / (double)ps.bits;
                break;
            }
            case FM_AGE:
            default:
                if (!counted)
                    continue;
                v = (double)(now - e->counted_ms) / 1000.0;
                break;
            }
            evbuffer_add_printf(r->out, "%s{filter=\"%s\"}", filter_metrics[m].name, f[i]->name);
            value(r, v);
        }
    }
    header(r, "bloomd_keys_total", "counter",
           "Keys written to the filter by ADD/CHECKADD (and memcached add/set), new or seen.");
    for (size_t i = 0; i < n; i++) {
        static const char *const results[2] = {"new", "seen"};
        uint64_t v[2] = {atomic_load_explicit(&f[i]->keys_new, memory_order_relaxed),
                         atomic_load_explicit(&f[i]->keys_seen, memory_order_relaxed)};
        for (int k = 0; k < 2; k++) {
            evbuffer_add_printf(r->out, "bloomd_keys_total{filter=\"%s\",result=\"%s\"}",
                                f[i]->name, results[k]);
            value(r, (double)v[k]);
        }
    }
    for (size_t i = 0; i < n; i++)
        filter_unref(f[i]);
    free(f);
}

/* ---- process ---- */

static void process_metrics(struct render *r, struct server *srv)
{
    long page = sysconf(_SC_PAGESIZE);
    unsigned long long vsz = 0, rss = 0;
    FILE *fp = fopen("/proc/self/statm", "r");
    if (fp != NULL) {
        if (fscanf(fp, "%llu %llu", &vsz, &rss) != 2)
            vsz = rss = 0;
        fclose(fp);
    }
    header(r, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    evbuffer_add_printf(r->out, "process_resident_memory_bytes %llu\n",
                        rss * (unsigned long long)page);
    header(r, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
    evbuffer_add_printf(r->out, "process_virtual_memory_bytes %llu\n",
                        vsz * (unsigned long long)page);
    struct rusage ru;
    double cpu = 0;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
              (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    header(r, "process_cpu_seconds_total", "counter", "User and system CPU time in seconds.");
    evbuffer_add_printf(r->out, "process_cpu_seconds_total %.6f\n", cpu);
    long fds = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d != NULL) {
        for (struct dirent *de; (de = readdir(d)) != NULL;)
            fds += de->d_name[0] != '.';
        closedir(d);
        fds--; /* the directory's own descriptor */
    }
    header(r, "process_open_fds", "gauge", "Open file descriptors.");
    evbuffer_add_printf(r->out, "process_open_fds %ld\n", fds);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        header(r, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
        evbuffer_add_printf(r->out, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
    }
    double up = (double)(clock_mono_ns() - srv->started_ns) / 1e9;
    header(r, "process_start_time_seconds", "gauge", "Start time of the process, Unix seconds.");
    evbuffer_add_printf(r->out, "process_start_time_seconds %.3f\n",
                        (double)clock_wall_ms() / 1000.0 - up);
}

int metrics_render(struct server *srv, const struct figures *fg, struct evbuffer *out)
{
    struct render r = {.out = out};
    header(&r, "bloomd_up", "gauge", "1 while the event loop answers.");
    evbuffer_add_printf(out, "bloomd_up 1\n");
    header(&r, "bloomd_ready", "gauge", "1 once snapshots are loaded and the listeners are up.");
    evbuffer_add_printf(out, "bloomd_ready %d\n", srv->phase == SERVER_READY);
    /* While starting, the loader (job thread) is the registry's changing thread. */
    if (srv->phase != SERVER_STARTING) {
        stats_visit(srv, on_stat, &r);
        filter_metrics_render(&r, srv, fg);
    }
    process_metrics(&r, srv);
    return 200;
}
