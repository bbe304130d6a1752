/*
 * simulate.h - the Bloom filter simulator page, GET /simulate (page/simulate.html), built
 * into the binary by the Makefile as a byte array (build/gen/http_simulate.c). It runs in
 * the browser: a bit array of m bits and k hashes, its whole state in the URL; it changes
 * no server filter and asks the server only for /api/plan (plan.h).
 */
#ifndef BLOOMD_SERVER_HTTP_SIMULATE_H
#define BLOOMD_SERVER_HTTP_SIMULATE_H

#include <stddef.h>

extern const unsigned char http_simulate_html[];
extern const size_t http_simulate_html_len;

#endif
