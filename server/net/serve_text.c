/*
 * serve_text.c - the bloomd text protocol's driver: parses requests in place, merges
 * pipelined small key requests of one filter into a single lib batch (so one-key clients
 * overlap their cache misses like a many-key line), executes, and formats each result
 * with proto_format_result. The hot path: no allocation, one parse per request.
 */
#include <stdbool.h>
#include <stddef.h>

#include "proto/proto.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/exec/commands.h"
#include "server/exec/mutate.h"
#include "server/net/conn.h"
#include "server/net/worker.h"

#define TEXT_RUN 64 /* pipelined small key requests merged into one lib batch */

static void reply(struct conn *c, const struct result *res)
{
    size_t mark;
    struct proto_buf *b = conn_reply_begin(c, &mark);
    proto_format_result(b, res);
    conn_reply_end(c, b, mark);
}

static void reply_each(void *ctx, size_t i, const struct result *res)
{
    (void)i;
    reply(ctx, res);
}

static void format_parked(struct proto_buf *out, const void *ctx, const struct result *r)
{
    (void)ctx;
    proto_format_result(out, r);
}

static size_t serve_text(struct conn *c, const char *buf, size_t len)
{
    struct worker *w = conn_worker(c);
    struct server *srv = w->srv;
    const struct proto_limits lim = {.max_line = srv->cfg.max_line};
    struct proto_request run[TEXT_RUN];
    size_t off = 0, used = 0;
    int st = PROTO_MORE;
    bool parsed = false;            /* run[0], st and used already hold the request at off */
    bool holds = mutate_holds(srv); /* replies wait for the journal: no merged runs */
    while (off < len && conn_can_execute(c)) {
        struct proto_request *req = &run[0];
        if (!parsed && len - off >= 2 && buf[off] == 0x16 && buf[off + 1] == 0x03) {
            /* A TLS handshake record: no text command starts with byte 0x16. */
            size_t mark;
            struct proto_buf *b = conn_reply_begin(c, &mark);
            proto_reply_error(b, "CLIENT_ERROR", "TLS sent to the plain port; use tls_port");
            conn_reply_end(c, b, mark);
            log_msg(LOG_INFO, "client %s: TLS handshake on the plain port, closing", conn_peer(c));
            conn_finish(c);
            return len;
        }
        if (!parsed)
            st = proto_parse(buf + off, len - off, &lim, req, &used);
        parsed = false;
        if (st == PROTO_MORE)
            break;
        if (st == PROTO_OK && !conn_admit(c, req->cmd)) {
            size_t mark;
            struct proto_buf *b = conn_reply_begin(c, &mark);
            proto_reply_error(b, "CLIENT_ERROR", CONN_WHY_AUTH);
            conn_reply_end(c, b, mark);
            if (req->cmd == PROTO_CMD_RESTORE)
                conn_skip_block(c, req->data_len); /* its block is not requests */
            conn_spend(c, used, 0);
            off += used;
            continue;
        }
        if (st == PROTO_OK && commands_runnable(req) && !holds) {
            /* Merge the small key requests that follow into one lib batch. */
            size_t n = 1, keys = req->nargs, next_used = 0;
            int next = PROTO_MORE;
            while (n < TEXT_RUN && off + used < len) {
                next = proto_parse(buf + off + used, len - off - used, &lim, &run[n], &next_used);
                if (next != PROTO_OK || !commands_same_run(req, &run[n]) ||
                    keys + run[n].nargs > COMMANDS_BATCH)
                    break;
                keys += run[n++].nargs;
                used += next_used;
                next = PROTO_MORE;
            }
            commands_execute_run(srv, &w->stats, run, n, conn_result(c), reply_each, c);
            conn_spend(c, used, keys);
            off += used;
            if (next != PROTO_MORE) {
                /* The request that ended the run is parsed already: do not parse it again. */
                run[0] = run[n];
                st = next;
                used = next_used;
                parsed = true;
            }
            continue;
        }
        if (st == PROTO_OK) {
            const struct result *res = conn_execute(c, req, NULL, 0);
            if (res != NULL)
                reply(c, res);
        } else if (st != PROTO_BLANK) {
            size_t mark;
            struct proto_buf *b = conn_reply_begin(c, &mark);
            w->stats.errors++;
            proto_reply_parse_error(b, st, req);
            conn_reply_end(c, b, mark);
            if (st == PROTO_ERR_TOO_LONG) {
                log_msg(LOG_INFO, "client %s: line longer than %llu bytes, closing", conn_peer(c),
                        (unsigned long long)lim.max_line);
                conn_finish(c);
                return len; /* the rest of the stream is discarded */
            }
            if (st != PROTO_ERR_UNKNOWN_CMD && req->cmd == PROTO_CMD_RESTORE) {
                /* A data block of unknown length follows: nothing after it can be parsed. */
                log_msg(LOG_INFO, "client %s: bad RESTORE line, closing", conn_peer(c));
                conn_finish(c);
                return len;
            }
        }
        conn_spend(c, used, st == PROTO_OK ? req->nargs : 0);
        off += used;
    }
    return off;
}

const struct conn_proto conn_proto_text = {
    .name = "bloomd",
    .serve = serve_text,
    .format_parked = format_parked,
};
