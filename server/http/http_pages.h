/*
 * http_pages.h - the renderers behind http.c, internal to the HTTP side: Prometheus text
 * (metrics.c), JSON (http_api.c). Each appends one complete body to out and returns the
 * HTTP status to send. The pages over every filter render from a struct page_input
 * that the loop gathered (references, copies of the figures), so they may run on a job
 * lane; the others read the live server on the loop thread.
 */
#ifndef BLOOMD_SERVER_HTTP_PAGES_H
#define BLOOMD_SERVER_HTTP_PAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/core/server.h"
#include "server/core/stat.h"

struct evbuffer;
struct figures;
struct figures_entry;
struct filter;
struct registry;

/*
 * What a page over every filter is made of, in two steps. On the loop, page_input_gather
 * takes the server's O(1) figures and copies every figures entry (counts, names, and with
 * rings the samples, oldest first) into one block: plain copies, no lookups. Then, on
 * the rendering's thread, page_input_collect takes a reference to every filter (the
 * registry's collect is safe from any thread), pairs each with its copy by name and sums
 * the items. The filters are read only through the reader calls of lib/kind.h.
 */
struct page_input {
    enum server_phase phase;
    int64_t now_ms;               /* Unix ms of the gathering */
    uint64_t started_ns;          /* CLOCK_MONOTONIC of the server's start */
    uint64_t now_ns;              /* CLOCK_MONOTONIC of the gathering */
    struct stat_values stats;     /* the server's figures; unset while starting */
    struct registry *reg;         /* where page_input_collect takes the filters; NULL: none */
    size_t ncopies;               /* figures entries copied */
    struct figures_entry *copies; /* sorted by name; their name, ones and ring in block */
    void *block;
    size_t n;                         /* filters; 0 while starting */
    struct filter **f;                /* references, sorted by name */
    const struct figures_entry **ent; /* f[i]'s copy, or NULL: it had no entry yet */
    struct budget *budget;            /* charged with `charged` bytes of copies */
    size_t charged;
};

/*
 * Fills in from srv on the loop; rings: copy the sample rings too (/api/filters).
 * Returns 0, -1 out of memory, -2 the copies do not fit max_memory (nothing held then).
 */
int page_input_gather(struct page_input *in, struct server *srv, bool rings);

/* Takes the filters and pairs them with the copies (see above). 0, or -1 out of memory
 * (no filters then). Any thread, once, after page_input_gather. */
int page_input_collect(struct page_input *in);

/* Drops the references and the copies. Any thread; twice is harmless. */
void page_input_destroy(struct page_input *in);

/* GET /metrics, from in. Any thread. */
int metrics_render(const struct page_input *in, struct evbuffer *out);

/* GET /api/filters: the server's figures and every filter, from in. Any thread. */
int api_filters(const struct page_input *in, struct evbuffer *out);

/* GET /api/filters/<name>: one filter with INFO's fields; 400 bad name, 404 unknown. */
int api_filter(struct server *srv, const struct figures *fg, const char *name, size_t len,
               struct evbuffer *out);

/* GET /api/filters/<name>/key?<query>: where key k falls; 400 bad name/key, 404 unknown. */
int api_key(struct server *srv, const char *name, size_t len, const char *query, size_t qlen,
            struct evbuffer *out);

/* Appends {"error":"<why>"}. Returns status. */
int api_error(struct evbuffer *out, int status, const char *why);

#endif
