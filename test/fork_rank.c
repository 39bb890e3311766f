/* fork_rank.c: a rank that forks a long-lived child after ft_init, as a data loader does, then checks its allreduces (test_fork). */
/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <ftcc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/*
 * fork_rank MODE STEPS COUNT PAUSE_MS DIR, under ftcc-run. Right after
 * ft_init the rank forks a child that sleeps 30 s and calls nothing of
 * ftcc (a loader's worker); it writes <DIR>/pid-<rank>.<incarnation> and
 * <DIR>/child-<rank>.<incarnation> (the pids, for the test to kill).
 * Then int64 sum allreduces, in place: the input of op i on original rank
 * m is (m+1)*1000 + (i%7)*10 + j%13 at element j, so the exact result over
 * the members after the call is known. <DIR>/running-<rank>.<inc> appears
 * after the first op. MODE "shrink": stop 20 ops after the first op with
 * fewer than the world's ranks (STEPS is only a cap); "fixed": after op
 * STEPS (a rejoined rank starts where the job stands). The last line is
 * "done rank R size S ops K"; a wrong result prints FAIL and exits 1.
 */

static void mark(const char *dir, const char *name, int rank, const char *inc, long value)
{
	char path[512], text[32];
	int fd, n;

	snprintf(path, sizeof(path), "%s/%s-%d.%s", dir, name, rank, inc);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	n = snprintf(text, sizeof(text), "%ld\n", value);
	if (write(fd, text, (size_t)n) != n)
		perror(path);
	close(fd);
}

static void loader_child(void)
{
	struct timespec left = {30, 0};

	/* only sleeps: a worker that exits at once would hide the bug */
	while (nanosleep(&left, &left) != 0)
		;
	_exit(0);
}

int main(int argc, char **argv)
{
	const char *inc = getenv("FTCC_INCARNATION") ? getenv("FTCC_INCARNATION") : "0";
	struct ft_comm *comm;
	struct ft_op_info info;
	uint64_t next = 1;
	int64_t *buf;
	int rc, me, world, shrunk_at = -1, step;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 6) {
		fprintf(stderr, "usage: fork_rank shrink|fixed STEPS COUNT PAUSE_MS DIR\n");
		return 2;
	}
	int shrink = strcmp(argv[1], "shrink") == 0, steps = atoi(argv[2]);
	size_t count = (size_t)strtoull(argv[3], NULL, 10);
	long pause_ms = atol(argv[4]);
	const char *dir = argv[5];
	struct timespec pause = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};

	buf = malloc(count * sizeof(*buf));
	if (buf == NULL)
		return 1;
	if ((rc = ft_init(NULL, &comm)) != 0) {
		fprintf(stderr, "ft_init: %s\n", ft_strerror(rc));
		return 1;
	}
	world = ft_size(comm);
	me = ft_orig_rank(comm, ft_rank(comm));
	pid_t child = fork();
	if (child == 0)
		loader_child();
	if (child < 0) {
		perror("fork");
		return 1;
	}
	mark(dir, "child", me, inc, (long)child);
	mark(dir, "pid", me, inc, (long)getpid());
	if (ft_rejoined(comm, &next) == 1)
		printf("rank %d rejoined: the job stands at op %llu\n", me,
		       (unsigned long long)next);
	/* op 0 is ft_init's barrier: step s is op s */
	for (step = (int)next; step <= steps; step++) {
		int size;
		int64_t members = 0;

		for (size_t j = 0; j < count; j++)
			buf[j] = (me + 1) * 1000 + (step % 7) * 10 + (int64_t)(j % 13);
		rc = ft_allreduce(comm, FT_IN_PLACE, buf, count, FT_INT64, FT_SUM, &info);
		if (rc != 0) {
			printf("FAIL rank %d op %d: %s\n", me, step, ft_strerror(rc));
			return 1;
		}
		size = ft_size(comm);
		for (int k = 0; k < size; k++)
			members += (ft_orig_rank(comm, k) + 1) * 1000;
		for (size_t j = 0; j < count; j++) {
			int64_t want = members + size * ((step % 7) * 10 + (int64_t)(j % 13));
			if (buf[j] != want || info.contributors != size) {
				printf("FAIL rank %d op %d: element %zu is %lld, want %lld "
				       "(%d contributors, %d members)\n", me, step, j,
				       (long long)buf[j], (long long)want, info.contributors, size);
				return 1;
			}
		}
		printf("op %llu ok contributors %d\n", (unsigned long long)info.op_seq,
		       info.contributors);
		if (step == (int)next)
			mark(dir, "running", me, inc, step);
		if (shrink && size < world && shrunk_at < 0)
			shrunk_at = step;
		if (shrink && shrunk_at >= 0 && step - shrunk_at >= 20)
			break;
		if (pause_ms > 0)
			nanosleep(&pause, NULL);
	}
	printf("done rank %d size %d ops %d\n", me, ft_size(comm), step);
	rc = ft_finalize(comm);
	free(buf);
	return rc == 0 ? 0 : 1;
}
