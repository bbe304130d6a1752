/*
 * recover.c - the start-up load: snapfile's directory scan, with its findings turned
 * into registry entries and log lines.
 */
#include "server/persist/recover.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lib/container.h"
#include "lib/kind.h"
#include "lib/sbf.h"
#include "server/core/clock.h"
#include "server/core/log.h"
#include "server/core/server.h"
#include "server/persist/snapfile.h"
#include "server/store/advance.h"
#include "server/store/registry.h"

static int on_loaded(void *ctx, const char *name, const struct kind_ops *ops, void *obj,
                     const struct container_header *hdr, uint64_t bytes, int64_t mtime)
{
    struct server *srv = ctx;
    /* Time-driven filters are brought up to now by recover_settle(), after the journal's
     * records (which carry their own times) are replayed over them. */
    struct filter *flt = filter_new(name, strlen(name), ops, obj);
    if (flt == NULL) {
        ops->free(obj);
        log_msg(LOG_ERROR, "snapshot: out of memory loading %s.bloom", name);
        return RECOVER_EIO;
    }
    /* Clean unless it is an old format: the file holds exactly this content. A blocked
     * filter whose payload has the fixed v2 size is an sbf v2 stream (every zero written):
     * rewrite it too, so an empty filter's 1.7 GB file becomes 129 bytes. O(stages). */
    bool old =
        hdr->version < CONTAINER_VERSION ||
        (ops == &kind_sbf &&
         bytes == CONTAINER_HEADER_BYTES + sbf_encoded_size_stages(obj, sbf_stage_count(obj)));
    atomic_store(&flt->changes, old ? 1 : 0);
    atomic_store(&flt->saved_at, mtime);
    atomic_store(&flt->journal_pos, hdr->journal_pos); /* the journal is replayed from here */
    int rc = registry_put(srv->reg, flt);
    filter_unref(flt);
    if (rc != REGISTRY_OK) {
        log_msg(LOG_ERROR, "snapshot: cannot register %s.bloom: %s", name,
                rc == REGISTRY_EXISTS ? "name taken" : "out of memory");
        return RECOVER_EIO;
    }
    log_event(LOG_INFO, (struct log_field[]){LOG_STR("filter", name), LOG_U64("bytes", bytes)}, 2,
              "snapshot: loaded filter '%s' (%llu bytes%s)", name, (unsigned long long)bytes,
              old ? ", old format: rewritten at the next snapshot" : "");
    return 0;
}

static void on_report(void *ctx, enum snapfile_event ev, const char *file, const char *moved_to,
                      const char *reason)
{
    (void)ctx;
    switch (ev) {
    case SNAPFILE_EV_TMP_REMOVED:
        log_msg(LOG_INFO, "snapshot: removed stale %s (an interrupted snapshot)", file);
        break;
    case SNAPFILE_EV_QUARANTINED:
        log_event(LOG_ERROR, (struct log_field[]){LOG_STR("path", file), LOG_STR("error", reason)},
                  2, "snapshot: %s is damaged (%s); moved aside to %s, not loaded", file, reason,
                  moved_to);
        break;
    case SNAPFILE_EV_KEPT_BAD:
        log_msg(LOG_ERROR, "snapshot: %s is damaged (%s); not loaded", file, reason);
        break;
    case SNAPFILE_EV_SET_ASIDE:
        log_event(LOG_ERROR, (struct log_field[]){LOG_STR("path", file), LOG_STR("error", reason)},
                  2, "snapshot: %s not loaded (%s); moved aside to %s", file, reason, moved_to);
        break;
    case SNAPFILE_EV_KEPT_UNLOADED:
        log_msg(LOG_ERROR, "snapshot: %s not loaded (%s)", file, reason);
        break;
    case SNAPFILE_EV_TMP_KEPT:
        log_msg(LOG_WARN, "snapshot: stale %s (an interrupted snapshot) left in place: %s", file,
                reason);
        break;
    case SNAPFILE_EV_IGNORED:
        log_msg(LOG_WARN, "snapshot: ignoring %s: %s", file, reason);
        break;
    }
}

void recover_settle(struct server *srv)
{
    /* Nobody reads yet: what expired while the daemon was down is freed at once. */
    advance_all(srv, clock_wall_ms(), false);
}

int recover_load(struct server *srv)
{
    struct snapfile_load_ops ops = {.loaded = on_loaded, .report = on_report, .ctx = srv};
    struct snapfile_error err;
    char msg[512];
    int rc = snapfile_load_dir(srv->cfg.data_dir, 0, &srv->budget.sbf, &ops, &err);
    if (rc == 0)
        return RECOVER_OK;
    if (rc != SNAPFILE_ECALLER) {
        snapfile_format(&err, msg, sizeof msg);
        log_msg(LOG_ERROR, "snapshot: loading the data directory failed: %s", msg);
    }
    return RECOVER_EIO;
}
