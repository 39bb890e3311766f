/* train.c: data-parallel SGD on a linear model; gradients averaged with ft_allreduce every step. */
#include <ftcc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define DIM 4096
#define SAMPLES 64

/* The true weights, and each rank's own samples drawn around them. */
static float truth(int j) { return sinf((float)j * 0.01f); }

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 200;
	static float w[DIM], grad[DIM], x[SAMPLES][DIM], y[SAMPLES];
	struct ft_comm *comm;
	struct ft_op_info info;
	int rc, rank;

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
		rc = ft_allreduce(comm, FT_IN_PLACE, grad, DIM, FT_FLOAT32, FT_AVG, &info);
		if (rc != 0) {
			fprintf(stderr, "step %d: ft_allreduce: %s\n", step, ft_strerror(rc));
			return 1;
		}
		for (int j = 0; j < DIM; j++)
			w[j] -= 0.05f * grad[j];
		rc = ft_allreduce(comm, FT_IN_PLACE, &loss, 1, FT_FLOAT32, FT_AVG, NULL);
		if (rc != 0) {
			fprintf(stderr, "step %d: ft_allreduce: %s\n", step, ft_strerror(rc));
			return 1;
		}
		if (rank == 0 && (step % 50 == 0 || step == steps - 1))
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
	if (rank == 0)
		printf("all %d ranks hold the same model\n", ft_size(comm));
	return ft_finalize(comm) == 0 ? 0 : 1;
}
