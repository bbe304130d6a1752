/*
 * journal_record.c - encode and decode one journal frame (format in journal_record.h).
 * Decoding checks the header checksum before trusting the length, then the frame
 * checksum before reading the payload, then every field, so damage is never mistaken
 * for a record and the payload parser only ever sees bytes the writer produced.
 */
#include "lib/journal_record.h"

#include <stddef.h>
#include <string.h>

#include "lib/le.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

/* Hashes as 16 bytes each, lo then hi, little-endian: on such a host that is exactly the
 * memory of struct sbf_hash, so the hot path is one memcpy (checked at compile time). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
_Static_assert(sizeof(struct sbf_hash) == 16 && offsetof(struct sbf_hash, hi) == 8,
               "struct sbf_hash is two packed u64");
#define HASHES_ARE_LE 1
#else
#define HASHES_ARE_LE 0
#endif

static void put_hashes(unsigned char *p, const struct sbf_hash *h, size_t n)
{
    if (HASHES_ARE_LE) {
        memcpy(p, h, 16 * n);
        return;
    }
    for (size_t i = 0; i < n; i++, p += 16) {
        le_put(p, h[i].lo, 8);
        le_put(p + 8, h[i].hi, 8);
    }
}

static void get_hashes(struct sbf_hash *h, const unsigned char *p, size_t n)
{
    if (HASHES_ARE_LE) {
        memcpy(h, p, 16 * n);
        return;
    }
    for (size_t i = 0; i < n; i++, p += 16) {
        h[i].lo = le_get(p, 8);
        h[i].hi = le_get(p + 8, 8);
    }
}

bool journal_record_name_valid(const char *name, size_t len)
{
    if (len == 0 || len > JOURNAL_NAME_MAX || name[0] == '.')
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

static bool name_ok(struct journal_name n)
{
    return n.ptr && journal_record_name_valid(n.ptr, n.len);
}

/* Payload bytes of rec, or 0 if invalid. */
static size_t payload_size(const struct journal_record *rec)
{
    if (!name_ok(rec->name))
        return 0;
    size_t n = 1 + rec->name.len;
    switch (rec->type) {
    case JOURNAL_ADD:
    case JOURNAL_ADD_NEW:
    case JOURNAL_DELETE:
        if (rec->nhashes == 0 || rec->nhashes > JOURNAL_MAX_HASHES || !rec->hashes)
            return 0;
        return n + 4 + 16 * rec->nhashes;
    case JOURNAL_CREATE:
    case JOURNAL_RESTORE:
        if (rec->nparams > JOURNAL_MAX_PARAMS || (rec->nparams > 0 && !rec->params))
            return 0;
        return n + 8 + rec->nparams;
    case JOURNAL_DROP:
    case JOURNAL_CLEAR:
        return n;
    case JOURNAL_UNION:
    case JOURNAL_INTERSECT:
        if (rec->nsources == 0 || rec->nsources > JOURNAL_MAX_SOURCES || !rec->sources)
            return 0;
        n += 2;
        for (size_t i = 0; i < rec->nsources; i++) {
            if (!name_ok(rec->sources[i]))
                return 0;
            n += 1 + rec->sources[i].len;
        }
        return n;
    case JOURNAL_ROTATE:
        return n + 8;
    }
    return 0;
}

size_t journal_record_size(const struct journal_record *rec)
{
    size_t n = payload_size(rec);
    return n == 0 ? 0 : JOURNAL_RECORD_OVERHEAD + n;
}

static unsigned char *put_name(unsigned char *p, struct journal_name n)
{
    *p++ = (unsigned char)n.len;
    memcpy(p, n.ptr, n.len);
    return p + n.len;
}

long journal_record_encode(const struct journal_record *rec, uint64_t pos, void *out, size_t cap)
{
    size_t plen = payload_size(rec);
    if (plen == 0 || pos == 0)
        return JOURNAL_RECORD_EINVAL;
    size_t total = JOURNAL_RECORD_OVERHEAD + plen;
    if (cap < total)
        return JOURNAL_RECORD_ESPACE;
    unsigned char *h = out, *p = h + JOURNAL_RECORD_HEADER;
    le_put(h, plen, 4);
    h[4] = (unsigned char)rec->type;
    h[5] = h[6] = h[7] = 0;
    le_put(h + 8, pos, 8);
    le_put(h + 16, XXH3_64bits(h, 16), 8);
    p = put_name(p, rec->name);
    switch (rec->type) {
    case JOURNAL_ADD:
    case JOURNAL_ADD_NEW:
    case JOURNAL_DELETE:
        le_put(p, rec->nhashes, 4);
        p += 4;
        put_hashes(p, rec->hashes, rec->nhashes);
        p += 16 * rec->nhashes;
        break;
    case JOURNAL_CREATE:
    case JOURNAL_RESTORE:
        le_put(p, rec->kind_tag, 4);
        le_put(p + 4, rec->nparams, 4);
        p += 8;
        if (rec->nparams > 0)
            memcpy(p, rec->params, rec->nparams);
        p += rec->nparams;
        break;
    case JOURNAL_DROP:
    case JOURNAL_CLEAR:
        break;
    case JOURNAL_UNION:
    case JOURNAL_INTERSECT:
        le_put(p, rec->nsources, 2);
        p += 2;
        for (size_t i = 0; i < rec->nsources; i++)
            p = put_name(p, rec->sources[i]);
        break;
    case JOURNAL_ROTATE:
        le_put(p, (uint64_t)rec->time_ms, 8);
        p += 8;
        break;
    }
    le_put(p, XXH3_64bits(h, JOURNAL_RECORD_HEADER + plen), 8);
    return (long)total;
}

/* A header is intact if its checksum matches and its fields are in range. */
static bool header_ok(const unsigned char *h, size_t *plen)
{
    if (le_get(h + 16, 8) != XXH3_64bits(h, 16))
        return false;
    uint64_t len = le_get(h, 4);
    if (h[4] < JOURNAL_ADD || h[4] > JOURNAL_TYPE_LAST || h[5] || h[6] || h[7] ||
        le_get(h + 8, 8) == 0 || len == 0 || len > JOURNAL_RECORD_MAX_PAYLOAD)
        return false;
    *plen = (size_t)len;
    return true;
}

size_t journal_record_claimed_size(const void *buf, size_t len)
{
    size_t plen;
    if (len < JOURNAL_RECORD_HEADER || !header_ok(buf, &plen))
        return 0;
    return JOURNAL_RECORD_OVERHEAD + plen;
}

/* Payload reader: every take checks the bytes left. */
struct cursor {
    const unsigned char *p, *end;
};

static bool take(struct cursor *c, size_t n, const unsigned char **out)
{
    if ((size_t)(c->end - c->p) < n)
        return false;
    *out = c->p;
    c->p += n;
    return true;
}

static bool take_name(struct cursor *c, struct journal_name *out)
{
    const unsigned char *q, *s;
    if (!take(c, 1, &q) || !take(c, *q, &s) || !journal_record_name_valid((const char *)s, *q))
        return false;
    out->ptr = (const char *)s;
    out->len = *q;
    return true;
}

static bool parse_payload(struct cursor *c, struct journal_scratch *scratch,
                          struct journal_record *rec)
{
    const unsigned char *q;
    if (!take_name(c, &rec->name))
        return false;
    switch (rec->type) {
    case JOURNAL_ADD:
    case JOURNAL_ADD_NEW:
    case JOURNAL_DELETE:
        if (!take(c, 4, &q))
            return false;
        rec->nhashes = (size_t)le_get(q, 4);
        if (rec->nhashes == 0 || rec->nhashes > JOURNAL_MAX_HASHES ||
            !take(c, 16 * rec->nhashes, &q))
            return false;
        get_hashes(scratch->hashes, q, rec->nhashes);
        rec->hashes = scratch->hashes;
        return true;
    case JOURNAL_CREATE:
    case JOURNAL_RESTORE:
        if (!take(c, 8, &q))
            return false;
        rec->kind_tag = (uint32_t)le_get(q, 4);
        rec->nparams = (size_t)le_get(q + 4, 4);
        if (rec->nparams > JOURNAL_MAX_PARAMS || !take(c, rec->nparams, &q))
            return false;
        rec->params = q;
        return true;
    case JOURNAL_DROP:
    case JOURNAL_CLEAR:
        return true;
    case JOURNAL_UNION:
    case JOURNAL_INTERSECT:
        if (!take(c, 2, &q))
            return false;
        rec->nsources = (size_t)le_get(q, 2);
        if (rec->nsources == 0 || rec->nsources > JOURNAL_MAX_SOURCES)
            return false;
        for (size_t i = 0; i < rec->nsources; i++)
            if (!take_name(c, &scratch->sources[i]))
                return false;
        rec->sources = scratch->sources;
        return true;
    case JOURNAL_ROTATE:
        if (!take(c, 8, &q))
            return false;
        rec->time_ms = (int64_t)le_get(q, 8);
        return true;
    }
    return false;
}

long journal_record_decode(const void *buf, size_t len, struct journal_scratch *scratch,
                           struct journal_record *rec)
{
    const unsigned char *h = buf;
    size_t plen;
    if (len < JOURNAL_RECORD_HEADER)
        return JOURNAL_RECORD_PARTIAL;
    if (!header_ok(h, &plen))
        return JOURNAL_RECORD_CORRUPT;
    size_t total = JOURNAL_RECORD_OVERHEAD + plen;
    if (len < total)
        return JOURNAL_RECORD_PARTIAL;
    if (le_get(h + JOURNAL_RECORD_HEADER + plen, 8) != XXH3_64bits(h, JOURNAL_RECORD_HEADER + plen))
        return JOURNAL_RECORD_CORRUPT;
    memset(rec, 0, sizeof *rec);
    rec->type = (enum journal_type)h[4];
    rec->pos = le_get(h + 8, 8);
    struct cursor c = {h + JOURNAL_RECORD_HEADER, h + JOURNAL_RECORD_HEADER + plen};
    /* The payload must be exactly what its fields say: nothing left over. */
    if (!parse_payload(&c, scratch, rec) || c.p != c.end)
        return JOURNAL_RECORD_CORRUPT;
    return (long)total;
}
