/*
 * backlog.c - the backlog as a list of chunks, each holding the frames of consecutive
 * records. Appending copies one frame; reading for a replica finds its chunk by offset
 * (a walk over at most cap / BACKLOG_CHUNK chunks, done once per catch-up) and then the
 * frame inside by their length fields.
 */
#include "server/repl/backlog.h"

#include <stdlib.h>
#include <string.h>

#include "lib/le.h"

/* Bytes per chunk; a frame larger than this gets a chunk of its own. */
#define BACKLOG_CHUNK ((size_t)1 << 20)

struct chunk {
    struct chunk *next;
    uint64_t first;  /* offset of its first record */
    uint64_t count;  /* records in it */
    size_t len, cap; /* bytes used, allocated */
    unsigned char data[];
};

struct backlog {
    struct chunk *head, *tail; /* oldest first */
    size_t cap, bytes;
};

struct backlog *backlog_new(size_t cap)
{
    struct backlog *b = calloc(1, sizeof *b);
    if (b != NULL)
        b->cap = cap < BACKLOG_CHUNK ? BACKLOG_CHUNK : cap;
    return b;
}

static void empty(struct backlog *b)
{
    while (b->head != NULL) {
        struct chunk *c = b->head;
        b->head = c->next;
        free(c);
    }
    b->tail = NULL;
    b->bytes = 0;
}

void backlog_clear(struct backlog *b)
{
    empty(b);
}

void backlog_free(struct backlog *b)
{
    if (b == NULL)
        return;
    empty(b);
    free(b);
}

uint64_t backlog_last(const struct backlog *b)
{
    return b->tail != NULL ? b->tail->first + b->tail->count - 1 : 0;
}

size_t backlog_bytes(const struct backlog *b)
{
    return b->bytes;
}

int backlog_append(struct backlog *b, const struct journal_record *rec, uint64_t offset)
{
    size_t n = journal_record_size(rec);
    if (n == 0)
        return 0; /* cannot happen: mutate makes valid records */
    if (b->tail != NULL && offset != backlog_last(b) + 1)
        empty(b);
    struct chunk *c = b->tail;
    if (c == NULL || c->cap - c->len < n) {
        size_t cap = n > BACKLOG_CHUNK ? n : BACKLOG_CHUNK;
        c = malloc(sizeof *c + cap);
        if (c == NULL) {
            empty(b);
            return -1;
        }
        *c = (struct chunk){.first = offset, .cap = cap};
        if (b->tail != NULL)
            b->tail->next = c;
        else
            b->head = c;
        b->tail = c;
        b->bytes += cap;
        /* Past the capacity the oldest chunks go (never the one being filled). */
        while (b->bytes > b->cap && b->head != c) {
            struct chunk *old = b->head;
            b->head = old->next;
            b->bytes -= old->cap;
            free(old);
        }
    }
    long w = journal_record_encode(rec, offset, c->data + c->len, c->cap - c->len);
    if (w <= 0)
        return 0;
    c->len += (size_t)w;
    c->count++;
    return 0;
}

bool backlog_has(const struct backlog *b, uint64_t offset)
{
    if (b->head == NULL)
        return false;
    return offset + 1 >= b->head->first && offset <= backlog_last(b);
}

/* Size of the frame at p (its header's length field plus the framing). */
static size_t frame_size(const unsigned char *p)
{
    return JOURNAL_RECORD_OVERHEAD + le_get32(p);
}

void backlog_read(const struct backlog *b, uint64_t offset, size_t max, const void **p, size_t *n,
                  uint64_t *last)
{
    *p = NULL;
    *n = 0;
    *last = offset;
    const struct chunk *c = b->head;
    while (c != NULL && c->first + c->count <= offset + 1)
        c = c->next;
    if (c == NULL)
        return;
    const unsigned char *d = c->data;
    size_t at = 0;
    for (uint64_t o = c->first; o <= offset; o++)
        at += frame_size(d + at);
    size_t end = at;
    uint64_t o = offset;
    while (end < c->len && (end == at || end - at + frame_size(d + end) <= max)) {
        end += frame_size(d + end);
        o++;
    }
    *p = d + at;
    *n = end - at;
    *last = o;
}
