/*
 * resp.h - Redis's RESP (2 and 3) as a third face of bloomd, for RedisBloom's BF.* commands
 * (see the "RESP" section of proto/PROTOCOL.md): a parser of commands (arrays of bulk
 * strings, or inline lines) into views of the caller's buffer, their mapping onto the shared
 * request model, and RESP reply formatters. Pure code: no I/O, no dependency on lib/ or
 * libevent; the parser never allocates and never reads outside the bytes it is given.
 *
 * How the server drives one connection (buf/len: its unparsed input):
 *
 *   rc = resp_parse(buf, len, &lim, &cmd, &used);
 *   RESP_MORE         read more (the frame is incomplete; nothing was consumed)
 *   RESP_BLANK        skip `used` bytes, no reply (an empty line, "*0", "*-1")
 *   rc < 0            reply "-ERR Protocol error: <cmd.why>" and close: after bad framing
 *                     the stream cannot be resynchronised
 *   RESP_OK           resp_map(&cmd, &m) says which command it is; execute it, reply
 *                     with the resp_reply_* formatters; skip `used` bytes.
 */
#ifndef BLOOMD_PROTO_RESP_H
#define BLOOMD_PROTO_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"
#include "proto/request.h"
#include "proto/result.h"

#define RESP_MAX_HEAD 16                            /* leading arguments kept as slices */
#define RESP_DEFAULT_MAX_FRAME ((size_t)1 << 20)    /* bytes of one command */
#define RESP_DEFAULT_MAX_ARGS ((size_t)1024 * 1024) /* Redis's multibulk limit */

struct resp_limits {
    size_t max_frame; /* bytes of one command, framing included; 0: RESP_DEFAULT_MAX_FRAME */
    size_t max_args;  /* elements of one array; 0: RESP_DEFAULT_MAX_ARGS */
};

enum resp_status {
    RESP_OK = 0,    /* one command parsed */
    RESP_MORE = 1,  /* incomplete: read more and call again */
    RESP_BLANK = 2, /* nothing to run: skip *consumed bytes, no reply */
    /* Errors (negative): reply "-ERR Protocol error: <why>", then close. */
    RESP_ERR_PROTOCOL = -1, /* bad framing: a bad length, a non-bulk element, a missing CRLF */
    RESP_ERR_TOO_LONG = -2, /* longer than max_frame, or more than max_args elements */
};

/*
 * One parsed command: argc arguments, the first RESP_MAX_HEAD of them as slices into the
 * parsed buffer (bulk strings may hold any byte). The rest are reached through
 * resp_tail(). An inline command ("PING\r\n", for nc and telnet) is split at spaces,
 * without quoting.
 */
struct resp_command {
    size_t argc;
    struct proto_slice argv[RESP_MAX_HEAD];
    const char *at[RESP_MAX_HEAD]; /* where argument i's encoding starts ('$', or its text) */
    const char *end;               /* end of the last argument's encoding */
    bool inline_form;              /* an inline line, not an array */
    const char *why;               /* on an error: a static reason (Redis's wording) */
};

/*
 * Parses the first command in buf[0..len). Returns RESP_OK with *consumed = its bytes and
 * *cmd filled; RESP_MORE with *consumed = 0; RESP_BLANK with *consumed = bytes to skip; an
 * error with cmd->why set (and *consumed = 0). Declared lengths are checked against the
 * limits before any byte of them is awaited, so a "$1000000000" header fails at once.
 * Stateless: a partial frame is parsed again from its start when more bytes arrive.
 * lim may be NULL (defaults). Never reads outside buf[0..len).
 */
int resp_parse(const char *buf, size_t len, const struct resp_limits *lim, struct resp_command *cmd,
               size_t *consumed);

/*
 * Arguments i..argc-1 of cmd as one slice in cmd's own encoding, for a request's args:
 * RESP bulk strings ("$1\r\nx\r\n...") for an array, space-separated text for an inline
 * command. i must be <= argc and < RESP_MAX_HEAD (or == argc). Length 0 when none.
 */
struct proto_slice resp_tail(const struct resp_command *cmd, size_t i);

/*
 * The next keys of *rest, a slice of validated bulk strings (resp_tail() of an array), at
 * most max of them, into keys[]; advances *rest. Returns how many; 0 when none is left.
 * proto_next_keys() calls it for a request whose args_resp is set.
 */
size_t resp_next_keys(struct proto_slice *rest, struct proto_slice *keys, size_t max);

/* True if the argument equals word, compared without case (word is upper case ASCII). */
bool resp_arg_is(struct proto_slice arg, const char *word);

/* ---- the command set ---- */

enum resp_op {
    RESP_OP_UNKNOWN = 0, /* -ERR unknown command '<name>' */
    RESP_OP_BF_RESERVE,  /* req: CREATE */
    RESP_OP_BF_ADD,      /* req: CHECKADD of one key; autocreate */
    RESP_OP_BF_MADD,     /* req: CHECKADD; autocreate */
    RESP_OP_BF_EXISTS,   /* req: CHECK of one key (a missing filter: 0) */
    RESP_OP_BF_MEXISTS,  /* req: CHECK */
    RESP_OP_BF_INSERT,   /* req: CHECKADD; create (CREATE with create) unless nocreate */
    RESP_OP_BF_INFO,     /* req: INFO; info_field */
    RESP_OP_BF_CARD,     /* req: INFO (its items; a missing filter: 0) */
    RESP_OP_BF_SCANDUMP, /* req: DUMP of a chunk; BF.LOADCHUNK: with replace (dump.h) */
    RESP_OP_BF_LOADCHUNK,
    RESP_OP_DEL,     /* DEL, UNLINK: req DROP of argv[1]; every argument is a name */
    RESP_OP_EXISTS,  /* every argument is a name */
    RESP_OP_TYPE,    /* argv[1] */
    RESP_OP_PING,    /* [message] */
    RESP_OP_ECHO,    /* message */
    RESP_OP_HELLO,   /* [protover [AUTH user pass] [SETNAME name]] */
    RESP_OP_AUTH,    /* req: AUTH of the token (the last argument) */
    RESP_OP_SELECT,  /* index */
    RESP_OP_QUIT,    /* req: QUIT */
    RESP_OP_CLIENT,  /* subcommand ... */
    RESP_OP_COMMAND, /* [COUNT | DOCS ... | INFO ...] */
    RESP_OP_INFO,    /* [section ...] */
    RESP_OP_DBSIZE,  /* req: LIST */
    RESP_OP_SCAN,    /* cursor [MATCH p] [COUNT n] [TYPE t] */
    RESP_OP_KEYS,    /* pattern */
    RESP_OP_NOPE,    /* a Redis command a Bloom filter server refuses (why) */
};

/* BF.INFO's selector; 0: every field. */
enum resp_info_field {
    RESP_INFO_ALL = 0,
    RESP_INFO_CAPACITY,
    RESP_INFO_SIZE,
    RESP_INFO_FILTERS,
    RESP_INFO_ITEMS,
    RESP_INFO_EXPANSION,
};

/*
 * What a parsed command asks for. req is the request to execute for the BF.* commands and
 * those noted in enum resp_op; its slices point into the parsed buffer, and for an array
 * command its keys are bulk strings (req.args_resp). why, when set, is the whole error
 * reply without its '-' ("ERR wrong number of arguments for 'bf.add' command"): send it
 * and execute nothing.
 */
struct resp_mapped {
    enum resp_op op;
    struct proto_request req;
    bool create;                /* BF.INSERT: create the filter with req.create first */
    bool nonscaling;            /* NONSCALING was given: req.create has growth=none */
    enum resp_info_field field; /* BF.INFO */
    const char *why;            /* static; NULL when the command may run */
    char why_buf[200];          /* why points here when it names the command */
};

/*
 * Maps cmd onto the command set: checks the arity and decodes BF.* arguments (numbers,
 * options, the filter name) into m. Unknown commands give RESP_OP_UNKNOWN with why set.
 * Argument decoding follows RedisBloom 2.4, including its error words.
 */
void resp_map(const struct resp_command *cmd, struct resp_mapped *m);

/* ---- replies ---- */

/* Each appends one RESP value. ver is 2 or 3 (RESP3 has maps, doubles and nulls). */
void resp_reply_simple(struct proto_buf *b, const char *s); /* "+OK" */
/* "-<err>": err is the whole text ("ERR not found"); \r and \n in it become spaces. */
void resp_reply_error(struct proto_buf *b, const char *err);
void resp_reply_errorf2(struct proto_buf *b, const char *lead, const char *text);
void resp_reply_int(struct proto_buf *b, int64_t v);
void resp_reply_bulk(struct proto_buf *b, const char *p, size_t n);
void resp_reply_bulk_str(struct proto_buf *b, const char *s);
/* "$n\r\n" alone: the caller sends the n bytes and their "\r\n" (a streamed body). */
void resp_reply_bulk_head(struct proto_buf *b, uint64_t n);
void resp_reply_null(struct proto_buf *b, int ver);               /* "$-1" or "_" */
void resp_reply_array(struct proto_buf *b, size_t n);             /* "*n", then n values */
void resp_reply_map(struct proto_buf *b, size_t npairs, int ver); /* "%n" or "*2n" */
void resp_reply_double(struct proto_buf *b, double d, int ver);   /* ",d" or a bulk string */
/* "*n" of :1/:0 for bits[i] true/false, or the other way round with invert. */
void resp_reply_bits(struct proto_buf *b, const bool *bits, size_t n, bool invert);

/*
 * How a command's result becomes its reply: the part of a command's identity the formatter
 * needs, also kept for a parked request. Errors are common to all shapes: NOT_FOUND "ERR
 * not found", CLIENT_ERROR/SERVER_ERROR "ERR <text>", READONLY "READONLY You can't write
 * against a read only replica.", a failed result "ERR out of memory".
 */
enum resp_shape {
    RESP_SHAPE_OK,            /* RESULT_OK/CREATED: +OK; EXISTS: -ERR item exists */
    RESP_SHAPE_BIT,           /* RESULT_BITS of a CHECK: the first bit as an integer (BF.EXISTS) */
    RESP_SHAPE_BITS,          /* RESULT_BITS of a CHECK: an array of integers (BF.MEXISTS) */
    RESP_SHAPE_NEW,           /* RESULT_BITS of a CHECKADD (1: was present): :1 if new (BF.ADD) */
    RESP_SHAPE_NEWS,          /* the same as an array (BF.MADD, BF.INSERT) */
    RESP_SHAPE_DELETED,       /* RESULT_DELETED: :1; NOT_FOUND: :0 (DEL of one name) */
    RESP_SHAPE_MISSING0,      /* RESULT_NOT_FOUND: :0 (BF.EXISTS of a missing filter) */
    RESP_SHAPE_MISSING_ZEROS, /* RESULT_NOT_FOUND: an array of n :0 (BF.MEXISTS) */
};

/* Appends the reply to r in shape (nkeys: the keys of a BITS command, for MISSING_ZEROS). */
void resp_format_result(struct proto_buf *b, enum resp_shape shape, size_t nkeys,
                        const struct result *r);

/* The error reply of a result that is not its command's success (NULL if r is one). */
void resp_reply_result_error(struct proto_buf *b, const struct result *r);

/* True if name matches the glob pattern (Redis's KEYS/SCAN MATCH: * ? [abc] [^a] [a-z] \x). */
bool resp_glob_match(const char *pat, size_t plen, const char *name, size_t nlen);

#endif
