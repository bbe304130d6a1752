/*
 * json.c - the two JSON value writers the HTTP pages share (/api, /api/plan): strings
 * escaped byte by byte, numbers as %.9g or null.
 */
#include "server/http/json.h"

#include <event2/buffer.h>
#include <math.h>
#include <stdio.h>

void json_string(struct evbuffer *out, const char *s, size_t len)
{
    static const char hexd[] = "0123456789abcdef";
    evbuffer_add(out, "\"", 1);
    size_t run = 0; /* bytes copied as they are, pending */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            run++;
            continue;
        }
        evbuffer_add(out, s + i - run, run);
        run = 0;
        char esc[6] = {'\\', 'u', '0', '0', hexd[c >> 4], hexd[c & 15]};
        if (c == '"' || c == '\\') {
            esc[1] = (char)c;
            evbuffer_add(out, esc, 2);
        } else {
            evbuffer_add(out, esc, 6);
        }
    }
    evbuffer_add(out, s + len - run, run);
    evbuffer_add(out, "\"", 1);
}

void json_number(struct evbuffer *out, double d)
{
    if (isfinite(d))
        evbuffer_add_printf(out, "%.9g", d);
    else
        evbuffer_add(out, "null", 4);
}
