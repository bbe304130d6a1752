/*
 * http.c - the HTTP listener and the router of the HTTP pages (http.h). Requests are
 * small and rare next to the text protocol (a scrape every few seconds, a page refresh);
 * each is answered on the loop, except the pages over every filter, which render.c
 * renders on the long lane and shares among the requests that ask at about one time.
 * Only GET and HEAD exist; anything else is 405, an unknown path 404, a URI longer than
 * HTTP_MAX_URI 414.
 *
 * The cap: libevent 2.1's evhttp has none (evhttp_set_max_connections is 2.2), so each
 * connection evhttp accepts gets a bufferevent made here (evhttp_set_bevcb) that we hold
 * one reference to; a timer lets go of those evhttp has freed (bufferevent_free clears
 * their callbacks), which closes the descriptor. At http_max_connections evhttp's
 * listener is disabled and a second listener on the same socket takes over: it reads the
 * request head of up to HTTP_HEALTH_RESERVE connections, answers /healthz 200 and
 * anything else a short 503 (counted, logged once per HTTP_WARN_S), and evicts the
 * oldest when a new one comes, so a flood of idle connections cannot hold the reserve
 * (a slot younger than HTTP_SPILL_MIN_AGE_MS is kept: the newcomer is answered from one
 * recv at once, since closing a socket with its request unread would reset it).
 */
#include "server/http/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/core/clock.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/http/http_page.h"
#include "server/http/http_pages.h"
#include "server/http/plan.h"
#include "server/http/render.h"
#include "server/http/simulate.h"
#include "server/store/figures.h"

#define HTTP_MAX_URI 2048
#define HTTP_MAX_HEADERS (16 * 1024)
#define HTTP_TIMEOUT_S 10
#define HTTP_SWEEP_MS 200              /* how soon a closed connection's slot is free again */
#define HTTP_WARN_S 10                 /* at most one "cap reached" line per this many seconds */
#define HTTP_CONN_READ_MAX (64 * 1024) /* input an evhttp connection buffers at most */
#define HTTP_SPILL_HEAD 2048           /* request head read from a connection over the cap */
#define HTTP_SPILL_TIMEOUT_S 2
#define HTTP_PAUSE_MS 100         /* accepting paused this long when descriptors run out */
#define HTTP_SPILL_MIN_AGE_MS 100 /* a slot younger than this is not evicted: answer at once */

struct http;

/* A connection over the cap, read and answered here. */
struct spill {
    struct http *h;
    struct bufferevent *bev; /* NULL: the slot is free */
    bool answered;           /* the reply is queued: close once written */
    uint64_t born_ms;        /* CLOCK_MONOTONIC ms it was accepted */
};

struct http {
    struct server *srv;
    struct event_base *base;
    struct evhttp *evh;
    struct render *render;       /* the shared renderings of /metrics and /api/filters */
    struct evconnlistener *lis;  /* evhttp's listener; disabled while at the cap */
    struct evconnlistener *over; /* the same socket, enabled while at the cap */
    bool at_cap, paused;         /* over is the one listening; neither is (EMFILE) */
    struct bufferevent **conns;  /* evhttp's connections, each with our reference */
    size_t nconns;               /* at most cfg.http_max_connections */
    struct event *sweep;         /* timer: lets go of the connections evhttp closed */
    struct event *resume;        /* timer: accept again after running out of descriptors */
    struct spill spill[HTTP_HEALTH_RESERVE]; /* connections over the cap, oldest evicted */
    unsigned nspill, spill_next;             /* slots in use; the next to take (the oldest) */
    uint64_t warned_ms;     /* CLOCK_MONOTONIC ms of the last cap warning; 0 never */
    uint64_t refused_since; /* refusals since then */
};

/* The body of a small page rendered on the loop, counted in the budget while queued. */
static void reply(struct http *h, struct evhttp_request *req, int status, const char *type,
                  struct evbuffer *b)
{
    struct http_body *body = http_body_new(&h->srv->budget, status, type, b);
    if (body == NULL) {
        evhttp_send_error(req, 503, "out of memory");
        return;
    }
    http_body_send(req, body);
    http_body_unref(body);
}

/*
 * A line of text (/healthz, /readyz, 401, 405, 414): not counted, as render.c's 503s are
 * not, so /healthz still says 200 while filters fill max_memory and idle clients (never
 * shed) hold it past the limit; counted, it was 503 "out of memory" then.
 */
static void text_reply(struct evhttp_request *req, int status, const char *text)
{
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
    evbuffer_add_printf(b, "%s\n", text);
    struct http_body *body = http_body_new(NULL, status, "text/plain; charset=utf-8", b);
    evbuffer_free(b);
    if (body == NULL) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
    http_body_send(req, body);
    http_body_unref(body);
}

/* True if path[0..len) is exactly lit. */
static bool is(const char *path, size_t len, const char *lit)
{
    return strlen(lit) == len && memcmp(path, lit, len) == 0;
}

/* True if header value v is "Bearer <auth_token>" (constant time). */
static bool bearer_matches(const char *v, size_t len, const struct server *srv)
{
    static const char scheme[] = "Bearer ";
    if (v == NULL || len < sizeof scheme - 1 || strncasecmp(v, scheme, sizeof scheme - 1) != 0)
        return false;
    return auth_key_matches(&srv->auth, v + sizeof scheme - 1, len - (sizeof scheme - 1));
}

/* True if the request carries "Authorization: Bearer <auth_token>". */
static bool bearer_ok(struct evhttp_request *req, const struct server *srv)
{
    const char *v = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    return v != NULL && bearer_matches(v, strlen(v), srv);
}

static void route(struct evhttp_request *req, void *arg)
{
    struct http *h = arg;
    struct server *srv = h->srv;
    enum evhttp_cmd_type method = evhttp_request_get_command(req);
    if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
        text_reply(req, 405, "only GET and HEAD: the HTTP pages never change a filter");
        return;
    }
    const char *uri = evhttp_request_get_uri(req);
    size_t ulen = strlen(uri);
    if (ulen > HTTP_MAX_URI) {
        text_reply(req, 414, "URI too long");
        return;
    }
    const char *q = memchr(uri, '?', ulen);
    size_t plen = q != NULL ? (size_t)(q - uri) : ulen;
    const char *query = q != NULL ? q + 1 : "";
    size_t qlen = q != NULL ? ulen - plen - 1 : 0;

    /* With a token, the data pages need it; the probes and metrics only if asked. */
    bool probe = is(uri, plen, "/healthz") || is(uri, plen, "/readyz") || is(uri, plen, "/metrics");
    if (srv->auth.set && (!probe || srv->cfg.http_auth_metrics) && !bearer_ok(req, srv)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
                          "Bearer realm=\"bloomd\"");
        text_reply(req, 401, "authentication required: send Authorization: Bearer <auth_token>");
        return;
    }
    if (is(uri, plen, "/healthz")) {
        text_reply(req, 200, "ok");
        return;
    }
    if (is(uri, plen, "/readyz")) {
        static const char *const why[] = {"starting: loading snapshots", "ready",
                                          "stopping: writing the last snapshot"};
        text_reply(req, srv->phase == SERVER_READY ? 200 : 503, why[srv->phase]);
        return;
    }
    bool sim = is(uri, plen, "/simulate");
    if (is(uri, plen, "/") || is(uri, plen, "/index.html") || sim) {
        struct evbuffer *b = evbuffer_new();
        if (b == NULL) {
            evhttp_send_error(req, 500, NULL);
            return;
        }
        evbuffer_add_reference(b, sim ? http_simulate_html : http_page_html,
                               sim ? http_simulate_html_len : http_page_html_len, NULL, NULL);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Security-Policy",
                          "default-src 'self'; script-src 'unsafe-inline' 'self'; "
                          "style-src 'unsafe-inline' 'self'; img-src 'self' data:");
        struct evkeyvalq *hd = evhttp_request_get_output_headers(req);
        evhttp_add_header(hd, "Content-Type", "text/html; charset=utf-8");
        evhttp_add_header(hd, "Cache-Control", "no-store");
        evhttp_add_header(hd, "X-Content-Type-Options", "nosniff");
        evhttp_send_reply(req, 200, "OK", b); /* static bytes: nothing to count */
        evbuffer_free(b);
        return;
    }
    static const char api[] = "/api/filters";
    if (is(uri, plen, "/metrics")) {
        figures_poke(srv->figures);
        render_serve(h->render, RENDER_METRICS, req);
        return;
    }
    if (is(uri, plen, api) || is(uri, plen, "/api/filters/")) {
        figures_poke(srv->figures);
        render_serve(h->render, RENDER_FILTERS, req);
        return;
    }
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
    int status;
    struct figures *fg = srv->figures;
    figures_poke(fg);
    if (is(uri, plen, "/api/plan")) {
        status = api_plan(srv, query, qlen, b);
    } else if (plen > sizeof api && memcmp(uri, api, sizeof api - 1) == 0 &&
               uri[sizeof api - 1] == '/') {
        const char *name = uri + sizeof api;
        size_t nlen = plen - sizeof api;
        const char *slash = memchr(name, '/', nlen);
        if (slash == NULL)
            status = api_filter(srv, fg, name, nlen, b);
        else if (is(slash, (size_t)(uri + plen - slash), "/key"))
            status = api_key(srv, name, (size_t)(slash - name), query, qlen, b);
        else
            status = api_error(b, 404, "no such page");
    } else {
        status = api_error(b, 404,
                           "no such page: try /, /simulate, /metrics, /healthz, /readyz, "
                           "/api/filters, /api/plan");
    }
    reply(h, req, status, "application/json", b);
    evbuffer_free(b);
}

/* ---- the connection cap ---- */

static void count_connections(struct http *h)
{
    h->srv->http_conns.current = h->nconns + h->nspill;
}

/* Which listener accepts: evhttp's below the cap, ours at it, neither while paused. */
static void listen_as(struct http *h)
{
    bool cap = h->nconns >= h->srv->cfg.http_max_connections;
    if (h->paused) {
        evconnlistener_disable(h->lis);
        evconnlistener_disable(h->over);
    } else if (cap) {
        evconnlistener_disable(h->lis);
        evconnlistener_enable(h->over);
    } else {
        evconnlistener_disable(h->over);
        evconnlistener_enable(h->lis);
    }
    h->at_cap = cap;
}

/* Lets go of the connections evhttp has freed (their callbacks are cleared then). */
static void sweep(struct http *h)
{
    size_t k = 0;
    for (size_t i = 0; i < h->nconns; i++) {
        void *arg = NULL;
        bufferevent_getcb(h->conns[i], NULL, NULL, NULL, &arg);
        if (arg == NULL)
            bufferevent_decref(h->conns[i]); /* the last reference: closes the socket */
        else
            h->conns[k++] = h->conns[i];
    }
    h->nconns = k;
    count_connections(h);
    if (h->at_cap && h->nconns < h->srv->cfg.http_max_connections)
        listen_as(h);
}

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct http *h = arg;
    sweep(h);
    render_tick(h->render);
}

/* evhttp accepted a connection: its bufferevent, with a reference kept for the count. */
static struct bufferevent *on_evhttp_conn(struct event_base *base, void *arg)
{
    struct http *h = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL || h->nconns >= h->srv->cfg.http_max_connections)
        return bev; /* NULL: evhttp tries its own; past the cap cannot happen (disabled) */
    /* Once evhttp frees it the socket is still read until the sweep: not past this. */
    bufferevent_setwatermark(bev, EV_READ, 0, HTTP_CONN_READ_MAX);
    bufferevent_incref(bev);
    h->conns[h->nconns++] = bev;
    count_connections(h);
    if (h->nconns >= h->srv->cfg.http_max_connections)
        listen_as(h); /* stops evhttp's accept loop after this one */
    return bev;
}

static void note_refused(struct http *h)
{
    h->srv->http_conns.rejected++;
    h->refused_since++;
    uint64_t now = clock_mono_ms();
    if (h->warned_ms != 0 && now - h->warned_ms < HTTP_WARN_S * 1000)
        return;
    log_event(
        LOG_WARN,
        (struct log_field[]){LOG_U64("refused", h->refused_since),
                             LOG_U64("http_max_connections", h->srv->cfg.http_max_connections)},
        2,
        "http_max_connections (%u) reached: %llu HTTP connection(s) answered 503 "
        "since the last such line; /healthz still answers",
        h->srv->cfg.http_max_connections, (unsigned long long)h->refused_since);
    h->warned_ms = now;
    h->refused_since = 0;
}

static void spill_close(struct spill *sp)
{
    if (sp->bev == NULL)
        return;
    bufferevent_free(sp->bev);
    sp->bev = NULL;
    sp->h->nspill--;
    count_connections(sp->h);
}

/*
 * The reply to a connection over the cap whose request head is head[0..) (NUL-ended;
 * complete: its blank line has come): /healthz 200 (401 without the token when the probes
 * need it), anything else 503. Writes the whole response into out[0..len); returns the
 * status.
 */
static int over_cap_reply(const struct server *srv, const char *head, bool complete, char *out,
                          size_t len, size_t *outlen)
{
    char too_many[160];
    snprintf(too_many, sizeof too_many,
             "too many HTTP connections (http_max_connections %u): try again\n",
             srv->cfg.http_max_connections);
    bool get = strncmp(head, "GET ", 4) == 0, is_head = strncmp(head, "HEAD ", 5) == 0;
    const char *path = get ? head + 4 : is_head ? head + 5 : NULL;
    size_t plen = path != NULL ? strcspn(path, " ?\r\n") : 0;
    int status = 200;
    const char *body = "ok\n";
    if (!complete || path == NULL || !is(path, plen, "/healthz")) {
        status = 503;
        body = too_many;
    } else if (srv->auth.set && srv->cfg.http_auth_metrics) {
        bool ok = false;
        for (const char *line = strstr(head, "\r\n"); line != NULL && !ok;
             line = strstr(line + 2, "\r\n")) {
            static const char name[] = "\r\nAuthorization:";
            if (strncasecmp(line, name, sizeof name - 1) != 0)
                continue;
            const char *v = line + sizeof name - 1;
            v += strspn(v, " \t");
            ok = bearer_matches(v, strcspn(v, "\r\n"), srv);
        }
        if (!ok) {
            status = 401;
            body = "authentication required: send Authorization: Bearer <auth_token>\n";
        }
    }
    int n = snprintf(out, len,
                     "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                     "Content-Length: %zu\r\nCache-Control: no-store\r\nConnection: close\r\n"
                     "%s\r\n%s",
                     status,
                     status == 200   ? "OK"
                     : status == 401 ? "Unauthorized"
                                     : "Service Unavailable",
                     strlen(body),
                     status == 503   ? "Retry-After: 1\r\n"
                     : status == 401 ? "WWW-Authenticate: Bearer realm=\"bloomd\"\r\n"
                                     : "",
                     is_head ? "" : body);
    *outlen = n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
    return status;
}

#define OVER_CAP_REPLY 512

static void spill_answer(struct spill *sp, const char *head, bool complete)
{
    char reply[OVER_CAP_REPLY];
    size_t n;
    int status = over_cap_reply(sp->h->srv, head, complete, reply, sizeof reply, &n);
    evbuffer_add(bufferevent_get_output(sp->bev), reply, n);
    sp->answered = true;
    bufferevent_disable(sp->bev, EV_READ);
    if (status != 200)
        note_refused(sp->h);
}

/* The head of a request over the cap: /healthz is answered, the rest 503. */
static void spill_read(struct bufferevent *bev, void *arg)
{
    struct spill *sp = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t len = evbuffer_get_length(in);
    struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    if (end.pos < 0 && len < HTTP_SPILL_HEAD)
        return; /* more to come */
    char head[HTTP_SPILL_HEAD + 1];
    size_t n = evbuffer_copyout(in, head, len < HTTP_SPILL_HEAD ? len : HTTP_SPILL_HEAD);
    head[n] = '\0';
    spill_answer(sp, head, end.pos >= 0);
}

/*
 * No slot to give fd (every one is younger than HTTP_SPILL_MIN_AGE_MS: a burst): what
 * has come of its request is read now, answered in one send, and fd closed.
 */
static void answer_at_once(struct http *h, int fd)
{
    char head[HTTP_SPILL_HEAD + 1];
    ssize_t got = recv(fd, head, HTTP_SPILL_HEAD, MSG_DONTWAIT);
    size_t n = got > 0 ? (size_t)got : 0;
    head[n] = '\0';
    char reply[OVER_CAP_REPLY];
    size_t rn;
    int status =
        over_cap_reply(h->srv, head, strstr(head, "\r\n\r\n") != NULL, reply, sizeof reply, &rn);
    ssize_t sent = send(fd, reply, rn, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)sent;
    shutdown(fd, SHUT_WR);
    close(fd);
    if (status != 200)
        note_refused(h);
}

static void spill_written(struct bufferevent *bev, void *arg)
{
    (void)bev;
    struct spill *sp = arg;
    if (sp->answered)
        spill_close(sp);
}

static void spill_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    (void)what;
    struct spill *sp = arg;
    if (!sp->answered)
        note_refused(sp->h); /* left, timed out or failed before its head was read */
    spill_close(sp);
}

/* A connection over the cap: into a reserve slot, evicting the oldest. */
static void on_over(struct evconnlistener *lis, evutil_socket_t fd, struct sockaddr *sa, int len,
                    void *arg)
{
    (void)lis;
    (void)sa;
    (void)len;
    struct http *h = arg;
    struct spill *sp = &h->spill[h->spill_next];
    uint64_t now = clock_mono_ms();
    if (sp->bev != NULL && now - sp->born_ms < HTTP_SPILL_MIN_AGE_MS) {
        answer_at_once(h, fd); /* the oldest slot is brand new: a burst */
        return;
    }
    h->spill_next = (h->spill_next + 1) % HTTP_HEALTH_RESERVE;
    if (sp->bev != NULL) {
        /* Evicted: answered from what has come of its head if it was not yet, what fits
         * in the socket written now (best effort: the socket is non-blocking), closed. */
        if (!sp->answered) {
            struct evbuffer *in = bufferevent_get_input(sp->bev);
            char head[HTTP_SPILL_HEAD + 1];
            size_t n = evbuffer_copyout(in, head, HTTP_SPILL_HEAD);
            head[n] = '\0';
            spill_answer(sp, head, strstr(head, "\r\n\r\n") != NULL);
        }
        evbuffer_write(bufferevent_get_output(sp->bev), bufferevent_getfd(sp->bev));
        spill_close(sp);
    }
    sp->born_ms = now;
    sp->bev = bufferevent_socket_new(h->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (sp->bev == NULL) {
        close(fd);
        note_refused(h);
        return;
    }
    sp->answered = false;
    h->nspill++;
    count_connections(h);
    struct timeval tv = {.tv_sec = HTTP_SPILL_TIMEOUT_S};
    bufferevent_set_timeouts(sp->bev, &tv, &tv);
    bufferevent_setwatermark(sp->bev, EV_READ, 0, HTTP_SPILL_HEAD);
    bufferevent_setcb(sp->bev, spill_read, spill_written, spill_event, sp);
    bufferevent_enable(sp->bev, EV_READ | EV_WRITE);
    sweep(h); /* a slot may have come free meanwhile: the next one goes to evhttp */
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct http *h = arg;
    h->paused = false;
    sweep(h);
    listen_as(h);
}

/* accept() failed: out of descriptors (the text port holds them), pause rather than spin. */
static void on_accept_error(struct evconnlistener *lis, void *arg)
{
    (void)lis;
    struct http *h = arg;
    int e = errno;
    if (e != EMFILE && e != ENFILE && e != ENOBUFS && e != ENOMEM)
        return;
    if (!h->paused) {
        uint64_t now = clock_mono_ms();
        if (h->warned_ms == 0 || now - h->warned_ms >= HTTP_WARN_S * 1000) {
            log_msg(LOG_WARN, "http: accept: %s: pausing HTTP accepts for %d ms", strerror(e),
                    HTTP_PAUSE_MS);
            h->warned_ms = now;
        }
    }
    h->paused = true;
    listen_as(h);
    struct timeval tv = {.tv_sec = 0, .tv_usec = HTTP_PAUSE_MS * 1000};
    event_add(h->resume, &tv);
}

struct http *http_start(struct server *srv, struct event_base *base)
{
    const char *host = srv->cfg.http_bind[0] != '\0' ? srv->cfg.http_bind : srv->cfg.bind;
    struct http *h = calloc(1, sizeof *h);
    if (h == NULL) {
        log_msg(LOG_ERROR, "http: out of memory");
        return NULL;
    }
    h->srv = srv;
    h->base = base;
    for (int i = 0; i < HTTP_HEALTH_RESERVE; i++)
        h->spill[i].h = h;
    h->conns = calloc(srv->cfg.http_max_connections, sizeof *h->conns);
    h->render = render_new(srv);
    h->sweep = event_new(base, -1, EV_PERSIST, on_sweep, h);
    h->resume = evtimer_new(base, on_resume, h);
    struct timeval sweep_tv = {.tv_sec = 0, .tv_usec = HTTP_SWEEP_MS * 1000};
    if (h->conns == NULL || h->render == NULL || h->sweep == NULL || h->resume == NULL ||
        event_add(h->sweep, &sweep_tv) != 0) {
        log_msg(LOG_ERROR, "http: out of memory");
        goto fail;
    }
    h->evh = evhttp_new(base);
    if (h->evh == NULL) {
        log_msg(LOG_ERROR, "http: cannot create the HTTP server");
        goto fail;
    }
    evhttp_set_allowed_methods(h->evh, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                           EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                                           EVHTTP_REQ_PATCH | EVHTTP_REQ_TRACE |
                                           EVHTTP_REQ_CONNECT);
    evhttp_set_max_headers_size(h->evh, HTTP_MAX_HEADERS);
    evhttp_set_max_body_size(h->evh, 4096);
    evhttp_set_timeout(h->evh, HTTP_TIMEOUT_S);
    evhttp_set_gencb(h->evh, route, h);
    evhttp_set_bevcb(h->evh, on_evhttp_conn, h);
    struct evhttp_bound_socket *sock =
        evhttp_bind_socket_with_handle(h->evh, host, (ev_uint16_t)srv->cfg.http_port);
    if (sock == NULL) {
        log_event(LOG_ERROR, (struct log_field[]){LOG_STR("error", "bind failed")}, 1,
                  "http: cannot listen on %s:%u", host, srv->cfg.http_port);
        goto fail;
    }
    h->lis = evhttp_bound_socket_get_listener(sock);
    h->over = evconnlistener_new(base, on_over, h, LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_DISABLED, 0,
                                 evhttp_bound_socket_get_fd(sock));
    if (h->lis == NULL || h->over == NULL) {
        log_msg(LOG_ERROR, "http: cannot watch the listening socket");
        goto fail;
    }
    evconnlistener_set_error_cb(h->lis, on_accept_error);
    evconnlistener_set_error_cb(h->over, on_accept_error);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    unsigned port = srv->cfg.http_port;
    char addr[256] = "";
    if (getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&ss;
            port = ntohs(in->sin_port);
            inet_ntop(AF_INET, &in->sin_addr, addr, sizeof addr);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
            port = ntohs(in6->sin6_port);
            inet_ntop(AF_INET6, &in6->sin6_addr, addr, sizeof addr);
        }
    }
    if (addr[0] == '\0')
        snprintf(addr, sizeof addr, "%s", host);
    bool v6 = strchr(addr, ':') != NULL;
    char url[300];
    snprintf(url, sizeof url, "http://%s%s%s:%u/", v6 ? "[" : "", addr, v6 ? "]" : "", port);
    log_event(LOG_INFO, (struct log_field[]){LOG_STR("url", url)}, 1,
              "http on %s%s%s:%u: page at %s, also /metrics /healthz /readyz /api/filters",
              v6 ? "[" : "", addr, v6 ? "]" : "", port, url);
    return h;
fail:
    http_free(h);
    return NULL;
}

void http_free(struct http *h)
{
    if (h == NULL)
        return;
    render_free(h->render); /* answers the requests still waiting, before evhttp frees them */
    for (int i = 0; i < HTTP_HEALTH_RESERVE; i++)
        spill_close(&h->spill[i]);
    if (h->over != NULL)
        evconnlistener_free(h->over); /* leaves the socket to evhttp's listener */
    if (h->evh != NULL)
        evhttp_free(h->evh); /* frees every connection it holds */
    for (size_t i = 0; i < h->nconns; i++)
        bufferevent_decref(h->conns[i]);
    free(h->conns);
    if (h->sweep != NULL)
        event_free(h->sweep);
    if (h->resume != NULL)
        event_free(h->resume);
    free(h);
}
