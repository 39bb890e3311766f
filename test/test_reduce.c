/* test_reduce.c: the reduction kernels, FT_AVG scaling and half-float conversions against straightforward references. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ftcc.h"
#include "reduce.h"

static const char *const dtype_name[] = { "float32", "float64", "float16", "bfloat16",
					  "int32",   "int64",   "uint8" };
static const char *const op_name[] = { "sum", "prod", "min", "max", "avg" };

static const size_t lengths[] = { 0, 1, 7, 1000003 };

static size_t esize(enum ft_dtype dt)
{
	switch (dt) {
	case FT_FLOAT64:
	case FT_INT64:
		return 8;
	case FT_FLOAT32:
	case FT_INT32:
		return 4;
	case FT_FLOAT16:
	case FT_BFLOAT16:
		return 2;
	case FT_UINT8:
		return 1;
	default:
		return 0;
	}
}

/* xorshift64*, seeded per case so a failure reproduces. */
static uint64_t rng;

static void seed(uint64_t s)
{
	rng = s * 0x9e3779b97f4a7c15ull + 1;
}

static uint64_t rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dull;
}

static double rnd_unit(void)
{
	return (double)(rnd() >> 11) * 0x1p-53;
}

/*
 * Reference codec for the 16-bit float formats, written with libm only:
 * mbits mantissa bits, exponent bias ebias, all-ones exponent emax.
 * Encoding rounds with nearbyint, i.e. to nearest even in the default mode.
 */
#define HALF_FMT 10, 15, 31
#define BF16_FMT 7, 127, 255

static double ref_decode(uint16_t bits, int mbits, int ebias, int emax)
{
	int e = (bits & 0x7fff) >> mbits;
	double m = bits & ((1u << mbits) - 1);
	double sign = (bits & 0x8000) ? -1.0 : 1.0;
	if (e == emax)
		return m != 0 ? NAN : sign * INFINITY;
	if (e == 0)
		return sign * ldexp(m, 1 - ebias - mbits);
	return sign * ldexp(m + ldexp(1, mbits), e - ebias - mbits);
}

static uint16_t ref_encode(double d, int mbits, int ebias, int emax)
{
	uint16_t sign = signbit(d) ? 0x8000 : 0;
	uint16_t inf = (uint16_t)(sign | (emax << mbits));
	if (isnan(d))
		return (uint16_t)(inf | (1u << (mbits - 1)));
	d = fabs(d);
	if (isinf(d))
		return inf;
	int emin = 1 - ebias;
	if (d < ldexp(1, emin)) /* subnormal; 2^mbits here is the smallest normal's encoding */
		return (uint16_t)(sign | (uint16_t)nearbyint(ldexp(d, mbits - emin)));
	int e;
	frexp(d, &e);
	e -= 1; /* d in [2^e, 2^(e+1)) */
	double m = nearbyint(ldexp(d, mbits - e));
	if (m == ldexp(1, mbits + 1)) {
		m /= 2;
		e++;
	}
	if (e + ebias >= emax)
		return inf;
	return (uint16_t)(sign | ((e + ebias) << mbits) | (uint16_t)(m - ldexp(1, mbits)));
}

static int half_isnan(uint16_t h)
{
	return (h & 0x7fff) > 0x7c00;
}

static int bf16_isnan(uint16_t h)
{
	return (h & 0x7fff) > 0x7f80;
}

static float f32_of(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint32_t bits_of(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return u;
}

/* ---- random operands ---- */

static double rnd_real(void)
{
	/* magnitudes 2^-20 .. 2^20, both signs */
	return (rnd_unit() * 2 - 1) * ldexp(1, (int)(rnd() % 41) - 20);
}

static void fill(enum ft_dtype dt, void *buf, size_t n)
{
	static const float f32_special[] = { NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f,
					     FLT_MIN / 3, FLT_MAX };
	static const double f64_special[] = { NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0,
					      DBL_MIN / 3, DBL_MAX };
	static const uint16_t bf16_special[] = { 0x0000, 0x8000, 0x7f80, 0xff80,
						 0x7fc0, 0xffc1, 0x7f81 };
	for (size_t i = 0; i < n; i++) {
		int special = rnd() % 32 == 0;
		switch (dt) {
		case FT_FLOAT32: {
			float v = special ? f32_special[rnd() % 8] : (float)rnd_real();
			memcpy((char *)buf + 4 * i, &v, 4);
			break;
		}
		case FT_FLOAT64: {
			double v = special ? f64_special[rnd() % 8] : rnd_real();
			memcpy((char *)buf + 8 * i, &v, 8);
			break;
		}
		case FT_FLOAT16: { /* every bit pattern: the float32 path is exact enough for all */
			uint16_t v = (uint16_t)rnd();
			memcpy((char *)buf + 2 * i, &v, 2);
			break;
		}
		case FT_BFLOAT16: { /* exponents kept where a double holds sums exactly */
			uint64_t r = rnd();
			uint16_t v = special ? bf16_special[r % 7]
					     : (uint16_t)((r & 0x8000) | ((107 + (r >> 16) % 41) << 7) |
							  ((r >> 32) & 0x7f));
			memcpy((char *)buf + 2 * i, &v, 2);
			break;
		}
		case FT_INT32: {
			uint32_t v = (uint32_t)rnd();
			memcpy((char *)buf + 4 * i, &v, 4);
			break;
		}
		case FT_INT64: {
			uint64_t v = rnd();
			memcpy((char *)buf + 8 * i, &v, 8);
			break;
		}
		case FT_UINT8:
			((uint8_t *)buf)[i] = (uint8_t)rnd();
			break;
		default:
			break;
		}
	}
}

/* ---- reference operators ---- */

static double ref_fop(enum ft_op op, double x, double y)
{
	switch (op) {
	case FT_SUM:
	case FT_AVG:
		return x + y;
	case FT_PROD:
		return x * y;
	case FT_MIN:
		return isnan(x) || isnan(y) ? NAN : (x < y ? x : y);
	case FT_MAX:
		return isnan(x) || isnan(y) ? NAN : (x > y ? x : y);
	default:
		return NAN;
	}
}

#define REF_INT(T, U, op, x, y)                               \
	((op) == FT_SUM || (op) == FT_AVG ? (T)(U)((U)(x) + (U)(y)) \
	 : (op) == FT_PROD                ? (T)(U)((U)(x) * (U)(y)) \
	 : (op) == FT_MIN                 ? ((x) < (y) ? (x) : (y)) \
					  : ((x) > (y) ? (x) : (y)))

/*
 * The element-wise reference. float32 goes through double: one double
 * operation rounded to float is the correctly rounded float operation.
 * float16/bfloat16 are decoded exactly, combined in double (exact for the
 * operands fill() makes) and rounded once by ref_encode.
 */
static void ref_op(enum ft_dtype dt, enum ft_op op, const void *px, const void *py, void *out)
{
	switch (dt) {
	case FT_FLOAT32: {
		float x, y, r;
		memcpy(&x, px, 4);
		memcpy(&y, py, 4);
		r = (float)ref_fop(op, x, y);
		memcpy(out, &r, 4);
		break;
	}
	case FT_FLOAT64: {
		double x, y, r;
		memcpy(&x, px, 8);
		memcpy(&y, py, 8);
		r = ref_fop(op, x, y);
		memcpy(out, &r, 8);
		break;
	}
	case FT_FLOAT16:
	case FT_BFLOAT16: {
		uint16_t x, y, r;
		memcpy(&x, px, 2);
		memcpy(&y, py, 2);
		if (dt == FT_FLOAT16)
			r = ref_encode(ref_fop(op, ref_decode(x, HALF_FMT), ref_decode(y, HALF_FMT)),
				       HALF_FMT);
		else
			r = ref_encode(ref_fop(op, ref_decode(x, BF16_FMT), ref_decode(y, BF16_FMT)),
				       BF16_FMT);
		memcpy(out, &r, 2);
		break;
	}
	case FT_INT32: {
		int32_t x, y, r;
		memcpy(&x, px, 4);
		memcpy(&y, py, 4);
		r = REF_INT(int32_t, uint32_t, op, x, y);
		memcpy(out, &r, 4);
		break;
	}
	case FT_INT64: {
		int64_t x, y, r;
		memcpy(&x, px, 8);
		memcpy(&y, py, 8);
		r = REF_INT(int64_t, uint64_t, op, x, y);
		memcpy(out, &r, 8);
		break;
	}
	case FT_UINT8: {
		uint8_t x = *(const uint8_t *)px, y = *(const uint8_t *)py;
		*(uint8_t *)out = REF_INT(uint8_t, uint8_t, op, x, y);
		break;
	}
	default:
		break;
	}
}

/* Same element, with every NaN equal to every NaN (16-bit NaNs must also be quiet). */
static int same(enum ft_dtype dt, const void *got, const void *want)
{
	switch (dt) {
	case FT_FLOAT32: {
		float g, w;
		memcpy(&g, got, 4);
		memcpy(&w, want, 4);
		if (isnan(w))
			return isnan(g);
		break;
	}
	case FT_FLOAT64: {
		double g, w;
		memcpy(&g, got, 8);
		memcpy(&w, want, 8);
		if (isnan(w))
			return isnan(g);
		break;
	}
	case FT_FLOAT16:
	case FT_BFLOAT16: {
		uint16_t g, w;
		memcpy(&g, got, 2);
		memcpy(&w, want, 2);
		if (dt == FT_FLOAT16 && half_isnan(w))
			return half_isnan(g) && (g & 0x0200);
		if (dt == FT_BFLOAT16 && bf16_isnan(w))
			return bf16_isnan(g) && (g & 0x0040);
		break;
	}
	default:
		break;
	}
	return memcmp(got, want, esize(dt)) == 0;
}

static void hex(enum ft_dtype dt, const void *p, char *out, size_t len)
{
	uint64_t v = 0;
	memcpy(&v, p, esize(dt)); /* little-endian hosts */
	snprintf(out, len, "0x%0*llx", (int)(2 * esize(dt)), (unsigned long long)v);
}

/* The first element of got[0..n) that differs from want, or n. */
static size_t first_diff(enum ft_dtype dt, const unsigned char *got, const unsigned char *want,
			 size_t n, size_t *count)
{
	size_t es = esize(dt), first = n;
	*count = 0;
	for (size_t i = 0; i < n; i++) {
		if (!same(dt, got + i * es, want + i * es)) {
			if (first == n)
				first = i;
			++*count;
		}
	}
	return first;
}

static void expect_all_same(enum ft_dtype dt, const char *what, const void *got, const void *want,
			    size_t n)
{
	size_t bad;
	size_t i = first_diff(dt, got, want, n, &bad);
	char g[32] = "", w[32] = "";
	if (bad) {
		hex(dt, (const char *)got + i * esize(dt), g, sizeof(g));
		hex(dt, (const char *)want + i * esize(dt), w, sizeof(w));
	}
	cr_expect_eq(bad, 0, "%s %s: n=%zu, %zu wrong, first [%zu] got %s want %s",
		     dtype_name[dt], what, n, bad, i, g, w);
}

#define GUARD 16 /* elements after each output that a kernel must not touch */

/* combine and accum for one (dtype, op, n), operands at element offsets 0 or 1, 2, 3. */
static void check_kernels(enum ft_dtype dt, enum ft_op op, size_t n, size_t off)
{
	size_t es = esize(dt);
	size_t cap = (n + 3 + GUARD) * es;
	unsigned char *a = malloc(cap), *b = malloc(cap), *dst = malloc(cap), *acc = malloc(cap),
		      *want = malloc(n * es + 1);
	cr_assert(a && b && dst && acc && want);
	unsigned char *pa = a + off * es, *pb = b + 2 * off * es, *pd = dst + 3 * off * es;
	char what[64];

	seed(((uint64_t)dt << 40) ^ ((uint64_t)op << 32) ^ n ^ (off << 60));
	fill(dt, pa, n);
	fill(dt, pb, n);
	memset(dst, 0xa5, cap);
	for (size_t i = 0; i < n; i++)
		ref_op(dt, op, pa + i * es, pb + i * es, want + i * es);

	ft__combine_fn combine = NULL;
	ft__accum_fn accum = NULL;
	cr_assert_eq(ft__reduce_lookup(dt, op, &combine, &accum), 0);
	cr_assert(combine && accum);

	combine(pd, pa, pb, n);
	snprintf(what, sizeof(what), "%s combine off=%zu", op_name[op], off);
	expect_all_same(dt, what, pd, want, n);
	for (size_t i = 0; i < GUARD * es; i++)
		cr_expect_eq(pd[n * es + i], 0xa5, "%s: wrote past n", what);

	memset(acc, 0xa5, cap);
	unsigned char *pacc = acc + 3 * off * es;
	memcpy(pacc, pa, n * es);
	accum(pacc, pb, n);
	snprintf(what, sizeof(what), "%s accum off=%zu", op_name[op], off);
	expect_all_same(dt, what, pacc, want, n);
	for (size_t i = 0; i < GUARD * es; i++)
		cr_expect_eq(pacc[n * es + i], 0xa5, "%s: wrote past n", what);

	free(a);
	free(b);
	free(dst);
	free(acc);
	free(want);
}

static void check_dtype(enum ft_dtype dt)
{
	for (int op = 0; op < FT_OP_COUNT; op++)
		for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++)
			for (size_t off = 0; off < 2; off++)
				check_kernels(dt, (enum ft_op)op, lengths[l], off);
}

Test(reduce, float32_every_op) { check_dtype(FT_FLOAT32); }
Test(reduce, float64_every_op) { check_dtype(FT_FLOAT64); }
Test(reduce, float16_every_op) { check_dtype(FT_FLOAT16); }
Test(reduce, bfloat16_every_op) { check_dtype(FT_BFLOAT16); }
Test(reduce, int32_every_op) { check_dtype(FT_INT32); }
Test(reduce, int64_every_op) { check_dtype(FT_INT64); }
Test(reduce, uint8_every_op) { check_dtype(FT_UINT8); }

Test(reduce, zero_length_touches_nothing)
{
	for (int dt = 0; dt < FT_DTYPE_COUNT; dt++)
		for (int op = 0; op < FT_OP_COUNT; op++) {
			ft__combine_fn combine;
			ft__accum_fn accum;
			cr_assert_eq(ft__reduce_lookup((enum ft_dtype)dt, (enum ft_op)op, &combine,
						       &accum), 0);
			combine(NULL, NULL, NULL, 0);
			accum(NULL, NULL, 0);
		}
}

Test(reduce, avg_uses_sum_kernels)
{
	for (int dt = 0; dt < FT_DTYPE_COUNT; dt++) {
		ft__combine_fn c_sum, c_avg;
		ft__accum_fn a_sum, a_avg;
		cr_assert_eq(ft__reduce_lookup((enum ft_dtype)dt, FT_SUM, &c_sum, &a_sum), 0);
		cr_assert_eq(ft__reduce_lookup((enum ft_dtype)dt, FT_AVG, &c_avg, &a_avg), 0);
		cr_expect(c_sum == c_avg && a_sum == a_avg, "%s", dtype_name[dt]);
	}
}

Test(reduce, unknown_dtype_or_op_is_einval)
{
	ft__combine_fn combine = NULL;
	ft__accum_fn accum = NULL;
	cr_expect_eq(ft__reduce_lookup(FT_DTYPE_COUNT, FT_SUM, &combine, &accum), -FT_EINVAL);
	cr_expect_eq(ft__reduce_lookup((enum ft_dtype)-1, FT_SUM, &combine, &accum), -FT_EINVAL);
	cr_expect_eq(ft__reduce_lookup((enum ft_dtype)1000, FT_MAX, &combine, &accum), -FT_EINVAL);
	cr_expect_eq(ft__reduce_lookup(FT_FLOAT32, FT_OP_COUNT, &combine, &accum), -FT_EINVAL);
	cr_expect_eq(ft__reduce_lookup(FT_INT32, (enum ft_op)-1, &combine, &accum), -FT_EINVAL);
	cr_expect_eq(ft__reduce_lookup((enum ft_dtype)99, (enum ft_op)99, NULL, NULL), -FT_EINVAL);
	cr_expect(combine == NULL && accum == NULL, "outputs written on failure");
	/* either output may be NULL */
	cr_expect_eq(ft__reduce_lookup(FT_UINT8, FT_MIN, NULL, &accum), 0);
	cr_expect(accum != NULL);
	cr_expect_eq(ft__reduce_lookup(FT_UINT8, FT_MIN, &combine, NULL), 0);
	cr_expect(combine != NULL);
}

/* ---- NaN, overflow, wraparound: the cases random data reaches only by luck ---- */

static void run(enum ft_dtype dt, enum ft_op op, const void *a, const void *b, void *dst,
		size_t n)
{
	ft__combine_fn combine;
	ft__accum_fn accum;
	cr_assert_eq(ft__reduce_lookup(dt, op, &combine, &accum), 0);
	combine(dst, a, b, n);
	/*
	 * accum must agree with combine, bit for bit except in NaN payloads:
	 * which operand's NaN an addition returns depends on the order the
	 * compiler put the operands in, which may differ between paths.
	 */
	unsigned char tmp[64];
	size_t bad;
	cr_assert(n * esize(dt) <= sizeof(tmp));
	memcpy(tmp, a, n * esize(dt));
	accum(tmp, b, n);
	first_diff(dt, tmp, dst, n, &bad);
	cr_expect_eq(bad, 0, "%s %s: accum differs from combine", dtype_name[dt], op_name[op]);
}

Test(reduce, nan_propagates_float32_float64)
{
	static const enum ft_op ops[] = { FT_SUM, FT_PROD, FT_MIN, FT_MAX };
	float fa[8] = { NAN, 1, NAN, -INFINITY, 5, NAN, 0, -NAN };
	float fb[8] = { 1, NAN, NAN, NAN, -2, INFINITY, -NAN, 3 };
	double da[8], db[8];
	for (int i = 0; i < 8; i++) {
		da[i] = fa[i];
		db[i] = fb[i];
	}
	for (size_t k = 0; k < 4; k++) {
		float fr[8];
		double dr[8];
		run(FT_FLOAT32, ops[k], fa, fb, fr, 8);
		run(FT_FLOAT64, ops[k], da, db, dr, 8);
		for (int i = 0; i < 8; i++) {
			if (i == 4)
				continue;
			cr_expect(isnan(fr[i]), "float32 %s [%d] = %g", op_name[ops[k]], i, fr[i]);
			cr_expect(isnan(dr[i]), "float64 %s [%d] = %g", op_name[ops[k]], i, dr[i]);
		}
	}
	float fr[8];
	run(FT_FLOAT32, FT_MIN, fa, fb, fr, 8);
	cr_expect_eq(fr[4], -2.0f);
	run(FT_FLOAT32, FT_MAX, fa, fb, fr, 8);
	cr_expect_eq(fr[4], 5.0f);
	/* Inf - Inf */
	float pinf[1] = { INFINITY }, ninf[1] = { -INFINITY };
	run(FT_FLOAT32, FT_SUM, pinf, ninf, fr, 1);
	cr_expect(isnan(fr[0]));
}

Test(reduce, nan_propagates_quiet_float16_bfloat16)
{
	static const enum ft_op ops[] = { FT_SUM, FT_PROD, FT_MIN, FT_MAX };
	/* quiet, signalling (0x7c01 / 0x7f81) and negative NaNs against numbers and infinities */
	uint16_t ha[6] = { 0x7e00, 0x3c00, 0x7c01, 0xfe00, 0x7c00, 0x7c01 };
	uint16_t hb[6] = { 0x3c00, 0x7e00, 0x3c00, 0xfc00, 0x7c01, 0xfc01 };
	uint16_t ba[6] = { 0x7fc0, 0x3f80, 0x7f81, 0xffc0, 0x7f80, 0x7f81 };
	uint16_t bb[6] = { 0x3f80, 0x7fc0, 0x3f80, 0xff80, 0x7f81, 0xff81 };
	for (size_t k = 0; k < 4; k++) {
		uint16_t hr[6], br[6];
		run(FT_FLOAT16, ops[k], ha, hb, hr, 6);
		run(FT_BFLOAT16, ops[k], ba, bb, br, 6);
		for (int i = 0; i < 6; i++) {
			cr_expect(half_isnan(hr[i]) && (hr[i] & 0x0200),
				  "float16 %s [%d] = 0x%04x, want quiet NaN", op_name[ops[k]], i,
				  hr[i]);
			cr_expect(bf16_isnan(br[i]) && (br[i] & 0x0040),
				  "bfloat16 %s [%d] = 0x%04x, want quiet NaN", op_name[ops[k]], i,
				  br[i]);
		}
	}
	/* +Inf + -Inf */
	uint16_t hp[1] = { 0x7c00 }, hn[1] = { 0xfc00 }, hr[1];
	run(FT_FLOAT16, FT_SUM, hp, hn, hr, 1);
	cr_expect(half_isnan(hr[0]) && (hr[0] & 0x0200), "0x%04x", hr[0]);
	uint16_t bp[1] = { 0x7f80 }, bn[1] = { 0xff80 }, br[1];
	run(FT_BFLOAT16, FT_SUM, bp, bn, br, 1);
	cr_expect(bf16_isnan(br[0]) && (br[0] & 0x0040), "0x%04x", br[0]);
}

Test(reduce, float16_sum_rounding_subnormals_overflow)
{
	/*  a       b       a+b                               expected */
	static const uint16_t cases[][3] = {
		{ 0x7bff, 0x7bff, 0x7c00 }, /* 65504 + 65504: overflow to Inf */
		{ 0x7bff, 0x4c00, 0x7c00 }, /* 65504 + 16 = 65520: tie, to even -> Inf */
		{ 0x7bff, 0x4800, 0x7bff }, /* 65504 + 8 = 65512: below the tie */
		{ 0xfbff, 0xcc00, 0xfc00 }, /* -65520: -Inf */
		{ 0x6800, 0x3c00, 0x6800 }, /* 2048 + 1: tie between 2048 and 2050 -> 2048 (even) */
		{ 0x6801, 0x3c00, 0x6802 }, /* 2050 + 1: tie between 2050 and 2052 -> 2052 (even) */
		{ 0x3c00, 0x1000, 0x3c00 }, /* 1 + 2^-11: tie -> 1 */
		{ 0x3c01, 0x1000, 0x3c02 }, /* (1 + 2^-10) + 2^-11: tie -> 1 + 2^-9 */
		{ 0x0001, 0x0001, 0x0002 }, /* subnormal + subnormal */
		{ 0x03ff, 0x0001, 0x0400 }, /* largest subnormal + ulp: smallest normal */
		{ 0x8001, 0x0001, 0x0000 }, /* -2^-24 + 2^-24 = +0 */
		{ 0x0400, 0x8001, 0x03ff }, /* normal - ulp: subnormal */
		{ 0x7c00, 0x7bff, 0x7c00 }, /* Inf + finite */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint16_t r;
		run(FT_FLOAT16, FT_SUM, &cases[i][0], &cases[i][1], &r, 1);
		cr_expect_eq(r, cases[i][2], "0x%04x + 0x%04x = 0x%04x, want 0x%04x", cases[i][0],
			     cases[i][1], r, cases[i][2]);
	}
	/* products: 256 * 256 overflows, 2^-12 * 2^-12 = 2^-24 is the smallest subnormal, 2^-13 * 2^-12 ties to 0 */
	static const uint16_t prods[][3] = {
		{ 0x5c00, 0x5c00, 0x7c00 },
		{ 0x0c00, 0x0c00, 0x0001 },
		{ 0x0800, 0x0c00, 0x0000 },
		{ 0x0e00, 0x0c00, 0x0002 }, /* 1.5 * 2^-24 (tie between 1 and 2 ulps) -> 2 */
	};
	for (size_t i = 0; i < sizeof(prods) / sizeof(prods[0]); i++) {
		uint16_t r;
		run(FT_FLOAT16, FT_PROD, &prods[i][0], &prods[i][1], &r, 1);
		cr_expect_eq(r, prods[i][2], "0x%04x * 0x%04x = 0x%04x, want 0x%04x", prods[i][0],
			     prods[i][1], r, prods[i][2]);
	}
}

Test(reduce, bfloat16_sum_rounding_overflow)
{
	static const uint16_t cases[][3] = {
		{ 0x4380, 0x3f80, 0x4380 }, /* 256 + 1: tie -> 256 (even) */
		{ 0x4381, 0x3f80, 0x4382 }, /* 258 + 1: tie -> 260 (even) */
		{ 0x7f7f, 0x7f7f, 0x7f80 }, /* max + max: Inf */
		{ 0xff7f, 0xff7f, 0xff80 }, /* -Inf */
		{ 0x0001, 0x0001, 0x0002 }, /* subnormals */
		{ 0x007f, 0x0001, 0x0080 }, /* largest subnormal + ulp: smallest normal */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint16_t r;
		run(FT_BFLOAT16, FT_SUM, &cases[i][0], &cases[i][1], &r, 1);
		cr_expect_eq(r, cases[i][2], "0x%04x + 0x%04x = 0x%04x, want 0x%04x", cases[i][0],
			     cases[i][1], r, cases[i][2]);
	}
}

Test(reduce, integer_wraparound)
{
	int32_t a32[3] = { INT32_MAX, 65536, INT32_MIN }, b32[3] = { 1, 65536, -1 }, r32[3];
	run(FT_INT32, FT_SUM, a32, b32, r32, 3);
	cr_expect(r32[0] == INT32_MIN && r32[1] == 131072 && r32[2] == INT32_MAX);
	run(FT_INT32, FT_PROD, a32, b32, r32, 3);
	cr_expect(r32[0] == INT32_MAX && r32[1] == 0 && r32[2] == INT32_MIN);
	run(FT_INT32, FT_MIN, a32, b32, r32, 3);
	cr_expect(r32[0] == 1 && r32[2] == INT32_MIN, "signed compare");
	run(FT_INT32, FT_MAX, a32, b32, r32, 3);
	cr_expect(r32[0] == INT32_MAX && r32[2] == -1, "signed compare");

	int64_t a64[3] = { INT64_MAX, INT64_C(1) << 32, INT64_MIN },
		b64[3] = { 1, INT64_C(1) << 32, -1 }, r64[3];
	run(FT_INT64, FT_SUM, a64, b64, r64, 3);
	cr_expect(r64[0] == INT64_MIN && r64[2] == INT64_MAX);
	run(FT_INT64, FT_PROD, a64, b64, r64, 3);
	cr_expect(r64[0] == INT64_MAX && r64[1] == 0 && r64[2] == INT64_MIN);
	run(FT_INT64, FT_MIN, a64, b64, r64, 3);
	cr_expect(r64[0] == 1 && r64[2] == INT64_MIN, "signed compare");
	run(FT_INT64, FT_MAX, a64, b64, r64, 3);
	cr_expect(r64[0] == INT64_MAX && r64[2] == -1, "signed compare");

	uint8_t a8[4] = { 200, 16, 255, 0 }, b8[4] = { 100, 16, 255, 255 }, r8[4];
	run(FT_UINT8, FT_SUM, a8, b8, r8, 4);
	cr_expect(r8[0] == 44 && r8[1] == 32 && r8[2] == 254 && r8[3] == 255);
	run(FT_UINT8, FT_PROD, a8, b8, r8, 4);
	cr_expect(r8[0] == (uint8_t)20000 && r8[1] == 0 && r8[2] == 1 && r8[3] == 0);
	run(FT_UINT8, FT_MIN, a8, b8, r8, 4);
	cr_expect(r8[0] == 100 && r8[3] == 0, "unsigned compare");
	run(FT_UINT8, FT_MAX, a8, b8, r8, 4);
	cr_expect(r8[0] == 200 && r8[3] == 255, "unsigned compare");
}

/* ---- FT_AVG scaling ---- */

static void ref_scale(enum ft_dtype dt, void *p, size_t divisor)
{
	switch (dt) {
	case FT_FLOAT32: {
		float x;
		memcpy(&x, p, 4);
		x = (float)((double)x / (double)divisor);
		memcpy(p, &x, 4);
		break;
	}
	case FT_FLOAT64: {
		double x;
		memcpy(&x, p, 8);
		x /= (double)divisor;
		memcpy(p, &x, 8);
		break;
	}
	case FT_FLOAT16:
	case FT_BFLOAT16: {
		uint16_t x;
		memcpy(&x, p, 2);
		x = dt == FT_FLOAT16
			    ? ref_encode(ref_decode(x, HALF_FMT) / (double)divisor, HALF_FMT)
			    : ref_encode(ref_decode(x, BF16_FMT) / (double)divisor, BF16_FMT);
		memcpy(p, &x, 2);
		break;
	}
	case FT_INT32: {
		int32_t x;
		memcpy(&x, p, 4);
		x = (int32_t)((int64_t)x / (int64_t)divisor);
		memcpy(p, &x, 4);
		break;
	}
	case FT_INT64: {
		int64_t x;
		memcpy(&x, p, 8);
		x /= (int64_t)divisor;
		memcpy(p, &x, 8);
		break;
	}
	case FT_UINT8:
		*(uint8_t *)p = (uint8_t)(*(uint8_t *)p / divisor);
		break;
	default:
		break;
	}
}

Test(reduce, avg_scale_every_dtype_against_reference)
{
	static const size_t divisors[] = { 2, 3, 7 };
	for (int dt = 0; dt < FT_DTYPE_COUNT; dt++) {
		size_t es = esize((enum ft_dtype)dt);
		for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++) {
			size_t n = lengths[l];
			for (size_t k = 0; k < 3; k++) {
				unsigned char *got = malloc(n * es + GUARD * es);
				unsigned char *want = malloc(n * es + 1);
				cr_assert(got && want);
				seed((uint64_t)dt * 1000 + l * 10 + k);
				fill((enum ft_dtype)dt, got, n);
				memset(got + n * es, 0xa5, GUARD * es);
				memcpy(want, got, n * es);
				for (size_t i = 0; i < n; i++)
					ref_scale((enum ft_dtype)dt, want + i * es, divisors[k]);
				ft__reduce_scale(got, n, (enum ft_dtype)dt, divisors[k]);
				char what[32];
				snprintf(what, sizeof(what), "scale /%zu", divisors[k]);
				expect_all_same((enum ft_dtype)dt, what, got, want, n);
				for (size_t i = 0; i < GUARD * es; i++)
					cr_expect_eq(got[n * es + i], 0xa5, "%s: wrote past n",
						     dtype_name[dt]);
				free(got);
				free(want);
			}
		}
	}
}

Test(reduce, avg_scale_known_values)
{
	float f32[4] = { 3, -3, 1, 7 };
	ft__reduce_scale(f32, 4, FT_FLOAT32, 2);
	cr_expect(f32[0] == 1.5f && f32[1] == -1.5f && f32[2] == 0.5f && f32[3] == 3.5f);
	double f64[2] = { 1, -10 };
	ft__reduce_scale(f64, 2, FT_FLOAT64, 4);
	cr_expect(f64[0] == 0.25 && f64[1] == -2.5);
	/* 1/3 rounds to 0x3555 in binary16, 0x3eab in bfloat16; 2^-24 / 2 ties to 0 */
	uint16_t h[4] = { 0x3c00, 0xbc00, 0x0001, 0x0003 };
	ft__reduce_scale(h, 4, FT_FLOAT16, 3);
	cr_expect(h[0] == 0x3555 && h[1] == 0xb555 && h[2] == 0x0000 && h[3] == 0x0001,
		  "0x%04x 0x%04x 0x%04x 0x%04x", h[0], h[1], h[2], h[3]);
	uint16_t h2[2] = { 0x0001, 0x0003 };
	ft__reduce_scale(h2, 2, FT_FLOAT16, 2);
	cr_expect(h2[0] == 0x0000 && h2[1] == 0x0002, "ties to even: 0x%04x 0x%04x", h2[0], h2[1]);
	uint16_t bf[2] = { 0x3f80, 0xc040 };
	ft__reduce_scale(bf, 2, FT_BFLOAT16, 3);
	cr_expect(bf[0] == 0x3eab && bf[1] == 0xbf80, "0x%04x 0x%04x", bf[0], bf[1]);
	int32_t i32[5] = { 7, -7, 5, -5, INT32_MIN };
	ft__reduce_scale(i32, 5, FT_INT32, 2);
	cr_expect(i32[0] == 3 && i32[1] == -3 && i32[2] == 2 && i32[3] == -2 &&
		  i32[4] == INT32_MIN / 2, "truncating division");
	int64_t i64[3] = { INT64_MIN, INT64_MAX, -9 };
	ft__reduce_scale(i64, 3, FT_INT64, 4);
	cr_expect(i64[0] == INT64_MIN / 4 && i64[1] == INT64_MAX / 4 && i64[2] == -2);
	int64_t big[2] = { INT64_MIN, INT64_MAX };
	ft__reduce_scale(big, 2, FT_INT64, (size_t)1 << 63);
	cr_expect(big[0] == -1 && big[1] == 0, "%lld %lld", (long long)big[0], (long long)big[1]);
	ft__reduce_scale(big, 2, FT_INT64, SIZE_MAX);
	cr_expect(big[0] == 0 && big[1] == 0);
	uint8_t u8[3] = { 255, 7, 1 };
	ft__reduce_scale(u8, 3, FT_UINT8, 2);
	cr_expect(u8[0] == 127 && u8[1] == 3 && u8[2] == 0);
}

Test(reduce, avg_scale_by_0_or_1_or_unknown_dtype_is_a_noop)
{
	float f[2] = { 3, NAN };
	ft__reduce_scale(f, 2, FT_FLOAT32, 1);
	cr_expect(f[0] == 3 && isnan(f[1]));
	ft__reduce_scale(f, 2, FT_FLOAT32, 0);
	cr_expect(f[0] == 3 && isnan(f[1]));
	int32_t i[1] = { 9 };
	ft__reduce_scale(i, 1, FT_DTYPE_COUNT, 3);
	ft__reduce_scale(i, 1, (enum ft_dtype)-1, 3);
	cr_expect_eq(i[0], 9);
	ft__reduce_scale(NULL, 0, FT_INT64, 3);
}

/* ---- conversions ---- */

Test(convert, half_round_trip_all_65536)
{
	for (uint32_t h = 0; h < 65536; h++) {
		float f = ft__half_to_float((uint16_t)h);
		double want = ref_decode((uint16_t)h, HALF_FMT);
		uint16_t back = ft__float_to_half(f);
		if (half_isnan((uint16_t)h)) {
			cr_assert(isnan(f), "0x%04x -> %g", h, f);
			cr_assert(half_isnan(back) && (back & 0x0200),
				  "NaN 0x%04x -> 0x%04x, want a quiet NaN", h, back);
			cr_assert_eq(back & 0x8000, h & 0x8000, "NaN sign");
			if (h & 0x0200) /* quiet NaNs keep their payload */
				cr_assert_eq(back, h, "quiet NaN 0x%04x -> 0x%04x", h, back);
			else
				cr_assert_eq(back, h | 0x0200, "signalling NaN 0x%04x -> 0x%04x", h,
					     back);
		} else {
			cr_assert((double)f == want && !!signbit(f) == !!signbit(want),
				  "0x%04x -> %a, want %a", h, (double)f, want);
			cr_assert_eq(back, h, "0x%04x -> %a -> 0x%04x", h, (double)f, back);
		}
	}
}

Test(convert, bf16_round_trip_all_65536)
{
	for (uint32_t h = 0; h < 65536; h++) {
		float f = ft__bf16_to_float((uint16_t)h);
		uint16_t back = ft__float_to_bf16(f);
		cr_assert_eq(bits_of(f), h << 16);
		if (bf16_isnan((uint16_t)h))
			cr_assert_eq(back, h | 0x0040, "NaN 0x%04x -> 0x%04x", h, back);
		else
			cr_assert_eq(back, h, "0x%04x -> 0x%04x", h, back);
	}
}

/*
 * For every pair of adjacent finite halves, the float exactly halfway must
 * go to the one with the even mantissa, and the floats one ulp either side
 * of it to the nearer one. Covers subnormals, the normal/subnormal border
 * and 65520 -> Inf.
 */
Test(convert, float_to_half_midpoints_round_to_even)
{
	for (uint32_t h = 0; h < 0x7c00; h++) {
		for (uint32_t sign = 0; sign <= 0x8000; sign += 0x8000) {
			double lo = ref_decode((uint16_t)h, HALF_FMT);
			double hi = h + 1 == 0x7c00 ? 65536.0 : ref_decode((uint16_t)(h + 1), HALF_FMT);
			float mid = (float)((lo + hi) / 2); /* 12 significant bits: exact */
			cr_assert_eq((double)mid, (lo + hi) / 2);
			if (sign)
				mid = -mid;
			uint16_t even = (uint16_t)(((h & 1) ? h + 1 : h) | sign);
			uint16_t got = ft__float_to_half(mid);
			cr_assert_eq(got, even, "mid of 0x%04x: %a -> 0x%04x, want 0x%04x",
				     h | sign, (double)mid, got, even);
			got = ft__float_to_half(nextafterf(mid, 0));
			cr_assert_eq(got, h | sign, "below mid of 0x%04x -> 0x%04x", h | sign, got);
			got = ft__float_to_half(nextafterf(mid, sign ? -INFINITY : INFINITY));
			cr_assert_eq(got, (h + 1) | sign, "above mid of 0x%04x -> 0x%04x", h | sign,
				     got);
		}
	}
}

Test(convert, float_to_half_and_bf16_random_against_reference)
{
	seed(42);
	for (int i = 0; i < 4000000; i++) {
		uint32_t u = (uint32_t)rnd();
		if (i & 1) /* half the samples in and around the binary16 range */
			u = (u & 0x807fffffu) | (uint32_t)(100 + rnd() % 45) << 23;
		float f = f32_of(u);
		uint16_t h = ft__float_to_half(f), hw = ref_encode(f, HALF_FMT);
		uint16_t b = ft__float_to_bf16(f), bw = ref_encode(f, BF16_FMT);
		if (isnan(f)) {
			cr_assert(half_isnan(h) && (h & 0x0200) && (h & 0x8000) == (u >> 16 & 0x8000),
				  "0x%08x -> 0x%04x", u, h);
			cr_assert(bf16_isnan(b) && (b & 0x0040) && (b & 0x8000) == (u >> 16 & 0x8000),
				  "0x%08x -> 0x%04x", u, b);
		} else {
			cr_assert_eq(h, hw, "half(0x%08x = %a) = 0x%04x, want 0x%04x", u, (double)f,
				     h, hw);
			cr_assert_eq(b, bw, "bf16(0x%08x = %a) = 0x%04x, want 0x%04x", u, (double)f,
				     b, bw);
		}
	}
}

Test(convert, known_values)
{
	static const struct {
		float f;
		uint16_t half, bf16;
	} cases[] = {
		{ 0.0f, 0x0000, 0x0000 },
		{ -0.0f, 0x8000, 0x8000 },
		{ 1.0f, 0x3c00, 0x3f80 },
		{ -2.0f, 0xc000, 0xc000 },
		{ 65504.0f, 0x7bff, 0x4780 },
		{ 65519.996f, 0x7bff, 0x4780 },
		{ 65520.0f, 0x7c00, 0x4780 },
		{ 1e10f, 0x7c00, 0x5015 },
		{ FLT_MAX, 0x7c00, 0x7f80 },
		{ -FLT_MAX, 0xfc00, 0xff80 },
		{ INFINITY, 0x7c00, 0x7f80 },
		{ -INFINITY, 0xfc00, 0xff80 },
		{ 0x1p-24f, 0x0001, 0x3380 },
		{ 0x1p-25f, 0x0000, 0x3300 },          /* tie between 0 and 2^-24: even */
		{ 0x1.8p-25f, 0x0001, 0x3340 },
		{ 0x1.8p-24f, 0x0002, 0x33c0 },        /* tie between 1 and 2 ulps: even */
		{ 0x1p-14f - 0x1p-25f, 0x0400, 0x3880 }, /* tie at the subnormal border */
		{ 0x1p-149f, 0x0000, 0x0000 },         /* float subnormal */
		{ -0x1p-149f, 0x8000, 0x8000 },
		{ 0x1.002p0f, 0x3c00, 0x3f80 },        /* 1 + 2^-11: tie, even */
		{ 0x1.006p0f, 0x3c02, 0x3f80 },        /* 1 + 3 * 2^-11: tie, even */
		{ 0x1.01p0f, 0x3c04, 0x3f80 },         /* 1 + 2^-8, for bf16: tie, even */
		{ 0x1.03p0f, 0x3c0c, 0x3f82 },         /* 1 + 3 * 2^-8, for bf16: tie, even */
		{ 0x1.fffffep-127f, 0x0000, 0x0080 },  /* largest float subnormal: bf16 carry to normal */
		{ 0x1.8p-133f, 0x0000, 0x0002 },       /* bf16 subnormal tie -> even */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint16_t h = ft__float_to_half(cases[i].f), b = ft__float_to_bf16(cases[i].f);
		cr_expect_eq(h, cases[i].half, "half(%a) = 0x%04x, want 0x%04x", (double)cases[i].f, h,
			     cases[i].half);
		cr_expect_eq(b, cases[i].bf16, "bf16(%a) = 0x%04x, want 0x%04x", (double)cases[i].f, b,
			     cases[i].bf16);
	}
	cr_expect_eq(ft__float_to_half(f32_of(0x7f800001u)), 0x7e00); /* signalling: made quiet */
	cr_expect_eq(ft__float_to_half(f32_of(0xffc00000u)), 0xfe00);
	cr_expect_eq(ft__float_to_bf16(f32_of(0x7f800001u)), 0x7fc0);
	cr_expect_eq(ft__float_to_bf16(f32_of(0xffffffffu)), 0xffff);
	cr_expect_eq(bits_of(ft__half_to_float(0x0001)), bits_of(0x1p-24f));
	cr_expect_eq(bits_of(ft__half_to_float(0x83ff)), bits_of(-0x1.ff8p-15f));
	cr_expect_eq(bits_of(ft__half_to_float(0x7c00)), 0x7f800000u);
	cr_expect_eq(bits_of(ft__half_to_float(0x7e01)), 0x7fc02000u);
}

/*
 * accum_save (the shrink policy's in-place kernel): for every dtype and op,
 * at lengths and misalignments that exercise the scalar head, the vector
 * body and the tail, the result has the same bits as accum's and save holds
 * the old dst exactly.
 */
Test(reduce, accum_save_is_accum_plus_a_copy)
{
	static const size_t lens[] = {0, 1, 7, 8, 9, 63, 64, 1000, 1029, 5000};
	unsigned char *src = malloc(40064), *a = malloc(40064), *b = malloc(40064);
	unsigned char *save = malloc(40128), *want_save = malloc(40064);

	cr_assert(src && a && b && save && want_save);
	for (int dt = 0; dt < FT_DTYPE_COUNT; dt++)
		for (int op = 0; op < FT_OP_COUNT; op++) {
			size_t es = ft_dtype_size((enum ft_dtype)dt);
			ft__accum_fn accum;
			ft__accum_save_fn fused = ft__reduce_accum_save((enum ft_dtype)dt, (enum ft_op)op);
			cr_assert_not_null(fused);
			cr_assert_eq(ft__reduce_lookup((enum ft_dtype)dt, (enum ft_op)op, NULL, &accum), 0);
			for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
				for (size_t mis = 0; mis < 64; mis += es * 3) {
					size_t n = lens[li], bytes = n * es;
					for (size_t j = 0; j < bytes; j++) {
						src[j] = (unsigned char)(j * 37 + 11);
						a[j] = b[j] = (unsigned char)(j * 101 + dt * 7 + op);
					}
					/* keep float inputs finite and NaN-free: clear exponent MSBs */
					if (dt == FT_FLOAT32 || dt == FT_FLOAT64 || dt == FT_FLOAT16 ||
					    dt == FT_BFLOAT16)
						for (size_t j = es - 1; j < bytes; j += es) {
							src[j] &= 0x3f;
							a[j] = b[j] = a[j] & 0x3f;
						}
					memcpy(want_save, a, bytes);
					accum(a, src, n);
					fused(b, src, save + mis, n);
					cr_assert(memcmp(a, b, bytes) == 0,
						  "dtype %d op %d n %zu: result differs from accum", dt, op, n);
					cr_assert(memcmp(save + mis, want_save, bytes) == 0,
						  "dtype %d op %d n %zu misaligned %zu: save is not the input",
						  dt, op, n, mis);
				}
		}
	free(src);
	free(a);
	free(b);
	free(save);
	free(want_save);
}

/* The fused save-and-sum kernels give the check value ft__sum_update gives,
 * the same saved input and the same result, at every alignment and length,
 * in place and out of place, and continue a sum begun elsewhere; so does
 * ft__copy_stream_sum, at every byte alignment of its destination. */
Test(reduce, combine_save_sum_matches)
{
	enum ft_dtype types[] = {FT_FLOAT32, FT_FLOAT64};

	for (size_t t = 0; t < 2; t++) {
		size_t es = ft_dtype_size(types[t]);
		ft__combine_save_sum_fn fused = ft__reduce_combine_save_sum(types[t], FT_SUM);
		ft__accum_save_fn plain = ft__reduce_accum_save(types[t], FT_SUM);
		if (fused == NULL) {
			cr_log_warn("no fused save-and-sum kernel on this CPU (no AVX2): skipped");
			break;
		}
		for (size_t n = 0; n < 100; n += 7) {
			for (size_t shift = 0; shift < 8; shift++) {
				bool in_place = shift < 4;
				size_t sh = shift % 4;
				unsigned char *d1 = malloc(n * es + 64), *d2 = malloc(n * es + 64);
				unsigned char *src = malloc(n * es + 64), *in = malloc(n * es + 64);
				unsigned char *s1 = malloc(n * es + 64), *s2 = malloc(n * es + 64);
				cr_assert(d1 && d2 && src && in && s1 && s2);
				for (size_t i = 0; i < n * es + 64; i++) {
					d1[i] = d2[i] = (unsigned char)(i * 37 + sh);
					src[i] = (unsigned char)(i * 11);
				}
				/* the same inputs as floats: sane values, no NaN pitfalls */
				for (size_t i = 0; i < n; i++) {
					if (es == 4) {
						float v = (float)i * 0.5f, w = (float)i * 0.25f;
						memcpy(d1 + sh * es + i * es, &v, 4);
						memcpy(src + i * es, &w, 4);
					} else {
						double v = (double)i * 0.5, w = (double)i * 0.25;
						memcpy(d1 + sh * es + i * es, &v, 8);
						memcpy(src + i * es, &w, 8);
					}
				}
				memcpy(d2, d1, n * es + 64);
				memcpy(in, d1, n * es + 64);
				struct ft__sum a, b;
				ft__sum_init(&a);
				ft__sum_init(&b);
				/* a sum begun over 12 other bytes, as a chunk before */
				ft__sum_update(&a, "0123456789ab", 12);
				ft__sum_update(&b, "0123456789ab", 12);
				ft__sum_update(&b, d2 + sh * es, n * es);
				if (in_place) {
					fused(d1 + sh * es, d1 + sh * es, src, s1 + sh * es, n, &a);
				} else {
					memset(d1, 0xee, n * es + 64); /* out: nothing of the input */
					fused(d1 + sh * es, in + sh * es, src, s1 + sh * es, n, &a);
					cr_assert_eq(memcmp(in, d2, n * es + 64), 0, "the input is untouched");
				}
				plain(d2 + sh * es, src, s2 + sh * es, n);
				cr_assert_eq(ft__sum_final(&a), ft__sum_final(&b),
					     "dtype %d n %zu shift %zu", types[t], n, shift);
				cr_assert_eq(memcmp(d1 + sh * es, d2 + sh * es, n * es), 0);
				cr_assert_eq(memcmp(s1 + sh * es, s2 + sh * es, n * es), 0);
				free(d1), free(d2), free(src), free(in), free(s1), free(s2);
			}
		}
	}
	for (size_t n = 0; n < 300; n += 13) {
		for (size_t sh = 0; sh < 8; sh++) {
			unsigned char src[400];
			_Alignas(32) unsigned char d[400];
			for (size_t i = 0; i < sizeof(src); i++)
				src[i] = (unsigned char)(i * 29 + n);
			memset(d, 0, sizeof(d));
			struct ft__sum a, b;
			ft__sum_init(&a);
			ft__sum_init(&b);
			ft__sum_update(&a, "0123", 4);
			ft__sum_update(&b, "0123", 4);
			ft__copy_stream_sum(d + sh, src, n, &a);
			ft__sum_update(&b, src, n);
			cr_assert_eq(ft__sum_final(&a), ft__sum_final(&b), "n %zu shift %zu", n, sh);
			cr_assert_eq(memcmp(d + sh, src, n), 0, "n %zu shift %zu", n, sh);
		}
	}
	/* the check value sees a flipped bit and a swap of two words */
	uint32_t w[64];
	for (int i = 0; i < 64; i++)
		w[i] = (uint32_t)i * 2654435761u;
	struct ft__sum x;
	ft__sum_init(&x);
	ft__sum_update(&x, w, sizeof(w));
	uint32_t ref = ft__sum_final(&x);
	w[17] ^= 1u << 9;
	ft__sum_init(&x);
	ft__sum_update(&x, w, sizeof(w));
	cr_assert_neq(ft__sum_final(&x), ref);
	w[17] ^= 1u << 9;
	uint32_t t0 = w[3];
	w[3] = w[11];
	w[11] = t0;
	ft__sum_init(&x);
	ft__sum_update(&x, w, sizeof(w));
	cr_assert_neq(ft__sum_final(&x), ref, "two words of one lane swapped");
}
