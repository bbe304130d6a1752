/*
 * commands.h - executes one parsed request against the server's registry and appends
 * the reply to a buffer. No sockets: the connection code feeds it, unit tests call it
 * directly. Runs on the event-loop thread only.
 */
#ifndef BLOOMD_SERVER_COMMANDS_H
#define BLOOMD_SERVER_COMMANDS_H

#include "proto/proto.h"

struct server;
struct conn;

/* Keys hashed and probed per lib batch call (bounded stack scratch, prefetch window). */
#define COMMANDS_BATCH 256

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

#endif
