/*
 * parse.c - the incremental request parser: bytes in, one fully validated request out.
 * Tuned for long ADD/CHECK/CHECKADD lines of hundreds of short keys: the line end is
 * found with memchr and keys are counted and checked eight bytes at a time, so the
 * server can execute without looking at a key byte again. Never reads outside
 * buf[0..len), never allocates, keeps no state between calls.
 */
#include "proto/proto.h"

#include <string.h>

#include "proto/number.h"

struct cmd_entry {
    const char *name;
    enum proto_cmd cmd;
};

/* Hot commands first: the lookup is a short linear scan. */
static const struct cmd_entry cmd_table[] = {
    {"CHECKADD", PROTO_CMD_CHECKADD}, {"CHECK", PROTO_CMD_CHECK},
    {"ADD", PROTO_CMD_ADD},           {"CREATE", PROTO_CMD_CREATE},
    {"UNION", PROTO_CMD_UNION},       {"INTERSECT", PROTO_CMD_INTERSECT},
    {"INFO", PROTO_CMD_INFO},         {"LIST", PROTO_CMD_LIST},
    {"DROP", PROTO_CMD_DROP},         {"CLEAR", PROTO_CMD_CLEAR},
    {"FLUSH", PROTO_CMD_FLUSH},       {"STATS", PROTO_CMD_STATS},
    {"VERSION", PROTO_CMD_VERSION},   {"HELP", PROTO_CMD_HELP},
    {"QUIT", PROTO_CMD_QUIT},         {"AUTH", PROTO_CMD_AUTH},
    {"DELETE", PROTO_CMD_DELETE},
};

#define CMD_COUNT (sizeof(cmd_table) / sizeof(cmd_table[0]))

const char *proto_cmd_name(enum proto_cmd cmd)
{
    for (size_t i = 0; i < CMD_COUNT; i++)
        if (cmd_table[i].cmd == cmd)
            return cmd_table[i].name;
    return "?";
}

/* ASCII-only case folding: no locale may change what a command or an option is. */
static char ascii_lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c + ('a' - 'A')) : c;
}

/* True if s equals the NUL-terminated lit, ignoring ASCII case. */
static bool slice_eq_nocase(struct proto_slice s, const char *lit)
{
    size_t i = 0;
    for (; i < s.len && lit[i] != '\0'; i++)
        if (ascii_lower(s.ptr[i]) != ascii_lower(lit[i]))
            return false;
    return i == s.len && lit[i] == '\0';
}

static bool lookup_cmd(struct proto_slice tok, enum proto_cmd *cmd)
{
    for (size_t i = 0; i < CMD_COUNT; i++) {
        if (slice_eq_nocase(tok, cmd_table[i].name)) {
            *cmd = cmd_table[i].cmd;
            return true;
        }
    }
    return false;
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

/* A kind= value: 1..31 bytes of letters, digits, '_' and '-'. */
static bool valid_kind(struct proto_slice s)
{
    if (s.len < 1 || s.len > 31)
        return false;
    for (size_t i = 0; i < s.len; i++)
        if (!is_name_char(s.ptr[i]) || s.ptr[i] == '.')
            return false;
    return true;
}

/* A LIST prefix: name characters, at most PROTO_MAX_NAME of them. */
static bool valid_prefix(struct proto_slice s)
{
    if (s.len > PROTO_MAX_NAME)
        return false;
    for (size_t i = 0; i < s.len; i++)
        if (!is_name_char(s.ptr[i]))
            return false;
    return true;
}

bool proto_name_valid(struct proto_slice s)
{
    return s.len >= 1 && s.ptr[0] != '.' && valid_prefix(s);
}

static bool is_bad_key_byte(char c)
{
    return c == '\0' || c == '\t' || c == '\r';
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define PARSE_SWAR 1
#define SWAR_ONES 0x0101010101010101u
#define SWAR_HIGH 0x8080808080808080u
#define SWAR_LOW7 0x7f7f7f7f7f7f7f7fu

/* 0x80 in exactly the bytes of x that are zero (no false positives from borrows). */
static inline uint64_t swar_zero(uint64_t x)
{
    return ~(((x & SWAR_LOW7) + SWAR_LOW7) | x | SWAR_LOW7);
}
#else
#define PARSE_SWAR 0
#endif

bool proto_next_arg(struct proto_slice *rest, struct proto_slice *arg)
{
    const char *p = rest->ptr;
    size_t n = rest->len;
    while (n > 0 && *p == ' ') {
        p++;
        n--;
    }
    if (n == 0) {
        rest->ptr = p;
        rest->len = 0;
        return false;
    }
    /* glibc's vectorised memchr beats a word-at-a-time loop even for 16-byte keys. */
    const char *space = memchr(p, ' ', n);
    size_t tl = space ? (size_t)(space - p) : n;
    arg->ptr = p;
    arg->len = tl;
    rest->ptr = p + tl;
    rest->len = n - tl;
    return true;
}

bool proto_next_key(const struct proto_request *req, struct proto_slice *rest,
                    struct proto_slice *key)
{
    if (!proto_next_arg(rest, key))
        return false;
    size_t skip = req->key_skip < key->len ? req->key_skip : key->len;
    key->ptr += skip;
    key->len -= skip;
    return true;
}

static int fail(struct proto_request *req, int status, const char *why, struct proto_slice bad)
{
    req->why = why;
    req->bad = bad;
    return status;
}

static int fail_plain(struct proto_request *req, int status, const char *why)
{
    struct proto_slice none = {NULL, 0};
    return fail(req, status, why, none);
}

/* Trims leading and trailing spaces. */
static struct proto_slice trim(struct proto_slice s)
{
    while (s.len > 0 && s.ptr[0] == ' ') {
        s.ptr++;
        s.len--;
    }
    while (s.len > 0 && s.ptr[s.len - 1] == ' ')
        s.len--;
    return s;
}

/* Finds the first key holding a forbidden byte; only called once one is known to exist. */
static struct proto_slice find_bad_key(struct proto_slice rest)
{
    struct proto_slice key = {NULL, 0};
    while (proto_next_arg(&rest, &key))
        for (size_t i = 0; i < key.len; i++)
            if (is_bad_key_byte(key.ptr[i]))
                return key;
    return key;
}

/*
 * Counts the space-separated tokens of s[0..n) and reports whether any byte is NUL, tab or
 * CR. A token starts at a non-space byte whose predecessor is a space (or the start).
 * With SWAR, whole words go eight bytes at a time and the byte loop only does the tail.
 */
static size_t count_tokens(const char *s, size_t n, bool *bad)
{
    size_t count = 0, i = 0;
    bool space_before = true; /* the byte before s[0] counts as a space */
    bool any_bad = false;
#if PARSE_SWAR
    uint64_t prev_space = 0x80;
    uint64_t bad_bits = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, s + i, 8);
        uint64_t sp = swar_zero(v ^ (SWAR_ONES * ' '));
        /* Any byte below 14 is rare in keys; only then look for NUL, tab and CR exactly. */
        if ((v - SWAR_ONES * 14) & ~v & SWAR_HIGH)
            bad_bits |= swar_zero(v) | swar_zero(v ^ (SWAR_ONES * '\t')) |
                        swar_zero(v ^ (SWAR_ONES * '\r'));
        uint64_t starts = ~sp & SWAR_HIGH & ((sp << 8) | prev_space);
        count += (size_t)__builtin_popcountll(starts);
        prev_space = sp >> 56;
    }
    space_before = prev_space != 0;
    any_bad = bad_bits != 0;
#endif
    for (; i < n; i++) {
        bool is_space = s[i] == ' ';
        count += !is_space && space_before;
        any_bad |= is_bad_key_byte(s[i]);
        space_before = is_space;
    }
    *bad = any_bad;
    return count;
}

/* Keys after the filter name: at least one, none with a forbidden byte. */
static int parse_keys(struct proto_slice rest, struct proto_request *req)
{
    bool bad = false;
    req->args = trim(rest);
    req->nargs = count_tokens(req->args.ptr, req->args.len, &bad);
    if (bad)
        return fail(req, PROTO_ERR_KEY, "invalid key (NUL, tab or CR)", find_bad_key(req->args));
    if (req->nargs == 0)
        return fail_plain(req, PROTO_ERR_ARGS, "wrong number of arguments: no keys");
    return PROTO_OK;
}

/* Source filters of UNION/INTERSECT: at least one valid name. */
static int parse_sources(struct proto_slice rest, struct proto_request *req)
{
    struct proto_slice it = req->args = trim(rest), src;
    while (proto_next_arg(&it, &src)) {
        if (!proto_name_valid(src))
            return fail(req, PROTO_ERR_NAME, "invalid filter name", src);
        req->nargs++;
    }
    if (req->nargs == 0)
        return fail_plain(req, PROTO_ERR_ARGS, "wrong number of arguments: no source filters");
    return PROTO_OK;
}

/* A double strictly between 0 and 1. */
static int parse_fraction(struct proto_slice v, double *out, struct proto_request *req,
                          const char *why)
{
    if (proto_parse_double(v.ptr, v.len, out) != 0)
        return fail(req, PROTO_ERR_NUMBER, "bad number", v);
    if (!(*out > 0.0 && *out < 1.0))
        return fail(req, PROTO_ERR_OPTION, why, v);
    return PROTO_OK;
}

static int parse_option(struct proto_slice opt, struct proto_request *req)
{
    struct proto_create *c = &req->create;
    const char *eq = memchr(opt.ptr, '=', opt.len);
    if (eq == NULL)
        return fail(req, PROTO_ERR_OPTION, "option must be key=value", opt);
    struct proto_slice key = {opt.ptr, (size_t)(eq - opt.ptr)};
    struct proto_slice val = {eq + 1, opt.len - key.len - 1};
    unsigned bit;
    if (slice_eq_nocase(key, "capacity"))
        bit = PROTO_OPT_CAPACITY;
    else if (slice_eq_nocase(key, "error"))
        bit = PROTO_OPT_ERROR;
    else if (slice_eq_nocase(key, "growth"))
        bit = PROTO_OPT_GROWTH;
    else if (slice_eq_nocase(key, "scale"))
        bit = PROTO_OPT_SCALE;
    else if (slice_eq_nocase(key, "ratio"))
        bit = PROTO_OPT_RATIO;
    else if (slice_eq_nocase(key, "window"))
        bit = PROTO_OPT_WINDOW;
    else if (slice_eq_nocase(key, "generations"))
        bit = PROTO_OPT_GENERATIONS;
    else if (slice_eq_nocase(key, "kind"))
        bit = PROTO_OPT_KIND;
    else
        return fail(req, PROTO_ERR_OPTION, "unknown option", key);
    if (c->set & bit)
        return fail(req, PROTO_ERR_OPTION, "repeated option", key);
    c->set |= bit;

    switch (bit) {
    case PROTO_OPT_CAPACITY:
        if (proto_parse_count(val.ptr, val.len, &c->capacity) != 0)
            return fail(req, PROTO_ERR_NUMBER, "bad number", val);
        if (c->capacity < 1 || c->capacity > PROTO_MAX_CAPACITY)
            return fail(req, PROTO_ERR_OPTION, "capacity must be in 1..2^40", val);
        return PROTO_OK;
    case PROTO_OPT_ERROR:
        return parse_fraction(val, &c->error, req, "error must be in (0, 1)");
    case PROTO_OPT_RATIO:
        return parse_fraction(val, &c->ratio, req, "ratio must be in (0, 1)");
    case PROTO_OPT_SCALE:
        if (proto_parse_double(val.ptr, val.len, &c->scale) != 0)
            return fail(req, PROTO_ERR_NUMBER, "bad number", val);
        if (!(c->scale >= 1.0 && c->scale <= 64.0))
            return fail(req, PROTO_ERR_OPTION, "scale must be between 1 and 64", val);
        return PROTO_OK;
    case PROTO_OPT_WINDOW:
        if (proto_parse_duration(val.ptr, val.len, &c->window_ms) != 0)
            return fail(req, PROTO_ERR_NUMBER, "bad duration (e.g. 90s, 15m, 1h, 7d)", val);
        if (c->window_ms < PROTO_MIN_WINDOW_MS || c->window_ms > PROTO_MAX_WINDOW_MS)
            return fail(req, PROTO_ERR_OPTION, "window must be in 1s..366d", val);
        return PROTO_OK;
    case PROTO_OPT_GENERATIONS: {
        uint64_t g;
        if (proto_parse_u64(val.ptr, val.len, &g) != 0)
            return fail(req, PROTO_ERR_NUMBER, "bad number", val);
        if (g < PROTO_MIN_GENERATIONS || g > PROTO_MAX_GENERATIONS)
            return fail(req, PROTO_ERR_OPTION, "generations must be in 2..16", val);
        c->generations = (uint32_t)g;
        return PROTO_OK;
    }
    case PROTO_OPT_KIND:
        /* Which kinds exist is the server's business: here only the token's shape. */
        if (!valid_kind(val))
            return fail(req, PROTO_ERR_OPTION, "kind must be a name of 1..31 [a-z0-9_-]", val);
        c->kind = val;
        return PROTO_OK;
    default: /* PROTO_OPT_GROWTH */
        if (slice_eq_nocase(val, "exponential"))
            c->growth = PROTO_GROWTH_EXPONENTIAL;
        else if (slice_eq_nocase(val, "linear"))
            c->growth = PROTO_GROWTH_LINEAR;
        else
            return fail(req, PROTO_ERR_OPTION, "growth must be exponential or linear", val);
        return PROTO_OK;
    }
}

/* Finds the token of option key in the CREATE options, for an error about it. */
static struct proto_slice find_option(struct proto_slice args, const char *key)
{
    struct proto_slice opt = {NULL, 0};
    while (proto_next_arg(&args, &opt)) {
        const char *eq = memchr(opt.ptr, '=', opt.len);
        struct proto_slice k = {opt.ptr, eq ? (size_t)(eq - opt.ptr) : opt.len};
        if (slice_eq_nocase(k, key))
            return opt;
    }
    return opt;
}

static int parse_create(struct proto_slice rest, struct proto_request *req)
{
    struct proto_slice it = req->args = trim(rest), opt;
    while (proto_next_arg(&it, &opt)) {
        int rc = parse_option(opt, req);
        if (rc != PROTO_OK)
            return rc;
        req->nargs++;
    }
    /* Combinations, once every option is known (they may come in any order). */
    const struct proto_create *c = &req->create;
    if ((c->set & PROTO_OPT_GENERATIONS) && !(c->set & PROTO_OPT_WINDOW))
        return fail(req, PROTO_ERR_OPTION, "generations needs window",
                    find_option(req->args, "generations"));
    if ((c->set & PROTO_OPT_WINDOW) && (c->set & PROTO_OPT_KIND) &&
        !slice_eq_nocase(c->kind, "blocked"))
        return fail(req, PROTO_ERR_OPTION, "window needs kind=blocked",
                    find_option(req->args, "kind"));
    return PROTO_OK;
}

/* Parses one line without its terminator. */
static int parse_line(const char *line, size_t n, struct proto_request *req)
{
    struct proto_slice rest = {line, n}, tok;
    if (!proto_next_arg(&rest, &tok))
        return PROTO_BLANK;
    if (!lookup_cmd(tok, &req->cmd))
        return fail(req, PROTO_ERR_UNKNOWN_CMD, "unknown command", tok);

    if (req->cmd == PROTO_CMD_AUTH) {
        /* A token is opaque: it may hold spaces; only the separator after AUTH is dropped. */
        while (rest.len > 0 && rest.ptr[0] == ' ') {
            rest.ptr++;
            rest.len--;
        }
        req->args = rest;
        req->nargs = rest.len > 0;
        return PROTO_OK;
    }

    struct proto_slice name = {NULL, 0}, extra;
    bool has_name = proto_next_arg(&rest, &name);
    switch (req->cmd) {
    case PROTO_CMD_STATS:
    case PROTO_CMD_VERSION:
    case PROTO_CMD_HELP:
    case PROTO_CMD_QUIT:
        if (has_name)
            return fail(req, PROTO_ERR_ARGS, "wrong number of arguments", name);
        return PROTO_OK;
    case PROTO_CMD_LIST:
    case PROTO_CMD_FLUSH:
        if (has_name && proto_next_arg(&rest, &extra))
            return fail(req, PROTO_ERR_ARGS, "wrong number of arguments", extra);
        if (has_name && !(req->cmd == PROTO_CMD_LIST ? valid_prefix(name) : proto_name_valid(name)))
            return fail(req, PROTO_ERR_NAME, "invalid filter name", name);
        req->name = name;
        return PROTO_OK;
    default:
        break;
    }

    /* Every other command starts with a filter name. */
    if (!has_name)
        return fail_plain(req, PROTO_ERR_ARGS, "wrong number of arguments: no filter name");
    if (!proto_name_valid(name))
        return fail(req, PROTO_ERR_NAME, "invalid filter name", name);
    req->name = name;
    switch (req->cmd) {
    case PROTO_CMD_ADD:
    case PROTO_CMD_CHECK:
    case PROTO_CMD_CHECKADD:
    case PROTO_CMD_DELETE:
        return parse_keys(rest, req);
    case PROTO_CMD_UNION:
    case PROTO_CMD_INTERSECT:
        return parse_sources(rest, req);
    case PROTO_CMD_CREATE:
        return parse_create(rest, req);
    default: /* INFO, DROP, CLEAR */
        if (proto_next_arg(&rest, &extra))
            return fail(req, PROTO_ERR_ARGS, "wrong number of arguments", extra);
        return PROTO_OK;
    }
}

int proto_parse(const char *buf, size_t len, const struct proto_limits *lim,
                struct proto_request *req, size_t *consumed)
{
    size_t max_line = (lim != NULL && lim->max_line > 0) ? lim->max_line : PROTO_DEFAULT_MAX_LINE;
    req->name.ptr = req->args.ptr = NULL;
    req->name.len = req->args.len = req->nargs = req->key_skip = 0;
    req->create.set = 0;
    req->why = NULL;
    req->bad.ptr = NULL;
    req->bad.len = 0;
    *consumed = 0;

    size_t window = len < max_line ? len : max_line;
    const char *nl = window > 0 ? memchr(buf, '\n', window) : NULL;
    if (nl == NULL) {
        if (len >= max_line)
            return fail_plain(req, PROTO_ERR_TOO_LONG, "line too long");
        return PROTO_MORE;
    }
    size_t n = (size_t)(nl - buf);
    *consumed = n + 1;
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    return parse_line(buf, n, req);
}

const char *proto_strerror(int status)
{
    switch (status) {
    case PROTO_OK:
        return "ok";
    case PROTO_MORE:
        return "incomplete line";
    case PROTO_BLANK:
        return "blank line";
    case PROTO_ERR_UNKNOWN_CMD:
        return "unknown command";
    case PROTO_ERR_TOO_LONG:
        return "line too long";
    case PROTO_ERR_ARGS:
        return "wrong number of arguments";
    case PROTO_ERR_NAME:
        return "invalid filter name";
    case PROTO_ERR_KEY:
        return "invalid key";
    case PROTO_ERR_NUMBER:
        return "bad number";
    case PROTO_ERR_OPTION:
        return "bad option";
    default:
        return "unknown error";
    }
}

const char *proto_error_kind(int status)
{
    return status == PROTO_ERR_UNKNOWN_CMD ? "ERROR" : "CLIENT_ERROR";
}
