/*
 * http.c - the evhttp listener and the router of the HTTP pages (http.h). Requests are
 * small and rare next to the text protocol (a scrape every few seconds, a page refresh);
 * each is answered in one callback on the loop, bounded by the number of filters.
 * Only GET and HEAD exist; anything else is 405, an unknown path 404, a URI longer than
 * HTTP_MAX_URI 414.
 */
#include "server/http/http.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "server/core/log.h"
#include "server/core/server.h"
#include "server/http/http_page.h"
#include "server/http/http_pages.h"
#include "server/http/plan.h"
#include "server/http/simulate.h"
#include "server/store/figures.h"

#define HTTP_MAX_URI 2048
#define HTTP_MAX_HEADERS (16 * 1024)
#define HTTP_TIMEOUT_S 10

struct http {
    struct server *srv;
    struct evhttp *evh;
};

static void send_body(struct evhttp_request *req, int status, const char *type,
                      struct evbuffer *body)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", type);
    evhttp_add_header(h, "Cache-Control", "no-store");
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    static const char *const reasons[] = {[0] = "OK",           [1] = "Bad Request",
                                          [2] = "Not Found",    [3] = "Method Not Allowed",
                                          [4] = "URI Too Long", [5] = "Service Unavailable",
                                          [6] = "Unauthorized"};
    const char *reason = status == 200   ? reasons[0]
                         : status == 401 ? reasons[6]
                         : status == 400 ? reasons[1]
                         : status == 404 ? reasons[2]
                         : status == 405 ? reasons[3]
                         : status == 414 ? reasons[4]
                                         : reasons[5];
    evhttp_send_reply(req, status, reason, body);
}

static void text_reply(struct evhttp_request *req, int status, const char *text)
{
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
    evbuffer_add_printf(b, "%s\n", text);
    send_body(req, status, "text/plain; charset=utf-8", b);
    evbuffer_free(b);
}

/* True if path[0..len) is exactly lit. */
static bool is(const char *path, size_t len, const char *lit)
{
    return strlen(lit) == len && memcmp(path, lit, len) == 0;
}

/* True if the request carries "Authorization: Bearer <auth_token>" (constant time). */
static bool bearer_ok(struct evhttp_request *req, const struct server *srv)
{
    const char *v = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    static const char scheme[] = "Bearer ";
    if (v == NULL || strncasecmp(v, scheme, sizeof scheme - 1) != 0)
        return false;
    v += sizeof scheme - 1;
    return auth_key_matches(&srv->auth, v, strlen(v));
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
        send_body(req, 200, "text/html; charset=utf-8", b);
        evbuffer_free(b);
        return;
    }
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
    int status;
    const char *type = "application/json";
    struct figures *fg = srv->figures;
    figures_poke(fg);
    static const char api[] = "/api/filters";
    if (is(uri, plen, "/metrics")) {
        status = metrics_render(srv, fg, b);
        type = "text/plain; version=0.0.4; charset=utf-8";
    } else if (is(uri, plen, "/api/plan")) {
        status = api_plan(srv, query, qlen, b);
    } else if (is(uri, plen, api) || is(uri, plen, "/api/filters/")) {
        status = api_filters(srv, fg, b);
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
    send_body(req, status, type, b);
    evbuffer_free(b);
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
    struct evhttp_bound_socket *sock =
        evhttp_bind_socket_with_handle(h->evh, host, (ev_uint16_t)srv->cfg.http_port);
    if (sock == NULL) {
        log_event(LOG_ERROR, (struct log_field[]){LOG_STR("error", "bind failed")}, 1,
                  "http: cannot listen on %s:%u", host, srv->cfg.http_port);
        goto fail;
    }
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
    if (h->evh != NULL)
        evhttp_free(h->evh);
    free(h);
}
