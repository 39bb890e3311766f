/* test_auth.c: SHA-256 and HMAC-SHA256 against FIPS 180 and RFC 4231 vectors, nonces, the replay cache; the token never on the wire. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "ftcc.h"
#include "internal.h"
#include "transport.h"

/* ---------------------------------------------------------------------- */
/* Part one: the primitives */

static void unhex(const char *hex, uint8_t *out, size_t n)
{
	cr_assert_eq(strlen(hex), 2 * n, "vector of %zu hex digits, want %zu", strlen(hex), 2 * n);
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		cr_assert_eq(sscanf(hex + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
}

static void expect_digest(const uint8_t *got, const char *hex, size_t n, const char *what)
{
	uint8_t want[FT__SHA256_BYTES];

	unhex(hex, want, n);
	cr_expect_eq(memcmp(got, want, n), 0, "%s", what);
}

static void expect_sha(const void *msg, size_t len, const char *hex, const char *what)
{
	uint8_t d[FT__SHA256_BYTES];

	ft__sha256(msg, len, d);
	expect_digest(d, hex, sizeof(d), what);
}

/* FIPS 180-2 appendix B and the NIST example values. */
Test(sha256, fips180_vectors, .timeout = 20)
{
	const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
			   "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";

	expect_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
		   "abc");
	expect_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		   "empty");
	expect_sha(m448, strlen(m448),
		   "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1", "448 bits");
	expect_sha(m896, strlen(m896),
		   "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1", "896 bits");
}

Test(sha256, million_a_in_pieces, .timeout = 20)
{
	struct ft__sha256 s;
	uint8_t d[FT__SHA256_BYTES];
	char a[1000];
	size_t done = 0, step = 1;

	memset(a, 'a', sizeof(a));
	ft__sha256_init(&s);
	/* pieces of every size from 1 to 1000 bytes, across block boundaries */
	while (done < 1000000) {
		size_t n = 1000000 - done < step ? 1000000 - done : step;
		ft__sha256_update(&s, a, n);
		done += n;
		step = step % 1000 + 1;
	}
	ft__sha256_final(&s, d);
	expect_digest(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
		      sizeof(d), "one million a");
}

/* Padding edges: lengths around 55, 56 and 64 bytes, one shot against byte by byte. */
Test(sha256, split_matches_one_shot, .timeout = 20)
{
	uint8_t msg[200];

	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(i * 131 + 7);
	for (size_t len = 0; len <= sizeof(msg); len++) {
		struct ft__sha256 s;
		uint8_t one[FT__SHA256_BYTES], bytes[FT__SHA256_BYTES];
		ft__sha256(msg, len, one);
		ft__sha256_init(&s);
		for (size_t i = 0; i < len; i++)
			ft__sha256_update(&s, msg + i, 1);
		ft__sha256_final(&s, bytes);
		cr_expect_eq(memcmp(one, bytes, sizeof(one)), 0, "length %zu", len);
	}
}

struct hmac_case {
	const char *key_hex;
	const char *data;       /* text, or hex when data_hex */
	bool data_hex;
	const char *mac_hex;    /* may be truncated (case 5) */
};

static void fill(char *hex, size_t bytes, const char *byte)
{
	for (size_t i = 0; i < bytes; i++)
		memcpy(hex + 2 * i, byte, 2);
	hex[2 * bytes] = '\0';
}

/* RFC 4231, test cases 1 to 7. */
Test(hmac_sha256, rfc4231_vectors, .timeout = 20)
{
	static char k0b[41], kaa20[41], kaa131[263], k0c[41], ddd[101], dcd[101];
	fill(k0b, 20, "0b");
	fill(kaa20, 20, "aa");
	fill(kaa131, 131, "aa");
	fill(k0c, 20, "0c");
	fill(ddd, 50, "dd");
	fill(dcd, 50, "cd");
	const struct hmac_case cases[] = {
		{k0b, "Hi There", false,
		 "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
		{"4a656665", "what do ya want for nothing?", false,
		 "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
		{kaa20, ddd, true, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
		{"0102030405060708090a0b0c0d0e0f10111213141516171819", dcd, true,
		 "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
		{k0c, "Test With Truncation", false, "a3b6167473100ee06e0c796c2955552b"},
		{kaa131, "Test Using Larger Than Block-Size Key - Hash Key First", false,
		 "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
		{kaa131,
		 "This is a test using a larger than block-size key and a larger than block-size "
		 "data. The key needs to be hashed before being used by the HMAC algorithm.",
		 false, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
	};

	for (size_t i = 0; i < FT__ARRAY_SIZE(cases); i++) {
		const struct hmac_case *c = &cases[i];
		uint8_t key[131], data[200], mac[FT__SHA256_BYTES];
		size_t klen = strlen(c->key_hex) / 2, dlen;
		char what[32];
		unhex(c->key_hex, key, klen);
		if (c->data_hex) {
			dlen = strlen(c->data) / 2;
			unhex(c->data, data, dlen);
		} else {
			dlen = strlen(c->data);
			memcpy(data, c->data, dlen);
		}
		ft__hmac_sha256(key, klen, data, dlen, mac);
		snprintf(what, sizeof(what), "RFC 4231 case %zu", i + 1);
		expect_digest(mac, c->mac_hex, strlen(c->mac_hex) / 2, what);
	}
}

Test(hmac_sha256, empty_key_is_a_key, .timeout = 20)
{
	uint8_t a[FT__SHA256_BYTES], b[FT__SHA256_BYTES];

	ft__hmac_sha256("", 0, "hello", 5, a);
	ft__hmac_sha256("\0", 1, "hello", 5, b);
	/* HMAC pads the key with zeros: the empty key and one zero byte agree */
	cr_expect_eq(memcmp(a, b, sizeof(a)), 0);
	ft__hmac_sha256("x", 1, "hello", 5, b);
	cr_expect_neq(memcmp(a, b, sizeof(a)), 0);
}

Test(auth, mac_covers_label_pieces_and_token, .timeout = 20)
{
	uint8_t base[FT__AUTH_MAC], other[FT__AUTH_MAC];
	char a[] = "first", b[] = "second";
	struct iovec iov[2] = {{a, sizeof(a)}, {b, sizeof(b)}};

	ft__auth_mac("tok", "label", iov, 2, base);
	cr_expect(ft__auth_mac_ok("tok", "label", iov, 2, base));
	cr_expect(!ft__auth_mac_ok("tok2", "label", iov, 2, base), "another token");
	cr_expect(!ft__auth_mac_ok("", "label", iov, 2, base), "the empty token");
	cr_expect(!ft__auth_mac_ok("tok", "labe", iov, 2, base), "another label");
	b[0] = 'S';
	cr_expect(!ft__auth_mac_ok("tok", "label", iov, 2, base), "another byte");
	b[0] = 's';
	ft__auth_mac("tok", "label", iov, 1, other);
	cr_expect_neq(memcmp(base, other, sizeof(base)), 0, "a piece left out");
	base[31] ^= 1;
	cr_expect(!ft__auth_mac_ok("tok", "label", iov, 2, base), "a flipped MAC bit");
}

Test(auth, equal_compares_every_byte, .timeout = 20)
{
	uint8_t x[32], y[32];

	for (size_t i = 0; i < sizeof(x); i++)
		x[i] = y[i] = (uint8_t)i;
	cr_expect(ft__auth_equal(x, y, sizeof(x)));
	cr_expect(ft__auth_equal(x, y, 0));
	for (size_t i = 0; i < sizeof(x); i++) {
		y[i] ^= 0x80;
		cr_expect(!ft__auth_equal(x, y, sizeof(x)), "byte %zu differs", i);
		y[i] ^= 0x80;
	}
}

Test(auth, nonces_are_fresh, .timeout = 20)
{
	uint8_t n[8][FT__AUTH_NONCE];

	for (int i = 0; i < 8; i++)
		cr_assert_eq(ft__auth_random(n[i], sizeof(n[i])), 0);
	for (int i = 0; i < 8; i++)
		for (int j = 0; j < i; j++)
			cr_expect_neq(memcmp(n[i], n[j], FT__AUTH_NONCE), 0, "nonces %d and %d", i, j);
}

Test(auth, seen_refuses_a_replay, .timeout = 20)
{
	static struct ft__auth_seen s;
	uint8_t n[FT__AUTH_SEEN + 1][FT__AUTH_NONCE];

	memset(n, 0, sizeof(n));
	for (int i = 0; i <= FT__AUTH_SEEN; i++)
		n[i][0] = (uint8_t)i, n[i][15] = 0xee;
	cr_expect_eq(ft__auth_seen_add(&s, n[0]), 0);
	cr_expect_eq(ft__auth_seen_add(&s, n[0]), -FT_EAUTH, "the same nonce twice");
	for (int i = 1; i < FT__AUTH_SEEN; i++)
		cr_expect_eq(ft__auth_seen_add(&s, n[i]), 0, "nonce %d", i);
	for (int i = 0; i < FT__AUTH_SEEN; i++)
		cr_expect_eq(ft__auth_seen_add(&s, n[i]), -FT_EAUTH, "nonce %d again", i);
	/* a full cache forgets its oldest */
	cr_expect_eq(ft__auth_seen_add(&s, n[FT__AUTH_SEEN]), 0);
	cr_expect_eq(ft__auth_seen_add(&s, n[0]), 0, "the oldest was forgotten");
	cr_expect_eq(ft__auth_seen_add(&s, n[FT__AUTH_SEEN]), -FT_EAUTH);
}
