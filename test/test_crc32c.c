/* test_crc32c.c: CRC-32C against published vectors, a bit-at-a-time reference, and hardware vs table agreement. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"

/* The definition, one bit at a time. */
static uint32_t crc_bitwise(uint32_t crc, const unsigned char *p, size_t len)
{
	crc = ~crc;
	while (len--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
	}
	return ~crc;
}

static unsigned char *random_bytes(size_t n, uint64_t seed)
{
	unsigned char *buf = malloc(n ? n : 1);
	cr_assert(buf);
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
	for (size_t i = 0; i < n; i++) {
		s ^= s >> 12;
		s ^= s << 25;
		s ^= s >> 27;
		buf[i] = (unsigned char)((s * 0x2545f4914f6cdd1dull) >> 56);
	}
	return buf;
}

static int have_sse42(void)
{
#if defined(__x86_64__)
	return __builtin_cpu_supports("sse4.2");
#else
	return 0;
#endif
}

Test(crc32c, known_vectors)
{
	unsigned char zeros[32], ones[32], inc[32], dec[32];
	memset(zeros, 0, sizeof(zeros));
	memset(ones, 0xff, sizeof(ones));
	for (int i = 0; i < 32; i++) {
		inc[i] = (unsigned char)i;
		dec[i] = (unsigned char)(31 - i);
	}
	static const struct vector {
		const char *name;
		const void *data; /* NULL: the RFC 3720 buffers above, in order */
		size_t len;
		uint32_t crc;
	} vectors[] = {
		{ "check string", "123456789", 9, 0xe3069283u },
		{ "empty", "", 0, 0x00000000u },
		{ "a", "a", 1, 0xc1d04330u },
		/* RFC 3720 (iSCSI), appendix B.4 */
		{ "32 zeros", NULL, 32, 0x8a9136aau },
		{ "32 0xff", NULL, 32, 0x62a8ab43u },
		{ "32 incrementing", NULL, 32, 0x46dd794eu },
		{ "32 decrementing", NULL, 32, 0x113fdb5cu },
	};
	const void *rfc[] = { zeros, ones, inc, dec };
	for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
		const struct vector *v = &vectors[i];
		const void *data = v->data ? v->data : rfc[i - 3];
		cr_expect_eq(ft__crc32c(0, data, v->len), v->crc, "%s: ft__crc32c = 0x%08x, want 0x%08x",
			     v->name, ft__crc32c(0, data, v->len), v->crc);
		cr_expect_eq(ft__crc32c_sw(0, data, v->len), v->crc,
			     "%s: ft__crc32c_sw = 0x%08x, want 0x%08x", v->name,
			     ft__crc32c_sw(0, data, v->len), v->crc);
		cr_expect_eq(crc_bitwise(0, data, v->len), v->crc, "%s: reference", v->name);
	}
	cr_expect_eq(ft__crc32c(0, NULL, 0), 0u);
	cr_expect_eq(ft__crc32c(0x12345678u, NULL, 0), 0x12345678u, "no bytes: crc unchanged");
}

/*
 * Every length around the hardware path's block boundaries (3 x 256 and
 * 3 x 4096 bytes for the three chains), at every alignment, against the
 * bitwise reference.
 */
Test(crc32c, lengths_and_alignments_match_reference)
{
	const size_t max = 3 * 4096 * 3 + 3 * 256 + 64;
	unsigned char *buf = random_bytes(max + 16, 1);
	size_t lens[200];
	size_t nlens = 0;
	for (size_t l = 0; l <= 70; l++)
		lens[nlens++] = l;
	static const size_t edges[] = { 3 * 256, 3 * 4096, 2 * 3 * 4096, 3 * 3 * 4096 + 3 * 256 };
	for (size_t e = 0; e < sizeof(edges) / sizeof(edges[0]); e++)
		for (size_t d = 0; d < 19; d++)
			lens[nlens++] = edges[e] + d - 9;
	lens[nlens++] = max;
	for (size_t off = 0; off < 16; off++) {
		for (size_t i = 0; i < nlens; i++) {
			const unsigned char *p = buf + off;
			size_t n = lens[i];
			uint32_t want = crc_bitwise(0, p, n);
			cr_assert_eq(ft__crc32c(0, p, n), want, "off %zu len %zu", off, n);
			cr_assert_eq(ft__crc32c_sw(0, p, n), want, "sw: off %zu len %zu", off, n);
		}
	}
	free(buf);
}

Test(crc32c, hardware_and_table_paths_agree)
{
	if (!have_sse42())
		cr_skip_test("no SSE4.2 on this CPU: ft__crc32c is the table path, nothing to compare");
	const size_t n = 1 << 20;
	unsigned char *buf = random_bytes(n + 8, 2);
	uint64_t s = 7;
	for (int i = 0; i < 2000; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		size_t off = (s >> 33) % 8;
		size_t len = (s >> 40) % (i < 1000 ? 20000 : n);
		uint32_t seed = (uint32_t)(s >> 7);
		cr_assert_eq(ft__crc32c(seed, buf + off, len), ft__crc32c_sw(seed, buf + off, len),
			     "off %zu len %zu seed 0x%08x", off, len, seed);
	}
	free(buf);
}

Test(crc32c, incremental_equals_one_shot)
{
	const size_t n = 13000; /* past one 3 x 4096 stride */
	unsigned char *buf = random_bytes(n, 3);
	uint32_t whole = ft__crc32c(0, buf, n);
	cr_assert_eq(ft__crc32c_sw(0, buf, n), whole);
	for (size_t cut = 0; cut <= n; cut += (cut < 300 ? 1 : 97)) {
		cr_assert_eq(ft__crc32c(ft__crc32c(0, buf, cut), buf + cut, n - cut), whole,
			     "cut at %zu", cut);
		cr_assert_eq(ft__crc32c_sw(ft__crc32c_sw(0, buf, cut), buf + cut, n - cut), whole,
			     "sw: cut at %zu", cut);
	}
	free(buf);
}

Test(crc32c, detects_single_bit_flips)
{
	const size_t n = 4096;
	unsigned char *buf = random_bytes(n, 4);
	uint32_t good = ft__crc32c(0, buf, n);
	for (size_t bit = 0; bit < 8 * n; bit += 37) {
		buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
		cr_assert_neq(ft__crc32c(0, buf, n), good, "flip of bit %zu undetected", bit);
		buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
	}
	free(buf);
}

/* The first calls set up the tables and pick the implementation: racing them must be safe. */
struct race_arg {
	const unsigned char *buf;
	size_t len;
	uint32_t got;
};

static void *race_one(void *p)
{
	struct race_arg *a = p;
	a->got = ft__crc32c(0, a->buf, a->len);
	return NULL;
}

Test(crc32c, first_calls_from_many_threads)
{
	const size_t n = 100000;
	unsigned char *buf = random_bytes(n, 5);
	uint32_t want = crc_bitwise(0, buf, n);
	pthread_t t[8];
	struct race_arg args[8];
	for (int i = 0; i < 8; i++) {
		args[i] = (struct race_arg){ .buf = buf, .len = n };
		cr_assert_eq(pthread_create(&t[i], NULL, race_one, &args[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		cr_assert_eq(pthread_join(t[i], NULL), 0);
		cr_expect_eq(args[i].got, want, "thread %d", i);
	}
	free(buf);
}
