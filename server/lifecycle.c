/*
 * lifecycle.c - start-up and shutdown of the whole daemon: data directory, snapshots, the
 * worker (today one, on the main thread), listeners, signals. SIGTERM/SIGINT stop
 * accepting, close clients and leave the loop; SIGHUP reopens the log file and reloads the
 * TLS certificate. Snapshots
 * are loaded before listening and written a last time after the loop.
 */
#include "server/lifecycle.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "server/core/clock.h"
#include "server/core/jobs.h"
#include "server/core/log.h"
#include "server/exec/recover.h"
#include "server/http/http.h"
#include "server/net/conn.h"
#include "server/net/listen.h"
#include "server/net/tls.h"
#include "server/net/worker.h"
#include "server/notify.h"
#include "server/persist/durable.h"
#include "server/persist/snapshot.h"
#include "server/repl/repl.h"
#include "server/store/advance.h"
#include "server/store/figures.h"
#include "server/store/registry.h"

int server_init(struct server *srv, const struct config *cfg)
{
    memset(srv, 0, sizeof(*srv));
    srv->cfg = *cfg;
    srv->started_ns = clock_mono_ns();
    auth_key_init(&srv->auth, cfg->auth_token, strlen(cfg->auth_token));
    srv->protect = cfg->protected_mode && !srv->auth.set;
    /* The copy of the token in cfg is not needed any more: only its digest is kept, and
     * a replica keeps the token itself to authenticate to its primary (the same token). */
    memcpy(srv->repl_token, cfg->auth_token, sizeof srv->repl_token);
    explicit_bzero(srv->cfg.auth_token, sizeof srv->cfg.auth_token);
    budget_init(&srv->budget, cfg->max_memory);
    srv->reg = registry_new();
    if (srv->reg == NULL)
        return SERVER_ENOMEM;
    registry_set_budget(srv->reg, &srv->budget);
    return SERVER_OK;
}

/* The barrier behind the shutdown's snapshot: wakes the loop, which then exits. */
struct barrier_job {
    struct job job;
    struct server *srv;
};

static void barrier_run(struct job *j)
{
    struct barrier_job *b = (struct barrier_job *)j;
    event_active(b->srv->drained, EV_TIMEOUT, 1); /* libevent is thread-safe (server_run) */
}

static void barrier_free(struct job *j)
{
    free(j);
}

static void on_drained(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct server *srv = arg;
    event_base_loopexit(srv->worker->base, NULL);
}

static void drain_noop(void *arg, int err, const char *why)
{
    (void)arg;
    (void)err;
    (void)why;
}

/*
 * Queues a write of every changed filter and, behind it, a job that ends the loop: the
 * job thread runs them in order, so the loop (probes, metrics) runs until the data is
 * written; snapshot_stop() then finds nothing left to write. Returns 0, or -1 if the
 * caller must end the loop itself.
 */
static int drain(struct server *srv)
{
    if (srv->snap == NULL)
        return -1;
    srv->drained = event_new(srv->worker->base, -1, 0, on_drained, srv);
    struct barrier_job *j = calloc(1, sizeof *j);
    if (srv->drained == NULL || j == NULL) {
        free(j);
        return -1;
    }
    if (snapshot_flush(srv->snap, NULL, drain_noop, NULL) != 0) {
        free(j);
        return -1;
    }
    j->job = (struct job){.run = barrier_run, .free = barrier_free};
    j->srv = srv;
    jobs_post(srv->lanes[JOBS_LONG], &j->job);
    return 0;
}

/* Stops accepting: closes every listener of w. */
static void close_listeners(struct worker *w)
{
    for (size_t i = 0; i < WORKER_MAX_LISTENERS; i++) {
        listener_close(w->lis[i]);
        w->lis[i] = NULL;
    }
}

static void on_stop(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    struct server *srv = arg;
    if (srv->stopping)
        return;
    srv->stopping = true;
    srv->phase = SERVER_STOPPING;
    log_msg(LOG_INFO, "%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    notify_stopping();
    close_listeners(srv->worker);
    conn_close_all(srv->worker); /* a TLS connection's last bytes wait on srv->tls: ... */
    tls_close_all(srv->tls);     /* ... dropped here, with the unfinished handshakes */
    repl_stop(srv);              /* its feeds were connections; the link applies no more */
    /* Write the last snapshot while the loop still answers /readyz with 503. */
    if (drain(srv) != 0)
        event_base_loopexit(srv->worker->base, NULL);
}

static void on_hup(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    struct server *srv = arg;
    if (log_reopen() != 0)
        log_msg(LOG_ERROR, "SIGHUP: cannot reopen the log file: %s", strerror(errno));
    else
        log_msg(LOG_INFO, "SIGHUP: log file reopened");
    if (srv->tls != NULL)
        tls_reload(srv->tls);
}

/* Descriptors beyond the clients: listener, spare, log, data dir, snapshot files, eventfd. */
#define SERVER_FD_RESERVE 32

/*
 * Raises the soft descriptor limit towards clients (max_connections, plus the HTTP side's
 * cap and reserve) + a reserve (never above the hard limit), so "too many connections"
 * comes before the process runs out of descriptors.
 */
static void raise_fd_limit(unsigned clients)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = (rlim_t)clients + SERVER_FD_RESERVE;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want)
        log_msg(LOG_WARN,
                "open file limit %llu is below max_connections (+ http_max_connections + %d "
                "with HTTP) = %u, + %d: clients beyond it are refused when descriptors run out",
                (unsigned long long)rl.rlim_cur, HTTP_HEALTH_RESERVE, clients, SERVER_FD_RESERVE);
}

/* Signal handlers on the worker's loop. */
static int install_signals(struct server *srv, struct event_base *base)
{
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        event_callback_fn fn = sigs[i] == SIGHUP ? on_hup : on_stop;
        srv->signals[i] = evsignal_new(base, sigs[i], fn, srv);
        if (srv->signals[i] == NULL || event_add(srv->signals[i], NULL) != 0) {
            log_msg(LOG_ERROR, "cannot install signal handlers");
            return -1;
        }
    }
    return 0;
}

/* The start-up load, on the job thread (the registry's only changing thread until done). */
struct load_job {
    struct job job;
    struct server *srv;
    int rc;
};

static void load_run(struct job *j)
{
    struct load_job *lj = (struct load_job *)j;
    lj->rc = recover_load(lj->srv);
    if (lj->rc == 0)
        lj->rc = recover_journal(lj->srv); /* replayed over the snapshots, then opened */
    if (lj->rc == 0)
        recover_settle(lj->srv);
    if (lj->rc == 0) {
        /* Windows go on from the latest time they reached, even if the wall clock is now
         * behind it (it stepped back while we were down), then by elapsed time. */
        clock_window_start(advance_latest_ms(lj->srv));
        advance_all(lj->srv, clock_window_ms(), false);
    }
}

static void load_free(struct job *j)
{
    free(j);
}

/* Loop thread, once the snapshots are in: listen, and say so. The TLS listener serves the
 * text protocol under its own name, so its "listening on" line says TLS. */
static void load_done(struct job *j)
{
    static struct conn_proto text_over_tls;
    text_over_tls = conn_proto_text;
    text_over_tls.name = "TLS bloomd";
    struct load_job *lj = (struct load_job *)j;
    struct server *srv = lj->srv;
    struct worker *w = srv->worker;
    if (lj->rc == 0)
        lj->rc = durable_attach(srv, w->base);
    if (lj->rc == 0)
        lj->rc = repl_start(srv, w->base);
    if (lj->rc == 0)
        w->lis[0] = listener_open(w, &conn_proto_text, srv->cfg.bind, srv->cfg.port);
    if (lj->rc == 0 && w->lis[0] != NULL && srv->cfg.memcache_port != 0) {
        w->lis[1] = listener_open(w, &conn_proto_memcache, srv->cfg.bind, srv->cfg.memcache_port);
        if (w->lis[1] == NULL)
            lj->rc = -1;
    }
    if (lj->rc == 0 && w->lis[0] != NULL && srv->cfg.redis_port != 0) {
        w->lis[3] = listener_open(w, &conn_proto_redis, srv->cfg.bind, srv->cfg.redis_port);
        if (w->lis[3] == NULL)
            lj->rc = -1;
    }
    if (lj->rc == 0 && w->lis[0] != NULL && srv->tls != NULL) {
        w->lis[2] = listener_open(w, &text_over_tls, srv->cfg.bind, srv->cfg.tls_port);
        if (w->lis[2] == NULL)
            lj->rc = -1;
        else
            listener_set_transport(w->lis[2], tls_transport(srv->tls));
    }
    if (lj->rc != 0 || w->lis[0] == NULL) {
        srv->failed = true;
        event_base_loopexit(w->base, NULL);
        return;
    }
    srv->phase = SERVER_READY;
    char status[96];
    snprintf(status, sizeof status, "serving %zu filters", registry_count(srv->reg));
    notify_ready(status);
    figures_tick(srv->figures);
    log_msg(LOG_INFO, "bloomd %s ready (data_dir %s, max_memory %llu bytes)", BLOOMD_VERSION,
            srv->cfg.data_dir, (unsigned long long)srv->budget.limit);
}

int server_run(struct server *srv)
{
    /* The HTTP side holds at most its cap plus the /healthz reserve. */
    raise_fd_limit(
        srv->cfg.max_connections +
        (srv->cfg.http_port != 0 ? srv->cfg.http_max_connections + HTTP_HEALTH_RESERVE : 0));
    /* The data directory exists and is locked: main.c's datadir_open() saw to it. */
    /* The job thread hands completions back through an event: make libevent thread-safe. */
    if (evthread_use_pthreads() != 0) {
        log_msg(LOG_ERROR, "cannot enable libevent thread support");
        return SERVER_EIO;
    }
    srv->worker = calloc(1, sizeof *srv->worker);
    if (srv->worker == NULL || worker_init(srv->worker, srv) != 0)
        return SERVER_ENOMEM;
    struct worker *w = srv->worker;
    if (jobs_start_lanes(srv->lanes, w->base, &srv->stopping) != 0 ||
        snapshot_start(srv, w->base) != 0)
        return SERVER_EIO;
    if (install_signals(srv, w->base) != 0 || notify_start(srv, w->base) != 0)
        return SERVER_EIO;
    if ((srv->figures = figures_new(srv, w->base, srv->cfg.http_port != 0)) == NULL)
        return SERVER_EIO;
    if (srv->cfg.http_port != 0 && (srv->http = http_start(srv, w->base)) == NULL)
        return SERVER_EIO;
    /* Before the load: a bad certificate should stop start-up at once. */
    if (srv->cfg.tls_port != 0 && (srv->tls = tls_new(&srv->cfg)) == NULL)
        return SERVER_ECONFIG; /* certificate, key or CA file unusable: exit 2, as bad config */
    /* Load on the job thread so that the loop answers /healthz and /readyz meanwhile. */
    struct load_job *lj = calloc(1, sizeof *lj);
    if (lj == NULL)
        return SERVER_ENOMEM;
    lj->job = (struct job){.run = load_run, .done = load_done, .free = load_free};
    lj->srv = srv;
    notify_status("loading snapshots");
    jobs_post(srv->lanes[JOBS_LONG], &lj->job);
    if (event_base_dispatch(w->base) < 0) {
        log_msg(LOG_ERROR, "event loop failed");
        return SERVER_EIO;
    }
    if (srv->failed)
        return SERVER_EIO;
    int rc = snapshot_stop(srv) == 0 ? SERVER_OK : SERVER_EIO;
    jobs_stop_lanes(srv->lanes); /* what is still queued (frees) runs first */
    durable_stop(srv);
    log_msg(LOG_INFO, "stopped");
    return rc;
}

void server_destroy(struct server *srv)
{
    snapshot_stop(srv); /* after a failed start-up: nothing to write */
    jobs_stop_lanes(srv->lanes);
    durable_stop(srv);
    notify_stop();
    http_free(srv->http);
    figures_free(srv->figures); /* after the job thread: a figures job may hold its pointer */
    if (srv->drained != NULL)
        event_free(srv->drained);
    if (srv->worker != NULL)
        close_listeners(srv->worker);
    for (size_t i = 0; i < sizeof(srv->signals) / sizeof(srv->signals[0]); i++) {
        if (srv->signals[i] != NULL)
            event_free(srv->signals[i]);
    }
    if (srv->worker != NULL)
        conn_close_all(srv->worker);
    repl_stop(srv);     /* after its feeds, the connections */
    tls_free(srv->tls); /* after the connections (their last bytes), before the loop */
    srv->tls = NULL;
    if (srv->worker != NULL) {
        worker_destroy(srv->worker);
        free(srv->worker);
    }
    registry_free(srv->reg);
    memset(srv, 0, sizeof(*srv));
}
