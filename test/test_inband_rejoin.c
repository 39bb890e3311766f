/* test_inband_rejoin.c: rejoin over in-band membership: a restarted rank finds its job by asking its ranks and is taken back, exactly; one too late, or after the job ended, is told at once; the state goes along chains of newcomers. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include "testutil.h"

static int steps_n = 400;
static bool until_whole;        /* the last step is taken with every rank (grow tests) */

/* A peer list of loopback ports the test holds (testutil.c), no rendezvous
 * in the control plane: every job here is in-band. */
static void inband_job(struct tu_job *job, int n)
{
	setenv("FTCC_TEST_MEMBERSHIP", "inband", 1);
	tu_job_init(job, n);
	unsetenv("FTCC_TEST_MEMBERSHIP");
	cr_assert_neq(job->peers[0], '\0');
}

static int rejoin_timeout_ms = 20000;

static void rejoin(struct ft_config *cfg, int rank)
{
	(void)rank;
	cfg->policy = FT_POLICY_REJOIN;
	cfg->rejoin_timeout_ms = rejoin_timeout_ms;
	cfg->detect_timeout_ms = 500;
}

static void shrink(struct ft_config *cfg, int rank)
{
	(void)rank;
	cfg->policy = FT_POLICY_SHRINK;
	cfg->detect_timeout_ms = 500;
}

static void mark(const char *dir, const char *what, int rank)
{
	char path[400];

	snprintf(path, sizeof(path), "%s/%s-%d", dir, what, rank);
	close(open(path, O_CREAT | O_WRONLY, 0600));
}

/*
 * steps_n in-place allreduces of (rank + 1) * (step + 1), each result
 * checked: a new incarnation resumes at the op ft_rejoined names (op s + 1
 * is step s), so every step's sum is the whole world's. Writes running-R
 * once the job runs, short-R when an op ran with fewer than all, whole-R
 * when a new incarnation ran one with all, last-R when the last step had
 * all, and exits 4 on a wrong sum.
 */
static int steps(struct ft_comm *comm, int rank, int n, void *arg)
{
	const char *dir = arg;
	uint64_t next = 0;
	int first = ft_rejoined(comm, &next) == 1 ? (int)next - 1 : 0;

	mark(dir, "running", rank);
	for (int s = first; s < steps_n; s++) {
		int64_t v = (int64_t)(rank + 1) * (s + 1), want = (int64_t)n * (n + 1) / 2 * (s + 1);
		struct ft_op_info info;
		if (ft_allreduce(comm, FT_IN_PLACE, &v, 1, FT_INT64, FT_SUM, &info) != 0)
			return 2;
		if (info.contributors < n) {
			mark(dir, "short", rank);
			if (s == steps_n - 1 && until_whole) {
				s--; /* the last step waits for the newcomers, however fast the ops */
				usleep(1000);
			}
			continue; /* shrink's lossy sum: not checked */
		}
		if (first > 0)
			mark(dir, "whole", rank);
		if (s == steps_n - 1)
			mark(dir, "last", rank);
		if (v != want) {
			fprintf(stderr, "rank %d step %d: %lld, not %lld\n", rank, s, (long long)v,
				(long long)want);
			return 4;
		}
		tu_sleep_ms(2);
	}
	return 0;
}

/* Until process pid has died whole: its leader a zombie and no thread of
 * it left (its descriptors, its listener among them, are closed only with
 * the last thread: a zombie leader alone once left the port held, and the
 * new incarnation failed to listen). */
static void wait_dead(pid_t pid)
{
	char path[64], task[64], stat[256];

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	snprintf(task, sizeof(task), "/proc/%d/task", (int)pid);
	for (int64_t end = tu_now_ms() + 10000; tu_now_ms() < end; tu_sleep_ms(5)) {
		FILE *f = fopen(path, "r");
		char *p = f != NULL ? fgets(stat, sizeof(stat), f) : NULL;
		DIR *d;
		struct dirent *e;
		int threads = 0;
		if (f != NULL)
			fclose(f);
		p = p != NULL ? strrchr(stat, ')') : NULL;
		if (p != NULL && !(p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X')))
			continue; /* the leader runs */
		if ((d = opendir(task)) != NULL) {
			while ((e = readdir(d)) != NULL)
				threads += e->d_name[0] != '.';
			closedir(d);
		}
		if (threads <= 1)
			return;
	}
	cr_assert_fail("process %d did not die", (int)pid);
}

static void wait_running(const struct tu_job *job, const char *what, int n)
{
	char path[400];

	for (int r = 0; r < n; r++) {
		snprintf(path, sizeof(path), "%s/%s-%d", job->dir, what, r);
		cr_assert(tu_wait_file(path, tu_now_ms() + 30000), "rank %d: no %s", r, what);
	}
}

/* Rank 2 SIGKILLed mid-job and started again on the same port: it finds the
 * job by asking, is taken back in the failure's view, and every step of
 * every rank, its own included, has the whole world's sum. hostile: from
 * before the kill to the end, a stranger holds idle, slow, garbage and reset
 * connections on every membership listener, the new incarnation's as soon
 * as it listens again (while it finds its job and asks back) among them. */
static void comes_back_exactly(bool names, bool hostile)
{
	struct tu_job job;
	int killed[4] = {0, 0, 1, 0};
	int64_t ms;
	char path[400];
	pid_t attacker = -1;

	rejoin_timeout_ms = 20000;
	inband_job(&job, 4);
	if (names) { /* the same ports, by name */
		char named[sizeof(job.peers)] = "";
		for (char *p = job.peers, *q; *p != '\0'; p = *q ? q + 1 : q) {
			q = p + strcspn(p, ",");
			snprintf(named + strlen(named), sizeof(named) - strlen(named), "%slocalhost%.*s",
				 named[0] ? "," : "", (int)(q - strchr(p, ':')), strchr(p, ':'));
		}
		snprintf(job.peers, sizeof(job.peers), "%s", named);
	}
	for (int r = 0; r < 4; r++)
		tu_spawn(&job, r, steps, job.dir, rejoin);
	wait_running(&job, "running", 4);
	if (hostile) {
		uint16_t ports[TU_HOSTILE_PORTS];
		int np = tu_listening_ports(&job, ports);
		cr_assert_eq(np, 4, "found %d membership listeners of 4", np);
		attacker = tu_hostile_start(ports, np);
		tu_sleep_ms(500); /* its idle connections are in place */
	}
	tu_sleep_ms(200);
	kill(job.pids[2], SIGKILL);
	wait_dead(job.pids[2]);
	cr_expect_eq(tu_start_again(&job, 2, 1, rejoin, steps, job.dir, &ms), 0,
		     "the new incarnation failed");
	cr_expect_eq(tu_wait(&job, 60000, killed), 0, "a survivor failed");
	if (hostile)
		cr_expect(tu_hostile_stop(attacker), "the attacker died before the end");
	for (int r = 0; r < 4; r++) {
		snprintf(path, sizeof(path), "%s/short-%d", job.dir, r);
		cr_expect_neq(access(path, F_OK), 0, "rank %d ran an op short of ranks", r);
	}
	tu_job_cleanup(&job);
}

Test(inband_rejoin, a_restarted_rank_comes_back_exactly, .timeout = 120)
{
	comes_back_exactly(false, false);
}

Test(inband_rejoin, a_restarted_rank_comes_back_exactly_among_strangers, .timeout = 120)
{
	comes_back_exactly(false, true);
}

/* The same with a peer list that names the host: a member tells the
 * newcomer the other ranks' listeners as its book writes them and its own
 * by number, one listener written two ways (the newcomer once dropped its
 * live links over it, and gave up) */
Test(inband_rejoin, a_restarted_rank_comes_back_exactly_by_host_name, .timeout = 120)
{
	comes_back_exactly(true, false);
}

/* A new incarnation after its job ended: no rank answers, and its ft_init
 * fails with -FT_EENDED within its window (2 s), not a connect timeout. */
Test(inband_rejoin, a_rank_started_after_its_job_ended_is_told, .timeout = 120)
{
	struct tu_job job;
	int64_t ms;

	rejoin_timeout_ms = 20000;
	inband_job(&job, 3);
	for (int r = 0; r < 3; r++)
		tu_spawn(&job, r, steps, job.dir, rejoin);
	cr_assert_eq(tu_wait(&job, 60000, NULL), 0, "the job failed");
	cr_expect_eq(tu_start_again(&job, 1, 1, rejoin, steps, job.dir, &ms), -FT_EENDED,
		     "the rank started after its job ended was not told");
	cr_expect_lt(ms, 5000, "it took %lld ms", (long long)ms);
	tu_job_cleanup(&job);
}

/*
 * Growing back: the survivors go on without the killed ranks at once (the
 * rejoin timeout 0, or shrink). Their new incarnations, started once the
 * job ran short, find it by asking and are taken in at its next op
 * boundary: each runs steps with every rank in them, exact, and the job's
 * last step has every rank. The survivors are unharmed.
 */
static void grow_back(int n, const int *victims, int nv, void (*policy)(struct ft_config *, int))
{
	struct tu_job job;
	int killed[8] = {0};
	int64_t ms;
	char path[400];

	cr_assert_leq(n, 8);
	rejoin_timeout_ms = 0;
	steps_n = 1500;
	until_whole = true;
	inband_job(&job, n);
	for (int r = 0; r < n; r++)
		tu_spawn(&job, r, steps, job.dir, policy);
	wait_running(&job, "running", n);
	for (int k = 0; k < nv; k++) {
		killed[victims[k]] = 1;
		kill(job.pids[victims[k]], SIGKILL);
	}
	for (int k = 0; k < nv; k++)
		wait_dead(job.pids[victims[k]]);
	snprintf(path, sizeof(path), "%s/short-0", job.dir);
	cr_assert(tu_wait_file(path, tu_now_ms() + 30000), "the survivors never went on");
	/* the newcomers at once, each in a process of its own */
	pid_t np[8];
	for (int k = 0; k < nv; k++) {
		np[k] = fork();
		cr_assert_geq(np[k], 0);
		if (np[k] == 0)
			_exit(tu_start_again(&job, victims[k], 1, policy, steps, job.dir, &ms) == 0 ? 0
												     : 1);
	}
	for (int k = 0; k < nv; k++) {
		int st;
		cr_assert_eq(waitpid(np[k], &st, 0), np[k]);
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			  "rank %d's new incarnation was not taken back, or failed", victims[k]);
		snprintf(path, sizeof(path), "%s/whole-%d", job.dir, victims[k]);
		cr_expect_eq(access(path, F_OK), 0, "rank %d ran no step with every rank",
			     victims[k]);
	}
	cr_expect_eq(tu_wait(&job, 60000, killed), 0, "a survivor failed");
	for (int r = 0; r < n; r++) {
		snprintf(path, sizeof(path), "%s/last-%d", job.dir, r);
		cr_expect_eq(access(path, F_OK), 0, "rank %d's last step had not every rank", r);
	}
	tu_job_cleanup(&job);
	steps_n = 400;
	until_whole = false;
}

Test(inband_rejoin, a_rank_after_the_rejoin_timeout_grows_the_job_back, .timeout = 120)
{
	int victims[1] = {2};

	grow_back(4, victims, 1, rejoin);
}

Test(inband_rejoin, shrink_grows_back_two_of_eight, .timeout = 120)
{
	int victims[2] = {3, 6};

	grow_back(8, victims, 2, shrink);
}

/*
 * The state goes to the newcomers along chains (state.c, route_of): ranks
 * 1, 3 and 4 of 6 SIGKILLed at once and started again, all due at the same
 * op: rank 1 gets the replicated state from rank 0, rank 3 from rank 2 and
 * passes it to rank 4; rank 5 is in no chain and takes no part. Every
 * step's sum depends on the state (each rank adds its st[0]), so a
 * newcomer with a wrong state shows in every rank's sum; each rank writes
 * the digest of its state at the end, and all must agree.
 */
#define CHAIN_WORDS 8192

static void chain_trace(struct ft_config *cfg, int rank, const char *who)
{
	const char *dir = getenv("FTCC_TEST_CHAIN_DIR");

	rejoin(cfg, rank);
	/* no log: every newcomer resumes at the op the job stands at (a
	 * replay would make one due an op later, and the route the whole ring) */
	cfg->log_durability = FT_DURABILITY_NONE;
	snprintf(cfg->trace, sizeof(cfg->trace), "%s/%s.json", dir, who); /* who.<rank>.json */
}

static void chain_first(struct ft_config *cfg, int rank)
{
	chain_trace(cfg, rank, "first");
}

static void chain_new(struct ft_config *cfg, int rank)
{
	chain_trace(cfg, rank, "new");
}

static int chain_steps(struct ft_comm *comm, int rank, int n, void *arg)
{
	const char *dir = arg;
	static uint64_t st[CHAIN_WORDS];
	uint64_t next = 0, h = 1469598103934665603ull;
	char path[400];
	FILE *f;
	int first;

	if (ft_state_register(comm, st, sizeof(st), FT_STATE_REPLICATED) < 0 ||
	    ft_state_sync(comm) != 0)
		return 3;
	first = ft_rejoined(comm, &next) == 1 ? (int)next - 1 : 0;
	mark(dir, "running", rank);
	for (int s = first; s < steps_n; s++) {
		int64_t v = (int64_t)(rank + 1) * (s + 1) + (int64_t)(st[0] & 0xffff);
		int64_t want = (int64_t)n * (n + 1) / 2 * (s + 1) + (int64_t)n * (int64_t)(st[0] & 0xffff);
		if (ft_allreduce(comm, FT_IN_PLACE, &v, 1, FT_INT64, FT_SUM, NULL) != 0)
			return 2;
		if (v != want) {
			fprintf(stderr, "rank %d step %d: %lld, not %lld\n", rank, s, (long long)v,
				(long long)want);
			return 4;
		}
		for (int j = 0; j < CHAIN_WORDS; j++)
			st[j] = st[j] * 6364136223846793005ull + (uint64_t)v + (uint64_t)j;
		tu_sleep_ms(2);
	}
	for (int j = 0; j < CHAIN_WORDS; j++)
		h = (h ^ st[j]) * 1099511628211ull;
	snprintf(path, sizeof(path), "%s/digest-%d", dir, rank);
	if ((f = fopen(path, "w")) == NULL)
		return 5;
	fprintf(f, "%016llx\n", (unsigned long long)h);
	fclose(f);
	return 0;
}

/* The "state" events of a trace file: how many, and the args of the last. */
static int state_events(const char *path, char *args, size_t len)
{
	FILE *f = fopen(path, "r");
	char line[4096];
	int k = 0;

	args[0] = '\0';
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		const char *a;
		if (strstr(line, "\"name\":\"state\"") == NULL || (a = strstr(line, "\"args\":")) == NULL)
			continue;
		snprintf(args, len, "%s", a);
		k++;
	}
	fclose(f);
	return k;
}

Test(inband_rejoin, the_state_goes_along_chains_of_newcomers, .timeout = 120)
{
	struct tu_job job;
	const int victims[3] = {1, 3, 4};
	int killed[6] = {0, 1, 0, 1, 1, 0};
	char path[400], args[512], digest[6][32];
	pid_t np[3];
	int64_t ms;

	rejoin_timeout_ms = 20000;
	steps_n = 300;
	inband_job(&job, 6);
	setenv("FTCC_TEST_CHAIN_DIR", job.dir, 1);
	for (int r = 0; r < 6; r++)
		tu_spawn(&job, r, chain_steps, job.dir, chain_first);
	wait_running(&job, "running", 6);
	tu_sleep_ms(100);
	for (int k = 0; k < 3; k++)
		kill(job.pids[victims[k]], SIGKILL);
	for (int k = 0; k < 3; k++)
		wait_dead(job.pids[victims[k]]);
	for (int k = 0; k < 3; k++) {
		np[k] = fork();
		cr_assert_geq(np[k], 0);
		if (np[k] == 0)
			_exit(tu_start_again(&job, victims[k], 1, chain_new, chain_steps, job.dir,
					     &ms) == 0 ? 0 : 1);
	}
	for (int k = 0; k < 3; k++) {
		int st;
		cr_assert_eq(waitpid(np[k], &st, 0), np[k]);
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			  "rank %d's new incarnation failed", victims[k]);
	}
	cr_expect_eq(tu_wait(&job, 60000, killed), 0, "a survivor failed");
	unsetenv("FTCC_TEST_CHAIN_DIR");
	for (int r = 0; r < 6; r++) {
		FILE *f;
		snprintf(path, sizeof(path), "%s/digest-%d", job.dir, r);
		f = fopen(path, "r");
		cr_assert_not_null(f, "rank %d wrote no digest", r);
		cr_assert_not_null(fgets(digest[r], sizeof(digest[r]), f));
		fclose(f);
		cr_expect_str_eq(digest[r], digest[0], "rank %d's state differs from rank 0's", r);
	}
	/* who took part: roots 0 and 2, the newcomers; not rank 5 */
	snprintf(path, sizeof(path), "%s/first.5.json", job.dir);
	cr_expect_eq(state_events(path, args, sizeof(args)), 0, "rank 5 took part: %s", args);
	snprintf(path, sizeof(path), "%s/first.0.json", job.dir);
	cr_expect_geq(state_events(path, args, sizeof(args)), 1); /* (again if the op ran again) */
	cr_expect(strstr(args, "\"root\": 0, \"span\": 1") != NULL, "rank 0: %s", args);
	snprintf(path, sizeof(path), "%s/first.2.json", job.dir);
	cr_expect_geq(state_events(path, args, sizeof(args)), 1); /* (again if the op ran again) */
	cr_expect(strstr(args, "\"root\": 2, \"span\": 2") != NULL, "rank 2: %s", args);
	snprintf(path, sizeof(path), "%s/new.4.json", job.dir);
	cr_expect_geq(state_events(path, args, sizeof(args)), 1); /* (again if the op ran again) */
	cr_expect(strstr(args, "\"root\": 2, \"span\": 2") != NULL, "rank 4: %s", args);
	tu_job_cleanup(&job);
	steps_n = 400;
	until_whole = false;
}
