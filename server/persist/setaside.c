/*
 * setaside.c - rename without replacing, and setting bad files aside (setaside.h).
 */
#include "server/persist/setaside.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* Renames from to the first free <file>.<class>-<stamp>[.N]; 0 with it in to, or -1. */
static int rename_stamped(int dirfd, const char *from, const char *file, const char *class,
                          char *to, size_t tolen)
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
        if (rename_noreplace(dirfd, from, to) == 0)
            return 0;
        if (errno != EEXIST)
            return -1;
    }
    errno = EEXIST;
    return -1;
}

int set_aside(int dirfd, const char *file, const char *class, char *to, size_t tolen)
{
    return rename_stamped(dirfd, file, file, class, to, tolen);
}

#define COPY_CHUNK ((size_t)1 << 20)

/* True if the files at fds a and b hold the same bytes (both read from the start). */
static bool same_bytes(int a, int b, unsigned char *buf)
{
    struct stat sa, sb;
    if (fstat(a, &sa) != 0 || fstat(b, &sb) != 0 || sa.st_size != sb.st_size)
        return false;
    for (off_t at = 0; at < sa.st_size;) {
        ssize_t n = pread(a, buf, COPY_CHUNK, at);
        if (n <= 0 || pread(b, buf + COPY_CHUNK, (size_t)n, at) != n ||
            memcmp(buf, buf + COPY_CHUNK, (size_t)n) != 0)
            return false;
        at += n;
    }
    return true;
}

/* An existing <file>.<class>-* with src's bytes, into to; true if found. */
static bool find_copy(int dirfd, int src, const char *file, const char *class, char *to,
                      size_t tolen, unsigned char *buf)
{
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s.%s-", file, class);
    size_t plen = strlen(prefix);
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return false;
    }
    rewinddir(d);
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, prefix, plen) != 0)
            continue;
        int c = openat(dirfd, de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (c < 0)
            continue;
        found = same_bytes(src, c, buf);
        close(c);
        if (found)
            snprintf(to, tolen, "%s", de->d_name);
    }
    closedir(d);
    return found;
}

int copy_aside(int dirfd, const char *file, const char *class, char *to, size_t tolen, bool *made)
{
    char tmp[512];
    int e = 0, out = -1;
    unsigned char *buf = malloc(2 * COPY_CHUNK);
    int src = openat(dirfd, file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (buf == NULL || src < 0) {
        e = buf == NULL ? ENOMEM : errno;
        goto done;
    }
    if (find_copy(dirfd, src, file, class, to, tolen, buf))
        goto done;
    snprintf(tmp, sizeof tmp, "%s.%s.tmp", file, class);
    out = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (out < 0) {
        e = errno;
        goto done;
    }
    for (off_t at = 0;;) {
        ssize_t n = pread(src, buf, COPY_CHUNK, at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            e = n < 0 ? errno : 0;
            break;
        }
        for (ssize_t w = 0; w < n && e == 0;) {
            ssize_t k = write(out, buf + w, (size_t)(n - w));
            if (k < 0 && errno != EINTR)
                e = errno;
            w += k > 0 ? k : 0;
        }
        if (e != 0)
            break;
        at += n;
    }
    if (e == 0 && fsync(out) != 0)
        e = errno;
    if (close(out) != 0 && e == 0)
        e = errno;
    out = -1;
    if (e == 0 && rename_stamped(dirfd, tmp, file, class, to, tolen) != 0)
        e = errno;
    if (e != 0)
        (void)unlinkat(dirfd, tmp, 0);
    else
        *made = true;
done:
    if (src >= 0)
        close(src);
    free(buf);
    errno = e;
    return e == 0 ? 0 : -1;
}
