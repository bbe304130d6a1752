/*
 * setaside.c - rename without replacing, and setting bad files aside (setaside.h).
 */
#include "server/persist/setaside.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* Suffixes .1 .. tried when the stamped name is taken (two in the same second). */
#define MAX_SUFFIX 1000

int rename_noreplace(int dirfd, const char *from, const char *to)
{
    if (renameat2(dirfd, from, dirfd, to, RENAME_NOREPLACE) == 0)
        return 0;
    if ((errno != EINVAL && errno != ENOSYS) || linkat(dirfd, from, dirfd, to, 0) != 0)
        return -1;
    if (unlinkat(dirfd, from, 0) != 0) {
        int e = errno;
        unlinkat(dirfd, to, 0); /* back to one name */
        errno = e;
        return -1;
    }
    return 0;
}

int set_aside(int dirfd, const char *file, const char *class, char *to, size_t tolen)
{
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    for (int i = 0; i < MAX_SUFFIX; i++) {
        if (i == 0)
            snprintf(to, tolen, "%s.%s-%s", file, class, stamp);
        else
            snprintf(to, tolen, "%s.%s-%s.%d", file, class, stamp, i);
        if (rename_noreplace(dirfd, file, to) == 0)
            return 0;
        if (errno != EEXIST)
            return -1;
    }
    errno = EEXIST;
    return -1;
}
