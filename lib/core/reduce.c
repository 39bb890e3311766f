/* reduce.c: the dtypes' sizes, the reduction kernels (every dtype x op), FT_AVG scaling, and float16/bfloat16 conversion. */
/* SPDX-License-Identifier: MIT */
#include <stdint.h>
#include <string.h>

#include "ftcc.h"
#include "internal.h"
#include "reduce.h"

#if defined(__x86_64__) && defined(__SSE2__)
#include <immintrin.h>
#define FT__X86 1
#endif

/*
 * The kernels sit on the hot path of a bandwidth-bound allreduce, so each
 * one is a plain counted loop over restrict pointers with a branch-free body
 * that gcc -O3 vectorises. Conditionals are written as selects between
 * values that are all computed, never as control flow.
 *
 * float16 and bfloat16 are widened to float32, combined there and rounded
 * back to nearest even. One float32 operation on two float16 (11-bit) or
 * bfloat16 (8-bit) operands followed by that rounding gives the correctly
 * rounded result: float32's 24 bits are at least 2p + 2 for both, which is
 * the condition under which double rounding of +, -, *, / is innocuous.
 */

FT__EXPORT size_t ft_dtype_size(enum ft_dtype dtype)
{
	static const size_t sizes[FT_DTYPE_COUNT] = {
		[FT_FLOAT32] = 4, [FT_FLOAT64] = 8, [FT_FLOAT16] = 2, [FT_BFLOAT16] = 2,
		[FT_INT32] = 4,   [FT_INT64] = 8,   [FT_UINT8] = 1,
	};
	return (unsigned)dtype < FT_DTYPE_COUNT ? sizes[dtype] : 0;
}

static inline uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float f32_from_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

/* All ones when c holds, else 0: selects become and/or, which vectorise on every target. */
static inline uint32_t mask(int c)
{
	return 0u - (uint32_t)c;
}

/*
 * binary16 -> float32. Exponent and mantissa move up 13 bits as one field
 * and are rebiased by 127 - 15 = 112; Inf/NaN (half exponent 31) take a
 * further 112 to reach 255. A subnormal m * 2^-24 is rebiased by 113
 * instead, which reads as (1 + m/1024) * 2^-14, and 2^-14 is subtracted
 * (normal lanes subtract 0): exact, and both operands are normal floats,
 * so denormals-are-zero modes do not affect it. Compares are signed
 * (em >= 0) because SSE2 has no unsigned vector compare.
 */
static inline float h2f(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	int32_t em = (int32_t)((uint32_t)(h & 0x7fffu) << 13);
	uint32_t sub = mask(em < (1 << 23));
	uint32_t infnan = mask(em >= (31 << 23));
	uint32_t o = (uint32_t)em + (112u << 23) + (sub & (1u << 23)) + (infnan & (112u << 23));
	float f = f32_from_bits(o) - f32_from_bits(sub & (113u << 23));
	return f32_from_bits(f32_bits(f) | sign);
}

/*
 * float32 -> binary16, round to nearest even, on the magnitude a:
 * - a is first clamped to 65536.0f (Inf) with a min that lets NaN through.
 * - Normal range: rebias, add just under half an ulp plus the lowest kept
 *   bit (ties go to even), drop 13 bits. A carry out of the mantissa bumps
 *   the exponent, which is how 65520 and up become Inf (0x7c00).
 * - Below 2^-14 (half subnormals, zero): adding 0.5f puts the half
 *   subnormal ulp 2^-24 at the float ulp of 0.5, so the FPU's own
 *   round-to-nearest-even yields the mantissa; 2^-14 - tiny rounds up to
 *   0x0400, the smallest normal, as it should.
 * - NaN went through the normal formula, whose low 16 bits are then
 *   0x3c00 + the top payload bits (+ a carry to 0x4000); or-ing 0x7e00 makes
 *   that a quiet NaN which keeps the payload of a quiet half NaN exactly.
 */
static inline uint16_t f2h(float f)
{
	uint32_t x = f32_bits(f);
	int32_t a = (int32_t)(x & 0x7fffffffu);
	float af = f32_from_bits((uint32_t)a);
	uint32_t c = f32_bits(65536.0f < af ? 65536.0f : af);
	uint32_t normal = (c - (112u << 23) + 0xfffu + ((c >> 13) & 1u)) >> 13;
	uint32_t sub = f32_bits(af + 0.5f) - 0x3f000000u;
	uint32_t is_sub = mask(a < 0x38800000);
	uint32_t o = (sub & is_sub) | (normal & ~is_sub);
	o |= mask(a > 0x7f800000) & 0x7e00u;
	/*
	 * Assembled in the top half and shifted down once: written as a plain
	 * or of 16-bit values, gcc narrows every operand to 16 bits separately,
	 * which costs SSE2 about a fifth of the kernel's time.
	 */
	return (uint16_t)(((o << 16) | (x & 0x80000000u)) >> 16);
}

static inline float bf2f(uint16_t h)
{
	return f32_from_bits((uint32_t)h << 16);
}

/*
 * bfloat16 is the top half of a float32: same rounding as f2h, no rebias.
 * A NaN gets no rounding increment (which could carry into the sign) and
 * its quiet bit set.
 */
static inline uint16_t f2bf(float f)
{
	uint32_t x = f32_bits(f);
	uint32_t is_nan = mask((int32_t)(x & 0x7fffffffu) > 0x7f800000);
	uint32_t inc = ~is_nan & (0x7fffu + ((x >> 16) & 1u));
	return (uint16_t)(((x + inc) | (is_nan & 0x00400000u)) >> 16);
}

float ft__half_to_float(uint16_t h)
{
	return h2f(h);
}

uint16_t ft__float_to_half(float f)
{
	return f2h(f);
}

float ft__bf16_to_float(uint16_t h)
{
	return bf2f(h);
}

uint16_t ft__float_to_bf16(float f)
{
	return f2bf(f);
}

/*
 * Operators on the compute type. Float MIN/MAX return x when x is NaN and
 * otherwise pick y whenever the comparison fails, which y being NaN makes
 * it do: a NaN in either operand comes out, with one compare-and-blend.
 * Integer SUM/PROD run on the unsigned type of the same width (see the
 * dtype table), where overflow wraps instead of being undefined.
 */
#define OP_SUM(x, y) ((x) + (y))
#define OP_PROD(x, y) ((x) * (y))
#define OP_MIN(x, y) ((x) < (y) ? (x) : (y))
#define OP_MAX(x, y) ((x) > (y) ? (x) : (y))
#define OP_FMIN(x, y) ((((x) < (y)) | ((x) != (x))) ? (x) : (y))
#define OP_FMAX(x, y) ((((x) > (y)) | ((x) != (x))) ? (x) : (y))
#define ID(v) (v)

/*
 * One combine and one accum kernel: T is the element as stored, CT the type
 * the operator works in, LOAD/STORE convert between them.
 */
#define FT__KERNEL(name, T, CT, LOAD, STORE, OP)                                     \
	static void combine_##name(void *restrict dst_, const void *restrict a_,    \
				   const void *restrict b_, size_t n)               \
	{                                                                            \
		T *restrict dst = dst_;                                              \
		const T *restrict a = a_;                                            \
		const T *restrict b = b_;                                            \
		for (size_t i = 0; i < n; i++) {                                     \
			CT x = LOAD(a[i]), y = LOAD(b[i]);                           \
			dst[i] = (T)STORE(OP(x, y));                                 \
		}                                                                    \
	}                                                                            \
	static void accum_##name(void *restrict dst_, const void *restrict src_,    \
				 size_t n)                                          \
	{                                                                            \
		T *restrict dst = dst_;                                              \
		const T *restrict src = src_;                                        \
		for (size_t i = 0; i < n; i++) {                                     \
			CT x = LOAD(dst[i]), y = LOAD(src[i]);                       \
			dst[i] = (T)STORE(OP(x, y));                                 \
		}                                                                    \
	}

/*
 * Every dtype: X(dtype, tag, SUM/PROD element type, its compute type,
 * MIN/MAX element type, its compute type, load, store, MIN op, MAX op).
 * The signed integers add and multiply as unsigned and compare as signed.
 */
#define FT__DTYPES(X)                                                                          \
	X(FT_FLOAT32, f32, float, float, float, float, ID, ID, OP_FMIN, OP_FMAX)               \
	X(FT_FLOAT64, f64, double, double, double, double, ID, ID, OP_FMIN, OP_FMAX)           \
	X(FT_FLOAT16, f16, uint16_t, float, uint16_t, float, h2f, f2h, OP_FMIN, OP_FMAX)       \
	X(FT_BFLOAT16, bf16, uint16_t, float, uint16_t, float, bf2f, f2bf, OP_FMIN, OP_FMAX)   \
	X(FT_INT32, i32, uint32_t, uint32_t, int32_t, int32_t, ID, ID, OP_MIN, OP_MAX)         \
	X(FT_INT64, i64, uint64_t, uint64_t, int64_t, int64_t, ID, ID, OP_MIN, OP_MAX)         \
	X(FT_UINT8, u8, uint8_t, uint8_t, uint8_t, uint8_t, ID, ID, OP_MIN, OP_MAX)

#define FT__GEN_KERNELS(dtype, tag, AT, ACT, MT, MCT, LOAD, STORE, MIN, MAX) \
	FT__KERNEL(tag##_sum, AT, ACT, LOAD, STORE, OP_SUM)                  \
	FT__KERNEL(tag##_prod, AT, ACT, LOAD, STORE, OP_PROD)                \
	FT__KERNEL(tag##_min, MT, MCT, LOAD, STORE, MIN)                     \
	FT__KERNEL(tag##_max, MT, MCT, LOAD, STORE, MAX)
FT__DTYPES(FT__GEN_KERNELS)
#undef FT__GEN_KERNELS

struct kernel_pair {
	ft__combine_fn combine;
	ft__accum_fn accum;
};

#define FT__PAIR(name) { .combine = combine_##name, .accum = accum_##name }
#define FT__GEN_ROW(dtype, tag, ...)                                                        \
	[dtype] = { [FT_SUM] = FT__PAIR(tag##_sum), [FT_PROD] = FT__PAIR(tag##_prod),       \
		    [FT_MIN] = FT__PAIR(tag##_min), [FT_MAX] = FT__PAIR(tag##_max),         \
		    [FT_AVG] = FT__PAIR(tag##_sum) },
static const struct kernel_pair kernels[FT_DTYPE_COUNT][FT_OP_COUNT] = { FT__DTYPES(FT__GEN_ROW) };
#undef FT__GEN_ROW
#undef FT__PAIR

int ft__reduce_lookup(enum ft_dtype dtype, enum ft_op op, ft__combine_fn *combine,
		      ft__accum_fn *accum)
{
	if ((unsigned)dtype >= FT_DTYPE_COUNT || (unsigned)op >= FT_OP_COUNT)
		return -FT_EINVAL;
	if (combine)
		*combine = kernels[dtype][op].combine;
	if (accum)
		*accum = kernels[dtype][op].accum;
	return 0;
}

/*
 * accum_save, any kernel: blocks small enough to stay in L1 between the
 * streaming copy of the input and the reduction that reads it again.
 */
#define FT__SAVE_BLOCK 4096
#define FT__ACCUM_SAVE(name, T)                                                        \
	static void accum_save_##name(void *restrict dst_, const void *restrict src_,  \
				      void *restrict save_, size_t n)                  \
	{                                                                              \
		T *dst = dst_;                                                         \
		const T *src = src_;                                                   \
		T *save = save_;                                                       \
		for (size_t i = 0; i < n; i += FT__SAVE_BLOCK / sizeof(T)) {           \
			size_t m = n - i < FT__SAVE_BLOCK / sizeof(T) ? n - i             \
								   : FT__SAVE_BLOCK / sizeof(T); \
			ft__copy_stream(save + i, dst + i, m * sizeof(T));             \
			accum_##name(dst + i, src + i, m);                             \
		}                                                                      \
	}
#define FT__GEN_SAVE(dtype, tag, AT, ACT, MT, MCT, LOAD, STORE, MIN, MAX) \
	FT__ACCUM_SAVE(tag##_sum, AT)                                        \
	FT__ACCUM_SAVE(tag##_prod, AT)                                       \
	FT__ACCUM_SAVE(tag##_min, MT)                                        \
	FT__ACCUM_SAVE(tag##_max, MT)
FT__DTYPES(FT__GEN_SAVE)
#undef FT__GEN_SAVE

#define FT__GEN_SAVE_ROW(dtype, tag, ...)                                                    \
	[dtype] = { [FT_SUM] = accum_save_##tag##_sum, [FT_PROD] = accum_save_##tag##_prod,  \
		    [FT_MIN] = accum_save_##tag##_min, [FT_MAX] = accum_save_##tag##_max,    \
		    [FT_AVG] = accum_save_##tag##_sum },
static const ft__accum_save_fn save_kernels[FT_DTYPE_COUNT][FT_OP_COUNT] = {
	FT__DTYPES(FT__GEN_SAVE_ROW)};
#undef FT__GEN_SAVE_ROW

#ifdef FT__X86
/*
 * The sums data-parallel training reduces (float32, float64), in one pass
 * with AVX2: each vector of dst is loaded once, streamed to save and summed.
 * Streaming stores need an aligned save: a scalar head reaches it. The
 * vector body adds the same operand pairs in the same order as the scalar
 * kernel, so the results are the same bits.
 */
#define FT__SUM_SAVE_AVX2(name, T, V, W, LOADU, STREAM, STOREU, ADD)                   \
	__attribute__((target("avx2"))) static void name(void *restrict dst_,           \
							 const void *restrict src_,      \
							 void *restrict save_, size_t n) \
	{                                                                                \
		T *dst = dst_;                                                           \
		const T *src = src_;                                                     \
		T *save = save_;                                                         \
		size_t i = 0;                                                            \
		for (; i < n && ((uintptr_t)(save + i) & 31) != 0; i++) {                \
			save[i] = dst[i];                                                \
			dst[i] = dst[i] + src[i];                                        \
		}                                                                        \
		for (; i + (W) <= n; i += (W)) {                                         \
			V x = LOADU(dst + i);                                            \
			STREAM(save + i, x);                                             \
			STOREU(dst + i, ADD(x, LOADU(src + i)));                         \
		}                                                                        \
		for (; i < n; i++) {                                                     \
			save[i] = dst[i];                                                \
			dst[i] = dst[i] + src[i];                                        \
		}                                                                        \
		_mm_sfence();                                                            \
	}
FT__SUM_SAVE_AVX2(accum_save_f32_sum_avx2, float, __m256, 8, _mm256_loadu_ps, _mm256_stream_ps,
		  _mm256_storeu_ps, _mm256_add_ps)
FT__SUM_SAVE_AVX2(accum_save_f64_sum_avx2, double, __m256d, 4, _mm256_loadu_pd, _mm256_stream_pd,
		  _mm256_storeu_pd, _mm256_add_pd)
#undef FT__SUM_SAVE_AVX2
#endif

/* ---- the log's check value ---- */

void ft__sum_init(struct ft__sum *s)
{
	memset(s, 0, sizeof(*s));
}

static inline void sum_word(struct ft__sum *s, size_t idx, uint32_t w)
{
	s->a[idx & 7] += w;
	s->b[idx & 7] += s->a[idx & 7];
}

void ft__sum_update(struct ft__sum *s, const void *p, size_t len)
{
	const unsigned char *q = p;
	size_t idx = (size_t)(s->n / 4);
	uint32_t a[8], b[8], w;

	s->n += len;
	for (; len >= 4 && (idx & 7) != 0; q += 4, len -= 4, idx++) {
		memcpy(&w, q, 4);
		sum_word(s, idx, w);
	}
	memcpy(a, s->a, sizeof(a));
	memcpy(b, s->b, sizeof(b));
	for (; len >= 32; q += 32, len -= 32, idx += 8) {
		uint32_t v[8];
		memcpy(v, q, sizeof(v));
		for (int k = 0; k < 8; k++) {
			a[k] += v[k];
			b[k] += a[k];
		}
	}
	memcpy(s->a, a, sizeof(a));
	memcpy(s->b, b, sizeof(b));
	for (; len >= 4; q += 4, len -= 4, idx++) {
		memcpy(&w, q, 4);
		sum_word(s, idx, w);
	}
	if (len > 0) {
		w = 0;
		memcpy(&w, q, len);
		sum_word(s, idx, w);
	}
}

static uint64_t mix64(uint64_t x)
{
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

uint32_t ft__sum_final(const struct ft__sum *s)
{
	uint64_t h = mix64(s->n);

	for (int i = 0; i < 8; i++)
		h = mix64(h ^ ((uint64_t)s->a[i] << 32 | s->b[i]));
	return (uint32_t)(h ^ (h >> 32));
}

#ifdef FT__X86
/*
 * The check value's eight lanes held in two vectors, rotated so that vector
 * lane k is the region's lane (idx + k) mod 8, idx the region's next word:
 * a vector body that starts wherever a scalar head left off (its stores
 * aligned) adds whole vectors of words straight in. idx advances by 8 per
 * vector, so the rotation stays the same until the lanes go back.
 */
__attribute__((target("avx2"))) static void lanes_in(const struct ft__sum *s, size_t idx,
						     __m256i *va, __m256i *vb)
{
	uint32_t ta[8], tb[8];

	for (size_t k = 0; k < 8; k++) {
		ta[k] = s->a[(idx + k) & 7];
		tb[k] = s->b[(idx + k) & 7];
	}
	*va = _mm256_loadu_si256((const __m256i *)(const void *)ta);
	*vb = _mm256_loadu_si256((const __m256i *)(const void *)tb);
}

__attribute__((target("avx2"))) static void lanes_out(struct ft__sum *s, size_t idx, __m256i va,
						      __m256i vb)
{
	uint32_t ta[8], tb[8];

	_mm256_storeu_si256((__m256i *)(void *)ta, va);
	_mm256_storeu_si256((__m256i *)(void *)tb, vb);
	for (size_t k = 0; k < 8; k++) {
		s->a[(idx + k) & 7] = ta[k];
		s->b[(idx + k) & 7] = tb[k];
	}
}

/*
 * The float32 and float64 sums with save and check value in one pass: each
 * vector of the input is loaded once, streamed to save, added into the
 * sum's lanes and summed with the received operand into out. In place, out
 * is in; every element is loaded before it is stored. WPE: words per
 * element (1 or 2).
 */
/* One element of the scalar head or tail: its words into the sum, saved, summed. */
#define FT__SAVE_SUM_ONE(T, WPE)                                   \
	do {                                                       \
		T x = in[i];                                       \
		memcpy(w, &x, sizeof(T));                          \
		for (int k = 0; k < (WPE); k++)                    \
			sum_word(sum, idx++, w[k]);                \
		save[i] = x;                                       \
		out[i] = x + other[i];                             \
	} while (0)
#define FT__SUM_SAVE_SUM_AVX2(name, T, V, E, WPE, LOADU, STREAM, STOREU, ADD, CAST)              \
	__attribute__((target("avx2"))) static void name(void *out_, const void *in_,            \
							 const void *restrict other_,             \
							 void *restrict save_, size_t n,          \
							 struct ft__sum *sum)                     \
	{                                                                                         \
		T *out = out_;                                                                    \
		const T *in = in_;                                                                \
		const T *other = other_;                                                          \
		T *save = save_;                                                                  \
		size_t i = 0, idx = (size_t)(sum->n / 4);                                         \
		uint32_t w[WPE];                                                                  \
		for (; i < n && ((uintptr_t)(save + i) & 31) != 0; i++)                           \
			FT__SAVE_SUM_ONE(T, WPE);                                                 \
		if (i + (E) <= n) {                                                               \
			size_t at = idx;                                                          \
			__m256i va, vb;                                                           \
			lanes_in(sum, at, &va, &vb);                                              \
			for (; i + (E) <= n; i += (E), idx += 8) {                                \
				V x = LOADU(in + i);                                              \
				STREAM(save + i, x);                                              \
				va = _mm256_add_epi32(va, CAST(x));                               \
				vb = _mm256_add_epi32(vb, va);                                    \
				STOREU(out + i, ADD(x, LOADU(other + i)));                        \
			}                                                                         \
			lanes_out(sum, at, va, vb);                                               \
		}                                                                                 \
		for (; i < n; i++)                                                                \
			FT__SAVE_SUM_ONE(T, WPE);                                                 \
		sum->n += n * sizeof(T);                                                          \
		_mm_sfence();                                                                     \
	}
FT__SUM_SAVE_SUM_AVX2(combine_save_sum_f32_avx2, float, __m256, 8, 1, _mm256_loadu_ps,
		      _mm256_stream_ps, _mm256_storeu_ps, _mm256_add_ps, _mm256_castps_si256)
FT__SUM_SAVE_SUM_AVX2(combine_save_sum_f64_avx2, double, __m256d, 4, 2, _mm256_loadu_pd,
		      _mm256_stream_pd, _mm256_storeu_pd, _mm256_add_pd, _mm256_castpd_si256)
#undef FT__SUM_SAVE_SUM_AVX2
#undef FT__SAVE_SUM_ONE

/* ft__copy_stream_sum's one pass, over n words: dst 4-byte aligned, the sum at a whole word. */
__attribute__((target("avx2"))) static void copy_sum_avx2(uint32_t *restrict dst,
							  const uint32_t *restrict src, size_t n,
							  struct ft__sum *sum)
{
	size_t i = 0, idx = (size_t)(sum->n / 4);
	uint32_t w;

	for (; i < n && ((uintptr_t)(dst + i) & 31) != 0; i++, idx++) {
		memcpy(&w, src + i, 4);
		sum_word(sum, idx, w);
		dst[i] = w;
	}
	if (i + 8 <= n) {
		size_t at = idx;
		__m256i va, vb;
		lanes_in(sum, at, &va, &vb);
		for (; i + 8 <= n; i += 8, idx += 8) {
			__m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(src + i));
			_mm256_stream_si256((__m256i *)(void *)(dst + i), x);
			va = _mm256_add_epi32(va, x);
			vb = _mm256_add_epi32(vb, va);
		}
		lanes_out(sum, at, va, vb);
	}
	for (; i < n; i++, idx++) {
		memcpy(&w, src + i, 4);
		sum_word(sum, idx, w);
		dst[i] = w;
	}
	sum->n += n * 4;
	_mm_sfence();
}
#endif

void ft__copy_stream_sum(void *restrict dst, const void *restrict src, size_t n,
			 struct ft__sum *sum)
{
	if (sum == NULL) {
		ft__copy_stream(dst, src, n);
		return;
	}
#ifdef FT__X86
	if (((uintptr_t)dst & 3) == 0 && (n & 3) == 0 && (sum->n & 3) == 0 &&
	    __builtin_cpu_supports("avx2")) {
		copy_sum_avx2(dst, src, n / 4, sum);
		return;
	}
#endif
	ft__sum_update(sum, src, n);
	ft__copy_stream(dst, src, n);
}

#ifdef FT__X86
/* The AVX2 sum kernels apply: 32 (float32), 64 (float64), else 0. */
static int avx2_sum(enum ft_dtype dtype, enum ft_op op)
{
	if ((op == FT_SUM || op == FT_AVG) && (dtype == FT_FLOAT32 || dtype == FT_FLOAT64) &&
	    __builtin_cpu_supports("avx2"))
		return dtype == FT_FLOAT32 ? 32 : 64;
	return 0;
}
#endif

ft__combine_save_sum_fn ft__reduce_combine_save_sum(enum ft_dtype dtype, enum ft_op op)
{
#ifdef FT__X86
	int w = avx2_sum(dtype, op);
	if (w != 0)
		return w == 32 ? combine_save_sum_f32_avx2 : combine_save_sum_f64_avx2;
#endif
	(void)dtype;
	(void)op;
	return NULL;
}

ft__accum_save_fn ft__reduce_accum_save(enum ft_dtype dtype, enum ft_op op)
{
	if ((unsigned)dtype >= FT_DTYPE_COUNT || (unsigned)op >= FT_OP_COUNT)
		return NULL;
#ifdef FT__X86
	int w = avx2_sum(dtype, op);
	if (w != 0)
		return w == 32 ? accum_save_f32_sum_avx2 : accum_save_f64_sum_avx2;
#endif
	return save_kernels[dtype][op];
}

/* Float division (not a multiply by the reciprocal) so that the result is correctly rounded. */
#define FT__SCALE_FLOAT(name, T, CT, LOAD, STORE)                      \
	static void name(void *buf, size_t n, CT d)                    \
	{                                                              \
		T *p = buf;                                            \
		for (size_t i = 0; i < n; i++)                         \
			p[i] = STORE(LOAD(p[i]) / d);                  \
	}
FT__SCALE_FLOAT(scale_f32, float, float, ID, ID)
FT__SCALE_FLOAT(scale_f64, double, double, ID, ID)
FT__SCALE_FLOAT(scale_f16, uint16_t, float, h2f, f2h)
FT__SCALE_FLOAT(scale_bf16, uint16_t, float, bf2f, f2bf)
#undef FT__SCALE_FLOAT

/*
 * Truncating signed division by a size_t of any magnitude: divide the
 * magnitude in uint64_t and put the sign back. d >= 2, so the quotient is
 * at most 2^62 and negating it cannot overflow.
 */
static inline int64_t sdiv_trunc(int64_t x, uint64_t d)
{
	uint64_t mag = x < 0 ? 0 - (uint64_t)x : (uint64_t)x;
	int64_t q = (int64_t)(mag / d);
	return x < 0 ? -q : q;
}

void ft__reduce_scale(void *buf, size_t n, enum ft_dtype dtype, size_t divisor)
{
	if (divisor <= 1)
		return;
	switch (dtype) {
	case FT_FLOAT32:
		scale_f32(buf, n, (float)divisor);
		break;
	case FT_FLOAT64:
		scale_f64(buf, n, (double)divisor);
		break;
	case FT_FLOAT16:
		scale_f16(buf, n, (float)divisor);
		break;
	case FT_BFLOAT16:
		scale_bf16(buf, n, (float)divisor);
		break;
	case FT_INT32: {
		int32_t *p = buf;
		for (size_t i = 0; i < n; i++)
			p[i] = (int32_t)sdiv_trunc(p[i], divisor);
		break;
	}
	case FT_INT64: {
		int64_t *p = buf;
		for (size_t i = 0; i < n; i++)
			p[i] = sdiv_trunc(p[i], divisor);
		break;
	}
	case FT_UINT8: {
		uint8_t *p = buf;
		for (size_t i = 0; i < n; i++)
			p[i] = (uint8_t)(p[i] / divisor);
		break;
	}
	default:
		break;
	}
}

void ft__copy_stream(void *restrict dst, const void *restrict src, size_t n)
{
#ifdef FT__X86
	char *d = dst;
	const char *s = src;
	size_t head = (16 - ((uintptr_t)d & 15)) & 15;

	if (n < 256) {
		memcpy(d, s, n);
		return;
	}
	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
	for (; n >= 64; n -= 64, d += 64, s += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
		_mm_stream_si128((__m128i *)(void *)d, a);
		_mm_stream_si128((__m128i *)(void *)(d + 16), b);
		_mm_stream_si128((__m128i *)(void *)(d + 32), c);
		_mm_stream_si128((__m128i *)(void *)(d + 48), e);
	}
	memcpy(d, s, n);
	_mm_sfence();
#else
	memcpy(dst, src, n);
#endif
}
