/*
 * commands.h - executes one request (proto/request.h) against the registry and fills a
 * neutral result (proto/result.h); the protocol that received the request turns the
 * result into bytes. No sockets and no reply words here: connections feed it, unit
 * tests call it directly. Runs on a worker's loop thread, with that worker's counters.
 */
#ifndef BLOOMD_SERVER_COMMANDS_H
#define BLOOMD_SERVER_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/kind.h"
#include "proto/request.h"
#include "proto/result.h"

struct server;
struct stats;
struct completion;

/* Keys hashed and probed per lib batch call (bounded stack scratch, prefetch window). */
#define COMMANDS_BATCH 256

/* Requests of at most this many keys may be merged into a run (commands_execute_run). */
#define COMMANDS_RUN_KEYS 16

enum cmd_result {
    CMD_DONE = 0,    /* the result is in *res */
    CMD_PENDING = 1, /* the result comes later, through later->done() (server/core/park.h) */
};

/*
 * Executes req, counting it in *st, and fills res (reset by the caller). A command that
 * must wait (FLUSH, DROP with a snapshotter) returns CMD_PENDING and will call
 * later->done() once, on this thread, unless the server is stopping by then; with later
 * NULL it answers at once instead (DROP) or refuses (FLUSH). QUIT gives RESULT_CLOSE.
 * CLEAR with an empty name clears every filter (memcached's flush_all; the text protocol
 * always names one).
 */
int commands_execute(struct server *srv, struct stats *st, const struct proto_request *req,
                     struct result *res, struct completion *later);

/*
 * The parameters a CREATE with options o makes a filter of kind ops with: the library's
 * defaults, then the server's (default_capacity, default_error), the kind's, then o's.
 * Not checked (sbf_params_check is the caller's). For CREATE and /api/plan alike.
 */
void commands_create_params(const struct server *srv, const struct proto_create *o,
                            const struct kind_ops *ops, struct kind_params *out);

/* Why CREATE and /api/plan refuse growth=none for a kind other than blocked. */
#define COMMANDS_WHY_GROWTH_NONE                                                                   \
    "growth=none is for the blocked kind (a window's generations and an expandable filter grow)"

/*
 * Makes sure the filter named name exists, creating it on first use (the memcached
 * listener's rule) with the options of the first config template matching its name, or
 * the server defaults. Returns 0 if it exists now; else -1 with the failure in res.
 */
int commands_autocreate(struct server *srv, struct stats *st, struct proto_slice name,
                        struct result *res);

/*
 * True if req can be part of a run: ADD, CHECK or CHECKADD of at most COMMANDS_RUN_KEYS
 * keys. next joins a run started by first if both can and they name the same command
 * and filter.
 */
bool commands_runnable(const struct proto_request *req);
bool commands_same_run(const struct proto_request *first, const struct proto_request *next);

/* Receives the result of request i of a run, in order; res is valid during the call. */
typedef void (*commands_each_fn)(void *ctx, size_t i, const struct result *res);

/*
 * Executes n >= 1 consecutive requests of one run (at most COMMANDS_BATCH keys in all)
 * with a single lib batch call, so pipelined one-key requests overlap their cache misses
 * like one many-key request, and hands each request's result to each(ctx, i, r) in
 * order (r is valid during the call only: res, used as scratch, or one on the stack that
 * borrows the run's bits). Results and counters are exactly those of
 * n commands_execute() calls, also when the filter cannot grow part-way. The results are
 * given at once: do not merge runs when replies must wait for the journal
 * (durable_holds()).
 */
void commands_execute_run(struct server *srv, struct stats *st, const struct proto_request *reqs,
                          size_t n, struct result *res, commands_each_fn each, void *ctx);

#endif
