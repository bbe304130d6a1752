/*
 * journal_record.h - the journal's record codec: one change to the filters (a batch of
 * key hashes, CREATE, DROP, CLEAR, UNION, INTERSECT, a window rotation) <-> one framed,
 * checksummed byte string. Pure code, no I/O and no allocation, so it is fuzzed alone;
 * server/persist/journal.c does the files. Workload: ADD frames of ~100 hashes dominate, so the
 * framing share is 32 bytes plus the name per frame, and decoding is one pass.
 *
 * Frame (little-endian):
 *   0  u32 payload length L       4  u8 type, u8[3] zero       8  u64 position (> 0)
 *   16 u64 XXH3-64 of bytes [0,16)                 (a torn or damaged header is told apart)
 *   24 payload[L]                 24+L u64 XXH3-64 of bytes [0, 24+L)
 * Payloads ("name" = u8 length 1..JOURNAL_NAME_MAX, then the bytes):
 *   ADD       name, u32 n (1..JOURNAL_MAX_HASHES), n x (u64 lo, u64 hi)   DELETE: same
 *   CREATE    name, u32 kind tag, u32 m (<= JOURNAL_MAX_PARAMS), m opaque bytes
 *   DROP      name                 CLEAR   name
 *   UNION     name (dst), u16 n (1..JOURNAL_MAX_SOURCES), n x name    INTERSECT: same
 *   ROTATE    name, i64 time (Unix ms)
 *   RESTORE   as CREATE: the restored filter's kind tag and parameters
 * Every field is checked; a frame that decodes re-encodes to exactly its bytes.
 */
#ifndef BLOOMD_LIB_JOURNAL_RECORD_H
#define BLOOMD_LIB_JOURNAL_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/sbf.h"

#define JOURNAL_RECORD_HEADER 24u
#define JOURNAL_RECORD_TRAILER 8u
#define JOURNAL_RECORD_OVERHEAD (JOURNAL_RECORD_HEADER + JOURNAL_RECORD_TRAILER)
#define JOURNAL_NAME_MAX 128u /* PROTO_MAX_NAME */
#define JOURNAL_MAX_HASHES                                                                         \
    65536u                       /* per ADD frame; server/persist/journal.c splits larger batches */
#define JOURNAL_MAX_SOURCES 256u /* per UNION/INTERSECT frame; split likewise */
#define JOURNAL_MAX_PARAMS 4096u /* CREATE's opaque parameter bytes */
/* Largest payload any valid frame has (an ADD of JOURNAL_MAX_HASHES, or a full UNION). */
#define JOURNAL_RECORD_MAX_PAYLOAD (1u + JOURNAL_NAME_MAX + 4u + 16u * JOURNAL_MAX_HASHES)
#define JOURNAL_RECORD_MAX (JOURNAL_RECORD_OVERHEAD + JOURNAL_RECORD_MAX_PAYLOAD)

/* Record types: values are on disk, never reused. */
enum journal_type {
    JOURNAL_ADD = 1,       /* ADD and CHECKADD: their effect on the filter is the same */
    JOURNAL_CREATE = 2,    /* name, kind tag, params */
    JOURNAL_DROP = 3,      /* name */
    JOURNAL_CLEAR = 4,     /* name */
    JOURNAL_UNION = 5,     /* name |= each of sources, in order */
    JOURNAL_INTERSECT = 6, /* name &= each of sources, in order */
    JOURNAL_ROTATE = 7,    /* a windowed filter advanced to time_ms */
    JOURNAL_DELETE = 8,    /* keys removed from an expandable filter (payload as ADD) */
    JOURNAL_ADD_NEW = 9,   /* as ADD, but every key was new to the filter when it went in
                              (CHECKADD's new keys): replay need not probe older stages */
    JOURNAL_RESTORE = 10,  /* RESTORE installed a filter of this kind and parameters; its
                              bits are in the snapshot forced after it (server/exec/mutate.h) */
};
#define JOURNAL_TYPE_LAST JOURNAL_RESTORE

/* A borrowed name; never NUL-terminated. */
struct journal_name {
    const char *ptr;
    size_t len;
};

/*
 * One record. Only the fields of its type are read (encode) or set (decode). Pointers are
 * borrowed: the caller's arrays when encoding; when decoding, name and params point into
 * the frame and hashes and sources into the caller's struct journal_scratch.
 */
struct journal_record {
    enum journal_type type;
    uint64_t pos;                  /* its journal position; set by decode */
    struct journal_name name;      /* the filter (the destination of UNION/INTERSECT) */
    const struct sbf_hash *hashes; /* ADD */
    size_t nhashes;                /* ADD: 1..JOURNAL_MAX_HASHES */
    uint32_t kind_tag;             /* CREATE, RESTORE: the kind's container tag */
    const void *params;            /* CREATE, RESTORE: opaque to the journal */
    size_t nparams;                /* CREATE, RESTORE: bytes at params, <= JOURNAL_MAX_PARAMS */
    const struct journal_name *sources; /* UNION/INTERSECT */
    size_t nsources;                    /* UNION/INTERSECT: 1..JOURNAL_MAX_SOURCES */
    int64_t time_ms;                    /* ROTATE */
};

/* Where decode puts what the frame holds unaligned. About 1 MiB: allocate it once. */
struct journal_scratch {
    struct sbf_hash hashes[JOURNAL_MAX_HASHES];
    struct journal_name sources[JOURNAL_MAX_SOURCES];
};

/* Results of the codec (negative). */
enum journal_record_err {
    JOURNAL_RECORD_PARTIAL = -1, /* decode: the input ends inside the frame */
    JOURNAL_RECORD_CORRUPT = -2, /* decode: a checksum, length or field is wrong */
    JOURNAL_RECORD_EINVAL = -3,  /* encode: a field out of range (name, counts, type) */
    JOURNAL_RECORD_ESPACE = -4,  /* encode: the output buffer is too small */
};

/* True if name is 1..JOURNAL_NAME_MAX bytes of [A-Za-z0-9._-] not starting with '.'
 * (proto_name_valid: lib may not include proto). */
bool journal_record_name_valid(const char *name, size_t len);

/* Bytes encode would write for rec, or 0 if rec is invalid (JOURNAL_RECORD_EINVAL). */
size_t journal_record_size(const struct journal_record *rec);

/* True for the types whose payload is a name and hashes (ADD, ADD_NEW, DELETE). */
static inline bool journal_record_has_hashes(const struct journal_record *rec)
{
    return rec->type == JOURNAL_ADD || rec->type == JOURNAL_ADD_NEW || rec->type == JOURNAL_DELETE;
}

/*
 * Encodes rec at position pos (> 0; rec->pos is ignored) into out[0, cap). Returns the
 * frame's size, JOURNAL_RECORD_EINVAL or JOURNAL_RECORD_ESPACE (nothing useful written).
 */
long journal_record_encode(const struct journal_record *rec, uint64_t pos, void *out, size_t cap);

/*
 * Decodes the frame at the start of buf[0, len). Returns its size (> 0) and fills *rec
 * (pointing into buf and *scratch, valid while both are), or JOURNAL_RECORD_PARTIAL if
 * buf ends before the frame (its header, if complete, is intact), or
 * JOURNAL_RECORD_CORRUPT. Never reads outside buf.
 */
long journal_record_decode(const void *buf, size_t len, struct journal_scratch *scratch,
                           struct journal_record *rec);

/*
 * For a frame decode called CORRUPT: its size according to an intact header, or 0 if the
 * header itself is damaged (then nothing says where the next frame starts).
 */
size_t journal_record_claimed_size(const void *buf, size_t len);

#endif
