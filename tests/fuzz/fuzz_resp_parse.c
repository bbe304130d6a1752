/*
 * fuzz_resp_parse.c - libFuzzer harness: arbitrary bytes through resp_parse, command by
 * command, as the RESP driver would (closing at the first framing error). Checks that every
 * call makes progress or stops, never claims more bytes than it was given, returns argument
 * slices inside the bytes it consumed, that the mapped request's keys walk to exactly its
 * nargs inside the frame, and that every formatter ends its reply in CRLF.
 * The first byte picks limits: bit 0 a small frame limit, bit 1 a small array limit.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_check.h"

#include "proto/resp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool inside(struct proto_slice s, const char *lo, const char *hi)
{
    return s.len == 0 || (s.ptr >= lo && s.ptr + s.len <= hi);
}

static void check_mapped(const struct resp_mapped *m, const char *lo, const char *hi,
                         struct proto_buf *out)
{
    if (m->why != NULL) {
        resp_reply_error(out, m->why);
        return;
    }
    CHECK(inside(m->req.name, lo, hi));
    CHECK(inside(m->req.args, lo, hi));
    if (m->req.cmd != PROTO_CMD_CHECK && m->req.cmd != PROTO_CMD_CHECKADD)
        return;
    CHECK(proto_name_valid(m->req.name));
    struct proto_slice rest = m->req.args, keys[5];
    size_t n = 0, got;
    while ((got = proto_next_keys(&m->req, &rest, keys, 5)) > 0) {
        for (size_t i = 0; i < got; i++)
            CHECK(inside(keys[i], lo, hi));
        n += got;
        CHECK(n <= m->req.nargs);
    }
    CHECK(n == m->req.nargs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    struct resp_limits lim = {.max_frame = (data[0] & 1) ? 64 : 0,
                              .max_args = (data[0] & 2) ? 4 : 0};
    const char *buf = (const char *)data + 1;
    size_t len = size - 1, off = 0;
    struct proto_buf out = {0};
    while (off < len) {
        struct resp_command cmd;
        size_t used = 0;
        int st = resp_parse(buf + off, len - off, &lim, &cmd, &used);
        CHECK(used <= len - off);
        if (st == RESP_MORE) {
            CHECK(used == 0);
            break;
        }
        if (st < 0) {
            CHECK(cmd.why != NULL && used == 0);
            resp_reply_errorf2(&out, "ERR Protocol error: ", cmd.why);
            break;
        }
        CHECK(used > 0);
        if (st == RESP_OK) {
            const char *lo = buf + off, *hi = buf + off + used;
            CHECK(cmd.argc > 0);
            for (size_t i = 0; i < cmd.argc && i < RESP_MAX_HEAD; i++)
                CHECK(inside(cmd.argv[i], lo, hi));
            struct resp_mapped m;
            resp_map(&cmd, &m);
            check_mapped(&m, lo, hi, &out);
            resp_reply_bulk(&out, cmd.argv[0].ptr, cmd.argv[0].len);
        }
        off += used;
    }
    CHECK(out.failed || out.len == 0 ||
          (out.len >= 2 && memcmp(out.data + out.len - 2, "\r\n", 2) == 0));
    proto_buf_free(&out);
    return 0;
}
