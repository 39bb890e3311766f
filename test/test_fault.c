/* test_fault.c: FTCC_FAULT injection at every phase and first/middle/last step, under the abort policy. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include "fault.h"
#include "testutil.h"

struct fault_case {
	int n, victim;
	char spec[200];
	int expect;             /* what survivors must return */
	int op_timeout_ms;
	char dir[256];          /* the job's directory: each rank writes its outcome there */
};

/* What a rank saw: the op that failed (its op_seq, as FTCC_FAULT counts), its error, and when it started and
 * returned (CLOCK_MONOTONIC microseconds: one clock for every process). */
struct outcome {
	int op, rc;
	long long t0_us, t1_us;
};

static long long now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

static void write_outcome(const char *dir, int rank, const struct outcome *o)
{
	char path[400];
	FILE *f;

	snprintf(path, sizeof(path), "%s/outcome-%d", dir, rank);
	f = fopen(path, "w");
	if (f != NULL) {
		fprintf(f, "%d %d %lld %lld\n", o->op, o->rc, o->t0_us, o->t1_us);
		fclose(f);
	}
}

static int read_outcome(const char *dir, int rank, struct outcome *o)
{
	char path[400];
	FILE *f;
	int got;

	snprintf(path, sizeof(path), "%s/outcome-%d", dir, rank);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	got = fscanf(f, "%d %d %lld %lld", &o->op, &o->rc, &o->t0_us, &o->t1_us);
	fclose(f);
	return got == 4 ? 0 : -1;
}

static struct fault_case current;

static void apply_fault(struct ft_config *cfg, int rank)
{
	if (rank == current.victim)
		snprintf(cfg->fault, sizeof(cfg->fault), "%s", current.spec);
	cfg->op_timeout_ms = current.op_timeout_ms;
	/* the ring's phases: 800 KB at 4 ranks would run by recursive halving */
	setenv("FTCC_ALGORITHM", "ring", 1);
}

/* Every rank allreduces until the fault strikes; survivors must see the expected error. */
static int run_until_error(struct ft_comm *comm, int rank, int n, void *arg)
{
	const struct fault_case *fc = arg;
	size_t count = 200003;
	float *buf = malloc(count * sizeof(float));
	(void)n;
	for (int it = 0; it < 50; it++) {
		for (size_t i = 0; i < count; i++)
			buf[i] = 1;
		struct ft_op_info info = {0};
		long long t0 = now_us();
		int rc = ft_allreduce(comm, FT_IN_PLACE, buf, count, FT_FLOAT32, FT_SUM, &info);
		struct outcome o = {.op = (int)info.op_seq, .rc = rc, .t0_us = t0, .t1_us = now_us()};
		if (rc == 0)
			continue;
		write_outcome(fc->dir, rank, &o);
		if (rc != fc->expect && !(rank == fc->victim && rc == -FT_EPEERFAILED)) {
			fprintf(stderr, "rank %d: %s, want %s\n", rank, ft_err_name(rc),
				ft_err_name(fc->expect));
			return 1;
		}
		free(buf);
		return 0;
	}
	fprintf(stderr, "rank %d: the fault never struck\n", rank);
	return 2;
}

static void run_case(int n, int victim, const char *spec, int expect_killed, int expect,
		     int op_timeout_ms)
{
	struct tu_job job;
	int killed[64] = {0};

	current = (struct fault_case){.n = n, .victim = victim, .expect = expect,
				      .op_timeout_ms = op_timeout_ms};
	snprintf(current.spec, sizeof(current.spec), "%s", spec);
	tu_job_init(&job, n);
	snprintf(current.dir, sizeof(current.dir), "%s", job.dir);
	for (int r = 0; r < n; r++)
		tu_spawn(&job, r, run_until_error, &current, apply_fault);
	killed[victim] = expect_killed;
	int bad = tu_wait(&job, 20000, killed);
	if (expect_killed)
		cr_expect(job.status[victim] != -1 && WIFSIGNALED(job.status[victim]) &&
				  WTERMSIG(job.status[victim]) == SIGKILL,
			  "%s: the victim was not killed", spec);
	cr_assert_eq(bad, 0, "%s (n=%d): a survivor failed or hung", spec, n);
	tu_job_cleanup(&job);
}

/* count 200003 with 256 KiB segments: n=4 chunks of 50001 floats, one segment each. */
Test(fault, kill_at_every_phase_and_step, .timeout = 240)
{
	static const char *phases[] = {"reduce_scatter", "allgather"};
	for (int n = 3; n <= 4; n++) {
		for (int p = 0; p < 2; p++) {
			int steps[] = {0, (n - 1) / 2, n - 2};
			for (int s = 0; s < 3; s++) {
				char spec[160];
				int victim = (p * 3 + s + n) % n;
				snprintf(spec, sizeof(spec), "rank=%d,op=%d,phase=%s,step=%d,seg=0",
					 victim, 2 + s, phases[p], steps[s]);
				run_case(n, victim, spec, 1, -FT_EPEERFAILED, 0);
			}
		}
	}
}

Test(fault, kill_between_ops, .timeout = 60)
{
	run_case(4, 0, "rank=0,op=3,phase=between", 1, -FT_EPEERFAILED, 0);
	run_case(5, 4, "rank=4,op=1", 1, -FT_EPEERFAILED, 0);
}

Test(fault, drop_links, .timeout = 60)
{
	run_case(4, 2, "rank=2,op=2,phase=allgather,step=1,seg=0,action=drop", 0, -FT_EPEERFAILED, 0);
}

/*
 * A hung rank, with no heartbeat yet: the op timeout fails every survivor
 * with -FT_ETIMEDOUT in the op the victim hangs in, no hang. The timeout
 * counts from a collective's last event, so no survivor can fail before
 * the earliest survivor's op began + timeout. The first survivor to time
 * out closes its links; the other sees that as an event (its sends were
 * done), which restarts its clock: it may wait a second timeout. So for
 * every survivor s:
 *   earliest start + timeout <= s's return <= s's start + 2 timeouts + slack,
 * the slack covering the op's work before it stalls and a loaded machine
 * (2 cores, 8 ranks, other tests): seconds, against a timeout that never
 * fires (the survivors would wait for the test's deadline) or fires early.
 */
#define HANG_TIMEOUT_MS 2000
#define HANG_SLACK_MS 5000

Test(fault, hang_caught_by_op_timeout, .timeout = 60)
{
	struct tu_job job;
	int killed[64] = {0}, survivors[] = {0, 2};
	struct outcome o[3];
	long long first_start = 0;

	current = (struct fault_case){.n = 3, .victim = 1, .expect = -FT_ETIMEDOUT,
				      .op_timeout_ms = HANG_TIMEOUT_MS};
	snprintf(current.spec, sizeof(current.spec), "rank=1,op=2,phase=reduce_scatter,step=1,seg=0,action=hang");
	tu_job_init(&job, 3);
	snprintf(current.dir, sizeof(current.dir), "%s", job.dir);
	for (int r = 0; r < 3; r++)
		tu_spawn(&job, r, run_until_error, &current, apply_fault);
	killed[1] = 1; /* hangs by design; killed once the survivors are done */
	long t0 = tu_now_ms();
	while (tu_now_ms() - t0 < 30000) {
		int st, left = 0;
		for (int k = 0; k < 2; k++) {
			int r = survivors[k];
			if (job.pids[r] <= 0)
				continue;
			if (waitpid(job.pids[r], &st, WNOHANG) == job.pids[r]) {
				job.status[r] = st;
				job.pids[r] = 0;
			} else {
				left++;
			}
		}
		if (left == 0)
			break;
		tu_sleep_ms(10);
	}
	int vst = 0;
	pid_t vp = waitpid(job.pids[1], &vst, WNOHANG);
	cr_expect_eq(vp, 0, "the hung rank exited on its own (status %d)", vst);
	if (vp == job.pids[1]) {
		job.pids[1] = 0;
		job.status[1] = vst;
	} else {
		kill(job.pids[1], SIGKILL);
	}
	cr_assert_eq(tu_wait(&job, 5000, killed), 0, "a survivor failed or hung");
	for (int k = 0; k < 2; k++) {
		int r = survivors[k];
		cr_assert_eq(read_outcome(job.dir, r, &o[r]), 0, "no outcome from rank %d", r);
		cr_assert_eq(o[r].op, 2, "rank %d failed at op %d, the hang is in op 2", r, o[r].op);
		cr_assert_eq(o[r].rc, -FT_ETIMEDOUT, "rank %d: %s, want FT_ETIMEDOUT", r,
			     ft_err_name(o[r].rc));
		if (k == 0 || o[r].t0_us < first_start)
			first_start = o[r].t0_us;
	}
	for (int k = 0; k < 2; k++) {
		int r = survivors[k];
		long long since_first = (o[r].t1_us - first_start) / 1000;
		long long own = (o[r].t1_us - o[r].t0_us) / 1000;
		fprintf(stderr, "fault.hang: rank %d timed out %lld ms after its op began, %lld ms after the first\n",
			r, own, since_first);
		/* the library counts whole milliseconds: 1 ms of rounding */
		cr_assert_geq(since_first, HANG_TIMEOUT_MS - 1,
			      "rank %d timed out %lld ms after the op began, before the %d ms timeout",
			      r, since_first, HANG_TIMEOUT_MS);
		cr_assert_leq(own, 2 * HANG_TIMEOUT_MS + HANG_SLACK_MS,
			      "rank %d returned %lld ms after its op began: the %d ms timeout is late", r,
			      own, HANG_TIMEOUT_MS);
	}
	tu_job_cleanup(&job);
}

Test(fault, parse)
{
	struct ft__fault f;
	char err[400];

	cr_assert_eq(ft__fault_parse("", &f, err, sizeof(err)), 0);
	cr_assert(!f.armed);
	cr_assert_eq(ft__fault_parse("rank=2,op=10,phase=reduce_scatter,step=1,seg=3,action=hang", &f,
				     err, sizeof(err)), 0);
	cr_assert(f.armed && f.n == 1 && f.pt[0].rank == 2 && f.pt[0].op == 10 &&
		  f.pt[0].phase == FT__PHASE_REDUCE_SCATTER && f.pt[0].step == 1 && f.pt[0].seg == 3 &&
		  f.pt[0].action == FT__FAULT_HANG);
	cr_assert(!ft__fault_due(&f, 1, 0, 10, FT__PHASE_REDUCE_SCATTER, 1, 3, FT__AT_SEND));
	cr_assert(!ft__fault_due(&f, 2, 0, 10, FT__PHASE_REDUCE_SCATTER, 1, 2, FT__AT_SEND));
	cr_assert(ft__fault_due(&f, 2, 0, 10, FT__PHASE_REDUCE_SCATTER, 1, 3, FT__AT_SEND));
	cr_assert(!ft__fault_due(&f, 2, 0, 10, FT__PHASE_REDUCE_SCATTER, 1, 3, FT__AT_SEND), "fires once");
	cr_assert(!f.armed);
	/* two points; the one of another incarnation is disarmed */
	cr_assert_eq(ft__fault_parse("rank=1,op=3;rank=1,op=3,phase=allgather,inc=1", &f, err,
				     sizeof(err)), 0);
	cr_assert_eq(f.n, 2);
	ft__fault_incarnation(&f, 1);
	cr_assert(f.armed && !f.pt[0].armed && f.pt[1].armed);
	cr_assert(!ft__fault_due(&f, 1, 0, 3, FT__PHASE_BETWEEN, 0, 0, FT__AT_SEND));
	cr_assert(ft__fault_due(&f, 1, 0, 3, FT__PHASE_ALLGATHER, 0, 0, FT__AT_SEND) == &f.pt[1]);
	/* fail: ft_init's points only */
	cr_assert_eq(ft__fault_parse("rank=1,phase=connect,action=fail", &f, err, sizeof(err)), 0);
	cr_assert(f.pt[0].action == FT__FAULT_FAIL && f.pt[0].phase == FT__PHASE_CONNECT);
	cr_assert_eq(ft__fault_parse("rank=1;rank=2;rank=3;rank=4;rank=5", &f, err, sizeof(err)),
		     -FT_ECONFIG, "at most four");
	static const char *bad[] = {"op=1", "rank=x", "rank=1,phase=sideways", "rank=1,action=explode",
				    "rank=1,op=-1", "rank=1,step", "rank=1,color=red", "rank=1,,op=2",
				    "rank=99999999999", "rank=1,action=fail",
				    "rank=1,op=2,phase=allgather,action=fail"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(ft__fault_parse(bad[i], &f, err, sizeof(err)), -FT_ECONFIG, "%s", bad[i]);
		cr_assert(strstr(err, "FTCC_FAULT") != NULL);
		cr_assert(!f.armed);
	}
	setenv("FTCC_RANK", "0", 1);
	setenv("FTCC_WORLD_SIZE", "1", 1);
	setenv("FTCC_FAULT", "rank=1,phase=nowhere", 1);
	struct ft_config cfg;
	cr_assert_eq(ft_config_from_env(&cfg, err, sizeof(err)), -FT_ECONFIG);
	cr_assert(strstr(err, "FTCC_FAULT") != NULL, "%s", err);
}
