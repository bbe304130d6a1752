/*
 * kinds.c - the table of filter kinds: the built-in ones first, then any registered at
 * start-up. A handful of entries, scanned linearly (CREATE and file loads only).
 */
#include "server/store/kinds.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define KINDS_MAX 16

/* Each kind goes by its ops->name everywhere: CREATE's kind=, INFO, /metrics, /api. */
static const struct kind_ops *const builtin[] = {
    &kind_sbf,        /* "blocked" */
    &kind_window,     /* CREATE window=: a blocked filter per generation */
    &kind_expandable, /* "expandable" */
};

static const struct kind_ops *extra[KINDS_MAX];
static size_t nextra;
static char names[256];

#define NBUILTIN (sizeof builtin / sizeof builtin[0])

/* The i-th kind known: the built-in ones, then those registered. i < NBUILTIN + nextra. */
static const struct kind_ops *kind_at(size_t i)
{
    return i < NBUILTIN ? builtin[i] : extra[i - NBUILTIN];
}

static void rebuild_names(void)
{
    size_t n = 0;
    names[0] = '\0';
    for (size_t i = 0; i < NBUILTIN + nextra; i++) {
        const struct kind_ops *ops = kind_at(i);
        int w = snprintf(names + n, sizeof names - n, "%s%s", n > 0 ? " " : "", ops->name);
        if (w < 0 || (size_t)w >= sizeof names - n)
            break;
        n += (size_t)w;
    }
}

int kinds_register(const struct kind_ops *ops)
{
    if (nextra == KINDS_MAX || kinds_by_tag(ops->tag) != NULL ||
        kinds_by_name(ops->name, strlen(ops->name)) != NULL)
        return -1;
    extra[nextra++] = ops;
    rebuild_names();
    return 0;
}

const struct kind_ops *kinds_by_name(const char *name, size_t len)
{
    for (size_t i = 0; i < NBUILTIN + nextra; i++) {
        const struct kind_ops *ops = kind_at(i);
        if (strlen(ops->name) == len && strncasecmp(ops->name, name, len) == 0)
            return ops;
    }
    return NULL;
}

const struct kind_ops *kinds_by_tag(uint32_t tag)
{
    for (size_t i = 0; i < NBUILTIN + nextra; i++)
        if (kind_at(i)->tag == tag)
            return kind_at(i);
    return NULL;
}

const char *kinds_names(void)
{
    if (names[0] == '\0')
        rebuild_names();
    return names;
}
