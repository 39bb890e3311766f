/* test_policy_shrink.c: the shrink policy's own machinery: the hand-over of a small result, and the in-place input saved segment by segment. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include <stdint.h>

#include "testutil.h"

/*
 * Four ranks run `ops` small in-place int64 sums (8000 bytes: no commit
 * steps). Rank 3 stops (FTCC_FAULT action=hang) about to send its last
 * frame of user op `victim_op` (sequence victim_op + 1: sequence 0 is the
 * barrier in ft_init), so one survivor lacks that op's result while the
 * other two hold it and return it (on the ring and by recursive doubling). Once both have
 * returned it (each writes a marker), the test SIGKILLs rank 3. Every
 * survivor must then return that op with the four-rank sum, contributors 4
 * and the membership still showing four ranks (it got it from a holder),
 * the next op showing three. Each survivor writes what it saw; the test
 * checks they all saw the same, and that the hand-over happened. (The
 * order is forced, not left to chance: a self-kill there lets the survivors
 * hear of the failure before they return the op in some runs and not in
 * others.)
 */
#define COUNT 1000

static int ops, victim_op;
static char dir[256];

/*
 * Where rank 3 stops, by algorithm, and the one survivor then left without
 * the result. The ring: about to send its last allgather frame, to rank 0.
 * Recursive doubling (the op is small enough to choose it): about to send
 * its second exchange, to rank 1; ranks 0 and 2 swapped theirs, which
 * held rank 3's first.
 */
struct layout {
	const char *algorithm;  /* FTCC_ALGORITHM */
	const char *phase;
	int step;
	int lacking;            /* the survivor without the result */
};
static const struct layout ring_layout = {"ring", "allgather", 2, 0};
static const struct layout rd_layout = {"auto", "exchange", 2, 1};
static const struct layout *lay = &ring_layout;

static void tweak(struct ft_config *cfg, int rank)
{
	cfg->policy = FT_POLICY_SHRINK;
	if (getenv("FTCC_TEST_LOG") != NULL)
		cfg->log_level = atoi(getenv("FTCC_TEST_LOG"));
	/* the TCP ring and mesh: on one host the ops would run in shared memory */
	setenv("FTCC_SHM", "0", 1);
	setenv("FTCC_ALGORITHM", lay->algorithm, 1);
	if (rank == 3)
		snprintf(cfg->fault, sizeof(cfg->fault),
			 "rank=3,op=%d,phase=%s,step=%d,seg=0,action=hang", victim_op + 1, lay->phase,
			 lay->step);
}

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "rank %d op %d: ", orig, i);            \
			fprintf(stderr, __VA_ARGS__);                           \
			fprintf(stderr, "\n");                                  \
			return 1;                                               \
		}                                                               \
	} while (0)

static int worker(struct ft_comm *comm, int orig, int n, void *arg)
{
	static int64_t buf[COUNT];
	int victim_size = 0, held = 0;
	char path[400];
	FILE *f;
	(void)n;
	(void)arg;

	for (int i = 0; i < ops; i++) {
		struct ft_op_info info;
		int64_t want = 0;
		for (int j = 0; j < COUNT; j++)
			buf[j] = (int64_t)(orig + 1) * 1000 + i * 10 + j % 7;
		int rc = ft_allreduce(comm, FT_IN_PLACE, buf, COUNT, FT_INT64, FT_SUM, &info);
		CHECK(rc == 0, "%s", ft_strerror(rc));
		int size = ft_size(comm);
		for (int k = 0; k < size; k++)
			want += (int64_t)(ft_orig_rank(comm, k) + 1) * 1000;
		for (int j = 0; j < COUNT; j++)
			CHECK(buf[j] == want + size * (i * 10 + j % 7), "element %d is %lld, want %lld",
			      j, (long long)buf[j], (long long)(want + size * (i * 10 + j % 7)));
		CHECK(info.contributors == size, "contributors %d, size %d", info.contributors, size);
		CHECK(info.generation == ft_generation(comm), "generation %u, comm says %u",
		      info.generation, ft_generation(comm));
		if (i < victim_op)
			CHECK(size == 4 && info.failed == 0, "size %d, failed %d", size, info.failed);
		if (i == victim_op) {
			snprintf(path, sizeof(path), "%s/returned-%d", dir, orig);
			f = fopen(path, "w");
			if (f != NULL)
				fclose(f);
			victim_size = size;
			held = info.recovery_ms == 0;
			CHECK(size == 4 ? info.failed == 0 : size == 3 && info.failed == 1,
			      "size %d, failed %d", size, info.failed);
			CHECK(orig != lay->lacking || !held, "rank %d cannot have held it", orig);
		}
		if (i > victim_op) {
			CHECK(size == 3, "size %d after the failure", size);
			CHECK(info.failed == (i == victim_op + 1 && victim_size == 4), "failed %d",
			      info.failed);
		}
	}
	snprintf(path, sizeof(path), "%s/seen-%d", dir, orig);
	f = fopen(path, "w");
	if (f == NULL)
		return 2;
	fprintf(f, "%d %d\n", victim_size, held);
	fclose(f);
	return 0;
}

/* Runs the job once; checks that the survivors agree and the holders handed the result over. */
static void run(int nops, int vop)
{
	struct tu_job job;
	int expect_killed[4] = {0, 0, 0, 1}, sizes[3], held[3];
	char path[400];

	ops = nops;
	victim_op = vop;
	tu_job_init(&job, 4);
	snprintf(dir, sizeof(dir), "%s", job.dir);
	for (int r = 0; r < 4; r++)
		tu_spawn(&job, r, worker, NULL, tweak);
	for (int r = 0; r <= 2; r++) {
		if (r == lay->lacking)
			continue;
		snprintf(path, sizeof(path), "%s/returned-%d", dir, r);
		if (!tu_wait_file(path, tu_now_ms() + 60000)) {
			tu_wait(&job, 0, NULL); /* kills and reports the ranks */
			cr_assert_fail("rank %d never returned op %d while rank 3 hung", r, vop);
		}
	}
	snprintf(path, sizeof(path), "%s/returned-%d", dir, lay->lacking);
	cr_assert(access(path, F_OK) != 0, "rank %d returned op %d without rank 3's frame",
		  lay->lacking, vop);
	kill(job.pids[3], SIGKILL);
	cr_assert_eq(tu_wait(&job, 60000, expect_killed), 0, "a survivor failed or hung");
	cr_assert(WIFSIGNALED(job.status[3]), "rank 3 did not die");
	for (int r = 0; r < 3; r++) {
		snprintf(path, sizeof(path), "%s/seen-%d", dir, r);
		FILE *f = fopen(path, "r");
		cr_assert_not_null(f, "rank %d wrote nothing", r);
		cr_assert_eq(fscanf(f, "%d %d", &sizes[r], &held[r]), 2);
		fclose(f);
	}
	cr_assert(sizes[0] == 4 && sizes[1] == 4 && sizes[2] == 4,
		  "the op was not handed over: the survivors saw %d %d %d ranks", sizes[0], sizes[1],
		  sizes[2]);
	for (int r = 0; r < 3; r++)
		cr_assert(held[r] == (r != lay->lacking), "holders %d %d %d, rank %d should lack it",
			  held[0], held[1], held[2], lay->lacking);
	tu_job_cleanup(&job);
}

/* The holders learn of the failure in their next op, and hand the result over there. */
Test(policy_shrink, handover_holders_in_next_op, .timeout = 300)
{
	lay = &ring_layout;
	run(6, 2);
	lay = &rd_layout;
	run(6, 2);
}

/* The op was the last: the holders hand the result over in ft_finalize. */
Test(policy_shrink, handover_holders_finalizing, .timeout = 300)
{
	lay = &ring_layout;
	run(3, 2);
	lay = &rd_layout;
	run(3, 2);
}

/*
 * In place, 4 KiB segments (about 25 per chunk): rank 2 dies midway through
 * a chunk of the reduce-scatter, or in the allgather, of op 2. The
 * survivors' buffers then hold some segments overwritten (their input
 * saved first) and some not; the op runs again from the input rebuilt out
 * of both, and must give the exact sum over the three survivors.
 */
#define BIG 50000

static char fault_spec[128];

static void tweak_big(struct ft_config *cfg, int rank)
{
	cfg->policy = FT_POLICY_SHRINK;
	cfg->segment_bytes = 4096;
	if (rank == 2)
		snprintf(cfg->fault, sizeof(cfg->fault), "%s", fault_spec);
}

static int big_worker(struct ft_comm *comm, int orig, int n, void *arg)
{
	static double buf[BIG];
	(void)n;
	(void)arg;

	for (int i = 0; i < 3; i++) {
		struct ft_op_info info;
		double want = 0;
		for (int j = 0; j < BIG; j++)
			buf[j] = (orig + 1) * 1e6 + i * 1000 + j;
		int rc = ft_allreduce(comm, FT_IN_PLACE, buf, BIG, FT_FLOAT64, FT_SUM, &info);
		CHECK(rc == 0, "%s", ft_strerror(rc));
		int size = ft_size(comm);
		for (int k = 0; k < size; k++)
			want += (ft_orig_rank(comm, k) + 1) * 1e6;
		CHECK(info.contributors == size, "contributors %d, size %d", info.contributors, size);
		CHECK(i < 2 || size == 3, "size %d", size); /* op 1: 4 if handed over */
		for (int j = 0; j < BIG; j++)
			CHECK(buf[j] == want + size * (i * 1000.0 + j), "element %d is %.17g, want %.17g",
			      j, buf[j], want + size * (i * 1000.0 + j));
	}
	return 0;
}

Test(policy_shrink, in_place_input_saved_by_segment, .timeout = 300)
{
	static const char *points[] = {
		"phase=reduce_scatter,step=0,seg=7", "phase=reduce_scatter,step=1,seg=10",
		"phase=reduce_scatter,step=2,seg=24", "phase=allgather,step=0,seg=3",
		"phase=allgather,step=2,seg=12",
	};
	for (size_t p = 0; p < sizeof(points) / sizeof(points[0]); p++) {
		struct tu_job job;
		int expect_killed[4] = {0, 0, 1, 0};
		snprintf(fault_spec, sizeof(fault_spec), "rank=2,op=2,%s", points[p]);
		tu_job_init(&job, 4);
		for (int r = 0; r < 4; r++)
			tu_spawn(&job, r, big_worker, NULL, tweak_big);
		cr_assert_eq(tu_wait(&job, 60000, expect_killed), 0, "%s: a survivor failed or hung",
			     fault_spec);
		cr_assert(WIFSIGNALED(job.status[2]), "%s: rank 2 did not die", fault_spec);
		tu_job_cleanup(&job);
	}
}
