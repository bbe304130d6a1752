/*
 * server.h - the state every part of one bloomd process shares: configuration,
 * the named filters, the memory budget, the snapshotter, and the workers (event loops).
 * Data only: server/lifecycle.h starts and stops it, so modules that read the shared
 * state never include the module that knows them all.
 *
 * Threads: cfg is read-only after server_init. reg and budget follow their own headers
 * (registry.h: one changing thread; budget.h: atomic). snap is driven from the loop
 * thread. Today there is one worker and it runs on the main thread.
 */
#ifndef BLOOMD_SERVER_SERVER_H
#define BLOOMD_SERVER_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "server/core/auth.h"
#include "server/core/budget.h"
#include "server/core/config.h"
#include "server/core/jobs.h"

struct event;
struct tls;
struct http;
struct registry;
struct snapshotter;
struct worker;
struct stats;
struct durable;
struct setop;
struct figures;

/* Where the process is in its life: /readyz and systemd's READY=1 follow it. */
enum server_phase {
    SERVER_STARTING = 0, /* loading snapshots; no client listener yet */
    SERVER_READY = 1,    /* loaded and listening */
    SERVER_STOPPING = 2, /* a stop signal arrived: writing the last snapshot */
};

struct server {
    struct config cfg;              /* final configuration, read-only after start-up */
    struct registry *reg;           /* the named filters */
    struct budget budget;           /* max_memory, shared by every filter */
    struct jobs *lanes[JOBS_LANES]; /* the background lanes (core/jobs.h); NULL before
                                       server_run (unit tests: work runs inline) */
    struct snapshotter *snap;       /* background snapshots; NULL before server_run (unit tests) */
    struct worker *worker;          /* the event loop; NULL before server_run (unit tests) */
    const struct stats *counters;   /* the worker's counters, summed by STATS; set by
                                       worker_init (NULL before: unit tests set their own) */
    uint64_t started_ns;            /* CLOCK_MONOTONIC at server_init */
    struct event *signals[3];       /* SIGTERM, SIGINT, SIGHUP, on the worker's loop */
    bool stopping;                  /* a stop signal arrived */
    enum server_phase phase;        /* changed on the loop thread only */
    bool failed;                    /* start-up failed after the loop started (logged) */
    struct http *http;              /* the HTTP pages; NULL when http_port is 0 */
    struct event *drained;          /* fires when the shutdown's last snapshot is written */
    struct durable *durable; /* the journal (server/persist/durable.h); NULL in mode snapshot */
    struct auth_key auth;    /* cfg.auth_token's digest; unset = no authentication */
    bool protect;            /* protected mode: refuse clients that are not on loopback */
    struct tls *tls;         /* the TLS listener's context; NULL when tls_port is 0 */
    struct setop *setops;    /* background UNION/INTERSECTs under way (setop.c) */
    struct figures *figures; /* per-filter samples and cached popcounts (store/figures.h);
                                NULL before server_run (unit tests) */
};

#endif
