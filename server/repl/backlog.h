/*
 * backlog.h - the replication backlog: the most recent records of the stream, as the
 * framed, checksummed bytes replicas receive (lib/journal_record.h), so that a replica
 * that reconnects with an offset still held resumes from there (a partial resync).
 * Records are dense: the one at offset o follows the one at o - 1. Held in chunks of
 * 2 MiB, the oldest reused past the capacity. Loop thread only, unless said otherwise.
 */
#ifndef BLOOMD_SERVER_REPL_BACKLOG_H
#define BLOOMD_SERVER_REPL_BACKLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/journal_record.h"

struct backlog;

/* An empty backlog of about cap bytes; NULL without memory. */
struct backlog *backlog_new(size_t cap);
void backlog_free(struct backlog *b);

/*
 * Appends rec as the record at offset. An offset that does not follow the last one
 * (after a full resync of this server, a promotion) empties the backlog first. Returns 0,
 * or -1 without memory (the backlog is emptied: replicas resync in full).
 */
int backlog_append(struct backlog *b, const struct journal_record *rec, uint64_t offset);

/* As backlog_append, for the record's frame encoded already at offset (n bytes, copied). */
int backlog_append_frame(struct backlog *b, const void *frame, size_t n, uint64_t offset);

/* True if the record after offset (offset + 1) is held, or offset is the last one. */
bool backlog_has(const struct backlog *b, uint64_t offset);

/*
 * The bytes of the records after offset, from the first one on, at most max bytes but
 * at least one whole record: *p and *n (0 when offset is the last). The view is valid
 * until the next append. *last: the offset of the last record in the view.
 * backlog_has(offset) must be true.
 */
void backlog_read(const struct backlog *b, uint64_t offset, size_t max, const void **p, size_t *n,
                  uint64_t *last);

/*
 * Spare chunks: memory made ready ahead, off the loop, so that filling the backlog takes
 * no page faults on it (the first 64 MiB of a stream would otherwise fault in every page
 * of it while clients wait). backlog_spares_wanted (loop): the bytes to make, up to the
 * capacity or 64 MiB; backlog_spares_make (any thread): that many, NULL if none could be
 * made; backlog_spares_adopt (loop) takes them over, freeing what no longer fits;
 * backlog_spares_free frees ones never adopted (NULL does nothing).
 */
struct backlog_spares;
size_t backlog_spares_wanted(const struct backlog *b);
struct backlog_spares *backlog_spares_make(size_t bytes);
void backlog_spares_adopt(struct backlog *b, struct backlog_spares *s);
void backlog_spares_free(struct backlog_spares *s);

/* Empties the backlog: replicas behind resync in full. */
void backlog_clear(struct backlog *b);

/* Offset of the last record appended (0: none since it was emptied). */
uint64_t backlog_last(const struct backlog *b);

/* Bytes held. */
size_t backlog_bytes(const struct backlog *b);

#endif
