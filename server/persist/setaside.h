/*
 * setaside.h - the two file moves persistence shares (snapfile.c, journal.c): a rename
 * that never replaces a file, and setting a bad file aside under a name that says why.
 * No logging: callers report.
 */
#ifndef BLOOMD_SETASIDE_H
#define BLOOMD_SETASIDE_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Renames from to to in dirfd unless to exists (-1, EEXIST). Where the filesystem or the
 * kernel has no RENAME_NOREPLACE (NFS: EINVAL; old kernels, seccomp: ENOSYS), link and
 * unlink keep the same promise. 0, or -1 with errno.
 */
int rename_noreplace(int dirfd, const char *from, const char *to);

/*
 * Moves dirfd/file to <file>.<class>-<UTC stamp>[.N], never over an existing file
 * (class: "corrupt", "unsupported", "toobig"). 0 with the new name in to[0, tolen), or -1
 * with errno.
 */
int set_aside(int dirfd, const char *file, const char *class, char *to, size_t tolen);

/*
 * Keeps a copy of dirfd/file as it is now, as <file>.<class>-<UTC stamp>[.N] (written
 * under <file>.<class>.tmp, fsynced, renamed without replacing), the file itself staying
 * in place. If a copy of that prefix with the same bytes exists already (a damaged file
 * kept in place is met again at each start) it is named instead and nothing is written.
 * 0 with the name in to[0, tolen) and *made set if a new name appeared in dirfd (the
 * caller fsyncs the directory), or -1 with errno.
 */
int copy_aside(int dirfd, const char *file, const char *class, char *to, size_t tolen, bool *made);

#endif
