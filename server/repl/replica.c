/*
 * replica.c - a replica's link to its primary: connect, AUTH when this server has a token,
 * PSYNC with the stream id and offset it holds, then either the records after it or a
 * full sync (every filter replaced by the primary's, then snapshotted here), and from then
 * on every record applied through mutate_apply_record as it arrives. Each read is
 * acknowledged (REPLCONF ACK), and once a second besides. A damaged or unexpected record
 * drops the link; it reconnects after REPL_RETRY_MS and resyncs.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netdb.h>
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
#include "server/repl/repl.h"
#include "server/repl/repl_internal.h"
#include "server/store/kinds.h"
#include "server/store/registry.h"

#define REPL_RETRY_MS 500
#define REPL_ACK_MS 1000
#define REPL_LINE_MAX 512

enum link_step {
    STEP_CONNECTING,
    STEP_AUTH,   /* waiting for AUTH's OK */
    STEP_PSYNC,  /* waiting for CONTINUE or FULLSYNC */
    STEP_FILTER, /* waiting for a FILTER line */
    STEP_DATA,   /* reading a filter's bytes */
    STEP_STREAM, /* records */
};

struct repl_link {
    struct repl *r;
    char host[256], port[8];
    struct bufferevent *bev;
    struct event *retry, *ack;
    enum link_step step;
    size_t nfilters, got; /* full sync: filters announced, received */
    uint64_t sync_offset; /* full sync: the offset it is at */
    char sync_id[REPL_ID_LEN + 1];
    char fname[PROTO_MAX_NAME + 1];
    size_t need;         /* STEP_DATA: bytes of the filter */
    unsigned char *data; /* them, counted in the budget */
    struct mutate_stream *stream;
    struct journal_scratch scratch;
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
    else if (r->srv->repl.role == SERVER_REPLICA && durable_on(r->srv))
        repl_state_save(r);
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
        return true;
    case STEP_PSYNC:
        if (sscanf(line, "CONTINUE %47s %llu", id, &off) == 2 && strlen(id) == REPL_ID_LEN) {
            memcpy(l->r->id, id, REPL_ID_LEN + 1);
            srv->repl.link = SERVER_LINK_UP;
            l->step = STEP_STREAM;
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
    if (srv->repl_token[0] != '\0') {
        snprintf(line, sizeof line, "AUTH %s\r\n", srv->repl_token);
        send_line(l, line);
        l->step = STEP_AUTH;
    } else {
        l->step = STEP_PSYNC;
    }
    bool have = l->r->id[0] != '\0' && srv->repl.link != SERVER_LINK_SYNC;
    snprintf(line, sizeof line, "PSYNC %s %llu\r\n", have ? l->r->id : "?",
             (unsigned long long)srv->repl.offset);
    send_line(l, line);
}

static void schedule_retry(struct repl_link *l)
{
    struct timeval tv = {.tv_sec = 0, .tv_usec = REPL_RETRY_MS * 1000};
    evtimer_add(l->retry, &tv);
}

static void close_bev(struct repl_link *l)
{
    if (l->bev != NULL)
        bufferevent_free(l->bev);
    l->bev = NULL;
    free_data(l);
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

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct repl_link *l = arg;
    (void)bev;
    if (what & BEV_EVENT_CONNECTED) {
        log_msg(LOG_INFO, "replication: connected to primary %s", l->r->srv->repl.primary);
        start_handshake(l);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        drop(l, what & BEV_EVENT_EOF ? "the primary closed the connection"
                                     : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
}

static void connect_now(struct repl_link *l)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int e = getaddrinfo(l->host, l->port, &hints, &ai);
    if (e != 0) {
        log_msg(LOG_WARN, "replication: cannot resolve %s: %s", l->r->srv->repl.primary,
                gai_strerror(e));
        schedule_retry(l);
        return;
    }
    l->bev = bufferevent_socket_new(l->r->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (l->bev == NULL) {
        freeaddrinfo(ai);
        schedule_retry(l);
        return;
    }
    bufferevent_setcb(l->bev, on_read, NULL, on_event, l);
    bufferevent_enable(l->bev, EV_READ | EV_WRITE);
    l->step = STEP_CONNECTING;
    if (bufferevent_socket_connect(l->bev, ai->ai_addr, (int)ai->ai_addrlen) != 0) {
        freeaddrinfo(ai);
        drop(l, "connect failed");
        return;
    }
    freeaddrinfo(ai);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    connect_now(arg);
}

static void on_ack(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct repl_link *l = arg;
    if (l->bev != NULL && l->step == STEP_STREAM)
        send_ack(l);
}

int repl_link_start(struct repl *r, const char *host, const char *port)
{
    struct repl_link *l = calloc(1, sizeof *l);
    if (l == NULL)
        return -1;
    l->r = r;
    snprintf(l->host, sizeof l->host, "%s", host);
    snprintf(l->port, sizeof l->port, "%s", port);
    l->retry = evtimer_new(r->base, on_retry, l);
    l->ack = event_new(r->base, -1, EV_PERSIST, on_ack, l);
    l->stream = mutate_stream_new(r->srv, false);
    struct timeval tv = {.tv_sec = REPL_ACK_MS / 1000, .tv_usec = (REPL_ACK_MS % 1000) * 1000};
    if (l->retry == NULL || l->ack == NULL || l->stream == NULL || event_add(l->ack, &tv) != 0) {
        r->link = l;
        repl_link_stop(r);
        return -1;
    }
    r->link = l;
    r->srv->repl.link = SERVER_LINK_DOWN;
    connect_now(l);
    return 0;
}

void repl_link_stop(struct repl *r)
{
    struct repl_link *l = r->link;
    if (l == NULL)
        return;
    close_bev(l);
    if (l->retry != NULL)
        event_free(l->retry);
    if (l->ack != NULL)
        event_free(l->ack);
    mutate_stream_free(l->stream, NULL);
    free(l);
    r->link = NULL;
}
