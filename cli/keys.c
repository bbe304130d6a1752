/*
 * keys.c - key extraction. Bulk modes check every byte of every key, so the common case (a
 * key with no bad byte) is a word-at-a-time scan: eight bytes per step, each tested for
 * space, tab, CR and NUL with the "has a zero byte" trick. It accepts exactly what
 * proto_key_valid accepts (tests/unit/cli/test_cli_keys.c compares the two); the reason
 * for a refusal is looked up only when a key fails.
 */
#include "cli/keys.h"

#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define ONES UINT64_C(0x0101010101010101)
#define HIGHS UINT64_C(0x8080808080808080)

/* Nonzero if some byte of v is zero. */
static inline uint64_t zero_byte(uint64_t v)
{
    return (v - ONES) & ~v & HIGHS;
}

static inline bool bad_byte(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\0' || c == '\n';
}

/* True if s[0..n) has none of the bytes a key cannot carry (n may be 0). */
static bool bytes_ok(const char *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, s + i, 8);
        uint64_t z = zero_byte(v) | zero_byte(v ^ (ONES * ' ')) | zero_byte(v ^ (ONES * '\t')) |
                     zero_byte(v ^ (ONES * '\r')) | zero_byte(v ^ (ONES * '\n'));
        if (z != 0)
            return false;
    }
    for (; i < n; i++)
        if (bad_byte(s[i]))
            return false;
    return true;
}

size_t cli_line_scan(const char *p, size_t n, bool *clean)
{
    /* Find the first byte that ends or spoils a key: then only that byte decides. */
    size_t i = 0;
#if defined(__SSE2__)
    const __m128i nl = _mm_set1_epi8('\n'), sp = _mm_set1_epi8(' '), tab = _mm_set1_epi8('\t');
    const __m128i cr = _mm_set1_epi8('\r'), nul = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + i));
        __m128i m =
            _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, nl), _mm_cmpeq_epi8(v, sp)),
                         _mm_or_si128(_mm_cmpeq_epi8(v, tab),
                                      _mm_or_si128(_mm_cmpeq_epi8(v, cr), _mm_cmpeq_epi8(v, nul))));
        unsigned mask = (unsigned)_mm_movemask_epi8(m);
        if (mask != 0) {
            i += (size_t)__builtin_ctz(mask);
            goto found;
        }
    }
#endif
    for (; i < n; i++)
        if (bad_byte(p[i]))
            goto found;
    return n;
found:
    if (p[i] == '\n') {
        *clean = i > 0;
        return i;
    }
    if (p[i] == '\r' && i + 1 < n && p[i + 1] == '\n') {
        *clean = i > 0;
        return i + 1;
    }
    *clean = false;
    const char *end = memchr(p + i, '\n', n - i);
    return end != NULL ? (size_t)(end - p) : n;
}

int cli_key_extract(const struct cli_keyspec *spec, const char *line, size_t len,
                    struct proto_slice *key)
{
    if (len > 0 && line[len - 1] == '\r')
        len--;
    *key = (struct proto_slice){line, len};
    if (spec->field > 0) {
        const char *p = line, *end = line + len;
        for (unsigned f = 1; f < spec->field; f++) {
            const char *d = memchr(p, spec->delim, (size_t)(end - p));
            if (d == NULL) {
                *key = (struct proto_slice){end, 0};
                return CLI_KEY_NOFIELD;
            }
            p = d + 1;
        }
        const char *d = memchr(p, spec->delim, (size_t)(end - p));
        *key = (struct proto_slice){p, (size_t)((d != NULL ? d : end) - p)};
    }
    if (key->len > CLI_KEY_MAX)
        return CLI_KEY_TOOLONG;
    if (key->len > 0 && bytes_ok(key->ptr, key->len))
        return CLI_KEY_OK;
    if (key->len == 0)
        return CLI_KEY_EMPTY;
    for (size_t i = 0; i < key->len; i++) {
        switch (key->ptr[i]) {
        case ' ':
            return CLI_KEY_SPACE;
        case '\t':
            return CLI_KEY_TAB;
        case '\r':
            return CLI_KEY_CR;
        case '\0':
            return CLI_KEY_NUL;
        default:
            break;
        }
    }
    return CLI_KEY_EMPTY; /* not reached: a line holds no '\n' */
}

const char *cli_key_strerror(int err)
{
    switch (err) {
    case CLI_KEY_OK:
        return "ok";
    case CLI_KEY_EMPTY:
        return "empty key";
    case CLI_KEY_SPACE:
        return "the key has a space";
    case CLI_KEY_TAB:
        return "the key has a tab";
    case CLI_KEY_CR:
        return "the key has a carriage return";
    case CLI_KEY_NUL:
        return "the key has a NUL byte";
    case CLI_KEY_NOFIELD:
        return "the line has too few fields";
    case CLI_KEY_TOOLONG:
        return "the key is longer than 1 MiB";
    }
    return "bad key";
}

bool cli_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128 || s[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}
