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

/* Appends j behind every queued job. Loop thread. */
void jobs_post(struct jobs *q, struct job *j);

/* True while a job is running (for STATS). Any thread. */
bool jobs_running(struct jobs *q);

/*
 * Runs every queued job, joins the thread and frees q; done() steps still owed are
 * skipped. jobs_stop(NULL) does nothing. Loop thread, after the loop stopped.
 */
void jobs_stop(struct jobs *q);

#endif
