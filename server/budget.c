/*
 * budget.c - an atomic byte counter with a ceiling. reserve() is a compare-and-swap loop
 * so two threads can never both squeeze under the limit; it runs once per stage
 * allocation, never per key.
 */
#include "server/budget.h"

#include <stdbool.h>
#include <unistd.h>

static bool budget_reserve(void *ctx, size_t bytes)
{
    struct budget *b = ctx;
    uint64_t cur = atomic_load_explicit(&b->used, memory_order_relaxed);
    do {
        if (bytes > b->limit || cur > b->limit - bytes)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&b->used, &cur, cur + bytes,
                                                    memory_order_relaxed, memory_order_relaxed));
    return true;
}

static void budget_release(void *ctx, size_t bytes)
{
    struct budget *b = ctx;
    atomic_fetch_sub_explicit(&b->used, bytes, memory_order_relaxed);
}

void budget_init(struct budget *b, uint64_t max_bytes)
{
    atomic_init(&b->used, 0);
    b->limit = max_bytes;
    if (b->limit == 0) {
        long pages = sysconf(_SC_PHYS_PAGES);
        long page = sysconf(_SC_PAGESIZE);
        b->limit = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
    }
    b->sbf.reserve = budget_reserve;
    b->sbf.release = budget_release;
    b->sbf.ctx = b;
}

uint64_t budget_used(const struct budget *b)
{
    return atomic_load_explicit(&b->used, memory_order_relaxed);
}
