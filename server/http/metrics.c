/*
 * metrics.c - GET /metrics: Prometheus text exposition format 0.0.4. The daemon's
 * figures are the rows of core/stat.h (each row names its family, type and help), the
 * per-filter ones come from figures_row_of() once per filter (cheap info now, popcounts
 * from the copy of figures.h's cache the loop took); process_* from /proc. A rendering is
 * O(filters), never O(bytes), and runs on the long lane (render.c): it reads only its
 * struct page_input.
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
#include "server/http/http_pages.h"
#include "server/store/figures.h"
#include "server/store/registry.h"

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

/* The daemon's figures: every row of core/stat.h that has a family, in its order. */
static void stats_render(struct render *r, const struct stat_values *sv)
{
    const struct stat_values v = *sv;
    for (int i = 0; i < STAT_COUNT; i++) {
        const struct stat_def *d = &stat_defs[i];
        if (d->prom == STAT_PROM_NONE)
            continue;
        header(r, d->family, d->prom == STAT_PROM_COUNTER ? "counter" : "gauge", d->help);
        evbuffer_add_printf(r->out, "%s", d->family);
        if (d->prom == STAT_PROM_INFO) {
            evbuffer_add_printf(r->out, "{%s=\"", d->label);
            label(r, v.v[i].s != NULL ? v.v[i].s : "");
            evbuffer_add_printf(r->out, "\"} 1\n");
            continue;
        }
        if (d->label != NULL)
            evbuffer_add_printf(r->out, "{%s}", d->label);
        value(r, (double)v.v[i].u * d->scale);
    }
}

/* ---- per filter ---- */

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

static void filter_metrics_render(struct render *r, const struct page_input *in)
{
    struct filter *const *f = in->f;
    size_t n = in->n;
    /* Each filter's figures once, then one family after the other. */
    struct figures_row *rows = calloc(n ? n : 1, sizeof *rows);
    if (rows == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        figures_row_of(in->ent[i], f[i], false, &rows[i]);
    int64_t now = in->now_ms;
    for (int m = 0; m < FM_COUNT; m++) {
        header(r, filter_metrics[m].name, "gauge", filter_metrics[m].help);
        for (size_t i = 0; i < n; i++) {
            const struct figures_row *w = &rows[i];
            double v;
            switch (m) {
            case FM_INFO:
                evbuffer_add_printf(r->out, "%s{filter=\"%s\",kind=\"%s\"} 1\n",
                                    filter_metrics[m].name, f[i]->name, f[i]->ops->name);
                continue;
            case FM_BYTES:
                v = (double)w->info.bytes;
                break;
            case FM_ITEMS:
                v = (double)w->info.items;
                break;
            case FM_CAPACITY:
                v = (double)w->info.capacity;
                break;
            case FM_STAGES:
                v = w->nparts;
                break;
            case FM_PROMISED:
                v = w->info.error;
                break;
            case FM_ESTIMATED:
                if (!w->has_estimate)
                    continue;
                v = w->est.error;
                break;
            case FM_FILL:
                if (!w->counted || w->bits == 0)
                    continue;
                v = (double)w->ones / (double)w->bits;
                break;
            case FM_AGE:
            default:
                if (!w->counted)
                    continue;
                v = (double)(now - w->e->counted_ms) / 1000.0;
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
    free(rows);
}

/* ---- process ---- */

static void process_metrics(struct render *r, const struct page_input *in)
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
    double up = (double)(in->now_ns - in->started_ns) / 1e9;
    header(r, "process_start_time_seconds", "gauge", "Start time of the process, Unix seconds.");
    evbuffer_add_printf(r->out, "process_start_time_seconds %.3f\n",
                        (double)in->now_ms / 1000.0 - up);
}

int metrics_render(const struct page_input *in, struct evbuffer *out)
{
    struct render r = {.out = out};
    header(&r, "bloomd_up", "gauge", "1 while the event loop answers.");
    evbuffer_add_printf(out, "bloomd_up 1\n");
    header(&r, "bloomd_ready", "gauge", "1 once snapshots are loaded and the listeners are up.");
    evbuffer_add_printf(out, "bloomd_ready %d\n", in->phase == SERVER_READY);
    /* While starting, the loader (job thread) is the registry's changing thread. */
    if (in->phase != SERVER_STARTING) {
        stats_render(&r, &in->stats);
        filter_metrics_render(&r, in);
    }
    process_metrics(&r, in);
    return 200;
}
