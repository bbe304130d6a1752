/*
 * fuzz_check.h - the harnesses' assertion: CHECK(cond) aborts when cond is false, in every
 * build (unlike assert, NDEBUG cannot remove it), so libFuzzer reports the input.
 */
#ifndef BLOOMD_TESTS_FUZZ_CHECK_H
#define BLOOMD_TESTS_FUZZ_CHECK_H

#include <stdlib.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            abort();                                                                               \
    } while (0)

#endif
