/*
 * fuzz_expandable_codec.c - libFuzzer harness for the expandable filter's loader: any bytes
 * go to expandable_decode through a memory reader with a 1 MiB limit on blocks, also with
 * the checksum repaired. Whatever decodes must pass the invariant check, re-encode to
 * exactly its input (every field is validated, nothing silently normalised), and survive
 * a few adds, checks and deletes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "lib/expandable.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct in {
    const uint8_t *data;
    size_t len, pos;
};

static long mem_read(void *ctx, void *buf, size_t len)
{
    struct in *r = ctx;
    size_t n = r->len - r->pos;
    if (n > len)
        n = len;
    /* Odd-sized reads, decided by the input itself, exercise the refill loops. */
    if (n > 1 && r->len > 0 && (r->data[r->len - 1] & 1u))
        n = n / 2 + 1;
    memcpy(buf, r->data + r->pos, n);
    r->pos += n;
    return (long)n;
}

struct cmp {
    const uint8_t *want;
    size_t len, pos;
};

/* A writer that compares instead of storing: fails at the first differing byte. */
static int cmp_write(void *ctx, const void *buf, size_t len)
{
    struct cmp *c = ctx;
    if (len > c->len - c->pos || memcmp(c->want + c->pos, buf, len) != 0)
        return -1;
    c->pos += len;
    return 0;
}

static void round_trip(const uint8_t *data, size_t size)
{
    struct in r = {.data = data, .len = size};
    struct expandable *f = NULL;
    if (expandable_decode(mem_read, &r, 1u << 20, NULL, &f) != SBF_OK)
        return;
    if (expandable_verify(f) != SBF_OK)
        abort();
    struct cmp c = {.want = data, .len = size};
    if (expandable_encode(f, cmp_write, &c) != SBF_OK || c.pos != size ||
        expandable_encoded_size(f) != size)
        abort();
    struct sbf_hash h[64];
    bool present[64];
    for (unsigned i = 0; i < 64; i++)
        h[i] = sbf_hash_key(&i, sizeof(i));
    if (expandable_checkadd_batch(f, h, 64, present) == SBF_OK) {
        expandable_check_batch(f, h, 64, present);
        for (unsigned i = 0; i < 64; i++)
            if (!present[i])
                abort();
    }
    size_t deleted;
    (void)expandable_delete_batch(f, h, 32, &deleted);
    if (expandable_verify(f) != SBF_OK)
        abort();
    expandable_free(f);
}

/*
 * Each input is tried as is and with its last 8 bytes replaced by the right checksum, so
 * mutations of headers and blocks also reach the code behind the checksum test.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    round_trip(data, size);
    if (size < 8)
        return 0;
    uint8_t *fixed = malloc(size);
    if (!fixed)
        return 0;
    memcpy(fixed, data, size);
    uint64_t sum = XXH3_64bits(fixed, size - 8);
    for (unsigned i = 0; i < 8; i++)
        fixed[size - 8 + i] = (uint8_t)(sum >> (8 * i));
    round_trip(fixed, size);
    free(fixed);
    return 0;
}
