/*
 * stream.c - the checksummed stream of every filter payload (stream.h). A codec moves
 * bits in chunks of 4..64 KiB, so one call per chunk through here costs nothing next to
 * hashing them.
 */
#include "lib/stream.h"

#include "lib/le.h"

void stream_writer_init(struct stream_writer *w, sbf_write_fn write, void *ctx)
{
    w->write = write;
    w->ctx = ctx;
    XXH3_64bits_reset(&w->hash);
}

int stream_write(struct stream_writer *w, const void *buf, size_t len)
{
    XXH3_64bits_update(&w->hash, buf, len);
    return w->write(w->ctx, buf, len) == 0 ? SBF_OK : SBF_EIO;
}

int stream_write_fn(void *arg, const void *buf, size_t len)
{
    return stream_write(arg, buf, len);
}

int stream_write_sum(struct stream_writer *w)
{
    unsigned char sum[8];
    le_put64(sum, XXH3_64bits_digest(&w->hash));
    return w->write(w->ctx, sum, sizeof(sum)) == 0 ? SBF_OK : SBF_EIO;
}

void stream_reader_init(struct stream_reader *r, sbf_read_fn read, void *ctx)
{
    r->read = read;
    r->ctx = ctx;
    r->left = 0;
    XXH3_64bits_reset(&r->hash);
}

int stream_read_exact(sbf_read_fn read, void *ctx, void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        long got = read(ctx, p, len);
        if (got <= 0 || (unsigned long)got > len)
            return SBF_EIO;
        p += got;
        len -= (size_t)got;
    }
    return SBF_OK;
}

int stream_take(struct stream_reader *r, void *buf, size_t len)
{
    int rc = stream_read_exact(r->read, r->ctx, buf, len);
    if (rc == SBF_OK)
        XXH3_64bits_update(&r->hash, buf, len);
    return rc;
}

void stream_reader_limit(struct stream_reader *r, uint64_t len)
{
    r->left = len;
}

long stream_read_fn(void *arg, void *buf, size_t len)
{
    struct stream_reader *r = arg;
    if (r->left == 0)
        return 0;
    if (len > r->left)
        len = (size_t)r->left;
    long got = r->read(r->ctx, buf, len);
    if (got <= 0)
        return got; /* an early end: the inner decoder reports SBF_EIO */
    if ((unsigned long)got > len)
        return -1;
    XXH3_64bits_update(&r->hash, buf, (size_t)got);
    r->left -= (uint64_t)got;
    return got;
}

int stream_read_sum(struct stream_reader *r)
{
    unsigned char sum[8];
    int rc = stream_read_exact(r->read, r->ctx, sum, sizeof(sum));
    if (rc != SBF_OK)
        return rc;
    if (le_get64(sum) != XXH3_64bits_digest(&r->hash))
        return SBF_ECORRUPT;
    unsigned char extra;
    long got = r->read(r->ctx, &extra, 1);
    if (got != 0)
        return got < 0 ? SBF_EIO : SBF_ECORRUPT;
    return SBF_OK;
}
