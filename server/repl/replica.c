/*
 * replica.c - a replica's link to its primary: connect, AUTH when this server has a token,
 * PSYNC with the stream id and offset it holds, then either the records after it or a
 * full sync (every filter replaced by the primary's, then snapshotted here), and from then
 * on every record applied through mutate_apply_record as it arrives. Each read is
 * acknowledged (REPLCONF ACK), and once a second besides. A damaged or unexpected record
 * drops the link; it reconnects after REPL_RETRY_MS, doubled after each failure up to
 * REPL_RETRY_MAX_MS until a link comes up, and resyncs. A server that was a primary
 * (r->rejoin) first sends its own filters over the link, between AUTH and PSYNC
 * (rejoin.c), so that the full sync which drops them loses none of its keys.
 *
 * Nothing here blocks the loop: the primary's name is resolved by evdns on the loop (it
 * reads /etc/resolv.conf and /etc/hosts), and with replica_tls the link is a
 * bufferevent_openssl that checks the primary's certificate and its name (the host of
 * replica_of, sent as SNI too) before anything is sent.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "lib/container.h"
#include "lib/journal_record.h"
#include "lib/le.h"
#include "proto/number.h"
#include "proto/request.h"
#include "server/core/budget.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/exec/mutate.h"
#include "server/persist/datadir.h"
#include "server/persist/durable.h"
#include "server/persist/snapshot.h"
#include "server/repl/rejoin.h"
#include "server/repl/repl.h"
#include "server/repl/repl_internal.h"
#include "server/store/kinds.h"
#include "server/store/registry.h"

#define REPL_RETRY_MS 500
#define REPL_RETRY_MAX_MS 5000
#define REPL_CONNECT_SECONDS 10 /* to connect and handshake; then no timeout (idle is fine) */
#define REPL_ACK_MS 1000
#define REPL_LINE_MAX 512

enum link_step {
    STEP_IDLE,       /* waiting for the retry timer */
    STEP_RESOLVING,  /* evdns looks the primary's name up */
    STEP_CONNECTING, /* TCP connect, and the TLS handshake with replica_tls */
    STEP_AUTH,       /* waiting for AUTH's OK */
    STEP_REJOIN,     /* an old primary's filters go to the primary first (rejoin.c) */
    STEP_PSYNC,      /* waiting for CONTINUE or FULLSYNC */
    STEP_FILTER,     /* waiting for a FILTER line */
    STEP_DATA,       /* reading a filter's bytes */
    STEP_STREAM,     /* records */
};

/*
 * A lookup can outlive its link: evdns answers a request failed by evdns_base_free() from
 * the loop later (a deferred callback). So the callback's argument is this, which the
 * link lets go of when it stops; the callback frees it.
 */
struct repl_lookup {
    struct repl_link *l; /* NULL: the link is gone, the answer is dropped */
};

struct repl_link {
    struct repl *r;
    char host[256], port[8];
    struct bufferevent *bev;
    struct event *retry, *ack;
    struct evdns_base *dns;                  /* the primary's name, resolved on the loop */
    struct repl_lookup *lookup;              /* STEP_RESOLVING: the lookup under way */
    SSL_CTX *tls;                            /* replica_tls: made at the first connect */
    struct evutil_addrinfo *addrs;           /* STEP_CONNECTING: the lookup's answer */
    const struct evutil_addrinfo *addr;      /* ... the address tried */
    const struct evutil_addrinfo *next_addr; /* ... the one to try if it fails, or NULL */
    unsigned retry_ms;                       /* the next retry's delay */
    enum link_step step;
    size_t nfilters, got; /* full sync: filters announced, received */
    uint64_t sync_offset; /* full sync: the offset it is at */
    char sync_id[REPL_ID_LEN + 1];
    char fname[PROTO_MAX_NAME + 1];
    size_t need;         /* STEP_DATA: bytes of the filter */
    unsigned char *data; /* them, counted in the budget */
    struct mutate_stream *stream;
    struct journal_scratch scratch;
    struct repl_rejoin *rejoin; /* r->rejoin: sending this server's filters, kept across links */
};

static const struct kind_ops *find_kind(void *ctx, uint32_t tag)
{
    (void)ctx;
    return kinds_by_tag(tag);
}

static void drop(struct repl_link *l, const char *why);

static void send_line(struct repl_link *l, const char *line)
{
    if (l->bev != NULL)
        bufferevent_write(l->bev, line, strlen(line));
}

static void send_ack(struct repl_link *l)
{
    char line[64];
    snprintf(line, sizeof line, "REPLCONF ACK %llu\r\n",
             (unsigned long long)l->r->srv->repl.offset);
    send_line(l, line);
}

static void free_data(struct repl_link *l)
{
    if (l->data != NULL)
        budget_release(&l->r->srv->budget, BUDGET_OVERHEAD, l->need);
    free(l->data);
    l->data = NULL;
}

/* Reads a line (without CRLF) into buf; false if none is complete yet. */
static bool read_line(struct repl_link *l, char *buf, size_t cap, bool *too_long)
{
    struct evbuffer *in = bufferevent_get_input(l->bev);
    size_t n;
    char *line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF);
    *too_long = false;
    if (line == NULL) {
        *too_long = evbuffer_get_length(in) > REPL_LINE_MAX;
        return false;
    }
    snprintf(buf, cap, "%s", line);
    free(line);
    return true;
}

/* ---- full sync ---- */

/* Every filter here goes: the primary's replace them. */
static void drop_all(struct repl_link *l)
{
    struct server *srv = l->r->srv;
    struct filter **all;
    size_t n;
    if (registry_collect(srv->reg, NULL, 0, &all, &n) != REGISTRY_OK)
        return;
    for (size_t i = 0; i < n; i++) {
        uint64_t pos = 0;
        (void)mutate_drop(srv, (struct proto_slice){all[i]->name, all[i]->name_len}, &pos);
        if (srv->snap != NULL)
            (void)snapshot_forget(srv->snap, all[i]->name, all[i]->name_len, NULL, NULL);
        filter_unref(all[i]);
    }
    free(all);
}

struct mem_reader {
    const unsigned char *p;
    size_t n, at;
};

static long mem_read(void *ctx, void *buf, size_t len)
{
    struct mem_reader *m = ctx;
    size_t k = m->n - m->at < len ? m->n - m->at : len;
    memcpy(buf, m->p + m->at, k);
    m->at += k;
    return (long)k;
}

/* Installs the filter received; false (the link drops) if it cannot be decoded or kept. */
static bool install(struct repl_link *l)
{
    struct server *srv = l->r->srv;
    struct mem_reader m = {.p = l->data, .n = l->need};
    const struct kind_ops *ops;
    void *obj;
    struct container_header hdr;
    /* Not l->need: a v3 encoding spends 9 bytes on a run of zero pages, so its length does
     * not bound the bits (a fresh filter's are mostly zero). The budget bounds them. */
    int rc = container_decode(mem_read, &m, find_kind, NULL, UINT64_MAX, &srv->budget.sbf, &ops,
                              &obj, &hdr);
    free_data(l);
    if (rc != 0) {
        log_msg(LOG_ERROR, "replication: filter %s from the primary: %s", l->fname,
                sbf_strerror(rc));
        return false;
    }
    struct filter *f = registry_get(srv->reg, l->fname, strlen(l->fname));
    if (f != NULL) { /* cannot be: every filter was dropped */
        filter_unref(f);
        ops->free(obj);
        return false;
    }
    if (registry_install(srv->reg, l->fname, strlen(l->fname), ops, obj, hdr.seed, false, NULL) !=
        REGISTRY_OK) {
        log_msg(LOG_ERROR, "replication: no memory for filter %s", l->fname);
        return false;
    }
    return true;
}

/* The full sync is on disk: a restart may resync partially from here on. */
static void flushed(void *arg, int err, const char *why)
{
    struct repl *r = arg;
    if (err != 0)
        log_msg(LOG_WARN, "replication: the snapshot after the full sync failed: %s", why);
    else if (r->srv->repl.role == SERVER_REPLICA)
        repl_state_save(r); /* without a journal, only the mark that it is a replica's */
}

static void synced(struct repl_link *l)
{
    struct server *srv = l->r->srv;
    memcpy(l->r->id, l->sync_id, sizeof l->r->id);
    srv->repl.offset = l->sync_offset;
    /* The next record, offset + 1, goes to the journal's next position. */
    srv->repl.delta = durable_on(srv) ? l->sync_offset - durable_last_pos(srv) : 0;
    srv->repl.link = SERVER_LINK_UP;
    l->step = STEP_STREAM;
    l->retry_ms = REPL_RETRY_MS;
    /* What came in a full sync has no records here: a snapshot makes it durable. */
    if (srv->snap != NULL && snapshot_flush(srv->snap, NULL, flushed, l->r) != 0)
        log_msg(LOG_WARN, "replication: cannot queue the snapshot after the full sync");
    log_msg(LOG_INFO, "replication: full sync done: %zu filters at offset %llu", l->nfilters,
            (unsigned long long)l->sync_offset);
    send_ack(l);
}

/* ---- the stream ---- */

/* Applies every complete record in the input. false: the link must drop (why logged). */
static bool apply_records(struct repl_link *l)
{
    struct server *srv = l->r->srv;
    struct evbuffer *in = bufferevent_get_input(l->bev);
    for (;;) {
        size_t have = evbuffer_get_length(in);
        if (have < JOURNAL_RECORD_HEADER)
            return true;
        unsigned char *h = evbuffer_pullup(in, JOURNAL_RECORD_HEADER);
        size_t size = JOURNAL_RECORD_OVERHEAD + (size_t)le_get32(h);
        if (size > JOURNAL_RECORD_MAX) {
            drop(l, "a record from the primary claims an impossible size");
            return false;
        }
        if (have < size)
            return true;
        unsigned char *p = evbuffer_pullup(in, (ssize_t)size);
        struct journal_record rec;
        long rc = journal_record_decode(p, size, &l->scratch, &rec);
        if (rc <= 0) {
            drop(l, "a damaged record from the primary (it is not applied)");
            return false;
        }
        if (rec.pos != srv->repl.offset + 1) {
            char why[128];
            snprintf(why, sizeof why, "record %llu from the primary where %llu was due",
                     (unsigned long long)rec.pos, (unsigned long long)srv->repl.offset + 1);
            drop(l, why);
            return false;
        }
        if (rec.pos > srv->repl.primary_offset) /* the primary got at least this far */
            srv->repl.primary_offset = rec.pos;
        if (mutate_apply_record(l->stream, &rec) != 0) {
            drop(l, "a record from the primary could not be applied");
            return false;
        }
        evbuffer_drain(in, size);
    }
}

/* ---- the handshake ---- */

static void send_psync(struct repl_link *l)
{
    struct server *srv = l->r->srv;
    char line[160];
    bool have = l->r->id[0] != '\0' && srv->repl.link != SERVER_LINK_SYNC;
    snprintf(line, sizeof line, "PSYNC %s %llu\r\n", have ? l->r->id : "?",
             (unsigned long long)srv->repl.offset);
    send_line(l, line);
    l->step = STEP_PSYNC;
}

/* The rejoin is over: its filters are on the primary, or given up on (logged). */
static void rejoined(void *arg)
{
    struct repl_link *l = arg;
    struct repl_rejoin *j = l->rejoin;
    l->rejoin = NULL;
    l->r->rejoin = false; /* once per transition: the next link just resyncs */
    repl_rejoin_free(j);
    send_psync(l);
}

/* The link is up (and authenticated): this server's own filters first, then PSYNC. */
static void begin_rejoin(struct repl_link *l)
{
    if (l->rejoin == NULL) {
        if (registry_count(l->r->srv->reg) == 0 ||
            (l->rejoin = repl_rejoin_new(l->r, rejoined, l)) == NULL) {
            l->r->rejoin = false; /* nothing to send, or no memory (logged) */
            send_psync(l);
            return;
        }
    }
    l->step = STEP_REJOIN;
    repl_rejoin_begin(l->rejoin, l->bev);
}

/* ---- the link's events ---- */

static bool on_line(struct repl_link *l, const char *line)
{
    struct server *srv = l->r->srv;
    unsigned long long off = 0;
    char id[REPL_ID_LEN + 8];
    size_t n = 0;
    switch (l->step) {
    case STEP_AUTH:
        if (strcmp(line, "OK") != 0) {
            drop(l, "the primary refused our AUTH");
            return false;
        }
        l->step = STEP_PSYNC;
        if (l->r->rejoin)
            begin_rejoin(l);
        return true;
    case STEP_REJOIN:
        repl_rejoin_line(l->rejoin, line);
        return true;
    case STEP_PSYNC:
        if (sscanf(line, "CONTINUE %47s %llu", id, &off) == 2 && strlen(id) == REPL_ID_LEN) {
            memcpy(l->r->id, id, REPL_ID_LEN + 1);
            srv->repl.link = SERVER_LINK_UP;
            l->step = STEP_STREAM;
            l->retry_ms = REPL_RETRY_MS;
            log_msg(LOG_INFO, "replication: partial resync from %s at offset %llu",
                    srv->repl.primary, off);
            send_ack(l);
            return true;
        }
        unsigned long long seed = 0;
        int got = sscanf(line, "FULLSYNC %47s %llu %zu %llu", id, &off, &n, &seed);
        if (got >= 3 && strlen(id) == REPL_ID_LEN) {
            if (got == 4 && seed != srv->seed) { /* the primary's secret: see repl.c */
                srv->seed = seed;
                if (datadir_seed_store(srv->cfg.data_dir, seed) != 0)
                    log_msg(LOG_WARN,
                            "replication: cannot keep the primary's hash secret in "
                            "%s/SEED: %s",
                            srv->cfg.data_dir, strerror(errno));
            }
            memcpy(l->sync_id, id, REPL_ID_LEN + 1);
            l->sync_offset = off;
            srv->repl.primary_offset = off; /* lag: what the sync still has to bring */
            l->nfilters = n;
            l->got = 0;
            srv->repl.link = SERVER_LINK_SYNC;
            repl_state_remove(l->r);
            repl_close_feeds(l->r, "its primary resynced in full");
            drop_all(l);
            if (n == 0)
                synced(l);
            else
                l->step = STEP_FILTER;
            return true;
        }
        {
            char why[REPL_LINE_MAX + 40];
            snprintf(why, sizeof why, "the primary answered PSYNC with '%.*s'", 200, line);
            drop(l, why);
        }
        return false;
    case STEP_FILTER: {
        char name[PROTO_MAX_NAME + 8];
        size_t bytes;
        if (sscanf(line, "FILTER %135s %zu", name, &bytes) != 2 ||
            !proto_name_valid((struct proto_slice){name, strlen(name)})) {
            drop(l, "a bad FILTER line in the full sync");
            return false;
        }
        if (!budget_fits(&srv->budget, bytes) || (l->data = malloc(bytes ? bytes : 1)) == NULL) {
            drop(l, "a filter of the full sync does not fit max_memory here");
            return false;
        }
        budget_charge(&srv->budget, BUDGET_OVERHEAD, bytes);
        memcpy(l->fname, name, strlen(name) + 1); /* valid: at most PROTO_MAX_NAME bytes */
        l->need = bytes;
        l->step = STEP_DATA;
        return true;
    }
    default:
        return true;
    }
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct repl_link *l = arg;
    (void)bev;
    for (;;) {
        if (l->step == STEP_STREAM) {
            if (apply_records(l))
                send_ack(l);
            return;
        }
        if (l->step == STEP_DATA) {
            struct evbuffer *in = bufferevent_get_input(l->bev);
            if (evbuffer_get_length(in) < l->need)
                return;
            evbuffer_remove(in, l->data, l->need);
            if (!install(l)) {
                drop(l, "a filter of the full sync could not be installed");
                return;
            }
            if (++l->got == l->nfilters)
                synced(l);
            else
                l->step = STEP_FILTER;
            continue;
        }
        char line[REPL_LINE_MAX + 1];
        bool too_long;
        if (!read_line(l, line, sizeof line, &too_long)) {
            if (too_long)
                drop(l, "the primary sent a line too long");
            return;
        }
        if (!on_line(l, line))
            return;
    }
}

static void start_handshake(struct repl_link *l)
{
    struct server *srv = l->r->srv;
    char line[400];
    bool auth = srv->repl_token[0] != '\0';
    if (auth) {
        snprintf(line, sizeof line, "AUTH %s\r\n", srv->repl_token);
        send_line(l, line);
    }
    if (!l->r->rejoin)
        send_psync(l); /* behind AUTH: its OK comes first */
    else if (!auth)
        begin_rejoin(l);
    if (auth)
        l->step = STEP_AUTH;
}

static void free_addrs(struct repl_link *l)
{
    if (l->addrs != NULL)
        evutil_freeaddrinfo(l->addrs);
    l->addrs = NULL;
    l->addr = l->next_addr = NULL;
}

/* The retry timer, after the current delay; the next failure waits twice as long. */
static void schedule_retry(struct repl_link *l)
{
    free_addrs(l); /* the next try looks the name up again */
    unsigned ms = l->retry_ms;
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (long)(ms % 1000) * 1000};
    l->step = STEP_IDLE;
    evtimer_add(l->retry, &tv);
    l->retry_ms = ms >= REPL_RETRY_MAX_MS / 2 ? REPL_RETRY_MAX_MS : ms * 2;
}

static void close_bev(struct repl_link *l)
{
    if (l->bev != NULL)
        bufferevent_free(l->bev);
    l->bev = NULL;
    free_data(l);
    if (l->rejoin != NULL)
        repl_rejoin_lost(l->rejoin);
}

static void drop(struct repl_link *l, const char *why)
{
    log_msg(LOG_WARN, "replication: link to %s dropped: %s", l->r->srv->repl.primary, why);
    if (l->r->srv->repl.link == SERVER_LINK_SYNC)
        l->r->id[0] = '\0'; /* half a full sync: the next one starts over */
    l->r->srv->repl.link = SERVER_LINK_DOWN;
    close_bev(l);
    schedule_retry(l);
}

/* ---- TLS to the primary ---- */

static bool is_ip(const char *host)
{
    unsigned char b[sizeof(struct in6_addr)];
    return evutil_inet_pton(AF_INET, host, b) == 1 || evutil_inet_pton(AF_INET6, host, b) == 1;
}

/* The oldest queued OpenSSL error as text (or fallback), and clears the queue. */
static const char *ssl_error(char *buf, size_t len, const char *fallback)
{
    unsigned long e = ERR_get_error();
    if (e == 0)
        snprintf(buf, len, "%s", fallback);
    else
        ERR_error_string_n(e, buf, len);
    ERR_clear_error();
    return buf;
}

/* The client context: TLS 1.2 and later, the primary verified against replica_tls_ca_file
 * or the system's CAs (unless replica_tls_insecure), replica_tls_cert_file shown when the
 * primary asks for a client certificate. NULL after logging why. */
static SSL_CTX *client_ctx(const struct config *cfg)
{
    char why[256];
    const char *step = "create a TLS context";
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1)
        goto error;
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    /* A primary that goes away without close_notify is an end, as on a plain link. */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
    if (cfg->replica_tls_cert_file[0] != '\0') {
        step = cfg->replica_tls_cert_file;
        if (SSL_CTX_use_certificate_chain_file(ctx, cfg->replica_tls_cert_file) != 1)
            goto error;
        step = cfg->replica_tls_key_file;
        if (SSL_CTX_use_PrivateKey_file(ctx, cfg->replica_tls_key_file, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(ctx) != 1)
            goto error;
    }
    if (cfg->replica_tls_insecure) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
        return ctx;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    const char *ca = cfg->replica_tls_ca_file;
    step = ca[0] != '\0' ? ca : "the system's CA certificates";
    if ((ca[0] != '\0' ? SSL_CTX_load_verify_locations(ctx, ca, NULL)
                       : SSL_CTX_set_default_verify_paths(ctx)) != 1)
        goto error;
    return ctx;
error:
    log_msg(LOG_ERROR, "replication: TLS to the primary: %s: %s", step,
            ssl_error(why, sizeof why, "failed"));
    SSL_CTX_free(ctx);
    return NULL;
}

/* A new SSL towards l->host: SNI for a name, and the certificate must name the host
 * (a DNS name or an IP address in its subjectAltName). NULL after logging why. */
static SSL *client_ssl(struct repl_link *l)
{
    const struct config *cfg = &l->r->srv->cfg;
    char why[256];
    if (l->tls == NULL && (l->tls = client_ctx(cfg)) == NULL)
        return NULL;
    SSL *ssl = SSL_new(l->tls);
    if (ssl == NULL)
        goto error;
    bool ip = is_ip(l->host);
    if (!ip && SSL_set_tlsext_host_name(ssl, l->host) != 1)
        goto error;
    if (!cfg->replica_tls_insecure &&
        (ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), l->host)
            : SSL_set1_host(ssl, l->host)) != 1)
        goto error;
    return ssl;
error:
    log_msg(LOG_ERROR, "replication: TLS to %s: %s", l->r->srv->repl.primary,
            ssl_error(why, sizeof why, "out of memory"));
    SSL_free(ssl);
    return NULL;
}

/* Why the link failed, for the log: the TLS reason when there is one. */
static void link_error(struct repl_link *l, short what, char *why, size_t len)
{
    int sys = EVUTIL_SOCKET_ERROR();
    if (what & BEV_EVENT_TIMEOUT) {
        snprintf(why, len, "no answer within %d s", REPL_CONNECT_SECONDS);
        return;
    }
    SSL *ssl = l->r->srv->cfg.replica_tls ? bufferevent_openssl_get_ssl(l->bev) : NULL;
    unsigned long e = ssl != NULL ? bufferevent_get_openssl_error(l->bev) : 0;
    long v = ssl != NULL ? SSL_get_verify_result(ssl) : X509_V_OK;
    if (l->step == STEP_CONNECTING && ssl != NULL && v != X509_V_OK) {
        const char *ca = l->r->srv->cfg.replica_tls_ca_file;
        if (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH)
            snprintf(why, len, "TLS: the primary's certificate does not name %s (%s)", l->host,
                     X509_verify_cert_error_string(v));
        else
            snprintf(why, len, "TLS: the primary's certificate: %s (verified against %.200s)",
                     X509_verify_cert_error_string(v), ca[0] != '\0' ? ca : "the system's CAs");
    } else if (e != 0 && ERR_GET_LIB(e) != 0) { /* not libevent's SSL_ERROR_SYSCALL (5) */
        char s[200];
        ERR_error_string_n(e, s, sizeof s);
        snprintf(why, len, "TLS: %s%s", s,
                 l->step == STEP_CONNECTING ? " (in the handshake: is it the primary's --tls-port?)"
                                            : "");
    } else if (what & BEV_EVENT_EOF) {
        snprintf(why, len, "%s",
                 l->step == STEP_CONNECTING && ssl != NULL
                     ? "the primary closed the connection in the TLS handshake (is it its "
                       "--tls-port?)"
                     : "the primary closed the connection");
    } else {
        snprintf(why, len, "%s", evutil_socket_error_to_string(sys));
    }
    ERR_clear_error();
}

/* ---- connecting ---- */

/* ai's address as text, for the log. */
static const char *addr_text(const struct evutil_addrinfo *ai, char *buf, size_t len)
{
    const void *a = NULL;
    if (ai != NULL && ai->ai_family == AF_INET)
        a = &((const struct sockaddr_in *)(const void *)ai->ai_addr)->sin_addr;
    else if (ai != NULL && ai->ai_family == AF_INET6)
        a = &((const struct sockaddr_in6 *)(const void *)ai->ai_addr)->sin6_addr;
    if (a == NULL || evutil_inet_ntop(ai->ai_family, a, buf, len) == NULL)
        snprintf(buf, len, "?");
    return buf;
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct repl_link *l = arg;
    if (what & BEV_EVENT_CONNECTED) {
        bufferevent_set_timeouts(bev, NULL, NULL); /* an idle link is fine */
        SSL *ssl = l->r->srv->cfg.replica_tls ? bufferevent_openssl_get_ssl(bev) : NULL;
        if (ssl != NULL)
            log_msg(LOG_INFO, "replication: connected to primary %s over %s (%s)",
                    l->r->srv->repl.primary, SSL_get_version(ssl), SSL_get_cipher_name(ssl));
        else
            log_msg(LOG_INFO, "replication: connected to primary %s", l->r->srv->repl.primary);
        free_addrs(l);
        start_handshake(l);
        return;
    }
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)))
        return;
    char why[400];
    link_error(l, what, why, sizeof why);
    if (l->step == STEP_CONNECTING && l->next_addr != NULL) {
        /* The name has more addresses: the next one, from the loop (this may run inside
         * bufferevent_socket_connect, which must not be re-entered). */
        char at[64];
        log_msg(LOG_WARN, "replication: link to %s at %s failed: %s; trying its next address",
                l->r->srv->repl.primary, addr_text(l->addr, at, sizeof at), why);
        close_bev(l);
        l->step = STEP_IDLE;
        static const struct timeval now = {0, 0};
        evtimer_add(l->retry, &now);
        return;
    }
    drop(l, why);
}

/* Connects to ai, one address of l->addrs (TLS with replica_tls). */
static void connect_to(struct repl_link *l, const struct evutil_addrinfo *ai)
{
    struct server *srv = l->r->srv;
    l->addr = ai;
    l->next_addr = ai->ai_next;
    if (srv->cfg.replica_tls) {
        SSL *ssl = client_ssl(l);
        if (ssl == NULL) {
            schedule_retry(l);
            return;
        }
        /* Takes ssl over, freeing it on failure. */
        l->bev = bufferevent_openssl_socket_new(l->r->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                                BEV_OPT_CLOSE_ON_FREE);
        if (l->bev != NULL)
            bufferevent_openssl_set_allow_dirty_shutdown(l->bev, 1);
    } else {
        l->bev = bufferevent_socket_new(l->r->base, -1, BEV_OPT_CLOSE_ON_FREE);
    }
    if (l->bev == NULL) {
        log_msg(LOG_ERROR, "replication: out of memory for the link to %s", srv->repl.primary);
        schedule_retry(l);
        return;
    }
    bufferevent_setcb(l->bev, on_read, NULL, on_event, l);
    struct timeval tv = {.tv_sec = REPL_CONNECT_SECONDS, .tv_usec = 0};
    bufferevent_set_timeouts(l->bev, &tv, &tv);
    bufferevent_enable(l->bev, EV_READ | EV_WRITE);
    l->step = STEP_CONNECTING;
    /* A connect that fails at once has told on_event already, which dropped the link. */
    if (bufferevent_socket_connect(l->bev, ai->ai_addr, (int)ai->ai_addrlen) != 0 && l->bev != NULL)
        drop(l, "connect failed");
}

static void on_resolved(int result, struct evutil_addrinfo *ai, void *arg)
{
    struct repl_lookup *q = arg;
    struct repl_link *l = q->l;
    free(q);
    if (l == NULL) { /* the link stopped meanwhile */
        if (ai != NULL)
            evutil_freeaddrinfo(ai);
        return;
    }
    l->lookup = NULL;
    free_addrs(l);
    if (result != 0 || ai == NULL) {
        log_msg(LOG_WARN, "replication: cannot resolve %s: %s (next try in %u ms)",
                l->r->srv->repl.primary, evutil_gai_strerror(result), l->retry_ms);
        if (ai != NULL)
            evutil_freeaddrinfo(ai);
        schedule_retry(l);
        return;
    }
    l->addrs = ai; /* kept while connecting: its other addresses are tried in turn */
    connect_to(l, ai);
}

/* Resolves the primary's name without blocking, then connects (on_resolved). */
static void connect_now(struct repl_link *l)
{
    struct evutil_addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_protocol = IPPROTO_TCP};
    struct repl_lookup *q = malloc(sizeof *q);
    if (q == NULL) {
        log_msg(LOG_ERROR, "replication: out of memory to resolve %s", l->r->srv->repl.primary);
        schedule_retry(l);
        return;
    }
    q->l = l;
    l->lookup = q;
    l->step = STEP_RESOLVING;
    /* An address or an /etc/hosts name is answered at once: on_resolved has run by the
     * time this returns (and freed q). Otherwise it runs from the loop. */
    (void)evdns_getaddrinfo(l->dns, l->host, l->port, &hints, on_resolved, q);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct repl_link *l = arg;
    if (l->next_addr != NULL)
        connect_to(l, l->next_addr);
    else
        connect_now(l);
}

static void on_ack(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct repl_link *l = arg;
    if (l->bev != NULL && l->step == STEP_STREAM)
        send_ack(l);
}

/* A resolver on base from /etc/resolv.conf and /etc/hosts; without the first, /etc/hosts
 * and addresses only (logged). */
static struct evdns_base *new_resolver(struct event_base *base)
{
    struct evdns_base *dns =
        evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS | EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    if (dns != NULL)
        return dns;
    log_msg(LOG_WARN, "replication: cannot read /etc/resolv.conf: the primary's name must be "
                      "an address or in /etc/hosts");
    dns = evdns_base_new(base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    if (dns != NULL)
        (void)evdns_base_load_hosts(dns, NULL);
    return dns;
}

int repl_link_start(struct repl *r, const char *host, const char *port)
{
    struct repl_link *l = calloc(1, sizeof *l);
    if (l == NULL)
        return -1;
    l->r = r;
    snprintf(l->host, sizeof l->host, "%s", host);
    snprintf(l->port, sizeof l->port, "%s", port);
    l->retry_ms = REPL_RETRY_MS;
    l->retry = evtimer_new(r->base, on_retry, l);
    l->ack = event_new(r->base, -1, EV_PERSIST, on_ack, l);
    l->stream = mutate_stream_new(r->srv, false);
    l->dns = new_resolver(r->base);
    struct timeval tv = {.tv_sec = REPL_ACK_MS / 1000, .tv_usec = (REPL_ACK_MS % 1000) * 1000};
    if (l->retry == NULL || l->ack == NULL || l->stream == NULL || l->dns == NULL ||
        event_add(l->ack, &tv) != 0) {
        r->link = l;
        repl_link_stop(r);
        return -1;
    }
    r->link = l;
    r->srv->repl.link = SERVER_LINK_DOWN;
    const struct config *cfg = &r->srv->cfg;
    if (cfg->replica_tls && cfg->replica_tls_insecure)
        log_msg(LOG_WARN,
                "replication: TLS to %s without verifying its certificate "
                "(replica_tls_insecure%s)",
                r->srv->repl.primary,
                cfg->replica_tls_ca_file[0] != '\0' ? "; replica_tls_ca_file is not used" : "");
    connect_now(l);
    return 0;
}

void repl_link_stop(struct repl *r)
{
    struct repl_link *l = r->link;
    if (l == NULL)
        return;
    if (l->lookup != NULL)
        l->lookup->l = NULL; /* its answer comes later, to nobody */
    close_bev(l);
    free_addrs(l);
    /* Not evdns_getaddrinfo_cancel(): its answer, deferred, would reach the freed base.
     * Failing the requests here (DNS_ERR_SHUTDOWN) leaves the base out of their end. */
    if (l->dns != NULL)
        evdns_base_free(l->dns, 1);
    if (l->retry != NULL)
        event_free(l->retry);
    if (l->ack != NULL)
        event_free(l->ack);
    SSL_CTX_free(l->tls);
    repl_rejoin_free(l->rejoin);
    mutate_stream_free(l->stream, NULL);
    free(l);
    r->link = NULL;
}
