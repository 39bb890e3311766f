/* auth.c: SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104), nonces, constant-time compare, the replay cache. */
#include <string.h>
#include <sys/random.h>

#include "auth.h"
#include "internal.h"

static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
	0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
	0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
	0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
	0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
	0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
	0xc67178f2,
};

static inline uint32_t ror(uint32_t x, unsigned n)
{
	return x >> n | x << (32 - n);
}

static inline uint32_t load_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void store_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* One 64-byte block into the state (FIPS 180-4, 6.2.2). */
static void compress(uint32_t h[8], const uint8_t *block)
{
	uint32_t w[64], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6],
			k = h[7];

	for (int t = 0; t < 16; t++)
		w[t] = load_be32(block + 4 * t);
	for (int t = 16; t < 64; t++) {
		uint32_t s0 = ror(w[t - 15], 7) ^ ror(w[t - 15], 18) ^ (w[t - 15] >> 3);
		uint32_t s1 = ror(w[t - 2], 17) ^ ror(w[t - 2], 19) ^ (w[t - 2] >> 10);
		w[t] = w[t - 16] + s0 + w[t - 7] + s1;
	}
	for (int t = 0; t < 64; t++) {
		uint32_t t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[t] +
			      w[t];
		uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
		k = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	h[0] += a;
	h[1] += b;
	h[2] += c;
	h[3] += d;
	h[4] += e;
	h[5] += f;
	h[6] += g;
	h[7] += k;
}

void ft__sha256_init(struct ft__sha256 *s)
{
	static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
				       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

	memcpy(s->h, h0, sizeof(h0));
	s->bytes = 0;
	s->nbuf = 0;
}

void ft__sha256_update(struct ft__sha256 *s, const void *p, size_t n)
{
	const uint8_t *in = p;

	s->bytes += n;
	if (s->nbuf > 0) {
		size_t take = 64 - s->nbuf < n ? 64 - s->nbuf : n;
		memcpy(s->buf + s->nbuf, in, take);
		s->nbuf += take;
		in += take;
		n -= take;
		if (s->nbuf < 64)
			return;
		compress(s->h, s->buf);
		s->nbuf = 0;
	}
	for (; n >= 64; in += 64, n -= 64)
		compress(s->h, in);
	memcpy(s->buf, in, n);
	s->nbuf = n;
}

/* Padding: 0x80, zeros up to 56 mod 64, then the length in bits (big endian). */
void ft__sha256_final(struct ft__sha256 *s, uint8_t out[FT__SHA256_BYTES])
{
	uint64_t bits = s->bytes * 8;

	s->buf[s->nbuf++] = 0x80;
	if (s->nbuf > 56) {
		memset(s->buf + s->nbuf, 0, 64 - s->nbuf);
		compress(s->h, s->buf);
		s->nbuf = 0;
	}
	memset(s->buf + s->nbuf, 0, 56 - s->nbuf);
	store_be32(s->buf + 56, (uint32_t)(bits >> 32));
	store_be32(s->buf + 60, (uint32_t)bits);
	compress(s->h, s->buf);
	for (int i = 0; i < 8; i++)
		store_be32(out + 4 * i, s->h[i]);
	memset(s, 0, sizeof(*s));
}

void ft__sha256(const void *p, size_t n, uint8_t out[FT__SHA256_BYTES])
{
	struct ft__sha256 s;

	ft__sha256_init(&s);
	ft__sha256_update(&s, p, n);
	ft__sha256_final(&s, out);
}

void ft__hmac_init(struct ft__hmac *h, const void *key, size_t keylen)
{
	uint8_t k[64] = {0}, pad[64];

	if (keylen > sizeof(k))
		ft__sha256(key, keylen, k);
	else if (keylen > 0)
		memcpy(k, key, keylen);
	for (int i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x36;
	ft__sha256_init(&h->inner);
	ft__sha256_update(&h->inner, pad, sizeof(pad));
	for (int i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x5c;
	ft__sha256_init(&h->outer);
	ft__sha256_update(&h->outer, pad, sizeof(pad));
	memset(k, 0, sizeof(k));
	memset(pad, 0, sizeof(pad));
}

void ft__hmac_update(struct ft__hmac *h, const void *p, size_t n)
{
	ft__sha256_update(&h->inner, p, n);
}

void ft__hmac_final(struct ft__hmac *h, uint8_t out[FT__SHA256_BYTES])
{
	uint8_t inner[FT__SHA256_BYTES];

	ft__sha256_final(&h->inner, inner);
	ft__sha256_update(&h->outer, inner, sizeof(inner));
	ft__sha256_final(&h->outer, out);
	memset(inner, 0, sizeof(inner));
}

void ft__hmac_sha256(const void *key, size_t keylen, const void *p, size_t n,
		     uint8_t out[FT__SHA256_BYTES])
{
	struct ft__hmac h;

	ft__hmac_init(&h, key, keylen);
	ft__hmac_update(&h, p, n);
	ft__hmac_final(&h, out);
}

bool ft__auth_equal(const void *a, const void *b, size_t n)
{
	const volatile uint8_t *x = a, *y = b;
	uint8_t diff = 0;

	for (size_t i = 0; i < n; i++)
		diff |= x[i] ^ y[i];
	return diff == 0;
}

int ft__auth_random(void *p, size_t n)
{
	uint8_t *out = p;

	while (n > 0) {
		ssize_t r = getrandom(out, n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			ft__error("no random bytes from the kernel for a handshake nonce: %s",
				  r < 0 ? strerror(errno) : "none");
			return -FT_EIO;
		}
		out += r;
		n -= (size_t)r;
	}
	return 0;
}

void ft__auth_mac(const char *token, const char *label, const struct iovec *iov, int n,
		  uint8_t mac[FT__AUTH_MAC])
{
	struct ft__hmac h;

	ft__hmac_init(&h, token, strlen(token));
	ft__hmac_update(&h, label, strlen(label) + 1);
	for (int i = 0; i < n; i++)
		ft__hmac_update(&h, iov[i].iov_base, iov[i].iov_len);
	ft__hmac_final(&h, mac);
}

bool ft__auth_mac_ok(const char *token, const char *label, const struct iovec *iov, int n,
		     const uint8_t mac[FT__AUTH_MAC])
{
	uint8_t want[FT__AUTH_MAC];
	bool ok;

	ft__auth_mac(token, label, iov, n, want);
	ok = ft__auth_equal(want, mac, sizeof(want));
	memset(want, 0, sizeof(want));
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
