/*
 * http_pages.h - the renderers behind http.c, internal to the HTTP side: Prometheus text
 * (metrics.c), JSON (http_api.c). Each appends one complete body to out and returns the
 * HTTP status to send. Loop thread only.
 */
#ifndef BLOOMD_SERVER_HTTP_PAGES_H
#define BLOOMD_SERVER_HTTP_PAGES_H

#include <stddef.h>

struct evbuffer;
struct figures;
struct server;

/* GET /metrics. */
int metrics_render(struct server *srv, const struct figures *fg, struct evbuffer *out);

/* GET /api/filters: the server's figures and every filter. */
int api_filters(struct server *srv, const struct figures *fg, struct evbuffer *out);

/* GET /api/filters/<name>: one filter with INFO's fields; 400 bad name, 404 unknown. */
int api_filter(struct server *srv, const struct figures *fg, const char *name, size_t len,
               struct evbuffer *out);

/* GET /api/filters/<name>/key?<query>: where key k falls; 400 bad name/key, 404 unknown. */
int api_key(struct server *srv, const char *name, size_t len, const char *query, size_t qlen,
            struct evbuffer *out);

/* Appends {"error":"<why>"}. Returns status. */
int api_error(struct evbuffer *out, int status, const char *why);

#endif
