/*
 * auth.c - token digests and the token file. A check costs one SHA-256 of at most a
 * request line (max_line) and runs once per AUTH, never per request.
 */
#include "server/core/auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

static void digest(const void *data, size_t len, unsigned char out[AUTH_DIGEST_LEN])
{
    unsigned int n = AUTH_DIGEST_LEN;
    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1 || n != AUTH_DIGEST_LEN)
        memset(out, 0, AUTH_DIGEST_LEN); /* never matches: a key digest is set only on success */
}

void auth_key_init(struct auth_key *key, const char *token, size_t len)
{
    memset(key, 0, sizeof *key);
    if (len == 0)
        return;
    unsigned int n = AUTH_DIGEST_LEN;
    key->set =
        EVP_Digest(token, len, key->digest, &n, EVP_sha256(), NULL) == 1 && n == AUTH_DIGEST_LEN;
}

bool auth_key_matches(const struct auth_key *key, const void *tok, size_t len)
{
    unsigned char d[AUTH_DIGEST_LEN];
    digest(tok, len, d);
    bool same = CRYPTO_memcmp(d, key->digest, AUTH_DIGEST_LEN) == 0;
    return key->set && same;
}

const char *auth_token_invalid(const char *token)
{
    size_t n = strlen(token);
    if (n == 0)
        return "the token is empty";
    if (n > AUTH_TOKEN_MAX)
        return "the token is longer than 256 bytes";
    if (strpbrk(token, "\r\n") != NULL)
        return "the token holds a line break";
    return NULL;
}

int auth_read_token_file(const char *path, char *out, size_t cap, char *why, size_t whylen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(why, whylen, "auth token file %s: %s", path, strerror(errno));
        return -1;
    }
    size_t n = fread(out, 1, cap, f);
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (err != 0) {
        snprintf(why, whylen, "auth token file %s: %s", path, strerror(err));
        return -1;
    }
    if (n == cap) {
        snprintf(why, whylen, "auth token file %s: longer than %zu bytes", path, cap - 1);
        return -1;
    }
    if (n > 0 && out[n - 1] == '\n')
        n--;
    if (n > 0 && out[n - 1] == '\r')
        n--;
    out[n] = '\0';
    if (memchr(out, '\0', n) != NULL) {
        snprintf(why, whylen, "auth token file %s: holds a NUL byte", path);
        return -1;
    }
    const char *bad = auth_token_invalid(out);
    if (bad != NULL) {
        snprintf(why, whylen, "auth token file %s: %s", path, bad);
        return -1;
    }
    return 0;
}
