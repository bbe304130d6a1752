/*
 * http.h - the daemon's HTTP pages, on libevent's evhttp in the worker's loop:
 * GET /metrics (Prometheus text 0.0.4), /healthz (the loop answers), /readyz (200 once
 * loaded and listening, 503 while starting or stopping), /api/filters[/<name>[/key?k=]]
 * (JSON) and / (the live page, built into the binary). Read-only: no request adds,
 * clears or drops anything; nothing O(filter bytes) runs here (the server's figures.h
 * does that on the job thread). Off unless http_port is set.
 */
#ifndef BLOOMD_SERVER_HTTP_H
#define BLOOMD_SERVER_HTTP_H

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
