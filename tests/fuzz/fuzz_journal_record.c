/*
 * fuzz_journal_record.c - libFuzzer harness for the journal record decoder: the input is
 * read frame by frame as replay reads a segment, once as given and once with both
 * checksums repaired (so the payload parser is reached). Each decoded frame must lie
 * inside the input, have valid fields, and re-encode to exactly its bytes; a PARTIAL
 * answer must hold for every shorter view of the same bytes too.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "tests/fuzz/fuzz_check.h"

#include "lib/journal_record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct journal_scratch scratch;
static unsigned char out[JOURNAL_RECORD_MAX];

static void put_le(unsigned char *p, uint64_t v)
{
    for (unsigned i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static bool inside(const void *p, size_t len, const unsigned char *lo, const unsigned char *hi)
{
    const unsigned char *q = p;
    return len == 0 || (q >= lo && q + len <= hi);
}

static void check_frame(const unsigned char *buf, size_t len, long n)
{
    struct journal_record rec;
    CHECK(n > 0 && (size_t)n <= len && (size_t)n >= JOURNAL_RECORD_OVERHEAD);
    CHECK(journal_record_decode(buf, len, &scratch, &rec) == n); /* deterministic */
    CHECK(journal_record_claimed_size(buf, len) == (size_t)n);
    CHECK(rec.pos > 0);
    CHECK(inside(rec.name.ptr, rec.name.len, buf, buf + n));
    CHECK(journal_record_name_valid(rec.name.ptr, rec.name.len));
    if (rec.type == JOURNAL_CREATE || rec.type == JOURNAL_RESTORE)
        CHECK(rec.nparams <= JOURNAL_MAX_PARAMS && inside(rec.params, rec.nparams, buf, buf + n));
    if (rec.type == JOURNAL_UNION || rec.type == JOURNAL_INTERSECT)
        for (size_t i = 0; i < rec.nsources; i++)
            CHECK(inside(rec.sources[i].ptr, rec.sources[i].len, buf, buf + n));
    CHECK(journal_record_size(&rec) == (size_t)n);
    CHECK(journal_record_encode(&rec, rec.pos, out, sizeof out) == n);
    CHECK(memcmp(out, buf, (size_t)n) == 0);
    /* A frame is never complete in fewer bytes. */
    CHECK(journal_record_decode(buf, (size_t)n - 1, &scratch, &rec) == JOURNAL_RECORD_PARTIAL);
}

/* Reads buf as a segment: frames until the first non-frame. */
static void read_all(const unsigned char *buf, size_t len)
{
    size_t at = 0;
    for (int guard = 0; guard < 100000 && at < len; guard++) {
        struct journal_record rec;
        long n = journal_record_decode(buf + at, len - at, &scratch, &rec);
        if (n == JOURNAL_RECORD_PARTIAL) {
            /* Any shorter view is partial too. */
            CHECK(journal_record_decode(buf + at, (len - at) / 2, &scratch, &rec) ==
                  JOURNAL_RECORD_PARTIAL);
            return;
        }
        if (n < 0) {
            CHECK(n == JOURNAL_RECORD_CORRUPT);
            return;
        }
        check_frame(buf + at, len - at, n);
        at += (size_t)n;
    }
}

/* Makes the checksums of the first frame of buf right, where its length allows. */
static void repair(unsigned char *buf, size_t len)
{
    if (len < JOURNAL_RECORD_HEADER)
        return;
    put_le(buf + 16, XXH3_64bits(buf, 16));
    uint64_t plen =
        (uint64_t)buf[0] | (uint64_t)buf[1] << 8 | (uint64_t)buf[2] << 16 | (uint64_t)buf[3] << 24;
    if (plen <= len - JOURNAL_RECORD_OVERHEAD && len >= JOURNAL_RECORD_OVERHEAD) {
        size_t at = JOURNAL_RECORD_HEADER + (size_t)plen;
        put_le(buf + at, XXH3_64bits(buf, at));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly size bytes, so ASan catches any read past the end. */
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    read_all(buf, size);
    repair(buf, size);
    read_all(buf, size);
    free(buf);
    return 0;
}
