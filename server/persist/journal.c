/*
 * journal.c - segment files, group commit on a journal thread, and replay (contract in
 * journal.h). Two buffers: the loop encodes records into `pending` under the mutex; the
 * flusher (the thread, or the MANUAL caller) takes them into `wbuf`, writes wbuf with one
 * write(2), fdatasyncs, and only then forgets it. So every byte since the last good
 * fdatasync is still in memory after a failure: the file is cut back to its synced size
 * and the bytes are written again (never trusting a retried fsync, as PostgreSQL learned).
 */
#include "server/persist/journal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "lib/le.h"
#include "server/core/clock.h"
#include "server/core/log.h"
#include "server/persist/setaside.h"

#define SEG_DIGITS 20
#define SEG_SUFFIX ".log"
#define SEG_NAME_LEN (SEG_DIGITS + 4)
#define DEFAULT_SEGMENT_BYTES ((uint64_t)64 << 20)
#define DEFAULT_MAX_BUFFER ((uint64_t)256 << 20)
#define DEFAULT_SYNC_MS 1000u
#define DEFAULT_RETRY_MS 200u
/* EVERYSEC: sync early once this much is unsynced. Every unsynced byte is kept in memory
 * (see above), so this bounds what the journal holds: 64 MiB cost 12.6 bytes of RSS per
 * key in bench-net (the buffer and its swapped twin), 16 MiB about 3. */
#define EVERYSEC_SYNC_BYTES ((size_t)16 << 20)
#define WBUF_KEEP ((size_t)4 << 20) /* a synced write buffer bigger than this is freed */
/* EVERYSEC hands records to the kernel once this many are pending, or this long after
 * the first of them: a wake-up and a write(2) per loop pass cost the loop's futex wake
 * and a context switch each (~10 ns of CPU per key at 100 keys a request). */
#define EVERYSEC_WRITE_BYTES ((size_t)256 << 10)
#define EVERYSEC_WRITE_MS 10u
#define MAX_EVENTS 1024
#define READ_BUF_BYTES ((size_t)4 << 20) /* holds any frame (JOURNAL_RECORD_MAX) twice */
/* Spares: the next segment, written with zeros ahead of use and fdatasynced, so that a
 * group commit's fdatasync overwrites blocks that exist and never changes the file's
 * size (no metadata to commit: 1.5x shorter syncs, 0.65x their CPU, on ext4 here). */
#define SPARE_NAME "spare.tmp"
#define SPARE_CHUNK ((size_t)1 << 20)
/* Zeros are fdatasynced every MiB and paced (a sleep as long as the MiB took), so a
 * group's fdatasync never queues behind a burst: bench_journal, 64 records a pass, 4,000
 * passes: p99 commit 15.4 ms with 8 MiB unpaced, 4.4 ms 1 MiB unpaced, 2.6 ms paced. */
#define SPARE_SYNC_EVERY ((uint64_t)1 << 20)
#define SPARE_PACE 1u
#define SPARE_MIN_FREE 4 /* segments' worth of free space it leaves */

struct buf {
    unsigned char *p;
    size_t len, cap;
};

struct journal {
    enum journal_mode mode;
    uint64_t segment_bytes, max_buffer;
    uint32_t sync_ms, retry_ms;
    struct journal_io io;
    char dir[JOURNAL_FILE_MAX]; /* <data_dir>/journal */
    int dirfd;
    int efd; /* eventfd: events wait */

    pthread_mutex_t mu;
    pthread_cond_t cond;
    pthread_cond_t durable_cond; /* journal_wait_durable's: durable_pos moved, or a failure */
    /* Under mu: */
    struct buf pending;        /* appended, not yet taken by the flusher */
    uint64_t next_pos;         /* position of the next record appended */
    size_t unsynced;           /* bytes the flusher holds (its wbuf.len) */
    bool commit_req;           /* ALWAYS: a group waits */
    bool write_req;            /* EVERYSEC: EVERYSEC_WRITE_BYTES wait to be written */
    bool write_armed;          /* EVERYSEC: records wait; the thread writes them by a deadline */
    bool urgent;               /* EVERYSEC: a record other than keys waits: write at once */
    bool sync_req;             /* journal_wait_durable waits: write and fdatasync at once */
    bool stop;                 /* journal_close: finish and exit */
    bool broken;               /* the last write/sync failed; appends refused */
    struct journal_error fail; /* why, while broken */
    struct journal_event ev[MAX_EVENTS];
    size_t nev;
    struct journal_stats st;
    int final_rc; /* the thread's last round, for journal_close */
    struct journal_error final_err;

    _Atomic uint64_t last_pos;    /* of the last appended record */
    _Atomic uint64_t durable_pos; /* every record <= it is on disk */
    _Atomic uint64_t seg_current; /* first position (name) of the segment being written */
    _Atomic uint64_t first_pos;   /* the first position the segments hold */

    /* Flusher only: */
    struct buf wbuf;     /* taken from pending, not yet durable */
    size_t wbuf_written; /* bytes of wbuf written to the segment since the last sync */
    uint64_t wbuf_last;  /* position of the last record in wbuf */
    uint64_t reported;   /* an event was queued for every position <= reported */
    int fd;              /* the segment being written, -1: create one first */
    uint64_t seg_synced; /* its size at the last good fdatasync */
    bool need_truncate;  /* cut it back to seg_synced before writing again */
    bool threaded;
    pthread_t thread;
    bool seg_spare; /* the segment being written was a spare (zeros ahead) */

    /* Spares (opts.spares): their thread makes one when asked; under mu, but for spares,
     * which only the flusher changes (turned off when a rename cannot work). */
    bool spares;
    pthread_cond_t spare_cond;
    bool spare_want; /* make one */
    int spare_fd;    /* SPARE_NAME, zero-filled and synced; -1: none ready */
    bool spare_threaded;
    pthread_t spare_thread;
};

/* ---- errors ---- */

static const char *step_name(enum journal_step s)
{
    switch (s) {
    case JOURNAL_STEP_NONE:
        return "journal";
    case JOURNAL_STEP_MKDIR:
        return "mkdir";
    case JOURNAL_STEP_OPENDIR:
        return "open directory";
    case JOURNAL_STEP_SCAN:
        return "read directory";
    case JOURNAL_STEP_CREATE:
        return "create";
    case JOURNAL_STEP_OPEN:
        return "open";
    case JOURNAL_STEP_READ:
        return "read";
    case JOURNAL_STEP_WRITE:
        return "write";
    case JOURNAL_STEP_SYNC:
        return "fdatasync";
    case JOURNAL_STEP_TRUNCATE:
        return "truncate";
    case JOURNAL_STEP_RENAME:
        return "rename";
    case JOURNAL_STEP_DIRSYNC:
        return "fsync directory of";
    case JOURNAL_STEP_UNLINK:
        return "unlink";
    case JOURNAL_STEP_ALLOC:
        return "allocate buffer for";
    case JOURNAL_STEP_THREAD:
        return "start thread for";
    case JOURNAL_STEP_APPEND:
        return "append to";
    case JOURNAL_STEP_APPLY:
        return "replay";
    }
    return "journal";
}

const char *journal_strerror(int err)
{
    switch (err) {
    case JOURNAL_OK:
        return "ok";
    case JOURNAL_ESYS:
        return "system call failed";
    case JOURNAL_EBROKEN:
        return "journal write failing, retrying";
    case JOURNAL_EBACKLOG:
        return "too many records wait for the disk";
    case JOURNAL_EINVAL:
        return "invalid record or option";
    case JOURNAL_ENOMEM:
        return "out of memory";
    case JOURNAL_ECALLER:
        return "stopped by the caller";
    case JOURNAL_EMODE:
        return "not available in this journal mode";
    case JOURNAL_EGONE:
        return "the record is no longer in the journal";
    case JOURNAL_EDAMAGED:
        return "damaged record, or a record missing";
    }
    return "unknown error";
}

const char *journal_format(const struct journal_error *e, char *buf, size_t len)
{
    const char *why = e->sys != 0 ? strerror(e->sys) : journal_strerror(e->code);
    snprintf(buf, len, "%s %s: %s", step_name(e->step), e->file, why);
    return buf;
}

/* Fills *err (may be NULL) and returns code. file: a path, or NULL for the journal. */
static int fail(struct journal_error *err, int code, enum journal_step step, int sys,
                const char *file)
{
    if (err) {
        err->step = step;
        err->code = code;
        err->sys = sys;
        snprintf(err->file, sizeof err->file, "%s", file ? file : JOURNAL_SUBDIR);
    }
    return code;
}

static int fail_sys(struct journal_error *err, enum journal_step step, int sys, const char *file)
{
    return fail(err, JOURNAL_ESYS, step, sys, file);
}

/* As fail_sys for a file inside the journal directory: named "journal/<file>". */
static int fail_seg(struct journal_error *err, enum journal_step step, int sys, const char *file)
{
    char path[JOURNAL_FILE_MAX];
    snprintf(path, sizeof path, JOURNAL_SUBDIR "/%s", file);
    return fail(err, JOURNAL_ESYS, step, sys, path);
}

/* ---- small helpers ---- */

static void seg_name(char out[SEG_NAME_LEN + 1], uint64_t first)
{
    snprintf(out, SEG_NAME_LEN + 1, "%020" PRIu64 SEG_SUFFIX, first);
}

/* Parses "<20 digits>.log"; false for any other name. */
static bool seg_parse(const char *name, uint64_t *first)
{
    if (strlen(name) != SEG_NAME_LEN || strcmp(name + SEG_DIGITS, SEG_SUFFIX) != 0)
        return false;
    uint64_t v = 0;
    for (int i = 0; i < SEG_DIGITS; i++) {
        if (name[i] < '0' || name[i] > '9')
            return false;
        unsigned d = (unsigned)(name[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *first = v;
    return v > 0;
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

struct seg {
    uint64_t first;
    char name[SEG_NAME_LEN + 1];
};

static int seg_cmp(const void *a, const void *b)
{
    uint64_t x = ((const struct seg *)a)->first, y = ((const struct seg *)b)->first;
    return x < y ? -1 : x > y;
}

typedef void (*ignored_fn)(void *ctx, const char *file);

/* The segments of dirfd, sorted by first position (caller frees *out). */
static int list_segments(int dirfd, struct seg **out, size_t *n, ignored_fn ignored, void *ctx,
                         struct journal_error *err)
{
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return fail_sys(err, JOURNAL_STEP_SCAN, e, NULL);
    }
    rewinddir(d);
    size_t cnt = 0, cap = 16;
    struct seg *segs = malloc(cap * sizeof *segs);
    struct dirent *de;
    int e = 0;
    errno = 0;
    while (segs && (de = readdir(d)) != NULL) {
        uint64_t first;
        if (!seg_parse(de->d_name, &first)) {
            if (ignored && has_suffix(de->d_name, SEG_SUFFIX))
                ignored(ctx, de->d_name);
            errno = 0;
            continue;
        }
        if (cnt == cap) {
            struct seg *more = realloc(segs, 2 * cap * sizeof *segs);
            if (!more) {
                e = ENOMEM;
                break;
            }
            segs = more;
            cap *= 2;
        }
        segs[cnt].first = first;
        memcpy(segs[cnt].name, de->d_name, SEG_NAME_LEN + 1);
        cnt++;
        errno = 0;
    }
    if (e == 0)
        e = segs ? errno : ENOMEM;
    closedir(d);
    if (e != 0) {
        free(segs);
        return fail_sys(err, JOURNAL_STEP_SCAN, e, NULL);
    }
    qsort(segs, cnt, sizeof *segs, seg_cmp);
    *out = segs;
    *n = cnt;
    return 0;
}

/* Opens (creating) <data_dir>/journal; returns its fd or a journal_err. */
static int open_journal_dir(const char *data_dir, bool create, char *path, size_t pathlen,
                            struct journal_error *err)
{
    snprintf(path, pathlen, "%s/" JOURNAL_SUBDIR, data_dir);
    if (create) {
        if (mkdir(path, 0755) == 0) {
            /* The new directory's entry must survive a crash before a segment is trusted. */
            int pfd = open(data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (pfd < 0 || fsync(pfd) != 0) {
                int e = errno;
                if (pfd >= 0)
                    close(pfd);
                return fail_sys(err, JOURNAL_STEP_DIRSYNC, e, path);
            }
            close(pfd);
        } else if (errno != EEXIST) {
            return fail_sys(err, JOURNAL_STEP_MKDIR, errno, path);
        }
    }
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return fail_sys(err, JOURNAL_STEP_OPENDIR, errno, path);
    return fd;
}

/* ---- reading a segment (replay and open) ---- */

enum seg_state {
    SEG_CLEAN,   /* read to its end */
    SEG_ZEROS,   /* nothing but zeros from valid_end on: a spare's unused end (or blocks
                    allocated, never written) */
    SEG_TORN,    /* a cut-short last record from valid_end on, then only zeros */
    SEG_DAMAGED, /* damage at valid_end with data after it, but no valid record */
};

/* The smallest frame: a DROP or CLEAR of a one-byte name. */
#define MIN_FRAME (JOURNAL_RECORD_OVERHEAD + 2u)
#define HOLES_KEPT 8 /* holes of one segment described one by one; the rest only counted */

/* A damaged region with valid records after it: skipped, and reading resumed there. */
struct seg_hole {
    uint64_t offset, bytes;         /* [offset, offset + bytes) of the file */
    uint64_t first_lost, last_lost; /* the positions missing across it; 0, 0 if none */
    const char *why;
};

struct seg_scan {
    enum seg_state state;
    uint64_t valid_end; /* just past the last whole valid record (where a torn end is cut) */
    uint64_t size;      /* the file's size */
    const char *why;    /* DAMAGED: what was wrong */
    struct seg_hole hole[HOLES_KEPT]; /* the first holes */
    uint64_t holes, hole_bytes, lost; /* every hole: how many, their bytes, records lost */
};

typedef int (*record_fn)(void *ctx, const struct journal_record *rec);

struct reader {
    unsigned char *buf; /* READ_BUF_BYTES */
    struct journal_scratch *scratch;
};

/* What of the file the reader holds: buf[at, have) is the file from offset base + at. */
struct inbuf {
    size_t at, have;
    uint64_t base;
    bool eof; /* read(2) said end of file */
};

/* Reads up to cap bytes at buf; bytes read, or -1 with errno. */
static ssize_t read_some(int fd, unsigned char *buf, size_t cap)
{
    for (;;) {
        ssize_t n = read(fd, buf, cap);
        if (n >= 0 || errno != EINTR)
            return n;
    }
}

/* Moves buf[at, have) to the front and reads after it. 0, or -1 with *sys set. */
static int refill(int fd, struct reader *r, struct inbuf *w, int *sys)
{
    memmove(r->buf, r->buf + w->at, w->have - w->at);
    w->base += w->at;
    w->have -= w->at;
    w->at = 0;
    /* Callers want less than a frame more, and the buffer holds any frame twice. */
    ssize_t got = read_some(fd, r->buf + w->have, READ_BUF_BYTES - w->have);
    if (got < 0) {
        *sys = errno;
        return -1;
    }
    w->eof = got == 0;
    w->have += (size_t)got;
    return 0;
}

/* True if the n bytes at p are all zero. */
static bool all_zero(const unsigned char *p, size_t n)
{
    for (; n > 0 && ((uintptr_t)p & 7) != 0; n--, p++)
        if (*p != 0)
            return false;
    uint64_t acc = 0;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        acc |= w;
    }
    for (; n > 0; n--, p++)
        acc |= *p;
    return acc == 0;
}

/* The index of the first non-zero byte of p[0, n), or n. */
static size_t next_nonzero(const unsigned char *p, size_t n)
{
    size_t i = 0;
    for (; i < n && ((uintptr_t)(p + i) & 7) != 0; i++)
        if (p[i] != 0)
            return i;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        if (v != 0)
            break;
    }
    for (; i < n; i++)
        if (p[i] != 0)
            return i;
    return n;
}

/* What follows a bad frame: where its non-zero bytes end, and the first sector of zeros. */
struct tail_scan {
    uint64_t end;  /* just past the last non-zero byte, from the frame's start; 0: none */
    uint64_t hole; /* the first SECTOR-aligned run of SECTOR zero bytes, from there too;
                      UINT64_MAX if none */
};

#define SECTOR 512u

/* Notes c[0,len), at offset at from the frame (file offset base + at), in *t. */
static void tail_chunk(struct tail_scan *t, const unsigned char *c, size_t len, uint64_t base,
                       uint64_t at)
{
    if (len == 0 || all_zero(c, len)) {
        if (len >= SECTOR && t->hole == UINT64_MAX) {
            uint64_t skip = (SECTOR - (base + at) % SECTOR) % SECTOR;
            if (skip + SECTOR <= len)
                t->hole = at + skip;
        }
        return;
    }
    size_t m = len;
    while (c[m - 1] == 0)
        m--;
    t->end = at + m;
    for (uint64_t s = (SECTOR - (base + at) % SECTOR) % SECTOR;
         t->hole == UINT64_MAX && s + SECTOR <= len; s += SECTOR)
        if (all_zero(c + s, SECTOR))
            t->hole = at + s;
}

/* Scans fd from file offset base to its end (read into buf) into *t. Returns false on a
 * read error (*sys set). A zero sector astride two reads goes unseen. */
static bool scan_tail(int fd, unsigned char *buf, uint64_t base, struct tail_scan *t, int *sys)
{
    *t = (struct tail_scan){.end = 0, .hole = UINT64_MAX};
    if (lseek(fd, (off_t)base, SEEK_SET) < 0) {
        *sys = errno;
        return false;
    }
    uint64_t at = 0; /* offset of buf[0] from base */
    for (;;) {
        ssize_t got = read_some(fd, buf, READ_BUF_BYTES);
        if (got < 0) {
            *sys = errno;
            return false;
        }
        if (got == 0)
            return true;
        tail_chunk(t, buf, (size_t)got, base, at);
        at += (uint64_t)got;
    }
}

/*
 * After a bad frame at file offset bad, looks from offset from on for the next frame that
 * continues the segment: its header checksum matches and its fields are in range (a
 * known type, reserved bytes zero), the whole frame decodes (payload checksum, fields,
 * exact length), and its position follows prev by no more records than the bytes
 * skipped could have held (MIN_FRAME each). Two 64-bit checksums over bytes that are
 * either framing or hashes the server computed make a false match out of reach, by
 * chance or by choice of keys; the position bound rejects a stray valid frame from
 * elsewhere. Returns 1 with the reader at that frame and *pos its position, 0 if there
 * is none (the reader at the end of the file), -1 on a read error. *zeros says whether
 * every byte skipped was zero.
 */
static int resync(int fd, struct reader *r, struct inbuf *w, uint64_t bad, uint64_t from,
                  uint64_t prev, uint64_t *pos, bool *zeros, int *sys)
{
    *zeros = from == bad;
    for (;;) {
        uint64_t off = w->base + w->at;
        size_t left = w->have - w->at;
        if (off < from) { /* inside the bad frame its intact header measured: skip it */
            size_t skip = from - off < left ? (size_t)(from - off) : left;
            w->at += skip;
            if (skip == left && (w->eof || refill(fd, r, w, sys) != 0))
                return w->eof ? 0 : -1;
            continue;
        }
        if (left < JOURNAL_RECORD_HEADER) {
            if (w->eof)
                return 0;
            if (refill(fd, r, w, sys) != 0)
                return -1;
            continue;
        }
        const unsigned char *h = r->buf + w->at;
        if ((h[0] | h[1] | h[2] | h[3]) == 0) {
            /* A length is never 0: no frame starts 4 or more bytes before the next non-zero
             * byte (runs of zeros are common: a spare's end, a zeroed block). */
            size_t k = next_nonzero(h, left);
            w->at += k > 4 ? k - 3 : 1;
            continue;
        }
        if (h[4] >= JOURNAL_ADD && h[4] <= JOURNAL_ADD_NEW && h[5] == 0 && h[6] == 0 && h[7] == 0) {
            size_t claimed = journal_record_claimed_size(h, left);
            if (claimed != 0 && left < claimed && !w->eof) {
                if (refill(fd, r, w, sys) != 0)
                    return -1;
                continue; /* the same candidate, now whole */
            }
            struct journal_record rec;
            if (claimed != 0 && left >= claimed &&
                journal_record_decode(h, claimed, r->scratch, &rec) > 0 && rec.pos > prev &&
                rec.pos - prev - 1 <= (off - bad) / MIN_FRAME) {
                *pos = rec.pos;
                return 1;
            }
        }
        if (*h != 0)
            *zeros = false;
        w->at++;
    }
}

/*
 * Reads the segment at fd (named for position first) from its start, calling each() per
 * valid record. A bad frame followed by a valid one (resync) is a hole, noted in *out,
 * and reading goes on. last: it is the newest segment, the only one that can hold bytes
 * never synced (a segment is begun only once all before it is durable). Returns 0 with
 * *out filled, JOURNAL_ECALLER if each() stopped, or JOURNAL_ESYS with *sys set.
 */
static int scan_segment(int fd, struct reader *r, uint64_t first, record_fn each, void *ctx,
                        bool last, struct seg_scan *out, int *sys)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        *sys = errno;
        return JOURNAL_ESYS;
    }
    memset(out, 0, sizeof *out);
    out->size = (uint64_t)st.st_size;
    struct inbuf w = {0};
    uint64_t prev = first - 1; /* the last valid position read */
    struct journal_record rec;
    for (;;) {
        long n = journal_record_decode(r->buf + w.at, w.have - w.at, r->scratch, &rec);
        if (n > 0) {
            if (each && each(ctx, &rec) != 0)
                return JOURNAL_ECALLER;
            prev = rec.pos > prev ? rec.pos : prev;
            w.at += (size_t)n;
            out->valid_end = w.base + w.at;
            continue;
        }
        if (n == JOURNAL_RECORD_PARTIAL && !w.eof) {
            if (refill(fd, r, &w, sys) != 0)
                return JOURNAL_ESYS;
            continue;
        }
        if (n == JOURNAL_RECORD_PARTIAL) {
            out->state = w.have == w.at                           ? SEG_CLEAN
                         : all_zero(r->buf + w.at, w.have - w.at) ? SEG_ZEROS
                                                                  : SEG_TORN;
            return 0;
        }
        /* A bad frame at valid_end: a hole if a valid frame follows (read on from it). */
        uint64_t bad = out->valid_end, pos = 0;
        size_t claimed = journal_record_claimed_size(r->buf + w.at, w.have - w.at);
        bool zeros;
        *sys = 0;
        int found = resync(fd, r, &w, bad, bad + claimed, prev, &pos, &zeros, sys);
        if (found < 0)
            return JOURNAL_ESYS;
        if (found > 0) {
            uint64_t bytes = w.base + w.at - bad;
            if (out->holes < HOLES_KEPT)
                out->hole[out->holes] =
                    (struct seg_hole){.offset = bad,
                                      .bytes = bytes,
                                      .first_lost = pos > prev + 1 ? prev + 1 : 0,
                                      .last_lost = pos > prev + 1 ? pos - 1 : 0,
                                      .why = zeros          ? "zeros"
                                             : claimed != 0 ? "damaged record"
                                                            : "damaged record header"};
            out->holes++;
            out->hole_bytes += bytes;
            out->lost += pos - prev - 1;
            out->valid_end = w.base + w.at;
            continue;
        }
        /*
         * No valid frame after it: damage, unless it is the end: nothing but zeros from
         * here (a spare segment's unused end); or, in the newest segment, nothing but
         * zeros after the frame whose bytes did not all reach the disk (its claimed size
         * if its header is intact, else the header's), or a sector of zeros before the
         * last data: a write torn by a crash, whose sectors reached the disk in any order
         * (over a spare nothing else leaves zeros; frames never hold 512 of them). Such
         * data was never synced, so never acknowledged; in an older segment, all of whose
         * bytes were synced before the next one began, the same is damage.
         */
        struct tail_scan t;
        if (!scan_tail(fd, r->buf, bad, &t, sys))
            return JOURNAL_ESYS;
        if (t.end == 0) {
            out->state = SEG_ZEROS;
        } else if (last &&
                   (t.end <= (claimed != 0 ? claimed : JOURNAL_RECORD_HEADER) || t.hole < t.end)) {
            out->state = SEG_TORN;
        } else {
            out->state = SEG_DAMAGED;
            out->why = claimed == 0 ? "damaged record header" : "damaged record";
        }
        return 0;
    }
}

static int reader_init(struct reader *r)
{
    r->buf = malloc(READ_BUF_BYTES);
    r->scratch = malloc(sizeof *r->scratch);
    return r->buf && r->scratch ? 0 : -1;
}

static void reader_destroy(struct reader *r)
{
    free(r->buf);
    free(r->scratch);
}

/* ---- replay ---- */

struct replay {
    const struct journal_replay_ops *ops;
    struct journal_replay_report *rep;
    uint64_t from_pos;
    uint64_t last; /* highest position seen */
};

static int replay_record(void *ctx, const struct journal_record *rec)
{
    struct replay *rp = ctx;
    rp->rep->records++;
    if (rec->pos <= rp->last) { /* written again after a failed write: already applied */
        rp->rep->skipped++;
        return 0;
    }
    rp->last = rec->pos;
    rp->rep->last_pos = rec->pos;
    if (rec->pos <= rp->from_pos) {
        rp->rep->skipped++;
        return 0;
    }
    rp->rep->applied++;
    return rp->ops->apply ? rp->ops->apply(rp->ops->ctx, rec) : 0;
}

static void replay_ignored(void *ctx, const char *file)
{
    const struct journal_replay_ops *ops = ctx;
    if (ops->report)
        ops->report(ops->ctx, JOURNAL_RP_IGNORED, file, NULL, 0, "not a segment name");
}

static void report(const struct journal_replay_ops *ops, enum journal_replay_event ev,
                   const char *file, const char *moved_to, uint64_t offset, const char *reason)
{
    if (ops->report)
        ops->report(ops->ctx, ev, file, moved_to, offset, reason);
}

/* ops->hole, or the journal's own ERROR line when the caller gave none. */
static void report_hole(const struct journal_replay_ops *ops, const struct journal_hole *h)
{
    if (ops->hole) {
        ops->hole(ops->ctx, h);
        return;
    }
    char lost[80] = "no record lost";
    if (h->first_lost != 0)
        snprintf(lost, sizeof lost, "records %" PRIu64 "..%" PRIu64 " lost (%" PRIu64 ")",
                 h->first_lost, h->last_lost, h->last_lost - h->first_lost + 1);
    log_msg(LOG_ERROR,
            "journal: %s has a hole of %" PRIu64 " bytes at offset %" PRIu64 " (%s; hole %" PRIu64
            " of %" PRIu64 "): %s, replay resumed after it; %s%s",
            h->file, h->bytes, h->offset, h->why, h->index, h->count, lost,
            h->copy ? "a copy is kept as " : "no copy could be kept: ",
            h->copy ? h->copy : h->copy_error);
}

/* Replays one segment; 0 when read, repaired or set aside, else a fatal journal_err. */
static int replay_segment(int dirfd, const struct seg *s, bool last, struct reader *r,
                          struct replay *rp, bool *dir_changed, struct journal_error *err)
{
    const struct journal_replay_ops *ops = rp->ops;
    char why[300], to[SEG_NAME_LEN + 64], copy_error[200] = "";
    int fd = openat(dirfd, s->name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0 && (errno == EACCES || errno == EROFS)) /* read it; a torn tail stays */
        fd = openat(dirfd, s->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOMEM || errno == EMFILE || errno == ENFILE)
            return fail_seg(err, JOURNAL_STEP_OPEN, errno, s->name);
        snprintf(why, sizeof why, "cannot open: %s", strerror(errno));
        report(ops, JOURNAL_RP_KEPT_BAD, s->name, NULL, 0, why);
        rp->rep->damaged++;
        return 0;
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
        close(fd);
        report(ops, JOURNAL_RP_IGNORED, s->name, NULL, 0, "not a regular file");
        return 0;
    }
    rp->rep->segments++;
    struct seg_scan sc;
    int sys = 0;
    int rc = scan_segment(fd, r, s->first, replay_record, rp, last, &sc, &sys);
    if (rc == JOURNAL_ECALLER) {
        close(fd);
        return fail(err, JOURNAL_ECALLER, JOURNAL_STEP_APPLY, 0, s->name);
    }
    if (rc != 0) { /* a read error: the file's trouble; keep it, say so, go on */
        close(fd);
        snprintf(why, sizeof why, "read error: %s", strerror(sys));
        report(ops, JOURNAL_RP_KEPT_BAD, s->name, NULL, sc.valid_end, why);
        rp->rep->damaged++;
        return 0;
    }
    /*
     * Damage: the segment stays where it is (the records replayed from it, before and
     * after a hole, are needed again if the daemon stops before a snapshot covers them)
     * and a copy of it as found, before any cut below, is kept aside for inspection.
     */
    bool copied = false;
    if (sc.holes > 0 || sc.state == SEG_DAMAGED) {
        rp->rep->damaged++;
        copied = copy_aside(dirfd, s->name, "corrupt", to, sizeof to, dir_changed) == 0;
        if (!copied)
            snprintf(copy_error, sizeof copy_error, "%s", strerror(errno));
    }
    rp->rep->holes += sc.holes;
    rp->rep->hole_bytes += sc.hole_bytes;
    rp->rep->lost += sc.lost;
    for (uint64_t i = 0; i < sc.holes && i < HOLES_KEPT && i < JOURNAL_HOLES_REPORTED; i++) {
        const struct seg_hole *sh = &sc.hole[i];
        struct journal_hole h = {.file = s->name,
                                 .copy = copied ? to : NULL,
                                 .copy_error = copied ? NULL : copy_error,
                                 .offset = sh->offset,
                                 .bytes = sh->bytes,
                                 .first_lost = sh->first_lost,
                                 .last_lost = sh->last_lost,
                                 .why = sh->why,
                                 .index = i + 1,
                                 .count = sc.holes};
        report_hole(ops, &h);
    }
    if (sc.state == SEG_ZEROS) {
        /* The end of a spare: cut off quietly (best effort: a read-only copy keeps it). */
        rp->rep->zero_bytes += sc.size - sc.valid_end;
        if (ftruncate(fd, (off_t)sc.valid_end) == 0)
            (void)fdatasync(fd);
    }
    if (sc.state == SEG_TORN) {
        uint64_t dropped = sc.size - sc.valid_end;
        rp->rep->torn++;
        rp->rep->torn_bytes += dropped;
        /* Cut it off, so the next write or replay never meets it again. */
        if (ftruncate(fd, (off_t)sc.valid_end) != 0 || fdatasync(fd) != 0)
            snprintf(why, sizeof why,
                     "last record cut short (%" PRIu64 " bytes dropped); cannot cut it off: %s",
                     dropped, strerror(errno));
        else
            snprintf(why, sizeof why, "last record cut short (%" PRIu64 " bytes dropped)", dropped);
        report(ops, JOURNAL_RP_TORN, s->name, NULL, sc.valid_end, why);
    }
    close(fd);
    if (sc.state == SEG_DAMAGED) {
        if (copied) {
            snprintf(why, sizeof why,
                     "%s at offset %" PRIu64 " of %" PRIu64 " bytes, no valid record after it; "
                     "the rest of the segment is not replayed",
                     sc.why, sc.valid_end, sc.size);
            report(ops, JOURNAL_RP_DAMAGED, s->name, to, sc.valid_end, why);
        } else {
            snprintf(why, sizeof why,
                     "%s at offset %" PRIu64 "; the rest is not replayed; cannot keep a copy: %s",
                     sc.why, sc.valid_end, copy_error);
            report(ops, JOURNAL_RP_KEPT_BAD, s->name, NULL, sc.valid_end, why);
        }
    }
    return 0;
}

int journal_replay(const char *data_dir, uint64_t from_pos, const struct journal_replay_ops *ops,
                   struct journal_replay_report *rep, struct journal_error *err)
{
    struct journal_replay_report local;
    char path[JOURNAL_FILE_MAX];
    if (!rep)
        rep = &local;
    memset(rep, 0, sizeof *rep);
    snprintf(path, sizeof path, "%s/" JOURNAL_SUBDIR, data_dir);
    int dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return errno == ENOENT ? 0 : fail_sys(err, JOURNAL_STEP_OPENDIR, errno, path);
    struct seg *segs = NULL;
    size_t n = 0;
    struct reader r = {0};
    int rc = list_segments(dirfd, &segs, &n, replay_ignored, (void *)ops, err);
    if (rc != 0)
        goto done;
    if (reader_init(&r) != 0) {
        rc = fail_sys(err, JOURNAL_STEP_ALLOC, ENOMEM, NULL);
        goto done;
    }
    struct replay rp = {.ops = ops, .rep = rep, .from_pos = from_pos};
    bool dir_changed = false;
    for (size_t i = 0; i < n && rc == 0; i++) {
        /* Every record of segment i is below segment i+1's first: covered, skip it. */
        if (i + 1 < n && from_pos < UINT64_MAX && segs[i + 1].first <= from_pos + 1)
            continue;
        rc = replay_segment(dirfd, &segs[i], i + 1 == n, &r, &rp, &dir_changed, err);
    }
    if (rc == 0 && dir_changed && fsync(dirfd) != 0)
        rc = fail_sys(err, JOURNAL_STEP_DIRSYNC, errno, path);
done:
    reader_destroy(&r);
    free(segs);
    close(dirfd);
    return rc;
}

/* ---- the writer side ---- */

static ssize_t do_write(struct journal *j, const void *p, size_t len)
{
    if (j->io.write)
        return j->io.write(j->io.ctx, j->fd, p, len);
    return write(j->fd, p, len);
}

static int do_fdatasync(struct journal *j)
{
    if (j->io.fdatasync)
        return j->io.fdatasync(j->io.ctx, j->fd);
    return fdatasync(j->fd);
}

/* Under mu: queues an event; a full queue folds into its last event, as FAILED (a
 * durable record reported failed is only an unknown outcome; never the reverse). */
static void queue_event(struct journal *j, enum journal_event_type type, uint64_t first,
                        uint64_t last, const struct journal_error *e)
{
    struct journal_event *prev = j->nev > 0 ? &j->ev[j->nev - 1] : NULL;
    if (type == JOURNAL_EV_DURABLE && prev && prev->type == JOURNAL_EV_DURABLE &&
        prev->last + 1 == first) {
        prev->last = last;
        return;
    }
    if (j->nev == MAX_EVENTS) {
        if (type != JOURNAL_EV_RECOVERED) {
            prev->type = JOURNAL_EV_FAILED;
            prev->last = last;
            if (e)
                prev->err = *e;
        }
        return;
    }
    struct journal_event *ev = &j->ev[j->nev++];
    memset(ev, 0, sizeof *ev);
    ev->type = type;
    ev->first = first;
    ev->last = last;
    if (e)
        ev->err = *e;
}

static void signal_loop(struct journal *j)
{
    uint64_t one = 1;
    /* EAGAIN means the counter is already non-zero: the loop will wake anyway. */
    ssize_t n = write(j->efd, &one, sizeof one);
    (void)n;
}

/* ---- spares ---- */

/* True if every byte of fd is zero (reads it from the start). */
static bool file_is_zeros(int fd)
{
    unsigned char *buf = malloc(SPARE_CHUNK);
    if (buf == NULL || lseek(fd, 0, SEEK_SET) != 0) {
        free(buf);
        return false;
    }
    ssize_t got;
    bool zeros = true;
    while (zeros && (got = read_some(fd, buf, SPARE_CHUNK)) > 0)
        zeros = all_zero(buf, (size_t)got);
    zeros = zeros && got == 0;
    free(buf);
    return zeros;
}

/* Makes SPARE_NAME: segment_bytes of zeros, synced. Returns its fd, or -1 (no room). */
static int make_spare(struct journal *j)
{
    struct statvfs vfs;
    if (fstatvfs(j->dirfd, &vfs) == 0 &&
        (uint64_t)vfs.f_bavail * vfs.f_frsize < SPARE_MIN_FREE * j->segment_bytes)
        return -1; /* the last free space is the journal's own */
    int fd =
        openat(j->dirfd, SPARE_NAME, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return -1;
    static const unsigned char zeros[SPARE_CHUNK];
    uint64_t done = 0, synced = 0, t0 = clock_mono_ns();
    bool ok = true;
    while (ok && done < j->segment_bytes) {
        uint64_t left = j->segment_bytes - done;
        ssize_t n = write(fd, zeros, left < SPARE_CHUNK ? (size_t)left : SPARE_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        ok = n > 0;
        done += ok ? (uint64_t)n : 0;
        if (ok && (done - synced >= SPARE_SYNC_EVERY || done == j->segment_bytes)) {
            ok = fdatasync(fd) == 0;
            synced = done;
            /* Paced: the disk spends at most 1 / (1 + SPARE_PACE) of its time on zeros. */
            uint64_t spent = clock_mono_ns() - t0;
            struct timespec rest = {.tv_sec = (time_t)(spent * SPARE_PACE / 1000000000u),
                                    .tv_nsec = (long)(spent * SPARE_PACE % 1000000000u)};
            nanosleep(&rest, NULL);
            t0 = clock_mono_ns();
        }
        pthread_mutex_lock(&j->mu);
        ok = ok && !j->stop;
        pthread_mutex_unlock(&j->mu);
    }
    if (ok && lseek(fd, 0, SEEK_SET) == 0)
        return fd;
    close(fd);
    (void)unlinkat(j->dirfd, SPARE_NAME, 0);
    return -1;
}

static void *spare_thread(void *arg)
{
    struct journal *j = arg;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (!j->stop && !j->spare_want)
            pthread_cond_wait(&j->spare_cond, &j->mu);
        if (j->stop)
            break;
        pthread_mutex_unlock(&j->mu);
        int fd = make_spare(j);
        pthread_mutex_lock(&j->mu);
        j->spare_want = false; /* asked again at the next new segment */
        j->spare_fd = fd;
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* True if a spare is ready (the flusher may then start a segment early with it); never
 * while stopping (it would only be renamed and left unused). */
static bool spare_ready(struct journal *j)
{
    if (!j->spares)
        return false;
    pthread_mutex_lock(&j->mu);
    bool ready = j->spare_fd >= 0 && !j->stop;
    pthread_mutex_unlock(&j->mu);
    return ready;
}

/* Under mu: closes and removes the ready spare, if any. */
static void drop_spare(struct journal *j)
{
    if (j->spare_fd < 0)
        return;
    close(j->spare_fd);
    j->spare_fd = -1;
    (void)unlinkat(j->dirfd, SPARE_NAME, 0);
}

/*
 * The ready spare renamed to name (never over a file), with another one asked for; -1 if
 * none is ready or it cannot be renamed. A rename that fails for another reason than an
 * existing name turns spares off: it would fail again at every commit. The rename runs
 * outside mu (a directory operation; the loop appends under mu), which is safe: the
 * spare thread leaves a ready spare alone and only the flusher takes it.
 */
static int take_spare(struct journal *j, const char *name)
{
    if (!j->spares)
        return -1;
    pthread_mutex_lock(&j->mu);
    int fd = j->spare_fd;
    pthread_mutex_unlock(&j->mu);
    int e = 0;
    if (fd >= 0 && rename_noreplace(j->dirfd, SPARE_NAME, name) != 0) {
        e = errno;
        fd = -1;
    }
    pthread_mutex_lock(&j->mu);
    if (fd >= 0) {
        j->spare_fd = -1;
    } else if (e != 0 && e != EEXIST) {
        drop_spare(j);
        j->spares = false;
    }
    if (j->spares && j->spare_fd < 0 && !j->spare_want) {
        j->spare_want = true;
        pthread_cond_signal(&j->spare_cond);
    }
    pthread_mutex_unlock(&j->mu);
    return fd;
}

/* Stops the spare thread and removes an unused spare. */
static void stop_spares(struct journal *j)
{
    if (j->spare_threaded) {
        pthread_mutex_lock(&j->mu);
        j->stop = true;
        pthread_cond_signal(&j->spare_cond);
        pthread_mutex_unlock(&j->mu);
        pthread_join(j->spare_thread, NULL);
        j->spare_threaded = false;
    }
    drop_spare(j); /* the thread is gone: no lock needed */
}

/*
 * Creates the segment named by the next position to write (positions are dense, and a
 * new segment is only started when everything before it is durable). An empty leftover
 * of that name (a crash right after its creation) is reused; a non-empty one cannot hold a
 * valid record (journal_open would have started after it), so it is set aside.
 */
static int new_segment(struct journal *j, struct journal_error *err)
{
    char name[SEG_NAME_LEN + 1], to[SEG_NAME_LEN + 64];
    uint64_t first = atomic_load(&j->durable_pos) + 1;
    seg_name(name, first);
    int fd = take_spare(j, name);
    j->seg_spare = fd >= 0;
    if (fd >= 0) {
        pthread_mutex_lock(&j->mu);
        j->st.spare_segments++;
        pthread_mutex_unlock(&j->mu);
    }
    int flags = O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW;
    if (fd < 0)
        fd = openat(j->dirfd, name, flags | O_EXCL, 0644);
    if (fd < 0 && errno == EEXIST) {
        struct stat st;
        fd = openat(j->dirfd, name, flags, 0644);
        bool zeros = false; /* a spare renamed here before a failed directory fsync */
        if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
            zeros = file_is_zeros(fd) && lseek(fd, 0, SEEK_SET) == 0;
        j->seg_spare = zeros;
        if (fd >= 0 && !zeros && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != 0)) {
            close(fd);
            fd = -1;
            if (set_aside(j->dirfd, name, "corrupt", to, sizeof to) == 0)
                fd = openat(j->dirfd, name, flags | O_EXCL, 0644);
        }
    }
    if (fd < 0)
        return fail_seg(err, JOURNAL_STEP_CREATE, errno, name);
    if (fsync(j->dirfd) != 0) {
        int e = errno;
        close(fd);
        return fail_seg(err, JOURNAL_STEP_DIRSYNC, e, name);
    }
    j->fd = fd;
    j->seg_synced = 0;
    j->need_truncate = false;
    j->wbuf_written = 0;
    atomic_store(&j->seg_current, first);
    pthread_mutex_lock(&j->mu);
    j->st.segments++;
    pthread_mutex_unlock(&j->mu);
    return 0;
}

static void cur_name(const struct journal *j, char out[SEG_NAME_LEN + 1])
{
    seg_name(out, atomic_load(&j->seg_current));
}

/* Under mu: moves pending into wbuf (a swap when wbuf is empty). */
static void take_pending(struct journal *j)
{
    if (j->pending.len == 0)
        return;
    if (j->wbuf.len == 0) {
        struct buf t = j->wbuf;
        j->wbuf = j->pending;
        j->pending = t;
        j->pending.len = 0;
    } else {
        size_t need = j->wbuf.len + j->pending.len;
        if (need > j->wbuf.cap) {
            size_t cap = j->wbuf.cap * 2 > need ? j->wbuf.cap * 2 : need;
            unsigned char *p = realloc(j->wbuf.p, cap);
            if (!p)
                return; /* stays pending: the next round tries again */
            j->wbuf.p = p;
            j->wbuf.cap = cap;
        }
        memcpy(j->wbuf.p + j->wbuf.len, j->pending.p, j->pending.len);
        j->wbuf.len = need;
        j->pending.len = 0;
    }
    j->wbuf_last = j->next_pos - 1;
}

/*
 * One round of the flusher: take what was appended, write it, and if sync (or too much
 * is unsynced) fdatasync it and rotate a full segment. On failure nothing is forgotten:
 * the segment is cut back to its synced size before the next round writes it all again.
 */
static int flush_round(struct journal *j, bool sync, struct journal_error *out)
{
    struct journal_error e, *err = &e;
    char name[SEG_NAME_LEN + 1];
    uint64_t sync_ns = 0;
    bool wrote = false, synced = false;
    int rc = 0;

    pthread_mutex_lock(&j->mu);
    take_pending(j);
    pthread_mutex_unlock(&j->mu);

    if (j->fd < 0)
        rc = new_segment(j, err);
    cur_name(j, name);
    if (rc == 0 && j->need_truncate) {
        if (ftruncate(j->fd, (off_t)j->seg_synced) != 0 ||
            lseek(j->fd, (off_t)j->seg_synced, SEEK_SET) < 0) {
            rc = fail_seg(err, JOURNAL_STEP_TRUNCATE, errno, name);
        } else {
            j->need_truncate = false;
            j->wbuf_written = 0;
        }
    }
    while (rc == 0 && j->wbuf_written < j->wbuf.len) {
        ssize_t n = do_write(j, j->wbuf.p + j->wbuf_written, j->wbuf.len - j->wbuf_written);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = fail_seg(err, JOURNAL_STEP_WRITE, n < 0 ? errno : EIO, name);
            break;
        }
        j->wbuf_written += (size_t)n;
        wrote = true;
    }
    if (rc == 0 && j->wbuf.len > 0 && (sync || j->wbuf.len >= EVERYSEC_SYNC_BYTES)) {
        uint64_t t0 = clock_mono_ns();
        if (do_fdatasync(j) != 0) {
            rc = fail_seg(err, JOURNAL_STEP_SYNC, errno, name);
        } else {
            sync_ns = clock_mono_ns() - t0;
            synced = true;
            j->seg_synced += j->wbuf.len;
            j->wbuf.len = 0;
            j->wbuf_written = 0;
            atomic_store(&j->durable_pos, j->wbuf_last);
            if (j->wbuf.cap > WBUF_KEEP) { /* else it is swapped into pending, and stays */
                free(j->wbuf.p);
                j->wbuf = (struct buf){0};
            }
        }
    }
    if (rc != 0 && (err->sys == ENOSPC || err->sys == EDQUOT) && j->spares) {
        pthread_mutex_lock(&j->mu);
        drop_spare(j); /* the space it holds is the journal's; a new one needs room first */
        pthread_mutex_unlock(&j->mu);
    }
    if (rc != 0 && (err->step == JOURNAL_STEP_WRITE || err->step == JOURNAL_STEP_SYNC)) {
        /* What reached the file after the last good sync cannot be trusted (a failed
         * fdatasync may have dropped dirty pages): cut back and write it all again. */
        j->need_truncate = true;
        j->wbuf_written = 0;
    }
    /* A full segment is closed; so is one made the usual way once a spare is ready. */
    if (rc == 0 && j->wbuf.len == 0 &&
        (j->seg_synced >= j->segment_bytes ||
         (!j->seg_spare && j->seg_synced > 0 && spare_ready(j)))) {
        close(j->fd); /* everything in it is durable: a close error cannot lose data */
        j->fd = -1;
        rc = new_segment(j, err);
    }

    pthread_mutex_lock(&j->mu);
    bool notify = false;
    uint64_t durable = atomic_load(&j->durable_pos);
    if (durable > j->reported) {
        queue_event(j, JOURNAL_EV_DURABLE, j->reported + 1, durable, NULL);
        j->reported = durable;
        notify = true;
    }
    if (rc != 0) {
        j->st.failures++;
        j->fail = *err;
        j->broken = true;
        if (j->wbuf_last > j->reported) {
            queue_event(j, JOURNAL_EV_FAILED, j->reported + 1, j->wbuf_last, err);
            j->reported = j->wbuf_last;
            notify = true;
        }
    } else if (j->broken && j->wbuf.len == 0) {
        j->broken = false;
        queue_event(j, JOURNAL_EV_RECOVERED, 0, 0, NULL);
        notify = true;
    }
    if (wrote)
        j->st.writes++;
    if (synced) {
        j->st.syncs++;
        j->st.sync_ns_sum += sync_ns;
        if (sync_ns > j->st.sync_ns_max)
            j->st.sync_ns_max = sync_ns;
    }
    j->unsynced = j->wbuf.len;
    if (synced || rc != 0)
        pthread_cond_broadcast(&j->durable_cond);
    pthread_mutex_unlock(&j->mu);
    if (notify)
        signal_loop(j);
    if (rc != 0 && out)
        *out = e;
    return rc;
}

static void deadline_after(struct timespec *ts, uint32_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static bool passed(const struct timespec *ts)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > ts->tv_sec || (now.tv_sec == ts->tv_sec && now.tv_nsec >= ts->tv_nsec);
}

static void *journal_thread(void *arg)
{
    struct journal *j = arg;
    struct journal_error e;
    struct timespec tick;
    deadline_after(&tick, j->sync_ms);
    pthread_mutex_lock(&j->mu);
    for (;;) {
        bool sync;
        if (j->broken && !j->stop) {
            struct timespec retry;
            deadline_after(&retry, j->retry_ms);
            while (!j->stop && !passed(&retry))
                pthread_cond_timedwait(&j->cond, &j->mu, &retry);
            sync = true;
        } else if (j->mode == JOURNAL_MODE_ALWAYS) {
            while (!j->stop && !j->commit_req && !j->sync_req)
                pthread_cond_wait(&j->cond, &j->mu);
            sync = true;
        } else {
            /* Writes: EVERYSEC_WRITE_MS after the first record waits, or at once once
             * EVERYSEC_WRITE_BYTES do; the sync: each sync_ms. */
            struct timespec write_by = tick;
            bool armed = false;
            while (!j->stop && !j->write_req && !j->sync_req && !passed(&tick)) {
                if (j->write_armed && !armed) {
                    deadline_after(&write_by, EVERYSEC_WRITE_MS);
                    armed = true;
                }
                if (armed && passed(&write_by))
                    break;
                bool first =
                    armed && (write_by.tv_sec < tick.tv_sec ||
                              (write_by.tv_sec == tick.tv_sec && write_by.tv_nsec < tick.tv_nsec));
                pthread_cond_timedwait(&j->cond, &j->mu, first ? &write_by : &tick);
            }
            sync = j->stop || j->sync_req || passed(&tick);
            if (sync)
                deadline_after(&tick, j->sync_ms);
        }
        bool stop = j->stop;
        j->commit_req = false;
        j->write_req = false;
        j->write_armed = false;
        j->urgent = false;
        j->sync_req = false;
        pthread_mutex_unlock(&j->mu);
        int rc = flush_round(j, sync || stop, &e);
        pthread_mutex_lock(&j->mu);
        if (stop) {
            j->final_rc = rc;
            if (rc != 0)
                j->final_err = e;
            break;
        }
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* The last valid position in the segment at dirfd/name, 0 if none. */
struct probe {
    uint64_t last;
};

static int probe_record(void *ctx, const struct journal_record *rec)
{
    struct probe *p = ctx;
    if (rec->pos > p->last)
        p->last = rec->pos;
    return 0;
}

/* The first position to give: past every record and segment name, and past min_pos. */
static int find_next_pos(struct journal *j, uint64_t min_pos, uint64_t *next,
                         struct journal_error *err)
{
    struct seg *segs = NULL;
    size_t n = 0;
    int rc = list_segments(j->dirfd, &segs, &n, NULL, NULL, err);
    if (rc != 0)
        return rc;
    uint64_t v = min_pos < UINT64_MAX ? min_pos + 1 : min_pos;
    if (n > 0) {
        atomic_store(&j->first_pos, segs[0].first);
        const struct seg *s = &segs[n - 1];
        if (s->first > v)
            v = s->first;
        struct reader r = {0};
        struct probe p = {0};
        int fd = openat(j->dirfd, s->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (reader_init(&r) != 0) {
            rc = fail_seg(err, JOURNAL_STEP_ALLOC, ENOMEM, s->name);
        } else if (fd < 0) {
            rc = fail_seg(err, JOURNAL_STEP_OPEN, errno, s->name);
        } else {
            struct seg_scan sc;
            int sys = 0;
            if (scan_segment(fd, &r, s->first, probe_record, &p, true, &sc, &sys) != 0)
                rc = fail_seg(err, JOURNAL_STEP_READ, sys, s->name);
            else if (p.last >= v)
                v = p.last + 1;
        }
        if (fd >= 0)
            close(fd);
        reader_destroy(&r);
    }
    free(segs);
    if (n == 0)
        atomic_store(&j->first_pos, v);
    *next = v;
    return rc;
}

int journal_open(const char *data_dir, const struct journal_opts *opts, struct journal **out,
                 struct journal_error *err)
{
    struct journal_opts o = {.mode = JOURNAL_MODE_EVERYSEC};
    if (opts)
        o = *opts;
    if (o.mode != JOURNAL_MODE_MANUAL && o.mode != JOURNAL_MODE_EVERYSEC &&
        o.mode != JOURNAL_MODE_ALWAYS)
        return fail(err, JOURNAL_EINVAL, JOURNAL_STEP_NONE, 0, NULL);
    struct journal *j = calloc(1, sizeof *j);
    if (!j)
        return fail_sys(err, JOURNAL_STEP_ALLOC, ENOMEM, NULL);
    j->mode = o.mode;
    j->segment_bytes = o.segment_bytes ? o.segment_bytes : DEFAULT_SEGMENT_BYTES;
    j->max_buffer = o.max_buffer ? o.max_buffer : DEFAULT_MAX_BUFFER;
    j->sync_ms = o.sync_ms ? o.sync_ms : DEFAULT_SYNC_MS;
    j->retry_ms = o.retry_ms ? o.retry_ms : DEFAULT_RETRY_MS;
    if (o.io)
        j->io = *o.io;
    j->fd = -1;
    j->efd = -1;
    j->spare_fd = -1;
    int rc = 0;
    bool mu = false, cond = false, durable_cond = false, spare_cond = false;

    j->dirfd = open_journal_dir(data_dir, true, j->dir, sizeof j->dir, err);
    if (j->dirfd < 0) {
        rc = j->dirfd;
        j->dirfd = -1;
        goto fail;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    cond = pthread_cond_init(&j->cond, &ca) == 0;
    durable_cond = pthread_cond_init(&j->durable_cond, &ca) == 0;
    pthread_condattr_destroy(&ca);
    mu = pthread_mutex_init(&j->mu, NULL) == 0;
    spare_cond = pthread_cond_init(&j->spare_cond, NULL) == 0;
    if (!cond || !durable_cond || !mu || !spare_cond) {
        rc = fail_sys(err, JOURNAL_STEP_THREAD, ENOMEM, NULL);
        goto fail;
    }
    j->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (j->efd < 0) {
        rc = fail_sys(err, JOURNAL_STEP_THREAD, errno, NULL);
        goto fail;
    }
    uint64_t next;
    if ((rc = find_next_pos(j, o.min_pos, &next, err)) != 0)
        goto fail;
    j->next_pos = next;
    j->reported = next - 1;
    atomic_store(&j->last_pos, next - 1);
    atomic_store(&j->durable_pos, next - 1);
    (void)unlinkat(j->dirfd, SPARE_NAME, 0); /* a crash's half-made spare */
    /* Before the first segment, which asks for the first spare (and starts the usual way). */
    if (o.spares) {
        j->spares = pthread_create(&j->spare_thread, NULL, spare_thread, j) == 0;
        j->spare_threaded = j->spares;
    }
    if ((rc = new_segment(j, err)) != 0)
        goto fail;
    if (j->mode != JOURNAL_MODE_MANUAL) {
        int e = pthread_create(&j->thread, NULL, journal_thread, j);
        if (e != 0) {
            rc = fail_sys(err, JOURNAL_STEP_THREAD, e, NULL);
            goto fail;
        }
        j->threaded = true;
    }
    *out = j;
    return 0;
fail:
    stop_spares(j);
    if (mu)
        pthread_mutex_destroy(&j->mu);
    if (cond)
        pthread_cond_destroy(&j->cond);
    if (durable_cond)
        pthread_cond_destroy(&j->durable_cond);
    if (spare_cond)
        pthread_cond_destroy(&j->spare_cond);
    if (j->efd >= 0)
        close(j->efd);
    if (j->fd >= 0)
        close(j->fd);
    if (j->dirfd >= 0)
        close(j->dirfd);
    free(j);
    return rc;
}

int journal_close(struct journal *j, struct journal_error *err)
{
    if (!j)
        return 0;
    int rc;
    if (j->threaded) {
        pthread_mutex_lock(&j->mu);
        j->stop = true;
        pthread_cond_signal(&j->cond);
        pthread_mutex_unlock(&j->mu);
        pthread_join(j->thread, NULL);
        rc = j->final_rc;
        if (rc != 0 && err)
            *err = j->final_err;
    } else {
        rc = flush_round(j, true, err);
    }
    stop_spares(j);
    if (j->fd >= 0)
        close(j->fd);
    close(j->dirfd);
    close(j->efd);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cond);
    pthread_cond_destroy(&j->durable_cond);
    pthread_cond_destroy(&j->spare_cond);
    free(j->pending.p);
    free(j->wbuf.p);
    free(j);
    return rc;
}

/* Under mu. */
static int check_locked(const struct journal *j, struct journal_error *err)
{
    if (j->broken) {
        if (err)
            *err = j->fail;
        return JOURNAL_EBROKEN;
    }
    if ((uint64_t)j->pending.len + j->unsynced > j->max_buffer)
        return fail(err, JOURNAL_EBACKLOG, JOURNAL_STEP_APPEND, 0, NULL);
    return 0;
}

int journal_check(const struct journal *j, struct journal_error *err)
{
    struct journal *mj = (struct journal *)j; /* the mutex, not the journal, changes */
    pthread_mutex_lock(&mj->mu);
    int rc = check_locked(j, err);
    pthread_mutex_unlock(&mj->mu);
    return rc;
}

/* The i-th of the frames rec is split into (see journal_append). */
static struct journal_record piece(const struct journal_record *rec, size_t i)
{
    struct journal_record p = *rec;
    if (journal_record_has_hashes(rec)) {
        size_t at = i * JOURNAL_MAX_HASHES, left = rec->nhashes - at;
        p.hashes = rec->hashes + at;
        p.nhashes = left < JOURNAL_MAX_HASHES ? left : JOURNAL_MAX_HASHES;
    } else if (rec->type == JOURNAL_UNION || rec->type == JOURNAL_INTERSECT) {
        size_t at = i * JOURNAL_MAX_SOURCES, left = rec->nsources - at;
        p.sources = rec->sources + at;
        p.nsources = left < JOURNAL_MAX_SOURCES ? left : JOURNAL_MAX_SOURCES;
    }
    return p;
}

static size_t npieces(const struct journal_record *rec)
{
    if (journal_record_has_hashes(rec) && rec->nhashes > 0)
        return (rec->nhashes + JOURNAL_MAX_HASHES - 1) / JOURNAL_MAX_HASHES;
    if ((rec->type == JOURNAL_UNION || rec->type == JOURNAL_INTERSECT) && rec->nsources > 0)
        return (rec->nsources + JOURNAL_MAX_SOURCES - 1) / JOURNAL_MAX_SOURCES;
    return 1;
}

/* Room for total more bytes in the pending buffer, under j->mu: 0 or an err. */
static int reserve_pending(struct journal *j, size_t total)
{
    /* The caller checked before mutating; the mutation happened, so record it even if the
     * disk broke meanwhile (it is retried with the rest). Only a caller that never checks
     * meets this hard bound. */
    if ((uint64_t)j->pending.len + j->unsynced + total > 2 * j->max_buffer)
        return JOURNAL_EBACKLOG;
    struct buf *b = &j->pending;
    if (b->len + total > b->cap) {
        size_t cap = b->cap ? b->cap : 64 * 1024;
        while (cap < b->len + total)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p)
            return JOURNAL_ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    return 0;
}

/* After n records of total bytes were buffered, under j->mu. */
static void appended(struct journal *j, size_t n, size_t total, enum journal_type type,
                     uint64_t *pos)
{
    j->st.records += n;
    j->st.bytes += total;
    /* CREATE, DROP, CLEAR, UNION, INTERSECT: rare, and a kill -9 right after DROP's reply
     * must not bring the filter back, so they go to the kernel at the end of the pass. */
    if (type != JOURNAL_ADD && type != JOURNAL_ADD_NEW && type != JOURNAL_DELETE &&
        type != JOURNAL_ROTATE)
        j->urgent = true;
    atomic_store(&j->last_pos, j->next_pos - 1);
    if (pos)
        *pos = j->next_pos - 1;
}

int journal_append_frame(struct journal *j, const void *frame, size_t n, uint64_t *pos)
{
    const unsigned char *f = frame;
    if (n < JOURNAL_RECORD_OVERHEAD || n - JOURNAL_RECORD_OVERHEAD != le_get32(f) || f[4] == 0 ||
        f[4] > JOURNAL_TYPE_LAST)
        return JOURNAL_EINVAL;
    pthread_mutex_lock(&j->mu);
    int rc = le_get64(f + 8) != j->next_pos ? JOURNAL_EINVAL : reserve_pending(j, n);
    if (rc == 0) {
        memcpy(j->pending.p + j->pending.len, f, n);
        j->pending.len += n;
        j->next_pos++;
        appended(j, 1, n, (enum journal_type)f[4], pos);
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

int journal_append(struct journal *j, const struct journal_record *rec, uint64_t *pos)
{
    size_t n = npieces(rec), total = 0;
    for (size_t i = 0; i < n; i++) {
        struct journal_record p = piece(rec, i);
        size_t sz = journal_record_size(&p);
        if (sz == 0)
            return JOURNAL_EINVAL;
        total += sz;
    }
    pthread_mutex_lock(&j->mu);
    int rc = reserve_pending(j, total);
    if (rc == 0) {
        struct buf *b = &j->pending;
        for (size_t i = 0; i < n; i++) {
            struct journal_record p = piece(rec, i);
            long w = journal_record_encode(&p, j->next_pos++, b->p + b->len, b->cap - b->len);
            b->len += (size_t)w; /* cannot fail: sized and validated above */
        }
        appended(j, n, total, rec->type, pos);
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

void journal_commit(struct journal *j)
{
    if (j->mode == JOURNAL_MODE_MANUAL)
        return;
    pthread_mutex_lock(&j->mu);
    if (j->mode == JOURNAL_MODE_ALWAYS) {
        if (j->pending.len > 0) {
            j->commit_req = true;
            pthread_cond_signal(&j->cond);
        }
    } else if ((j->pending.len >= EVERYSEC_WRITE_BYTES || j->urgent) && !j->write_req) {
        /* Written off the loop in 256 KiB pieces or every 10 ms, whichever comes first,
         * so a kill -9 loses at most that (records other than keys: at once); fdatasync
         * once per sync_ms. */
        j->write_req = true;
        pthread_cond_signal(&j->cond);
    } else if (j->pending.len > 0 && !j->write_armed && !j->write_req) {
        j->write_armed = true;
        pthread_cond_signal(&j->cond);
    }
    pthread_mutex_unlock(&j->mu);
}

int journal_wait_durable(struct journal *j, uint64_t pos, struct journal_error *err)
{
    if (atomic_load(&j->durable_pos) >= pos)
        return 0;
    if (!j->threaded)
        return fail(err, JOURNAL_EMODE, JOURNAL_STEP_NONE, 0, NULL);
    int rc = 0;
    pthread_mutex_lock(&j->mu);
    while (atomic_load(&j->durable_pos) < pos) {
        if (j->broken) {
            *err = j->fail;
            rc = j->fail.code;
            break;
        }
        if (!j->sync_req) {
            j->sync_req = true;
            pthread_cond_signal(&j->cond);
        }
        pthread_cond_wait(&j->durable_cond, &j->mu);
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

int journal_write(struct journal *j, struct journal_error *err)
{
    if (j->mode != JOURNAL_MODE_MANUAL)
        return fail(err, JOURNAL_EMODE, JOURNAL_STEP_NONE, 0, NULL);
    return flush_round(j, false, err);
}

int journal_sync(struct journal *j, uint64_t *durable, struct journal_error *err)
{
    if (j->mode != JOURNAL_MODE_MANUAL)
        return fail(err, JOURNAL_EMODE, JOURNAL_STEP_NONE, 0, NULL);
    int rc = flush_round(j, true, err);
    if (durable)
        *durable = atomic_load(&j->durable_pos);
    return rc;
}

uint64_t journal_last_pos(const struct journal *j)
{
    return atomic_load(&((struct journal *)j)->last_pos);
}

uint64_t journal_durable_pos(const struct journal *j)
{
    return atomic_load(&((struct journal *)j)->durable_pos);
}

int journal_fd(const struct journal *j)
{
    return j->efd;
}

size_t journal_poll(struct journal *j, journal_event_fn fn, void *ctx)
{
    struct journal_event batch[16];
    uint64_t v;
    size_t total = 0;
    ssize_t r = read(j->efd, &v, sizeof v); /* clears it; events queued later set it again */
    (void)r;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        size_t n = j->nev < 16 ? j->nev : 16;
        memcpy(batch, j->ev, n * sizeof *batch);
        memmove(j->ev, j->ev + n, (j->nev - n) * sizeof *j->ev);
        j->nev -= n;
        pthread_mutex_unlock(&j->mu);
        if (n == 0)
            return total;
        for (size_t i = 0; i < n; i++)
            fn(ctx, &batch[i]);
        total += n;
    }
}

int journal_truncate_before(struct journal *j, uint64_t pos, unsigned *removed,
                            struct journal_error *err)
{
    struct seg *segs = NULL;
    size_t n = 0;
    unsigned count = 0;
    int rc = list_segments(j->dirfd, &segs, &n, NULL, NULL, err);
    if (rc != 0)
        return rc;
    uint64_t current = atomic_load(&j->seg_current);
    for (size_t i = 0; i + 1 < n && rc == 0; i++) {
        /* Segment i holds positions below segment i+1's first. */
        if (segs[i].first >= current || pos == UINT64_MAX || segs[i + 1].first > pos + 1)
            break;
        /* First, so that a reader told the records are there finds them (or a gone one). */
        atomic_store(&j->first_pos, segs[i + 1].first);
        if (unlinkat(j->dirfd, segs[i].name, 0) != 0 && errno != ENOENT)
            rc = fail_seg(err, JOURNAL_STEP_UNLINK, errno, segs[i].name);
        else
            count++;
    }
    if (count > 0 && fsync(j->dirfd) != 0 && rc == 0)
        rc = fail_sys(err, JOURNAL_STEP_DIRSYNC, errno, j->dir);
    free(segs);
    if (removed)
        *removed += count;
    return rc;
}

uint64_t journal_first_pos(const struct journal *j)
{
    return atomic_load(&((struct journal *)j)->first_pos);
}

/* ---- reading back ---- */

/* The first position of the segment holding pos (the last one whose first is <= pos). */
static int find_segment(int dirfd, uint64_t pos, uint64_t *first, struct journal_error *err)
{
    struct seg *segs = NULL;
    size_t n = 0;
    int rc = list_segments(dirfd, &segs, &n, NULL, NULL, err);
    if (rc != 0)
        return rc;
    rc = fail(err, JOURNAL_EGONE, JOURNAL_STEP_SCAN, 0, NULL);
    for (size_t i = n; i-- > 0;)
        if (segs[i].first <= pos) {
            *first = segs[i].first;
            rc = 0;
            break;
        }
    free(segs);
    return rc;
}

static int damaged(struct journal_error *err, const char *name)
{
    char path[JOURNAL_FILE_MAX];
    snprintf(path, sizeof path, JOURNAL_SUBDIR "/%s", name);
    return fail(err, JOURNAL_EDAMAGED, JOURNAL_STEP_READ, 0, path);
}

/*
 * Segments are read with pread(2) straight into out, frames checked in place and the ones
 * before c->next (a cursor that starts at a segment's beginning) squeezed out. A segment
 * ends at its end of file, or where zeros begin (a spare's unused end): the next one must
 * then start at c->next. Positions dense, every frame decoded: a hole, or a torn or
 * damaged frame before upto, is never handed on.
 */
int journal_read_frames(const char *data_dir, struct journal_cursor *c, uint64_t upto, void *outv,
                        size_t cap, size_t *n, struct journal_scratch *scratch,
                        struct journal_error *err)
{
    unsigned char *out = outv;
    char path[JOURNAL_FILE_MAX], name[SEG_NAME_LEN + 1];
    size_t len = 0;
    int fd = -1, rc = 0;
    *n = 0;
    if (c->next > upto)
        return 0;
    if (cap < JOURNAL_RECORD_MAX || c->next == 0)
        return fail(err, JOURNAL_EINVAL, JOURNAL_STEP_READ, 0, NULL);
    snprintf(path, sizeof path, "%s/" JOURNAL_SUBDIR, data_dir);
    int dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return fail(err, errno == ENOENT ? JOURNAL_EGONE : JOURNAL_ESYS, JOURNAL_STEP_OPENDIR,
                    errno, path);
    while (c->next <= upto && cap - len >= JOURNAL_RECORD_MAX) {
        if (fd < 0) {
            if (c->seg == 0) {
                if ((rc = find_segment(dirfd, c->next, &c->seg, err)) != 0)
                    break;
                c->off = 0;
            }
            seg_name(name, c->seg);
            fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
            if (fd < 0) {
                int e = errno;
                rc = fail_seg(err, JOURNAL_STEP_OPEN, e, name);
                if (e == ENOENT) /* truncated since it was found */
                    rc = err != NULL ? (err->code = JOURNAL_EGONE) : JOURNAL_EGONE;
                break;
            }
        }
        ssize_t got = pread(fd, out + len, cap - len, (off_t)c->off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            rc = fail_seg(err, JOURNAL_STEP_READ, errno, name);
            break;
        }
        size_t src = len, end = len + (size_t)got;
        long k = 0;
        struct journal_record rec;
        while (c->next <= upto &&
               (k = journal_record_decode(out + src, end - src, scratch, &rec)) > 0) {
            if (rec.pos > c->next)
                break; /* one missing */
            if (rec.pos == c->next) {
                memmove(out + len, out + src, (size_t)k);
                len += (size_t)k;
                c->next++;
            }
            src += (size_t)k;
            c->off += (uint64_t)k;
        }
        if (c->next > upto)
            break;
        if (k > 0) {
            rc = damaged(err, name);
            break;
        }
        if (k == JOURNAL_RECORD_PARTIAL && end == cap)
            continue; /* the next frame did not fit in the room left: read from it */
        /* The end of the file, or bytes that are not a frame: the segment's end if only
         * zeros follow and the next segment starts at c->next. */
        uint64_t first = 0;
        if (!all_zero(out + src, end - src)) {
            rc = damaged(err, name);
            break;
        }
        if ((rc = find_segment(dirfd, c->next, &first, err)) != 0)
            break;
        if (first != c->next || first == c->seg) { /* this one should have held it */
            rc = damaged(err, name);
            break;
        }
        close(fd);
        fd = -1;
        c->seg = first;
        c->off = 0;
    }
    if (fd >= 0)
        close(fd);
    close(dirfd);
    if (rc != 0)
        return rc;
    *n = len;
    return 0;
}

void journal_stats(const struct journal *j, struct journal_stats *out)
{
    struct journal *mj = (struct journal *)j;
    pthread_mutex_lock(&mj->mu);
    *out = j->st;
    out->buffered = j->pending.len + j->unsynced;
    out->broken = j->broken;
    pthread_mutex_unlock(&mj->mu);
}
