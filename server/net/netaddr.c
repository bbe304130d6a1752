/*
 * netaddr.c - the one formatter of peer and listening addresses.
 */
#include "server/net/netaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>

void netaddr_format(const struct sockaddr *sa, socklen_t len, char *buf, size_t n)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *s6 = (const void *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
        snprintf(buf, n, "[%s]:%u", host, ntohs(s6->sin6_port));
    } else if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *s4 = (const void *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
        snprintf(buf, n, "%s:%u", host, ntohs(s4->sin_port));
    } else {
        snprintf(buf, n, "?");
    }
}

bool netaddr_is_loopback(const struct sockaddr *sa, socklen_t len)
{
    if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *s4 = (const void *)sa;
        return (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return false;
}
