/*
 * render.h - response bodies of the HTTP pages, internal to the HTTP side: one immutable,
 * reference-counted buffer per body, counted in the memory budget's connection part
 * while any request still holds it, and the shared renderings of the pages over every
 * filter (/metrics, /api/filters), made on the long job lane and handed to every request
 * that asks while one is under way or less than RENDER_REUSE_MS old. Loop thread, except
 * where a function says otherwise.
 */
#ifndef BLOOMD_SERVER_HTTP_RENDER_H
#define BLOOMD_SERVER_HTTP_RENDER_H

#include <stdatomic.h>
#include <stddef.h>

struct budget;
struct evbuffer;
struct evhttp_request;
struct server;

/* A rendering is reused by requests that come within this many ms of its gathering. */
#define RENDER_REUSE_MS 1000
/* A rendering not started on the long lane after this long is made on the loop. */
#define RENDER_WAIT_MS 2000
/* With at most this many filters a rendering is made on the loop at once (well under a
 * millisecond): no wait behind the long lane for a small server. */
#define RENDER_INLINE_FILTERS 256

/* One response body. Immutable once made; freed with its last reference. */
struct http_body {
    _Atomic unsigned refs; /* holders: the cache, each request still sending it */
    int status;            /* HTTP status to send with it */
    const char *type;      /* Content-Type, static */
    struct budget *budget; /* charged sizeof + len (BUDGET_CONNECTIONS), or NULL */
    size_t len;
    char data[];
};

/*
 * Moves the bytes of src (drained) into a new body with one reference, reserved in
 * budget (NULL: not counted). Returns NULL (src drained) if it does not fit the budget
 * or memory runs out. Any thread.
 */
struct http_body *http_body_new(struct budget *budget, int status, const char *type,
                                struct evbuffer *src);

/* Drops a reference; the last frees the body and gives back its budget. Any thread. */
void http_body_unref(struct http_body *b);

/*
 * Sends b as req's reply with the pages' common headers: the request takes a reference
 * that its connection drops once the bytes are written or the connection is gone, and
 * its output buffer points at b's bytes (no copy).
 */
void http_body_send(struct evhttp_request *req, const struct http_body *b);

/* The pages rendered over every filter. */
enum render_page {
    RENDER_METRICS = 0, /* GET /metrics */
    RENDER_FILTERS = 1, /* GET /api/filters */
    RENDER_NPAGES = 2,
};

struct render;

/* The renderings of srv's pages. NULL if out of memory. */
struct render *render_new(struct server *srv);

/*
 * Answers req with page: the newest rendering if it is less than RENDER_REUSE_MS old,
 * else the one under way (req waits for it), else a new one: made at once with at most
 * RENDER_INLINE_FILTERS filters, else posted to the long lane.
 * While the server is starting or stopping, or without lanes, it renders on the loop
 * (starting: no filters are shown).
 */
void render_serve(struct render *r, enum render_page page, struct evhttp_request *req);

/*
 * Every HTTP_SWEEP_MS: lets go of renderings older than RENDER_REUSE_MS (their memory,
 * once sent), and renders on the loop for requests whose rendering has not started on the
 * long lane after RENDER_WAIT_MS (the lane is busy with a long job), so a scrape does not
 * wait behind a multi-gigabyte snapshot write.
 */
void render_tick(struct render *r);

/*
 * Answers every waiting request 503 and frees everything. After the lanes stopped (a
 * queued rendering then never comes back). render_free(NULL) does nothing.
 */
void render_free(struct render *r);

#endif
