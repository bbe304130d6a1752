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
struct mutate_watch;
struct mutate_propagate;
struct repl;
struct figures;

/* Where the process is in its life: /readyz and systemd's READY=1 follow it. */
enum server_phase {
    SERVER_STARTING = 0, /* loading snapshots; no client listener yet */
    SERVER_READY = 1,    /* loaded and listening */
    SERVER_STOPPING = 2, /* a stop signal arrived: writing the last snapshot */
};

/* A server's place in replication (server/repl/), and its figures: data only, so STATS,
 * ROLE and the pages read them without knowing replication. Loop thread. */
enum server_role {
    SERVER_PRIMARY = 0,
    SERVER_REPLICA = 1,
};
enum server_link {
    SERVER_LINK_DOWN = 0, /* a replica not connected to its primary */
    SERVER_LINK_SYNC = 1, /* receiving a full sync */
    SERVER_LINK_UP = 2,   /* following the stream */
};
struct server_repl {
    enum server_role role;
    char primary[300];       /* a replica's primary, "host:port" */
    uint64_t offset;         /* records written (primary) or applied (replica) so far */
    unsigned connected;      /* replicas following this server's stream */
    uint64_t full_syncs;     /* full syncs this server served */
    uint64_t partial_syncs;  /* partial resyncs this server served */
    uint64_t from_journal;   /* of them, those begun from the journal's segments */
    enum server_link link;   /* a replica's link to its primary */
    uint64_t primary_offset; /* a replica: the primary's offset last heard of */
    uint64_t delta;          /* offset minus journal position: a replica's journal began in
                                the middle of its primary's stream (0 on a plain primary) */
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
    const struct mutate_watch *watch; /* told of changes to filters being copied (mutate.h) */
    const struct mutate_propagate *propagate; /* replication's view of every change; or NULL */
    bool applying;           /* a record from elsewhere is being applied: mutate journals
                                and propagates that record itself, not its parts */
    struct server_repl repl; /* role and figures (server/repl/ fills them) */
    uint64_t seed;           /* the data dir's hash secret: new filters' seed by default (main.c) */
    unsigned auto_filters;   /* filters made on first use and not dropped since (this run) */
    struct repl *replication;          /* the primary's feeds and the replica's link; or NULL */
    char repl_token[CONFIG_TOKEN_MAX]; /* the token a replica sends its primary ("" = none) */
    struct figures *figures;           /* per-filter samples and cached popcounts (store/figures.h);
                                          NULL before server_run (unit tests) */
    struct {
        uint64_t current;  /* HTTP connections open (evhttp's and those over the cap) */
        uint64_t rejected; /* over http_max_connections and not answered 200 */
    } http_conns;          /* server/http/ fills them; loop thread */
};

#endif
