/* test_shrink.c: the shrink policy: ranks killed (from outside, at injection points, hung) mid-job; survivors finish every op exactly. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include <math.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "testutil.h"

/*
 * Every rank runs ops allreduces (alternating int64 sum, float64 average,
 * in place and out of place). The input of op i on original rank m is
 * (m+1)*1000 + (i%7)*10 + j%13 at element j, so the exact result over the
 * members reported after the call is known. A rank stops once it has run
 * min_ops ops, the job has lost expect_lost ranks, and it has run at least
 * after_ops ops since the last membership change (the survivors see
 * changes at the same op, so they stop together); with hold, only once the
 * test has created <dir>/release (the members agree on it through an
 * allreduce). So a job that is to lose ranks runs until it has: a kill
 * that comes at any time after the ranks have started their ops lands
 * mid-job. A rank creates <dir>/running-<orig> after its first op and
 * <dir>/gen<g>-<orig> when it enters generation g; at the end it writes
 * "size generation ops rc root_failed" to <dir>/result-<orig>.
 */
struct scenario {
	int n;
	size_t count;
	int min_ops, after_ops;
	int kind;               /* 0 allreduce, 1 broadcast, 2 barrier + allreduce,
				 * 3 reduce-scatter + allgather (count: a block's) */
	char fault[200];
	int fault_rank;
	int expect_lost;        /* ranks the job loses before it may stop */
	int hold;               /* 1: the members stop only once <dir>/release exists */
	int detect_ms;          /* silence timeout; 0: the library's default */
	int heartbeat_ms;       /* 0: detect_ms / 10 */
	int pause_us;           /* between ops: fewer, longer ops, so that recovery meets more states */
	int rejoin_ms;          /* > 0: policy rejoin, awaiting the lost this long (none comes back) */
	bool fault_all;         /* the fault spec goes to every rank (each point names its own) */
	const char *algorithm;  /* FTCC_ALGORITHM; NULL: unset */
	char dir[256];
};

static struct scenario sc;

static void tweak(struct ft_config *cfg, int rank)
{
	cfg->policy = sc.rejoin_ms > 0 ? FT_POLICY_REJOIN : FT_POLICY_SHRINK;
	if (sc.rejoin_ms > 0)
		cfg->rejoin_timeout_ms = sc.rejoin_ms;
	/* warnings by default: a declaration on a rank's own evidence shows */
	cfg->log_level = getenv("FTCC_TEST_LOG") ? atoi(getenv("FTCC_TEST_LOG")) : 1;
	if (sc.detect_ms > 0) {
		cfg->detect_timeout_ms = sc.detect_ms;
		cfg->heartbeat_ms = sc.heartbeat_ms > 0 ? sc.heartbeat_ms
				    : sc.detect_ms / 10 > 0 ? sc.detect_ms / 10 : 1;
	}
	if (sc.fault[0] != '\0' && (rank == sc.fault_rank || sc.fault_all))
		snprintf(cfg->fault, sizeof(cfg->fault), "%s", sc.fault);
	if (sc.algorithm != NULL)
		setenv("FTCC_ALGORITHM", sc.algorithm, 1);
}

static double input(int orig, int i, size_t j)
{
	return (orig + 1) * 1000.0 + (i % 7) * 10.0 + (double)(j % 13);
}

/* Checks op i's result against the members after the call; 0 if exact. */
static int check_allreduce(struct ft_comm *comm, int i, const void *out, int is_avg,
			   const struct ft_op_info *info)
{
	int size = ft_size(comm);
	double members = 0;

	for (int k = 0; k < size; k++)
		members += (ft_orig_rank(comm, k) + 1) * 1000.0;
	if (info->contributors != size || info->generation != ft_generation(comm)) {
		fprintf(stderr, "op %d: info says %d contributors, generation %u; comm says %d, %u\n",
			i, info->contributors, info->generation, size, ft_generation(comm));
		return 1;
	}
	for (size_t j = 0; j < sc.count; j++) {
		double want = members + size * ((i % 7) * 10.0 + (double)(j % 13));
		if (is_avg) {
			double got = ((const double *)out)[j];
			if (fabs(got - want / size) > 1e-9 * want) {
				fprintf(stderr, "op %d: element %zu is %.17g, want %.17g over %d ranks\n",
					i, j, got, want / size, size);
				return 1;
			}
		} else if (((const int64_t *)out)[j] != (int64_t)want) {
			fprintf(stderr, "op %d: element %zu is %lld, want %lld over %d ranks\n", i, j,
				(long long)((const int64_t *)out)[j], (long long)want, size);
			return 1;
		}
	}
	return 0;
}

static int one_allreduce(struct ft_comm *comm, int orig, int i, void *in, void *out)
{
	struct ft_op_info info;
	int is_avg = i % 2 == 1, in_place = i % 3 == 0, rc;
	void *dst = in_place ? in : out;

	for (size_t j = 0; j < sc.count; j++) {
		if (is_avg)
			((double *)in)[j] = input(orig, i, j);
		else
			((int64_t *)in)[j] = (int64_t)input(orig, i, j);
	}
	rc = ft_allreduce(comm, in_place ? FT_IN_PLACE : in, dst, sc.count,
			  is_avg ? FT_FLOAT64 : FT_INT64, is_avg ? FT_AVG : FT_SUM, &info);
	if (rc != 0) {
		fprintf(stderr, "rank %d op %d: %s\n", orig, i, ft_strerror(rc));
		return rc;
	}
	return check_allreduce(comm, i, dst, is_avg, &info) ? -FT_ECORRUPT : 0;
}

/*
 * Reduce-scatter (even i: int64 sum, or float64 average every other time)
 * and allgather (odd i: int64), in place when i % 3 == 0. Blocks are those
 * of the members before the call; after it, ft_size() says whose inputs
 * the result holds: this rank's reduced block must be exact over them, and
 * every block of theirs gathered; a lost member's block is not looked at.
 * Element j of block b of rank m's input: input(m, i, b * count + j).
 */
static int one_blocks(struct ft_comm *comm, int orig, int i, void *in, void *out)
{
	int n0 = ft_size(comm), me = ft_rank(comm), members0[64], size, rc;
	int gather = i % 2 == 1, is_avg = !gather && i % 4 == 2, in_place = i % 3 == 0;
	size_t bc = sc.count, total = bc * (size_t)n0;
	void *src = in_place ? out : in;
	struct ft_op_info info;

	for (int k = 0; k < n0; k++)
		members0[k] = ft_orig_rank(comm, k);
	if (gather) {
		int64_t *own = in_place ? (int64_t *)out + (size_t)me * bc : in;
		for (size_t j = 0; j < bc; j++)
			own[j] = (int64_t)input(orig, i, (size_t)me * bc + j);
		rc = ft_allgather(comm, in_place ? FT_IN_PLACE : in, out, bc, FT_INT64, &info);
	} else {
		for (size_t j = 0; j < total; j++) {
			if (is_avg)
				((double *)src)[j] = input(orig, i, j);
			else
				((int64_t *)src)[j] = (int64_t)input(orig, i, j);
		}
		rc = ft_reduce_scatter(comm, in_place ? FT_IN_PLACE : in, out, bc,
				       is_avg ? FT_FLOAT64 : FT_INT64, is_avg ? FT_AVG : FT_SUM, &info);
	}
	if (rc != 0) {
		fprintf(stderr, "rank %d op %d (%s): %s\n", orig, i,
			gather ? "allgather" : "reduce-scatter", ft_strerror(rc));
		return rc;
	}
	size = ft_size(comm);
	if (info.contributors != size || info.generation != ft_generation(comm) ||
	    info.failed != n0 - size) {
		fprintf(stderr, "op %d: info says %d contributors, %d failed, generation %u; comm "
			"says %d of %d, %u\n", i, info.contributors, info.failed, info.generation,
			size, n0, ft_generation(comm));
		return -FT_ECORRUPT;
	}
	if (gather) {
		for (int b = 0; b < n0; b++) {
			bool alive = false;
			for (int k = 0; k < size; k++)
				alive |= ft_orig_rank(comm, k) == members0[b];
			for (size_t j = 0; alive && j < bc; j++) {
				int64_t want = (int64_t)input(members0[b], i, (size_t)b * bc + j);
				int64_t got = ((const int64_t *)out)[(size_t)b * bc + j];
				if (got != want) {
					fprintf(stderr, "op %d: allgather block %d (rank %d) [%zu] is %lld, "
						"want %lld\n", i, b, members0[b], j, (long long)got,
						(long long)want);
					return -FT_ECORRUPT;
				}
			}
		}
		return 0;
	}
	const char *mine = in_place ? (const char *)out + (size_t)me * bc * 8 : out;
	for (size_t j = 0; j < bc; j++) {
		double want = 0;
		for (int k = 0; k < size; k++)
			want += input(ft_orig_rank(comm, k), i, (size_t)me * bc + j);
		if (is_avg ? fabs(((const double *)mine)[j] - want / size) > 1e-9 * want
			   : ((const int64_t *)mine)[j] != (int64_t)want) {
			fprintf(stderr, "op %d: reduce-scatter block %d [%zu] is %.17g, want %.17g over "
				"%d ranks\n", i, me, j,
				is_avg ? ((const double *)mine)[j] : (double)((const int64_t *)mine)[j],
				is_avg ? want / size : want, size);
			return -FT_ECORRUPT;
		}
	}
	return 0;
}

/* Broadcast from original rank 1 while it lives, then from dense rank 0. */
static int one_broadcast(struct ft_comm *comm, int orig, int i, unsigned char *buf, int *root_orig)
{
	int root = -1, rc;
	struct ft_op_info info;

	for (int k = 0; k < ft_size(comm); k++)
		if (ft_orig_rank(comm, k) == *root_orig)
			root = k;
	if (root < 0) {
		root = 0;
		*root_orig = ft_orig_rank(comm, 0);
	}
	for (size_t j = 0; j < sc.count; j++)
		buf[j] = orig == *root_orig ? (unsigned char)(i * 31 + j * 7) : 0xee;
	rc = ft_broadcast(comm, buf, sc.count, root, &info);
	if (rc == -FT_EROOTFAILED) {
		for (int k = 0; k < ft_size(comm); k++)
			if (ft_orig_rank(comm, k) == *root_orig) {
				fprintf(stderr, "op %d: root failed, but rank %d is a member\n", i,
					*root_orig);
				return rc;
			}
		return 1; /* the caller counts these */
	}
	if (rc != 0) {
		fprintf(stderr, "rank %d broadcast %d: %s\n", orig, i, ft_strerror(rc));
		return rc;
	}
	for (size_t j = 0; j < sc.count; j++)
		if (buf[j] != (unsigned char)(i * 31 + j * 7)) {
			fprintf(stderr, "rank %d broadcast %d: byte %zu wrong\n", orig, i, j);
			return -FT_ECORRUPT;
		}
	return 0;
}

static void mark(const char *name, int orig)
{
	char path[400];

	snprintf(path, sizeof(path), "%s/%s-%d", sc.dir, name, orig);
	close(open(path, O_CREAT | O_WRONLY, 0600));
}

/* Whether the test has released the job, as every member sees it (hold only). */
static bool released(struct ft_comm *comm, int orig, int *rc)
{
	char path[400];
	int32_t v;

	if (!sc.hold)
		return true;
	snprintf(path, sizeof(path), "%s/release", sc.dir);
	v = access(path, F_OK) == 0;
	*rc = ft_allreduce(comm, FT_IN_PLACE, &v, 1, FT_INT32, FT_MAX, NULL);
	if (*rc != 0)
		fprintf(stderr, "rank %d hold: %s\n", orig, ft_strerror(*rc));
	return v != 0;
}

static int worker(struct ft_comm *comm, int orig, int n, void *arg)
{
	size_t bytes = sc.count * 8 * (sc.kind == 3 ? (size_t)n : 1) + 8;
	void *in = malloc(bytes), *out = malloc(bytes);
	uint32_t gen = ft_generation(comm);
	/* a rank lost in ft_init changed the membership before op 0 */
	int changed_at = gen > 0 ? 0 : -1, root_orig = 1, root_failed = 0, i, rc = 0;
	char path[400];
	FILE *f;

	(void)arg;
	for (i = 0; i < 1000000; i++) {
		if (i >= sc.min_ops && n - ft_size(comm) >= sc.expect_lost &&
		    (changed_at < 0 || i - changed_at >= sc.after_ops) &&
		    (released(comm, orig, &rc) || rc != 0))
			break;
		if (sc.kind == 3) {
			rc = one_blocks(comm, orig, i, in, out);
		} else if (sc.kind == 1) {
			rc = one_broadcast(comm, orig, i, in, &root_orig);
			if (rc == 1) {
				root_failed++;
				rc = 0;
			}
		} else {
			if (sc.kind == 2 && i % 2 == 0)
				rc = ft_barrier(comm);
			if (rc == 0)
				rc = one_allreduce(comm, orig, i, in, out);
		}
		if (rc != 0)
			break;
		if (i == 0)
			mark("running", orig);
		if (sc.pause_us > 0)
			usleep((useconds_t)sc.pause_us);
		if (ft_generation(comm) != gen) {
			char name[32];
			gen = ft_generation(comm);
			changed_at = i;
			snprintf(name, sizeof(name), "gen%u", gen);
			mark(name, orig);
		}
	}
	snprintf(path, sizeof(path), "%s/result-%d", sc.dir, orig);
	f = fopen(path, "w");
	if (f != NULL) {
		fprintf(f, "%d %u %d %d %d\n", ft_size(comm), ft_generation(comm), i, rc, root_failed);
		fclose(f);
	}
	free(in);
	free(out);
	return rc == 0 ? 0 : (rc == -FT_EEXCLUDED ? 42 : 1);
}

struct outcome {
	int size;
	unsigned gen;
	int ops, rc, root_failed;
};

static int read_outcome(int orig, struct outcome *o)
{
	char path[400];
	FILE *f;
	int got;

	snprintf(path, sizeof(path), "%s/result-%d", sc.dir, orig);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	got = fscanf(f, "%d %u %d %d %d", &o->size, &o->gen, &o->ops, &o->rc, &o->root_failed);
	fclose(f);
	return got == 5 ? 0 : -1;
}

static bool was_killed(const struct tu_job *job, int r)
{
	return WIFSIGNALED(job->status[r]) && WTERMSIG(job->status[r]) == SIGKILL;
}

/* Waits until every rank not in skip has created <dir>/<name>-<rank>; false at the deadline. */
static bool wait_marks(const char *name, const int *skip, long deadline_ms)
{
	long end = tu_now_ms() + deadline_ms;

	for (int r = 0; r < sc.n; r++) {
		char path[400];
		if (skip != NULL && skip[r])
			continue;
		snprintf(path, sizeof(path), "%s/%s-%d", sc.dir, name, r);
		if (!tu_wait_file(path, end))
			return false;
	}
	return true;
}

/*
 * Runs a scenario: act() kills ranks once all have finished their first
 * op (the job runs until it has lost sc.expect_lost ranks, so every kill
 * lands mid-job). Then checks that exactly sc.expect_lost ranks were
 * killed, every other rank finished with rc 0, and all of them report the
 * same size (n minus the killed), generation and number of ops. Returns
 * the number of ranks the survivors lost.
 */
static int run_scenario(void (*act)(struct tu_job *, void *), void *arg, long deadline_ms,
			const char *what)
{
	struct tu_job job;
	int maybe_killed[64], killed = 0, first = -1;
	struct outcome ref = {0};

	tu_job_init(&job, sc.n);
	snprintf(sc.dir, sizeof(sc.dir), "%s", job.dir);
	for (int r = 0; r < sc.n; r++)
		tu_spawn(&job, r, worker, NULL, tweak);
	/* a rank a fault kills inside ft_init never gets through it */
	for (int r = 0; r < sc.n; r++)
		maybe_killed[r] = strstr(sc.fault, "phase=connect") != NULL && r == sc.fault_rank;
	cr_assert(wait_marks("ready", maybe_killed, 30000), "%s: ranks never got through ft_init",
		  what);
	if (act != NULL) {
		cr_assert(wait_marks("running", NULL, 30000), "%s: ranks never ran their first op", what);
		act(&job, arg);
	}
	for (int r = 0; r < sc.n; r++)
		maybe_killed[r] = 1;
	int bad = tu_wait(&job, deadline_ms, maybe_killed);
	for (int r = 0; r < sc.n; r++)
		if (job.status[r] == -1)
			bad++;
	cr_assert_eq(bad, 0, "%s: a rank hung past the deadline", what);
	for (int r = 0; r < sc.n; r++)
		killed += was_killed(&job, r);
	cr_assert_eq(killed, sc.expect_lost, "%s: %d ranks killed, want %d", what, killed,
		     sc.expect_lost);
	for (int r = 0; r < sc.n; r++) {
		struct outcome o;
		if (was_killed(&job, r))
			continue;
		cr_assert(WIFEXITED(job.status[r]) && WEXITSTATUS(job.status[r]) == 0,
			  "%s: survivor %d failed (status %d)", what, r,
			  WIFEXITED(job.status[r]) ? WEXITSTATUS(job.status[r]) : -1);
		cr_assert_eq(read_outcome(r, &o), 0, "%s: no outcome from rank %d", what, r);
		if (first < 0) {
			first = r;
			ref = o;
		}
		cr_assert(o.size == ref.size && o.gen == ref.gen && o.ops == ref.ops &&
				  o.root_failed == ref.root_failed,
			  "%s: rank %d ends with size %d gen %u ops %d, rank %d with %d %u %d", what, r,
			  o.size, o.gen, o.ops, first, ref.size, ref.gen, ref.ops);
	}
	cr_assert_eq(ref.size, sc.n - killed, "%s: %d ranks killed but the survivors are %d of %d",
		     what, killed, ref.size, sc.n);
	tu_job_cleanup(&job);
	return sc.n - ref.size;
}

/*
 * Kills are found when the kernel closes the victim's control links, not by
 * silence; the silence timeout is long (3 s, heartbeats every 100 ms) so
 * that a live rank starved of CPU on a loaded machine (2 cores, 8 ranks,
 * other tests) is never declared dead, which would fail the test.
 */
static void scenario_init(int n, size_t count, int min_ops, int after_ops)
{
	memset(&sc, 0, sizeof(sc));
	sc.detect_ms = 3000;
	sc.heartbeat_ms = 100;
	sc.n = n;
	sc.count = count;
	sc.min_ops = min_ops;
	sc.after_ops = after_ops;
}

/* ---- acts ---- */

struct kill_plan {
	int victims[8];
	int nvictims;
	long delay_ms[8];       /* before each kill */
	int sig;
};

static void act_kill(struct tu_job *job, void *arg)
{
	struct kill_plan *p = arg;

	for (int k = 0; k < p->nvictims; k++) {
		if (p->delay_ms[k] > 0)
			tu_sleep_ms(p->delay_ms[k]);
		kill(job->pids[p->victims[k]], p->sig ? p->sig : SIGKILL);
	}
}

/* ---- tests ---- */

/*
 * Random victims at random moments, n = 3..8, small and large counts: each
 * kill comes 0..300 ms (0..500 ms for the large count) after every rank has
 * run its first op, at whatever point the victim has reached (inside an op,
 * between ops, in recovery code), and the job runs until it has lost it.
 */
Test(shrink, random_outside_kill, .timeout = 7200)
{
	unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
	int trials = 0, per = 2;
	const char *env = getenv("FTCC_SHRINK_TRIALS"); /* the longer campaign sets it */

	if (env != NULL && atoi(env) > 0)
		per = atoi(env);
	if (getenv("FTCC_TEST_SEED") != NULL) /* replays a failed run */
		seed = (unsigned)strtoul(getenv("FTCC_TEST_SEED"), NULL, 10);
	fprintf(stderr, "shrink.random_outside_kill: seed %u\n", seed);
	srand(seed);
	for (int n = 3; n <= 8; n++) {
		size_t counts[] = {7, 60001};
		for (int c = 0; c < 2; c++) {
			for (int t = 0; t < per; t++) {
				struct kill_plan p = {.nvictims = 1};
				char what[96];
				scenario_init(n, counts[c], 1, 100);
				sc.expect_lost = 1;
				p.victims[0] = rand() % n;
				p.delay_ms[0] = rand() % (c == 0 ? 301 : 501);
				snprintf(what, sizeof(what), "n=%d count=%zu kill %d after %ld ms (seed %u)",
					 n, counts[c], p.victims[0], p.delay_ms[0], seed);
				cr_assert_eq(run_scenario(act_kill, &p, 60000, what), 1, "%s", what);
				trials++;
			}
		}
	}
	fprintf(stderr, "shrink.random_outside_kill: %d trials, each victim killed mid-job\n", trials);
}

/* FTCC_FAULT at each phase and at first, middle and last steps. */
Test(shrink, fault_at_every_phase, .timeout = 300)
{
	static const char *phases[] = {"reduce_scatter", "allgather", "commit"};
	for (int p = 0; p < 3; p++) {
		int n = 5, steps[] = {0, 1, p == 2 ? n - 2 : n - 2};
		for (int s = 0; s < 3; s++) {
			char what[260];
			scenario_init(n, 100003, 6, 4);
			sc.expect_lost = 1;
			sc.fault_rank = (p + s) % n;
			snprintf(sc.fault, sizeof(sc.fault), "rank=%d,op=%d,phase=%s,step=%d,seg=0",
				 sc.fault_rank, 2 + s, phases[p], steps[s]);
			snprintf(what, sizeof(what), "FTCC_FAULT=%s", sc.fault);
			cr_assert_eq(run_scenario(NULL, NULL, 60000, what), 1, "%s: no kill", what);
		}
	}
	scenario_init(4, 1000, 6, 4);
	sc.expect_lost = 1;
	sc.fault_rank = 2;
	snprintf(sc.fault, sizeof(sc.fault), "rank=2,op=3,phase=between");
	cr_assert_eq(run_scenario(NULL, NULL, 60000, "between ops"), 1);
	/* inside ft_init, the first view settled, before the ring's links: its
	 * left neighbour's link was refused (over libfabric shm at once: "is
	 * gone"), and that ft_init failed with FT_ECONNREFUSED (the campaign) */
	for (int k = 0; k < 2; k++) {
		char what[260];
		scenario_init(5, 1000, 6, 4);
		sc.expect_lost = 1;
		sc.fault_rank = k == 0 ? 2 : 0;
		snprintf(sc.fault, sizeof(sc.fault), "rank=%d,phase=connect", sc.fault_rank);
		snprintf(what, sizeof(what), "FTCC_FAULT=%s", sc.fault);
		cr_assert_eq(run_scenario(NULL, NULL, 60000, what), 1, "%s", what);
	}
}

/* FTCC_FAULT in recursive doubling's steps (a small op): the fold, each
 * exchange, the unfold and the probe, at 5 ranks (a fold) and 4 (none);
 * then in recursive halving's (forced): the fold, a halving, a doubling,
 * the unfold and the probe. */
Test(shrink, fault_at_every_exchange, .timeout = 300)
{
	/* (rank, step): a rank that sends at that step */
	static const int at5[][2] = {{0, 0}, {3, 1}, {2, 2}, {1, 3}, {4, 4}};
	static const int at4[][2] = {{0, 1}, {3, 2}, {1, 4}};
	static const int rh5[][2] = {{0, 0}, {2, 2}, {4, 3}, {1, 5}, {4, 6}};
	static const int rh4[][2] = {{3, 2}, {1, 4}};
	for (int a = 0; a < 2; a++) {
		for (int n = 5; n >= 4; n--) {
			int np = a == 0 ? (n == 5 ? 5 : 3) : (n == 5 ? 5 : 2);
			for (int i = 0; i < np; i++) {
				char what[260];
				const int *pt = a == 0 ? (n == 5 ? at5[i] : at4[i])
						       : (n == 5 ? rh5[i] : rh4[i]);
				scenario_init(n, 1000, 6, 4);
				sc.algorithm = a == 0 ? NULL : "rh";
				sc.expect_lost = 1;
				sc.fault_rank = pt[0];
				snprintf(sc.fault, sizeof(sc.fault),
					 "rank=%d,op=%d,phase=exchange,step=%d,seg=0", pt[0],
					 2 + i % 3, pt[1]);
				snprintf(what, sizeof(what), "n=%d FTCC_ALGORITHM=%s FTCC_FAULT=%s", n,
					 a == 0 ? "auto" : "rh", sc.fault);
				cr_assert_eq(run_scenario(NULL, NULL, 60000, what), 1, "%s: no kill",
					     what);
			}
		}
	}
}

/* ---- a hostile network (testutil.c) ---- */

struct hostile_plan {
	int victim;
	long delay_ms;
	pid_t attacker;
};

/* Starts the attacker on every listening port, lets it settle in, kills the victim. */
static void act_hostile(struct tu_job *job, void *arg)
{
	struct hostile_plan *h = arg;
	uint16_t ports[TU_HOSTILE_PORTS];
	int np = tu_listening_ports(job, ports);

	cr_assert_geq(np, job->n, "found %d listening ports for %d ranks", np, job->n);
	fprintf(stderr, "hostile_network: attacking %d listening ports of %d ranks\n", np, job->n);
	h->attacker = tu_hostile_start(ports, np);
	tu_sleep_ms(h->delay_ms);
	kill(job->pids[h->victim], SIGKILL);
}

/*
 * While a job runs and a rank is killed, a stranger holds idle, slow,
 * garbage and reset connections on every listening port of every rank (no
 * token: what anyone who can reach a port can do). Every healthy rank must
 * finish exactly and none may be excluded: the job loses its victim and
 * nothing else (the review's ~40 idle connections on one rank's control
 * port cost it its place: the job went on with 2 ranks of 4).
 */
Test(shrink, hostile_network, .timeout = 300)
{
	for (int t = 0; t < 2; t++) {
		struct hostile_plan h = {.victim = t == 0 ? 3 : 1, .delay_ms = 1500};
		char what[96];
		scenario_init(4, t == 0 ? 7 : 60001, 1, 100);
		sc.expect_lost = 1;
		sc.pause_us = 2000;
		snprintf(what, sizeof(what), "hostile network, rank %d of 4 killed, count %zu",
			 h.victim, sc.count);
		int lost = run_scenario(act_hostile, &h, 120000, what);
		cr_expect(tu_hostile_stop(h.attacker), "%s: the attacker died before the end", what);
		cr_assert_eq(lost, 1, "%s: the job lost %d ranks", what, lost);
	}
}

/* Opens and closes connections to port until `want` completed their
 * handshake (or the port stops taking them): what a connect scan, or a
 * health probe a minute for a few hours, leaves in a listener's queue. */
static int burst(uint16_t port, int want)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int made = 0, misses = 0;

	while (made < want && misses < 5) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		struct pollfd pfd = {.fd = fd, .events = POLLOUT};
		int err = 0;
		socklen_t el = sizeof(err);

		cr_assert_geq(fd, 0);
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 ||
		    (errno == EINPROGRESS && poll(&pfd, 1, 50) == 1 &&
		     getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0)) {
			made++;
			misses = 0;
		} else {
			misses++;
		}
		close(fd);
	}
	return made;
}

struct burst_plan {
	int victim;
	long delay_ms;
};

/* A burst of 300 connections on every listening port of every rank, then,
 * once every rank went on computing, the victim killed. */
static void act_burst(struct tu_job *job, void *arg)
{
	struct burst_plan *b = arg;
	uint16_t ports[TU_HOSTILE_PORTS];
	int np, made = 0;

	tu_sleep_ms(b->delay_ms);
	np = tu_listening_ports(job, ports);
	cr_assert_geq(np, job->n, "found %d listening ports for %d ranks", np, job->n);
	for (int i = 0; i < np; i++)
		made += burst(ports[i], 300);
	fprintf(stderr, "connection_burst: %d connections made on %d ports\n", made, np);
	tu_sleep_ms(300);
	kill(job->pids[b->victim], SIGKILL);
}

/*
 * A burst of connections, closed at once, on every listener while the job
 * runs (a connect scan; a probe once a minute for hours does the same),
 * then a rank killed. Nobody accepted on a TCP data listener between
 * recoveries, so 129 such connections filled its queue for the rest of the
 * job; at the failure every survivor connected to its right neighbour
 * first, the SYN was dropped, nobody reached its accept, and every
 * survivor failed with FT_ETIMEDOUT after the connect timeout.
 */
Test(shrink, connection_burst_then_a_kill, .timeout = 200)
{
	struct burst_plan b = {.victim = 2, .delay_ms = 500};

	scenario_init(4, 1001, 1, 100);
	sc.expect_lost = 1;
	sc.pause_us = 20000;
	cr_assert_eq(run_scenario(act_burst, &b, 60000, "a connection burst, then rank 2 killed"),
		     1, "the job lost more than its victim");
}

static int sum_of_ranks(struct ft_comm *comm, int r, int n, void *arg)
{
	float x = (float)(r + 1);

	(void)arg;
	if (ft_allreduce(comm, FT_IN_PLACE, &x, 1, FT_FLOAT32, FT_SUM, NULL) != 0)
		return 1;
	return x == (float)(n * (n + 1) / 2) ? 0 : 2;
}

/*
 * The same from before ft_init, where a peer list gives the membership
 * ports in advance (in-band membership): the review's 12 idle connections
 * on rank 0's FTCC_PEERS port made both ranks' ft_init of a 2-rank job time
 * out. Every rank starts, and the first op is exact.
 */
Test(shrink, hostile_network_from_the_start, .timeout = 120)
{
	struct tu_job job;
	uint16_t ports[TU_HOSTILE_PORTS];
	pid_t attacker;
	int np;

	tu_job_init(&job, 2);
	if (job.peers[0] == '\0') {
		tu_job_cleanup(&job);
		cr_skip_test("SKIPPED: the ports are known before ft_init only with a peer list "
			     "(FTCC_TEST_MEMBERSHIP=inband; make test runs it so)");
	}
	np = tu_listening_ports(&job, ports);
	cr_assert_eq(np, 2);
	attacker = tu_hostile_start(ports, np);
	tu_sleep_ms(200);
	for (int r = 0; r < 2; r++)
		tu_spawn(&job, r, sum_of_ranks, NULL, NULL);
	int bad = tu_wait(&job, 60000, NULL);
	bool attacked = tu_hostile_stop(attacker);
	tu_job_cleanup(&job);
	cr_expect(attacked, "the attacker died before the end");
	cr_assert_eq(bad, 0, "%d of 2 ranks failed to start or sum under the attack", bad);
}

Test(shrink, two_at_once_adjacent_and_not, .timeout = 200)
{
	int pairs[][2] = {{1, 2}, {1, 4}, {5, 0}};
	for (int k = 0; k < 3; k++) {
		struct kill_plan p = {.nvictims = 2, .victims = {pairs[k][0], pairs[k][1]},
				      .delay_ms = {60, 0}};
		char what[64];
		scenario_init(6, 30001, 300, 100);
		sc.expect_lost = 2;
		sc.pause_us = 500;
		snprintf(what, sizeof(what), "kill %d and %d", pairs[k][0], pairs[k][1]);
		cr_assert_eq(run_scenario(act_kill, &p, 60000, what), 2, "%s", what);
	}
}

/* The coordinator of the next view is the lowest survivor: kill rank 0. */
Test(shrink, coordinator_killed, .timeout = 120)
{
	struct kill_plan p = {.nvictims = 1, .victims = {0}, .delay_ms = {50}};

	scenario_init(5, 20001, 300, 100);
	sc.expect_lost = 1;
	sc.pause_us = 500;
	cr_assert_eq(run_scenario(act_kill, &p, 60000, "kill rank 0"), 1);
}

/* A second kill while the survivors are still recovering from the first. */
Test(shrink, second_kill_during_recovery, .timeout = 300)
{
	long gaps[] = {0, 1, 3, 8, 20};
	for (int k = 0; k < 5; k++) {
		struct kill_plan p = {.nvictims = 2, .victims = {2, k % 2 ? 0 : 4},
				      .delay_ms = {40, gaps[k]}};
		char what[64];
		scenario_init(6, 20001, 300, 100);
		sc.expect_lost = 2;
		sc.pause_us = 300;
		snprintf(what, sizeof(what), "second kill %ld ms after the first", gaps[k]);
		cr_assert_eq(run_scenario(act_kill, &p, 60000, what), 2, "%s", what);
	}
}

/*
 * A link that closes while a failure is being recovered from is explained
 * by it: the survivors rebuild their rings anyway. Rank 0 is killed and, at
 * the same op, rank 3 drops its data links (as a neighbour that aborts its
 * ring on the news does, by closing a link its left neighbour is still
 * writing to): rank 2 sees its link to rank 3 fail with no failure of rank
 * 3 known. Under rejoin the survivors await rank 0 for longer than the
 * 2 x detect after which such a link's peer is declared: rank 2 declared
 * live rank 3 (the killed_before_the_job_checkpoints flake, "link to rank 0
 * failed with no failure known: declaring it"), and the job went on with 3.
 */
Test(shrink, a_link_closed_during_a_recovery_is_no_death, .timeout = 120)
{
	const char *tp = getenv("FTCC_TEST_TRANSPORT");

	/* Over libfabric a rank killed as op 5 starts can take op 4's last
	 * frames with it (shm moves a message only while both ends run), so
	 * rank 3 may reach op 5 only in generation 1, where a drop is a cut
	 * with no failure known (rightly declared): the premise holds over TCP,
	 * whose kernel delivers what a dead rank sent. */
	if (tp != NULL && strcmp(tp, "fabric") == 0) {
		fprintf(stderr, "SKIPPED: shrink.a_link_closed_during_a_recovery_is_no_death: its "
			"premise needs TCP (see the test)\n");
		cr_skip_test("the premise needs TCP");
	}
	scenario_init(5, 1000, 10, 4);
	sc.detect_ms = 1000;
	sc.rejoin_ms = 4000;
	sc.expect_lost = 1;
	sc.fault_all = true;
	snprintf(sc.fault, sizeof(sc.fault),
		 "rank=0,op=5,phase=between;rank=3,op=5,phase=between,action=drop,gen=0");
	cr_assert_eq(run_scenario(NULL, NULL, 60000, "kill 0, drop 3's links"), 1);
}

/* Every rank but one dies: the last finishes alone. */
Test(shrink, all_but_one, .timeout = 120)
{
	struct kill_plan p = {.nvictims = 3, .victims = {1, 0, 3}, .delay_ms = {40, 20, 20}};

	scenario_init(4, 5001, 400, 100);
	sc.expect_lost = 3;
	sc.pause_us = 500;
	cr_assert_eq(run_scenario(act_kill, &p, 60000, "three of four killed"), 3);
}

/*
 * A SIGSTOPped rank breaks no link: heartbeat silence finds it. The
 * timeout (scenario_init: 3 s, heartbeats every 100 ms) is long enough that
 * no live rank goes that long unscheduled on a loaded machine (a starved
 * rank declared dead would fail the test), where the former 400 ms with
 * 40 ms heartbeats was not. The survivors must settle a view without it no
 * sooner than the silence allows (its last heartbeat may precede the stop
 * by a heartbeat period and some scheduling delay: 1 s of margin), then go
 * on until it has been let go and has learnt it was left out.
 */
/* The ranks may run over libfabric's shm provider (its guard may fence a
 * rank): fabric, with no provider named (shm is its choice on one host) or shm named. */
static bool over_shm(void)
{
	const char *tp = getenv("FTCC_TEST_TRANSPORT"), *prov = getenv("FTCC_FABRIC_PROVIDER");

	if (prov == NULL || *prov == '\0')
		prov = getenv("FI_PROVIDER");
	return tp != NULL && strcmp(tp, "fabric") == 0 &&
	       (prov == NULL || *prov == '\0' || strstr(prov, "shm") != NULL);
}

Test(shrink, stopped_rank_detected_by_heartbeat, .timeout = 120)
{
	struct tu_job job;
	int expect[64] = {0}, skip[64] = {0}, st;
	long t_stop, t_view;
	struct outcome ref;

	scenario_init(4, 5001, 1, 100);
	sc.expect_lost = 1;
	sc.hold = 1;
	tu_job_init(&job, sc.n);
	snprintf(sc.dir, sizeof(sc.dir), "%s", job.dir);
	for (int r = 0; r < sc.n; r++)
		tu_spawn(&job, r, worker, NULL, tweak);
	cr_assert_eq(tu_wait_ready(&job, 30000), 0);
	cr_assert(wait_marks("running", NULL, 30000), "ranks never ran their first op");
	kill(job.pids[2], SIGSTOP);
	t_stop = tu_now_ms();
	/* the survivors adopt a view without it ... */
	skip[2] = 1;
	cr_assert(wait_marks("gen1", skip, 30000), "no view without the stopped rank after 30 s");
	t_view = tu_now_ms() - t_stop;
	fprintf(stderr, "shrink.stopped_rank: a view without it after %ld ms\n", t_view);
	cr_assert_geq(t_view, sc.detect_ms - 1000,
		      "a view without the stopped rank %ld ms after the stop: sooner than %d ms of "
		      "heartbeat silence", t_view, sc.detect_ms);
	/* ... and it is let go while they still run: it must find itself left out */
	kill(job.pids[2], SIGCONT);
	long end = tu_now_ms() + 30000;
	while (waitpid(job.pids[2], &st, WNOHANG) != job.pids[2] && tu_now_ms() < end)
		tu_sleep_ms(5);
	if (tu_now_ms() >= end) {
		kill(job.pids[2], SIGKILL);
		waitpid(job.pids[2], &st, 0);
		st = -1;
	}
	job.pids[2] = 0;
	job.status[2] = st;
	char release[400];
	snprintf(release, sizeof(release), "%s/release", sc.dir);
	close(open(release, O_CREAT | O_WRONLY, 0600));
	expect[2] = 1;
	cr_assert_eq(tu_wait(&job, 30000, expect), 0, "a survivor failed or hung");
	if (st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && over_shm()) {
		/* stopped inside the provider with a lock its neighbours need:
		 * their guards kill it once it is left out (docs/design.md, "libfabric transport") */
		fprintf(stderr, "shrink.stopped_rank: it was stopped holding a shm lock: the "
			"survivors' guard killed it\n");
	} else {
		cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 42,
			  "the stopped rank, let go, must get -FT_EEXCLUDED (exit 42; status %d)", st);
	}
	for (int r = 0, first = 1; r < sc.n; r++) {
		struct outcome o;
		if (r == 2)
			continue;
		cr_assert_eq(read_outcome(r, &o), 0);
		cr_assert_eq(o.size, 3, "rank %d ends with %d members", r, o.size);
		if (first)
			ref = o;
		first = 0;
		cr_assert(o.gen == ref.gen && o.ops == ref.ops, "rank %d ends with gen %u ops %d, not %u %d",
			  r, o.gen, o.ops, ref.gen, ref.ops);
	}
	tu_job_cleanup(&job);
}

/* Broadcast: a dead root fails the op on every survivor (-FT_EROOTFAILED),
 * a dead non-root does not; barriers recover too. */
Test(shrink, broadcast_and_barrier, .timeout = 200)
{
	struct kill_plan p = {.nvictims = 1, .victims = {1}, .delay_ms = {60}};

	scenario_init(5, 300001, 300, 50);
	sc.expect_lost = 1;
	sc.kind = 1;
	cr_assert_eq(run_scenario(act_kill, &p, 60000, "broadcast, root killed"), 1);
	p.victims[0] = 3;
	scenario_init(5, 300001, 300, 50);
	sc.expect_lost = 1;
	sc.kind = 1;
	cr_assert_eq(run_scenario(act_kill, &p, 60000, "broadcast, non-root killed"), 1);
	scenario_init(5, 1001, 400, 100);
	sc.expect_lost = 1;
	sc.pause_us = 300;
	sc.kind = 2;
	cr_assert_eq(run_scenario(act_kill, &p, 60000, "barriers and allreduces"), 1);
}

/*
 * Reduce-scatter and allgather (kind 3), 4 ranks: a rank killed at an
 * injection point in each half of the ring, in place and out of place
 * (one_blocks: op i + 1 is a reduce-scatter for even i, in place when
 * i % 3 == 0), in the commit steps, and from outside at random moments.
 * The survivors' blocks are exact over the 3 survivors' inputs.
 */
Test(shrink, reduce_scatter_and_allgather, .timeout = 300)
{
	static const char *faults[][2] = {
		{"rank=2,op=7,phase=reduce_scatter,step=1,seg=0", "reduce-scatter in place"},
		{"rank=1,op=3,phase=reduce_scatter,step=0,seg=0", "reduce-scatter out of place"},
		{"rank=3,op=5,phase=reduce_scatter,step=2,seg=0", "reduce-scatter average, last step"},
		{"rank=3,op=4,phase=allgather,step=1,seg=0", "allgather in place"},
		{"rank=0,op=2,phase=allgather,step=0,seg=0", "allgather out of place"},
		{"rank=1,op=3,phase=commit,step=1", "reduce-scatter commit"},
		{"rank=2,op=6,phase=between", "allgather, start"},
	};
	for (size_t f = 0; f < sizeof(faults) / sizeof(faults[0]); f++) {
		char what[260];
		scenario_init(4, 25013, 10, 4);
		sc.kind = 3;
		sc.expect_lost = 1;
		sscanf(faults[f][0], "rank=%d", &sc.fault_rank);
		snprintf(sc.fault, sizeof(sc.fault), "%s", faults[f][0]);
		snprintf(what, sizeof(what), "%s: FTCC_FAULT=%s", faults[f][1], sc.fault);
		cr_assert_eq(run_scenario(NULL, NULL, 60000, what), 1, "%s: no kill", what);
	}
	for (int t = 0; t < 2; t++) {
		struct kill_plan p = {.nvictims = 1, .victims = {t == 0 ? 2 : 0},
				      .delay_ms = {t == 0 ? 30 : 80}};
		scenario_init(4 + t, t == 0 ? 7 : 20011, 300, 50);
		sc.kind = 3;
		sc.expect_lost = 1;
		sc.pause_us = 300;
		cr_assert_eq(run_scenario(act_kill, &p, 60000, "reduce-scatter and allgather, outside kill"),
			     1);
	}
	/* killed while the ranks compute between calls (100 ms pauses): the
	 * next call begins in the view that still shows it, and runs on the
	 * survivors' blocks from its start */
	struct kill_plan p = {.nvictims = 1, .victims = {1}, .delay_ms = {150}};
	scenario_init(4, 1001, 4, 3);
	sc.kind = 3;
	sc.expect_lost = 1;
	sc.pause_us = 100000;
	cr_assert_eq(run_scenario(act_kill, &p, 60000, "reduce-scatter and allgather, kill between calls"),
		     1);
}

/*
 * A rank whose ft_init fails once the job's first view settled (a local
 * error: out of descriptors, memory or disk) leaves that view as a failed
 * rank, and the others go on without it. Its detector once said goodbye on
 * the way out, as at a clean end: its neighbours took it for no failure,
 * and the one waiting for its ring link waited out the connect timeout
 * (campaign trial 45: FT_ETIMEDOUT, a healthy rank lost). Under file and
 * in-band membership.
 */
static void init_fails(bool inband, int n)
{
	struct tu_job job;
	int expect[4] = {0}, bad, victim = n - 1;
	struct outcome o;

	scenario_init(n, 1001, 20, 10);
	sc.expect_lost = 1;
	sc.fault_rank = victim;
	snprintf(sc.fault, sizeof(sc.fault), "rank=%d,phase=connect,action=fail", victim);
	setenv("FTCC_TEST_MEMBERSHIP", inband ? "inband" : "file", 1);
	tu_job_init(&job, sc.n);
	unsetenv("FTCC_TEST_MEMBERSHIP");
	snprintf(sc.dir, sizeof(sc.dir), "%s", job.dir);
	for (int r = 0; r < sc.n; r++)
		tu_spawn(&job, r, worker, NULL, tweak);
	bad = tu_wait(&job, 25000, expect); /* past the connect timeout (20 s) */
	for (int r = 0; r < sc.n; r++)
		cr_assert_neq(job.status[r], -1, "rank %d hung", r);
	cr_assert(WIFEXITED(job.status[victim]) && WEXITSTATUS(job.status[victim]) == 100,
		  "rank %d's ft_init did not fail (status %d)", victim, job.status[victim]);
	cr_assert_eq(bad, 1, "a healthy rank failed: only rank %d may", victim);
	for (int r = 0; r < victim; r++) {
		cr_assert_eq(read_outcome(r, &o), 0, "no outcome from rank %d", r);
		cr_assert(o.size == n - 1 && o.rc == 0, "rank %d ends with %d members, rc %d", r,
			  o.size, o.rc);
	}
	tu_job_cleanup(&job);
}

Test(shrink, a_rank_whose_init_fails_is_failed_file, .timeout = 60)
{
	init_fails(false, 2);
	init_fails(false, 4);
}

Test(shrink, a_rank_whose_init_fails_is_failed_inband, .timeout = 60)
{
	init_fails(true, 2);
	init_fails(true, 4);
}
