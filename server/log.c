/*
 * log.c - timestamped, levelled log lines to stderr or to a reopenable file.
 * A line is formatted into a stack buffer and written with a single fwrite under a
 * mutex, so lines from the event loop and the snapshot thread never interleave.
 */
#include "server/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_file;      /* NULL: stderr */
static char log_path[4096]; /* empty: stderr */
static enum log_level log_min = LOG_INFO;

static const char *const level_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

int log_level_parse(const char *s)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, names[i]) == 0)
            return i;
    }
    if (strcasecmp(s, "warning") == 0)
        return LOG_WARN;
    return -1;
}

int log_open(const char *path, enum log_level level)
{
    pthread_mutex_lock(&log_lock);
    log_min = level;
    if (log_file != NULL) {
        fclose(log_file);
        log_file = NULL;
    }
    log_path[0] = '\0';
    int rc = 0;
    if (path != NULL && path[0] != '\0') {
        FILE *f = fopen(path, "a");
        if (f == NULL) {
            rc = -1;
        } else {
            setvbuf(f, NULL, _IOLBF, 0);
            log_file = f;
            snprintf(log_path, sizeof(log_path), "%s", path);
        }
    }
    pthread_mutex_unlock(&log_lock);
    return rc;
}

int log_reopen(void)
{
    pthread_mutex_lock(&log_lock);
    int rc = 0;
    if (log_path[0] != '\0') {
        FILE *f = fopen(log_path, "a");
        if (f == NULL) {
            rc = -1; /* keep writing to the old file rather than losing lines */
        } else {
            setvbuf(f, NULL, _IOLBF, 0);
            fclose(log_file);
            log_file = f;
        }
    }
    pthread_mutex_unlock(&log_lock);
    return rc;
}

void log_close(void)
{
    pthread_mutex_lock(&log_lock);
    if (log_file != NULL)
        fclose(log_file);
    log_file = NULL;
    log_path[0] = '\0';
    pthread_mutex_unlock(&log_lock);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (level < log_min)
        return;
    int saved_errno = errno;
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof(line) - n, ".%03ldZ %s ", ts.tv_nsec / 1000000,
                          level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    n += (size_t)m;
    if (n > sizeof(line) - 2)
        n = sizeof(line) - 2; /* truncated: still end the line */
    line[n++] = '\n';
    pthread_mutex_lock(&log_lock);
    fwrite(line, 1, n, log_file != NULL ? log_file : stderr);
    pthread_mutex_unlock(&log_lock);
    errno = saved_errno;
}
