/*
 * ping.h - the --ping health check: is a bloomd answering at host:port? Used by
 * container health checks, so it must finish within its deadline whatever the peer does.
 */
#ifndef BLOOMD_SERVER_PING_H
#define BLOOMD_SERVER_PING_H

#include <stddef.h>

/*
 * Connects to host:port (a wildcard bind address means loopback), sends VERSION and
 * waits for a "VERSION " reply, all within timeout_ms. Returns 0 if it came, else -1
 * with a reason in why (NUL-terminated).
 */
int ping_server(const char *host, unsigned port, int timeout_ms, char *why, size_t whylen);

#endif
