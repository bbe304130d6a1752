/*
 * fuzz_container.c - libFuzzer harness for the snapshot container (lib/container.c):
 * any bytes go to container_decode with the sbf kind known, also with the header
 * checksum and the payload checksum repaired so mutations reach the code behind them.
 * Whatever decodes must re-encode to exactly its input: the v3 header as it was, the payload
 * in its own sbf version (v3 by the kind's encode, v2 by sbf_encode_stages).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_io.h"

#include "lib/container.h"
#include "lib/kind.h"
#include "lib/sbf.h"

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
    /* The payload re-encodes in its own sbf version: v2 through sbf_encode_stages. */
    size_t at = h.version == CONTAINER_VERSION ? CONTAINER_HEADER_BYTES
                : h.version == 3               ? CONTAINER_V3_HEADER_BYTES
                                               : 0;
    bool fixed = size > at + 8 && data[at + 8] == 2;
    struct fuzz_cmp c = {.want = data, .len = size};
    if (at > 0 && fuzz_cmp_write(&c, data, at) != 0)
        abort();
    if (h.version == CONTAINER_VERSION && !fixed) {
        c.pos = 0;
        if (container_encode(ops, f, h.journal_pos, h.seed, fuzz_cmp_write, &c) != SBF_OK ||
            c.pos != size || container_encoded_size(ops, f) != size)
            abort();
    } else if (h.version == 3 && !fixed) {
        /* A v3 header (no seed) before the same payload: the payload re-encodes. */
        if (h.seed != 0 || ops->encode(f, fuzz_cmp_write, &c) != SBF_OK || c.pos != size)
            abort();
    } else {
        uint32_t n = sbf_stage_count(f);
        if (sbf_encode_stages(f, n, fuzz_cmp_write, &c) != SBF_OK || c.pos != size ||
            at + sbf_encoded_size_stages(f, n) != size)
            abort();
    }
    ops->free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    round_trip(data, size);
    /* With every checksum made right, for a v3 header (32 bytes) and a v4 one (40). */
    for (size_t hb = CONTAINER_V3_HEADER_BYTES; hb <= CONTAINER_HEADER_BYTES; hb += 8) {
        uint8_t *fixed = fuzz_resummed(data, size, hb);
        if (fixed) {
            fuzz_put_sum(fixed + hb - 8, fixed, hb - 8); /* the header's own checksum too */
            round_trip(fixed, size);
        }
        free(fixed);
    }
    return 0;
}
