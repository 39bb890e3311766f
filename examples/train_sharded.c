/* train_sharded.c: sharded state that survives a killed and restarted rank, or is taken over by the survivors, through running partial checkpoints (train_sharded [STEPS] [COUNT] [PAUSE_MS] [late|take]). */
/* SPDX-License-Identifier: MIT */
#include <ftcc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * Each rank owns a shard (COUNT float32, say its optimizer state in a
 * fully sharded job) whose element j is after step s exactly val(rank, s,
 * j); the ranks keep in step with a small allreduce. The shard is
 * checkpointed every step (SCAR priority, a quarter of its blocks). Run it
 * with FTCC_POLICY=rejoin under `ftcc-run --restart` and kill a rank: the
 * new incarnation gets its shard back from its checkpoint in ft_state_sync
 * and checks that each block holds the values of one earlier step (the
 * step it was saved at). Every rank ends with "shard ok" when its shard is
 * exactly what a run without failures holds. "late" as the fourth
 * argument: a rejoined rank enables checkpoints after ft_state_sync (its
 * shard comes back in ft_ckpt_enable then). Started with FTCC_CKPT_FROM
 * set to an export of an earlier run's checkpoint (ftcc-ckpt export), it
 * checks the shard it starts from the same way, and goes on from the step
 * of the export's newest block.
 *
 * "take" as the fourth argument, under FTCC_POLICY=shrink: when the job
 * shrinks, every survivor reads each lost rank's whole shard back from its
 * running checkpoint (ft_ckpt_restore with that owner: from its files, or
 * with FTCC_CKPT_WHERE=peer from the memory of the rank that held it) and
 * checks it the same way ("took rank R's shard ok").
 */

static float val(int rank, uint64_t step, size_t j)
{
	return (float)(rank * 1000 + (int)(j % 97)) + 0.5f * (float)step;
}

/* Blocks that do not hold the values of one step within the restore's range. */
static size_t check_blocks(const float *shard, size_t count, size_t nb, size_t bb, int owner,
			   const struct ft_restore_info *ri)
{
	size_t bad = 0;

	for (size_t b = 0; b < nb; b++) {
		size_t j0 = b * bb / sizeof(float), j1 = (b + 1) * bb / sizeof(float);
		float s = (shard[j0] - val(owner, 0, j0)) / 0.5f;
		if (s < (float)ri->oldest_step || s > (float)ri->ckpt_step)
			bad++;
		for (size_t j = j0; j < j1 && j < count; j++)
			bad += shard[j] != val(owner, (uint64_t)s, j);
	}
	return bad;
}

/* Survivors of a shrink: every lost rank's shard back from its checkpoint. */
static int take_over(struct ft_comm *comm, int world, unsigned char *gone, size_t count)
{
	float *buf = malloc(count * sizeof(float));
	int rc = 0;

	if (buf == NULL)
		return -FT_ENOMEM;
	for (int o = 0; o < world && rc == 0; o++) {
		struct ft_restore_info ri;
		size_t nb = 0, bb = 0;
		bool here = false;
		for (int i = 0; i < ft_size(comm); i++)
			here |= ft_orig_rank(comm, i) == o;
		if (here || gone[o])
			continue;
		gone[o] = 1;
		if ((rc = ft_ckpt_blocks(comm, 1, o, &nb, &bb, NULL)) != 0 ||
		    (rc = ft_ckpt_restore(comm, 1, o, 0, nb, buf, 0, &ri)) != 0)
			break;
		printf("rank %d took rank %d's shard %s: %zu blocks, steps %llu..%llu\n",
		       ft_orig_rank(comm, ft_rank(comm)), o,
		       check_blocks(buf, count, nb, bb, o, &ri) ? "BAD" : "ok", ri.blocks,
		       (unsigned long long)ri.oldest_step, (unsigned long long)ri.ckpt_step);
	}
	free(buf);
	return rc;
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 100;
	size_t count = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : 16384;
	int pause_ms = argc > 3 ? atoi(argv[3]) : 5;
	int late = argc > 4 && strcmp(argv[4], "late") == 0;
	int take = argc > 4 && strcmp(argv[4], "take") == 0;
	unsigned char gone[1024] = {0};
	struct timespec pause = {pause_ms / 1000, (long)(pause_ms % 1000) * 1000000L};
	struct ft_ckpt_config ck = FT_CKPT_CONFIG_INIT;
	struct ft_restore_info ri;
	struct ft_comm *comm;
	float model[16] = {0}, grad[16];
	float *shard;
	uint64_t next;
	uint64_t base = 0;
	int rc, me, back, start, world;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (steps < 1 || count < 1) {
		fprintf(stderr, "usage: train_sharded [STEPS] [COUNT] [PAUSE_MS]\n");
		return 2;
	}
	shard = calloc(count, sizeof(float));
	if (shard == NULL)
		return 1;
	if ((rc = ft_init(NULL, &comm)) != 0) {
		fprintf(stderr, "ft_init: %s\n", ft_strerror(rc));
		return 1;
	}
	me = ft_orig_rank(comm, ft_rank(comm));
	world = ft_size(comm);
	for (size_t j = 0; j < count; j++)
		shard[j] = val(me, 0, j);
	ck.fraction = 0.25;
	/* register, enable, then sync: a rejoined rank's shard comes back in
	 * ft_state_sync (late: sync first, and it comes back in ft_ckpt_enable) */
	back = ft_rejoined(comm, NULL);
	if ((rc = ft_state_register(comm, model, sizeof(model), FT_STATE_REPLICATED)) < 0 ||
	    (rc = ft_state_register(comm, shard, count * sizeof(float),
				    FT_STATE_SHARDED | FT_STATE_DTYPE(FT_FLOAT32))) < 0 ||
	    (rc = ft_state_register(comm, &base, sizeof(base), FT_STATE_REPLICATED)) < 0 ||
	    (!(late && back == 1) && (rc = ft_ckpt_enable(comm, &ck)) != 0) ||
	    (rc = ft_state_sync(comm)) != 0 ||
	    (late && back == 1 && (rc = ft_ckpt_enable(comm, &ck)) != 0)) {
		fprintf(stderr, "state: %s\n", ft_strerror(rc));
		return 1;
	}
	/* op 0 is ft_init's barrier, op 1 ft_ckpt_enable's agreement: step
	 * base + s is op s + 2 (asked after enable: a rank back before the
	 * others enabled took part in it). base is the step this run started
	 * at: 0, or the step of the exported checkpoint its shards started
	 * from (FTCC_CKPT_FROM); replicated, so a rank back later gets it with
	 * the survivors' state. A rank back at op 2 or sooner read the export
	 * itself, as the others did. */
	ft_rejoined(comm, &next);
	memset(&ri, 0, sizeof(ri));
	rc = ft_state_restored(comm, &ri);
	if (rc != 0 && rc != -FT_ENOSYS) {
		fprintf(stderr, "restore: %s\n", ft_strerror(rc));
		return 1;
	}
	if (back == 1 && next > 2) {
		start = (int)(base + next - 2);
	} else {
		base = rc == 0 ? ri.ckpt_step : 0;
		start = (int)base;
	}
	if (back == 1 || rc == 0) {
		size_t bb = 0, nb = 0, bad = 0;
		if ((rc = ft_ckpt_blocks(comm, 1, me, &nb, &bb, NULL)) != 0) {
			fprintf(stderr, "restore: %s\n", ft_strerror(rc));
			return 1;
		}
		/* each block holds the values of one step, no later than the last round */
		bad = check_blocks(shard, count, nb, bb, me, &ri);
		printf("rank %d %s at op %llu: restored %s: %zu blocks, steps %llu..%llu, "
		       "now %llu, perturbation %.3g (exact %d), pls %.4f\n", me,
		       back == 1 ? "rejoined" : "started from an export",
		       (unsigned long long)next, bad ? "BAD" : "ok", ri.blocks,
		       (unsigned long long)ri.oldest_step, (unsigned long long)ri.ckpt_step,
		       (unsigned long long)ri.now_step, ri.perturbation, ri.exact, ri.pls);
	}
	for (int step = start; step < steps; step++) {
		for (int j = 0; j < 16; j++)
			grad[j] = (float)(me + j);
		rc = ft_allreduce(comm, FT_IN_PLACE, grad, 16, FT_FLOAT32, FT_SUM, NULL);
		if (rc != 0) {
			fprintf(stderr, "step %d: %s\n", step, ft_strerror(rc));
			return 1;
		}
		for (int j = 0; j < 16; j++)
			model[j] += 0.01f * grad[j];
		if (take && ft_size(comm) < world && (rc = take_over(comm, world, gone, count)) != 0) {
			fprintf(stderr, "take over: %s\n", ft_strerror(rc));
			return 1;
		}
		for (size_t j = 0; j < count; j++)
			shard[j] = val(me, (uint64_t)step + 1, j);
		if ((rc = ft_ckpt_step(comm, (uint64_t)step + 1)) != 0) {
			fprintf(stderr, "ft_ckpt_step: %s\n", ft_strerror(rc));
			return 1;
		}
		if (pause_ms > 0)
			nanosleep(&pause, NULL);
	}
	{
		size_t bad = 0;
		struct ft_ckpt_stats st;
		for (size_t j = 0; j < count; j++)
			bad += shard[j] != val(me, (uint64_t)steps, j);
		if ((rc = ft_ckpt_flush(comm)) != 0 || (rc = ft_ckpt_stats_get(comm, &st)) != 0) {
			fprintf(stderr, "ckpt: %s\n", ft_strerror(rc));
			return 1;
		}
		printf("shard %s; %llu rounds, %llu blocks written, %.2f ms in ft_ckpt_step\n",
		       bad ? "DIFFERENT" : "ok", (unsigned long long)st.rounds,
		       (unsigned long long)st.blocks, st.step_ms);
	}
	rc = ft_finalize(comm);
	free(shard);
	return rc == 0 ? 0 : 1;
}
