/*
 * advance.h - time-driven filters (the windowed kind) brought up to the current time:
 * one filter on access, or every filter on the worker's tick and once after start-up.
 * Memory a filter lets go is freed on the job thread, behind any snapshot still reading
 * it. Loop thread (or the loader before anyone reads).
 */
#ifndef BLOOMD_SERVER_ADVANCE_H
#define BLOOMD_SERVER_ADVANCE_H

#include <stdbool.h>
#include <stdint.h>

struct server;
struct filter;

/* Advances f (f->ops->advance not NULL) to now_ms. */
void advance_filter(struct server *srv, struct filter *f, int64_t now_ms);

/*
 * Advances every time-driven filter to now_ms. With readers false (start-up, nobody reads
 * yet) what expired is freed at once instead of on the job thread.
 */
void advance_all(struct server *srv, int64_t now_ms, bool readers);

/*
 * The latest time any time-driven filter has reached: the start of its newest generation
 * (a lower bound: the filter was advanced somewhere within that span), INT64_MIN if there
 * is none. For clock_window_start at start-up.
 */
int64_t advance_latest_ms(struct server *srv);

#endif
