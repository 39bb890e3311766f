/* app_ckpt.h: an application-level running checkpoint (the same strategies as ftcc's), for restarting a whole job, which ftcc's checkpoints (bound to one job's run) do not serve. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_EXAMPLES_APP_CKPT_H
#define FTCC_EXAMPLES_APP_CKPT_H

#include <ftcc.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/*
 * The same selection as ftcc's, kept in one file per rank:
 * <dir>/app-ck-r<rank>.bin holds one step per block, then the blocks. Rounds
 * are written with pwrite (synchronously), which survives a killed process
 * (page cache), not a host crash. A new run of the job (another ftcc job
 * nonce) reads it back, where ftcc's own checkpoint, bound to the run that
 * wrote it, would start afresh.
 */
struct sk {
	int on, fd, rank, world;
	struct ft_ckpt_config cfg;
	const float *live;      /* the registered shard */
	size_t nblocks, bfl;    /* blocks, floats per block */
	float *saved;           /* copy of what the file holds */
	uint64_t *bstep;
	uint64_t last, rr, rng;
	size_t *order;
	double *score;
};

static struct sk sk_state;

static int sk_write(struct sk *s, size_t b)
{
	size_t bb = s->bfl * sizeof(float);
	off_t data = (off_t)(s->nblocks * sizeof(uint64_t));
	if (pwrite(s->fd, s->saved + b * s->bfl, bb, data + (off_t)(b * bb)) != (ssize_t)bb ||
	    pwrite(s->fd, &s->bstep[b], sizeof(uint64_t), (off_t)(b * sizeof(uint64_t))) !=
		    (ssize_t)sizeof(uint64_t))
		return -FT_EIO;
	return 0;
}

/* fresh: the first incarnation of a fresh job writes step 0 (the initial model). */
static int sk_enable(struct ft_comm *c, const struct ft_ckpt_config *cfg, const float *shard,
		     size_t shard_bytes, int fresh)
{
	struct sk *s = &sk_state;
	char path[FT_PATH_MAX + 32];
	const char *dir = cfg->dir[0] != '\0' ? cfg->dir : getenv("FTCC_CKPT_DIR");

	memset(s, 0, sizeof(*s));
	s->cfg = *cfg;
	s->live = shard;
	s->rank = ft_orig_rank(c, ft_rank(c));
	s->world = ft_size(c);
	s->bfl = cfg->block_bytes / sizeof(float);
	s->nblocks = shard_bytes / cfg->block_bytes;
	s->rng = cfg->seed * 2654435761u + 1;
	s->saved = malloc(shard_bytes);
	s->bstep = calloc(s->nblocks, sizeof(uint64_t));
	s->order = malloc(s->nblocks * sizeof(size_t));
	s->score = malloc(s->nblocks * sizeof(double));
	if (s->saved == NULL || s->bstep == NULL || s->order == NULL || s->score == NULL)
		return -FT_ENOMEM;
	snprintf(path, sizeof(path), "%s/app-ck-r%d.bin", dir != NULL ? dir : "/tmp", s->rank);
	s->fd = open(path, O_RDWR | O_CREAT | (fresh ? O_TRUNC : 0), 0644);
	if (s->fd < 0)
		return -FT_EIO;
	s->on = 1;
	if (fresh) {
		memcpy(s->saved, shard, shard_bytes);
		for (size_t b = 0; b < s->nblocks; b++)
			if (sk_write(s, b) != 0)
				return -FT_EIO;
	} else {
		off_t data = (off_t)(s->nblocks * sizeof(uint64_t));
		if (pread(s->fd, s->bstep, s->nblocks * sizeof(uint64_t), 0) !=
			    (ssize_t)(s->nblocks * sizeof(uint64_t)) ||
		    pread(s->fd, s->saved, shard_bytes, data) != (ssize_t)shard_bytes)
			return -FT_ECORRUPT;
	}
	return 0;
}

static int sk_cmp_score(const void *a, const void *b)
{
	double x = sk_state.score[*(const size_t *)a], y = sk_state.score[*(const size_t *)b];
	return x < y ? 1 : x > y ? -1 : (*(const size_t *)a > *(const size_t *)b) - (*(const size_t *)a < *(const size_t *)b);
}

static int sk_step(uint64_t step)
{
	struct sk *s = &sk_state;
	size_t m;

	s->last = step;
	if (step % s->cfg.interval != 0)
		return 0;
	m = s->cfg.strategy == FT_CKPT_FULL ? s->nblocks
					    : (size_t)ceil(s->cfg.fraction * (double)s->nblocks);
	m = m > s->nblocks ? s->nblocks : m;
	for (size_t b = 0; b < s->nblocks; b++)
		s->order[b] = b;
	if (s->cfg.strategy == FT_CKPT_ROUND_ROBIN) {
		for (size_t k = 0; k < m; k++)
			s->order[k] = (s->rr + k) % s->nblocks;
		s->rr = (s->rr + m) % s->nblocks;
	} else if (s->cfg.strategy == FT_CKPT_RANDOM) {
		for (size_t k = 0; k < m; k++) {
			s->rng ^= s->rng << 13, s->rng ^= s->rng >> 7, s->rng ^= s->rng << 17;
			size_t j = k + (size_t)(s->rng % (s->nblocks - k)), t = s->order[k];
			s->order[k] = s->order[j];
			s->order[j] = t;
		}
	} else if (s->cfg.strategy == FT_CKPT_PRIORITY) {
		for (size_t b = 0; b < s->nblocks; b++) {
			double d = 0;
			for (size_t i = 0; i < s->bfl; i++) {
				double e = (double)s->live[b * s->bfl + i] - (double)s->saved[b * s->bfl + i];
				d += e * e;
			}
			s->score[b] = d;
		}
		qsort(s->order, s->nblocks, sizeof(size_t), sk_cmp_score);
	}
	for (size_t k = 0; k < m; k++) {
		size_t b = s->order[k];
		memcpy(s->saved + b * s->bfl, s->live + b * s->bfl, s->bfl * sizeof(float));
		s->bstep[b] = step;
		if (sk_write(s, b) != 0)
			return -FT_EIO;
	}
	return 0;
}

/* Restores this rank's whole shard into dst; now: the job's step. */
static int sk_restore_own(float *dst, unsigned flags, uint64_t now, struct ft_restore_info *ri)
{
	struct sk *s = &sk_state;
	double pert = 0, lost = 0;

	memset(ri, 0, sizeof(*ri));
	ri->oldest_step = UINT64_MAX;
	for (size_t b = 0; b < s->nblocks; b++) {
		ri->ckpt_step = s->bstep[b] > ri->ckpt_step ? s->bstep[b] : ri->ckpt_step;
		ri->oldest_step = s->bstep[b] < ri->oldest_step ? s->bstep[b] : ri->oldest_step;
		lost += (double)(now - s->bstep[b]);
	}
	for (size_t i = 0; i < s->nblocks * s->bfl; i++) {
		if (flags & FT_RESTORE_CURRENT) {
			double e = (double)dst[i] - (double)s->saved[i];
			pert += e * e;
		}
		dst[i] = s->saved[i];
	}
	ri->now_step = now;
	ri->blocks = s->nblocks;
	ri->bytes = s->nblocks * s->bfl * sizeof(float);
	ri->perturbation = sqrt(pert);
	ri->exact = (flags & FT_RESTORE_CURRENT) != 0;
	ri->pls = now > 0 ? lost / ((double)now * (double)s->nblocks * s->world) : 0;
	return 0;
}

static int sk_flush(void)
{
	return sk_state.fd > 0 && fdatasync(sk_state.fd) != 0 ? -FT_EIO : 0;
}

#endif /* FTCC_EXAMPLES_APP_CKPT_H */
