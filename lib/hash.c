/*
 * hash.c - the one hash of a key: XXH3 128-bit, computed once per key and shared by every
 * stage (stages remix it with their index, see bloom.h). Inlined from the header so the
 * short keys of the workload (URLs, click ids) skip a library call.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "lib/sbf.h"

struct sbf_hash sbf_hash_key(const void *key, size_t len)
{
    XXH128_hash_t x = XXH3_128bits(len ? key : "", len);
    return (struct sbf_hash){.lo = x.low64, .hi = x.high64};
}
