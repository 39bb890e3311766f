/* auth.h: proving the job's token without sending it: HMAC-SHA256 and nonces (libcrypto), a replay cache. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_AUTH_H
#define FTCC_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/*
 * Every link (data or control) opens with a hello from the connecting side,
 * an answer from the accepting side and a proof from the connecting side.
 * None carries the token: the hello carries a fresh random nonce Nc and
 * MAC = HMAC-SHA256(token, label || every other byte of the hello, Nc
 * included); the answer carries a fresh nonce Na of the acceptor's (the
 * challenge) and HMAC-SHA256(token, label' || Nc || the answer, Na
 * included); the proof is HMAC-SHA256(token, label'' || the whole hello ||
 * Na). The labels differ by link kind and direction, so no MAC can be
 * replayed as another.
 *
 * The acceptor takes no frame from a link before its proof checks out, so
 * a link is bound to both sides' fresh nonces: a hello copied off the wire
 * and raced to the acceptor ahead of the original gets its own Na, which
 * the copier cannot prove, and the original still gets a link. The cache
 * of nonces accepted (below) only refuses a copy early and loudly.
 *
 * Why the connector never waits for the answer before it returns: ranks
 * connect to their right neighbour and only then accept from their left,
 * so a connect that waited for its peer's answer would close a ring of
 * waits. The connector answers the challenge later, from whatever it runs
 * next (progress, its own accept, a control link's reading), and holds
 * its frames until the proof is out; the acceptor's wait for the proof
 * ends because every rank reaches that point without waiting on another.
 * The connector learns that the acceptor holds the token when the
 * answer's MAC over its own fresh nonce checks out.
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
/* Whether nonce is in s (nothing remembered). */
bool ft__auth_seen_has(const struct ft__auth_seen *s, const uint8_t nonce[FT__AUTH_NONCE]);

#endif
