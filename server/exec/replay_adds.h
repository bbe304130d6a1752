/*
 * replay_adds.h - start-up replay's adds, gathered into big batches per filter and, for
 * kinds with sharded adds (kind_ops.add_batch_shard), applied by one thread per CPU (up
 * to REPLAY_ADDS_THREADS) while the caller reads the next batch: a 100M-key journal is
 * bound by one cache miss per key, and two cores take twice the misses at once. The
 * filter comes out as serial adds in journal order would make it (sbf_add_batch_shard).
 */
#ifndef BLOOMD_REPLAY_ADDS_H
#define BLOOMD_REPLAY_ADDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/sbf.h"

struct filter;
struct replay_adds;

#define REPLAY_ADDS_THREADS 4

/* An empty queue, or NULL without memory (the calls below then apply at once). */
struct replay_adds *replay_adds_new(void);

/*
 * Queues the n hashes of the ADD record at pos for f (which the queue then references);
 * fresh for an ADD_NEW record (keys new to f when added: older stages go unprobed).
 * If what was queued is for another filter or the queue is full, that batch is handed
 * to the threads first. Errors of the filter are logged.
 */
void replay_adds_push(struct replay_adds *a, struct filter *f, const struct sbf_hash *h, size_t n,
                      uint64_t pos, bool fresh);

/* Applies everything queued and waits for it: before any record that is not an ADD. */
void replay_adds_flush(struct replay_adds *a);

/* Keys applied so far, and how many of them by the threads (in how many shards each). */
struct replay_adds_figures {
    uint64_t keys, sharded;
    unsigned threads;
};
void replay_adds_figures(const struct replay_adds *a, struct replay_adds_figures *out);

/* Flushes and frees the queue; NULL does nothing. */
void replay_adds_free(struct replay_adds *a);

#endif
