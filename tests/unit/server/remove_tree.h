/*
 * remove_tree.h - what the journal tests (test_journal.c, test_journal_read.c) share to
 * clean up: removes a temporary directory and everything under it.
 */
#ifndef BLOOMD_TESTS_REMOVE_TREE_H
#define BLOOMD_TESTS_REMOVE_TREE_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static inline void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char path[512];
    while (d && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        int n = snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (n < 0 || (size_t)n >= sizeof path)
            continue; /* longer than any name these tests make */
        if (unlink(path) != 0)
            remove_tree(path);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

#endif
