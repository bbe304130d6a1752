/*
 * le.h - the byte order of every on-disk format (snapshot container and payloads, the
 * journal's records): little-endian integers, doubles as their IEEE-754 binary64 bits.
 * Written once; byte by byte, so it needs no alignment and works on any host.
 */
#ifndef BLOOMD_LIB_LE_H
#define BLOOMD_LIB_LE_H

#include <stdint.h>
#include <string.h>

/* The low `bytes` bytes of v at p, least significant first (bytes <= 8). */
static inline void le_put(unsigned char *p, uint64_t v, unsigned bytes)
{
    for (unsigned i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* The `bytes`-byte little-endian integer at p (bytes <= 8). */
static inline uint64_t le_get(const unsigned char *p, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static inline void le_put32(unsigned char *p, uint32_t v)
{
    le_put(p, v, 4);
}

static inline void le_put64(unsigned char *p, uint64_t v)
{
    le_put(p, v, 8);
}

static inline uint32_t le_get32(const unsigned char *p)
{
    return (uint32_t)le_get(p, 4);
}

static inline uint64_t le_get64(const unsigned char *p)
{
    return le_get(p, 8);
}

/* A double's bits and back (no conversion: the exact value round-trips). */
static inline uint64_t le_f64_bits(double d)
{
    uint64_t v;
    memcpy(&v, &d, sizeof v);
    return v;
}

static inline double le_bits_f64(uint64_t v)
{
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}

#endif
