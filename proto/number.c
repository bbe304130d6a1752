/*
 * number.c - strict number parsing for CREATE options. The grammar is checked by hand so
 * that "nan", "inf", hex floats, leading spaces and trailing junk never reach strtod;
 * strtod then converts a bounded NUL-terminated copy (correctly rounded).
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
