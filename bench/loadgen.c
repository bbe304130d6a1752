/*
 * loadgen.c - closed-loop load generator for bloomd, Redis (SADD, or RedisBloom's BF.MADD and
 * BF.ADD: bloomd's --redis-port too) and memcached (add).
 * One epoll thread drives N pipelined connections with a deterministic dedup workload:
 * distinct keys plus a fraction of repeats. Each connection owns its own keys, so every
 * expected answer is known; every reply is checked. Reports throughput, latency
 * percentiles and false positives as one `result k=v ...` line plus a human `#` line.
 * --tls speaks TLS (OpenSSL, non-blocking) on every connection; the plain path is unchanged.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum proto_kind { P_BLOOMD, P_REDIS, P_MEMCACHED };
enum cmd_kind { C_CHECKADD, C_ADD, C_CHECK, C_SADD, C_MCADD, C_BFMADD, C_BFADD };

/* Options, filled by parse_args(); see usage(). */
struct opts {
    enum proto_kind proto;
    enum cmd_kind cmd;
    const char *host;
    const char *port;
    int conns;
    int depth;     /* requests in flight per connection */
    int batch;     /* keys per request */
    uint64_t keys; /* distinct keys */
    int key_len;
    double repeat; /* fraction of operations that repeat an earlier key */
    uint64_t seed;
    uint64_t first;     /* first key index */
    uint64_t present;   /* key indices below this were added by an earlier run */
    uint64_t max_ops;   /* 0: no bound beyond keys */
    double duration;    /* seconds; stop sending after this */
    double timeout;     /* seconds without a reply while one is due: failure */
    const char *name;   /* bloomd filter / Redis set */
    const char *create; /* bloomd: CREATE options, NULL for none */
    bool approximate;   /* memcached/redis protocol served by a Bloom filter: false
                           positives are allowed (bloomd's memcached listener) */
    bool tls;           /* TLS on every connection, server certificate not verified */
};

static struct opts g_opt;

/* ---- time and latency histogram ---- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Log-bucketed: 16 sub-buckets per power of two, so a bucket is within ~6% of its value. */
#define HIST_SUB_BITS 4
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_BUCKETS (64 * HIST_SUB)

static uint64_t g_hist[HIST_BUCKETS];
static uint64_t g_hist_max;

static unsigned hist_index(uint64_t v)
{
    if (v < HIST_SUB)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v);
    return (e - HIST_SUB_BITS + 1) * HIST_SUB +
           (unsigned)((v >> (e - HIST_SUB_BITS)) & (HIST_SUB - 1));
}

/* Middle of bucket i, in ns. */
static double hist_value(unsigned i)
{
    if (i < HIST_SUB)
        return i;
    unsigned e = i / HIST_SUB - 1 + HIST_SUB_BITS;
    uint64_t lo = ((uint64_t)HIST_SUB + i % HIST_SUB) << (e - HIST_SUB_BITS);
    uint64_t width = (uint64_t)1 << (e - HIST_SUB_BITS);
    return (double)lo + (double)width / 2;
}

static void hist_add(uint64_t v)
{
    g_hist[hist_index(v)]++;
    if (v > g_hist_max)
        g_hist_max = v;
}

/* The q-quantile (0 < q <= 1) in microseconds, 0 if the histogram is empty. */
static double hist_quantile_us(uint64_t total, double q)
{
    if (total == 0)
        return 0;
    uint64_t rank = (uint64_t)ceil(q * (double)total), seen = 0;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        seen += g_hist[i];
        if (seen >= rank && g_hist[i] > 0)
            return fmin(hist_value(i), (double)g_hist_max) / 1000;
    }
    return (double)g_hist_max / 1000;
}

/* ---- keys ---- */

/*
 * Key index -> key bytes, a bijection: the index is permuted within b = min(64, 6*len)
 * bits (add, xorshift and odd multiply are all bijective mod 2^b), its low bits are
 * written as up to 11 base-64 characters at the end, and any longer prefix is a hash of
 * the permuted value. Distinct indices below 2^b therefore give distinct keys.
 */
static const char g_alphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_";
static unsigned g_key_bits;
static uint64_t g_key_mask;

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static void make_key(uint64_t index, char *out)
{
    unsigned b = g_key_bits, s = (b + 1) / 2;
    uint64_t m = g_key_mask, x = (index + g_opt.seed * 0x9e3779b97f4a7c15u) & m;
    x ^= x >> s;
    x = (x * 0xbf58476d1ce4e5b9u) & m;
    x ^= x >> s;
    x = (x * 0x94d049bb133111ebu) & m;
    x ^= x >> s;
    int len = g_opt.key_len, tail = len < 11 ? len : 11;
    uint64_t v = x;
    for (int i = len - 1; i >= len - tail; i--, v >>= 6)
        out[i] = g_alphabet[v & 63];
    uint64_t st = x, h = 0;
    for (int i = 0; i < len - tail; i++) {
        if (i % 10 == 0)
            h = splitmix64(&st);
        out[i] = g_alphabet[h & 63];
        h >>= 6;
    }
}

/* ---- connections ---- */

struct req {
    uint64_t sent_ns; /* when the request was queued */
    uint32_t nkeys;   /* keys in the request */
    uint32_t nseen;   /* keys expected "seen" (for count replies) */
};

struct conn {
    int id;
    int fd;
    uint64_t rng;       /* picks which earlier key a repeat repeats */
    uint64_t ops_gen;   /* operations generated */
    uint64_t new_sent;  /* distinct keys generated: j in index = first + id + conns*j */
    uint64_t new_total; /* distinct keys this connection owns */
    bool done_sending;  /* nothing more to generate */
    bool want_out;      /* EPOLLOUT registered */
    SSL *ssl;           /* NULL: plain TCP */
    bool rd_wants_out;  /* TLS: the last read needs the socket writable */
    bool wr_wants_in;   /* TLS: the last write needs the socket readable */
    struct req *ring;   /* in-flight requests, oldest at head */
    uint8_t *expect;    /* per ring slot, batch expected answers (1 = seen) */
    uint64_t *index;    /* per ring slot, batch key indices (for messages) */
    size_t head, inflight;
    char *wbuf;
    size_t woff, wlen, wcap;
    char *rbuf;
    size_t rlen, rcap;
    uint64_t wait_since; /* last progress while a reply is due */
    uint32_t elems_left; /* BF.MADD: integers of the current array reply still to come */
    uint32_t elem;       /* BF.MADD: the next one's position in its request */
};

static struct conn *g_conns;
static int g_ep = -1;

/* Totals. */
static uint64_t g_ops_gen, g_ops_done, g_reqs_done, g_expected_new, g_fp, g_fn;
static uint64_t g_start_ns, g_last_reply_ns;

static _Noreturn void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("loadgen: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void *xmalloc(size_t n)
{
    void *p = calloc(1, n);
    if (!p)
        die("out of memory (%zu bytes)", n);
    return p;
}

/* Picks the next operation; false when the connection has nothing more to send. */
static bool next_op(struct conn *c, uint64_t *index, uint8_t *seen)
{
    if (c->new_sent == c->new_total || (g_opt.max_ops && g_ops_gen >= g_opt.max_ops))
        return false;
    uint64_t k = c->ops_gen++;
    double r = g_opt.repeat;
    /* Exactly a `repeat` fraction of each connection's operations are repeats. */
    bool rep = c->new_sent > 0 && (uint64_t)((double)(k + 1) * r) > (uint64_t)((double)k * r);
    uint64_t j = rep ? splitmix64(&c->rng) % c->new_sent : c->new_sent++;
    *index = g_opt.first + (uint64_t)c->id + (uint64_t)g_opt.conns * j;
    bool pre = *index < g_opt.present;
    *seen = g_opt.cmd == C_CHECK ? pre : (rep || pre);
    g_ops_gen++;
    return true;
}

static char *put_str(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

static char *put_u64(char *p, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

static size_t max_request_bytes(void)
{
    return 64 + strlen(g_opt.name) + (size_t)g_opt.batch * ((size_t)g_opt.key_len + 32);
}

/* Appends one request to c->wbuf; false if there was nothing left to send. */
static bool gen_request(struct conn *c, uint64_t now)
{
    size_t slot = (c->head + c->inflight) % (size_t)g_opt.depth;
    uint8_t *exp = c->expect + slot * (size_t)g_opt.batch;
    uint64_t *idx = c->index + slot * (size_t)g_opt.batch;
    uint32_t n = 0, nseen = 0;
    while (n < (uint32_t)g_opt.batch && next_op(c, &idx[n], &exp[n]))
        nseen += exp[n++];
    if (n == 0)
        return false;

    if (c->woff > 0 && c->woff == c->wlen)
        c->woff = c->wlen = 0;
    if (c->wcap - c->wlen < max_request_bytes()) {
        memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
        c->wlen -= c->woff;
        c->woff = 0;
    }
    char *p = c->wbuf + c->wlen;
    size_t klen = (size_t)g_opt.key_len, nlen = strlen(g_opt.name);
    switch (g_opt.proto) {
    case P_BLOOMD: {
        static const char *const words[] = {
            [C_CHECKADD] = "CHECKADD ", [C_ADD] = "ADD ", [C_CHECK] = "CHECK "};
        const char *w = words[g_opt.cmd];
        p = put_str(p, w, strlen(w));
        p = put_str(p, g_opt.name, nlen);
        for (uint32_t i = 0; i < n; i++) {
            *p++ = ' ';
            make_key(idx[i], p);
            p += klen;
        }
        p = put_str(p, "\r\n", 2);
        break;
    }
    case P_REDIS: {
        const char *w = g_opt.cmd == C_BFMADD  ? "BF.MADD"
                        : g_opt.cmd == C_BFADD ? "BF.ADD"
                                               : "SADD";
        *p++ = '*';
        p = put_u64(p, n + 2);
        p = put_str(p, "\r\n$", 3);
        p = put_u64(p, strlen(w));
        p = put_str(p, "\r\n", 2);
        p = put_str(p, w, strlen(w));
        p = put_str(p, "\r\n$", 3);
        p = put_u64(p, nlen);
        p = put_str(p, "\r\n", 2);
        p = put_str(p, g_opt.name, nlen);
        p = put_str(p, "\r\n", 2);
        for (uint32_t i = 0; i < n; i++) {
            *p++ = '$';
            p = put_u64(p, klen);
            p = put_str(p, "\r\n", 2);
            make_key(idx[i], p);
            p += klen;
            p = put_str(p, "\r\n", 2);
        }
        break;
    }
    case P_MEMCACHED:
        p = put_str(p, "add ", 4);
        make_key(idx[0], p);
        p += klen;
        p = put_str(p, " 0 0 1\r\nx\r\n", 11);
        break;
    }
    c->wlen = (size_t)(p - c->wbuf);
    c->ring[slot] = (struct req){.sent_ns = now, .nkeys = n, .nseen = nseen};
    if (c->inflight == 0)
        c->wait_since = now;
    c->inflight++;
    return true;
}

static void set_out(struct conn *c, bool on)
{
    if (c->want_out == on)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(g_ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        die("epoll_ctl: %s", strerror(errno));
    c->want_out = on;
}

/* ---- TLS: SSL_read/SSL_write with read(2)/write(2) semantics ---- */

static SSL_CTX *g_tls_ctx;

static _Noreturn void die_tls(const struct conn *c, const char *what, int err)
{
    unsigned long e = ERR_get_error();
    if (err == SSL_ERROR_SYSCALL && e == 0)
        die("conn %d: %s: %s", c->id, what, errno ? strerror(errno) : "unexpected EOF");
    die("conn %d: %s: %s", c->id, what, e ? ERR_error_string(e, NULL) : "TLS error");
}

/* > 0 bytes, 0 EOF, -1 with errno EAGAIN (rd_wants_out says for which readiness). */
static ssize_t tls_read(struct conn *c, void *buf, size_t n)
{
    int r = SSL_read(c->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n);
    c->rd_wants_out = false;
    if (r > 0)
        return r;
    int err = SSL_get_error(c->ssl, r);
    if (err == SSL_ERROR_ZERO_RETURN)
        return 0;
    if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE)
        die_tls(c, "read", err);
    c->rd_wants_out = err == SSL_ERROR_WANT_WRITE;
    errno = EAGAIN;
    return -1;
}

/* > 0 bytes, -1 with errno EAGAIN (wr_wants_in says for which readiness). */
static ssize_t tls_write(struct conn *c, const void *buf, size_t n)
{
    int r = SSL_write(c->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n);
    c->wr_wants_in = false;
    if (r > 0)
        return r;
    int err = SSL_get_error(c->ssl, r);
    if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE)
        die_tls(c, "write", err);
    c->wr_wants_in = err == SSL_ERROR_WANT_READ;
    errno = EAGAIN;
    return -1;
}

/* The connection's transport: TLS or the plain socket; as read(2) and write(2). */
static ssize_t conn_read(struct conn *c, void *buf, size_t n)
{
    return c->ssl ? tls_read(c, buf, n) : read(c->fd, buf, n);
}

static ssize_t conn_write(struct conn *c, const void *buf, size_t n)
{
    return c->ssl ? tls_write(c, buf, n) : write(c->fd, buf, n);
}

static void tls_init(void)
{
    g_tls_ctx = SSL_CTX_new(TLS_client_method());
    if (!g_tls_ctx)
        die("TLS: %s", ERR_error_string(ERR_get_error(), NULL));
    /* A loopback benchmark against a self-signed certificate: no verification. */
    SSL_CTX_set_verify(g_tls_ctx, SSL_VERIFY_NONE, NULL);
    SSL_CTX_set_mode(g_tls_ctx,
                     SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    SSL_CTX_set_options(g_tls_ctx, SSL_OP_IGNORE_UNEXPECTED_EOF); /* a close is an EOF */
#endif
}

/* Waits until c's socket is ready for `events`; false if `deadline` passed first. */
static bool wait_ready(const struct conn *c, short events, uint64_t deadline)
{
    for (;;) {
        uint64_t now = now_ns();
        if (now >= deadline)
            return false;
        struct pollfd pfd = {.fd = c->fd, .events = events};
        int r = poll(&pfd, 1, (int)((deadline - now) / 1000000 + 1));
        if (r > 0)
            return true;
        if (r < 0 && errno != EINTR)
            die("poll: %s", strerror(errno));
    }
}

/* The handshake on c's non-blocking socket, before the clock starts; bounded by --timeout. */
static void tls_connect(struct conn *c)
{
    c->ssl = SSL_new(g_tls_ctx);
    if (!c->ssl || !SSL_set_fd(c->ssl, c->fd))
        die("TLS: %s", ERR_error_string(ERR_get_error(), NULL));
    uint64_t deadline = now_ns() + (uint64_t)(g_opt.timeout * 1e9);
    int r;
    while ((r = SSL_connect(c->ssl)) != 1) {
        int err = SSL_get_error(c->ssl, r);
        if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE)
            die_tls(c, "TLS handshake", err);
        if (!wait_ready(c, err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline))
            die("conn %d: TLS handshake: no reply within %.1fs", c->id, g_opt.timeout);
    }
}

/* ---- sending ---- */

static void flush_out(struct conn *c)
{
    while (c->woff < c->wlen) {
        ssize_t w = conn_write(c, c->wbuf + c->woff, c->wlen - c->woff);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            if (errno == EINTR)
                continue;
            if (errno == EPIPE || errno == ECONNRESET)
                die("conn %d: server closed the connection (write: %s)", c->id, strerror(errno));
            die("conn %d: write: %s", c->id, strerror(errno));
        }
        c->woff += (size_t)w;
    }
    /* A TLS write waiting for input retries on the next EPOLLIN (always registered). */
    set_out(c, (c->woff < c->wlen && !c->wr_wants_in) || c->rd_wants_out);
}

/* Tops the pipeline up to depth requests unless the time bound has passed. */
static void fill(struct conn *c, uint64_t now, uint64_t deadline)
{
    if (now >= deadline)
        c->done_sending = true;
    while (!c->done_sending && c->inflight < (size_t)g_opt.depth)
        if (!gen_request(c, now))
            c->done_sending = true;
}

static void key_str(uint64_t index, char *out)
{
    make_key(index, out);
    out[g_opt.key_len] = '\0';
}

/* Records the answer for key i of a request: got_seen against exp (1 = seen). */
static void answer(struct conn *c, const uint64_t *idx, size_t i, uint8_t exp, bool got_seen)
{
    if (exp && !got_seen) {
        if (g_fn++ < 5) {
            char k[1024];
            key_str(idx[i], k);
            fprintf(stderr, "loadgen: conn %d: FALSE NEGATIVE: key %s (index %llu) reported new\n",
                    c->id, k, (unsigned long long)idx[i]);
        }
    } else if (!exp && got_seen) {
        g_fp++;
    }
}

static _Noreturn void bad_reply(struct conn *c, const char *line, size_t len, const char *why)
{
    die("conn %d: %s: \"%.*s\"", c->id, why, (int)(len > 200 ? 200 : len), line);
}

/* Checks one reply line (without its \r\n) against the oldest in-flight request; true when
 * the line completed its reply (a BF.MADD reply is an array: a header, then a line per key). */
static bool check_reply(struct conn *c, const char *line, size_t len)
{
    if (c->inflight == 0)
        bad_reply(c, line, len, "reply with no request in flight");
    size_t slot = c->head;
    struct req *r = &c->ring[slot];
    const uint8_t *exp = c->expect + slot * (size_t)g_opt.batch;
    const uint64_t *idx = c->index + slot * (size_t)g_opt.batch;
    uint32_t exp_new = r->nkeys - r->nseen;

    switch (g_opt.cmd) {
    case C_CHECKADD:
    case C_CHECK:
        /* "b b b ...": exactly nkeys digits 0/1 separated by single spaces. */
        if (len != 2 * (size_t)r->nkeys - 1)
            bad_reply(c, line, len, "bad CHECK reply (wrong length)");
        for (uint32_t i = 0; i < r->nkeys; i++) {
            char d = line[2 * i];
            if ((d != '0' && d != '1') || (i + 1 < r->nkeys && line[2 * i + 1] != ' '))
                bad_reply(c, line, len, "bad CHECK reply");
            answer(c, idx, i, exp[i], d == '1');
        }
        break;
    case C_ADD:
    case C_SADD: {
        /* A count of new keys: ADDED <n> / :<n>. */
        const char *p = line, *end = line + len;
        size_t plen = g_opt.cmd == C_ADD ? 6 : 1;
        if (len <= plen || memcmp(line, g_opt.cmd == C_ADD ? "ADDED " : ":", plen) != 0)
            bad_reply(c, line, len, "bad count reply");
        uint64_t got = 0;
        for (p += plen; p < end; p++) {
            if (*p < '0' || *p > '9' || got > r->nkeys)
                bad_reply(c, line, len, "bad count reply");
            got = got * 10 + (uint64_t)(*p - '0');
        }
        if (got > exp_new) {
            /* More new keys than possible: some expected-seen key came back new. */
            if (g_fn < 5)
                fprintf(stderr, "loadgen: conn %d: FALSE NEGATIVE: %llu new, expected <= %u\n",
                        c->id, (unsigned long long)got, exp_new);
            g_fn += got - exp_new;
            if (got > r->nkeys)
                bad_reply(c, line, len, "count above keys sent");
        } else {
            g_fp += exp_new - got;
        }
        break;
    }
    case C_BFMADD:
        if (c->elems_left == 0) { /* "*<n>": n must be the keys sent */
            uint64_t got = 0;
            if (len < 2 || line[0] != '*')
                bad_reply(c, line, len, "bad BF.MADD reply (not an array)");
            for (size_t i = 1; i < len; i++) {
                if (line[i] < '0' || line[i] > '9' || got > r->nkeys)
                    bad_reply(c, line, len, "bad BF.MADD array length");
                got = got * 10 + (uint64_t)(line[i] - '0');
            }
            if (got != r->nkeys)
                bad_reply(c, line, len, "BF.MADD array length is not the keys sent");
            c->elems_left = r->nkeys;
            c->elem = 0;
            return false;
        }
        if (len != 2 || line[0] != ':' || (line[1] != '0' && line[1] != '1'))
            bad_reply(c, line, len, "bad BF.MADD element");
        answer(c, idx, c->elem, exp[c->elem], line[1] == '0'); /* 1: new */
        c->elem++;
        if (--c->elems_left > 0)
            return false;
        break;
    case C_BFADD:
        if (len != 2 || line[0] != ':' || (line[1] != '0' && line[1] != '1'))
            bad_reply(c, line, len, "bad BF.ADD reply");
        answer(c, idx, 0, exp[0], line[1] == '0');
        break;
    case C_MCADD:
        if (len == 6 && memcmp(line, "STORED", 6) == 0)
            answer(c, idx, 0, exp[0], false);
        else if (len == 10 && memcmp(line, "NOT_STORED", 10) == 0)
            answer(c, idx, 0, exp[0], true);
        else
            bad_reply(c, line, len, "bad memcached reply");
        break;
    }
    g_expected_new += exp_new;
    g_ops_done += r->nkeys;
    g_reqs_done++;
    c->head = (c->head + 1) % (size_t)g_opt.depth;
    c->inflight--;
    return true;
}

/* Reads what is available and checks every complete reply; false on EOF. */
static bool read_in(struct conn *c)
{
    if (c->rcap - c->rlen < 4096) {
        c->rcap *= 2;
        c->rbuf = realloc(c->rbuf, c->rcap);
        if (!c->rbuf)
            die("out of memory");
    }
    ssize_t n = conn_read(c, c->rbuf + c->rlen, c->rcap - c->rlen);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return true;
        die("conn %d: read: %s", c->id, strerror(errno));
    }
    if (n == 0)
        return false;
    uint64_t now = now_ns();
    c->rlen += (size_t)n;
    size_t off = 0;
    for (;;) {
        char *nl = memchr(c->rbuf + off, '\n', c->rlen - off);
        if (!nl)
            break;
        size_t end = (size_t)(nl - c->rbuf);
        if (end == off || nl[-1] != '\r')
            bad_reply(c, c->rbuf + off, end - off, "reply line not ended by \\r\\n");
        uint64_t sent = c->inflight ? c->ring[c->head].sent_ns : now;
        if (check_reply(c, c->rbuf + off, end - 1 - off))
            hist_add(now - sent);
        off = end + 1;
        /* A BF.MADD array's elements, 4 bytes each, without a line scan apiece. */
        while (c->elems_left > 1 && c->rlen - off >= 4 && c->rbuf[off] == ':' &&
               c->rbuf[off + 2] == '\r' && c->rbuf[off + 3] == '\n') {
            check_reply(c, c->rbuf + off, 2); /* not the last: never completes the reply */
            off += 4;
        }
    }
    if (off > 0) {
        memmove(c->rbuf, c->rbuf + off, c->rlen - off);
        c->rlen -= off;
        c->wait_since = now;
        g_last_reply_ns = now;
    }
    /* Bytes already inside OpenSSL raise no epoll event: read them now. */
    if (c->ssl && SSL_has_pending(c->ssl))
        return read_in(c);
    return true;
}

/* Connects (blocking), with TCP_NODELAY; the caller makes the socket non-blocking. */
static int dial(void)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
    int rc = getaddrinfo(g_opt.host, g_opt.port, &hints, &res);
    if (rc != 0)
        die("%s:%s: %s", g_opt.host, g_opt.port, gai_strerror(rc));
    int fd = -1;
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        die("connect %s:%s: %s", g_opt.host, g_opt.port, strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/*
 * bloomd: CREATE the filter on c's non-blocking socket, waiting with poll(2); anything but
 * CREATED, or no reply within --timeout, fails the run.
 */
static void create_filter(struct conn *c)
{
    char buf[1024];
    int n = snprintf(buf, sizeof(buf), "CREATE %s %s\r\n", g_opt.name, g_opt.create);
    if (n < 0 || (size_t)n >= sizeof(buf))
        die("--create options too long");
    uint64_t deadline = now_ns() + (uint64_t)(g_opt.timeout * 1e9);
    for (size_t off = 0; off < (size_t)n;) {
        ssize_t w = conn_write(c, buf + off, (size_t)n - off);
        if (w > 0)
            off += (size_t)w;
        else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            die("CREATE: write: %s", strerror(errno));
        else if (!wait_ready(c, c->wr_wants_in ? POLLIN : POLLOUT, deadline))
            die("CREATE: write: no progress within %.1fs", g_opt.timeout);
    }
    size_t got = 0;
    while (got < sizeof(buf) - 1 && !memchr(buf, '\n', got)) {
        ssize_t r = conn_read(c, buf + got, sizeof(buf) - 1 - got);
        if (r == 0)
            die("CREATE: server closed the connection without a reply");
        if (r > 0)
            got += (size_t)r;
        else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            die("CREATE: read: %s", strerror(errno));
        else if (!wait_ready(c, c->rd_wants_out ? POLLOUT : POLLIN, deadline))
            die("CREATE: no reply within %.1fs", g_opt.timeout);
    }
    buf[got] = '\0';
    if (strcmp(buf, "CREATED\r\n") != 0)
        die("CREATE %s %s: %s", g_opt.name, g_opt.create, buf);
}

static void setup(void)
{
    g_key_bits = g_opt.key_len >= 11 ? 64 : 6u * (unsigned)g_opt.key_len;
    g_key_mask = g_key_bits == 64 ? UINT64_MAX : ((uint64_t)1 << g_key_bits) - 1;
    if (g_key_bits < 64 && g_opt.first + g_opt.keys > ((uint64_t)1 << g_key_bits))
        die("--key-len %d too short for %llu distinct keys", g_opt.key_len,
            (unsigned long long)(g_opt.first + g_opt.keys));

    if (g_opt.tls)
        tls_init();
    g_ep = epoll_create1(EPOLL_CLOEXEC);
    if (g_ep < 0)
        die("epoll_create1: %s", strerror(errno));
    g_conns = xmalloc(sizeof(*g_conns) * (size_t)g_opt.conns);
    size_t depth = (size_t)g_opt.depth, batch = (size_t)g_opt.batch;
    for (int i = 0; i < g_opt.conns; i++) {
        struct conn *c = &g_conns[i];
        c->id = i;
        c->fd = dial();
        if (fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) < 0)
            die("non-blocking: %s", strerror(errno));
        if (g_opt.tls)
            tls_connect(c);
        if (i == 0 && g_opt.create)
            create_filter(c);
        c->rng = g_opt.seed * 0x2545f4914f6cdd1du + (uint64_t)i;
        c->new_total =
            g_opt.keys / (uint64_t)g_opt.conns + ((uint64_t)i < g_opt.keys % (uint64_t)g_opt.conns);
        c->ring = xmalloc(sizeof(*c->ring) * depth);
        c->expect = xmalloc(depth * batch);
        c->index = xmalloc(sizeof(*c->index) * depth * batch);
        c->wcap = 2 * depth * max_request_bytes();
        c->wbuf = xmalloc(c->wcap);
        c->rcap = 65536 + 4 * batch;
        c->rbuf = xmalloc(c->rcap);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(g_ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
            die("epoll_ctl: %s", strerror(errno));
    }
}

/* The event loop: returns when every connection has sent everything and been answered. */
static void run(void)
{
    uint64_t start = now_ns();
    uint64_t deadline = start + (uint64_t)(g_opt.duration * 1e9);
    uint64_t timeout = (uint64_t)(g_opt.timeout * 1e9);
    g_start_ns = g_last_reply_ns = start;
    for (int i = 0; i < g_opt.conns; i++) {
        fill(&g_conns[i], start, deadline);
        flush_out(&g_conns[i]);
    }
    struct epoll_event evs[64];
    for (;;) {
        int active = 0;
        for (int i = 0; i < g_opt.conns; i++)
            active += !g_conns[i].done_sending || g_conns[i].inflight > 0;
        if (active == 0)
            break;
        int n = epoll_wait(g_ep, evs, 64, 100);
        if (n < 0 && errno != EINTR)
            die("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            bool in = evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR);
            if ((in || c->rd_wants_out) && !read_in(c)) {
                if (!c->done_sending || c->inflight > 0 || c->rlen > 0)
                    die("conn %d: server closed the connection with %zu replies due", c->id,
                        c->inflight);
                /* All answered (e.g. the server's idle timeout hit it): nothing was lost. */
                if (epoll_ctl(g_ep, EPOLL_CTL_DEL, c->fd, NULL) < 0)
                    die("epoll_ctl: %s", strerror(errno));
                SSL_free(c->ssl);
                c->ssl = NULL;
                close(c->fd);
                continue;
            }
            fill(c, now_ns(), deadline);
            flush_out(c);
        }
        uint64_t now = now_ns();
        for (int i = 0; i < g_opt.conns; i++) {
            struct conn *c = &g_conns[i];
            if (c->inflight > 0 && now - c->wait_since > timeout)
                die("conn %d: no reply within %.1fs (%zu replies due)", c->id, g_opt.timeout,
                    c->inflight);
        }
    }
}

static const char *const g_proto_names[] = {
    [P_BLOOMD] = "bloomd", [P_REDIS] = "redis", [P_MEMCACHED] = "memcached"};
static const char *const g_cmd_names[] = {
    [C_CHECKADD] = "CHECKADD", [C_ADD] = "ADD",        [C_CHECK] = "CHECK", [C_SADD] = "SADD",
    [C_MCADD] = "add",         [C_BFMADD] = "BF.MADD", [C_BFADD] = "BF.ADD"};

static void report(void)
{
    double secs = (double)(g_last_reply_ns - g_start_ns) / 1e9;
    if (secs <= 0)
        secs = 1e-9;
    double kps = (double)g_ops_done / secs, rps = (double)g_reqs_done / secs;
    double p50 = hist_quantile_us(g_reqs_done, 0.5), p99 = hist_quantile_us(g_reqs_done, 0.99);
    double p999 = hist_quantile_us(g_reqs_done, 0.999), max = (double)g_hist_max / 1000;
    double fp_rate = g_expected_new ? (double)g_fp / (double)g_expected_new : 0;
    /* Complete: every distinct key was sent and every request answered. */
    bool complete = g_ops_done == g_ops_gen;
    for (int i = 0; i < g_opt.conns; i++)
        complete = complete && g_conns[i].new_sent == g_conns[i].new_total;
    printf("result proto=%s cmd=%s conns=%d depth=%d batch=%d keys=%llu key_len=%d repeat=%.4f "
           "seed=%llu ops=%llu requests=%llu secs=%.3f keys_per_s=%.0f req_per_s=%.0f "
           "p50_us=%.1f p99_us=%.1f p999_us=%.1f max_us=%.1f expected_new=%llu fp=%llu "
           "fp_rate=%.6f fn=%llu complete=%d\n",
           g_proto_names[g_opt.proto], g_cmd_names[g_opt.cmd], g_opt.conns, g_opt.depth,
           g_opt.batch, (unsigned long long)g_opt.keys, g_opt.key_len, g_opt.repeat,
           (unsigned long long)g_opt.seed, (unsigned long long)g_ops_done,
           (unsigned long long)g_reqs_done, secs, kps, rps, p50, p99, p999, max,
           (unsigned long long)g_expected_new, (unsigned long long)g_fp, fp_rate,
           (unsigned long long)g_fn, complete);
    printf("# %s %s, %d keys/request, %d conns x depth %d: %.2fM keys in %.2fs = %.3fM keys/s "
           "(%.3fM requests/s); latency p50 %.0fus p99 %.0fus p99.9 %.0fus; false positives "
           "%llu of %llu new (%.4f%%); false negatives %llu%s\n",
           g_proto_names[g_opt.proto], g_cmd_names[g_opt.cmd], g_opt.batch, g_opt.conns,
           g_opt.depth, (double)g_ops_done / 1e6, secs, kps / 1e6, rps / 1e6, p50, p99, p999,
           (unsigned long long)g_fp, (unsigned long long)g_expected_new, 100 * fp_rate,
           (unsigned long long)g_fn, complete ? "" : " (INCOMPLETE: time or count bound hit)");
}

static void usage(FILE *f)
{
    fputs("usage: loadgen [options]   (see bench/README.md)\n"
          "  --proto bloomd|redis|memcached  server protocol (bloomd)\n"
          "  --host H --port P           server address (127.0.0.1, 8673)\n"
          "  --command C                 bloomd: CHECKADD|ADD|CHECK (CHECKADD); redis: SADD,\n"
          "                              BF.MADD or BF.ADD (a Bloom filter: see --approximate);\n"
          "                              memcached: add\n"
          "  --conns N                   connections (4)\n"
          "  --depth N                   requests in flight per connection (64)\n"
          "  --batch N                   keys per request: bloomd keys per line, redis members\n"
          "                              per SADD; memcached: 1 (1)\n"
          "  --keys N                    distinct keys (1000000)\n"
          "  --key-len N                 key length in bytes (16)\n"
          "  --repeat F                  fraction of operations repeating an earlier key (0.2)\n"
          "  --seed N                    key and repeat seed (1)\n"
          "  --first N                   index of the first key (0)\n"
          "  --present N                 key indices below N are already in the set (0)\n"
          "  --max-ops N                 stop after N operations (0: no bound)\n"
          "  --duration S                stop sending after S seconds (300)\n"
          "  --timeout S                 fail if a reply is S seconds late (10)\n"
          "  --name NAME                 bloomd filter / Redis set (bench)\n"
          "  --create OPTS               bloomd: first send CREATE NAME OPTS, expect CREATED\n"
          "  --approximate               the server is a Bloom filter whatever its protocol\n"
          "                              (bloomd's memcached port): false positives allowed\n"
          "  --tls                       speak TLS (bloomd's --tls-port); the server certificate\n"
          "                              is NOT verified (SSL_VERIFY_NONE): for benchmarks on\n"
          "                              loopback against a self-signed certificate only\n"
          "exit: 0 ok; 1 a malformed, missing or wrong reply (false negative, or a false\n"
          "positive from an exact store); 2 usage\n",
          f);
}

static uint64_t parse_u64(const char *opt, const char *s)
{
    char *end;
    errno = 0;
    double d = strtod(s, &end); /* accepts 1e7 */
    if (errno || end == s || *end || d < 0 || d > 1.8e19 || d != floor(d)) {
        fprintf(stderr, "loadgen: %s: bad number '%s'\n", opt, s);
        exit(2);
    }
    return (uint64_t)d;
}

static double parse_double(const char *opt, const char *s)
{
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(d) || d < 0) {
        fprintf(stderr, "loadgen: %s: bad number '%s'\n", opt, s);
        exit(2);
    }
    return d;
}

static int parse_int(const char *opt, const char *s, int lo, int hi)
{
    uint64_t v = parse_u64(opt, s);
    if (v < (uint64_t)lo || v > (uint64_t)hi) {
        fprintf(stderr, "loadgen: %s must be in [%d, %d]\n", opt, lo, hi);
        exit(2);
    }
    return (int)v;
}

static void parse_args(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"proto", required_argument, 0, 'P'},    {"host", required_argument, 0, 'h'},
        {"port", required_argument, 0, 'p'},     {"command", required_argument, 0, 'C'},
        {"conns", required_argument, 0, 'c'},    {"depth", required_argument, 0, 'd'},
        {"batch", required_argument, 0, 'b'},    {"keys", required_argument, 0, 'n'},
        {"key-len", required_argument, 0, 'l'},  {"repeat", required_argument, 0, 'r'},
        {"seed", required_argument, 0, 's'},     {"first", required_argument, 0, 'f'},
        {"present", required_argument, 0, 'e'},  {"max-ops", required_argument, 0, 'm'},
        {"duration", required_argument, 0, 't'}, {"timeout", required_argument, 0, 'T'},
        {"name", required_argument, 0, 'N'},     {"create", required_argument, 0, 'X'},
        {"approximate", no_argument, 0, 'A'},    {"tls", no_argument, 0, 'S'},
        {"help", no_argument, 0, 'H'},           {0, 0, 0, 0}};
    g_opt = (struct opts){.proto = P_BLOOMD,
                          .host = "127.0.0.1",
                          .port = "8673",
                          .conns = 4,
                          .depth = 64,
                          .batch = 1,
                          .keys = 1000000,
                          .key_len = 16,
                          .repeat = 0.2,
                          .seed = 1,
                          .duration = 300,
                          .timeout = 10,
                          .name = "bench"};
    const char *cmd = NULL;
    int ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case 'P':
            if (strcmp(optarg, "bloomd") == 0)
                g_opt.proto = P_BLOOMD;
            else if (strcmp(optarg, "redis") == 0)
                g_opt.proto = P_REDIS;
            else if (strcmp(optarg, "memcached") == 0)
                g_opt.proto = P_MEMCACHED;
            else
                goto bad;
            break;
        case 'h':
            g_opt.host = optarg;
            break;
        case 'p':
            g_opt.port = optarg;
            break;
        case 'C':
            cmd = optarg;
            break;
        case 'c':
            g_opt.conns = parse_int("--conns", optarg, 1, 10000);
            break;
        case 'd':
            g_opt.depth = parse_int("--depth", optarg, 1, 1 << 20);
            break;
        case 'b':
            g_opt.batch = parse_int("--batch", optarg, 1, 1 << 20);
            break;
        case 'n':
            g_opt.keys = parse_u64("--keys", optarg);
            break;
        case 'l':
            g_opt.key_len = parse_int("--key-len", optarg, 1, 1000);
            break;
        case 'r':
            g_opt.repeat = parse_double("--repeat", optarg);
            if (g_opt.repeat >= 1)
                goto bad;
            break;
        case 's':
            g_opt.seed = parse_u64("--seed", optarg);
            break;
        case 'f':
            g_opt.first = parse_u64("--first", optarg);
            break;
        case 'e':
            g_opt.present = parse_u64("--present", optarg);
            break;
        case 'm':
            g_opt.max_ops = parse_u64("--max-ops", optarg);
            break;
        case 't':
            g_opt.duration = parse_double("--duration", optarg);
            break;
        case 'T':
            g_opt.timeout = parse_double("--timeout", optarg);
            break;
        case 'A':
            g_opt.approximate = true;
            break;
        case 'S':
            g_opt.tls = true;
            break;
        case 'N':
            g_opt.name = optarg;
            if (strlen(optarg) == 0 || strlen(optarg) > 128 || strpbrk(optarg, " \t\r\n"))
                goto bad;
            break;
        case 'X':
            g_opt.create = optarg;
            break;
        case 'H':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            exit(2);
        }
    }
    if (optind != argc)
        goto bad;
    static const enum cmd_kind defaults[] = {
        [P_BLOOMD] = C_CHECKADD, [P_REDIS] = C_SADD, [P_MEMCACHED] = C_MCADD};
    g_opt.cmd = defaults[g_opt.proto];
    if (cmd) {
        bool ok = false;
        for (int i = 0; i <= C_BFADD && !ok; i++) {
            bool bf = i == C_BFMADD || i == C_BFADD;
            ok = strcasecmp(cmd, g_cmd_names[i]) == 0 &&
                 (g_opt.proto == P_BLOOMD ? i <= C_CHECK
                                          : i == (int)g_opt.cmd || (bf && g_opt.proto == P_REDIS));
            if (ok)
                g_opt.cmd = (enum cmd_kind)i;
        }
        if (!ok)
            goto bad;
    }
    if ((g_opt.proto == P_MEMCACHED || g_opt.cmd == C_BFADD) && g_opt.batch != 1)
        goto bad;
    if (g_opt.create && g_opt.proto != P_BLOOMD)
        goto bad;
    if (g_opt.keys < (uint64_t)g_opt.conns || g_opt.timeout <= 0)
        goto bad;
    return;
bad:
    fprintf(stderr, "loadgen: invalid option or combination (see --help)\n");
    exit(2);
}

int main(int argc, char **argv)
{
    /* A server that hangs up is a reported failure (EPIPE), not death by signal. */
    signal(SIGPIPE, SIG_IGN);
    parse_args(argc, argv);
    setup();
    run();
    report();
    bool exact = g_opt.proto != P_BLOOMD && !g_opt.approximate && g_opt.cmd != C_BFMADD &&
                 g_opt.cmd != C_BFADD;
    if (g_fn > 0 || (exact && g_fp > 0)) {
        fprintf(stderr, "loadgen: FAILED: %llu false negatives, %llu false positives%s\n",
                (unsigned long long)g_fn, (unsigned long long)g_fp,
                exact ? " (an exact store must have none)" : "");
        return 1;
    }
    return 0;
}
