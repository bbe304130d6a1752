/*
 * recover.c - start-up: snapfile's directory scan, with its findings turned into
 * registry entries and log lines, then the journal's records replayed over them through
 * exec/mutate.c (the functions the live commands call; the journal is not open yet, so
 * nothing is journaled again), then the journal opened for appending.
 */
#include "server/exec/recover.h"

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
#include "server/exec/mutate.h"
#include "server/persist/durable.h"
#include "server/persist/journal.h"
#include "server/persist/snapfile.h"
#include "server/store/advance.h"
#include "server/store/registry.h"

static int on_loaded(void *ctx, const char *name, const struct kind_ops *ops, void *obj,
                     const struct container_header *hdr, uint64_t bytes, int64_t mtime)
{
    struct server *srv = ctx;
    /* Time-driven filters are brought up to now by recover_settle(), after the journal's
     * records (which carry their own times) are replayed over them. */
    struct filter *flt = NULL;
    int rc = registry_install(srv->reg, name, strlen(name), ops, obj, hdr->seed, false, &flt);
    if (rc != REGISTRY_OK) {
        log_msg(LOG_ERROR, "snapshot: cannot register %s.bloom: %s", name,
                rc == REGISTRY_EXISTS ? "name taken" : "out of memory");
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
    filter_unref(flt);
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
    /* Nobody reads yet: what expired while the daemon was down is freed at once. A
     * replica's windows rotate only through its primary's records. */
    if (srv->cfg.replica_of[0] == '\0')
        advance_all(srv, clock_window_ms(), false);
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

/* ---- the journal ---- */

static int apply(void *ctx, const struct journal_record *rec)
{
    return mutate_apply_record(ctx, rec);
}

static void report(void *ctx, enum journal_replay_event ev, const char *file, const char *moved_to,
                   uint64_t offset, const char *reason)
{
    (void)ctx;
    switch (ev) {
    case JOURNAL_RP_TORN:
        log_msg(LOG_WARN,
                "journal: %s ended mid-record at offset %llu (a crash while writing): "
                "the torn record was dropped",
                file, (unsigned long long)offset);
        break;
    case JOURNAL_RP_DAMAGED:
        log_msg(LOG_ERROR,
                "journal: %s is damaged at offset %llu (%s): the rest of it was NOT replayed; "
                "set aside as %s",
                file, (unsigned long long)offset, reason, moved_to);
        break;
    case JOURNAL_RP_KEPT_BAD:
        log_msg(LOG_ERROR,
                "journal: %s is damaged at offset %llu (%s): the rest of it was NOT replayed; "
                "it could not be set aside",
                file, (unsigned long long)offset, reason);
        break;
    case JOURNAL_RP_IGNORED:
        log_msg(LOG_WARN, "journal: ignoring %s: %s", file, reason);
        break;
    }
}

/* The highest position any loaded snapshot covers. */
static uint64_t max_snapshot_pos(struct server *srv)
{
    struct filter **all;
    size_t n;
    uint64_t max = 0;
    if (registry_collect(srv->reg, NULL, 0, &all, &n) != REGISTRY_OK)
        return 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t p = atomic_load(&all[i]->journal_pos);
        max = p > max ? p : max;
        filter_unref(all[i]);
    }
    free(all);
    return max;
}

int recover_journal(struct server *srv)
{
    if (srv->cfg.durability == DURABILITY_SNAPSHOT)
        return RECOVER_OK;
    struct mutate_stream *st = mutate_stream_new(srv, true);
    if (st == NULL) {
        log_msg(LOG_ERROR, "journal: out of memory");
        return RECOVER_EIO;
    }
    struct journal_replay_ops ops = {.apply = apply, .report = report, .ctx = st};
    struct journal_replay_report rep;
    struct journal_error err;
    char msg[1200];
    uint64_t t0 = clock_mono_ms();
    int replayed = journal_replay(srv->cfg.data_dir, 0, &ops, &rep, &err);
    struct mutate_stream_figures fig;
    mutate_stream_free(st, &fig);
    if (replayed != 0) {
        log_msg(LOG_ERROR, "journal: replay failed: %s", journal_format(&err, msg, sizeof msg));
        return RECOVER_EIO;
    }
    if (rep.records > 0)
        log_msg(LOG_INFO,
                "journal: replayed %llu of %llu records from %llu segments in %llu ms (%llu "
                "covered by snapshots, %llu about filters not there); %llu keys replayed, %llu "
                "of them by %u threads; %llu zero bytes cut off segment ends",
                (unsigned long long)fig.applied, (unsigned long long)rep.records,
                (unsigned long long)rep.segments, (unsigned long long)(clock_mono_ms() - t0),
                (unsigned long long)fig.skipped, (unsigned long long)fig.unknown,
                (unsigned long long)fig.keys, (unsigned long long)fig.sharded, fig.threads,
                (unsigned long long)rep.zero_bytes);
    uint64_t min = max_snapshot_pos(srv);
    if (durable_start(srv, rep.last_pos > min ? rep.last_pos : min) != 0)
        return RECOVER_EIO;
    srv->repl.offset = durable_last_pos(srv); /* the stream goes on from the journal's end
                                                 (a replica's: shifted, see repl_start) */
    return RECOVER_OK;
}
