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
 * A count, as for capacity=: an exact non-negative integer written as decimal digits
 * ("1000000"), optionally with a fraction and a decimal exponent ("1e6", "2.5e3") or with
 * one SI suffix k/K, M or G (powers of 1000: "1M" = 1000000, "1.5k" = 1500), at most 64
 * bytes. Signs are refused, and so is any form whose value is not a whole number ("1.5",
 * "1e-1") or exceeds UINT64_MAX. Returns 0 or PROTO_ERR_NUMBER.
 */
int proto_parse_count(const char *s, size_t len, uint64_t *out);

/*
 * A finite decimal: [+-] digits [. digits] [e|E [+-] digits], with at least one digit
 * before or after the point, at most 64 bytes. Returns 0 or PROTO_ERR_NUMBER (also when
 * the value overflows to infinity; an underflow to 0 is returned as 0).
 */
int proto_parse_double(const char *s, size_t len, double *out);

/*
 * Writes v as the shortest of %.15g, %.16g, %.17g that reads back as the same double
 * into buf (always NUL-terminated). Returns the length written (truncated if n is small).
 */
size_t proto_format_double(char *buf, size_t n, double v);

/*
 * A duration: 1..20 decimal digits, then optionally one unit letter, `s`, `m`, `h` or `d`
 * (lower case; none means seconds). Sets *ms to it in milliseconds, saturated at
 * UINT64_MAX when larger (so any range check refuses it). Returns 0 or PROTO_ERR_NUMBER.
 * The caller checks the range (CREATE's window= takes 1 s .. 366 d).
 */
int proto_parse_duration(const char *s, size_t len, uint64_t *ms);

#endif
