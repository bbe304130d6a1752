/*
 * advance.c - rotation of time-driven filters and the deferred free of what they drop:
 * a retired generation is released by a job on the long lane, which runs after every job
 * queued there before it (a snapshot reading that generation among them: snapshot.c
 * never writes a time-driven filter on the quick lane).
 */
#include "server/store/advance.h"

#include <stdlib.h>
#include <string.h>

#include "lib/kind.h"
#include "server/core/jobs.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/store/registry.h"

struct retired {
    struct job job;
    void (*release)(void *mem);
    void *mem;
};

static void retired_run(struct job *j)
{
    struct retired *r = (struct retired *)j;
    r->release(r->mem);
}

static void retired_free(struct job *j)
{
    free(j);
}

static void retire(void *ctx, void (*release)(void *mem), void *mem)
{
    struct server *srv = ctx;
    struct retired *r = srv->lanes[JOBS_LONG] != NULL ? calloc(1, sizeof *r) : NULL;
    if (r == NULL) {
        /* No job thread (unit tests) or no memory: no reader can be left behind. */
        if (srv->lanes[JOBS_LONG] != NULL)
            log_msg(LOG_WARN, "out of memory queueing a retired generation: freed at once");
        release(mem);
        return;
    }
    *r = (struct retired){
        .job = {.run = retired_run, .free = retired_free}, .release = release, .mem = mem};
    jobs_post(srv->lanes[JOBS_LONG], &r->job);
}

void advance_filter(struct server *srv, struct filter *f, int64_t now_ms)
{
    /* SBF_ENOMEM (no memory for the new generation) is reported by the next add. */
    (void)f->ops->advance(f->obj, now_ms, retire, srv);
}

void advance_all(struct server *srv, int64_t now_ms, bool readers)
{
    struct filter **all;
    size_t n;
    if (registry_collect(srv->reg, NULL, 0, &all, &n) != REGISTRY_OK)
        return;
    for (size_t i = 0; i < n; i++) {
        if (all[i]->ops->advance != NULL)
            (void)all[i]->ops->advance(all[i]->obj, now_ms, readers ? retire : NULL, srv);
        filter_unref(all[i]);
    }
    free(all);
}

/* kind_field_fn collecting gen0_start, the newest generation's start (window_kind.c). */
static void newest_start(void *ctx, const char *name, enum kind_field_type type, uint64_t u,
                         double d, const char *str)
{
    (void)d;
    (void)str;
    int64_t *latest = ctx;
    if (type == KIND_FIELD_U64 && strcmp(name, "gen0_start") == 0 && u <= INT64_MAX &&
        (int64_t)u > *latest)
        *latest = (int64_t)u;
}

int64_t advance_latest_ms(struct server *srv)
{
    struct filter **all;
    size_t n;
    int64_t latest = INT64_MIN;
    if (registry_collect(srv->reg, NULL, 0, &all, &n) != REGISTRY_OK)
        return latest;
    for (size_t i = 0; i < n; i++) {
        if (all[i]->ops->advance != NULL && all[i]->ops->fields != NULL)
            all[i]->ops->fields(all[i]->obj, NULL, newest_start, &latest);
        filter_unref(all[i]);
    }
    free(all);
    return latest;
}
