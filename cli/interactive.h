/*
 * interactive.h - the prompt of bloomd-cli: line editing and history (libedit, in
 * ~/.bloomd_history), Tab completion of command and filter names, help from the server's
 * HELP, and reconnecting when the server has restarted.
 */
#ifndef BLOOMD_CLI_INTERACTIVE_H
#define BLOOMD_CLI_INTERACTIVE_H

#include "cli/conn.h"

/* Runs the prompt until end of input or quit. Returns the exit status (enum cli_exit). */
int interactive_run(const struct cli_conn_opts *o);

/*
 * Sends one request line and prints its reply (every line of a block), errors in red when
 * color. Returns CLI_EXIT_OK, CLI_EXIT_ERROR for an *ERROR reply or CLI_EXIT_CONN when the
 * connection failed (message printed). Shared with the one-shot mode.
 */
int interactive_command(struct cli_conn *c, const char *line, size_t len, bool color);

#endif
