/*
 * registry.h - the named filters: name -> struct filter, and the filter object itself.
 *
 * Threads: one thread, the event loop of the (today single) worker, changes the table
 * (put, remove, replace) and looks names up; a lookup takes no lock because no other
 * thread can remove a filter under it. Other threads (the job thread, HTTP figures) only
 * call registry_collect(), which takes references under the table's lock, and then use
 * the filters they hold with the calls lib/kind.h allows beside a writer. Several
 * workers would need registry_get to take the lock as collect does.
 *
 * A struct filter is reference counted and kind-neutral: a kind (lib/kind.h) and the
 * object of that kind. Its kind, object and parameters never change for the life of the
 * struct: CLEAR and INTERSECT on a filter someone else holds build a new struct and swap
 * it into the table, so a reader never sees bits vanish under it.
 */
#ifndef BLOOMD_SERVER_REGISTRY_H
#define BLOOMD_SERVER_REGISTRY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/kind.h"

struct setop;

struct filter {
    _Atomic uint32_t refs;        /* the table's reference plus one per holder */
    _Atomic bool dropped;         /* set when DROP removed it from the table */
    _Atomic bool replaced;        /* set when registry_replace() put another in its place */
    _Atomic uint64_t changes;     /* bumped by every mutation; starts at 1 (never saved) */
    _Atomic int64_t saved_at;     /* Unix time of its last snapshot, 0 if none (snapshot.c) */
    _Atomic uint64_t journal_pos; /* journal position its last snapshot covers, 0 if none */
    _Atomic uint64_t setop_pos;   /* journal position of the last UNION/INTERSECT into it:
                                     above journal_pos, its snapshot must come before any
                                     source's newer one (snapshot.c); 0 if none */
    int64_t rotated_ms;           /* time of its last journaled ROTATE (loop thread only) */
    _Atomic uint64_t keys_new;    /* keys ADD/CHECKADD found new (written by the loop only) */
    _Atomic uint64_t keys_seen;   /* keys ADD/CHECKADD found present already */
    uint64_t seed;                /* its keys' hash seed (sbf_hash_key_seeded); never changes */
    bool auto_created;            /* made on first use this run (commands_autocreate) */
    const struct kind_ops *ops;   /* the filter's kind */
    void *obj;                    /* the filter itself, of kind ops; owned; never replaced */
    struct setop *setop;          /* the background UNION/INTERSECT into it (server/exec/setop.h),
                                     or NULL; loop thread only */
    size_t overhead;              /* bytes counted in the budget's overhead while in a table */
    size_t name_len;
    char name[]; /* NUL-terminated copy (names never contain NUL) */
};

enum registry_err {
    REGISTRY_OK = 0,
    REGISTRY_ENOMEM = -1, /* allocating the object or the table failed */
    REGISTRY_EXISTS = -2, /* a filter with that name is already there */
};

/*
 * Wraps obj (of kind ops; taken over) in a new struct named name[0..len) with one
 * reference (the caller's). Returns NULL, leaving obj to the caller, if allocation fails.
 */
struct filter *filter_new(const char *name, size_t len, const struct kind_ops *ops, void *obj);

/* Takes a reference. */
void filter_ref(struct filter *f);

/* Drops a reference; the last one frees the struct and its object. filter_unref(NULL) is ok. */
void filter_unref(struct filter *f);

/* Marks the filter modified (for snapshots). */
void filter_touch(struct filter *f);

/* Counts keys written to f: fresh of them new, the rest of n already there (metrics).
 * Loop thread only: a relaxed load and store, no locked instruction. */
void filter_count_keys(struct filter *f, uint64_t n, uint64_t fresh);

struct registry;

/* Returns a new empty registry, or NULL. Free with registry_free(). */
struct registry *registry_new(void);

struct budget;

/*
 * Counts the table's memory in b from now on (server/core/budget.h, BUDGET_OVERHEAD): its
 * buckets, and each entry's registry_entry_bytes() while it is in the table. Counted, not
 * refused: a caller that may refuse a filter asks budget_fits() first.
 */
void registry_set_budget(struct registry *r, struct budget *b);

/*
 * What f costs besides its bits while in a table: the kind's headers, struct filter and
 * name, the table's node, and the allocator's share of each (measured: see registry.c).
 */
size_t registry_entry_bytes(const struct filter *f);

/* Drops the table's references and frees the table. registry_free(NULL) does nothing. */
void registry_free(struct registry *r);

/* Number of filters. */
size_t registry_count(const struct registry *r);

/* The filter named name[0..len) with a reference taken for the caller (who unrefs it),
 * or NULL. */
struct filter *registry_get(const struct registry *r, const char *name, size_t len);

/* Inserts f under its name; the table takes its own reference. */
int registry_put(struct registry *r, struct filter *f);

/*
 * The one way a new object enters the table: wraps obj (of kind ops; taken over, freed
 * on failure) in a filter named name[0..len) whose keys hash with seed, and puts it there. With
 * fit, refused (REGISTRY_ENOMEM) when the entry's overhead would pass the table's budget. Returns
 * REGISTRY_OK with *out (when not NULL) a reference for the caller, or a registry_err.
 */
int registry_install(struct registry *r, const char *name, size_t len, const struct kind_ops *ops,
                     void *obj, uint64_t seed, bool fit, struct filter **out);

/*
 * Removes the filter named name[0..len), sets its dropped flag and drops the table's
 * reference. Returns false if there was none.
 */
bool registry_remove(struct registry *r, const char *name, size_t len);

/*
 * Puts fresh in place of old (same name; old must be in the table): the table's
 * reference moves from old to a new one on fresh, and old is marked replaced (a snapshot
 * of it would be stale: it is not written any more).
 */
void registry_replace(struct registry *r, struct filter *old, struct filter *fresh);

/*
 * Runs fn(f, arg) while no other thread can hold or take a reference to f, and returns
 * true; returns false without calling fn when someone else holds f (the caller then
 * builds a replacement). f must be in the table and the caller holds exactly one
 * reference of its own (from registry_get).
 */
bool registry_with_exclusive(struct registry *r, struct filter *f,
                             void (*fn)(struct filter *, void *), void *arg);

/*
 * Returns every filter (name starting with prefix[0..plen) when plen > 0), sorted by
 * name, each with a reference taken for the caller, in a malloc'd array of *n entries.
 * The caller unrefs each and frees the array. Safe from any thread. Returns
 * REGISTRY_ENOMEM (and nothing) if the array cannot be allocated.
 */
int registry_collect(struct registry *r, const char *prefix, size_t plen, struct filter ***out,
                     size_t *n);

#endif
