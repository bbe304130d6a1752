/*
 * buf.c - the growable buffer. The unconsumed bytes move to the front only when the end
 * has no room, and the allocation doubles, so appending is amortised O(1).
 */
#include "cli/buf.h"

#include <stdlib.h>
#include <string.h>

#include "cli/msg.h"

void cli_buf_init(struct cli_buf *b)
{
    memset(b, 0, sizeof *b);
}

void cli_buf_destroy(struct cli_buf *b)
{
    free(b->data);
    cli_buf_init(b);
}

char *cli_buf_grow(struct cli_buf *b, size_t n)
{
    if (b->off > 0) {
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (b->cap - b->len >= n)
        return b->data + b->len;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < n) {
        if (cap > ((size_t)-1) / 2)
            cli_oom();
        cap *= 2;
    }
    if (cap != b->cap) {
        b->data = cli_alloc(b->data, cap);
        b->cap = cap;
    }
    return b->data + b->len;
}

void cli_buf_append(struct cli_buf *b, const void *p, size_t n)
{
    if (n == 0)
        return;
    memcpy(cli_buf_reserve(b, n), p, n);
    b->len += n;
}

void cli_buf_puts(struct cli_buf *b, const char *s)
{
    cli_buf_append(b, s, strlen(s));
}

void cli_buf_consume(struct cli_buf *b, size_t n)
{
    b->off += n;
    if (b->off >= b->len)
        b->off = b->len = 0;
}
