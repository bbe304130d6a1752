/*
 * cmdlib.c - helpers shared by the command modules (see cmdlib.h).
 */
#include "server/exec/cmdlib.h"

#include "server/core/clock.h"
#include "server/core/server.h"
#include "server/store/advance.h"
#include "server/store/registry.h"

struct filter *cmdlib_lookup(struct server *srv, struct proto_slice name)
{
    struct filter *f = registry_get(srv->reg, name.ptr, name.len);
    /* A replica's windows rotate only through its primary's records. */
    if (f != NULL && f->ops->advance != NULL && srv->repl.role == SERVER_PRIMARY)
        advance_filter(srv, f, clock_window_ms());
    return f;
}

void cmdlib_not_found(struct result *res, struct proto_slice name)
{
    result_set_copy(res, RESULT_NOT_FOUND, name.ptr, name.len);
}

void cmdlib_lib_error(struct result *res, int err)
{
    switch (err) {
    case SBF_ENOMEM:
        result_set(res, RESULT_SERVER_ERROR, "out of memory");
        break;
    case SBF_ELIMIT:
        result_set(res, RESULT_SERVER_ERROR, "filter cannot grow: stage limit reached");
        break;
    case SBF_EFULL: /* RedisBloom's words, which its clients match; a client's error,
                     * since no retry can succeed */
        result_set(res, RESULT_CLIENT_ERROR, "non scaling filter is full");
        break;
    case SBF_EINCOMPAT:
        result_set(res, RESULT_CLIENT_ERROR, "incompatible filters");
        break;
    case SBF_EGROWN:
        result_set(res, RESULT_CLIENT_ERROR,
                   "cannot intersect grown filters (more than one stage)");
        break;
    case SBF_ENOTSUP:
        result_set(res, RESULT_CLIENT_ERROR, "not supported by this filter kind");
        break;
    default:
        result_set(res, RESULT_SERVER_ERROR, sbf_strerror(err));
        break;
    }
}
