/*
 * hash.c - the one hash of a key: XXH3 128-bit, computed once per key and shared by every
 * stage (stages remix it with their index, see bloom.h). Inlined from the header so the
 * short keys of the workload (URLs, click ids) skip a library call. The seeded form is
 * XXH3's own seeding: the same cost, and a key's placement cannot be computed without the
 * seed (crafted keys cannot be aimed at one block).
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "lib/sbf.h"

struct sbf_hash sbf_hash_key(const void *key, size_t len)
{
    XXH128_hash_t x = XXH3_128bits(len ? key : "", len);
    return (struct sbf_hash){.lo = x.low64, .hi = x.high64};
}

struct sbf_hash sbf_hash_key_seeded(const void *key, size_t len, uint64_t seed)
{
    /* XXH3 with seed 0 is XXH3 unseeded: files of the unseeded format answer as before. */
    XXH128_hash_t x = XXH3_128bits_withSeed(len ? key : "", len, seed);
    return (struct sbf_hash){.lo = x.low64, .hi = x.high64};
}
