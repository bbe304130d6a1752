/*
 * number.c - strict number parsing for CREATE options and the daemon's count settings.
 * The grammar is checked by hand so that "nan", "inf", hex floats, leading spaces and
 * trailing junk never reach strtod; strtod then converts a bounded NUL-terminated copy
 * (correctly rounded). Counts never go through a double: they are exact integers.
 */
#include "proto/number.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
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

size_t proto_format_double(char *buf, size_t n, double v)
{
    int w = 0;
    for (int prec = 15; prec <= 17; prec++) {
        w = snprintf(buf, n, "%.*g", prec, v);
        if (prec == 17 || strtod(buf, NULL) == v)
            break;
    }
    if (w < 0)
        return 0;
    return (size_t)w < n ? (size_t)w : n - 1;
}

/* 10^n for n <= 19, the largest power of ten below 2^64. */
static uint64_t pow10_u64(unsigned n)
{
    uint64_t p = 1;
    while (n-- > 0)
        p *= 10;
    return p;
}

int proto_parse_count(const char *s, size_t len, uint64_t *out)
{
    if (len == 0 || len >= NUMBER_MAX_DOUBLE)
        return PROTO_ERR_NUMBER;
    /*
     * value = mantissa * 10^exp, computed in integers: the digits without the point
     * (leading zeros dropped, trailing fraction zeros trimmed) and the exponent from
     * e<N>, the suffix and the fraction's length. A negative final exponent must divide
     * the mantissa exactly, or the value is not a whole number.
     */
    size_t i = 0;
    size_t int_start = i;
    size_t int_digits = skip_digits(s, len, &i);
    if (int_digits == 0)
        return PROTO_ERR_NUMBER;
    size_t frac_start = 0, frac_digits = 0;
    if (i < len && s[i] == '.') {
        i++;
        frac_start = i;
        frac_digits = skip_digits(s, len, &i);
        if (frac_digits == 0)
            return PROTO_ERR_NUMBER;
    }
    long exp = 0; /* |exp| stays below 64 + 9: the token is shorter than 64 bytes */
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        bool neg = false;
        if (i < len && (s[i] == '+' || s[i] == '-'))
            neg = s[i++] == '-';
        size_t start = i;
        size_t n = skip_digits(s, len, &i);
        if (n == 0)
            return PROTO_ERR_NUMBER;
        for (size_t k = start; k < i; k++) {
            exp = exp * 10 + (long)(s[k] - '0');
            if (exp > 100)
                return PROTO_ERR_NUMBER; /* 1e100 overflows; 1e-100 is no whole number */
        }
        if (neg)
            exp = -exp;
    } else if (i < len) {
        switch (s[i]) {
        case 'k':
        case 'K':
            exp = 3;
            break;
        case 'M':
            exp = 6;
            break;
        case 'G':
            exp = 9;
            break;
        default:
            return PROTO_ERR_NUMBER;
        }
        i++;
    }
    if (i != len)
        return PROTO_ERR_NUMBER;

    while (frac_digits > 0 && s[frac_start + frac_digits - 1] == '0')
        frac_digits--;
    exp -= (long)frac_digits;
    uint64_t m = 0;
    size_t sig = 0; /* significant digits in m */
    for (size_t k = 0; k < int_digits + frac_digits; k++) {
        char ch = k < int_digits ? s[int_start + k] : s[frac_start + k - int_digits];
        uint64_t d = (uint64_t)(ch - '0');
        if (m == 0 && d == 0)
            continue;
        if (++sig > 20 || m > (UINT64_MAX - d) / 10)
            return PROTO_ERR_NUMBER;
        m = m * 10 + d;
    }
    if (m == 0) {
        *out = 0;
        return 0;
    }
    for (; exp > 0; exp--) {
        if (m > UINT64_MAX / 10)
            return PROTO_ERR_NUMBER;
        m *= 10;
    }
    if (exp < 0) {
        if (exp < -19)
            return PROTO_ERR_NUMBER; /* m < 10^20 is not a multiple of 10^20 or more */
        uint64_t p = pow10_u64((unsigned)-exp);
        if (m % p != 0)
            return PROTO_ERR_NUMBER;
        m /= p;
    }
    *out = m;
    return 0;
}
