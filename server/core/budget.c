/*
 * budget.c - an atomic byte counter with a ceiling, and one counter per part for the
 * figures. reserve() is a compare-and-swap loop on the total so two threads can never
 * both squeeze under the limit; it runs once per stage allocation, filter or buffer
 * resize, never per key. The part counters trail the total by an instant (figures only).
 */
#include "server/core/budget.h"

#include <unistd.h>

bool budget_reserve(struct budget *b, enum budget_part part, size_t bytes)
{
    uint64_t cur = atomic_load_explicit(&b->used, memory_order_relaxed);
    do {
        if (bytes > b->limit || cur > b->limit - bytes)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&b->used, &cur, cur + bytes,
                                                    memory_order_relaxed, memory_order_relaxed));
    atomic_fetch_add_explicit(&b->parts[part], bytes, memory_order_relaxed);
    return true;
}

bool budget_fits(const struct budget *b, size_t bytes)
{
    uint64_t cur = budget_used(b);
    return bytes <= b->limit && cur <= b->limit - bytes;
}

void budget_charge(struct budget *b, enum budget_part part, size_t bytes)
{
    atomic_fetch_add_explicit(&b->used, bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->parts[part], bytes, memory_order_relaxed);
}

void budget_release(struct budget *b, enum budget_part part, size_t bytes)
{
    atomic_fetch_sub_explicit(&b->used, bytes, memory_order_relaxed);
    atomic_fetch_sub_explicit(&b->parts[part], bytes, memory_order_relaxed);
}

static bool sbf_reserve(void *ctx, size_t bytes)
{
    return budget_reserve(ctx, BUDGET_FILTERS, bytes);
}

static void sbf_release(void *ctx, size_t bytes)
{
    budget_release(ctx, BUDGET_FILTERS, bytes);
}

void budget_init(struct budget *b, uint64_t max_bytes)
{
    atomic_init(&b->used, 0);
    for (int i = 0; i < BUDGET_NPARTS; i++)
        atomic_init(&b->parts[i], 0);
    b->limit = max_bytes;
    if (b->limit == 0) {
        long pages = sysconf(_SC_PHYS_PAGES);
        long page = sysconf(_SC_PAGESIZE);
        b->limit = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
    }
    b->sbf.reserve = sbf_reserve;
    b->sbf.release = sbf_release;
    b->sbf.ctx = b;
}

uint64_t budget_used(const struct budget *b)
{
    return atomic_load_explicit(&b->used, memory_order_relaxed);
}

uint64_t budget_part(const struct budget *b, enum budget_part part)
{
    return atomic_load_explicit(&b->parts[part], memory_order_relaxed);
}

bool budget_over(const struct budget *b)
{
    return budget_used(b) > b->limit;
}
