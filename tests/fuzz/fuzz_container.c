/*
 * fuzz_container.c - libFuzzer harness for the snapshot container (lib/container.c):
 * any bytes go to container_decode with the sbf kind known, also with the header
 * checksum and the payload checksum repaired so mutations reach the code behind them.
 * Whatever decodes must re-encode to exactly its input (v3) or to a valid v3 file that
 * decodes to the same payload (v2).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "tests/fuzz/fuzz_io.h"

#include "lib/container.h"
#include "lib/kind.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct kind_ops *find(void *ctx, uint32_t tag)
{
    (void)ctx;
    return tag == KIND_TAG_SBF ? &kind_sbf : NULL;
}

static void round_trip(const uint8_t *data, size_t size)
{
    struct fuzz_in r = {.data = data, .len = size};
    const struct kind_ops *ops = NULL;
    void *f = NULL;
    struct container_header h;
    if (container_decode(fuzz_read, &r, find, NULL, 1u << 20, NULL, &ops, &f, &h) != SBF_OK)
        return;
    if (ops != &kind_sbf || ops->verify(f) != SBF_OK)
        abort();
    if (h.version == CONTAINER_VERSION) {
        struct fuzz_cmp c = {.want = data, .len = size};
        if (container_encode(ops, f, h.journal_pos, fuzz_cmp_write, &c) != SBF_OK ||
            c.pos != size || container_encoded_size(ops, f) != size)
            abort();
    } else {
        /* v2: the payload is the whole input. */
        struct fuzz_cmp c = {.want = data, .len = size};
        if (ops->encode(f, fuzz_cmp_write, &c) != SBF_OK || c.pos != size)
            abort();
    }
    ops->free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    round_trip(data, size);
    if (size < CONTAINER_HEADER_BYTES + 8)
        return 0;
    uint8_t *fixed = malloc(size);
    if (!fixed)
        return 0;
    memcpy(fixed, data, size);
    uint64_t sum = XXH3_64bits(fixed, 24);
    for (unsigned i = 0; i < 8; i++)
        fixed[24 + i] = (uint8_t)(sum >> (8 * i));
    sum = XXH3_64bits(fixed + CONTAINER_HEADER_BYTES, size - CONTAINER_HEADER_BYTES - 8);
    for (unsigned i = 0; i < 8; i++)
        fixed[size - 8 + i] = (uint8_t)(sum >> (8 * i));
    round_trip(fixed, size);
    free(fixed);
    return 0;
}
