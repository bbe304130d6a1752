/*
 * result.h - the result model: what executing a request produced, before any protocol
 * turns it into bytes. server/exec/commands.c fills a struct result; the protocol that
 * received the request formats it (proto.h for the text protocol). A result owns all
 * its memory (strings are copied into its arena), so it can be formatted later, on
 * another path, or inspected by unit tests. It is meant to be reused: result_reset()
 * keeps the arrays for the next request, so the hot path allocates nothing once warm.
 */
#ifndef BLOOMD_PROTO_RESULT_H
#define BLOOMD_PROTO_RESULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum result_status {
    RESULT_OK = 0,       /* done, nothing more to say (UNION, CLEAR, FLUSH) */
    RESULT_CREATED,      /* CREATE made the filter */
    RESULT_EXISTS,       /* CREATE found it there already */
    RESULT_NOT_FOUND,    /* the filter named in `text` does not exist */
    RESULT_DELETED,      /* DROP removed it */
    RESULT_COUNT,        /* `count` (ADD: keys that were new) */
    RESULT_REMOVED,      /* `count` (DELETE: keys removed) */
    RESULT_BITS,         /* bits[0..nbits): per key present (CHECK) or was present (CHECKADD) */
    RESULT_FIELDS,       /* fields[0..nfields) (INFO of a filter, STATS) */
    RESULT_ROWS,         /* rows[0..nrows) (LIST) */
    RESULT_HELP,         /* the protocol's list of commands (HELP) */
    RESULT_VERSION,      /* `text` is the version */
    RESULT_CLOSE,        /* QUIT: nothing to send; close once the output is written */
    RESULT_CLIENT_ERROR, /* the request cannot be done; `text` says why */
    RESULT_SERVER_ERROR, /* the server failed (memory, disk); `text` says why */
    RESULT_READONLY,     /* a change refused by a replica; `text` is its primary, host:port */
    RESULT_LINE,         /* `text` is the whole reply line (ROLE, PSYNC) */
    RESULT_NONE,         /* nothing to send (a replica's acknowledgement) */
    RESULT_DUMP,         /* DUMP: `count` bytes of data follow the line (the connection's) */
    RESULT_RESTORED,     /* RESTORE installed the filter */
};

enum result_field_type {
    RESULT_U64,
    RESULT_DOUBLE,
    RESULT_STR,
};

/* One named figure. name, alias and str point into the arena. */
struct result_field {
    const char *name;
    const char *alias; /* the name memcached's protocol shows instead, or NULL (STATS) */
    enum result_field_type type;
    uint64_t u;
    double d;
    const char *str;
};

/* One LIST row. name points into the arena. */
struct result_chunk;

struct result_row {
    const char *name;
    uint64_t items, bytes, capacity;
    double error;
    uint64_t window_ms; /* a windowed filter's window, 0 for the others */
};

struct result {
    enum result_status status;
    const char *text; /* static, or in the arena; NULL if none */
    uint64_t count;
    bool *bits;
    size_t nbits, bits_cap;
    struct result_field *fields;
    size_t nfields, fields_cap;
    struct result_row *rows;
    size_t nrows, rows_cap;
    struct result_chunk *arena; /* copied strings; chunks never move, newest first */
    bool failed; /* an allocation failed: report a server error instead of the content */
};

/* Zero-initialise a struct result, or call result_init. Free with result_free. */
void result_init(struct result *r);
void result_free(struct result *r);

/* Empties r for the next request (status RESULT_OK); keeps small arrays. */
void result_reset(struct result *r);

/* Sets the status with a static text (may be NULL). */
void result_set(struct result *r, enum result_status st, const char *static_text);

/* Sets the status with a text copied into the arena (for names and messages). */
void result_set_copy(struct result *r, enum result_status st, const char *text, size_t len);

/* Makes room for n more bits and returns where they go (r->nbits is advanced by n), or
 * NULL with r->failed set. */
bool *result_add_bits(struct result *r, size_t n);

/* Appends a field (status becomes RESULT_FIELDS). name and s are copied. */
void result_field_u64(struct result *r, const char *name, uint64_t v);
void result_field_double(struct result *r, const char *name, double v);
void result_field_str(struct result *r, const char *name, const char *s, size_t len);

/* Gives the last field appended the alias memcached's stats shows it under (copied). */
void result_field_alias(struct result *r, const char *alias);

/* Appends a LIST row (status becomes RESULT_ROWS); name is copied. */
void result_row(struct result *r, const char *name, size_t len, uint64_t items, uint64_t bytes,
                uint64_t capacity, double error, uint64_t window_ms);

/* The upper-case word of a status for logs and tests ("NOT_FOUND"). */
const char *result_status_name(enum result_status st);

#endif
