/*
 * dump.h - dump and restore: a filter to a file and back, through DUMP and RESTORE. The
 * file is the filter's snapshot, byte for byte the server's <name>.bloom, so a dump can be
 * copied into a data dir and a snapshot file restored. Both stream in chunks: memory stays
 * a few MB whatever the filter's size.
 */
#ifndef BLOOMD_CLI_DUMP_H
#define BLOOMD_CLI_DUMP_H

#include <stdbool.h>

#include "cli/conn.h"

struct dump_opts {
    const char *filter; /* a valid filter name */
    const char *path;   /* the file, or "-": stdout (dump) or stdin (restore) */
    bool replace;       /* restore: take the place of a filter of that name */
    bool progress;      /* a progress line on stderr (a TTY) */
};

/*
 * DUMP o->filter into o->path: written to path.tmp, fsync'd, then renamed over path (so
 * path is never a partial dump), or to stdout. Returns the exit status (enum cli_exit).
 */
int dump_run(struct cli_conn *c, const struct dump_opts *o);

/*
 * RESTORE o->filter from o->path; stdin that is not a regular file is first copied into an
 * unlinked temporary file in $TMPDIR (or /tmp), because RESTORE needs the size up front.
 * Prints the reply on stdout. Returns 0 on RESTORED, 1 on EXISTS, any other reply or a bad
 * file, 2 if the connection failed.
 */
int restore_run(struct cli_conn *c, const struct dump_opts *o);

#endif
