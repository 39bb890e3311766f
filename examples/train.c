/* train.c: data-parallel SGD on a linear model; gradients averaged with ft_allreduce every step (train [STEPS] [PAUSE_MS]). */
/* SPDX-License-Identifier: MIT */
#include <ftcc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DIM 4096
#define SAMPLES 64

/* The true weights, and each rank's own samples drawn around them. */
static float truth(int j) { return sinf((float)j * 0.01f); }

/* Seconds on ftcc-run's clock (FTCC_RUN_T0_NS) of a CLOCK_MONOTONIC time in ns. */
static double run_seconds(unsigned long long ns)
{
	const char *t0 = getenv("FTCC_RUN_T0_NS");
	return t0 != NULL ? (double)(ns - strtoull(t0, NULL, 10)) / 1e9 : (double)ns / 1e9;
}

/* Notes the original ranks of the current members (at most 256); returns how many. */
static int remember_members(struct ft_comm *comm, int *members)
{
	int n = ft_size(comm) < 256 ? ft_size(comm) : 256;

	for (int k = 0; k < n; k++)
		members[k] = ft_orig_rank(comm, k);
	return n;
}

/* One line per recovery: who was lost, when this rank knew, what it cost. */
static void report_recovery(struct ft_comm *comm, int step, const int *before, int nbefore,
			    const struct ft_op_info *info)
{
	struct ft_stats st;
	char lost[256] = "";
	size_t len = 0;

	for (int i = 0; i < nbefore; i++) {
		int still = 0;
		for (int k = 0; k < ft_size(comm); k++)
			still |= ft_orig_rank(comm, k) == before[i];
		if (!still)
			len += (size_t)snprintf(lost + len, sizeof(lost) - len, "%s%d", len ? "," : "",
						before[i]);
	}
	ft_stats_get(comm, &st);
	printf("step %d: rank %s lost; known here at %.4f s, new view at %.4f s; "
	       "%.1f ms of recovery inside the call; %d contributors; generation %u\n",
	       step, lost, run_seconds(st.failure_known_ns), run_seconds(st.view_settled_ns),
	       info->recovery_ms, info->contributors, info->generation);
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 200;
	int pause_ms = argc > 2 ? atoi(argv[2]) : 0;   /* stands for a longer backward pass */
	static float w[DIM], grad[DIM], x[SAMPLES][DIM], y[SAMPLES];
	struct ft_comm *comm;
	struct ft_op_info info;
	int rc, rank, members[256], nmembers;

	if ((rc = ft_init(NULL, &comm)) != 0) {
		fprintf(stderr, "ft_init: %s\n", ft_strerror(rc));
		return 1;
	}
	rank = ft_rank(comm);
	srand(1234u + (unsigned)rank);
	for (int s = 0; s < SAMPLES; s++) {
		y[s] = 0;
		for (int j = 0; j < DIM; j++) {
			x[s][j] = (float)rand() / (float)RAND_MAX - 0.5f;
			y[s] += x[s][j] * truth(j);
		}
	}
	nmembers = remember_members(comm, members);
	for (int step = 0; step < steps; step++) {
		float loss = 0;
		for (int j = 0; j < DIM; j++)
			grad[j] = 0;
		for (int s = 0; s < SAMPLES; s++) {
			float err = -y[s];
			for (int j = 0; j < DIM; j++)
				err += w[j] * x[s][j];
			loss += err * err / SAMPLES;
			for (int j = 0; j < DIM; j++)
				grad[j] += 2 * err * x[s][j] / SAMPLES;
		}
		if (pause_ms > 0)
			nanosleep(&(struct timespec){pause_ms / 1000, (pause_ms % 1000) * 1000000L}, NULL);
		rc = ft_allreduce(comm, FT_IN_PLACE, grad, DIM, FT_FLOAT32, FT_AVG, &info);
		if (rc != 0) {
			fprintf(stderr, "step %d: ft_allreduce: %s\n", step, ft_strerror(rc));
			return 1;
		}
		if (info.failed > 0) {
			if (ft_rank(comm) == 0)
				report_recovery(comm, step, members, nmembers, &info);
			nmembers = remember_members(comm, members);
		}
		for (int j = 0; j < DIM; j++)
			w[j] -= 0.05f * grad[j];
		rc = ft_allreduce(comm, FT_IN_PLACE, &loss, 1, FT_FLOAT32, FT_AVG, &info);
		if (rc == 0 && info.failed > 0) {
			if (ft_rank(comm) == 0)
				report_recovery(comm, step, members, nmembers, &info);
			nmembers = remember_members(comm, members);
		}
		if (rc != 0) {
			fprintf(stderr, "step %d: ft_allreduce: %s\n", step, ft_strerror(rc));
			return 1;
		}
		if (ft_rank(comm) == 0 && (step % 50 == 0 || step == steps - 1))
			printf("step %4d  loss %.5f  ranks %d  generation %u\n", step, loss,
			       info.contributors, info.generation);
	}
	/* Every rank must hold the same model: compare with rank 0's copy. */
	static float w0[DIM];
	for (int j = 0; j < DIM; j++)
		w0[j] = w[j];
	if ((rc = ft_broadcast(comm, w0, sizeof(w0), 0, NULL)) != 0) {
		fprintf(stderr, "ft_broadcast: %s\n", ft_strerror(rc));
		return 1;
	}
	for (int j = 0; j < DIM; j++)
		if (w0[j] != w[j]) {
			fprintf(stderr, "rank %d: model diverged at %d\n", rank, j);
			return 1;
		}
	if (ft_rank(comm) == 0)
		printf("all %d ranks hold the same model\n", ft_size(comm));
	return ft_finalize(comm) == 0 ? 0 : 1;
}
