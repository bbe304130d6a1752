/*
 * conn.h - one connection of bloomd-cli to a server: TCP or TLS (OpenSSL), AUTH, and
 * buffered non-blocking I/O that the pipelining modes drive with poll(), plus blocking
 * helpers (send, read one line) for the interactive and one-shot modes. The socket stays
 * non-blocking throughout; "blocking" helpers wait in poll() with the timeout.
 */
#ifndef BLOOMD_CLI_CONN_H
#define BLOOMD_CLI_CONN_H

#include <stdbool.h>
#include <stddef.h>

#include "cli/buf.h"
#include "proto/request.h"

#define CLI_ADDR_MAX 280 /* "[host]:port" with its NUL */

struct cli_conn_opts {
    const char *host;   /* name or address */
    unsigned port;      /* 1..65535 */
    bool tls;           /* speak TLS (to the server's tls_port) */
    const char *cacert; /* CA file for TLS; NULL: the system's CAs */
    bool insecure;      /* TLS without verifying the server's certificate */
    const char *token;  /* sent as AUTH after connecting; NULL: none */
    int timeout_ms;     /* connect + handshake, and each wait for a reply; 0: forever */
};

enum cli_conn_status {
    CLI_CONN_OK = 0,
    CLI_CONN_AGAIN = 1,     /* nothing to read now (cli_conn_fill) */
    CLI_CONN_EOF = -1,      /* the server closed the connection */
    CLI_CONN_ERR = -2,      /* a socket or TLS error; cli_conn_error says which */
    CLI_CONN_ETIMEOUT = -3, /* no reply within timeout_ms */
    CLI_CONN_EAUTH = -4,    /* cli_conn_open: AUTH was refused */
    CLI_CONN_ECONNECT = -5, /* cli_conn_open: could not connect or handshake */
};

struct cli_conn;

/*
 * Connects (trying every address of host), does the TLS handshake and AUTH. Returns
 * CLI_CONN_OK with *out set (free with cli_conn_free), or CLI_CONN_ECONNECT / CLI_CONN_EAUTH
 * with *out NULL and a message in err[0..errlen).
 */
int cli_conn_open(const struct cli_conn_opts *o, struct cli_conn **out, char *err, size_t errlen);

/* Closes and frees; NULL does nothing. */
void cli_conn_free(struct cli_conn *c);

int cli_conn_fd(const struct cli_conn *c);

/* "host:port", for messages and the prompt. */
const char *cli_conn_addr(const struct cli_conn *c);

/* Why the last call failed ("Connection reset by peer", "server closed the connection"). */
const char *cli_conn_error(const struct cli_conn *c);

/* The output buffer: append requests here, then cli_conn_flush. */
struct cli_buf *cli_conn_out(struct cli_conn *c);

/* The input buffer: what cli_conn_fill read and cli_conn_line did not take (a data block). */
struct cli_buf *cli_conn_in(struct cli_conn *c);

/* The poll() events the connection waits for now (POLLIN, and POLLOUT with output). */
short cli_conn_events(const struct cli_conn *c);

/* Writes what it can of the output without blocking. Returns CLI_CONN_OK or CLI_CONN_ERR. */
int cli_conn_flush(struct cli_conn *c);

/*
 * Reads what the socket has, without blocking, into the input buffer. Returns CLI_CONN_OK
 * (something was read), CLI_CONN_AGAIN, CLI_CONN_EOF or CLI_CONN_ERR. Invalidates lines.
 */
int cli_conn_fill(struct cli_conn *c);

/*
 * Takes the next complete reply line from the input buffer, without its "\r\n": true and
 * *line set (a view valid until the next cli_conn_fill), or false when none is buffered.
 */
bool cli_conn_line(struct cli_conn *c, struct proto_slice *line);

/* Sends the output and waits for the next reply line. Returns CLI_CONN_OK or an error. */
int cli_conn_getline(struct cli_conn *c, struct proto_slice *line);

/* Appends line and "\r\n" to the output and flushes all of it, waiting as needed. */
int cli_conn_send(struct cli_conn *c, const char *line, size_t len);

/* True if an idle connection is still open (the server has not closed it meanwhile). */
bool cli_conn_alive(struct cli_conn *c);

/* Waits in poll() for the connection's events, up to timeout_ms (-1: forever): 1 ready, 0 not. */
int cli_conn_wait(struct cli_conn *c, int timeout_ms);

/* The timeout of each wait for a reply, from the options (-1: none). */
int cli_conn_timeout(const struct cli_conn *c);

#endif
