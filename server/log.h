/*
 * log.h - the daemon's log: one line per event, "<UTC timestamp> <LEVEL> <message>",
 * to stderr or to a file that SIGHUP reopens (for logrotate). Only the event-loop thread
 * and the snapshot thread write; each line is one fwrite under a lock, so lines never mix.
 */
#ifndef BLOOMD_SERVER_LOG_H
#define BLOOMD_SERVER_LOG_H

enum log_level {
    LOG_DEBUG = 0,
    LOG_INFO = 1,
    LOG_WARN = 2,
    LOG_ERROR = 3,
};

/* Parses "debug", "info", "warn" or "error". Returns the level, or -1 if unknown. */
int log_level_parse(const char *s);

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

#endif
