/*
 * dump.h - DUMP and RESTORE: a filter's snapshot file over the wire, both ways, for
 * filters of gigabytes. Neither runs on the loop for long nor holds a whole filter's
 * bytes beyond the budget: DUMP makes the filter's snapshot durable (snapshot_flush) and
 * streams that file in chunks read on the quick lane; RESTORE takes the data block into
 * memory counted in the budget (BUDGET_CONNECTIONS), decodes it on the long lane, installs
 * it through exec/mutate.h and answers once its own snapshot is durable (the crash rule
 * is mutate_restore's). Loop thread, except where a function says otherwise.
 */
#ifndef BLOOMD_SERVER_EXEC_DUMP_H
#define BLOOMD_SERVER_EXEC_DUMP_H

#include <stdbool.h>
#include <stddef.h>

#include "proto/request.h"
#include "proto/result.h"

struct server;
struct stats;
struct completion;

/*
 * DUMP <name>: false with res set (NOT_FOUND, snapshots not running, out of memory), or
 * true (pending): later gets RESULT_DUMP (count: bytes) with the file's bytes and "\r\n"
 * as its body (completion_finish_body), or SERVER_ERROR when the snapshot cannot be
 * written or read.
 */
bool dump_execute(struct server *srv, const struct proto_request *req, struct result *res,
                  struct completion *later);

/*
 * BF.SCANDUMP and BF.LOADCHUNK (RESP, proto/resp.h) are DUMP requests in chunks, the same
 * file and the same restore, with RedisBloom's iterator: a byte offset + 1.
 *
 * SCANDUMP (req->data_len = iter + 1): iter 0 FLUSHes the filter and gets the header
 * chunk (DUMP_CHUNK_HEADER bytes: "bloomdSC", u32 version 1, u32 reserved, u64 total
 * file size, little-endian); iter k > 0 gets the file's bytes from offset k - 1, at most
 * dump_chunk_bound(); past the end, 0 bytes. The result is RESULT_DUMP (count: bytes in
 * the body), or an error as DUMP's. The next iter is 1 after the header, k + count after
 * a chunk, 0 after an empty one. Calls after iter 0 read the file as it is then: a
 * snapshot written between them (the filter changed) mixes two files, which the loading
 * side's decode refuses (checksums), so the client starts over.
 *
 * LOADCHUNK (req->replace set; req->data_len = iter >= 1; req->args = the chunk's bytes,
 * copied during the call): iter 1 is a header: it starts a load of the name (EXISTS if
 * the name exists; the budget takes the total size at once, as RESTORE's block, and a
 * header again restarts it). A chunk goes at offset iter - 1 - len and must follow the
 * previous one. RESULT_OK until the total size is in; the last chunk's request is
 * pending and answers as RESTORE does. A load idle DUMP_LOAD_IDLE_MS is dropped (its
 * memory given back) at the next LOADCHUNK; at most DUMP_LOADS run at once.
 */
#define DUMP_CHUNK_HEADER 24
#define DUMP_CHUNK_MAX ((size_t)16 << 20)
#define DUMP_LOADS 8
#define DUMP_LOAD_IDLE_MS 60000

/* A SCANDUMP chunk's bound: 16 MiB, or less so that its LOADCHUNK fits max_line. */
size_t dump_chunk_bound(const struct server *srv);

/* A RESTORE taking its data block. */
struct restore;

/*
 * RESTORE <name> <nbytes> [replace], before its data block: counts the request in *st and
 * checks what can be checked up front. Returns NULL with res set when the block is not
 * wanted (the caller discards it): EXISTS (the name exists, no replace); CLIENT_ERROR
 * dump too large (over max_memory); SERVER_ERROR out of memory (the budget cannot take
 * the block); a journal error. Else a restore that takes the next req->data_len bytes and
 * the "\r\n" after them (restore_feed), then restore_end(); later gets the answer.
 */
struct restore *restore_begin(struct server *srv, struct stats *st, const struct proto_request *req,
                              struct result *res, struct completion *later);

/*
 * Takes the next bytes of the block (with its trailing "\r\n"), in order, at most len of
 * them: only as far as the block's memory has been faulted in, which the quick lane does
 * ahead of the data (first touches of fresh memory can take the loop milliseconds per
 * page on a busy host). Returns the bytes taken; fewer than len means the rest must wait
 * until wake(owner) is called (set by restore_set_wake before the first feed).
 */
size_t restore_feed(struct restore *r, const char *buf, size_t len);
void restore_set_wake(struct restore *r, void (*wake)(void *owner), void *owner);

/*
 * Every byte is there: decodes in the background and answers later (RESTORED, EXISTS,
 * CLIENT_ERROR bad dump (<why>), CLIENT_ERROR bad data chunk, SERVER_ERROR ...). Takes r.
 */
void restore_end(struct restore *r);

/* The client left before the block was whole: frees r; later is never called. */
void restore_abort(struct restore *r);

#endif
