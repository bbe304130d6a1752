/*
 * fuzz_memcache_parse.c - libFuzzer harness: arbitrary bytes through mc_parse, request by
 * request, as a server loop would (swallowing after an oversized block). Checks that every
 * call makes progress or stops, never claims more bytes than it was given, returns slices
 * inside the bytes it consumed, valid filter names and keys, runs of a get that add up to
 * its keys, and replies that are whole \r\n-terminated lines.
 * The first byte picks limits: bit 0 a small line limit, bit 1 a small data limit, bit 2
 * no default filter.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_check.h"

#include "proto/memcache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool inside(struct proto_slice s, const char *lo, const char *hi)
{
    return s.len == 0 || (s.ptr >= lo && s.ptr + s.len <= hi);
}

/* A memcached key as the parser promises it: 1..250 bytes, no control byte or space. */
static void check_token(struct proto_slice t)
{
    CHECK(t.len >= 1 && t.len <= MC_MAX_KEY);
    for (size_t i = 0; i < t.len; i++) {
        unsigned char c = (unsigned char)t.ptr[i];
        CHECK(c > 0x20 && c != 0x7f);
    }
}

/* The keys of one request or run: each inside, prefixed by "<name>:" when key_skip > 0. */
static size_t check_keys(const struct proto_request *r, const char *lo, const char *hi)
{
    struct proto_slice rest = r->args, tok;
    size_t n = 0;
    CHECK(inside(r->args, lo, hi));
    while (proto_next_arg(&rest, &tok)) {
        check_token(tok);
        if (r->key_skip > 0) {
            CHECK(tok.len > r->key_skip && tok.ptr[r->key_skip - 1] == ':');
            CHECK(r->key_skip == r->name.len + 1);
            CHECK(memcmp(tok.ptr, r->name.ptr, r->name.len) == 0);
        } else {
            CHECK(memchr(tok.ptr, ':', tok.len) == NULL);
        }
        n++;
    }
    rest = r->args;
    size_t m = 0;
    struct proto_slice keys[3];
    size_t got;
    while ((got = proto_next_keys(r, &rest, keys, 3)) > 0) {
        for (size_t i = 0; i < got; i++)
            CHECK(keys[i].len >= 1);
        m += got;
    }
    CHECK(m == n && n == r->nargs);
    return n;
}

/* The reply bytes appended since mark: whole lines, each ending in \r\n. */
static void check_lines(const struct proto_buf *b, size_t mark)
{
    CHECK(!b->failed);
    if (b->len == mark)
        return;
    CHECK(b->len >= mark + 2 && b->data[b->len - 2] == '\r' && b->data[b->len - 1] == '\n');
}

/* Formats a get run by run with bits taken from the input, and checks the VALUE lines. */
static void check_get(const struct mc_request *m, const char *lo, const char *hi,
                      struct proto_buf *out, struct result *r, uint8_t seed)
{
    struct proto_slice rest = m->req.args;
    struct proto_request g;
    struct mc_get get;
    size_t total = 0, present = 0;
    proto_buf_reset(out);
    mc_get_begin(&get, out);
    while (mc_next_group(m, &rest, &g)) {
        CHECK(proto_name_valid(g.name));
        CHECK(g.cmd == PROTO_CMD_CHECK && g.nargs >= 1);
        CHECK(check_keys(&g, lo, hi) == g.nargs);
        total += g.nargs;
        result_reset(r);
        r->status = RESULT_BITS;
        bool *bits = result_add_bits(r, g.nargs);
        CHECK(bits != NULL);
        for (size_t i = 0; i < g.nargs; i++) {
            bits[i] = ((seed >> (i % 8)) & 1) != 0;
            present += bits[i];
        }
        CHECK(mc_get_group(out, &get, m, &g, r));
    }
    mc_get_end(out, &get);
    CHECK(total == m->req.nargs);
    check_lines(out, 0);
    /* Two lines per present key, then END. */
    size_t lines = 0;
    for (size_t i = 0; i < out->len; i++)
        lines += out->data[i] == '\n';
    CHECK(lines == 2 * present + 1);
}

static void check_request(const struct mc_request *m, const char *lo, const char *hi,
                          struct proto_buf *out, struct result *r, uint8_t seed)
{
    CHECK(inside(m->req.name, lo, hi) || m->req.name.ptr == m->default_filter.ptr);
    switch (m->cmd) {
    case MC_CMD_ADD:
    case MC_CMD_SET:
        CHECK(m->req.cmd == (m->cmd == MC_CMD_ADD ? PROTO_CMD_CHECKADD : PROTO_CMD_ADD));
        CHECK(proto_name_valid(m->req.name) && m->exec);
        CHECK(check_keys(&m->req, lo, hi) == 1);
        CHECK(m->data_len <= MC_DEFAULT_MAX_DATA);
        result_reset(r);
        r->status = RESULT_BITS;
        bool *bit = result_add_bits(r, 1);
        CHECK(bit != NULL);
        *bit = seed & 1;
        break;
    case MC_CMD_AUTH:
        CHECK(m->req.cmd == PROTO_CMD_AUTH && m->exec && inside(m->req.args, lo, hi));
        result_reset(r);
        result_set(r, seed & 1 ? RESULT_OK : RESULT_CLIENT_ERROR, seed & 1 ? NULL : "no");
        break;
    case MC_CMD_GET:
        CHECK(m->req.cmd == PROTO_CMD_CHECK && m->req.nargs >= 1 && !m->noreply);
        check_get(m, lo, hi, out, r, seed);
        return;
    default:
        CHECK(m->req.nargs == 0 && m->req.name.len == 0);
        result_reset(r);
        if (m->cmd == MC_CMD_VERSION)
            result_set(r, RESULT_VERSION, "0.1.0");
        break;
    }
    proto_buf_reset(out);
    mc_format_result(out, m, r);
    check_lines(out, 0);
    CHECK(!m->noreply || out->len == 0);
}

static void check_error_reply(struct proto_buf *b, int rc, const struct mc_request *m)
{
    proto_buf_reset(b);
    mc_reply_parse_error(b, rc, m);
    if (m->noreply && rc != MC_ERR_TOO_LONG) {
        CHECK(b->len == 0);
        return;
    }
    CHECK(!b->failed && b->len >= 2);
    CHECK(b->data[b->len - 2] == '\r' && b->data[b->len - 1] == '\n');
    for (size_t i = 0; i + 2 < b->len; i++)
        CHECK(b->data[i] >= 0x20 && b->data[i] < 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mc_options opt = {{"default", 7}, 0, 0, false};
    uint8_t mode = size > 0 ? data[0] : 0;
    if (mode & 1)
        opt.max_line = (size_t)(mode >> 3) + 1;
    if (mode & 2)
        opt.max_data = (size_t)(mode >> 4);
    if (mode & 4)
        opt.default_filter.len = 0;
    opt.auth = (mode & 0x80) != 0; /* not authenticated: a set parses as MC_CMD_AUTH */
    const char *buf = (const char *)data;
    struct proto_buf out = {0};
    struct result r;
    result_init(&r);
    size_t off = 0;
    while (off < size) {
        struct mc_request m;
        size_t consumed = (size_t)-1;
        int rc = mc_parse(buf + off, size - off, &opt, &m, &consumed);
        CHECK(consumed <= size - off);
        if (rc == MC_MORE || rc == MC_ERR_TOO_LONG) {
            CHECK(consumed == 0);
            if (rc == MC_MORE)
                CHECK(m.need == 0 || m.need > size - off);
            else
                check_error_reply(&out, rc, &m);
            break;
        }
        CHECK(consumed > 0);
        const char *nl = memchr(buf + off, '\n', consumed);
        CHECK(nl != NULL);
        size_t line_len = (size_t)(nl - (buf + off)) + 1;
        CHECK(opt.max_line == 0 || line_len <= opt.max_line);
        CHECK(consumed == line_len || consumed == line_len + m.data_len + 2);
        if (rc == MC_OK)
            check_request(&m, buf + off, buf + off + consumed, &out, &r, data[off]);
        else
            check_error_reply(&out, rc, &m);
        CHECK(m.swallow == 0 || rc == MC_ERR_TOO_LARGE);
        off += consumed;
        off += m.swallow < size - off ? m.swallow : size - off;
    }
    proto_buf_free(&out);
    result_free(&r);
    return 0;
}
