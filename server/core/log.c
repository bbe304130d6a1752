/*
 * log.c - timestamped, levelled log lines to stderr or to a reopenable file.
 * A line is formatted into a stack buffer and written with a single fwrite under a
 * mutex, so lines from the event loop and the snapshot thread never interleave.
 */
#include "server/core/log.h"

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
static enum log_format log_fmt = LOG_FORMAT_TEXT;

/* The one table of level names: as configured and in json lines, and in text lines. */
static const struct {
    const char *name;  /* "info" */
    const char *upper; /* "INFO" */
} log_levels[] = {
    [LOG_DEBUG] = {"debug", "DEBUG"},
    [LOG_INFO] = {"info", "INFO"},
    [LOG_WARN] = {"warn", "WARN"},
    [LOG_ERROR] = {"error", "ERROR"},
};

#define LOG_NLEVELS (sizeof(log_levels) / sizeof(log_levels[0]))

int log_format_parse(const char *s)
{
    if (strcasecmp(s, "text") == 0)
        return LOG_FORMAT_TEXT;
    if (strcasecmp(s, "json") == 0)
        return LOG_FORMAT_JSON;
    return -1;
}

void log_set_format(enum log_format format)
{
    log_fmt = format;
}

const char *log_level_name(enum log_level level)
{
    return (unsigned)level < LOG_NLEVELS ? log_levels[level].name : "?";
}

int log_level_parse(const char *s)
{
    for (size_t i = 0; i < LOG_NLEVELS; i++) {
        if (strcasecmp(s, log_levels[i].name) == 0)
            return (int)i;
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

/* Appends s as a JSON string body (no quotes) to line[*n..cap); stops short of cap. */
static void json_escape(char *line, size_t *n, size_t cap, const char *s, size_t len)
{
    static const char hexd[] = "0123456789abcdef";
    for (size_t i = 0; i < len && *n + 7 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            line[(*n)++] = '\\';
            line[(*n)++] = (char)c;
        } else if (c < 0x20 || c >= 0x7f) {
            /* Bytes, not characters: anything outside ASCII is shown as \u00XX. */
            line[(*n)++] = '\\';
            line[(*n)++] = 'u';
            line[(*n)++] = '0';
            line[(*n)++] = '0';
            line[(*n)++] = hexd[c >> 4];
            line[(*n)++] = hexd[c & 15];
        } else {
            line[(*n)++] = (char)c;
        }
    }
}

/* Appends printf output, clamped to the buffer. */
static void append(char *line, size_t *n, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *line, size_t *n, size_t cap, const char *fmt, ...)
{
    if (*n >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + *n, cap - *n, fmt, ap);
    va_end(ap);
    if (m > 0)
        *n = *n + (size_t)m < cap ? *n + (size_t)m : cap - 1;
}

static void log_vline(enum log_level level, const struct log_field *fields, size_t nf,
                      const char *fmt, va_list ap) __attribute__((format(printf, 4, 0)));
static void log_vline(enum log_level level, const struct log_field *fields, size_t nf,
                      const char *fmt, va_list ap)
{
    int saved_errno = errno;
    char msg[2048], line[4096];
    int m = vsnprintf(msg, sizeof msg, fmt, ap);
    size_t mlen = m < 0 ? 0 : (size_t)m < sizeof msg ? (size_t)m : sizeof msg - 1;
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    size_t w = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + w, sizeof when - w, ".%03ldZ", ts.tv_nsec / 1000000);
    size_t n = 0;
    const size_t cap = sizeof line - 2; /* room for the closing brace and the newline */
    if (log_fmt == LOG_FORMAT_JSON) {
        append(line, &n, cap, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"", when,
               log_level_name(level));
        json_escape(line, &n, cap, msg, mlen);
        append(line, &n, cap, "\"");
        for (size_t i = 0; i < nf; i++) {
            append(line, &n, cap, ",\"%s\":", fields[i].key);
            if (fields[i].type == 'u') {
                append(line, &n, cap, "%llu", (unsigned long long)fields[i].u);
            } else if (fields[i].type == 'd') {
                append(line, &n, cap, "%.6g", fields[i].d);
            } else {
                const char *s = fields[i].s != NULL ? fields[i].s : "";
                append(line, &n, cap, "\"");
                json_escape(line, &n, cap, s, strlen(s));
                append(line, &n, cap, "\"");
            }
        }
        line[n++] = '}';
    } else {
        append(line, &n, cap, "%s %s ", when, log_levels[level].upper);
        size_t room = cap - n;
        size_t take = mlen < room ? mlen : room; /* truncated: still end the line */
        memcpy(line + n, msg, take);
        n += take;
    }
    line[n++] = '\n';
    pthread_mutex_lock(&log_lock);
    fwrite(line, 1, n, log_file != NULL ? log_file : stderr);
    pthread_mutex_unlock(&log_lock);
    errno = saved_errno;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (level < log_min)
        return;
    va_list ap;
    va_start(ap, fmt);
    log_vline(level, NULL, 0, fmt, ap);
    va_end(ap);
}

void log_event(enum log_level level, const struct log_field *fields, size_t n, const char *fmt, ...)
{
    if (level < log_min)
        return;
    va_list ap;
    va_start(ap, fmt);
    log_vline(level, fields, n, fmt, ap);
    va_end(ap);
}
