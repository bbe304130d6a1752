/*
 * jobs.c - the job thread and its queue. One mutex guards both lists; the thread drops
 * it while a job runs. Finished jobs with a done() step go to a second list and one
 * eventfd write wakes the loop, which drains that list in order.
 */
#include "server/core/jobs.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "server/core/log.h"

struct jobs {
    pthread_t thread;
    pthread_mutex_t lock;         /* guards everything down to `running` */
    pthread_cond_t cond;          /* signalled when a job is queued or quit is set */
    struct job *head, *tail;      /* queued jobs, oldest first */
    struct job *done, *done_tail; /* run jobs waiting for their done() step, in order */
    bool quit;                    /* the thread exits once the queue is empty */
    bool running;                 /* a job is being run now */
    int nice;
    const bool *mute;
    int efd;               /* eventfd: the thread wakes the loop */
    struct event *done_ev; /* reads efd, runs the done() steps */
};

static void *job_thread(void *arg)
{
    struct jobs *q = arg;
    bool niced = false;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (q->head == NULL && !q->quit)
            pthread_cond_wait(&q->cond, &q->lock);
        struct job *j = q->head;
        if (j == NULL)
            break; /* quit, and nothing left to do */
        q->head = j->next;
        if (q->head == NULL)
            q->tail = NULL;
        q->running = true;
        pthread_mutex_unlock(&q->lock);

        j->run(j);

        if (!niced) {
            /* Linux nice is per thread: on a busy machine clients go first, the disk
             * waits. Not for the first job, the start-up load (journal replay included):
             * every client waits for that one, and an unprivileged thread cannot raise
             * its priority back once lowered. */
            niced = true;
            if (setpriority(PRIO_PROCESS, (id_t)gettid(), q->nice) != 0)
                log_msg(LOG_DEBUG, "jobs: cannot lower the thread's priority: %s", strerror(errno));
        }
        pthread_mutex_lock(&q->lock);
        q->running = false;
        if (j->done != NULL) {
            j->next = NULL;
            if (q->done_tail)
                q->done_tail->next = j;
            else
                q->done = j;
            q->done_tail = j;
            uint64_t one = 1;
            /* Cannot fail short of a counter overflow; the loop drains it every time. */
            if (write(q->efd, &one, sizeof one) < 0)
                log_msg(LOG_ERROR, "jobs: eventfd write: %s", strerror(errno));
        } else {
            pthread_mutex_unlock(&q->lock);
            j->free(j);
            pthread_mutex_lock(&q->lock);
        }
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
    struct jobs *q = arg;
    uint64_t count;
    (void)what;
    if (read(fd, &count, sizeof count) < 0 && errno != EAGAIN)
        log_msg(LOG_ERROR, "jobs: eventfd read: %s", strerror(errno));
    pthread_mutex_lock(&q->lock);
    struct job *list = q->done;
    q->done = q->done_tail = NULL;
    pthread_mutex_unlock(&q->lock);
    while (list != NULL) {
        struct job *j = list;
        list = j->next;
        if (!*q->mute)
            j->done(j);
        j->free(j);
    }
}

static void jobs_free(struct jobs *q)
{
    if (q->done_ev)
        event_free(q->done_ev);
    if (q->efd >= 0)
        close(q->efd);
    while (q->done) {
        struct job *j = q->done;
        q->done = j->next;
        j->free(j);
    }
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->lock);
    free(q);
}

struct jobs *jobs_start(struct event_base *base, int nice, const bool *mute)
{
    struct jobs *q = calloc(1, sizeof *q);
    if (q == NULL) {
        log_msg(LOG_ERROR, "jobs: out of memory");
        return NULL;
    }
    q->nice = nice;
    q->mute = mute;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->cond, NULL);
    q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->efd < 0) {
        log_msg(LOG_ERROR, "jobs: eventfd: %s", strerror(errno));
        goto fail;
    }
    q->done_ev = event_new(base, q->efd, EV_READ | EV_PERSIST, on_done, q);
    if (q->done_ev == NULL || event_add(q->done_ev, NULL) != 0) {
        log_msg(LOG_ERROR, "jobs: cannot watch the eventfd");
        goto fail;
    }
    int e = pthread_create(&q->thread, NULL, job_thread, q);
    if (e != 0) {
        log_msg(LOG_ERROR, "jobs: cannot start the thread: %s", strerror(e));
        goto fail;
    }
    return q;
fail:
    jobs_free(q);
    return NULL;
}

void jobs_post(struct jobs *q, struct job *j)
{
    j->next = NULL;
    pthread_mutex_lock(&q->lock);
    if (q->quit) { /* the thread is gone or going: run it here, as a job freed late asks */
        pthread_mutex_unlock(&q->lock);
        j->run(j);
        j->free(j);
        return;
    }
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
}

bool jobs_running(struct jobs *q)
{
    pthread_mutex_lock(&q->lock);
    bool r = q->running;
    pthread_mutex_unlock(&q->lock);
    return r;
}

void jobs_stop(struct jobs *q)
{
    if (q == NULL)
        return;
    pthread_mutex_lock(&q->lock);
    q->quit = true;
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
    pthread_join(q->thread, NULL);
    jobs_free(q);
}

int jobs_start_lanes(struct jobs *lanes[JOBS_LANES], struct event_base *base, const bool *mute)
{
    for (int i = 0; i < JOBS_LANES; i++) {
        if ((lanes[i] = jobs_start(base, JOBS_NICE, mute)) == NULL) {
            jobs_stop_lanes(lanes);
            return -1;
        }
    }
    return 0;
}

void jobs_stop_lanes(struct jobs *lanes[JOBS_LANES])
{
    for (int i = 0; i < JOBS_LANES; i++) {
        jobs_stop(lanes[i]); /* the long lane first: its last jobs may use the quick one */
        lanes[i] = NULL;
    }
}
