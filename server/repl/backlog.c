/*
 * backlog.c - the backlog as a list of chunks, each holding the frames of consecutive
 * records. Appending copies one frame; each chunk indexes its frames (their starts, from
 * the chunk's end downwards), so reading a record is a lookup: the tail chunk first (a
 * replica that keeps up reads the record just appended, once per record), else a walk
 * over at most cap / BACKLOG_CHUNK chunks, done once per catch-up. A chunk is one huge
 * page where the system gives them (one fault per 2 MiB, not 512), and past the capacity
 * the oldest chunk is reused for the newest: a heavy ingest cycles a 64 MiB backlog every
 * few seconds, and in steady state that costs no page faults at all.
 */
#include "server/repl/backlog.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Bytes per chunk, its header included: a huge page, aligned, so that it can be one. */
#define BACKLOG_CHUNK ((size_t)2 << 20)
/* Most spare bytes made ahead (a larger backlog fills the rest as it goes). */
#define BACKLOG_PREFAULT ((size_t)64 << 20)

struct chunk {
    struct chunk *next;
    uint64_t first;  /* offset of its first record */
    uint64_t count;  /* records in it */
    size_t len, cap; /* frame bytes used, bytes for frames and index */
    /* Frames from data[0] up; their starts as uint32_t from data[cap] down: frame i
     * starts at idx(c)[-1 - i]. */
    _Alignas(uint32_t) unsigned char data[];
};

#define CHUNK_CAP (BACKLOG_CHUNK - offsetof(struct chunk, data))
_Static_assert(JOURNAL_RECORD_MAX + sizeof(uint32_t) <= CHUNK_CAP, "every frame fits a chunk");
_Static_assert(CHUNK_CAP % sizeof(uint32_t) == 0, "the index is aligned");

struct backlog {
    struct chunk *head, *tail; /* oldest first */
    struct chunk *spare;       /* chunks faulted in and not in use, linked by next */
    size_t cap, bytes;         /* bytes: of the chunks in use */
    size_t nspare;
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

/* A chunk aligned to its size (so the kernel can back it with one huge page), or NULL. */
static struct chunk *chunk_alloc(void)
{
    size_t len = 2 * BACKLOG_CHUNK;
    unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    uintptr_t a = ((uintptr_t)m + BACKLOG_CHUNK - 1) & ~(uintptr_t)(BACKLOG_CHUNK - 1);
    size_t head = a - (uintptr_t)m;
    if (head > 0)
        munmap(m, head);
    munmap((unsigned char *)a + BACKLOG_CHUNK, len - head - BACKLOG_CHUNK);
    /* Advice only: without huge pages it works, with 512 faults per chunk. */
    (void)madvise((void *)a, BACKLOG_CHUNK, MADV_HUGEPAGE);
    return (struct chunk *)a;
}

static void chunk_free(struct chunk *c)
{
    munmap(c, BACKLOG_CHUNK);
}

/* Empties the backlog; its chunks are kept as spares (their pages are in). */
static void empty(struct backlog *b)
{
    while (b->head != NULL) {
        struct chunk *c = b->head;
        b->head = c->next;
        c->next = b->spare;
        b->spare = c;
        b->nspare++;
    }
    b->tail = NULL;
    b->bytes = 0;
}

struct backlog_spares *backlog_spares_make(size_t bytes)
{
    struct chunk *list = NULL;
    for (size_t n = 0; n + BACKLOG_CHUNK <= bytes; n += BACKLOG_CHUNK) {
        struct chunk *c = chunk_alloc();
        if (c == NULL)
            break;
        /* The faults now, here: zeroing fresh pages is slow where memory is backed lazily
         * (a VM's first touch of a page). Without MADV_POPULATE_WRITE, one write a page. */
        if (madvise(c, BACKLOG_CHUNK, MADV_POPULATE_WRITE) != 0)
            for (size_t at = 0; at < BACKLOG_CHUNK; at += 4096)
                ((volatile unsigned char *)c)[at] = 0;
        c->next = list;
        list = c;
    }
    return (struct backlog_spares *)list;
}

void backlog_spares_free(struct backlog_spares *s)
{
    struct chunk *c = (struct chunk *)s;
    while (c != NULL) {
        struct chunk *next = c->next;
        chunk_free(c);
        c = next;
    }
}

size_t backlog_spares_wanted(const struct backlog *b)
{
    size_t have = b->bytes + b->nspare * BACKLOG_CHUNK;
    size_t want = b->cap < BACKLOG_PREFAULT ? b->cap : BACKLOG_PREFAULT;
    return have < want ? want - have : 0;
}

void backlog_spares_adopt(struct backlog *b, struct backlog_spares *s)
{
    struct chunk *c = (struct chunk *)s;
    while (c != NULL) {
        struct chunk *next = c->next;
        if (b->bytes + (b->nspare + 1) * BACKLOG_CHUNK > b->cap) {
            chunk_free(c); /* chunks were made meanwhile: no more than the capacity */
        } else {
            c->next = b->spare;
            b->spare = c;
            b->nspare++;
        }
        c = next;
    }
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
    while (b->spare != NULL) {
        struct chunk *c = b->spare;
        b->spare = c->next;
        chunk_free(c);
    }
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

/* A chunk for records from offset on, linked as the tail: the oldest one when the backlog
 * is full, else a new one. NULL without memory. */
static struct chunk *new_tail(struct backlog *b, uint64_t offset)
{
    struct chunk *c = NULL;
    if (b->head != NULL && b->head != b->tail && b->bytes + BACKLOG_CHUNK > b->cap) {
        c = b->head;
        b->head = c->next;
        b->bytes -= BACKLOG_CHUNK;
    } else if (b->spare != NULL) {
        c = b->spare;
        b->spare = c->next;
        b->nspare--;
    } else if ((c = chunk_alloc()) == NULL) {
        return NULL;
    }
    *c = (struct chunk){.first = offset, .cap = CHUNK_CAP};
    if (b->tail != NULL)
        b->tail->next = c;
    else
        b->head = c;
    b->tail = c;
    b->bytes += BACKLOG_CHUNK;
    /* Past the capacity the oldest chunks go (never the one being filled). */
    while (b->bytes > b->cap && b->head != c) {
        struct chunk *old = b->head;
        b->head = old->next;
        b->bytes -= BACKLOG_CHUNK;
        chunk_free(old);
    }
    return c;
}

/* Room at the tail for the n-byte frame of the record at offset, or NULL (emptied). */
static unsigned char *reserve(struct backlog *b, size_t n, uint64_t offset)
{
    if (b->tail != NULL && offset != backlog_last(b) + 1)
        empty(b);
    struct chunk *c = b->tail;
    if (c == NULL || !fits(c, n)) {
        if ((c = new_tail(b, offset)) == NULL) {
            empty(b);
            return NULL;
        }
    }
    return c->data + c->len;
}

/* The frame of n bytes written at reserve()'s place is the tail's next record. */
static void commit(struct backlog *b, size_t n)
{
    struct chunk *c = b->tail;
    idx(c)[-1 - (ptrdiff_t)c->count] = (uint32_t)c->len;
    c->len += n;
    c->count++;
}

int backlog_append(struct backlog *b, const struct journal_record *rec, uint64_t offset)
{
    size_t n = journal_record_size(rec);
    if (n == 0)
        return 0; /* cannot happen: mutate makes valid records */
    unsigned char *p = reserve(b, n, offset);
    if (p == NULL)
        return -1;
    if (journal_record_encode(rec, offset, p, n) > 0)
        commit(b, n);
    return 0;
}

int backlog_append_frame(struct backlog *b, const void *frame, size_t n, uint64_t offset)
{
    if (n < JOURNAL_RECORD_OVERHEAD || n > JOURNAL_RECORD_MAX)
        return 0; /* cannot happen: the journal's frames */
    unsigned char *p = reserve(b, n, offset);
    if (p == NULL)
        return -1;
    memcpy(p, frame, n);
    commit(b, n);
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
