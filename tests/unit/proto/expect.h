/*
 * expect.h - the assertions the proto/ tests share: a borrowed slice or a formatted reply
 * holds exactly the given text (a reply that differs is shown in the failure message).
 */
#ifndef BLOOMD_TESTS_UNIT_PROTO_EXPECT_H
#define BLOOMD_TESTS_UNIT_PROTO_EXPECT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "proto/proto.h"
#include "proto/request.h"

static inline void expect_slice(struct proto_slice s, const char *want)
{
    size_t n = strlen(want);
    assert_int_equal(s.len, n);
    if (n > 0)
        assert_memory_equal(s.ptr, want, n);
}

static inline void expect_buf(const struct proto_buf *b, const char *want)
{
    assert_false(b->failed);
    if (b->len != strlen(want) || (b->len > 0 && memcmp(b->data, want, b->len) != 0))
        fail_msg("reply '%.*s', want '%s'", (int)b->len, b->data ? b->data : "", want);
}

#endif
