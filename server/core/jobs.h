/*
 * jobs.h - the background thread (Redis bio.c shape): a FIFO of jobs posted by the event
 * loop, run one at a time on one low-priority thread, and handed back to the loop
 * through an eventfd when they have a done() step. Jobs know nothing of connections;
 * whoever posts one decides what done() does. Workload: few jobs, some of them long
 * (writing a multi-gigabyte filter).
 */
#ifndef BLOOMD_SERVER_JOBS_H
#define BLOOMD_SERVER_JOBS_H

#include <stdbool.h>

struct event_base;

struct job {
    struct job *next;            /* the queue's link */
    void (*run)(struct job *j);  /* on the job thread */
    void (*done)(struct job *j); /* then on the loop thread; NULL: none */
    void (*free)(struct job *j); /* last, on either thread */
};

struct jobs;

/*
 * Starts the thread and watches its eventfd on base. The first job runs at the
 * process's priority (the start-up load: clients wait for it), the rest at nice value
 * `nice`. While *mute is true, done() steps are skipped (the server is stopping: whoever
 * waited for them is gone). Returns the queue, or NULL (logged).
 */
struct jobs *jobs_start(struct event_base *base, int nice, const bool *mute);

/*
 * Appends j behind every queued job. Loop thread. Once jobs_stop() has begun (the free()
 * of a job being dropped may post one), j runs at once on the caller's thread instead,
 * without its done() step.
 */
void jobs_post(struct jobs *q, struct job *j);

/*
 * The server's background lanes (struct server's `lanes`), each a queue with its thread:
 * the long lane takes the start-up load, snapshot writes, big set operations, frees and
 * the pages' popcount pass; the quick lane file removals and small FLUSHes, so they never
 * wait behind a long write. Work for the background is posted to a lane, never to a
 * module's own thread.
 */
enum jobs_lane {
    JOBS_LONG = 0,
    JOBS_QUICK = 1,
};
#define JOBS_LANES 2

/* Nice value of the lanes' threads after their first job (the loop keeps the process's). */
#define JOBS_NICE 10

/* Starts every lane on base (see jobs_start). 0, or -1 with none started (logged). */
int jobs_start_lanes(struct jobs *lanes[JOBS_LANES], struct event_base *base, const bool *mute);

/* Stops the long lane, then the quick one (each runs what is queued first); sets them NULL. */
void jobs_stop_lanes(struct jobs *lanes[JOBS_LANES]);

/* True while a job is running (for STATS). Any thread. */
bool jobs_running(struct jobs *q);

/*
 * Runs every queued job, joins the thread and frees q; done() steps still owed are
 * skipped. jobs_stop(NULL) does nothing. Loop thread, after the loop stopped.
 */
void jobs_stop(struct jobs *q);

#endif
