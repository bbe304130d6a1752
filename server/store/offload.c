/*
 * offload.c - the job that drops references and frees objects on the job thread.
 */
#include "server/store/offload.h"

#include <assert.h>
#include <stdlib.h>

#include "server/core/jobs.h"
#include "server/core/server.h"
#include "server/store/registry.h"

struct release_job {
    struct job job; /* first member */
    struct filter *f[OFFLOAD_MAX];
    size_t n;
    const struct kind_ops *ops;
    void *obj;
};

static void release_now(struct filter *const *f, size_t n, const struct kind_ops *ops, void *obj)
{
    for (size_t i = 0; i < n; i++)
        filter_unref(f[i]);
    if (obj != NULL)
        ops->free(obj);
}

static void release_run(struct job *job)
{
    struct release_job *j = (struct release_job *)job;
    release_now(j->f, j->n, j->ops, j->obj);
    j->n = 0;
    j->obj = NULL;
}

static void release_free(struct job *job)
{
    struct release_job *j = (struct release_job *)job;
    release_now(j->f, j->n, j->ops, j->obj); /* only if it never ran (shutdown) */
    free(j);
}

void offload_release(struct server *srv, struct filter *const *f, size_t n,
                     const struct kind_ops *ops, void *obj)
{
    assert(n <= OFFLOAD_MAX);
    size_t held = 0;
    for (size_t i = 0; i < n; i++)
        held += f[i] != NULL;
    if (held == 0 && obj == NULL)
        return;
    struct release_job *j = srv->lanes[JOBS_LONG] != NULL ? calloc(1, sizeof *j) : NULL;
    if (j == NULL) {
        release_now(f, n, ops, obj);
        return;
    }
    j->job = (struct job){.run = release_run, .free = release_free};
    for (size_t i = 0; i < n; i++)
        if (f[i] != NULL)
            j->f[j->n++] = f[i];
    j->ops = ops;
    j->obj = obj;
    jobs_post(srv->lanes[JOBS_LONG], &j->job);
}
