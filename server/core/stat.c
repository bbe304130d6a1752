/*
 * stat.c - the rows of stat.h's table as data, for the renderers to walk.
 */
#include "server/core/stat.h"

const struct stat_def stat_defs[STAT_COUNT] = {
#define STAT_DEF(id, nm, ty, src, mcn, pk, fam, sc, lb, hp)                                        \
    [STAT_##id] = {.name = nm,                                                                     \
                   .type = ty,                                                                     \
                   .source = src,                                                                  \
                   .mc = mcn,                                                                      \
                   .prom = pk,                                                                     \
                   .family = fam,                                                                  \
                   .scale = sc,                                                                    \
                   .label = lb,                                                                    \
                   .help = hp},
    STATS_TABLE(STAT_DEF)
#undef STAT_DEF
};
