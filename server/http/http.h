/*
 * http.h - the daemon's HTTP pages, on libevent's evhttp in the worker's loop:
 * GET /metrics (Prometheus text 0.0.4), /healthz (the loop answers), /readyz (200 once
 * loaded and listening, 503 while starting or stopping), /api/filters[/<name>[/key?k=]]
 * (JSON) and / (the live page, built into the binary). Read-only: no request adds,
 * clears or drops anything; nothing O(filter bytes) runs here (the server's figures.h
 * does that on the job thread), and the pages over every filter are rendered on the long
 * lane, once for every request within RENDER_REUSE_MS (render.h). At most
 * http_max_connections connections; past them, HTTP_HEALTH_RESERVE more are read to
 * answer /healthz (and a short 503 to anything else). Off unless http_port is set.
 */
#ifndef BLOOMD_SERVER_HTTP_H
#define BLOOMD_SERVER_HTTP_H

/* Connections over http_max_connections read for /healthz at once (the oldest is evicted
 * for a new one): with the cap, what the HTTP side may hold in descriptors. */
#define HTTP_HEALTH_RESERVE 8

struct server;
struct event_base;
struct http;

/*
 * Binds http_bind (or bind) : http_port on base, logs "http on <addr>:<port>: page at
 * http://<addr>:<port>/" (the real port) and returns the pages, or NULL (logged).
 */
struct http *http_start(struct server *srv, struct event_base *base);

/* Closes the socket and frees everything. http_free(NULL) does nothing. */
void http_free(struct http *h);

#endif
