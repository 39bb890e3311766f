/* test_fault.c: FTCC_FAULT injection at every phase and first/middle/last step, under the abort policy. */
#include <criterion/criterion.h>

#include "fault.h"
#include "testutil.h"

struct fault_case {
	int n, victim;
	char spec[200];
	int expect;             /* what survivors must return */
	int op_timeout_ms;
};

static struct fault_case current;

static void apply_fault(struct ft_config *cfg, int rank)
{
	if (rank == current.victim)
		snprintf(cfg->fault, sizeof(cfg->fault), "%s", current.spec);
	cfg->op_timeout_ms = current.op_timeout_ms;
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
		int rc = ft_allreduce(comm, FT_IN_PLACE, buf, count, FT_FLOAT32, FT_SUM, NULL);
		if (rc == 0)
			continue;
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

/* A hung rank, with no heartbeat yet: the op timeout fails every survivor, no hang. */
Test(fault, hang_caught_by_op_timeout, .timeout = 60)
{
	struct tu_job job;
	int killed[64] = {0};

	current = (struct fault_case){.n = 3, .victim = 1, .expect = -FT_ETIMEDOUT,
				      .op_timeout_ms = 1500};
	snprintf(current.spec, sizeof(current.spec), "rank=1,op=2,phase=reduce_scatter,step=1,seg=0,action=hang");
	tu_job_init(&job, 3);
	for (int r = 0; r < 3; r++)
		tu_spawn(&job, r, run_until_error, &current, apply_fault);
	killed[1] = 1; /* hangs by design; tu_wait kills it */
	long t0 = tu_now_ms();
	/* Survivors must be done well before the victim's deadline. */
	while (tu_now_ms() - t0 < 15000) {
		int st, left = 0;
		for (int r = 0; r < 3; r++)
			if (r != 1 && job.pids[r] > 0) {
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
	kill(job.pids[1], SIGKILL);
	cr_assert_eq(tu_wait(&job, 5000, killed), 0, "a survivor failed or hung");
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
	cr_assert(f.armed && f.rank == 2 && f.op == 10 && f.phase == FT__PHASE_REDUCE_SCATTER &&
		  f.step == 1 && f.seg == 3 && f.action == FT__FAULT_HANG);
	cr_assert(!ft__fault_due(&f, 1, 10, FT__PHASE_REDUCE_SCATTER, 1, 3));
	cr_assert(!ft__fault_due(&f, 2, 10, FT__PHASE_REDUCE_SCATTER, 1, 2));
	cr_assert(ft__fault_due(&f, 2, 10, FT__PHASE_REDUCE_SCATTER, 1, 3));
	cr_assert(!ft__fault_due(&f, 2, 10, FT__PHASE_REDUCE_SCATTER, 1, 3), "fires once");
	static const char *bad[] = {"op=1", "rank=x", "rank=1,phase=sideways", "rank=1,action=explode",
				    "rank=1,op=-1", "rank=1,step", "rank=1,color=red", "rank=1,,op=2",
				    "rank=99999999999"};
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
