/*
 * stream.h - the checksummed stream every filter payload is (codec.c, window.c,
 * expandable_codec.c): bytes through the codec callbacks of sbf.h, an XXH3-64 of every
 * byte kept as they pass, and last that checksum as a little-endian u64, then end of
 * input. The payload's layout is its codec's; this is only the framing they share.
 * Caller storage (_init), no allocation.
 */
#ifndef BLOOMD_LIB_STREAM_H
#define BLOOMD_LIB_STREAM_H

#include <stddef.h>
#include <stdint.h>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include "lib/sbf.h"

struct stream_writer {
    sbf_write_fn write; /* the caller's callback */
    void *ctx;          /* its argument */
    XXH3_state_t hash;  /* of every byte written so far */
};

void stream_writer_init(struct stream_writer *w, sbf_write_fn write, void *ctx);

/* Hashes buf and writes it. Returns SBF_OK, or SBF_EIO if the callback refused. */
int stream_write(struct stream_writer *w, const void *buf, size_t len);

/* stream_write as an sbf_write_fn (arg: the writer), for an inner encoder's stream. */
int stream_write_fn(void *arg, const void *buf, size_t len);

/* Writes the checksum of every byte before it (not hashed). SBF_OK or SBF_EIO. */
int stream_write_sum(struct stream_writer *w);

struct stream_reader {
    sbf_read_fn read;  /* the caller's callback */
    void *ctx;         /* its argument */
    XXH3_state_t hash; /* of every byte read so far */
    uint64_t left;     /* bytes stream_read_fn may still give (stream_reader_limit) */
};

void stream_reader_init(struct stream_reader *r, sbf_read_fn read, void *ctx);

/* Reads exactly len bytes and hashes them. SBF_OK, or SBF_EIO on a callback error or an
 * early end of input. */
int stream_take(struct stream_reader *r, void *buf, size_t len);

/* Lets stream_read_fn give the next len bytes of r (an inner stream of stated length);
 * r->left counts down what is still unread of them. */
void stream_reader_limit(struct stream_reader *r, uint64_t len);

/* An sbf_read_fn (arg: the reader) over the bytes stream_reader_limit allowed, hashed:
 * returns at most r->left bytes, then 0 (end of input) however much the outer stream
 * still holds; a negative number on a callback error. */
long stream_read_fn(void *arg, void *buf, size_t len);

/* Ends the stream: reads the checksum and compares it with the hash of every byte before
 * it, then requires end of input. SBF_OK; SBF_ECORRUPT if the checksum differs or any
 * byte follows it; SBF_EIO on a callback error or if the input ends inside it. */
int stream_read_sum(struct stream_reader *r);

/* Reads exactly len bytes from read(ctx, ...), unhashed. SBF_OK, or SBF_EIO on a callback
 * error or an early end of input. */
int stream_read_exact(sbf_read_fn read, void *ctx, void *buf, size_t len);

#endif
