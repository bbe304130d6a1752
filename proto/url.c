/*
 * url.c - query lookup and percent-decoding for the HTTP pages. Every read is bounded
 * by the slice; a truncated escape at the end of the input is an error, never a read past.
 */
#include "proto/url.h"

#include <string.h>

bool proto_query_find(struct proto_slice query, const char *name, struct proto_slice *raw)
{
    size_t nlen = strlen(name);
    const char *p = query.ptr;
    const char *end = query.ptr + query.len;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp != NULL ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        const char *key_end = eq != NULL ? eq : stop;
        if ((size_t)(key_end - p) == nlen && memcmp(p, name, nlen) == 0) {
            raw->ptr = eq != NULL ? eq + 1 : stop;
            raw->len = (size_t)(stop - raw->ptr);
            return true;
        }
        p = amp != NULL ? amp + 1 : end;
    }
    return false;
}

/* Value of a hex digit, or -1. */
static int hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int proto_url_decode(struct proto_slice in, char *out, size_t cap, size_t *len)
{
    size_t n = 0;
    for (size_t i = 0; i < in.len; i++) {
        char c = in.ptr[i];
        if (c == '%') {
            if (in.len - i < 3 || hex(in.ptr[i + 1]) < 0 || hex(in.ptr[i + 2]) < 0) {
                *len = n;
                return PROTO_URL_EESCAPE;
            }
            c = (char)(hex(in.ptr[i + 1]) * 16 + hex(in.ptr[i + 2]));
            i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        if (n == cap) {
            *len = n;
            return PROTO_URL_ETOOLONG;
        }
        out[n++] = c;
    }
    *len = n;
    return PROTO_URL_OK;
}

bool proto_key_valid(struct proto_slice s)
{
    if (s.len == 0)
        return false;
    for (size_t i = 0; i < s.len; i++) {
        char c = s.ptr[i];
        if (c == ' ' || c == '\t' || c == '\0' || c == '\r' || c == '\n')
            return false;
    }
    return true;
}
