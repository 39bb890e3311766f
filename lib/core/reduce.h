/* reduce.h: element-wise reduction kernels for every dtype and op, and the half-float conversions. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_REDUCE_H
#define FTCC_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "ftcc.h"

/*
 * Buffers hold n elements of the dtype the kernel was looked up for and are
 * aligned to the element size. Kernels never fail and never allocate.
 * Results are the same bits for the same inputs whatever n and alignment,
 * except the payload and sign of a NaN, which depend on the operand order
 * the compiler chose for the vector body or the scalar tail.
 */

/* dst[i] = a[i] op b[i]; dst, a and b do not overlap. */
typedef void (*ft__combine_fn)(void *restrict dst, const void *restrict a,
			       const void *restrict b, size_t n);
/* dst[i] = dst[i] op src[i]; dst and src do not overlap. */
typedef void (*ft__accum_fn)(void *restrict dst, const void *restrict src, size_t n);

/*
 * dst[i] = dst[i] op src[i], having first written the old dst[i] to
 * save[i] with streaming stores (an in-place input kept for a restart):
 * one pass that reads dst once. dst, src and save do not overlap.
 */
typedef void (*ft__accum_save_fn)(void *restrict dst, const void *restrict src,
				  void *restrict save, size_t n);

/* The accum_save kernel for (dtype, op), NULL for an unknown one. */
ft__accum_save_fn ft__reduce_accum_save(enum ft_dtype dtype, enum ft_op op);

/*
 * A check value for logged inputs (the pairwise log's payload regions): a
 * position-dependent sum, Fletcher-like. Eight lanes of 32-bit words (word
 * i of the region goes to lane i mod 8, the last word zero-padded); each
 * lane keeps its running sum a and the sum of its running sums b, mod 2^32;
 * final mixes them with the length into 32 bits. Any flipped bit, any torn
 * (zeroed or stale) stretch, any swap of words in a lane changes it. Not a
 * CRC, on purpose: it is taken over the whole input of every op, and it
 * costs one vector add pair per 32 bytes (inside the save kernel, no extra
 * pass), where CRC32C over the input cost about 9% of a 64 MiB allreduce
 * at 4 ranks (measured). update continues a sum: every chunk but the last
 * must be a multiple of 4 bytes.
 */
struct ft__sum {
	uint32_t a[8], b[8];
	uint64_t n;             /* bytes so far */
};
void ft__sum_init(struct ft__sum *s);
void ft__sum_update(struct ft__sum *s, const void *p, size_t len);
uint32_t ft__sum_final(const struct ft__sum *s);

/*
 * out[i] = in[i] op other[i], having written in[i] to save[i] with
 * streaming stores and added it to sum (ft__sum, from its start; in is the
 * region's next word): the logged input saved, checked and reduced in one
 * pass that reads it once. out may be in (in place); other and save
 * overlap nothing. NULL where no such kernel exists (then sum and save the
 * input with ft__copy_stream_sum before the reduction).
 */
typedef void (*ft__combine_save_sum_fn)(void *out, const void *in, const void *restrict other,
					void *restrict save, size_t n, struct ft__sum *sum);
ft__combine_save_sum_fn ft__reduce_combine_save_sum(enum ft_dtype dtype, enum ft_op op);

/*
 * The kernels for (dtype, op); either output pointer may be NULL. FT_AVG
 * gets the FT_SUM kernels: the division happens once, at the end, in
 * ft__reduce_scale. Returns 0, or -FT_EINVAL for an unknown dtype or op.
 */
int ft__reduce_lookup(enum ft_dtype dtype, enum ft_op op, ft__combine_fn *combine,
		      ft__accum_fn *accum);

/*
 * buf[i] /= divisor, the last step of FT_AVG. Integers use truncating
 * division; float16/bfloat16 divide in float32 and round back to nearest
 * even. divisor 0 or 1, or an unknown dtype, leaves buf untouched.
 */
void ft__reduce_scale(void *buf, size_t n, enum ft_dtype dtype, size_t divisor);

/*
 * memcpy for a copy that will not be read soon (an in-place input saved for
 * a restart): on x86-64, stores that bypass the cache, so that the copy
 * neither evicts the data being reduced nor reads its destination first.
 */
void ft__copy_stream(void *restrict dst, const void *restrict src, size_t n);

/* ft__copy_stream that also adds the bytes it copies to sum (n a multiple of
 * 4 but for a region's last chunk), in one pass where it can; sum NULL:
 * just the copy. */
void ft__copy_stream_sum(void *restrict dst, const void *restrict src, size_t n,
			 struct ft__sum *sum);

/*
 * IEEE binary16 and bfloat16 <-> float32. Widening is exact (NaN payloads
 * kept); narrowing rounds to nearest even, overflows to Inf, keeps
 * subnormals, and turns every NaN into a quiet NaN of the same sign.
 */
float ft__half_to_float(uint16_t h);
uint16_t ft__float_to_half(float f);
float ft__bf16_to_float(uint16_t h);
uint16_t ft__float_to_bf16(float f);

#endif /* FTCC_REDUCE_H */
