/* tsan_rank.c: a rank program for `make tsan`: collectives and shrink-policy jobs, every result checked exactly. */
/* SPDX-License-Identifier: MIT */

/*
 * Criterion's runner cannot start under ThreadSanitizer, so `make tsan`
 * builds the library and this program with -fsanitize=thread and runs them
 * as real jobs under ftcc-run (scripts/tsan.sh). The environment configures
 * the communicator (FTCC_POLICY, FTCC_TRANSPORT, FI_PROVIDER, ...).
 *
 *   tsan_rank collectives ITERS
 *       allreduce (several dtypes, ops and counts, in place and not),
 *       broadcast from every root and barriers, ITERS rounds.
 *   tsan_rank shrink EXPECT_LOST AFTER_OPS COUNT
 *       allreduces (int64 sum, float64 average) checked against the inputs
 *       of the members left after each call, until the job has lost
 *       EXPECT_LOST ranks and run AFTER_OPS more ops; victims are killed or
 *       stopped from outside. Every fifth op is a barrier, every fifth
 *       a broadcast. Prints "running pid P" after the first op. With
 *       TSAN_RANK_HOLD=FILE the members go on until FILE exists (a stopped
 *       rank let go must find itself left out while they still run).
 *
 * Exit: 0 and a line "ok ..." on success, 42 if this rank was left out of
 * the view (-FT_EEXCLUDED), 1 on any other error.
 */
#include <ftcc.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_OPS 200000

static int fail(int rank, const char *what, int rc)
{
	fprintf(stderr, "tsan_rank %d: %s: %s\n", rank, what, ft_strerror(rc));
	return rc == -FT_EEXCLUDED ? 42 : 1;
}

/* Element j of rank r's input, small integers so that every sum is exact. */
static int64_t value(int r, int round, size_t j)
{
	return (int64_t)((j * 7 + (size_t)r * 13 + (size_t)round) % 101);
}

static int check_allreduce(struct ft_comm *comm, int round, size_t count, enum ft_dtype dt,
			   enum ft_op op, int in_place)
{
	int rank = ft_rank(comm), size = ft_size(comm), rc;
	size_t es = ft_dtype_size(dt);
	void *in = malloc(count * es + 1), *out = malloc(count * es + 1);

	if (in == NULL || out == NULL)
		return fail(rank, "malloc", -FT_ENOMEM);
	for (size_t j = 0; j < count; j++) {
		int64_t v = value(rank, round, j);
		if (dt == FT_INT32)
			((int32_t *)in)[j] = (int32_t)v;
		else if (dt == FT_INT64)
			((int64_t *)in)[j] = v;
		else
			((double *)in)[j] = (double)v;
	}
	if (in_place)
		memcpy(out, in, count * es);
	rc = ft_allreduce(comm, in_place ? FT_IN_PLACE : in, out, count, dt, op, NULL);
	if (rc != 0) {
		free(in);
		free(out);
		return fail(rank, "ft_allreduce", rc);
	}
	for (size_t j = 0; j < count; j++) {
		int64_t want = op == FT_MAX ? INT64_MIN : 0, got;
		for (int r = 0; r < size; r++) {
			int64_t v = value(r, round, j);
			want = op == FT_MAX ? (v > want ? v : want) : want + v;
		}
		if (dt == FT_INT32)
			got = ((int32_t *)out)[j];
		else if (dt == FT_INT64)
			got = ((int64_t *)out)[j];
		else
			got = (int64_t)((double *)out)[j];
		if (got != want) {
			fprintf(stderr, "tsan_rank %d: allreduce count %zu dtype %d op %d: element %zu is %lld, want %lld\n",
				rank, count, (int)dt, (int)op, j, (long long)got, (long long)want);
			free(in);
			free(out);
			return 1;
		}
	}
	free(in);
	free(out);
	return 0;
}

static int collectives(struct ft_comm *comm, int iters)
{
	static const size_t counts[] = {0, 1, 7, 1000, 300007};
	static const enum ft_dtype dts[] = {FT_INT32, FT_INT64, FT_FLOAT64};
	int rank = ft_rank(comm), size = ft_size(comm), rc;
	size_t bytes = 200003;
	unsigned char *buf = malloc(bytes);

	if (buf == NULL)
		return fail(rank, "malloc", -FT_ENOMEM);
	for (int it = 0; it < iters; it++) {
		for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
			for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
				rc = check_allreduce(comm, it, counts[c], dts[d], (c + d) % 2 ? FT_MAX : FT_SUM,
						     (int)((c + d + (size_t)it) % 2));
				if (rc != 0)
					goto out;
			}
		for (int root = 0; root < size; root++) {
			for (size_t j = 0; j < bytes; j++)
				buf[j] = rank == root ? (unsigned char)(j * 7 + (size_t)root + (size_t)it) : 0xee;
			if ((rc = ft_broadcast(comm, buf, bytes, root, NULL)) != 0) {
				rc = fail(rank, "ft_broadcast", rc);
				goto out;
			}
			for (size_t j = 0; j < bytes; j++)
				if (buf[j] != (unsigned char)(j * 7 + (size_t)root + (size_t)it)) {
					fprintf(stderr, "tsan_rank %d: broadcast from %d: byte %zu wrong\n",
						rank, root, j);
					rc = 1;
					goto out;
				}
			if ((rc = ft_barrier(comm)) != 0) {
				rc = fail(rank, "ft_barrier", rc);
				goto out;
			}
		}
	}
	printf("ok collectives rank %d size %d iters %d\n", rank, size, iters);
	rc = 0;
out:
	free(buf);
	return rc;
}

/* Input of op i on original rank m at element j, as in test_shrink.c. */
static double input(int orig, int i, size_t j)
{
	return (orig + 1) * 1000.0 + (i % 7) * 10.0 + (double)(j % 13);
}

static int shrink_op(struct ft_comm *comm, int orig, int i, size_t count, void *in, void *out)
{
	struct ft_op_info info;
	int is_avg = i % 2 == 1, in_place = i % 3 == 0, rc, size;
	void *dst = in_place ? in : out;
	double members = 0;

	for (size_t j = 0; j < count; j++) {
		if (is_avg)
			((double *)in)[j] = input(orig, i, j);
		else
			((int64_t *)in)[j] = (int64_t)input(orig, i, j);
	}
	rc = ft_allreduce(comm, in_place ? FT_IN_PLACE : in, dst, count,
			  is_avg ? FT_FLOAT64 : FT_INT64, is_avg ? FT_AVG : FT_SUM, &info);
	if (rc != 0)
		return fail(orig, "ft_allreduce", rc);
	size = ft_size(comm);
	if (info.contributors != size || info.generation != ft_generation(comm)) {
		fprintf(stderr, "tsan_rank %d op %d: info says %d contributors, generation %u; comm says %d, %u\n",
			orig, i, info.contributors, info.generation, size, ft_generation(comm));
		return 1;
	}
	for (int k = 0; k < size; k++)
		members += (ft_orig_rank(comm, k) + 1) * 1000.0;
	for (size_t j = 0; j < count; j++) {
		double want = members + size * ((i % 7) * 10.0 + (double)(j % 13));
		int bad = is_avg ? fabs(((double *)dst)[j] - want / size) > 1e-9 * want
				 : ((int64_t *)dst)[j] != (int64_t)want;
		if (bad) {
			fprintf(stderr, "tsan_rank %d op %d: element %zu wrong over %d ranks\n", orig, i,
				j, size);
			return 1;
		}
	}
	return 0;
}

/* A broadcast from the last member; its death fails the op (-FT_EROOTFAILED) on every survivor. */
static int shrink_broadcast(struct ft_comm *comm, int orig, int i, unsigned char *buf, size_t bytes)
{
	int root = ft_size(comm) - 1, root_orig = ft_orig_rank(comm, root), rc;

	for (size_t j = 0; j < bytes; j++)
		buf[j] = orig == root_orig ? (unsigned char)(i * 31 + (int)j * 7) : 0xee;
	rc = ft_broadcast(comm, buf, bytes, root, NULL);
	if (rc == -FT_EROOTFAILED) {
		for (int k = 0; k < ft_size(comm); k++)
			if (ft_orig_rank(comm, k) == root_orig) {
				fprintf(stderr, "tsan_rank %d op %d: root failed, but rank %d is a member\n",
					orig, i, root_orig);
				return 1;
			}
		return 0;
	}
	if (rc != 0)
		return fail(orig, "ft_broadcast", rc);
	for (size_t j = 0; j < bytes; j++)
		if (buf[j] != (unsigned char)(i * 31 + (int)j * 7)) {
			fprintf(stderr, "tsan_rank %d broadcast %d: byte %zu wrong\n", orig, i, j);
			return 1;
		}
	return 0;
}

/* Whether any member has the file TSAN_RANK_HOLD (unset: yes); every member gets the same answer. */
static int released(struct ft_comm *comm, int orig, int *rc)
{
	const char *hold = getenv("TSAN_RANK_HOLD");
	int32_t v;

	if (hold == NULL)
		return 1;
	v = access(hold, F_OK) == 0;
	*rc = ft_allreduce(comm, FT_IN_PLACE, &v, 1, FT_INT32, FT_MAX, NULL);
	if (*rc != 0)
		*rc = fail(orig, "ft_allreduce (hold)", *rc);
	return v;
}

static int shrink(struct ft_comm *comm, int n, int expect_lost, int after_ops, size_t count)
{
	uint32_t gen = ft_generation(comm);
	/* a rank lost in ft_init changed the membership before op 0: a later
	 * generation, or (killed before the first view settled) a first view
	 * without it */
	int orig = ft_orig_rank(comm, ft_rank(comm)), i, rc = 0;
	int changed_at = gen > 0 || ft_size(comm) < n ? 0 : -1;
	void *in = malloc(count * 8 + 8), *out = malloc(count * 8 + 8);

	if (in == NULL || out == NULL)
		return fail(orig, "malloc", -FT_ENOMEM);
	for (i = 0; i < MAX_OPS; i++) {
		if (n - ft_size(comm) >= expect_lost && changed_at >= 0 && i - changed_at >= after_ops &&
		    (released(comm, orig, &rc) || rc != 0))
			break;
		if (i % 5 == 4) {
			if ((rc = ft_barrier(comm)) != 0)
				rc = fail(orig, "ft_barrier", rc);
		} else if (i % 5 == 2)
			rc = shrink_broadcast(comm, orig, i, in, count * 8);
		else
			rc = shrink_op(comm, orig, i, count, in, out);
		if (rc != 0)
			break;
		if (i == 0) {
			printf("running pid %d\n", (int)getpid());
			fflush(stdout);
		}
		if (ft_generation(comm) != gen) {
			gen = ft_generation(comm);
			changed_at = i;
			printf("view generation %u size %d\n", gen, ft_size(comm));
		}
	}
	free(in);
	free(out);
	if (rc != 0)
		return rc;
	printf("ok shrink rank %d size %d generation %u ops %d\n", orig, ft_size(comm),
	       ft_generation(comm), i);
	return i == MAX_OPS ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct ft_comm *comm;
	int rc, n;

	if (argc < 2 || (strcmp(argv[1], "collectives") == 0 ? argc != 3
			 : strcmp(argv[1], "shrink") != 0 || argc != 5)) {
		fprintf(stderr, "usage: tsan_rank collectives ITERS\n"
				"       tsan_rank shrink EXPECT_LOST AFTER_OPS COUNT\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	rc = ft_init(NULL, &comm);
	if (rc != 0)
		return fail(-1, "ft_init", rc);
	/* the world at launch: ranks lost in ft_init count as lost */
	n = getenv("FTCC_WORLD_SIZE") != NULL ? atoi(getenv("FTCC_WORLD_SIZE")) : ft_size(comm);
	if (strcmp(argv[1], "collectives") == 0)
		rc = collectives(comm, atoi(argv[2]));
	else
		rc = shrink(comm, n, atoi(argv[2]), atoi(argv[3]), strtoull(argv[4], NULL, 10));
	int frc = ft_finalize(comm);
	if (rc == 0 && frc != 0)
		rc = fail(-1, "ft_finalize", frc);
	return rc;
}
