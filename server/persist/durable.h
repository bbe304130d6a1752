/*
 * durable.h - the journal as the server uses it (server/persist/journal.h does the files): the
 * durability mode, a record for every mutation, one commit per loop pass, replies held
 * under `always` until their records are on disk, replay at start-up, and truncation
 * once snapshots cover old segments.
 *
 * Modes: snapshot (no journal: a crash loses what the last snapshot missed), everysec
 * (records handed to the kernel within 10 ms or every 256 KiB, fdatasync about once a
 * second: kill -9 loses at most those 10 ms, power loss about a second),
 * always (a write's reply waits for its record's fdatasync; every write of a loop pass
 * shares one: nothing acknowledged is lost, even on power loss; segments are written
 * over spares, zeros made ahead, so those fdatasyncs never change a file's size).
 *
 * Threads: durable_check/append/reply and the events run on the worker's loop thread;
 * durable_replay on the loader (the job thread, before listening); durable_truncate on
 * the job thread.
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

/* "snapshot", "everysec" or "always". */
const char *durability_name(int d);

/*
 * Start-up, on the loader after recover_load(): replays the journal into srv->reg from
 * each filter's snapshot position, then opens it for appending. Returns 0, or -1 (logged)
 * when the journal cannot be read or opened. Does nothing in mode snapshot.
 */
int durable_start(struct server *srv);

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
 * After a mutation: journals rec (for filter f, which may be NULL; a windowed f gets a
 * ROTATE record first when its clock moved). Returns the record's position, or 0 when
 * there is no journal. Logs (once per failure) a record that could not be buffered.
 */
uint64_t durable_append(struct server *srv, struct filter *f, const struct journal_record *rec);

/* The CREATE record's parameter bytes for p (JOURNAL_MAX_PARAMS at most). */
size_t durable_encode_params(const struct kind_params *p, unsigned char *out, size_t cap);

/*
 * The reply of a write journaled at pos: in mode always with later not NULL, res is
 * copied and held, and later->done() gets it once pos is on disk (or SERVER_ERROR
 * journal: <why> if writing it failed): returns true (the command is pending). Otherwise
 * returns false and res is the reply now.
 */
bool durable_hold(struct server *srv, uint64_t pos, const struct result *res,
                  struct completion *later);

/* The position the next snapshot covers (every record appended so far). */
uint64_t durable_last_pos(const struct server *srv);

/* Job thread, after a snapshot round: drops the segments every filter's snapshot covers. */
void durable_truncate(struct server *srv, uint64_t covered);

/* Fills the durability and journal_* rows of core/stat.h (its STAT_SRC_JOURNAL rows). */
struct stat_values;
void durable_visit(const struct server *srv, struct stat_values *out);

#endif
