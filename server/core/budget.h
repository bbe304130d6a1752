/*
 * budget.h - the server's one memory limit (max_memory), in parts: filter bits (through
 * struct sbf_budget, which every filter is given), per-filter overhead and the daemon's
 * tables (lib headers, registry entries, names, buckets), and client connections (the
 * struct and its input, output and held reply buffers). Filters and their overhead are
 * refused when they do not fit; connection memory is already allocated when it is
 * counted, so it is charged even past the limit and the connection layer sheds the
 * clients holding the most until the total is back under. Atomic, because filters are
 * freed on whichever thread drops their last reference (the job thread, sometimes).
 */
#ifndef BLOOMD_SERVER_BUDGET_H
#define BLOOMD_SERVER_BUDGET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/sbf.h"

enum budget_part {
    BUDGET_FILTERS = 0,     /* filter bits (what sbf_budget reserves) */
    BUDGET_OVERHEAD = 1,    /* per-filter structures and the daemon's tables */
    BUDGET_CONNECTIONS = 2, /* client connections and their buffers */
    BUDGET_NPARTS = 3,
};

struct budget {
    _Atomic uint64_t used;                 /* bytes counted now, every part */
    _Atomic uint64_t parts[BUDGET_NPARTS]; /* the same bytes by part */
    uint64_t limit;                        /* bytes allowed; never 0 after budget_init */
    struct sbf_budget sbf;                 /* hand this to sbf_new/sbf_decode (BUDGET_FILTERS) */
};

/*
 * Sets up b with a limit of max_bytes, or of the machine's physical memory when
 * max_bytes is 0 (so an absurd CREATE is refused instead of swapping the host to death).
 */
void budget_init(struct budget *b, uint64_t max_bytes);

/* Takes bytes for part if the total stays within the limit; false (nothing taken) if not. */
bool budget_reserve(struct budget *b, enum budget_part part, size_t bytes);

/* True if bytes more would fit now (for a caller that then charges them; one thread adds). */
bool budget_fits(const struct budget *b, size_t bytes);

/* Counts bytes for part even past the limit (memory already taken; see budget_over). */
void budget_charge(struct budget *b, enum budget_part part, size_t bytes);

/* Gives back bytes reserved or charged for part. */
void budget_release(struct budget *b, enum budget_part part, size_t bytes);

/* Bytes counted now, in all or for one part. Any thread. */
uint64_t budget_used(const struct budget *b);
uint64_t budget_part(const struct budget *b, enum budget_part part);

/* True while more than the limit is counted (only charges can make it so). */
bool budget_over(const struct budget *b);

#endif
