/*
 * reply.h - how many reply lines a request gets and what they say, for a client that
 * pipelines: the request's shape comes from proto_parse, the server's own parser, so the
 * client counts replies exactly as the server sends them (proto/PROTOCOL.md, "Framing").
 * Pure: no allocation, no I/O.
 */
#ifndef BLOOMD_CLI_REPLY_H
#define BLOOMD_CLI_REPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum cli_shape {
    CLI_SHAPE_NONE,  /* a blank line: no reply */
    CLI_SHAPE_LINE,  /* one reply line */
    CLI_SHAPE_BLOCK, /* INFO, LIST, STATS, HELP: lines up to END, or one error line */
    CLI_SHAPE_CLOSE, /* QUIT: no reply, the server closes the connection */
};

/*
 * The shape of the reply to the request line[0..len), which must end in '\n' (and holds
 * exactly one line). Requests the server refuses get one error line: CLI_SHAPE_LINE.
 */
enum cli_shape cli_request_shape(const char *line, size_t len);

/* True if the reply line is an error: its first word is ERROR, CLIENT_ERROR or SERVER_ERROR. */
bool cli_reply_is_error(const char *line, size_t len);

/*
 * True if, in the reply to a CLI_SHAPE_BLOCK request, this line is the last: END, or a
 * first line that is an error or NOT_FOUND (the block never starts).
 */
bool cli_block_ends(const char *line, size_t len, bool first);

/* Reads "ADDED <n>". Returns 0, or -1 if the line is anything else. */
int cli_parse_added(const char *line, size_t len, uint64_t *n);

/*
 * Reads the reply to a CHECK or CHECKADD of nkeys keys ("1 0 1"): bits[i] = 1 for '1'.
 * Returns 0, or -1 if the line is not nkeys digits 0/1 separated by single spaces.
 */
int cli_parse_bits(const char *line, size_t len, size_t nkeys, unsigned char *bits);

#endif
