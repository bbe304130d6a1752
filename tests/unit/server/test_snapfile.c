/*
 * test_snapfile.c - unit tests of server/persist/snapfile.c against the real codec: round trips,
 * failures that must leave the previous snapshot byte-identical (a refused keep(), a
 * directory in the tmp file's place, a file size limit), removal, and the start-up scan
 * that loads good files and sets every kind of damaged one aside without deleting it.
 * Files are written in the v3 container (kind sbf here); v2 files written by 0.1.0 load.
 */
#include <setjmp.h> /* cmocka needs these first */
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lib/container.h"
#include "lib/kind.h"
#include "lib/sbf.h"
#include "server/persist/snapfile.h"

#include <xxhash.h>

#define MAX_LOADED 16

struct loaded {
    char name[160];
    struct sbf *f; /* the obj of kind_sbf */
    struct container_header hdr;
    uint64_t bytes;
    int64_t mtime;
};

struct report {
    enum snapfile_event ev;
    char file[256]; /* up to NAME_MAX */
    char moved_to[256];
    char reason[300];
};

struct fixture {
    char dir[64];
    struct loaded loaded[MAX_LOADED];
    size_t nloaded;
    struct report reports[MAX_LOADED];
    size_t nreports;
    int refuse_loaded; /* loaded() returns this */
};

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/test_snapfile.XXXXXX");
    assert_non_null(mkdtemp(fx->dir));
    *state = fx;
    return 0;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0; /* best effort: go on past what cannot be removed */
}

/* The fixture's directory and everything under it (tests make subdirectories: "no/such/dir",
 * "elsewhere"); symlinks are removed, not followed. */
static void remove_tree(const char *dir)
{
    nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    for (size_t i = 0; i < fx->nloaded; i++)
        sbf_free(fx->loaded[i].f);
    remove_tree(fx->dir);
    free(fx);
    return 0;
}

static int on_loaded(void *ctx, const char *name, const struct kind_ops *ops, void *f,
                     const struct container_header *hdr, uint64_t bytes, int64_t mtime)
{
    struct fixture *fx = ctx;
    assert_ptr_equal(ops, &kind_sbf); /* the only kind these tests write */
    if (fx->refuse_loaded) {
        ops->free(f);
        return fx->refuse_loaded;
    }
    assert_true(fx->nloaded < MAX_LOADED);
    assert_int_equal(ops->verify(f), 0); /* whatever the loader accepts is whole */
    assert_int_equal(hdr->tag, KIND_TAG_SBF);
    struct loaded *l = &fx->loaded[fx->nloaded++];
    snprintf(l->name, sizeof l->name, "%s", name);
    l->f = f;
    l->hdr = *hdr;
    l->bytes = bytes;
    l->mtime = mtime;
    return 0;
}

static void on_report(void *ctx, enum snapfile_event ev, const char *file, const char *moved_to,
                      const char *reason)
{
    struct fixture *fx = ctx;
    assert_true(fx->nreports < MAX_LOADED);
    struct report *r = &fx->reports[fx->nreports++];
    r->ev = ev;
    snprintf(r->file, sizeof r->file, "%s", file);
    snprintf(r->moved_to, sizeof r->moved_to, "%s", moved_to ? moved_to : "");
    snprintf(r->reason, sizeof r->reason, "%s", reason ? reason : "");
}

static int load(struct fixture *fx, uint64_t max_bytes, struct snapfile_error *err)
{
    struct snapfile_load_ops ops = {.loaded = on_loaded, .report = on_report, .ctx = fx};
    return snapfile_load_dir(fx->dir, max_bytes, NULL, &ops, err);
}

static struct loaded *find_loaded(struct fixture *fx, const char *name)
{
    for (size_t i = 0; i < fx->nloaded; i++)
        if (strcmp(fx->loaded[i].name, name) == 0)
            return &fx->loaded[i];
    return NULL;
}

static struct report *find_report(struct fixture *fx, const char *file)
{
    for (size_t i = 0; i < fx->nreports; i++)
        if (strcmp(fx->reports[i].file, file) == 0)
            return &fx->reports[i];
    return NULL;
}

static struct sbf_hash key_hash(const char *prefix, uint64_t i)
{
    char key[64];
    int n = snprintf(key, sizeof key, "%s-%llu", prefix, (unsigned long long)i);
    return sbf_hash_key(key, (size_t)n);
}

/* A filter of `capacity` with keys prefix-0 .. prefix-(n-1). */
static struct sbf *make_filter(uint64_t capacity, enum sbf_growth growth, const char *prefix,
                               uint64_t n)
{
    struct sbf_params p;
    struct sbf *f = NULL;
    sbf_params_default(&p);
    p.capacity = capacity;
    p.growth = growth;
    assert_int_equal(sbf_new(&p, NULL, &f), 0);
    for (uint64_t i = 0; i < n; i++)
        assert_int_equal(sbf_add(f, key_hash(prefix, i), NULL), 0);
    return f;
}

static void assert_has_keys(const struct sbf *f, const char *prefix, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        assert_true(sbf_check(f, key_hash(prefix, i)));
}

static char *path_of(const struct fixture *fx, const char *file, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", fx->dir, file);
    return buf;
}

/* Reads a whole file; *len gets its size. Caller frees. */
static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, 0, SEEK_END), 0);
    long n = ftell(fp);
    assert_true(n >= 0);
    rewind(fp);
    unsigned char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *len = (size_t)n;
    return buf;
}

static void spit(const char *path, const unsigned char *buf, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

static bool exists(const struct fixture *fx, const char *file)
{
    char path[512];
    struct stat st;
    return stat(path_of(fx, file, path, sizeof path), &st) == 0;
}

/* Writes f as <name>.bloom recording journal position pos; checks the size. */
static void write_at(struct fixture *fx, const char *name, const struct sbf *f, uint64_t pos)
{
    struct snapfile_error err;
    uint64_t bytes = 0;
    char path[512], file[200];
    struct stat st;
    assert_int_equal(snapfile_write(fx->dir, name, &kind_sbf, f, pos, 0, NULL, NULL, &bytes, &err),
                     0);
    snprintf(file, sizeof file, "%s.bloom", name);
    assert_int_equal(stat(path_of(fx, file, path, sizeof path), &st), 0);
    assert_int_equal((uint64_t)st.st_size, bytes);
    assert_int_equal(bytes, container_encoded_size(&kind_sbf, f));
    assert_int_equal(bytes, CONTAINER_HEADER_BYTES + sbf_encoded_size(f));
}

static void write_ok(struct fixture *fx, const char *name, const struct sbf *f)
{
    write_at(fx, name, f, 0);
}

static void test_round_trip(void **state)
{
    struct fixture *fx = *state;
    struct sbf *a = make_filter(1000, SBF_GROWTH_EXPONENTIAL, "a", 800);
    /* Linear growth, three stages deep. */
    struct sbf *b = make_filter(100, SBF_GROWTH_LINEAR, "b", 700);
    struct sbf_info ib, lb;
    sbf_info(b, &ib);
    assert_true(ib.stages >= 3);
    write_ok(fx, "alpha", a);
    write_at(fx, "beta.v2_x-y", b, 0x123456789abcull);
    assert_false(exists(fx, "alpha.bloom.tmp"));

    struct snapfile_error err;
    assert_int_equal(load(fx, 0, &err), 0);
    assert_int_equal(fx->nloaded, 2);
    assert_int_equal(fx->nreports, 0);
    struct loaded *la = find_loaded(fx, "alpha"), *lbf = find_loaded(fx, "beta.v2_x-y");
    assert_non_null(la);
    assert_non_null(lbf);
    assert_true(sbf_compatible(la->f, a));
    assert_true(sbf_compatible(lbf->f, b));
    assert_has_keys(la->f, "a", 800);
    assert_has_keys(lbf->f, "b", 700);
    sbf_info(lbf->f, &lb);
    assert_int_equal(lb.stages, ib.stages);
    assert_int_equal(lb.items, ib.items);
    assert_int_equal(lb.capacity, ib.capacity);
    assert_int_equal(lbf->bytes, container_encoded_size(&kind_sbf, b));
    assert_int_equal(la->hdr.version, CONTAINER_VERSION);
    assert_int_equal(la->hdr.journal_pos, 0);
    assert_int_equal(lbf->hdr.version, CONTAINER_VERSION);
    assert_int_equal(lbf->hdr.journal_pos, 0x123456789abcull);
    time_t now = time(NULL);
    assert_true(lbf->mtime <= (int64_t)now && lbf->mtime >= (int64_t)now - 60);
    sbf_free(a);
    sbf_free(b);
}

static void test_overwrite(void **state)
{
    struct fixture *fx = *state;
    struct sbf *f = make_filter(1000, SBF_GROWTH_EXPONENTIAL, "k", 10);
    write_ok(fx, "f", f);
    for (uint64_t i = 10; i < 500; i++)
        assert_int_equal(sbf_add(f, key_hash("k", i), NULL), 0);
    write_ok(fx, "f", f);
    struct snapfile_error err;
    assert_int_equal(load(fx, 0, &err), 0);
    assert_int_equal(fx->nloaded, 1);
    assert_has_keys(fx->loaded[0].f, "k", 500);
    sbf_free(f);
}

static bool refuse(void *ctx)
{
    int *calls = ctx;
    (*calls)++;
    return false;
}

/* Writes v1 of "keep", then fails a v2 write with `how`; v1 must be byte-identical. */
static void check_failure_keeps_old(struct fixture *fx,
                                    int (*how)(struct fixture *fx, const struct sbf *v2,
                                               struct snapfile_error *err))
{
    char path[512];
    size_t len1, len2;
    struct sbf *f = make_filter(1000, SBF_GROWTH_EXPONENTIAL, "v", 100);
    write_ok(fx, "keep", f);
    unsigned char *before = slurp(path_of(fx, "keep.bloom", path, sizeof path), &len1);
    for (uint64_t i = 100; i < 5000; i++) /* grows: v2 is larger than v1 */
        assert_int_equal(sbf_add(f, key_hash("v", i), NULL), 0);
    struct snapfile_error err;
    assert_true(how(fx, f, &err) < 0);
    unsigned char *after = slurp(path_of(fx, "keep.bloom", path, sizeof path), &len2);
    assert_int_equal(len1, len2);
    assert_memory_equal(before, after, len1);
    free(before);
    free(after);
    sbf_free(f);
}

static int fail_by_keep(struct fixture *fx, const struct sbf *f, struct snapfile_error *err)
{
    int calls = 0;
    int rc = snapfile_write(fx->dir, "keep", &kind_sbf, f, 0, 0, refuse, &calls, NULL, err);
    assert_int_equal(rc, SNAPFILE_EABANDONED);
    assert_int_equal(err->step, SNAPFILE_STEP_ABANDON);
    assert_int_equal(calls, 1);
    assert_false(exists(fx, "keep.bloom.tmp"));
    return rc;
}

static void test_keep_refused(void **state)
{
    check_failure_keeps_old(*state, fail_by_keep);
}

static int fail_by_dir(struct fixture *fx, const struct sbf *f, struct snapfile_error *err)
{
    char path[512], msg[256];
    assert_int_equal(mkdir(path_of(fx, "keep.bloom.tmp", path, sizeof path), 0755), 0);
    int rc = snapfile_write(fx->dir, "keep", &kind_sbf, f, 0, 0, NULL, NULL, NULL, err);
    assert_int_equal(rc, SNAPFILE_ESYS);
    assert_int_equal(err->step, SNAPFILE_STEP_CREATE);
    assert_int_equal(err->sys, EISDIR);
    assert_string_equal(err->file, "keep.bloom.tmp");
    snapfile_format(err, msg, sizeof msg);
    assert_non_null(strstr(msg, "create keep.bloom.tmp: "));
    assert_non_null(strstr(msg, strerror(EISDIR)));
    assert_int_equal(rmdir(path), 0);
    return rc;
}

static void test_create_fails(void **state)
{
    check_failure_keeps_old(*state, fail_by_dir);
}

/* A symlink in the tmp file's place is not followed (its target would be overwritten),
 * and it is removed so the next snapshot succeeds. */
static int fail_by_symlink(struct fixture *fx, const struct sbf *f, struct snapfile_error *err)
{
    char victim[512], path[512];
    path_of(fx, "victim", victim, sizeof victim);
    spit(victim, (const unsigned char *)"precious", 8);
    assert_int_equal(symlink(victim, path_of(fx, "keep.bloom.tmp", path, sizeof path)), 0);
    int rc = snapfile_write(fx->dir, "keep", &kind_sbf, f, 0, 0, NULL, NULL, NULL, err);
    assert_int_equal(rc, SNAPFILE_ESYS);
    assert_int_equal(err->step, SNAPFILE_STEP_CREATE);
    assert_int_equal(err->sys, ELOOP);
    size_t len;
    unsigned char *left = slurp(victim, &len);
    assert_int_equal(len, 8);
    assert_memory_equal(left, "precious", 8);
    free(left);
    assert_false(exists(fx, "keep.bloom.tmp"));
    return rc;
}

static void test_tmp_symlink_not_followed(void **state)
{
    struct fixture *fx = *state;
    check_failure_keeps_old(fx, fail_by_symlink);
    struct sbf *f = make_filter(100, SBF_GROWTH_EXPONENTIAL, "s", 5);
    write_ok(fx, "keep", f);
    sbf_free(f);
}

/* RLIMIT_FSIZE makes write(2) fail with EFBIG part-way, like a full disk would. */
static int fail_by_fsize(struct fixture *fx, const struct sbf *f, struct snapfile_error *err)
{
    struct rlimit old, lim;
    char msg[256];
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = container_encoded_size(&kind_sbf, f) / 2;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = snapfile_write(fx->dir, "keep", &kind_sbf, f, 0, 0, NULL, NULL, NULL, err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(rc, SNAPFILE_ESYS);
    assert_int_equal(err->step, SNAPFILE_STEP_WRITE);
    assert_int_equal(err->sys, EFBIG);
    assert_false(exists(fx, "keep.bloom.tmp"));
    snapfile_format(err, msg, sizeof msg);
    assert_non_null(strstr(msg, "write keep.bloom.tmp: "));
    return rc;
}

static void test_write_fails(void **state)
{
    check_failure_keeps_old(*state, fail_by_fsize);
}

static int recreated;

static void on_recreated(void *ctx, const char *msg)
{
    assert_non_null(strstr(msg, "had vanished"));
    (*(int *)ctx)++;
}

static void test_bad_name_and_dir(void **state)
{
    struct fixture *fx = *state;
    struct sbf *f = make_filter(100, SBF_GROWTH_EXPONENTIAL, "n", 1);
    struct snapfile_error err;
    const char *bad[] = {"", ".hidden", "a/b", "..", "sp ace", "tab\t"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_false(snapfile_name_valid(bad[i]));
        assert_int_equal(
            snapfile_write(fx->dir, bad[i], &kind_sbf, f, 0, 0, NULL, NULL, NULL, &err),
            SNAPFILE_ENAME);
        assert_int_equal(snapfile_remove(fx->dir, bad[i], &err), SNAPFILE_ENAME);
    }
    char longest[130];
    memset(longest, 'x', 128);
    longest[128] = '\0';
    assert_true(snapfile_name_valid(longest));
    write_ok(fx, longest, f);
    longest[128] = 'x';
    longest[129] = '\0';
    assert_false(snapfile_name_valid(longest));
    assert_true(snapfile_name_valid("a..b"));

    /* A missing directory (deleted while we ran) is created, parents too, and said so. */
    char missing[128], file[256];
    snprintf(missing, sizeof missing, "%s/no/such/dir", fx->dir);
    recreated = 0;
    snapfile_set_on_dir_recreated(on_recreated, &recreated);
    assert_int_equal(snapfile_write(missing, "x", &kind_sbf, f, 0, 0, NULL, NULL, NULL, &err), 0);
    assert_int_equal(recreated, 1);
    snprintf(file, sizeof file, "%s/x.bloom", missing);
    assert_int_equal(access(file, F_OK), 0);
    assert_int_equal(unlink(file), 0);
    /* Removing from a missing directory is done already. */
    snprintf(missing, sizeof missing, "%s/gone", fx->dir);
    assert_int_equal(snapfile_remove(missing, "x", &err), 0);
    /* One that cannot be created (a file on its path) fails as before. */
    snprintf(missing, sizeof missing, "%s/x.bloom", fx->dir);
    write_ok(fx, "x", f);
    snprintf(file, sizeof file, "%s/x.bloom/sub", fx->dir);
    assert_int_equal(snapfile_write(file, "x", &kind_sbf, f, 0, 0, NULL, NULL, NULL, &err),
                     SNAPFILE_ESYS);
    assert_int_equal(err.step, SNAPFILE_STEP_OPENDIR);
    assert_int_equal(err.sys, ENOTDIR);
    assert_string_equal(err.file, file);
    assert_int_equal(recreated, 1);
    snapfile_set_on_dir_recreated(NULL, NULL);
    assert_int_equal(unlink(missing), 0);
    assert_int_equal(load(fx, 0, &err), 0); /* the longest name loads back */
    assert_int_equal(fx->nloaded, 1);
    snprintf(missing, sizeof missing, "%s/none", fx->dir);
    struct snapfile_load_ops ops = {.loaded = on_loaded, .ctx = fx};
    assert_int_equal(snapfile_load_dir(missing, 0, NULL, &ops, &err), SNAPFILE_ESYS);
    assert_int_equal(err.step, SNAPFILE_STEP_OPENDIR);
    sbf_free(f);
}

static void test_remove(void **state)
{
    struct fixture *fx = *state;
    struct sbf *f = make_filter(100, SBF_GROWTH_EXPONENTIAL, "r", 5);
    struct snapfile_error err;
    char path[512];
    write_ok(fx, "gone", f);
    write_ok(fx, "stays", f);
    spit(path_of(fx, "gone.bloom.tmp", path, sizeof path), (const unsigned char *)"x", 1);
    assert_int_equal(snapfile_remove(fx->dir, "gone", &err), 0);
    assert_false(exists(fx, "gone.bloom"));
    assert_false(exists(fx, "gone.bloom.tmp"));
    assert_true(exists(fx, "stays.bloom"));
    assert_int_equal(snapfile_remove(fx->dir, "gone", &err), 0); /* absent is fine */
    assert_int_equal(load(fx, 0, &err), 0);
    assert_int_equal(fx->nloaded, 1);
    assert_string_equal(fx->loaded[0].name, "stays");
    sbf_free(f);
}

/* Each kind of damage the start-up scan must set aside. */
enum damage { FLIP_HEADER, FLIP_BODY, CUT_ONE, CUT_HALF, GARBAGE, EMPTY, NDAMAGE };

static void damage(struct fixture *fx, const char *file, enum damage d)
{
    char path[512];
    size_t len;
    unsigned char *buf = slurp(path_of(fx, file, path, sizeof path), &len);
    assert_true(len > 64);
    switch (d) {
    case FLIP_HEADER: /* the journal position: only the header checksum guards it */
        buf[17] ^= 0x20;
        break;
    case FLIP_BODY:
        buf[len / 2] ^= 0x01;
        break;
    case CUT_ONE:
        len -= 1;
        break;
    case CUT_HALF:
        len /= 2;
        break;
    case GARBAGE:
        srand(42);
        for (size_t i = 0; i < len; i++)
            buf[i] = (unsigned char)rand();
        break;
    case EMPTY:
    case NDAMAGE:
        len = 0;
        break;
    }
    spit(path, buf, len);
    free(buf);
}

static void test_load_sets_damage_aside(void **state)
{
    struct fixture *fx = *state;
    struct sbf *f = make_filter(2000, SBF_GROWTH_EXPONENTIAL, "d", 1500);
    char file[64], path[512];
    size_t lens[NDAMAGE];
    unsigned char *contents[NDAMAGE];
    write_ok(fx, "good1", f);
    for (int d = 0; d < NDAMAGE; d++) {
        char name[32];
        snprintf(name, sizeof name, "bad%d", d);
        write_ok(fx, name, f);
        snprintf(file, sizeof file, "%s.bloom", name);
        damage(fx, file, (enum damage)d);
        contents[d] = slurp(path_of(fx, file, path, sizeof path), &lens[d]);
    }
    write_ok(fx, "good2", f);
    spit(path_of(fx, "stale.bloom.tmp", path, sizeof path), (const unsigned char *)"zz", 2);
    spit(path_of(fx, ".hidden.bloom", path, sizeof path), (const unsigned char *)"zz", 2);
    spit(path_of(fx, "notes.txt", path, sizeof path), (const unsigned char *)"zz", 2);

    struct snapfile_error err;
    assert_int_equal(load(fx, 0, &err), 0);
    assert_int_equal(fx->nloaded, 2);
    assert_has_keys(find_loaded(fx, "good1")->f, "d", 1500);
    assert_has_keys(find_loaded(fx, "good2")->f, "d", 1500);
    for (int d = 0; d < NDAMAGE; d++) {
        snprintf(file, sizeof file, "bad%d.bloom", d);
        struct report *r = find_report(fx, file);
        assert_non_null(r);
        assert_int_equal(r->ev, SNAPFILE_EV_QUARANTINED);
        assert_true(strlen(r->reason) > 0);
        assert_false(exists(fx, file));
        /* <file>.corrupt-YYYYmmddTHHMMSSZ holding exactly the damaged bytes. */
        assert_int_equal(strncmp(r->moved_to, file, strlen(file)), 0);
        assert_int_equal(strncmp(r->moved_to + strlen(file), ".corrupt-", 9), 0);
        assert_int_equal(strlen(r->moved_to), strlen(file) + 9 + 16);
        size_t len;
        unsigned char *kept = slurp(path_of(fx, r->moved_to, path, sizeof path), &len);
        assert_int_equal(len, lens[d]);
        assert_memory_equal(kept, contents[d], len);
        free(kept);
        free(contents[d]);
    }
    assert_string_equal(find_report(fx, "bad5.bloom")->reason, "empty file");
    struct report *r = find_report(fx, "stale.bloom.tmp");
    assert_non_null(r);
    assert_int_equal(r->ev, SNAPFILE_EV_TMP_REMOVED);
    assert_false(exists(fx, "stale.bloom.tmp"));
    r = find_report(fx, ".hidden.bloom");
    assert_non_null(r);
    assert_int_equal(r->ev, SNAPFILE_EV_IGNORED);
    assert_true(exists(fx, ".hidden.bloom"));
    assert_true(exists(fx, "notes.txt"));
    assert_int_equal(fx->nreports, NDAMAGE + 2);

    /* A second scan loads the same and never touches the set-aside files. */
    for (size_t i = 0; i < fx->nloaded; i++)
        sbf_free(fx->loaded[i].f);
    fx->nloaded = fx->nreports = 0;
    assert_int_equal(load(fx, 0, &err), 0);
    assert_int_equal(fx->nloaded, 2);
    assert_int_equal(fx->nreports, 1); /* .hidden.bloom again */
    sbf_free(f);
}

/* Set to make renameat2(RENAME_NOREPLACE) fail as on a filesystem without it (NFS). */
static bool no_rename_noreplace;

/* Replaces glibc's for this binary (snapfile.o binds to it). */
int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
              unsigned int flags)
{
    if (no_rename_noreplace && (flags & RENAME_NOREPLACE)) {
        errno = EINVAL;
        return -1;
    }
    return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags);
}

/* Where the filesystem cannot rename without replacing, a damaged file is still moved
 * aside, never over an earlier one: it must not stay under the name a new snapshot of
 * that filter would overwrite. */
static void test_quarantine_without_rename_noreplace(void **state)
{
    struct fixture *fx = *state;
    struct sbf *f = make_filter(100, SBF_GROWTH_EXPONENTIAL, "q", 5);
    struct snapfile_error err;
    char first[256];
    no_rename_noreplace = true;
    for (int round = 0; round < 2; round++) {
        fx->nreports = 0;
        write_ok(fx, "q", f);
        damage(fx, "q.bloom", CUT_ONE);
        assert_int_equal(load(fx, 0, &err), 0);
        assert_int_equal(fx->nreports, 1);
        assert_int_equal(fx->reports[0].ev, SNAPFILE_EV_QUARANTINED);
        assert_false(exists(fx, "q.bloom"));
        assert_true(exists(fx, fx->reports[0].moved_to));
        if (round == 0)
            snprintf(first, sizeof first, "%s", fx->reports[0].moved_to);
    }
    no_rename_noreplace = false;
    assert_string_not_equal(fx->reports[0].moved_to, first);
    assert_true(exists(fx, first));
    sbf_free(f);
}

/* The same file damaged twice within one second gets a distinct name. */
static void test_quarantine_never_overwrites(void **state)
{
    struct fixture *fx = *state;
    struct sbf *f = make_filter(100, SBF_GROWTH_EXPONENTIAL, "q", 5);
    struct snapfile_error err;
    char first[256];
    write_ok(fx, "q", f);
    damage(fx, "q.bloom", GARBAGE);
    assert_int_equal(load(fx, 0, &err), 0);
    snprintf(first, sizeof first, "%s", fx->reports[0].moved_to);
    fx->nreports = 0;
    write_ok(fx, "q", f);
    damage(fx, "q.bloom", CUT_ONE);
    assert_int_equal(load(fx, 0, &err), 0);
    assert_int_equal(fx->nreports, 1);
    assert_string_not_equal(fx->reports[0].moved_to, first);
    assert_true(exists(fx, first));
    assert_true(exists(fx, fx->reports[0].moved_to));
    sbf_free(f);
}

static void test_load_limits(void **state)
{
    struct fixture *fx = *state;
    struct sbf *f = make_filter(100000, SBF_GROWTH_EXPONENTIAL, "m", 10);
    struct snapfile_error err;
    write_ok(fx, "big", f);
    /* A caller bound below the file's bits is a limit, not damage: stop, keep the file. */
    assert_int_equal(load(fx, 1024, &err), SNAPFILE_ECODEC);
    assert_int_equal(err.step, SNAPFILE_STEP_DECODE);
    assert_int_equal(err.codec, SBF_ETOOBIG);
    assert_string_equal(err.file, "big.bloom");
    assert_true(exists(fx, "big.bloom"));
    assert_int_equal(fx->nloaded, 0);
    assert_int_equal(fx->nreports, 0);
    /* loaded() may stop the scan. */
    fx->refuse_loaded = 7;
    assert_int_equal(load(fx, 0, &err), SNAPFILE_ECALLER);
    fx->refuse_loaded = 0;
    struct sbf_info info;
    sbf_info(f, &info);
    assert_int_equal(load(fx, info.bytes, &err), 0);
    assert_int_equal(fx->nloaded, 1);
    sbf_free(f);
}

/* Entries no filter can have written: skipped with a report, left as they are, and never
 * a reason to crash, block or refuse to start. */
static void test_load_skips_foreign_entries(void **state)
{
    struct fixture *fx = *state;
    struct sbf *f = make_filter(100, SBF_GROWTH_EXPONENTIAL, "g", 5);
    char path[512], longest[256];
    write_ok(fx, "good", f);
    memset(longest, 'x', 249); /* 249 + ".bloom": the longest name a directory holds */
    snprintf(longest + 249, sizeof longest - 249, ".bloom");
    spit(path_of(fx, longest, path, sizeof path), (const unsigned char *)"zz", 2);
    spit(path_of(fx, "a b.bloom", path, sizeof path), (const unsigned char *)"zz", 2);
    assert_int_equal(mkdir(path_of(fx, "dir.bloom", path, sizeof path), 0755), 0);
    assert_int_equal(mkdir(path_of(fx, "dir.bloom.tmp", path, sizeof path), 0755), 0);
    assert_int_equal(mkfifo(path_of(fx, "pipe.bloom", path, sizeof path), 0644), 0);

    struct snapfile_error err;
    alarm(10); /* an open() blocked on the FIFO ends the test here */
    int rc = load(fx, 0, &err);
    alarm(0);
    assert_int_equal(rc, 0);
    assert_int_equal(fx->nloaded, 1);
    assert_has_keys(find_loaded(fx, "good")->f, "g", 5);
    const char *foreign[] = {longest, "a b.bloom", "dir.bloom", "dir.bloom.tmp", "pipe.bloom"};
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        struct report *r = find_report(fx, foreign[i]);
        assert_non_null(r);
        assert_int_equal(r->ev, SNAPFILE_EV_IGNORED);
        assert_true(exists(fx, foreign[i]));
    }
    assert_int_equal(fx->nreports, 5);
    sbf_free(f);
}

/* Adds keys on another thread while the snapshot is written: every key added before the
 * write started must be in the file, and the file must load. */
struct adder {
    struct sbf *f;
    atomic_bool stop;
    uint64_t added;
    int failed; /* first sbf_add error; cmocka asserts belong to the main thread */
};

static void *add_loop(void *arg)
{
    struct adder *a = arg;
    while (!atomic_load(&a->stop) && a->added < 2000000 && a->failed == 0) {
        a->failed = sbf_add(a->f, key_hash("late", a->added), NULL);
        a->added++;
    }
    return NULL;
}

static void test_write_while_adding(void **state)
{
    struct fixture *fx = *state;
    struct adder a = {.f = make_filter(200000, SBF_GROWTH_EXPONENTIAL, "early", 50000)};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, add_loop, &a), 0);
    struct snapfile_error err;
    int rc = snapfile_write(fx->dir, "live", &kind_sbf, a.f, 0, 0, NULL, NULL, NULL, &err);
    atomic_store(&a.stop, true);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(rc, 0);
    assert_int_equal(a.failed, 0);
    assert_int_equal(load(fx, 0, &err), 0);
    assert_int_equal(fx->nloaded, 1);
    assert_has_keys(fx->loaded[0].f, "early", 50000);
    assert_has_keys(a.f, "late", a.added);
    sbf_free(a.f);
}

/* The v2 files bloomd 0.1.0 wrote (tests/fixtures/v2, run from the repository root) load
 * as kind sbf with a v2 header; rewritten, they come back as v3 with the same content. */
static void test_load_v2_fixtures(void **state)
{
    struct fixture *fx = *state;
    static const char *const names[] = {"v2empty", "v2grown", "v2plain"};
    char src[256], dst[512], file[64];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t len;
        snprintf(src, sizeof src, "tests/fixtures/v2/%s.bloom", names[i]);
        unsigned char *buf = slurp(src, &len);
        snprintf(file, sizeof file, "%s.bloom", names[i]);
        spit(path_of(fx, file, dst, sizeof dst), buf, len);
        free(buf);
    }
    struct snapfile_error err;
    assert_int_equal(load(fx, 0, &err), 0);
    assert_int_equal(fx->nreports, 0);
    assert_int_equal(fx->nloaded, 3);
    struct sbf_info before[3];
    for (size_t i = 0; i < 3; i++) {
        struct loaded *l = find_loaded(fx, names[i]);
        assert_non_null(l);
        assert_int_equal(l->hdr.version, 2);
        assert_int_equal(l->hdr.journal_pos, 0);
        sbf_info(l->f, &before[i]);
        write_ok(fx, names[i], l->f);
    }
    for (size_t i = 0; i < fx->nloaded; i++)
        sbf_free(fx->loaded[i].f);
    fx->nloaded = 0;
    assert_int_equal(load(fx, 0, &err), 0);
    assert_int_equal(fx->nloaded, 3);
    for (size_t i = 0; i < 3; i++) {
        struct loaded *l = find_loaded(fx, names[i]);
        struct sbf_info after;
        assert_int_equal(l->hdr.version, CONTAINER_VERSION);
        sbf_info(l->f, &after);
        assert_int_equal(after.items, before[i].items);
        assert_int_equal(after.stages, before[i].stages);
        assert_int_equal(after.capacity, before[i].capacity);
    }
}

static bool refuse_all(void *ctx, size_t bytes)
{
    (void)ctx;
    (void)bytes;
    return false;
}

/* Valid files this daemon cannot load now are set aside as such, never called corrupt;
 * sparse ones are; links are left alone; none of it stops the scan. */
static void test_load_sets_aside_unloadable(void **state)
{
    struct fixture *fx = *state;
    struct sbf *f = make_filter(100000, SBF_GROWTH_EXPONENTIAL, "u", 10);
    char path[512], target[512];
    size_t len;
    write_ok(fx, "good", f);
    unsigned char *good = slurp(path_of(fx, "good.bloom", path, sizeof path), &len);
    unsigned char *buf = malloc(len);
    assert_non_null(buf);
    /* Container version 5, header checksum not even right: a newer layout. */
    memcpy(buf, good, len);
    buf[8] = 5;
    spit(path_of(fx, "newer.bloom", path, sizeof path), buf, len);
    /* An unknown kind tag under a correct header checksum. */
    memcpy(buf, good, len);
    buf[12] = 0x77;
    uint64_t sum = XXH3_64bits(buf, 32);
    for (unsigned i = 0; i < 8; i++)
        buf[32 + i] = (unsigned char)(sum >> (8 * i));
    spit(path_of(fx, "kind.bloom", path, sizeof path), buf, len);
    /* A v2 file (bare sbf stream) of sbf payload version 9. */
    memcpy(buf, "BLOOMSBF\x09\0\0\0", 12);
    spit(path_of(fx, "newsbf.bloom", path, sizeof path), buf, 64);
    /* Sparse: a header, then 64 MiB of holes. */
    spit(path_of(fx, "holes.bloom", path, sizeof path), good, 200);
    assert_int_equal(truncate(path, 64 << 20), 0);
    /* A link to a valid snapshot elsewhere. */
    snprintf(target, sizeof target, "%s/elsewhere", fx->dir);
    assert_int_equal(mkdir(target, 0755), 0);
    snprintf(target, sizeof target, "%s/elsewhere/t.bloom", fx->dir);
    spit(target, good, len);
    assert_int_equal(symlink(target, path_of(fx, "link.bloom", path, sizeof path)), 0);

    struct snapfile_error err;
    assert_int_equal(load(fx, 0, &err), 0);
    assert_int_equal(fx->nloaded, 1);
    const char *unsupported[] = {"newer.bloom", "kind.bloom", "newsbf.bloom"};
    for (size_t i = 0; i < 3; i++) {
        struct report *r = find_report(fx, unsupported[i]);
        assert_non_null(r);
        assert_int_equal(r->ev, SNAPFILE_EV_SET_ASIDE);
        assert_non_null(strstr(r->moved_to, ".bloom.unsupported-"));
        assert_true(exists(fx, r->moved_to));
    }
    struct report *r = find_report(fx, "holes.bloom");
    assert_int_equal(r->ev, SNAPFILE_EV_QUARANTINED);
    assert_non_null(strstr(r->reason, "sparse"));
    r = find_report(fx, "link.bloom");
    assert_int_equal(r->ev, SNAPFILE_EV_IGNORED);
    assert_non_null(strstr(r->reason, "symbolic link"));
    assert_true(exists(fx, "link.bloom"));
    size_t tlen;
    unsigned char *t = slurp(target, &tlen);
    assert_int_equal(tlen, len);
    assert_memory_equal(t, good, len);
    free(t);
    for (size_t i = 0; i < fx->nloaded; i++)
        sbf_free(fx->loaded[i].f);

    /* Over the budget: set aside as .toobig-, checked before anything is read. */
    fx->nloaded = fx->nreports = 0;
    struct sbf_budget none = {.reserve = refuse_all};
    struct snapfile_load_ops ops = {.loaded = on_loaded, .report = on_report, .ctx = fx};
    assert_int_equal(snapfile_load_dir(fx->dir, 0, &none, &ops, &err), 0);
    assert_int_equal(fx->nloaded, 0);
    r = find_report(fx, "good.bloom");
    assert_non_null(r);
    assert_int_equal(r->ev, SNAPFILE_EV_SET_ASIDE);
    assert_non_null(strstr(r->moved_to, "good.bloom.toobig-"));
    assert_non_null(strstr(r->reason, "max_memory"));
    free(buf);
    free(good);
    sbf_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overwrite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tmp_symlink_not_followed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_name_and_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_sets_damage_aside, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quarantine_never_overwrites, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quarantine_without_rename_noreplace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_skips_foreign_entries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_while_adding, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_v2_fixtures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_sets_aside_unloadable, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
