/* train_rejoin.c: data-parallel training that survives a killed and restarted rank exactly (train_rejoin [STEPS] [COUNT] [PAUSE_MS] [rs|ag|oop|zero]). */
/* SPDX-License-Identifier: MIT */
#include <ftcc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * Every step each rank computes a gradient from its own samples (random
 * float32: the summation order shows in the bits) and the current model,
 * sums the gradients in place with ft_allreduce, and updates the model.
 * Run it with FTCC_POLICY=rejoin under `ftcc-run --restart`: a rank killed
 * midway is started again, learns where the job stands (ft_rejoined), gets
 * the model from a survivor (ft_state_register, ft_state_sync) and goes on.
 * Each op prints a digest of its result; at the end each rank prints a
 * digest of its model. They equal those of a run where nothing fails.
 *
 * With "rs", each step reduces n blocks of COUNT gradients with
 * ft_reduce_scatter in place instead, and prints the digest of this rank's
 * block (different on every rank); with "ag", each rank's COUNT gradients
 * are gathered with ft_allgather in place, and the digest is the whole
 * buffer's. The model then stays as it is. With "oop", the allreduce is
 * out of place: the gradients stay, the sum lands in a buffer of its own,
 * and the gradients are overwritten at once (a log must hold its own copy
 * of the input).
 *
 * With "zero", the model has n blocks of COUNT, and each step is two ops,
 * as a sharded optimizer runs them: ft_reduce_scatter of the gradients (in
 * place), this rank's block of the model updated with its block of the
 * sum, and ft_allgather of the model's blocks (in place). Only the
 * allgather prints a digest (the whole model's). The allgather's input,
 * the updated block, is what a new incarnation cannot compute again: the
 * sum it came from is gone with the rank. Killed inside the allgather, the
 * rank's new incarnation replays it from its log in ft_init, and goes on
 * at the next step. Resumed at an allgather otherwise (killed between the
 * two ops), it has no updated block, and the job's model comes out wrong:
 * the tests kill it inside allgathers only.
 */

/* FNV-1a over 8-byte words (then the tail bytes): a digest that costs the
 * step little next to a byte at a time (a 64 MiB model: 10 ms against
 * 300 here), since the time a rejoin takes is measured with it in the way */
static uint64_t fnv(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull, w;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		memcpy(&w, b + i, 8);
		h = (h ^ w) * 1099511628211ull;
	}
	for (; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* xorshift64*: the same samples for the same (rank, step) in every run */
static float sample(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return (float)((*s * 2685821657736338717ull) >> 40) / (float)(1u << 24) - 0.5f;
}

/* "zero": op 2s + 1 is step s's reduce-scatter, op 2s + 2 its allgather;
 * next, the first op this process runs. 0, or 1 when an op failed. */
static int zero_steps(struct ft_comm *comm, float *model, float *grad, size_t block, int steps,
		      int pause_ms, uint64_t next)
{
	struct timespec pause = {pause_ms / 1000, (long)(pause_ms % 1000) * 1000000L};
	int me = ft_orig_rank(comm, ft_rank(comm)), n = ft_size(comm), r = ft_rank(comm), rc;
	size_t total = block * (size_t)n;
	float *mine = model + (size_t)r * block;

	for (uint64_t op = next; op <= 2 * (uint64_t)steps; op++) {
		struct ft_op_info info;
		uint64_t step = (op - 1) / 2;
		if (op % 2 == 1) {
			uint64_t seed = ((uint64_t)me << 32 | step) * 0x9e3779b97f4a7c15ull + 1;
			for (size_t j = 0; j < total; j++)
				grad[j] = sample(&seed) + 0.001f * model[j];
			rc = ft_reduce_scatter(comm, FT_IN_PLACE, grad, block, FT_FLOAT32, FT_SUM,
					       &info);
			for (size_t j = 0; j < block && rc == 0; j++)
				mine[j] -= 0.01f * grad[(size_t)r * block + j];
		} else {
			rc = ft_allgather(comm, FT_IN_PLACE, model, block, FT_FLOAT32, &info);
			if (rc == 0)
				printf("op %llu digest %016llx contributors %d\n",
				       (unsigned long long)info.op_seq,
				       (unsigned long long)fnv(model, total * sizeof(float)),
				       info.contributors);
		}
		if (rc != 0) {
			fprintf(stderr, "op %llu: %s\n", (unsigned long long)op, ft_strerror(rc));
			return 1;
		}
		if (pause_ms > 0)
			nanosleep(&pause, NULL);
	}
	return 0;
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 200;
	size_t count = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : 65536;
	int pause_ms = argc > 3 ? atoi(argv[3]) : 5;
	struct timespec pause = {pause_ms / 1000, (long)(pause_ms % 1000) * 1000000L};
	const char *coll = argc > 4 ? argv[4] : "";
	int rs = strcmp(coll, "rs") == 0, ag = strcmp(coll, "ag") == 0, oop = strcmp(coll, "oop") == 0;
	int zero = strcmp(coll, "zero") == 0;
	struct ft_comm *comm;
	float *model, *grad, *sum;
	uint64_t next;
	size_t total = count;
	int rc, me, back;

	setvbuf(stdout, NULL, _IOLBF, 0); /* lines as they happen, also into a pipe */
	if (steps < 1 || count < 1) {
		fprintf(stderr, "usage: train_rejoin [STEPS] [COUNT] [PAUSE_MS]\n");
		return 2;
	}
	if ((rc = ft_init(NULL, &comm)) != 0) {
		fprintf(stderr, "ft_init: %s\n", ft_strerror(rc));
		return 1;
	}
	if (rs || ag || zero)
		total = count * (size_t)ft_size(comm);
	if (zero)
		count = total; /* the model: every rank's block */
	model = calloc(count, sizeof(float));
	if (model == NULL)
		return 1;
	grad = malloc(total * sizeof(float));
	sum = oop ? malloc(count * sizeof(float)) : grad;
	if (grad == NULL || sum == NULL)
		return 1;
	me = ft_orig_rank(comm, ft_rank(comm));
	if ((rc = ft_state_register(comm, model, count * sizeof(float), FT_STATE_REPLICATED)) != 0 ||
	    (rc = ft_state_sync(comm)) != 0) {
		fprintf(stderr, "state: %s\n", ft_strerror(rc));
		return 1;
	}
	back = ft_rejoined(comm, &next);
	if (back == 1)
		printf("rank %d rejoined: the job stands at op %llu; model %016llx\n", me,
		       (unsigned long long)next, (unsigned long long)fnv(model, count * sizeof(float)));
	if (zero && zero_steps(comm, model, grad, total / (size_t)ft_size(comm), steps, pause_ms,
			       back == 1 ? next : 1) != 0)
		return 1;
	/* op 0 is ft_init's barrier: step s is op s + 1 (zero: done above) */
	for (int step = zero ? steps : back == 1 ? (int)next - 1 : 0; step < steps; step++) {
		struct ft_op_info info;
		uint64_t seed = ((uint64_t)me << 32 | (uint64_t)step) * 0x9e3779b97f4a7c15ull + 1;
		const float *result = grad;
		size_t digested = count;
		for (size_t j = 0; j < total; j++)
			grad[j] = sample(&seed) + 0.001f * model[j % count];
		if (rs) {
			result = grad + (size_t)ft_rank(comm) * count; /* the block of the view called in */
			rc = ft_reduce_scatter(comm, FT_IN_PLACE, grad, count, FT_FLOAT32, FT_SUM, &info);
		} else if (ag) {
			/* this rank's block is already in place (samples of its own seed) */
			digested = total;
			rc = ft_allgather(comm, FT_IN_PLACE, grad, count, FT_FLOAT32, &info);
		} else {
			result = sum;
			rc = ft_allreduce(comm, oop ? grad : FT_IN_PLACE, sum, count, FT_FLOAT32, FT_SUM,
					  &info);
			if (oop)
				memset(grad, 0xa5, count * sizeof(float));
		}
		if (rc != 0) {
			fprintf(stderr, "step %d: %s\n", step, ft_strerror(rc));
			return 1;
		}
		for (size_t j = 0; j < count && !rs && !ag; j++)
			model[j] -= 0.01f * sum[j];
		printf("op %llu digest %016llx contributors %d\n", (unsigned long long)info.op_seq,
		       (unsigned long long)fnv(result, digested * sizeof(float)), info.contributors);
		if (pause_ms > 0)
			nanosleep(&pause, NULL);
	}
	printf("model %016llx\n", (unsigned long long)fnv(model, count * sizeof(float)));
	rc = ft_finalize(comm);
	free(model);
	if (oop)
		free(sum);
	free(grad);
	return rc == 0 ? 0 : 1;
}
