/*
 * ping.c - a tiny blocking-free client for --ping: non-blocking connect and poll() with
 * one overall deadline, so a hung or silent server fails the check on time.
 */
#include "server/ping.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until the deadline. Returns true if they came. */
static bool wait_for(int fd, short events, long long deadline)
{
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = fd, .events = events};
        int rc = poll(&p, 1, (int)left);
        if (rc > 0)
            return true;
        if (rc < 0 && errno != EINTR)
            return false;
    }
}

int ping_server(const char *host, unsigned port, int timeout_ms, char *why, size_t whylen)
{
    long long deadline = now_ms() + timeout_ms;
    if (strcmp(host, "0.0.0.0") == 0 || host[0] == '\0')
        host = "127.0.0.1";
    else if (strcmp(host, "::") == 0)
        host = "::1";
    char service[16];
    snprintf(service, sizeof(service), "%u", port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res;
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        snprintf(why, whylen, "%s: %s", host, gai_strerror(rc));
        return -1;
    }
    int fd = socket(res->ai_family, res->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int result = -1;
    snprintf(why, whylen, "no VERSION reply from %s:%u within %d ms", host, port, timeout_ms);
    if (fd < 0) {
        snprintf(why, whylen, "socket: %s", strerror(errno));
        goto done;
    }
    if (connect(fd, res->ai_addr, res->ai_addrlen) != 0 && errno != EINPROGRESS) {
        snprintf(why, whylen, "connect %s:%u: %s", host, port, strerror(errno));
        goto done;
    }
    if (!wait_for(fd, POLLOUT, deadline))
        goto done;
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
        snprintf(why, whylen, "connect %s:%u: %s", host, port, strerror(err));
        goto done;
    }
    static const char req[] = "VERSION\r\n";
    if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof(req) - 1)) {
        snprintf(why, whylen, "send: %s", strerror(errno));
        goto done;
    }
    char buf[256];
    size_t got = 0;
    while (got < sizeof(buf) - 1 && memchr(buf, '\n', got) == NULL) {
        if (!wait_for(fd, POLLIN, deadline))
            goto done;
        ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR)))
            goto done;
        if (n > 0)
            got += (size_t)n;
    }
    if (got >= 8 && memcmp(buf, "VERSION ", 8) == 0)
        result = 0;
done:
    if (fd >= 0)
        close(fd);
    freeaddrinfo(res);
    return result;
}
