/*
 * conn.c - client connections. Workload: a few hundred clients, some pipelining
 * thousands of 100-key lines, most idle. A read goes into the worker's shared buffer and
 * is parsed there in place; only an unfinished tail (or requests held back by
 * backpressure) is copied into the connection's own buffer, so idle clients hold no
 * input memory. Replies accumulate in one proto_buf per connection and are written once
 * per read batch. When more than max_output reply bytes are unsent we stop parsing and
 * reading that client until the socket drains. Bytes move through the connection's
 * transport (server/net/conn_io.h: plain TCP in conn_plain.c, or TLS in conn_tls.c),
 * which behaves as a non-blocking socket, so nothing here knows about TLS.
 *
 * Parked requests: a command that answers later gets a struct parked (its completion).
 * Requests after it keep executing (so writes behind a held write join the same group
 * commit), but their replies are held behind it; when the oldest parked request
 * completes, its reply and everything held behind it move to the output, in order.
 *
 * Authentication (auth_token set) is a state of the connection, enum conn_auth: the
 * drivers ask conn_admit() before running a request, and AUTH is answered here, not in
 * commands.c, which knows no connections. A failed AUTH parks its own reply on a timer
 * (the parked path above), and nothing else runs meanwhile, so guessing costs
 * CONN_AUTH_DELAY_MS per try; after CONN_AUTH_MAX_FAILURES the connection is closed.
 *
 * Fairness: each turn (an event of the connection) executes one quantum, about
 * CONN_QUANTUM_BYTES of input or CONN_QUANTUM_KEYS keys (a request always whole). A
 * connection with input left after its quantum is backlogged: it stops reading (TCP
 * backpressure bounds it) and waits in the worker's backlog (server/net/fair.h) for its next
 * turn; a client whose input fits in a quantum never goes there. A heavy client (its last
 * turn used a whole quantum, or it holds a long line) always waits for the backlog's
 * round, so one pass serves every polite client at once and a bounded amount of heavy
 * work (the round's slice, server/net/fair.h, plus one quantum).
 *
 * Memory: what a connection holds (itself, its input, output and held replies) is
 * counted in the server's budget (BUDGET_CONNECTIONS) at the end of each turn, by the
 * change of capacities; when the total passes max_memory the connections holding the
 * most are told so and closed (shed()), largest first, until it is back under.
 *
 * Lifecycle: one enum conn_state (conn.h), changed only by set_state(), whose table
 * (conn_next) is the whole list of legal moves:
 *
 *   OPEN --EOF--> DRAINING --input done, or QUIT--> CLOSING --replies out--> freed
 *   OPEN --QUIT, fatal line, last failed AUTH--> FINISHING --replies out--> LINGERING
 *   LINGERING --peer's EOF, error or CONN_CLOSE_SECONDS--> freed
 *   OPEN, DRAINING, FINISHING, CLOSING --error, timeout, shed, answers owed--> OWED
 *   OWED --the last answer--> freed (watching nothing meanwhile: the peer is gone)
 *   any --error, timeout, shed, nothing owed; shutdown--> freed
 *
 * Beside it, and independent of it: the directions the transport is watched in
 * (c->watching, the interest bits), the auth state (what may run) and the fairness flags
 * (turn_open, heavy, read_wait: when it may run). Parked requests are a queue, not a state:
 * an OPEN connection keeps executing behind them.
 */
#include "server/net/conn.h"

#include <assert.h>
#include <errno.h>
#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "server/core/auth.h"
#include "server/core/budget.h"
#include "server/core/clock.h"
#include "server/core/log.h"
#include "server/core/park.h"
#include "server/core/server.h"
#include "server/exec/commands.h"
#include "server/exec/dump.h"
#include "server/net/conn_io.h"
#include "server/net/fair.h"
#include "server/net/netaddr.h"
#include "server/net/worker.h"
#include "server/repl/repl.h"

#define CONN_MIN_IN 1024                  /* input buffers up to this size are kept while idle */
#define CONN_KEEP_OUT 4096                /* larger reply buffers are freed once drained */
#define CONN_CLOSE_SECONDS 5              /* wait for a closing client to read its last reply */
#define CONN_MAX_PARKED 1024              /* parked requests per connection before parsing waits */
#define CONN_AUTH_DELAY_MS 250            /* a failed AUTH is answered this late */
#define CONN_AUTH_MAX_FAILURES 5          /* failed AUTHs before the connection is closed */
#define CONN_AUTH_RATE 20                 /* failed AUTHs answered per second, server-wide */
#define CONN_AUTH_MAX_WAIT_MS 10000       /* a failure that would wait longer closes at once */
#define CONN_FEED_LOW ((size_t)256 << 10) /* a replica's stream is refilled below this */
#define CONN_KEEP_FEED ((size_t)8 << 20)  /* a replica's stream keeps a buffer up to this */
#define CONN_QUANTUM_BYTES (64 * 1024)    /* input parsed per turn before yielding */
#define CONN_QUANTUM_KEYS 4096            /* keys executed per turn before yielding */
#define CONN_SHED_MIN (64 * 1024)         /* a connection holding less is never shed */
#define CONN_BODY_CHUNK (256 * 1024)      /* a reply's data block is pulled this much at a time */
#define CONN_BODY_PULLS 8                 /* chunks of a data block written per pump at most */
#define CONN_SHED_REPLY "SERVER_ERROR out of memory: client buffers over max_memory, closing\r\n"

/* Where a connection is with authentication; one state, not a set of flags. */
enum conn_auth {
    CONN_AUTH_OFF,     /* no token configured: every request runs */
    CONN_AUTH_NEEDED,  /* only AUTH, HELP, VERSION and QUIT run */
    CONN_AUTH_FAILING, /* a failed AUTH's reply waits on ev_auth; nothing runs until it leaves */
    CONN_AUTH_OK,      /* authenticated: every request runs */
};

struct conn;

/* A request whose reply comes later, and the replies of the requests behind it. */
struct parked {
    struct completion cpl; /* handed to the command; first member */
    struct parked *next;   /* younger parked request */
    struct conn *c;
    bool done;                       /* reply holds its reply */
    unsigned char ctx[CONN_CTX_MAX]; /* the driver's context for format_parked */
    struct proto_buf reply;          /* its formatted reply, once done */
    struct proto_buf after;          /* replies of later requests, held until it is answered */
    struct completion_body *body;    /* bytes that follow the reply (DUMP), until all are out */
    bool body_ready;                 /* body may have bytes: try a read (else wait for wake) */
    bool reply_out;                  /* reply moved to the output; body or after still wait */
};

struct conn {
    struct worker *w;
    const struct conn_proto *proto;
    struct conn *prev, *next; /* w->conns */
    struct conn_io *io;       /* the transport: plain TCP or TLS (conn_io.h) */
    char *in;                 /* unparsed input that outlived a read; NULL when none */
    size_t in_len, in_cap;
    struct proto_buf out; /* replies; out.data[out_sent..out.len) not yet written */
    size_t out_sent;
    struct parked *parked, *parked_tail; /* oldest first */
    size_t nparked;
    size_t held;               /* bytes in the parked requests' buffers */
    struct parked *spare;      /* the completion offered to the next command; NULL until needed */
    size_t skip;               /* input bytes to discard before parsing resumes */
    struct restore *sink;      /* receives the next sink_left input bytes (RESTORE's block) */
    uint64_t sink_left;        /* bytes still owed to sink, its "\r\n" included */
    struct parked *sink_p;     /* the RESTORE's parked reply (its command is sink) */
    struct parked *barrier;    /* a RESTORE whose block is in: nothing runs until it answers */
    bool sink_wait;            /* sink takes no more until its memory is ready: not reading */
    struct result res;         /* scratch result, reused by every request */
    enum conn_state state;     /* where it is between accept and close (set_state) */
    unsigned watching;         /* WATCH(CONN_IO_READ) | WATCH(CONN_IO_WRITE): io is watched */
    char peer[NETADDR_MAX];    /* address for log lines */
    enum conn_auth auth;       /* what the client may run */
    unsigned auth_failures;    /* failed AUTHs so far */
    struct event *ev_auth;     /* timer releasing a failed AUTH's reply; NULL until one fails */
    struct parked *auth_reply; /* that reply, parked; NULL when none waits */
    struct event *ev_pump;     /* active: answers arrived, pump later this pass; NULL until one */
    struct fair_link fair;     /* in the worker's backlog while its input waits for a turn */
    size_t turn_bytes;         /* input consumed this turn */
    size_t turn_keys;          /* keys executed this turn */
    bool turn_open;            /* this turn may execute (a heavy client may wait for a pass) */
    bool heavy;                /* its last turn used a whole quantum, or it holds a long line */
    bool read_wait;            /* heavy and readable: the backlog's turn reads */
    size_t charged;            /* bytes counted for it in the server's budget */
    struct repl_feed *feed;    /* a replica's stream after its PSYNC (server/repl/); or NULL */
    bool cut;                  /* replication cut it off: closes at the next pump */
    union {
        unsigned char bytes[CONN_DRIVER_STATE];
        max_align_t align;
    } driver; /* the protocol driver's own state (conn_driver_state) */
};

/* The interest bit of a direction in c->watching. */
#define WATCH(dir) (1u << (dir))

static void on_read(void *arg, bool timed_out);
static void on_write(void *arg, bool timed_out);
static void pump(struct conn *c);
static void turn_begin(struct conn *c);
static void on_turn(struct fair_link *l);

/* ---- lifecycle ---- */

/* The legal moves: bit `to` of conn_next[from]. Freeing is legal from every state. */
static const unsigned char conn_next[CONN_NSTATES] = {
    [CONN_OPEN] = 1u << CONN_DRAINING | 1u << CONN_FINISHING | 1u << CONN_OWED,
    [CONN_DRAINING] = 1u << CONN_CLOSING | 1u << CONN_OWED,
    [CONN_FINISHING] = 1u << CONN_LINGERING | 1u << CONN_OWED,
    [CONN_CLOSING] = 1u << CONN_OWED,
    [CONN_LINGERING] = 0, /* nothing is parked once the write side is shut */
    [CONN_OWED] = 0,
};

bool conn_state_legal(enum conn_state from, enum conn_state to)
{
    return from < CONN_NSTATES && to < CONN_NSTATES && ((conn_next[from] >> to) & 1u) != 0;
}

const char *conn_state_name(enum conn_state s)
{
    static const char *const names[CONN_NSTATES] = {
        [CONN_OPEN] = "open",       [CONN_DRAINING] = "draining",   [CONN_FINISHING] = "finishing",
        [CONN_CLOSING] = "closing", [CONN_LINGERING] = "lingering", [CONN_OWED] = "owed",
    };
    return s < CONN_NSTATES ? names[s] : "?";
}

enum conn_state conn_state_of(const struct conn *c)
{
    return c->state;
}

/* The one place c->state changes. */
static void set_state(struct conn *c, enum conn_state to)
{
    assert(conn_state_legal(c->state, to));
    c->state = to;
}

/* True while requests may still run: nothing has ended the request stream yet. */
static bool accepting(const struct conn *c)
{
    return c->state <= CONN_DRAINING;
}

/* No more requests (QUIT, a fatal line, the last failed AUTH): close once replies are out. */
static void finish(struct conn *c)
{
    if (c->state == CONN_OPEN)
        set_state(c, CONN_FINISHING);
    else if (c->state == CONN_DRAINING)
        set_state(c, CONN_CLOSING); /* the input has ended already: no half-close */
}

/* ---- output ---- */

static size_t unsent(const struct conn *c)
{
    return c->out.len - c->out_sent + c->held;
}

/* Where the reply of a request executed now goes: the output, or behind a parked one. */
static struct proto_buf *reply_buf(struct conn *c)
{
    return c->parked_tail != NULL ? &c->parked_tail->after : &c->out;
}

static void account_held(struct conn *c, size_t before, const struct proto_buf *b)
{
    if (b != &c->out)
        c->held += b->len - before;
}

static void append_buf(struct proto_buf *dst, const struct proto_buf *src)
{
    if (src->failed)
        dst->failed = true;
    if (src->len == 0 || dst->failed)
        return;
    size_t need = dst->len + src->len;
    if (need > dst->cap) {
        char *p = realloc(dst->data, need);
        if (p == NULL) {
            dst->failed = true;
            return;
        }
        dst->data = p;
        dst->cap = need;
    }
    memcpy(dst->data + dst->len, src->data, src->len);
    dst->len = need;
}

static void parked_free(struct parked *p)
{
    if (p == NULL)
        return;
    if (p->body != NULL)
        p->body->close(p->body);
    proto_buf_free(&p->reply);
    proto_buf_free(&p->after);
    free(p);
}

/*
 * Moves the answered parked requests at the head, and what they held, to the output. A
 * reply with a data block stays at the head until stream_body() has moved all of it.
 */
static void release_parked(struct conn *c)
{
    while (c->parked != NULL && c->parked->done) {
        struct parked *p = c->parked;
        if (!p->reply_out) {
            c->held -= p->reply.len;
            append_buf(&c->out, &p->reply);
            proto_buf_free(&p->reply);
            memset(&p->reply, 0, sizeof p->reply);
            p->reply_out = true;
        }
        if (p->body != NULL)
            return; /* its data block goes out before anything held behind it */
        c->parked = p->next;
        if (c->parked == NULL)
            c->parked_tail = NULL;
        c->nparked--;
        c->held -= p->after.len;
        append_buf(&c->out, &p->after);
        parked_free(p);
    }
}

/*
 * Pulls the data block of the reply at the head into the output, a chunk at a time while
 * less than a chunk is unsent (the block never sits whole in memory). Returns the bytes
 * added, or -1 when the block failed (the client cannot be told: close it).
 */
static long stream_body(struct conn *c)
{
    struct parked *p = c->parked;
    if (p == NULL || !p->done || p->body == NULL || !p->body_ready)
        return 0;
    long added = 0;
    while (c->out.len - c->out_sent < CONN_BODY_CHUNK && !c->out.failed) {
        size_t need = c->out.len + CONN_BODY_CHUNK;
        if (c->out.cap < need) {
            char *d = realloc(c->out.data, need);
            if (d == NULL) {
                c->out.failed = true;
                break;
            }
            c->out.data = d;
            c->out.cap = need;
        }
        long n = p->body->read(p->body, c->out.data + c->out.len, c->out.cap - c->out.len);
        if (n == COMPLETION_BODY_AGAIN) {
            p->body_ready = false; /* its wake() says when to try again */
            break;
        }
        if (n < 0) {
            log_msg(LOG_ERROR, "client %s: a reply's data block failed, closing", c->peer);
            return -1;
        }
        if (n == 0) {
            p->body->close(p->body);
            p->body = NULL;
            release_parked(c);
            break;
        }
        c->out.len += (size_t)n;
        added += n;
    }
    return added;
}

/* Ends an unfinished RESTORE data block (the client left): its request has no answer. */
static void drop_sink(struct conn *c)
{
    if (c->sink == NULL)
        return;
    restore_abort(c->sink);
    c->sink = NULL;
    c->sink_left = 0;
    c->sink_wait = false;
    c->sink_p->done = true; /* nothing will answer it; its (empty) reply goes nowhere */
    c->sink_p = NULL;
    c->barrier = NULL;
}

/* The input ended inside a RESTORE's block: it fails (the client may still read). */
static void end_sink(struct conn *c)
{
    if (c->sink == NULL)
        return;
    struct parked *p = c->sink_p;
    restore_abort(c->sink);
    c->sink = NULL;
    c->sink_left = 0;
    c->sink_wait = false;
    c->sink_p = NULL;
    completion_finish(&p->cpl, RESULT_CLIENT_ERROR, "the input ended inside a data block");
}

/* Before the connection stops writing: bodies are closed, and what then is done released. */
static void abandon_output(struct conn *c)
{
    drop_sink(c);
    for (struct parked *p = c->parked; p != NULL; p = p->next) {
        if (p->body != NULL) {
            p->body->close(p->body);
            p->body = NULL;
        }
    }
    release_parked(c);
}

static void conn_free(struct conn *c)
{
    struct worker *w = c->w;
    if (c->feed != NULL)
        repl_feed_closed(c->feed);
    drop_sink(c);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    if (c->fair.queued)
        fair_remove(&w->fair, &c->fair);
    budget_release(&w->srv->budget, BUDGET_CONNECTIONS, c->charged);
    if (c->charged >= CONN_SHED_MIN)
        w->conns_big--;
    if (c->ev_auth != NULL)
        event_free(c->ev_auth);
    if (c->ev_pump != NULL)
        event_free(c->ev_pump); /* also takes it off the active queue */
    c->io->ops->close(c->io);
    free(c->in);
    proto_buf_free(&c->out);
    while (c->parked != NULL) { /* only at shutdown: completions are never called then */
        struct parked *p = c->parked;
        c->parked = p->next;
        parked_free(p);
    }
    parked_free(c->spare);
    result_free(&c->res);
    w->stats.conn_current--;
    log_msg(LOG_DEBUG, "closed connection from %s", c->peer);
    free(c);
}

/*
 * Closes now, unless a command still owes this connection a reply: then it waits, watching
 * nothing (nothing more goes to a peer that is gone), and is freed when the last comes.
 */
static void conn_close(struct conn *c)
{
    abandon_output(c);
    if (c->parked != NULL) {
        set_state(c, CONN_OWED);
        if (c->fair.queued)
            fair_remove(&c->w->fair, &c->fair);
        if (c->watching & WATCH(CONN_IO_READ))
            c->io->ops->unwatch(c->io, CONN_IO_READ);
        if (c->watching & WATCH(CONN_IO_WRITE))
            c->io->ops->unwatch(c->io, CONN_IO_WRITE);
        c->watching = 0;
        return;
    }
    conn_free(c);
}

/* Answers arrived this pass: writes them and goes on, once for all of them. */
static void on_pump(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct conn *c = arg;
    if (c->state == CONN_OWED) {
        if (c->parked == NULL)
            conn_free(c); /* the peer left while we were waiting */
        return;
    }
    if (c->cut) {
        conn_close(c);
        return;
    }
    pump(c);
}

/*
 * The completion of a parked request: formats its reply and moves what it can. The
 * pump (the write, and parsing what waited behind) runs at the end of the pass: a group
 * commit releases many replies of one connection at once, and they share one write(2).
 * Without memory for that event it pumps at once.
 */
static void on_parked_done(struct completion *cpl, const struct result *r)
{
    struct parked *p = (struct parked *)cpl;
    struct conn *c = p->c;
    p->done = true;
    if (c->barrier == p)
        c->barrier = NULL; /* the requests behind the RESTORE see its filter now */
    turn_begin(c);         /* a new turn: the answer may let parsing go on */
    size_t before = p->reply.len;
    c->proto->format_parked(&p->reply, p->ctx, r);
    c->held += p->reply.len - before;
    if (p != c->parked)
        return; /* an older request still waits: this reply waits behind it */
    release_parked(c);
    if (c->ev_pump == NULL)
        c->ev_pump = event_new(c->w->base, -1, 0, on_pump, c);
    if (c->ev_pump != NULL) {
        event_active(c->ev_pump, 0, 0); /* once: an active event stays active once */
        return;
    }
    on_pump(-1, 0, c);
}

/* A data block (DUMP) has bytes again: pump at the end of this pass. */
static void body_wake(void *owner)
{
    struct parked *p = owner;
    struct conn *c = p->c;
    p->body_ready = true;
    if (c->ev_pump == NULL)
        c->ev_pump = event_new(c->w->base, -1, 0, on_pump, c);
    if (c->ev_pump != NULL) {
        event_active(c->ev_pump, 0, 0);
        return;
    }
    on_pump(-1, 0, c);
}

/* As on_parked_done, for a reply followed by a data block. */
static void on_parked_done_body(struct completion *cpl, const struct result *r,
                                struct completion_body *body)
{
    struct parked *p = (struct parked *)cpl;
    struct conn *c = p->c;
    if (c->state == CONN_OWED) {
        body->close(body); /* nobody is there to read it */
    } else {
        body->wake = body_wake;
        body->owner = p;
        p->body = body;
        p->body_ready = true;
    }
    on_parked_done(cpl, r);
}

/*
 * The completion offered to a command: the connection's spare parked request, or NULL
 * if out of memory. It joins the queue only if the command parks.
 */
static struct parked *spare(struct conn *c)
{
    if (c->spare == NULL) {
        c->spare = calloc(1, sizeof *c->spare);
        if (c->spare == NULL)
            return NULL;
        c->spare->cpl.done = on_parked_done;
        c->spare->cpl.done_body = on_parked_done_body;
        c->spare->c = c;
    }
    return c->spare;
}

/* The spare's command parked: it goes to the tail of the queue. */
static void park(struct conn *c)
{
    struct parked *p = c->spare;
    c->spare = NULL;
    if (c->parked_tail != NULL)
        c->parked_tail->next = p;
    else
        c->parked = p;
    c->parked_tail = p;
    c->nparked++;
}

/*
 * Starts or stops watching one direction of c->io. Watching again a direction that is on
 * only restarts its timeout (cheap), so a closing client gets the shorter close deadline.
 */
static void set_event(struct conn *c, enum conn_io_dir dir, bool want, unsigned timeout)
{
    bool on = (c->watching & WATCH(dir)) != 0;
    if (want && (!on || timeout > 0))
        c->io->ops->watch(c->io, dir, timeout);
    else if (!want && on)
        c->io->ops->unwatch(c->io, dir);
    c->watching = want ? c->watching | WATCH(dir) : c->watching & ~WATCH(dir);
}

int conn_start(struct worker *w, const struct conn_proto *proto, struct conn_io *io,
               const struct sockaddr *peer, socklen_t peerlen)
{
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        log_msg(LOG_ERROR, "accept: out of memory for a new connection");
        io->ops->close(io);
        return -1;
    }
    c->w = w;
    c->proto = proto;
    c->io = io;
    io->on_read = on_read;
    io->on_write = on_write;
    io->arg = c;
    result_init(&c->res);
    c->fair.turn = on_turn;
    c->charged = sizeof *c;
    budget_charge(&w->srv->budget, BUDGET_CONNECTIONS, c->charged);
    c->auth = w->srv->auth.set ? CONN_AUTH_NEEDED : CONN_AUTH_OFF;
    netaddr_format(peer, peerlen, c->peer, sizeof(c->peer));
    c->next = w->conns;
    if (c->next != NULL)
        c->next->prev = c;
    w->conns = c;
    w->stats.conn_current++;
    w->stats.conn_total++;
    c->state = CONN_OPEN;
    set_event(c, CONN_IO_READ, true, w->srv->cfg.idle_timeout);
    log_msg(LOG_DEBUG, "connection from %s", c->peer);
    return 0;
}

/* ---- the driver API ---- */

struct worker *conn_worker(const struct conn *c)
{
    return c->w;
}

const char *conn_peer(const struct conn *c)
{
    return c->peer;
}

struct result *conn_result(struct conn *c)
{
    return &c->res;
}

/* Room for more replies: accepting, and neither the output nor the parked queue full. */
static bool has_room(const struct conn *c)
{
    if (c->feed != NULL) /* a replica's stream: its acknowledgements are always read */
        return accepting(c);
    return accepting(c) && c->nparked < CONN_MAX_PARKED && c->auth != CONN_AUTH_FAILING &&
           c->barrier == NULL && unsent(c) <= c->w->srv->cfg.max_output;
}

/* ---- fairness ---- */

/*
 * A new turn of an event. A heavy client executes nothing here: its input waits for the
 * backlog's round, the one place heavy work runs (its reads too: on_read), so a pass never
 * holds more of it than the round's slice and one turn.
 */
static void turn_begin(struct conn *c)
{
    c->turn_bytes = c->turn_keys = 0;
    c->turn_open = !c->heavy;
}

static bool quantum_spent(const struct conn *c)
{
    return c->turn_bytes >= CONN_QUANTUM_BYTES || c->turn_keys >= CONN_QUANTUM_KEYS;
}

static bool quantum_left(const struct conn *c)
{
    return c->turn_open && !quantum_spent(c);
}

/* Puts c into the worker's backlog, or takes it out. */
static void set_backlog(struct conn *c, bool on)
{
    if (on && !c->fair.queued)
        fair_join(&c->w->fair, &c->fair);
    else if (!on && c->fair.queued)
        fair_remove(&c->w->fair, &c->fair);
}

static void read_turn(struct conn *c, bool timed_out);

/*
 * The backlog round's turn for c (the round decided that it runs now): the read it was
 * waiting for, or a quantum of its buffered input. May free c.
 */
static void on_turn(struct fair_link *l)
{
    struct conn *c = (struct conn *)(void *)((char *)l - offsetof(struct conn, fair));
    turn_begin(c);
    c->turn_open = true; /* its turn in the backlog, heavy or not */
    if (!c->read_wait) {
        pump(c);
        return;
    }
    /* Reading goes on again unless this turn leaves input for the next one (pump). */
    c->read_wait = false;
    set_event(c, CONN_IO_READ, true, c->w->srv->cfg.idle_timeout);
    read_turn(c, false);
}

void conn_spend(struct conn *c, size_t bytes, size_t keys)
{
    c->turn_bytes += bytes;
    c->turn_keys += keys;
}

bool conn_can_execute(const struct conn *c)
{
    /* Input owed to a data block (RESTORE's, or one skipped) is not requests. */
    return c->sink == NULL && c->skip == 0 && has_room(c) && quantum_left(c);
}

bool conn_admit(const struct conn *c, enum proto_cmd cmd)
{
    if (!conn_needs_auth(c))
        return true;
    return cmd == PROTO_CMD_AUTH || cmd == PROTO_CMD_HELP || cmd == PROTO_CMD_VERSION ||
           cmd == PROTO_CMD_QUIT;
}

bool conn_needs_auth(const struct conn *c)
{
    return c->auth != CONN_AUTH_OFF && c->auth != CONN_AUTH_OK;
}

/* The failed AUTH's delay is over: its reply goes out and parsing resumes. May free c. */
static void on_auth_delay(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct conn *c = arg;
    struct parked *p = c->auth_reply;
    bool last = c->auth_failures >= CONN_AUTH_MAX_FAILURES;
    c->auth_reply = NULL;
    c->auth = CONN_AUTH_NEEDED;
    completion_finish(&p->cpl, RESULT_CLIENT_ERROR,
                      last ? "invalid token; too many failures, closing" : "invalid token");
}

/*
 * AUTH: OK at once when the token matches; otherwise the reply is parked for
 * CONN_AUTH_DELAY_MS (returns NULL) and the failure logged with the peer.
 */
static const struct result *auth_execute(struct conn *c, const struct proto_request *req)
{
    const struct server *srv = c->w->srv;
    if (!srv->auth.set) {
        result_set(&c->res, RESULT_CLIENT_ERROR, "no auth_token is configured");
        return &c->res;
    }
    if (auth_key_matches(&srv->auth, req->args.ptr, req->args.len)) {
        c->auth = CONN_AUTH_OK;
        result_set(&c->res, RESULT_OK, NULL);
        return &c->res;
    }
    c->auth_failures++;
    /* Server-wide, failures are answered at most CONN_AUTH_RATE a second, in turn: many
     * connections guessing at once wait longer each, so guesses stay near that rate. */
    struct worker *w = c->w;
    uint64_t now = clock_mono_ms();
    if (w->auth_next_ms < now)
        w->auth_next_ms = now;
    w->auth_next_ms += 1000 / CONN_AUTH_RATE;
    uint64_t delay = w->auth_next_ms - now;
    if (delay < CONN_AUTH_DELAY_MS)
        delay = CONN_AUTH_DELAY_MS;
    bool crowded = delay > CONN_AUTH_MAX_WAIT_MS;
    if (crowded) { /* too many at once: answered at the longest wait, and closed after */
        w->auth_next_ms -= 1000 / CONN_AUTH_RATE;
        delay = CONN_AUTH_MAX_WAIT_MS;
        c->auth_failures = CONN_AUTH_MAX_FAILURES;
    }
    log_msg(LOG_WARN, "client %s: AUTH failed (%u of %d)", c->peer, c->auth_failures,
            CONN_AUTH_MAX_FAILURES);
    if (c->ev_auth == NULL)
        c->ev_auth = evtimer_new(c->w->base, on_auth_delay, c);
    struct timeval tv = {.tv_sec = (time_t)(delay / 1000),
                         .tv_usec = (suseconds_t)(delay % 1000) * 1000};
    if (c->ev_auth == NULL || evtimer_add(c->ev_auth, &tv) != 0) {
        result_set(&c->res, RESULT_SERVER_ERROR, "out of memory");
        finish(c);
        return &c->res;
    }
    c->auth = CONN_AUTH_FAILING;
    c->auth_reply = c->spare;
    if (c->auth_failures >= CONN_AUTH_MAX_FAILURES)
        finish(c); /* nothing after this AUTH runs; close once its reply is out */
    park(c);
    return NULL;
}

struct proto_buf *conn_reply_begin(struct conn *c, size_t *mark)
{
    struct proto_buf *b = reply_buf(c);
    *mark = b->len;
    return b;
}

void conn_reply_end(struct conn *c, struct proto_buf *b, size_t mark)
{
    account_held(c, mark, b);
}

/* ---- a replica's stream (server/repl/repl.h) ---- */

/* Makes sure c is pumped at the end of this pass (its output grew from outside a turn). */
static void pump_later(struct conn *c)
{
    if (c->ev_pump == NULL)
        c->ev_pump = event_new(c->w->base, -1, 0, on_pump, c);
    if (c->ev_pump != NULL)
        event_active(c->ev_pump, 0, 0);
}

static bool feed_write(void *conn, const void *p, size_t n)
{
    struct conn *c = conn;
    if (c->cut || c->state != CONN_OPEN)
        return false;
    proto_buf_append(&c->out, (const char *)p, n);
    if (c->out.failed)
        return false;
    pump_later(c);
    return true;
}

static size_t feed_unsent(const void *conn)
{
    return unsent(conn);
}

static void feed_close(void *conn, const char *why)
{
    struct conn *c = conn;
    log_msg(LOG_WARN, "replica %s cut off: %s", c->peer, why);
    c->cut = true;
    pump_later(c);
}

/* ROLE, REPLICAOF, PSYNC and REPLCONF: the replication layer's, answered here. */
static const struct result *repl_execute(struct conn *c, const struct proto_request *req)
{
    struct server *srv = c->w->srv;
    switch (req->cmd) {
    case PROTO_CMD_ROLE:
        repl_role(srv, &c->res);
        break;
    case PROTO_CMD_REPLICAOF:
        repl_replicaof(srv, req, &c->res);
        break;
    case PROTO_CMD_PSYNC: {
        if (c->feed != NULL) {
            result_set(&c->res, RESULT_CLIENT_ERROR, "PSYNC again on a replica's stream");
            break;
        }
        struct repl_sink sink = {
            .conn = c, .write = feed_write, .unsent = feed_unsent, .close = feed_close};
        c->feed = repl_psync(srv, &sink, req, &c->res);
        if (c->feed != NULL)
            log_msg(LOG_INFO, "replica %s connected", c->peer);
        break;
    }
    case PROTO_CMD_REPLCONF:
        if (c->feed != NULL)
            repl_feed_ack(c->feed, req);
        else
            result_set(&c->res, RESULT_CLIENT_ERROR, "REPLCONF without PSYNC");
        if (c->feed != NULL)
            result_set(&c->res, RESULT_NONE, NULL);
        break;
    default:
        result_set(&c->res, RESULT_CLIENT_ERROR, "not a replication command");
        break;
    }
    return &c->res;
}

/* Larger RESTORE data blocks are not skipped but end the connection (no sane client). */
#define CONN_SKIP_MAX ((uint64_t)1 << 50)

/*
 * RESTORE: if the command takes the data block, the next data_len + 2 input bytes go to
 * it and the reply is parked; else its answer is now and the block is discarded as it
 * arrives, so the client's next request is read where it starts.
 */
/* The RESTORE's block can take more input: read and feed again at the end of this pass. */
static void sink_wake(void *owner)
{
    struct conn *c = owner;
    c->sink_wait = false;
    if (c->ev_pump == NULL)
        c->ev_pump = event_new(c->w->base, -1, 0, on_pump, c);
    if (c->ev_pump != NULL) {
        event_active(c->ev_pump, 0, 0);
        return;
    }
    on_pump(-1, 0, c);
}

static const struct result *restore_execute(struct conn *c, const struct proto_request *req)
{
    struct restore *r = restore_begin(c->w->srv, &c->w->stats, req, &c->res, &c->spare->cpl);
    if (r == NULL) {
        conn_skip_block(c, req->data_len);
        return &c->res;
    }
    restore_set_wake(r, sink_wake, c);
    c->sink = r;
    c->sink_left = req->data_len + 2;
    c->sink_p = c->spare;
    park(c);
    return NULL;
}

const struct result *conn_execute(struct conn *c, const struct proto_request *req, const void *ctx,
                                  size_t ctx_len)
{
    struct parked *p = spare(c);
    result_reset(&c->res);
    if (p == NULL) {
        result_set(&c->res, RESULT_SERVER_ERROR, "out of memory");
        return &c->res;
    }
    if (ctx_len > 0) /* for format_parked, if it parks (a failed AUTH does) */
        memcpy(p->ctx, ctx, ctx_len < CONN_CTX_MAX ? ctx_len : CONN_CTX_MAX);
    if (req->cmd == PROTO_CMD_AUTH)
        return auth_execute(c, req);
    if (req->cmd == PROTO_CMD_RESTORE)
        return restore_execute(c, req);
    if (req->cmd >= PROTO_CMD_ROLE)
        return repl_execute(c, req);
    /* done() is never called before commands_execute returns, so parking after is safe. */
    if (commands_execute(c->w->srv, &c->w->stats, req, &c->res, &p->cpl) != CMD_PENDING) {
        if (c->res.status == RESULT_CLOSE)
            finish(c);
        return &c->res;
    }
    park(c);
    return NULL;
}

void *conn_driver_state(struct conn *c)
{
    return c->driver.bytes;
}

void conn_finish(struct conn *c)
{
    finish(c);
}

void conn_skip(struct conn *c, size_t n)
{
    c->skip += n;
}

void conn_skip_block(struct conn *c, uint64_t n)
{
    if (n > CONN_SKIP_MAX)
        finish(c);
    else
        conn_skip(c, (size_t)n + 2);
}

/*
 * Gives RESTORE's data block what buf[0..len) holds of it; once whole, its command goes
 * on (and answers through the parked reply). Returns the bytes taken.
 */
static size_t feed_sink(struct conn *c, const char *buf, size_t len)
{
    size_t want = c->sink_left < len ? (size_t)c->sink_left : len;
    size_t n = restore_feed(c->sink, buf, want);
    c->sink_left -= n;
    c->sink_wait = n < want; /* the rest stays buffered, and reading stops, until woken */
    c->turn_bytes += n / 16; /* a copy, not a parse: counted lightly against the quantum */
    if (c->sink_left == 0) {
        /* Unlike FLUSH or DROP, whose effect is there when they park, a RESTORE installs
         * its filter later: the requests after it wait (unread) until it answers. */
        struct restore *r = c->sink;
        c->barrier = c->sink_p;
        c->sink = NULL;
        c->sink_p = NULL;
        restore_end(r); /* may complete the parked reply at once */
    }
    return n;
}

/* Drops skipped bytes from buf[0..len), feeds a data block, then lets the protocol serve
 * the rest. */
static size_t execute_all(struct conn *c, const char *buf, size_t len)
{
    size_t off = c->skip < len ? c->skip : len;
    c->skip -= off;
    if (c->sink != NULL && off < len)
        off += feed_sink(c, buf + off, len - off);
    if (off == len || !conn_can_execute(c))
        return off;
    return off + c->proto->serve(c, buf + off, len - off);
}

/* Parses what the connection's own buffer holds. Returns true if anything was consumed. */
static bool execute_buffered(struct conn *c)
{
    if (c->in_len == 0)
        return false;
    size_t used = execute_all(c, c->in, c->in_len);
    if (used == 0)
        return false;
    c->in_len -= used;
    memmove(c->in, c->in + used, c->in_len);
    if (c->in_len == 0 && c->in_cap > CONN_MIN_IN) {
        free(c->in); /* held a long line or a backlog: do not keep it */
        c->in = NULL;
        c->in_cap = 0;
    }
    return true;
}

/* Makes room for `more` bytes after in_len. Returns false on allocation failure. */
static bool reserve_in(struct conn *c, size_t more)
{
    if (c->in_cap - c->in_len >= more)
        return true;
    size_t cap = c->in_cap > 0 ? c->in_cap : CONN_MIN_IN;
    while (cap - c->in_len < more)
        cap *= 2;
    char *p = realloc(c->in, cap);
    if (p == NULL)
        return false;
    c->in = p;
    c->in_cap = cap;
    return true;
}

/* Writes as much output as the socket takes. Returns -1 on a socket error. */
static int flush_out(struct conn *c)
{
    while (c->out.len > c->out_sent) {
        ssize_t n = c->io->ops->write(c->io, c->out.data + c->out_sent, c->out.len - c->out_sent);
        if (n == CONN_IO_AGAIN) {
            /* A replica's stream is appended to while its socket is full: the unsent rest
             * moves to the front, so the buffer holds what is unsent, not all since the
             * last time it drained (each regrowth faulted in fresh pages). */
            if (c->feed != NULL && c->out_sent >= c->out.len - c->out_sent) {
                memmove(c->out.data, c->out.data + c->out_sent, c->out.len - c->out_sent);
                c->out.len -= c->out_sent;
                c->out_sent = 0;
            }
            return 0;
        }
        if (n < 0) {
            log_msg(LOG_DEBUG, "write to %s: %s", c->peer, strerror(errno));
            return -1;
        }
        c->out_sent += (size_t)n;
        c->w->stats.bytes_written += (uint64_t)n;
    }
    /* A replica's stream refills it every pass: freed each time, each new one was a fresh
     * mapping, a page fault per 4 KiB of the stream. */
    if (c->out.cap > (c->feed != NULL ? CONN_KEEP_FEED : CONN_KEEP_OUT)) {
        proto_buf_free(&c->out);
        memset(&c->out, 0, sizeof(c->out));
    } else {
        proto_buf_reset(&c->out);
    }
    c->out_sent = 0;
    return 0;
}

/* ---- memory ---- */

/* Bytes c holds now: itself, its buffers' capacities, held replies, parked requests. */
static size_t holding(const struct conn *c)
{
    size_t n = sizeof *c + c->in_cap + c->out.cap + c->held + c->nparked * sizeof(struct parked) +
               c->io->ops->held(c->io);
    return c->spare != NULL ? n + sizeof *c->spare : n;
}

/* Brings the budget's count of c up to date (a change of capacity, not per byte). */
static void account(struct conn *c)
{
    struct budget *b = &c->w->srv->budget;
    size_t now = holding(c);
    if (now > c->charged)
        budget_charge(b, BUDGET_CONNECTIONS, now - c->charged);
    else if (now < c->charged)
        budget_release(b, BUDGET_CONNECTIONS, c->charged - now);
    if ((now >= CONN_SHED_MIN) != (c->charged >= CONN_SHED_MIN)) {
        if (now >= CONN_SHED_MIN)
            c->w->conns_big++;
        else
            c->w->conns_big--;
    }
    c->charged = now;
}

/* Closes v for holding the most while the budget is exceeded; it is told why (best effort). */
static void shed_one(struct conn *v)
{
    log_msg(LOG_WARN, "client %s holds %zu bytes of buffers with max_memory exceeded, closing",
            v->peer, v->charged);
    v->w->stats.conn_shed++;
    free(v->in);
    v->in = NULL;
    v->in_len = v->in_cap = 0;
    proto_buf_free(&v->out);
    memset(&v->out, 0, sizeof v->out);
    v->out_sent = 0;
    if (v->io->ops->write(v->io, CONN_SHED_REPLY, sizeof CONN_SHED_REPLY - 1) == -1)
        log_msg(LOG_DEBUG, "write to %s: %s", v->peer, strerror(errno));
    account(v);
    conn_close(v);
}

/*
 * While the budget is over its limit, closes the connection of self's worker holding the
 * most (at least CONN_SHED_MIN bytes: idle clients are never shed). May free self.
 */
static void shed(struct conn *self)
{
    struct worker *w = self->w;
    /* conns_big: over the budget with only small clients (filters fill it) costs no scan. */
    while (w->conns_big > 0 && budget_over(&w->srv->budget)) {
        struct conn *v = NULL;
        for (struct conn *x = w->conns; x != NULL; x = x->next)
            if (x->state < CONN_LINGERING && x->charged >= CONN_SHED_MIN &&
                (v == NULL || x->charged > v->charged))
                v = x;
        if (v == NULL)
            return;
        shed_one(v);
    }
}

/*
 * Brings the connection up to date after any event: runs buffered requests that output
 * room and its quantum allow, writes, chooses which events to wait for (or the backlog),
 * and counts its memory. May free c.
 */
static void pump(struct conn *c)
{
    const struct config *cfg = &c->w->srv->cfg;
    assert(c->state != CONN_OWED); /* on_pump keeps it waiting */
    bool lingering = c->state == CONN_LINGERING;
    for (;;) {
        bool progress = !lingering && execute_buffered(c);
        bool blocked = !has_room(c) && accepting(c); /* parsing waits for room */
        if (c->out.failed) {
            log_msg(LOG_ERROR, "client %s: out of memory for replies, closing", c->peer);
            c->out.failed = false;
            conn_close(c);
            return;
        }
        if (!lingering && flush_out(c) < 0) {
            conn_close(c);
            return;
        }
        /* A reply's data block: more chunks while the socket takes them, a few per pump. */
        for (int i = 0; !lingering && i < CONN_BODY_PULLS && c->out.len == c->out_sent; i++) {
            long got = stream_body(c);
            if (got < 0 || (got > 0 && flush_out(c) < 0)) {
                conn_close(c);
                return;
            }
            if (got == 0)
                break;
        }
        if (c->feed != NULL && unsent(c) < CONN_FEED_LOW)
            repl_feed_drained(c->feed); /* more of its stream, if any: appends to out */
        /*
         * Go round again while requests may still be waiting in the buffer: after
         * progress, or when the write just made room for parsing that was blocked.
         */
        if ((!progress && !blocked) || !conn_can_execute(c))
            break;
    }
    /* Input left after a whole quantum waits, unread, for the backlog's next turn. */
    bool backlog =
        accepting(c) && (c->read_wait || (c->in_len > 0 && has_room(c) && !quantum_left(c)));
    if (c->turn_open)
        c->heavy = quantum_spent(c) || c->in_len > WORKER_RBUF / 2;
    bool waiting = c->parked != NULL;
    /* After EOF, once nothing executable is left (an unfinished line is dropped). */
    if (c->state == CONN_DRAINING && !backlog && has_room(c))
        set_state(c, CONN_CLOSING);
    if ((c->state == CONN_FINISHING || c->state == CONN_CLOSING) && unsent(c) == 0 && !waiting) {
        if (c->state == CONN_CLOSING) {
            conn_close(c);
            return;
        }
        /*
         * Half-close and keep reading (discarding) until the peer closes: closing with
         * unread input would send a reset that can destroy our last reply in flight.
         */
        c->io->ops->shutdown(c->io);
        set_state(c, CONN_LINGERING);
        lingering = true;
        free(c->in);
        c->in = NULL;
        c->in_len = c->in_cap = 0;
        set_event(c, CONN_IO_READ, false, 0);
    }
    bool streaming = c->parked != NULL && c->parked->done && c->parked->body != NULL;
    bool want_write =
        (c->out.len > c->out_sent || (streaming && c->parked->body_ready)) && !lingering;
    bool want_read =
        lingering || (c->state == CONN_OPEN && has_room(c) && !backlog && !c->sink_wait);
    unsigned idle = cfg->idle_timeout;
    /* A client waiting for a parked answer is not idle: no read timeout meanwhile (but one
     * sending a RESTORE block is only waited for while it sends). */
    unsigned read_timeout = lingering ? CONN_CLOSE_SECONDS : waiting && c->sink == NULL ? 0 : idle;
    set_event(c, CONN_IO_WRITE, want_write, accepting(c) ? idle : CONN_CLOSE_SECONDS);
    set_event(c, CONN_IO_READ, want_read, read_timeout);
    set_backlog(c, backlog);
    account(c);
    if (budget_over(&c->w->srv->budget))
        shed(c); /* may free c */
}

/* A read event of c: reads once and executes a quantum. May free c. */
static void read_turn(struct conn *c, bool timed_out)
{
    struct worker *w = c->w;
    const struct config *cfg = &w->srv->cfg;
    if (timed_out) {
        if (c->state != CONN_LINGERING)
            log_msg(LOG_INFO, "client %s idle for %u s, closing", c->peer, cfg->idle_timeout);
        conn_close(c);
        return;
    }
    if (c->state == CONN_LINGERING) {
        ssize_t n = c->io->ops->read(c->io, w->rbuf, WORKER_RBUF);
        if (n == 0 || n == -1)
            conn_close(c);
        return;
    }
    /*
     * Usually the unfinished tail (a part of one line) is copied in front of the shared
     * buffer and the read goes after it. Only a line longer than half the shared buffer
     * grows in the connection's own buffer, up to max_line.
     */
    bool shared = c->in_len <= WORKER_RBUF / 2;
    char *dst = w->rbuf + c->in_len;
    size_t room = WORKER_RBUF - c->in_len;
    if (shared) {
        if (c->in_len > 0)
            memcpy(w->rbuf, c->in, c->in_len);
    } else {
        size_t want = c->in_len < cfg->max_line ? cfg->max_line - c->in_len : 1;
        if (want > WORKER_RBUF)
            want = WORKER_RBUF;
        if (!reserve_in(c, want)) {
            log_msg(LOG_ERROR, "client %s: out of memory for input, closing", c->peer);
            conn_close(c);
            return;
        }
        dst = c->in + c->in_len;
        room = c->in_cap - c->in_len;
    }
    ssize_t n = c->io->ops->read(c->io, dst, room);
    if (n == CONN_IO_AGAIN)
        return;
    if (n < 0) {
        log_msg(LOG_DEBUG, "read from %s: %s", c->peer, strerror(errno));
        conn_close(c);
        return;
    }
    if (n == 0) {
        /* The peer finished sending: answer what it sent (pump), then close. */
        set_state(c, CONN_DRAINING);
        if (c->in_len < c->sink_left) /* what is buffered cannot finish the block */
            end_sink(c);
        pump(c);
        return;
    }
    w->stats.bytes_read += (uint64_t)n;
    if (!shared) {
        c->in_len += (size_t)n;
        /*
         * Reading is on only while the buffer holds nothing but one unfinished line, so
         * without a newline in the new bytes there is nothing to parse yet: re-scanning
         * the whole line on every read would cost O(line) per read to a trickling client.
         */
        if (memchr(dst, '\n', (size_t)n) == NULL && c->in_len < cfg->max_line) {
            account(c);
            if (budget_over(&w->srv->budget))
                shed(c); /* may free c */
            return;
        }
    } else {
        size_t total = c->in_len + (size_t)n;
        c->in_len = 0;
        if (c->in_cap > CONN_MIN_IN) {
            free(c->in); /* it held a long tail; a new one gets a fitting buffer */
            c->in = NULL;
            c->in_cap = 0;
        }
        size_t used = execute_all(c, w->rbuf, total);
        size_t left = total - used;
        if (left > 0 && accepting(c)) {
            if (!reserve_in(c, left)) {
                log_msg(LOG_ERROR, "client %s: out of memory for input, closing", c->peer);
                conn_close(c);
                return;
            }
            memcpy(c->in, w->rbuf + used, left);
            c->in_len = left;
        }
    }
    pump(c);
}

static void on_read(void *arg, bool timed_out)
{
    struct conn *c = arg;
    struct fair *q = &c->w->fair;
    uint64_t t0 = fair_enter(q);
    if (c->heavy && c->state != CONN_LINGERING && !timed_out) {
        c->read_wait = true; /* read in the backlog's turn: the round bounds heavy work */
        set_event(c, CONN_IO_READ, false, 0);
        set_backlog(c, true);
    } else {
        turn_begin(c);
        read_turn(c, timed_out);
    }
    fair_exit(q, t0);
}

static void on_write(void *arg, bool timed_out)
{
    struct conn *c = arg;
    struct fair *q = &c->w->fair;
    uint64_t t0 = fair_enter(q);
    if (timed_out) {
        log_msg(LOG_INFO, "client %s has not read its replies, closing", c->peer);
        conn_close(c);
    } else {
        turn_begin(c);
        pump(c);
    }
    fair_exit(q, t0);
}

void conn_close_all(struct worker *w)
{
    while (w->conns != NULL)
        conn_free(w->conns);
}
