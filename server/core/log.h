/*
 * log.h - the daemon's log: one line per event, "<UTC timestamp> <LEVEL> <message>", or
 * with log_format json one object per line, {"ts", "level", "msg", and the event's fields
 * (filter, bytes, duration_s, path, error, ...)}, to stderr or to a file that SIGHUP
 * reopens (for logrotate). Only the event-loop thread
 * and the snapshot thread write; each line is one fwrite under a lock, so lines never mix.
 */
#ifndef BLOOMD_SERVER_LOG_H
#define BLOOMD_SERVER_LOG_H

#include <stddef.h>
#include <stdint.h>

enum log_level {
    LOG_DEBUG = 0,
    LOG_INFO = 1,
    LOG_WARN = 2,
    LOG_ERROR = 3,
};

enum log_format {
    LOG_FORMAT_TEXT = 0,
    LOG_FORMAT_JSON = 1,
};

/* Parses "text" or "json". Returns the format, or -1 if unknown. */
int log_format_parse(const char *s);

/* Chooses the line format (text until called). Call before any other thread logs. */
void log_set_format(enum log_format format);

/* Parses "debug", "info", "warn" (or "warning") or "error", any case. Returns the level,
 * or -1 if unknown. */
int log_level_parse(const char *s);

/* The level's name as log_level_parse takes it ("info"); static. */
const char *log_level_name(enum log_level level);

/*
 * Sends the log to path (appending), or to stderr when path is NULL or empty, and keeps
 * lines at or above level. Returns 0, or -1 with errno set if the file cannot be opened
 * (the log then stays on stderr).
 */
int log_open(const char *path, enum log_level level);

/* Reopens the log file (after a rotation); does nothing when logging to stderr. */
int log_reopen(void);

/* Closes the log file; later lines go to stderr. */
void log_close(void);

/* Writes one line if level is enabled; a trailing newline is added. */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One field of an event: a JSON member in json lines; text lines show only the message. */
struct log_field {
    const char *key; /* static name: "filter", "bytes", "duration_s", "path", "error" */
    char type;       /* 's' string, 'u' unsigned, 'd' double */
    const char *s;
    uint64_t u;
    double d;
};

#define LOG_STR(k, v) ((struct log_field){.key = (k), .type = 's', .s = (v)})
#define LOG_U64(k, v) ((struct log_field){.key = (k), .type = 'u', .u = (v)})
#define LOG_DBL(k, v) ((struct log_field){.key = (k), .type = 'd', .d = (v)})

/* log_msg with the event's fields (n of them). */
void log_event(enum log_level level, const struct log_field *fields, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
