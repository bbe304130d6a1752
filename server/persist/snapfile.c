/*
 * snapfile.c - crash-safe snapshot files: tmp + fsync + rename + directory fsync, as
 * Redis's rdb.c does, and the start-up scan that loads or sets aside every snapshot.
 * Tuned for large filters (hundreds of MiB): big sequential writes straight from the
 * filter's bits, writeback started as we go so dirty pages stay bounded and the final
 * fsync does not stall the disk for everyone else.
 */
#include "server/persist/snapfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/container.h"
#include "proto/request.h"
#include "server/persist/setaside.h"
#include "server/store/kinds.h"

#define SNAPFILE_SUFFIX ".bloom"
#define SNAPFILE_TMP_SUFFIX ".bloom.tmp"
/* Longest file name we build: name, ".bloom.corrupt-", timestamp, ".NNN", NUL. */
#define SNAPFILE_PATH_MAX (PROTO_MAX_NAME + 64)
#define SNAPFILE_BUF_BYTES ((size_t)1 << 20)
/* Start writeback every SNAPFILE_SYNC_CHUNK bytes; at most SNAPFILE_SYNC_WINDOW bytes of
 * the file may be dirty or in flight (so the page cache and the final fsync stay small). */
#define SNAPFILE_SYNC_CHUNK ((uint64_t)32 << 20)
#define SNAPFILE_SYNC_WINDOW ((uint64_t)64 << 20)
#define SNAPFILE_SPARSE_MIN ((uint64_t)1 << 20) /* smaller files are never called sparse */

static const char *step_name(enum snapfile_step s)
{
    switch (s) {
    case SNAPFILE_STEP_NONE:
        return "snapshot";
    case SNAPFILE_STEP_OPENDIR:
        return "open directory";
    case SNAPFILE_STEP_CREATE:
        return "create";
    case SNAPFILE_STEP_ALLOC:
        return "allocate buffer for";
    case SNAPFILE_STEP_ENCODE:
        return "encode";
    case SNAPFILE_STEP_WRITE:
        return "write";
    case SNAPFILE_STEP_FSYNC:
        return "fsync";
    case SNAPFILE_STEP_CLOSE:
        return "close";
    case SNAPFILE_STEP_RENAME:
        return "rename";
    case SNAPFILE_STEP_DIRSYNC:
        return "fsync directory of";
    case SNAPFILE_STEP_UNLINK:
        return "unlink";
    case SNAPFILE_STEP_SCAN:
        return "read directory";
    case SNAPFILE_STEP_OPEN:
        return "open";
    case SNAPFILE_STEP_READ:
        return "read";
    case SNAPFILE_STEP_DECODE:
        return "decode";
    case SNAPFILE_STEP_ABANDON:
        return "abandoned";
    }
    return "snapshot";
}

const char *snapfile_format(const struct snapfile_error *e, char *buf, size_t len)
{
    const char *why;
    if (e->step == SNAPFILE_STEP_ABANDON)
        why = "filter dropped or replaced meanwhile";
    else if (e->sys != 0)
        why = strerror(e->sys);
    else if (e->codec != 0)
        why = sbf_strerror(e->codec);
    else
        why = "failed";
    snprintf(buf, len, "%s %s: %s", step_name(e->step), e->file, why);
    return buf;
}

bool snapfile_name_valid(const char *name)
{
    return proto_name_valid((struct proto_slice){.ptr = name, .len = strlen(name)});
}

/* Fills *err and returns rc. */
static int fail(struct snapfile_error *err, int rc, enum snapfile_step step, int sys, int codec,
                const char *file)
{
    err->step = step;
    err->sys = sys;
    err->codec = codec;
    snprintf(err->file, sizeof err->file, "%s", file);
    return rc;
}

static int fail_sys(struct snapfile_error *err, enum snapfile_step step, int sys, const char *file)
{
    return fail(err, SNAPFILE_ESYS, step, sys, 0, file);
}

static void (*recreated_fn)(void *ctx, const char *msg);
static void *recreated_ctx;

void snapfile_set_on_dir_recreated(void (*fn)(void *ctx, const char *msg), void *ctx)
{
    recreated_fn = fn;
    recreated_ctx = ctx;
}

/* mkdir -p of dir (mode 0755). Returns 0 or -1 with errno set. */
static int make_dirs(const char *dir)
{
    char path[SNAPFILE_FILE_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s", dir) >= sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = path + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int open_dir(const char *dir, struct snapfile_error *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        fail_sys(err, SNAPFILE_STEP_OPENDIR, errno, dir);
    return fd;
}

/* Writes all of buf; 0 or an errno. */
static int write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The codec's sink: a buffer in front of the tmp file. */
struct writer {
    int fd;
    char *buf;
    size_t len;              /* bytes waiting in buf */
    uint64_t written;        /* bytes handed to write(2) so far */
    uint64_t sync_started;   /* writeback requested for [0, sync_started) */
    uint64_t waited;         /* writeback finished for [0, waited) */
    enum snapfile_step step; /* of the first failure */
    int sys;                 /* errno of the first failure, 0 if none */
};

static int writer_put(struct writer *w, const char *data, size_t len)
{
    int e = write_all(w->fd, data, len);
    if (e != 0) {
        w->step = SNAPFILE_STEP_WRITE;
        w->sys = e;
        return -1;
    }
    w->written += len;
    if (w->written - w->sync_started >= SNAPFILE_SYNC_CHUNK) {
        /* Start writeback of the new range, then wait for what lies more than
         * SNAPFILE_SYNC_WINDOW bytes back, so the dirty part of this file stays bounded. */
        off_t from = (off_t)w->sync_started, n = (off_t)(w->written - w->sync_started);
        if (sync_file_range(w->fd, from, n, SYNC_FILE_RANGE_WRITE) != 0)
            goto fail;
        w->sync_started = w->written;
        if (w->written - w->waited > SNAPFILE_SYNC_WINDOW) {
            uint64_t upto = w->written - SNAPFILE_SYNC_WINDOW;
            if (sync_file_range(w->fd, (off_t)w->waited, (off_t)(upto - w->waited),
                                SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                    SYNC_FILE_RANGE_WAIT_AFTER) != 0)
                goto fail;
            w->waited = upto;
        }
    }
    return 0;
fail:
    w->step = SNAPFILE_STEP_FSYNC;
    w->sys = errno;
    return -1;
}

static int writer_flush(struct writer *w)
{
    if (w->len == 0)
        return 0;
    int rc = writer_put(w, w->buf, w->len);
    w->len = 0;
    return rc;
}

static int writer_cb(void *ctx, const void *data, size_t len)
{
    struct writer *w = ctx;
    if (w->sys != 0)
        return -1;
    if (w->len + len <= SNAPFILE_BUF_BYTES) {
        memcpy(w->buf + w->len, data, len);
        w->len += len;
        return 0;
    }
    if (writer_flush(w) != 0)
        return -1;
    if (len >= SNAPFILE_BUF_BYTES) /* big chunks go straight from the filter's bits */
        return writer_put(w, data, len);
    memcpy(w->buf, data, len);
    w->len = len;
    return 0;
}

/* fsync of the directory after a change to file. */
static int sync_dir(int dirfd, const char *file, struct snapfile_error *err)
{
    if (fsync(dirfd) != 0)
        return fail_sys(err, SNAPFILE_STEP_DIRSYNC, errno, file);
    return 0;
}

int snapfile_write(const char *dir, const char *name, const struct kind_ops *ops, const void *f,
                   uint64_t journal_pos, uint64_t seed, bool (*keep)(void *keep_ctx),
                   void *keep_ctx, uint64_t *bytes, struct snapfile_error *err)
{
    char tmp[SNAPFILE_PATH_MAX], final[SNAPFILE_PATH_MAX];
    struct writer w = {.fd = -1};
    int rc = 0, dirfd;

    if (!snapfile_name_valid(name))
        return fail(err, SNAPFILE_ENAME, SNAPFILE_STEP_NONE, 0, 0, name);
    snprintf(tmp, sizeof tmp, "%s%s", name, SNAPFILE_TMP_SUFFIX);
    snprintf(final, sizeof final, "%s%s", name, SNAPFILE_SUFFIX);
    dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0 && errno == ENOENT) {
        /* Deleted under us: losing every later snapshot too would be worse. Say so loudly:
         * whatever was in it (older snapshots, the LOCK) is gone. */
        char msg[SNAPFILE_FILE_MAX + 256];
        if (make_dirs(dir) == 0) {
            snprintf(msg, sizeof msg,
                     "data directory %s had vanished (deleted while bloomd ran?): created it "
                     "again; every filter is written anew at the next snapshot, and its LOCK "
                     "is gone: make sure no second bloomd uses it",
                     dir);
            if (recreated_fn)
                recreated_fn(recreated_ctx, msg);
        }
    }
    if (dirfd < 0)
        dirfd = open_dir(dir, err);
    if (dirfd < 0)
        return SNAPFILE_ESYS;
    w.buf = malloc(SNAPFILE_BUF_BYTES);
    if (!w.buf) {
        rc = fail_sys(err, SNAPFILE_STEP_ALLOC, ENOMEM, tmp);
        goto done;
    }
    /* Never through a symlink (its target would be overwritten), never blocked by a FIFO:
     * such a tmp fails this snapshot and is removed below, so the next one succeeds. */
    w.fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
                  0644);
    if (w.fd < 0) {
        rc = fail_sys(err, SNAPFILE_STEP_CREATE, errno, tmp);
        goto fail;
    }
    int crc = container_encode(ops, f, journal_pos, seed, writer_cb, &w);
    if (crc == 0)
        writer_flush(&w);
    if (w.sys != 0) {
        rc = fail_sys(err, w.step, w.sys, tmp);
        goto fail;
    }
    if (crc != 0) {
        rc = fail(err, SNAPFILE_ECODEC, SNAPFILE_STEP_ENCODE, 0, crc, tmp);
        goto fail;
    }
    if (fsync(w.fd) != 0) {
        rc = fail_sys(err, SNAPFILE_STEP_FSYNC, errno, tmp);
        goto fail;
    }
    int fd = w.fd;
    w.fd = -1;
    if (close(fd) != 0) {
        rc = fail_sys(err, SNAPFILE_STEP_CLOSE, errno, tmp);
        goto fail;
    }
    if (keep && !keep(keep_ctx)) {
        rc = fail(err, SNAPFILE_EABANDONED, SNAPFILE_STEP_ABANDON, 0, 0, tmp);
        goto fail;
    }
    if (renameat(dirfd, tmp, dirfd, final) != 0) {
        rc = fail_sys(err, SNAPFILE_STEP_RENAME, errno, tmp);
        goto fail;
    }
    rc = sync_dir(dirfd, final, err);
    if (rc == 0 && bytes)
        *bytes = w.written;
    goto done;
fail:
    /* The previous <name>.bloom was never touched; only the tmp goes. A failed fsync is
     * never retried on the same file (Linux may have dropped the dirty pages): the next
     * snapshot writes a new tmp from the filter. */
    unlinkat(dirfd, tmp, 0);
done:
    if (w.fd >= 0)
        close(w.fd);
    free(w.buf);
    close(dirfd);
    return rc;
}

int snapfile_remove(const char *dir, const char *name, struct snapfile_error *err)
{
    char path[SNAPFILE_PATH_MAX];
    if (!snapfile_name_valid(name))
        return fail(err, SNAPFILE_ENAME, SNAPFILE_STEP_NONE, 0, 0, name);
    int dirfd = open_dir(dir, err);
    if (dirfd < 0 && err->sys == ENOENT)
        return 0; /* no directory, no file: the next snapshot creates it */
    if (dirfd < 0)
        return SNAPFILE_ESYS;
    int rc = 0;
    const char *suffixes[] = {SNAPFILE_SUFFIX, SNAPFILE_TMP_SUFFIX};
    for (size_t i = 0; i < 2 && rc == 0; i++) {
        snprintf(path, sizeof path, "%s%s", name, suffixes[i]);
        if (unlinkat(dirfd, path, 0) != 0 && errno != ENOENT)
            rc = fail_sys(err, SNAPFILE_STEP_UNLINK, errno, path);
    }
    snprintf(path, sizeof path, "%s%s", name, SNAPFILE_SUFFIX);
    if (rc == 0)
        rc = sync_dir(dirfd, path, err);
    close(dirfd);
    return rc;
}

/* ---- loading ---- */

/* The codec's source: a buffer in front of the snapshot file. */
struct reader {
    int fd;
    char *buf;
    size_t pos, end; /* unread bytes are buf[pos, end) */
    int sys;         /* errno of a failed read, 0 if none */
};

static long reader_cb(void *ctx, void *out, size_t len)
{
    struct reader *r = ctx;
    char *dst = out;
    size_t got = 0;
    while (got < len) {
        if (r->pos < r->end) {
            size_t n = r->end - r->pos < len - got ? r->end - r->pos : len - got;
            memcpy(dst + got, r->buf + r->pos, n);
            r->pos += n;
            got += n;
            continue;
        }
        /* Big reads go straight into the filter's bits. */
        bool direct = len - got >= SNAPFILE_BUF_BYTES;
        ssize_t n =
            read(r->fd, direct ? dst + got : r->buf, direct ? len - got : SNAPFILE_BUF_BYTES);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            r->sys = errno;
            return -1;
        }
        if (n == 0)
            break;
        if (direct) {
            got += (size_t)n;
        } else {
            r->pos = 0;
            r->end = (size_t)n;
        }
    }
    return (long)got;
}

/* Sets <file> aside as <file>.<class>-<timestamp>[.N] (never over an existing file) and
 * reports it: class "corrupt" for damage, else "unsupported" or "toobig". */
static void set_aside_report(int dirfd, const char *file, const char *class, const char *reason,
                             const struct snapfile_load_ops *ops)
{
    bool damaged = strcmp(class, "corrupt") == 0;
    char to[SNAPFILE_PATH_MAX], why[640];
    if (set_aside(dirfd, file, class, to, sizeof to) == 0) {
        if (ops->report)
            ops->report(ops->ctx, damaged ? SNAPFILE_EV_QUARANTINED : SNAPFILE_EV_SET_ASIDE, file,
                        to, reason);
        return;
    }
    snprintf(why, sizeof why, "%s; could not move it aside: %s", reason, strerror(errno));
    if (ops->report)
        ops->report(ops->ctx, damaged ? SNAPFILE_EV_KEPT_BAD : SNAPFILE_EV_KEPT_UNLOADED, file,
                    NULL, why);
}

static void quarantine(int dirfd, const char *file, const char *reason,
                       const struct snapfile_load_ops *ops)
{
    set_aside_report(dirfd, file, "corrupt", reason, ops);
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

static const struct kind_ops *find_kind(void *ctx, uint32_t tag)
{
    (void)ctx;
    return kinds_by_tag(tag);
}

/*
 * Loads one <name>.bloom. Returns 0 when the file was loaded or set aside, or a fatal
 * snapfile_err (out of memory, over the caller's max_bytes, loaded() refused).
 */
static int load_one(int dirfd, const char *file, uint64_t max_bytes,
                    const struct sbf_budget *budget, const struct snapfile_load_ops *ops,
                    struct snapfile_error *err)
{
    char name[PROTO_MAX_NAME + 1], why[512];
    /* A directory entry may be up to NAME_MAX bytes: measure before copying. */
    size_t n = strlen(file) - strlen(SNAPFILE_SUFFIX);
    if (n < sizeof name) {
        memcpy(name, file, n);
        name[n] = '\0';
    }
    if (n >= sizeof name || !snapfile_name_valid(name)) {
        if (ops->report)
            ops->report(ops->ctx, SNAPFILE_EV_IGNORED, file, NULL, "not a valid filter name");
        return 0;
    }
    /* O_NONBLOCK: a FIFO of that name would block open() until a writer came. */
    int fd = openat(dirfd, file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        if (e == ENOMEM || e == EMFILE || e == ENFILE) /* our trouble, not the file's */
            return fail_sys(err, SNAPFILE_STEP_OPEN, e, file);
        if (e == ELOOP) { /* O_NOFOLLOW: a symlink, whatever it points to, is left alone */
            snprintf(why, sizeof why,
                     "a symbolic link: bloomd does not follow links in the data directory (the "
                     "next snapshot of '%s' would replace the link by a file); not loaded: put "
                     "the file itself here to load it",
                     name);
            if (ops->report)
                ops->report(ops->ctx, SNAPFILE_EV_IGNORED, file, NULL, why);
            return 0;
        }
        snprintf(why, sizeof why, "cannot open: %s", strerror(e));
        quarantine(dirfd, file, why, ops);
        return 0;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(why, sizeof why,
                 "%s: filter '%s' can never be saved while it is there (a snapshot is a file "
                 "renamed to this name): remove it",
                 S_ISDIR(st.st_mode) ? "a directory" : "not a regular file", name);
        if (ops->report)
            ops->report(ops->ctx, SNAPFILE_EV_IGNORED, file, NULL, why);
        return 0;
    }
    if (st.st_size == 0) {
        close(fd);
        quarantine(dirfd, file, "empty file", ops);
        return 0;
    }
    uint64_t size = (uint64_t)st.st_size;
    /* Holes where a snapshot has bytes: reading them would only find zeros, for as long as
     * the claimed size takes (a truncate -s 100G file: minutes). */
    if (size > SNAPFILE_SPARSE_MIN && (uint64_t)st.st_blocks * 512 < size / 2) {
        close(fd);
        snprintf(why, sizeof why,
                 "sparse file: %llu of its %llu bytes are allocated (bloomd writes every byte "
                 "of a snapshot)",
                 (unsigned long long)st.st_blocks * 512, (unsigned long long)size);
        quarantine(dirfd, file, why, ops);
        return 0;
    }
    /* A v3 stream spends 9 bytes on a run of zero pages, so the file size no longer
     * bounds the bits: the budget does, before anything is allocated. A caller's bound is
     * a limit, not damage. */
    bool caller_bound = max_bytes != 0;
    struct reader r = {.fd = fd, .buf = malloc(SNAPFILE_BUF_BYTES)};
    if (!r.buf) {
        close(fd);
        return fail_sys(err, SNAPFILE_STEP_ALLOC, ENOMEM, file);
    }
    const struct kind_ops *kind = NULL;
    void *f = NULL;
    struct container_header hdr;
    int rc = container_decode(reader_cb, &r, find_kind, NULL, caller_bound ? max_bytes : UINT64_MAX,
                              budget, &kind, &f, &hdr);
    free(r.buf);
    close(fd);
    if (rc == 0)
        return ops->loaded(ops->ctx, name, kind, f, &hdr, size, (int64_t)st.st_mtime) == 0
                   ? 0
                   : fail(err, SNAPFILE_ECALLER, SNAPFILE_STEP_NONE, 0, 0, file);
    if (rc == SBF_ETOOBIG && caller_bound)
        return fail(err, SNAPFILE_ECODEC, SNAPFILE_STEP_DECODE, 0, rc, file);
    if (rc == SBF_EBUDGET || rc == SBF_ENOMEM) {
        snprintf(why, sizeof why,
                 "%s: its filter needs more memory than max_memory leaves; raise it and "
                 "rename the file back to %s to load it",
                 sbf_strerror(rc), file);
        set_aside_report(dirfd, file, "toobig", why, ops);
        return 0;
    }
    if (rc == SBF_EVERSION || rc == SBF_EKIND) {
        snprintf(why, sizeof why, "%s: written by a newer bloomd? It reads it; this one does not",
                 sbf_strerror(rc));
        set_aside_report(dirfd, file, "unsupported", why, ops);
        return 0;
    }
    if (r.sys != 0)
        snprintf(why, sizeof why, "read error: %s", strerror(r.sys));
    else if (rc == SBF_EIO)
        snprintf(why, sizeof why, "truncated (%s)", sbf_strerror(rc));
    else
        snprintf(why, sizeof why, "%s", sbf_strerror(rc));
    quarantine(dirfd, file, why, ops);
    return 0;
}

/* Reads every entry name of dirfd into a NULL-terminated array (caller frees). */
static char **list_dir(int dirfd, const char *dir, struct snapfile_error *err)
{
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        fail_sys(err, SNAPFILE_STEP_SCAN, errno, dir);
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    size_t n = 0, cap = 16;
    char **names = malloc(cap * sizeof *names);
    struct dirent *de;
    errno = 0;
    while (names && (de = readdir(d)) != NULL) {
        if (n + 1 == cap) {
            char **more = realloc(names, 2 * cap * sizeof *names);
            if (!more)
                break;
            names = more;
            cap *= 2;
        }
        if (!(names[n] = strdup(de->d_name)))
            break;
        n++;
        errno = 0;
    }
    int e = errno;
    closedir(d);
    if (names)
        names[n] = NULL;
    if (e != 0 || !names) {
        fail_sys(err, SNAPFILE_STEP_SCAN, names ? e : ENOMEM, dir);
        for (size_t i = 0; names && i < n; i++)
            free(names[i]);
        free(names);
        return NULL;
    }
    return names;
}

int snapfile_load_dir(const char *dir, uint64_t max_bytes, const struct sbf_budget *budget,
                      const struct snapfile_load_ops *ops, struct snapfile_error *err)
{
    int dirfd = open_dir(dir, err);
    if (dirfd < 0)
        return SNAPFILE_ESYS;
    /* List first, then act: renaming while readdir runs may show an entry twice. */
    char **names = list_dir(dirfd, dir, err);
    if (!names) {
        close(dirfd);
        return SNAPFILE_ESYS;
    }
    int rc = 0;
    size_t i;
    for (i = 0; names[i] && rc == 0; i++) {
        const char *file = names[i];
        if (has_suffix(file, SNAPFILE_TMP_SUFFIX)) {
            if (unlinkat(dirfd, file, 0) == 0 || errno == ENOENT) {
                if (ops->report)
                    ops->report(ops->ctx, SNAPFILE_EV_TMP_REMOVED, file, NULL, NULL);
            } else if (errno == EISDIR) { /* not ours: we only write files */
                if (ops->report)
                    ops->report(ops->ctx, SNAPFILE_EV_IGNORED, file, NULL,
                                "a directory: its filter can never be saved while it is there "
                                "(snapshots are written to this name): remove it");
            } else {
                /* A read-only directory (or one we may not write): leave it and serve; the
                 * next snapshot of that filter replaces it once the directory is writable. */
                char why[128];
                snprintf(why, sizeof why, "cannot delete it: %s", strerror(errno));
                if (ops->report)
                    ops->report(ops->ctx, SNAPFILE_EV_TMP_KEPT, file, NULL, why);
            }
        } else if (has_suffix(file, SNAPFILE_SUFFIX)) {
            rc = load_one(dirfd, file, max_bytes, budget, ops, err);
        }
    }
    for (i = 0; names[i]; i++)
        free(names[i]);
    free(names);
    /* Make the deletions and renames durable before anything new is written. A directory
     * we may not write had none to make durable. */
    if (rc == 0) {
        rc = sync_dir(dirfd, dir, err);
        if (rc != 0 && (err->sys == EROFS || err->sys == EACCES || err->sys == EPERM ||
                        err->sys == EBADF || err->sys == EINVAL))
            rc = 0;
    }
    close(dirfd);
    return rc;
}
