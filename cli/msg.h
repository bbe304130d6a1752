/*
 * msg.h - what every part of bloomd-cli shares: the exit statuses scripts rely on, messages
 * on stderr prefixed "bloomd-cli: ", and a monotonic clock. Running out of memory ends the
 * program: a command-line tool has no better recovery.
 */
#ifndef BLOOMD_CLI_MSG_H
#define BLOOMD_CLI_MSG_H

#include <stddef.h>

enum cli_exit {
    CLI_EXIT_OK = 0,    /* done, no error reply */
    CLI_EXIT_ERROR = 1, /* an *ERROR reply, bad input or bad usage */
    CLI_EXIT_CONN = 2,  /* could not connect, or the connection was lost */
};

/* Prints "bloomd-cli: " and the message and a newline on stderr. */
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "bloomd-cli: out of memory" and exits CLI_EXIT_ERROR. */
_Noreturn void cli_oom(void);

/* malloc/realloc that never return NULL (cli_oom instead). */
void *cli_alloc(void *p, size_t n);

/* Seconds on the monotonic clock. */
double cli_now(void);

#endif
