/*
 * config.h - the daemon's settings and where they come from: defaults, then an INI file
 * (--config / BLOOMD_CONFIG), then BLOOMD_<OPTION> environment variables, then
 * command-line flags, each overriding the one before. Every value is validated; a bad
 * one stops start-up with a message naming the option and its source.
 */
#ifndef BLOOMD_SERVER_CONFIG_H
#define BLOOMD_SERVER_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "proto/request.h"

#define CONFIG_PATH_MAX 1024
#define CONFIG_MAX_TEMPLATES 32
#define CONFIG_TEMPLATE_OPTIONS 512
#define CONFIG_TOKEN_MAX 257 /* AUTH_TOKEN_MAX + NUL */
/* The config file: a regular file of at most CONFIG_FILE_MAX bytes, no NUL, and lines of
 * at most CONFIG_LINE_MAX bytes (what the INI reader holds; it would cut a longer one). */
#define CONFIG_FILE_MAX ((size_t)1 << 20)
#define CONFIG_LINE_MAX 199

/*
 * A filter template, from an INI section [filter <pattern>]: filters created on first
 * use (the memcached listener) whose name matches the glob pattern get these CREATE
 * options; the first matching section wins, in file order.
 */
struct config_template {
    char pattern[129];                     /* fnmatch(3) glob over filter names */
    char options[CONFIG_TEMPLATE_OPTIONS]; /* CREATE options as in the protocol */
    struct proto_create create;            /* them, parsed; create.kind is not set */
    char kind[32];                         /* kind=, if given ("" if not) */
};

struct config {
    char bind[256];                        /* listen address (numeric or host name) */
    unsigned port;                         /* 0 = any free port */
    unsigned http_port;                    /* HTTP metrics/probes/page, 0 = off */
    char http_bind[256];                   /* HTTP listen address, empty = same as bind */
    unsigned http_max_connections;         /* concurrent HTTP connections (then 503) */
    char data_dir[CONFIG_PATH_MAX];        /* snapshots live here; created if missing */
    char config[CONFIG_PATH_MAX];          /* the INI file read, empty if none */
    unsigned snapshot_interval;            /* seconds between snapshots, 0 = only on demand */
    unsigned max_connections;              /* concurrent clients */
    uint64_t max_line;                     /* bytes in one request line, terminator included */
    uint64_t max_memory;                   /* bytes of filter bits, 0 = sized by main.c (cgroup) */
    uint64_t max_output;                   /* unsent reply bytes before we stop reading a client */
    unsigned idle_timeout;                 /* seconds before an idle client is closed, 0 = never */
    int log_level;                         /* enum log_level */
    int log_format;                        /* enum log_format */
    char log_file[CONFIG_PATH_MAX];        /* empty = stderr */
    uint64_t default_capacity;             /* CREATE without capacity= */
    double default_error;                  /* CREATE without error= */
    int durability;                        /* enum durability (server/persist/durable.h) */
    unsigned memcache_port;                /* memcached-protocol listener, 0 = off */
    char memcache_default_filter[129];     /* filter of memcached keys without "<filter>:" */
    int memcache_flush_all;                /* 1: memcached flush_all clears every filter */
    unsigned redis_port;                   /* RESP listener (server/net/serve_redis.c), 0 = off */
    char auth_token[CONFIG_TOKEN_MAX];     /* clients must AUTH with it; empty = no auth */
    char auth_token_file[CONFIG_PATH_MAX]; /* read into auth_token by config_load */
    int protected_mode;                    /* 1: no token + non-loopback peer = refused */
    int http_auth_metrics;                 /* 1: /metrics and the probes need the token too */
    unsigned tls_port;                     /* TLS listener (bloomd protocol), 0 = off */
    char tls_cert_file[CONFIG_PATH_MAX];   /* PEM certificate chain */
    char tls_key_file[CONFIG_PATH_MAX];    /* PEM private key */
    char tls_ca_file[CONFIG_PATH_MAX];     /* PEM CAs: client certificates required; "" = not */
    int allow_readonly_data_dir;           /* 1: start on a data dir we cannot write (warned) */
    unsigned max_filters;                  /* filters in all: a CREATE past it is refused */
    unsigned memcache_max_auto_filters;    /* filters made on first use by memcached clients */
    char replica_of[300];                  /* "host:port" of the primary; "" = a primary */
    unsigned min_replica_acks;             /* replicas that must hold a change before its reply */
    unsigned replica_ack_timeout;          /* ms a held reply waits for them, then an error */
    uint64_t replication_backlog;          /* bytes of recent records kept for partial resyncs */
    int replica_tls;                       /* 1: the link to the primary is TLS */
    char replica_tls_ca_file[CONFIG_PATH_MAX];   /* PEM CAs the primary's certificate must chain
                                                    to; "" = the system's */
    int replica_tls_insecure;                    /* 1: TLS without verifying the primary */
    char replica_tls_cert_file[CONFIG_PATH_MAX]; /* PEM chain shown to a primary that asks
                                                    for a client certificate; "" = none */
    char replica_tls_key_file[CONFIG_PATH_MAX];  /* its PEM private key */
    char warnings[2048]; /* what config_load found suspect, for the log, one line per
                            warning ('\n' between); "" */
    struct config_template templates[CONFIG_MAX_TEMPLATES]; /* [filter <pattern>] sections */
    size_t ntemplates;
};

/* The first template whose pattern matches name (NUL-terminated), or NULL. */
const struct config_template *config_template_for(const struct config *c, const char *name);

/* What the command line asked for besides running the daemon. */
enum config_action {
    CONFIG_RUN = 0,
    CONFIG_HELP = 1,
    CONFIG_VERSION = 2,
    CONFIG_PING = 3,
};

enum config_err {
    CONFIG_OK = 0,
    CONFIG_EINVAL = -1, /* a bad option, value or file; the message says which */
};

/* Fills c with the built-in defaults. */
void config_defaults(struct config *c);

/*
 * Builds the configuration from defaults, the config file, the environment (getenv) and
 * argv (argv[0] is skipped), in that order of increasing precedence. Returns CONFIG_OK
 * and sets *action, or CONFIG_EINVAL with a one-line message in err (NUL-terminated,
 * naming the option and where the value came from).
 */
int config_load(struct config *c, int argc, char **argv, enum config_action *action, char *err,
                size_t errlen);

/* The --help text. */
const char *config_usage(void);

#endif
