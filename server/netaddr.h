/*
 * netaddr.h - socket addresses as text for log lines: "1.2.3.4:5678" or "[::1]:5678".
 */
#ifndef BLOOMD_SERVER_NETADDR_H
#define BLOOMD_SERVER_NETADDR_H

#include <stddef.h>
#include <sys/socket.h>

/* Room for any address netaddr_format writes. */
#define NETADDR_MAX 64

/* Formats sa (len bytes) as host:port into buf (always NUL-terminated); "?" if unknown. */
void netaddr_format(const struct sockaddr *sa, socklen_t len, char *buf, size_t n);

#endif
