/*
 * keys.h - the key of one input line for the bulk modes (add, check, dedup): the whole line
 * or one field of it, checked against what the protocol can carry. Pure: views into the
 * caller's line, no allocation, no I/O. Tuned for millions of short lines.
 */
#ifndef BLOOMD_CLI_KEYS_H
#define BLOOMD_CLI_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include "proto/request.h"

/* Keys longer than this cannot fit in a request line of the server's default limit. */
#define CLI_KEY_MAX (((size_t)1 << 20) - 512)

struct cli_keyspec {
    unsigned field; /* 1-based field number; 0: the whole line */
    char delim;     /* field separator (with field > 0) */
};

enum cli_key_err {
    CLI_KEY_OK = 0,
    CLI_KEY_EMPTY = -1,   /* an empty key */
    CLI_KEY_SPACE = -2,   /* a space in the key */
    CLI_KEY_TAB = -3,     /* a tab */
    CLI_KEY_CR = -4,      /* a carriage return not ending the line */
    CLI_KEY_NUL = -5,     /* a NUL byte */
    CLI_KEY_NOFIELD = -6, /* the line has fewer fields than spec->field */
    CLI_KEY_TOOLONG = -7, /* longer than CLI_KEY_MAX */
};

/*
 * Sets *key to the key of line[0..len) (the line without its '\n'; one '\r' at its end is
 * part of the terminator and dropped first). Returns CLI_KEY_OK or a negative enum
 * cli_key_err; *key is set in both cases.
 */
int cli_key_extract(const struct cli_keyspec *spec, const char *line, size_t len,
                    struct proto_slice *key);

/*
 * The bulk modes' fast path for whole-line keys: finds the first '\n' in p[0..n) and checks
 * the line before it in the same pass. Returns its offset, or n if there is none (then
 * *clean is unset). *clean is true if the line is a valid key once one '\r' before the
 * '\n' is dropped, exactly when cli_key_extract of the whole line would return CLI_KEY_OK
 * (for a line up to CLI_KEY_MAX bytes: the caller checks the length).
 */
size_t cli_line_scan(const char *p, size_t n, bool *clean);

/* A short reason for a cli_key_extract error ("the key has a tab"). */
const char *cli_key_strerror(int err);

/* True if s is a filter name the protocol accepts: 1..128 of [A-Za-z0-9._-], no leading '.'. */
bool cli_name_valid(const char *s);

#endif
