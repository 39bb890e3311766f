/* mpi_bench.c: the ftbench measurement (same flags, table and CSV) with MPI_Allreduce. */
/* SPDX-License-Identifier: MIT */

/*
 * mpirun.openmpi --allow-run-as-root --oversubscribe -np N --mca pml ob1 \
 *     --mca btl tcp,self build/mpi_bench --label openmpi-tcp [options]
 * (--mca btl vader,self and --label openmpi-shm for shared memory).
 * impl is --label (default "openmpi"); transport is the part of the label
 * after its first '-', else guessed from the btl list mpirun passes down in
 * OMPI_MCA_btl. Buffers are allocated once per size and reused; out of place
 * unless --in-place, as in ftbench. Errors are returned (MPI_ERRORS_RETURN),
 * printed with MPI_Error_string, and end the job through MPI_Abort.
 */

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "bench_common.h"

struct bench_ctx {
	int rank;
	int ranks;
	const char *impl;
	char transport[64];
	const struct bench_opts *opts;
	MPI_Datatype type;
	MPI_Op op;
};

static int mpi_fail(const struct bench_ctx *c, const char *what, size_t bytes, int err)
{
	char msg[MPI_MAX_ERROR_STRING], sz[32];
	int len = 0;

	if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS)
		snprintf(msg, sizeof(msg), "MPI error %d", err);
	fprintf(stderr, "mpi_bench: rank %d: %s (size %s) failed: %s\n", c->rank, what,
		bench_format_size(bytes, sz, sizeof(sz)), msg);
	return err;
}

/* MPI has no avg, and no standard half/bfloat16 datatype. */
static int map_types(enum bench_dtype d, enum bench_op o, MPI_Datatype *type, MPI_Op *op)
{
	switch (d) {
	case BENCH_FLOAT32: *type = MPI_FLOAT; break;
	case BENCH_FLOAT64: *type = MPI_DOUBLE; break;
	case BENCH_INT32: *type = MPI_INT32_T; break;
	case BENCH_INT64: *type = MPI_INT64_T; break;
	case BENCH_UINT8: *type = MPI_UINT8_T; break;
	default: return -1;
	}
	switch (o) {
	case BENCH_SUM: *op = MPI_SUM; break;
	case BENCH_PROD: *op = MPI_PROD; break;
	case BENCH_MIN: *op = MPI_MIN; break;
	case BENCH_MAX: *op = MPI_MAX; break;
	default: return -1;
	}
	return 0;
}

static void pick_transport(struct bench_ctx *c)
{
	const char *dash = c->opts->label != NULL ? strchr(c->opts->label, '-') : NULL;
	const char *btl = getenv("OMPI_MCA_btl");

	if (dash != NULL && dash[1] != '\0')
		snprintf(c->transport, sizeof(c->transport), "%s", dash + 1);
	else if (btl != NULL && (strstr(btl, "vader") != NULL || strstr(btl, "sm") != NULL))
		snprintf(c->transport, sizeof(c->transport), "shm");
	else if (btl != NULL && strstr(btl, "tcp") != NULL)
		snprintf(c->transport, sizeof(c->transport), "tcp");
	else
		snprintf(c->transport, sizeof(c->transport), "default");
}

static int check_size(const struct bench_ctx *c, void *sendbuf, void *recvbuf, int count, size_t bytes)
{
	const struct bench_opts *o = c->opts;
	size_t bad, idx = 0;
	double got = 0, want = 0;
	long long nbad;
	int err;

	bench_fill(o->in_place ? recvbuf : sendbuf, (size_t)count, o->dtype, o->op, c->rank);
	if (!o->in_place)
		memset(recvbuf, 0xa5, bytes);
	err = MPI_Allreduce(o->in_place ? MPI_IN_PLACE : sendbuf, recvbuf, count, c->type, c->op,
			    MPI_COMM_WORLD);
	if (err != MPI_SUCCESS)
		return mpi_fail(c, "MPI_Allreduce (check)", bytes, err);
	bad = bench_verify(recvbuf, (size_t)count, o->dtype, o->op, c->ranks, &idx, &got, &want);
	if (bad != 0)
		fprintf(stderr,
			"mpi_bench: rank %d: check failed at size %zu: %zu of %d elements wrong, "
			"first at [%zu]: got %g, want %g\n",
			c->rank, bytes, bad, count, idx, got, want);
	nbad = (long long)bad;
	err = MPI_Allreduce(MPI_IN_PLACE, &nbad, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (err != MPI_SUCCESS)
		return mpi_fail(c, "MPI_Allreduce (check result)", bytes, err);
	if (nbad != 0) {
		if (c->rank == 0)
			fprintf(stderr, "mpi_bench: check failed at size %zu: %lld wrong elements over all ranks\n",
				bytes, nbad);
		return MPI_ERR_OTHER;
	}
	return MPI_SUCCESS;
}

/* One timed call of the collective --coll names, on count elements in all. */
static int one_call(const struct bench_ctx *c, const void *src, void *recvbuf, int count)
{
	int block = (int)bench_block((size_t)count, c->ranks);

	switch (c->opts->coll) {
	case BENCH_REDUCE_SCATTER:
		return MPI_Reduce_scatter_block(src, recvbuf, block, c->type, c->op, MPI_COMM_WORLD);
	case BENCH_ALLGATHER:
		return MPI_Allgather(src, block, c->type, recvbuf, block, c->type, MPI_COMM_WORLD);
	case BENCH_BROADCAST:
		return MPI_Bcast(recvbuf, count, c->type, 0, MPI_COMM_WORLD);
	default:
		return MPI_Allreduce(src, recvbuf, count, c->type, c->op, MPI_COMM_WORLD);
	}
}

static int run_size(const struct bench_ctx *c, size_t bytes)
{
	const struct bench_opts *o = c->opts;
	size_t esize = bench_dtype_size(o->dtype), count = bytes / esize;
	void *sendbuf = NULL, *recvbuf = NULL;
	const void *src;
	double *times = NULL;
	struct bench_result res;
	int iters, warmup, i, err = MPI_SUCCESS;

	bytes = count * esize;
	if (count == 0)
		return MPI_SUCCESS;
	if (count > INT_MAX) {
		if (c->rank == 0)
			fprintf(stderr, "mpi_bench: %zu elements exceed MPI's int count\n", count);
		return MPI_ERR_COUNT;
	}
	iters = bench_iters_for(o, bytes);
	warmup = bench_warmup_for(o, iters);
	recvbuf = bench_alloc(bytes);
	if (!o->in_place)
		sendbuf = bench_alloc(bytes);
	times = (double *)calloc((size_t)iters, sizeof(double));
	if (recvbuf == NULL || (!o->in_place && sendbuf == NULL) || times == NULL) {
		fprintf(stderr, "mpi_bench: rank %d: out of memory at size %zu\n", c->rank, bytes);
		err = MPI_ERR_NO_MEM;
		goto out_free;
	}
	src = o->in_place ? MPI_IN_PLACE : sendbuf;

	if (o->check) {
		err = check_size(c, sendbuf, recvbuf, (int)count, bytes);
		if (err != MPI_SUCCESS)
			goto out_free;
	}
	if (o->in_place)
		memset(recvbuf, 0, bytes);
	else
		bench_fill(sendbuf, count, o->dtype, o->op, c->rank);

	for (i = 0; i < warmup; i++) {
		err = one_call(c, src, recvbuf, (int)count);
		if (err != MPI_SUCCESS) {
			mpi_fail(c, "the collective (warm-up)", bytes, err);
			goto out_free;
		}
	}
	err = MPI_Barrier(MPI_COMM_WORLD);
	if (err != MPI_SUCCESS) {
		mpi_fail(c, "MPI_Barrier", bytes, err);
		goto out_free;
	}
	for (i = 0; i < iters; i++) {
		double t0 = bench_now();

		err = one_call(c, src, recvbuf, (int)count);
		times[i] = bench_now() - t0;
		if (err != MPI_SUCCESS) {
			mpi_fail(c, "the collective", bytes, err);
			goto out_free;
		}
	}
	err = MPI_Allreduce(MPI_IN_PLACE, times, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	if (err != MPI_SUCCESS) {
		mpi_fail(c, "MPI_Allreduce (times max)", bytes, err);
		goto out_free;
	}
	bench_summarize(times, iters, bytes, count, c->ranks, c->opts->coll, &res);
	if (c->rank == 0) {
		bench_print_row(stdout, &res, o->check);
		if (o->csv != NULL) {
			int cerr = bench_csv_append(o->csv, c->impl, c->transport, c->ranks, &res);

			if (cerr != 0) {
				fprintf(stderr, "mpi_bench: cannot append to %s: %s\n", o->csv, strerror(-cerr));
				err = MPI_ERR_FILE;
			}
		}
	}
out_free:
	free(times);
	free(sendbuf);
	free(recvbuf);
	return err;
}

static int report_rss(const struct bench_ctx *c)
{
	double *rss = (double *)calloc((size_t)c->ranks, sizeof(double));
	double max = 0;
	int r, err;

	if (rss == NULL)
		return MPI_ERR_NO_MEM;
	rss[c->rank] = (double)bench_peak_rss_kib();
	err = MPI_Allreduce(MPI_IN_PLACE, rss, c->ranks, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	if (err != MPI_SUCCESS) {
		mpi_fail(c, "MPI_Allreduce (peak RSS)", 0, err);
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
	return MPI_SUCCESS;
}

int main(int argc, char **argv)
{
	struct bench_opts opts;
	struct bench_ctx c;
	size_t bytes;
	int err, rc;

	err = MPI_Init(&argc, &argv);
	if (err != MPI_SUCCESS) {
		fprintf(stderr, "mpi_bench: MPI_Init failed (%d)\n", err);
		return 1;
	}
	memset(&c, 0, sizeof(c));
	c.opts = &opts;
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
	MPI_Comm_size(MPI_COMM_WORLD, &c.ranks);

	rc = bench_parse_args(argc, argv, &opts, c.rank == 0);
	if (rc != 0) {
		MPI_Finalize();
		return rc > 0 ? 0 : 2;
	}
	if (map_types(opts.dtype, opts.op, &c.type, &c.op) != 0) {
		if (c.rank == 0)
			fprintf(stderr, "mpi_bench: dtype %s with op %s is not supported by MPI\n",
				bench_dtype_name(opts.dtype), bench_op_name(opts.op));
		MPI_Finalize();
		return 2;
	}
	c.impl = opts.label != NULL ? opts.label : "openmpi";
	pick_transport(&c);
	if (c.rank == 0)
		bench_print_header(stdout, c.impl, c.transport, c.ranks, &opts);

	for (bytes = opts.min_bytes; bytes <= opts.max_bytes; bytes *= 2) {
		err = run_size(&c, bytes);
		if (err != MPI_SUCCESS)
			break;
		if (bytes > SIZE_MAX / 2)
			break;
	}
	if (err == MPI_SUCCESS)
		err = report_rss(&c);
	if (err != MPI_SUCCESS) {
		/* Other ranks may be blocked in a collective this rank left. */
		MPI_Abort(MPI_COMM_WORLD, 1);
		return 1;
	}
	MPI_Finalize();
	return 0;
}
