/* test_allreduce.c: allreduce, reduce-scatter and allgather over real processes and sockets: world sizes x counts x dtypes x ops, in and out of place. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>

#include "reduce.h"
#include "testutil.h"

/*
 * Inputs are small integers chosen from (rank, index) so that every rank can
 * compute the exact expected result itself, whatever order the ring adds in:
 * sums and products stay exactly representable in every dtype (or wrap the
 * same way for integers), so the comparison is exact except for FT_AVG on
 * floating types, which is checked against the same division.
 */
static double input_value(enum ft_dtype dt, enum ft_op op, int rank, size_t i)
{
	unsigned v = (unsigned)((i * 7 + (size_t)rank * 13 + i / 5) % 11);

	if (op == FT_PROD)
		return 1 + v % 2;
	if (dt == FT_UINT8)
		return v * 23 % 256;
	return (double)v - 5;
}

static void store(enum ft_dtype dt, void *buf, size_t i, double v)
{
	switch (dt) {
	case FT_FLOAT32: ((float *)buf)[i] = (float)v; break;
	case FT_FLOAT64: ((double *)buf)[i] = v; break;
	case FT_FLOAT16: ((uint16_t *)buf)[i] = ft__float_to_half((float)v); break;
	case FT_BFLOAT16: ((uint16_t *)buf)[i] = ft__float_to_bf16((float)v); break;
	case FT_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
	case FT_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
	case FT_UINT8: ((uint8_t *)buf)[i] = (uint8_t)(unsigned)v; break;
	default: break;
	}
}

static double load(enum ft_dtype dt, const void *buf, size_t i)
{
	switch (dt) {
	case FT_FLOAT32: return ((const float *)buf)[i];
	case FT_FLOAT64: return ((const double *)buf)[i];
	case FT_FLOAT16: return ft__half_to_float(((const uint16_t *)buf)[i]);
	case FT_BFLOAT16: return ft__bf16_to_float(((const uint16_t *)buf)[i]);
	case FT_INT32: return ((const int32_t *)buf)[i];
	case FT_INT64: return (double)((const int64_t *)buf)[i];
	case FT_UINT8: return ((const uint8_t *)buf)[i];
	default: return 0;
	}
}

static int is_float(enum ft_dtype dt)
{
	return dt == FT_FLOAT32 || dt == FT_FLOAT64 || dt == FT_FLOAT16 || dt == FT_BFLOAT16;
}

static double expected(enum ft_dtype dt, enum ft_op op, int n, size_t i)
{
	double acc = input_value(dt, op, 0, i);

	for (int r = 1; r < n; r++) {
		double v = input_value(dt, op, r, i);
		switch (op) {
		case FT_SUM: case FT_AVG: acc += v; break;
		case FT_PROD: acc *= v; break;
		case FT_MIN: acc = v < acc ? v : acc; break;
		case FT_MAX: acc = v > acc ? v : acc; break;
		default: break;
		}
	}
	if (dt == FT_UINT8 && (op == FT_SUM || op == FT_AVG || op == FT_PROD))
		acc = (double)((unsigned long)acc % 256);
	if (op == FT_AVG) {
		if (is_float(dt))
			acc = acc / n;
		else
			acc = (double)((long)acc / n);
	}
	return acc;
}

struct matrix_arg {
	size_t counts[8];
	int ncounts;
};

static int run_matrix(struct ft_comm *comm, int rank, int n, void *argp)
{
	struct matrix_arg *arg = argp;
	int failures = 0;

	for (int ci = 0; ci < arg->ncounts; ci++) {
		size_t count = arg->counts[ci];
		size_t bytes = count * 8 + 64;
		unsigned char *in = malloc(bytes), *out = malloc(bytes + 16);
		for (int dt = 0; dt < FT_DTYPE_COUNT; dt++) {
			for (int op = 0; op < FT_OP_COUNT; op++) {
				for (int inplace = 0; inplace < 2; inplace++) {
					size_t es = ft_dtype_size((enum ft_dtype)dt);
					for (size_t i = 0; i < count; i++)
						store((enum ft_dtype)dt, inplace ? out : in, i,
						      input_value((enum ft_dtype)dt, (enum ft_op)op, rank, i));
					/* Guard bytes after the buffer must survive. */
					memset(out + count * es, 0xA5, 16);
					struct ft_op_info info;
					int rc = ft_allreduce(comm, inplace ? FT_IN_PLACE : in, out, count,
							      (enum ft_dtype)dt, (enum ft_op)op, &info);
					if (rc != 0) {
						fprintf(stderr, "rank %d: count %zu dt %d op %d: %s\n", rank,
							count, dt, op, ft_strerror(rc));
						return 1;
					}
					if (info.contributors != n || info.generation != 0) {
						fprintf(stderr, "rank %d: bad op info\n", rank);
						failures++;
					}
					for (int g = 0; g < 16; g++)
						if (out[count * es + (size_t)g] != 0xA5) {
							fprintf(stderr, "rank %d: wrote past the buffer\n", rank);
							failures++;
							break;
						}
					for (size_t i = 0; i < count; i++) {
						double want = expected((enum ft_dtype)dt, (enum ft_op)op, n, i);
						double got = load((enum ft_dtype)dt, out, i);
						double tol = 0;
						if (op == FT_AVG && is_float((enum ft_dtype)dt))
							tol = fabs(want) * (es == 2 ? 1e-2 : 1e-6) + 1e-6;
						if (dt == FT_FLOAT16 && op == FT_AVG)
							want = ft__half_to_float(ft__float_to_half((float)want));
						if (fabs(got - want) > tol) {
							if (failures++ < 5)
								fprintf(stderr,
									"rank %d n %d count %zu dt %d op %d %s: "
									"[%zu] = %g, want %g\n",
									rank, n, count, dt, op,
									inplace ? "in place" : "out of place", i,
									got, want);
							break;
						}
					}
				}
			}
		}
		free(in);
		free(out);
	}
	return failures ? 2 : 0;
}

static void matrix(int n)
{
	struct matrix_arg arg = {.counts = {0, 1, 7, (size_t)(n > 1 ? n - 1 : 2), 100003},
				 .ncounts = 5};
	cr_assert_eq(tu_run(n, 240000, run_matrix, &arg), 0, "some rank failed or hung (n=%d)", n);
}

Test(allreduce, world_1, .timeout = 300) { matrix(1); }
Test(allreduce, world_2, .timeout = 300) { matrix(2); }
Test(allreduce, world_3, .timeout = 300) { matrix(3); }
Test(allreduce, world_4, .timeout = 300) { matrix(4); }
Test(allreduce, world_5, .timeout = 300) { matrix(5); }
Test(allreduce, world_8, .timeout = 300) { matrix(8); }

/*
 * Reduce-scatter and allgather over the same matrix. counts are blocks'
 * element counts (the buffers hold n of them). Element j of block b is
 * global element b * count + j: reduce-scatter's block r must equal the
 * allreduce of the n inputs there; allgather's block b holds rank b's input.
 */
static int check_block(int rank, int n, const char *what, enum ft_dtype dt, enum ft_op op,
		       const unsigned char *got, size_t count, int block, int gather, int inplace)
{
	size_t es = ft_dtype_size(dt);

	for (size_t j = 0; j < count; j++) {
		size_t i = (size_t)block * count + j;
		double want = gather ? input_value(dt, op, block, i) : expected(dt, op, n, i);
		double v = load(dt, got, j);
		double tol = 0;
		if (op == FT_AVG && is_float(dt) && !gather)
			tol = fabs(want) * (es == 2 ? 1e-2 : 1e-6) + 1e-6;
		if (dt == FT_FLOAT16 && op == FT_AVG && !gather)
			want = ft__half_to_float(ft__float_to_half((float)want));
		if (fabs(v - want) > tol) {
			fprintf(stderr, "rank %d n %d %s count %zu dt %d op %d %s: block %d [%zu] = %g, want %g\n",
				rank, n, what, count, dt, op, inplace ? "in place" : "out of place", block,
				j, v, want);
			return 1;
		}
	}
	return 0;
}

static int run_blocks_matrix(struct ft_comm *comm, int rank, int n, void *argp)
{
	struct matrix_arg *arg = argp;
	int failures = 0;

	for (int ci = 0; ci < arg->ncounts; ci++) {
		size_t count = arg->counts[ci], total = count * (size_t)n;
		unsigned char *in = malloc(total * 8 + 64), *out = malloc(total * 8 + 64);
		for (int gather = 0; gather < 2; gather++) {
			const char *what = gather ? "allgather" : "reduce_scatter";
			for (int dt = 0; dt < FT_DTYPE_COUNT; dt++) {
				for (int op = 0; op < (gather ? 1 : FT_OP_COUNT); op++) {
					for (int inplace = 0; inplace < 2; inplace++) {
						enum ft_dtype d = (enum ft_dtype)dt;
						size_t es = ft_dtype_size(d);
						/* where the result lands, and how much room it has */
						size_t out_elems = gather || inplace ? total : count;
						struct ft_op_info info;
						int rc;
						memset(out, 0x5c, total * es);
						if (gather) {
							unsigned char *own = inplace ? out + (size_t)rank * count * es : in;
							for (size_t j = 0; j < count; j++)
								store(d, own, j, input_value(d, (enum ft_op)op, rank,
											      (size_t)rank * count + j));
						} else {
							for (size_t i = 0; i < total; i++)
								store(d, inplace ? out : in, i,
								      input_value(d, (enum ft_op)op, rank, i));
						}
						memset(out + out_elems * es, 0xA5, 16);
						if (gather)
							rc = ft_allgather(comm, inplace ? FT_IN_PLACE : in, out, count, d,
									  &info);
						else
							rc = ft_reduce_scatter(comm, inplace ? FT_IN_PLACE : in, out,
									       count, d, (enum ft_op)op, &info);
						if (rc != 0) {
							fprintf(stderr, "rank %d: %s count %zu dt %d op %d: %s\n", rank,
								what, count, dt, op, ft_strerror(rc));
							return 1;
						}
						if (info.contributors != n || info.generation != 0 || info.failed != 0) {
							fprintf(stderr, "rank %d: bad op info\n", rank);
							failures++;
						}
						for (int g = 0; g < 16; g++)
							if (out[out_elems * es + (size_t)g] != 0xA5) {
								fprintf(stderr, "rank %d: %s wrote past the buffer\n", rank,
									what);
								failures++;
								break;
							}
						if (gather) {
							for (int b = 0; b < n; b++)
								failures += check_block(rank, n, what, d, (enum ft_op)op,
											out + (size_t)b * count * es,
											count, b, 1, inplace);
						} else {
							const unsigned char *mine =
								inplace ? out + (size_t)rank * count * es : out;
							failures += check_block(rank, n, what, d, (enum ft_op)op, mine,
										count, rank, 0, inplace);
						}
						if (failures > 5)
							return 2;
					}
				}
			}
		}
		free(in);
		free(out);
	}
	return failures ? 2 : 0;
}

static void blocks_matrix(int n)
{
	struct matrix_arg arg = {.counts = {0, 1, 7, (size_t)(n > 1 ? n - 1 : 2), 25013},
				 .ncounts = 5};
	cr_assert_eq(tu_run(n, 240000, run_blocks_matrix, &arg), 0, "some rank failed or hung (n=%d)",
		     n);
}

Test(blocks, world_1, .timeout = 300) { blocks_matrix(1); }
Test(blocks, world_2, .timeout = 300) { blocks_matrix(2); }
Test(blocks, world_3, .timeout = 300) { blocks_matrix(3); }
Test(blocks, world_4, .timeout = 300) { blocks_matrix(4); }
Test(blocks, world_5, .timeout = 300) { blocks_matrix(5); }

/* Small segments and a shallow pipeline: many segments per chunk, slots reused. */
static void small_segments(struct ft_config *cfg, int rank)
{
	(void)rank;
	cfg->segment_bytes = 4096;
	cfg->pipeline_depth = 2;
	cfg->crc = 1;
}

static int run_big(struct ft_comm *comm, int rank, int n, void *arg)
{
	size_t count = *(size_t *)arg;
	float *buf = malloc(count * sizeof(float));
	int bad = 0;

	for (int it = 0; it < 3; it++) {
		for (size_t i = 0; i < count; i++)
			buf[i] = (float)((i + (size_t)rank + (size_t)it) % 64);
		if (ft_allreduce(comm, FT_IN_PLACE, buf, count, FT_FLOAT32, FT_SUM, NULL) != 0)
			return 1;
		for (size_t i = 0; i < count; i++) {
			float want = 0;
			for (int r = 0; r < n; r++)
				want += (float)((i + (size_t)r + (size_t)it) % 64);
			if (buf[i] != want && bad++ < 3)
				fprintf(stderr, "rank %d: [%zu] %g want %g\n", rank, i, buf[i], want);
		}
	}
	free(buf);
	return bad ? 2 : 0;
}

Test(allreduce, many_segments_with_crc, .timeout = 120)
{
	size_t count = 1000003;
	struct tu_job job;

	tu_job_init(&job, 4);
	for (int r = 0; r < 4; r++)
		tu_spawn(&job, r, run_big, &count, small_segments);
	cr_assert_eq(tu_wait(&job, 100000, NULL), 0);
	tu_job_cleanup(&job);
}

Test(blocks, many_segments_with_crc, .timeout = 120)
{
	struct matrix_arg arg = {.counts = {20011}, .ncounts = 1};
	struct tu_job job;

	tu_job_init(&job, 4);
	for (int r = 0; r < 4; r++)
		tu_spawn(&job, r, run_blocks_matrix, &arg, small_segments);
	cr_assert_eq(tu_wait(&job, 100000, NULL), 0);
	tu_job_cleanup(&job);
}
