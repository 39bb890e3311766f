/* rejoin_bench.c: times of an exact rejoin (rejoin_bench OPS BYTES): one line per op with when it returned, and when a new incarnation's ft_init began. */
/* SPDX-License-Identifier: MIT */
#include <ftcc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * Run under `FTCC_POLICY=rejoin ftcc-run --restart --kill R@T`. Every rank
 * allreduces BYTES of float32 in place OPS times and prints, per op,
 * "op SEQ end NS" (CLOCK_MONOTONIC, the clock ftcc-run's FTCC_RUN_T0_NS is
 * on). A new incarnation prints "init NS" (when its ft_init began) and
 * "back NEXT_OP" after it. scripts/bench-recovery.sh turns these into the
 * time from the new incarnation's ft_init to the interrupted op returning
 * on every rank, and from the kill.
 */

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	int ops = argc > 1 ? atoi(argv[1]) : 20;
	size_t count = (argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : (64u << 20)) / sizeof(float);
	uint64_t t_init, next = 1;
	struct ft_comm *comm;
	float *buf;
	int rc, back, first;

	setvbuf(stdout, NULL, _IOLBF, 0);
	t_init = mono_ns();
	if ((rc = ft_init(NULL, &comm)) != 0) {
		fprintf(stderr, "ft_init: %s\n", ft_strerror(rc));
		return 1;
	}
	/* the buffer after ft_init: a new incarnation's first fault-in of 64 MiB
	 * (about 250 ms here) is then not inside the interrupted op's time */
	buf = malloc(count * sizeof(float));
	if (buf == NULL || ops < 1)
		return 2;
	for (size_t i = 0; i < count; i++)
		buf[i] = 1.0f;
	back = ft_rejoined(comm, &next);
	if (back == 1)
		printf("init %llu\nback %llu\n", (unsigned long long)t_init, (unsigned long long)next);
	else if (getenv("FTCC_RUN_T0_NS") != NULL)
		printf("t0 %s\n", getenv("FTCC_RUN_T0_NS")); /* ftcc-run's start, for --kill times */
	first = back == 1 ? (int)next : 1;
	for (int op = first; op <= ops; op++) {
		struct ft_op_info info;
		rc = ft_allreduce(comm, FT_IN_PLACE, buf, count, FT_FLOAT32, FT_SUM, &info);
		if (rc != 0) {
			fprintf(stderr, "op %d: %s\n", op, ft_strerror(rc));
			return 1;
		}
		printf("op %llu end %llu contributors %d recovery_ms %.1f\n",
		       (unsigned long long)info.op_seq, (unsigned long long)mono_ns(), info.contributors,
		       info.recovery_ms);
	}
	rc = ft_finalize(comm);
	free(buf);
	return rc == 0 ? 0 : 1;
}
