/*
 * snapshot.h - background persistence of the registry: one thread writes filters to the
 * data directory (server/snapfile.h) from a FIFO queue of jobs posted by the event loop:
 * every snapshot_interval seconds, on FLUSH, on DROP (delete the file) and at shutdown.
 * The event loop never touches the disk after start-up; FLUSH and DROP answers come back
 * to it.
 */
#ifndef BLOOMD_SERVER_SNAPSHOT_H
#define BLOOMD_SERVER_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

struct server;
struct snapshotter;
struct filter;
struct conn;

enum snapshot_err {
    SNAPSHOT_OK = 0,
    SNAPSHOT_ENOMEM = -1, /* allocation failed */
    SNAPSHOT_EIO = -2,    /* the data directory could not be loaded, or a write failed */
    SNAPSHOT_ESYS = -3,   /* thread, eventfd or event creation failed (logged) */
};

/*
 * Loads every snapshot in srv->cfg.data_dir into srv->reg (clean: not rewritten until
 * changed), deletes stale tmp files and sets damaged files aside, logging each with its
 * name and reason. Call once, before listening. Returns 0 or SNAPSHOT_EIO (logged) when
 * the directory cannot be read or memory runs out.
 */
int snapshot_load(struct server *srv);

/*
 * Starts the snapshot thread and, when srv->cfg.snapshot_interval > 0, the timer on
 * srv->base (which must exist). Sets srv->snap. Returns 0 or an snapshot_err (logged).
 */
int snapshot_start(struct server *srv);

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
 * by then.
 */
typedef void (*snapshot_done_fn)(void *arg, int err, const char *why);

/*
 * Queues a write of f (NULL: every filter) if it changed since its last snapshot, behind
 * every job already queued (so an earlier DROP's delete or write is done first), and
 * calls done(arg, ...) on the event loop once that is durable. The job holds its own
 * references. Returns 0, or SNAPSHOT_ENOMEM and done is never called.
 */
int snapshot_flush(struct snapshotter *s, struct filter *f, snapshot_done_fn done, void *arg);

/*
 * The FLUSH [name] command for commands.c: returns CMD_PENDING and answers OK or
 * SERVER_ERROR <why> through conn_resume(conn) once durable, or CMD_DONE with the reply
 * (NOT_FOUND, SERVER_ERROR) already in out.
 */
int snapshot_cmd_flush(struct server *srv, struct proto_slice name, struct proto_buf *out,
                       struct conn *conn);

/*
 * Queues the deletion of the files of the filter named name[0..len), behind every job
 * already queued (s is not NULL); call after registry_remove(). When done is not NULL,
 * calls done(arg, ...) on the event loop once the files are unlinked and the directory
 * synced (files already missing count as removed). Returns 0, or SNAPSHOT_ENOMEM (logged
 * and counted as a failure: the file will be loaded again at the next start) and done is
 * never called.
 */
int snapshot_forget(struct snapshotter *s, const char *name, size_t len, snapshot_done_fn done,
                    void *arg);

/*
 * The DROP name command for commands.c: removes the filter from srv->reg, then, with a
 * snapshotter and a conn, returns CMD_PENDING and answers DELETED, or SERVER_ERROR <why>
 * if its file could not be removed, through conn_resume(conn) once the removal is
 * durable. Else returns CMD_DONE with the reply in out: NOT_FOUND, a SERVER_ERROR, or
 * DELETED at once when srv->snap or conn is NULL (a snapshotter still deletes the file).
 */
int snapshot_cmd_drop(struct server *srv, struct proto_slice name, struct proto_buf *out,
                      struct conn *conn);

/* Figures for STATS. Times are Unix seconds, 0 when nothing happened yet. */
struct snapshot_stats {
    int64_t last_time;         /* start of the last snapshot that wrote or failed */
    uint64_t last_duration_ms; /* its duration */
    uint64_t last_bytes;       /* bytes it wrote */
    uint64_t failures;         /* filter writes or deletions that failed */
    uint64_t written;          /* filter files written */
    bool running;              /* a job is being worked on now */
};

/* Copies the current figures; all zero when s is NULL. */
void snapshot_get_stats(struct snapshotter *s, struct snapshot_stats *out);

/* Appends the snapshot_* STAT lines of the STATS reply (zeros when s is NULL). */
void snapshot_write_stats(struct snapshotter *s, struct proto_buf *out);

/* Appends INFO's "STAT snapshot_time <Unix seconds>" for f (0: never written). */
void snapshot_write_info(const struct filter *f, struct proto_buf *out);

#endif
