/*
 * budget.h - the server's memory limit for filter bits (max_memory), shared by every
 * filter through struct sbf_budget. The counter is atomic because filters are freed on
 * whichever thread drops their last reference (the snapshot thread, sometimes).
 */
#ifndef BLOOMD_SERVER_BUDGET_H
#define BLOOMD_SERVER_BUDGET_H

#include <stdatomic.h>
#include <stdint.h>

#include "lib/sbf.h"

struct budget {
    _Atomic uint64_t used; /* bytes currently reserved */
    uint64_t limit;        /* bytes allowed; never 0 after budget_init */
    struct sbf_budget sbf; /* hand this to sbf_new/sbf_decode */
};

/*
 * Sets up b with a limit of max_bytes, or of the machine's physical memory when
 * max_bytes is 0 (so an absurd CREATE is refused instead of swapping the host to death).
 */
void budget_init(struct budget *b, uint64_t max_bytes);

/* Bytes currently reserved. */
uint64_t budget_used(const struct budget *b);

#endif
