/*
 * stat.c - --stat. keys/s counts every key the server looked up or wrote (keys_checked +
 * keys_stored) over the interval; journal lag is journal_buffered_bytes, written to the
 * journal file but not yet fsynced. A figure the server does not report shows as "-".
 */
#include "cli/stat.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli/msg.h"
#include "cli/reply.h"
#include "proto/number.h"

enum { F_CHECKED, F_STORED, F_CONNS, F_MEMORY, F_FILTERS, F_ITEMS, F_JOURNAL, F_COUNT };
static const char *const field_names[F_COUNT] = {
    "keys_checked", "keys_stored", "curr_connections",       "memory_bytes",
    "filters",      "items",       "journal_buffered_bytes",
};

struct figures {
    uint64_t v[F_COUNT];
    unsigned char have[F_COUNT];
};

/* Reads STATS into *f. Returns CLI_CONN_OK or an error (the connection is unusable). */
static int read_stats(struct cli_conn *c, struct figures *f)
{
    memset(f, 0, sizeof *f);
    if (cli_conn_send(c, "STATS", 5) != CLI_CONN_OK)
        return CLI_CONN_ERR;
    for (bool first = true;; first = false) {
        struct proto_slice r;
        int rc = cli_conn_getline(c, &r);
        if (rc != CLI_CONN_OK)
            return rc;
        if (cli_block_ends(r.ptr, r.len, first))
            return first ? CLI_CONN_ERR : CLI_CONN_OK;
        if (r.len < 6 || memcmp(r.ptr, "STAT ", 5) != 0)
            continue;
        const char *name = r.ptr + 5;
        const char *sp = memchr(name, ' ', r.len - 5);
        if (sp == NULL)
            continue;
        size_t nl = (size_t)(sp - name);
        for (int i = 0; i < F_COUNT; i++) {
            if (strlen(field_names[i]) == nl && memcmp(name, field_names[i], nl) == 0) {
                size_t vl = r.len - 5 - nl - 1;
                f->have[i] = proto_parse_u64(sp + 1, vl, &f->v[i]) == 0;
            }
        }
    }
}

static void human_bytes(char *buf, size_t n, uint64_t v)
{
    static const char units[] = "BKMGTP";
    double d = (double)v;
    int u = 0;
    while (d >= 1024 && u < 5) {
        d /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, n, "%" PRIu64 "B", v);
    else
        snprintf(buf, n, "%.1f%c", d, units[u]);
}

static void cell_u64(char *buf, size_t n, const struct figures *f, int i)
{
    if (f->have[i])
        snprintf(buf, n, "%" PRIu64, f->v[i]);
    else
        snprintf(buf, n, "-");
}

static void cell_bytes(char *buf, size_t n, const struct figures *f, int i)
{
    if (f->have[i])
        human_bytes(buf, n, f->v[i]);
    else
        snprintf(buf, n, "-");
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

int stat_run(const struct cli_conn_opts *o, double interval, unsigned long count)
{
    char err[512];
    struct cli_conn *c = NULL;
    if (cli_conn_open(o, &c, err, sizeof err) != CLI_CONN_OK) {
        cli_warn("%s", err);
        return CLI_EXIT_CONN;
    }
    struct figures prev = {0};
    bool have_prev = false;
    double prev_t = 0;
    unsigned long lines = 0;
    for (;;) {
        struct figures f;
        double t = cli_now();
        if (c == NULL && cli_conn_open(o, &c, err, sizeof err) != CLI_CONN_OK) {
            printf("(not connected: %s)\n", err);
            c = NULL;
        } else if (read_stats(c, &f) != CLI_CONN_OK) {
            printf("(connection lost: %s)\n", cli_conn_error(c));
            cli_conn_free(c);
            c = NULL;
            have_prev = false;
        } else {
            if (lines % 20 == 0)
                printf("%10s %8s %10s %8s %12s %10s\n", "keys/s", "conns", "memory", "filters",
                       "items", "journal");
            char rate[32], conns[32], mem[32], filters[32], items[32], journal[32];
            if (have_prev && f.have[F_CHECKED] && f.have[F_STORED] && t > prev_t) {
                uint64_t now = f.v[F_CHECKED] + f.v[F_STORED];
                uint64_t then = prev.v[F_CHECKED] + prev.v[F_STORED];
                snprintf(rate, sizeof rate, "%.0f",
                         now >= then ? (double)(now - then) / (t - prev_t) : 0.0);
            } else {
                snprintf(rate, sizeof rate, "-");
            }
            cell_u64(conns, sizeof conns, &f, F_CONNS);
            cell_bytes(mem, sizeof mem, &f, F_MEMORY);
            cell_u64(filters, sizeof filters, &f, F_FILTERS);
            cell_u64(items, sizeof items, &f, F_ITEMS);
            cell_bytes(journal, sizeof journal, &f, F_JOURNAL);
            printf("%10s %8s %10s %8s %12s %10s\n", rate, conns, mem, filters, items, journal);
            prev = f;
            prev_t = t;
            have_prev = true;
        }
        fflush(stdout);
        lines++;
        if (count > 0 && lines >= count)
            break;
        double left = interval - (cli_now() - t);
        if (left > 0)
            sleep_s(left);
    }
    cli_conn_free(c);
    return CLI_EXIT_OK;
}
