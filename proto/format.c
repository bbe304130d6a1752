/*
 * format.c - reply formatting into a caller-owned growable buffer. The buffer grows
 * geometrically, so a reply of n bytes costs O(n) however it is built; after a failed
 * allocation the buffer is marked failed and every later append is a no-op.
 */
#include "proto/proto.h"

#include "proto/number.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT_MIN_CAP 256
#define FORMAT_MAX_BAD_TOKEN 48

void proto_buf_free(struct proto_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = false;
}

void proto_buf_reset(struct proto_buf *b)
{
    b->len = 0;
    b->failed = false;
}

/* Makes room for n more bytes; returns where they go, or NULL (buffer failed). */
static char *reserve(struct proto_buf *b, size_t n)
{
    if (b->failed)
        return NULL;
    if (n > SIZE_MAX - b->len) {
        b->failed = true;
        return NULL;
    }
    size_t need = b->len + n;
    if (need > b->cap) {
        size_t cap = b->cap < FORMAT_MIN_CAP ? FORMAT_MIN_CAP : b->cap;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        char *data = realloc(b->data, cap);
        if (data == NULL) {
            b->failed = true;
            return NULL;
        }
        b->data = data;
        b->cap = cap;
    }
    return b->data + b->len;
}

static void append(struct proto_buf *b, const char *s, size_t n)
{
    char *p = reserve(b, n);
    if (p == NULL)
        return;
    if (n > 0)
        memcpy(p, s, n);
    b->len += n;
}

void proto_buf_append(struct proto_buf *b, const char *s, size_t n)
{
    append(b, s, n);
}

static void append_str(struct proto_buf *b, const char *s)
{
    append(b, s, strlen(s));
}

static void append_u64(struct proto_buf *b, uint64_t v)
{
    char tmp[20];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    append(b, tmp + i, sizeof(tmp) - i);
}

static void append_double(struct proto_buf *b, double v)
{
    char tmp[40];
    append(b, tmp, proto_format_double(tmp, sizeof tmp, v));
}

static void append_crlf(struct proto_buf *b)
{
    append(b, "\r\n", 2);
}

void proto_reply_word(struct proto_buf *b, const char *word)
{
    append_str(b, word);
    append_crlf(b);
}

void proto_reply_error(struct proto_buf *b, const char *kind, const char *why)
{
    append_str(b, kind);
    if (why != NULL && why[0] != '\0') {
        append(b, " ", 1);
        append_str(b, why);
    }
    append_crlf(b);
}

void proto_reply_count(struct proto_buf *b, const char *word, uint64_t n)
{
    append_str(b, word);
    append(b, " ", 1);
    append_u64(b, n);
    append_crlf(b);
}

static void stat_prefix(struct proto_buf *b, const char *field)
{
    append(b, "STAT ", 5);
    append_str(b, field);
    append(b, " ", 1);
}

void proto_reply_stat_u64(struct proto_buf *b, const char *field, uint64_t v)
{
    stat_prefix(b, field);
    append_u64(b, v);
    append_crlf(b);
}

void proto_reply_stat_double(struct proto_buf *b, const char *field, double v)
{
    stat_prefix(b, field);
    append_double(b, v);
    append_crlf(b);
}

void proto_reply_stat_str(struct proto_buf *b, const char *field, struct proto_slice v)
{
    stat_prefix(b, field);
    append(b, v.ptr, v.len);
    append_crlf(b);
}

void proto_reply_filter(struct proto_buf *b, struct proto_slice name, uint64_t items,
                        uint64_t bytes, uint64_t capacity, double error, uint64_t window_ms)
{
    append(b, "FILTER ", 7);
    append(b, name.ptr, name.len);
    append(b, " ", 1);
    append_u64(b, items);
    append(b, " ", 1);
    append_u64(b, bytes);
    append(b, " ", 1);
    append_u64(b, capacity);
    append(b, " ", 1);
    append_double(b, error);
    if (window_ms > 0) { /* a sixth column only for windowed filters: old clients read five */
        append(b, " window=", 8);
        append_u64(b, window_ms / 1000);
        append(b, "s", 1);
    }
    append_crlf(b);
}

void proto_reply_bits(struct proto_buf *b, const bool *bits, size_t n, bool first)
{
    if (n == 0)
        return;
    if (n > SIZE_MAX / 2) {
        b->failed = true;
        return;
    }
    /* " 1" per result; the first piece of a line drops its leading space. */
    size_t skip = first ? 1 : 0;
    char *p = reserve(b, 2 * n);
    if (p == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        p[2 * i] = ' ';
        p[2 * i + 1] = bits[i] ? '1' : '0';
    }
    if (skip)
        memmove(p, p + 1, 2 * n - 1);
    b->len += 2 * n - skip;
}

void proto_reply_end(struct proto_buf *b)
{
    append_crlf(b);
}

/* Appends s[0..n) quoted, escaping bytes a terminal or a line-based client would choke on. */
static void append_quoted(struct proto_buf *b, struct proto_slice s)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = s.len > FORMAT_MAX_BAD_TOKEN ? FORMAT_MAX_BAD_TOKEN : s.len;
    append(b, " '", 2);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
            append(b, (const char *)&c, 1);
        } else {
            char esc[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
            append(b, esc, 4);
        }
    }
    if (n < s.len)
        append(b, "...", 3);
    append(b, "'", 1);
}

void proto_reply_parse_error(struct proto_buf *b, int status, const struct proto_request *req)
{
    append_str(b, proto_error_kind(status));
    append(b, " ", 1);
    append_str(b, req != NULL && req->why != NULL ? req->why : proto_strerror(status));
    if (req != NULL && req->bad.len > 0)
        append_quoted(b, req->bad);
    append_crlf(b);
}

/* HELP: one line per command, as PROTOCOL.md documents them. */
static const char *const help_lines[] = {
    ("CREATE <name> [capacity=<n>] [error=<p>] [growth=exponential|linear|none] [scale=<s>] "
     "[ratio=<r>] [window=<d> [generations=<g>]] [kind=blocked|expandable]"),
    "ADD <name> <key>...",
    "CHECK <name> <key>...",
    "CHECKADD <name> <key>...",
    "UNION <dst> <src>...",
    "INTERSECT <dst> <src>...",
    "INFO <name>",
    "LIST [<prefix>]",
    "DROP <name>",
    "CLEAR <name>",
    "FLUSH [<name>]",
    "STATS",
    "VERSION",
    "DELETE <name> <key>...   (expandable filters only)",
    "DUMP <name>   (reply: DUMP <nbytes>, then the filter's snapshot bytes and CRLF)",
    "RESTORE <name> <nbytes> [replace]   (then <nbytes> of a DUMP and CRLF)",
    "HELP",
    "QUIT",
    "AUTH <token>",
    "ROLE",
    "REPLICAOF <host> <port> | REPLICAOF NO ONE",
};

void proto_format_result(struct proto_buf *b, const struct result *r)
{
    if (r->failed) {
        proto_reply_error(b, "SERVER_ERROR", "out of memory");
        return;
    }
    switch (r->status) {
    case RESULT_OK:
        proto_reply_word(b, "OK");
        break;
    case RESULT_CREATED:
        proto_reply_word(b, "CREATED");
        break;
    case RESULT_EXISTS:
        proto_reply_word(b, "EXISTS");
        break;
    case RESULT_NOT_FOUND:
        proto_reply_word(b, "NOT_FOUND");
        break;
    case RESULT_DELETED:
        proto_reply_word(b, "DELETED");
        break;
    case RESULT_COUNT:
        proto_reply_count(b, "ADDED", r->count);
        break;
    case RESULT_REMOVED:
        proto_reply_count(b, "REMOVED", r->count);
        break;
    case RESULT_BITS:
        proto_reply_bits(b, r->bits, r->nbits, true);
        proto_reply_end(b);
        break;
    case RESULT_FIELDS:
        for (size_t i = 0; i < r->nfields; i++) {
            const struct result_field *f = &r->fields[i];
            if (f->type == RESULT_U64)
                proto_reply_stat_u64(b, f->name, f->u);
            else if (f->type == RESULT_DOUBLE)
                proto_reply_stat_double(b, f->name, f->d);
            else
                proto_reply_stat_str(b, f->name, (struct proto_slice){f->str, strlen(f->str)});
        }
        proto_reply_word(b, "END");
        break;
    case RESULT_HELP:
        for (size_t i = 0; i < sizeof help_lines / sizeof help_lines[0]; i++)
            proto_reply_word(b, help_lines[i]);
        proto_reply_word(b, "END");
        break;
    case RESULT_ROWS:
        for (size_t i = 0; i < r->nrows; i++) {
            const struct result_row *w = &r->rows[i];
            proto_reply_filter(b, (struct proto_slice){w->name, strlen(w->name)}, w->items,
                               w->bytes, w->capacity, w->error, w->window_ms);
        }
        proto_reply_word(b, "END");
        break;
    case RESULT_VERSION:
        append(b, "VERSION ", 8);
        proto_reply_word(b, r->text != NULL ? r->text : "");
        break;
    case RESULT_CLOSE:
        break;
    case RESULT_CLIENT_ERROR:
        proto_reply_error(b, "CLIENT_ERROR", r->text);
        break;
    case RESULT_SERVER_ERROR:
        proto_reply_error(b, "SERVER_ERROR", r->text);
        break;
    case RESULT_READONLY:
        append(b, "CLIENT_ERROR read-only replica of ", 34);
        proto_reply_word(b, r->text != NULL ? r->text : "?");
        break;
    case RESULT_LINE:
        proto_reply_word(b, r->text != NULL ? r->text : "");
        break;
    case RESULT_NONE:
        break;
    case RESULT_DUMP:
        proto_reply_count(b, "DUMP", r->count);
        break;
    case RESULT_RESTORED:
        proto_reply_word(b, "RESTORED");
        break;
    }
}
