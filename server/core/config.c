/*
 * config.c - option table, value parsers and the four sources (defaults < INI file <
 * BLOOMD_* environment < flags). One table drives all sources and --help, so an option
 * cannot exist in one place and be missing in another. Sizes accept K/M/G/T suffixes
 * (powers of 1024); counts are parsed by proto_parse_count, exactly as CREATE's
 * capacity= is (1000000, 1e6, 1M: powers of 1000).
 */
#include "server/core/config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <ini.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/sbf.h"
#include "proto/number.h"
#include "proto/proto.h"
#include "server/core/auth.h"
#include "server/core/log.h"

enum opt_kind {
    OPT_UINT,   /* unsigned, decimal */
    OPT_SIZE,   /* uint64_t, decimal with optional K/M/G/T suffix */
    OPT_COUNT,  /* uint64_t, proto_parse_count: 1000000, 1e6, 1M */
    OPT_STR,    /* char array */
    OPT_FRAC,   /* double in (0, 1) */
    OPT_LEVEL,  /* log level name */
    OPT_LOGFMT, /* log format name */
    OPT_BOOL,   /* int 0/1 from yes/no, true/false, on/off, 1/0 */
    OPT_DURA,   /* durability mode name */
};

static const char *const durability_names[] = {"snapshot", "everysec", "always"};

struct opt_def {
    const char *name; /* INI key; flag is --name with '-', env BLOOMD_NAME */
    enum opt_kind kind;
    size_t off;        /* offset of the field in struct config */
    size_t size;       /* OPT_STR: array size */
    uint64_t min, max; /* numeric range, inclusive */
    bool allow_empty;  /* OPT_STR: "" accepted */
    const char *arg;   /* metavariable for --help */
    const char *help;
};

#define F(field) offsetof(struct config, field), sizeof(((struct config *)0)->field)
#define KIB UINT64_C(1024)
#define MIB (KIB * KIB)
#define GIB (MIB * KIB)

static const struct opt_def opts[] = {
    {"port", OPT_UINT, F(port), 0, 65535, false, "N", "TCP port; 0 picks a free one (logged)"},
    {"bind", OPT_STR, F(bind), 0, 0, false, "ADDR", "address to listen on"},
    {"http_port", OPT_UINT, F(http_port), 0, 65535, false, "N",
     "HTTP port for /metrics, /healthz, /readyz, /api and the page; 0 = off"},
    {"http_bind", OPT_STR, F(http_bind), 0, 0, true, "ADDR",
     "HTTP listen address, empty = the same as bind"},
    {"http_max_connections", OPT_UINT, F(http_max_connections), 1, 100000, false, "N",
     "concurrent HTTP connections; past them /healthz still answers, the rest get 503"},
    {"data_dir", OPT_STR, F(data_dir), 0, 0, false, "DIR", "snapshot directory (created)"},
    {"config", OPT_STR, F(config), 0, 0, true, "FILE", "INI file with these options"},
    {"snapshot_interval", OPT_UINT, F(snapshot_interval), 0, 31536000, false, "SEC",
     "seconds between snapshots, 0 = only FLUSH and shutdown"},
    {"max_connections", OPT_UINT, F(max_connections), 1, 1000000, false, "N",
     "concurrent clients; more are refused"},
    {"max_line", OPT_SIZE, F(max_line), 64, GIB, false, "BYTES",
     "longest request line (K/M/G suffixes)"},
    {"max_memory", OPT_SIZE, F(max_memory), 0, KIB *KIB *GIB, false, "BYTES",
     "filter memory limit, 0 = 75% of RAM or cgroup limit"},
    {"max_output", OPT_SIZE, F(max_output), 4096, GIB, false, "BYTES",
     "unread reply bytes per client before it is not read"},
    {"idle_timeout", OPT_UINT, F(idle_timeout), 0, 31536000, false, "SEC",
     "close clients idle this long, 0 = never"},
    {"log_level", OPT_LEVEL, F(log_level), 0, 0, false, "LEVEL", "debug, info, warn or error"},
    {"log_format", OPT_LOGFMT, F(log_format), 0, 0, false, "FORMAT",
     "text, or json (one object per line: ts, level, msg, fields)"},
    {"log_file", OPT_STR, F(log_file), 0, 0, true, "FILE",
     "log file (SIGHUP reopens it), empty = stderr"},
    {"default_capacity", OPT_COUNT, F(default_capacity), 1, SBF_MAX_CAPACITY, false, "N",
     "CREATE capacity when not given (1e6, 1M allowed)"},
    {"default_error", OPT_FRAC, F(default_error), 0, 0, false, "P",
     "CREATE error rate when not given, in (0, 1)"},
    {"durability", OPT_DURA, F(durability), 0, 0, false, "MODE",
     "snapshot, everysec (journal, fsync each second) or always (reply once on disk)"},
    {"memcache_port", OPT_UINT, F(memcache_port), 0, 65535, false, "N",
     "memcached-protocol port on the same address, 0 = off (11211 is usual)"},
    {"memcache_default_filter", OPT_STR, F(memcache_default_filter), 0, 0, false, "NAME",
     "filter of memcached keys without '<filter>:'"},
    {"memcache_flush_all", OPT_BOOL, F(memcache_flush_all), 0, 1, false, "yes|no",
     "let memcached flush_all clear every filter"},
    {"redis_port", OPT_UINT, F(redis_port), 0, 65535, false, "N",
     "RESP (Redis, RedisBloom BF.*) port on the same address, 0 = off (6379 is usual)"},
    /* Config file and BLOOMD_AUTH_TOKEN only: a flag would show the token in ps. */
    {"auth_token", OPT_STR, F(auth_token), 0, 0, true, "TOKEN",
     "token clients must AUTH with, empty = none"},
    {"auth_token_file", OPT_STR, F(auth_token_file), 0, 0, true, "FILE",
     "file holding auth_token (one line), overrides it"},
    {"protected_mode", OPT_BOOL, F(protected_mode), 0, 1, false, "yes|no",
     "without a token, refuse clients that are not on loopback"},
    {"http_auth_metrics", OPT_BOOL, F(http_auth_metrics), 0, 1, false, "yes|no",
     "with a token, /metrics, /healthz and /readyz need it too"},
    {"tls_port", OPT_UINT, F(tls_port), 0, 65535, false, "N",
     "TLS port (bloomd protocol) on the same address, 0 = off"},
    {"tls_cert_file", OPT_STR, F(tls_cert_file), 0, 0, true, "FILE",
     "TLS certificate chain, PEM (SIGHUP reloads it)"},
    {"tls_key_file", OPT_STR, F(tls_key_file), 0, 0, true, "FILE", "TLS private key, PEM"},
    {"tls_ca_file", OPT_STR, F(tls_ca_file), 0, 0, true, "FILE",
     "CA certificates, PEM: clients must present a certificate"},
    {"allow_readonly_data_dir", OPT_BOOL, F(allow_readonly_data_dir), 0, 1, false, "yes|no",
     "start and serve when data_dir is not writable (snapshots then fail, loudly)"},
    {"max_filters", OPT_UINT, F(max_filters), 1, 100000000, false, "N",
     "filters in all; a CREATE past it (explicit or on first use) is refused"},
    {"memcache_max_auto_filters", OPT_UINT, F(memcache_max_auto_filters), 0, 100000000, false, "N",
     "filters memcached clients may create on first use (never the last 10% of memory)"},
    {"replica_of", OPT_STR, F(replica_of), 0, 0, true, "HOST:PORT",
     "start as a read-only replica of the primary's bloomd port; empty = a primary"},
    {"min_replica_acks", OPT_UINT, F(min_replica_acks), 0, 16, false, "N",
     "a change is answered once N replicas hold it; refused with fewer connected"},
    {"replica_ack_timeout", OPT_UINT, F(replica_ack_timeout), 1, 600000, false, "MS",
     "how long a reply waits for min_replica_acks before an error"},
    {"replication_backlog", OPT_SIZE, F(replication_backlog), KIB *KIB, 64 * GIB, false, "BYTES",
     "recent records kept for replicas that reconnect (partial resync)"},
    {"replica_tls", OPT_BOOL, F(replica_tls), 0, 1, false, "yes|no",
     "a replica speaks TLS to its primary's --tls-port (REPLICAOF too)"},
    {"replica_tls_ca_file", OPT_STR, F(replica_tls_ca_file), 0, 0, true, "FILE",
     "CA certificates, PEM, to verify the primary by; empty = the system's"},
    {"replica_tls_insecure", OPT_BOOL, F(replica_tls_insecure), 0, 1, false, "yes|no",
     "TLS to the primary without verifying its certificate or name"},
    {"replica_tls_cert_file", OPT_STR, F(replica_tls_cert_file), 0, 0, true, "FILE",
     "client certificate chain, PEM, for a primary with tls_ca_file"},
    {"replica_tls_key_file", OPT_STR, F(replica_tls_key_file), 0, 0, true, "FILE",
     "its private key, PEM"},
};

/* Options that must not be flags: the command line is public (ps, /proc/<pid>/cmdline). */
static bool flag_forbidden(const char *name)
{
    return strcmp(name, "auth_token") == 0 || strcmp(name, "auth-token") == 0;
}

#define NOPTS (sizeof(opts) / sizeof(opts[0]))
#define CONFIG_STR2(x) #x
#define CONFIG_STR(x) CONFIG_STR2(x)

void config_defaults(struct config *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->bind, sizeof(c->bind), "127.0.0.1");
    c->port = 8673;
    snprintf(c->data_dir, sizeof(c->data_dir), "./data");
    c->snapshot_interval = 60;
    c->replica_ack_timeout = 1000;
    c->max_filters = 10000;
    c->memcache_max_auto_filters = 1000;
    c->replication_backlog = 64 * KIB * KIB;
    c->max_connections = 1024;
    c->http_max_connections = 64;
    c->max_line = MIB;
    c->max_memory = 0;
    c->max_output = 4 * MIB;
    c->idle_timeout = 0;
    c->log_level = LOG_INFO;
    c->default_capacity = 100000;
    c->default_error = 0.01;
    snprintf(c->memcache_default_filter, sizeof(c->memcache_default_filter), "default");
    c->durability = 1; /* everysec */
    c->protected_mode = 1;
}

const struct config_template *config_template_for(const struct config *c, const char *name)
{
    for (size_t i = 0; i < c->ntemplates; i++)
        if (fnmatch(c->templates[i].pattern, name, 0) == 0)
            return &c->templates[i];
    return NULL;
}

/* Finds an option by name, accepting '-' for '_'. */
static const struct opt_def *opt_find(const char *name)
{
    for (size_t i = 0; i < NOPTS; i++) {
        const char *a = opts[i].name;
        const char *b = name;
        while (*a != '\0' && (*a == *b || (*a == '_' && *b == '-'))) {
            a++;
            b++;
        }
        if (*a == '\0' && *b == '\0')
            return &opts[i];
    }
    return NULL;
}

/* Leading decimal digits of s parsed by proto_parse_u64; *end gets the first non-digit. */
static bool parse_u64(const char *s, uint64_t *out, const char **end)
{
    size_t n = 0;
    while (isdigit((unsigned char)s[n]))
        n++;
    if (proto_parse_u64(s, n, out) != 0)
        return false;
    *end = s + n;
    return true;
}

static bool parse_size(const char *s, uint64_t *out)
{
    uint64_t v;
    const char *end;
    if (!parse_u64(s, &v, &end))
        return false;
    uint64_t mult = 1;
    switch (toupper((unsigned char)*end)) {
    case '\0':
        break;
    case 'K':
        mult = KIB;
        break;
    case 'M':
        mult = MIB;
        break;
    case 'G':
        mult = GIB;
        break;
    case 'T':
        mult = GIB * KIB;
        break;
    default:
        return false;
    }
    if (mult != 1) {
        end++;
        if (strcasecmp(end, "ib") == 0 || strcasecmp(end, "b") == 0)
            end += strlen(end);
    }
    if (*end != '\0' || (v != 0 && v > UINT64_MAX / mult))
        return false;
    *out = v * mult;
    return true;
}

static int set_value(struct config *c, const struct opt_def *o, const char *value,
                     const char *source, char *err, size_t errlen)
{
    char *field = (char *)c + o->off;
    uint64_t v = 0;
    const char *end;
    bool ok = false;
    const char *want = "";
    char range[96];

    switch (o->kind) {
    case OPT_UINT:
    case OPT_COUNT:
    case OPT_SIZE:
        if (o->kind == OPT_SIZE)
            ok = parse_size(value, &v);
        else if (o->kind == OPT_COUNT)
            ok = proto_parse_count(value, strlen(value), &v) == 0;
        else
            ok = parse_u64(value, &v, &end) && *end == '\0';
        ok = ok && v >= o->min && v <= o->max;
        snprintf(range, sizeof(range), "an integer%s from %llu to %llu",
                 o->kind == OPT_SIZE    ? " (K/M/G suffix allowed)"
                 : o->kind == OPT_COUNT ? " (1e6, 1k/1M/1G allowed)"
                                        : "",
                 (unsigned long long)o->min, (unsigned long long)o->max);
        want = range;
        if (ok && o->kind == OPT_UINT)
            *(unsigned *)(void *)field = (unsigned)v;
        else if (ok)
            *(uint64_t *)(void *)field = v;
        break;
    case OPT_STR: {
        size_t n = strlen(value);
        ok = n < o->size && (n > 0 || o->allow_empty);
        want = n == 0 ? "a non-empty string" : "a shorter string";
        if (ok)
            memcpy(field, value, n + 1);
        break;
    }
    case OPT_FRAC: {
        char *e;
        errno = 0;
        double d = strtod(value, &e);
        ok = e != value && *e == '\0' && errno == 0 && isfinite(d) && d > 0 && d < 1 &&
             !isspace((unsigned char)value[0]);
        want = "a number greater than 0 and less than 1";
        if (ok)
            *(double *)(void *)field = d;
        break;
    }
    case OPT_DURA:
        for (int i = 0; i < 3; i++) {
            if (strcasecmp(value, durability_names[i]) == 0) {
                *(int *)(void *)field = i;
                ok = true;
            }
        }
        want = "snapshot, everysec or always";
        break;
    case OPT_BOOL: {
        static const char *const yes[] = {"yes", "true", "on", "1"};
        static const char *const no[] = {"no", "false", "off", "0"};
        for (size_t i = 0; i < 4; i++) {
            if (strcasecmp(value, yes[i]) == 0 || strcasecmp(value, no[i]) == 0) {
                *(int *)(void *)field = strcasecmp(value, yes[i]) == 0;
                ok = true;
            }
        }
        want = "yes or no";
        break;
    }
    case OPT_LEVEL: {
        int l = log_level_parse(value);
        ok = l >= 0;
        want = "one of debug, info, warn, error";
        if (ok)
            *(int *)(void *)field = l;
        break;
    }
    case OPT_LOGFMT: {
        int l = log_format_parse(value);
        ok = l >= 0;
        want = "text or json";
        if (ok)
            *(int *)(void *)field = l;
        break;
    }
    }
    if (!ok) {
        snprintf(err, errlen, "invalid value '%s' for %s (from %s): expected %s", value, o->name,
                 source, want);
        return CONFIG_EINVAL;
    }
    return CONFIG_OK;
}

/* Sets one option by name ("max_memory") from text, as from the given source name. */
static int config_set(struct config *c, const char *name, const char *value, const char *source,
                      char *err, size_t errlen)
{
    const struct opt_def *o = opt_find(name);
    if (o == NULL) {
        snprintf(err, errlen, "unknown option '%s' (from %s)", name, source);
        return CONFIG_EINVAL;
    }
    return set_value(c, o, value, source, err, errlen);
}

struct ini_state {
    struct config *c;
    char *err;
    size_t errlen;
    bool failed;
    bool seen[NOPTS]; /* options set by this file: a second one is an error */
};

/* A key of a [filter <pattern>] section: appended to that template's CREATE options. */
static int template_line(struct ini_state *st, const char *pattern, const char *name,
                         const char *value, const char *source)
{
    struct config *c = st->c;
    while (*pattern == ' ')
        pattern++;
    struct config_template *t = NULL;
    for (size_t i = 0; i < c->ntemplates; i++)
        if (strcmp(c->templates[i].pattern, pattern) == 0)
            t = &c->templates[i];
    if (t == NULL) {
        if (c->ntemplates == CONFIG_MAX_TEMPLATES || pattern[0] == '\0' ||
            strlen(pattern) >= sizeof(t->pattern)) {
            snprintf(st->err, st->errlen,
                     "section [filter %s] (from %s): need a pattern of at most %zu bytes, and "
                     "at most %d such sections",
                     pattern, source, sizeof(t->pattern) - 1, CONFIG_MAX_TEMPLATES);
            st->failed = true;
            return 0;
        }
        t = &c->templates[c->ntemplates++];
        snprintf(t->pattern, sizeof t->pattern, "%s", pattern);
        t->options[0] = '\0';
    }
    /* A key twice in one template would leave CREATE to pick one: refuse it here. */
    size_t klen = strlen(name);
    for (const char *q = t->options; *q != '\0';) {
        if (strncmp(q, name, klen) == 0 && q[klen] == '=') {
            snprintf(st->err, st->errlen, "duplicate key '%s' in section [filter %s] (from %s)",
                     name, pattern, source);
            st->failed = true;
            return 0;
        }
        q += strcspn(q, " ");
        q += *q == ' ';
    }
    size_t n = strlen(t->options);
    int w =
        snprintf(t->options + n, sizeof t->options - n, "%s%s=%s", n > 0 ? " " : "", name, value);
    if (w < 0 || (size_t)w >= sizeof t->options - n) {
        snprintf(st->err, st->errlen, "section [filter %s] (from %s): options too long", pattern,
                 source);
        st->failed = true;
        return 0;
    }
    return 1;
}

static int on_ini_line(void *user, const char *section, const char *name, const char *value)
{
    struct ini_state *st = user;
    char source[CONFIG_PATH_MAX + 32];
    snprintf(source, sizeof(source), "config file %s", st->c->config);
    if (strncmp(section, "filter ", 7) == 0)
        return template_line(st, section + 7, name, value, source);
    if (section[0] != '\0' && strcmp(section, "bloomd") != 0) {
        snprintf(st->err, st->errlen,
                 "unknown section [%s] (from %s); use [bloomd] or [filter <pattern>]", section,
                 source);
        st->failed = true;
        return 0;
    }
    if (strcmp(name, "config") == 0) {
        snprintf(st->err, st->errlen, "option config is not allowed in %s", source);
        st->failed = true;
        return 0;
    }
    const struct opt_def *o = opt_find(name);
    if (o != NULL && st->seen[o - opts]) {
        snprintf(st->err, st->errlen, "duplicate key '%s' (from %s): each option once", name,
                 source);
        st->failed = true;
        return 0;
    }
    if (config_set(st->c, name, value, source, st->err, st->errlen) != CONFIG_OK) {
        st->failed = true;
        return 0;
    }
    st->seen[o - opts] = true;
    return 1;
}

/*
 * Reads the config file into a NUL-terminated buffer (caller frees), refusing what the INI
 * reader would mishandle: a non-regular file (a FIFO or /dev/zero never ends, a directory
 * reads as nothing), more than CONFIG_FILE_MAX bytes, a NUL byte (it would cut a value
 * short), a line over CONFIG_LINE_MAX. Returns NULL with err set.
 */
static char *read_file(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "config: cannot open '%s': %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > CONFIG_FILE_MAX) {
        snprintf(err, errlen, "config: '%s' is %s; give a regular file of at most %zu bytes", path,
                 S_ISDIR(st.st_mode)    ? "a directory"
                 : !S_ISREG(st.st_mode) ? "not a regular file"
                                        : "too big",
                 CONFIG_FILE_MAX);
        close(fd);
        return NULL;
    }
    char *buf = malloc(CONFIG_FILE_MAX + 1);
    size_t len = 0;
    while (buf != NULL && len <= CONFIG_FILE_MAX) {
        ssize_t n = read(fd, buf + len, CONFIG_FILE_MAX + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "config: cannot read '%s': %s", path, strerror(errno));
            free(buf);
            buf = NULL;
        }
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    if (buf == NULL) {
        if (err[0] == '\0')
            snprintf(err, errlen, "config: out of memory reading '%s'", path);
        return NULL;
    }
    const char *why = len > CONFIG_FILE_MAX ? "grew past the size limit while read" : NULL;
    size_t line = 1, start = 0;
    for (size_t i = 0; i < len && why == NULL; i++) {
        if (buf[i] == '\0')
            why = "holds a NUL byte";
        else if (buf[i] == '\n') {
            line++;
            start = i + 1;
        } else if (i - start >= CONFIG_LINE_MAX && buf[i] != '\r')
            why = "is longer than " CONFIG_STR(CONFIG_LINE_MAX) " bytes";
    }
    if (why != NULL) {
        snprintf(err, errlen, "config: '%s' line %zu %s", path, line, why);
        free(buf);
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

static int load_file(struct config *c, char *err, size_t errlen)
{
    struct ini_state st = {.c = c, .err = err, .errlen = errlen};
    char *text = read_file(c->config, err, errlen);
    if (text == NULL)
        return CONFIG_EINVAL;
    int rc = ini_parse_string(text, on_ini_line, &st);
    free(text);
    if (rc == 0)
        return CONFIG_OK;
    if (rc == -2)
        snprintf(err, errlen, "config: out of memory reading '%s'", c->config);
    else if (!st.failed)
        snprintf(err, errlen, "config: syntax error in '%s' line %d", c->config, rc);
    else {
        size_t n = strlen(err);
        snprintf(err + n, errlen - n, " at line %d", rc);
    }
    return CONFIG_EINVAL;
}

extern char **environ;

/* Edit distance of a and b (optimal string alignment: a swap of two neighbours counts
 * one, so MEMROY is one from MEMORY); SIZE_MAX for names of 64 bytes or more. */
static size_t edit_distance(const char *a, const char *b)
{
    enum { L = 64 };
    size_t n = strlen(a), m = strlen(b);
    if (n >= L || m >= L)
        return SIZE_MAX;
    size_t d[L][L];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t v = d[i - 1][j - 1] + cost;
            if (d[i - 1][j] + 1 < v)
                v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    }
    return d[n][m];
}

/* The option whose name is nearest to name (lower case, '_'), if near enough to be the
 * one meant: at most 2 edits, and fewer than a third of the name. NULL if none. */
static const struct opt_def *opt_nearest(const char *name)
{
    const struct opt_def *best = NULL;
    size_t best_d = 3, len = strlen(name);
    for (size_t i = 0; i < NOPTS; i++) {
        size_t d = edit_distance(name, opts[i].name);
        if (d < best_d && d * 3 < len) {
            best = &opts[i];
            best_d = d;
        }
    }
    return best;
}

/*
 * BLOOMD_* variables that name no option go into c->warnings, one line each, not an
 * error: wrappers and test runners export their own BLOOMD_ names (BLOOMD_BIN,
 * BLOOMD_VERSION...) into our environment, and refusing to start for them would break
 * those set-ups. A typo (BLOOMD_MAX_MEMROY) is still named at start-up, with the option
 * it is nearest to.
 */
static void warn_unknown_env(struct config *c)
{
    size_t n = strlen(c->warnings), more = 0;
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, "BLOOMD_", 7) != 0)
            continue;
        char name[64];
        size_t len = strcspn(*e + 7, "=");
        const struct opt_def *near = NULL;
        if (len < sizeof name) {
            for (size_t i = 0; i < len; i++)
                name[i] = (char)tolower((unsigned char)(*e)[7 + i]);
            name[len] = '\0';
            const struct opt_def *o = opt_find(name);
            if (o != NULL && strcmp(o->name, name) == 0)
                continue;
            near = opt_nearest(name);
        }
        char hint[96] = "";
        if (near != NULL) {
            size_t h = (size_t)snprintf(hint, sizeof hint, "; did you mean BLOOMD_");
            for (const char *p = near->name; *p != '\0' && h + 2 < sizeof hint; p++)
                hint[h++] = (char)toupper((unsigned char)*p);
            hint[h++] = '?';
            hint[h] = '\0';
        }
        int w = snprintf(c->warnings + n, sizeof c->warnings - n,
                         "%sunknown environment variable %.*s (no such option, ignored)%s",
                         n == 0 ? "" : "\n", (int)(len + 7 < 64 ? len + 7 : 64), *e, hint);
        if (w < 0 || (size_t)w >= sizeof c->warnings - n) {
            c->warnings[n] = '\0'; /* whole lines only; the rest counted below */
            more++;
            continue;
        }
        n += (size_t)w;
    }
    if (more > 0 && n + 80 < sizeof c->warnings)
        snprintf(c->warnings + n, sizeof c->warnings - n,
                 "%sand %zu more unknown BLOOMD_ environment variables", n == 0 ? "" : "\n", more);
}

static int load_env(struct config *c, char *err, size_t errlen)
{
    for (size_t i = 0; i < NOPTS; i++) {
        char var[64] = "BLOOMD_";
        size_t n = strlen(var);
        for (const char *p = opts[i].name; *p != '\0' && n < sizeof(var) - 1; p++)
            var[n++] = (char)toupper((unsigned char)*p);
        var[n] = '\0';
        const char *v = getenv(var);
        if (v != NULL && set_value(c, &opts[i], v, var, err, errlen) != CONFIG_OK)
            return CONFIG_EINVAL;
    }
    warn_unknown_env(c);
    return CONFIG_OK;
}

static bool is_bool_word(const char *v)
{
    static const char *const words[] = {"yes", "true", "on", "1", "no", "false", "off", "0"};
    for (size_t i = 0; v != NULL && i < 8; i++)
        if (strcasecmp(v, words[i]) == 0)
            return true;
    return false;
}

/*
 * Splits argv[*i] ("--name=value" or "--name value") into name and value. Returns false
 * if it is not a long option. The name is copied into name (truncated to fit). A yes/no
 * option takes the next argument only if it is a yes/no word: alone it means yes.
 */
static bool split_flag(int argc, char **argv, int *i, char *name, size_t namelen,
                       const char **value)
{
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
        return false;
    a += 2;
    const char *eq = strchr(a, '=');
    size_t n = eq != NULL ? (size_t)(eq - a) : strlen(a);
    if (n >= namelen)
        n = namelen - 1;
    memcpy(name, a, n);
    name[n] = '\0';
    const struct opt_def *o = opt_find(name);
    if (eq != NULL)
        *value = eq + 1;
    else if (o != NULL && o->kind == OPT_BOOL && (*i + 1 >= argc || !is_bool_word(argv[*i + 1])))
        *value = "yes"; /* a yes/no flag alone means yes: --allow-readonly-data-dir --port 1 */
    else if (*i + 1 < argc)
        *value = argv[++*i];
    else
        *value = NULL;
    return true;
}

static bool is_action(const char *a, enum config_action *action)
{
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
        *action = CONFIG_HELP;
    else if (strcmp(a, "--version") == 0 || strcmp(a, "-V") == 0)
        *action = CONFIG_VERSION;
    else if (strcmp(a, "--ping") == 0)
        *action = CONFIG_PING;
    else
        return false;
    return true;
}

/* Parses a template's options exactly as CREATE's into t->create. Returns 0, or -1 with
 * why set. */
static int config_check_template(struct config_template *t, char *why, size_t len)
{
    char line[CONFIG_TEMPLATE_OPTIONS + 32];
    int n = snprintf(line, sizeof line, "CREATE t %s\n", t->options);
    struct proto_request req = {0}; /* kind stays {NULL, 0} when not given */
    size_t used;
    int st = proto_parse(line, (size_t)n, NULL, &req, &used);
    if (st == PROTO_OK && req.create.kind.len >= sizeof t->kind) {
        snprintf(why, len, "kind name too long");
        return -1;
    }
    if (st == PROTO_OK) {
        t->create = req.create;
        if (req.create.kind.len > 0) /* memcpy from NULL is undefined, even of 0 bytes */
            memcpy(t->kind, req.create.kind.ptr, req.create.kind.len);
        t->kind[req.create.kind.len] = '\0';
        t->create.kind = (struct proto_slice){NULL, 0};
        return 0;
    }
    struct proto_buf b = {0};
    proto_reply_parse_error(&b, st, &req);
    snprintf(why, len, "%.*s", b.len >= 2 ? (int)b.len - 2 : 0, b.data != NULL ? b.data : "");
    proto_buf_free(&b);
    return -1;
}

int config_load(struct config *c, int argc, char **argv, enum config_action *action, char *err,
                size_t errlen)
{
    config_defaults(c);
    *action = CONFIG_RUN;
    err[0] = '\0';

    /* The file comes first in precedence order, but its path may come from any source. */
    const char *path = getenv("BLOOMD_CONFIG");
    for (int i = 1; i < argc; i++) {
        char name[64];
        const char *value;
        if (is_action(argv[i], action))
            continue;
        if (split_flag(argc, argv, &i, name, sizeof(name), &value) && value != NULL &&
            opt_find(name) == opt_find("config"))
            path = value;
    }
    *action = CONFIG_RUN;
    if (path != NULL && path[0] != '\0') {
        if (set_value(c, opt_find("config"), path, "--config", err, errlen) != CONFIG_OK)
            return CONFIG_EINVAL;
        if (load_file(c, err, errlen) != CONFIG_OK)
            return CONFIG_EINVAL;
    }
    if (load_env(c, err, errlen) != CONFIG_OK)
        return CONFIG_EINVAL;

    for (int i = 1; i < argc; i++) {
        char name[64];
        const char *value;
        if (is_action(argv[i], action))
            continue;
        char flag[80];
        snprintf(flag, sizeof(flag), "%s", argv[i]);
        if (!split_flag(argc, argv, &i, name, sizeof(name), &value)) {
            snprintf(err, errlen, "unexpected argument '%s' (see --help)", argv[i]);
            return CONFIG_EINVAL;
        }
        char *eq = strchr(flag, '=');
        if (eq != NULL)
            *eq = '\0';
        if (opt_find(name) == NULL) {
            snprintf(err, errlen, "unknown option '%s' (see --help)", flag);
            return CONFIG_EINVAL;
        }
        if (flag_forbidden(name)) {
            snprintf(err, errlen,
                     "%s cannot be a flag (ps shows the command line): use --auth-token-file, "
                     "BLOOMD_AUTH_TOKEN or auth_token in the config file",
                     flag);
            return CONFIG_EINVAL;
        }
        if (value == NULL) {
            snprintf(err, errlen, "option %s needs a value", flag);
            return CONFIG_EINVAL;
        }
        if (config_set(c, name, value, flag, err, errlen) != CONFIG_OK)
            return CONFIG_EINVAL;
    }
    for (size_t i = 0; i < c->ntemplates; i++) {
        char why[256];
        if (config_check_template(&c->templates[i], why, sizeof why) != 0) {
            snprintf(err, errlen, "section [filter %s] of %s: %s", c->templates[i].pattern,
                     c->config, why);
            return CONFIG_EINVAL;
        }
    }
    if (c->auth_token_file[0] != '\0' &&
        auth_read_token_file(c->auth_token_file, c->auth_token, sizeof c->auth_token, err,
                             errlen) != 0)
        return CONFIG_EINVAL;
    const char *bad = c->auth_token[0] != '\0' ? auth_token_invalid(c->auth_token) : NULL;
    if (bad != NULL) {
        snprintf(err, errlen, "auth_token: %s", bad);
        return CONFIG_EINVAL;
    }
    if (c->tls_port != 0 && (c->tls_cert_file[0] == '\0' || c->tls_key_file[0] == '\0')) {
        snprintf(err, errlen, "tls_port %u needs tls_cert_file and tls_key_file", c->tls_port);
        return CONFIG_EINVAL;
    }
    if (!c->replica_tls && (c->replica_tls_ca_file[0] != '\0' || c->replica_tls_insecure ||
                            c->replica_tls_cert_file[0] != '\0')) {
        snprintf(err, errlen, "%s needs replica_tls = yes",
                 c->replica_tls_insecure             ? "replica_tls_insecure"
                 : c->replica_tls_ca_file[0] != '\0' ? "replica_tls_ca_file"
                                                     : "replica_tls_cert_file");
        return CONFIG_EINVAL;
    }
    if ((c->replica_tls_cert_file[0] == '\0') != (c->replica_tls_key_file[0] == '\0')) {
        snprintf(err, errlen, "replica_tls_cert_file and replica_tls_key_file go together");
        return CONFIG_EINVAL;
    }
    /* Each is in range alone; together they must make a filter, or every CREATE fails. */
    struct sbf_params p;
    sbf_params_default(&p);
    p.capacity = c->default_capacity;
    p.error = c->default_error;
    if (sbf_params_check(&p) != SBF_OK) {
        snprintf(err, errlen,
                 "default_error %g with default_capacity %llu: no filter can be built; "
                 "use a larger error rate",
                 c->default_error, (unsigned long long)c->default_capacity);
        return CONFIG_EINVAL;
    }
    return CONFIG_OK;
}

/* The value of option o in c, as a user would write it ("1M", "info", ""). */
static void format_value(const struct config *c, const struct opt_def *o, char *buf, size_t len)
{
    const char *field = (const char *)c + o->off;
    uint64_t v;
    switch (o->kind) {
    case OPT_UINT:
        snprintf(buf, len, "%u", *(const unsigned *)(const void *)field);
        break;
    case OPT_COUNT:
        snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)(const void *)field);
        break;
    case OPT_SIZE: {
        static const char *const suffixes[] = {"", "K", "M", "G", "T"};
        v = *(const uint64_t *)(const void *)field;
        size_t i = 0;
        while (i < 4 && v != 0 && v % KIB == 0) {
            v /= KIB;
            i++;
        }
        snprintf(buf, len, "%llu%s", (unsigned long long)v, suffixes[i]);
        break;
    }
    case OPT_STR:
        snprintf(buf, len, "%s", field[0] != '\0' ? field : "none");
        break;
    case OPT_FRAC:
        snprintf(buf, len, "%g", *(const double *)(const void *)field);
        break;
    case OPT_LEVEL: {
        int level = *(const int *)(const void *)field;
        snprintf(buf, len, "%s", log_level_name((enum log_level)level));
        break;
    }
    case OPT_BOOL:
        snprintf(buf, len, "%s", *(const int *)(const void *)field ? "yes" : "no");
        break;
    case OPT_DURA:
        snprintf(buf, len, "%s", durability_names[*(const int *)(const void *)field]);
        break;
    case OPT_LOGFMT:
        snprintf(buf, len, "%s",
                 *(const int *)(const void *)field == LOG_FORMAT_JSON ? "json" : "text");
        break;
    }
}

const char *config_usage(void)
{
    static char text[8192];
    if (text[0] != '\0')
        return text;
    struct config def;
    config_defaults(&def);
    size_t n =
        (size_t)snprintf(text, sizeof(text),
                         "usage: bloomd [options]\n"
                         "Keeps named scalable Bloom filters in memory and serves them "
                         "over a text protocol.\n\n"
                         "  -h, --help                       this text\n"
                         "  -V, --version                    print the version and exit\n"
                         "  --ping                           exit 0 if the configured server "
                         "answers VERSION within 2 s\n");
    for (size_t i = 0; i < NOPTS && n < sizeof(text); i++) {
        char flag[64], value[64];
        if (flag_forbidden(opts[i].name))
            continue;
        size_t k = (size_t)snprintf(flag, sizeof(flag), "--%s %s", opts[i].name, opts[i].arg);
        for (size_t j = 2; j < k && flag[j] != ' '; j++)
            if (flag[j] == '_')
                flag[j] = '-';
        format_value(&def, &opts[i], value, sizeof(value));
        n += (size_t)snprintf(text + n, sizeof(text) - n, "  %-32s %s [default: %s]\n", flag,
                              opts[i].help, value);
    }
    if (n < sizeof(text))
        snprintf(text + n, sizeof(text) - n,
                 "\nEach option may also be set as BLOOMD_<OPTION> in the environment or as\n"
                 "<option> = <value> in the INI file (section [bloomd] or none).\n"
                 "Precedence: flags > environment > config file > defaults.\n"
                 "auth_token is not a flag (ps would show it): set it in the config file, as\n"
                 "BLOOMD_AUTH_TOKEN, or in a file named by --auth-token-file.\n");
    return text;
}
