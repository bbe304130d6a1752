/*
 * datadir.h - owning the data directory for the life of the process: created if
 * missing, locked so that a second bloomd on the same directory refuses to start
 * (their snapshots would overwrite each other), and probed for writability at start-up
 * rather than at the first snapshot.
 */
#ifndef BLOOMD_SERVER_DATADIR_H
#define BLOOMD_SERVER_DATADIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The lock file inside the data directory; it holds the owner's pid as text. */
#define DATADIR_LOCK_FILE "LOCK"

struct datadir {
    int lock_fd;   /* open <dir>/LOCK (or the directory) holding an exclusive flock; -1 closed */
    bool readonly; /* opened with allow_readonly on a directory we cannot write */
};

enum datadir_err {
    DATADIR_OK = 0,
    DATADIR_EBUSY = -1,  /* another process holds the lock */
    DATADIR_EACCES = -2, /* the directory cannot be created or written (permissions, ro fs) */
    DATADIR_EIO = -3,    /* any other failure (not a directory, I/O error, ...) */
};

/*
 * Creates dir and its missing parents, takes an exclusive, non-blocking flock on
 * <dir>/LOCK (writing our pid into it), then creates and removes a probe file to prove
 * the directory is writable. The lock lasts until datadir_close or process exit, and a
 * crashed owner's lock goes with it (a stale LOCK file does not block a restart).
 * Returns DATADIR_OK, or an enum datadir_err with a one-line message in err that names
 * the directory, the cause and what to do (the other daemon's pid; the uid to chown to).
 * With allow_readonly, an existing directory that cannot be written is DATADIR_OK with
 * d->readonly set and the would-be message in err (the caller warns): the lock is then
 * held on LOCK opened read-only, or on the directory itself if there is no LOCK file, so
 * a second daemon is still refused.
 */
int datadir_open(struct datadir *d, const char *dir, bool allow_readonly, char *err, size_t errlen);

/* The data directory's hash secret: 64 random bits in <dir>/SEED, made at first start. */
#define DATADIR_SEED_FILE "SEED"

/*
 * The secret new filters are seeded with by default (so filters of one daemon share a seed
 * and UNION): read from <dir>/SEED, or made (getrandom) and written there, mode 0600,
 * synced, at first start. Existing filters keep the seed in their own files, so a SEED
 * that cannot be written, or is damaged, only gives new filters a secret of this run:
 * err then says so (the daemon still starts). Returns 0.
 */
int datadir_seed(const char *dir, uint64_t *seed, char *err, size_t errlen);

/* Writes seed to <dir>/SEED (a replica takes its primary's). 0, or -1 with errno set. */
int datadir_seed_store(const char *dir, uint64_t seed);

/* Releases the lock (the LOCK file stays). Safe after a failed datadir_open and twice. */
void datadir_close(struct datadir *d);

#endif
