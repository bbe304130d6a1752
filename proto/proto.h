/*
 * proto.h - the bloomd text protocol (see proto/PROTOCOL.md): an incremental request
 * parser and a reply formatter. Pure code: no I/O, no dependency on lib/ or libevent.
 * The parser returns views into the caller's buffer and never allocates; the formatter
 * appends to a caller-owned growable buffer.
 */
#ifndef BLOOMD_PROTO_PROTO_H
#define BLOOMD_PROTO_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/request.h"
#include "proto/result.h"

struct proto_limits {
    size_t max_line; /* bytes, terminator included; 0: PROTO_DEFAULT_MAX_LINE */
};

#define PROTO_DEFAULT_MAX_LINE ((size_t)1 << 20)

enum proto_status {
    PROTO_OK = 0,    /* one request parsed */
    PROTO_MORE = 1,  /* no complete line yet: read more and call again */
    PROTO_BLANK = 2, /* an empty or all-space line: skip it, no reply */
    /* Errors (negative). Reply with proto_reply_parse_error(); skip *consumed bytes. */
    PROTO_ERR_UNKNOWN_CMD = -1, /* reply ERROR unknown command '<cmd>' */
    PROTO_ERR_TOO_LONG = -2,    /* reply CLIENT_ERROR line too long, then close */
    PROTO_ERR_ARGS = -3,        /* wrong number of arguments */
    PROTO_ERR_NAME = -4,        /* invalid filter name */
    PROTO_ERR_KEY = -5,         /* invalid key byte (tab, NUL, bare CR) */
    PROTO_ERR_NUMBER = -6,      /* bad number */
    PROTO_ERR_OPTION = -7,      /* unknown or repeated CREATE option, bad value */
};

/*
 * Parses the first request in buf[0..len). Returns PROTO_OK with *consumed = bytes of
 * the line including its terminator and *req filled; PROTO_MORE with *consumed = 0;
 * PROTO_BLANK or an error with *consumed = bytes to skip (the whole line), and on an
 * error req->why and req->bad set. For PROTO_ERR_TOO_LONG (no terminator within max_line
 * bytes), *consumed = 0 and the caller must reply and close. lim may be NULL (defaults).
 * Never reads outside buf[0..len).
 */
int proto_parse(const char *buf, size_t len, const struct proto_limits *lim,
                struct proto_request *req, size_t *consumed);

/* Short human-readable reason for a parse error ("line too long", ...). */
const char *proto_strerror(int status);

/* The reply word for a parse error: "ERROR" for an unknown command, else "CLIENT_ERROR". */
const char *proto_error_kind(int status);

/* ---- Replies ---- */

/* A growable output buffer owned by the caller; zero-initialise, then proto_buf_free. */
struct proto_buf {
    char *data;
    size_t len;
    size_t cap;
    bool failed; /* set when an allocation failed; the content is then incomplete */
};

void proto_buf_free(struct proto_buf *b);
void proto_buf_reset(struct proto_buf *b); /* len = 0, failed = false; keeps the memory */
/* Appends s[0..n) as they are (for replies built from pieces, e.g. memcache.c). */
void proto_buf_append(struct proto_buf *b, const char *s, size_t n);

/* Each appends one complete reply line ending in "\r\n"; text arguments must not hold \r or \n. */
void proto_reply_word(struct proto_buf *b, const char *word); /* "CREATED" */
/* "CLIENT_ERROR why"; just the kind when why is NULL or empty. */
void proto_reply_error(struct proto_buf *b, const char *kind, const char *why);
void proto_reply_count(struct proto_buf *b, const char *word, uint64_t n);     /* "ADDED 3" */
void proto_reply_stat_u64(struct proto_buf *b, const char *field, uint64_t v); /* "STAT f v" */
void proto_reply_stat_double(struct proto_buf *b, const char *field, double v);
void proto_reply_stat_str(struct proto_buf *b, const char *field, struct proto_slice v);
/* LIST line; a windowed filter (window_ms > 0) gets a sixth column "window=<s>s". */
void proto_reply_filter(struct proto_buf *b, struct proto_slice name, uint64_t items,
                        uint64_t bytes, uint64_t capacity, double error, uint64_t window_ms);

/*
 * CHECK/CHECKADD reply, built in pieces: proto_reply_bits() appends "1 0 1" for n
 * results (with a leading space unless it is the first piece of the line, first=true),
 * proto_reply_end() appends "\r\n". Linear in the number of keys.
 */
void proto_reply_bits(struct proto_buf *b, const bool *bits, size_t n, bool first);
void proto_reply_end(struct proto_buf *b);

/*
 * The whole reply to a failed proto_parse(): "ERROR unknown command '<cmd>'" or
 * "CLIENT_ERROR <why> '<token>'", built from req->why and req->bad (the token is truncated and
 * non-printable bytes are escaped as \xNN, so the reply is always one clean line). With req NULL,
 * the reason is proto_strerror(status).
 */
void proto_reply_parse_error(struct proto_buf *b, int status, const struct proto_request *req);

/*
 * Appends the text protocol's reply to a result: the words of PROTOCOL.md (CREATED,
 * NOT_FOUND, "ADDED n", "1 0 1", STAT lines and END, FILTER lines and END, HELP's
 * command lines and END, ...).
 * RESULT_CLOSE appends nothing. A failed result is "SERVER_ERROR out of memory".
 */
void proto_format_result(struct proto_buf *b, const struct result *r);

#endif
