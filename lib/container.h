/*
 * container.h - the snapshot container (format v4): a small fixed header naming the
 * filter's kind and its hash seed, then the kind's own payload (its encode/decode in
 * kind.h), so one file format holds every kind. Files of format v3 (no seed) read with
 * seed 0; files of format v2 (a bare sbf stream, written by bloomd 0.1.0) are recognised
 * by their magic and read as kind sbf, seed 0.
 *
 *   header  "BLOOMD\0\0" u32 version=4, u32 kind tag, u64 journal position, u64 seed,
 *           u64 XXH3-64 of the 32 bytes before it                            (40 bytes)
 *           (v3: the same without the seed, 32 bytes)
 *   payload the kind's encode() output (which carries its own checksum), to end of input
 */
#ifndef BLOOMD_LIB_CONTAINER_H
#define BLOOMD_LIB_CONTAINER_H

#include <stdint.h>

#include "lib/kind.h"

#define CONTAINER_VERSION 4u
#define CONTAINER_HEADER_BYTES 40u
#define CONTAINER_V3_HEADER_BYTES 32u

/* What the header says. */
struct container_header {
    uint32_t version;     /* 4, 3, or 2 for a bare sbf stream */
    uint32_t tag;         /* kind tag (KIND_TAG_SBF for v2) */
    uint64_t journal_pos; /* the journal position the snapshot covers (0 if none, and v2) */
    uint64_t seed;        /* the filter's hash seed (sbf_hash_key_seeded); 0 before v4 */
};

/*
 * Writes the v3 header for f of kind ops, then its payload. Returns 0 or an sbf_err
 * (SBF_EIO if write failed).
 */
int container_encode(const struct kind_ops *ops, const void *f, uint64_t journal_pos, uint64_t seed,
                     sbf_write_fn write, void *ctx);

/* Bytes container_encode would write now. */
uint64_t container_encoded_size(const struct kind_ops *ops, const void *f);

/* Finds the kind of a tag; NULL if unknown. */
typedef const struct kind_ops *(*container_kind_fn)(void *ctx, uint32_t tag);

/*
 * Reads a container (v3, or v2 as kind sbf): checks the header, asks find(find_ctx, tag)
 * for the kind, and decodes the payload with its decode() (max_bytes and budget as
 * there). Returns 0 and sets *ops_out, *out and *hdr, or an sbf_err: SBF_ECORRUPT (bad
 * magic or header checksum), SBF_EVERSION (a version above 3 whatever its checksum says,
 * or a checksummed one below), SBF_EKIND (find said NULL), or the payload's.
 * Nothing is allocated on failure.
 */
int container_decode(sbf_read_fn read, void *ctx, container_kind_fn find, void *find_ctx,
                     uint64_t max_bytes, const struct sbf_budget *budget,
                     const struct kind_ops **ops_out, void **out, struct container_header *hdr);

#endif
