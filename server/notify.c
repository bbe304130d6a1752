/*
 * notify.c - sd_notify calls and the watchdog/status timer. sd_notify() returns at once
 * when NOTIFY_SOCKET is unset, so the daemon needs no systemd to run.
 */
#include "server/notify.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <systemd/sd-daemon.h>

#include "server/core/log.h"
#include "server/core/server.h"
#include "server/persist/snapshot.h"
#include "server/store/registry.h"

static struct event *notify_timer;
static bool last_snapshotting;
static bool watchdog;

void notify_status(const char *text)
{
    sd_notifyf(0, "STATUS=%s", text);
}

void notify_ready(const char *status)
{
    sd_notifyf(0, "READY=1\nSTATUS=%s", status);
}

void notify_stopping(void)
{
    sd_notify(0, "STOPPING=1\nSTATUS=stopping: writing the last snapshot");
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct server *srv = arg;
    if (watchdog)
        sd_notify(0, "WATCHDOG=1");
    if (srv->phase != SERVER_READY)
        return;
    struct snapshot_stats st;
    snapshot_get_stats(srv->snap, &st);
    if (st.running != last_snapshotting) {
        last_snapshotting = st.running;
        char text[96];
        snprintf(text, sizeof text,
                 st.running ? "serving %zu filters; writing a snapshot" : "serving %zu filters",
                 registry_count(srv->reg));
        notify_status(text);
    }
}

int notify_start(struct server *srv, struct event_base *base)
{
    if (getenv("NOTIFY_SOCKET") == NULL)
        return 0;
    uint64_t usec = 0;
    watchdog = sd_watchdog_enabled(0, &usec) > 0 && usec > 0;
    /* Half the watchdog interval, and at most a second so STATUS follows snapshots. */
    uint64_t period = watchdog && usec / 2 < 1000000 ? usec / 2 : 1000000;
    struct timeval tv = {.tv_sec = (time_t)(period / 1000000),
                         .tv_usec = (suseconds_t)(period % 1000000)};
    notify_timer = event_new(base, -1, EV_PERSIST, on_tick, srv);
    if (notify_timer == NULL || event_add(notify_timer, &tv) != 0) {
        log_msg(LOG_ERROR, "systemd: cannot start the watchdog timer");
        return -1;
    }
    if (watchdog)
        log_msg(LOG_INFO, "systemd: watchdog every %llu ms", (unsigned long long)period / 1000);
    return 0;
}

void notify_stop(void)
{
    if (notify_timer != NULL)
        event_free(notify_timer);
    notify_timer = NULL;
}
