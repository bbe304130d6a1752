/*
 * number.c - strict number parsing for CREATE options. The grammar is checked by hand so
 * that "nan", "inf", hex floats, leading spaces and trailing junk never reach strtod;
 * strtod then converts a bounded NUL-terminated copy (correctly rounded).
 */
#include "proto/number.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

#define NUMBER_MAX_DOUBLE 64

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

int proto_parse_u64(const char *s, size_t len, uint64_t *out)
{
    if (len == 0 || len > 20)
        return PROTO_ERR_NUMBER;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!is_digit(s[i]))
            return PROTO_ERR_NUMBER;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return PROTO_ERR_NUMBER;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int proto_parse_duration(const char *s, size_t len, uint64_t *ms)
{
    uint64_t unit = 1000;
    if (len > 0 && !is_digit(s[len - 1])) {
        switch (s[len - 1]) {
        case 's':
            unit = 1000;
            break;
        case 'm':
            unit = 60 * 1000;
            break;
        case 'h':
            unit = 3600 * 1000;
            break;
        case 'd':
            unit = 86400 * 1000;
            break;
        default:
            return PROTO_ERR_NUMBER;
        }
        len--;
    }
    uint64_t v;
    if (proto_parse_u64(s, len, &v) != 0)
        return PROTO_ERR_NUMBER;
    *ms = v > UINT64_MAX / unit ? UINT64_MAX : v * unit;
    return 0;
}

/* Skips a run of digits starting at *i; returns how many there were. */
static size_t skip_digits(const char *s, size_t len, size_t *i)
{
    size_t start = *i;
    while (*i < len && is_digit(s[*i]))
        (*i)++;
    return *i - start;
}

int proto_parse_double(const char *s, size_t len, double *out)
{
    if (len == 0 || len >= NUMBER_MAX_DOUBLE)
        return PROTO_ERR_NUMBER;
    size_t i = 0;
    if (s[i] == '+' || s[i] == '-')
        i++;
    size_t digits = skip_digits(s, len, &i);
    if (i < len && s[i] == '.') {
        i++;
        digits += skip_digits(s, len, &i);
    }
    if (digits == 0)
        return PROTO_ERR_NUMBER;
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < len && (s[i] == '+' || s[i] == '-'))
            i++;
        if (skip_digits(s, len, &i) == 0)
            return PROTO_ERR_NUMBER;
    }
    if (i != len)
        return PROTO_ERR_NUMBER;

    char copy[NUMBER_MAX_DOUBLE];
    memcpy(copy, s, len);
    copy[len] = '\0';
    char *end = NULL;
    double v = strtod(copy, &end);
    /* A locale whose decimal point is not '.' stops strtod early: refuse, don't guess. */
    if (end != copy + len || !isfinite(v))
        return PROTO_ERR_NUMBER;
    *out = v;
    return 0;
}
