/*
 * kinds.c - the table of filter kinds: the built-in ones first, then any registered at
 * start-up. A handful of entries, scanned linearly (CREATE and file loads only).
 */
#include "server/store/kinds.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define KINDS_MAX 16

/* The user-facing name of the sbf kind: "blocked" (lib calls it sbf). */
static const struct {
    const struct kind_ops *ops;
    const char *name;
} builtin[] = {
    {&kind_sbf, "blocked"},
    {&kind_window, "window"}, /* CREATE window=: a blocked filter per generation */
    {&kind_expandable, "expandable"},
};

static const struct kind_ops *extra[KINDS_MAX];
static size_t nextra;
static char names[256];

const char *kinds_name(const struct kind_ops *ops)
{
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
        if (builtin[i].ops == ops)
            return builtin[i].name;
    return ops->name;
}

static void rebuild_names(void)
{
    size_t n = 0;
    names[0] = '\0';
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0] + nextra; i++) {
        const struct kind_ops *ops = i < sizeof builtin / sizeof builtin[0]
                                         ? builtin[i].ops
                                         : extra[i - sizeof builtin / sizeof builtin[0]];
        int w = snprintf(names + n, sizeof names - n, "%s%s", n > 0 ? " " : "", kinds_name(ops));
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
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
        if (strlen(builtin[i].name) == len && strncasecmp(builtin[i].name, name, len) == 0)
            return builtin[i].ops;
    for (size_t i = 0; i < nextra; i++)
        if (strlen(extra[i]->name) == len && strncasecmp(extra[i]->name, name, len) == 0)
            return extra[i];
    return NULL;
}

const struct kind_ops *kinds_by_tag(uint32_t tag)
{
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
        if (builtin[i].ops->tag == tag)
            return builtin[i].ops;
    for (size_t i = 0; i < nextra; i++)
        if (extra[i]->tag == tag)
            return extra[i];
    return NULL;
}

const char *kinds_names(void)
{
    if (names[0] == '\0')
        rebuild_names();
    return names;
}
