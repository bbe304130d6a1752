/*
 * offload.h - lets go of big things off the event loop: filter references whose last
 * unref may free gigabytes (munmap), and objects no filter holds any more. They go to the
 * job thread as one small job. Loop thread.
 */
#ifndef BLOOMD_SERVER_OFFLOAD_H
#define BLOOMD_SERVER_OFFLOAD_H

#include <stddef.h>

#include "lib/kind.h"

struct server;
struct filter;

#define OFFLOAD_MAX 80 /* references per call */

/*
 * Takes over the references f[0..n) (n <= OFFLOAD_MAX; NULL entries skipped) and obj of
 * kind ops (NULL: none), and drops or frees them on the job thread behind the jobs queued
 * there; inline when snapshots do not run or memory is short.
 */
void offload_release(struct server *srv, struct filter *const *f, size_t n,
                     const struct kind_ops *ops, void *obj);

/*
 * Frees mem (from malloc) on the job thread, behind the jobs queued there: for buffers of
 * many megabytes, whose munmap would stall the loop. Inline without a lane. Whoever
 * charged the budget for it releases the charge now.
 */
void offload_free(struct server *srv, void *mem);

#endif
