/*
 * pipe.h - raw protocol lines from a file descriptor to the server, pipelined as fast as
 * the server takes them (--pipe, like redis-cli --pipe), or with every reply printed (a
 * script of commands on stdin). Replies are counted per request with the server's own
 * parser (cli/reply.h), so the end is known without a marker and nothing waits forever.
 */
#ifndef BLOOMD_CLI_PIPE_H
#define BLOOMD_CLI_PIPE_H

#include <stdbool.h>

#include "cli/conn.h"

struct pipe_opts {
    bool print; /* print every reply line on stdout (else only "replies: N, errors: M") */
};

/* Sends every line of fd and reads every reply. Returns the exit status (enum cli_exit). */
int pipe_run(struct cli_conn *c, int fd, const struct pipe_opts *o);

#endif
