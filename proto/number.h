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
 * Writes v as the shortest of %.15g, %.16g, %.17g that reads back as the same double
 * into buf (always NUL-terminated). Returns the length written (truncated if n is small).
 */
size_t proto_format_double(char *buf, size_t n, double v);

#endif
