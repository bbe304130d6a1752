/*
 * backlog.c - the backlog as a list of chunks, each holding the frames of consecutive
 * records. Appending copies one frame; each chunk indexes its frames (their starts, from
 * the chunk's end downwards), so reading a record is a lookup: the tail chunk first (a
 * replica that keeps up reads the record just appended, once per record), else a walk
 * over at most cap / BACKLOG_CHUNK chunks, done once per catch-up. Past the capacity the
 * oldest chunk is reused for the newest, so a full backlog costs no page faults: it
 * cycles every few seconds under a heavy ingest.
 */
#include "server/repl/backlog.h"

#include <stdlib.h>
#include <string.h>

/* Bytes per chunk (frames and their index); a frame larger than this gets a chunk of its own. */
#define BACKLOG_CHUNK ((size_t)1 << 20)

struct chunk {
    struct chunk *next;
    uint64_t first;  /* offset of its first record */
    uint64_t count;  /* records in it */
    size_t len, cap; /* frame bytes used, bytes allocated (frames + index) */
    /* Frames from data[0] up; their starts as uint32_t from data[cap] down: frame i
     * starts at idx(c)[-1 - i]. */
    _Alignas(uint32_t) unsigned char data[];
};

struct backlog {
    struct chunk *head, *tail; /* oldest first */
    size_t cap, bytes;
};

static uint32_t *idx(const struct chunk *c)
{
    return (uint32_t *)(uintptr_t)(c->data + c->cap);
}

/* Room for one more frame of n bytes and its index entry. */
static bool fits(const struct chunk *c, size_t n)
{
    return c->cap - c->len - c->count * sizeof(uint32_t) >= n + sizeof(uint32_t);
}

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

/* A chunk for records from offset on with room for a frame of n bytes, linked as the tail:
 * the oldest one when the backlog is full and it is of the usual size, else a new one.
 * NULL without memory. */
static struct chunk *new_tail(struct backlog *b, size_t n, uint64_t offset)
{
    size_t cap = BACKLOG_CHUNK;
    if (n + sizeof(uint32_t) > cap)
        cap = (n + 2 * sizeof(uint32_t) - 1) / sizeof(uint32_t) * sizeof(uint32_t);
    struct chunk *c = NULL;
    if (cap == BACKLOG_CHUNK && b->head != NULL && b->head != b->tail &&
        b->head->cap == BACKLOG_CHUNK && b->bytes + cap > b->cap) {
        c = b->head;
        b->head = c->next;
        b->bytes -= c->cap;
    } else if ((c = malloc(sizeof *c + cap)) == NULL) {
        return NULL;
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
    return c;
}

int backlog_append(struct backlog *b, const struct journal_record *rec, uint64_t offset)
{
    size_t n = journal_record_size(rec);
    if (n == 0)
        return 0; /* cannot happen: mutate makes valid records */
    if (b->tail != NULL && offset != backlog_last(b) + 1)
        empty(b);
    struct chunk *c = b->tail;
    if (c == NULL || !fits(c, n)) {
        if ((c = new_tail(b, n, offset)) == NULL) {
            empty(b);
            return -1;
        }
    }
    long w = journal_record_encode(rec, offset, c->data + c->len, n);
    if (w <= 0)
        return 0;
    idx(c)[-1 - (ptrdiff_t)c->count] = (uint32_t)c->len;
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

/* Start of frame i of c; i == c->count: the end of its frames. */
static size_t frame_at(const struct chunk *c, uint64_t i)
{
    return i < c->count ? idx(c)[-1 - (ptrdiff_t)i] : c->len;
}

void backlog_read(const struct backlog *b, uint64_t offset, size_t max, const void **p, size_t *n,
                  uint64_t *last)
{
    *p = NULL;
    *n = 0;
    *last = offset;
    const struct chunk *c = b->tail;
    if (c == NULL || offset + 1 < c->first) {
        c = b->head;
        while (c != NULL && c->first + c->count <= offset + 1)
            c = c->next;
    } else if (c->first + c->count <= offset + 1) {
        return; /* offset is the last one */
    }
    if (c == NULL)
        return;
    uint64_t i = offset + 1 - c->first; /* the first frame wanted */
    size_t at = frame_at(c, i);
    /* The last frame that ends within max of at (at least one): a binary search. */
    uint64_t lo = i + 1, hi = c->count;
    if (max < c->len - at) {
        while (lo < hi) {
            uint64_t mid = lo + (hi - lo + 1) / 2;
            if (frame_at(c, mid) - at <= max)
                lo = mid;
            else
                hi = mid - 1;
        }
    } else {
        lo = hi;
    }
    *p = c->data + at;
    *n = frame_at(c, lo) - at;
    *last = c->first + lo - 1;
}
