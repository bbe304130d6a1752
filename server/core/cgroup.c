/*
 * cgroup.c - reads the memory cgroup limit the way container runtimes lay it out: the
 * process's cgroup path from /proc/self/cgroup, the controller's mount point and root
 * from /proc/self/mountinfo, then memory.max (v2) or memory.limit_in_bytes (v1) from the
 * cgroup directory up to the mount point. Ancestors count because a limit on a parent
 * (a Kubernetes pod, a systemd slice) binds its children too.
 */
#include "server/core/cgroup.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where the memory controller of one hierarchy is, as found in the two /proc files. */
struct hierarchy {
    char path[CGROUP_PATH_MAX];  /* our cgroup, as /proc/self/cgroup names it */
    char root[CGROUP_PATH_MAX];  /* the part of the hierarchy mounted (mountinfo field 4) */
    char mount[CGROUP_PATH_MAX]; /* where it is mounted (field 5) */
};

static bool has_word(const char *list, const char *word, char sep)
{
    size_t n = strlen(word);
    for (const char *p = list; p != NULL; p = strchr(p, sep)) {
        if (*p == sep)
            p++;
        if (strncmp(p, word, n) == 0 && (p[n] == sep || p[n] == '\0'))
            return true;
    }
    return false;
}

static bool copy_str(char *dst, size_t len, const char *src)
{
    return (size_t)snprintf(dst, len, "%s", src) < len;
}

/*
 * Finds our cgroup path for the v1 memory controller ("4:memory:/a/b"), else for v2
 * ("0::/a/b"). Sets *version to 1 or 2. Returns CGROUP_OK, CGROUP_ENOENT or CGROUP_EIO.
 */
static int find_path(const char *root, struct hierarchy *h, int *version)
{
    char file[CGROUP_PATH_MAX];
    snprintf(file, sizeof(file), "%s/proc/self/cgroup", root);
    FILE *f = fopen(file, "re");
    if (f == NULL)
        return errno == ENOENT ? CGROUP_ENOENT : CGROUP_EIO;
    char *line = NULL;
    size_t cap = 0;
    bool v2 = false;
    char v2path[CGROUP_PATH_MAX] = "";
    *version = 0;
    while (getline(&line, &cap, f) > 0) {
        line[strcspn(line, "\n")] = '\0';
        char *ctl = strchr(line, ':');
        char *path = ctl != NULL ? strchr(ctl + 1, ':') : NULL;
        if (path == NULL)
            continue;
        *ctl++ = '\0';
        *path++ = '\0';
        if (has_word(ctl, "memory", ',')) {
            if (copy_str(h->path, sizeof(h->path), path))
                *version = 1;
            break;
        }
        if (strcmp(line, "0") == 0 && ctl[0] == '\0')
            v2 = copy_str(v2path, sizeof(v2path), path);
    }
    free(line);
    fclose(f);
    if (*version == 0 && v2) {
        memcpy(h->path, v2path, sizeof(v2path));
        *version = 2;
    }
    return *version != 0 ? CGROUP_OK : CGROUP_ENOENT;
}

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
    char *out = s;
    for (const char *in = s; *in != '\0'; in++) {
        if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' &&
            in[3] >= '0' && in[3] <= '7') {
            *out++ = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
            in += 3;
        } else {
            *out++ = *in;
        }
    }
    *out = '\0';
}

/*
 * Finds the mount of the hierarchy: for v1 a "cgroup" file system whose super options
 * include memory, for v2 the first "cgroup2" one. Line format (proc(5)):
 *   36 35 98:0 <root> <mount point> <options> [optional fields...] - <type> <source> <super>
 */
static int find_mount(const char *root, struct hierarchy *h, int version)
{
    char file[CGROUP_PATH_MAX];
    snprintf(file, sizeof(file), "%s/proc/self/mountinfo", root);
    FILE *f = fopen(file, "re");
    if (f == NULL)
        return errno == ENOENT ? CGROUP_ENOENT : CGROUP_EIO;
    char *line = NULL;
    size_t cap = 0;
    int rc = CGROUP_ENOENT;
    while (rc == CGROUP_ENOENT && getline(&line, &cap, f) > 0) {
        line[strcspn(line, "\n")] = '\0';
        char *field[6] = {0};
        char *save = NULL;
        char *tok = strtok_r(line, " ", &save);
        for (int i = 0; i < 6 && tok != NULL; i++, tok = strtok_r(NULL, " ", &save))
            field[i] = tok;
        while (tok != NULL && strcmp(tok, "-") != 0) /* optional fields end at "-" */
            tok = strtok_r(NULL, " ", &save);
        char *type = tok != NULL ? strtok_r(NULL, " ", &save) : NULL;
        char *source = type != NULL ? strtok_r(NULL, " ", &save) : NULL;
        char *super = source != NULL ? strtok_r(NULL, " ", &save) : NULL;
        if (field[5] == NULL || super == NULL)
            continue;
        bool match = version == 2 ? strcmp(type, "cgroup2") == 0
                                  : strcmp(type, "cgroup") == 0 && has_word(super, "memory", ',');
        if (!match)
            continue;
        unescape(field[3]);
        unescape(field[4]);
        if (copy_str(h->root, sizeof(h->root), field[3]) &&
            copy_str(h->mount, sizeof(h->mount), field[4]))
            rc = CGROUP_OK;
    }
    free(line);
    fclose(f);
    return rc;
}

/*
 * Reads one limit file: a decimal byte count, or "max" (v2: none). Returns 1 with *bytes
 * set, 0 if the file is absent (the top cgroup has no memory.max), or CGROUP_EIO.
 */
static int read_limit(const char *file, uint64_t *bytes)
{
    FILE *f = fopen(file, "re");
    if (f == NULL)
        return errno == ENOENT ? 0 : CGROUP_EIO;
    char buf[64] = "";
    bool got = fgets(buf, sizeof(buf), f) != NULL;
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
    if (!got)
        return CGROUP_EIO;
    if (strcmp(buf, "max") == 0) {
        *bytes = UINT64_MAX;
        return 1;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (buf[0] < '0' || buf[0] > '9' || *end != '\0' || errno != 0)
        return CGROUP_EIO;
    *bytes = (uint64_t)v;
    return 1;
}

int cgroup_memory_limit(const char *root, struct cgroup_memory *out)
{
    struct hierarchy h;
    int version;
    out->limit = UINT64_MAX;
    out->version = 0;
    out->file[0] = '\0';
    int rc = find_path(root, &h, &version);
    if (rc == CGROUP_OK)
        rc = find_mount(root, &h, version);
    if (rc != CGROUP_OK)
        return rc;
    out->version = version;

    /*
     * Our cgroup below the mounted part: with a cgroup namespace (or a host view) the
     * path starts with the mount's root and the rest leads down from the mount point.
     * A path outside it ("/../x" from a foreign namespace, or another container's
     * subtree bind-mounted as the root) means the mount point itself is our cgroup, as
     * runtimes lay it out; that is the JDK's rule too.
     */
    const char *rel = "";
    size_t n = strlen(h.root);
    if (strcmp(h.root, "/") == 0)
        rel = h.path;
    else if (strncmp(h.path, h.root, n) == 0 && (h.path[n] == '/' || h.path[n] == '\0'))
        rel = h.path + n;
    if (strstr(rel, "/..") != NULL)
        rel = "";

    char dir[CGROUP_PATH_MAX];
    if ((size_t)snprintf(dir, sizeof(dir), "%s%s%s", root, h.mount, rel) >= sizeof(dir))
        return CGROUP_EIO;
    size_t top = strlen(root) + strlen(h.mount); /* never walk above the mount point */
    const char *name = version == 2 ? "memory.max" : "memory.limit_in_bytes";
    for (;;) {
        size_t len = strlen(dir);
        while (len > top && dir[len - 1] == '/')
            dir[--len] = '\0';
        char file[CGROUP_PATH_MAX];
        if ((size_t)snprintf(file, sizeof(file), "%s/%s", dir, name) >= sizeof(file))
            return CGROUP_EIO;
        uint64_t bytes;
        int got = read_limit(file, &bytes);
        if (got < 0)
            return got;
        if (got == 1 && bytes < out->limit) {
            out->limit = bytes;
            memcpy(out->file, file, sizeof(file));
        }
        char *slash = strrchr(dir, '/');
        if (len <= top || slash == NULL || (size_t)(slash - dir) < top)
            break;
        *slash = '\0';
    }
    return CGROUP_OK;
}

const char *cgroup_strerror(int err)
{
    switch (err) {
    case CGROUP_OK:
        return "ok";
    case CGROUP_ENOENT:
        return "no memory cgroup found";
    case CGROUP_EIO:
        return "cannot read the cgroup files";
    default:
        return "unknown cgroup error";
    }
}
