/*
 * test_cgroup.c - cgroup_memory_limit against fake /proc and /sys trees laid out as real
 * systems lay them out: cgroup v2 inside a container (namespaced) and on a host (nested
 * Kubernetes pod), cgroup v1 as on this build machine and as in Docker without a cgroup
 * namespace, hybrid systems, no controller, unlimited, escaped mount points, bad files.
 */
#include <setjmp.h> /* cmocka needs these first */
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/core/cgroup.h"

#define V1_UNLIMITED "9223372036854771712"
#define MIB (UINT64_C(1) << 20)

static char root[64];

/* Writes root/rel (making its directories), with text as the content. */
static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p != '\0'; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/bloomd-test-cgroup.XXXXXX");
    return mkdtemp(root) != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *rel_file(const struct cgroup_memory *m)
{
    size_t n = strlen(root);
    return strncmp(m->file, root, n) == 0 ? m->file + n : m->file;
}

/* podman/docker on a v2 host: a cgroup namespace, the container's cgroup at the mount. */
static void test_v2_container(void **state)
{
    (void)state;
    put("proc/self/cgroup", "0::/\n");
    put("proc/self/mountinfo",
        "600 599 0:26 / / rw,relatime - overlay overlay rw,lowerdir=/l\n"
        "610 600 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n");
    put("sys/fs/cgroup/memory.max", "268435456\n");
    struct cgroup_memory m;
    assert_int_equal(cgroup_memory_limit(root, &m), CGROUP_OK);
    assert_int_equal(m.version, 2);
    assert_true(m.limit == 256 * MIB);
    assert_string_equal(rel_file(&m), "/sys/fs/cgroup/memory.max");
}

/* A v2 host view: the limit sits on the pod, an ancestor of the container's cgroup. */
static void test_v2_nested_ancestor(void **state)
{
    (void)state;
    put("proc/self/cgroup", "0::/kubepods.slice/pod1.slice/cri-abc.scope\n");
    put("proc/self/mountinfo", "25 1 0:22 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 "
                               "rw,nsdelegate,memory_recursiveprot\n");
    put("sys/fs/cgroup/kubepods.slice/pod1.slice/cri-abc.scope/memory.max", "max\n");
    put("sys/fs/cgroup/kubepods.slice/pod1.slice/memory.max", "2147483648\n");
    put("sys/fs/cgroup/kubepods.slice/memory.max", "8589934592\n");
    struct cgroup_memory m;
    assert_int_equal(cgroup_memory_limit(root, &m), CGROUP_OK);
    assert_int_equal(m.version, 2);
    assert_true(m.limit == 2048 * MIB);
    assert_string_equal(rel_file(&m), "/sys/fs/cgroup/kubepods.slice/pod1.slice/memory.max");
}

/* v2 with no limit anywhere ("max", and no file at the top): OK, unlimited. */
static void test_v2_unlimited(void **state)
{
    (void)state;
    put("proc/self/cgroup", "0::/user.slice\n");
    put("proc/self/mountinfo", "25 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    put("sys/fs/cgroup/user.slice/memory.max", "max\n");
    struct cgroup_memory m;
    assert_int_equal(cgroup_memory_limit(root, &m), CGROUP_OK);
    assert_int_equal(m.version, 2);
    assert_true(m.limit == UINT64_MAX);
    assert_string_equal(m.file, "");
}

/* This build machine: v1 memory controller, an unlimited parent, a limited leaf. */
static void test_v1_host(void **state)
{
    (void)state;
    put("proc/self/cgroup", "9:name=systemd:/\n4:memory:/process_api/96a4\n1:cpu:/\n0::/\n");
    put("proc/self/mountinfo",
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
    put("sys/fs/cgroup/memory/memory.limit_in_bytes", V1_UNLIMITED "\n");
    put("sys/fs/cgroup/memory/process_api/memory.limit_in_bytes", V1_UNLIMITED "\n");
    put("sys/fs/cgroup/memory/process_api/96a4/memory.limit_in_bytes", "268435456\n");
    put("sys/fs/cgroup/unified/memory.max", "1048576\n"); /* ignored: v1 holds memory */
    struct cgroup_memory m;
    assert_int_equal(cgroup_memory_limit(root, &m), CGROUP_OK);
    assert_int_equal(m.version, 1);
    assert_true(m.limit == 256 * MIB);
    assert_string_equal(rel_file(&m),
                        "/sys/fs/cgroup/memory/process_api/96a4/memory.limit_in_bytes");
}

/* Docker on v1 without a cgroup namespace: the container's subtree is the mount's root. */
static void test_v1_container_bind_root(void **state)
{
    (void)state;
    put("proc/self/cgroup", "12:cpuset:/docker/abc\n5:memory,kmem:/docker/abc\n");
    put("proc/self/mountinfo", "700 690 0:40 /docker/abc /sys/fs/cgroup/memory ro,nosuid "
                               "master:17 - cgroup cgroup rw,kmem,memory\n");
    put("sys/fs/cgroup/memory/memory.limit_in_bytes", "536870912\n");
    struct cgroup_memory m;
    assert_int_equal(cgroup_memory_limit(root, &m), CGROUP_OK);
    assert_int_equal(m.version, 1);
    assert_true(m.limit == 512 * MIB);
}

/* A path outside the mounted part (another namespace) means the mount point itself. */
static void test_path_outside_mount(void **state)
{
    (void)state;
    put("proc/self/cgroup", "0::/../../other\n");
    put("proc/self/mountinfo", "610 600 0:30 /ctr /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    put("sys/fs/cgroup/memory.max", "1073741824\n");
    struct cgroup_memory m;
    assert_int_equal(cgroup_memory_limit(root, &m), CGROUP_OK);
    assert_true(m.limit == 1024 * MIB);
}

/* mountinfo escapes spaces in paths as \040. */
static void test_escaped_mount_point(void **state)
{
    (void)state;
    put("proc/self/cgroup", "0::/a\n");
    put("proc/self/mountinfo", "25 1 0:22 / /sys/fs/my\\040cgroup rw - cgroup2 cgroup2 rw\n");
    put("sys/fs/my cgroup/a/memory.max", "4194304\n");
    struct cgroup_memory m;
    assert_int_equal(cgroup_memory_limit(root, &m), CGROUP_OK);
    assert_true(m.limit == 4 * MIB);
}

static void test_no_controller(void **state)
{
    (void)state;
    struct cgroup_memory m;
    /* No /proc at all (not Linux, or a chroot without it). */
    assert_int_equal(cgroup_memory_limit(root, &m), CGROUP_ENOENT);
    assert_true(m.limit == UINT64_MAX);
    /* v1 without the memory controller, and no unified line. */
    put("proc/self/cgroup", "2:cpu,cpuacct:/\n1:name=systemd:/\n");
    put("proc/self/mountinfo", "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n");
    assert_int_equal(cgroup_memory_limit(root, &m), CGROUP_ENOENT);
    /* In a memory cgroup, but its hierarchy is not mounted. */
    put("proc/self/cgroup", "4:memory:/x\n");
    assert_int_equal(cgroup_memory_limit(root, &m), CGROUP_ENOENT);
    assert_string_equal(cgroup_strerror(CGROUP_ENOENT), "no memory cgroup found");
}

static void test_bad_limit_file(void **state)
{
    (void)state;
    put("proc/self/cgroup", "0::/\n");
    put("proc/self/mountinfo", "25 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    struct cgroup_memory m;
    static const char *const bad[] = {"", "-1\n", "12abc\n", "99999999999999999999999\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        put("sys/fs/cgroup/memory.max", bad[i]);
        assert_int_equal(cgroup_memory_limit(root, &m), CGROUP_EIO);
    }
    /* Truncated mountinfo lines are skipped, not misread. */
    put("proc/self/mountinfo", "25 1 0:22 / /sys/fs/cgroup rw - cgroup2\n25 1\n");
    assert_int_equal(cgroup_memory_limit(root, &m), CGROUP_ENOENT);
}

/* The real system: whatever it finds must be self-consistent (and never crash). */
static void test_real_system(void **state)
{
    (void)state;
    struct cgroup_memory m;
    int rc = cgroup_memory_limit("", &m);
    print_message("this machine: %s, v%d, limit %llu, %s\n", cgroup_strerror(rc), m.version,
                  (unsigned long long)m.limit, m.file);
    assert_true(rc == CGROUP_OK || rc == CGROUP_ENOENT || rc == CGROUP_EIO);
    if (rc == CGROUP_OK)
        assert_true((m.limit == UINT64_MAX) == (m.file[0] == '\0'));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_v2_container, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_nested_ancestor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_unlimited, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v1_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v1_container_bind_root, setup, teardown),
        cmocka_unit_test_setup_teardown(test_path_outside_mount, setup, teardown),
        cmocka_unit_test_setup_teardown(test_escaped_mount_point, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_controller, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_limit_file, setup, teardown),
        cmocka_unit_test(test_real_system),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
