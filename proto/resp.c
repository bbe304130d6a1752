/*
 * resp.c - RESP over bloomd's request model. The workload is Redis clients running
 * RedisBloom's BF.* commands: BF.ADD/BF.EXISTS one key at a time, pipelined, and BF.MADD
 * with tens to hundreds of items. The parser keeps no state: a command is returned only
 * once its whole frame is in, every declared length is checked against the limits as soon
 * as it is read, and the items stay in their RESP encoding (resp_tail) until the execute
 * loop walks them (resp_next_keys), so a BF.MADD is scanned twice and copied never.
 */
#include "proto/resp.h"

#include <string.h>

#include "proto/number.h"

/* ---- parser ---- */

static int fail(struct resp_command *cmd, int st, const char *why)
{
    cmd->why = why;
    return st;
}

/*
 * The integer of a RESP header line at buf[*pos..len), up to its CRLF: at most 18 digits
 * after an optional '-', so a header is never longer than 22 bytes. Returns RESP_OK with
 * *pos past the CRLF, RESP_MORE, or RESP_ERR_PROTOCOL.
 */
static int read_int(const char *buf, size_t len, size_t *pos, int64_t *out)
{
    size_t p = *pos, digits = 0;
    bool neg = false;
    int64_t v = 0;
    if (p < len && buf[p] == '-') {
        neg = true;
        p++;
    }
    for (; p < len && buf[p] >= '0' && buf[p] <= '9'; p++) {
        if (++digits > 18)
            return RESP_ERR_PROTOCOL;
        v = v * 10 + (buf[p] - '0');
    }
    if (p >= len)
        return RESP_MORE;
    if (buf[p] != '\r' || digits == 0)
        return RESP_ERR_PROTOCOL;
    if (p + 1 >= len)
        return RESP_MORE;
    if (buf[p + 1] != '\n')
        return RESP_ERR_PROTOCOL;
    *pos = p + 2;
    *out = neg ? -v : v;
    return RESP_OK;
}

#define MIN_BULK 6 /* "$0\r\n\r\n": the least an element takes */

/*
 * The common bulk header, "$" and 1 to 5 digits then CRLF, read with no bounds check per
 * byte: p[0..8) must be readable and p[0] == '$'. Sets *b to the length and *skip to the
 * header's bytes; false for anything else (the careful path then decides).
 */
static inline bool short_bulk(const char *p, size_t *b, size_t *skip)
{
    size_t v = 0, i = 1;
    for (; i < 6; i++) {
        unsigned d = (unsigned)(unsigned char)p[i] - '0';
        if (d > 9)
            break;
        v = v * 10 + d;
    }
    if (i == 1 || p[i] != '\r' || p[i + 1] != '\n')
        return false;
    *b = v;
    *skip = i + 2;
    return true;
}

static int parse_array(const char *buf, size_t len, size_t max_frame, size_t max_args,
                       struct resp_command *cmd, size_t *consumed)
{
    size_t pos = 1;
    int64_t n;
    int st = read_int(buf, len, &pos, &n);
    if (st == RESP_MORE)
        return RESP_MORE;
    if (st != RESP_OK)
        return fail(cmd, RESP_ERR_PROTOCOL, "invalid multibulk length");
    if (n <= 0) { /* Redis skips an empty or null array */
        *consumed = pos;
        return RESP_BLANK;
    }
    if (max_frame < pos || (uint64_t)n > max_args || (uint64_t)n > (max_frame - pos) / MIN_BULK)
        return fail(cmd, RESP_ERR_TOO_LONG, "invalid multibulk length");
    size_t argc = (size_t)n;
    for (size_t i = 0; i < argc; i++) {
        if (pos >= len)
            return RESP_MORE;
        if (buf[pos] != '$')
            return fail(cmd, RESP_ERR_PROTOCOL, "expected '$' (an array of bulk strings)");
        size_t hdr = pos, b, skip;
        if (len - pos >= 8 && short_bulk(buf + pos, &b, &skip)) {
            pos += skip;
        } else {
            int64_t blen;
            pos++;
            st = read_int(buf, len, &pos, &blen);
            if (st == RESP_MORE)
                return RESP_MORE;
            /* A '-' is refused even before 0 ("$-0"): the keys' walk (resp_next_keys)
             * reads digits only. */
            if (st != RESP_OK || blen < 0 || buf[hdr + 1] == '-')
                return fail(cmd, RESP_ERR_PROTOCOL, "invalid bulk length");
            if ((uint64_t)blen > max_frame)
                return fail(cmd, RESP_ERR_TOO_LONG, "invalid bulk length");
            b = (size_t)blen;
        }
        if (pos > max_frame || b > max_frame) /* headers padded with zeros, or too long */
            return fail(cmd, RESP_ERR_TOO_LONG, "invalid bulk length");
        /* This element, then at least MIN_BULK bytes for each one after it. */
        if ((uint64_t)b + 2 + (uint64_t)(argc - 1 - i) * MIN_BULK > max_frame - pos)
            return fail(cmd, RESP_ERR_TOO_LONG, "request longer than max_line");
        if (len - pos < b + 2)
            return RESP_MORE;
        if (buf[pos + b] != '\r' || buf[pos + b + 1] != '\n')
            return fail(cmd, RESP_ERR_PROTOCOL, "expected CRLF after a bulk string");
        if (i < RESP_MAX_HEAD) {
            cmd->argv[i].ptr = buf + pos;
            cmd->argv[i].len = b;
            cmd->at[i] = buf + hdr;
        }
        pos += b + 2;
    }
    cmd->argc = argc;
    cmd->end = buf + pos;
    *consumed = pos;
    return RESP_OK;
}

static int parse_inline(const char *buf, size_t len, size_t max_frame, size_t max_args,
                        struct resp_command *cmd, size_t *consumed)
{
    size_t window = len < max_frame ? len : max_frame;
    const char *nl = window > 0 ? memchr(buf, '\n', window) : NULL;
    if (nl == NULL) {
        if (len >= max_frame)
            return fail(cmd, RESP_ERR_TOO_LONG, "too big inline request");
        return RESP_MORE;
    }
    size_t n = (size_t)(nl - buf);
    *consumed = n + 1;
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    size_t argc = 0, i = 0;
    while (i < n) {
        while (i < n && buf[i] == ' ')
            i++;
        if (i == n)
            break;
        size_t start = i;
        while (i < n && buf[i] != ' ')
            i++;
        if (argc < RESP_MAX_HEAD) {
            cmd->argv[argc].ptr = buf + start;
            cmd->argv[argc].len = i - start;
            cmd->at[argc] = buf + start;
        }
        cmd->end = buf + i;
        argc++;
    }
    if (argc == 0)
        return RESP_BLANK;
    if (argc > max_args) {
        *consumed = 0;
        return fail(cmd, RESP_ERR_TOO_LONG, "invalid multibulk length");
    }
    cmd->argc = argc;
    cmd->inline_form = true;
    return RESP_OK;
}

int resp_parse(const char *buf, size_t len, const struct resp_limits *lim, struct resp_command *cmd,
               size_t *consumed)
{
    size_t max_frame = lim != NULL && lim->max_frame > 0 ? lim->max_frame : RESP_DEFAULT_MAX_FRAME;
    size_t max_args = lim != NULL && lim->max_args > 0 ? lim->max_args : RESP_DEFAULT_MAX_ARGS;
    cmd->argc = 0;
    cmd->end = buf;
    cmd->inline_form = false;
    cmd->why = NULL;
    *consumed = 0;
    if (len == 0)
        return RESP_MORE;
    int st = buf[0] == '*' ? parse_array(buf, len, max_frame, max_args, cmd, consumed)
                           : parse_inline(buf, len, max_frame, max_args, cmd, consumed);
    if (st == RESP_MORE && len >= max_frame)
        return fail(cmd, RESP_ERR_TOO_LONG, "request longer than max_line");
    if (st < 0 || st == RESP_MORE)
        *consumed = 0;
    return st;
}

struct proto_slice resp_tail(const struct resp_command *cmd, size_t i)
{
    if (i >= cmd->argc || i >= RESP_MAX_HEAD)
        return (struct proto_slice){cmd->end, 0};
    return (struct proto_slice){cmd->at[i], (size_t)(cmd->end - cmd->at[i])};
}

size_t resp_next_keys(struct proto_slice *rest, struct proto_slice *keys, size_t max)
{
    const char *p = rest->ptr;
    size_t left = rest->len, n = 0;
    /* The slice was validated by resp_parse; the bounds checks only keep a misuse safe. */
    while (n < max && left >= MIN_BULK && p[0] == '$') {
        size_t i = 1, b = 0;
        if (left < 8 || !short_bulk(p, &b, &i)) {
            i = 1;
            b = 0;
            while (i < left && p[i] >= '0' && p[i] <= '9')
                b = b * 10 + (size_t)(p[i++] - '0');
            i += 2; /* the CRLF, checked by resp_parse */
        }
        if (i > left || b > left - i || left - i - b < 2)
            break;
        keys[n].ptr = p + i;
        keys[n].len = b;
        n++;
        p += i + b + 2;
        left -= i + b + 2;
    }
    if (n < max) { /* none left (or a misuse): stop for good */
        p += left;
        left = 0;
    }
    rest->ptr = p;
    rest->len = left;
    return n;
}

bool resp_arg_is(struct proto_slice arg, const char *word)
{
    size_t n = strlen(word);
    if (arg.len != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = arg.ptr[i];
        if (c >= 'a' && c <= 'z')
            c = (char)(c - 'a' + 'A');
        if (c != word[i])
            return false;
    }
    return true;
}

/* ---- the command set ---- */

struct resp_entry {
    const char *name;  /* upper case, as matched */
    const char *lower; /* as Redis names it in errors */
    enum resp_op op;
    int arity; /* Redis's: n exactly, -n at least n (the command counts) */
    int max;   /* at most this many, 0: no bound */
};

/* Hot commands first: the lookup is a short linear scan. */
static const struct resp_entry resp_table[] = {
    {"BF.ADD", "bf.add", RESP_OP_BF_ADD, 3, 0},
    {"BF.MADD", "bf.madd", RESP_OP_BF_MADD, -3, 0},
    {"BF.EXISTS", "bf.exists", RESP_OP_BF_EXISTS, 3, 0},
    {"BF.MEXISTS", "bf.mexists", RESP_OP_BF_MEXISTS, -3, 0},
    {"BF.INSERT", "bf.insert", RESP_OP_BF_INSERT, -4, 0},
    {"BF.RESERVE", "bf.reserve", RESP_OP_BF_RESERVE, -4, 11},
    {"BF.INFO", "bf.info", RESP_OP_BF_INFO, -2, 3},
    {"BF.CARD", "bf.card", RESP_OP_BF_CARD, 2, 0},
    {"BF.SCANDUMP", "bf.scandump", RESP_OP_BF_SCANDUMP, 3, 0},
    {"BF.LOADCHUNK", "bf.loadchunk", RESP_OP_BF_LOADCHUNK, 4, 0},
    {"PING", "ping", RESP_OP_PING, -1, 2},
    {"ECHO", "echo", RESP_OP_ECHO, 2, 0},
    {"HELLO", "hello", RESP_OP_HELLO, -1, 0},
    {"AUTH", "auth", RESP_OP_AUTH, -2, 3},
    {"SELECT", "select", RESP_OP_SELECT, 2, 0},
    {"QUIT", "quit", RESP_OP_QUIT, -1, 0},
    {"CLIENT", "client", RESP_OP_CLIENT, -2, 0},
    {"COMMAND", "command", RESP_OP_COMMAND, -1, 0},
    {"INFO", "info", RESP_OP_INFO, -1, 0},
    {"DBSIZE", "dbsize", RESP_OP_DBSIZE, 1, 0},
    {"EXISTS", "exists", RESP_OP_EXISTS, -2, 0},
    {"DEL", "del", RESP_OP_DEL, -2, 0},
    {"UNLINK", "unlink", RESP_OP_DEL, -2, 0},
    {"TYPE", "type", RESP_OP_TYPE, 2, 0},
    {"SCAN", "scan", RESP_OP_SCAN, -2, 0},
    {"KEYS", "keys", RESP_OP_KEYS, 2, 0},
};

#define WHY_NAME                                                                                   \
    "ERR invalid filter name: bloomd names are 1-128 bytes of [A-Za-z0-9._-], not starting "       \
    "with '.'"

/* Appends s to the message at *at (at most cap bytes in all), printable bytes only. */
static void put(char *buf, size_t cap, size_t *at, const char *s, size_t n)
{
    for (size_t i = 0; i < n && *at + 1 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[(*at)++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    buf[*at] = '\0';
}

static void why_unknown(const struct resp_command *cmd, struct resp_mapped *m)
{
    size_t at = 0, cap = sizeof m->why_buf;
    put(m->why_buf, cap, &at, "ERR unknown command '", 21);
    put(m->why_buf, cap, &at, cmd->argv[0].ptr, cmd->argv[0].len < 64 ? cmd->argv[0].len : 64);
    put(m->why_buf, cap, &at, "', with args beginning with: ", 29);
    for (size_t i = 1; i < cmd->argc && i < RESP_MAX_HEAD && at + 40 < cap; i++) {
        put(m->why_buf, cap, &at, "'", 1);
        put(m->why_buf, cap, &at, cmd->argv[i].ptr, cmd->argv[i].len < 32 ? cmd->argv[i].len : 32);
        put(m->why_buf, cap, &at, "' ", 2);
    }
    m->why = m->why_buf;
}

static void why_arity(const struct resp_entry *e, struct resp_mapped *m)
{
    size_t at = 0, cap = sizeof m->why_buf;
    put(m->why_buf, cap, &at, "ERR wrong number of arguments for '", 35);
    put(m->why_buf, cap, &at, e->lower, strlen(e->lower));
    put(m->why_buf, cap, &at, "' command", 9);
    m->why = m->why_buf;
}

/* A signed integer as Redis's string2ll reads it; false if it is none. */
static bool arg_i64(struct proto_slice a, int64_t *out)
{
    bool neg = a.len > 1 && a.ptr[0] == '-';
    uint64_t v;
    if (proto_parse_u64(a.ptr + neg, a.len - neg, &v) != 0 || v > (uint64_t)INT64_MAX)
        return false;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return true;
}

static bool arg_double(struct proto_slice a, double *out)
{
    return proto_parse_double(a.ptr, a.len, out) == 0;
}

/* The request's keys: arguments from..argc-1 of cmd. */
static void keys_from(const struct resp_command *cmd, size_t from, struct proto_request *req)
{
    req->args = resp_tail(cmd, from);
    req->nargs = cmd->argc - from;
    req->args_resp = !cmd->inline_form;
}

/* EXPANSION n as our scale; false with m->why set when n cannot be one. */
static bool expansion(struct proto_slice a, struct resp_mapped *m, const char *bad)
{
    int64_t e;
    if (!arg_i64(a, &e)) {
        m->why = bad;
        return false;
    }
    if (e < 1) {
        m->why = "ERR expansion should be greater or equal to 1";
        return false;
    }
    if (e > 64) {
        m->why = "ERR expansion too large: bloomd filters grow by at most 64 per stage";
        return false;
    }
    m->req.create.scale = (double)e;
    m->req.create.set |= PROTO_OPT_SCALE;
    return true;
}

/* NONSCALING: a filter of one stage with all of the error, refusing new keys once full
 * (-ERR non scaling filter is full), as RedisBloom's. */
static void nonscaling(struct resp_mapped *m)
{
    if (!m->nonscaling)
        return;
    m->req.create.growth = PROTO_GROWTH_NONE;
    m->req.create.set |= PROTO_OPT_GROWTH;
}

/* The options after BF.RESERVE's capacity, and our own: WINDOW d [GENERATIONS g], KIND k. */
static void reserve_options(const struct resp_command *cmd, struct resp_mapped *m)
{
    struct proto_create *o = &m->req.create;
    bool expand = false;
    for (size_t i = 4; i < cmd->argc && i < RESP_MAX_HEAD; i++) {
        struct proto_slice a = cmd->argv[i];
        bool last = i + 1 >= cmd->argc;
        if (resp_arg_is(a, "NONSCALING")) {
            m->nonscaling = true;
        } else if (resp_arg_is(a, "EXPANSION")) {
            if (last) {
                m->why = "ERR no expansion";
                return;
            }
            if (!expansion(cmd->argv[++i], m, "ERR bad expansion"))
                return;
            expand = true;
        } else if (resp_arg_is(a, "WINDOW") && !last) {
            uint64_t ms;
            struct proto_slice v = cmd->argv[++i];
            if (proto_parse_duration(v.ptr, v.len, &ms) != 0 || ms < PROTO_MIN_WINDOW_MS ||
                ms > PROTO_MAX_WINDOW_MS) {
                m->why = "ERR bad window: a duration from 1s to 366d (30s, 10m, 1h, 7d)";
                return;
            }
            o->window_ms = ms;
            o->set |= PROTO_OPT_WINDOW;
        } else if (resp_arg_is(a, "GENERATIONS") && !last) {
            int64_t g;
            if (!arg_i64(cmd->argv[++i], &g) || g < PROTO_MIN_GENERATIONS ||
                g > PROTO_MAX_GENERATIONS) {
                m->why = "ERR bad generations: 2 to 16";
                return;
            }
            o->generations = (uint32_t)g;
            o->set |= PROTO_OPT_GENERATIONS;
        } else if (resp_arg_is(a, "KIND") && !last) {
            o->kind = cmd->argv[++i];
            o->set |= PROTO_OPT_KIND;
        } else {
            m->why = "ERR unknown argument";
            return;
        }
    }
    if (expand && m->nonscaling)
        m->why = "Nonscaling filters cannot expand";
    else if ((o->set & PROTO_OPT_GENERATIONS) && !(o->set & PROTO_OPT_WINDOW))
        m->why = "ERR GENERATIONS needs WINDOW";
    else if ((o->set & PROTO_OPT_WINDOW) && (o->set & PROTO_OPT_KIND))
        m->why = "ERR WINDOW makes a windowed filter: no KIND with it";
    else if (m->nonscaling && (o->set & PROTO_OPT_WINDOW))
        m->why = "ERR NONSCALING makes a filter of one stage: a window's generations grow";
    else if (m->nonscaling && (o->set & PROTO_OPT_KIND) && !resp_arg_is(o->kind, "BLOCKED"))
        m->why = "ERR NONSCALING is for KIND blocked: an expandable filter grows in place";
    else
        nonscaling(m);
}

static void map_reserve(const struct resp_command *cmd, struct resp_mapped *m)
{
    struct proto_create *o = &m->req.create;
    m->req.cmd = PROTO_CMD_CREATE;
    if (!arg_double(cmd->argv[2], &o->error)) {
        m->why = "ERR bad error rate";
        return;
    }
    if (!(o->error > 0 && o->error < 1)) {
        m->why = "ERR (0 < error rate range < 1) ";
        return;
    }
    int64_t cap;
    if (!arg_i64(cmd->argv[3], &cap)) {
        m->why = "ERR bad capacity";
        return;
    }
    if (cap <= 0) {
        m->why = "ERR (capacity should be larger than 0)";
        return;
    }
    if ((uint64_t)cap > PROTO_MAX_CAPACITY) {
        m->why = "ERR capacity too large: at most 1099511627776";
        return;
    }
    o->capacity = (uint64_t)cap;
    o->set |= PROTO_OPT_CAPACITY | PROTO_OPT_ERROR;
    reserve_options(cmd, m);
}

/* BF.INSERT key [CAPACITY c] [ERROR e] [EXPANSION n] [NOCREATE] [NONSCALING] ITEMS item... */
static void map_insert(const struct resp_command *cmd, struct resp_mapped *m,
                       const struct resp_entry *e)
{
    struct proto_create *o = &m->req.create;
    m->req.cmd = PROTO_CMD_CHECKADD;
    m->create = true;
    size_t i = 2, items = 0;
    while (i < cmd->argc && items == 0) {
        if (i >= RESP_MAX_HEAD) {
            m->why = "ERR too many arguments before ITEMS";
            return;
        }
        struct proto_slice a = cmd->argv[i];
        if (resp_arg_is(a, "ITEMS")) {
            items = ++i;
        } else if (resp_arg_is(a, "NOCREATE")) {
            m->create = false;
            i++;
        } else if (resp_arg_is(a, "NONSCALING")) {
            m->nonscaling = true;
            i++;
        } else if (resp_arg_is(a, "CAPACITY") || resp_arg_is(a, "ERROR") ||
                   resp_arg_is(a, "EXPANSION")) {
            if (i + 1 >= cmd->argc || i + 1 >= RESP_MAX_HEAD) {
                why_arity(e, m);
                return;
            }
            struct proto_slice v = cmd->argv[i + 1];
            if (a.ptr[0] == 'C' || a.ptr[0] == 'c') {
                int64_t cap;
                if (!arg_i64(v, &cap)) {
                    m->why = "Bad capacity";
                    return;
                }
                if (cap < 1 || (uint64_t)cap > PROTO_MAX_CAPACITY) {
                    m->why = "Bad argument received";
                    return;
                }
                o->capacity = (uint64_t)cap;
                o->set |= PROTO_OPT_CAPACITY;
            } else if (a.ptr[1] == 'R' || a.ptr[1] == 'r') {
                if (!arg_double(v, &o->error)) {
                    m->why = "Bad error rate";
                    return;
                }
                if (!(o->error > 0 && o->error < 1)) {
                    m->why = "Bad argument received";
                    return;
                }
                o->set |= PROTO_OPT_ERROR;
            } else if (!expansion(v, m, "Bad expansion")) {
                return;
            }
            i += 2;
        } else {
            m->why = "Unknown argument received";
            return;
        }
    }
    if (items == 0 || items >= cmd->argc) {
        why_arity(e, m);
        return;
    }
    nonscaling(m); /* over EXPANSION, as RedisBloom's BF.INSERT takes both */
    keys_from(cmd, items, &m->req);
}

/*
 * BF.SCANDUMP key iter and BF.LOADCHUNK key iter data, as DUMP requests in chunks (the
 * encoding is server/exec/dump.h's): data_len is iter + 1 for SCANDUMP; for LOADCHUNK
 * replace is set, data_len is iter (>= 1) and args the chunk's bytes.
 */
static void map_chunk(const struct resp_command *cmd, struct resp_mapped *m, bool load)
{
    uint64_t iter = 0;
    m->req.cmd = PROTO_CMD_DUMP;
    if (proto_parse_u64(cmd->argv[2].ptr, cmd->argv[2].len, &iter) != 0 || iter == UINT64_MAX) {
        m->why = "ERR Second argument must be numeric";
        return;
    }
    if (!load) {
        m->req.data_len = iter + 1;
        return;
    }
    if (iter == 0) {
        m->why = "ERR received bad data";
        return;
    }
    m->req.replace = true;
    m->req.data_len = iter;
    m->req.args = cmd->argv[3];
}

void resp_map(const struct resp_command *cmd, struct resp_mapped *m)
{
    memset(&m->req, 0, sizeof m->req);
    m->op = RESP_OP_UNKNOWN;
    m->create = m->nonscaling = false;
    m->field = RESP_INFO_ALL;
    m->why = NULL;
    m->why_buf[0] = '\0';
    const struct resp_entry *e = NULL;
    for (size_t i = 0; i < sizeof resp_table / sizeof resp_table[0]; i++) {
        if (resp_arg_is(cmd->argv[0], resp_table[i].name)) {
            e = &resp_table[i];
            break;
        }
    }
    if (e == NULL) {
        why_unknown(cmd, m);
        return;
    }
    m->op = e->op;
    size_t argc = cmd->argc;
    if ((e->arity > 0 && argc != (size_t)e->arity) || (e->arity < 0 && argc < (size_t)-e->arity) ||
        (e->max > 0 && argc > (size_t)e->max)) {
        why_arity(e, m);
        return;
    }
    bool bf = e->op >= RESP_OP_BF_RESERVE && e->op <= RESP_OP_BF_LOADCHUNK;
    if (bf) {
        m->req.name = cmd->argv[1];
        if (!proto_name_valid(m->req.name)) {
            m->why = WHY_NAME;
            return;
        }
    }
    switch (e->op) {
    case RESP_OP_BF_RESERVE:
        map_reserve(cmd, m);
        break;
    case RESP_OP_BF_ADD:
    case RESP_OP_BF_MADD:
        m->req.cmd = PROTO_CMD_CHECKADD;
        keys_from(cmd, 2, &m->req);
        break;
    case RESP_OP_BF_EXISTS:
    case RESP_OP_BF_MEXISTS:
        m->req.cmd = PROTO_CMD_CHECK;
        keys_from(cmd, 2, &m->req);
        break;
    case RESP_OP_BF_INSERT:
        map_insert(cmd, m, e);
        break;
    case RESP_OP_BF_INFO:
        m->req.cmd = PROTO_CMD_INFO;
        if (argc == 3) {
            static const char *const fields[] = {"CAPACITY", "SIZE", "FILTERS", "ITEMS",
                                                 "EXPANSION"};
            for (size_t i = 0; i < 5 && m->field == RESP_INFO_ALL; i++)
                if (resp_arg_is(cmd->argv[2], fields[i]))
                    m->field = (enum resp_info_field)(i + 1);
            if (m->field == RESP_INFO_ALL)
                m->why = "Invalid information value";
        }
        break;
    case RESP_OP_BF_CARD:
        m->req.cmd = PROTO_CMD_INFO;
        break;
    case RESP_OP_BF_SCANDUMP:
    case RESP_OP_BF_LOADCHUNK:
        map_chunk(cmd, m, e->op == RESP_OP_BF_LOADCHUNK);
        break;
    case RESP_OP_DEL:
        m->req.cmd = PROTO_CMD_DROP;
        break;
    case RESP_OP_AUTH:
        m->req.cmd = PROTO_CMD_AUTH;
        m->req.args = cmd->argv[argc - 1]; /* AUTH [user] token: the user is not looked at */
        m->req.nargs = 1;
        break;
    case RESP_OP_QUIT:
        m->req.cmd = PROTO_CMD_QUIT;
        break;
    case RESP_OP_DBSIZE:
        m->req.cmd = PROTO_CMD_LIST;
        break;
    default:
        m->req.cmd = PROTO_CMD_VERSION; /* answered by the server from cmd's arguments */
        break;
    }
}

/* ---- replies ---- */

static void append_u64(struct proto_buf *b, uint64_t v)
{
    char tmp[20];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    proto_buf_append(b, tmp + i, sizeof tmp - i);
}

/* "<c><n>\r\n" */
static void header(struct proto_buf *b, char c, uint64_t n)
{
    proto_buf_append(b, &c, 1);
    append_u64(b, n);
    proto_buf_append(b, "\r\n", 2);
}

void resp_reply_simple(struct proto_buf *b, const char *s)
{
    proto_buf_append(b, "+", 1);
    proto_buf_append(b, s, strlen(s));
    proto_buf_append(b, "\r\n", 2);
}

/* Appends s with CR and LF turned into spaces (an error or status must stay one line). */
static void append_line(struct proto_buf *b, const char *s)
{
    size_t n = strlen(s), i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] != '\r' && s[j] != '\n')
            j++;
        proto_buf_append(b, s + i, j - i);
        if (j < n)
            proto_buf_append(b, " ", 1);
        i = j + 1;
    }
}

void resp_reply_errorf2(struct proto_buf *b, const char *lead, const char *text)
{
    proto_buf_append(b, "-", 1);
    append_line(b, lead);
    if (text != NULL)
        append_line(b, text);
    proto_buf_append(b, "\r\n", 2);
}

void resp_reply_error(struct proto_buf *b, const char *err)
{
    resp_reply_errorf2(b, err, NULL);
}

void resp_reply_int(struct proto_buf *b, int64_t v)
{
    if (v < 0) {
        proto_buf_append(b, ":-", 2);
        append_u64(b, (uint64_t)0 - (uint64_t)v);
        proto_buf_append(b, "\r\n", 2);
        return;
    }
    header(b, ':', (uint64_t)v);
}

void resp_reply_bulk(struct proto_buf *b, const char *p, size_t n)
{
    header(b, '$', n);
    proto_buf_append(b, p, n);
    proto_buf_append(b, "\r\n", 2);
}

void resp_reply_bulk_head(struct proto_buf *b, uint64_t n)
{
    header(b, '$', n);
}

void resp_reply_bulk_str(struct proto_buf *b, const char *s)
{
    resp_reply_bulk(b, s, strlen(s));
}

void resp_reply_null(struct proto_buf *b, int ver)
{
    if (ver >= 3)
        proto_buf_append(b, "_\r\n", 3);
    else
        proto_buf_append(b, "$-1\r\n", 5);
}

void resp_reply_array(struct proto_buf *b, size_t n)
{
    header(b, '*', n);
}

void resp_reply_map(struct proto_buf *b, size_t npairs, int ver)
{
    header(b, ver >= 3 ? '%' : '*', ver >= 3 ? npairs : 2 * (uint64_t)npairs);
}

void resp_reply_double(struct proto_buf *b, double d, int ver)
{
    char tmp[40];
    size_t n = proto_format_double(tmp, sizeof tmp, d);
    if (ver >= 3) {
        proto_buf_append(b, ",", 1);
        proto_buf_append(b, tmp, n);
        proto_buf_append(b, "\r\n", 2);
    } else {
        resp_reply_bulk(b, tmp, n);
    }
}

void resp_reply_bits(struct proto_buf *b, const bool *bits, size_t n, bool invert)
{
    char tmp[4 * 128];
    resp_reply_array(b, n);
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < 128 && i < n; k++, i++) {
            tmp[4 * k] = ':';
            tmp[4 * k + 1] = bits[i] != invert ? '1' : '0';
            tmp[4 * k + 2] = '\r';
            tmp[4 * k + 3] = '\n';
        }
        proto_buf_append(b, tmp, 4 * k);
    }
}

#define READONLY_ERR "READONLY You can't write against a read only replica."

void resp_reply_result_error(struct proto_buf *b, const struct result *r)
{
    if (r->failed) {
        resp_reply_error(b, "ERR out of memory");
        return;
    }
    switch (r->status) {
    case RESULT_NOT_FOUND:
        resp_reply_error(b, "ERR not found");
        break;
    case RESULT_EXISTS:
        resp_reply_error(b, "ERR item exists");
        break;
    case RESULT_READONLY:
        resp_reply_error(b, READONLY_ERR);
        break;
    case RESULT_CLIENT_ERROR:
    case RESULT_SERVER_ERROR:
        resp_reply_errorf2(b, "ERR ", r->text != NULL ? r->text : "failed");
        break;
    default:
        resp_reply_errorf2(b, "ERR unexpected result ", result_status_name(r->status));
        break;
    }
}

void resp_format_result(struct proto_buf *b, enum resp_shape shape, size_t nkeys,
                        const struct result *r)
{
    if (r->failed) {
        resp_reply_result_error(b, r);
        return;
    }
    switch (r->status) {
    case RESULT_BITS:
        if ((shape == RESP_SHAPE_BIT || shape == RESP_SHAPE_MISSING0) && r->nbits == 1)
            resp_reply_int(b, r->bits[0]);
        else if (shape == RESP_SHAPE_NEW && r->nbits == 1)
            resp_reply_int(b, !r->bits[0]);
        else if (shape == RESP_SHAPE_BITS || shape == RESP_SHAPE_MISSING_ZEROS ||
                 shape == RESP_SHAPE_NEWS)
            resp_reply_bits(b, r->bits, r->nbits, shape == RESP_SHAPE_NEWS);
        else
            resp_reply_error(b, "ERR unexpected result BITS");
        return;
    case RESULT_NOT_FOUND:
        if (shape == RESP_SHAPE_DELETED || shape == RESP_SHAPE_MISSING0) {
            resp_reply_int(b, 0);
            return;
        }
        if (shape == RESP_SHAPE_MISSING_ZEROS) {
            resp_reply_array(b, nkeys);
            for (size_t i = 0; i < nkeys; i++)
                proto_buf_append(b, ":0\r\n", 4);
            return;
        }
        break;
    case RESULT_DELETED:
        if (shape == RESP_SHAPE_DELETED)
            resp_reply_int(b, 1);
        else
            resp_reply_simple(b, "OK");
        return;
    case RESULT_OK:
    case RESULT_CREATED:
    case RESULT_CLOSE:
        resp_reply_simple(b, "OK");
        return;
    case RESULT_COUNT:
        resp_reply_int(b, (int64_t)(r->count > INT64_MAX ? INT64_MAX : r->count));
        return;
    case RESULT_NONE:
        return;
    default:
        break;
    }
    resp_reply_result_error(b, r);
}

/* ---- KEYS and SCAN MATCH ---- */

bool resp_glob_match(const char *pat, size_t plen, const char *name, size_t nlen)
{
    /* Iterative with one backtrack point for the last '*': linear enough for short names. */
    size_t p = 0, n = 0, star_p = SIZE_MAX, star_n = 0;
    while (n < nlen) {
        if (p < plen && pat[p] == '*') {
            star_p = ++p;
            star_n = n;
            continue;
        }
        bool ok = false;
        size_t next = p;
        if (p < plen && pat[p] == '?') {
            ok = true;
            next = p + 1;
        } else if (p < plen && pat[p] == '[') {
            size_t q = p + 1;
            bool neg = q < plen && pat[q] == '^';
            q += neg;
            bool hit = false;
            while (q < plen && pat[q] != ']') {
                if (pat[q] == '\\' && q + 1 < plen) {
                    hit |= pat[q + 1] == name[n];
                    q += 2;
                } else if (q + 2 < plen && pat[q + 1] == '-' && pat[q + 2] != ']') {
                    char lo = pat[q], hi = pat[q + 2];
                    if (lo > hi) {
                        char t = lo;
                        lo = hi;
                        hi = t;
                    }
                    hit |= name[n] >= lo && name[n] <= hi;
                    q += 3;
                } else {
                    hit |= pat[q] == name[n];
                    q++;
                }
            }
            ok = hit != neg;
            next = q < plen ? q + 1 : q;
        } else if (p < plen && pat[p] == '\\' && p + 1 < plen) {
            ok = pat[p + 1] == name[n];
            next = p + 2;
        } else if (p < plen) {
            ok = pat[p] == name[n];
            next = p + 1;
        }
        if (ok) {
            p = next;
            n++;
        } else if (star_p != SIZE_MAX) {
            p = star_p;
            n = ++star_n;
        } else {
            return false;
        }
    }
    while (p < plen && pat[p] == '*')
        p++;
    return p == plen;
}
