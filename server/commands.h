/*
 * commands.h - executes one parsed request against the server's registry and appends
 * the reply to a buffer. No sockets: the connection code feeds it, unit tests call it
 * directly. Runs on the event-loop thread only.
 */
#ifndef BLOOMD_SERVER_COMMANDS_H
#define BLOOMD_SERVER_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>

#include "proto/proto.h"

struct server;
struct conn;

/* Keys hashed and probed per lib batch call (bounded stack scratch, prefetch window). */
#define COMMANDS_BATCH 256

/* Requests of at most this many keys may be merged into a run (commands_execute_run). */
#define COMMANDS_RUN_KEYS 16

enum cmd_result {
    CMD_DONE = 0,    /* the reply is in the buffer */
    CMD_CLOSE = 1,   /* QUIT: send what is buffered, then close */
    CMD_PENDING = 2, /* the reply comes later: the connection waits (see conn_resume) */
};

/*
 * Executes req and appends its complete reply to out. conn identifies the client for
 * commands that answer asynchronously (may be NULL when none can, as in unit tests).
 * Returns an enum cmd_result.
 */
int commands_execute(struct server *srv, const struct proto_request *req, struct proto_buf *out,
                     struct conn *conn);

/*
 * True if req can be part of a run: ADD, CHECK or CHECKADD of at most COMMANDS_RUN_KEYS
 * keys. next joins a run started by first if both can and they name the same command
 * and filter.
 */
bool commands_runnable(const struct proto_request *req);
bool commands_same_run(const struct proto_request *first, const struct proto_request *next);

/*
 * Executes n >= 1 consecutive requests of one run (at most COMMANDS_BATCH keys in all)
 * with a single lib batch call, so pipelined one-key requests overlap their cache misses
 * like one many-key request. Replies and counters are exactly those of n
 * commands_execute() calls, also when the filter cannot grow part-way.
 */
void commands_execute_run(struct server *srv, const struct proto_request *reqs, size_t n,
                          struct proto_buf *out);

#endif
