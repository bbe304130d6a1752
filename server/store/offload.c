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
    void *mem;
};

static void release_now(struct release_job *j)
{
    for (size_t i = 0; i < j->n; i++)
        filter_unref(j->f[i]);
    if (j->obj != NULL)
        j->ops->free(j->obj);
    free(j->mem);
    j->n = 0;
    j->obj = NULL;
    j->mem = NULL;
}

static void release_run(struct job *job)
{
    release_now((struct release_job *)job);
}

static void release_free(struct job *job)
{
    release_now((struct release_job *)job); /* only if it never ran (shutdown) */
    free(job);
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
        for (size_t i = 0; i < n; i++)
            filter_unref(f[i]);
        if (obj != NULL)
            ops->free(obj);
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

void offload_free(struct server *srv, void *mem)
{
    struct release_job *j = NULL;
    if (mem != NULL && srv->lanes[JOBS_LONG] != NULL)
        j = calloc(1, sizeof *j);
    if (j == NULL) {
        free(mem);
        return;
    }
    j->job = (struct job){.run = release_run, .free = release_free};
    j->mem = mem;
    jobs_post(srv->lanes[JOBS_LONG], &j->job);
}
