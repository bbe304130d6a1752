/*
 * journal.h - the write-ahead journal: every change to the filters since the snapshots,
 * as checksummed records (lib/journal_record.h) in segment files
 * <data_dir>/journal/<first position, 20 digits>.log, group-committed by a journal
 * thread, and replayed at start-up. Workload: the event loop appends ~100-hash ADD
 * records at hundreds of thousands per second and must never block on the disk; one
 * write(2) and, under `always`, one fdatasync(2) serve every record appended meanwhile.
 *
 * Threads: journal_check, journal_append and journal_commit are called by the event loop
 * (or several: they serialise on one mutex held for a memcpy); journal_poll by one thread
 * only (the loop that holds replies); journal_truncate_before by one thread at a time, off
 * the loop; the queries from anywhere. All writes, fdatasyncs and segment rotations run
 * on the journal thread (modes EVERYSEC, ALWAYS) or inside journal_write/journal_sync
 * (mode MANUAL). No libevent here: the loop watches journal_fd(), calls journal_poll().
 *
 * Positions: every record gets the next position (1, 2, ...; dense within a run, never
 * reused, increasing across reopen). A snapshot that covers position P holds the effect
 * of every record <= P. A failed write or fdatasync loses nothing: the records stay
 * buffered and are written again (after the file is cut back to its last synced size)
 * until it succeeds; meanwhile journal_check refuses new writes.
 */
#ifndef BLOOMD_SERVER_JOURNAL_H
#define BLOOMD_SERVER_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lib/journal_record.h"

#define JOURNAL_SUBDIR "journal" /* inside the data directory */

enum journal_err {
    JOURNAL_OK = 0,
    JOURNAL_ESYS = -1,     /* a system call failed: see journal_error.sys */
    JOURNAL_EBROKEN = -2,  /* an earlier write or fdatasync failed and is being retried */
    JOURNAL_EBACKLOG = -3, /* opts.max_buffer bytes of records wait for the disk */
    JOURNAL_EINVAL = -4,   /* a record the codec refuses, or a bad option */
    JOURNAL_ENOMEM = -5,   /* the append buffer could not grow */
    JOURNAL_ECALLER = -6,  /* replay: the apply callback returned non-zero */
    JOURNAL_EMODE = -7,    /* journal_write/sync outside MANUAL, journal_wait_durable in it */
    JOURNAL_EGONE = -8,    /* read: the record asked for is in no segment (truncated) */
    JOURNAL_EDAMAGED = -9, /* read: a frame does not check, or the positions skip one */
};

/* Which step failed: the first words of a journal_format() message. */
enum journal_step {
    JOURNAL_STEP_NONE = 0,
    JOURNAL_STEP_MKDIR,    /* create <data_dir>/journal */
    JOURNAL_STEP_OPENDIR,  /* open it */
    JOURNAL_STEP_SCAN,     /* read its entries */
    JOURNAL_STEP_CREATE,   /* create a segment */
    JOURNAL_STEP_OPEN,     /* open a segment to read it */
    JOURNAL_STEP_READ,     /* read(2) of a segment */
    JOURNAL_STEP_WRITE,    /* write(2) to the current segment */
    JOURNAL_STEP_SYNC,     /* fdatasync(2) of the current segment */
    JOURNAL_STEP_TRUNCATE, /* cutting a segment back (after a failure, or a torn tail) */
    JOURNAL_STEP_RENAME,   /* setting a damaged segment aside */
    JOURNAL_STEP_DIRSYNC,  /* fsync of the journal directory */
    JOURNAL_STEP_UNLINK,   /* journal_truncate_before removing a segment */
    JOURNAL_STEP_ALLOC,    /* a buffer */
    JOURNAL_STEP_THREAD,   /* starting the journal thread or its eventfd */
    JOURNAL_STEP_APPEND,   /* journal_append refused the record (code says why) */
    JOURNAL_STEP_APPLY,    /* replay's apply callback stopped */
};

#define JOURNAL_FILE_MAX 1024

/* The detail behind a non-zero result. */
struct journal_error {
    enum journal_step step;
    int code;                    /* the journal_err */
    int sys;                     /* errno of the failing call, 0 if none */
    char file[JOURNAL_FILE_MAX]; /* "journal/<segment>" or the directory */
};

/*
 * Formats "<step> <file>: <reason>" (e.g. "fdatasync journal/00000000000000000001.log: No
 * space left on device") into buf (always NUL-terminated) and returns buf. The server
 * replies "SERVER_ERROR journal: <that>".
 */
const char *journal_format(const struct journal_error *e, char *buf, size_t len);
const char *journal_strerror(int err); /* a static text for a journal_err */

enum journal_mode {
    JOURNAL_MODE_MANUAL,   /* no thread: the caller calls journal_write/journal_sync */
    JOURNAL_MODE_EVERYSEC, /* thread: write within 10 ms or per 256 KiB; sync each sync_ms */
    JOURNAL_MODE_ALWAYS,   /* thread: each journal_commit -> one write + one fdatasync */
};

/* System calls, replaceable by tests (fault injection). NULL members: the real ones. */
struct journal_io {
    ssize_t (*write)(void *ctx, int fd, const void *buf, size_t len);
    int (*fdatasync)(void *ctx, int fd);
    void *ctx;
};

struct journal_opts {
    enum journal_mode mode;
    uint64_t segment_bytes;      /* rotate at a sync once a segment is this big; 0: 64 MiB */
    uint64_t max_buffer;         /* refuse appends (EBACKLOG) past this; 0: 256 MiB */
    uint64_t min_pos;            /* new records get positions > min_pos (see journal_open) */
    uint32_t sync_ms;            /* EVERYSEC period; 0: 1000 */
    uint32_t retry_ms;           /* wait after a failure before writing again; 0: 200 */
    const struct journal_io *io; /* NULL: the real system calls; copied */
    bool spares;                 /* write segments over zeros made ahead (SPARE_NAME in the
                                    journal dir, by a thread of its own): an fdatasync then
                                    never changes a file's size. For ALWAYS; the disk writes
                                    each segment twice */
};

struct journal;

/*
 * Opens the journal of data_dir for appending: creates <data_dir>/journal if missing
 * (fsyncing data_dir), finds the last position in the existing segments and starts a
 * new segment after it. The first record appended gets a position greater than that
 * last one and than opts->min_pos: pass the largest of the snapshots' journal_pos and of
 * journal_replay's last_pos, so positions never go back even if the journal directory was
 * lost or its last segment was set aside. Call journal_replay
 * first (it repairs torn tails); opts may be NULL (EVERYSEC, defaults). Returns 0 and sets
 * *out, or a journal_err with *err filled. The caller ends it with journal_close().
 */
int journal_open(const char *data_dir, const struct journal_opts *opts, struct journal **out,
                 struct journal_error *err);

/*
 * Writes and fdatasyncs what is buffered, stops the thread and frees j; j may be NULL.
 * Returns 0, or the journal_err of a final write/sync that failed (*err filled; the
 * records not written are lost, as on a crash). Events not yet polled are dropped.
 */
int journal_close(struct journal *j, struct journal_error *err);

/*
 * 0 if the journal takes writes now, else JOURNAL_EBROKEN (*err holds the failure of the
 * disk, e.g. "write ...: No space left on device") or JOURNAL_EBACKLOG (more than
 * opts.max_buffer bytes wait). Call it before a mutation: a write that cannot be journaled
 * is refused before it changes anything. err may be NULL.
 */
int journal_check(const struct journal *j, struct journal_error *err);

/*
 * Buffers rec (no system call): call it after the mutation journal_check allowed. It is
 * taken even if the disk failed meanwhile (it is written with the retry), so it fails only
 * with JOURNAL_EINVAL, JOURNAL_ENOMEM, or JOURNAL_EBACKLOG past twice opts.max_buffer
 * (a caller that never checks); nothing is buffered then. ADD batches over
 * JOURNAL_MAX_HASHES and UNION/INTERSECT over JOURNAL_MAX_SOURCES become several
 * consecutive records (replaying them in order has the same effect). Returns 0 and sets
 * *pos (may be NULL) to the position of the last record. rec->pos is ignored.
 */
int journal_append(struct journal *j, const struct journal_record *rec, uint64_t *pos);

/*
 * As journal_append, for one record already encoded (journal_record_encode) at the
 * position the journal gives next, journal_last_pos() + 1: its n bytes are copied as they
 * are. JOURNAL_EINVAL, nothing buffered, if frame is not one frame's size or has another
 * position. For a caller that sends the same frame elsewhere too (replication).
 */
int journal_append_frame(struct journal *j, const void *frame, size_t n, uint64_t *pos);

/*
 * End of an event-loop pass: ALWAYS wakes the thread to write and fdatasync everything
 * appended so far as one group (groups that pile up while it syncs share the next
 * fdatasync); EVERYSEC has the thread write(2) them within 10 ms, at once if 256 KiB
 * wait (fdatasync once per sync_ms), waking it only for the first of them or the 256 KiB;
 * MANUAL does nothing. Cheap when the thread is busy: the signal finds no waiter.
 */
void journal_commit(struct journal *j);

/*
 * Any thread but the journal's own, while it is open (not MANUAL): returns 0 once every
 * record <= pos is on disk, asking the thread to write and fdatasync at once rather than at
 * its next sync_ms tick. If a write or fdatasync fails first, returns its journal_err with
 * *err set (the records are kept and written again: they may still become durable later).
 */
int journal_wait_durable(struct journal *j, uint64_t pos, struct journal_error *err);

/* MANUAL only: writes every buffered record with one write(2) (no fdatasync). 0 or an err. */
int journal_write(struct journal *j, struct journal_error *err);

/*
 * MANUAL only: journal_write, then fdatasync, then rotates the segment if it is full.
 * Returns 0 and sets *durable (may be NULL) to journal_durable_pos(), or a journal_err.
 */
int journal_sync(struct journal *j, uint64_t *durable, struct journal_error *err);

uint64_t journal_last_pos(const struct journal *j);    /* of the last appended record, or 0 */
uint64_t journal_durable_pos(const struct journal *j); /* every record <= it is on disk */

/* What the journal tells the loop, in order, through journal_poll(). */
enum journal_event_type {
    JOURNAL_EV_DURABLE,   /* records [first, last] are on disk */
    JOURNAL_EV_FAILED,    /* writing [first, last] failed (err): their replies get
                             SERVER_ERROR; the journal retries them, no event when it does */
    JOURNAL_EV_RECOVERED, /* a retry succeeded: appends are accepted again */
};

struct journal_event {
    enum journal_event_type type;
    uint64_t first, last;     /* positions (inclusive); 0, 0 for RECOVERED */
    struct journal_error err; /* FAILED: what failed */
};

typedef void (*journal_event_fn)(void *ctx, const struct journal_event *ev);

/* An eventfd (non-blocking) that becomes readable when events wait; owned by j. */
int journal_fd(const struct journal *j);

/* Calls fn for every waiting event, oldest first, and clears journal_fd(). Returns how many. */
size_t journal_poll(struct journal *j, journal_event_fn fn, void *ctx);

/*
 * Deletes the segments whose every record is <= pos (all snapshots cover them), never the
 * one being written, then fsyncs the directory. Blocking: call it off the event loop.
 * Returns 0 and adds the number removed to *removed (may be NULL), or a journal_err.
 */
int journal_truncate_before(struct journal *j, uint64_t pos, unsigned *removed,
                            struct journal_error *err);

/*
 * The first position the segments hold: every record from it to journal_durable_pos() is
 * on disk (records below it were truncated). Any thread.
 */
uint64_t journal_first_pos(const struct journal *j);

/* ---- reading back (replication) ---- */

/* Where journal_read_frames goes on from; set next and zero the rest to start anywhere. */
struct journal_cursor {
    uint64_t next; /* position of the next frame wanted (> 0) */
    uint64_t seg;  /* first position (name) of the segment holding it; 0: look it up */
    uint64_t off;  /* its byte offset in that segment, when seg is not 0 */
};

/*
 * Reads the frames of positions c->next .. upto from the segments of <data_dir>/journal,
 * byte for byte as they are on disk, into out[0, cap) (cap >= JOURNAL_RECORD_MAX): whole
 * frames, positions dense from c->next, at least one; it stops once less than
 * JOURNAL_RECORD_MAX of room is left, or at upto. Changes no file (unlike
 * journal_replay, it repairs nothing), so it may run on any thread beside the journal's
 * writer, provided upto <= journal_durable_pos() (bytes past that may be half written).
 * scratch: the caller's, for decoding. Returns 0 with *n bytes (0 when c->next > upto)
 * and c moved past them; else *n is 0 and: JOURNAL_EGONE if position c->next is in no
 * segment (truncated), JOURNAL_EDAMAGED if a frame does not check or the positions skip
 * (*err names the segment), JOURNAL_ESYS with *err filled.
 */
int journal_read_frames(const char *data_dir, struct journal_cursor *c, uint64_t upto, void *out,
                        size_t cap, size_t *n, struct journal_scratch *scratch,
                        struct journal_error *err);

/* Figures for STATS, since journal_open. */
struct journal_stats {
    uint64_t records;        /* appended */
    uint64_t bytes;          /* appended (framing included) */
    uint64_t writes;         /* write(2) calls that succeeded */
    uint64_t syncs;          /* fdatasync(2) calls that succeeded */
    uint64_t sync_ns_sum;    /* time in fdatasync, total */
    uint64_t sync_ns_max;    /* and the longest one */
    uint64_t failures;       /* writes or syncs that failed */
    uint64_t segments;       /* created */
    uint64_t spare_segments; /* of them, started over a spare */
    uint64_t buffered;       /* bytes appended and not yet durable */
    bool broken;             /* journal_check would say JOURNAL_EBROKEN */
};
void journal_stats(const struct journal *j, struct journal_stats *out);

/* ---- start-up ---- */

/* What journal_replay did with a segment it could not read to its end. */
enum journal_replay_event {
    JOURNAL_RP_TORN,     /* the last record was cut short (a crash mid-write): dropped and
                            the file cut back to offset */
    JOURNAL_RP_DAMAGED,  /* damage at offset with data but no valid record after it: the
                            rest of the segment is skipped; a copy of it as found is kept
                            aside as moved_to. Log it loudly. */
    JOURNAL_RP_KEPT_BAD, /* as DAMAGED but no copy could be made (reason says why) */
    JOURNAL_RP_IGNORED,  /* a *.log file whose name is not a segment's */
};

/*
 * A hole: damage inside a segment with valid records after it. Replay skipped
 * [offset, offset + bytes) and went on from the next valid record (its header and payload
 * checksums match and its position continues the segment's), so only the records inside
 * the hole are lost. The segment stays in the journal (its records after the hole are
 * needed until a snapshot covers them) and a copy of it as found is kept aside.
 */
struct journal_hole {
    const char *file;               /* the segment, inside the journal directory */
    const char *copy;               /* the copy kept aside, NULL if none could be made */
    const char *copy_error;         /* why not, when copy is NULL */
    uint64_t offset;                /* where the damage starts */
    uint64_t bytes;                 /* its size: replay resumed at offset + bytes */
    uint64_t first_lost, last_lost; /* positions of the records lost in it; 0, 0 if none */
    const char *why;                /* "zeros", "damaged record", "damaged record header" */
    uint64_t index, count;          /* hole index (from 1) of count in this segment; only
                                       the first JOURNAL_HOLES_REPORTED are reported */
};

#define JOURNAL_HOLES_REPORTED 8

struct journal_replay_ops {
    /*
     * One record, positions strictly increasing; rec and what it points to are valid
     * during the call only. Returns 0, or non-zero to stop (JOURNAL_ECALLER).
     */
    int (*apply)(void *ctx, const struct journal_record *rec);
    /* May be NULL. file is inside the journal directory; moved_to NULL unless DAMAGED. */
    void (*report)(void *ctx, enum journal_replay_event ev, const char *file, const char *moved_to,
                   uint64_t offset, const char *reason);
    /* A hole skipped, after every record of its segment was applied. May be NULL: the
     * journal then logs it at ERROR itself (a hole is never silent). */
    void (*hole)(void *ctx, const struct journal_hole *h);
    void *ctx;
};

struct journal_replay_report {
    uint64_t segments; /* segment files read */
    uint64_t records;  /* valid records read */
    uint64_t applied;  /* passed to apply (position > from_pos) */
    uint64_t skipped;  /* position <= from_pos, or a duplicate of an earlier one */
    uint64_t last_pos; /* the highest valid position seen, 0 if none */
    uint64_t torn;     /* torn tails dropped */
    uint64_t torn_bytes;
    uint64_t zero_bytes; /* zeros cut off the segments' ends (a spare's unused end) */
    uint64_t damaged;    /* segments with damage (a copy kept aside, or KEPT_BAD) */
    uint64_t holes;      /* holes skipped (replay resumed after them) */
    uint64_t hole_bytes; /* their bytes */
    uint64_t lost;       /* records lost in them (gaps in the positions) */
};

/*
 * Reads every segment of <data_dir>/journal in order and calls ops->apply for each valid
 * record with a position > from_pos (the smallest journal_pos of the snapshots loaded;
 * apply skips a record its filter's own snapshot covers). A torn tail is cut off and
 * reported. Damage followed by a valid record is a hole: skipped, reported (ops->hole),
 * and replay goes on after it; damage with no valid record after it ends that segment
 * (DAMAGED). Either way the segment stays and a copy of it is kept aside as
 * <segment>.corrupt-<UTC timestamp> (one copy per content), and replay goes on. A missing
 * journal directory is an empty journal. Only failures that are not the journal's fault
 * stop it (directory unreadable, out of memory, apply refused). Returns 0 or a
 * journal_err with *err filled; *rep (may be NULL) is filled either way.
 */
int journal_replay(const char *data_dir, uint64_t from_pos, const struct journal_replay_ops *ops,
                   struct journal_replay_report *rep, struct journal_error *err);

#endif
