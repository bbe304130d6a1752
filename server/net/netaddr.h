/*
 * netaddr.h - socket addresses as text for log lines: "1.2.3.4:5678" or "[::1]:5678".
 */
#ifndef BLOOMD_SERVER_NETADDR_H
#define BLOOMD_SERVER_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* Room for any address netaddr_format writes. */
#define NETADDR_MAX 64

/* Formats sa (len bytes) as host:port into buf (always NUL-terminated); "?" if unknown. */
void netaddr_format(const struct sockaddr *sa, socklen_t len, char *buf, size_t n);

/* True if sa is a loopback address: 127.0.0.0/8, ::1, or ::ffff:127.x.y.z. */
bool netaddr_is_loopback(const struct sockaddr *sa, socklen_t len);

#endif
