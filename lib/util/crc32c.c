/* crc32c.c: CRC-32C, by the SSE4.2 crc32 instruction when the CPU has it, else by slice-by-8 tables. */
/* SPDX-License-Identifier: MIT */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "crc32c.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FT__CRC_HW 1
#include <nmmintrin.h>
#endif

#define POLY 0x82f63b78u

/*
 * Everything static works on the raw register: the bit-reflected remainder
 * without the initial and final inversion, which the two entry points
 * apply. In this representation bit 31 is x^0 and bit 0 is x^31, so
 * multiplying by x is a right shift that folds x^32 back in as POLY.
 *
 * The register is linear in its start value: after a block B of L bytes,
 * starting from r, it holds  r * x^(8L) mod P  xor  (B run from 0).
 * The hardware path uses that to run three independent crc32 chains over
 * three adjacent blocks (the instruction has a latency of 3 cycles and a
 * throughput of 1, so one chain leaves two thirds of it idle) and then
 * joins them: crc = shift(shift(a) ^ b) ^ c, where shift multiplies by
 * x^(8L) through four byte tables.
 */

/* table[k][b]: the register after byte b followed by k zero bytes, starting from 0. */
static uint32_t table[8][256];

/* The linear map r -> r * x^(8 block) mod P, one byte of r per table. */
struct crc_shift {
	uint32_t t[4][256];
};

#define LONG_BLOCK 4096
#define SHORT_BLOCK 256
static struct crc_shift shift_long, shift_short;

static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static uint32_t (*crc_raw)(uint32_t crc, const unsigned char *p, size_t len);

static uint32_t times_x(uint32_t a)
{
	return (a >> 1) ^ ((a & 1u) ? POLY : 0u);
}

/* a * b mod P */
static uint32_t gf2_mul(uint32_t a, uint32_t b)
{
	uint32_t prod = 0;
	for (int i = 0; i < 32; i++) {
		if (a & (0x80000000u >> i))
			prod ^= b;
		b = times_x(b);
	}
	return prod;
}

static void shift_build(struct crc_shift *sh, size_t block)
{
	uint32_t xpow = 0x80000000u; /* x^0 */
	for (size_t i = 0; i < 8 * block; i++)
		xpow = times_x(xpow);
	for (int k = 0; k < 4; k++)
		for (uint32_t b = 0; b < 256; b++)
			sh->t[k][b] = gf2_mul(b << (8 * k), xpow);
}

static inline uint32_t shift_apply(const struct crc_shift *sh, uint32_t r)
{
	return sh->t[0][r & 0xff] ^ sh->t[1][(r >> 8) & 0xff] ^ sh->t[2][(r >> 16) & 0xff] ^
	       sh->t[3][r >> 24];
}

static uint32_t sw_raw(uint32_t crc, const unsigned char *p, size_t len)
{
	/* Bytes are assembled explicitly, so this is right on either endianness. */
	for (; len >= 8; p += 8, len -= 8) {
		uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
				     (uint32_t)p[3] << 24);
		crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^
		      table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^ table[3][p[4]] ^
		      table[2][p[5]] ^ table[1][p[6]] ^ table[0][p[7]];
	}
	for (; len; p++, len--)
		crc = table[0][(crc ^ *p) & 0xff] ^ (crc >> 8);
	return crc;
}

#ifdef FT__CRC_HW
#define HW_TARGET __attribute__((target("sse4.2")))

static inline uint64_t load64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

/* Three chains over [p, p + 3 block) for as long as len allows. */
HW_TARGET static inline uint32_t hw_lanes(uint32_t crc, const unsigned char **pp, size_t *lenp,
					  size_t block, const struct crc_shift *sh)
{
	const unsigned char *p = *pp;
	size_t len = *lenp;

	for (; len >= 3 * block; p += 3 * block, len -= 3 * block) {
		uint64_t a = crc, b = 0, c = 0;
		for (size_t i = 0; i < block; i += 8) {
			a = _mm_crc32_u64(a, load64(p + i));
			b = _mm_crc32_u64(b, load64(p + block + i));
			c = _mm_crc32_u64(c, load64(p + 2 * block + i));
		}
		crc = shift_apply(sh, shift_apply(sh, (uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)c;
	}
	*pp = p;
	*lenp = len;
	return crc;
}

HW_TARGET static uint32_t hw_raw(uint32_t crc, const unsigned char *p, size_t len)
{
	crc = hw_lanes(crc, &p, &len, LONG_BLOCK, &shift_long);
	crc = hw_lanes(crc, &p, &len, SHORT_BLOCK, &shift_short);
	uint64_t c = crc;
	for (; len >= 8; p += 8, len -= 8)
		c = _mm_crc32_u64(c, load64(p));
	crc = (uint32_t)c;
	for (; len; p++, len--)
		crc = _mm_crc32_u8(crc, *p);
	return crc;
}
#endif

static void crc_init(void)
{
	for (uint32_t b = 0; b < 256; b++) {
		uint32_t c = b;
		for (int i = 0; i < 8; i++)
			c = times_x(c);
		table[0][b] = c;
	}
	for (int k = 1; k < 8; k++)
		for (int b = 0; b < 256; b++)
			table[k][b] = (table[k - 1][b] >> 8) ^ table[0][table[k - 1][b] & 0xff];

	crc_raw = sw_raw;
#ifdef FT__CRC_HW
	if (__builtin_cpu_supports("sse4.2")) {
		shift_build(&shift_long, LONG_BLOCK);
		shift_build(&shift_short, SHORT_BLOCK);
		crc_raw = hw_raw;
	}
#endif
}

uint32_t ft__crc32c(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&crc_once, crc_init);
	return ~crc_raw(~crc, buf, len);
}

uint32_t ft__crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&crc_once, crc_init);
	return ~sw_raw(~crc, buf, len);
}
