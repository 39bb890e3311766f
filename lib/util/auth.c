/* auth.c: HMAC-SHA256, SHA-256, random nonces and constant-time compare from OpenSSL's libcrypto; the replay cache. */
/* SPDX-License-Identifier: MIT */
#include <pthread.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "auth.h"
#include "internal.h"

/*
 * The cryptography is libcrypto's (docs/design.md, "Dependencies"): a hand-written
 * SHA-256 was one more thing to get wrong. The MAC algorithm is fetched
 * once per process; each MAC gets a context of its own, so threads (the
 * detector, the main thread) never share one.
 */
static EVP_MAC *hmac_alg;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;

/*
 * Once per process, before any other libcrypto call here: no cleanup of
 * libcrypto at exit. A program that exits on an error (exit(), not
 * ft_finalize) while the detector thread still makes a MAC or a nonce had
 * that thread crash (SIGSEGV in CRYPTO_THREAD_*_lock) once the exit
 * handler freed libcrypto's locks under it (the campaign saw it). The
 * process's memory goes with it anyway. (A program that initialized
 * libcrypto itself keeps its own choice.)
 */
static void hmac_fetch(void)
{
	(void)OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
	hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

/* HMAC-SHA256 keyed with key over the n pieces; false when libcrypto fails. */
static bool hmac_pieces(const void *key, size_t keylen, const struct iovec *pre, int npre,
			const struct iovec *iov, int n, uint8_t out[FT__SHA256_BYTES])
{
	static const uint8_t empty[1];
	char digest[] = "SHA256";
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
		OSSL_PARAM_construct_end(),
	};
	EVP_MAC_CTX *ctx;
	size_t len = 0;
	bool ok;

	pthread_once(&hmac_once, hmac_fetch);
	if (hmac_alg == NULL || (ctx = EVP_MAC_CTX_new(hmac_alg)) == NULL)
		return false;
	/* an empty key is a key (a NULL one would mean "the previous key") */
	ok = EVP_MAC_init(ctx, keylen > 0 ? key : empty, keylen, params) == 1;
	for (int i = 0; ok && i < npre; i++)
		ok = EVP_MAC_update(ctx, pre[i].iov_base, pre[i].iov_len) == 1;
	for (int i = 0; ok && i < n; i++)
		ok = EVP_MAC_update(ctx, iov[i].iov_base, iov[i].iov_len) == 1;
	ok = ok && EVP_MAC_final(ctx, out, &len, FT__SHA256_BYTES) == 1 && len == FT__SHA256_BYTES;
	EVP_MAC_CTX_free(ctx);
	return ok;
}

int ft__sha256_iov(const struct iovec *iov, int n, uint8_t out[FT__SHA256_BYTES])
{
	EVP_MD_CTX *ctx;
	unsigned len = 0;
	bool ok;

	pthread_once(&hmac_once, hmac_fetch);
	ctx = EVP_MD_CTX_new();
	ok = ctx != NULL && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;

	for (int i = 0; ok && i < n; i++)
		ok = EVP_DigestUpdate(ctx, iov[i].iov_base, iov[i].iov_len) == 1;
	ok = ok && EVP_DigestFinal_ex(ctx, out, &len) == 1 && len == FT__SHA256_BYTES;
	EVP_MD_CTX_free(ctx);
	return ok ? 0 : -FT_EIO;
}

int ft__sha256(const void *p, size_t n, uint8_t out[FT__SHA256_BYTES])
{
	struct iovec iov = {(void *)p, n};

	return ft__sha256_iov(&iov, 1, out);
}

int ft__hmac_sha256_iov(const void *key, size_t keylen, const struct iovec *iov, int n,
			uint8_t out[FT__SHA256_BYTES])
{
	return hmac_pieces(key, keylen, NULL, 0, iov, n, out) ? 0 : -FT_EIO;
}

int ft__hmac_sha256(const void *key, size_t keylen, const void *p, size_t n,
		    uint8_t out[FT__SHA256_BYTES])
{
	struct iovec iov = {(void *)p, n};

	return ft__hmac_sha256_iov(key, keylen, &iov, 1, out);
}

bool ft__auth_equal(const void *a, const void *b, size_t n)
{
	return CRYPTO_memcmp(a, b, n) == 0;
}

int ft__auth_random(void *p, size_t n)
{
	pthread_once(&hmac_once, hmac_fetch);
	if (n > INT32_MAX || RAND_bytes(p, (int)n) != 1) {
		ft__error("no random bytes from libcrypto for a handshake nonce or a token");
		return -FT_EIO;
	}
	return 0;
}

void ft__auth_mac(const char *token, const char *label, const struct iovec *iov, int n,
		  uint8_t mac[FT__AUTH_MAC])
{
	struct iovec pre = {(void *)label, strlen(label) + 1};

	if (!hmac_pieces(token, strlen(token), &pre, 1, iov, n, mac)) {
		/* a MAC that matches nothing: the handshake is refused, never let through */
		ft__error("libcrypto could not compute a handshake's HMAC-SHA256");
		if (ft__auth_random(mac, FT__AUTH_MAC) != 0)
			memset(mac, 0xa5, FT__AUTH_MAC);
	}
}

bool ft__auth_mac_ok(const char *token, const char *label, const struct iovec *iov, int n,
		     const uint8_t mac[FT__AUTH_MAC])
{
	struct iovec pre = {(void *)label, strlen(label) + 1};
	uint8_t want[FT__AUTH_MAC];
	bool ok = hmac_pieces(token, strlen(token), &pre, 1, iov, n, want) &&
		  ft__auth_equal(want, mac, sizeof(want));

	ft__wipe(want, sizeof(want));
	return ok;
}

bool ft__auth_seen_has(const struct ft__auth_seen *s, const uint8_t nonce[FT__AUTH_NONCE])
{
	for (unsigned i = 0; i < s->count; i++)
		if (memcmp(s->nonce[i], nonce, FT__AUTH_NONCE) == 0)
			return true;
	return false;
}

int ft__auth_seen_add(struct ft__auth_seen *s, const uint8_t nonce[FT__AUTH_NONCE])
{
	if (ft__auth_seen_has(s, nonce))
		return -FT_EAUTH;
	memcpy(s->nonce[s->next], nonce, FT__AUTH_NONCE);
	s->next = (s->next + 1) % FT__AUTH_SEEN;
	if (s->count < FT__AUTH_SEEN)
		s->count++;
	return 0;
}
