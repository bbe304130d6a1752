/*
 * test_journal_read.c - unit tests of journal_read_frames, the journal read back for
 * replication: frames byte for byte as appended, across segment boundaries, from any
 * position and on from a cursor, bounded by upto and by the room given; a flipped byte,
 * a hole or a truncated segment is an error (JOURNAL_EDAMAGED, JOURNAL_EGONE), never a
 * frame handed on; and the reader changes no file.
 */
#include <setjmp.h> /* cmocka needs these first */
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/journal_record.h"
#include "server/persist/journal.h"
#include "tests/unit/server/remove_tree.h"

#define NRECS 600
#define SEGMENT_BYTES 8192 /* a few dozen records a segment */

struct fixture {
    char dir[64];
    char jdir[96];
    unsigned char *out; /* OUT_CAP bytes */
    struct journal_scratch *scratch;
    uint64_t last; /* the last position appended */
};

#define OUT_CAP ((size_t)JOURNAL_RECORD_MAX + 4096)

static struct sbf_hash hashes[64];

/* Record i: an ADD of 1 + i % 40 hashes (sizes vary, so frames straddle reads). */
static struct journal_record sample(size_t i)
{
    for (size_t k = 0; k < 64; k++)
        hashes[k] = (struct sbf_hash){.lo = i * 1000 + k, .hi = ~(uint64_t)i};
    return (struct journal_record){
        .type = JOURNAL_ADD, .name = {"filter", 6}, .hashes = hashes, .nhashes = 1 + i % 40};
}

/* The frame of record i at position pos, into buf; its size. */
static size_t frame_of(size_t i, uint64_t pos, unsigned char *buf, size_t cap)
{
    struct journal_record r = sample(i);
    long n = journal_record_encode(&r, pos, buf, cap);
    assert_true(n > 0);
    return (size_t)n;
}

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/test_journal_read.XXXXXX");
    assert_non_null(mkdtemp(fx->dir));
    snprintf(fx->jdir, sizeof fx->jdir, "%s/" JOURNAL_SUBDIR, fx->dir);
    fx->out = malloc(OUT_CAP);
    fx->scratch = malloc(sizeof *fx->scratch);
    assert_non_null(fx->out);
    assert_non_null(fx->scratch);
    /* Records 1..NRECS, synced in groups of 7, so that segments rotate often. */
    struct journal_opts o = {.mode = JOURNAL_MODE_MANUAL, .segment_bytes = SEGMENT_BYTES};
    struct journal *j = NULL;
    struct journal_error err;
    assert_int_equal(journal_open(fx->dir, &o, &j, &err), 0);
    for (size_t i = 0; i < NRECS; i++) {
        struct journal_record r = sample(i);
        assert_int_equal(journal_append(j, &r, &fx->last), 0);
        if (i % 7 == 6)
            assert_int_equal(journal_sync(j, NULL, &err), 0);
    }
    assert_int_equal(journal_sync(j, NULL, &err), 0);
    assert_int_equal(journal_first_pos(j), 1);
    assert_int_equal(journal_close(j, &err), 0);
    assert_int_equal(fx->last, NRECS);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    remove_tree(fx->dir);
    free(fx->out);
    free(fx->scratch);
    free(fx);
    return 0;
}

/* The segment files, sorted; returns how many (at most max). */
static size_t segments(const struct fixture *fx, char names[][64], size_t max)
{
    struct dirent **ents;
    int n = scandir(fx->jdir, &ents, NULL, alphasort);
    assert_true(n >= 0);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(ents[i]->d_name);
        if (len > 4 && len < 64 && strcmp(ents[i]->d_name + len - 4, ".log") == 0 && k < max)
            memcpy(names[k++], ents[i]->d_name, len + 1);
        free(ents[i]);
    }
    free(ents);
    return k;
}

/* Reads from c up to upto, all of it (several calls), checking every frame against the
 * record appended at its position. Returns the last position read. */
static uint64_t read_all(struct fixture *fx, struct journal_cursor *c, uint64_t upto)
{
    unsigned char want[4096];
    uint64_t expect = c->next;
    for (int calls = 0; c->next <= upto; calls++) {
        assert_true(calls < 1000);
        size_t n = 0;
        struct journal_error err;
        int rc = journal_read_frames(fx->dir, c, upto, fx->out, OUT_CAP, &n, fx->scratch, &err);
        if (rc != 0) {
            char msg[300];
            fail_msg("journal_read_frames: %s (%d)", journal_format(&err, msg, sizeof msg), rc);
        }
        assert_true(n > 0);
        for (size_t at = 0; at < n; expect++) {
            size_t len = frame_of((size_t)expect - 1, expect, want, sizeof want);
            assert_true(at + len <= n);
            assert_memory_equal(fx->out + at, want, len);
            at += len;
        }
        assert_int_equal(c->next, expect);
    }
    return expect - 1;
}

static void test_reads_every_frame_across_segments(void **state)
{
    struct fixture *fx = *state;
    char names[256][64];
    assert_true(segments(fx, names, 256) > 10);
    struct journal_cursor c = {.next = 1};
    assert_int_equal(read_all(fx, &c, NRECS), NRECS);
    /* Nothing more is asked for: nothing read, the cursor stays. */
    size_t n = 7;
    assert_int_equal(
        journal_read_frames(fx->dir, &c, NRECS, fx->out, OUT_CAP, &n, fx->scratch, NULL), 0);
    assert_int_equal(n, 0);
    assert_int_equal(c.next, NRECS + 1);
}

static void test_from_anywhere_and_on_from_the_cursor(void **state)
{
    struct fixture *fx = *state;
    for (uint64_t from = 1; from <= NRECS; from += 37) {
        struct journal_cursor c = {.next = from};
        uint64_t mid = from + (NRECS - from) / 2;
        assert_int_equal(read_all(fx, &c, mid), mid);
        assert_true(c.seg != 0);
        assert_int_equal(read_all(fx, &c, NRECS), NRECS); /* on from where it stopped */
    }
}

static void test_room_bounds_a_read(void **state)
{
    struct fixture *fx = *state;
    struct journal_cursor c = {.next = 1};
    size_t n = 0;
    /* Too little room for the largest frame: refused, nothing read. */
    assert_int_equal(journal_read_frames(fx->dir, &c, NRECS, fx->out, JOURNAL_RECORD_MAX - 1, &n,
                                         fx->scratch, NULL),
                     JOURNAL_EINVAL);
    /* The exact room: whole frames only, never more than it. */
    assert_int_equal(
        journal_read_frames(fx->dir, &c, NRECS, fx->out, JOURNAL_RECORD_MAX, &n, fx->scratch, NULL),
        0);
    assert_true(n > 0 && n <= JOURNAL_RECORD_MAX);
    assert_true(c.next > 1); /* whole frames, then it stops: less than a frame's room left */
    assert_int_equal(read_all(fx, &c, NRECS), NRECS);
}

static void flip(const char *path, long at)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x10;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

static void test_damage_is_an_error_not_a_frame(void **state)
{
    struct fixture *fx = *state;
    char names[256][64], path[256];
    size_t nseg = segments(fx, names, 256);
    /* A byte in the middle of a middle segment. */
    snprintf(path, sizeof path, "%s/%s", fx->jdir, names[nseg / 2]);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    flip(path, (long)st.st_size / 2);
    uint64_t first = strtoull(names[nseg / 2], NULL, 10);
    /* Up to the segment before it: fine. */
    struct journal_cursor c = {.next = 1};
    assert_int_equal(read_all(fx, &c, first - 1), first - 1);
    /* Into the damage: an error, whether from its start or from before it. */
    struct journal_cursor from[2] = {c, {.next = 1}};
    for (int k = 0; k < 2; k++) {
        size_t n = 1;
        struct journal_error err;
        int rc =
            journal_read_frames(fx->dir, &from[k], NRECS, fx->out, OUT_CAP, &n, fx->scratch, &err);
        if (k == 1 && rc == 0) { /* the room filled before the damage: go on */
            while (rc == 0 && from[k].next <= NRECS)
                rc = journal_read_frames(fx->dir, &from[k], NRECS, fx->out, OUT_CAP, &n,
                                         fx->scratch, &err);
        }
        assert_int_equal(rc, JOURNAL_EDAMAGED);
        assert_int_equal(n, 0);
        assert_non_null(strstr(err.file, names[nseg / 2]));
    }
    /* The reader repaired nothing: the damage is still there, the size unchanged. */
    struct stat after;
    assert_int_equal(stat(path, &after), 0);
    assert_int_equal(after.st_size, st.st_size);
}

static void test_a_missing_segment_is_a_hole(void **state)
{
    struct fixture *fx = *state;
    char names[256][64], path[256];
    assert_true(segments(fx, names, 256) > 5);
    snprintf(path, sizeof path, "%s/%s", fx->jdir, names[3]);
    assert_int_equal(unlink(path), 0);
    uint64_t gone = strtoull(names[3], NULL, 10);
    /* From before it: the records of segment 3 are missing between 2 and 4. */
    struct journal_cursor c = {.next = 1};
    size_t n = 0;
    int rc = 0;
    for (int i = 0; i < 100 && rc == 0 && c.next <= NRECS; i++)
        rc = journal_read_frames(fx->dir, &c, NRECS, fx->out, OUT_CAP, &n, fx->scratch, NULL);
    assert_int_equal(rc, JOURNAL_EDAMAGED);
    assert_int_equal(c.next, gone);
    /* From inside it: segment 2 is found, and ends before the record asked for. */
    c = (struct journal_cursor){.next = gone + 1};
    assert_int_equal(
        journal_read_frames(fx->dir, &c, NRECS, fx->out, OUT_CAP, &n, fx->scratch, NULL),
        JOURNAL_EDAMAGED);
}

static void test_truncated_is_gone(void **state)
{
    struct fixture *fx = *state;
    struct journal_opts o = {.mode = JOURNAL_MODE_MANUAL, .segment_bytes = SEGMENT_BYTES};
    struct journal *j = NULL;
    struct journal_error err;
    assert_int_equal(journal_open(fx->dir, &o, &j, &err), 0);
    assert_int_equal(journal_first_pos(j), 1);
    /* A cursor in the first segment, then the first half truncated away. */
    struct journal_cursor c = {.next = 1};
    assert_int_equal(read_all(fx, &c, 5), 5);
    unsigned removed = 0;
    assert_int_equal(journal_truncate_before(j, NRECS / 2, &removed, &err), 0);
    assert_true(removed > 0);
    uint64_t first = journal_first_pos(j);
    assert_true(first > 6 && first <= NRECS / 2 + 1);
    size_t n = 1;
    assert_int_equal(
        journal_read_frames(fx->dir, &c, NRECS, fx->out, OUT_CAP, &n, fx->scratch, &err),
        JOURNAL_EGONE);
    assert_int_equal(n, 0);
    struct journal_cursor fresh = {.next = first - 1};
    assert_int_equal(
        journal_read_frames(fx->dir, &fresh, NRECS, fx->out, OUT_CAP, &n, fx->scratch, &err),
        JOURNAL_EGONE);
    /* What is left reads as it was. */
    fresh = (struct journal_cursor){.next = first};
    assert_int_equal(read_all(fx, &fresh, NRECS), NRECS);
    assert_int_equal(journal_close(j, &err), 0);
    /* No journal directory at all: gone too. */
    remove_tree(fx->jdir);
    fresh = (struct journal_cursor){.next = first};
    assert_int_equal(
        journal_read_frames(fx->dir, &fresh, NRECS, fx->out, OUT_CAP, &n, fx->scratch, &err),
        JOURNAL_EGONE);
}

static void test_zeros_end_a_segment(void **state)
{
    /* A spare's unused end: zeros after the last frame of a segment, then the next one. */
    struct fixture *fx = *state;
    char names[256][64], path[256];
    segments(fx, names, 256);
    snprintf(path, sizeof path, "%s/%s", fx->jdir, names[2]);
    int fd = open(path, O_WRONLY | O_APPEND);
    assert_true(fd >= 0);
    static const unsigned char zeros[3000];
    assert_int_equal(write(fd, zeros, sizeof zeros), (ssize_t)sizeof zeros);
    close(fd);
    struct journal_cursor c = {.next = 1};
    assert_int_equal(read_all(fx, &c, NRECS), NRECS);
    /* Zeros where records should be (not the end of it): damage. */
    snprintf(path, sizeof path, "%s/%s", fx->jdir, names[5]);
    fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, zeros, 200, 300), 200);
    close(fd);
    c = (struct journal_cursor){.next = 1};
    size_t n = 0;
    int rc = 0;
    for (int i = 0; i < 100 && rc == 0 && c.next <= NRECS; i++)
        rc = journal_read_frames(fx->dir, &c, NRECS, fx->out, OUT_CAP, &n, fx->scratch, NULL);
    assert_int_equal(rc, JOURNAL_EDAMAGED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reads_every_frame_across_segments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_from_anywhere_and_on_from_the_cursor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_room_bounds_a_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damage_is_an_error_not_a_frame, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_missing_segment_is_a_hole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_is_gone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zeros_end_a_segment, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
