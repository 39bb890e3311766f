/* auth.h: proving the job's token without sending it: HMAC-SHA256 and nonces (libcrypto), a replay cache. */
#ifndef FTCC_AUTH_H
#define FTCC_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/*
 * Every link (data or control) opens with a hello from the connecting side
 * and an answer from the accepting side. Neither carries the token: the
 * hello carries a fresh random nonce and MAC = HMAC-SHA256(token, label ||
 * every other byte of the hello, nonce included); the answer carries
 * HMAC-SHA256(token, label' || the hello's nonce || the answer). The labels
 * differ by link kind and direction, so no MAC can be replayed as another.
 *
 * Why no challenge from the acceptor: ranks connect to their right
 * neighbour and only then accept from their left, so a connector must not
 * wait for its peer before its hello has gone out (a ring of such waits is
 * a deadlock). Freshness on the acceptor's side comes instead from a cache
 * of the nonces it accepted: a captured hello sent again is refused. A
 * hello also names its generation and both ranks, and a rank accepts one
 * link per neighbour and generation, so a hello older than the cache is
 * refused for its generation. The connector learns that the acceptor holds
 * the token when the answer's MAC over its own fresh nonce checks out.
 *
 * What this does not do: encrypt or authenticate the frames that follow a
 * hello. A job on a network others can write to needs IPsec, WireGuard or a
 * private network for that; the token only keeps strangers (and other jobs)
 * from opening links, and is never revealed to someone who watches them.
 *
 * The key is the token's bytes without its NUL; an empty token is a valid,
 * if weak, key.
 */

#define FT__SHA256_BYTES 32
#define FT__AUTH_NONCE 16
#define FT__AUTH_MAC 32
#define FT__AUTH_SEEN 64

/* SHA-256 and HMAC-SHA256 (libcrypto), whole or in pieces: 0, or -FT_EIO
 * when libcrypto fails (out is then undefined). An empty key is a key. */
int ft__sha256(const void *p, size_t n, uint8_t out[FT__SHA256_BYTES]);
int ft__sha256_iov(const struct iovec *iov, int n, uint8_t out[FT__SHA256_BYTES]);
int ft__hmac_sha256(const void *key, size_t keylen, const void *p, size_t n,
		    uint8_t out[FT__SHA256_BYTES]);
int ft__hmac_sha256_iov(const void *key, size_t keylen, const struct iovec *iov, int n,
			uint8_t out[FT__SHA256_BYTES]);

/* Whether a and b hold the same n bytes, in a time that depends on n only. */
bool ft__auth_equal(const void *a, const void *b, size_t n);

/* n random bytes (libcrypto's generator, seeded by the kernel): 0, or -FT_EIO. */
int ft__auth_random(void *p, size_t n);

/* HMAC-SHA256 keyed with token over label (its NUL included) || the n pieces. */
void ft__auth_mac(const char *token, const char *label, const struct iovec *iov, int n,
		  uint8_t mac[FT__AUTH_MAC]);
/* Whether mac is that MAC (compared in constant time). */
bool ft__auth_mac_ok(const char *token, const char *label, const struct iovec *iov, int n,
		     const uint8_t mac[FT__AUTH_MAC]);

/* The nonces of the last FT__AUTH_SEEN hellos accepted; zeroed is empty. */
struct ft__auth_seen {
	uint8_t nonce[FT__AUTH_SEEN][FT__AUTH_NONCE];
	unsigned next, count;
};

/* 0 and nonce remembered when it is not in s; -FT_EAUTH (a replay) when it is. */
int ft__auth_seen_add(struct ft__auth_seen *s, const uint8_t nonce[FT__AUTH_NONCE]);

#endif
