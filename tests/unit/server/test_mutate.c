/*
 * test_mutate.c - the mutation layer against a real journal: every change returns its
 * record's position as a value (increasing; 0 without a journal), and a server that
 * replays the journal (recover_journal, through the same functions) ends with exactly
 * the live server's filters: the same names, the same answer for every key, the same
 * items and stages. No sockets, no loop: records are written when the journal closes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/kind.h"
#include "lib/sbf.h"
#include "server/core/config.h"
#include "server/core/server.h"
#include "server/exec/mutate.h"
#include "server/exec/recover.h"
#include "server/lifecycle.h"
#include "server/persist/durable.h"
#include "server/persist/snapfile.h"
#include "server/store/kinds.h"
#include "server/store/registry.h"

#define KEYS 3000 /* per filter: the blocked ones grow past capacity 1000 */

struct fixture {
    char dir[64];
    struct server srv;
};

static void start(struct fixture *fx, int durability)
{
    struct config cfg;
    config_defaults(&cfg);
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", fx->dir);
    cfg.durability = durability;
    assert_int_equal(server_init(&fx->srv, &cfg), SERVER_OK);
}

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/test_mutate.XXXXXX");
    assert_non_null(mkdtemp(fx->dir));
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", fx->dir);
    assert_int_equal(system(cmd), 0);
    free(fx);
    return 0;
}

static struct proto_slice sl(const char *s)
{
    return (struct proto_slice){s, strlen(s)};
}

static struct sbf_hash key(const char *prefix, int i)
{
    char k[32];
    int n = snprintf(k, sizeof k, "%s%d", prefix, i);
    return sbf_hash_key(k, (size_t)n);
}

static void create(struct server *srv, const char *name, const char *kind, uint64_t window_ms,
                   uint64_t *pos)
{
    const struct kind_ops *ops = kinds_by_name(kind, strlen(kind));
    assert_non_null(ops);
    struct kind_params p = {.now_ms = 1700000000000};
    sbf_params_default(&p.sbf);
    p.sbf.capacity = 1000;
    p.sbf.error = 0.01;
    if (ops->defaults != NULL)
        ops->defaults(&p);
    p.window_ms = window_ms;
    uint64_t before = *pos;
    assert_int_equal(mutate_create(srv, sl(name), ops, &p, 0, pos), SBF_OK);
    assert_true(*pos > before);
}

/* Adds keys prefix0..prefix(n-1) to name in batches of 100; positions must increase. */
static void add(struct server *srv, const char *name, const char *prefix, int n, uint64_t *pos)
{
    struct filter *f = registry_get(srv->reg, name, strlen(name));
    assert_non_null(f);
    for (int i = 0; i < n; i += 100) {
        struct sbf_hash h[100];
        bool bits[100];
        size_t m = 0, done, fresh;
        for (int j = i; j < n && j < i + 100; j++)
            h[m++] = key(prefix, j);
        uint64_t before = *pos;
        assert_int_equal(mutate_add(srv, f, h, m, bits, &done, &fresh, pos), SBF_OK);
        assert_int_equal(done, m);
        if (fresh > 0)
            assert_true(*pos > before);
        else
            assert_true(*pos == before); /* nothing new: no record */
    }
    filter_unref(f);
}

/* Source names for mutate_setop_prepare from a NULL-terminated list. */
struct names {
    const char *const *v;
};

static bool next_name(void *ctx, struct proto_slice *name)
{
    struct names *it = ctx;
    if (*it->v == NULL)
        return false;
    *name = sl(*it->v++);
    return true;
}

static void setop(struct server *srv, bool intersect, const char *dst, const char *const *srcs,
                  uint64_t *pos)
{
    struct mutate_sources s = {.intersect = intersect};
    struct names it = {srcs};
    struct filter *d = NULL;
    struct result res;
    result_init(&res);
    assert_true(mutate_setop_prepare(srv, next_name, &it, sl(dst), &s, &d, &res));
    result_free(&res);
    uint64_t before = *pos;
    assert_int_equal(mutate_setop(srv, sl(dst), &s, d, pos), SBF_OK);
    assert_true(*pos > before);
}

/* What a filter answers and says of itself, for comparing two servers. */
struct seen {
    bool bits[6][KEYS];
    uint64_t items, stages, bytes;
};

static const char *const prefixes[6] = {"a", "b", "c", "x", "e", "w"};

static void observe(struct server *srv, const char *name, struct seen *out)
{
    struct filter *f = registry_get(srv->reg, name, strlen(name));
    assert_non_null(f);
    for (int p = 0; p < 6; p++)
        for (int i = 0; i < KEYS; i++) {
            struct sbf_hash h = key(prefixes[p], i);
            f->ops->check_batch(f->obj, &h, 1, &out->bits[p][i]);
        }
    struct kind_info info = {0};
    f->ops->info(f->obj, &info);
    out->items = info.items;
    out->stages = info.capacity; /* grows with each stage or doubling */
    out->bytes = info.bytes;
    filter_unref(f);
}

static const char *const live_names[] = {"a", "b", "both", "inter", "cleared", "e", "w"};
#define NLIVE (sizeof live_names / sizeof live_names[0])

/* Every kind of change, through the mutation layer, each position checked. */
static void run_changes(struct server *srv)
{
    uint64_t pos = 0;
    create(srv, "a", "blocked", 0, &pos);
    create(srv, "b", "blocked", 0, &pos);
    create(srv, "e", "expandable", 0, &pos);
    create(srv, "w", "window", 3600u * 1000u, &pos);
    create(srv, "cleared", "blocked", 0, &pos);
    create(srv, "gone", "blocked", 0, &pos);
    add(srv, "a", "a", KEYS, &pos);
    add(srv, "a", "a", KEYS, &pos); /* again: all present, no records */
    add(srv, "b", "b", KEYS, &pos);
    add(srv, "e", "e", KEYS, &pos);
    add(srv, "w", "w", KEYS, &pos);
    add(srv, "cleared", "c", KEYS, &pos);
    add(srv, "gone", "x", 100, &pos);

    /* UNION into a missing filter starts as a copy of the first source. */
    setop(srv, false, "both", (const char *const[]){"a", "b", NULL}, &pos);
    /* INTERSECT of single-stage filters. */
    create(srv, "inter", "blocked", 0, &pos);
    create(srv, "other", "blocked", 0, &pos);
    add(srv, "inter", "a", 500, &pos);
    add(srv, "other", "a", 250, &pos);
    setop(srv, true, "inter", (const char *const[]){"other", NULL}, &pos);
    uint64_t before = pos;
    assert_true(mutate_drop(srv, sl("other"), &pos));
    assert_true(pos > before);

    /* DELETE from the expandable filter: half its keys. */
    struct filter *e = registry_get(srv->reg, "e", 1);
    assert_non_null(e);
    for (int i = 0; i < KEYS / 2; i += 100) {
        struct sbf_hash h[100];
        for (int j = 0; j < 100; j++)
            h[j] = key("e", i + j);
        size_t removed;
        before = pos;
        assert_int_equal(mutate_delete(srv, e, h, 100, &removed, &pos), SBF_OK);
        /* Keys whose fingerprint an earlier key had were never stored (CHECKADD: present),
         * so a batch may find a few entries fewer than keys. */
        assert_true(removed >= 95 && removed <= 100);
        assert_true(pos > before);
    }
    filter_unref(e);

    struct filter *c = registry_get(srv->reg, "cleared", 7);
    before = pos;
    assert_int_equal(mutate_clear(srv, c, &pos), SBF_OK); /* takes the reference */
    assert_true(pos > before);
    add(srv, "cleared", "c", 10, &pos);

    before = pos;
    assert_true(mutate_drop(srv, sl("gone"), &pos));
    assert_true(pos > before);
    assert_false(mutate_drop(srv, sl("gone"), &pos));
}

static void test_replay_equals_live(void **state)
{
    struct fixture *fx = *state;
    static struct seen live[NLIVE], replayed[NLIVE];

    start(fx, DURABILITY_EVERYSEC);
    assert_int_equal(recover_load(&fx->srv), RECOVER_OK);
    assert_int_equal(recover_journal(&fx->srv), RECOVER_OK); /* empty: opens it */
    fx->srv.phase = SERVER_READY;
    run_changes(&fx->srv);
    for (size_t i = 0; i < NLIVE; i++)
        observe(&fx->srv, live_names[i], &live[i]);
    size_t count = registry_count(fx->srv.reg);
    server_destroy(&fx->srv); /* writes the journal; no snapshot was taken */

    start(fx, DURABILITY_EVERYSEC);
    assert_int_equal(recover_load(&fx->srv), RECOVER_OK);
    assert_int_equal(registry_count(fx->srv.reg), 0); /* the journal holds everything */
    assert_int_equal(recover_journal(&fx->srv), RECOVER_OK);
    assert_int_equal(registry_count(fx->srv.reg), count);
    assert_null(registry_get(fx->srv.reg, "gone", 4));
    assert_null(registry_get(fx->srv.reg, "other", 5));
    for (size_t i = 0; i < NLIVE; i++) {
        observe(&fx->srv, live_names[i], &replayed[i]);
        for (int p = 0; p < 6; p++)
            assert_memory_equal(live[i].bits[p], replayed[i].bits[p], sizeof live[i].bits[p]);
        assert_int_equal(live[i].items, replayed[i].items);
        assert_int_equal(live[i].stages, replayed[i].stages);
        assert_int_equal(live[i].bytes, replayed[i].bytes);
    }
    /* The live answers themselves: no false negative anywhere. */
    for (int i = 0; i < KEYS; i++) {
        assert_true(live[0].bits[0][i]);                       /* a holds a* */
        assert_true(live[2].bits[0][i] && live[2].bits[1][i]); /* both holds a* and b* */
        assert_true(i < KEYS / 2 || live[5].bits[4][i]);       /* e kept what was not deleted */
        assert_true(live[6].bits[5][i]);                       /* w holds w* */
    }
    for (int i = 0; i < 250; i++)
        assert_true(live[3].bits[0][i]); /* inter holds a0..a249 */
    for (int i = 0; i < 10; i++)
        assert_true(live[4].bits[2][i]); /* cleared holds c0..c9 again */
    assert_true(live[4].items == 10);
    server_destroy(&fx->srv);
}

/* A blocked filter object of the given capacity holding prefix0..prefix(n-1), not in a table. */
static void *loose_filter(struct server *srv, uint64_t capacity, const char *prefix, int n)
{
    const struct kind_ops *ops = kinds_by_name("blocked", 7);
    struct kind_params p = {0};
    sbf_params_default(&p.sbf);
    p.sbf.capacity = capacity;
    void *obj;
    assert_int_equal(ops->create(&p, &srv->budget.sbf, &obj), SBF_OK);
    for (int i = 0; i < n; i++) {
        struct sbf_hash h = key(prefix, i);
        size_t added;
        assert_int_equal(ops->add_batch(obj, &h, 1, &added), SBF_OK);
    }
    return obj;
}

/* How many of prefix0..prefix(n-1) name answers present for. */
static int present(struct server *srv, const char *name, const char *prefix, int n)
{
    struct filter *f = registry_get(srv->reg, name, strlen(name));
    assert_non_null(f);
    int k = 0;
    for (int i = 0; i < n; i++) {
        struct sbf_hash h = key(prefix, i);
        bool bit;
        f->ops->check_batch(f->obj, &h, 1, &bit);
        k += bit;
    }
    filter_unref(f);
    return k;
}

static uint64_t capacity_of(struct server *srv, const char *name)
{
    struct filter *f = registry_get(srv->reg, name, strlen(name));
    assert_non_null(f);
    struct kind_params p;
    f->ops->params(f->obj, &p);
    filter_unref(f);
    return p.sbf.capacity;
}

/*
 * RESTORE installs or replaces, and journals its record; then the two crash cases of
 * mutate.h's rule: (landed) the restored filter's snapshot covers the record, so replay
 * skips it and applies only the later adds over the file; (not landed) the filter that
 * was there stays, or an empty one of the record's kind and parameters is made, and the
 * later adds, which may have been acknowledged, apply to it.
 */
static void restore_case(struct fixture *fx, bool landed)
{
    const struct kind_ops *ops = kinds_by_name("blocked", 7);
    start(fx, DURABILITY_EVERYSEC);
    assert_int_equal(recover_load(&fx->srv), RECOVER_OK);
    assert_int_equal(recover_journal(&fx->srv), RECOVER_OK);
    fx->srv.phase = SERVER_READY;
    uint64_t pos = 0;
    create(&fx->srv, "old", "blocked", 0, &pos);
    add(&fx->srv, "old", "o", 500, &pos);
    /* Without replace a name that exists is refused and nothing changes. */
    uint64_t before = pos;
    assert_int_equal(mutate_restore(&fx->srv, sl("old"), ops, loose_filter(&fx->srv, 7000, "z", 10),
                                    0, false, &pos),
                     SBF_EINVAL);
    assert_true(pos == before);
    assert_int_equal(capacity_of(&fx->srv, "old"), 1000);
    assert_int_equal(mutate_restore(&fx->srv, sl("old"), ops,
                                    loose_filter(&fx->srv, 5000, "r", 800), 0, true, &pos),
                     SBF_OK);
    assert_true(pos > before);
    before = pos;
    assert_int_equal(mutate_restore(&fx->srv, sl("new"), ops,
                                    loose_filter(&fx->srv, 6000, "n", 800), 0, false, &pos),
                     SBF_OK);
    assert_true(pos > before);
    assert_int_equal(capacity_of(&fx->srv, "old"), 5000);
    assert_int_equal(present(&fx->srv, "old", "r", 800), 800);
    if (landed) { /* what the snapshot forced by RESTORE does */
        const char *names[] = {"old", "new"};
        for (int i = 0; i < 2; i++) {
            struct filter *f = registry_get(fx->srv.reg, names[i], 3);
            uint64_t covered = durable_last_pos(&fx->srv);
            struct snapfile_error err;
            assert_int_equal(snapfile_write(fx->dir, names[i], f->ops, f->obj, covered, 0, NULL,
                                            NULL, NULL, &err),
                             0);
            filter_unref(f);
        }
    }
    add(&fx->srv, "old", "after", 300, &pos);
    add(&fx->srv, "new", "after", 300, &pos);
    server_destroy(&fx->srv); /* the journal is written; no other snapshot */

    start(fx, DURABILITY_EVERYSEC);
    assert_int_equal(recover_load(&fx->srv), RECOVER_OK);
    assert_int_equal(registry_count(fx->srv.reg), landed ? 2 : 0);
    assert_int_equal(recover_journal(&fx->srv), RECOVER_OK);
    assert_int_equal(registry_count(fx->srv.reg), 2);
    assert_int_equal(present(&fx->srv, "old", "after", 300), 300);
    assert_int_equal(present(&fx->srv, "new", "after", 300), 300);
    if (landed) {
        assert_int_equal(capacity_of(&fx->srv, "old"), 5000);
        assert_int_equal(capacity_of(&fx->srv, "new"), 6000);
        assert_int_equal(present(&fx->srv, "old", "r", 800), 800);
        assert_int_equal(present(&fx->srv, "new", "n", 800), 800);
    } else {
        assert_int_equal(capacity_of(&fx->srv, "old"), 1000); /* the one before stays */
        assert_int_equal(present(&fx->srv, "old", "o", 500), 500);
        assert_int_equal(capacity_of(&fx->srv, "new"), 6000); /* empty, of the record's kind */
        assert_true(present(&fx->srv, "new", "n", 800) < 40); /* false positives only */
    }
    server_destroy(&fx->srv);
}

static void test_restore_landed(void **state)
{
    restore_case(*state, true);
}

static void test_restore_not_landed(void **state)
{
    restore_case(*state, false);
}

/* Without a journal nor replication every change still applies, and no record is made:
 * positions stay 0. (With replication they are its offsets: tests/integration.) */
static void test_no_journal_positions_are_zero(void **state)
{
    struct fixture *fx = *state;
    start(fx, DURABILITY_SNAPSHOT);
    const struct kind_ops *ops = kinds_by_name("blocked", 7);
    struct kind_params p = {0};
    sbf_params_default(&p.sbf);
    p.sbf.capacity = 100;
    uint64_t pos = 0;
    assert_int_equal(mutate_create(&fx->srv, sl("f"), ops, &p, 0, &pos), SBF_OK);
    struct filter *f = registry_get(fx->srv.reg, "f", 1);
    struct sbf_hash h = key("k", 1);
    bool bit;
    size_t done, fresh;
    assert_int_equal(pos, 0);
    assert_int_equal(mutate_add(&fx->srv, f, &h, 1, &bit, &done, &fresh, &pos), SBF_OK);
    assert_int_equal(fresh, 1);
    assert_false(bit);
    assert_int_equal(mutate_add(&fx->srv, f, &h, 1, &bit, &done, &fresh, &pos), SBF_OK);
    assert_true(bit);
    filter_unref(f);
    assert_int_equal(pos, 0);
    assert_int_equal(fx->srv.repl.offset, 0);
    server_destroy(&fx->srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_replay_equals_live, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_journal_positions_are_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restore_landed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restore_not_landed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
