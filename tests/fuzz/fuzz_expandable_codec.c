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

#include "tests/fuzz/fuzz_io.h"

#include "lib/expandable.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void round_trip(const uint8_t *data, size_t size)
{
    struct fuzz_in r = {.data = data, .len = size};
    struct expandable *f = NULL;
    if (expandable_decode(fuzz_read, &r, 1u << 20, NULL, &f) != SBF_OK)
        return;
    if (expandable_verify(f) != SBF_OK)
        abort();
    struct fuzz_cmp c = {.want = data, .len = size};
    if (expandable_encode(f, fuzz_cmp_write, &c) != SBF_OK || c.pos != size ||
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
    fuzz_both(round_trip, data, size);
    return 0;
}
