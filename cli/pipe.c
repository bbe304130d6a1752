/*
 * pipe.c - raw mode. Each input line is forwarded byte for byte (a last line without '\n'
 * gets "\r\n"); its reply shape goes into a queue, and reply lines are matched against the
 * queue's head. After QUIT nothing more is sent: the server closes. A line longer than
 * LONG_LINE is forwarded as it streams and counted as one reply (the server refuses it).
 */
#include "cli/pipe.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/buf.h"
#include "cli/msg.h"
#include "cli/reply.h"

#define INPUT_CHUNK ((size_t)1 << 20)
#define LONG_LINE ((size_t)4 << 20)
#define OUT_HIGH ((size_t)8 << 20)
#define QUEUE_MAX 100000 /* replies awaited before we stop sending */
#define SHOWN_ERRORS 20  /* error replies shown on stderr in raw mode */

struct pending {
    uint64_t lineno;      /* input line of the request */
    enum cli_shape shape; /* CLI_SHAPE_LINE or CLI_SHAPE_BLOCK */
};

struct piper {
    struct cli_conn *c;
    const struct pipe_opts *o;
    int fd;
    bool fd_eof, input_done, quit_sent;
    bool in_long; /* forwarding the rest of a long line */
    struct cli_buf in;
    struct pending *q; /* ring of QUEUE_MAX */
    size_t qhead, qlen;
    bool first;      /* the next reply line starts a reply */
    uint64_t lineno; /* input lines read */
    uint64_t replies, errors;
};

static void push(struct piper *p, enum cli_shape shape)
{
    p->q[(p->qhead + p->qlen) % QUEUE_MAX] = (struct pending){p->lineno, shape};
    p->qlen++;
}

/* Forwards one whole line (with its '\n', or none at the end of the input). */
static void forward_line(struct piper *p, const char *s, size_t len, bool has_nl)
{
    p->lineno++;
    enum cli_shape shape;
    if (has_nl) {
        shape = cli_request_shape(s, len);
    } else {
        char *tmp = cli_alloc(NULL, len + 1);
        memcpy(tmp, s, len);
        tmp[len] = '\n';
        shape = cli_request_shape(tmp, len + 1);
        free(tmp);
    }
    struct cli_buf *out = cli_conn_out(p->c);
    cli_buf_append(out, s, len);
    if (!has_nl)
        cli_buf_append(out, "\r\n", 2);
    if (shape == CLI_SHAPE_LINE || shape == CLI_SHAPE_BLOCK)
        push(p, shape);
    if (shape == CLI_SHAPE_CLOSE) {
        p->quit_sent = true;
        p->input_done = true;
    }
}

/* Moves input lines to the output while the window allows. Returns 1 if it needs input. */
static int produce(struct piper *p)
{
    struct cli_buf *out = cli_conn_out(p->c);
    while (!p->input_done && p->qlen < QUEUE_MAX && cli_buf_pending(out) < OUT_HIGH) {
        const char *s = p->in.data + p->in.off;
        size_t n = cli_buf_pending(&p->in);
        const char *nl = n > 0 ? memchr(s, '\n', n) : NULL;
        if (p->in_long) {
            size_t take = nl != NULL ? (size_t)(nl - s) + 1 : n;
            cli_buf_append(out, s, take);
            cli_buf_consume(&p->in, take);
            if (nl != NULL)
                p->in_long = false;
            else if (p->fd_eof)
                p->input_done = true;
            else
                return 1;
            continue;
        }
        if (nl != NULL) {
            size_t len = (size_t)(nl - s) + 1;
            forward_line(p, s, len, true);
            cli_buf_consume(&p->in, len);
        } else if (n >= LONG_LINE) {
            p->lineno++;
            push(p, CLI_SHAPE_LINE);
            cli_buf_append(out, s, n);
            cli_buf_consume(&p->in, n);
            p->in_long = true;
        } else if (p->fd_eof) {
            if (n > 0) {
                forward_line(p, s, n, false);
                cli_buf_consume(&p->in, n);
            }
            p->input_done = true;
        } else {
            return 1;
        }
    }
    return 0;
}

static int input_read(struct piper *p)
{
    char *s = cli_buf_reserve(&p->in, INPUT_CHUNK);
    ssize_t r;
    do {
        r = read(p->fd, s, INPUT_CHUNK);
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
        cli_warn("stdin: %s", strerror(errno));
        return -1;
    }
    if (r == 0)
        p->fd_eof = true;
    p->in.len += (size_t)r;
    return 0;
}

/* Matches buffered reply lines to the queue. Returns 0, or -1 on a reply nobody asked for. */
static int take_replies(struct piper *p)
{
    struct proto_slice r;
    while (cli_conn_line(p->c, &r)) {
        if (p->qlen == 0) {
            cli_warn("unexpected reply from the server: %.*s", (int)r.len, r.ptr);
            return -1;
        }
        struct pending *h = &p->q[p->qhead];
        if (p->o->print) {
            fwrite(r.ptr, 1, r.len, stdout);
            fputc('\n', stdout);
        }
        bool err = p->first && cli_reply_is_error(r.ptr, r.len);
        if (err) {
            p->errors++;
            if (!p->o->print && p->errors <= SHOWN_ERRORS)
                fprintf(stderr, "line %" PRIu64 ": %.*s\n", h->lineno,
                        (int)(r.len > 300 ? 300 : r.len), r.ptr);
            else if (!p->o->print && p->errors == SHOWN_ERRORS + 1)
                fprintf(stderr, "(more errors not shown)\n");
        }
        bool done = h->shape == CLI_SHAPE_LINE || cli_block_ends(r.ptr, r.len, p->first);
        p->first = done;
        if (done) {
            p->replies++;
            p->qhead = (p->qhead + 1) % QUEUE_MAX;
            p->qlen--;
        }
    }
    return 0;
}

static int run(struct piper *p)
{
    struct cli_conn *c = p->c;
    for (;;) {
        int need = produce(p);
        if (cli_conn_flush(c) != CLI_CONN_OK)
            goto lost;
        if (p->input_done && p->qlen == 0 && cli_buf_pending(cli_conn_out(c)) == 0)
            return 0;
        bool want_in = need == 1;
        struct pollfd fds[2] = {{.fd = cli_conn_fd(c), .events = cli_conn_events(c)},
                                {.fd = p->fd, .events = POLLIN}};
        nfds_t n = want_in ? 2 : 1;
        int r = poll(fds, n, 0);
        if (r == 0) {
            fflush(stdout);
            int wait = p->qlen > 0 ? cli_conn_timeout(c) : -1;
            r = poll(fds, n, wait);
            if (r == 0) {
                cli_warn("%s: no reply within %d s (%zu replies outstanding)", cli_conn_addr(c),
                         wait / 1000, p->qlen);
                return CLI_EXIT_CONN;
            }
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            cli_warn("poll: %s", strerror(errno));
            return CLI_EXIT_ERROR;
        }
        if (want_in && fds[1].revents != 0 && input_read(p) != 0)
            return CLI_EXIT_ERROR;
        if (fds[0].revents != 0) {
            int fr = cli_conn_fill(c);
            if (take_replies(p) != 0)
                return CLI_EXIT_ERROR;
            if (fr == CLI_CONN_EOF && p->quit_sent && p->qlen == 0)
                return 0;
            if (fr == CLI_CONN_EOF || fr == CLI_CONN_ERR)
                goto lost;
        }
    }
lost:
    cli_warn("%s: connection lost with %zu replies outstanding: %s", cli_conn_addr(c), p->qlen,
             cli_conn_error(c));
    return CLI_EXIT_CONN;
}

int pipe_run(struct cli_conn *c, int fd, const struct pipe_opts *o)
{
    struct piper p;
    memset(&p, 0, sizeof p);
    p.c = c;
    p.o = o;
    p.fd = fd;
    p.first = true;
    p.q = cli_alloc(NULL, QUEUE_MAX * sizeof *p.q);
    int rc = run(&p);
    if (fflush(stdout) != 0 && rc == 0) {
        if (errno != EPIPE)
            cli_warn("stdout: %s", strerror(errno));
        rc = CLI_EXIT_ERROR;
    }
    if (!o->print)
        printf("replies: %" PRIu64 ", errors: %" PRIu64 "\n", p.replies, p.errors);
    if (rc == 0 && p.errors > 0)
        rc = CLI_EXIT_ERROR;
    cli_buf_destroy(&p.in);
    free(p.q);
    return rc;
}
