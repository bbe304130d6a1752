/*
 * result.c - storage of a struct result. Arrays grow geometrically and are kept across
 * result_reset() up to a small size, so a connection's result stops allocating after its
 * first requests. Copied strings go into chunks that never move, so pointers into them
 * stay valid until the next reset.
 */
#include "proto/result.h"

#include <stdlib.h>
#include <string.h>

#define RESULT_KEEP_BITS 4096  /* bits arrays up to this many entries survive a reset */
#define RESULT_KEEP_FIELDS 256 /* likewise fields and rows */
#define RESULT_CHUNK 4096      /* arena chunk size (a longer string gets its own chunk) */

struct result_chunk {
    struct result_chunk *next;
    size_t len, cap;
    char data[];
};

void result_init(struct result *r)
{
    memset(r, 0, sizeof *r);
}

static void free_chunks(struct result_chunk *c)
{
    while (c != NULL) {
        struct result_chunk *next = c->next;
        free(c);
        c = next;
    }
}

void result_free(struct result *r)
{
    free(r->bits);
    free(r->fields);
    free(r->rows);
    free_chunks(r->arena);
    memset(r, 0, sizeof *r);
}

void result_reset(struct result *r)
{
    if (r->bits_cap > RESULT_KEEP_BITS) {
        free(r->bits);
        r->bits = NULL;
        r->bits_cap = 0;
    }
    if (r->fields_cap > RESULT_KEEP_FIELDS) {
        free(r->fields);
        r->fields = NULL;
        r->fields_cap = 0;
    }
    if (r->rows_cap > RESULT_KEEP_FIELDS) {
        free(r->rows);
        r->rows = NULL;
        r->rows_cap = 0;
    }
    /* Keep the oldest chunk (the last in the list) if it is of the standard size. */
    struct result_chunk *c = r->arena, *keep = NULL;
    while (c != NULL) {
        struct result_chunk *next = c->next;
        if (next == NULL && c->cap == RESULT_CHUNK) {
            keep = c;
            keep->len = 0;
        } else {
            free(c);
        }
        c = next;
    }
    r->arena = keep;
    r->status = RESULT_OK;
    r->text = NULL;
    r->count = 0;
    r->nbits = r->nfields = r->nrows = 0;
    r->failed = false;
}

/* Grows *arr (of *cap elements of size el) to hold need elements. */
static bool grow(void **arr, size_t *cap, size_t need, size_t el)
{
    if (need <= *cap)
        return true;
    size_t n = *cap < 16 ? 16 : *cap;
    while (n < need) {
        if (n > SIZE_MAX / 2 / el)
            return false;
        n *= 2;
    }
    void *p = realloc(*arr, n * el);
    if (p == NULL)
        return false;
    *arr = p;
    *cap = n;
    return true;
}

/* Copies s[0..len) and a NUL into the arena; NULL with r->failed set on failure. */
static const char *copy(struct result *r, const char *s, size_t len)
{
    struct result_chunk *c = r->arena;
    if (c == NULL || c->cap - c->len < len + 1) {
        size_t cap = len + 1 > RESULT_CHUNK ? len + 1 : RESULT_CHUNK;
        c = malloc(sizeof *c + cap);
        if (c == NULL) {
            r->failed = true;
            return NULL;
        }
        c->len = 0;
        c->cap = cap;
        /* A big one-off chunk goes behind the current one so that one keeps filling. */
        if (cap > RESULT_CHUNK && r->arena != NULL) {
            c->next = r->arena->next;
            r->arena->next = c;
        } else {
            c->next = r->arena;
            r->arena = c;
        }
    }
    char *p = c->data + c->len;
    if (len > 0)
        memcpy(p, s, len);
    p[len] = '\0';
    c->len += len + 1;
    return p;
}

void result_set(struct result *r, enum result_status st, const char *static_text)
{
    r->status = st;
    r->text = static_text;
}

void result_set_copy(struct result *r, enum result_status st, const char *text, size_t len)
{
    r->status = st;
    r->text = copy(r, text, len);
}

bool *result_add_bits(struct result *r, size_t n)
{
    r->status = RESULT_BITS;
    if (n > SIZE_MAX - r->nbits ||
        !grow((void **)&r->bits, &r->bits_cap, r->nbits + n, sizeof *r->bits)) {
        r->failed = true;
        return NULL;
    }
    bool *p = r->bits + r->nbits;
    r->nbits += n;
    return p;
}

static struct result_field *add_field(struct result *r, const char *name,
                                      enum result_field_type type)
{
    r->status = RESULT_FIELDS;
    name = copy(r, name, strlen(name));
    if (name == NULL)
        return NULL;
    if (!grow((void **)&r->fields, &r->fields_cap, r->nfields + 1, sizeof *r->fields)) {
        r->failed = true;
        return NULL;
    }
    struct result_field *f = &r->fields[r->nfields++];
    *f = (struct result_field){.name = name, .type = type};
    return f;
}

void result_field_u64(struct result *r, const char *name, uint64_t v)
{
    struct result_field *f = add_field(r, name, RESULT_U64);
    if (f != NULL)
        f->u = v;
}

void result_field_double(struct result *r, const char *name, double v)
{
    struct result_field *f = add_field(r, name, RESULT_DOUBLE);
    if (f != NULL)
        f->d = v;
}

void result_field_str(struct result *r, const char *name, const char *s, size_t len)
{
    const char *c = copy(r, s, len);
    struct result_field *f = c != NULL ? add_field(r, name, RESULT_STR) : NULL;
    if (f != NULL)
        f->str = c;
}

void result_field_alias(struct result *r, const char *alias)
{
    if (r->nfields == 0 || r->failed)
        return; /* the field was not appended: r->failed reports it */
    const char *c = copy(r, alias, strlen(alias));
    if (c != NULL)
        r->fields[r->nfields - 1].alias = c;
}

void result_row(struct result *r, const char *name, size_t len, uint64_t items, uint64_t bytes,
                uint64_t capacity, double error, uint64_t window_ms)
{
    r->status = RESULT_ROWS;
    const char *c = copy(r, name, len);
    if (c == NULL)
        return;
    if (!grow((void **)&r->rows, &r->rows_cap, r->nrows + 1, sizeof *r->rows)) {
        r->failed = true;
        return;
    }
    r->rows[r->nrows++] = (struct result_row){.name = c,
                                              .items = items,
                                              .bytes = bytes,
                                              .capacity = capacity,
                                              .error = error,
                                              .window_ms = window_ms};
}

const char *result_status_name(enum result_status st)
{
    switch (st) {
    case RESULT_OK:
        return "OK";
    case RESULT_CREATED:
        return "CREATED";
    case RESULT_EXISTS:
        return "EXISTS";
    case RESULT_NOT_FOUND:
        return "NOT_FOUND";
    case RESULT_DELETED:
        return "DELETED";
    case RESULT_COUNT:
        return "COUNT";
    case RESULT_REMOVED:
        return "REMOVED";
    case RESULT_BITS:
        return "BITS";
    case RESULT_FIELDS:
        return "FIELDS";
    case RESULT_ROWS:
        return "ROWS";
    case RESULT_HELP:
        return "HELP";
    case RESULT_VERSION:
        return "VERSION";
    case RESULT_READONLY:
        return "READONLY";
    case RESULT_LINE:
        return "LINE";
    case RESULT_NONE:
        return "NONE";
    case RESULT_CLOSE:
        return "CLOSE";
    case RESULT_CLIENT_ERROR:
        return "CLIENT_ERROR";
    case RESULT_SERVER_ERROR:
        return "SERVER_ERROR";
    case RESULT_DUMP:
        return "DUMP";
    case RESULT_RESTORED:
        return "RESTORED";
    }
    return "?";
}
