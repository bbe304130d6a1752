/*
 * registry.c - a chained hash table of named filters (XXH3 of the name), doubled when
 * the load passes 1, plus reference counting of the filter objects. Lookups are the hot
 * path (one per request) and take no lock: only the event loop changes the table, and
 * it takes the lock for changes so registry_collect() can run on other threads.
 * With a budget set, the table counts its buckets and, for each entry, what a filter
 * costs besides its bits (registry_entry_bytes): 100k one-key filters are not free.
 */
#include "server/store/registry.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "server/core/budget.h"

/*
 * The allocator's share of one entry: glibc rounds each of its three allocations (the
 * kind's header, struct filter with the name, the node) up and adds a 16-byte header.
 * Measured with 100k one-key filters (tests/integration/test_hardening.py): RSS grew by
 * what registry_entry_bytes says within a few percent once this is added.
 */
#define REGISTRY_ALLOC_SLOP 96

struct node {
    uint64_t hash;
    struct filter *f;
    struct node *next;
};

struct registry {
    pthread_mutex_t lock; /* held by writers (event loop) and by registry_collect */
    struct node **buckets;
    size_t nbuckets; /* power of two */
    size_t count;
    struct budget *budget; /* counts buckets and entries (BUDGET_OVERHEAD); NULL: none */
};

struct filter *filter_new(const char *name, size_t len, const struct kind_ops *ops, void *obj)
{
    struct filter *flt = malloc(sizeof(*flt) + len + 1);
    if (flt == NULL)
        return NULL;
    atomic_init(&flt->refs, 1);
    atomic_init(&flt->dropped, false);
    atomic_init(&flt->replaced, false);
    atomic_init(&flt->changes, 1);
    atomic_init(&flt->saved_at, 0);
    atomic_init(&flt->journal_pos, 0);
    atomic_init(&flt->setop_pos, 0);
    atomic_init(&flt->keys_new, 0);
    atomic_init(&flt->keys_seen, 0);
    flt->rotated_ms = 0;
    flt->seed = 0;
    flt->auto_created = false;
    flt->ops = ops;
    flt->obj = obj;
    flt->setop = NULL;
    flt->overhead = 0;
    flt->name_len = len;
    memcpy(flt->name, name, len);
    flt->name[len] = '\0';
    return flt;
}

void filter_ref(struct filter *f)
{
    atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
}

void filter_unref(struct filter *f)
{
    if (f == NULL)
        return;
    /* acq_rel: the freeing thread must see every write made under other references. */
    if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) == 1) {
        f->ops->free(f->obj);
        free(f);
    }
}

void filter_count_keys(struct filter *f, uint64_t n, uint64_t fresh)
{
    uint64_t a = atomic_load_explicit(&f->keys_new, memory_order_relaxed);
    uint64_t b = atomic_load_explicit(&f->keys_seen, memory_order_relaxed);
    atomic_store_explicit(&f->keys_new, a + fresh, memory_order_relaxed);
    atomic_store_explicit(&f->keys_seen, b + (n - fresh), memory_order_relaxed);
}

void filter_touch(struct filter *f)
{
    atomic_fetch_add_explicit(&f->changes, 1, memory_order_release);
}

struct registry *registry_new(void)
{
    struct registry *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->nbuckets = 64;
    r->buckets = calloc(r->nbuckets, sizeof(*r->buckets));
    if (r->buckets == NULL) {
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->lock, NULL);
    return r;
}

size_t registry_entry_bytes(const struct filter *f)
{
    struct kind_info info = {0};
    f->ops->info(f->obj, &info);
    return (size_t)info.header + sizeof(*f) + f->name_len + 1 + sizeof(struct node) +
           REGISTRY_ALLOC_SLOP;
}

/* Counts f as an entry of r's table (uncounted by unlist). */
static void list(struct registry *r, struct filter *f)
{
    if (r->budget == NULL)
        return;
    f->overhead = registry_entry_bytes(f);
    budget_charge(r->budget, BUDGET_OVERHEAD, f->overhead);
}

static void unlist(struct registry *r, struct filter *f)
{
    if (r->budget != NULL)
        budget_release(r->budget, BUDGET_OVERHEAD, f->overhead);
    f->overhead = 0;
}

void registry_set_budget(struct registry *r, struct budget *b)
{
    r->budget = b;
    budget_charge(b, BUDGET_OVERHEAD, r->nbuckets * sizeof(*r->buckets));
}

void registry_free(struct registry *r)
{
    if (r == NULL)
        return;
    if (r->budget != NULL)
        budget_release(r->budget, BUDGET_OVERHEAD, r->nbuckets * sizeof(*r->buckets));
    for (size_t i = 0; i < r->nbuckets; i++) {
        struct node *n = r->buckets[i];
        while (n != NULL) {
            struct node *next = n->next;
            unlist(r, n->f);
            filter_unref(n->f);
            free(n);
            n = next;
        }
    }
    pthread_mutex_destroy(&r->lock);
    free(r->buckets);
    free(r);
}

size_t registry_count(const struct registry *r)
{
    return r->count;
}

static struct node **find_slot(const struct registry *r, uint64_t h, const char *name, size_t len)
{
    struct node **p = &r->buckets[h & (r->nbuckets - 1)];
    for (; *p != NULL; p = &(*p)->next) {
        const struct filter *f = (*p)->f;
        if ((*p)->hash == h && f->name_len == len && memcmp(f->name, name, len) == 0)
            break;
    }
    return p;
}

struct filter *registry_get(const struct registry *r, const char *name, size_t len)
{
    struct node *n = *find_slot(r, XXH3_64bits(name, len), name, len);
    if (n == NULL)
        return NULL;
    filter_ref(n->f);
    return n->f;
}

/* Doubles the bucket array; on allocation failure the table just stays denser. */
static void grow(struct registry *r)
{
    size_t nb = r->nbuckets * 2;
    struct node **b = calloc(nb, sizeof(*b));
    if (b == NULL)
        return;
    for (size_t i = 0; i < r->nbuckets; i++) {
        struct node *n = r->buckets[i];
        while (n != NULL) {
            struct node *next = n->next;
            n->next = b[n->hash & (nb - 1)];
            b[n->hash & (nb - 1)] = n;
            n = next;
        }
    }
    free(r->buckets);
    if (r->budget != NULL)
        budget_charge(r->budget, BUDGET_OVERHEAD, (nb - r->nbuckets) * sizeof(*b));
    r->buckets = b;
    r->nbuckets = nb;
}

int registry_put(struct registry *r, struct filter *f)
{
    uint64_t h = XXH3_64bits(f->name, f->name_len);
    struct node **slot = find_slot(r, h, f->name, f->name_len);
    if (*slot != NULL)
        return REGISTRY_EXISTS;
    struct node *n = malloc(sizeof(*n));
    if (n == NULL)
        return REGISTRY_ENOMEM;
    n->hash = h;
    n->f = f;
    n->next = NULL;
    filter_ref(f);
    list(r, f);
    pthread_mutex_lock(&r->lock);
    *slot = n;
    r->count++;
    if (r->count > r->nbuckets)
        grow(r);
    pthread_mutex_unlock(&r->lock);
    return REGISTRY_OK;
}

bool registry_remove(struct registry *r, const char *name, size_t len)
{
    struct node **slot = find_slot(r, XXH3_64bits(name, len), name, len);
    struct node *n = *slot;
    if (n == NULL)
        return false;
    pthread_mutex_lock(&r->lock);
    *slot = n->next;
    r->count--;
    pthread_mutex_unlock(&r->lock);
    atomic_store_explicit(&n->f->dropped, true, memory_order_release);
    unlist(r, n->f);
    filter_unref(n->f);
    free(n);
    return true;
}

void registry_replace(struct registry *r, struct filter *old, struct filter *fresh)
{
    struct node *n = *find_slot(r, XXH3_64bits(old->name, old->name_len), old->name, old->name_len);
    filter_ref(fresh);
    list(r, fresh);
    pthread_mutex_lock(&r->lock);
    n->f = fresh;
    pthread_mutex_unlock(&r->lock);
    atomic_store_explicit(&old->replaced, true, memory_order_release);
    unlist(r, old);
    filter_unref(old);
}

bool registry_with_exclusive(struct registry *r, struct filter *f,
                             void (*fn)(struct filter *, void *), void *arg)
{
    pthread_mutex_lock(&r->lock);
    /* Under the lock nobody can take a new reference: two are the table's and ours. */
    bool alone = atomic_load_explicit(&f->refs, memory_order_acquire) == 2;
    if (alone)
        fn(f, arg);
    pthread_mutex_unlock(&r->lock);
    return alone;
}

static int by_name(const void *a, const void *b)
{
    const struct filter *x = *(struct filter *const *)a;
    const struct filter *y = *(struct filter *const *)b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    if (c != 0)
        return c;
    return (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

int registry_collect(struct registry *r, const char *prefix, size_t plen, struct filter ***out,
                     size_t *n)
{
    pthread_mutex_lock(&r->lock);
    struct filter **arr = malloc((r->count > 0 ? r->count : 1) * sizeof(*arr));
    if (arr == NULL) {
        pthread_mutex_unlock(&r->lock);
        return REGISTRY_ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < r->nbuckets; i++) {
        for (struct node *nd = r->buckets[i]; nd != NULL; nd = nd->next) {
            struct filter *f = nd->f;
            if (plen == 0 || (f->name_len >= plen && memcmp(f->name, prefix, plen) == 0)) {
                filter_ref(f);
                arr[k++] = f;
            }
        }
    }
    pthread_mutex_unlock(&r->lock);
    qsort(arr, k, sizeof(*arr), by_name);
    *out = arr;
    *n = k;
    return REGISTRY_OK;
}

int registry_install(struct registry *r, const char *name, size_t len, const struct kind_ops *ops,
                     void *obj, uint64_t seed, bool fit, struct filter **out)
{
    struct filter *f = filter_new(name, len, ops, obj);
    if (f == NULL) {
        ops->free(obj);
        return REGISTRY_ENOMEM;
    }
    f->seed = seed;
    int rc = REGISTRY_ENOMEM; /* its overhead would pass max_memory: refused like its bits */
    if (!fit || r->budget == NULL || budget_fits(r->budget, registry_entry_bytes(f)))
        rc = registry_put(r, f);
    if (rc == REGISTRY_OK && out != NULL)
        *out = f; /* the caller's reference */
    else
        filter_unref(f); /* the table holds it now, or nobody does */
    return rc;
}
