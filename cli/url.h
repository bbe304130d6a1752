/*
 * url.h - the server address of a bloomd URL, "bloomd://[:token@]host[:port][/]" or
 * bloomds:// for TLS, read as the Python client reads it (clients/python, parse_url_auth):
 * the token is the URL's password, percent-decoded; an IPv6 host is in brackets; the
 * port defaults to 8673. Pure: no allocation, no I/O.
 */
#ifndef BLOOMD_CLI_URL_H
#define BLOOMD_CLI_URL_H

#include <stdbool.h>
#include <stddef.h>

#define CLI_DEFAULT_PORT 8673u
#define CLI_HOST_MAX 255   /* bytes of a host name, without the NUL */
#define CLI_TOKEN_MAX 4096 /* bytes of a decoded token */

enum cli_url_err {
    CLI_URL_OK = 0,
    CLI_URL_ESCHEME = -1, /* not bloomd:// or bloomds:// */
    CLI_URL_EHOST = -2,   /* no host, an unclosed '[', or a host over CLI_HOST_MAX */
    CLI_URL_EPORT = -3,   /* a port that is not 1..65535 */
    CLI_URL_ETOKEN = -4,  /* a bad %XX escape in the token, or one over CLI_TOKEN_MAX */
    CLI_URL_EPATH = -5,   /* anything after the port but a single '/' */
};

struct cli_url {
    char host[CLI_HOST_MAX + 1];   /* NUL-terminated, without IPv6 brackets */
    unsigned port;                 /* 1..65535 */
    bool tls;                      /* bloomds:// */
    bool has_token;                /* the URL has a password */
    size_t token_len;              /* bytes of token */
    char token[CLI_TOKEN_MAX + 1]; /* decoded; NUL-terminated, but may hold NULs */
};

/* Parses s[0..len) into *u. Returns CLI_URL_OK or a negative enum cli_url_err. */
int cli_url_parse(const char *s, size_t len, struct cli_url *u);

/* A short reason for a cli_url_parse error. */
const char *cli_url_strerror(int err);

#endif
