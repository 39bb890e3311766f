/* part_rank.c: a rank program for the cluster test's link-down and partition rows: in-place allreduces checked exactly over the current members. */
/* SPDX-License-Identifier: MIT */

/*
 *   part_rank SECONDS COUNT
 *
 * Loops float32 sum allreduces in place of COUNT elements plus one vote
 * element, every rank checking each result against the sum of the inputs
 * of the members the communicator has after the call (ft_size,
 * ft_orig_rank). The job stops together: a rank votes 1 once SECONDS have
 * passed since its ft_init, and every rank stops after the op whose votes
 * sum above 0. Lines (stdout, one per event; times are CLOCK_REALTIME ns,
 * comparable across the namespace hosts, which share one kernel):
 *   running pid P rank O                        after the first op
 *   view rank O gen G size S now T settled T2 known T3
 *                                               a new generation seen after
 *                                               an op (T2, T3: ft_stats's
 *                                               view_settled_ns and
 *                                               failure_known_ns in
 *                                               CLOCK_REALTIME)
 *   ok part rank O size S gen G ops N last T    finished; T: the last good op
 *   err part rank O ops N last T at T2: MESSAGE an op failed at T2
 *   WRONG rank O op I element J got X want Y size S
 * Exit: 0 ok, 43 -FT_EPARTITIONED, 42 -FT_EEXCLUDED, 2 a wrong result,
 * 1 any other error.
 */
#include <ftcc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A CLOCK_MONOTONIC time in CLOCK_REALTIME; 0 stays 0. */
static uint64_t mono_to_real(uint64_t mono)
{
	uint64_t r = now_ns(CLOCK_REALTIME), m = now_ns(CLOCK_MONOTONIC);

	return mono == 0 ? 0 : r - (m - mono);
}

/* Input of op i on original rank o at element j: small integers, every sum exact in float32. */
static float input(int o, int i, size_t j)
{
	return (float)((o + 1) * 100 + (i % 7) * 10 + (int)(j % 13));
}

int main(int argc, char **argv)
{
	struct ft_comm *comm;
	struct ft_stats st;
	struct ft_op_info info;
	double seconds;
	size_t count;
	float *buf;
	int rc, orig, ops = 0;
	uint32_t gen;
	uint64_t t0, last = 0;

	if (argc != 3) {
		fprintf(stderr, "usage: part_rank SECONDS COUNT\n");
		return 1;
	}
	seconds = atof(argv[1]);
	count = strtoull(argv[2], NULL, 10);
	buf = malloc((count + 1) * sizeof(float));
	if (buf == NULL)
		return 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	rc = ft_init(NULL, &comm);
	if (rc != 0) {
		printf("err part rank ? ops 0 last 0 at 0: ft_init: %s\n", ft_strerror(rc));
		return rc == -FT_EPARTITIONED ? 43 : rc == -FT_EEXCLUDED ? 42 : 1;
	}
	orig = ft_orig_rank(comm, ft_rank(comm));
	gen = ft_generation(comm);
	t0 = now_ns(CLOCK_MONOTONIC);
	for (int i = 0;; i++) {
		int size, stop;
		float members = 0;

		for (size_t j = 0; j < count; j++)
			buf[j] = input(orig, i, j);
		buf[count] = now_ns(CLOCK_MONOTONIC) - t0 > (uint64_t)(seconds * 1e9) ? 1.0f : 0.0f;
		rc = ft_allreduce(comm, FT_IN_PLACE, buf, count + 1, FT_FLOAT32, FT_SUM, &info);
		if (rc != 0) {
			printf("err part rank %d ops %d last %llu at %llu: %s\n", orig, ops,
			       (unsigned long long)last,
			       (unsigned long long)now_ns(CLOCK_REALTIME), ft_strerror(rc));
			/*
			 * exit, not _exit: ftcc's destructor closes its PMIx
			 * client. Under srun --mpi=pmix a client that vanishes
			 * unclosed is, to slurmstepd's PMIx server, an abnormal
			 * end (PMIX_ERR_LOST_CONNECTION, reported after PMIx's
			 * 1 s event window), and Slurm's PMIx plugin answers it by
			 * cancelling the whole step, --no-kill or not: the
			 * majority's ranks with it, whenever this host's
			 * slurmstepd outlives that second (as it does while the
			 * partition holds back its messages to srun).
			 */
			exit(rc == -FT_EPARTITIONED ? 43 : rc == -FT_EEXCLUDED ? 42 : 1);
		}
		size = ft_size(comm);
		for (int k = 0; k < size; k++)
			members += (float)((ft_orig_rank(comm, k) + 1) * 100);
		for (size_t j = 0; j < count; j++) {
			float want = members + (float)(size * ((i % 7) * 10 + (int)(j % 13)));

			if (buf[j] != want || info.contributors != size) {
				printf("WRONG rank %d op %d element %zu got %.1f want %.1f size %d contributors %d\n",
				       orig, i, j, buf[j], want, size, info.contributors);
				_exit(2);
			}
		}
		ops++;
		last = now_ns(CLOCK_REALTIME);
		stop = buf[count] > 0.5f;
		if (i == 0)
			printf("running pid %d rank %d\n", (int)getpid(), orig);
		if (ft_generation(comm) != gen) {
			gen = ft_generation(comm);
			ft_stats_get(comm, &st);
			printf("view rank %d gen %u size %d now %llu settled %llu known %llu\n", orig, gen,
			       size, (unsigned long long)last,
			       (unsigned long long)mono_to_real(st.view_settled_ns),
			       (unsigned long long)mono_to_real(st.failure_known_ns));
		}
		if (stop)
			break;
		usleep(5000);
	}
	printf("ok part rank %d size %d gen %u ops %d last %llu\n", orig, ft_size(comm), gen, ops,
	       (unsigned long long)last);
	rc = ft_finalize(comm);
	free(buf);
	return rc == 0 ? 0 : 1;
}
