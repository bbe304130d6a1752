/*
 * json.h - JSON values into an evbuffer, for the HTTP pages (the pages build the objects).
 */
#ifndef BLOOMD_SERVER_HTTP_JSON_H
#define BLOOMD_SERVER_HTTP_JSON_H

#include <stddef.h>

struct evbuffer;

/* Appends s[0..len) as a JSON string, quotes included, every byte outside printable ASCII
 * escaped as \u00XX. */
void json_string(struct evbuffer *out, const char *s, size_t len);

/* Appends d as a JSON number, or null when it is not finite. */
void json_number(struct evbuffer *out, double d);

#endif
