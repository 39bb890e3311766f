/* bench_common.h: command line, check pattern, statistics and output shared by the ftcc, Gloo and MPI benchmark drivers. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_BENCH_COMMON_H
#define FTCC_BENCH_COMMON_H

/*
 * Header-only (static inline) so that the three drivers, built by three
 * different compilers (cc, c++, mpicc) with no common object, parse the same
 * flags, fill and verify buffers the same way and print identical tables and
 * CSV rows. Everything here compiles as C11 and as C++17.
 *
 * Timing method, the same in every driver: per message size, warm-up calls,
 * then a barrier, then `iters` timed calls, each timed on every rank with
 * CLOCK_MONOTONIC. After the timed loop the drivers take, per iteration, the
 * maximum over ranks (one allreduce MAX of the times vector), so a sample is
 * "when the slowest rank finished". The table reports the median and the
 * 10th/90th percentiles of those samples; algbw = bytes / median and
 * busbw = algbw * 2(n-1)/n (the bytes each rank moves in a ring allreduce).
 */

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#define BENCH_CSV_HEADER "impl,transport,ranks,bytes,median_us,algbw_GBps,busbw_GBps"

/* Same order as enum ft_dtype / enum ft_op in ftcc.h, so ftbench can map 1:1. */
enum bench_dtype {
	BENCH_FLOAT32,
	BENCH_FLOAT64,
	BENCH_FLOAT16,
	BENCH_BFLOAT16,
	BENCH_INT32,
	BENCH_INT64,
	BENCH_UINT8,
	BENCH_DTYPE_COUNT
};
enum bench_op { BENCH_SUM, BENCH_PROD, BENCH_MIN, BENCH_MAX, BENCH_AVG, BENCH_OP_COUNT };

/* The collective timed: SIZE is always the whole vector (allreduce's count;
 * reduce-scatter's input, n blocks of SIZE/n; allgather's output, n blocks;
 * broadcast's buffer, from rank 0). */
enum bench_coll { BENCH_ALLREDUCE, BENCH_REDUCE_SCATTER, BENCH_ALLGATHER, BENCH_BROADCAST };

struct bench_opts {
	enum bench_coll coll;
	size_t min_bytes;
	size_t max_bytes;
	int iters;              /* 0: adapt to the message size */
	int warmup;             /* -1: adapt to the number of iterations */
	enum bench_dtype dtype;
	enum bench_op op;
	int in_place;
	int check;
	const char *csv;        /* NULL: no CSV */
	const char *label;      /* NULL: the driver's default impl name */
};

struct bench_result {
	size_t bytes;
	size_t count;
	int iters;
	double median_us;
	double p10_us;
	double p90_us;
	double algbw_gbps;      /* 1e9 bytes per second */
	double busbw_gbps;
};

static inline const char *bench_dtype_name(enum bench_dtype d)
{
	switch (d) {
	case BENCH_FLOAT32: return "float32";
	case BENCH_FLOAT64: return "float64";
	case BENCH_FLOAT16: return "float16";
	case BENCH_BFLOAT16: return "bfloat16";
	case BENCH_INT32: return "int32";
	case BENCH_INT64: return "int64";
	case BENCH_UINT8: return "uint8";
	default: return "?";
	}
}

static inline size_t bench_dtype_size(enum bench_dtype d)
{
	switch (d) {
	case BENCH_FLOAT32: case BENCH_INT32: return 4;
	case BENCH_FLOAT64: case BENCH_INT64: return 8;
	case BENCH_FLOAT16: case BENCH_BFLOAT16: return 2;
	case BENCH_UINT8: return 1;
	default: return 0;
	}
}

static inline const char *bench_op_name(enum bench_op o)
{
	switch (o) {
	case BENCH_SUM: return "sum";
	case BENCH_PROD: return "prod";
	case BENCH_MIN: return "min";
	case BENCH_MAX: return "max";
	case BENCH_AVG: return "avg";
	default: return "?";
	}
}

static inline int bench_dtype_parse(const char *s, enum bench_dtype *out)
{
	int i;

	for (i = 0; i < (int)BENCH_DTYPE_COUNT; i++) {
		if (strcmp(s, bench_dtype_name((enum bench_dtype)i)) == 0) {
			*out = (enum bench_dtype)i;
			return 0;
		}
	}
	/* Common aliases. */
	if (strcmp(s, "float") == 0 || strcmp(s, "f32") == 0) { *out = BENCH_FLOAT32; return 0; }
	if (strcmp(s, "double") == 0 || strcmp(s, "f64") == 0) { *out = BENCH_FLOAT64; return 0; }
	if (strcmp(s, "half") == 0 || strcmp(s, "f16") == 0) { *out = BENCH_FLOAT16; return 0; }
	if (strcmp(s, "bf16") == 0) { *out = BENCH_BFLOAT16; return 0; }
	return -1;
}

static inline int bench_op_parse(const char *s, enum bench_op *out)
{
	int i;

	for (i = 0; i < (int)BENCH_OP_COUNT; i++) {
		if (strcmp(s, bench_op_name((enum bench_op)i)) == 0) {
			*out = (enum bench_op)i;
			return 0;
		}
	}
	return -1;
}

/* "4096", "4K", "4KiB", "4KB", "256M", "1G" (binary multiples). 0 on success. */
static inline int bench_parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v, mul = 1;

	if (s == NULL || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0)
		return -1;
	switch (*end) {
	case 'k': case 'K': mul = 1ULL << 10; end++; break;
	case 'm': case 'M': mul = 1ULL << 20; end++; break;
	case 'g': case 'G': mul = 1ULL << 30; end++; break;
	default: break;
	}
	if (mul > 1 && *end == 'i')
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end != '\0')
		return -1;
	if (v > (unsigned long long)SIZE_MAX / mul)
		return -1;
	*out = (size_t)(v * mul);
	return 0;
}

/* Short human form of a byte count: "4K", "256M", "1G", else the number. */
static inline const char *bench_format_size(size_t bytes, char *buf, size_t len)
{
	if (bytes >= (1ULL << 30) && bytes % (1ULL << 30) == 0)
		snprintf(buf, len, "%zuG", bytes >> 30);
	else if (bytes >= (1ULL << 20) && bytes % (1ULL << 20) == 0)
		snprintf(buf, len, "%zuM", bytes >> 20);
	else if (bytes >= (1ULL << 10) && bytes % (1ULL << 10) == 0)
		snprintf(buf, len, "%zuK", bytes >> 10);
	else
		snprintf(buf, len, "%zu", bytes);
	return buf;
}

static inline const char *bench_coll_name(enum bench_coll c)
{
	static const char *const names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast"};

	return names[c];
}

static inline int bench_coll_parse(const char *s, enum bench_coll *out)
{
	for (int c = BENCH_ALLREDUCE; c <= BENCH_BROADCAST; c++)
		if (strcmp(s, bench_coll_name((enum bench_coll)c)) == 0) {
			*out = (enum bench_coll)c;
			return 0;
		}
	return -1;
}

/* Elements per rank's block of a reduce-scatter or allgather of count
 * elements in all (the vector is cut in ranks equal blocks; a remainder is
 * left out, so that every implementation moves the same bytes). */
static inline size_t bench_block(size_t count, int ranks)
{
	return ranks > 0 ? count / (size_t)ranks : 0;
}

static inline void bench_usage(FILE *f, const char *prog)
{
	fprintf(f,
		"usage: %s [--coll allreduce|reduce_scatter|allgather|broadcast] [--min SIZE] [--max SIZE]\n"
		"          [--iters K] [--warmup W]\n"
		"          [--dtype float32|float64|float16|bfloat16|int32|int64|uint8]\n"
		"          [--op sum|prod|min|max|avg] [--in-place] [--csv FILE] [--label NAME] [--check]\n"
		"  SIZE in bytes, suffixes K, M, G (binary); sizes run over powers of 2 from --min\n"
		"  (default 4K) to --max (default 256M). --iters 0 (default) adapts to the size;\n"
		"  --warmup defaults to iters/10 within [2, 50]. --csv appends rows\n"
		"  " BENCH_CSV_HEADER "\n",
		prog);
}

static inline void bench_opts_init(struct bench_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->coll = BENCH_ALLREDUCE;
	o->min_bytes = (size_t)4 << 10;
	o->max_bytes = (size_t)256 << 20;
	o->iters = 0;
	o->warmup = -1;
	o->dtype = BENCH_FLOAT32;
	o->op = BENCH_SUM;
	o->in_place = 0;
	o->check = 0;
	o->csv = NULL;
	o->label = NULL;
}

static inline int bench_parse_int(const char *s, int lo, int *out)
{
	char *end;
	long v;

	if (s == NULL)
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > INT_MAX)
		return -1;
	*out = (int)v;
	return 0;
}

/*
 * Parse the common command line. Returns 0 to run, 1 after --help, -1 on a
 * bad argument (message on stderr). Only rank 0 should pass verbose = 1, so
 * a bad flag is reported once.
 */
static inline int bench_parse_args(int argc, char **argv, struct bench_opts *o, int verbose)
{
	const char *prog = argc > 0 ? argv[0] : "bench";
	int i;

	bench_opts_init(o);
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0, takes_value = 1;

		if (strcmp(a, "--coll") == 0)
			bad = v == NULL ? -1 : bench_coll_parse(v, &o->coll);
		else if (strcmp(a, "--min") == 0)
			bad = bench_parse_size(v, &o->min_bytes);
		else if (strcmp(a, "--max") == 0)
			bad = bench_parse_size(v, &o->max_bytes);
		else if (strcmp(a, "--iters") == 0)
			bad = bench_parse_int(v, 0, &o->iters);
		else if (strcmp(a, "--warmup") == 0)
			bad = bench_parse_int(v, 0, &o->warmup);
		else if (strcmp(a, "--dtype") == 0)
			bad = v == NULL ? -1 : bench_dtype_parse(v, &o->dtype);
		else if (strcmp(a, "--op") == 0)
			bad = v == NULL ? -1 : bench_op_parse(v, &o->op);
		else if (strcmp(a, "--csv") == 0)
			bad = (o->csv = v) == NULL ? -1 : 0;
		else if (strcmp(a, "--label") == 0)
			bad = (o->label = v) == NULL || *v == '\0' ? -1 : 0;
		else {
			takes_value = 0;
			if (strcmp(a, "--in-place") == 0)
				o->in_place = 1;
			else if (strcmp(a, "--check") == 0)
				o->check = 1;
			else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
				if (verbose)
					bench_usage(stdout, prog);
				return 1;
			} else {
				if (verbose) {
					fprintf(stderr, "%s: unknown option '%s'\n", prog, a);
					bench_usage(stderr, prog);
				}
				return -1;
			}
		}
		if (bad) {
			if (verbose)
				fprintf(stderr, "%s: bad or missing value for %s%s%s\n", prog, a,
					v != NULL ? ": " : "", v != NULL ? v : "");
			return -1;
		}
		if (takes_value)
			i++;
	}
	if (o->check && o->coll != BENCH_ALLREDUCE) {
		if (verbose)
			fprintf(stderr, "%s: --check verifies allreduce only\n", prog);
		return -1;
	}
	if (o->min_bytes == 0 || o->max_bytes < o->min_bytes) {
		if (verbose)
			fprintf(stderr, "%s: need 0 < --min <= --max\n", prog);
		return -1;
	}
	return 0;
}

/*
 * Iterations for a size unless --iters: about 256 MiB of payload per size,
 * at least 10 and at most 500 calls (500 at 4K..512K, 64 at 4M, 10 from 32M).
 */
static inline int bench_iters_for(const struct bench_opts *o, size_t bytes)
{
	size_t n;

	if (o->iters > 0)
		return o->iters;
	n = ((size_t)256 << 20) / (bytes ? bytes : 1);
	if (n < 10)
		n = 10;
	if (n > 500)
		n = 500;
	return (int)n;
}

static inline int bench_warmup_for(const struct bench_opts *o, int iters)
{
	int w;

	if (o->warmup >= 0)
		return o->warmup;
	w = iters / 10;
	return w < 2 ? 2 : w > 50 ? 50 : w;
}

/* Monotonic seconds. */
static inline double bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y ? 1 : 0;
}

/* p-th percentile (0..100) of sorted[0..n), linear interpolation between ranks. */
static inline double bench_percentile(const double *sorted, size_t n, double p)
{
	double pos, frac;
	size_t lo;

	if (n == 0)
		return 0.0;
	pos = p / 100.0 * (double)(n - 1);
	lo = (size_t)pos;
	if (lo + 1 >= n)
		return sorted[n - 1];
	frac = pos - (double)lo;
	return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

static inline double bench_median(const double *sorted, size_t n)
{
	return bench_percentile(sorted, n, 50.0);
}

/* Ring allreduce moves 2(n-1)/n of the buffer per rank; 0 for one rank. */
/* Bus bandwidth per algorithm bandwidth: what each rank moves on the ring's
 * busiest link, per byte of the vector (an allreduce runs both halves). */
static inline double bench_busbw_factor(enum bench_coll coll, int ranks)
{
	double half = ranks > 1 ? (double)(ranks - 1) / (double)ranks : 0.0;

	if (coll == BENCH_BROADCAST)
		return ranks > 1 ? 1.0 : 0.0; /* every byte crosses each link of a chain once */
	return coll == BENCH_ALLREDUCE ? 2.0 * half : half;
}

/*
 * Summarise per-iteration times (seconds, already the max over ranks).
 * Sorts `times` in place.
 */
static inline void bench_summarize(double *times, int iters, size_t bytes, size_t count,
				   int ranks, enum bench_coll coll, struct bench_result *r)
{
	double med;

	qsort(times, (size_t)iters, sizeof(double), bench_cmp_double);
	med = bench_median(times, (size_t)iters);
	r->bytes = bytes;
	r->count = count;
	r->iters = iters;
	r->median_us = med * 1e6;
	r->p10_us = bench_percentile(times, (size_t)iters, 10.0) * 1e6;
	r->p90_us = bench_percentile(times, (size_t)iters, 90.0) * 1e6;
	r->algbw_gbps = med > 0 ? (double)bytes / med / 1e9 : 0.0;
	r->busbw_gbps = r->algbw_gbps * bench_busbw_factor(coll, ranks);
}

static inline void bench_print_header(FILE *f, const char *impl, const char *transport, int ranks,
				      const struct bench_opts *o)
{
	fprintf(f, "# impl=%s transport=%s coll=%s ranks=%d dtype=%s op=%s %s check=%s\n", impl,
		transport, bench_coll_name(o->coll), ranks, bench_dtype_name(o->dtype), bench_op_name(o->op),
		o->in_place ? "in-place" : "out-of-place", o->check ? "yes" : "no");
	fprintf(f, "# %8s %12s %6s %11s %11s %11s %11s %11s %5s\n", "size", "count", "iters",
		"median_us", "p10_us", "p90_us", "algbw_GBps", "busbw_GBps", "check");
	fflush(f);
}

/* checked: 1 ok, 0 not checked (a failed check never gets a row). */
static inline void bench_print_row(FILE *f, const struct bench_result *r, int checked)
{
	char sz[32];

	fprintf(f, "  %8s %12zu %6d %11.2f %11.2f %11.2f %11.3f %11.3f %5s\n",
		bench_format_size(r->bytes, sz, sizeof(sz)), r->count, r->iters, r->median_us,
		r->p10_us, r->p90_us, r->algbw_gbps, r->busbw_gbps, checked ? "ok" : "-");
	fflush(f);
}

/* Append one row (header first if the file is new or empty). 0 or -errno. */
static inline int bench_csv_append(const char *path, const char *impl, const char *transport,
				   int ranks, const struct bench_result *r)
{
	struct stat st;
	FILE *f;
	int err = 0;

	f = fopen(path, "a");
	if (f == NULL)
		return -errno;
	if (fstat(fileno(f), &st) == 0 && st.st_size == 0)
		fprintf(f, "%s\n", BENCH_CSV_HEADER);
	fprintf(f, "%s,%s,%d,%zu,%.3f,%.6f,%.6f\n", impl, transport, ranks, r->bytes, r->median_us,
		r->algbw_gbps, r->busbw_gbps);
	if (ferror(f))
		err = -EIO;
	if (fclose(f) != 0 && err == 0)
		err = -errno;
	return err;
}

/* Peak resident set size of this process in KiB (ru_maxrss), -1 if unknown. */
static inline long bench_peak_rss_kib(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return -1;
	return ru.ru_maxrss;
}

/*
 * Check pattern. Element i of rank r holds small integers so every partial
 * sum, product, min and max along any reduction order is exact in every
 * dtype (for world sizes up to 8 even in bfloat16):
 *   sum/min/max/avg: (r + 1) * (i % 4 + 1)
 *   prod:            1 + (i + r) % 2            (the product is a power of 2)
 * Expected values are computed in double and rounded (or, for integers,
 * wrapped) to the dtype the same way the inputs were stored.
 */
static inline uint16_t bench_f32_to_f16(float f)
{
	uint32_t x, sign, mant;
	int32_t exp;

	memcpy(&x, &f, sizeof(x));
	sign = (x >> 16) & 0x8000u;
	exp = (int32_t)((x >> 23) & 0xffu) - 127 + 15;
	mant = x & 0x7fffffu;
	if (((x >> 23) & 0xffu) == 0xffu)       /* inf, nan */
		return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0u));
	if (exp >= 31)                           /* overflow */
		return (uint16_t)(sign | 0x7c00u);
	if (exp <= 0) {                          /* subnormal or zero */
		uint32_t shift;

		if (exp < -10)
			return (uint16_t)sign;
		mant |= 0x800000u;
		shift = (uint32_t)(14 - exp);
		{
			uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);

			if (rem > half || (rem == half && (h & 1u)))
				h++;
			return (uint16_t)(sign | h);
		}
	}
	{
		uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13), rem = mant & 0x1fffu;

		if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
			h++; /* may carry into the exponent, which is the right result */
		return (uint16_t)h;
	}
}

static inline float bench_f16_to_f32(uint16_t h)
{
	uint32_t sign = ((uint32_t)h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
	uint32_t x;
	float f;

	if (exp == 0) {
		f = ldexpf((float)mant, -24);
		return sign ? -f : f;
	}
	if (exp == 31)
		x = sign | 0x7f800000u | (mant << 13);
	else
		x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
	memcpy(&f, &x, sizeof(f));
	return f;
}

static inline uint16_t bench_f32_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, sizeof(x));
	if ((x & 0x7fffffffu) > 0x7f800000u)     /* nan */
		return (uint16_t)((x >> 16) | 0x40u);
	x += 0x7fffu + ((x >> 16) & 1u);         /* round to nearest even */
	return (uint16_t)(x >> 16);
}

static inline float bench_bf16_to_f32(uint16_t b)
{
	uint32_t x = (uint32_t)b << 16;
	float f;

	memcpy(&f, &x, sizeof(f));
	return f;
}

static inline void bench_store(void *buf, size_t i, enum bench_dtype d, double v)
{
	switch (d) {
	case BENCH_FLOAT32: ((float *)buf)[i] = (float)v; break;
	case BENCH_FLOAT64: ((double *)buf)[i] = v; break;
	case BENCH_FLOAT16: ((uint16_t *)buf)[i] = bench_f32_to_f16((float)v); break;
	case BENCH_BFLOAT16: ((uint16_t *)buf)[i] = bench_f32_to_bf16((float)v); break;
	case BENCH_INT32: ((int32_t *)buf)[i] = (int32_t)(uint32_t)(uint64_t)(int64_t)v; break;
	case BENCH_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
	case BENCH_UINT8: ((uint8_t *)buf)[i] = (uint8_t)((uint64_t)(int64_t)v & 0xffu); break;
	default: break;
	}
}

static inline double bench_load(const void *buf, size_t i, enum bench_dtype d)
{
	switch (d) {
	case BENCH_FLOAT32: return ((const float *)buf)[i];
	case BENCH_FLOAT64: return ((const double *)buf)[i];
	case BENCH_FLOAT16: return bench_f16_to_f32(((const uint16_t *)buf)[i]);
	case BENCH_BFLOAT16: return bench_bf16_to_f32(((const uint16_t *)buf)[i]);
	case BENCH_INT32: return ((const int32_t *)buf)[i];
	case BENCH_INT64: return (double)((const int64_t *)buf)[i];
	case BENCH_UINT8: return ((const uint8_t *)buf)[i];
	default: return 0.0;
	}
}

static inline double bench_input_value(size_t i, int rank, enum bench_op op)
{
	if (op == BENCH_PROD)
		return (double)(1 + (i + (size_t)rank) % 2);
	return (double)(rank + 1) * (double)(i % 4 + 1);
}

static inline void bench_fill(void *buf, size_t count, enum bench_dtype d, enum bench_op op, int rank)
{
	size_t i;

	for (i = 0; i < count; i++)
		bench_store(buf, i, d, bench_input_value(i, rank, op));
}

static inline double bench_expected_value(size_t i, int ranks, enum bench_op op)
{
	double f = (double)(i % 4 + 1), n = (double)ranks;

	switch (op) {
	case BENCH_SUM: return f * n * (n + 1) / 2;
	case BENCH_MIN: return f;
	case BENCH_MAX: return f * n;
	case BENCH_AVG: return f * (n + 1) / 2;
	case BENCH_PROD: {
		/* ranks r in [0, n) with (i + r) odd contribute a factor 2 */
		int odd = (i % 2 == 0) ? ranks / 2 : (ranks + 1) / 2;

		return ldexp(1.0, odd);
	}
	default: return 0.0;
	}
}

/*
 * Compare recvbuf with the expected result. Returns the number of wrong
 * elements; the first one is described in *bad_index / *got / *want.
 * Exact except: float16/bfloat16 (relative 1e-2), and avg (rounding of the
 * division: relative 1e-6 / 1e-12 for float32 / float64, +-1 for integers).
 */
static inline size_t bench_verify(const void *buf, size_t count, enum bench_dtype d, enum bench_op op,
				  int ranks, size_t *bad_index, double *got, double *want)
{
	size_t i, bad = 0;
	double tmp[1];
	int is_int = d == BENCH_INT32 || d == BENCH_INT64 || d == BENCH_UINT8;

	for (i = 0; i < count; i++) {
		double g = bench_load(buf, i, d), w, tol = 0.0;

		/* Round or wrap the expected value exactly as a stored input would be. */
		bench_store(tmp, 0, d, bench_expected_value(i, ranks, op));
		w = bench_load(tmp, 0, d);
		if (d == BENCH_FLOAT16 || d == BENCH_BFLOAT16)
			tol = 1e-2 * fabs(w);
		else if (op == BENCH_AVG)
			tol = is_int ? 1.0 : d == BENCH_FLOAT32 ? 1e-6 * fabs(w) : 1e-12 * fabs(w);
		if (!(fabs(g - w) <= tol)) {
			if (bad == 0) {
				*bad_index = i;
				*got = g;
				*want = w;
			}
			bad++;
		}
	}
	return bad;
}

/* Page-aligned buffer, first-touched so page faults stay out of the timing. */
static inline void *bench_alloc(size_t bytes)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0)
		return NULL;
	memset(p, 0, bytes);
	return p;
}

#endif /* FTCC_BENCH_COMMON_H */
