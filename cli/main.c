/*
 * main.c - bloomd-cli's options and modes: interactive (stdin a TTY, no command), one-shot
 * (a protocol command), bulk (add, check, dedup: lower-case words), dump and restore,
 * --pipe, --stat, and a script of commands on stdin. Options before the command are
 * global; after a lower-case word, options may come anywhere; after a protocol command,
 * every word is sent as it is.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/bulk.h"
#include "cli/conn.h"
#include "cli/dump.h"
#include "cli/interactive.h"
#include "cli/msg.h"
#include "cli/pipe.h"
#include "cli/stat.h"
#include "cli/url.h"
#include "proto/number.h"

#ifndef BLOOMD_VERSION
#define BLOOMD_VERSION "unknown"
#endif

static const char usage_text[] =
    "usage: bloomd-cli [options]                        interactive prompt (stdin a TTY)\n"
    "       bloomd-cli [options] COMMAND [ARG...]       one protocol command, e.g. CHECK f k\n"
    "       bloomd-cli [options] add FILTER [FILE...]   add one key per line\n"
    "       bloomd-cli [options] check FILTER [FILE]    0/1 per key, or --present/--absent lines\n"
    "       bloomd-cli [options] dedup FILTER [FILE]    print the lines whose key is new\n"
    "       bloomd-cli [options] dump FILTER FILE|-     the filter's snapshot into FILE or stdout\n"
    "       bloomd-cli [options] restore FILTER FILE|- [--replace]   a dump back into FILTER\n"
    "       bloomd-cli [options] --pipe < LINES         raw protocol lines, counted replies\n"
    "       bloomd-cli [options] --stat [SECONDS]       live figures, one line per interval\n"
    "       bloomd-cli [options] < COMMANDS             every reply of a script of commands\n"
    "\n"
    "Protocol commands are sent as written (case does not matter to the server, but the\n"
    "lower-case words add, check, dedup, dump and restore are modes of bloomd-cli: write\n"
    "ADD, CHECK to send those commands). FILE '-' or none is stdin.\n"
    "\n"
    "Connection (BLOOMD_URL is used when none of -h, -p, -u is given):\n"
    "  -h, --host HOST        server host (default 127.0.0.1)\n"
    "  -p, --port PORT        server port (default 8673)\n"
    "  -u, --url URL          bloomd://host:port, or bloomds://host:port for TLS\n"
    "      --tls              speak TLS (to the server's tls_port)\n"
    "      --cacert FILE      CA certificates to verify the server (default: the system's)\n"
    "      --insecure         TLS without verifying the server's certificate\n"
    "      --token-file FILE  send AUTH with the token in FILE (else $BLOOMD_AUTH_TOKEN,\n"
    "                         else the password of $BLOOMD_URL; never on the command line)\n"
    "      --timeout SECONDS  connect timeout and longest wait for a reply (default 30; 0: none)\n"
    "\n"
    "Bulk modes (add, check, dedup):\n"
    "      --create OPTS      create the filter first if it is missing, e.g.\n"
    "                         --create \"capacity=50M error=0.001\"\n"
    "      --field N          the key is field N (from 1) of each line, not the whole line\n"
    "      --delimiter C      the field separator for --field (default: tab)\n"
    "      --skip-bad         skip and count lines whose key the protocol cannot carry\n"
    "                         (space, tab, CR, NUL, empty) instead of stopping at the first\n"
    "      --present          check: print the lines whose key is present\n"
    "      --absent           check: print the lines whose key is absent\n"
    "      --batch N          keys per request (default 500)\n"
    "      --depth N          requests in flight (default 64)\n"
    "  -q, --quiet            no summary line (\"<n> keys, <new> new\") or progress on stderr\n"
    "\n"
    "Dump and restore (the file is the snapshot format: <name>.bloom of a data dir):\n"
    "      dump FILTER FILE   writes FILE.tmp, fsyncs it and renames it to FILE; '-': stdout\n"
    "      restore FILTER FILE  sends FILE ('-': stdin, copied first into a temporary file\n"
    "                         in $TMPDIR, default /tmp, as RESTORE needs the size); exit 1\n"
    "                         on EXISTS or an error reply\n"
    "      --replace          restore: take the place of an existing filter of that name\n"
    "\n"
    "Other modes:\n"
    "      --pipe             send stdin's lines as they are; print \"replies: N, errors: M\"\n"
    "      --stat [SECONDS]   print keys/s, connections, memory, filters, items and journal\n"
    "                         lag every SECONDS (default 1)\n"
    "      --count N          --stat: stop after N lines\n"
    "      --help             this text\n"
    "      --version          print the version\n"
    "\n"
    "Exit status: 0 done; 1 an *ERROR reply, bad input or bad usage; 2 could not connect,\n"
    "or the connection was lost.\n";

enum {
    OPT_TLS = 256,
    OPT_CACERT,
    OPT_INSECURE,
    OPT_TOKEN_FILE,
    OPT_TIMEOUT,
    OPT_CREATE,
    OPT_FIELD,
    OPT_DELIMITER,
    OPT_SKIP_BAD,
    OPT_PRESENT,
    OPT_ABSENT,
    OPT_BATCH,
    OPT_DEPTH,
    OPT_REPLACE,
    OPT_PIPE,
    OPT_STAT,
    OPT_COUNT,
    OPT_HELP,
    OPT_VERSION,
};

static const struct option long_opts[] = {
    {"host", required_argument, NULL, 'h'},
    {"port", required_argument, NULL, 'p'},
    {"url", required_argument, NULL, 'u'},
    {"tls", no_argument, NULL, OPT_TLS},
    {"cacert", required_argument, NULL, OPT_CACERT},
    {"insecure", no_argument, NULL, OPT_INSECURE},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"create", required_argument, NULL, OPT_CREATE},
    {"field", required_argument, NULL, OPT_FIELD},
    {"delimiter", required_argument, NULL, OPT_DELIMITER},
    {"skip-bad", no_argument, NULL, OPT_SKIP_BAD},
    {"present", no_argument, NULL, OPT_PRESENT},
    {"absent", no_argument, NULL, OPT_ABSENT},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"depth", required_argument, NULL, OPT_DEPTH},
    {"replace", no_argument, NULL, OPT_REPLACE},
    {"quiet", no_argument, NULL, 'q'},
    {"pipe", no_argument, NULL, OPT_PIPE},
    {"stat", optional_argument, NULL, OPT_STAT},
    {"count", required_argument, NULL, OPT_COUNT},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

struct options {
    const char *host, *port, *url;
    bool tls, insecure;
    const char *cacert, *token_file;
    double timeout;
    struct bulk_opts bulk;
    bool replace;
    bool pipe, stat;
    double interval;
    unsigned long count;
};

/* An unsigned decimal option value in lo..hi; exits on anything else. */
static uint64_t number_arg(const char *opt, const char *s, uint64_t lo, uint64_t hi)
{
    uint64_t v;
    if (proto_parse_u64(s, strlen(s), &v) != 0 || v < lo || v > hi) {
        cli_warn("%s: expected a whole number in %llu..%llu, got '%s'", opt, (unsigned long long)lo,
                 (unsigned long long)hi, s);
        exit(CLI_EXIT_ERROR);
    }
    return v;
}

static double seconds_arg(const char *opt, const char *s, double lo)
{
    double v;
    if (proto_parse_double(s, strlen(s), &v) != 0 || v < lo || v > 1e6) {
        cli_warn("%s: expected seconds (>= %g), got '%s'", opt, lo, s);
        exit(CLI_EXIT_ERROR);
    }
    return v;
}

static bool looks_like_number(const char *s)
{
    double v;
    return s != NULL && proto_parse_double(s, strlen(s), &v) == 0;
}

/* Parses options from argv[optind...]; stops at the first non-option if posix. */
static void parse(struct options *op, int argc, char **argv, bool posix)
{
    int ch;
    while ((ch = getopt_long(argc, argv, posix ? "+h:p:u:q" : "h:p:u:q", long_opts, NULL)) != -1) {
        switch (ch) {
        case 'h':
            op->host = optarg;
            break;
        case 'p':
            number_arg("--port", optarg, 1, 65535);
            op->port = optarg;
            break;
        case 'u':
            op->url = optarg;
            break;
        case OPT_TLS:
            op->tls = true;
            break;
        case OPT_CACERT:
            op->cacert = optarg;
            break;
        case OPT_INSECURE:
            op->insecure = true;
            break;
        case OPT_TOKEN_FILE:
            op->token_file = optarg;
            break;
        case OPT_TIMEOUT:
            op->timeout = seconds_arg("--timeout", optarg, 0);
            break;
        case OPT_CREATE:
            op->bulk.create = optarg;
            break;
        case OPT_FIELD:
            op->bulk.keys.field = (unsigned)number_arg("--field", optarg, 1, 1u << 20);
            break;
        case OPT_DELIMITER:
            if (strlen(optarg) != 1 || optarg[0] == '\n') {
                cli_warn("--delimiter: expected one character (not a newline), got '%s'", optarg);
                exit(CLI_EXIT_ERROR);
            }
            op->bulk.keys.delim = optarg[0];
            break;
        case OPT_SKIP_BAD:
            op->bulk.skip_bad = true;
            break;
        case OPT_PRESENT:
            op->bulk.only = 1;
            break;
        case OPT_ABSENT:
            op->bulk.only = -1;
            break;
        case OPT_BATCH:
            op->bulk.batch = (unsigned)number_arg("--batch", optarg, 1, 100000);
            break;
        case OPT_DEPTH:
            op->bulk.depth = (unsigned)number_arg("--depth", optarg, 1, 10000);
            break;
        case OPT_REPLACE:
            op->replace = true;
            break;
        case 'q':
            op->bulk.quiet = true;
            break;
        case OPT_PIPE:
            op->pipe = true;
            break;
        case OPT_STAT:
            op->stat = true;
            if (optarg != NULL)
                op->interval = seconds_arg("--stat", optarg, 0.05);
            else if (optind < argc && looks_like_number(argv[optind]))
                op->interval = seconds_arg("--stat", argv[optind++], 0.05);
            break;
        case OPT_COUNT:
            op->count = (unsigned long)number_arg("--count", optarg, 1, 1ull << 40);
            break;
        case OPT_HELP:
            fputs(usage_text, stdout);
            exit(CLI_EXIT_OK);
        case OPT_VERSION:
            printf("bloomd-cli %s\n", BLOOMD_VERSION);
            exit(CLI_EXIT_OK);
        default:
            fputs("bloomd-cli --help lists the options\n", stderr);
            exit(CLI_EXIT_ERROR);
        }
    }
}

/* The token: --token-file, else $BLOOMD_AUTH_TOKEN, else the URL's; NULL if none. */
static char *read_token(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        cli_warn("--token-file %s: %s", path, strerror(errno));
        exit(CLI_EXIT_ERROR);
    }
    char *buf = cli_alloc(NULL, CLI_TOKEN_MAX + 2);
    size_t n = fread(buf, 1, CLI_TOKEN_MAX + 1, f);
    bool bad = ferror(f);
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    buf[n] = '\0';
    if (bad || n == 0 || n > CLI_TOKEN_MAX || memchr(buf, '\n', n) || memchr(buf, '\r', n) ||
        strlen(buf) != n) {
        cli_warn("--token-file %s: expected one line of 1..%d bytes", path, CLI_TOKEN_MAX);
        exit(CLI_EXIT_ERROR);
    }
    return buf;
}

/* The connection options from the flags and the environment; exits on a bad value. */
static void connection(const struct options *op, struct cli_conn_opts *co, struct cli_url *u,
                       char **token)
{
    memset(co, 0, sizeof *co);
    *token = NULL;
    const char *env_url = getenv("BLOOMD_URL");
    bool from_env = op->url == NULL && op->host == NULL && op->port == NULL && env_url != NULL &&
                    *env_url != '\0';
    const char *url = op->url != NULL ? op->url : from_env ? env_url : NULL;
    co->host = "127.0.0.1";
    co->port = CLI_DEFAULT_PORT;
    if (url != NULL) {
        int rc = cli_url_parse(url, strlen(url), u);
        if (rc != CLI_URL_OK) {
            cli_warn("%s '%s': %s", from_env ? "BLOOMD_URL" : "--url", url, cli_url_strerror(rc));
            exit(CLI_EXIT_ERROR);
        }
        if (u->has_token && !from_env) {
            cli_warn("--url: a token on the command line is visible to every user (ps); use "
                     "--token-file FILE or BLOOMD_AUTH_TOKEN");
            exit(CLI_EXIT_ERROR);
        }
        co->host = u->host;
        co->port = u->port;
        co->tls = u->tls;
        if (u->has_token && memchr(u->token, '\0', u->token_len) == NULL)
            *token = u->token;
    }
    if (op->host != NULL)
        co->host = op->host;
    if (op->port != NULL)
        co->port = (unsigned)number_arg("--port", op->port, 1, 65535);
    co->tls = co->tls || op->tls;
    co->cacert = op->cacert;
    co->insecure = op->insecure;
    co->timeout_ms = (int)(op->timeout * 1000);
    const char *env_token = getenv("BLOOMD_AUTH_TOKEN");
    if (op->token_file != NULL)
        *token = read_token(op->token_file);
    else if (env_token != NULL && *env_token != '\0')
        if ((*token = strdup(env_token)) == NULL)
            cli_oom();
    co->token = *token;
}

static int connect_or_exit(const struct cli_conn_opts *co, struct cli_conn **c)
{
    char err[512];
    int rc = cli_conn_open(co, c, err, sizeof err);
    if (rc == CLI_CONN_OK)
        return CLI_EXIT_OK;
    cli_warn("%s", err);
    return rc == CLI_CONN_EAUTH ? CLI_EXIT_ERROR : CLI_EXIT_CONN;
}

static int one_shot(const struct cli_conn_opts *co, int argc, char **argv)
{
    if (strcasecmp(argv[0], "AUTH") == 0) {
        cli_warn("AUTH: a token on the command line is visible to every user (ps); use "
                 "--token-file FILE or BLOOMD_AUTH_TOKEN");
        return CLI_EXIT_ERROR;
    }
    size_t len = 0;
    for (int i = 0; i < argc; i++) {
        if (strpbrk(argv[i], "\r\n") != NULL) {
            cli_warn("argument %d has a line break: one command per invocation", i + 1);
            return CLI_EXIT_ERROR;
        }
        len += strlen(argv[i]) + 1;
    }
    char *line = cli_alloc(NULL, len + 1);
    size_t o = 0;
    for (int i = 0; i < argc; i++) {
        size_t n = strlen(argv[i]);
        memcpy(line + o, argv[i], n);
        o += n;
        line[o++] = ' ';
    }
    line[o - 1] = '\0';
    struct cli_conn *c;
    int rc = connect_or_exit(co, &c);
    if (rc == CLI_EXIT_OK) {
        rc = interactive_command(c, line, o - 1,
                                 isatty(STDOUT_FILENO) && getenv("NO_COLOR") == NULL);
        cli_conn_free(c);
    }
    free(line);
    return rc;
}

/* argv[0] is the bulk word, argv[1..] its arguments with the options taken out. */
static int bulk(struct options *op, const struct cli_conn_opts *co, int argc, char **argv)
{
    const char *word = argv[0];
    char **rest = argv + 1;
    int nrest = argc - 1;
    struct bulk_opts *b = &op->bulk;
    b->mode = strcmp(word, "add") == 0     ? BULK_ADD
              : strcmp(word, "check") == 0 ? BULK_CHECK
                                           : BULK_DEDUP;
    if (nrest < 1) {
        cli_warn("%s: no filter name (bloomd-cli %s FILTER [FILE%s])", word, word,
                 b->mode == BULK_ADD ? "..." : "");
        return CLI_EXIT_ERROR;
    }
    if (b->mode != BULK_ADD && nrest > 2) {
        cli_warn("%s takes one FILE at most", word);
        return CLI_EXIT_ERROR;
    }
    b->filter = rest[0];
    if (!cli_name_valid(b->filter)) {
        cli_warn("%s: invalid filter name '%s' (1..128 of A-Z a-z 0-9 . _ -, not starting "
                 "with .)",
                 word, b->filter);
        return CLI_EXIT_ERROR;
    }
    if (op->replace) {
        cli_warn("--replace is an option of restore");
        return CLI_EXIT_ERROR;
    }
    if (b->only != 0 && b->mode != BULK_CHECK) {
        cli_warn("--present and --absent are options of check");
        return CLI_EXIT_ERROR;
    }
    b->files = rest + 1;
    b->nfiles = (size_t)(nrest - 1);
    if (b->keys.field > 0 && b->keys.delim == '\0')
        b->keys.delim = '\t';
    b->progress = !b->quiet && isatty(STDERR_FILENO);
    struct cli_conn *c;
    int rc = connect_or_exit(co, &c);
    if (rc != CLI_EXIT_OK)
        return rc;
    rc = bulk_run(c, b);
    cli_conn_free(c);
    return rc;
}

/* dump or restore: argv[0] is the word, argv[1..] its arguments with the options taken out. */
static int dump_restore(const struct options *op, const struct cli_conn_opts *co, int argc,
                        char **argv)
{
    bool is_dump = strcmp(argv[0], "dump") == 0;
    if (argc != 3) {
        cli_warn("usage: bloomd-cli %s",
                 is_dump ? "dump FILTER FILE|-" : "restore FILTER FILE|- [--replace]");
        return CLI_EXIT_ERROR;
    }
    if (!cli_name_valid(argv[1])) {
        cli_warn("%s: invalid filter name '%s' (1..128 of A-Z a-z 0-9 . _ -, not starting "
                 "with .)",
                 argv[0], argv[1]);
        return CLI_EXIT_ERROR;
    }
    if (is_dump && op->replace) {
        cli_warn("--replace is an option of restore");
        return CLI_EXIT_ERROR;
    }
    struct dump_opts d = {.filter = argv[1],
                          .path = argv[2],
                          .replace = op->replace,
                          .progress = !op->bulk.quiet && isatty(STDERR_FILENO)};
    struct cli_conn *c;
    int rc = connect_or_exit(co, &c);
    if (rc != CLI_EXIT_OK)
        return rc;
    rc = is_dump ? dump_run(c, &d) : restore_run(c, &d);
    cli_conn_free(c);
    return rc;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    struct options op;
    memset(&op, 0, sizeof op);
    op.timeout = 30;
    op.interval = 1;
    op.bulk.batch = 500;
    op.bulk.depth = 64;
    parse(&op, argc, argv, true);
    argc -= optind;
    argv += optind;
    bool is_bulk = argc > 0 && (strcmp(argv[0], "add") == 0 || strcmp(argv[0], "check") == 0 ||
                                strcmp(argv[0], "dedup") == 0);
    bool is_dump = argc > 0 && (strcmp(argv[0], "dump") == 0 || strcmp(argv[0], "restore") == 0);
    if (is_bulk || is_dump) { /* options may come anywhere after the word: parse them out */
        optind = 0;
        parse(&op, argc, argv, false);
        argv[optind - 1] = argv[0];
        argv += optind - 1;
        argc -= optind - 1;
    }

    struct cli_conn_opts co;
    struct cli_url url;
    char *token;
    connection(&op, &co, &url, &token);
    if (co.insecure && !co.tls)
        cli_warn("--insecure has no effect without TLS");

    int rc;
    if (op.stat || op.pipe) {
        if (argc > 0) {
            cli_warn("%s takes no command ('%s')", op.stat ? "--stat" : "--pipe", argv[0]);
            rc = CLI_EXIT_ERROR;
        } else if (op.stat) {
            rc = stat_run(&co, op.interval, op.count);
        } else {
            struct cli_conn *c;
            rc = connect_or_exit(&co, &c);
            if (rc == CLI_EXIT_OK) {
                rc = pipe_run(c, STDIN_FILENO, &(struct pipe_opts){.print = false});
                cli_conn_free(c);
            }
        }
    } else if (is_bulk) {
        rc = bulk(&op, &co, argc, argv);
    } else if (is_dump) {
        rc = dump_restore(&op, &co, argc, argv);
    } else if (argc > 0) {
        rc = one_shot(&co, argc, argv);
    } else if (isatty(STDIN_FILENO)) {
        rc = interactive_run(&co);
    } else {
        struct cli_conn *c;
        rc = connect_or_exit(&co, &c);
        if (rc == CLI_EXIT_OK) {
            rc = pipe_run(c, STDIN_FILENO, &(struct pipe_opts){.print = true});
            cli_conn_free(c);
        }
    }
    if (token != NULL && token != url.token)
        free(token);
    return rc;
}
