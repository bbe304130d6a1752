/*
 * interactive.c - the prompt. libedit's readline interface keeps this small: readline()
 * edits a line, the history lives in memory and is written to the file after every
 * command (so a killed CLI loses nothing), and completion asks the server for LIST when
 * the word being completed is a filter name. The connection is checked before each
 * command: a server that restarted while the prompt was idle closed it, and the next
 * command reconnects first. A connection that fails during a command is not retried (the
 * command may have run); the next command reconnects.
 */
#include "cli/interactive.h"

#include <ctype.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <editline/readline.h>

#include "cli/msg.h"
#include "cli/reply.h"

#define HISTORY_LINES 1000
#define RED "\033[31m"
#define RESET "\033[0m"

/* The protocol's commands, for completion (help and quit are local words). */
static const char *const commands[] = {
    "ADD",  "AUTH", "CHECK",     "CHECKADD", "CLEAR", "CREATE", "DELETE", "DROP",    "FLUSH",
    "HELP", "INFO", "INTERSECT", "LIST",     "QUIT",  "STATS",  "UNION",  "VERSION",
};

/* The connection completion may use (the prompt's), or NULL. */
static struct cli_conn *completion_conn;
static char **candidates; /* the words completion offers now */
static size_t ncandidates, next_candidate;

/* True if the first word of line[0..len) is word (any case). */
static bool first_word_is(const char *line, size_t len, const char *word)
{
    size_t i = 0, n = strlen(word);
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    return len - i >= n && strncasecmp(line + i, word, n) == 0 &&
           (len - i == n || line[i + n] == ' ' || line[i + n] == '\t' || line[i + n] == '\r');
}

int interactive_command(struct cli_conn *c, const char *line, size_t len, bool color)
{
    /* Their data blocks are binary and of any size: the dump and restore modes stream them. */
    if (first_word_is(line, len, "DUMP") || first_word_is(line, len, "RESTORE")) {
        bool dump = first_word_is(line, len, "DUMP");
        cli_warn("%s carries a binary data block: use bloomd-cli %s", dump ? "DUMP" : "RESTORE",
                 dump ? "dump FILTER FILE|-" : "restore FILTER FILE|- [--replace]");
        return CLI_EXIT_ERROR;
    }
    char *req = cli_alloc(NULL, len + 1);
    memcpy(req, line, len);
    req[len] = '\n';
    enum cli_shape shape = cli_request_shape(req, len + 1);
    free(req);
    if (shape == CLI_SHAPE_NONE)
        return CLI_EXIT_OK;
    if (cli_conn_send(c, line, len) != CLI_CONN_OK) {
        cli_warn("%s: %s", cli_conn_addr(c), cli_conn_error(c));
        return CLI_EXIT_CONN;
    }
    if (shape == CLI_SHAPE_CLOSE)
        return CLI_EXIT_OK;
    int rc = CLI_EXIT_OK;
    for (bool first = true;; first = false) {
        struct proto_slice r;
        if (cli_conn_getline(c, &r) != CLI_CONN_OK) {
            fflush(stdout);
            cli_warn("%s: %s", cli_conn_addr(c), cli_conn_error(c));
            return CLI_EXIT_CONN;
        }
        bool err = first && cli_reply_is_error(r.ptr, r.len);
        if (err)
            rc = CLI_EXIT_ERROR;
        if (err && color)
            printf(RED "%.*s" RESET "\n", (int)r.len, r.ptr);
        else
            printf("%.*s\n", (int)r.len, r.ptr);
        if (shape == CLI_SHAPE_LINE || cli_block_ends(r.ptr, r.len, first))
            break;
    }
    fflush(stdout);
    return rc;
}

/* ---- completion ---- */

static void add_candidate(const char *s, size_t n)
{
    candidates = cli_alloc(candidates, (ncandidates + 1) * sizeof *candidates);
    char *w = cli_alloc(NULL, n + 1);
    memcpy(w, s, n);
    w[n] = '\0';
    candidates[ncandidates++] = w;
}

static void clear_candidates(void)
{
    for (size_t i = 0; i < ncandidates; i++)
        free(candidates[i]);
    free(candidates);
    candidates = NULL;
    ncandidates = next_candidate = 0;
}

static char *next_match(const char *text, int state)
{
    (void)text; /* the candidates already match it */
    if (state == 0)
        next_candidate = 0;
    if (next_candidate >= ncandidates)
        return NULL;
    return strdup(candidates[next_candidate++]);
}

/* The filter names starting with prefix, through LIST. */
static void list_filters(const char *prefix)
{
    struct cli_conn *c = completion_conn;
    if (c == NULL || !cli_conn_alive(c))
        return;
    char line[160];
    bool valid =
        strlen(prefix) <= 128 && strspn(prefix, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklm"
                                                "nopqrstuvwxyz0123456789._-") == strlen(prefix);
    int n = snprintf(line, sizeof line, valid && *prefix ? "LIST %s" : "LIST", prefix);
    if (cli_conn_send(c, line, (size_t)n) != CLI_CONN_OK)
        return;
    for (bool first = true;; first = false) {
        struct proto_slice r;
        if (cli_conn_getline(c, &r) != CLI_CONN_OK || cli_block_ends(r.ptr, r.len, first))
            return;
        if (r.len > 7 && memcmp(r.ptr, "FILTER ", 7) == 0) {
            const char *name = r.ptr + 7;
            const char *sp = memchr(name, ' ', r.len - 7);
            size_t nl = sp != NULL ? (size_t)(sp - name) : r.len - 7;
            if (nl >= strlen(prefix) && memcmp(name, prefix, strlen(prefix)) == 0)
                add_candidate(name, nl);
        }
    }
}

/* True if argument number arg (1 = after the command) of cmd is a filter name. */
static bool takes_filter(const char *cmd, size_t n, int arg)
{
    static const char *const first[] = {"ADD",  "CHECK", "CHECKADD", "CLEAR", "DELETE",
                                        "DROP", "FLUSH", "INFO",     "LIST"};
    static const char *const all[] = {"UNION", "INTERSECT"};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strlen(all[i]) == n && strncasecmp(cmd, all[i], n) == 0)
            return arg >= 1;
    for (size_t i = 0; i < sizeof first / sizeof first[0]; i++)
        if (strlen(first[i]) == n && strncasecmp(cmd, first[i], n) == 0)
            return arg == 1;
    return false;
}

static char **complete(const char *text, int start, int end)
{
    (void)end;
    rl_attempted_completion_over = 1; /* never fall back to file names */
    clear_candidates();
    const char *buf = rl_line_buffer;
    /* Which word is being completed, and the command word. */
    int arg = 0;
    const char *cmd = NULL;
    size_t cmdlen = 0;
    for (int i = 0; i < start;) {
        while (i < start && buf[i] == ' ')
            i++;
        if (i >= start)
            break;
        int from = i;
        while (i < start && buf[i] != ' ')
            i++;
        if (arg == 0) {
            cmd = buf + from;
            cmdlen = (size_t)(i - from);
        }
        arg++;
    }
    size_t tl = strlen(text);
    if (arg == 0) {
        bool lower = tl > 0 && islower((unsigned char)text[0]);
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
            if (strncasecmp(commands[i], text, tl) != 0)
                continue;
            char w[16];
            size_t n = strlen(commands[i]);
            for (size_t j = 0; j <= n; j++)
                w[j] = lower ? (char)tolower((unsigned char)commands[i][j]) : commands[i][j];
            add_candidate(w, n);
        }
    } else if (cmd != NULL && takes_filter(cmd, cmdlen, arg)) {
        list_filters(text);
    }
    if (ncandidates == 0)
        return NULL;
    return rl_completion_matches(text, next_match);
}

/* ---- the prompt ---- */

static char *history_path(void)
{
    const char *home = getenv("HOME");
    if (home == NULL || *home == '\0') {
        struct passwd *pw = getpwuid(getuid());
        home = pw != NULL ? pw->pw_dir : NULL;
    }
    if (home == NULL)
        return NULL;
    size_t n = strlen(home) + sizeof "/.bloomd_history";
    char *p = cli_alloc(NULL, n);
    snprintf(p, n, "%s/.bloomd_history", home);
    return p;
}

/* Prints the server's HELP, all of it or the lines of one command. */
static int help(struct cli_conn *c, const char *word)
{
    if (cli_conn_send(c, "HELP", 4) != CLI_CONN_OK) {
        cli_warn("%s: %s", cli_conn_addr(c), cli_conn_error(c));
        return CLI_EXIT_CONN;
    }
    size_t wl = word != NULL ? strlen(word) : 0;
    bool shown = false;
    for (bool first = true;; first = false) {
        struct proto_slice r;
        if (cli_conn_getline(c, &r) != CLI_CONN_OK) {
            cli_warn("%s: %s", cli_conn_addr(c), cli_conn_error(c));
            return CLI_EXIT_CONN;
        }
        if (cli_block_ends(r.ptr, r.len, first)) {
            if (!(r.len == 3 && memcmp(r.ptr, "END", 3) == 0))
                printf("%.*s\n", (int)r.len, r.ptr);
            break;
        }
        bool match = word == NULL || (r.len >= wl && strncasecmp(r.ptr, word, wl) == 0 &&
                                      (r.len == wl || r.ptr[wl] == ' '));
        if (match) {
            printf("%.*s\n", (int)r.len, r.ptr);
            shown = true;
        }
    }
    if (word == NULL)
        printf("(help <command> shows one; Tab completes commands and filter names; "
               "quit or Ctrl-D leaves)\n");
    else if (!shown)
        printf("no command '%s' (help lists them)\n", word);
    fflush(stdout);
    return CLI_EXIT_OK;
}

/* Connects if not connected or if the server closed an idle connection. */
static struct cli_conn *ensure(struct cli_conn *c, const struct cli_conn_opts *o, bool quiet)
{
    if (c != NULL && cli_conn_alive(c))
        return c;
    bool was = c != NULL;
    cli_conn_free(c);
    char err[512];
    struct cli_conn *n = NULL;
    if (cli_conn_open(o, &n, err, sizeof err) != CLI_CONN_OK) {
        if (!quiet)
            cli_warn("%s", err);
        return NULL;
    }
    if (was)
        fprintf(stderr, "(reconnected to %s)\n", cli_conn_addr(n));
    return n;
}

int interactive_run(const struct cli_conn_opts *o)
{
    bool color = isatty(STDOUT_FILENO) && getenv("NO_COLOR") == NULL;
    char addr[CLI_ADDR_MAX];
    snprintf(addr, sizeof addr, strchr(o->host, ':') ? "[%s]:%u" : "%s:%u", o->host, o->port);
    char prompt[CLI_ADDR_MAX + 32];

    rl_readline_name = "bloomd-cli";
    rl_attempted_completion_function = complete;
    rl_completer_word_break_characters = " ";
    using_history();
    stifle_history(HISTORY_LINES);
    char *hist = history_path();
    if (hist != NULL)
        read_history(hist);

    struct cli_conn *c = ensure(NULL, o, false);
    for (;;) {
        completion_conn = c;
        snprintf(prompt, sizeof prompt, c != NULL ? "%s> " : "%s (not connected)> ", addr);
        char *line = readline(prompt);
        if (line == NULL)
            break;
        char *s = line;
        while (*s == ' ')
            s++;
        size_t len = strlen(s);
        while (len > 0 && s[len - 1] == ' ')
            len--;
        s[len] = '\0';
        if (len == 0) {
            free(line);
            continue;
        }
        if (strcasecmp(s, "quit") == 0 || strcasecmp(s, "exit") == 0) {
            free(line);
            break;
        }
        if (strncasecmp(s, "AUTH ", 5) != 0 && strcasecmp(s, "AUTH") != 0) {
            add_history(s); /* never a token in the history file */
            if (hist != NULL)
                write_history(hist);
        }
        c = ensure(c, o, false);
        if (c == NULL) {
            free(line);
            continue;
        }
        int rc;
        if (strncasecmp(s, "help", 4) == 0 && (s[4] == '\0' || s[4] == ' ')) {
            const char *w = s + 4;
            while (*w == ' ')
                w++;
            rc = help(c, *w ? w : NULL);
        } else {
            rc = interactive_command(c, s, len, color);
        }
        if (rc == CLI_EXIT_CONN) {
            cli_conn_free(c);
            c = NULL;
        }
        free(line);
    }
    clear_candidates();
    cli_conn_free(c);
    free(hist);
    return CLI_EXIT_OK;
}
