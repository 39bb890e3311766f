/* ftbench.c: allreduce (reduce-scatter, allgather) latency and bandwidth of ftcc over message sizes, through the public API only. */
/* SPDX-License-Identifier: MIT */

/*
 * Run under the launcher: ftcc-run -n N build/ftbench [options] (see
 * bench_common.h for the options and the timing method). Rank 0 prints the
 * table and appends the CSV rows; every rank reports its own errors.
 * The timed loop contains nothing but the collective's calls and clock reads:
 * the barrier comes before it and the max-over-ranks reduction after it.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ftcc.h>

#include "bench_common.h"

struct bench_ctx {
	struct ft_comm *comm;
	int rank;
	int ranks;
	const char *impl;
	const char *transport;
	const struct bench_opts *opts;
};

/* Report a failed ft_* call on this rank and pass the code through. */
static int ft_fail(const struct bench_ctx *c, const char *what, size_t bytes, int err)
{
	char sz[32];

	fprintf(stderr, "ftbench: rank %d: %s (size %s) failed: %s (%s)\n", c->rank, what,
		bench_format_size(bytes, sz, sizeof(sz)), ft_strerror(err), ft_err_name(err));
	return err;
}

/*
 * Fill with the check pattern, reduce once, verify on every rank, and agree
 * on the outcome so that all ranks stop together. 0, a -FT_E* code, or
 * -FT_EIO when some rank's result is wrong.
 */
static int check_size(const struct bench_ctx *c, void *sendbuf, void *recvbuf, size_t count,
		      size_t bytes)
{
	const struct bench_opts *o = c->opts;
	const void *src = o->in_place ? FT_IN_PLACE : sendbuf;
	size_t bad, idx = 0;
	double got = 0, want = 0;
	int64_t nbad;
	int err;

	bench_fill(o->in_place ? recvbuf : sendbuf, count, o->dtype, o->op, c->rank);
	if (!o->in_place)
		memset(recvbuf, 0xa5, bytes); /* a stale result must not pass */
	err = ft_allreduce(c->comm, src, recvbuf, count, (enum ft_dtype)o->dtype,
			   (enum ft_op)o->op, NULL);
	if (err != 0)
		return ft_fail(c, "ft_allreduce (check)", bytes, err);
	bad = bench_verify(recvbuf, count, o->dtype, o->op, c->ranks, &idx, &got, &want);
	if (bad != 0)
		fprintf(stderr,
			"ftbench: rank %d: check failed at size %zu: %zu of %zu elements wrong, "
			"first at [%zu]: got %g, want %g\n",
			c->rank, bytes, bad, count, idx, got, want);
	nbad = (int64_t)bad;
	err = ft_allreduce(c->comm, FT_IN_PLACE, &nbad, 1, FT_INT64, FT_SUM, NULL);
	if (err != 0)
		return ft_fail(c, "ft_allreduce (check result)", bytes, err);
	if (nbad != 0) {
		if (c->rank == 0)
			fprintf(stderr, "ftbench: check failed at size %zu: %lld wrong elements over all ranks\n",
				bytes, (long long)nbad);
		return -FT_EIO;
	}
	return 0;
}

/* One timed call of the collective --coll names, on count elements in all. */
static int one_call(const struct bench_ctx *c, const void *src, void *recvbuf, size_t count)
{
	const struct bench_opts *o = c->opts;
	size_t block = bench_block(count, c->ranks);

	switch (o->coll) {
	case BENCH_REDUCE_SCATTER:
		return ft_reduce_scatter(c->comm, src, recvbuf, block, (enum ft_dtype)o->dtype,
					 (enum ft_op)o->op, NULL);
	case BENCH_ALLGATHER:
		return ft_allgather(c->comm, src, recvbuf, block, (enum ft_dtype)o->dtype, NULL);
	case BENCH_BROADCAST:
		return ft_broadcast(c->comm, recvbuf, count * bench_dtype_size(o->dtype), 0, NULL);
	default:
		return ft_allreduce(c->comm, src, recvbuf, count, (enum ft_dtype)o->dtype,
				    (enum ft_op)o->op, NULL);
	}
}

static int run_size(const struct bench_ctx *c, size_t bytes)
{
	const struct bench_opts *o = c->opts;
	size_t esize = ft_dtype_size((enum ft_dtype)o->dtype);
	size_t count = bytes / esize;
	void *sendbuf = NULL, *recvbuf = NULL;
	const void *src;
	double *times = NULL;
	struct bench_result res;
	int iters, warmup, i, err = 0;

	bytes = count * esize;
	if (count == 0)
		return 0;
	iters = bench_iters_for(o, bytes);
	warmup = bench_warmup_for(o, iters);
	recvbuf = bench_alloc(bytes);
	if (!o->in_place)
		sendbuf = bench_alloc(bytes);
	times = (double *)calloc((size_t)iters, sizeof(double));
	if (recvbuf == NULL || (!o->in_place && sendbuf == NULL) || times == NULL) {
		err = ft_fail(c, "allocation", bytes, -FT_ENOMEM);
		goto out_free;
	}
	src = o->in_place ? FT_IN_PLACE : sendbuf;

	if (o->check) {
		err = check_size(c, sendbuf, recvbuf, count, bytes);
		if (err != 0)
			goto out_free;
	}
	/*
	 * Timing data: the check pattern out of place; zeros in place, where the
	 * result feeds the next call and anything else would grow to inf/NaN.
	 */
	if (o->in_place)
		memset(recvbuf, 0, bytes);
	else
		bench_fill(sendbuf, count, o->dtype, o->op, c->rank);

	for (i = 0; i < warmup; i++) {
		err = one_call(c, src, recvbuf, count);
		if (err != 0) {
			ft_fail(c, "the collective (warm-up)", bytes, err);
			goto out_free;
		}
	}
	err = ft_barrier(c->comm);
	if (err != 0) {
		ft_fail(c, "ft_barrier", bytes, err);
		goto out_free;
	}
	for (i = 0; i < iters; i++) {
		double t0 = bench_now();

		err = one_call(c, src, recvbuf, count);
		times[i] = bench_now() - t0;
		if (err != 0) {
			ft_fail(c, "the collective", bytes, err);
			goto out_free;
		}
	}
	err = ft_allreduce(c->comm, FT_IN_PLACE, times, (size_t)iters, FT_FLOAT64, FT_MAX, NULL);
	if (err != 0) {
		ft_fail(c, "ft_allreduce (times max)", bytes, err);
		goto out_free;
	}
	bench_summarize(times, iters, bytes, count, c->ranks, c->opts->coll, &res);
	if (c->rank == 0) {
		bench_print_row(stdout, &res, o->check);
		if (o->csv != NULL) {
			int cerr = bench_csv_append(o->csv, c->impl, c->transport, c->ranks, &res);

			if (cerr != 0) {
				fprintf(stderr, "ftbench: cannot append to %s: %s\n", o->csv, strerror(-cerr));
				err = -FT_EIO;
			}
		}
	}
out_free:
	free(times);
	free(sendbuf);
	free(recvbuf);
	return err;
}

/* Rank 0 learns every rank's peak RSS: each fills its own slot, allreduce MAX. */
static int report_rss(const struct bench_ctx *c)
{
	double *rss = (double *)calloc((size_t)c->ranks, sizeof(double));
	double max = 0;
	int r, err;

	if (rss == NULL)
		return ft_fail(c, "allocation", 0, -FT_ENOMEM);
	rss[c->rank] = (double)bench_peak_rss_kib();
	err = ft_allreduce(c->comm, FT_IN_PLACE, rss, (size_t)c->ranks, FT_FLOAT64, FT_MAX, NULL);
	if (err != 0) {
		ft_fail(c, "ft_allreduce (peak RSS)", 0, err);
		free(rss);
		return err;
	}
	if (c->rank == 0) {
		printf("# peak RSS (MiB): rank 0 (own) %.1f; per rank:", (double)bench_peak_rss_kib() / 1024.0);
		for (r = 0; r < c->ranks; r++) {
			printf(" %.1f", rss[r] / 1024.0);
			if (rss[r] > max)
				max = rss[r];
		}
		printf("; max %.1f\n", max / 1024.0);
		fflush(stdout);
	}
	free(rss);
	return 0;
}

int main(int argc, char **argv)
{
	struct bench_opts opts;
	struct bench_ctx c;
	const char *env_rank = getenv("FTCC_RANK");
	size_t bytes;
	int err, ferr, rc;

	/* Before ft_init only the launcher's rank tells who reports a bad flag. */
	rc = bench_parse_args(argc, argv, &opts, env_rank == NULL || strcmp(env_rank, "0") == 0);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	if (ft_dtype_size((enum ft_dtype)opts.dtype) == 0) {
		fprintf(stderr, "ftbench: dtype %s unknown to this ftcc\n", bench_dtype_name(opts.dtype));
		return 2;
	}

	memset(&c, 0, sizeof(c));
	c.opts = &opts;
	c.rank = env_rank != NULL ? atoi(env_rank) : -1;
	err = ft_init(NULL, &c.comm);
	if (err != 0) {
		fprintf(stderr, "ftbench: rank %d: ft_init failed: %s (%s)\n", c.rank, ft_strerror(err),
			ft_err_name(err));
		return 1;
	}
	c.rank = ft_rank(c.comm);
	c.ranks = ft_size(c.comm);
	c.impl = opts.label != NULL ? opts.label : "ftcc";
	c.transport = getenv("FTCC_TRANSPORT") != NULL && *getenv("FTCC_TRANSPORT") != '\0'
			      ? getenv("FTCC_TRANSPORT")
			      : "tcp";
	if (c.rank < 0 || c.ranks <= 0) {
		fprintf(stderr, "ftbench: ft_rank/ft_size failed: %d/%d\n", c.rank, c.ranks);
		err = -FT_EINVAL;
		goto out_finalize;
	}
	if (c.rank == 0)
		bench_print_header(stdout, c.impl, c.transport, c.ranks, &opts);

	for (bytes = opts.min_bytes; bytes <= opts.max_bytes; bytes *= 2) {
		err = run_size(&c, bytes);
		if (err != 0)
			goto out_finalize;
		if (bytes > SIZE_MAX / 2)
			break;
	}
	err = report_rss(&c);

out_finalize:
	ferr = ft_finalize(c.comm);
	if (ferr != 0) {
		fprintf(stderr, "ftbench: rank %d: ft_finalize failed: %s (%s)\n", c.rank,
			ft_strerror(ferr), ft_err_name(ferr));
		if (err == 0)
			err = ferr;
	}
	return err == 0 ? 0 : 1;
}
