/*
 * notify.h - systemd's notification protocol through libsystemd's sd_notify: READY=1
 * once loaded and listening, STATUS= lines while loading and snapshotting, STOPPING=1 on
 * a stop signal, WATCHDOG=1 pings when the unit sets WatchdogSec. Without systemd
 * (no NOTIFY_SOCKET) every call is a cheap no-op and nothing else changes.
 */
#ifndef BLOOMD_SERVER_NOTIFY_H
#define BLOOMD_SERVER_NOTIFY_H

struct server;
struct event_base;

/* Sends STATUS=<text> (and READY=1 / STOPPING=1 when the phase calls for it). */
void notify_status(const char *text);
void notify_ready(const char *status);
void notify_stopping(void);

/*
 * Starts a timer on base that pings the watchdog at half its interval and keeps STATUS
 * current (snapshot running or not). Does nothing without systemd. Returns 0 or -1
 * (logged).
 */
int notify_start(struct server *srv, struct event_base *base);

/* Stops the timer. */
void notify_stop(void);

#endif
