/*
 * memcache.h - memcached's ASCII protocol as a second face of bloomd (see the "memcached
 * protocol" section of proto/PROTOCOL.md): an incremental parser producing the shared
 * struct proto_request, and a formatter from struct result to memcached's reply words.
 * Pure code: no I/O, no dependency on lib/ or libevent; the parser never allocates.
 *
 * How the server drives one connection (buf/len: its unparsed input):
 *
 *   rc = mc_parse(buf, len, &opt, &m, &used);
 *   MC_MORE           read more (m.need, if not 0, is how many bytes the request needs)
 *   MC_ERR_TOO_LONG   mc_reply_parse_error(), then close (no line end in max_line bytes)
 *   other rc < 0      mc_reply_parse_error(); skip `used` bytes, then m.swallow more bytes
 *                     as they arrive (only MC_ERR_TOO_LARGE sets it); go on
 *   MC_OK, m.cmd:
 *     MC_CMD_GET      mc_get_begin(); for each mc_next_group(): execute the group (a CHECK
 *                     of one filter), mc_get_group(), stop if it returns false; mc_get_end()
 *     otherwise       if m.exec, execute m.req into a result, else use an empty RESULT_OK
 *                     result; mc_format_result()
 *   then skip `used` bytes. Slices (and so the VALUE lines of a get, which echo the keys)
 *   point into buf: format before the input buffer is compacted.
 *
 * Authentication (memcached 1.5.15's ASCII convention, opt->auth set): the first request
 * must be `set <any key> <flags> <exptime> <bytes>\r\n<username> <password>\r\n`. It
 * parses as MC_CMD_AUTH, req an AUTH whose args are the password (the key and the username
 * are not looked at); mc_format_result() answers STORED or CLIENT_ERROR
 * MC_WHY_AUTH_FAILED. The server refuses every other request with CLIENT_ERROR
 * MC_WHY_UNAUTHENTICATED until one succeeds.
 *
 * noreply: the formatters append nothing for a request with m.noreply, errors included
 * (memcached's rule: a noreply client never reads, so a stray error would shift replies).
 */
#ifndef BLOOMD_PROTO_MEMCACHE_H
#define BLOOMD_PROTO_MEMCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"
#include "proto/request.h"
#include "proto/result.h"

#define MC_MAX_KEY 250                        /* memcached's key length limit */
#define MC_DEFAULT_MAX_LINE ((size_t)1 << 20) /* a get of thousands of keys fits */
#define MC_DEFAULT_MAX_DATA ((size_t)1 << 20) /* memcached's default item size limit */

struct mc_options {
    struct proto_slice default_filter; /* filter of keys without ':'; len 0: refuse them */
    size_t max_line; /* command line bytes, terminator included; 0: MC_DEFAULT_MAX_LINE */
    size_t max_data; /* largest data block of a storage command; 0: MC_DEFAULT_MAX_DATA */
    bool auth;       /* not authenticated yet: a set is an authentication (MC_CMD_AUTH) */
};

enum mc_cmd {
    MC_CMD_ADD,       /* add: req is a CHECKADD of one key; STORED if new, else NOT_STORED */
    MC_CMD_SET,       /* set: req is an ADD of one key; STORED */
    MC_CMD_GET,       /* get, gets: req.args holds every key (maybe of several filters) */
    MC_CMD_VERSION,   /* req is a VERSION */
    MC_CMD_STATS,     /* req is a STATS */
    MC_CMD_QUIT,      /* req is a QUIT (the result is RESULT_CLOSE) */
    MC_CMD_FLUSH_ALL, /* req is a CLEAR with no name: every filter. Refuse unless enabled */
    MC_CMD_VERBOSITY, /* nothing to execute: OK */
    MC_CMD_NOOP,      /* mn, the meta no-op: nothing to execute: MN */
    MC_CMD_AUTH,      /* a set while opt->auth: req is an AUTH of the password (see below) */
};

enum mc_status {
    MC_OK = 0,   /* one request parsed */
    MC_MORE = 1, /* incomplete: read more and call again */
    /* Errors (negative): reply with mc_reply_parse_error(), skip *consumed bytes. */
    MC_ERR_UNKNOWN_CMD = -1, /* ERROR (also an empty line, as in memcached) */
    MC_ERR_TOO_LONG = -2,    /* CLIENT_ERROR line too long; *consumed = 0: reply, close */
    MC_ERR_FORMAT = -3,      /* CLIENT_ERROR: wrong arguments, bad number */
    MC_ERR_KEY = -4,         /* CLIENT_ERROR: key too long, control byte, empty, no filter */
    MC_ERR_NAME = -5,        /* CLIENT_ERROR: the part before ':' is not a filter name */
    MC_ERR_DATA = -6,        /* CLIENT_ERROR bad data chunk: the block did not end in \r\n */
    MC_ERR_TOO_LARGE = -7,   /* SERVER_ERROR object too large for cache; see swallow */
    MC_ERR_REFUSED = -8,     /* CLIENT_ERROR: a command a Bloom filter cannot do */
};

/*
 * One parsed memcached request. req is what the server executes (see enum mc_cmd); its
 * slices point into the buffer given to mc_parse. For add/set, req.name is the filter,
 * req.args the memcached key as sent ("clicks:u1") and req.key_skip the length of its
 * "<filter>:" prefix, so proto_next_keys() yields the Bloom key ("u1"). For get, req.name
 * is empty and req.args/req.nargs hold all the keys as sent: walk them with
 * mc_next_group(). On an error, req.why and req.bad say why (as in proto_parse).
 */
struct mc_request {
    enum mc_cmd cmd;
    struct proto_request req; /* what to execute */
    bool exec;                /* false: nothing to execute, format a RESULT_OK result */
    bool noreply;             /* "noreply" was given: no reply at all, not even an error */
    bool cas;                 /* gets: VALUE lines carry a cas unique (always 0) */
    uint64_t data_len;        /* add/set: length of the data block (read and ignored) */
    uint64_t flush_delay;     /* flush_all [delay] (only 0 is accepted) */
    size_t need;              /* MC_MORE: bytes the whole request needs, once known; else 0 */
    size_t swallow;           /* MC_ERR_TOO_LARGE: bytes after *consumed to discard */
    struct proto_slice default_filter; /* from the options, for mc_next_group() */
};

/*
 * Parses the first request in buf[0..len): the command line and, for storage commands,
 * its data block. Returns MC_OK with *consumed = the request's bytes and *m filled;
 * MC_MORE with *consumed = 0; an error with *consumed = bytes to skip (the line, or the
 * line and its data block when the block's length could be read) and m->why/bad set.
 * MC_ERR_TOO_LONG: *consumed = 0, reply and close. opt may be NULL (defaults, no default
 * filter). Never reads outside buf[0..len).
 */
int mc_parse(const char *buf, size_t len, const struct mc_options *opt, struct mc_request *m,
             size_t *consumed);

/*
 * The keys of a get, a run at a time: takes the next run of consecutive keys that address
 * the same filter (same "<filter>:" prefix, or none) from *rest into *group, a CHECK
 * request of that filter with args/nargs/key_skip set. Start with *rest = m->req.args.
 * Returns false when no key is left. "get a:x a:y b:z a:w" is three runs: a (2), b, a.
 */
bool mc_next_group(const struct mc_request *m, struct proto_slice *rest,
                   struct proto_request *group);

/* Short human-readable reason for a parse status ("bad data chunk", ...). */
const char *mc_strerror(int status);

/* ---- Replies ---- */

/* The reply to a failed mc_parse(): ERROR, CLIENT_ERROR <why> ['<token>'], or SERVER_ERROR
 * object too large for cache. Nothing when m->noreply (except for MC_ERR_TOO_LONG). */
void mc_reply_parse_error(struct proto_buf *b, int status, const struct mc_request *m);

/*
 * Appends memcached's reply to the result of executing m (any command but get, which
 * goes through mc_get_*; a get is formatted here too if r holds one bit per key of the
 * whole line). add: bit 0 STORED, 1 NOT_STORED; set STORED; VERSION x; STAT lines and
 * END (a field shown under its alias when it has one); OK; MN; RESULT_CLOSE nothing;
 * RESULT_NOT_FOUND "CLIENT_ERROR no such filter"; errors as CLIENT_ERROR/SERVER_ERROR
 * <text>; a failed result "SERVER_ERROR out of memory". Nothing when m->noreply.
 */
void mc_format_result(struct proto_buf *b, const struct mc_request *m, const struct result *r);

/* The reply to one get, built run by run. */
struct mc_get {
    size_t mark; /* b->len when the reply began */
    bool failed; /* an error replaced the reply; later runs are ignored */
};

void mc_get_begin(struct mc_get *g, const struct proto_buf *b);

/*
 * Appends "VALUE <key> 0 1\r\n1\r\n" (gets: "VALUE <key> 0 1 0\r\n1\r\n") for each
 * present key of group, from r: RESULT_BITS with one bit per key of group, or
 * RESULT_NOT_FOUND (the filter does not exist: every key absent). Any other result
 * (an error, a failed result, a wrong bit count) drops what this get appended so far and
 * appends the error instead: returns false, and the server should execute no more runs.
 */
bool mc_get_group(struct proto_buf *b, struct mc_get *g, const struct mc_request *m,
                  const struct proto_request *group, const struct result *r);

/* Appends END, unless an error replaced the reply. */
void mc_get_end(struct proto_buf *b, const struct mc_get *g);

/* memcached's words for a failed authentication and for a request before one. */
#define MC_WHY_AUTH_FAILED "authentication failure"
#define MC_WHY_UNAUTHENTICATED "unauthenticated"

/* The reason given for a refused flush_all, for a server that has it disabled. */
#define MC_WHY_FLUSH_DISABLED "flush_all is disabled: it would clear every filter"

#endif
