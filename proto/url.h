/*
 * url.h - the few pieces of an HTTP request URI the server reads (the query parameter
 * k of /api/filters/<name>/key), as pure functions over borrowed bytes: no allocation,
 * no I/O, fuzzed by tests/fuzz/fuzz_url.c. Decoding follows the form encoding browsers
 * send: %XX escapes and '+' for a space.
 */
#ifndef BLOOMD_PROTO_URL_H
#define BLOOMD_PROTO_URL_H

#include <stdbool.h>
#include <stddef.h>

#include "proto/request.h"

enum proto_url_err {
    PROTO_URL_OK = 0,
    PROTO_URL_EESCAPE = -1,  /* a '%' not followed by two hex digits */
    PROTO_URL_ETOOLONG = -2, /* the decoded value does not fit the output */
};

/*
 * Finds the first parameter named name (compared before decoding) in query, the part
 * after '?' without it ("a=1&k=x"). Sets *raw to its still-encoded value (empty for "k"
 * or "k="), a view into query. Returns false if there is none.
 */
bool proto_query_find(struct proto_slice query, const char *name, struct proto_slice *raw);

/*
 * Decodes in into out (cap bytes, not NUL-terminated) and sets *len. Returns
 * PROTO_URL_OK, PROTO_URL_EESCAPE or PROTO_URL_ETOOLONG (then out holds a prefix).
 */
int proto_url_decode(struct proto_slice in, char *out, size_t cap, size_t *len);

/*
 * True if s is one key as the text protocol reads it: at least one byte, none of them
 * a space, tab, NUL, CR or LF (the bytes that end or split a key there).
 */
bool proto_key_valid(struct proto_slice s);

#endif
