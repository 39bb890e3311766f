/* train_steps.c: steps of several collectives that a restarted rank resumes exactly, mid-step too (train_steps [STEPS] [COUNT] [PAUSE_MS] [naive|-] [fork]). */
/* SPDX-License-Identifier: MIT */
#include <ftcc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/*
 * SGD with momentum. Each step: (0) average the gradients (ft_allreduce);
 * update momentum and model; (1) every 7th step, broadcast the model from
 * rank 0; (2) every 11th step, agree on the largest loss (ft_allreduce
 * MAX) and scale the learning rate by it.
 *
 * A rank that rejoins (FTCC_POLICY=rejoin, `ftcc-run --restart`) gets the
 * registered state as it was when the survivors entered the collective it
 * must call next, which may be the second or third of a step. So the
 * program registers *where it is* with its state: `at` says which step and
 * which of its collectives comes next, written before each collective
 * call. A newcomer resumes exactly there. Every collective's input is a
 * function of registered state and (rank, step): nothing it needs lives
 * only in a local variable of the step. (A program that resumed at the
 * step's start would call the wrong collective: the library then sends it
 * away with FT_EEXCLUDED and the survivors go on. "naive" makes this
 * program that mistake, to show it.) With "fork", each rank first forks a
 * worker that outlives it by a few seconds, as a data loader's do: the
 * library keeps the worker from holding the rank's links and lock.
 *
 * Each op prints a digest of its result, and each rank its model's at the
 * end: equal to those of a run where nothing fails.
 */

struct where {
	uint64_t step;          /* the step under way */
	uint64_t coll;          /* its next collective: 0, 1 or 2 */
};

struct schedule {
	float lr;
	float pad;
};

static uint64_t fnv(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

static float sample(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return (float)((*s * 2685821657736338717ull) >> 40) / (float)(1u << 24) - 0.5f;
}

static int report(const char *what, uint64_t step, int rc, const struct ft_op_info *info,
		  const void *p, size_t n)
{
	if (rc != 0) {
		fprintf(stderr, "step %llu %s: %s\n", (unsigned long long)step, what, ft_strerror(rc));
		return 1;
	}
	printf("op %llu digest %016llx contributors %d\n", (unsigned long long)info->op_seq,
	       (unsigned long long)fnv(p, n), info->contributors);
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t steps = argc > 1 ? strtoull(argv[1], NULL, 10) : 100;
	size_t count = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : 4096;
	int pause_ms = argc > 3 ? atoi(argv[3]) : 5;
	int naive = argc > 4 && strcmp(argv[4], "naive") == 0;
	int worker = argc > 5 && strcmp(argv[5], "fork") == 0;
	struct timespec pause = {pause_ms / 1000, (long)(pause_ms % 1000) * 1000000L};
	struct where at = {0, 0};
	struct schedule sched = {0.05f, 0};
	struct ft_comm *comm;
	struct ft_op_info info;
	float *model, *mom, *grad, loss;
	int rc, me;

	setvbuf(stdout, NULL, _IOLBF, 0);
	model = calloc(count, sizeof(float));
	mom = calloc(count, sizeof(float));
	grad = malloc(count * sizeof(float));
	if (model == NULL || mom == NULL || grad == NULL || count == 0)
		return 2;
	if ((rc = ft_init(NULL, &comm)) != 0) {
		fprintf(stderr, "ft_init: %s\n", ft_strerror(rc));
		return 1;
	}
	me = ft_orig_rank(comm, ft_rank(comm));
	if (worker) {
		pid_t pid = fork();
		if (pid == 0) {
			struct timespec nap = {3, 0};
			nanosleep(&nap, NULL); /* a loader's worker: no ftcc here */
			_exit(0);
		}
		if (pid < 0)
			perror("fork");
	}
	if ((rc = ft_state_register(comm, model, count * sizeof(float), FT_STATE_REPLICATED)) < 0 ||
	    (rc = ft_state_register(comm, mom, count * sizeof(float), FT_STATE_REPLICATED)) < 0 ||
	    (rc = ft_state_register(comm, &sched, sizeof(sched), FT_STATE_REPLICATED)) < 0 ||
	    (rc = ft_state_register(comm, &at, sizeof(at), FT_STATE_REPLICATED)) < 0 ||
	    (rc = ft_state_sync(comm)) != 0) {
		fprintf(stderr, "state: %s\n", ft_strerror(rc));
		return 1;
	}
	if (ft_rejoined(comm, NULL) == 1)
		printf("rank %d rejoined: the job stands at step %llu, collective %llu\n", me,
		       (unsigned long long)at.step, (unsigned long long)at.coll);
	if (naive)
		at.coll = 0; /* the mistake: the step's start, not where the job stands */
	for (; at.step < steps; at.step++, at.coll = 0) {
		uint64_t seed = ((uint64_t)me << 32 | at.step) * 0x9e3779b97f4a7c15ull + 1;
		if (at.coll == 0) {
			for (size_t j = 0; j < count; j++)
				grad[j] = sample(&seed) + 0.01f * model[j];
			rc = ft_allreduce(comm, FT_IN_PLACE, grad, count, FT_FLOAT32, FT_AVG, &info);
			if (report("gradients", at.step, rc, &info, grad, count * sizeof(float)))
				return 1;
			for (size_t j = 0; j < count; j++) {
				mom[j] = 0.9f * mom[j] + grad[j];
				model[j] -= sched.lr * mom[j];
			}
			at.coll = 1;
		}
		if (at.coll == 1 && at.step % 7 == 0) {
			rc = ft_broadcast(comm, model, count * sizeof(float), 0, &info);
			/* its root died (shrink): every survivor is told so and
			 * keeps its model, the same on all of them */
			if (rc == -FT_EROOTFAILED)
				printf("step %llu: the broadcast's root failed\n",
				       (unsigned long long)at.step);
			else if (report("broadcast", at.step, rc, &info, model, count * sizeof(float)))
				return 1;
		}
		at.coll = 2;
		if (at.step % 11 == 0) {
			loss = 0;
			for (size_t j = 0; j < count; j += 97)
				loss += model[j] * model[j] * (float)(me + 1);
			rc = ft_allreduce(comm, FT_IN_PLACE, &loss, 1, FT_FLOAT32, FT_MAX, &info);
			if (report("loss", at.step, rc, &info, &loss, sizeof(loss)))
				return 1;
			sched.lr = 0.05f / (1.0f + loss);
		}
		if (pause_ms > 0)
			nanosleep(&pause, NULL);
	}
	printf("model %016llx\n", (unsigned long long)fnv(model, count * sizeof(float)));
	rc = ft_finalize(comm);
	free(model);
	free(mom);
	free(grad);
	return rc == 0 ? 0 : 1;
}
