/* test_algorithms.c: the allreduce algorithms (the ring, recursive doubling, recursive halving) over real processes and sockets: every rank the same bits, the choice every rank's, ranks that chose differently told so. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define DEADLINE_MS 60000

/*
 * Float32 inputs whose sum depends on the order of the additions: large
 * values of both signs that cancel, and small ones that the rounding of a
 * large partial sum loses or keeps. A rank whose result came from another
 * order than its peers' differs in its bits.
 */
static float input(int rank, size_t i)
{
	unsigned h = (unsigned)(rank * 2654435761u) ^ (unsigned)(i * 40503u);
	float big = (float)((h % 7) + 1) * 3.0e7f * (((h >> 3) & 1) ? 1.0f : -1.0f);
	float small = (float)((h >> 5) % 1000) * 0.137f;

	return (rank + (int)i) % 3 == 0 ? big : small;
}

/* FNV-1a over the result's bits. */
static int64_t digest(const void *p, size_t len)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return (int64_t)(h >> 1);
}

struct bits_arg {
	const char *algorithm;  /* FTCC_ALGORITHM, NULL: unset */
};

static const struct bits_arg *bits_now;

static void set_algorithm(struct ft_config *cfg, int rank)
{
	(void)cfg;
	(void)rank;
	/* the TCP ring and mesh: on one host the ops would run in shared memory */
	setenv("FTCC_SHM", "0", 1);
	if (bits_now->algorithm != NULL)
		setenv("FTCC_ALGORITHM", bits_now->algorithm, 1);
}

/* Runs fn on n ranks with set_algorithm's settings: how many failed or hung. */
static int run_job(int n, tu_rank_fn fn, void *arg)
{
	struct tu_job job;

	tu_job_init(&job, n);
	for (int r = 0; r < n; r++)
		tu_spawn(&job, r, fn, arg, set_algorithm);
	int bad = tu_wait(&job, DEADLINE_MS, NULL);
	tu_job_cleanup(&job);
	return bad;
}

/*
 * Sum and average of order-sensitive float32 inputs, in place and out of
 * place, at counts around the choice's thresholds: the digests of every
 * rank's result must agree (their min and max, by allreduce), and the
 * result must be near the exact sum.
 */
static int run_bits(struct ft_comm *comm, int rank, int n, void *argp)
{
	static const size_t counts[] = {1, 5, 1000, 4096, 16384, 40000, 300001};
	(void)argp;
	for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
		size_t count = counts[ci];
		float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
		for (int op = 0; op < 2; op++) {
			for (int inplace = 0; inplace < 2; inplace++) {
				enum ft_op o = op == 0 ? FT_SUM : FT_AVG;
				float *buf = inplace ? out : in;
				for (size_t i = 0; i < count; i++)
					buf[i] = input(rank, i);
				int rc = ft_allreduce(comm, inplace ? FT_IN_PLACE : in, out, count,
						      FT_FLOAT32, o, NULL);
				if (rc != 0) {
					fprintf(stderr, "rank %d count %zu: %s\n", rank, count,
						ft_strerror(rc));
					return 1;
				}
				for (size_t i = 0; i < count; i++) {
					double want = 0;
					for (int r = 0; r < n; r++)
						want += input(r, i);
					if (o == FT_AVG)
						want /= n;
					if (fabs(out[i] - want) > 64.0 + fabs(want) * 1e-6) {
						fprintf(stderr, "rank %d count %zu [%zu] = %g, want %g\n",
							rank, count, i, (double)out[i], want);
						return 2;
					}
				}
				int64_t d = digest(out, count * sizeof(float)), lo = d, hi = d;
				if (ft_allreduce(comm, FT_IN_PLACE, &lo, 1, FT_INT64, FT_MIN, NULL) != 0 ||
				    ft_allreduce(comm, FT_IN_PLACE, &hi, 1, FT_INT64, FT_MAX, NULL) != 0)
					return 3;
				if (lo != hi) {
					fprintf(stderr, "rank %d n %d count %zu op %d %s: the ranks' bits "
						"differ\n", rank, n, count, o,
						inplace ? "in place" : "out of place");
					return 4;
				}
			}
		}
		free(in);
		free(out);
	}
	return 0;
}

/* fn on every world size from lo to hi (every other one above 4 when
 * skip), under FTCC_ALGORITHM=algorithm (NULL: unset). */
static void each_world(const char *algorithm, tu_rank_fn fn, int lo, int hi, bool skip)
{
	static struct bits_arg arg;

	arg.algorithm = algorithm;
	bits_now = &arg;
	for (int n = lo; n <= hi; n += skip && n >= 4 ? 2 : 1) {
		int bad = run_job(n, fn, NULL);
		cr_assert_eq(bad, 0, "FTCC_ALGORITHM=%s n=%d: some rank failed or hung",
			     algorithm ? algorithm : "(unset)", n);
	}
}

static void bits(const char *algorithm)
{
	each_world(algorithm, run_bits, 2, 8, false);
}

/* The inputs do show the order: summed forwards and backwards they differ. */
Test(algorithms, the_inputs_show_the_order)
{
	int differ = 0;

	for (size_t i = 0; i < 1000; i++) {
		float f = 0, b = 0;
		for (int r = 0; r < 8; r++)
			f += input(r, i);
		for (int r = 7; r >= 0; r--)
			b += input(r, i);
		differ += memcmp(&f, &b, sizeof(f)) != 0;
	}
	cr_assert_gt(differ, 100, "only %d of 1000 sums depend on the order", differ);
}

Test(algorithms, every_rank_the_same_bits_chosen, .timeout = 300) { bits(NULL); }
Test(algorithms, every_rank_the_same_bits_rd, .timeout = 300) { bits("rd"); }
Test(algorithms, every_rank_the_same_bits_ring, .timeout = 300) { bits("ring"); }
Test(algorithms, every_rank_the_same_bits_rh, .timeout = 300) { bits("rh"); }

/*
 * Ranks that choose differently: one rank's count puts it on the ring or on
 * recursive halving while the others run recursive doubling. Every rank
 * must return FT_EMISMATCH (no hang), and the communicator must work
 * afterwards.
 */
struct split {
	int odd;                /* the rank whose count differs (mod n) */
	size_t count;           /* its count; the others' is 1000 */
};

static int run_split_choice(struct ft_comm *comm, int rank, int n, void *arg)
{
	const struct split *sp = arg;
	int odd = sp->odd % n;
	size_t count = rank == odd ? sp->count : 1000;
	float *buf = calloc(sp->count, sizeof(float));
	int rc = ft_allreduce(comm, FT_IN_PLACE, buf, count, FT_FLOAT32, FT_SUM, NULL);

	if (rc != -FT_EMISMATCH) {
		fprintf(stderr, "rank %d: a split choice gave %s, want FT_EMISMATCH\n", rank,
			ft_err_name(rc));
		return 1;
	}
	for (size_t i = 0; i < 1000; i++)
		buf[i] = (float)rank;
	rc = ft_allreduce(comm, FT_IN_PLACE, buf, 1000, FT_FLOAT32, FT_SUM, NULL);
	if (rc != 0 || buf[999] != (float)(n * (n - 1) / 2)) {
		fprintf(stderr, "rank %d: the allreduce after: %s\n", rank, ft_strerror(rc));
		return 2;
	}
	free(buf);
	return 0;
}

/* 60,000 floats: recursive halving from 3 ranks (the ring at 2); 1.1 M
 * (4.4 MB): the ring. */
Test(algorithms, a_split_choice_is_a_mismatch_on_every_rank, .timeout = 200)
{
	static struct bits_arg chosen;
	static const size_t odd_counts[] = {60000, 1100000};

	bits_now = &chosen;
	for (size_t ci = 0; ci < 2; ci++) {
		for (int n = 2; n <= 6; n++) {
			for (int odd = 0; odd < n; odd += n > 3 ? 2 : 1) {
				struct split sp = {.odd = odd, .count = odd_counts[ci]};
				int bad = run_job(n, run_split_choice, &sp);
				cr_assert_eq(bad, 0, "n=%d, rank %d with count %zu", n, odd,
					     odd_counts[ci]);
			}
		}
	}
}

/* One rank's FTCC_ALGORITHM differs from the others': ft_init (its barrier)
 * fails on every rank, none hangs, well before the connect deadline. */
static const char *odd_algorithm;
static int odd_rank;

static void set_odd_algorithm(struct ft_config *cfg, int rank)
{
	(void)cfg;
	setenv("FTCC_SHM", "0", 1);
	setenv("FTCC_ALGORITHM", rank == odd_rank ? odd_algorithm : "rd", 1);
}

static int run_nothing(struct ft_comm *comm, int rank, int n, void *arg)
{
	(void)comm;
	(void)n;
	(void)arg;
	fprintf(stderr, "rank %d: ft_init passed with another FTCC_ALGORITHM than its peers'\n",
		rank);
	return 1;
}

Test(algorithms, settings_that_differ_fail_on_every_rank, .timeout = 200)
{
	for (int n = 2; n <= 5; n += 3) {
		struct tu_job job;
		odd_algorithm = "ring";
		odd_rank = n - 1;
		tu_job_init(&job, n);
		long t0 = tu_now_ms();
		for (int r = 0; r < n; r++)
			tu_spawn(&job, r, run_nothing, NULL, set_odd_algorithm);
		/* every rank fails (ft_init's exit status 100), within the deadline */
		int bad = tu_wait(&job, DEADLINE_MS, NULL);
		cr_assert_lt(tu_now_ms() - t0, 10000, "n=%d: %ld ms to fail", n, tu_now_ms() - t0);
		tu_job_cleanup(&job);
		cr_assert_eq(bad, n, "n=%d: %d ranks failed, want all", n, bad);
		for (int r = 0; r < n; r++)
			cr_assert(WIFEXITED(job.status[r]) && WEXITSTATUS(job.status[r]) == 100,
				  "n=%d rank %d: status %#x, want ft_init's failure", n, r,
				  (unsigned)job.status[r]);
	}
}

/*
 * Reduce-scatter and allgather: by recursive halving alone and doubling
 * alone on a power of two of ranks (4 and 8), the ring elsewhere; chosen,
 * forced rh and forced ring. Int32 sums are exact whatever the order;
 * float32 averages of the order-sensitive inputs must be near the exact
 * one; an allgather must put every rank's block in its place.
 */
static int run_blocks(struct ft_comm *comm, int rank, int n, void *argp)
{
	static const size_t counts[] = {0, 1, 3, 1000, 40000};
	(void)argp;
	for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
		size_t bc = counts[ci], all = bc * (size_t)n;
		int32_t *iv = malloc((all + 1) * sizeof(int32_t)), *io = malloc((bc + 1) * sizeof(int32_t));
		float *fv = malloc((all + 1) * sizeof(float)), *fo = malloc((bc + 1) * sizeof(float));
		for (int inplace = 0; inplace < 2; inplace++) {
			for (size_t i = 0; i < all; i++) {
				iv[i] = (int32_t)(rank * 1000003 + (int)i);
				fv[i] = input(rank, i);
			}
			int rc = ft_reduce_scatter(comm, inplace ? FT_IN_PLACE : iv, inplace ? iv : io,
						   bc, FT_INT32, FT_SUM, NULL);
			const int32_t *ir = inplace ? iv + (size_t)rank * bc : io;
			for (size_t i = 0; rc == 0 && i < bc; i++) {
				int64_t want = 0;
				for (int r = 0; r < n; r++)
					want += r * 1000003 + (int64_t)((size_t)rank * bc + i);
				if (ir[i] != (int32_t)want) {
					fprintf(stderr, "rank %d n %d bc %zu: reduce-scatter [%zu] = %d, "
						"want %d\n", rank, n, bc, i, ir[i], (int32_t)want);
					return 2;
				}
			}
			if (rc == 0)
				rc = ft_reduce_scatter(comm, inplace ? FT_IN_PLACE : fv, inplace ? fv : fo,
						       bc, FT_FLOAT32, FT_AVG, NULL);
			const float *fr = inplace ? fv + (size_t)rank * bc : fo;
			for (size_t i = 0; rc == 0 && i < bc; i++) {
				double want = 0;
				for (int r = 0; r < n; r++)
					want += input(r, (size_t)rank * bc + i);
				want /= n;
				if (fabs(fr[i] - want) > 64.0 + fabs(want) * 1e-6) {
					fprintf(stderr, "rank %d n %d bc %zu: average [%zu] = %g, want %g\n",
						rank, n, bc, i, (double)fr[i], want);
					return 3;
				}
			}
			for (size_t i = 0; i < all; i++)
				iv[i] = -1;
			for (size_t i = 0; i < bc; i++)
				io[i] = (int32_t)(rank * 7919 + (int)i);
			if (inplace && bc > 0)
				memcpy(iv + (size_t)rank * bc, io, bc * sizeof(int32_t));
			if (rc == 0)
				rc = ft_allgather(comm, inplace ? FT_IN_PLACE : io, iv, bc, FT_INT32, NULL);
			for (size_t i = 0; rc == 0 && i < all; i++) {
				int32_t want = (int32_t)((int)(i / bc) * 7919 + (int)(i % bc));
				if (iv[i] != want) {
					fprintf(stderr, "rank %d n %d bc %zu: allgather [%zu] = %d, want %d\n",
						rank, n, bc, i, iv[i], want);
					return 4;
				}
			}
			if (rc != 0) {
				fprintf(stderr, "rank %d n %d bc %zu: %s\n", rank, n, bc, ft_strerror(rc));
				return 1;
			}
		}
		free(iv);
		free(io);
		free(fv);
		free(fo);
	}
	return 0;
}

/* 2, 3, 4, 6 and 8 ranks */
static void blocks(const char *algorithm)
{
	each_world(algorithm, run_blocks, 2, 8, true);
}

Test(algorithms, reduce_scatter_and_allgather_chosen, .timeout = 300) { blocks(NULL); }
Test(algorithms, reduce_scatter_and_allgather_rh, .timeout = 300) { blocks("rh"); }
Test(algorithms, reduce_scatter_and_allgather_ring, .timeout = 300) { blocks("ring"); }

/* A reduce-scatter whose count puts one rank on the ring while the others
 * run recursive halving: FT_EMISMATCH on every rank, and the blocks work
 * after. */
static int run_split_blocks(struct ft_comm *comm, int rank, int n, void *arg)
{
	int odd = *(const int *)arg % n;
	size_t bc = rank == odd ? 300000 : 10;
	float *buf = calloc(300000 * (size_t)n, sizeof(float)), *out = calloc(300000, sizeof(float));
	int rc = ft_reduce_scatter(comm, buf, out, bc, FT_FLOAT32, FT_SUM, NULL);

	if (rc != -FT_EMISMATCH) {
		fprintf(stderr, "rank %d: a split reduce-scatter gave %s, want FT_EMISMATCH\n", rank,
			ft_err_name(rc));
		return 1;
	}
	rc = ft_allgather(comm, rank == odd ? NULL : buf, out, rank == odd ? 0 : 10, FT_FLOAT32, NULL);
	if (rc != -FT_EMISMATCH) {
		fprintf(stderr, "rank %d: a split allgather gave %s, want FT_EMISMATCH\n", rank,
			ft_err_name(rc));
		return 2;
	}
	for (size_t i = 0; i < 10 * (size_t)n; i++)
		buf[i] = (float)rank;
	rc = ft_reduce_scatter(comm, buf, out, 10, FT_FLOAT32, FT_SUM, NULL);
	if (rc != 0 || out[9] != (float)(n * (n - 1) / 2)) {
		fprintf(stderr, "rank %d: the reduce-scatter after: %s\n", rank, ft_strerror(rc));
		return 3;
	}
	free(buf);
	free(out);
	return 0;
}

Test(algorithms, a_split_block_choice_is_a_mismatch_on_every_rank, .timeout = 200)
{
	static struct bits_arg chosen;

	bits_now = &chosen;
	for (int n = 4; n <= 8; n += 4) {
		for (int odd = 0; odd < n; odd += 3) {
			int bad = run_job(n, run_split_blocks, &odd);
			cr_assert_eq(bad, 0, "n=%d, rank %d on the ring", n, odd);
		}
	}
}

/*
 * Broadcast: a binomial tree up to 64 KiB (the ring above), from every
 * root, at 2 to 8 ranks (a root folded out, or standing for one, where the
 * ranks are not a power of two); chosen and forced ring.
 */
static int run_broadcast(struct ft_comm *comm, int rank, int n, void *argp)
{
	static const size_t sizes[] = {0, 1, 1000, 65536, 100003, 300000};
	unsigned char *buf = malloc(300000);
	(void)argp;
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		for (int root = 0; root < n; root++) {
			size_t len = sizes[si];
			for (size_t i = 0; i < len; i++)
				buf[i] = rank == root ? (unsigned char)(i * 31 + (size_t)root) : 0xee;
			int rc = ft_broadcast(comm, buf, len, root, NULL);
			if (rc != 0) {
				fprintf(stderr, "rank %d n %d root %d len %zu: %s\n", rank, n, root, len,
					ft_strerror(rc));
				return 1;
			}
			for (size_t i = 0; i < len; i++)
				if (buf[i] != (unsigned char)(i * 31 + (size_t)root)) {
					fprintf(stderr, "rank %d n %d root %d len %zu: [%zu] = %u\n", rank,
						n, root, len, i, buf[i]);
					return 2;
				}
		}
	}
	/* a root whose count puts it on the ring (above a segment) while the
	 * others take the tree: FT_EMISMATCH everywhere, none hangs */
	int odd = n - 1;
	int rc = ft_broadcast(comm, buf, rank == odd ? 300000 : 1000, odd, NULL);
	if (n > 1 && bits_now->algorithm == NULL && rc != -FT_EMISMATCH) {
		fprintf(stderr, "rank %d n %d: a split broadcast gave %s\n", rank, n, ft_err_name(rc));
		return 3;
	}
	free(buf);
	return 0;
}

static void broadcasts(const char *algorithm)
{
	each_world(algorithm, run_broadcast, 2, 8, false);
}

Test(algorithms, broadcast_from_every_root_chosen, .timeout = 300) { broadcasts(NULL); }
Test(algorithms, broadcast_from_every_root_ring, .timeout = 300) { broadcasts("ring"); }

/*
 * A rank SIGKILLed from outside at a random moment while the ranks run
 * every butterfly in turn (recursive doubling, halving and doubling, the
 * halving or doubling alone, the tree), under the abort policy: every
 * survivor returns FT_EPEERFAILED, and the next call too; none hangs.
 */
static int run_butterflies_until_failure(struct ft_comm *comm, int rank, int n, void *arg)
{
	size_t count = 16384; /* 64 KiB: halving and doubling at 4, 5 and 8 ranks */
	float *buf = malloc(count * (size_t)n * sizeof(float));
	(void)arg;
	for (int it = 0; it < 1000000; it++) {
		int rc;
		for (size_t i = 0; i < count * (size_t)n; i++)
			buf[i] = 1;
		switch (it % 5) {
		case 0:
			rc = ft_allreduce(comm, FT_IN_PLACE, buf, count, FT_FLOAT32, FT_SUM, NULL);
			break;
		case 1:
			rc = ft_allreduce(comm, FT_IN_PLACE, buf, 1024, FT_FLOAT32, FT_SUM, NULL);
			break;
		case 2:
			rc = ft_reduce_scatter(comm, FT_IN_PLACE, buf, 1024, FT_FLOAT32, FT_SUM, NULL);
			break;
		case 3:
			rc = ft_allgather(comm, FT_IN_PLACE, buf, 1024, FT_FLOAT32, NULL);
			break;
		default:
			rc = ft_broadcast(comm, buf, 4096, it % n, NULL);
			break;
		}
		if (rc == -FT_EPEERFAILED) {
			free(buf);
			return ft_barrier(comm) == -FT_EPEERFAILED ? 0 : 3; /* sticky */
		}
		if (rc != 0) {
			fprintf(stderr, "rank %d: op %d: %s\n", rank, it, ft_err_name(rc));
			return 1;
		}
	}
	return 2;
}

Test(algorithms, a_rank_killed_in_a_butterfly_fails_every_survivor, .timeout = 200)
{
	static struct bits_arg chosen;
	static const int sizes[] = {4, 5, 8};

	bits_now = &chosen;
	srand((unsigned)getpid());
	for (int trial = 0; trial < 6; trial++) {
		struct tu_job job;
		int n = sizes[trial % 3], victim = rand() % n, killed[64] = {0};
		tu_job_init(&job, n);
		for (int r = 0; r < n; r++)
			tu_spawn(&job, r, run_butterflies_until_failure, NULL, set_algorithm);
		/* mid-collective, not mid-ft_init */
		cr_assert_eq(tu_wait_ready(&job, 10000), 0, "trial %d: ranks not ready", trial);
		tu_sleep_ms(100 + rand() % 300);
		kill(job.pids[victim], SIGKILL);
		killed[victim] = 1;
		cr_assert_eq(tu_wait(&job, 15000, killed), 0, "trial %d: n=%d victim %d", trial, n,
			     victim);
		tu_job_cleanup(&job);
	}
}
