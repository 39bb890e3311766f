/* grow_rank.c: a job whose programs disagree at the op a grow lands on (test/grow_test.sh): every member must fail that op, none may hang. */
/* SPDX-License-Identifier: MIT */
#include <ftcc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/*
 * grow_rank M PAUSE_MS, under ftcc-run --restart --max-restarts 1, the
 * shrink policy. Ops 1 .. M-1 are reduce-scatters on every rank (no op of
 * them takes a newcomer in: docs/rejoin.md, "Growing back"). Original rank 3, in
 * its first incarnation, SIGKILLs itself at op 3; its new incarnation
 * waits to be taken back. At op M rank 2's program calls a reduce-scatter
 * while every other rank calls an allreduce: a bug, which must fail op M on
 * every member (the grow is planned there), not hang. Each rank prints
 * "op M rc NAME" and exits 0 when op M failed, 1 when it succeeded.
 */
int main(int argc, char **argv)
{
	int m = argc > 1 ? atoi(argv[1]) : 40;
	int pause_ms = argc > 2 ? atoi(argv[2]) : 10;
	struct timespec pause = {pause_ms / 1000, (long)(pause_ms % 1000) * 1000000L};
	const char *inc = getenv("FTCC_INCARNATION");
	struct ft_comm *comm;
	uint64_t next = 1;
	float buf[64];
	int rc, me, first;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if ((rc = ft_init(NULL, &comm)) != 0) {
		fprintf(stderr, "ft_init: %s\n", ft_strerror(rc));
		return 1;
	}
	me = ft_orig_rank(comm, ft_rank(comm));
	if (ft_rejoined(comm, &next) == 1)
		printf("rank %d taken back at op %llu\n", me, (unsigned long long)next);
	first = (int)next;
	for (int op = first; op <= m; op++) {
		int n = ft_size(comm);
		for (int j = 0; j < 64; j++)
			buf[j] = (float)(me + j);
		if (me == 3 && (inc == NULL || atoi(inc) == 0) && op == 3)
			raise(SIGKILL);
		if (op < m || me == 2)
			rc = ft_reduce_scatter(comm, FT_IN_PLACE, buf, 64 / (size_t)n / 2, FT_FLOAT32,
					       FT_SUM, NULL);
		else
			rc = ft_allreduce(comm, FT_IN_PLACE, buf, 64, FT_FLOAT32, FT_SUM, NULL);
		if (op == m) {
			printf("op %d rc %s\n", op, ft_err_name(rc));
			ft_finalize(comm);
			return rc != 0 ? 0 : 1;
		}
		if (rc != 0) {
			printf("op %d failed: %s\n", op, ft_strerror(rc));
			return 1;
		}
		nanosleep(&pause, NULL);
	}
	return 1;
}
