/*
 * memcache.c - memcached's ASCII protocol over bloomd's request model. The workload is
 * memcached clients and proxies (twemproxy, mcrouter): one add per key, pipelined, with a
 * tiny ignored value, and multi-key gets. The parser keeps no state between calls: a
 * storage command is returned only once its data block is complete, so the only state
 * the server keeps is a byte count to swallow after an oversized block.
 */
#include "proto/memcache.h"

#include <string.h>

#include "proto/number.h"

enum mc_kind {
    MC_KIND_STORE,  /* <key> <flags> <exptime> <bytes> [cas] [noreply] + data block */
    MC_KIND_GET,    /* <key>+ */
    MC_KIND_REFUSE, /* a command a Bloom filter cannot do, without data block */
    MC_KIND_PLAIN,  /* no arguments: version, stats, quit, mn */
    MC_KIND_VERBOSITY,
    MC_KIND_FLUSH,
};

struct mc_entry {
    const char *name;
    enum mc_kind kind;
    enum mc_cmd cmd;
    enum proto_cmd exec; /* what the server runs */
    bool cas;            /* a storage command with a cas unique (cas), or gets */
    const char *why;     /* refused: the reason; NULL: served */
};

#define WHY_VALUES "a Bloom filter stores no values, only whether a key was seen"
#define WHY_DELETE                                                                                 \
    "delete is not supported: a Bloom filter cannot forget one key (a windowed filter forgets "    \
    "keys by itself as they age out of its window)"

#define WHY_STATS_GROUP "stats takes no group: a Bloom filter has no items, slabs or keys to list"

/* Hot commands first: the lookup is a short linear scan. memcached is case-sensitive. */
static const struct mc_entry mc_table[] = {
    {"add", MC_KIND_STORE, MC_CMD_ADD, PROTO_CMD_CHECKADD, false, NULL},
    {"get", MC_KIND_GET, MC_CMD_GET, PROTO_CMD_CHECK, false, NULL},
    {"set", MC_KIND_STORE, MC_CMD_SET, PROTO_CMD_ADD, false, NULL},
    {"gets", MC_KIND_GET, MC_CMD_GET, PROTO_CMD_CHECK, true, NULL},
    {"mn", MC_KIND_PLAIN, MC_CMD_NOOP, PROTO_CMD_VERSION, false, NULL},
    {"version", MC_KIND_PLAIN, MC_CMD_VERSION, PROTO_CMD_VERSION, false, NULL},
    {"stats", MC_KIND_PLAIN, MC_CMD_STATS, PROTO_CMD_STATS, false, NULL},
    {"quit", MC_KIND_PLAIN, MC_CMD_QUIT, PROTO_CMD_QUIT, false, NULL},
    {"verbosity", MC_KIND_VERBOSITY, MC_CMD_VERBOSITY, PROTO_CMD_VERSION, false, NULL},
    {"flush_all", MC_KIND_FLUSH, MC_CMD_FLUSH_ALL, PROTO_CMD_CLEAR, false, NULL},
    {"delete", MC_KIND_REFUSE, MC_CMD_NOOP, PROTO_CMD_VERSION, false, WHY_DELETE},
    {"incr", MC_KIND_REFUSE, MC_CMD_NOOP, PROTO_CMD_VERSION, false,
     "incr is not supported: " WHY_VALUES},
    {"decr", MC_KIND_REFUSE, MC_CMD_NOOP, PROTO_CMD_VERSION, false,
     "decr is not supported: " WHY_VALUES},
    {"touch", MC_KIND_REFUSE, MC_CMD_NOOP, PROTO_CMD_VERSION, false,
     "touch is not supported: a Bloom filter keeps no expiry per key (use a windowed filter)"},
    {"gat", MC_KIND_REFUSE, MC_CMD_NOOP, PROTO_CMD_VERSION, false,
     "gat is not supported: a Bloom filter keeps no expiry per key (use get)"},
    {"gats", MC_KIND_REFUSE, MC_CMD_NOOP, PROTO_CMD_VERSION, false,
     "gats is not supported: a Bloom filter keeps no expiry per key (use gets)"},
    {"append", MC_KIND_STORE, MC_CMD_NOOP, PROTO_CMD_VERSION, false,
     "append is not supported: " WHY_VALUES},
    {"prepend", MC_KIND_STORE, MC_CMD_NOOP, PROTO_CMD_VERSION, false,
     "prepend is not supported: " WHY_VALUES},
    {"replace", MC_KIND_STORE, MC_CMD_NOOP, PROTO_CMD_VERSION, false,
     "replace is not supported: a Bloom filter cannot tell a stored key from a false "
     "positive (use add or set)"},
    {"cas", MC_KIND_STORE, MC_CMD_NOOP, PROTO_CMD_VERSION, true,
     "cas is not supported: " WHY_VALUES " (use add)"},
};

#define MC_TABLE_LEN (sizeof(mc_table) / sizeof(mc_table[0]))

/* `version` answers the memcached release whose text protocol this is, then bloomd's:
 * libmemcached (memcping, memcstat, php-memcached, pylibmc) takes a major version of 0
 * for a reply it cannot parse and then fails ping and stats. */
#define MC_VERSION_PREFIX "VERSION 1.6.0-bloomd-"

/* Storage line tokens: key flags exptime bytes [cas] (noreply is taken off first). */
#define MC_STORE_MAX_TOKENS 6

static bool slice_is(struct proto_slice s, const char *lit)
{
    size_t n = strlen(lit);
    return s.len == n && memcmp(s.ptr, lit, n) == 0;
}

static const struct mc_entry *lookup(struct proto_slice tok)
{
    for (size_t i = 0; i < MC_TABLE_LEN; i++)
        if (slice_is(tok, mc_table[i].name))
            return &mc_table[i];
    return NULL;
}

static int fail(struct mc_request *m, int status, const char *why, struct proto_slice bad)
{
    m->req.why = why;
    m->req.bad = bad;
    return status;
}

static int fail_plain(struct mc_request *m, int status, const char *why)
{
    struct proto_slice none = {NULL, 0};
    return fail(m, status, why, none);
}

/* Splits tokens off rest into tok[0..max); returns how many, or max + 1 if there were
 * more. One bitmap scan of the line (proto_next_keys), not a memchr per token. */
static size_t take_tokens(struct proto_slice rest, struct proto_slice *tok, size_t max)
{
    static const struct proto_request as_is = {.nargs = 0}; /* no key_skip */
    size_t n = proto_next_keys(&as_is, &rest, tok, max);
    struct proto_slice more;
    return n == max && proto_next_arg(&rest, &more) ? max + 1 : n;
}

/* Takes a trailing "noreply" off the n tokens; returns the count left. */
static size_t take_noreply(struct proto_slice *tok, size_t n, size_t max, struct mc_request *m)
{
    if (n > 0 && n <= max && slice_is(tok[n - 1], "noreply")) {
        m->noreply = true;
        return n - 1;
    }
    return n;
}

/*
 * Checks one memcached key and finds its filter: "<filter>:<key>" (split at the first
 * ':') or, without ':', the default filter. Returns MC_OK or an error.
 */
static int check_key(struct proto_slice tok, struct proto_slice deflt, struct proto_slice *name,
                     size_t *skip, struct mc_request *m)
{
    if (tok.len > MC_MAX_KEY)
        return fail(m, MC_ERR_KEY, "key longer than 250 bytes", tok);
    const char *colon = NULL;
    for (size_t i = 0; i < tok.len; i++) {
        unsigned char c = (unsigned char)tok.ptr[i];
        if (c < 0x20 || c == 0x7f)
            return fail(m, MC_ERR_KEY, "invalid key (control character)", tok);
        if (c == ':' && colon == NULL)
            colon = tok.ptr + i;
    }
    if (colon == NULL) {
        if (deflt.len == 0)
            return fail(m, MC_ERR_KEY, "no default filter: use <filter>:<key>", tok);
        *name = deflt;
        *skip = 0;
        return MC_OK;
    }
    name->ptr = tok.ptr;
    name->len = (size_t)(colon - tok.ptr);
    *skip = name->len + 1;
    if (!proto_name_valid(*name))
        return fail(m, MC_ERR_NAME, "invalid filter name before ':'", tok);
    if (*skip == tok.len)
        return fail(m, MC_ERR_KEY, "empty key after ':'", tok);
    return MC_OK;
}

/* [-]digits as memcached's exptime (a signed long); the value is ignored. */
static bool valid_exptime(struct proto_slice s)
{
    uint64_t v;
    size_t neg = s.len > 0 && s.ptr[0] == '-' ? 1 : 0;
    if (proto_parse_u64(s.ptr + neg, s.len - neg, &v) != 0)
        return false;
    return v <= (neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX);
}

/*
 * The set that authenticates: its block buf[line_len..line_len+bytes) is "<username>
 * <password>"; any key and any username. No space: an empty password, which fails.
 */
static int parse_auth(const char *buf, size_t line_len, size_t bytes, struct mc_request *m)
{
    const char *data = buf + line_len;
    if (data[bytes] != '\r' || data[bytes + 1] != '\n')
        return fail_plain(m, MC_ERR_DATA, "bad data chunk");
    const char *sp = memchr(data, ' ', bytes);
    const char *pass = sp != NULL ? sp + 1 : data + bytes;
    m->cmd = MC_CMD_AUTH;
    m->req.cmd = PROTO_CMD_AUTH;
    m->req.args = (struct proto_slice){pass, (size_t)(data + bytes - pass)};
    m->req.nargs = 1;
    return MC_OK;
}

/*
 * A storage command: the line is buf[0..line_len), its tokens after the command in rest.
 * Once the data block's length is known, every outcome (even an error in the key)
 * consumes the line and the block, as memcached swallows it, so the stream stays in step.
 */
static int parse_storage(const struct mc_entry *e, struct proto_slice rest, size_t len,
                         size_t line_len, const char *buf, const struct mc_options *o,
                         struct mc_request *m, size_t *consumed)
{
    struct proto_slice tok[MC_STORE_MAX_TOKENS + 1];
    size_t want = e->cas ? 5 : 4;
    size_t n = take_tokens(rest, tok, MC_STORE_MAX_TOKENS + 1);
    n = take_noreply(tok, n, want + 1, m);
    *consumed = line_len;
    if (n != want) {
        struct proto_slice none = {NULL, 0};
        return fail(m, MC_ERR_FORMAT, "bad command line format: wrong number of arguments",
                    n > want ? tok[want] : none);
    }
    uint64_t flags, bytes, cas;
    if (proto_parse_u64(tok[1].ptr, tok[1].len, &flags) != 0 || flags > UINT32_MAX)
        return fail(m, MC_ERR_FORMAT, "bad command line format: flags", tok[1]);
    if (!valid_exptime(tok[2]))
        return fail(m, MC_ERR_FORMAT, "bad command line format: exptime", tok[2]);
    if (proto_parse_u64(tok[3].ptr, tok[3].len, &bytes) != 0 || bytes > INT32_MAX - 2)
        return fail(m, MC_ERR_FORMAT, "bad command line format: bytes", tok[3]);
    if (e->cas && proto_parse_u64(tok[4].ptr, tok[4].len, &cas) != 0)
        return fail(m, MC_ERR_FORMAT, "bad command line format: cas unique", tok[4]);
    m->data_len = bytes;

    size_t max_data = o->max_data > 0 ? o->max_data : MC_DEFAULT_MAX_DATA;
    if (bytes > max_data) {
        m->swallow = (size_t)bytes + 2;
        return fail(m, MC_ERR_TOO_LARGE, "object too large for cache", tok[3]);
    }
    size_t total = line_len + (size_t)bytes + 2; /* bytes < 2^31: cannot wrap */
    if (len < total) {
        *consumed = 0;
        m->need = total;
        return MC_MORE;
    }
    *consumed = total;
    if (o->auth && e->cmd == MC_CMD_SET)
        return parse_auth(buf, line_len, (size_t)bytes, m);

    struct proto_slice name;
    size_t skip;
    int rc = check_key(tok[0], m->default_filter, &name, &skip, m);
    if (rc != MC_OK)
        return rc;
    if (e->why != NULL)
        return fail(m, MC_ERR_REFUSED, e->why, tok[0]);
    if (buf[total - 2] != '\r' || buf[total - 1] != '\n')
        return fail_plain(m, MC_ERR_DATA, "bad data chunk");
    m->req.name = name;
    m->req.args = tok[0];
    m->req.nargs = 1;
    m->req.key_skip = skip;
    return MC_OK;
}

/* get/gets: every key valid, at least one. */
static int parse_get(struct proto_slice rest, struct mc_request *m)
{
    struct proto_slice it, key, name;
    size_t skip;
    /* args runs from the first key to the end of the line (trailing spaces are harmless). */
    while (rest.len > 0 && rest.ptr[0] == ' ') {
        rest.ptr++;
        rest.len--;
    }
    it = m->req.args = rest;
    while (proto_next_arg(&it, &key)) {
        int rc = check_key(key, m->default_filter, &name, &skip, m);
        if (rc != MC_OK)
            return rc;
        m->req.nargs++;
    }
    if (m->req.nargs == 0)
        return fail_plain(m, MC_ERR_FORMAT, "bad command line format: no keys");
    return MC_OK;
}

static int parse_line(struct proto_slice rest, const char *buf, size_t len, size_t line_len,
                      const struct mc_options *o, struct mc_request *m, size_t *consumed)
{
    struct proto_slice cmd;
    *consumed = line_len;
    if (!proto_next_arg(&rest, &cmd))
        return fail_plain(m, MC_ERR_UNKNOWN_CMD, "empty line");
    const struct mc_entry *e = lookup(cmd);
    if (e == NULL)
        return fail(m, MC_ERR_UNKNOWN_CMD, "unknown command", cmd);
    m->cmd = e->cmd;
    m->req.cmd = e->exec;
    m->cas = e->cas && e->kind == MC_KIND_GET;
    m->exec = e->cmd != MC_CMD_VERBOSITY && e->cmd != MC_CMD_NOOP;

    struct proto_slice tok[3];
    size_t n;
    switch (e->kind) {
    case MC_KIND_STORE:
        return parse_storage(e, rest, len, line_len, buf, o, m, consumed);
    case MC_KIND_GET:
        return parse_get(rest, m);
    case MC_KIND_REFUSE:
        take_noreply(tok, take_tokens(rest, tok, 3), 3, m);
        return fail(m, MC_ERR_REFUSED, e->why, cmd);
    case MC_KIND_PLAIN:
        /* memcached 1.6 answers version and quit whatever follows them ("version noreply"
         * too): memccapable checks it, and libmemcached takes a 1.6 reply to mean so. */
        if (e->cmd == MC_CMD_VERSION || e->cmd == MC_CMD_QUIT)
            return MC_OK;
        if (take_tokens(rest, tok, 1) == 0)
            return MC_OK;
        /* stats noreply is an error in memcached too: the reply is the point. */
        if (e->cmd == MC_CMD_STATS && slice_is(tok[0], "noreply"))
            return fail(m, MC_ERR_FORMAT, "bad command line format: stats has no noreply", tok[0]);
        /* stats items, stats slabs, stats cachedump (memcdump): no such figures here. */
        return fail(m, MC_ERR_FORMAT,
                    e->cmd == MC_CMD_STATS ? WHY_STATS_GROUP
                                           : "bad command line format: too many arguments",
                    tok[0]);
    case MC_KIND_VERBOSITY:
        n = take_noreply(tok, take_tokens(rest, tok, 3), 2, m);
        if (n != 1)
            return fail_plain(m, MC_ERR_FORMAT, "bad command line format: verbosity <level>");
        uint64_t level;
        if (proto_parse_u64(tok[0].ptr, tok[0].len, &level) != 0)
            return fail(m, MC_ERR_FORMAT, "bad command line format: level", tok[0]);
        return MC_OK;
    default: /* MC_KIND_FLUSH */
        n = take_noreply(tok, take_tokens(rest, tok, 3), 2, m);
        if (n > 1)
            return fail(m, MC_ERR_FORMAT, "bad command line format: too many arguments", tok[1]);
        if (n == 1 && proto_parse_u64(tok[0].ptr, tok[0].len, &m->flush_delay) != 0)
            return fail(m, MC_ERR_FORMAT, "bad command line format: delay", tok[0]);
        if (m->flush_delay != 0)
            return fail(m, MC_ERR_REFUSED, "flush_all with a delay is not supported", tok[0]);
        return MC_OK;
    }
}

int mc_parse(const char *buf, size_t len, const struct mc_options *opt, struct mc_request *m,
             size_t *consumed)
{
    static const struct mc_options defaults = {{NULL, 0}, 0, 0, false};
    const struct mc_options *o = opt != NULL ? opt : &defaults;
    size_t max_line = o->max_line > 0 ? o->max_line : MC_DEFAULT_MAX_LINE;
    memset(m, 0, sizeof(*m));
    m->cmd = MC_CMD_NOOP;
    m->req.cmd = PROTO_CMD_VERSION;
    if (proto_name_valid(o->default_filter))
        m->default_filter = o->default_filter;
    *consumed = 0;

    size_t window = len < max_line ? len : max_line;
    const char *nl = window > 0 ? memchr(buf, '\n', window) : NULL;
    if (nl == NULL) {
        if (len >= max_line)
            return fail_plain(m, MC_ERR_TOO_LONG, "line too long");
        return MC_MORE;
    }
    size_t line_len = (size_t)(nl - buf) + 1;
    size_t n = line_len - 1;
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    struct proto_slice line = {buf, n};
    return parse_line(line, buf, len, line_len, o, m, consumed);
}

bool mc_next_group(const struct mc_request *m, struct proto_slice *rest,
                   struct proto_request *group)
{
    struct proto_slice key, name, first_name = {NULL, 0};
    size_t skip, first_skip = 0;
    memset(group, 0, sizeof(*group));
    group->cmd = PROTO_CMD_CHECK;
    /* The parser validated every key, so the filter of each is found without failing. */
    while (true) {
        struct proto_slice before = *rest;
        if (!proto_next_arg(rest, &key))
            break;
        const char *colon = memchr(key.ptr, ':', key.len);
        if (colon != NULL) {
            name.ptr = key.ptr;
            name.len = (size_t)(colon - key.ptr);
            skip = name.len + 1;
        } else {
            name = m->default_filter;
            skip = 0;
        }
        if (group->nargs == 0) {
            first_name = name;
            first_skip = skip;
            group->args.ptr = key.ptr;
        } else if (skip != first_skip || name.len != first_name.len ||
                   memcmp(name.ptr, first_name.ptr, name.len) != 0) {
            *rest = before; /* this key starts the next run */
            break;
        }
        group->args.len = (size_t)(key.ptr + key.len - group->args.ptr);
        group->nargs++;
    }
    group->name = first_name;
    group->key_skip = first_skip;
    return group->nargs > 0;
}

const char *mc_strerror(int status)
{
    switch (status) {
    case MC_OK:
        return "ok";
    case MC_MORE:
        return "incomplete request";
    case MC_ERR_UNKNOWN_CMD:
        return "unknown command";
    case MC_ERR_TOO_LONG:
        return "line too long";
    case MC_ERR_FORMAT:
        return "bad command line format";
    case MC_ERR_KEY:
        return "invalid key";
    case MC_ERR_NAME:
        return "invalid filter name";
    case MC_ERR_DATA:
        return "bad data chunk";
    case MC_ERR_TOO_LARGE:
        return "object too large for cache";
    case MC_ERR_REFUSED:
        return "not supported";
    default:
        return "unknown error";
    }
}

/* ---- replies ---- */

void mc_reply_parse_error(struct proto_buf *b, int status, const struct mc_request *m)
{
    if (m != NULL && m->noreply && status != MC_ERR_TOO_LONG)
        return;
    switch (status) {
    case MC_ERR_UNKNOWN_CMD:
        proto_reply_word(b, "ERROR");
        return;
    case MC_ERR_TOO_LARGE:
        proto_reply_error(b, "SERVER_ERROR", "object too large for cache");
        return;
    case MC_ERR_REFUSED: /* the reason says it all; the token would be the command again */
    case MC_ERR_DATA:
    case MC_ERR_TOO_LONG:
        proto_reply_error(b, "CLIENT_ERROR",
                          m != NULL && m->req.why != NULL ? m->req.why : mc_strerror(status));
        return;
    default:
        break;
    }
    if (m == NULL) {
        proto_reply_error(b, "CLIENT_ERROR", mc_strerror(status));
        return;
    }
    /* The text protocol's error line: "CLIENT_ERROR <why> '<token, escaped>'". */
    proto_reply_parse_error(b, PROTO_ERR_ARGS, &m->req);
}

static void stat_line(struct proto_buf *b, const struct result_field *f)
{
    const char *name = f->alias != NULL ? f->alias : f->name;
    if (f->type == RESULT_U64)
        proto_reply_stat_u64(b, name, f->u);
    else if (f->type == RESULT_DOUBLE)
        proto_reply_stat_double(b, name, f->d);
    else
        proto_reply_stat_str(b, name,
                             (struct proto_slice){f->str, f->str != NULL ? strlen(f->str) : 0});
}

/* Every field in order, under memcached's name where the server gave one. */
static void format_stats(struct proto_buf *b, const struct result *r)
{
    for (size_t i = 0; i < r->nfields; i++)
        if (r->fields[i].name != NULL)
            stat_line(b, &r->fields[i]);
    proto_reply_word(b, "END");
}

/* The reply to a result that is an error of any kind; false if r is not one. */
static bool format_error(struct proto_buf *b, const struct result *r)
{
    if (r->failed) {
        proto_reply_error(b, "SERVER_ERROR", "out of memory");
        return true;
    }
    switch (r->status) {
    case RESULT_CLIENT_ERROR:
        proto_reply_error(b, "CLIENT_ERROR", r->text);
        return true;
    case RESULT_SERVER_ERROR:
        proto_reply_error(b, "SERVER_ERROR", r->text);
        return true;
    case RESULT_READONLY: /* a failure, never NOT_STORED: clients must not read "seen" */
        proto_reply_error(b, "SERVER_ERROR", "read-only replica");
        return true;
    case RESULT_NOT_FOUND:
        proto_reply_error(b, "CLIENT_ERROR", "no such filter");
        return true;
    default:
        return false;
    }
}

void mc_get_begin(struct mc_get *g, const struct proto_buf *b)
{
    g->mark = b->len;
    g->failed = false;
}

bool mc_get_group(struct proto_buf *b, struct mc_get *g, const struct mc_request *m,
                  const struct proto_request *group, const struct result *r)
{
    if (g->failed)
        return false;
    if (!r->failed && r->status == RESULT_NOT_FOUND)
        return true;
    if (r->failed || r->status != RESULT_BITS || r->nbits != group->nargs) {
        b->len = g->mark < b->len ? g->mark : b->len;
        g->failed = true;
        if (!format_error(b, r))
            proto_reply_error(b, "SERVER_ERROR", "unexpected result");
        return false;
    }
    static const char tail[] = " 0 1\r\n1\r\n", cas_tail[] = " 0 1 0\r\n1\r\n";
    struct proto_slice rest = group->args, key;
    for (size_t i = 0; i < r->nbits && proto_next_arg(&rest, &key); i++) {
        if (!r->bits[i])
            continue;
        proto_buf_append(b, "VALUE ", 6);
        proto_buf_append(b, key.ptr, key.len);
        if (m->cas)
            proto_buf_append(b, cas_tail, sizeof(cas_tail) - 1);
        else
            proto_buf_append(b, tail, sizeof(tail) - 1);
    }
    return true;
}

void mc_get_end(struct proto_buf *b, const struct mc_get *g)
{
    if (!g->failed)
        proto_reply_word(b, "END");
}

/* The hot replies, with their lengths known: one append each. */
static void reply_stored(struct proto_buf *b, bool stored)
{
    if (stored)
        proto_buf_append(b, "STORED\r\n", 8);
    else
        proto_buf_append(b, "NOT_STORED\r\n", 12);
}

void mc_format_result(struct proto_buf *b, const struct mc_request *m, const struct result *r)
{
    if (m->noreply)
        return;
    if (m->cmd == MC_CMD_NOOP) {
        proto_reply_word(b, "MN");
        return;
    }
    if (m->cmd == MC_CMD_GET) {
        struct mc_get g;
        mc_get_begin(&g, b);
        mc_get_group(b, &g, m, &m->req, r);
        mc_get_end(b, &g);
        return;
    }
    if (m->cmd == MC_CMD_AUTH && r->status == RESULT_CLIENT_ERROR) {
        proto_reply_error(b, "CLIENT_ERROR", MC_WHY_AUTH_FAILED);
        return;
    }
    if (format_error(b, r))
        return;
    switch (m->cmd) {
    case MC_CMD_ADD:
        if ((r->status == RESULT_BITS && r->nbits == 1) || r->status == RESULT_COUNT)
            reply_stored(b, r->status == RESULT_BITS ? !r->bits[0] : r->count > 0);
        else
            proto_reply_error(b, "SERVER_ERROR", "unexpected result");
        return;
    case MC_CMD_SET:
    case MC_CMD_AUTH:
        reply_stored(b, true);
        return;
    case MC_CMD_VERSION:
        proto_buf_append(b, MC_VERSION_PREFIX, sizeof(MC_VERSION_PREFIX) - 1);
        proto_reply_word(b, r->status == RESULT_VERSION && r->text != NULL ? r->text : "");
        return;
    case MC_CMD_STATS:
        if (r->status == RESULT_FIELDS)
            format_stats(b, r);
        else
            proto_reply_word(b, "END");
        return;
    case MC_CMD_QUIT:
        return;
    default: /* FLUSH_ALL, VERBOSITY */
        proto_reply_word(b, "OK");
        return;
    }
}
