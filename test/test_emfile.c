/* test_emfile.c: a rank that runs out of file descriptors mid-job, when a neighbour's death makes it connect again: its own cause, not an exclusion or a peer's death. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ftcc.h"
#include "internal.h"
#include "testutil.h"

#define OPS 400

static char marker[512];

/* Another part of the program that takes every descriptor there is, at
 * once and again each time one is closed (a leak, many files open). */
static void *thief(void *arg)
{
	(void)arg;
	for (;;) {
		while (dup(0) >= 0)
			;
		usleep(200);
	}
	return NULL;
}

/*
 * Every rank sums its rank OPS times, 5 ms apart. Rank 1, after its first
 * op, marks that it runs, lowers its descriptor limit to 256 and has a
 * thread take every descriptor left, and each one closed: the ring it has
 * keeps working, and the next descriptor it needs (a member file, a
 * connection to rank 3 once rank 2 is killed) finds none. Its exit status: 0, or
 * the code its op returned (ft_err_name's), as a positive number.
 */
static int sum_under_a_limit(struct ft_comm *comm, int rank, int n, void *arg)
{
	(void)n;
	(void)arg;
	for (int i = 0; i < OPS; i++) {
		double v = rank;
		int rc = ft_allreduce(comm, FT_IN_PLACE, &v, 1, FT_FLOAT64, FT_SUM, NULL);
		if (rc != 0) {
			fprintf(stderr, "rank %d: op %d: %s (%s)\n", rank, i, ft_err_name(rc),
				ft_strerror(rc));
			return -rc;
		}
		if (i == 0 && rank == 1) {
			struct rlimit rl;
			pthread_t t;
			close(open(marker, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
			getrlimit(RLIMIT_NOFILE, &rl);
			rl.rlim_cur = rl.rlim_max < 256 ? rl.rlim_max : 256;
			if (setrlimit(RLIMIT_NOFILE, &rl) != 0 ||
			    pthread_create(&t, NULL, thief, NULL) != 0)
				return 100;
		}
		tu_sleep_ms(5);
	}
	return 0;
}

static void shrink(struct ft_config *cfg, int rank)
{
	(void)rank;
	cfg->policy = FT_POLICY_SHRINK;
	cfg->log_level = getenv("FTCC_TEST_LOG_LEVEL") != NULL ? atoi(getenv("FTCC_TEST_LOG_LEVEL")) : 1;
}

/*
 * Four ranks under shrink; rank 1 at its descriptor limit; rank 2 SIGKILLed.
 * Rank 1 must connect to rank 3 and mostly cannot: it ends with FT_EMFILE
 * (the cause that is its own), not FT_EEXCLUDED or a peer's failure (or,
 * when a descriptor its dead link freed comes its way first, it goes on),
 * and ranks 0 and 3 finish every op. Rank 1's abort for its shortage once
 * made them return FT_EMFILE too (in 1 run of 8, in-band).
 */
Test(emfile, a_rank_short_of_descriptors_after_a_kill_says_so, .timeout = 120)
{
	struct tu_job job;
	int expect[64] = {0};
	long end;

	tu_job_init(&job, 4);
	snprintf(marker, sizeof(marker), "%s/rank1-limited", job.dir);
	for (int r = 0; r < 4; r++)
		tu_spawn(&job, r, sum_under_a_limit, NULL, shrink);
	end = tu_now_ms() + 40000;
	cr_assert(tu_wait_file(marker, end), "rank 1 never ran its first op");
	tu_sleep_ms(100);
	kill(job.pids[2], SIGKILL);
	expect[2] = 1;
	tu_wait(&job, 60000, expect);
	for (int r = 0; r < 4; r += 3)
		cr_expect(WIFEXITED(job.status[r]) && WEXITSTATUS(job.status[r]) == 0,
			  "survivor %d: status %#x", r, job.status[r]);
	/* it may also find a descriptor its dead link freed before the thief,
	 * and go on: never another code, an exclusion or a peer's failure */
	cr_expect(WIFEXITED(job.status[1]) &&
		  (WEXITSTATUS(job.status[1]) == 0 || WEXITSTATUS(job.status[1]) == FT_EMFILE),
		  "rank 1 (out of descriptors): status %#x, exit %d (%s), want FT_EMFILE (%d)",
		  job.status[1], WEXITSTATUS(job.status[1]),
		  ft_err_name(-WEXITSTATUS(job.status[1])), FT_EMFILE);
	tu_job_cleanup(&job);
}

/*
 * An opaque I/O error while this process holds every descriptor it may is
 * reported as running out of them (ft__err_probe): libfabric's providers
 * say "Input/output error" for it (campaign seed 20261130, trial 752: a
 * rank out of descriptors left saying only that).
 */
Test(emfile, an_opaque_io_error_without_descriptors_says_so, .timeout = 20)
{
	struct rlimit old, low;
	int fd;

	cr_assert_eq(ft__err_probe(-FT_EIO), -FT_EIO, "descriptors to spare: the error stands");
	cr_assert_eq(ft__err_probe(-FT_EPEERFAILED), -FT_EPEERFAILED);
	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	while ((fd = open("/dev/null", O_RDONLY)) >= 0 && fd < 64)
		;
	low = old;
	low.rlim_cur = (rlim_t)fd + 1;
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	while (open("/dev/null", O_RDONLY) >= 0)
		;
	cr_expect_eq(ft__err_probe(-FT_EIO), -FT_EMFILE);
	cr_expect_eq(ft__err_probe(-FT_ENOSPC), -FT_ENOSPC, "other codes pass as they are");
}
