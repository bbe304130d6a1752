/*
 * dump.c - dump and restore. DUMP's reply is a line "DUMP <nbytes>", the bytes, "\r\n":
 * the bytes are taken from the connection's input buffer as cli_conn_fill reads them (at
 * most a few MB at a time) and written straight out. RESTORE sends its line, then the
 * file in chunks, never letting more than OUT_HIGH bytes wait in the output buffer, then
 * "\r\n", and reads the one reply line. An early reply (EXISTS, or an error given before
 * the block) still needs the whole block sent: the server reads it and throws it away.
 */
#include "cli/dump.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/msg.h"
#include "proto/number.h"

#define CHUNK ((size_t)256 << 10)  /* bytes per read() of a restored file */
#define OUT_HIGH ((size_t)1 << 20) /* unsent bytes before restore waits for the socket */
#define PROGRESS_EVERY 0.25        /* seconds between progress lines */
#define LINE_MAX_BYTES 200         /* of a reply shown in a message */

struct progress {
    bool on;
    const char *verb; /* "dumped", "sent" */
    uint64_t total;
    double started, last;
    bool shown;
};

static void progress_show(struct progress *p, uint64_t done, bool force)
{
    if (!p->on)
        return;
    double now = cli_now();
    if (!force && now - p->last < PROGRESS_EVERY)
        return;
    p->last = now;
    double mb_s = now > p->started ? (double)done / (now - p->started) / 1e6 : 0;
    fprintf(stderr, "\r%" PRIu64 " of %" PRIu64 " bytes %s, %.1f%%, %.1f MB/s\033[K", done,
            p->total, p->verb, p->total ? 100.0 * (double)done / (double)p->total : 100.0, mb_s);
    p->shown = true;
}

static void progress_clear(struct progress *p)
{
    if (p->shown)
        fputs("\r\033[K", stderr);
    p->shown = false;
}

/* Waits for the socket and reads what it has. Returns CLI_CONN_OK (maybe nothing new) or
 * CLI_CONN_EOF, CLI_CONN_ERR, CLI_CONN_ETIMEOUT. */
static int wait_fill(struct cli_conn *c)
{
    if (cli_conn_flush(c) != CLI_CONN_OK)
        return CLI_CONN_ERR;
    int rc = cli_conn_fill(c);
    if (rc != CLI_CONN_AGAIN)
        return rc;
    if (!cli_conn_wait(c, cli_conn_timeout(c)))
        return CLI_CONN_ETIMEOUT;
    rc = cli_conn_fill(c);
    return rc == CLI_CONN_AGAIN ? CLI_CONN_OK : rc;
}

static int lost(struct cli_conn *c, int rc, const char *what)
{
    if (rc == CLI_CONN_ETIMEOUT)
        cli_warn("%s: %s: no reply within %d s (--timeout)", cli_conn_addr(c), what,
                 cli_conn_timeout(c) / 1000);
    else
        cli_warn("%s: %s: connection lost: %s", cli_conn_addr(c), what, cli_conn_error(c));
    return CLI_EXIT_CONN;
}

/* Writes all of p[0..n) to fd (which may be a non-blocking pipe). Returns 0 or -1. */
static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                struct pollfd pf = {.fd = fd, .events = POLLOUT};
                poll(&pf, 1, -1);
                continue;
            }
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* fsyncs the directory that holds path, so a rename into it is durable. */
static int sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Sends "DUMP <filter>" and reads the reply line: 0 and *n, or an exit status. */
static int dump_head(struct cli_conn *c, const char *filter, uint64_t *n)
{
    char line[256];
    int len = snprintf(line, sizeof line, "DUMP %s", filter);
    struct proto_slice r;
    int rc = cli_conn_send(c, line, (size_t)len);
    if (rc == CLI_CONN_OK)
        rc = cli_conn_getline(c, &r);
    if (rc != CLI_CONN_OK)
        return lost(c, rc, "DUMP");
    if (r.len > 5 && memcmp(r.ptr, "DUMP ", 5) == 0 &&
        proto_parse_u64(r.ptr + 5, r.len - 5, n) == 0)
        return CLI_EXIT_OK;
    int shown = (int)(r.len > LINE_MAX_BYTES ? LINE_MAX_BYTES : r.len);
    if (r.len == 9 && memcmp(r.ptr, "NOT_FOUND", 9) == 0)
        cli_warn("DUMP %s: NOT_FOUND: no such filter", filter);
    else
        cli_warn("DUMP %s: %.*s", filter, shown, r.ptr);
    return CLI_EXIT_ERROR;
}

int dump_run(struct cli_conn *c, const struct dump_opts *o)
{
    bool to_stdout = strcmp(o->path, "-") == 0;
    if (to_stdout && isatty(STDOUT_FILENO)) {
        cli_warn("dump: stdout is a terminal: give a FILE, or redirect stdout");
        return CLI_EXIT_ERROR;
    }
    char *tmp = NULL;
    int fd = STDOUT_FILENO;
    if (!to_stdout) {
        size_t plen = strlen(o->path);
        tmp = cli_alloc(NULL, plen + 5);
        memcpy(tmp, o->path, plen);
        memcpy(tmp + plen, ".tmp", 5);
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
            cli_warn("%s: %s", tmp, strerror(errno));
            free(tmp);
            return CLI_EXIT_ERROR;
        }
    }
    const char *out_name = to_stdout ? "stdout" : tmp;

    uint64_t n = 0;
    int rc = dump_head(c, o->filter, &n);
    struct progress pg = {.on = o->progress, .verb = "dumped", .total = n};
    pg.started = pg.last = cli_now();
    struct cli_buf *in = cli_conn_in(c);
    uint64_t done = 0;
    while (rc == CLI_EXIT_OK && done < n) {
        size_t avail = cli_buf_pending(in);
        if (avail == 0) {
            int fr = wait_fill(c);
            if (fr != CLI_CONN_OK) {
                progress_clear(&pg);
                rc = lost(c, fr, "DUMP");
            }
            continue;
        }
        size_t k = (uint64_t)avail < n - done ? avail : (size_t)(n - done);
        k = k < CHUNK ? k : CHUNK; /* a slow reader of stdout still sees progress */
        if (write_all(fd, in->data + in->off, k) != 0) {
            progress_clear(&pg);
            cli_warn("%s: %s", out_name, strerror(errno));
            rc = CLI_EXIT_ERROR;
            break;
        }
        cli_buf_consume(in, k);
        done += k;
        progress_show(&pg, done, false);
    }
    while (rc == CLI_EXIT_OK && cli_buf_pending(in) < 2) { /* the block's "\r\n" */
        int fr = wait_fill(c);
        if (fr != CLI_CONN_OK)
            rc = lost(c, fr, "DUMP");
    }
    if (rc == CLI_EXIT_OK) {
        if (memcmp(in->data + in->off, "\r\n", 2) != 0) {
            cli_warn("DUMP %s: the data block is not followed by CRLF", o->filter);
            rc = CLI_EXIT_ERROR;
        }
        cli_buf_consume(in, 2);
    }
    progress_show(&pg, done, true);
    progress_clear(&pg);
    if (!to_stdout) {
        if (rc == CLI_EXIT_OK && fsync(fd) != 0) {
            cli_warn("%s: fsync: %s", tmp, strerror(errno));
            rc = CLI_EXIT_ERROR;
        }
        if (close(fd) != 0 && rc == CLI_EXIT_OK) {
            cli_warn("%s: %s", tmp, strerror(errno));
            rc = CLI_EXIT_ERROR;
        }
        if (rc == CLI_EXIT_OK && rename(tmp, o->path) != 0) {
            cli_warn("rename %s to %s: %s", tmp, o->path, strerror(errno));
            rc = CLI_EXIT_ERROR;
        }
        if (rc == CLI_EXIT_OK && sync_dir(o->path) != 0) {
            cli_warn("%s: fsync of its directory: %s", o->path, strerror(errno));
            rc = CLI_EXIT_ERROR;
        }
        if (rc != CLI_EXIT_OK)
            unlink(tmp);
        free(tmp);
    }
    return rc;
}

/* ---- restore ---- */

/* Copies stdin into an unlinked temporary file; returns its fd (at offset 0) or -1. */
static int spool_stdin(void)
{
    const char *dir = getenv("TMPDIR");
    if (dir == NULL || *dir == '\0')
        dir = "/tmp";
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/bloomd-cli-restore.XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) {
        cli_warn("restore: a temporary file for stdin in %s: %s", dir, strerror(errno));
        return -1;
    }
    unlink(path);
    char *buf = cli_alloc(NULL, CHUNK);
    for (;;) {
        ssize_t r = read(STDIN_FILENO, buf, CHUNK);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            cli_warn("stdin: %s", strerror(errno));
            break;
        }
        if (r == 0) {
            free(buf);
            if (lseek(fd, 0, SEEK_SET) == 0)
                return fd;
            cli_warn("restore: temporary file: %s", strerror(errno));
            close(fd);
            return -1;
        }
        if (write_all(fd, buf, (size_t)r) != 0) {
            cli_warn("restore: copying stdin to %s: %s", dir, strerror(errno));
            break;
        }
    }
    free(buf);
    close(fd);
    return -1;
}

/* Opens the file to restore and finds how many bytes it has from its offset on. */
static int restore_open(const char *path, uint64_t *size)
{
    int fd;
    bool is_stdin = strcmp(path, "-") == 0;
    if (is_stdin) {
        if (isatty(STDIN_FILENO)) {
            cli_warn("restore: stdin is a terminal: give a FILE, or redirect stdin");
            return -1;
        }
        fd = STDIN_FILENO;
    } else if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        cli_warn("%s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        cli_warn("%s: %s", is_stdin ? "stdin" : path, strerror(errno));
        goto fail;
    }
    if (S_ISDIR(st.st_mode)) {
        cli_warn("%s: is a directory", path);
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        if (!is_stdin) { /* a FIFO or device given by name: read it as stdin would be */
            cli_warn("%s: not a regular file (use '-' and redirect it to stdin)", path);
            goto fail;
        }
        if ((fd = spool_stdin()) < 0)
            return -1;
        if (fstat(fd, &st) != 0) {
            cli_warn("restore: temporary file: %s", strerror(errno));
            goto fail;
        }
    }
    off_t at = lseek(fd, 0, SEEK_CUR); /* stdin may be a file read part way */
    if (at < 0 || at > st.st_size)
        at = 0;
    *size = (uint64_t)(st.st_size - at);
    return fd;
fail:
    if (fd > STDIN_FILENO)
        close(fd);
    return -1;
}

/* Sends the RESTORE line, n bytes of fd and "\r\n". Returns CLI_EXIT_OK or a status. */
static int restore_send(struct cli_conn *c, const struct dump_opts *o, int fd, uint64_t n)
{
    struct cli_buf *out = cli_conn_out(c);
    char line[256];
    int len = snprintf(line, sizeof line, "RESTORE %s %" PRIu64 "%s\r\n", o->filter, n,
                       o->replace ? " replace" : "");
    cli_buf_append(out, line, (size_t)len);
    struct progress pg = {.on = o->progress, .verb = "sent", .total = n};
    pg.started = pg.last = cli_now();
    uint64_t sent = 0;
    while (sent < n || cli_buf_pending(out) > 0) {
        if (sent < n && cli_buf_pending(out) < OUT_HIGH) {
            size_t want = n - sent < CHUNK ? (size_t)(n - sent) : CHUNK;
            char *p = cli_buf_reserve(out, want + 2);
            ssize_t r = read(fd, p, want);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) { /* the block's length is promised: the connection is unusable */
                progress_clear(&pg);
                if (r < 0)
                    cli_warn("%s: %s", o->path, strerror(errno));
                else
                    cli_warn("%s: the file shrank while it was sent (%" PRIu64 " of %" PRIu64
                             " bytes)",
                             o->path, sent, n);
                return CLI_EXIT_ERROR;
            }
            out->len += (size_t)r;
            sent += (uint64_t)r;
            if (sent == n)
                cli_buf_append(out, "\r\n", 2);
        }
        if (cli_conn_flush(c) != CLI_CONN_OK) {
            progress_clear(&pg);
            return lost(c, CLI_CONN_ERR, "RESTORE");
        }
        progress_show(&pg, sent, false);
        if (cli_buf_pending(out) >= OUT_HIGH || (sent == n && cli_buf_pending(out) > 0)) {
            /* The socket is full: wait for it (reading any early reply meanwhile). */
            if (!cli_conn_wait(c, cli_conn_timeout(c))) {
                progress_clear(&pg);
                return lost(c, CLI_CONN_ETIMEOUT, "RESTORE");
            }
            int fr = cli_conn_fill(c);
            if (fr == CLI_CONN_EOF || fr == CLI_CONN_ERR) {
                progress_clear(&pg);
                return lost(c, fr, "RESTORE");
            }
        }
    }
    progress_show(&pg, sent, true);
    progress_clear(&pg);
    return CLI_EXIT_OK;
}

int restore_run(struct cli_conn *c, const struct dump_opts *o)
{
    uint64_t n;
    int fd = restore_open(o->path, &n);
    if (fd < 0)
        return CLI_EXIT_ERROR;
    int rc = restore_send(c, o, fd, n);
    if (fd > STDIN_FILENO)
        close(fd);
    struct proto_slice r;
    if (rc == CLI_EXIT_CONN) { /* the server may have said why before it closed */
        cli_conn_fill(c);
        if (!cli_conn_line(c, &r))
            return rc;
    } else if (rc != CLI_EXIT_OK) {
        return rc;
    } else {
        int gr = cli_conn_getline(c, &r);
        if (gr != CLI_CONN_OK)
            return lost(c, gr, "RESTORE");
    }
    printf("%.*s\n", (int)r.len, r.ptr);
    if (fflush(stdout) != 0)
        cli_warn("stdout: %s", strerror(errno));
    if (r.len == 8 && memcmp(r.ptr, "RESTORED", 8) == 0)
        return CLI_EXIT_OK;
    return CLI_EXIT_ERROR;
}
