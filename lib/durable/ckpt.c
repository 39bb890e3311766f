/* ckpt.c: running partial checkpoints (SCAR) of the sharded regions: enable, steps, priorities, partial restore (a round itself: ckpt_round.c). */
/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aio.h"
#include "ckpt.h"
#include "ckpt_remote.h"
#include "ckpt_writer.h"
#include "comm.h"
#include "crc32c.h"
#include "fdreg.h"
#include "file.h"
#include "internal.h"
#include "jnl.h"
#include "reduce.h"
/* ---- enable ---- */

static void ck_free(struct ft__ckpt *ck)
{
	if (ck == NULL)
		return;
	ft__ckpt_peer_close(ck->peer); /* first: its thread may be sending from the saved copies */
	if (ck->aio_ok)
		ft__aio_fini(&ck->aio);
	if (ck->img.fd != NULL)
		for (size_t i = 0; i < ck->img.nregs; i++)
			for (int s = 0; s < 2; s++)
				if (ck->img.fd[i][s] >= 0)
					ft__fd_close(ck->img.fd[i][s]);
	ck->img.own_fds = false;
	ft__ckpt_image_free(&ck->img);
	if (ck->jfd >= 0)
		ft__fd_close(ck->jfd);
	for (size_t i = 0; i < ck->nreg; i++)
		free(ck->reg[i].saved);
	for (int k = 0; k < 2; k++) {
		struct ck_round *r = &ck->rounds[k];
		free(r->blk);
		free(r->slot);
		free(r->hdr);
		free(r->io);
		free(r->resid);
		free(r->fsio);
		free(r->rec);
		free(r->piece);
	}
	free(ck->stream_head);
	free(ck->pend);
	free(ck->dist);
	free(ck->order);
	free(ck->chosen);
	free(ck->score);
	free(ck);
}

/* The table and files of this rank: the earlier incarnation's when they
 * are this job's and of the same geometry, else fresh ones. */
static int open_files(struct ft_comm *c, struct ft__ckpt *ck, bool *resumed)
{
	struct ft__ckpt_image old;
	char path[PATH_MAX];
	bool same;
	int rc;

	*resumed = false;
	rc = ft__ckpt_image_open(ck->dir, ck->rank, &old);
	if (old.regs != NULL && old.head.interval == 0) {
		/* a new run's own files would overwrite the export it may start from */
		ft__error("ckpt: %s holds an exported checkpoint: a run's checkpoints go elsewhere",
			  ck->dir);
		ft__ckpt_image_free(&old);
		return -FT_EINVAL;
	}
	bool ours = old.regs != NULL && old.head.job_hash == ck->img.head.job_hash &&
		    old.head.nonce == ck->img.head.nonce && old.head.rank == ck->rank;
	same = ours && old.head.block_bytes == ck->img.head.block_bytes && old.nregs == ck->nreg &&
	       memcmp(old.regs, ck->img.regs, ck->nreg * sizeof(*old.regs)) == 0;
	if (ours && c->rejoined &&
	    (!same || old.head.strategy != ck->img.head.strategy ||
	     old.head.interval != ck->img.head.interval ||
	     old.head.fraction != ck->img.head.fraction)) {
		/* the survivors agreed on the earlier incarnation's values; and
		 * its checkpoint is this shard's only copy: not discarded */
		ft__error("ckpt: rank %d rejoined with other regions or checkpoint settings than "
			  "its earlier incarnation's (in %s)", ck->rank, ck->dir);
		ft__ckpt_image_free(&old);
		return -FT_EMISMATCH;
	}
	if (same) {
		ck->img.head.total_bytes = old.head.total_bytes;
		memcpy(ck->img.tab, old.tab, ck->nblocks * sizeof(*old.tab));
		if (old.resid != NULL && ck->img.resid != NULL)
			memcpy(ck->img.resid, old.resid, ck->nblocks * sizeof(float));
		ck->img.last_round = old.last_round;
		ck->img.last_step = old.last_step;
		ck->img.commits = old.commits;
		ck->round = ck->done = old.last_round;
		ck->jpos = old.valid_bytes;
		if (old.tail_why != NULL)
			ft__info("ckpt: rank %d's journal ends in %s: an uncommitted round", ck->rank,
				 old.tail_why);
		*resumed = true;
	} else if (old.regs != NULL || rc == -FT_ECORRUPT) {
		ft__info("ckpt: rank %d: the checkpoint in %s is another job's or of another "
			 "geometry: starting afresh", ck->rank, ck->dir);
	}
	ft__ckpt_image_free(&old);

	if ((rc = ft__ckpt_path(path, sizeof(path), ck->dir, ck->rank, -1, 0)) < 0)
		return rc;
	ck->jfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	ft__fd_own(ck->jfd);
	if (ck->jfd < 0)
		return -errno;
	for (size_t i = 0; i < ck->nreg; i++)
		for (int s = 0; s < 2; s++) {
			if ((rc = ft__ckpt_path(path, sizeof(path), ck->dir, ck->rank, ck->reg[i].index,
					      s)) < 0)
				return rc;
			ck->img.fd[i][s] = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
						0600);
			ft__fd_own(ck->img.fd[i][s]);
			if (ck->img.fd[i][s] < 0)
				return -errno;
			if (!*resumed && ftruncate(ck->img.fd[i][s], 0) < 0)
				return -errno;
		}
	if (*resumed) {
		/* cut a torn tail off, so that the next COMMIT is read after the last good one */
		return ftruncate(ck->jfd, (off_t)ck->jpos) < 0 ? -errno : 0;
	}
	char *buf;
	size_t len;
	if (ftruncate(ck->jfd, 0) < 0)
		return -errno;
	if ((rc = ft__ckpt_build_journal(&ck->img, false, &buf, &len)) < 0)
		return rc;
	rc = ft__write_all(ck->jfd, buf, len, 0);
	free(buf);
	if (rc == 0 && ck->cfg.sync && fdatasync(ck->jfd) < 0)
		rc = -errno;
	ck->jpos = len;
	return rc;
}

static int restore_own(struct ft_comm *c);

/*
 * Agreement, in one allreduce (MAX, one op_seq): every member's strategy,
 * interval, block size, fraction and number of sharded regions are equal
 * (the MAX of v and of -v); a member with a bad argument says so; each
 * member's shard bytes sit at its original rank's place, to be summed.
 */
static int agree(struct ft_comm *c, const struct ft_ckpt_config *k, int bad, size_t nsharded,
		 uint64_t bytes, bool seeding, int seed_rc, uint64_t *total,
		 struct ft__ckpt_peer *peer)
{
	enum { N = 7 };
	size_t W = (size_t)c->cfg.world_size, n = 2 * N + 2 + W + W * FT__CKPT_BOOK_SLOT;
	int64_t *v = calloc(n, sizeof(*v));
	int64_t mine[N] = {k->strategy, k->interval, (int64_t)k->block_bytes,
			   k->strategy == FT_CKPT_FULL ? 0 : (int64_t)llround(k->fraction * 1e9),
			   (int64_t)nsharded, seeding, ft__ckpt_where(c, k)};
	int rc;

	if (v == NULL)
		return -FT_ENOMEM;
	for (int i = 0; i < N; i++) {
		v[i] = bad ? 0 : mine[i];
		v[N + i] = bad ? 0 : -mine[i];
	}
	v[2 * N] = bad;
	v[2 * N + 1] = seed_rc != 0;
	v[2 * N + 2 + c->cfg.rank] = (int64_t)bytes;
	ft__ckpt_book_pack(peer, c->cfg.rank, v + 2 * N + 2 + W);
	rc = ft_allreduce(c, FT_IN_PLACE, v, n, FT_INT64, FT_MAX, NULL);
	if (rc == 0 && peer != NULL)
		ft__ckpt_book_unpack(peer, c->cfg.world_size, v + 2 * N + 2 + W);
	*total = 0;
	for (int r = 0; rc == 0 && r < c->cfg.world_size; r++)
		*total += (uint64_t)v[2 * N + 2 + r];
	if (rc == 0 && !bad && v[2 * N] != 0) {
		ft__error("ckpt: another member passed a bad ft_ckpt_config");
		rc = -FT_EMISMATCH;
	}
	for (int i = 0; rc == 0 && !bad && i < N; i++)
		if (v[i] != -v[N + i]) {
			ft__error("ckpt: members disagree on the checkpoint configuration (%s)",
				  (const char *[]){"strategy", "interval", "block size", "fraction",
						   "sharded regions", "starting from an export",
						   "where the rounds go"}[i]);
			rc = -FT_EMISMATCH;
		}
	if (rc == 0 && !bad && seed_rc == 0 && v[2 * N + 1] != 0) {
		ft__error("ckpt: another member could not read its exported checkpoint");
		rc = -FT_EMISMATCH;
	}
	free(v);
	if (rc != 0)
		return rc;
	if (bad)
		return -FT_EINVAL;
	return seed_rc;
}

/* ft_ckpt_config.from, else FTCC_CKPT_FROM; "" none. */
static const char *seed_dir(const struct ft_comm *c, const struct ft_ckpt_config *k)
{
	return k->from[0] != '\0' ? k->from : c->tp_env.ckpt_from;
}

/*
 * This rank's export in dir into bufs (one per sharded region, registered
 * order): what ft_ckpt_enable starts a new run's shards from, and what a
 * rank restarted before the run's first round counted takes.
 */
static int seed_read(struct ft_comm *c, const char *dir, char *const *bufs,
		     struct ft_restore_info *info)
{
	struct ft__ckpt_shape shape[FT__STATE_MAX];
	size_t n = 0;

	for (int i = 0; i < c->nstate; i++)
		if (c->state[i].flags & FT_STATE_SHARDED)
			shape[n++] = (struct ft__ckpt_shape){c->state[i].dtype, c->state[i].bytes};
	return ft__ckpt_seed_read(dir, c->cfg.rank, c->cfg.world_size, shape, n, bufs, info);
}

/* Whether this rank's checkpoint directory holds an export (or cannot be named):
 * the run's own files would overwrite what it may start from (open_files). */
static bool holds_export(struct ft_comm *c, const struct ft_ckpt_config *k)
{
	struct ft__ckpt_image old;
	char dir[PATH_MAX];
	bool is;

	if (ft__ckpt_dir(c, k->dir, dir, sizeof(dir)) < 0)
		return true;
	(void)ft__ckpt_image_open(dir, c->cfg.rank, &old);
	is = old.regs != NULL && old.head.interval == 0;
	ft__ckpt_image_free(&old);
	if (is)
		ft__error("ckpt: %s holds an exported checkpoint: a run's checkpoints go elsewhere",
			  dir);
	return is;
}

static void free_bufs(char **bufs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(bufs[i]);
}

#define CKCFG_SIZE_MIN (offsetof(struct ft_ckpt_config, sync) + sizeof(int))

static int ckpt_enable_call(struct ft_comm *c, const struct ft_ckpt_config *ucfg)
{
	struct ft_ckpt_config k = FT_CKPT_CONFIG_INIT;
	struct ft__ckpt *ck;
	uint64_t bytes = 0, total = 0, nblocks = 0;
	size_t nsharded = 0;
	bool resumed, local;
	char *seed[FT__STATE_MAX] = {NULL};
	struct ft_restore_info sinfo;
	struct ft__ckpt_peer *peer = NULL;
	int rc = ft__comm_check(c), bad = 0, seed_rc = 0, peer_rc = 0, where;

	if (rc != 0)
		return rc;
	if (ucfg == NULL || c->ckpt != NULL || ucfg->struct_size < CKCFG_SIZE_MIN ||
	    ucfg->struct_size > ((size_t)16 << 10))
		return -FT_EINVAL;
	for (size_t i = sizeof(k); i < ucfg->struct_size; i++)
		if (((const unsigned char *)ucfg)[i] != 0)
			return -FT_EINVAL;
	memcpy(&k, ucfg, ucfg->struct_size < sizeof(k) ? ucfg->struct_size : sizeof(k));
	k.struct_size = sizeof(k);
	if (k.block_bytes == 0)
		k.block_bytes = CK_DEFAULT_BLOCK;
	if ((unsigned)k.strategy >= FT_CKPT_STRATEGY_COUNT || k.interval < 1 ||
	    k.block_bytes > ((size_t)1 << 30) || (k.sync != 0 && k.sync != 1) ||
	    memchr(k.dir, 0, sizeof(k.dir)) == NULL || memchr(k.from, 0, sizeof(k.from)) == NULL ||
	    (k.strategy != FT_CKPT_FULL && !(k.fraction > 0 && k.fraction <= 1)))
		bad = 1;
	for (int i = 0; i < c->nstate; i++) {
		const struct ft__state_region *s = &c->state[i];
		if (!(s->flags & FT_STATE_SHARDED))
			continue;
		nsharded++;
		bytes += s->bytes;
		nblocks += (s->bytes + k.block_bytes - 1) / (k.block_bytes ? k.block_bytes : 1);
		if (k.block_bytes % ft_dtype_size((enum ft_dtype)s->dtype) != 0)
			bad = 1;
	}
	/* the reader refuses a journal of more blocks (ckpt.h): larger blocks, then */
	if (nblocks > FT__CKPT_MAX_BLOCKS)
		bad = 1;
	where = ft__ckpt_where(c, &k);
	if (where < FT_CKPT_DISK || where > FT_CKPT_PEER)
		bad = 1;
	if (c->rejoined && !c->state_received) {
		/* the survivors' state first: it says whether they had enabled
		 * checkpoints at the op this process rejoined at */
		rc = ft_state_sync(c);
		if (rc != 0 && rc != -FT_EMISMATCH)
			return rc;
	}
	/* A new incarnation enables on its own (the others did long ago),
	 * unless it rejoined before their ft_ckpt_enable: it was killed in
	 * ft_init or before enabling, so it takes part in their agreement, and
	 * has nothing of its own to restore. */
	local = c->rejoined && !(c->state_received && !c->ckpt_hint_on);
	if (!local && !bad && nsharded > 0 && holds_export(c, &k)) {
		/* said in the agreement: every member fails, none starts from an export */
		bad = 1;
	}
	if (!bad && where != FT_CKPT_DISK && (peer_rc = ft__ckpt_remote_open(c, &peer)) != 0) {
		ft__error("ckpt: rank %d cannot start its peer checkpoint service: %s", c->cfg.rank,
			  ft_strerror(peer_rc));
		bad = 1; /* said in the agreement; this rank returns why */
	}
	if (!local) {
		/* read aside: the regions change only once every member read its export */
		bool seeding = !bad && seed_dir(c, &k)[0] != '\0';
		for (int j = 0, m = 0; seeding && seed_rc == 0 && j < c->nstate; j++) {
			size_t have = c->state[j].bytes;
			if ((c->state[j].flags & FT_STATE_SHARDED) &&
			    (seed[m++] = malloc(have ? have : 1)) == NULL)
				seed_rc = -FT_ENOMEM;
		}
		if (seeding && seed_rc == 0)
			seed_rc = seed_read(c, seed_dir(c, &k), seed, &sinfo);
		if ((rc = agree(c, &k, bad, nsharded, bytes, seeding, seed_rc, &total, peer)) != 0) {
			free_bufs(seed, nsharded);
			ft__ckpt_peer_close(peer);
			return rc == -FT_EINVAL && peer_rc != 0 ? peer_rc : rc;
		}
	} else if (bad) {
		return peer_rc != 0 ? peer_rc : -FT_EINVAL;
	} else if (peer != NULL) {
		/* the survivors' book came with their state; the others learn
		 * where this incarnation's service is from itself */
		if (c->ckpt_hint_book != NULL)
			ft__ckpt_book_unpack(peer, c->cfg.world_size,
					     (const int64_t *)(const void *)c->ckpt_hint_book);
		ft__ckpt_peer_announce(peer);
	}

	ck = calloc(1, sizeof(*ck));
	if (ck == NULL) {
		free_bufs(seed, nsharded);
		ft__ckpt_peer_close(peer);
		return -FT_ENOMEM;
	}
	ck->peer = peer;
	ck->disk = where != FT_CKPT_PEER;
	ck->holder = -1;
	ck->jfd = -1;
	ck->cfg = k;
	ck->rank = c->cfg.rank;
	ck->total = total;
	if ((rc = ft__ckpt_dir(c, k.dir, ck->dir, sizeof(ck->dir))) < 0)
		goto err_free;
	ck->img.head = (struct ft__ckpt_jhead){
		.job_hash = ft__jnl_job_hash(c->cfg.job_id), .nonce = c->job_nonce,
		.rank = c->cfg.rank, .world_size = c->cfg.world_size, .block_bytes = k.block_bytes,
		.strategy = (uint32_t)k.strategy, .interval = k.interval, .fraction = k.fraction,
		.total_bytes = total, .seed = k.seed};
	ck->img.regs = calloc(nsharded + 1, sizeof(*ck->img.regs));
	ck->img.first = calloc(nsharded + 1, sizeof(*ck->img.first));
	ck->img.fd = malloc((nsharded + 1) * sizeof(*ck->img.fd));
	if (ck->img.regs == NULL || ck->img.first == NULL || ck->img.fd == NULL) {
		rc = -FT_ENOMEM;
		goto err_free;
	}
	for (int i = 0; i < c->nstate; i++) {
		const struct ft__state_region *s = &c->state[i];
		struct ck_reg *g = &ck->reg[ck->nreg];
		if (!(s->flags & FT_STATE_SHARDED))
			continue;
		*g = (struct ck_reg){.index = i, .dtype = s->dtype,
				     .es = ft_dtype_size((enum ft_dtype)s->dtype), .ptr = s->ptr,
				     .bytes = s->bytes,
				     .nblocks = (s->bytes + k.block_bytes - 1) / k.block_bytes,
				     .first = ck->nblocks};
		ck->img.regs[ck->nreg] = (struct ft__ckpt_jregion){
			.index = (uint32_t)i, .dtype = s->dtype, .bytes = s->bytes,
			.nblocks = g->nblocks};
		ck->img.first[ck->nreg] = ck->nblocks;
		ck->img.fd[ck->nreg][0] = ck->img.fd[ck->nreg][1] = -1;
		ck->nblocks += g->nblocks;
		if (seed[ck->nreg] != NULL) {
			/* the export is the saved copy the first round measures from */
			g->saved = seed[ck->nreg];
			seed[ck->nreg] = NULL;
		} else if ((g->saved = malloc(s->bytes ? s->bytes : 1)) == NULL) {
			rc = -FT_ENOMEM;
			goto err_free;
		} else {
			memcpy(g->saved, s->ptr, s->bytes);
		}
		ck->nreg++;
	}
	ck->img.nregs = ck->nreg;
	ck->img.first[ck->nreg] = ck->nblocks;
	ck->img.nblocks = ck->nblocks;
	{
		size_t B = ck->nblocks + 1;
		ck->img.tab = calloc(B, sizeof(*ck->img.tab));
		ck->img.resid = calloc(B, sizeof(float));
		ck->pend = calloc(B, sizeof(*ck->pend));
		ck->dist = calloc(B, sizeof(*ck->dist));
		ck->order = calloc(B, sizeof(*ck->order));
		ck->chosen = calloc(B, 1);
		ck->score = calloc(B, sizeof(*ck->score));
		for (int r = 0; r < 2; r++) {
			ck->rounds[r].resid = calloc(B, sizeof(float));
			ck->rounds[r].fsio = calloc(2 * ck->nreg + 1, sizeof(struct ft__aio_io));
			if (ck->rounds[r].resid == NULL || ck->rounds[r].fsio == NULL)
				ck->chosen = (free(ck->chosen), NULL);
		}
		if (ck->img.tab == NULL || ck->img.resid == NULL || ck->pend == NULL ||
		    ck->dist == NULL || ck->order == NULL || ck->chosen == NULL || ck->score == NULL) {
			rc = -FT_ENOMEM;
			goto err_free;
		}
	}
	if (ck->nreg > 0) {
		resumed = false;
		if (ck->disk &&
		    ((rc = ft__mkdir_p(ck->dir)) < 0 || (rc = open_files(c, ck, &resumed)) < 0)) {
			ft__error("ckpt: cannot open the checkpoint files in %s: %s", ck->dir,
				  ft_strerror(rc));
			goto err_free;
		}
		ck->resumed = resumed;
		if (local) {
			ck->total = c->ckpt_hint_total != 0 ? c->ckpt_hint_total
				    : resumed		    ? ck->img.head.total_bytes
							    : bytes * (uint64_t)c->cfg.world_size;
			ck->restore_due = true;
		}
	}
	ck->img.head.total_bytes = ck->total;
	ck->rng = k.seed ^ ((uint64_t)(c->cfg.rank + 1) * 0x9e3779b97f4a7c15ull);
	unsigned qd = CK_QD_MIN;
	while (qd < CK_QD_MAX && qd < 2 * ck->nblocks + 2 * ck->nreg + 2)
		qd *= 2;
	ft__aio_init(&ck->aio, qd, !c->tp_env.log_pwrite, "ckpt");
	ck->aio_ok = true;
	c->ckpt = ck;
	if (!local && seed_dir(c, &k)[0] != '\0') {
		for (size_t i = 0; i < ck->nreg; i++)
			memcpy(ck->reg[i].ptr, ck->reg[i].saved, ck->reg[i].bytes);
		ck->rinfo = sinfo;
		ck->restored = true;
		ft__info("ckpt: rank %d's shards start from the export in %s: %zu blocks, steps "
			 "%llu..%llu", c->cfg.rank, seed_dir(c, &k), sinfo.blocks,
			 (unsigned long long)sinfo.oldest_step, (unsigned long long)sinfo.ckpt_step);
	}
	ft__info("ckpt: %zu sharded regions, %zu blocks of %zu bytes in %s (%s)%s", ck->nreg,
		 ck->nblocks, k.block_bytes, ck->dir, ft__aio_engine_name(&ck->aio),
		 ck->restore_due ? "; restored from the earlier incarnation's" : "");
	if (ck->restore_due && c->state_received)
		return restore_own(c);
	return 0;

err_free:
	free_bufs(seed, nsharded);
	ck_free(ck);
	return rc;
}

FT__EXPORT int ft_ckpt_enable(struct ft_comm *c, const struct ft_ckpt_config *ucfg)
{
	return ft__err_public(ckpt_enable_call(c, ucfg));
}

/* ---- steps ---- */

static int ckpt_step_call(struct ft_comm *c, uint64_t step)
{
	struct ft__ckpt *ck;
	uint64_t t0 = ft__now_ns();
	int rc = ft__comm_check(c);

	if (rc != 0)
		return rc;
	ck = c->ckpt;
	if (ck == NULL || (ck->calls > 0 && step <= ck->now_step))
		return -FT_EINVAL;
	ck->now_step = step;
	ck->calls++;
	rc = ft__ckpt_progress(ck);
	/* a rejoined process checkpoints only once its shards are back */
	if (rc == 0 && ck->calls % ck->cfg.interval == 0 && !ck->restore_due && ck->nblocks > 0) {
		ft__ckpt_route(c);
		rc = ft__ckpt_start_round(ck, step);
	}
	if (rc == 0 && ck->err != 0) {
		rc = ck->err;
		ck->err = 0;
	}
	ck->st.step_ms += ms_since(t0);
	return rc;
}

FT__EXPORT int ft_ckpt_step(struct ft_comm *c, uint64_t step)
{
	return ft__err_public(ckpt_step_call(c, step));
}

static int ckpt_flush_call(struct ft_comm *c)
{
	int rc = ft__comm_check(c);

	if (rc != 0)
		return rc;
	if (c->ckpt == NULL)
		return -FT_EINVAL;
	rc = ft__ckpt_wait_done(c->ckpt, c->ckpt->round);
	if (rc == 0 && c->ckpt->err != 0) {
		rc = c->ckpt->err;
		c->ckpt->err = 0;
	}
	return rc;
}

FT__EXPORT int ft_ckpt_flush(struct ft_comm *c)
{
	return ft__err_public(ckpt_flush_call(c));
}

static int find_reg(const struct ft__ckpt_image *img, int region, size_t *pos)
{
	for (size_t i = 0; i < img->nregs; i++)
		if (img->regs[i].index == (uint32_t)region) {
			*pos = i;
			return 0;
		}
	return -FT_EINVAL;
}

static int ckpt_priority_call(struct ft_comm *c, int region, const double *score,
			      size_t nblocks)
{
	int rc = ft__comm_check(c);
	size_t p;

	if (rc != 0)
		return rc;
	if (c->ckpt == NULL || score == NULL || region < 0 ||
	    find_reg(&c->ckpt->img, region, &p) != 0 || nblocks != c->ckpt->reg[p].nblocks)
		return -FT_EINVAL;
	for (size_t i = 0; i < nblocks; i++)
		if (score[i] != score[i])
			return -FT_EINVAL;
	memcpy(c->ckpt->score + c->ckpt->reg[p].first, score, nblocks * sizeof(*score));
	return 0;
}

FT__EXPORT int ft_ckpt_priority(struct ft_comm *c, int region, const double *score,
				size_t nblocks)
{
	return ft__err_public(ckpt_priority_call(c, region, score, nblocks));
}

/* ---- restore ---- */

/* The image of owner's checkpoint: this rank's own table, its files read,
 * or (peer copies) blocks [first, first + n) of region from its holder. */
static int owner_image(struct ft_comm *c, int owner, int region, size_t first, size_t n,
		       void *dst, struct ft__ckpt_image *tmp, const struct ft__ckpt_image **img)
{
	const struct ft__ckpt *ck = c->ckpt;
	bool peer = ck != NULL && ck->peer != NULL;
	char dir[PATH_MAX];
	int rc;

	/* its own geometry is always its own table's, and so are its blocks
	 * while its files hold its rounds */
	if (ck != NULL && owner == c->cfg.rank && ck->nreg > 0 &&
	    (n == 0 || (ck->disk && (ck->img.last_round > 0 || !peer)))) {
		*img = &ck->img;
		return 0;
	}
	/* a rank without files here, or whose own table is empty (a new
	 * incarnation on another host), asks the holders */
	if (peer && (!ck->disk || owner == c->cfg.rank))
		goto fetch;
	if ((rc = ft__ckpt_dir(c, ck != NULL ? ck->cfg.dir : NULL, dir, sizeof(dir))) < 0)
		return rc;
	rc = ft__ckpt_image_open(dir, owner, tmp);
	if (rc == -FT_EIO && peer)
		goto fetch;
	if (tmp->regs == NULL)
		return rc;
	if (tmp->head.job_hash != ft__jnl_job_hash(c->cfg.job_id) ||
	    tmp->head.nonce != c->job_nonce || tmp->head.rank != owner) {
		ft__error("ckpt: the checkpoint of rank %d in %s is not this job's", owner, dir);
		ft__ckpt_image_free(tmp);
		return -FT_ECORRUPT;
	}
	*img = tmp;
	return 0;
fetch:
	if ((rc = ft__ckpt_fetch(c, owner, region, first, n, dst, tmp)) != 0)
		return rc;
	*img = tmp;
	return 0;
}

static uint64_t now_step(const struct ft_comm *c)
{
	uint64_t n = c->ckpt != NULL ? c->ckpt->now_step : 0;
	return c->ckpt_hint_step > n ? c->ckpt_hint_step : n;
}

static int ckpt_restore_call(struct ft_comm *c, int region, int owner, size_t first_block,
			     size_t nblocks, void *dst, unsigned flags,
			     struct ft_restore_info *info)
{
	struct ft__ckpt_image tmp;
	const struct ft__ckpt_image *img;
	struct ft_restore_info ri;
	double pert = 0, lost = 0;
	size_t p, bb;
	uint64_t now, total;
	char *old = NULL;
	int rc = ft__comm_check(c), bad = 0;

	if (rc != 0)
		return rc;
	if (info != NULL)
		memset(info, 0, sizeof(*info));
	if ((flags & ~FT_RESTORE_CURRENT) != 0 || region < 0 || region >= FT__STATE_MAX ||
	    owner < 0 || owner >= c->cfg.world_size || (nblocks > 0 && dst == NULL))
		return -FT_EINVAL;
	memset(&tmp, 0, sizeof(tmp));
	/* a fetch from a holder checks each copy into dst as it comes (not
	 * when dst's values are measured against: FT_RESTORE_CURRENT) */
	if ((rc = owner_image(c, owner, region, first_block, nblocks,
			      flags & FT_RESTORE_CURRENT ? NULL : dst, &tmp, &img)) < 0)
		return rc;
	bb = (size_t)img->head.block_bytes;
	if (find_reg(img, region, &p) != 0 || first_block > img->regs[p].nblocks ||
	    nblocks > img->regs[p].nblocks - first_block) {
		rc = -FT_EINVAL;
		goto out;
	}
	if ((old = malloc(bb)) == NULL) {
		rc = -FT_ENOMEM;
		goto out;
	}
	now = now_step(c);
	total = img == &tmp ? img->head.total_bytes : c->ckpt->total;
	memset(&ri, 0, sizeof(ri));
	ri.oldest_step = UINT64_MAX;
	ri.now_step = now;
	ri.exact = (flags & FT_RESTORE_CURRENT) != 0;
	for (size_t b = first_block; b < first_block + nblocks; b++) {
		const struct ft__ckpt_jregion *r = &img->regs[p];
		size_t len = (size_t)(b + 1 < r->nblocks ? bb : r->bytes - b * bb);
		char *d = (char *)dst + (b - first_block) * bb;
		uint64_t round, step;
		int slot;
		char why[160];

		/* read aside: a block without a valid copy leaves dst as it was
		 * (a copy in memory is checked where it lies, and read straight
		 * in; a fetched one is in dst already) */
		char *into = (img->mem != NULL || img->sunk_slot != NULL) &&
			     !(flags & FT_RESTORE_CURRENT) ? d : old;
		if (ft__ckpt_read_block(img, p, b, into, &round, &step, &slot, why, sizeof(why)) != 0) {
			ft__warn("ckpt: rank %d region %d block %zu: no valid copy (%s)", owner,
				 region, b, why);
			bad = 1;
			continue;
		}
		ri.blocks++;
		ri.bytes += len;
		if (step > ri.ckpt_step)
			ri.ckpt_step = step;
		if (step < ri.oldest_step)
			ri.oldest_step = step;
		if (now > step)
			lost += (double)(now - step) * (double)len;
		if (flags & FT_RESTORE_CURRENT)
			pert += ft__ckpt_dist2(old, d, len, r->dtype);
		else if (img->resid != NULL)
			pert += (double)img->resid[img->first[p] + b] * img->resid[img->first[p] + b];
		if (into != d)
			memcpy(d, old, len);
		if (c->ckpt != NULL && img == &c->ckpt->img) {
			struct ck_reg *g = &c->ckpt->reg[p];
			if (c->ckpt->pend[g->first + b] == 0)
				memcpy(g->saved + b * bb, d, len);
		}
	}
	if (ri.oldest_step == UINT64_MAX)
		ri.oldest_step = 0;
	ri.perturbation = sqrt(pert);
	ri.pls = now > 0 && total > 0 ? lost / ((double)now * (double)total) : 0;
	if (info != NULL)
		*info = ri;
	rc = bad ? -FT_ECORRUPT : 0;
out:
	free(old);
	if (img == &tmp)
		ft__ckpt_image_free(&tmp);
	return rc;
}

FT__EXPORT int ft_ckpt_restore(struct ft_comm *c, int region, int owner, size_t first_block,
			       size_t nblocks, void *dst, unsigned flags,
			       struct ft_restore_info *info)
{
	return ft__err_public(ckpt_restore_call(c, region, owner, first_block, nblocks, dst, flags, info));
}

static int ckpt_blocks_call(struct ft_comm *c, int region, int owner, size_t *nblocks,
			    size_t *block_bytes, size_t *region_bytes)
{
	struct ft__ckpt_image tmp;
	const struct ft__ckpt_image *img;
	size_t p;
	int rc = ft__comm_check(c);

	if (rc != 0)
		return rc;
	if (region < 0 || region >= FT__STATE_MAX || owner < 0 || owner >= c->cfg.world_size)
		return -FT_EINVAL;
	memset(&tmp, 0, sizeof(tmp));
	if ((rc = owner_image(c, owner, region, 0, 0, NULL, &tmp, &img)) < 0)
		return rc;
	if (find_reg(img, region, &p) != 0) {
		rc = -FT_EINVAL;
	} else {
		if (nblocks != NULL)
			*nblocks = (size_t)img->regs[p].nblocks;
		if (block_bytes != NULL)
			*block_bytes = (size_t)img->head.block_bytes;
		if (region_bytes != NULL)
			*region_bytes = (size_t)img->regs[p].bytes;
	}
	if (img == &tmp)
		ft__ckpt_image_free(&tmp);
	return rc;
}

FT__EXPORT int ft_ckpt_blocks(struct ft_comm *c, int region, int owner, size_t *nblocks,
			      size_t *block_bytes, size_t *region_bytes)
{
	return ft__err_public(ckpt_blocks_call(c, region, owner, nblocks, block_bytes, region_bytes));
}

/* Every sharded region of this rank back from its checkpoint, summed into *sum. */
static int restore_regions(struct ft_comm *c, struct ft_restore_info *sum)
{
	struct ft__ckpt *ck = c->ckpt;
	double p2 = 0;
	int rc = 0;

	memset(sum, 0, sizeof(*sum));
	sum->oldest_step = UINT64_MAX;
	for (size_t i = 0; i < ck->nreg; i++) {
		struct ft_restore_info ri;
		int r = ft_ckpt_restore(c, ck->reg[i].index, c->cfg.rank, 0, ck->reg[i].nblocks,
					ck->reg[i].ptr, 0, &ri);
		if (r != 0 && rc == 0)
			rc = r;
		if (r != 0 && r != -FT_ECORRUPT)
			continue;
		sum->blocks += ri.blocks;
		sum->bytes += ri.bytes;
		if (ri.ckpt_step > sum->ckpt_step)
			sum->ckpt_step = ri.ckpt_step;
		if (ri.blocks > 0 && ri.oldest_step < sum->oldest_step)
			sum->oldest_step = ri.oldest_step;
		sum->now_step = ri.now_step;
		sum->pls += ri.pls;
		p2 += ri.perturbation * ri.perturbation;
	}
	if (sum->oldest_step == UINT64_MAX)
		sum->oldest_step = 0;
	sum->perturbation = sqrt(p2);
	return rc;
}

/* A rejoined process: every sharded region of its own back from its checkpoint. */
static int restore_own(struct ft_comm *c)
{
	struct ft__ckpt *ck = c->ckpt;
	struct ft_restore_info sum;
	int rc = 0;

	memset(&sum, 0, sizeof(sum));
	if (ck->img.last_round == 0 && ck->resumed && seed_dir(c, &ck->cfg)[0] != '\0') {
		/* the run started from an export and this rank's earlier
		 * incarnation died before its first round counted (its journal
		 * is here, with no round: not a host without its checkpoint,
		 * which takes the path below): the export is its newest state
		 * (read into the saved copies, once no round writes from them,
		 * then copied) */
		char *bufs[FT__STATE_MAX];
		if ((rc = ft__ckpt_wait_done(ck, ck->round)) < 0)
			return rc;
		for (size_t i = 0; i < ck->nreg; i++)
			bufs[i] = ck->reg[i].saved;
		rc = seed_read(c, seed_dir(c, &ck->cfg), bufs, &sum);
		for (size_t i = 0; i < ck->nreg; i++)
			memcpy(rc == 0 ? ck->reg[i].ptr : ck->reg[i].saved,
			       rc == 0 ? ck->reg[i].saved : ck->reg[i].ptr, ck->reg[i].bytes);
		sum.now_step = now_step(c);
		ck->rinfo = sum;
		ck->restored = rc == 0;
		ck->restore_due = false;
		ck->restore_rc = rc;
		return rc;
	}
	/* no round of its own here (another host, or no files): its holder's
	 * copy, unless nobody has one */
	if (ck->img.last_round == 0 && ck->peer != NULL &&
	    (rc = restore_regions(c, &sum)) != -FT_EIO)
		goto done;
	if (ck->img.last_round == 0) {
		memset(&sum, 0, sizeof(sum));
		/* the earlier incarnation died before its first round counted (in
		 * ft_init, say): there is nothing to restore; the shards stay as
		 * this process's application set them, every update since step 0
		 * lost (pls: the shards' share of the state) */
		size_t bytes = 0;
		for (size_t i = 0; i < ck->nreg; i++)
			bytes += ck->reg[i].bytes;
		sum.now_step = now_step(c);
		sum.pls = ck->total > 0 ? (double)bytes / (double)ck->total : 0;
		ck->rinfo = sum;
		ck->restored = true;
		ck->restore_due = false;
		ck->restore_rc = 0;
		ft__warn("ckpt: rank %d has no checkpoint round of an earlier incarnation: its shards "
			 "stay as the application set them", c->cfg.rank);
		return 0;
	}
	rc = restore_regions(c, &sum);
done:
	ck->rinfo = sum;
	ck->restored = true;
	ck->restore_due = false;
	ck->restore_rc = rc;
	ft__info("ckpt: rank %d restored %zu blocks (%zu bytes) of its shards from step %llu..%llu "
		 "(now %llu): %s", c->cfg.rank, sum.blocks, sum.bytes,
		 (unsigned long long)sum.oldest_step, (unsigned long long)sum.ckpt_step,
		 (unsigned long long)sum.now_step, rc ? ft_strerror(rc) : "ok");
	return rc;
}

int ft__ckpt_state_received(struct ft_comm *c, uint64_t now, uint64_t total)
{
	if (c->state_received)
		return c->ckpt != NULL ? c->ckpt->restore_rc : 0;
	c->state_received = true;
	c->ckpt_hint_step = now;
	c->ckpt_hint_total = total;
	if (c->ckpt == NULL || !c->ckpt->restore_due)
		return 0;
	if (total != 0)
		c->ckpt->total = total;
	return restore_own(c);
}

const char *ft__ckpt_engine(const struct ft_comm *c)
{
	return c->ckpt != NULL ? ft__aio_engine_name(&c->ckpt->aio) : NULL;
}

void ft__ckpt_hint(const struct ft_comm *c, uint64_t *now, uint64_t *total)
{
	*now = c->ckpt != NULL ? c->ckpt->now_step : 0;
	*total = c->ckpt != NULL ? c->ckpt->total : 0;
}

static int state_restored_call(const struct ft_comm *c, struct ft_restore_info *info)
{
	int rc = ft__comm_check(c);

	if (rc != 0)
		return rc;
	if (info == NULL)
		return -FT_EINVAL;
	if (c->ckpt == NULL || !c->ckpt->restored)
		return -FT_ENOSYS;
	*info = c->ckpt->rinfo;
	return 0;
}

FT__EXPORT int ft_state_restored(const struct ft_comm *c, struct ft_restore_info *info)
{
	return ft__err_public(state_restored_call(c, info));
}

static int ckpt_stats_get_call(const struct ft_comm *c, struct ft_ckpt_stats *st)
{
	int rc = ft__comm_check(c);

	if (rc != 0)
		return rc;
	if (st == NULL)
		return -FT_EINVAL;
	if (c->ckpt == NULL)
		memset(st, 0, sizeof(*st));
	else
		*st = c->ckpt->st;
	return 0;
}

FT__EXPORT int ft_ckpt_stats_get(const struct ft_comm *c, struct ft_ckpt_stats *st)
{
	return ft__err_public(ckpt_stats_get_call(c, st));
}

FT__EXPORT unsigned ft_ckpt_interval_for_pls(double target_pls, double failures_per_step,
					     double lost_fraction)
{
	double x;
	unsigned k;

	if (!(target_pls > 0) || !(failures_per_step > 0) || !(lost_fraction > 0) ||
	    lost_fraction > 1 || isinf(target_pls) || isinf(failures_per_step))
		return 0;
	x = 2 * target_pls / (failures_per_step * lost_fraction);
	if (!(x < 4e9))
		return UINT_MAX;
	k = x < 1 ? 1 : (unsigned)x;
	while (k < UINT_MAX && failures_per_step * (double)(k + 1) * lost_fraction / 2 <= target_pls)
		k++;
	while (k > 1 && failures_per_step * (double)k * lost_fraction / 2 > target_pls)
		k--;
	return k;
}

void ft__ckpt_close(struct ft_comm *c)
{
	struct ft__ckpt *ck = c->ckpt;

	free(c->ckpt_hint_book);
	c->ckpt_hint_book = NULL;
	if (ck == NULL)
		return;
	c->ckpt = NULL;
	if (ft__ckpt_wait_done(ck, ck->round) < 0 || ft__aio_drain(&ck->aio) < 0) {
		ft__warn("ckpt: rank %d: waiting for the last writes failed", ck->rank);
		return; /* the kernel may still read the buffers: better lost than reused */
	}
	ck_free(ck);
}
