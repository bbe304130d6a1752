/*
 * number.h - strict, locale-independent parsing of the numbers in protocol tokens.
 * Input is a borrowed byte range (not NUL-terminated); the whole range must be the
 * number, with no spaces, signs on integers, hex, nan or inf.
 */
#ifndef BLOOMD_PROTO_NUMBER_H
#define BLOOMD_PROTO_NUMBER_H

#include <stddef.h>
#include <stdint.h>

/* Decimal digits only, 1..20 of them, value <= UINT64_MAX. Returns 0 or PROTO_ERR_NUMBER. */
int proto_parse_u64(const char *s, size_t len, uint64_t *out);

/*
 * A finite decimal: [+-] digits [. digits] [e|E [+-] digits], with at least one digit
 * before or after the point, at most 64 bytes. Returns 0 or PROTO_ERR_NUMBER (also when
 * the value overflows to infinity; an underflow to 0 is returned as 0).
 */
int proto_parse_double(const char *s, size_t len, double *out);

/*
 * A duration: 1..20 decimal digits, then optionally one unit letter, `s`, `m`, `h` or `d`
 * (lower case; none means seconds). Sets *ms to it in milliseconds, saturated at
 * UINT64_MAX when larger (so any range check refuses it). Returns 0 or PROTO_ERR_NUMBER.
 * The caller checks the range (CREATE's window= takes 1 s .. 366 d).
 */
int proto_parse_duration(const char *s, size_t len, uint64_t *ms);

#endif
