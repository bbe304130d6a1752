/*
 * test_journal.c - unit tests of the journal: the record codec (round trip of every type,
 * range checks), append/sync/replay, the threaded modes and their events, torn tails,
 * journal_wait_durable (a sync at once, a failure reported), holes in the middle (zeros, a flipped
 * byte, stray frames, an older segment: exactly the records inside are lost, replay resumes after
 * them, a copy is kept), every single-byte corruption of a small journal (all records but the one
 * hit, and a report, never a wrong record), truncate_before, positions across reopen, and full-disk
 * failures injected through the write hook and RLIMIT_FSIZE (reported, nothing half-written,
 * recovered).
 */
#include <setjmp.h> /* cmocka needs these first */
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/journal_record.h"
#include "server/persist/journal.h"
#include "tests/unit/server/remove_tree.h"

#define MAX_RECS 4096
#define MAX_REPORTS 64

/* A record kept as its encoding: decode->encode is exact, so bytes compare records. */
struct kept {
    unsigned char *bytes;
    size_t len;
};

struct report {
    enum journal_replay_event ev;
    char file[256];
    char moved_to[256];
    uint64_t offset;
    char reason[400];
};

struct hole {
    char file[256];
    char copy[256];
    uint64_t offset, bytes, first_lost, last_lost, index, count;
};

struct fixture {
    char dir[64];  /* the data directory */
    char jdir[96]; /* its journal/ */
    struct kept got[MAX_RECS];
    size_t ngot;
    struct report reports[MAX_REPORTS];
    size_t nreports;
    struct hole holes[MAX_REPORTS];
    size_t nholes;
    int stop_after; /* apply returns non-zero after this many (0: never) */
};

static void forget(struct fixture *fx)
{
    for (size_t i = 0; i < fx->ngot; i++)
        free(fx->got[i].bytes);
    fx->ngot = 0;
    fx->nreports = 0;
    fx->nholes = 0;
}

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/test_journal.XXXXXX");
    assert_non_null(mkdtemp(fx->dir));
    snprintf(fx->jdir, sizeof fx->jdir, "%s/" JOURNAL_SUBDIR, fx->dir);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    forget(fx);
    remove_tree(fx->dir);
    free(fx);
    return 0;
}

/* ---- records used by the tests ---- */

static struct sbf_hash hash_of(uint64_t i)
{
    return (struct sbf_hash){.lo = i * UINT64_C(0x9e3779b97f4a7c15), .hi = ~i};
}

static struct sbf_hash hashes[70000];
static const struct journal_name sources[3] = {{"a", 1}, {"b.2", 3}, {"c_-3", 4}};
static const unsigned char params[5] = {1, 2, 3, 0, 255};

static void init_hashes(void)
{
    for (uint64_t i = 0; i < sizeof hashes / sizeof hashes[0]; i++)
        hashes[i] = hash_of(i);
}

/* The i-th record of a varied sequence: every type, ADD most often. */
static struct journal_record sample(size_t i)
{
    struct journal_record r = {.name = {"filter", 6}};
    switch (i % 8) {
    case 0:
        r.type = JOURNAL_CREATE;
        r.kind_tag = 1;
        r.params = params;
        r.nparams = i % 16 == 0 ? 0 : sizeof params;
        break;
    case 3:
        r.type = JOURNAL_UNION;
        r.sources = sources;
        r.nsources = 1 + i % 3;
        break;
    case 4:
        r.type = i % 16 == 4 ? JOURNAL_INTERSECT : JOURNAL_CLEAR;
        r.sources = sources;
        r.nsources = 2;
        break;
    case 5:
        r.type = JOURNAL_ROTATE;
        r.time_ms = -1 - (int64_t)i;
        break;
    case 6:
        r.type = i % 16 == 6 ? JOURNAL_DROP : JOURNAL_ADD;
        r.hashes = hashes + i;
        r.nhashes = 1;
        break;
    default:
        r.type = i % 16 == 7 ? JOURNAL_ADD_NEW : JOURNAL_ADD;
        r.hashes = hashes + i;
        r.nhashes = 1 + i % 100;
        break;
    }
    return r;
}

static struct kept encode(const struct journal_record *r, uint64_t pos)
{
    struct kept k;
    k.len = journal_record_size(r);
    assert_true(k.len > 0);
    k.bytes = malloc(k.len);
    assert_non_null(k.bytes);
    assert_int_equal(journal_record_encode(r, pos, k.bytes, k.len), (long)k.len);
    return k;
}

/* The record at pos is sample(i) (encodings equal). */
static void assert_is_sample(const struct kept *k, size_t i, uint64_t pos)
{
    struct journal_record r = sample(i);
    struct kept want = encode(&r, pos);
    assert_int_equal(k->len, want.len);
    assert_memory_equal(k->bytes, want.bytes, want.len);
    free(want.bytes);
}

/* ---- replay plumbing ---- */

static int apply(void *ctx, const struct journal_record *rec)
{
    struct fixture *fx = ctx;
    assert_true(fx->ngot < MAX_RECS);
    fx->got[fx->ngot++] = encode(rec, rec->pos);
    return fx->stop_after > 0 && fx->ngot >= (size_t)fx->stop_after;
}

static void on_report(void *ctx, enum journal_replay_event ev, const char *file,
                      const char *moved_to, uint64_t offset, const char *reason)
{
    struct fixture *fx = ctx;
    assert_true(fx->nreports < MAX_REPORTS);
    struct report *r = &fx->reports[fx->nreports++];
    r->ev = ev;
    snprintf(r->file, sizeof r->file, "%s", file);
    snprintf(r->moved_to, sizeof r->moved_to, "%s", moved_to ? moved_to : "");
    r->offset = offset;
    snprintf(r->reason, sizeof r->reason, "%s", reason ? reason : "");
}

static void on_hole(void *ctx, const struct journal_hole *h)
{
    struct fixture *fx = ctx;
    assert_true(fx->nholes < MAX_REPORTS);
    struct hole *x = &fx->holes[fx->nholes++];
    snprintf(x->file, sizeof x->file, "%s", h->file);
    snprintf(x->copy, sizeof x->copy, "%s", h->copy ? h->copy : "");
    x->offset = h->offset;
    x->bytes = h->bytes;
    x->first_lost = h->first_lost;
    x->last_lost = h->last_lost;
    x->index = h->index;
    x->count = h->count;
}

static uint64_t pos_of(const struct kept *k)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)k->bytes[8 + i] << (8 * i);
    return v;
}

static int replay(struct fixture *fx, uint64_t from, struct journal_replay_report *rep)
{
    struct journal_replay_ops ops = {
        .apply = apply, .report = on_report, .hole = on_hole, .ctx = fx};
    struct journal_error err;
    forget(fx);
    int rc = journal_replay(fx->dir, from, &ops, rep, &err);
    for (size_t i = 1; i < fx->ngot; i++)
        assert_true(pos_of(&fx->got[i]) > pos_of(&fx->got[i - 1]));
    return rc;
}

static struct journal *open_manual(struct fixture *fx, const struct journal_opts *extra)
{
    struct journal_opts o = {.mode = JOURNAL_MODE_MANUAL};
    if (extra)
        o = *extra;
    struct journal *j = NULL;
    struct journal_error err;
    int rc = journal_open(fx->dir, &o, &j, &err);
    if (rc != 0) {
        char msg[300];
        fail_msg("journal_open: %s", journal_format(&err, msg, sizeof msg));
    }
    return j;
}

/* Appends sample(first .. first+n-1); returns the last position. */
static uint64_t append_samples(struct journal *j, size_t first, size_t n)
{
    uint64_t pos = 0;
    for (size_t i = first; i < first + n; i++) {
        struct journal_record r = sample(i);
        assert_int_equal(journal_append(j, &r, &pos), 0);
    }
    return pos;
}

static void close_ok(struct journal *j)
{
    struct journal_error err;
    assert_int_equal(journal_close(j, &err), 0);
}

static size_t count_files(const char *dir, const char *infix)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t n = 0;
    while (d && (de = readdir(d)) != NULL)
        if (de->d_name[0] != '.' && strstr(de->d_name, infix))
            n++;
    if (d)
        closedir(d);
    return n;
}

/* The name of the idx-th segment (sorted), into out. */
static void segment_path(struct fixture *fx, size_t idx, char *out, size_t len)
{
    struct dirent **names;
    int n = scandir(fx->jdir, &names, NULL, alphasort);
    assert_true(n >= 0);
    size_t k = 0;
    bool found = false;
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        size_t l = strlen(nm);
        if (!found && l == 24 && strcmp(nm + 20, ".log") == 0 && k++ == idx) {
            snprintf(out, len, "%s/%s", fx->jdir, nm);
            found = true;
        }
        free(names[i]);
    }
    free(names);
    assert_true(found);
}

static long file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (long)st.st_size;
}

/* ---- codec ---- */

static void test_codec_round_trip(void **state)
{
    (void)state;
    static struct journal_scratch scratch;
    for (size_t i = 0; i < 64; i++) {
        struct journal_record r = sample(i), d;
        struct kept k = encode(&r, 1000 + i);
        assert_int_equal(journal_record_decode(k.bytes, k.len, &scratch, &d), (long)k.len);
        assert_int_equal(d.pos, 1000 + i);
        assert_int_equal(d.type, r.type);
        assert_int_equal(d.name.len, r.name.len);
        assert_memory_equal(d.name.ptr, r.name.ptr, r.name.len);
        struct kept again = encode(&d, d.pos);
        assert_int_equal(again.len, k.len);
        assert_memory_equal(again.bytes, k.bytes, k.len);
        /* Every strict prefix is partial, never a record. */
        for (size_t cut = 0; cut < k.len; cut++)
            assert_int_equal(journal_record_decode(k.bytes, cut, &scratch, &d),
                             JOURNAL_RECORD_PARTIAL);
        free(again.bytes);
        free(k.bytes);
    }
}

static void test_codec_refuses(void **state)
{
    (void)state;
    unsigned char buf[256];
    struct journal_record r = {.type = JOURNAL_DROP, .name = {"ok", 2}};
    assert_true(journal_record_encode(&r, 1, buf, sizeof buf) > 0);
    assert_int_equal(journal_record_encode(&r, 0, buf, sizeof buf), JOURNAL_RECORD_EINVAL);
    assert_int_equal(journal_record_encode(&r, 1, buf, 10), JOURNAL_RECORD_ESPACE);
    const char *bad[] = {"", ".hidden", "a/b", "a b", "x\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r.name = (struct journal_name){bad[i], strlen(bad[i])};
        assert_int_equal(journal_record_size(&r), 0);
        assert_int_equal(journal_record_encode(&r, 1, buf, sizeof buf), JOURNAL_RECORD_EINVAL);
    }
    char longname[JOURNAL_NAME_MAX + 1];
    memset(longname, 'a', sizeof longname);
    r.name = (struct journal_name){longname, JOURNAL_NAME_MAX};
    assert_true(journal_record_size(&r) > 0);
    r.name.len = JOURNAL_NAME_MAX + 1;
    assert_int_equal(journal_record_size(&r), 0);
    r = (struct journal_record){.type = JOURNAL_ADD, .name = {"f", 1}, .hashes = hashes};
    assert_int_equal(journal_record_size(&r), 0); /* no hashes */
    r.nhashes = JOURNAL_MAX_HASHES + 1;
    assert_int_equal(journal_record_size(&r), 0);
    r = (struct journal_record){.type = (enum journal_type)99, .name = {"f", 1}};
    assert_int_equal(journal_record_size(&r), 0);
}

/* ---- append, sync, replay ---- */

static void test_round_trip(void **state)
{
    struct fixture *fx = *state;
    struct journal *j = open_manual(fx, NULL);
    assert_int_equal(journal_last_pos(j), 0);
    assert_int_equal(append_samples(j, 0, 100), 100);
    assert_int_equal(journal_durable_pos(j), 0);
    struct journal_error err;
    assert_int_equal(journal_write(j, &err), 0);
    assert_int_equal(journal_durable_pos(j), 0);
    uint64_t durable = 0;
    assert_int_equal(journal_sync(j, &durable, &err), 0);
    assert_int_equal(durable, 100);
    assert_int_equal(append_samples(j, 100, 50), 150);
    assert_int_equal(journal_sync(j, &durable, &err), 0);
    assert_int_equal(durable, 150);
    struct journal_stats st;
    journal_stats(j, &st);
    assert_int_equal(st.records, 150);
    assert_int_equal(st.syncs, 2);
    assert_int_equal(st.writes, 2);
    assert_int_equal(st.buffered, 0);
    close_ok(j);

    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, 150);
    for (size_t i = 0; i < 150; i++)
        assert_is_sample(&fx->got[i], i, i + 1);
    assert_int_equal(rep.records, 150);
    assert_int_equal(rep.applied, 150);
    assert_int_equal(rep.last_pos, 150);
    assert_int_equal(rep.torn + rep.damaged, 0);
    assert_int_equal(fx->nreports, 0);

    /* From a position: only the later records reach apply. */
    assert_int_equal(replay(fx, 120, &rep), 0);
    assert_int_equal(fx->ngot, 30);
    assert_is_sample(&fx->got[0], 120, 121);
    assert_int_equal(rep.skipped, 120);

    /* apply may stop the replay. */
    fx->stop_after = 3;
    struct journal_replay_ops ops = {
        .apply = apply, .report = on_report, .hole = on_hole, .ctx = fx};
    forget(fx);
    assert_int_equal(journal_replay(fx->dir, 0, &ops, &rep, &err), JOURNAL_ECALLER);
    assert_int_equal(fx->ngot, 3);
    fx->stop_after = 0;
}

static void test_empty_and_missing(void **state)
{
    struct fixture *fx = *state;
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0); /* no journal directory at all */
    assert_int_equal(rep.segments, 0);
    struct journal *j = open_manual(fx, NULL);
    close_ok(j);
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, 0);
    assert_int_equal(rep.segments, 1);
}

static void test_split_large(void **state)
{
    struct fixture *fx = *state;
    struct journal *j = open_manual(fx, NULL);
    struct journal_record r = {
        .type = JOURNAL_ADD, .name = {"big", 3}, .hashes = hashes, .nhashes = 70000};
    uint64_t pos;
    assert_int_equal(journal_append(j, &r, &pos), 0);
    assert_int_equal(pos, 2); /* 65536 + 4464 */
    struct journal_name many[300];
    for (size_t i = 0; i < 300; i++)
        many[i] = sources[i % 3];
    r = (struct journal_record){
        .type = JOURNAL_UNION, .name = {"dst", 3}, .sources = many, .nsources = 300};
    assert_int_equal(journal_append(j, &r, &pos), 0);
    assert_int_equal(pos, 4);
    r.nsources = 0;
    assert_int_equal(journal_append(j, &r, &pos), JOURNAL_EINVAL);
    assert_int_equal(journal_last_pos(j), 4);
    close_ok(j);

    static struct journal_scratch scratch;
    struct journal_record d;
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, 4);
    assert_true(journal_record_decode(fx->got[0].bytes, fx->got[0].len, &scratch, &d) > 0);
    assert_int_equal(d.nhashes, 65536);
    assert_true(journal_record_decode(fx->got[1].bytes, fx->got[1].len, &scratch, &d) > 0);
    assert_int_equal(d.nhashes, 70000 - 65536);
    assert_int_equal(d.hashes[0].lo, hashes[65536].lo);
    assert_true(journal_record_decode(fx->got[3].bytes, fx->got[3].len, &scratch, &d) > 0);
    assert_int_equal(d.nsources, 300 - 256);
}

/* ---- threaded modes ---- */

struct events {
    struct journal_event ev[64];
    size_t n;
};

static void on_event(void *ctx, const struct journal_event *ev)
{
    struct events *e = ctx;
    assert_true(e->n < 64);
    e->ev[e->n++] = *ev;
}

/* Waits (bounded) until the journal has signalled and polls it. */
static void wait_events(struct journal *j, struct events *e, size_t want)
{
    for (int tries = 0; tries < 500 && e->n < want; tries++) {
        struct pollfd p = {.fd = journal_fd(j), .events = POLLIN};
        if (poll(&p, 1, 20) == 1)
            journal_poll(j, on_event, e);
    }
    assert_true(e->n >= want);
}

static void test_always_group_commit(void **state)
{
    struct fixture *fx = *state;
    struct journal_opts o = {.mode = JOURNAL_MODE_ALWAYS};
    struct journal *j = open_manual(fx, &o);
    struct events e = {0};
    /* One loop pass: 64 appends, one commit -> one write and one fdatasync. */
    assert_int_equal(append_samples(j, 0, 64), 64);
    journal_commit(j);
    wait_events(j, &e, 1);
    assert_int_equal(e.ev[0].type, JOURNAL_EV_DURABLE);
    assert_int_equal(e.ev[0].first, 1);
    assert_int_equal(e.ev[0].last, 64);
    assert_int_equal(journal_durable_pos(j), 64);
    struct journal_stats st;
    journal_stats(j, &st);
    assert_int_equal(st.syncs, 1);
    assert_int_equal(st.writes, 1);
    /* Passes pile up while it syncs: fewer syncs than passes, every record reported. */
    for (size_t pass = 0; pass < 20; pass++) {
        append_samples(j, 64 + pass * 4, 4);
        journal_commit(j);
    }
    uint64_t want = 64 + 80;
    for (int tries = 0; tries < 500 && journal_durable_pos(j) < want; tries++)
        usleep(2000);
    assert_int_equal(journal_durable_pos(j), want);
    /* The event follows the position: poll until it has come. */
    for (int tries = 0; tries < 500 && e.ev[e.n - 1].last < want; tries++)
        wait_events(j, &e, e.n + 1);
    uint64_t covered = e.ev[0].last;
    for (size_t i = 1; i < e.n; i++) {
        assert_int_equal(e.ev[i].type, JOURNAL_EV_DURABLE);
        assert_int_equal(e.ev[i].first, covered + 1);
        covered = e.ev[i].last;
    }
    assert_int_equal(covered, want);
    journal_stats(j, &st);
    assert_true(st.syncs <= 21);
    assert_int_equal(journal_write(j, NULL), JOURNAL_EMODE);
    close_ok(j);
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, want);
}

static void test_everysec(void **state)
{
    struct fixture *fx = *state;
    struct journal_opts o = {.mode = JOURNAL_MODE_EVERYSEC, .sync_ms = 50};
    struct journal *j = open_manual(fx, &o);
    append_samples(j, 0, 30);
    journal_commit(j); /* written now, synced at the next tick */
    for (int tries = 0; tries < 500 && journal_durable_pos(j) < 30; tries++)
        usleep(2000);
    assert_int_equal(journal_durable_pos(j), 30); /* the 50 ms tick synced it */
    append_samples(j, 30, 10);
    close_ok(j); /* close writes and syncs the rest */
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, 40);
    assert_is_sample(&fx->got[39], 39, 40);

    /* A commit is written within 10 ms (a kill -9 loses at most those), long before
     * the minute's fdatasync. */
    o.sync_ms = 60000;
    j = open_manual(fx, &o);
    append_samples(j, 40, 5);
    char seg[256];
    segment_path(fx, 1, seg, sizeof seg);
    assert_int_equal(file_size(seg), 0);
    journal_commit(j);
    for (int tries = 0; tries < 500 && file_size(seg) == 0; tries++)
        usleep(2000);
    assert_true(file_size(seg) > 0);
    assert_int_equal(journal_durable_pos(j), 40);
    close_ok(j);
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, 45);
}

/* ---- damage ---- */

static void write_journal(struct fixture *fx, size_t n, uint64_t segment_bytes)
{
    struct journal_opts o = {.mode = JOURNAL_MODE_MANUAL, .segment_bytes = segment_bytes};
    struct journal *j = open_manual(fx, &o);
    for (size_t i = 0; i < n; i++) {
        append_samples(j, i, 1);
        assert_int_equal(journal_sync(j, NULL, NULL), 0); /* rotation at a sync */
    }
    close_ok(j);
}

/* A data dir holding only a journal of n samples in one segment, whose path goes to seg. */
static void fresh_journal(struct fixture *fx, size_t n, char *seg, size_t len)
{
    remove_tree(fx->dir);
    assert_int_equal(mkdir(fx->dir, 0700), 0);
    write_journal(fx, n, 0);
    segment_path(fx, 0, seg, len);
}

static void test_torn_tail(void **state)
{
    struct fixture *fx = *state;
    char seg[256];
    fresh_journal(fx, 10, seg, sizeof seg);
    long full = file_size(seg);
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, 10);
    size_t last_len = fx->got[9].len;
    /* Cut inside the last record at several places, including inside its header. */
    long cuts[] = {1, 8, 20, 24, 30, (long)last_len - 1};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        long keep = full - cuts[c];
        assert_int_equal(truncate(seg, keep), 0);
        assert_int_equal(replay(fx, 0, &rep), 0);
        assert_int_equal(fx->ngot, 9);
        assert_int_equal(rep.torn, 1);
        assert_int_equal(rep.damaged, 0);
        assert_int_equal(fx->nreports, 1);
        assert_int_equal(fx->reports[0].ev, JOURNAL_RP_TORN);
        assert_int_equal(fx->reports[0].offset, full - (long)last_len);
        /* The tail was cut off: a second replay is clean. */
        assert_int_equal(file_size(seg), full - (long)last_len);
        assert_int_equal(replay(fx, 0, &rep), 0);
        assert_int_equal(rep.torn, 0);
        assert_int_equal(fx->ngot, 9);
        /* Restore the record for the next cut. */
        fresh_journal(fx, 10, seg, sizeof seg);
    }
    /* Zeros after the last record (a spare's unused end, or blocks allocated and never
     * written): the end, cut off quietly; neither torn nor damage. */
    int fd = open(seg, O_WRONLY | O_APPEND);
    assert_true(fd >= 0);
    static const unsigned char zeros[4096];
    assert_int_equal(write(fd, zeros, sizeof zeros), (ssize_t)sizeof zeros);
    close(fd);
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, 10);
    assert_int_equal(rep.torn + rep.damaged, 0);
    assert_int_equal(rep.zero_bytes, sizeof zeros);
    assert_int_equal(fx->nreports, 0);
    assert_int_equal(file_size(seg), full);
    /* A last record cut short inside a spare: its end is zeros, then more zeros. Torn.
     * The same with its header cut: torn too, never damage. */
    size_t cut_at[] = {(size_t)full - 20, (size_t)full - last_len + 10};
    for (size_t c = 0; c < 2; c++) {
        fd = open(seg, O_WRONLY);
        assert_true(fd >= 0);
        assert_int_equal(pwrite(fd, zeros, (size_t)full - cut_at[c], (off_t)cut_at[c]),
                         (ssize_t)((size_t)full - cut_at[c]));
        assert_int_equal(pwrite(fd, zeros, sizeof zeros, full), (ssize_t)sizeof zeros);
        close(fd);
        assert_int_equal(replay(fx, 0, &rep), 0);
        assert_int_equal(fx->ngot, 9);
        assert_int_equal(rep.torn, 1);
        assert_int_equal(rep.damaged, 0);
        assert_int_equal(file_size(seg), full - (long)last_len);
        fresh_journal(fx, 10, seg, sizeof seg);
    }
}

/* Where each record of the last clean replay starts in its (single) segment: starts[i] for
 * i < fx->ngot, and starts[fx->ngot] its end. */
static void frame_starts(const struct fixture *fx, long *starts)
{
    starts[0] = 0;
    for (size_t i = 0; i < fx->ngot; i++)
        starts[i + 1] = starts[i] + (long)fx->got[i].len;
}

/* The index of the record whose frame holds byte off. */
static size_t frame_at(const long *starts, size_t n, long off)
{
    size_t i = 0;
    while (i + 1 < n && starts[i + 1] <= off)
        i++;
    return i;
}

static void zero_range(const char *path, long at, size_t len)
{
    static const unsigned char zeros[65536];
    assert_true(len <= sizeof zeros);
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, zeros, len, at), (ssize_t)len);
    close(fd);
}

static void flip_byte(const char *path, long at, unsigned char mask)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= mask;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

/* The replay gave sample(pos - 1) at every position 1..total except lost_first..lost_last
 * (inclusive; lost_first 0: none lost), in order. */
static void assert_all_but(const struct fixture *fx, size_t total, uint64_t lost_first,
                           uint64_t lost_last)
{
    size_t lost = lost_first == 0 ? 0 : (size_t)(lost_last - lost_first + 1);
    assert_int_equal(fx->ngot, total - lost);
    uint64_t want = 1;
    for (size_t i = 0; i < fx->ngot; i++, want++) {
        if (want == lost_first)
            want = lost_last + 1;
        assert_int_equal(pos_of(&fx->got[i]), want);
        assert_is_sample(&fx->got[i], want - 1, want);
    }
}

/* One hole, reported with its place, its size and the positions lost, a copy kept aside. */
static void assert_one_hole(const struct fixture *fx, const struct journal_replay_report *rep,
                            long offset, long bytes, uint64_t first_lost, uint64_t last_lost)
{
    assert_int_equal(rep->holes, 1);
    assert_int_equal(rep->hole_bytes, bytes);
    assert_int_equal(rep->lost, last_lost - first_lost + 1);
    assert_int_equal(rep->damaged, 1);
    assert_int_equal(rep->torn, 0);
    assert_int_equal(fx->nreports, 0); /* no DAMAGED/TORN: a hole has its own report */
    assert_int_equal(fx->nholes, 1);
    assert_int_equal(fx->holes[0].offset, offset);
    assert_int_equal(fx->holes[0].bytes, bytes);
    assert_int_equal(fx->holes[0].first_lost, first_lost);
    assert_int_equal(fx->holes[0].last_lost, last_lost);
    assert_int_equal(fx->holes[0].index, 1);
    assert_int_equal(fx->holes[0].count, 1);
    assert_non_null(strstr(fx->holes[0].copy, ".corrupt-"));
}

/*
 * 4 KiB of zeros at 40% of a segment (the newest: under `always` every record in it was
 * acknowledged): only the records the zeros touch are lost, every one after comes back,
 * the hole is reported, the segment stays in place and one copy is kept aside, however
 * often it is replayed.
 */
static void test_hole_zeros(void **state)
{
    struct fixture *fx = *state;
    char seg[256];
    enum { N = 400 };
    fresh_journal(fx, N, seg, sizeof seg);
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, N);
    static long starts[N + 1];
    frame_starts(fx, starts);
    long full = file_size(seg), at = full * 40 / 100;
    assert_true(at + 4096 < full - 4096);
    size_t a = frame_at(starts, N, at), b = frame_at(starts, N, at + 4095);
    zero_range(seg, at, 4096);
    for (int round = 0; round < 2; round++) {
        assert_int_equal(replay(fx, 0, &rep), 0);
        assert_all_but(fx, N, a + 1, b + 1);
        assert_one_hole(fx, &rep, starts[a], starts[b + 1] - starts[a], a + 1, b + 1);
        assert_int_equal(file_size(seg), full); /* in place, nothing cut */
        assert_int_equal(count_files(fx->jdir, ".corrupt-"), 1);
    }
    /* The journal goes on after the last position, and the hole is met again later. */
    struct journal *j = open_manual(fx, NULL);
    assert_int_equal(journal_last_pos(j), N);
    append_samples(j, N, 5);
    assert_int_equal(journal_sync(j, NULL, NULL), 0);
    close_ok(j);
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_all_but(fx, N + 5, a + 1, b + 1);
    assert_int_equal(rep.holes, 1);
}

/* One flipped byte in the middle of a segment (in a payload, a header, a trailer): only
 * the record that holds it is lost. */
static void test_hole_flipped_byte(void **state)
{
    struct fixture *fx = *state;
    char seg[256];
    enum { N = 300 };
    struct journal_replay_report rep;
    static long starts[N + 1];
    for (int where = 0; where < 3; where++) {
        fresh_journal(fx, N, seg, sizeof seg);
        assert_int_equal(replay(fx, 0, &rep), 0);
        frame_starts(fx, starts);
        size_t r = frame_at(starts, N, file_size(seg) * 40 / 100);
        long off = where == 0   ? (starts[r] + starts[r + 1]) / 2 /* payload */
                   : where == 1 ? starts[r] + 10                  /* header: position */
                                : starts[r + 1] - 3;              /* trailer checksum */
        flip_byte(seg, off, 0x20);
        assert_int_equal(replay(fx, 0, &rep), 0);
        assert_all_but(fx, N, r + 1, r + 1);
        assert_one_hole(fx, &rep, starts[r], starts[r + 1] - starts[r], r + 1, r + 1);
    }
}

/*
 * Valid frames that do not continue the segment are not taken for its next record: a
 * copy of an earlier record, and one claiming a position far beyond what the hole could
 * have held, planted inside 4 KiB of zeros, are skipped with the zeros.
 */
static void test_hole_stray_frames(void **state)
{
    struct fixture *fx = *state;
    char seg[256];
    enum { N = 400 };
    fresh_journal(fx, N, seg, sizeof seg);
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    static long starts[N + 1];
    frame_starts(fx, starts);
    long full = file_size(seg), at = full * 40 / 100;
    size_t a = frame_at(starts, N, at), b = frame_at(starts, N, at + 4095);
    zero_range(seg, at, 4096);
    struct journal_record old = sample(1), future = sample(2);
    struct kept k1 = encode(&old, 2), k2 = encode(&future, a + 500);
    int fd = open(seg, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, k1.bytes, k1.len, at + 100), (ssize_t)k1.len);
    assert_int_equal(pwrite(fd, k2.bytes, k2.len, at + 1000), (ssize_t)k2.len);
    close(fd);
    free(k1.bytes);
    free(k2.bytes);
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_all_but(fx, N, a + 1, b + 1);
    assert_one_hole(fx, &rep, starts[a], starts[b + 1] - starts[a], a + 1, b + 1);
}

/* A hole in an older segment: the records after it in that segment come back, and every
 * later segment is replayed. */
static void test_hole_older_segment(void **state)
{
    struct fixture *fx = *state;
    enum { N = 200 };
    write_journal(fx, N, 16384);
    assert_true(count_files(fx->jdir, ".log") >= 3);
    char seg[256], next[256];
    segment_path(fx, 0, seg, sizeof seg);
    segment_path(fx, 1, next, sizeof next);
    uint64_t second = strtoull(strrchr(next, '/') + 1, NULL, 10);
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, N);
    size_t n0 = (size_t)(second - 1); /* records in the first segment */
    static long starts[N + 1];
    frame_starts(fx, starts); /* the first n0 + 1 are the first segment's */
    assert_int_equal(starts[n0], file_size(seg));
    long at = starts[n0] / 2;
    size_t a = frame_at(starts, n0, at), b = frame_at(starts, n0, at + 1023);
    assert_true(b + 2 < n0); /* records after the hole in the same segment */
    zero_range(seg, at, 1024);
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_all_but(fx, N, a + 1, b + 1);
    assert_one_hole(fx, &rep, starts[a], starts[b + 1] - starts[a], a + 1, b + 1);
    assert_string_equal(fx->holes[0].file, strrchr(seg, '/') + 1);
}

/*
 * A write torn by a crash over a spare: its sectors reached the disk in any order, so a
 * sector of zeros can sit before data of the same write. With no valid record after it,
 * at the end of the newest segment, that is a torn end (nothing after it was synced),
 * cut off; in an older segment it is damage (kept, a copy aside, never cut). With valid
 * records after it, it is a hole wherever it is (tests above).
 */
static void test_torn_write_with_holes(void **state)
{
    struct fixture *fx = *state;
    char seg[256];
    enum { N = 200 };
    fresh_journal(fx, N, seg, sizeof seg);
    long full = file_size(seg);
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, N);
    static long starts[N + 1];
    frame_starts(fx, starts);
    assert_true(fx->got[N - 1].len > 1024); /* the last record spans a few sectors */
    /* Zero the sector where the last record starts, and pad with zeros like a spare. */
    long hole = starts[N - 1] / 512 * 512;
    size_t before = frame_at(starts, N, hole); /* records wholly before the hole */
    static const unsigned char zeros[4096];
    zero_range(seg, hole, 512);
    int fd = open(seg, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, zeros, sizeof zeros, full), (ssize_t)sizeof zeros);
    close(fd);
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, before);
    assert_int_equal(rep.torn, 1);
    assert_int_equal(rep.damaged + rep.holes, 0);
    for (size_t i = 0; i < fx->ngot; i++)
        assert_is_sample(&fx->got[i], i, i + 1);
    assert_int_equal(file_size(seg), starts[before]); /* cut back */
    /* The same in an older segment: damage at its end, kept in place with a copy. */
    remove_tree(fx->dir);
    assert_int_equal(mkdir(fx->dir, 0700), 0);
    write_journal(fx, N, 16384);
    segment_path(fx, 0, seg, sizeof seg);
    long first = file_size(seg);
    assert_int_equal(replay(fx, 0, &rep), 0);
    frame_starts(fx, starts);
    size_t last = frame_at(starts, N, first - 1); /* the first segment's last record */
    assert_true(starts[last + 1] == first && fx->got[last].len > 600);
    hole = (starts[last] + 511) / 512 * 512; /* the first sector wholly inside it */
    assert_true(hole + 512 <= first);
    zero_range(seg, hole, 512);
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(rep.damaged, 1);
    assert_int_equal(rep.torn + rep.holes, 0);
    assert_int_equal(fx->nreports, 1);
    assert_int_equal(fx->reports[0].ev, JOURNAL_RP_DAMAGED);
    assert_int_equal(file_size(seg), first);
    assert_all_but(fx, N, last + 1, last + 1);
}

/* A segment named for the next position that holds only zeros (a spare renamed into
 * place before a failed directory fsync, or a crash) is written over, not set aside. */
static void test_zero_segment_reused(void **state)
{
    struct fixture *fx = *state;
    assert_int_equal(mkdir(fx->jdir, 0700), 0);
    char seg[256];
    snprintf(seg, sizeof seg, "%s/00000000000000000001.log", fx->jdir);
    int fd = open(seg, O_WRONLY | O_CREAT | O_EXCL, 0644);
    assert_true(fd >= 0);
    static const unsigned char zeros[65536];
    assert_int_equal(write(fd, zeros, sizeof zeros), (ssize_t)sizeof zeros);
    close(fd);
    struct journal *j = open_manual(fx, NULL);
    append_samples(j, 0, 20);
    assert_int_equal(journal_sync(j, NULL, NULL), 0);
    assert_int_equal(file_size(seg), (long)sizeof zeros); /* written over the zeros */
    close_ok(j);
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, 20);
    assert_int_equal(rep.torn + rep.damaged, 0);
    assert_true(rep.zero_bytes > 0);
    assert_int_equal(fx->nreports, 0);
}

static long spare_size(struct fixture *fx)
{
    char path[256];
    snprintf(path, sizeof path, "%s/spare.tmp", fx->jdir);
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Spares: segments are written over zeros made ahead; the first segment is left for the
 * first spare as soon as it is ready, later ones start on one; replay reads them all,
 * and their unused ends are cut off as zeros, never reported. */
static void test_spares(void **state)
{
    struct fixture *fx = *state;
    const uint64_t segment = 64 * 1024;
    struct journal_opts o = {.mode = JOURNAL_MODE_MANUAL, .segment_bytes = segment, .spares = true};
    struct journal *j = open_manual(fx, &o);
    struct journal_stats st;
    size_t n = 0;
    for (int tries = 0; tries < 1000; tries++, n++) { /* bounded: 2 s */
        append_samples(j, n, 1);
        assert_int_equal(journal_sync(j, NULL, NULL), 0);
        journal_stats(j, &st);
        if (st.spare_segments > 0)
            break;
        usleep(2000);
    }
    assert_int_equal(st.spare_segments, 1);
    char seg[256];
    segment_path(fx, 1, seg, sizeof seg);
    assert_int_equal(file_size(seg), (long)segment); /* zeros ahead of the records */
    for (int tries = 0; tries < 1000 && spare_size(fx) != (long)segment; tries++)
        usleep(2000); /* the next spare */
    size_t first = n + 1;
    for (; n < first + 300; n++) { /* crosses a few segments */
        append_samples(j, n + 1, 1);
        assert_int_equal(journal_sync(j, NULL, NULL), 0);
        usleep(200); /* lets the spare thread keep up */
    }
    journal_stats(j, &st);
    assert_true(st.spare_segments >= 2);
    close_ok(j);
    assert_int_equal(spare_size(fx), -1); /* an unused spare is removed at close */
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, n + 1);
    for (size_t i = 0; i < fx->ngot; i++)
        assert_is_sample(&fx->got[i], i, i + 1);
    assert_int_equal(rep.torn + rep.damaged, 0);
    assert_true(rep.zero_bytes > 0); /* the last segment's unused end */
    assert_int_equal(fx->nreports, 0);
}

static void test_middle_damage(void **state)
{
    struct fixture *fx = *state;
    char seg[256];
    /* ~3000-byte segments: several records each, several segments. */
    write_journal(fx, 60, 3000);
    size_t nseg = count_files(fx->jdir, ".log");
    assert_true(nseg >= 4);
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, 60);
    /* Flip a byte in the first record of the second segment: a hole of that record. */
    segment_path(fx, 1, seg, sizeof seg);
    const char *base = strrchr(seg, '/') + 1;
    char segname[64];
    snprintf(segname, sizeof segname, "%s", base);
    uint64_t first = strtoull(segname, NULL, 10);
    size_t k = 0;
    while (pos_of(&fx->got[k]) != first)
        k++;
    long len = (long)fx->got[k].len;
    flip_byte(seg, 30, 0x40);
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_all_but(fx, 60, first, first);
    assert_one_hole(fx, &rep, 0, len, first, first);
    assert_string_equal(fx->holes[0].file, segname);
    /* Kept in place (its later records are needed until a snapshot covers them), and a
     * copy set aside; later segments replayed. */
    assert_int_equal(count_files(fx->jdir, ".corrupt-"), 1);
    assert_int_equal(count_files(fx->jdir, ".log"), nseg + 1); /* "x.log.corrupt-..." counts */
    /* The journal reopens after it and goes on. */
    struct journal *j = open_manual(fx, NULL);
    assert_int_equal(journal_last_pos(j), 60);
    close_ok(j);
}

/*
 * Every byte of a small journal (two segments), flipped two ways: replay must give every
 * record but the one holding the byte (never a changed one), with one report: a hole, or,
 * for the last record of the first segment (nothing valid after it there), DAMAGED.
 */
static void test_every_byte(void **state)
{
    struct fixture *fx = *state;
    write_journal(fx, 12, 400);
    assert_true(count_files(fx->jdir, ".log") >= 2);
    char seg[256], pristine_name[256];
    segment_path(fx, 0, seg, sizeof seg);
    snprintf(pristine_name, sizeof pristine_name, "%s", seg);
    long size = file_size(seg);
    unsigned char *orig = malloc((size_t)size), *copy = malloc((size_t)size);
    assert_non_null(orig);
    assert_non_null(copy);
    int fd = open(seg, O_RDONLY);
    assert_int_equal(read(fd, orig, (size_t)size), size);
    close(fd);
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    size_t all = fx->ngot;
    assert_int_equal(all, 12);
    long starts[13];
    frame_starts(fx, starts);
    uint64_t second;
    {
        char next[256];
        segment_path(fx, 1, next, sizeof next);
        second = strtoull(strrchr(next, '/') + 1, NULL, 10);
    }
    assert_int_equal(starts[second - 1], size);
    const unsigned char flips[2] = {0x01, 0x80};
    size_t holes = 0, damaged = 0;
    for (long off = 0; off < size; off++) {
        for (int f = 0; f < 2; f++) {
            memcpy(copy, orig, (size_t)size);
            copy[off] ^= flips[f];
            /* Remove what an earlier round set aside; write the damaged segment. */
            DIR *d = opendir(fx->jdir);
            struct dirent *de;
            char path[512];
            while ((de = readdir(d)) != NULL)
                if (strstr(de->d_name, ".corrupt-")) {
                    snprintf(path, sizeof path, "%s/%s", fx->jdir, de->d_name);
                    unlink(path);
                }
            closedir(d);
            fd = open(pristine_name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            assert_true(fd >= 0);
            assert_int_equal(write(fd, copy, (size_t)size), size);
            close(fd);
            assert_int_equal(replay(fx, 0, &rep), 0);
            /* Every byte is under a checksum: the flip is always noticed and reported. */
            uint64_t lost = frame_at(starts, second - 1, off) + 1;
            assert_all_but(fx, all, lost, lost);
            assert_int_equal(rep.torn, 0);
            assert_int_equal(rep.damaged, 1);
            assert_int_equal(fx->nreports + fx->nholes, 1);
            if (lost == second - 1) {
                assert_int_equal(fx->reports[0].ev, JOURNAL_RP_DAMAGED);
                assert_int_equal(fx->reports[0].offset, starts[lost - 1]);
            } else {
                assert_int_equal(fx->holes[0].offset, starts[lost - 1]);
                assert_int_equal(fx->holes[0].bytes, starts[lost] - starts[lost - 1]);
            }
            holes += rep.holes;
            damaged += fx->nreports;
        }
    }
    assert_true(holes > 0 && damaged > 0);
    assert_true(size > 300);
    free(orig);
    free(copy);
}

/*
 * The crash model of an append-only file: after kill -9 or a power cut, a prefix of the
 * bytes written is on disk. Cut at every offset: replay gives exactly the frames wholly
 * inside the cut, and a torn report whenever the cut is not at a frame boundary.
 */
static void test_every_cut(void **state)
{
    struct fixture *fx = *state;
    write_journal(fx, 10, 0);
    char seg[256];
    segment_path(fx, 0, seg, sizeof seg);
    long size = file_size(seg);
    unsigned char *orig = malloc((size_t)size);
    assert_non_null(orig);
    int fd = open(seg, O_RDONLY);
    assert_int_equal(read(fd, orig, (size_t)size), size);
    close(fd);
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    long ends[10], at = 0; /* where each frame ends */
    for (size_t i = 0; i < 10; i++)
        ends[i] = at += (long)fx->got[i].len;
    assert_int_equal(at, size);
    for (long cut = 0; cut <= size; cut++) {
        fd = open(seg, O_WRONLY | O_TRUNC);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, orig, (size_t)cut), cut);
        close(fd);
        assert_int_equal(replay(fx, 0, &rep), 0);
        size_t whole = 0;
        while (whole < 10 && ends[whole] <= cut)
            whole++;
        assert_int_equal(fx->ngot, whole);
        for (size_t i = 0; i < whole; i++)
            assert_is_sample(&fx->got[i], i, i + 1);
        bool boundary = cut == 0 || (whole > 0 && ends[whole - 1] == cut);
        assert_int_equal(rep.torn, boundary ? 0 : 1);
        assert_int_equal(rep.damaged, 0);
    }
    free(orig);
}

/* A record written twice (a retry into a new segment) is applied once. */
static void test_duplicate_skipped(void **state)
{
    struct fixture *fx = *state;
    write_journal(fx, 3, 0);
    char path[256];
    snprintf(path, sizeof path, "%s/%020d.log", fx->jdir, 3);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    for (size_t i = 2; i < 5; i++) {
        struct journal_record r = sample(i);
        struct kept k = encode(&r, i + 1);
        assert_int_equal(write(fd, k.bytes, k.len), (ssize_t)k.len);
        free(k.bytes);
    }
    close(fd);
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, 5);
    for (size_t i = 0; i < 5; i++)
        assert_is_sample(&fx->got[i], i, i + 1);
    assert_int_equal(rep.skipped, 1);
    assert_int_equal(rep.last_pos, 5);
    /* And the journal continues after the highest position. */
    struct journal *j = open_manual(fx, NULL);
    assert_int_equal(append_samples(j, 5, 1), 6);
    close_ok(j);
}

/* Random faults on the journal thread's writes and fdatasyncs (seeded, bounded). */
struct chaos {
    uint64_t rng;
    atomic_bool on;
    atomic_int failed_calls;
};

static bool chaos_roll(struct chaos *c, unsigned percent)
{
    c->rng = c->rng * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
    return atomic_load(&c->on) && (unsigned)(c->rng >> 33) % 100 < percent;
}

static ssize_t chaos_write(void *ctx, int fd, const void *buf, size_t len)
{
    struct chaos *c = ctx;
    if (chaos_roll(c, 15)) {
        atomic_fetch_add(&c->failed_calls, 1);
        if (len > 1 && chaos_roll(c, 50))
            return write(fd, buf, len / 2); /* short; the next call decides */
        errno = ENOSPC;
        return -1;
    }
    return write(fd, buf, len);
}

static int chaos_sync(void *ctx, int fd)
{
    struct chaos *c = ctx;
    if (chaos_roll(c, 15)) {
        atomic_fetch_add(&c->failed_calls, 1);
        errno = EIO;
        return -1;
    }
    return fdatasync(fd);
}

struct ledger {
    uint64_t next; /* the next position an event must start at */
    size_t durable, failed, recovered;
};

static void ledger_event(void *ctx, const struct journal_event *ev)
{
    struct ledger *l = ctx;
    if (ev->type == JOURNAL_EV_RECOVERED) {
        l->recovered++;
        return;
    }
    /* Every position gets exactly one answer, in order. */
    assert_int_equal(ev->first, l->next);
    assert_true(ev->last >= ev->first);
    l->next = ev->last + 1;
    if (ev->type == JOURNAL_EV_DURABLE)
        l->durable++;
    else
        l->failed++;
}

static void test_chaos_always(void **state)
{
    struct fixture *fx = *state;
    struct chaos c = {.rng = 12345};
    atomic_store(&c.on, true);
    struct journal_io io = {.write = chaos_write, .fdatasync = chaos_sync, .ctx = &c};
    struct journal_opts o = {
        .mode = JOURNAL_MODE_ALWAYS, .io = &io, .retry_ms = 1, .segment_bytes = 2000};
    struct journal *j = open_manual(fx, &o);
    struct ledger l = {.next = 1};
    size_t appended = 0, refused = 0;
    for (int pass = 0; pass < 400; pass++) {
        if (journal_check(j, NULL) == 0) {
            size_t n = 1 + (size_t)pass % 5;
            assert_int_equal(append_samples(j, appended, n), appended + n);
            appended += n;
        } else {
            refused++;
        }
        journal_commit(j);
        journal_poll(j, ledger_event, &l);
        usleep(200);
    }
    atomic_store(&c.on, false);
    for (int tries = 0; tries < 1000 && (l.next <= appended || journal_check(j, NULL) != 0);
         tries++) {
        usleep(2000);
        journal_poll(j, ledger_event, &l);
    }
    assert_int_equal(l.next, appended + 1);
    assert_int_equal(journal_check(j, NULL), 0);
    assert_int_equal(journal_durable_pos(j), appended);
    assert_true(atomic_load(&c.failed_calls) > 0);
    assert_true(l.failed > 0 && l.durable > 0 && l.recovered > 0);
    close_ok(j);
    /* Whatever failed on the way, the journal holds every record once, in order. */
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(rep.torn + rep.damaged, 0);
    assert_int_equal(fx->ngot, appended);
    for (size_t i = 0; i < appended; i++)
        assert_is_sample(&fx->got[i], i, i + 1);
    (void)refused;
}

/* ---- truncate_before and positions ---- */

static void test_truncate_before(void **state)
{
    struct fixture *fx = *state;
    struct journal_opts o = {.mode = JOURNAL_MODE_MANUAL, .segment_bytes = 500};
    struct journal *j = open_manual(fx, &o);
    for (size_t i = 0; i < 40; i++) {
        append_samples(j, i, 1);
        assert_int_equal(journal_sync(j, NULL, NULL), 0);
    }
    size_t before = count_files(fx->jdir, ".log");
    assert_true(before >= 5);
    unsigned removed = 0;
    struct journal_error err;
    assert_int_equal(journal_truncate_before(j, 0, &removed, &err), 0);
    assert_int_equal(removed, 0);
    assert_int_equal(journal_truncate_before(j, 20, &removed, &err), 0);
    assert_true(removed > 0);
    assert_int_equal(count_files(fx->jdir, ".log"), before - removed);
    /* Everything after 20 is still there. */
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 20, &rep), 0);
    assert_int_equal(fx->ngot, 20);
    assert_is_sample(&fx->got[0], 20, 21);
    /* Even a position past the end keeps the segment being written. */
    assert_int_equal(journal_truncate_before(j, UINT64_MAX - 1, &removed, &err), 0);
    assert_int_equal(count_files(fx->jdir, ".log"), 1);
    append_samples(j, 40, 1);
    close_ok(j);
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, 1);
    assert_int_equal(pos_of(&fx->got[0]), 41);
}

static void test_positions_across_reopen(void **state)
{
    struct fixture *fx = *state;
    struct journal *j = open_manual(fx, NULL);
    append_samples(j, 0, 10);
    close_ok(j);
    j = open_manual(fx, NULL);
    assert_int_equal(journal_last_pos(j), 10);
    assert_int_equal(append_samples(j, 10, 1), 11);
    close_ok(j);
    /* An empty last segment still carries its position in its name. */
    j = open_manual(fx, NULL);
    close_ok(j);
    j = open_manual(fx, NULL);
    assert_int_equal(append_samples(j, 11, 1), 12);
    close_ok(j);
    /* Snapshots may cover more than the journal holds (journal lost): min_pos. */
    remove_tree(fx->jdir);
    struct journal_opts o = {.mode = JOURNAL_MODE_MANUAL, .min_pos = 500};
    j = open_manual(fx, &o);
    assert_int_equal(append_samples(j, 0, 1), 501);
    close_ok(j);
    o.min_pos = 10; /* lower than the journal: the journal wins */
    j = open_manual(fx, &o);
    assert_int_equal(append_samples(j, 0, 1), 502);
    close_ok(j);
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, 2);
    assert_int_equal(rep.last_pos, 502);
}

/* ---- full disk ---- */

struct faults {
    int write_fails;   /* next writes fail with ENOSPC */
    int half_first;    /* the first failing write first writes half (a short write) */
    int sync_fails;    /* next fdatasyncs fail with EIO */
    int writes, syncs; /* calls seen */
};

static ssize_t fault_write(void *ctx, int fd, const void *buf, size_t len)
{
    struct faults *f = ctx;
    f->writes++;
    if (f->write_fails > 0) {
        if (f->half_first && len > 1) {
            f->half_first = 0;
            return write(fd, buf, len / 2);
        }
        f->write_fails--;
        errno = ENOSPC;
        return -1;
    }
    return write(fd, buf, len);
}

static int fault_sync(void *ctx, int fd)
{
    struct faults *f = ctx;
    f->syncs++;
    if (f->sync_fails > 0) {
        f->sync_fails--;
        errno = EIO;
        return -1;
    }
    return fdatasync(fd);
}

static void test_enospc_write(void **state)
{
    struct fixture *fx = *state;
    struct faults f = {0};
    struct journal_io io = {.write = fault_write, .fdatasync = fault_sync, .ctx = &f};
    struct journal_opts o = {.mode = JOURNAL_MODE_MANUAL, .io = &io};
    struct journal *j = open_manual(fx, &o);
    struct journal_error err;
    struct events e = {0};
    char msg[300];
    append_samples(j, 0, 5);
    assert_int_equal(journal_sync(j, NULL, &err), 0);
    /* Disk full after half a write: nothing acknowledged, appends refused, reported. */
    append_samples(j, 5, 5);
    f.write_fails = 1;
    f.half_first = 1;
    uint64_t durable = 0;
    assert_int_equal(journal_sync(j, &durable, &err), JOURNAL_ESYS);
    assert_int_equal(durable, 5);
    assert_int_equal(err.step, JOURNAL_STEP_WRITE);
    assert_int_equal(err.sys, ENOSPC);
    journal_format(&err, msg, sizeof msg);
    assert_non_null(strstr(msg, "write journal/"));
    assert_non_null(strstr(msg, ".log: No space left on device"));
    assert_int_equal(journal_check(j, &err), JOURNAL_EBROKEN);
    assert_int_equal(err.sys, ENOSPC);
    journal_poll(j, on_event, &e);
    assert_int_equal(e.n, 2);
    assert_int_equal(e.ev[0].type, JOURNAL_EV_DURABLE);
    assert_int_equal(e.ev[0].last, 5);
    assert_int_equal(e.ev[1].type, JOURNAL_EV_FAILED);
    assert_int_equal(e.ev[1].first, 6);
    assert_int_equal(e.ev[1].last, 10);
    assert_int_equal(e.ev[1].err.sys, ENOSPC);
    /* Still full: still failing, no new FAILED for the same records. */
    f.write_fails = 1;
    assert_int_equal(journal_sync(j, NULL, &err), JOURNAL_ESYS);
    e.n = 0;
    journal_poll(j, on_event, &e);
    assert_int_equal(e.n, 0);
    struct journal_stats st;
    journal_stats(j, &st);
    assert_true(st.broken);
    assert_int_equal(st.failures, 2);
    /* A mutation checked before the failure is still recorded (and written on retry). */
    struct journal_record r = sample(10);
    assert_int_equal(journal_append(j, &r, NULL), 0);
    assert_int_equal(journal_last_pos(j), 11);
    /* Space is back: the same records are written once, and appends resume. */
    assert_int_equal(journal_sync(j, &durable, &err), 0);
    assert_int_equal(durable, 11);
    assert_int_equal(journal_check(j, &err), 0);
    journal_poll(j, on_event, &e);
    /* Record 11 was appended after the FAILED event: it gets its own answer. */
    assert_int_equal(e.n, 2);
    assert_int_equal(e.ev[0].type, JOURNAL_EV_DURABLE);
    assert_int_equal(e.ev[0].first, 11);
    assert_int_equal(e.ev[0].last, 11);
    assert_int_equal(e.ev[1].type, JOURNAL_EV_RECOVERED);
    append_samples(j, 11, 2);
    close_ok(j);
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(rep.torn + rep.damaged, 0);
    assert_int_equal(fx->ngot, 13);
    for (size_t i = 0; i < 13; i++)
        assert_is_sample(&fx->got[i], i, i + 1);
}

static void test_fsync_fails(void **state)
{
    struct fixture *fx = *state;
    struct faults f = {0};
    struct journal_io io = {.write = fault_write, .fdatasync = fault_sync, .ctx = &f};
    struct journal_opts o = {.mode = JOURNAL_MODE_ALWAYS, .io = &io, .retry_ms = 10};
    struct journal *j = open_manual(fx, &o);
    struct events e = {0};
    f.sync_fails = 3;
    append_samples(j, 0, 7);
    journal_commit(j);
    wait_events(j, &e, 1);
    assert_int_equal(e.ev[0].type, JOURNAL_EV_FAILED);
    assert_int_equal(e.ev[0].first, 1);
    assert_int_equal(e.ev[0].last, 7);
    assert_int_equal(e.ev[0].err.step, JOURNAL_STEP_SYNC);
    /* The thread retries by itself (rewriting, never trusting a retried fsync). */
    wait_events(j, &e, 2);
    assert_int_equal(e.ev[e.n - 1].type, JOURNAL_EV_RECOVERED);
    assert_int_equal(journal_durable_pos(j), 7);
    assert_true(f.writes >= 4);
    append_samples(j, 7, 3);
    journal_commit(j);
    wait_events(j, &e, e.n + 1);
    assert_int_equal(e.ev[e.n - 1].type, JOURNAL_EV_DURABLE);
    assert_int_equal(e.ev[e.n - 1].last, 10);
    close_ok(j);
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, 10);
    assert_int_equal(rep.torn + rep.damaged, 0);
}

/* journal_wait_durable: EVERYSEC syncs at once for it, not at the minute's tick; a failed
 * fdatasync is reported to the waiter (the thread retries on its own); MANUAL refuses. */
static void test_wait_durable(void **state)
{
    struct fixture *fx = *state;
    struct faults f = {0};
    struct journal_io io = {.write = fault_write, .fdatasync = fault_sync, .ctx = &f};
    struct journal_opts o = {
        .mode = JOURNAL_MODE_EVERYSEC, .io = &io, .sync_ms = 600000, .retry_ms = 600000};
    struct journal *j = open_manual(fx, &o);
    struct journal_error err;
    append_samples(j, 0, 5);
    journal_commit(j);
    assert_int_equal(journal_wait_durable(j, 5, &err), 0);
    assert_true(journal_durable_pos(j) >= 5);
    assert_int_equal(journal_wait_durable(j, 3, &err), 0); /* already durable */
    /* The next fdatasync fails: the waiter hears why; the retry is minutes away. */
    f.sync_fails = 1;
    append_samples(j, 5, 2);
    assert_int_equal(journal_wait_durable(j, 7, &err), JOURNAL_ESYS);
    assert_int_equal(err.step, JOURNAL_STEP_SYNC);
    assert_int_equal(err.sys, EIO);
    assert_true(journal_durable_pos(j) < 7);
    close_ok(j); /* the final round writes and syncs them */
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, 7);

    o = (struct journal_opts){.mode = JOURNAL_MODE_MANUAL};
    j = open_manual(fx, &o);
    assert_int_equal(journal_wait_durable(j, 7, &err), 0);
    append_samples(j, 7, 1);
    assert_int_equal(journal_wait_durable(j, 8, &err), JOURNAL_EMODE);
    assert_int_equal(journal_sync(j, NULL, &err), 0);
    assert_int_equal(journal_wait_durable(j, 8, &err), 0);
    close_ok(j);
}

/* RLIMIT_FSIZE: the real write(2) fails (EFBIG) part-way, as on a full disk. */
static void test_fsize_limit(void **state)
{
    struct fixture *fx = *state;
    struct journal *j = open_manual(fx, NULL);
    append_samples(j, 0, 20);
    struct journal_error err;
    assert_int_equal(journal_sync(j, NULL, &err), 0);
    char seg[256];
    segment_path(fx, 0, seg, sizeof seg);
    long synced = file_size(seg);
    append_samples(j, 20, 20);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)synced + 100;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = journal_sync(j, NULL, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(rc, JOURNAL_ESYS);
    assert_int_equal(err.step, JOURNAL_STEP_WRITE);
    assert_int_equal(err.sys, EFBIG);
    assert_int_equal(journal_durable_pos(j), 20);
    /* Recovered: rewritten from the synced size, nothing doubled or torn. */
    assert_int_equal(journal_sync(j, NULL, &err), 0);
    assert_int_equal(journal_durable_pos(j), 40);
    close_ok(j);
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, 40);
    assert_int_equal(rep.torn + rep.damaged + rep.skipped, 0);
}

static void test_backlog(void **state)
{
    struct fixture *fx = *state;
    struct journal_opts o = {.mode = JOURNAL_MODE_MANUAL, .max_buffer = 4096};
    struct journal *j = open_manual(fx, &o);
    struct journal_record r = {
        .type = JOURNAL_ADD, .name = {"f", 1}, .hashes = hashes, .nhashes = 100};
    struct journal_error err;
    assert_int_equal(journal_append(j, &r, NULL), 0);
    assert_int_equal(journal_append(j, &r, NULL), 0);
    assert_int_equal(journal_check(j, &err), 0);
    assert_int_equal(journal_append(j, &r, NULL), 0); /* checked: taken */
    assert_int_equal(journal_check(j, &err), JOURNAL_EBACKLOG);
    assert_int_equal(err.code, JOURNAL_EBACKLOG);
    /* Appending without checking meets the hard bound at twice max_buffer. */
    assert_int_equal(journal_append(j, &r, NULL), 0);
    assert_int_equal(journal_append(j, &r, NULL), 0);
    assert_int_equal(journal_append(j, &r, NULL), JOURNAL_EBACKLOG);
    assert_int_equal(journal_last_pos(j), 5);
    assert_int_equal(journal_sync(j, NULL, &err), 0);
    assert_int_equal(journal_check(j, &err), 0);
    assert_int_equal(journal_append(j, &r, NULL), 0);
    close_ok(j);
}

/* journal_append_frame: frames encoded at the next position go in as they are, between
 * ordinary appends, with the same stats and urgency; a frame of another position or
 * size is refused and buffers nothing. */
static void test_append_frame(void **state)
{
    struct fixture *fx = *state;
    struct journal *j = open_manual(fx, NULL);
    struct journal_error err;
    assert_int_equal(append_samples(j, 0, 10), 10);
    for (size_t i = 10; i < 30; i++) {
        struct journal_record r = sample(i);
        struct kept k = encode(&r, journal_last_pos(j) + 1);
        uint64_t pos = 0;
        if (i % 5 == 0) { /* a wrong position, a torn size: refused */
            struct kept w = encode(&r, journal_last_pos(j) + 2);
            assert_int_equal(journal_append_frame(j, w.bytes, w.len, &pos), JOURNAL_EINVAL);
            free(w.bytes);
            assert_int_equal(journal_append_frame(j, k.bytes, k.len - 1, &pos), JOURNAL_EINVAL);
            assert_int_equal(journal_append_frame(j, k.bytes, 3, &pos), JOURNAL_EINVAL);
            assert_int_equal(journal_last_pos(j), i);
        }
        assert_int_equal(journal_append_frame(j, k.bytes, k.len, &pos), 0);
        assert_int_equal(pos, i + 1);
        free(k.bytes);
    }
    assert_int_equal(append_samples(j, 30, 10), 40);
    struct journal_stats st;
    journal_stats(j, &st);
    assert_int_equal(st.records, 40);
    assert_int_equal(journal_sync(j, NULL, &err), 0);
    close_ok(j);
    struct journal_replay_report rep;
    assert_int_equal(replay(fx, 0, &rep), 0);
    assert_int_equal(fx->ngot, 40);
    for (size_t i = 0; i < 40; i++)
        assert_is_sample(&fx->got[i], i, i + 1);
    assert_int_equal(rep.torn + rep.damaged + rep.skipped, 0);
}

int main(void)
{
    init_hashes();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_round_trip),
        cmocka_unit_test(test_codec_refuses),
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_and_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_large, setup, teardown),
        cmocka_unit_test_setup_teardown(test_always_group_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_everysec, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spares, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_write_with_holes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zero_segment_reused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_middle_damage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hole_zeros, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hole_flipped_byte, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hole_stray_frames, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hole_older_segment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_byte, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chaos_always, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncate_before, setup, teardown),
        cmocka_unit_test_setup_teardown(test_positions_across_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_enospc_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fsync_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_durable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fsize_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backlog, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_frame, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
