/* allreduce_check.c: allreduce real data on every rank, check the result, print the bandwidth. */
/* SPDX-License-Identifier: MIT */
#include <ftcc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	size_t count = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)1 << 22;
	int iters = argc > 2 ? atoi(argv[2]) : 20;
	struct ft_comm *comm;
	struct ft_op_info info;
	float *in, *out;
	int rc, rank, size, bad = 0;
	double t0, dt;

	rc = ft_init(NULL, &comm);
	if (rc != 0) {
		fprintf(stderr, "ft_init: %s\n", ft_strerror(rc));
		return 1;
	}
	rank = ft_rank(comm);
	size = ft_size(comm);
	in = malloc(count * sizeof(float) + 1);
	out = malloc(count * sizeof(float) + 1);
	if (in == NULL || out == NULL) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	/* Small integers: the float sum is exact whatever the order. */
	for (size_t i = 0; i < count; i++)
		in[i] = (float)((i * 7 + (size_t)rank * 13) % 101);
	t0 = now_s();
	for (int it = 0; it < iters; it++) {
		rc = ft_allreduce(comm, in, out, count, FT_FLOAT32, FT_SUM, &info);
		if (rc != 0) {
			fprintf(stderr, "rank %d: ft_allreduce: %s\n", rank, ft_strerror(rc));
			return 1;
		}
	}
	dt = (now_s() - t0) / (iters > 0 ? iters : 1);
	for (size_t i = 0; i < count; i++) {
		float want = 0;
		for (int r = 0; r < size; r++)
			want += (float)((i * 7 + (size_t)r * 13) % 101);
		if (out[i] != want && bad++ < 5)
			fprintf(stderr, "rank %d: element %zu is %g, want %g\n", rank, i, out[i], want);
	}
	if (rank == 0)
		printf("allreduce of %zu floats on %d ranks: %s, %.3f ms per op, algbw %.2f GB/s\n",
		       count, size, bad ? "WRONG" : "correct", dt * 1e3,
		       dt > 0 ? (double)count * 4 / dt / 1e9 : 0.0);
	rc = ft_finalize(comm);
	if (rc != 0) {
		fprintf(stderr, "ft_finalize: %s\n", ft_strerror(rc));
		return 1;
	}
	free(in);
	free(out);
	return bad ? 1 : 0;
}
