/*
 * fair.h - the worker's fairness: its backlog of connections that used a whole quantum
 * with input left, served round robin by one zero-timeout timer, and the loop pass's time
 * slice. The round runs after the pass's I/O callbacks and re-arms itself, so the loop
 * polls between rounds and a newly readable client is served in the next pass, never
 * behind the whole backlog. Also keeps the loop's longest single callback (a figure).
 * Worker thread only.
 */
#ifndef BLOOMD_SERVER_FAIR_H
#define BLOOMD_SERVER_FAIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

struct event;
struct event_base;

/* Backlog work a loop pass does (besides one turn, always) before it waits for the next. */
#define FAIR_SLICE_NS (3 * 1000 * 1000)

/* Embedded in whatever joins the backlog (a connection). */
struct fair_link {
    struct fair_link *prev, *next;
    bool queued;                       /* in the backlog now */
    void (*turn)(struct fair_link *l); /* serves one quantum; may join again or free l */
};

struct fair {
    struct fair_link *head, *tail; /* oldest first */
    size_t count;
    struct event *round; /* zero timer: the next round */
    bool armed;          /* round is pending */
    struct event_base *base;
    struct timeval pass_tv; /* libevent's cached time of the pass being run */
    uint64_t pass_ns;       /* when this pass's first callback began */
    uint64_t *max_stall_us; /* the longest callback seen (a counter of the worker) */
};

/* Sets up q on base; max_stall_us receives the longest callback. Returns 0 or -1. */
int fair_init(struct fair *q, struct event_base *base, uint64_t *max_stall_us);

/* Frees q's timer; the backlog must be empty (its members are gone). */
void fair_destroy(struct fair *q);

/* A callback begins: notes a new loop pass and returns the time, for fair_exit. */
uint64_t fair_enter(struct fair *q);

/* The callback that fair_enter began at start_ns ends: keeps the longest. */
void fair_exit(struct fair *q, uint64_t start_ns);

/* l (not queued) joins the tail of the backlog; the round is armed. */
void fair_join(struct fair *q, struct fair_link *l);

/* l (queued) leaves the backlog. */
void fair_remove(struct fair *q, struct fair_link *l);

#endif
