/*
 * figures.h - the per-filter figures INFO, /metrics and /api show, gathered by one
 * function (figures_of) once per filter per request: the kinds' cheap info, items over
 * the last hour (a ring of samples per filter, taken by a timer on the loop) and the
 * O(filter bytes) ones (bits set per part, the popcount estimates), which a pass on the
 * long job lane computes and which are cached here. The server owns one (struct server's
 * `figures`), whether or not the HTTP pages are on. With the pages, every filter is
 * counted every FIGURES_SAMPLE_S; without, only the big filters INFO asked for.
 *
 * Threads: everything here runs on the loop thread; the popcount job only reads filters
 * it holds references to, with the reader calls lib/kind.h allows beside a writer, and
 * hands its results back through its done() step. So neither a scrape nor INFO walks the
 * bits of a filter bigger than FIGURES_INLINE_BYTES on the loop.
 */
#ifndef BLOOMD_SERVER_FIGURES_H
#define BLOOMD_SERVER_FIGURES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/kind.h"

struct filter;
struct server;
struct event_base;

#define FIGURES_SAMPLE_S 10 /* seconds between samples and between popcount passes */
#define FIGURES_RING 360    /* samples kept: one hour */
/* INFO counts a filter up to this size on the loop (a popcount of 4 MiB is well under a
 * millisecond), so its estimates are exact; a bigger one shows the cached count. */
#define FIGURES_INLINE_BYTES ((uint64_t)4 << 20)

struct figures_sample {
    int64_t t_ms;   /* Unix ms */
    uint64_t items; /* the filter's items then */
};

/* What is known of one filter, by name. */
struct figures_entry {
    char *name;
    const void *obj;             /* the filter object the counts are of */
    struct figures_sample *ring; /* FIGURES_RING samples, oldest at (head - n)
                                    mod FIGURES_RING; NULL without the pages */
    uint32_t head, n;            /* next slot, samples held */
    int64_t counted_ms;          /* when the counts below were taken; 0: never */
    uint32_t nparts;             /* parts counted */
    uint64_t *ones;              /* bits set per part (nparts) */
    bool has_estimate;           /* the kind has estimate(): est is set */
    struct sbf_estimate est;     /* popcount estimates */
    uint64_t seen_tick;          /* last sampling tick that saw the filter */
    bool wanted;                 /* INFO asked since the last pass was posted */
};

/* What is shown of one filter in one request: figures_of() fills it. */
struct figures_row {
    struct kind_info info;         /* the kind's cheap figures, now */
    uint32_t nparts;               /* parts (stages); 1 for a kind without parts() */
    uint64_t bits;                 /* bits of every part; 0 for a kind without parts() */
    const struct figures_entry *e; /* samples (and counts) kept, or NULL: none yet */
    bool counted;                  /* e's counts are of this filter object */
    uint64_t ones;                 /* bits set in every part, if counted */
    bool has_estimate;             /* est holds the estimates (fields' est): a count, or
                                      the kind's cheap rate (info.est_error) */
    struct sbf_estimate est;
    int64_t est_age_ms; /* how old est is: 0 if counted now, else since the pass counted */
};

struct figures;

/*
 * Starts the sampling timer on base; the first tick runs when the server is ready. With
 * pages (the HTTP pages are on) every filter has an entry with a sample ring; without,
 * only filters over FIGURES_INLINE_BYTES, for INFO, and without a ring, so many small
 * filters cost nothing here. Returns NULL if out of memory or the timer cannot be added
 * (logged).
 */
struct figures *figures_new(struct server *srv, struct event_base *base, bool pages);

/* Stops the timer and frees everything. figures_free(NULL) does nothing. After the job
 * thread stopped (a running job's done() then never comes). */
void figures_free(struct figures *fg);

/* Takes a sample of every filter and queues a popcount pass unless one is queued. */
void figures_tick(struct figures *fg);

/* Ticks now if a filter has no entry yet and the last tick is a second old, so a new
 * filter shows figures at once rather than after FIGURES_SAMPLE_S. */
void figures_poke(struct figures *fg);

/*
 * INFO is about to show f's figures. For a filter over FIGURES_INLINE_BYTES with
 * estimate() (else nothing happens): without the pages, only filters asked for are
 * counted again, so this marks f; and when its count is missing or older than
 * FIGURES_SAMPLE_S (and no pass is under way) it ticks now, at most once a second, so a
 * client polling INFO sees counts at most about FIGURES_SAMPLE_S plus one pass old.
 * figures_want(NULL, f) does nothing.
 */
void figures_want(struct figures *fg, const struct filter *f);

/* Every entry, sorted by name as registry_collect sorts filters (*n of them); valid until
 * the next figures_tick. fg may be NULL (none). Loop thread. */
struct figures_entry *const *figures_entries(const struct figures *fg, size_t *n);

/* The entry of the filter named name[0..len), or NULL if none yet. */
const struct figures_entry *figures_get(const struct figures *fg, const char *name, size_t len);

/*
 * The figures of f for one request, gathered once: cheap ones now, popcount ones from the
 * cache. With count_small, a filter of at most FIGURES_INLINE_BYTES whose kind has
 * estimate() is counted here instead (INFO: exact and cheap). fg may be NULL (no cache:
 * unit tests). out->e stays valid until the next figures_tick. Loop thread.
 */
void figures_of(const struct figures *fg, const struct filter *f, bool count_small,
                struct figures_row *out);

/*
 * figures_of with the entry given (e may be NULL): a copy of f's entry that the caller
 * took on the loop, so that a job holding a reference to f can build its row. Reads f
 * only with the reader calls lib/kind.h allows beside a writer: any thread.
 */
void figures_row_of(const struct figures_entry *e, const struct filter *f, bool count_small,
                    struct figures_row *out);

#endif
