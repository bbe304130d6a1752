/*
 * parse.c - the incremental request parser: bytes in, one fully validated request out.
 * Tuned for long ADD/CHECK/CHECKADD lines of hundreds of short keys: the line end is
 * found with memchr, and keys are counted, checked and split 64 bytes at a time (SSE2
 * space bitmaps), so the server can execute without looking at a key byte again. Never
 * reads outside buf[0..len), never allocates, keeps no state between calls.
 */
#include "proto/proto.h"

#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "proto/number.h"
#include "proto/resp.h"

struct cmd_entry {
    const char *name;
    size_t len;
    enum proto_cmd cmd;
};

#define CMD(name, cmd)                                                                             \
    {                                                                                              \
        name, sizeof(name) - 1, cmd                                                                \
    }

/* Hot commands first: the lookup is a short linear scan. */
static const struct cmd_entry cmd_table[] = {
    CMD("CHECKADD", PROTO_CMD_CHECKADD),
    CMD("CHECK", PROTO_CMD_CHECK),
    CMD("ADD", PROTO_CMD_ADD),
    CMD("CREATE", PROTO_CMD_CREATE),
    CMD("UNION", PROTO_CMD_UNION),
    CMD("INTERSECT", PROTO_CMD_INTERSECT),
    CMD("INFO", PROTO_CMD_INFO),
    CMD("LIST", PROTO_CMD_LIST),
    CMD("DROP", PROTO_CMD_DROP),
    CMD("CLEAR", PROTO_CMD_CLEAR),
    CMD("FLUSH", PROTO_CMD_FLUSH),
    CMD("STATS", PROTO_CMD_STATS),
    CMD("VERSION", PROTO_CMD_VERSION),
    CMD("HELP", PROTO_CMD_HELP),
    CMD("QUIT", PROTO_CMD_QUIT),
    CMD("AUTH", PROTO_CMD_AUTH),
    CMD("DELETE", PROTO_CMD_DELETE),
    CMD("DUMP", PROTO_CMD_DUMP),
    CMD("RESTORE", PROTO_CMD_RESTORE),
    CMD("ROLE", PROTO_CMD_ROLE),
    CMD("REPLICAOF", PROTO_CMD_REPLICAOF),
    CMD("PSYNC", PROTO_CMD_PSYNC),
    CMD("REPLCONF", PROTO_CMD_REPLCONF),
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
        const struct cmd_entry *e = &cmd_table[i];
        /* The length first, then the upper case most clients send (one memcmp), then any
         * case. */
        if (tok.len == e->len &&
            (memcmp(tok.ptr, e->name, e->len) == 0 || slice_eq_nocase(tok, e->name))) {
            *cmd = e->cmd;
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

/*
 * Bit i set if p[i] is a space, for i < n <= 64; bits n..63 are set too (the end reads as a
 * space). *low (unless low is NULL) is set if some byte is below 14 (where NUL, tab and CR
 * are; rare in keys). 16 bytes per compare with SSE2 (the tail as the last 16 bytes,
 * overlapping), a byte loop for inputs shorter than 16 or without SSE2.
 */
static inline uint64_t space_mask(const char *p, size_t n, bool *low)
{
    uint64_t m = 0;
    size_t i = 0;
    bool below = false;
#ifdef __SSE2__
    const __m128i spaces = _mm_set1_epi8(' '), thirteen = _mm_set1_epi8(13);
    __m128i small = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + i));
        m |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, spaces)) << i;
        if (low != NULL)
            small = _mm_or_si128(small, _mm_cmpeq_epi8(_mm_min_epu8(v, thirteen), v));
    }
    if (i < n && n >= 16) { /* the tail: the last 16 bytes, overlapping what was done */
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + n - 16));
        uint64_t t = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, spaces));
        m |= (t >> (16 - (n - i))) << i;
        if (low != NULL)
            small = _mm_or_si128(small, _mm_cmpeq_epi8(_mm_min_epu8(v, thirteen), v));
        i = n;
    }
    below = _mm_movemask_epi8(small) != 0;
#endif
    for (; i < n; i++) {
        m |= (uint64_t)(p[i] == ' ') << i;
        below |= (unsigned char)p[i] < 14;
    }
    if (n < 64)
        m |= ~UINT64_C(0) << n;
    if (low != NULL)
        *low = below;
    return m;
}

/*
 * The line is scanned 64 bytes at a time into a space bitmap; each key is then two bit
 * transitions (its start and its end), found with ctz: a few instructions per key, where a
 * memchr call per key cost about 60.
 */
size_t proto_next_keys(const struct proto_request *req, struct proto_slice *rest,
                       struct proto_slice *keys, size_t max)
{
    const char *p = rest->ptr;
    const size_t len = rest->len;
    size_t n = 0, start = 0, pos = 0;
    bool open = false;
    uint64_t before = 1; /* the byte before p[0] counts as a space */
    if (max == 0 || len == 0)
        return 0;
    if (req->args_resp)
        return resp_next_keys(rest, keys, max);
    if (req->nargs == 1 && p == req->args.ptr && len == req->args.len && p[0] != ' ' &&
        p[len - 1] != ' ') { /* the one key is all of args: a pipelined one-key request */
        size_t skip = req->key_skip < len ? req->key_skip : len;
        keys[0].ptr = p + skip;
        keys[0].len = len - skip;
        rest->ptr = p + len;
        rest->len = 0;
        return 1;
    }
    for (; pos < len; pos += 64) {
        size_t c = len - pos < 64 ? len - pos : 64;
        uint64_t sp = space_mask(p + pos, c, NULL);
        uint64_t edges = sp ^ ((sp << 1) | before); /* bit i: byte i differs from i - 1 */
        before = sp >> 63;
        while (edges) {
            size_t i = (size_t)__builtin_ctzll(edges);
            edges &= edges - 1;
            if (!((sp >> i) & 1)) { /* a key starts; it ends at the next edge, which is at
                                     * len at the latest (the padding) unless len is a
                                     * multiple of 64 */
                start = pos + i;
                open = true;
                continue;
            }
            size_t klen = pos + i - start, skip = req->key_skip < klen ? req->key_skip : klen;
            keys[n].ptr = p + start + skip;
            keys[n].len = klen - skip;
            open = false;
            if (++n == max) {
                rest->ptr = p + pos + i;
                rest->len = len - (pos + i);
                return n;
            }
        }
    }
    if (open) { /* a key that runs to the end of a 64-byte multiple */
        size_t klen = len - start, skip = req->key_skip < klen ? req->key_skip : klen;
        keys[n].ptr = p + start + skip;
        keys[n].len = klen - skip;
        n++;
    }
    rest->ptr = p + len;
    rest->len = 0;
    return n;
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
 * CR. A token starts at a non-space byte whose predecessor is a space (or the start): 64
 * bytes at a time, a popcount of the starts in the space bitmap; only a chunk with a byte
 * below 14 is looked at byte by byte.
 */
static size_t count_tokens(const char *s, size_t n, bool *bad)
{
    size_t count = 0;
    uint64_t before = 1; /* the byte before s[0] counts as a space */
    bool any_bad = false;
    for (size_t pos = 0; pos < n; pos += 64) {
        size_t c = n - pos < 64 ? n - pos : 64;
        bool low;
        uint64_t sp = space_mask(s + pos, c, &low);
        count += (size_t)__builtin_popcountll(~sp & ((sp << 1) | before));
        before = sp >> 63;
        for (size_t i = 0; low && i < c; i++)
            any_bad |= is_bad_key_byte(s[pos + i]);
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
    else if (slice_eq_nocase(key, "seed"))
        bit = PROTO_OPT_SEED;
    else
        return fail(req, PROTO_ERR_OPTION,
                    "unknown option (valid: capacity error growth scale ratio window "
                    "generations kind seed)",
                    key);
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
    case PROTO_OPT_SEED:
        if (proto_parse_u64(val.ptr, val.len, &c->seed) != 0)
            return fail(req, PROTO_ERR_NUMBER, "bad number (seed=<0..2^64-1>)", val);
        return PROTO_OK;
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
        else if (slice_eq_nocase(val, "none"))
            c->growth = PROTO_GROWTH_NONE;
        else
            return fail(req, PROTO_ERR_OPTION, "growth must be exponential, linear or none", val);
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

/*
 * REPLICAOF, PSYNC and REPLCONF: exactly two words of at most PROTO_MAX_NAME bytes each,
 * in args (nargs 2); their meaning is the replication layer's to check.
 */
static int parse_two(struct proto_slice rest, struct proto_request *req)
{
    struct proto_slice a, b, extra;
    req->args = rest;
    if (!proto_next_arg(&rest, &a) || !proto_next_arg(&rest, &b))
        return fail_plain(req, PROTO_ERR_ARGS, "wrong number of arguments");
    if (proto_next_arg(&rest, &extra))
        return fail(req, PROTO_ERR_ARGS, "wrong number of arguments", extra);
    if (a.len > PROTO_MAX_NAME || b.len > PROTO_MAX_NAME)
        return fail(req, PROTO_ERR_ARGS, "argument too long", a.len > PROTO_MAX_NAME ? a : b);
    req->nargs = 2;
    return PROTO_OK;
}

/* RESTORE's arguments after the name: <nbytes> [replace]. The data block is the caller's. */
static int parse_restore(struct proto_slice rest, struct proto_request *req)
{
    struct proto_slice n, opt, extra;
    if (!proto_next_arg(&rest, &n))
        return fail_plain(req, PROTO_ERR_ARGS, "wrong number of arguments: no byte count");
    if (proto_parse_u64(n.ptr, n.len, &req->data_len) != 0)
        return fail(req, PROTO_ERR_NUMBER, "bad byte count", n);
    if (proto_next_arg(&rest, &opt)) {
        if (!slice_eq_nocase(opt, "replace"))
            return fail(req, PROTO_ERR_OPTION, "unknown option (only replace)", opt);
        req->replace = true;
    }
    if (proto_next_arg(&rest, &extra))
        return fail(req, PROTO_ERR_ARGS, "wrong number of arguments", extra);
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

    if (req->cmd == PROTO_CMD_REPLICAOF || req->cmd == PROTO_CMD_PSYNC ||
        req->cmd == PROTO_CMD_REPLCONF)
        return parse_two(rest, req);

    struct proto_slice name = {NULL, 0}, extra;
    bool has_name = proto_next_arg(&rest, &name);
    switch (req->cmd) {
    case PROTO_CMD_ROLE:
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
    case PROTO_CMD_RESTORE:
        return parse_restore(rest, req);
    default: /* INFO, DROP, CLEAR, DUMP */
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
    req->data_len = 0;
    req->replace = false;
    req->why = NULL;
    req->bad.ptr = NULL;
    req->bad.len = 0;
    req->args_resp = false;
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
