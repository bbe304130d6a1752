/*
 * bulk.c - add, check and dedup. One loop drives three things with poll(): reading the
 * input (files or stdin, which may be a slow pipe), writing requests, and reading replies.
 * Requests go out as soon as a batch is full, or when the input has nothing more for now,
 * so `tail -f log | bloomd-cli dedup seen` answers line by line while a file streams at full
 * batches. Replies come back in request order (the protocol's pipelining rule), so a ring
 * of the batches in flight maps each reply to its keys; dedup and check keep each batch's
 * input lines there until the reply says which to print.
 */
#include "cli/bulk.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/buf.h"
#include "cli/msg.h"
#include "cli/reply.h"

#define INPUT_CHUNK ((size_t)1 << 20) /* bytes per read() of the input */
#define REQUEST_BYTES ((size_t)64 << 10)
#define OUT_HIGH ((size_t)8 << 20) /* unsent request bytes before we stop producing */
#define PROGRESS_EVERY 0.25        /* seconds between progress lines */

/* The input files, read in order, one line at a time. */
struct input {
    char *const *files; /* nfiles paths; nfiles 0: stdin */
    size_t nfiles;
    size_t next;      /* index of the next file to open */
    int fd;           /* the open file, or -1 */
    bool fd_eof;      /* read() of fd returned 0 */
    const char *name; /* of fd, for messages */
    uint64_t lineno;  /* lines taken from fd */
    struct cli_buf buf;
    uint64_t total;    /* bytes of all files if all are regular, else 0 */
    uint64_t consumed; /* bytes taken as lines */
};

/* One request: its key count and, for dedup/check lines, the lines it came from. */
struct batch {
    size_t nkeys;
    struct cli_buf lines; /* each line followed by '\n' */
    size_t *ends;         /* offset after line i in lines */
    size_t ends_cap;
};

struct bulk {
    const struct bulk_opts *o;
    struct cli_conn *c;
    struct input in;
    const char *cmd;      /* ADD, CHECK or CHECKADD */
    bool keep_lines;      /* the batches keep their lines */
    struct batch *ring;   /* depth + 1 slots: those in flight, then the open one */
    size_t slots;         /* depth + 1 */
    size_t head;          /* oldest batch in flight */
    size_t inflight;      /* batches sent (or queued) and not answered */
    bool open;            /* ring[head + inflight] is being filled */
    size_t open_bytes;    /* bytes of its request so far */
    bool input_done;      /* no more keys will be sent */
    unsigned char *bits;  /* one reply's bits */
    struct cli_buf print; /* check's 0/1 lines of one reply */
    uint64_t keys;        /* keys answered */
    uint64_t hits;        /* add, dedup: new; check: present */
    uint64_t bad;         /* lines skipped (--skip-bad) */
    char stop_msg[512];   /* why the input stopped early (a bad key), or "" */
    double started, last_progress;
    bool progress_shown;
};

/* ---- input ---- */

static const char *file_name(const char *path)
{
    return strcmp(path, "-") == 0 ? "stdin" : path;
}

/* Opens the next file; false when there is none, or on an error (message printed, *err). */
static bool input_open_next(struct input *in, bool *err)
{
    size_t count = in->nfiles ? in->nfiles : 1;
    if (in->next >= count)
        return false;
    const char *path = in->nfiles ? in->files[in->next] : "-";
    in->next++;
    in->name = file_name(path);
    in->lineno = 0;
    in->fd_eof = false;
    if (strcmp(path, "-") == 0) {
        in->fd = STDIN_FILENO;
        return true;
    }
    in->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (in->fd < 0) {
        cli_warn("%s: %s", path, strerror(errno));
        *err = true;
        return false;
    }
    return true;
}

static void input_close(struct input *in)
{
    if (in->fd > STDIN_FILENO)
        close(in->fd);
    in->fd = -1;
}

/*
 * The next line (without '\n'): 1 and *line set, 0 when more must be read first, -1 at the
 * end of the last file, -2 on an error (printed). With whole, the line is also checked as
 * a key in the same pass: *clean true means it is one (cli_line_scan); false, look again.
 */
static int input_line(struct input *in, struct proto_slice *line, bool whole, bool *clean)
{
    for (;;) {
        if (in->fd < 0) {
            bool err = false;
            if (!input_open_next(in, &err))
                return err ? -2 : -1;
        }
        const char *p = in->buf.data + in->buf.off;
        size_t n = cli_buf_pending(&in->buf);
        const char *nl = NULL;
        *clean = false;
        if (whole) {
            size_t at = cli_line_scan(p, n, clean);
            nl = at < n ? p + at : NULL;
        } else if (n > 0) {
            nl = memchr(p, '\n', n);
        }
        if (nl != NULL || (in->fd_eof && n > 0)) {
            size_t len = nl != NULL ? (size_t)(nl - p) : n;
            size_t used = nl != NULL ? len + 1 : n;
            cli_buf_consume(&in->buf, used);
            in->consumed += used;
            in->lineno++;
            *line = (struct proto_slice){p, len};
            return 1;
        }
        if (!in->fd_eof)
            return 0;
        input_close(in);
    }
}

/* Reads once from the input. Returns 0, or -1 on an error (printed). */
static int input_read(struct input *in)
{
    char *p = cli_buf_reserve(&in->buf, INPUT_CHUNK);
    ssize_t r;
    do {
        r = read(in->fd, p, INPUT_CHUNK);
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
        cli_warn("%s: %s", in->name, strerror(errno));
        return -1;
    }
    if (r == 0)
        in->fd_eof = true;
    in->buf.len += (size_t)r;
    return 0;
}

/* Checks every file can be opened and sums their sizes (0 if one is not a regular file). */
static int input_init(struct input *in, char *const *files, size_t nfiles)
{
    memset(in, 0, sizeof *in);
    in->files = files;
    in->nfiles = nfiles;
    in->fd = -1;
    uint64_t total = 0;
    bool known = true;
    for (size_t i = 0; i < (nfiles ? nfiles : 1); i++) {
        const char *path = nfiles ? files[i] : "-";
        struct stat st;
        int rc = strcmp(path, "-") == 0 ? fstat(STDIN_FILENO, &st) : stat(path, &st);
        if (rc != 0) {
            cli_warn("%s: %s", path, strerror(errno));
            return -1;
        }
        if (S_ISDIR(st.st_mode)) {
            cli_warn("%s: is a directory", path);
            return -1;
        }
        if (S_ISREG(st.st_mode))
            total += (uint64_t)st.st_size;
        else
            known = false;
    }
    in->total = known ? total : 0;
    return 0;
}

/* ---- requests ---- */

static struct batch *slot(struct bulk *b, size_t i)
{
    return &b->ring[(b->head + i) % b->slots];
}

static void batch_open(struct bulk *b)
{
    struct batch *t = slot(b, b->inflight);
    t->nkeys = 0;
    cli_buf_consume(&t->lines, cli_buf_pending(&t->lines));
    struct cli_buf *out = cli_conn_out(b->c);
    size_t before = cli_buf_pending(out);
    cli_buf_puts(out, b->cmd);
    cli_buf_append(out, " ", 1);
    cli_buf_puts(out, b->o->filter);
    b->open_bytes = cli_buf_pending(out) - before;
    b->open = true;
}

static void batch_close(struct bulk *b)
{
    cli_buf_append(cli_conn_out(b->c), "\r\n", 2);
    b->open = false;
    b->inflight++;
}

static void batch_add(struct bulk *b, struct proto_slice key, struct proto_slice line)
{
    if (!b->open)
        batch_open(b);
    struct batch *t = slot(b, b->inflight);
    struct cli_buf *out = cli_conn_out(b->c);
    char *p = cli_buf_reserve(out, key.len + 1);
    p[0] = ' ';
    memcpy(p + 1, key.ptr, key.len);
    out->len += key.len + 1;
    b->open_bytes += key.len + 1;
    if (b->keep_lines) {
        if (t->nkeys == t->ends_cap) {
            t->ends_cap = t->ends_cap ? 2 * t->ends_cap : 256;
            t->ends = cli_alloc(t->ends, t->ends_cap * sizeof *t->ends);
        }
        char *q = cli_buf_reserve(&t->lines, line.len + 1);
        memcpy(q, line.ptr, line.len);
        q[line.len] = '\n';
        t->lines.len += line.len + 1;
        t->ends[t->nkeys] = t->lines.len;
    }
    t->nkeys++;
    if (t->nkeys >= b->o->batch || b->open_bytes >= REQUEST_BYTES)
        batch_close(b);
}

/* Turns buffered input lines into requests while the window allows. Returns -1 on an
 * input error (printed), else 1 if it stopped for want of input, else 0. */
static int produce(struct bulk *b)
{
    while (!b->input_done && b->inflight < b->slots - 1 &&
           cli_buf_pending(cli_conn_out(b->c)) < OUT_HIGH) {
        struct proto_slice line, key;
        bool clean;
        int r = input_line(&b->in, &line, b->o->keys.field == 0, &clean);
        if (r == 0)
            return 1;
        if (r < 0) {
            b->input_done = true;
            if (b->open)
                batch_close(b);
            return r == -2 ? -1 : 0;
        }
        int kr = CLI_KEY_OK;
        if (clean && line.len <= CLI_KEY_MAX) /* the common case, checked while scanning */
            key = (struct proto_slice){line.ptr, line.len - (line.ptr[line.len - 1] == '\r')};
        else
            kr = cli_key_extract(&b->o->keys, line.ptr, line.len, &key);
        if (kr != CLI_KEY_OK) {
            if (b->o->skip_bad) {
                b->bad++;
                continue;
            }
            snprintf(b->stop_msg, sizeof b->stop_msg,
                     "%s:%" PRIu64 ": %s (--skip-bad skips such lines)", b->in.name, b->in.lineno,
                     cli_key_strerror(kr));
            b->input_done = true;
            if (b->open)
                batch_close(b);
            return 0;
        }
        batch_add(b, key, line);
    }
    return 0;
}

/* ---- replies ---- */

/* Handles one reply line. Returns 0, or -1 if it ends the job (message printed). */
static int on_reply(struct bulk *b, struct proto_slice r)
{
    if (b->inflight == 0) {
        cli_warn("unexpected reply from the server: %.*s", (int)r.len, r.ptr);
        return -1;
    }
    struct batch *t = slot(b, 0);
    if (r.len == 9 && memcmp(r.ptr, "NOT_FOUND", 9) == 0) {
        cli_warn("%s: NOT_FOUND: no filter '%s' (--create OPTS creates it)", b->cmd, b->o->filter);
        return -1;
    }
    if (cli_reply_is_error(r.ptr, r.len)) {
        cli_warn("%s: %.*s", b->cmd, (int)r.len, r.ptr);
        return -1;
    }
    if (b->o->mode == BULK_ADD) {
        uint64_t n;
        if (cli_parse_added(r.ptr, r.len, &n) != 0) {
            cli_warn("ADD: unexpected reply: %.*s", (int)r.len, r.ptr);
            return -1;
        }
        b->hits += n;
    } else {
        if (cli_parse_bits(r.ptr, r.len, t->nkeys, b->bits) != 0) {
            cli_warn("%s: unexpected reply to %zu keys: %.*s", b->cmd, t->nkeys,
                     (int)(r.len > 200 ? 200 : r.len), r.ptr);
            return -1;
        }
        /* Which lines to print: dedup the new (0) ones; check --present the 1s,
         * --absent the 0s; plain check prints every bit. */
        unsigned char hit = b->o->mode == BULK_DEDUP ? 0 : 1;
        for (size_t i = 0; i < t->nkeys; i++)
            b->hits += b->bits[i] == hit;
        if (!b->keep_lines) { /* plain check: a 0 or 1 line per key, in one write */
            char *p = cli_buf_reserve(&b->print, 2 * t->nkeys);
            for (size_t i = 0; i < t->nkeys; i++) {
                p[2 * i] = (char)('0' + b->bits[i]);
                p[2 * i + 1] = '\n';
            }
            fwrite_unlocked(p, 1, 2 * t->nkeys, stdout);
        } else {
            /* dedup prints the lines of new (0) keys, check --present those of 1s and
             * --absent those of 0s; a run of consecutive lines goes out in one write. */
            unsigned char want = b->o->mode == BULK_DEDUP ? 0 : b->o->only > 0 ? 1 : 0;
            size_t run = 0, from = 0;
            for (size_t i = 0; i < t->nkeys; i++) {
                if (b->bits[i] != want) {
                    if (from > run)
                        fwrite_unlocked(t->lines.data + run, 1, from - run, stdout);
                    run = t->ends[i];
                }
                from = t->ends[i];
            }
            if (from > run)
                fwrite_unlocked(t->lines.data + run, 1, from - run, stdout);
        }
        if (ferror(stdout))
            return -1;
    }
    b->keys += t->nkeys;
    b->head = (b->head + 1) % b->slots;
    b->inflight--;
    return 0;
}

/* Takes every buffered reply line. Returns 0 or -1 (the job ends). */
static int take_replies(struct bulk *b)
{
    struct proto_slice r;
    while (cli_conn_line(b->c, &r))
        if (on_reply(b, r) != 0)
            return -1;
    return 0;
}

static void human_rate(char *buf, size_t n, double v)
{
    if (v >= 1e6)
        snprintf(buf, n, "%.2fM", v / 1e6);
    else if (v >= 1e3)
        snprintf(buf, n, "%.1fk", v / 1e3);
    else
        snprintf(buf, n, "%.0f", v);
}

static void progress(struct bulk *b, bool force)
{
    if (!b->o->progress)
        return;
    double now = cli_now();
    if (!force && now - b->last_progress < PROGRESS_EVERY)
        return;
    b->last_progress = now;
    char rate[32];
    human_rate(rate, sizeof rate, now > b->started ? (double)b->keys / (now - b->started) : 0);
    if (b->in.total > 0)
        fprintf(stderr, "\r%" PRIu64 " keys, %s keys/s, %.1f%%\033[K", b->keys, rate,
                100.0 * (double)b->in.consumed / (double)b->in.total);
    else
        fprintf(stderr, "\r%" PRIu64 " keys, %s keys/s\033[K", b->keys, rate);
    b->progress_shown = true;
}

static int create_filter(struct cli_conn *c, const char *filter, const char *opts)
{
    char line[4096];
    int n = snprintf(line, sizeof line, "CREATE %s %s", filter, opts);
    if (n < 0 || (size_t)n >= sizeof line || strpbrk(opts, "\r\n") != NULL) {
        cli_warn("--create: options too long or with a line break");
        return CLI_EXIT_ERROR;
    }
    struct proto_slice r;
    if (cli_conn_send(c, line, (size_t)n) != CLI_CONN_OK ||
        cli_conn_getline(c, &r) != CLI_CONN_OK) {
        cli_warn("%s: connection lost: %s", cli_conn_addr(c), cli_conn_error(c));
        return CLI_EXIT_CONN;
    }
    if ((r.len == 7 && memcmp(r.ptr, "CREATED", 7) == 0) ||
        (r.len == 6 && memcmp(r.ptr, "EXISTS", 6) == 0))
        return CLI_EXIT_OK;
    cli_warn("CREATE %s: %.*s", filter, (int)r.len, r.ptr);
    return CLI_EXIT_ERROR;
}

/* The main loop; returns the exit status. */
static int run(struct bulk *b)
{
    struct cli_conn *c = b->c;
    for (;;) {
        int pr = produce(b);
        if (pr < 0)
            return CLI_EXIT_ERROR;
        if (cli_conn_flush(c) != CLI_CONN_OK)
            goto lost;
        if (b->input_done && b->inflight == 0)
            return CLI_EXIT_OK;
        bool want_in = pr == 1 && b->in.fd >= 0;
        struct pollfd p[2] = {{.fd = cli_conn_fd(c), .events = cli_conn_events(c)},
                              {.fd = b->in.fd, .events = POLLIN}};
        nfds_t n = want_in ? 2 : 1;
        int r = poll(p, n, 0);
        if (r == 0) {
            if (b->open) { /* the input is slow: send what we have */
                batch_close(b);
                continue;
            }
            fflush(stdout);
            progress(b, false);
            int wait = b->inflight > 0 ? cli_conn_timeout(c) : -1;
            r = poll(p, n, wait);
            if (r == 0) {
                cli_warn("%s: no reply within %d s", cli_conn_addr(c), wait / 1000);
                return CLI_EXIT_CONN;
            }
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            cli_warn("poll: %s", strerror(errno));
            return CLI_EXIT_ERROR;
        }
        if (want_in && p[1].revents != 0 && input_read(&b->in) != 0)
            return CLI_EXIT_ERROR;
        if (p[0].revents != 0) {
            int fr = cli_conn_fill(c);
            if (take_replies(b) != 0)
                return CLI_EXIT_ERROR;
            if (fr == CLI_CONN_EOF || fr == CLI_CONN_ERR)
                goto lost;
        }
        progress(b, false);
    }
lost:
    if (b->progress_shown)
        fputs("\r\033[K", stderr);
    cli_warn("%s: connection lost after %" PRIu64 " keys: %s", cli_conn_addr(c), b->keys,
             cli_conn_error(c));
    return CLI_EXIT_CONN;
}

int bulk_run(struct cli_conn *c, const struct bulk_opts *o)
{
    struct bulk b;
    memset(&b, 0, sizeof b);
    b.o = o;
    b.c = c;
    b.cmd = o->mode == BULK_ADD ? "ADD" : o->mode == BULK_CHECK ? "CHECK" : "CHECKADD";
    b.keep_lines = o->mode == BULK_DEDUP || (o->mode == BULK_CHECK && o->only != 0);
    if (input_init(&b.in, o->files, o->nfiles) != 0)
        return CLI_EXIT_ERROR;
    if (o->create != NULL) {
        int rc = create_filter(c, o->filter, o->create);
        if (rc != CLI_EXIT_OK)
            return rc;
    }
    b.slots = (size_t)o->depth + 1;
    b.ring = cli_alloc(NULL, b.slots * sizeof *b.ring);
    memset(b.ring, 0, b.slots * sizeof *b.ring);
    b.bits = cli_alloc(NULL, o->batch);
    b.started = b.last_progress = cli_now();

    int rc = run(&b);

    if (fflush(stdout) != 0 || ferror(stdout)) {
        if (errno != EPIPE)
            cli_warn("stdout: %s", strerror(errno));
        rc = CLI_EXIT_ERROR;
    }
    if (b.progress_shown)
        fputs("\r\033[K", stderr);
    if (rc == CLI_EXIT_OK && b.stop_msg[0] != '\0') {
        cli_warn("%s", b.stop_msg);
        rc = CLI_EXIT_ERROR;
    }
    if (!o->quiet && rc != CLI_EXIT_CONN) {
        fprintf(stderr, "%" PRIu64 " keys, %" PRIu64 " %s", b.keys, b.hits,
                o->mode == BULK_CHECK ? "present" : "new");
        if (b.bad > 0)
            fprintf(stderr, ", %" PRIu64 " bad lines skipped", b.bad);
        fputc('\n', stderr);
    }
    input_close(&b.in);
    cli_buf_destroy(&b.in.buf);
    for (size_t i = 0; i < b.slots; i++) {
        cli_buf_destroy(&b.ring[i].lines);
        free(b.ring[i].ends);
    }
    free(b.ring);
    free(b.bits);
    cli_buf_destroy(&b.print);
    return rc;
}
