/*
 * snapshot.h - the snapshot policy: which filters to write and when (every
 * snapshot_interval seconds, on FLUSH, at shutdown), and the removal of a dropped
 * filter's file, all as jobs on two background threads (server/core/jobs.h: the long lane
 * and the quick lane) that write through server/persist/snapfile.h. The event loop never touches
 * the disk after start-up. Answers come back through plain callbacks: this module knows no
 * connection and no protocol. Start-up loading is server/exec/recover.h.
 */
#ifndef BLOOMD_SERVER_SNAPSHOT_H
#define BLOOMD_SERVER_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct server;
struct snapshotter;
struct filter;
struct event_base;

enum snapshot_err {
    SNAPSHOT_OK = 0,
    SNAPSHOT_ENOMEM = -1, /* allocation failed */
    SNAPSHOT_EIO = -2,    /* a final write failed */
    SNAPSHOT_ESYS = -3,   /* thread, eventfd or event creation failed (logged) */
};

/*
 * Starts the job thread and, when srv->cfg.snapshot_interval > 0, the timer, both on
 * base. Sets srv->snap. Returns 0 or an snapshot_err (logged).
 */
int snapshot_start(struct server *srv, struct event_base *base);

/*
 * Writes every filter changed since its last snapshot, then joins the thread and frees
 * everything; srv->snap becomes NULL. Blocks until the data is on disk. Pending done
 * callbacks (FLUSH, DROP) are not called. Returns 0, SNAPSHOT_EIO if a final write failed
 * or SNAPSHOT_ENOMEM if the final snapshot could not be queued (logged). Does nothing when
 * srv->snap is NULL.
 */
int snapshot_stop(struct server *srv);

/*
 * Called on the event loop when a flush or a deletion finishes: err is 0 when every
 * filter it covered is durable (or durably gone), else why says what failed
 * ("write x.bloom.tmp: No space left on device"). Not called if the server is stopping
 * by then, and never before the call that queued it has returned.
 */
typedef void (*snapshot_done_fn)(void *arg, int err, const char *why);

/*
 * Queues a write of f (NULL: every filter) if it changed since its last snapshot, and
 * calls done(arg, ...) on the event loop once that is durable. A FLUSH of one small
 * filter (under 4 MiB, not time-driven) goes to the quick lane, the rest to the long lane
 * behind the jobs queued there; either way an earlier DROP's removal of the same name is
 * done first, and a write never lands after a newer one of the same name. A write of
 * every filter also waits for every removal queued before it. The job holds its own
 * references. A FLUSH of one filter that finds a FLUSH of the same filter queued and not
 * started shares that write (it starts after both arrived), so clients looping FLUSH
 * cause one write at a time, not a growing queue. Returns 0, or SNAPSHOT_ENOMEM and done
 * is never called.
 */
int snapshot_flush(struct snapshotter *s, struct filter *f, snapshot_done_fn done, void *arg);

/*
 * As snapshot_flush for one filter f, for an arg that must be freed: when the done step
 * is skipped (the server is stopping), drop(arg) is called instead, on either thread.
 * Exactly one of done and drop is called.
 */
int snapshot_flush_owned(struct snapshotter *s, struct filter *f, snapshot_done_fn done,
                         void (*drop)(void *arg), void *arg);

/*
 * Queues the deletion of the files of the filter named name[0..len) on the quick lane
 * (it waits for a write of the same name in progress, and for the journal's records so
 * far, its DROP's among them, to be on disk); call after registry_remove() and the DROP
 * record. When done is not NULL, calls
 * done(arg, ...) on the event loop once the files are unlinked and the directory synced
 * (files already missing count as removed). Returns 0, or SNAPSHOT_ENOMEM (logged and
 * counted as a failure: the file will be loaded again at the next start) and done is
 * never called.
 */
int snapshot_forget(struct snapshotter *s, const char *name, size_t len, snapshot_done_fn done,
                    void *arg);

/* Figures for STATS. Times are Unix seconds, 0 when nothing happened yet. */
struct snapshot_stats {
    int64_t last_time;         /* start of the last snapshot that wrote or failed */
    uint64_t last_duration_ms; /* its duration */
    uint64_t last_bytes;       /* bytes it wrote */
    uint64_t failures;         /* filter writes or deletions that failed */
    uint64_t written;          /* filter files written */
    bool running;              /* a job is being worked on now */
};

/* Copies the current figures; all zero when s is NULL. Any thread. */
void snapshot_get_stats(struct snapshotter *s, struct snapshot_stats *out);

#endif
