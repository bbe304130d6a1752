/*
 * reply.c - request shapes and reply lines. cli_request_shape runs the server's parser
 * with no line limit (the caller hands it one whole line), so a request that is refused
 * still maps to its one error line.
 */
#include "cli/reply.h"

#include <string.h>

#include "proto/number.h"
#include "proto/proto.h"

enum cli_shape cli_request_shape(const char *line, size_t len)
{
    struct proto_limits lim = {.max_line = len + 1};
    struct proto_request req;
    size_t used;
    int rc = proto_parse(line, len, &lim, &req, &used);
    if (rc == PROTO_BLANK)
        return CLI_SHAPE_NONE;
    if (rc != PROTO_OK)
        return CLI_SHAPE_LINE;
    switch (req.cmd) {
    case PROTO_CMD_INFO:
    case PROTO_CMD_LIST:
    case PROTO_CMD_STATS:
    case PROTO_CMD_HELP:
        return CLI_SHAPE_BLOCK;
    case PROTO_CMD_QUIT:
        return CLI_SHAPE_CLOSE;
    default:
        return CLI_SHAPE_LINE;
    }
}

static bool first_word(const char *line, size_t len, const char *w)
{
    size_t n = strlen(w);
    return len >= n && memcmp(line, w, n) == 0 && (len == n || line[n] == ' ');
}

bool cli_reply_is_error(const char *line, size_t len)
{
    return first_word(line, len, "ERROR") || first_word(line, len, "CLIENT_ERROR") ||
           first_word(line, len, "SERVER_ERROR");
}

bool cli_block_ends(const char *line, size_t len, bool first)
{
    if (len == 3 && memcmp(line, "END", 3) == 0)
        return true;
    return first && (cli_reply_is_error(line, len) || first_word(line, len, "NOT_FOUND"));
}

int cli_parse_added(const char *line, size_t len, uint64_t *n)
{
    if (len < 7 || memcmp(line, "ADDED ", 6) != 0)
        return -1;
    return proto_parse_u64(line + 6, len - 6, n) == 0 ? 0 : -1;
}

int cli_parse_bits(const char *line, size_t len, size_t nkeys, unsigned char *bits)
{
    if (nkeys == 0 || len != 2 * nkeys - 1)
        return -1;
    for (size_t i = 0; i < nkeys; i++) {
        char c = line[2 * i];
        if ((c != '0' && c != '1') || (i + 1 < nkeys && line[2 * i + 1] != ' '))
            return -1;
        bits[i] = (unsigned char)(c - '0');
    }
    return 0;
}
