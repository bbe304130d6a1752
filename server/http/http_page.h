/*
 * http_page.h - the live page (server/http/page/index.html), built into the binary by the
 * Makefile as a byte array (build/gen/http_page.c), so nothing is read at run time.
 */
#ifndef BLOOMD_SERVER_HTTP_PAGE_H
#define BLOOMD_SERVER_HTTP_PAGE_H

#include <stddef.h>

extern const unsigned char http_page_html[];
extern const size_t http_page_html_len;

#endif
