/*
 * container.c - the v4 snapshot container around a kind's payload (format in
 * container.h; v3 and v2 are read too). The header is checked before the payload is touched; a v2
 * file is told apart by its first eight bytes, which are then handed back to the sbf decoder in
 * front of the rest of the stream.
 */
#include "lib/container.h"

#include "lib/le.h"
#include "lib/stream.h"

#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

static const unsigned char container_magic[8] = {'B', 'L', 'O', 'O', 'M', 'D', 0, 0};
static const unsigned char v2_magic[8] = {'B', 'L', 'O', 'O', 'M', 'S', 'B', 'F'};

int container_encode(const struct kind_ops *ops, const void *f, uint64_t journal_pos, uint64_t seed,
                     sbf_write_fn write, void *ctx)
{
    unsigned char h[CONTAINER_HEADER_BYTES];
    memcpy(h, container_magic, 8);
    le_put(h + 8, CONTAINER_VERSION, 4);
    le_put(h + 12, ops->tag, 4);
    le_put(h + 16, journal_pos, 8);
    le_put(h + 24, seed, 8);
    le_put(h + 32, XXH3_64bits(h, 32), 8);
    if (write(ctx, h, sizeof h) != 0)
        return SBF_EIO;
    return ops->encode(f, write, ctx);
}

uint64_t container_encoded_size(const struct kind_ops *ops, const void *f)
{
    return CONTAINER_HEADER_BYTES + ops->encoded_size(f);
}

/* A reader that first replays bytes already taken from the stream. */
struct replay {
    const unsigned char *head;
    size_t head_len;
    sbf_read_fn read;
    void *ctx;
};

static long replay_read(void *arg, void *buf, size_t len)
{
    struct replay *r = arg;
    if (r->head_len == 0)
        return r->read(r->ctx, buf, len);
    size_t n = len < r->head_len ? len : r->head_len;
    memcpy(buf, r->head, n);
    r->head += n;
    r->head_len -= n;
    return (long)n;
}

int container_decode(sbf_read_fn read, void *ctx, container_kind_fn find, void *find_ctx,
                     uint64_t max_bytes, const struct sbf_budget *budget,
                     const struct kind_ops **ops_out, void **out, struct container_header *hdr)
{
    unsigned char h[CONTAINER_HEADER_BYTES];
    int rc = stream_read_exact(read, ctx, h, 8);
    if (rc != SBF_OK)
        return rc;
    if (memcmp(h, v2_magic, 8) == 0) {
        const struct kind_ops *ops = find(find_ctx, KIND_TAG_SBF);
        if (ops == NULL)
            return SBF_EKIND;
        struct replay r = {.head = h, .head_len = 8, .read = read, .ctx = ctx};
        rc = ops->decode(replay_read, &r, max_bytes, budget, out);
        if (rc != SBF_OK)
            return rc;
        *ops_out = ops;
        *hdr = (struct container_header){.version = 2, .tag = KIND_TAG_SBF};
        return SBF_OK;
    }
    if (memcmp(h, container_magic, 8) != 0)
        return SBF_ECORRUPT;
    rc = stream_read_exact(read, ctx, h + 8, CONTAINER_V3_HEADER_BYTES - 8);
    if (rc != SBF_OK)
        return rc;
    /* A newer format may lay out (and check) its header otherwise: its version is all this
     * build can trust, so it is told apart from damage before the checksum. */
    uint32_t version = (uint32_t)le_get(h + 8, 4);
    if (version > CONTAINER_VERSION)
        return SBF_EVERSION;
    uint64_t seed = 0;
    if (version == CONTAINER_VERSION) { /* v4: the seed, then the checksum of all before */
        rc = stream_read_exact(read, ctx, h + CONTAINER_V3_HEADER_BYTES,
                               CONTAINER_HEADER_BYTES - CONTAINER_V3_HEADER_BYTES);
        if (rc != SBF_OK)
            return rc;
        if (le_get(h + 32, 8) != XXH3_64bits(h, 32))
            return SBF_ECORRUPT;
        seed = le_get(h + 24, 8);
    } else if (le_get(h + 24, 8) != XXH3_64bits(h, 24)) {
        return SBF_ECORRUPT;
    } else if (version != 3) {
        return SBF_EVERSION; /* a checksummed header below v3: no such format */
    }
    uint32_t tag = (uint32_t)le_get(h + 12, 4);
    const struct kind_ops *ops = find(find_ctx, tag);
    if (ops == NULL)
        return SBF_EKIND;
    rc = ops->decode(read, ctx, max_bytes, budget, out);
    if (rc != SBF_OK)
        return rc;
    *ops_out = ops;
    *hdr = (struct container_header){
        .version = version, .tag = tag, .journal_pos = le_get(h + 16, 8), .seed = seed};
    return SBF_OK;
}
