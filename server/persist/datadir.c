/*
 * datadir.c - the data directory's lock and writability probe. flock, not fcntl locks:
 * an flock belongs to the open file, so nothing else in the process (a snapshot thread
 * opening and closing files there) can drop it by accident, and the kernel releases it
 * when the process dies however it dies.
 */
#include "server/persist/datadir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DATADIR_PATH_MAX 4096

/* mkdir -p. Returns 0 or -1 with errno set (ENOTDIR if dir is some other file). */
static int make_dirs(const char *dir)
{
    char path[DATADIR_PATH_MAX];
    if ((size_t)snprintf(path, sizeof(path), "%s", dir) >= sizeof(path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = path + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return -1;
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

static bool is_access_error(int e)
{
    return e == EACCES || e == EPERM || e == EROFS;
}

/* The message for a directory we may not write: who we are and what to change. */
static int unwritable(const char *dir, const char *what, const char *file, int e, char *err,
                      size_t errlen)
{
    snprintf(err, errlen,
             "data directory %s is not writable: %s %s: %s; bloomd runs as uid %u gid %u "
             "(the container image's user is 8673:8673): chown the directory to it, or mount "
             "it read-write",
             dir, what, file, strerror(e), (unsigned)geteuid(), (unsigned)getegid());
    return DATADIR_EACCES;
}

/* allow_readonly: keep the lock on fd and serve without persistence (err already says
 * why the directory is not writable). */
static int readonly(struct datadir *d, int fd)
{
    d->lock_fd = fd;
    d->readonly = true;
    return DATADIR_OK;
}

int datadir_open(struct datadir *d, const char *dir, bool allow_readonly, char *err, size_t errlen)
{
    char lock[DATADIR_PATH_MAX], probe[DATADIR_PATH_MAX];
    d->lock_fd = -1;
    d->readonly = false;
    if (make_dirs(dir) != 0) {
        int e = errno;
        if (is_access_error(e))
            return unwritable(dir, "cannot create", dir, e, err, errlen);
        snprintf(err, errlen, "data directory %s: %s", dir, strerror(e));
        return DATADIR_EIO;
    }
    if ((size_t)snprintf(lock, sizeof(lock), "%s/%s", dir, DATADIR_LOCK_FILE) >= sizeof(lock) ||
        (size_t)snprintf(probe, sizeof(probe), "%s/.bloomd-probe-%ld", dir, (long)getpid()) >=
            sizeof(probe)) {
        snprintf(err, errlen, "data directory %s: %s", dir, strerror(ENAMETOOLONG));
        return DATADIR_EIO;
    }

    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    int e = errno;
    if (fd < 0 && is_access_error(e))
        fd = open(lock, O_RDONLY | O_CLOEXEC); /* enough to see whether it is locked */
    if (fd < 0 && is_access_error(e) && allow_readonly)
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* no LOCK: lock the directory */
    if (fd < 0) {
        if (is_access_error(e))
            return unwritable(dir, "cannot create", lock, e, err, errlen);
        snprintf(err, errlen, "data directory %s: cannot open %s: %s", dir, lock, strerror(e));
        return DATADIR_EIO;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        e = errno;
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        close(fd);
        if (e == EWOULDBLOCK) {
            snprintf(err, errlen,
                     "data directory %s is in use by another bloomd (pid %s, lock %s): stop it, "
                     "or give this one another --data-dir",
                     dir, pid[0] != '\0' ? pid : "unknown", lock);
            return DATADIR_EBUSY;
        }
        snprintf(err, errlen, "data directory %s: cannot lock %s: %s", dir, lock, strerror(e));
        return DATADIR_EIO;
    }

    /* Locked. The pid is for the message above and for people; the flock is the truth. */
    char text[32];
    int len = snprintf(text, sizeof(text), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len) {
        e = errno;
        if (e == EINVAL || e == EISDIR) /* the directory itself, locked above */
            e = EACCES;
        if ((is_access_error(e) || e == EBADF) && allow_readonly) {
            unwritable(dir, "cannot write", lock, EACCES, err, errlen);
            return readonly(d, fd);
        }
        close(fd);
        if (is_access_error(e) || e == EBADF) /* EBADF: only opened read-only above */
            return unwritable(dir, "cannot write", lock, e == EBADF ? EACCES : e, err, errlen);
        snprintf(err, errlen, "data directory %s: cannot write %s: %s", dir, lock, strerror(e));
        return DATADIR_EIO;
    }

    /* Snapshots create, rename and remove files here: prove that works now. */
    int pfd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (pfd < 0 || close(pfd) != 0 || unlink(probe) != 0) {
        e = errno;
        if (is_access_error(e) && allow_readonly) {
            unwritable(dir, "cannot create", probe, e, err, errlen);
            return readonly(d, fd);
        }
        close(fd);
        if (is_access_error(e))
            return unwritable(dir, "cannot create", probe, e, err, errlen);
        snprintf(err, errlen, "data directory %s: probe file %s: %s", dir, probe, strerror(e));
        return DATADIR_EIO;
    }
    d->lock_fd = fd;
    return DATADIR_OK;
}

void datadir_close(struct datadir *d)
{
    if (d->lock_fd >= 0)
        close(d->lock_fd); /* closing the only descriptor of the file drops the flock */
    d->lock_fd = -1;
}

int datadir_seed(const char *dir, uint64_t *seed, char *err, size_t errlen)
{
    char path[4096], text[32];
    snprintf(path, sizeof path, "%s/%s", dir, DATADIR_SEED_FILE);
    err[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, text, sizeof text - 1);
        close(fd);
        char *end = NULL;
        if (n > 0) {
            text[n] = '\0';
            errno = 0;
            *seed = strtoull(text, &end, 16);
        }
        if (n == 17 && errno == 0 && end == text + 16 && *end == '\n')
            return 0;
        /* Filters keep their own seeds (in their files): only new ones would not combine
         * with the old. The file is left as it is, for whoever repairs it. */
        if (getrandom(seed, sizeof *seed, 0) != (ssize_t)sizeof *seed)
            *seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15u;
        snprintf(err, errlen,
                 "%s is damaged (it must hold 16 hex digits): new filters get a secret of this "
                 "run only, and will not UNION with older ones; restore it from a backup",
                 path);
        return 0;
    }
    if (getrandom(seed, sizeof *seed, 0) != (ssize_t)sizeof *seed)
        *seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15u;
    if (datadir_seed_store(dir, *seed) != 0)
        snprintf(err, errlen, "cannot write %s: %s (new filters get a secret of this run only)",
                 path, strerror(errno));
    return 0;
}

int datadir_seed_store(const char *dir, uint64_t seed)
{
    char path[4096], tmp[4112], text[32];
    snprintf(path, sizeof path, "%s/%s", dir, DATADIR_SEED_FILE);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int len = snprintf(text, sizeof text, "%016llx\n", (unsigned long long)seed);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    bool ok = fd >= 0 && write(fd, text, (size_t)len) == len && fsync(fd) == 0;
    int e = errno;
    if (fd >= 0 && close(fd) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        e = errno;
    }
    if (!ok && fd >= 0)
        unlink(tmp);
    errno = e;
    return ok ? 0 : -1;
}
