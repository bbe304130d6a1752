/*
 * figures.h - per-filter figures the HTTP pages show that STATS does not keep: items over
 * the last hour (a ring of samples per filter, taken by a timer on the loop from the
 * kinds' cheap info) and the O(filter bytes) ones (bits set per part, the estimated
 * false-positive rate, INFO's fields), computed on the job thread and cached here.
 *
 * Threads: everything here runs on the loop thread; the popcount job only reads filters
 * it holds references to, with the reader calls lib/kind.h allows beside a writer, and
 * hands its results back through its done() step. So a scrape never walks filter bits.
 */
#ifndef BLOOMD_SERVER_FIGURES_H
#define BLOOMD_SERVER_FIGURES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct server;
struct event_base;

#define FIGURES_SAMPLE_S 10 /* seconds between samples and between popcount passes */
#define FIGURES_RING 360    /* samples kept: one hour */

struct figures_sample {
    int64_t t_ms;   /* Unix ms */
    uint64_t items; /* the filter's items then */
};

/* What is known of one filter, by name. */
struct figures_entry {
    char *name;
    const void *obj;                          /* the filter object the counts are of */
    struct figures_sample ring[FIGURES_RING]; /* oldest at (head - n) mod FIGURES_RING */
    uint32_t head, n;                         /* next slot, samples held */
    int64_t counted_ms;                       /* when the counts below were taken; 0: never */
    uint32_t nparts;                          /* parts counted */
    uint64_t *ones;                           /* bits set per part (nparts) */
    bool has_estimate;                        /* the kind gave estimated_error */
    double est_error, est_items;              /* popcount estimates */
    char *info_json;                          /* INFO's fields as JSON members, or NULL */
    uint64_t seen_tick;                       /* last sampling tick that saw the filter */
};

struct figures;

/* Starts the sampling timer on base; the first tick runs at once once the server is ready.
 * Returns NULL if out of memory or the timer cannot be added (logged). */
struct figures *figures_new(struct server *srv, struct event_base *base);

/* Stops the timer and frees everything. figures_free(NULL) does nothing. After the job
 * thread stopped (a running job's done() then never comes). */
void figures_free(struct figures *fg);

/* Takes a sample of every filter and queues a popcount pass unless one is queued. */
void figures_tick(struct figures *fg);

/* Ticks now if a filter has no entry yet and the last tick is a second old, so a new
 * filter shows figures at once rather than after FIGURES_SAMPLE_S. */
void figures_poke(struct figures *fg);

/* The entry of the filter named name[0..len), or NULL if none yet. */
const struct figures_entry *figures_get(const struct figures *fg, const char *name, size_t len);

#endif
