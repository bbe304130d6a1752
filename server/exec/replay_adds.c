/*
 * replay_adds.c - batched, sharded adds for start-up replay (see replay_adds.h). Two
 * buffers: the caller fills one while the threads apply the other. A batch runs sharded
 * only if the filter's newest stage takes it whole (n <= room), so no stage is added
 * meanwhile; otherwise it runs serially on the caller's thread, growth included. Each
 * batch waits for the one before it, so batches apply in journal order.
 */
#include "server/exec/replay_adds.h"

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lib/journal_record.h"
#include "lib/kind.h"
#include "server/core/log.h"
#include "server/store/registry.h"

/* Hashes per batch (16 bytes each: 4 MiB per buffer); a record always fits. */
#define BATCH_KEYS ((size_t)1 << 18)
_Static_assert(JOURNAL_MAX_HASHES <= BATCH_KEYS, "an ADD record fits a batch");

/* Below this many keys a batch is not worth starting threads for. */
#define SHARD_MIN_KEYS ((size_t)1 << 14)

struct batch {
    struct filter *f;     /* a reference, or NULL when empty */
    struct sbf_hash *h;   /* BATCH_KEYS hashes */
    size_t n;             /* queued */
    uint64_t first, last; /* journal positions of its first and last record */
    bool fresh;           /* of ADD_NEW records only: keys new to the filter */
};

struct shard {
    struct batch *b;
    unsigned index, count;
    int rc;
};

struct replay_adds {
    struct batch fill; /* being queued by the caller */
    struct batch run;  /* being applied by the threads, if running */
    bool running;
    unsigned threads; /* shards per batch: the CPUs this process may run on, capped */
    uint64_t keys, sharded;
    struct shard shard[REPLAY_ADDS_THREADS];
    pthread_t th[REPLAY_ADDS_THREADS];
    bool started[REPLAY_ADDS_THREADS];
};

static void *run_shard(void *arg)
{
    struct shard *s = arg;
    struct filter *f = s->b->f;
    s->rc =
        f->ops->add_batch_shard(f->obj, s->b->h, s->b->n, s->index, s->count, s->b->fresh, NULL);
    return NULL;
}

static unsigned cpus(void)
{
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    return n < 1 ? 1 : n > REPLAY_ADDS_THREADS ? REPLAY_ADDS_THREADS : (unsigned)n;
}

struct replay_adds *replay_adds_new(void)
{
    struct replay_adds *a = calloc(1, sizeof *a);
    if (a == NULL)
        return NULL;
    a->fill.h = malloc(BATCH_KEYS * sizeof *a->fill.h);
    a->run.h = malloc(BATCH_KEYS * sizeof *a->run.h);
    if (a->fill.h == NULL || a->run.h == NULL) {
        free(a->fill.h);
        free(a->run.h);
        free(a);
        return NULL;
    }
    a->threads = cpus();
    return a;
}

static void report(const struct filter *f, uint64_t first, uint64_t last, int rc)
{
    if (rc != SBF_OK)
        log_msg(LOG_ERROR, "journal: replaying records %llu to %llu into %s: %s",
                (unsigned long long)first, (unsigned long long)last, f->name, sbf_strerror(rc));
}

/* Waits for the batch the threads are applying, if any, and empties it. */
static void wait_run(struct replay_adds *a)
{
    if (!a->running)
        return;
    int rc = SBF_OK;
    for (unsigned i = 0; i < a->threads; i++) {
        if (a->started[i])
            pthread_join(a->th[i], NULL);
        else
            run_shard(&a->shard[i]); /* no thread for it: here, after the others */
        if (a->shard[i].rc != SBF_OK)
            rc = a->shard[i].rc;
    }
    report(a->run.f, a->run.first, a->run.last, rc);
    filter_unref(a->run.f);
    a->run.f = NULL;
    a->run.n = 0;
    a->running = false;
}

/* Hands the queued batch to the threads, or applies it here if it cannot be sharded. */
static void start(struct replay_adds *a)
{
    wait_run(a); /* first: the filter's room counts the batch before */
    struct batch *b = &a->fill;
    struct filter *f = b->f;
    if (f == NULL)
        return;
    a->keys += b->n;
    if (a->threads < 2 || b->n < SHARD_MIN_KEYS || f->ops->add_batch_shard == NULL ||
        b->n > f->ops->room(f->obj)) {
        size_t added;
        report(f, b->first, b->last, f->ops->add_batch(f->obj, b->h, b->n, &added));
        filter_unref(f);
        b->f = NULL;
        b->n = 0;
        return;
    }
    a->sharded += b->n;
    struct batch t = a->run; /* swap the buffers: the caller fills the empty one */
    a->run = *b;
    *b = t;
    for (unsigned i = 0; i < a->threads; i++) {
        a->shard[i] = (struct shard){.b = &a->run, .index = i, .count = a->threads};
        a->started[i] = pthread_create(&a->th[i], NULL, run_shard, &a->shard[i]) == 0;
    }
    a->running = true;
}

void replay_adds_flush(struct replay_adds *a)
{
    if (a == NULL)
        return;
    start(a);
    wait_run(a);
}

void replay_adds_push(struct replay_adds *a, struct filter *f, const struct sbf_hash *h, size_t n,
                      uint64_t pos, bool fresh)
{
    if (a == NULL) { /* no memory for a queue */
        replay_adds_flush(a);
        size_t added;
        report(f, pos, pos, f->ops->add_batch(f->obj, h, n, &added));
        if (a != NULL)
            a->keys += n;
        return;
    }
    struct batch *b = &a->fill;
    if ((b->f != NULL && (b->f != f || b->fresh != fresh)) || b->n + n > BATCH_KEYS)
        start(a);
    if (b->f == NULL) {
        filter_ref(f);
        b->f = f;
        b->first = pos;
        b->fresh = fresh;
    }
    memcpy(b->h + b->n, h, n * sizeof *h);
    b->n += n;
    b->last = pos;
}

void replay_adds_figures(const struct replay_adds *a, struct replay_adds_figures *out)
{
    *out = a == NULL ? (struct replay_adds_figures){.threads = 1}
                     : (struct replay_adds_figures){a->keys, a->sharded, a->threads};
}

void replay_adds_free(struct replay_adds *a)
{
    if (a == NULL)
        return;
    replay_adds_flush(a);
    free(a->fill.h);
    free(a->run.h);
    free(a);
}
