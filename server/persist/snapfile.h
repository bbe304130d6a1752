/*
 * snapfile.h - the file side of snapshots: write one filter crash-safely, remove one, and
 * load a whole data directory at start-up. Blocking system calls only, no threads and no
 * logging: the snapshot thread calls write/remove, main calls load before listening, and
 * both turn the precise error (which step, which errno or codec error) into a log line.
 * Files: <dir>/<name>.bloom (a snapshot), <name>.bloom.tmp (being written), set aside at
 * load and never deleted: <name>.bloom.corrupt-<UTC timestamp> (damaged),
 * <name>.bloom.unsupported-<ts> (a future format version or an unknown kind: a newer
 * bloomd reads it), <name>.bloom.toobig-<ts> (valid, but over the memory budget).
 * Symbolic links are never followed (a snapshot is replaced by rename, which would turn a
 * link into a file): a linked <name>.bloom is reported and left alone, as is a directory.
 */
#ifndef BLOOMD_SERVER_SNAPFILE_H
#define BLOOMD_SERVER_SNAPFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/container.h"
#include "lib/kind.h"

enum snapfile_err {
    SNAPFILE_OK = 0,
    SNAPFILE_ESYS = -1,       /* a system call failed: see snapfile_error.sys (errno) */
    SNAPFILE_ECODEC = -2,     /* the codec failed: see snapfile_error.codec (sbf_err) */
    SNAPFILE_ENAME = -3,      /* not a valid filter name */
    SNAPFILE_EABANDONED = -4, /* the keep() hook said no before the rename; nothing changed */
    SNAPFILE_ECALLER = -5,    /* the loaded() callback stopped the scan */
};

/* Which step failed: the first word of a snapfile_format() message. */
enum snapfile_step {
    SNAPFILE_STEP_NONE = 0,
    SNAPFILE_STEP_OPENDIR, /* open the data directory */
    SNAPFILE_STEP_CREATE,  /* open <name>.bloom.tmp */
    SNAPFILE_STEP_ALLOC,   /* the write or read buffer */
    SNAPFILE_STEP_ENCODE,  /* the kind's encoder failed by itself */
    SNAPFILE_STEP_WRITE,   /* write(2) to the tmp file */
    SNAPFILE_STEP_FSYNC,   /* fsync or sync_file_range of the tmp file */
    SNAPFILE_STEP_CLOSE,   /* close of the tmp file */
    SNAPFILE_STEP_RENAME,  /* tmp -> <name>.bloom, or a file -> its .corrupt-* name */
    SNAPFILE_STEP_DIRSYNC, /* fsync of the directory */
    SNAPFILE_STEP_UNLINK,  /* removing <name>.bloom or a stale tmp */
    SNAPFILE_STEP_SCAN,    /* readdir of the data directory */
    SNAPFILE_STEP_OPEN,    /* open or fstat of a snapshot being loaded */
    SNAPFILE_STEP_READ,    /* read(2) of a snapshot being loaded */
    SNAPFILE_STEP_DECODE,  /* the container or the kind's decoder refused the content */
    SNAPFILE_STEP_ABANDON, /* see SNAPFILE_EABANDONED */
};

#define SNAPFILE_FILE_MAX 1024

/* The detail behind a non-zero result. */
struct snapfile_error {
    enum snapfile_step step;
    int sys;                      /* errno of the failing call, 0 if none */
    int codec;                    /* sbf_err of the codec, 0 if none */
    char file[SNAPFILE_FILE_MAX]; /* the file involved (the directory for OPENDIR/SCAN) */
};

/*
 * Formats "<step> <file>: <reason>" (e.g. "fsync x.bloom.tmp: No space left on device")
 * into buf (always NUL-terminated) and returns buf.
 */
const char *snapfile_format(const struct snapfile_error *e, char *buf, size_t len);

/*
 * Called by snapfile_write, on its thread, after it found the data directory gone
 * (deleted while the daemon ran) and created it again: msg says so for the log. Every
 * snapshot the directory held is gone with it, so the callee should count every filter as
 * unsaved. fn may be NULL (the default). Set once at start-up, before any other call.
 */
void snapfile_set_on_dir_recreated(void (*fn)(void *ctx, const char *msg), void *ctx);

/* proto_name_valid() for a NUL-terminated name: the only names used as file names. */
bool snapfile_name_valid(const char *name);

/*
 * Writes f, of kind ops, to <dir>/<name>.bloom.tmp in the v3 container recording
 * journal_pos (lib/container.h; buffered; writeback is started every few MiB so the final
 * fsync is short), fsyncs it; if dir itself is gone (deleted while we ran), creates it
 * first and tells the notice hook; asks keep(keep_ctx) (may be NULL: always keep), renames it
 * over <name>.bloom and fsyncs the directory. f may be mutated by another thread
 * meanwhile (see lib/kind.h). Returns 0 and sets *bytes to the file
 * size, or an snapfile_err with *err filled; on any failure before the rename the tmp
 * file is unlinked and a previous <name>.bloom is untouched. A failure of the final
 * directory fsync is reported although the rename happened. bytes may be NULL.
 */
int snapfile_write(const char *dir, const char *name, const struct kind_ops *ops, const void *f,
                   uint64_t journal_pos, uint64_t seed, bool (*keep)(void *keep_ctx),
                   void *keep_ctx, uint64_t *bytes, struct snapfile_error *err);

/*
 * Removes <dir>/<name>.bloom and any <name>.bloom.tmp (absent files, and an absent dir,
 * are fine), then fsyncs the directory. Returns 0 or an snapfile_err with *err filled.
 */
int snapfile_remove(const char *dir, const char *name, struct snapfile_error *err);

/* What snapfile_load_dir did with a file it did not load. */
enum snapfile_event {
    SNAPFILE_EV_TMP_REMOVED,   /* a stale <name>.bloom.tmp was deleted */
    SNAPFILE_EV_TMP_KEPT,      /* a stale tmp could not be deleted (read-only dir); reason */
    SNAPFILE_EV_QUARANTINED,   /* damaged: renamed to moved_to (.corrupt-*); reason says why */
    SNAPFILE_EV_KEPT_BAD,      /* damaged but could not be renamed (reason says why); left */
    SNAPFILE_EV_SET_ASIDE,     /* not damaged but not loadable by this daemon now (future
                                  version, unknown kind, over the budget): renamed to moved_to
                                  (.unsupported-*, .toobig-*); reason says why */
    SNAPFILE_EV_KEPT_UNLOADED, /* as SET_ASIDE, but could not be renamed; left */
    SNAPFILE_EV_IGNORED,       /* a *.bloom without a valid name; a symlink; a non-file
                                *.bloom[.tmp] (reason says that its filter cannot be saved) */
};

struct snapfile_load_ops {
    /*
     * A snapshot decoded: f of kind ops, taken over (the callee frees it with ops->free);
     * hdr is its container header (hdr->journal_pos: what it covers). file_bytes is the
     * file size, mtime its modification time (Unix seconds).
     * Returns 0, or non-zero to stop the scan (snapfile_load_dir then returns
     * SNAPFILE_ECALLER).
     */
    int (*loaded)(void *ctx, const char *name, const struct kind_ops *ops, void *f,
                  const struct container_header *hdr, uint64_t file_bytes, int64_t mtime);
    /*
     * A file that was not loaded. file is the name inside dir; moved_to is the new name
     * for SNAPFILE_EV_QUARANTINED, else NULL; reason is a short text (NULL for
     * SNAPFILE_EV_TMP_REMOVED). May be NULL.
     */
    void (*report)(void *ctx, enum snapfile_event ev, const char *file, const char *moved_to,
                   const char *reason);
    void *ctx;
};

/*
 * Scans dir once: deletes every *.bloom.tmp file (one that cannot be deleted, in a
 * read-only directory, is reported and left), decodes every <name>.bloom with a valid
 * name (v3 container of any kind server/store/kinds.h knows, or v2; bits allowed: at most
 * max_bytes if non-zero; budget as for the kinds' decode, asked before any bit is read)
 * and hands it to ops->loaded. Nothing a file holds stops the scan, and no file is read
 * beyond what its header justifies: a file that is damaged, truncated, sparse (holes over
 * half of more than 1 MiB: bloomd writes every byte), or that cannot be opened or read
 * is renamed to <name>.bloom.corrupt-<YYYYmmddTHHMMSSZ>[.N]; one of a format version or
 * kind this build does not read to .unsupported-<ts>; one whose bits the budget refuses
 * (or whose allocation fails) to .toobig-<ts>; each is reported. The scan stops only for
 * failures that are not the file's fault: the directory cannot be opened or read;
 * descriptors or memory run out (open: EMFILE, ENFILE, ENOMEM; the read buffer); a file
 * declares more than a non-zero max_bytes; or ops->loaded refused. Returns 0 or an
 * snapfile_err with *err filled.
 */
int snapfile_load_dir(const char *dir, uint64_t max_bytes, const struct sbf_budget *budget,
                      const struct snapfile_load_ops *ops, struct snapfile_error *err);

#endif
