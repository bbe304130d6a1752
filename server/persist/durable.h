/*
 * durable.h - the journal as the server's loop uses it (server/persist/journal.h does the
 * files): the durability mode, appending the records exec/mutate.c makes, one commit per
 * loop pass, replies held under `always` until their records are on disk, and truncation
 * once snapshots cover old segments. Nothing but exec/mutate.c appends.
 *
 * Modes: snapshot (no journal: a crash loses what the last snapshot missed), everysec
 * (records handed to the kernel within 10 ms or every 256 KiB, fdatasync about once a
 * second: kill -9 loses at most those 10 ms, power loss about a second),
 * always (a write's reply waits for its record's fdatasync; every write of a loop pass
 * shares one: nothing acknowledged is lost, even on power loss; segments are written
 * over spares, zeros made ahead, so those fdatasyncs never change a file's size).
 *
 * Threads: durable_check/append/hold and the events run on the worker's loop thread;
 * durable_start on the loader (the job lane, before listening, after replay);
 * durable_truncate on the job lane.
 */
#ifndef BLOOMD_SERVER_DURABLE_H
#define BLOOMD_SERVER_DURABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/journal_record.h"
#include "lib/kind.h"
#include "proto/result.h"

struct server;
struct filter;
struct completion;
struct event_base;

enum durability {
    DURABILITY_SNAPSHOT = 0,
    DURABILITY_EVERYSEC = 1,
    DURABILITY_ALWAYS = 2,
};

/*
 * Start-up, on the loader once the journal was replayed (exec/recover.c): opens it for
 * appending, the next record above min_pos. Returns 0, or -1 (logged) when it cannot be
 * opened. Does nothing in mode snapshot.
 */
int durable_start(struct server *srv, uint64_t min_pos);

/* Loop thread, once loaded: the commit and completion events on base. 0 or -1 (logged). */
int durable_attach(struct server *srv, struct event_base *base);

/* Writes and syncs what is buffered and closes the journal. Any thread, at the end. */
void durable_stop(struct server *srv);

/* True if records are written (not mode snapshot), and if replies wait for them (always). */
bool durable_on(const struct server *srv);
bool durable_holds(const struct server *srv);

/* Before a mutation: 0 if it may run, else -1 with res set to SERVER_ERROR journal: <why>. */
int durable_check(struct server *srv, struct result *res);

/*
 * After a mutation (exec/mutate.c only): journals rec. Returns the record's position, or
 * 0 when there is no journal or it could not be buffered (logged once per failure).
 */
uint64_t durable_append(struct server *srv, const struct journal_record *rec);

/*
 * As durable_append, and *frame, *n: the record's frame as the journal holds it (encoded
 * once, at its position), valid until the next append; NULL, 0 when the journal did not
 * take it or took it as several frames (an oversized batch).
 */
uint64_t durable_append_frame(struct server *srv, const struct journal_record *rec,
                              const void **frame, size_t *n);

/*
 * The reply of a write journaled at pos: in mode always with later not NULL, res is
 * copied and held, and later->done() gets it once pos is on disk (or SERVER_ERROR
 * journal: <why> if writing it failed): returns true (the command is pending). Otherwise
 * returns false and res is the reply now.
 */
bool durable_hold(struct server *srv, uint64_t pos, const struct result *res,
                  struct completion *later);

/*
 * Any thread but the loop's (a job lane), while the journal is open: returns 0 once every
 * record <= pos is on disk (at once without a journal, or for pos 0), asking for an
 * fdatasync now. -1 with why set ("journal: <reason>") if writing failed first.
 */
int durable_wait(struct server *srv, uint64_t pos, char *why, size_t len);

/* The journal, for its queries and reading it back (replication); NULL when off. */
struct journal;
const struct journal *durable_journal(const struct server *srv);

/* The position the next snapshot covers (every record appended so far). */
uint64_t durable_last_pos(const struct server *srv);

/* Job thread, after a snapshot round: drops the segments every filter's snapshot covers. */
void durable_truncate(struct server *srv, uint64_t covered);

/* Fills the durability and journal_* rows of core/stat.h (its STAT_SRC_JOURNAL rows). */
struct stat_values;
void durable_visit(const struct server *srv, struct stat_values *out);

#endif
