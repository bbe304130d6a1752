/*
 * auth.h - the shared token of `auth_token`: loading it from a file, and checking a
 * candidate in constant time. Both sides are hashed to fixed-length SHA-256 digests and
 * compared with CRYPTO_memcmp, so neither the token's length nor the position of the first
 * wrong byte shows in the time a check takes. Pure functions: no sockets, no logging.
 */
#ifndef BLOOMD_SERVER_AUTH_H
#define BLOOMD_SERVER_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#define AUTH_DIGEST_LEN 32 /* SHA-256 */
#define AUTH_TOKEN_MAX 256 /* bytes in a token */

/* The token as the server keeps it: only its digest. */
struct auth_key {
    bool set;                              /* a token is configured */
    unsigned char digest[AUTH_DIGEST_LEN]; /* SHA-256 of the token */
};

/* Sets key from token[0..len); len 0 leaves it unset (no authentication). */
void auth_key_init(struct auth_key *key, const char *token, size_t len);

/* True if key is set and tok[0..len) is its token. Time does not depend on tok's bytes. */
bool auth_key_matches(const struct auth_key *key, const void *tok, size_t len);

/*
 * NULL if token (NUL-terminated) can be a token: 1..AUTH_TOKEN_MAX bytes, no CR, LF or
 * NUL (a line protocol cannot carry them); else a static reason.
 */
const char *auth_token_invalid(const char *token);

/*
 * Reads the token from the file at path into out (cap bytes, NUL-terminated): the file's
 * content without one trailing "\n" or "\r\n". Returns 0, or -1 with a one-line reason in
 * why (naming the file, with strerror for a system error).
 */
int auth_read_token_file(const char *path, char *out, size_t cap, char *why, size_t whylen);

#endif
