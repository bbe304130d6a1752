/*
 * fuzz_window_codec.c - libFuzzer harness for the windowed filter's loader: any bytes go
 * to window_decode through a memory reader with a 1 MiB limit on bits, also with the
 * outer checksum repaired. Whatever decodes must verify, re-encode to exactly its input,
 * and survive an advance to a later time.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_io.h"

#include "lib/window.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void round_trip(const uint8_t *data, size_t size)
{
    struct fuzz_in r = {.data = data, .len = size};
    struct window *w = NULL;
    if (window_decode(fuzz_read, &r, 1u << 20, NULL, &w) != SBF_OK)
        return;
    struct fuzz_cmp c = {.want = data, .len = size};
    if (window_verify(w) != SBF_OK || window_encode(w, fuzz_cmp_write, &c) != SBF_OK ||
        c.pos != size || window_encoded_size(w) != size)
        abort();
    struct window_info info;
    window_info(w, &info);
    if (info.live > window_params(w)->generations || info.bytes > (1u << 20))
        abort();
    /* Later times drop what expired; the result is still a valid window. */
    struct window_gen gens[WINDOW_MAX_GENERATIONS];
    uint32_t live = window_generations(w, gens);
    int64_t later = live > 0 ? gens[0].start_ms + (int64_t)window_params(w)->window_ms : 0;
    (void)window_advance(w, later, NULL, NULL);
    if (window_verify(w) != SBF_OK)
        abort();
    window_free(w);
}

/* Each input as is and with its last 8 bytes replaced by the right checksum. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_both(round_trip, data, size);
    return 0;
}
