/*
 * cgroup.h - the memory limit of the control group this process runs in (a container's
 * --memory, a Kubernetes limit, a systemd MemoryMax=), so that max_memory 0 sizes the
 * filter budget by what the kernel will really allow rather than by the host's RAM.
 * Read once at start-up; no state.
 */
#ifndef BLOOMD_SERVER_CGROUP_H
#define BLOOMD_SERVER_CGROUP_H

#include <stdint.h>

#define CGROUP_PATH_MAX 1024

struct cgroup_memory {
    uint64_t limit;             /* bytes; UINT64_MAX when no limit is set at any level */
    int version;                /* 1 (memory.limit_in_bytes) or 2 (memory.max) */
    char file[CGROUP_PATH_MAX]; /* the file holding that limit; "" when unlimited */
};

enum cgroup_err {
    CGROUP_OK = 0,
    CGROUP_ENOENT = -1, /* no memory controller: not in <root>/proc/self/cgroup, or unmounted */
    CGROUP_EIO = -2,    /* a /proc file could not be read, or a limit file held no number */
};

/*
 * Finds this process's memory cgroup through <root>/proc/self/cgroup and
 * <root>/proc/self/mountinfo (cgroup v1's memory controller if it is there, else the v2
 * unified hierarchy) and returns the tightest limit on the way from it up to the top of
 * the mount: the cgroup itself and every ancestor that is visible. root is "" for the
 * real system; tests pass a directory holding a fake proc/ and sys/ tree. Returns
 * CGROUP_OK with *out filled (limit UINT64_MAX if none is set), or an enum cgroup_err.
 */
int cgroup_memory_limit(const char *root, struct cgroup_memory *out);

/* Short text for an enum cgroup_err. */
const char *cgroup_strerror(int err);

#endif
