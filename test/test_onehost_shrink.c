/* test_onehost_shrink.c: the one-host path under shrink: a member SIGKILLed or SIGSTOPped from outside at a random moment of a shared-memory op, and the survivors finish every op exactly over themselves, back in shared memory. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

/*
 * Each rank runs ops until the test writes <out>/stop: int64 allreduces in
 * place of a small count (one round, a kept result) and a large one (many
 * rounds of FTCC_SHM_BYTES/4, commit steps, the backup), an in-place
 * reduce-scatter and a broadcast, each op's input a function of the rank's
 * original number and the op's index. After each op it checks the result
 * against the members it is shown (ft_size, ft_orig_rank) and the
 * contributors info gives: exact, whatever the failure's moment. Stats say
 * where the ops ran: before the failure and from a while after it, no byte
 * on a data link (the one-host path), in between the recovery's own.
 */
#define SMALL 1000
#define LARGE 150001 /* 1.2 MB: 19 rounds of 64 KiB */

static char out[256];

static void mark(const char *name, int r)
{
	char path[400];

	snprintf(path, sizeof(path), "%s/%s-%d", out, name, r);
	close(open(path, O_CREAT | O_WRONLY, 0600));
}

static bool marked(const char *name)
{
	char path[400];

	snprintf(path, sizeof(path), "%s/%s", out, name);
	return access(path, F_OK) == 0;
}

static void to_shrink(struct ft_config *cfg, int r)
{
	char path[400];
	int fd;

	cfg->policy = FT_POLICY_SHRINK;
	cfg->detect_timeout_ms = 1500;
	cfg->heartbeat_ms = 100;
	cfg->log_level = getenv("FTCC_TEST_LOG") ? atoi(getenv("FTCC_TEST_LOG")) : 1;
	snprintf(path, sizeof(path), "%s/stderr-%d", out, r);
	fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
	if (fd >= 0) {
		dup2(fd, 2);
		close(fd);
	}
}

static int64_t input(int orig, int i, size_t j)
{
	return (int64_t)(orig + 1) * 1000003 + (int64_t)i * 7 + (int64_t)(j % 10007);
}

/* The sum of input(m, i, j) over the members shown, which must be info's contributors. */
static int check_sum(struct ft_comm *comm, const int64_t *v, size_t lo, size_t n, int i,
		     const struct ft_op_info *info, const char *what, int r)
{
	int size = ft_size(comm);

	if (info->contributors != size) {
		fprintf(stderr, "rank %d op %d %s: %d contributors, %d members shown\n", r, i, what,
			info->contributors, size);
		return 1;
	}
	for (size_t j = lo; j < lo + n; j++) {
		int64_t want = 0;
		for (int m = 0; m < size; m++)
			want += input(ft_orig_rank(comm, m), i, j);
		if (v[j - lo] != want) {
			fprintf(stderr, "rank %d op %d %s: [%zu] = %lld, want %lld (%d members)\n", r, i,
				what, j, (long long)v[j - lo], (long long)want, size);
			return 1;
		}
	}
	return 0;
}

static int one_op(struct ft_comm *comm, int64_t *v, int i, int r)
{
	struct ft_op_info info;
	int me = ft_orig_rank(comm, ft_rank(comm)), n = ft_size(comm), rc;
	size_t count = i % 4 == 1 ? LARGE : SMALL;

	switch (i % 4) {
	case 0:
	case 1: /* allreduce in place: small (kept), large (commit, backup) */
		for (size_t j = 0; j < count; j++)
			v[j] = input(me, i, j);
		rc = ft_allreduce(comm, FT_IN_PLACE, v, count, FT_INT64, FT_SUM, &info);
		return rc != 0 ? rc : check_sum(comm, v, 0, count, i, &info, "allreduce", r);
	case 2: { /* reduce-scatter in place: blocks of the members the caller saw */
		size_t bc = 20011;
		for (int b = 0; b < n; b++)
			for (size_t j = 0; j < bc; j++)
				v[(size_t)b * bc + j] = input(me, i, (size_t)b * bc + j);
		int at = ft_rank(comm);
		rc = ft_reduce_scatter(comm, FT_IN_PLACE, v, bc, FT_INT64, FT_SUM, &info);
		return rc != 0 ? rc
			       : check_sum(comm, v + (size_t)at * bc, (size_t)at * bc, bc, i, &info,
					   "reduce-scatter", r);
	}
	default: { /* broadcast from the last member shown */
		int root = n - 1, ro = ft_orig_rank(comm, root);
		for (size_t j = 0; j < LARGE; j++)
			v[j] = ft_rank(comm) == root ? input(ro, i, j) : -1;
		rc = ft_broadcast(comm, v, LARGE * sizeof(int64_t), root, &info);
		if (rc == -FT_EROOTFAILED)
			return 0; /* its root died: nothing to check */
		for (size_t j = 0; rc == 0 && j < LARGE; j++)
			if (v[j] != input(ro, i, j)) {
				fprintf(stderr, "rank %d op %d broadcast: [%zu] wrong\n", r, i, j);
				return 1;
			}
		return rc;
	}
	}
}

/* Ops until <out>/stop; the data links' bytes of the first ops (before
 * any failure) and of the last 8 must be none. */
static int worker(struct ft_comm *comm, int r, int n, void *arg)
{
	int64_t *v = malloc((size_t)(LARGE > 20011 * n ? LARGE : 20011 * n) * sizeof(int64_t));
	struct ft_stats st;
	uint64_t sent[8] = {0}, first = 0;
	int i, rc = 0, n0 = ft_size(comm);

	(void)arg;
	if (v == NULL)
		return 2;
	for (i = 0; rc == 0; i++) {
		if (ft_stats_get(comm, &st) != 0)
			return 2;
		sent[i % 8] = st.bytes_sent;
		if (i == 1)
			first = st.bytes_sent; /* (the path's setup agrees on the ring) */
		if (i == 8 && st.bytes_sent != first && ft_size(comm) == n0) {
			fprintf(stderr, "rank %d: %llu bytes on the data links before any failure\n", r,
				(unsigned long long)(st.bytes_sent - first));
			rc = 3;
			break;
		}
		/* every rank stops at the same op: one that saw the mark tells all */
		int32_t stop = marked("stop");
		if ((rc = ft_allreduce(comm, FT_IN_PLACE, &stop, 1, FT_INT32, FT_MAX, NULL)) != 0) {
			fprintf(stderr, "rank %d before op %d: %s\n", r, i, ft_strerror(rc));
			break;
		}
		if (stop && i >= 8)
			break;
		rc = one_op(comm, v, i, r);
		if (rc != 0)
			fprintf(stderr, "rank %d op %d: %s\n", r, i,
				rc > 0 ? "a wrong result" : ft_strerror(rc));
		if (i == 4)
			mark("running", r);
		if (ft_size(comm) < n0)
			mark("shrunk", r);
	}
	if (rc == 0 && st.bytes_sent != sent[i % 8]) {
		fprintf(stderr, "rank %d: %llu bytes on the data links in the last 8 ops: not back "
			"in shared memory\n", r, (unsigned long long)(st.bytes_sent - sent[i % 8]));
		rc = 3;
	}
	mark(rc == 0 ? "ok" : "failed", r);
	free(v);
	(void)n;
	return rc == 0 ? 0 : 1;
}

struct shm_job {
	struct tu_job job;
	int n;
};

static void job_start(struct shm_job *s, int n)
{
	long end;

	snprintf(out, sizeof(out), "/tmp/ftcc-shmshrink-XXXXXX");
	cr_assert_not_null(mkdtemp(out));
	setenv("FTCC_SHM_BYTES", "256K", 1);
	tu_job_init(&s->job, n);
	s->n = n;
	for (int r = 0; r < n; r++)
		tu_spawn(&s->job, r, worker, NULL, to_shrink);
	end = tu_now_ms() + 30000;
	for (int r = 0; r < n; r++) {
		char path[400];
		snprintf(path, sizeof(path), "%s/running-%d", out, r);
		cr_assert(tu_wait_file(path, end), "rank %d never ran its ops", r);
	}
}

/* Waits for every survivor to see the smaller view, stops them, and checks they all ended well. */
static void job_end(struct shm_job *s, const int *gone, const char *what)
{
	long end = tu_now_ms() + 20000;
	char path[400], cmd[600];
	int bad;

	for (int r = 0; r < s->n; r++) {
		if (gone[r])
			continue;
		snprintf(path, sizeof(path), "%s/shrunk-%d", out, r);
		cr_expect(tu_wait_file(path, end), "%s: rank %d never saw a smaller view", what, r);
	}
	tu_sleep_ms(300); /* ops on the new view's segments */
	snprintf(path, sizeof(path), "%s/stop", out);
	close(open(path, O_CREAT | O_WRONLY, 0600));
	bad = tu_wait(&s->job, 30000, gone);
	if (bad != 0)
		for (int r = 0; r < s->n; r++) {
			snprintf(cmd, sizeof(cmd), "echo '-- rank %d:'; tail -n 15 %s/stderr-%d", r, out, r);
			if (system(cmd) != 0)
				fprintf(stderr, "(tail failed)\n");
		}
	cr_expect_eq(bad, 0, "%s: %d survivors failed or hung", what, bad);
	tu_job_cleanup(&s->job);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", out);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", out);
	unsetenv("FTCC_SHM_BYTES");
}

/* n ranks; a random member SIGKILLed at a random moment of their ops. */
static void kill_trials(int n, int trials)
{
	unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();

	if (getenv("FTCC_TEST_SEED") != NULL) /* replays a failed run */
		seed = (unsigned)strtoul(getenv("FTCC_TEST_SEED"), NULL, 10);
	srand(seed);
	for (int t = 0; t < trials; t++) {
		struct shm_job s;
		int gone[64] = {0}, victim = rand() % n;
		long delay = rand() % 400;
		char what[128];

		snprintf(what, sizeof(what), "n=%d: rank %d killed %ld ms in (seed %u)", n, victim,
			 delay, seed);
		fprintf(stderr, "onehost_shrink: %s\n", what);
		job_start(&s, n);
		tu_sleep_ms(delay);
		kill(s.job.pids[victim], SIGKILL);
		gone[victim] = 1;
		job_end(&s, gone, what);
	}
}

Test(onehost_shrink, a_member_killed_at_random_3, .timeout = 300) { kill_trials(3, 3); }
Test(onehost_shrink, a_member_killed_at_random_4, .timeout = 300) { kill_trials(4, 3); }
Test(onehost_shrink, a_member_killed_at_random_6, .timeout = 300) { kill_trials(6, 2); }

/*
 * A member SIGSTOPped in the middle of the ops: no process exits, so only
 * the detector (heartbeat silence) ends the waits for it; the survivors
 * go on without it, exactly. Woken up afterwards, it finds itself out of
 * the view: nothing it writes into its old segment reaches them (its
 * stage words were fenced).
 */
Test(onehost_shrink, a_stopped_member_is_fenced, .timeout = 120)
{
	struct shm_job s;
	int gone[64] = {0};
	long end;
	char path[400];

	job_start(&s, 4);
	tu_sleep_ms(150);
	kill(s.job.pids[2], SIGSTOP);
	end = tu_now_ms() + 20000;
	for (int r = 0; r < 4; r++) {
		snprintf(path, sizeof(path), "%s/shrunk-%d", out, r);
		cr_assert(r == 2 || tu_wait_file(path, end), "rank %d never saw a smaller view", r);
	}
	kill(s.job.pids[2], SIGCONT);
	tu_sleep_ms(500); /* it runs again, beside the survivors' ops */
	gone[2] = 1; /* (it ends with an error, below) */
	job_end(&s, gone, "rank 2 stopped");
	cr_expect(WIFEXITED(s.job.status[2]) && WEXITSTATUS(s.job.status[2]) == 1,
		  "the stopped rank, woken: status %d, want exit 1 (left out)", s.job.status[2]);
}
