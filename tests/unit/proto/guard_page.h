/*
 * guard_page.h - a buffer whose end touches a PROT_NONE page, for the proto/ parser tests:
 * an input placed with guard_place() ends on the last readable byte, so a parser that reads
 * one byte too far faults instead of passing by luck. Define GUARD_AREA (bytes) before
 * including; use guard_setup/guard_teardown as the group's setup and teardown.
 */
#ifndef BLOOMD_TESTS_UNIT_PROTO_GUARD_PAGE_H
#define BLOOMD_TESTS_UNIT_PROTO_GUARD_PAGE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

static char *guard_base;  /* readable area, guard_size bytes */
static size_t guard_size; /* GUARD_AREA rounded up to pages */

static int guard_setup(void **state)
{
    (void)state;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    guard_size = (GUARD_AREA + page - 1) / page * page;
    char *m =
        mmap(NULL, guard_size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -1;
    if (mprotect(m + guard_size, page, PROT_NONE) != 0)
        return -1;
    guard_base = m;
    return 0;
}

static int guard_teardown(void **state)
{
    (void)state;
    munmap(guard_base, guard_size + (size_t)sysconf(_SC_PAGESIZE));
    return 0;
}

/* Copies s[0..n) so that its last byte is the last readable byte. */
static const char *guard_place(const char *s, size_t n)
{
    assert_true(n <= guard_size);
    char *p = guard_base + guard_size - n;
    if (n > 0)
        memcpy(p, s, n);
    return p;
}

#endif
