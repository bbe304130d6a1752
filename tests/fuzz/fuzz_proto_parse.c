/*
 * fuzz_proto_parse.c - libFuzzer harness: arbitrary bytes through proto_parse, request by
 * request, as a server loop would. Checks that every call makes progress or stops, never
 * claims more bytes than it was given, returns views inside the line it consumed that obey
 * the documented syntax, and that the error reply is always one clean line.
 * When the first byte is odd, it also sets a small line limit (1..128 bytes).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_check.h"

#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool inside(struct proto_slice s, const char *lo, const char *hi)
{
    return s.len == 0 || (s.ptr >= lo && s.ptr + s.len <= hi);
}

static bool is_name_byte(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

static void check_name(struct proto_slice s, bool prefix)
{
    CHECK(s.len <= PROTO_MAX_NAME);
    CHECK(prefix || (s.len >= 1 && s.ptr[0] != '.'));
    for (size_t i = 0; i < s.len; i++)
        CHECK(is_name_byte(s.ptr[i]));
}

static void check_request(const struct proto_request *req, const char *lo, const char *hi)
{
    CHECK(inside(req->name, lo, hi) && inside(req->args, lo, hi));
    switch (req->cmd) {
    case PROTO_CMD_LIST:
    case PROTO_CMD_FLUSH:
        if (req->name.len > 0)
            check_name(req->name, req->cmd == PROTO_CMD_LIST);
        CHECK(req->nargs == 0);
        return;
    case PROTO_CMD_STATS:
    case PROTO_CMD_VERSION:
    case PROTO_CMD_HELP:
    case PROTO_CMD_QUIT:
    case PROTO_CMD_ROLE:
        CHECK(req->name.len == 0 && req->nargs == 0);
        return;
    case PROTO_CMD_REPLICAOF: /* two words, the replication layer's to check */
    case PROTO_CMD_PSYNC:
    case PROTO_CMD_REPLCONF: {
        CHECK(req->name.len == 0 && req->nargs == 2);
        struct proto_slice rest = req->args, w;
        size_t words = 0;
        while (proto_next_arg(&rest, &w)) {
            CHECK(w.len > 0 && w.len <= PROTO_MAX_NAME && inside(w, lo, hi));
            words++;
        }
        CHECK(words == 2);
        return;
    }
    case PROTO_CMD_AUTH: /* an opaque token, spaces allowed, never the line terminator */
        CHECK(req->name.len == 0 && req->nargs == (req->args.len > 0));
        CHECK(req->args.len == 0 ||
              (req->args.ptr[0] != ' ' && memchr(req->args.ptr, '\n', req->args.len) == NULL));
        return;
    default:
        check_name(req->name, false);
        break;
    }
    struct proto_slice rest = req->args, arg;
    size_t n = 0;
    while (proto_next_arg(&rest, &arg)) {
        CHECK(arg.len > 0 && inside(arg, lo, hi));
        for (size_t i = 0; i < arg.len; i++)
            CHECK(arg.ptr[i] != ' ' && arg.ptr[i] != '\0' && arg.ptr[i] != '\t' &&
                  arg.ptr[i] != '\r' && arg.ptr[i] != '\n');
        if (req->cmd == PROTO_CMD_UNION || req->cmd == PROTO_CMD_INTERSECT)
            check_name(arg, false);
        n++;
    }
    CHECK(n == req->nargs);
    bool needs_args = req->cmd == PROTO_CMD_ADD || req->cmd == PROTO_CMD_CHECK ||
                      req->cmd == PROTO_CMD_CHECKADD || req->cmd == PROTO_CMD_UNION ||
                      req->cmd == PROTO_CMD_INTERSECT;
    CHECK(!needs_args || n >= 1);
    if (req->cmd == PROTO_CMD_CREATE) {
        const struct proto_create *c = &req->create;
        if (c->set & PROTO_OPT_CAPACITY)
            CHECK(c->capacity >= 1 && c->capacity <= PROTO_MAX_CAPACITY);
        if (c->set & PROTO_OPT_ERROR)
            CHECK(c->error > 0.0 && c->error < 1.0);
        if (c->set & PROTO_OPT_RATIO)
            CHECK(c->ratio > 0.0 && c->ratio < 1.0);
        if (c->set & PROTO_OPT_SCALE)
            CHECK(c->scale >= 1.0 && c->scale <= 64.0);
    } else if (req->cmd == PROTO_CMD_INFO || req->cmd == PROTO_CMD_DROP ||
               req->cmd == PROTO_CMD_CLEAR) {
        CHECK(n == 0);
    }
}

/* The reply to a parse error must be exactly one line. */
static void check_error_reply(struct proto_buf *b, int rc, const struct proto_request *req)
{
    proto_buf_reset(b);
    proto_reply_parse_error(b, rc, req);
    CHECK(!b->failed && b->len >= 2);
    CHECK(b->data[b->len - 2] == '\r' && b->data[b->len - 1] == '\n');
    for (size_t i = 0; i + 2 < b->len; i++)
        CHECK(b->data[i] >= 0x20 && b->data[i] < 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proto_limits lim = {0};
    if (size > 0 && (data[0] & 1))
        lim.max_line = (size_t)(data[0] >> 1) + 1;
    const char *buf = (const char *)data;
    struct proto_buf out = {0};
    size_t off = 0;
    while (off < size) {
        struct proto_request req;
        size_t consumed = (size_t)-1;
        int rc = proto_parse(buf + off, size - off, &lim, &req, &consumed);
        CHECK(consumed <= size - off);
        if (rc == PROTO_MORE || rc == PROTO_ERR_TOO_LONG) {
            CHECK(consumed == 0);
            if (rc == PROTO_ERR_TOO_LONG)
                check_error_reply(&out, rc, &req);
            break;
        }
        CHECK(consumed > 0 && buf[off + consumed - 1] == '\n');
        CHECK(lim.max_line == 0 || consumed <= lim.max_line);
        CHECK(memchr(buf + off, '\n', consumed - 1) == NULL);
        if (rc == PROTO_OK)
            check_request(&req, buf + off, buf + off + consumed);
        else if (rc < 0)
            check_error_reply(&out, rc, &req);
        else
            CHECK(rc == PROTO_BLANK);
        off += consumed;
    }
    proto_buf_free(&out);
    return 0;
}
