/*
 * fuzz_codec.c - libFuzzer harness for the filter loader: any bytes go to sbf_decode
 * through a memory reader with a 1 MiB limit on bits, also with the checksum repaired.
 * Whatever decodes must re-encode to exactly its input in its own version (v3 with
 * sbf_encode, v2 with sbf_encode_stages: every field and run is validated and canonical,
 * so nothing may be silently normalised), and both versions must agree on the filter.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_io.h"

#include "lib/sbf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Decodes data; if that succeeds, checks the re-encoding is exactly data. */
static void round_trip(const uint8_t *data, size_t size)
{
    struct fuzz_in r = {.data = data, .len = size};
    struct sbf *f = NULL;
    if (sbf_decode(fuzz_read, &r, 1u << 20, NULL, &f) != SBF_OK)
        return;
    struct fuzz_cmp c = {.want = data, .len = size};
    bool v2 = size > 8 && data[8] == 2;
    uint32_t n = sbf_stage_count(f);
    if (v2 ? sbf_encode_stages(f, n, fuzz_cmp_write, &c) != SBF_OK ||
                 sbf_encoded_size_stages(f, n) != size
           : sbf_encode(f, fuzz_cmp_write, &c) != SBF_OK || sbf_encoded_size(f) != size)
        abort();
    if (c.pos != size)
        abort();
    struct sbf_info info;
    sbf_info(f, &info);
    if (info.stages < 1 || info.stages > SBF_MAX_STAGES || info.bytes > (1u << 20))
        abort();
    sbf_free(f);
}

/*
 * Each input is tried as is and with its last 8 bytes replaced by the right checksum, so
 * mutations of headers and bits also reach the code behind the checksum test.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_both(round_trip, data, size);
    return 0;
}
