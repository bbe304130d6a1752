/*
 * bulk.h - the bulk modes of bloomd-cli: add, check and dedup read one key per input line
 * and pipeline hundreds of keys per request with many requests in flight, streaming: memory
 * stays bounded by the requests in flight whatever the input size.
 */
#ifndef BLOOMD_CLI_BULK_H
#define BLOOMD_CLI_BULK_H

#include <stdbool.h>
#include <stddef.h>

#include "cli/conn.h"
#include "cli/keys.h"

enum bulk_mode {
    BULK_ADD,   /* ADD: count keys and new keys */
    BULK_CHECK, /* CHECK: 0/1 per key, or the lines of present/absent keys */
    BULK_DEDUP, /* CHECKADD: the lines whose key was new */
};

struct bulk_opts {
    enum bulk_mode mode;
    const char *filter;      /* a valid filter name */
    char *const *files;      /* nfiles paths ("-": stdin); none: stdin */
    size_t nfiles;           /* add takes several, check and dedup at most one */
    struct cli_keyspec keys; /* whole line, or --field/--delimiter */
    bool skip_bad;           /* skip and count bad keys instead of stopping */
    int only;                /* check: 0 all (0/1 lines), 1 --present, -1 --absent */
    const char *create;      /* CREATE options if the filter may be created, else NULL */
    unsigned batch;          /* keys per request */
    unsigned depth;          /* requests in flight */
    bool progress;           /* a progress line on stderr (a TTY) */
    bool quiet;              /* no summary on stderr */
};

/* Runs one bulk job on c. Returns the exit status (enum cli_exit); messages go to stderr. */
int bulk_run(struct cli_conn *c, const struct bulk_opts *o);

#endif
