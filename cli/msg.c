/*
 * msg.c - stderr messages, the allocation wrapper and the clock of bloomd-cli.
 */
#include "cli/msg.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void cli_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bloomd-cli: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

_Noreturn void cli_oom(void)
{
    fputs("bloomd-cli: out of memory\n", stderr);
    exit(CLI_EXIT_ERROR);
}

void *cli_alloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (q == NULL)
        cli_oom();
    return q;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
