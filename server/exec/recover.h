/*
 * recover.h - start-up: load every snapshot of the data directory into the registry,
 * then replay the journal over them, before the daemon listens. Damaged files are set aside and
 * logged, never deleted, so the daemon always starts with what it could read.
 */
#ifndef BLOOMD_SERVER_RECOVER_H
#define BLOOMD_SERVER_RECOVER_H

struct server;

enum recover_err {
    RECOVER_OK = 0,
    RECOVER_EIO = -1, /* the directory could not be read, or memory ran out (logged) */
};

/*
 * Loads every snapshot in srv->cfg.data_dir into srv->reg (clean: not rewritten until
 * changed), deletes stale tmp files and sets damaged files aside, logging each with its
 * name and reason. Call once, before listening. Returns 0 or RECOVER_EIO (logged).
 */
int recover_load(struct server *srv);

/*
 * After recover_load(): replays the journal over the snapshots through exec/mutate.h
 * (each filter from its snapshot's position), then opens it for appending
 * (durable_start). Does nothing in mode snapshot. Returns 0 or RECOVER_EIO (logged):
 * the journal cannot be read, or opened.
 */
int recover_journal(struct server *srv);

/*
 * Brings every time-driven (windowed) filter up to now: generations that expired while
 * the daemon was down are dropped. Call after recover_load() and the journal's replay,
 * before anyone reads.
 */
void recover_settle(struct server *srv);

#endif
