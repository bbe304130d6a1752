/*
 * sbf.h - scalable blocked Bloom filter: the contract of the filter library.
 *
 * A filter is a list of stages; each stage is a blocked Bloom filter (all k bits of a key
 * in one 64-byte block). New stages are appended as the newest fills up, each with a
 * tighter error so the compound false-positive rate stays below the promised one.
 * Keys are hashed once (XXH3-128, sbf_hash_key) and every stage derives its bits from
 * that one hash. No I/O here: persistence goes through the codec callbacks below.
 *
 * Concurrency: one writer at a time (any non-const call, sbf_checkadd*() included).
 * While the writer runs, one or more threads may call sbf_encode(), sbf_encoded_size(),
 * sbf_check(), sbf_check_batch(), sbf_info(), sbf_estimate() and sbf_params() on the
 * same filter, and it may be the src of an sbf_union() or sbf_intersect() (both read src
 * as the readers do). Bits are set with a relaxed atomic load and a relaxed atomic store
 * of old | mask on 64-bit words, no locked read-modify-write: that needs the one writer
 * (an sbf_union() into dst is dst's writer too). The stages live in a fixed array of
 * SBF_MAX_STAGES and a new one is published by a release store of the stage count, which
 * readers acquire-load. So a reader sees every add that completed before it started (and
 * maybe some later ones); item counts may lag the bits.
 * sbf_clear(), sbf_intersect() (on its dst) and sbf_free() need exclusive access.
 */
#ifndef BLOOMD_LIB_SBF_H
#define BLOOMD_LIB_SBF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Results: 0 on success, or one of these (all negative). */
enum sbf_err {
    SBF_OK = 0,
    SBF_ENOMEM = -1,    /* malloc failed, or the budget refused the bytes */
    SBF_EINVAL = -2,    /* parameters out of range */
    SBF_ELIMIT = -3,    /* SBF_MAX_STAGES reached: the filter cannot grow */
    SBF_EINCOMPAT = -4, /* union/intersection of filters with different parameters */
    SBF_EIO = -5,       /* a codec callback failed or the input ended early */
    SBF_ECORRUPT = -6,  /* codec: bad magic, field, size or checksum */
    SBF_EVERSION = -7,  /* codec: a format version this build does not read */
    SBF_ETOOBIG = -8,   /* codec: the input declares more bytes than max_bytes */
    SBF_EGROWN = -9,    /* intersection of a filter that has more than one stage */
    SBF_ENOTSUP = -10,  /* the filter's kind does not support the operation (kind.h) */
    SBF_EKIND = -11,    /* container: a kind tag this build does not know (container.h) */
    SBF_EBUDGET = -12,  /* codec: the budget refused the bits the input declares, checked
                           before anything is allocated or read */
    SBF_EFULL = -13,    /* a filter that does not grow (SBF_GROWTH_NONE) is full */
};

/* Returns a short static description of an sbf_err ("out of memory", ...). */
const char *sbf_strerror(int err);

#define SBF_MAX_STAGES 64
#define SBF_MAX_CAPACITY (UINT64_C(1) << 40) /* keys in the initial stage */

enum sbf_growth {
    SBF_GROWTH_EXPONENTIAL = 0, /* c_i = c0 * s^i */
    SBF_GROWTH_LINEAR = 1,      /* c_0 = c0, c_i = c0 * s * i for i >= 1 */
    SBF_GROWTH_NONE = 2,        /* one stage, given the whole error: a new key past its
                                   capacity is refused (SBF_EFULL); RedisBloom's NONSCALING */
};

/* "exponential", "linear" or "none": as CREATE's growth= spells it. */
const char *sbf_growth_name(enum sbf_growth g);

struct sbf_params {
    uint64_t capacity;      /* keys the first stage takes, >= 1 */
    double error;           /* promised compound false-positive rate, in (0, 1) */
    enum sbf_growth growth; /* how stage capacities grow */
    double scale;           /* s: growth factor, in [1, 64] */
    double ratio;           /* r: tightening ratio, stage i gets error p*(1-r)*r^i, in (0, 1) */
};

/* Default tightening ratio r (trade-off measured in lib/sbf.c). */
#define SBF_DEFAULT_RATIO 0.8

/* Defaults: capacity 100000, error 0.01, exponential, scale 2, ratio SBF_DEFAULT_RATIO. */
void sbf_params_default(struct sbf_params *p);

/* Returns 0 if p is usable, SBF_EINVAL otherwise. */
int sbf_params_check(const struct sbf_params *p);

/*
 * Memory budget, shared by many filters (the server's max_memory). reserve() is called
 * before every allocation of filter bits with its size and may refuse (return false);
 * release() is called when bits are freed. Both may be NULL in a zeroed budget.
 */
struct sbf_budget {
    bool (*reserve)(void *ctx, size_t bytes);
    void (*release)(void *ctx, size_t bytes);
    void *ctx;
};

/* 128-bit hash of a key; computed once per key and shared by every stage. */
struct sbf_hash {
    uint64_t lo;
    uint64_t hi;
};

/* Hashes a key of len bytes (len may be 0). Never fails. */
struct sbf_hash sbf_hash_key(const void *key, size_t len);

/* The hash of key under a filter's 64-bit seed; seed 0 is sbf_hash_key. */
struct sbf_hash sbf_hash_key_seeded(const void *key, size_t len, uint64_t seed);

struct sbf;

/*
 * Creates an empty filter with one stage. budget may be NULL (no limit); it is copied
 * and used for the filter's whole life. Returns 0 and sets *out, or SBF_EINVAL,
 * SBF_ENOMEM. The caller frees *out with sbf_free().
 */
int sbf_new(const struct sbf_params *p, const struct sbf_budget *budget, struct sbf **out);

/* Frees the filter and releases its bytes to its budget. sbf_free(NULL) does nothing. */
void sbf_free(struct sbf *f);

/* Bytes of filter bits that sbf_new(p) would allocate for its first stage; 0 if p is not
 * usable. */
uint64_t sbf_first_stage_bytes(const struct sbf_params *p);

/*
 * Stage i of a filter with p, as the filter grows it (stage i is made once stages 0..i-1
 * are full): the keys it takes and the bytes of its bits. Both 0 if p is not usable or
 * that stage cannot exist (past 2^48 keys, or i > 0 for growth=none). For planners.
 */
uint64_t sbf_stage_capacity(const struct sbf_params *p, uint32_t i);
uint64_t sbf_stage_bytes(const struct sbf_params *p, uint32_t i);

/* The filter's parameters (valid as long as the filter). */
const struct sbf_params *sbf_params(const struct sbf *f);

/* True if a and b have the same parameters, so union/intersection are defined. */
bool sbf_compatible(const struct sbf *a, const struct sbf *b);

/*
 * Single-key operations. sbf_add sets *added (may be NULL) to true if the key was new.
 * sbf_checkadd sets *present to whether the key was already there, then adds it.
 * Adding may append a stage: returns SBF_ENOMEM or SBF_ELIMIT if that fails, and the
 * filter is unchanged; a new key for a full filter that does not grow gets SBF_EFULL.
 */
int sbf_add(struct sbf *f, struct sbf_hash h, bool *added);
bool sbf_check(const struct sbf *f, struct sbf_hash h);
int sbf_checkadd(struct sbf *f, struct sbf_hash h, bool *present);

/*
 * Batch operations over n hashes, processed in order (a key repeated in the batch is
 * present the second time). They prefetch every block before probing. On error the
 * keys before the failing one were processed and the rest were not; *added counts the
 * new keys processed.
 */
int sbf_add_batch(struct sbf *f, const struct sbf_hash *h, size_t n, size_t *added);
void sbf_check_batch(const struct sbf *f, const struct sbf_hash *h, size_t n, bool *present);
int sbf_checkadd_batch(struct sbf *f, const struct sbf_hash *h, size_t n, bool *present);

/*
 * Sharded adds, for one writer that has several threads (start-up replay). sbf_room()
 * is how many new keys the newest stage still takes before the filter grows. If
 * n <= sbf_room(f), nshards threads may call sbf_add_batch_shard() on the same batch at
 * once, each with its own shard in [0, nshards): shard i adds the keys whose block in
 * the newest stage lies in the i-th slice of its blocks, in batch order, and counts them
 * in the stage. Once all have returned, the filter is the one sbf_add_batch(f, h, n)
 * would have made, and the *added sum to its count. No other call may run meanwhile.
 * fresh: every key was absent from every stage when it was added before (a journal's
 * record of CHECKADD's new keys, replayed over the same filter), so the older stages
 * need no probe: one cache line per key whatever the stage count. The newest stage is
 * still tested, so a key added twice is counted once. If the filter already holds a key
 * in an older stage (a snapshot that caught adds past the position it claims, then grew),
 * that key is counted again: items a little high, never a false negative.
 * The caller checks n <= sbf_room(f) before the batch (the shards cannot: each counts
 * its keys as it ends). SBF_EINVAL (nothing done) if the shard is out of range.
 */
uint64_t sbf_room(const struct sbf *f);
int sbf_add_batch_shard(struct sbf *f, const struct sbf_hash *h, size_t n, unsigned shard,
                        unsigned nshards, bool fresh, size_t *added);

/*
 * dst |= src (or &=), stage by stage. The filters must be compatible (else
 * SBF_EINCOMPAT, dst unchanged). Union gives dst any stages only src has (may fail with
 * SBF_ENOMEM, dst unchanged). Intersection needs both filters to have one stage, else
 * SBF_EGROWN and dst unchanged: a key that sits in different stages of two grown filters
 * would be lost by a stage-by-stage AND, and a filter never gives false negatives.
 * Afterwards the item counts of dst's stages that src also has (all of them for an
 * intersection) are popcount estimates, counted per stage. A union into a filter that
 * does not grow (SBF_GROWTH_NONE) whose result would hold more keys than its capacity
 * (estimated from the bits) is refused with SBF_EFULL, dst unchanged.
 */
int sbf_union(struct sbf *dst, const struct sbf *src);
int sbf_intersect(struct sbf *dst, const struct sbf *src);

/* Empties the filter: back to one empty first stage, parameters kept. */
void sbf_clear(struct sbf *f);

/* Cheap figures, O(stages). */
struct sbf_info {
    uint64_t bytes;    /* bytes of filter bits allocated */
    uint32_t stages;   /* stages in use */
    uint64_t capacity; /* sum of stage capacities */
    uint64_t items;    /* exact count of new keys added (estimate after union/intersect) */
    uint64_t header;   /* bytes of the filter's own struct (its stage table), besides bits */
};
void sbf_info(const struct sbf *f, struct sbf_info *out);

/*
 * Checks the invariants of f: stage count in [1, SBF_MAX_STAGES], every stage's capacity
 * and geometry equal to what its parameters give, bits allocated and 64-byte aligned,
 * item counts within the stage's bits, no stage beyond the count. O(stages); for tests
 * and debug assertions. Returns 0 or SBF_ECORRUPT.
 */
int sbf_verify(const struct sbf *f);

/* Popcount figures, O(bytes): estimated items and current compound false-positive rate. */
struct sbf_estimate {
    double items;
    double error;
};
void sbf_estimate(const struct sbf *f, struct sbf_estimate *out);

/*
 * Codec: a versioned, little-endian, checksummed stream.
 * write(ctx, buf, len) returns 0 on success, nonzero to abort (sbf_encode returns SBF_EIO).
 * read(ctx, buf, len) fills up to len bytes and returns how many (0 at end of input),
 * or a negative number on error.
 */
typedef int (*sbf_write_fn)(void *ctx, const void *buf, size_t len);
typedef long (*sbf_read_fn)(void *ctx, void *buf, size_t len);

/*
 * Writes the filter in chunks (no copy of its bits), as format v3: runs of all-zero pages
 * cost 9 bytes, so an empty filter's stream is about 1/450 of its bits. May run beside the
 * writer thread.
 */
int sbf_encode(const struct sbf *f, sbf_write_fn write, void *ctx);

/* Size in bytes sbf_encode would write now: O(bytes), it reads every word. */
uint64_t sbf_encoded_size(const struct sbf *f);

/* Stages in use now (acquire-loaded: a reader may use stages up to this count). */
uint32_t sbf_stage_count(const struct sbf *f);

/*
 * The fixed-size format v2 stream of only the first n stages (n is clamped to the count in
 * use), a valid stream of the filter as it was before later stages existed; its size
 * depends on the geometry alone, O(stages). For a container that states a stream's length
 * before the stream while the writer may append a stage or set bits: pin n with
 * sbf_stage_count(), then size and encode with it. Keys in stages beyond n were added
 * after n was read.
 */
int sbf_encode_stages(const struct sbf *f, uint32_t n, sbf_write_fn write, void *ctx);
uint64_t sbf_encoded_size_stages(const struct sbf *f, uint32_t n);

/*
 * Reads a filter written by sbf_encode (v3) or sbf_encode_stages (v2). Every field is
 * validated before anything is allocated; input declaring more than max_bytes of bits
 * gives SBF_ETOOBIG, and bits the budget refuses SBF_EBUDGET, both before any bit is read;
 * trailing bytes after the checksum give SBF_ECORRUPT. Only non-zero 64-byte blocks are
 * stored, so the pages of an empty filter stay untouched. budget as for sbf_new. Returns 0
 * and sets *out (caller frees), or an sbf_err, with nothing allocated.
 */
int sbf_decode(sbf_read_fn read, void *ctx, uint64_t max_bytes, const struct sbf_budget *budget,
               struct sbf **out);

/* ---- per-stage views, for the metrics and the live page (lib/sbf_view.c) ---- */

/* One stage as it is now. Readers may call these beside the writer. */
struct sbf_stage_view {
    uint64_t capacity; /* new keys it takes before the next stage is added */
    uint64_t items;    /* new keys taken (estimate after union/intersect) */
    uint64_t bytes;    /* bytes of bits */
    uint64_t nblocks;  /* 512-bit blocks */
    uint32_t k;        /* bits per key */
    double error;      /* its share of the promise: p * (1 - r) * r^i */
};

/* Stage i of f (i < sbf_info's stages). Returns false if there is no such stage. O(1). */
bool sbf_stage(const struct sbf *f, uint32_t i, struct sbf_stage_view *out);

/* Bits set in stage i, by popcount: O(stage bytes). 0 if there is no such stage. */
uint64_t sbf_stage_ones(const struct sbf *f, uint32_t i);

#define SBF_BLOCK_BITS 512u

/* Where hash h falls in stage i: its block, the distinct in-block bit positions (ascending,
 * at most k of them) and which are set. */
struct sbf_probe {
    uint64_t block;               /* block index in the stage */
    uint32_t nbits;               /* distinct positions (k draws may repeat) */
    uint16_t pos[SBF_BLOCK_BITS]; /* positions 0..511 in the block, ascending */
    bool set[SBF_BLOCK_BITS];     /* whether pos[j] is set */
    bool present;                 /* every position set: the stage answers present */
};

/* Fills *out for hash h in stage i. Returns false if there is no such stage. O(k). */
bool sbf_probe(const struct sbf *f, uint32_t i, struct sbf_hash h, struct sbf_probe *out);

#endif
