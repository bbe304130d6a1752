/*
 * main.c - the bloomd executable: reads the configuration, answers --help, --version
 * and --ping, opens the log, takes the data directory (lock, writability), sizes
 * max_memory 0 from the machine and its cgroup, then runs the server until
 * SIGTERM/SIGINT. Exit status: 0 after a clean stop, 1 on a runtime failure, 2 on a
 * configuration error, a data directory in use by another bloomd, or one not writable.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/core/cgroup.h"
#include "server/core/config.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/lifecycle.h"
#include "server/persist/datadir.h"
#include "server/persist/snapfile.h"
#include "server/ping.h"
#include "server/store/registry.h"

/* The data directory vanished and snapfile created it again (on the job thread): every
 * file is gone, so every filter counts as unsaved and the next snapshots rewrite them. */
static void on_dir_recreated(void *ctx, const char *msg)
{
    struct server *srv = ctx;
    log_msg(LOG_ERROR, "snapshot: %s", msg);
    struct filter **all;
    size_t n;
    if (registry_collect(srv->reg, "", 0, &all, &n) != REGISTRY_OK) {
        log_msg(LOG_ERROR, "snapshot: out of memory marking filters unsaved");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        atomic_fetch_add_explicit(&all[i]->changes, 1, memory_order_acq_rel);
        filter_unref(all[i]);
    }
    free(all);
}

/*
 * The share of the memory limit that max_memory 0 gives to the budget (filters and client
 * buffers). The rest is for what the budget does not count: the process itself, and the
 * page cache that snapshots are written through, which a cgroup charges to us too.
 */
#define AUTO_MEMORY_PERCENT 75
#define AUTO_MEMORY(limit) ((limit) - (limit) / 4) /* AUTO_MEMORY_PERCENT, exact for 2^n */

/*
 * max_memory 0: AUTO_MEMORY_PERCENT of the smaller of physical memory and the cgroup
 * limit, so that in a container a CREATE too large is refused with SERVER_ERROR instead
 * of the kernel killing the daemon. A set max_memory is kept, with a warning when the
 * cgroup would kill us first. Logs the figure and where it came from.
 */
static void size_memory(struct config *cfg)
{
    long pages = sysconf(_SC_PHYS_PAGES);
    long page = sysconf(_SC_PAGESIZE);
    uint64_t phys = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
    struct cgroup_memory cg;
    int rc = cgroup_memory_limit("", &cg);
    if (rc == CGROUP_EIO)
        log_msg(LOG_WARN, "cgroup memory limit: %s: %s; using physical memory", cgroup_strerror(rc),
                strerror(errno));
    bool by_cgroup = rc == CGROUP_OK && cg.limit < phys;
    uint64_t limit = by_cgroup ? cg.limit : phys;

    if (cfg->max_memory != 0) {
        if (by_cgroup && cfg->max_memory > AUTO_MEMORY(limit))
            log_msg(LOG_WARN,
                    "max_memory %llu is above %d%% of the cgroup v%d memory limit %llu (%s): "
                    "the kernel may kill bloomd before a CREATE is refused",
                    (unsigned long long)cfg->max_memory, AUTO_MEMORY_PERCENT, cg.version,
                    (unsigned long long)limit, cg.file);
        return;
    }
    if (limit == UINT64_MAX)
        return; /* nothing known: budget_init falls back to physical memory */
    cfg->max_memory = AUTO_MEMORY(limit);
    if (by_cgroup)
        log_msg(LOG_INFO,
                "max_memory 0: using %llu bytes, %d%% of the cgroup v%d memory limit "
                "%llu (%s)",
                (unsigned long long)cfg->max_memory, AUTO_MEMORY_PERCENT, cg.version,
                (unsigned long long)limit, cg.file);
    else
        log_msg(LOG_INFO, "max_memory 0: using %llu bytes, %d%% of physical memory %llu",
                (unsigned long long)cfg->max_memory, AUTO_MEMORY_PERCENT,
                (unsigned long long)limit);
}

int main(int argc, char **argv)
{
    struct config cfg;
    enum config_action action;
    char err[CONFIG_PATH_MAX + 512];
    if (config_load(&cfg, argc, argv, &action, err, sizeof(err)) != CONFIG_OK) {
        fprintf(stderr, "bloomd: %s\n", err);
        return 2;
    }
    switch (action) {
    case CONFIG_HELP:
        fputs(config_usage(), stdout);
        return 0;
    case CONFIG_VERSION:
        printf("bloomd %s\n", BLOOMD_VERSION);
        return 0;
    case CONFIG_PING:
        if (ping_server(cfg.bind, cfg.port, 2000, err, sizeof(err)) != 0) {
            fprintf(stderr, "bloomd: ping: %s\n", err);
            return 1;
        }
        return 0;
    case CONFIG_RUN:
        break;
    }

    signal(SIGPIPE, SIG_IGN);
    log_set_format((enum log_format)cfg.log_format);
    if (log_open(cfg.log_file, (enum log_level)cfg.log_level) != 0) {
        fprintf(stderr, "bloomd: log_file %s: %s\n", cfg.log_file, strerror(errno));
        return 2;
    }
    for (const char *w = cfg.warnings; *w != '\0';) { /* one log line per warning */
        int len = (int)strcspn(w, "\n");
        log_msg(LOG_WARN, "config: %.*s", len, w);
        w += len + (w[len] == '\n');
    }
    /* Before anything reads or writes snapshots: the directory is ours, and writable (or,
     * with allow_readonly_data_dir, readable: then every snapshot fails, loudly). */
    struct datadir dd;
    err[0] = '\0';
    if (datadir_open(&dd, cfg.data_dir, cfg.allow_readonly_data_dir != 0, err, sizeof(err)) !=
        DATADIR_OK) {
        log_msg(LOG_ERROR, "%s%s", err,
                strstr(err, "not writable") != NULL
                    ? "; or start with --allow-readonly-data-dir to serve without persistence"
                    : "");
        log_close();
        return 2;
    }
    if (dd.readonly)
        log_msg(LOG_WARN,
                "%s; allow_readonly_data_dir is set: serving what it holds WITHOUT persistence: "
                "every snapshot, FLUSH and the save at shutdown will fail until it is writable",
                err);
    /* The secret new filters hash with (by default): made at first start, kept in SEED. */
    uint64_t seed = 0;
    err[0] = '\0';
    if (datadir_seed(cfg.data_dir, &seed, err, sizeof err) != 0) {
        log_msg(LOG_ERROR, "%s", err);
        datadir_close(&dd);
        log_close();
        return 2;
    }
    if (err[0] != '\0')
        log_msg(LOG_WARN, "%s", err);
    size_memory(&cfg);
    struct server srv;
    int rc = server_init(&srv, &cfg);
    srv.seed = seed;
    snapfile_set_on_dir_recreated(on_dir_recreated, &srv);
    if (rc == SERVER_OK)
        rc = server_run(&srv);
    else
        log_msg(LOG_ERROR, "out of memory at start-up");
    server_destroy(&srv);
    datadir_close(&dd);
    log_close();
    return rc == SERVER_OK ? 0 : rc == SERVER_ECONFIG ? 2 : 1;
}
