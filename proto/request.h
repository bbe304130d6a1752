/*
 * request.h - the request model every wire protocol produces and the server executes:
 * a command, a filter name and its arguments as views into the protocol's input buffer.
 * The text protocol (proto.h) and the memcached protocol both fill it; server/exec/commands.c
 * reads it and never sees protocol syntax. Pure types and helpers, no I/O.
 */
#ifndef BLOOMD_PROTO_REQUEST_H
#define BLOOMD_PROTO_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A borrowed byte range; never NUL-terminated. */
struct proto_slice {
    const char *ptr;
    size_t len;
};

enum proto_cmd {
    PROTO_CMD_CREATE,
    PROTO_CMD_ADD,
    PROTO_CMD_CHECK,
    PROTO_CMD_CHECKADD,
    PROTO_CMD_UNION,
    PROTO_CMD_INTERSECT,
    PROTO_CMD_INFO,
    PROTO_CMD_LIST,
    PROTO_CMD_DROP,
    PROTO_CMD_CLEAR,
    PROTO_CMD_FLUSH,
    PROTO_CMD_STATS,
    PROTO_CMD_VERSION,
    PROTO_CMD_HELP,
    PROTO_CMD_QUIT,
    PROTO_CMD_AUTH,
    PROTO_CMD_DELETE,  /* expandable filters only */
    PROTO_CMD_DUMP,    /* the filter's snapshot bytes follow the reply line */
    PROTO_CMD_RESTORE, /* a data block of `data_len` bytes follows the line; last: STATS_NCMD */
    /* Replication, answered by the connection layer (never by the commands): */
    PROTO_CMD_ROLE,      /* ROLE */
    PROTO_CMD_REPLICAOF, /* REPLICAOF <host> <port> | REPLICAOF NO ONE: args, nargs 2 */
    PROTO_CMD_PSYNC,     /* PSYNC <replid>|? <offset>: a replica asks for the stream */
    PROTO_CMD_REPLCONF,  /* REPLCONF ACK <offset>: a replica's acknowledgement */
};

/* CREATE options; a bit in `set` says the option was given (else the server default). */
enum proto_create_opt {
    PROTO_OPT_CAPACITY = 1u << 0,
    PROTO_OPT_ERROR = 1u << 1,
    PROTO_OPT_GROWTH = 1u << 2,
    PROTO_OPT_SCALE = 1u << 3,
    PROTO_OPT_RATIO = 1u << 4,
    PROTO_OPT_WINDOW = 1u << 5,      /* window=<duration> (windowed kind) */
    PROTO_OPT_GENERATIONS = 1u << 6, /* generations=<g> (windowed kind) */
    PROTO_OPT_KIND = 1u << 7,        /* kind=<name> */
    PROTO_OPT_SEED = 1u << 8,        /* seed=<u64>: the keys' hash seed */
};

enum proto_growth {
    PROTO_GROWTH_EXPONENTIAL = 0,
    PROTO_GROWTH_LINEAR = 1,
    PROTO_GROWTH_NONE = 2, /* growth=none: one stage, full at its capacity (NONSCALING) */
};

struct proto_create {
    unsigned set;      /* enum proto_create_opt bits */
    uint64_t capacity; /* 1..PROTO_MAX_CAPACITY */
    double error;      /* in (0, 1) */
    enum proto_growth growth;
    double scale;            /* 1..64 */
    double ratio;            /* in (0, 1) */
    uint64_t window_ms;      /* PROTO_MIN_WINDOW_MS..PROTO_MAX_WINDOW_MS */
    uint32_t generations;    /* 2..16; only with window= */
    struct proto_slice kind; /* kind=<name>: a [a-z0-9_-] token; the server knows the kinds */
    uint64_t seed;           /* seed=<n> (decimal u64) */
};

/*
 * One parsed request. Slices point into the buffer given to proto_parse and are valid
 * while it is. `name` is the filter (the destination for UNION/INTERSECT, the optional
 * prefix for LIST and the optional filter for FLUSH; len 0 when absent). `args` is the
 * rest of the line after the name: keys for ADD/CHECK/CHECKADD, source filters for
 * UNION/INTERSECT, the options for CREATE (already decoded into `create`), and for AUTH the
 * token: every byte after the spaces that follow AUTH, spaces included (nargs 1, or 0 when
 * empty); otherwise walk it with
 * proto_next_arg(), or proto_next_keys() for keys. `nargs` counts them. Every arg was
 * validated by the parser. `key_skip` is the length of a prefix each key token carries and
 * that is not part of the key (the memcached protocol's "<filter>:"); 0 for the text
 * protocol.
 */
struct proto_request {
    enum proto_cmd cmd;
    struct proto_slice name;
    struct proto_slice args;
    size_t nargs;
    size_t key_skip;
    struct proto_create create; /* CREATE only */
    uint64_t data_len;          /* RESTORE: bytes of the data block after the line (and "\r\n") */
    bool replace;               /* RESTORE: "replace" was given */
    /* On an error: a specific static reason, and the offending token (len 0 if none). */
    const char *why;
    struct proto_slice bad;
    /* args holds RESP bulk strings ("$1\r\nk\r\n", proto/resp.h), validated by resp_parse,
     * instead of spaced tokens: keys may hold any byte. proto_next_keys() walks both. */
    bool args_resp;
};

#define PROTO_MAX_NAME 128

/* True if name is a valid filter name: 1..PROTO_MAX_NAME bytes of [A-Za-z0-9._-], not
 * starting with '.'. Such a name is also a safe file name. */
bool proto_name_valid(struct proto_slice name);
#define PROTO_MAX_CAPACITY ((uint64_t)1 << 40)             /* largest CREATE capacity= */
#define PROTO_MIN_WINDOW_MS ((uint64_t)1000)               /* window=1s */
#define PROTO_MAX_WINDOW_MS ((uint64_t)366 * 86400 * 1000) /* window=366d */
#define PROTO_MIN_GENERATIONS 2u
#define PROTO_MAX_GENERATIONS 16u

/*
 * Takes the next space-separated token from *rest into *arg and advances *rest.
 * Returns false when none is left.
 */
bool proto_next_arg(struct proto_slice *rest, struct proto_slice *arg);

/*
 * The next keys of *rest, at most max of them, into keys[] (each token without the
 * request's key_skip prefix), advancing *rest. Returns how many; 0 when none is left.
 * A batch at a time: the execute loops split and hash a batch before probing it.
 */
size_t proto_next_keys(const struct proto_request *req, struct proto_slice *rest,
                       struct proto_slice *keys, size_t max);

/* The upper-case name of a command ("CHECKADD"); the parser matches it in any case. */
const char *proto_cmd_name(enum proto_cmd cmd);

#endif
