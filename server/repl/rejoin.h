/*
 * rejoin.h - an old primary's filters sent to its new primary before it takes the new
 * primary's full sync, so that no key it acknowledged is lost (issue 24): each filter is
 * restored there under a temporary name and merged in with UNION, or restored under its
 * own name when the new primary has none. Bloom filters merge by union: nothing needs
 * discarding. The link (replica.c) runs it between AUTH and PSYNC when r->rejoin is set
 * (repl_internal.h says when). Loop thread only.
 */
#ifndef BLOOMD_SERVER_REPL_REJOIN_H
#define BLOOMD_SERVER_REPL_REJOIN_H

struct repl;
struct bufferevent;
struct repl_rejoin;

/*
 * A rejoin of this server's filters as they are now (references taken), which calls
 * done(arg) once, when every filter was sent or given up on: the last thing it does, so
 * done may free it. NULL: no memory (logged).
 */
struct repl_rejoin *repl_rejoin_new(struct repl *r, void (*done)(void *arg), void *arg);

/*
 * A link to the primary is up (and authenticated): the rejoin goes on over bev from where
 * the last link left it. After a few links lost in the middle it gives up (logged) and
 * calls done.
 */
void repl_rejoin_begin(struct repl_rejoin *j, struct bufferevent *bev);

/* A reply line (without CRLF) from the primary while the rejoin runs. */
void repl_rejoin_line(struct repl_rejoin *j, const char *line);

/* The link went down: nothing is written until the next begin. */
void repl_rejoin_lost(struct repl_rejoin *j);

/* Frees the rejoin (the link stopped); an encoding under way is let go. NULL is fine. */
void repl_rejoin_free(struct repl_rejoin *j);

#endif
