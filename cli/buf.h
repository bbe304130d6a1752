/*
 * buf.h - a growable byte buffer with a read offset. Requests are appended at the end and
 * written from the front; replies are read in at the end and parsed from the front.
 * Growth never fails (cli_oom ends the program), so callers check no results.
 */
#ifndef BLOOMD_CLI_BUF_H
#define BLOOMD_CLI_BUF_H

#include <stddef.h>

struct cli_buf {
    char *data; /* cap bytes, or NULL */
    size_t off; /* first unconsumed byte */
    size_t len; /* end of the data */
    size_t cap; /* allocated bytes */
};

/* Zero-initialising is the same as cli_buf_init. */
void cli_buf_init(struct cli_buf *b);
void cli_buf_destroy(struct cli_buf *b);

/*
 * Makes room for n more bytes after len (moving the unconsumed bytes to the front when
 * that is enough, else growing) and returns a pointer to them; the caller writes there
 * and then adds what it wrote to len. Pointers into the buffer are invalid afterwards.
 */
static inline char *cli_buf_reserve(struct cli_buf *b, size_t n);

/* The slow path of cli_buf_reserve: compacts or grows. */
char *cli_buf_grow(struct cli_buf *b, size_t n);

static inline char *cli_buf_reserve(struct cli_buf *b, size_t n)
{
    if (b->cap - b->len >= n)
        return b->data + b->len;
    return cli_buf_grow(b, n);
}

void cli_buf_append(struct cli_buf *b, const void *p, size_t n);
void cli_buf_puts(struct cli_buf *b, const char *s);

/* Marks n bytes at off as consumed; an emptied buffer starts again at 0. */
void cli_buf_consume(struct cli_buf *b, size_t n);

/* Bytes appended and not yet consumed. */
static inline size_t cli_buf_pending(const struct cli_buf *b)
{
    return b->len - b->off;
}

#endif
