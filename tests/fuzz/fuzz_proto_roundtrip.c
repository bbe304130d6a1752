/*
 * fuzz_proto_roundtrip.c - libFuzzer harness: builds a valid request from the fuzz bytes
 * (random command case, spacing and terminator; names and keys drawn from the bytes),
 * writes it as a line, parses it back and checks every field survived. Also formats a
 * double from the bytes as a STAT reply and checks it reads back as the same value.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_check.h"

#include "proto/number.h"
#include "proto/proto.h"

#define RT_MAX_ARGS 64
#define RT_LINE_CAP 16384

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct source {
    const uint8_t *p;
    size_t left;
};

static uint8_t take(struct source *s)
{
    if (s->left == 0)
        return 0;
    s->left--;
    return *s->p++;
}

struct line {
    char text[RT_LINE_CAP];
    size_t len;
};

static void put(struct line *l, const char *s, size_t n)
{
    CHECK(l->len + n <= sizeof(l->text));
    memcpy(l->text + l->len, s, n);
    l->len += n;
}

static void put_spaces(struct line *l, struct source *s)
{
    size_t n = 1 + (take(s) & 3u) / 3u * 2u; /* mostly one space, sometimes three */
    put(l, "   ", n);
}

/* A valid filter name of 1..16 bytes, never starting with '.'. */
static size_t make_name(struct source *s, char *out)
{
    static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
    size_t n = 1 + take(s) % 16;
    for (size_t i = 0; i < n; i++)
        out[i] = chars[take(s) % (i == 0 ? 62 : sizeof(chars) - 1)];
    return n;
}

/* A valid key of 1..40 arbitrary bytes; forbidden bytes are replaced. */
static size_t make_key(struct source *s, char *out)
{
    size_t n = 1 + take(s) % 40;
    for (size_t i = 0; i < n; i++) {
        char c = (char)take(s);
        out[i] = (c == ' ' || c == '\0' || c == '\t' || c == '\r' || c == '\n') ? 'k' : c;
    }
    return n;
}

struct expect {
    enum proto_cmd cmd;
    char name[PROTO_MAX_NAME];
    size_t name_len;
    char args[RT_MAX_ARGS][64];
    size_t arg_len[RT_MAX_ARGS];
    size_t nargs;
    struct proto_create create;
    uint64_t data_len; /* RESTORE */
    bool replace;      /* RESTORE */
};

static void put_cmd(struct line *l, struct source *s, enum proto_cmd cmd)
{
    const char *name = proto_cmd_name(cmd);
    for (size_t i = 0; name[i] != '\0'; i++) {
        char c = name[i];
        if (take(s) & 1)
            c = (char)(c - 'A' + 'a');
        put(l, &c, 1);
    }
}

static void put_create_options(struct line *l, struct source *s, struct expect *e)
{
    unsigned want = take(s) & 31u;
    char tmp[64];
    for (unsigned bit = 1; bit <= PROTO_OPT_RATIO; bit <<= 1) {
        if (!(want & bit))
            continue;
        put_spaces(l, s);
        int n = 0;
        uint32_t r = (uint32_t)take(s) << 16 | (uint32_t)take(s) << 8 | take(s);
        double frac = ((double)r + 1.0) / 16777218.0; /* in (0, 1) */
        switch (bit) {
        case PROTO_OPT_CAPACITY:
            e->create.capacity = 1 + (((uint64_t)r << 17) | take(s)) % PROTO_MAX_CAPACITY;
            n = snprintf(tmp, sizeof(tmp), "capacity=%llu", (unsigned long long)e->create.capacity);
            break;
        case PROTO_OPT_ERROR:
            e->create.error = frac;
            n = snprintf(tmp, sizeof(tmp), "error=%.17g", frac);
            break;
        case PROTO_OPT_GROWTH:
            e->create.growth = (take(s) & 1) ? PROTO_GROWTH_LINEAR : PROTO_GROWTH_EXPONENTIAL;
            n = snprintf(tmp, sizeof(tmp), "growth=%s",
                         e->create.growth == PROTO_GROWTH_LINEAR ? "linear" : "exponential");
            break;
        case PROTO_OPT_SCALE:
            e->create.scale = 1.0 + frac * 63.0; /* the accepted range, [1, 64] */
            n = snprintf(tmp, sizeof(tmp), "scale=%.17g", e->create.scale);
            break;
        default:
            e->create.ratio = frac;
            n = snprintf(tmp, sizeof(tmp), "ratio=%.17e", frac);
            break;
        }
        CHECK(n > 0 && (size_t)n < sizeof(tmp));
        put(l, tmp, (size_t)n);
        e->create.set |= bit;
        e->nargs++;
    }
}

static void build(struct source *s, struct line *l, struct expect *e)
{
    memset(e, 0, sizeof(*e));
    e->cmd = (enum proto_cmd)(take(s) % (PROTO_CMD_RESTORE + 1));
    if (take(s) & 1)
        put(l, "  ", 2);
    put_cmd(l, s, e->cmd);
    bool optional_name = e->cmd == PROTO_CMD_LIST || e->cmd == PROTO_CMD_FLUSH;
    bool no_name = e->cmd == PROTO_CMD_STATS || e->cmd == PROTO_CMD_VERSION ||
                   e->cmd == PROTO_CMD_HELP || e->cmd == PROTO_CMD_QUIT || e->cmd == PROTO_CMD_AUTH;
    if (!no_name && (!optional_name || (take(s) & 1))) {
        put_spaces(l, s);
        e->name_len = make_name(s, e->name);
        put(l, e->name, e->name_len);
    }
    switch (e->cmd) {
    case PROTO_CMD_ADD:
    case PROTO_CMD_CHECK:
    case PROTO_CMD_CHECKADD:
    case PROTO_CMD_DELETE:
    case PROTO_CMD_UNION:
    case PROTO_CMD_INTERSECT: {
        bool names = e->cmd == PROTO_CMD_UNION || e->cmd == PROTO_CMD_INTERSECT;
        e->nargs = 1 + take(s) % RT_MAX_ARGS;
        for (size_t i = 0; i < e->nargs; i++) {
            put_spaces(l, s);
            e->arg_len[i] = names ? make_name(s, e->args[i]) : make_key(s, e->args[i]);
            put(l, e->args[i], e->arg_len[i]);
        }
        break;
    }
    case PROTO_CMD_CREATE:
        put_create_options(l, s, e);
        break;
    case PROTO_CMD_RESTORE: { /* <nbytes> [replace]: the block is not the parser's */
        char num[24];
        for (int i = 0; i < 8; i++)
            e->data_len = e->data_len << 8 | take(s);
        int n = snprintf(num, sizeof num, "%llu", (unsigned long long)e->data_len);
        put_spaces(l, s);
        put(l, num, (size_t)n);
        if (take(s) & 1) {
            put_spaces(l, s);
            put(l, take(s) & 1 ? "replace" : "REPLACE", 7);
            e->replace = true;
        }
        break;
    }
    case PROTO_CMD_AUTH: /* the token runs to the line end: no trailing spaces after it */
        put_spaces(l, s);
        e->nargs = 1;
        e->arg_len[0] = make_key(s, e->args[0]);
        put(l, e->args[0], e->arg_len[0]);
        break;
    default:
        break;
    }
    if (e->cmd != PROTO_CMD_AUTH && (take(s) & 1))
        put(l, "  ", 2);
    if (take(s) & 1)
        put(l, "\r\n", 2);
    else
        put(l, "\n", 1);
}

static void check_parsed(const struct line *l, const struct expect *e)
{
    struct proto_request req;
    size_t consumed = 0;
    int rc = proto_parse(l->text, l->len, NULL, &req, &consumed);
    CHECK(rc == PROTO_OK);
    CHECK(consumed == l->len);
    CHECK(req.cmd == e->cmd);
    CHECK(req.name.len == e->name_len);
    CHECK(e->name_len == 0 || memcmp(req.name.ptr, e->name, e->name_len) == 0);
    CHECK(req.nargs == e->nargs);
    CHECK(e->cmd != PROTO_CMD_RESTORE ||
          (req.data_len == e->data_len && req.replace == e->replace));
    if (e->cmd == PROTO_CMD_CREATE) {
        const struct proto_create *c = &req.create;
        CHECK(c->set == e->create.set);
        CHECK(!(c->set & PROTO_OPT_CAPACITY) || c->capacity == e->create.capacity);
        CHECK(!(c->set & PROTO_OPT_ERROR) || c->error == e->create.error);
        CHECK(!(c->set & PROTO_OPT_GROWTH) || c->growth == e->create.growth);
        CHECK(!(c->set & PROTO_OPT_SCALE) || c->scale == e->create.scale);
        CHECK(!(c->set & PROTO_OPT_RATIO) || c->ratio == e->create.ratio);
        return;
    }
    struct proto_slice rest = req.args, arg;
    for (size_t i = 0; i < e->nargs; i++) {
        CHECK(proto_next_arg(&rest, &arg));
        CHECK(arg.len == e->arg_len[i] && memcmp(arg.ptr, e->args[i], arg.len) == 0);
    }
    CHECK(!proto_next_arg(&rest, &arg));
}

/* A finite double from 8 bytes, formatted as a STAT reply and read back. */
static void check_double(struct source *s)
{
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++)
        bits = bits << 8 | take(s);
    double v;
    memcpy(&v, &bits, sizeof(v));
    if (v - v != 0.0)
        return; /* nan or inf: not a protocol number */
    struct proto_buf b = {0};
    proto_reply_stat_double(&b, "v", v);
    CHECK(!b.failed && b.len > 9);
    CHECK(memcmp(b.data, "STAT v ", 7) == 0);
    double back = 0;
    CHECK(proto_parse_double(b.data + 7, b.len - 9, &back) == 0);
    CHECK(back == v);
    proto_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct source s = {data, size};
    static struct line l;
    static struct expect e;
    l.len = 0;
    build(&s, &l, &e);
    check_parsed(&l, &e);
    check_double(&s);
    return 0;
}
