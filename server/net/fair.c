/*
 * fair.c - the backlog round. A round serves each member that was queued when it began
 * one turn, oldest first, until the pass has used its slice (the first member is always
 * served, so the backlog moves even when polite clients fill the slices); a member that
 * still has work joins again at the tail, so stopping anywhere is resuming there. The
 * pass is told apart by libevent's cached time, which the loop sets once per poll.
 */
#include "server/net/fair.h"

#include <event2/event.h>

#include "server/core/clock.h"

static void unlink_link(struct fair *q, struct fair_link *l)
{
    if (l->prev != NULL)
        l->prev->next = l->next;
    else
        q->head = l->next;
    if (l->next != NULL)
        l->next->prev = l->prev;
    else
        q->tail = l->prev;
    l->prev = l->next = NULL;
    l->queued = false;
    q->count--;
}

static void arm(struct fair *q)
{
    if (q->armed)
        return;
    struct timeval zero = {0, 0};
    q->armed = event_add(q->round, &zero) == 0;
}

/* True once the current pass has run for FAIR_SLICE_NS. */
static bool pass_over(const struct fair *q)
{
    return clock_mono_ns() - q->pass_ns > FAIR_SLICE_NS;
}

static void on_round(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct fair *q = arg;
    q->armed = false;
    uint64_t t0 = fair_enter(q);
    size_t n = q->count; /* members joining during the round wait for the next one */
    for (size_t i = 0; i < n && q->head != NULL; i++) {
        if (i > 0 && pass_over(q))
            break;
        struct fair_link *l = q->head;
        unlink_link(q, l);
        l->turn(l);
    }
    if (q->head != NULL)
        arm(q);
    fair_exit(q, t0);
}

int fair_init(struct fair *q, struct event_base *base, uint64_t *max_stall_us)
{
    *q = (struct fair){.base = base, .max_stall_us = max_stall_us};
    q->round = evtimer_new(base, on_round, q);
    return q->round != NULL ? 0 : -1;
}

void fair_destroy(struct fair *q)
{
    if (q->round != NULL)
        event_free(q->round);
    q->round = NULL;
}

uint64_t fair_enter(struct fair *q)
{
    uint64_t now = clock_mono_ns();
    struct timeval tv;
    if (event_base_gettimeofday_cached(q->base, &tv) == 0 &&
        (tv.tv_sec != q->pass_tv.tv_sec || tv.tv_usec != q->pass_tv.tv_usec)) {
        q->pass_tv = tv;
        q->pass_ns = now;
    }
    return now;
}

void fair_exit(struct fair *q, uint64_t start_ns)
{
    uint64_t us = (clock_mono_ns() - start_ns) / 1000u;
    if (us > *q->max_stall_us)
        *q->max_stall_us = us;
}

void fair_join(struct fair *q, struct fair_link *l)
{
    l->next = NULL;
    l->prev = q->tail;
    if (q->tail != NULL)
        q->tail->next = l;
    else
        q->head = l;
    q->tail = l;
    l->queued = true;
    q->count++;
    arm(q);
}

void fair_remove(struct fair *q, struct fair_link *l)
{
    unlink_link(q, l);
}
