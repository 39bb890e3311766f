/* ckpt_round.c: one round of the running partial checkpoint: the blocks the strategy chooses, their asynchronous writes, the commit in order, and the journal that records it. */
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
#include "ckpt_writer.h"
#include "comm.h"
#include "crc32c.h"
#include "fdreg.h"
#include "file.h"
#include "internal.h"
#include "jnl.h"
#include "reduce.h"

/*
 * A round (every interval-th ft_ckpt_step) measures, for every block, the
 * L2 distance between its current value and its saved copy (kept in
 * memory), chooses blocks by the strategy, copies each chosen block into
 * its saved copy (the staging: the application may go on updating its
 * state) and starts one write per block (head + saved copy, a writev)
 * into the slot that does not hold its newest committed copy. A block
 * that never had a copy is in every round until it has one, so the first
 * round saves every block.
 *
 * Two rounds may be in flight; they commit in order (see ckpt.h). A block
 * whose saved copy is still being written by an earlier round is not
 * copied again until that round is done: ft_ckpt_step then waits (the
 * only wait it does, counted in wait_ms), as it does when two rounds are
 * in flight already. Completions are reaped without waiting at every
 * ft_ckpt_step; ft_ckpt_flush waits for them all.
 *
 * A write error abandons its round (no COMMIT; its blocks' previous copies
 * stay what restore reads), and the next ft_ckpt_step or ft_ckpt_flush
 * returns the error once.
 */

/* the journal is compacted past this many bytes (plus twice a SNAP); tests lower it */
uint64_t ft__ckpt_journal_slack = (uint64_t)4 << 20;

/* ---- element distances ---- */

static double elem(const void *p, size_t i, unsigned dt)
{
	switch (dt) {
	case FT_FLOAT64: return ((const double *)p)[i];
	case FT_FLOAT16: return ft__half_to_float(((const uint16_t *)p)[i]);
	case FT_BFLOAT16: return ft__bf16_to_float(((const uint16_t *)p)[i]);
	case FT_INT32: return ((const int32_t *)p)[i];
	case FT_INT64: return (double)((const int64_t *)p)[i];
	case FT_UINT8: return ((const uint8_t *)p)[i];
	default: return ((const float *)p)[i];
	}
}

/* Squared L2 distance of two blocks of len bytes of dtype dt; NaN counts as infinite. */
double ft__ckpt_dist2(const void *a, const void *b, size_t len, unsigned dt)
{
	double s = 0;

	if (dt == FT_FLOAT32) {
		const float *x = a, *y = b;
		float acc = 0;
		for (size_t i = 0; i < len / 4; i++) {
			float d = x[i] - y[i];
			acc += d * d;
		}
		s = acc;
	} else {
		size_t es = ft_dtype_size((enum ft_dtype)dt);
		for (size_t i = 0; i < len / es; i++) {
			double d = elem(a, i, dt) - elem(b, i, dt);
			s += d * d;
		}
	}
	return s != s ? INFINITY : s;
}

/* ---- helpers ---- */

static size_t block_len(const struct ck_reg *r, size_t b, size_t bb)
{
	return b + 1 < r->nblocks ? bb : r->bytes - b * bb;
}

/* The region (position) of global block gb. */
static size_t reg_of(const struct ft__ckpt *ck, size_t gb)
{
	size_t i = 0;
	while (i + 1 < ck->nreg && gb >= ck->reg[i + 1].first)
		i++;
	return i;
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}


/* <base>/<job id>: base = the ckpt config's dir, FTCC_CKPT_DIR, else the log directory. */
int ft__ckpt_dir(const struct ft_comm *c, const char *cfg_dir, char *out, size_t cap)
{
	const char *base = cfg_dir != NULL && cfg_dir[0] != '\0' ? cfg_dir
			   : c->tp_env.ckpt_dir[0] != '\0' ? c->tp_env.ckpt_dir
			   : c->cfg.log_dir[0] != '\0' ? c->cfg.log_dir
			   : c->tp_env.default_log_root;
	int n = snprintf(out, cap, "%s/%s", base, c->cfg.job_id);

	if (n < 0 || (size_t)n >= cap)
		return -FT_EINVAL;
	/* the default is a predictable name in a shared place: ours alone, or refused */
	return base == c->tp_env.default_log_root ? ft__dir_private(base, FT__DIR_UNREADABLE) : 0;
}



/*
 * Rewrites the journal as HEAD + SNAP (bounded size): a new file, synced
 * when sync, renamed over the old one (atomic: a crash leaves one or the
 * other). Only between journal writes.
 */
static void compact(struct ft__ckpt *ck)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	char *buf;
	size_t len;
	int fd;

	if (ft__ckpt_build_journal(&ck->img, true, &buf, &len) != 0)
		return;
	if (ft__ckpt_path(path, sizeof(path), ck->dir, ck->rank, -1, 0) != 0) {
		free(buf);
		return;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	/* a fresh file: a name planted there (a link elsewhere) is removed, never followed */
	unlink(tmp);
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	ft__fd_own(fd);
	if (fd < 0 || ft__write_all(fd, buf, len, 0) != 0 || (ck->cfg.sync && fdatasync(fd) != 0) ||
	    rename(tmp, path) != 0) {
		ft__warn("ckpt: compacting the journal failed: %s; it grows", strerror(errno));
		if (fd >= 0) {
			ft__fd_close(fd);
			unlink(tmp);
		}
		free(buf);
		return;
	}
	if (ck->cfg.sync)
		ft__fsync_dir(ck->dir);
	free(buf);
	ft__fd_close(ck->jfd);
	ck->jfd = fd;
	ck->jpos = len;
}

/* ---- rounds: completion and commit ---- */

static void round_io_done(struct ft__aio_io *io, int res)
{
	struct ck_round *r = io->owner;

	r->left--;
	if (res < 0 && r->err == 0)
		r->err = res;
}

static void set_io(struct ft__aio_io *io, struct ck_round *r, int kind, int fd, const void *d,
		   size_t len, const void *d2, size_t len2, uint64_t off)
{
	memset(io, 0, sizeof(*io));
	io->kind = kind;
	io->fd = fd;
	io->data = d;
	io->len = len;
	io->data2 = d2;
	io->len2 = len2;
	io->off = off;
	io->complete = round_io_done;
	io->owner = r;
}

static void round_end(struct ft__ckpt *ck, struct ck_round *r)
{
	for (size_t i = 0; i < r->n; i++)
		if (ck->pend[r->blk[i]] == r->round)
			ck->pend[r->blk[i]] = 0;
	r->phase = R_IDLE;
	ck->done = r->round;
}

static void round_abandon(struct ft__ckpt *ck, struct ck_round *r)
{
	ft__warn_gated(&ck->said_abandon, "ckpt: round %llu in %s abandoned: %s (the call that "
		       "waits for it returns %s)", (unsigned long long)r->round, ck->dir,
		       ft_strerror(r->err), ft_err_name(r->err));
	if (r->phase == R_COMMITTING) {
		/* a torn COMMIT would hide every later record: cut it off */
		if (ftruncate(ck->jfd, (off_t)r->jpos0) == 0)
			ck->jpos = r->jpos0;
	}
	if (ck->err == 0)
		ck->err = r->err;
	ck->st.failed++;
	round_end(ck, r);
}

static void round_commit(struct ft__ckpt *ck, struct ck_round *r)
{
	for (size_t i = 0; i < r->n; i++) {
		struct ft__ckpt_jsnap *t = &ck->img.tab[r->blk[i]];
		t->round[r->slot[i]] = r->round;
		t->step[r->slot[i]] = r->step;
	}
	if (ck->img.resid != NULL)
		memcpy(ck->img.resid, r->resid, ck->nblocks * sizeof(float));
	ck->img.last_round = r->round;
	ck->img.last_step = r->step;
	ck->img.commits++;
	ck->st.committed++;
	round_end(ck, r);
	/* compacted only when no journal write is in flight (no later round:
	 * its COMMIT may be queued behind its blocks) */
	if (ck->done == ck->round && ck->jpos > ft__ckpt_journal_slack + 2 * (uint64_t)ck->nblocks * 40)
		compact(ck);
}

/* The round's COMMIT record, into r->rec: its length, or -FT_ENOMEM. */
static long build_commit(struct ft__ckpt *ck, struct ck_round *r)
{
	size_t ent = r->n * sizeof(struct ft__ckpt_jentry);
	size_t res = ((ck->nblocks * sizeof(float)) + 7) & ~(size_t)7;
	size_t len = sizeof(struct ft__ckpt_jrec) + ent + res;
	struct ft__ckpt_jrec h;

	if (len > UINT32_MAX)
		return -FT_ENOMEM; /* a record's length is 32 bits: too many blocks */
	if (len > r->rec_cap) {
		char *p = realloc(r->rec, len);
		if (p == NULL)
			return -FT_ENOMEM;
		r->rec = p;
		r->rec_cap = len;
	}
	memset(r->rec, 0, len);
	h = ft__ckpt_rec_head(FT__CKPT_JCOMMIT, len, r->round, r->step, r->n, ck->nblocks);
	memcpy(r->rec, &h, sizeof(h));
	for (size_t i = 0; i < r->n; i++) {
		size_t reg = reg_of(ck, r->blk[i]);
		struct ft__ckpt_jentry e = {.region = (uint32_t)reg, .slot = r->slot[i],
					 .block = r->blk[i] - ck->reg[reg].first};
		memcpy(r->rec + sizeof(h) + i * sizeof(e), &e, sizeof(e));
	}
	memcpy(r->rec + sizeof(h) + ent, r->resid, ck->nblocks * sizeof(float));
	ft__ckpt_rec_seal(r->rec, len);
	return (long)len;
}

/* Writes the round's COMMIT record (built). behind: right behind the
 * round's block writes, still in flight (the record starts once they
 * completed): it lands without waiting for a later ft_ckpt_step. */
static void start_commit_write(struct ft__ckpt *ck, struct ck_round *r, size_t len, bool behind)
{
	r->jpos0 = ck->jpos;
	ck->jpos += len;
	r->phase = R_COMMITTING;
	r->left = behind ? r->left + 1 : 1; /* not behind: everything else is done, the send too */
	set_io(&r->jio, r, FT__AIO_WRITE, ck->jfd, r->rec, len, NULL, 0, r->jpos0);
	r->jio.after_all = behind;
	ft__aio_start(&ck->aio, &r->jio);
}

/*
 * Moves the oldest round on as far as its completions allow; never waits.
 * After starting a round's next writes (its syncs, its commit) it looks
 * again, so that writes which completed as they were submitted move the
 * round on within the same call. io_uring usually hands page-cache writes
 * to its workers: a round's commit record is then written at the next
 * ft_ckpt_step (a round counts one step late; pwrite commits at once).
 */
int ft__ckpt_progress(struct ft__ckpt *ck)
{
	int rc = ft__aio_poll(&ck->aio);

	if (rc < 0)
		return rc;
	while (ck->done < ck->round) {
		struct ck_round *r = &ck->rounds[(ck->done + 1) & 1];
		if (r->peer_due && ft__ckpt_peer_sent(ck->peer) >= r->round) {
			r->peer_due = false;
			r->left--;
		}
		if (r->left != 0 && (r->phase == R_WRITING || (rc = ft__aio_poll(&ck->aio)) < 0 ||
				     r->left != 0))
			return rc < 0 ? rc : 0;
		if (r->err != 0) {
			round_abandon(ck, r);
			continue;
		}
		switch (r->phase) {
		case R_WRITING:
			if (!ck->disk) {
				round_commit(ck, r); /* sent to the holder: nothing on disk */
				break;
			}
			if (ck->cfg.sync) {
				r->phase = R_SYNCING;
				r->left = 2 * ck->nreg;
				for (size_t i = 0; i < 2 * ck->nreg; i++) {
					set_io(&r->fsio[i], r, FT__AIO_FSYNC,
					       ck->img.fd[i / 2][i % 2], NULL, 0, NULL, 0, 0);
					ft__aio_start(&ck->aio, &r->fsio[i]);
				}
				break;
			}
			/* fall through */
		case R_SYNCING: {
			long len = build_commit(ck, r);
			if (len < 0)
				r->err = (int)len;
			else
				start_commit_write(ck, r, (size_t)len, false);
			break;
		}
		case R_COMMITTING:
			if (ck->cfg.sync) {
				r->phase = R_JSYNC;
				r->left = 1;
				set_io(&r->jio, r, FT__AIO_FSYNC, ck->jfd, NULL, 0, NULL, 0, 0);
				ft__aio_start(&ck->aio, &r->jio);
				break;
			}
			/* fall through */
		default:
			round_commit(ck, r);
			break;
		}
	}
	return 0;
}

/* Waits until round `upto` is finished (counted as waiting). */
int ft__ckpt_wait_done(struct ft__ckpt *ck, uint64_t upto)
{
	uint64_t t0 = ft__now_ns();
	int rc = 0;

	while (ck->done < upto) {
		if ((rc = ft__ckpt_progress(ck)) < 0)
			break;
		if (ck->done >= upto)
			break;
		const struct ck_round *r = &ck->rounds[(ck->done + 1) & 1];
		if (r->peer_due && r->left == 1)
			ft__ckpt_peer_wait_sent(ck->peer, r->round); /* only the holder's send is left */
		else if ((rc = ft__aio_reap(&ck->aio, true)) < 0)
			break;
	}
	ck->st.wait_ms += ms_since(t0);
	return rc;
}

/* ---- choosing a round's blocks ---- */

static int by_value_desc(const void *a, const void *b, void *arg)
{
	const double *v = arg;
	size_t x = *(const size_t *)a, y = *(const size_t *)b;

	if (v[x] != v[y])
		return v[x] > v[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* Marks ck->chosen and fills r->resid; returns how many blocks are chosen. */
static size_t choose(struct ft__ckpt *ck, struct ck_round *r)
{
	size_t B = ck->nblocks, bb = ck->cfg.block_bytes, n = 0, k;
	int strat = ck->cfg.strategy;

	k = strat == FT_CKPT_FULL ? B : (size_t)ceil(ck->cfg.fraction * (double)B);
	if (k > B)
		k = B;
	memset(ck->chosen, 0, B);
	for (size_t b = 0; b < B; b++) {
		const struct ft__ckpt_jsnap *t = &ck->img.tab[b];
		if (t->round[0] == 0 && t->round[1] == 0 && ck->pend[b] == 0) {
			ck->chosen[b] = 1; /* never saved */
			n++;
		}
	}
	if (n == B || ck->stream_new) {
		/* the first round: every block, and the strategy's turn starts after
		 * it; the first of a stream to a holder: every block too */
		memset(ck->chosen, 1, B);
		memset(r->resid, 0, B * sizeof(float));
		return B;
	}
	n = 0;
	if (strat != FT_CKPT_FULL)
		for (size_t i = 0; i < ck->nreg; i++) {
			const struct ck_reg *g = &ck->reg[i];
			for (size_t b = 0; b < g->nblocks; b++) {
				size_t off = b * bb;
				ck->dist[g->first + b] = ft__ckpt_dist2(g->ptr + off, g->saved + off,
							       block_len(g, b, bb), g->dtype);
			}
		}
	switch (strat) {
	case FT_CKPT_FULL:
		memset(ck->chosen, 1, B);
		break;
	case FT_CKPT_ROUND_ROBIN:
		for (size_t i = 0; i < k; i++)
			ck->chosen[(ck->rr + i) % B] = 1;
		ck->rr = B ? (ck->rr + k) % B : 0;
		break;
	case FT_CKPT_RANDOM:
		for (size_t i = 0; i < B; i++)
			ck->order[i] = i;
		for (size_t i = 0; i < k; i++) {
			size_t j = i + (size_t)(splitmix(&ck->rng) % (uint64_t)(B - i));
			size_t t = ck->order[i];
			ck->order[i] = ck->order[j];
			ck->order[j] = t;
			ck->chosen[ck->order[i]] = 1;
		}
		break;
	default: /* PRIORITY, APP_PRIORITY: the k highest values, ties by lower index */
		for (size_t i = 0; i < B; i++)
			ck->order[i] = i;
		qsort_r(ck->order, B, sizeof(size_t), by_value_desc,
			strat == FT_CKPT_PRIORITY ? ck->dist : ck->score);
		for (size_t i = 0; i < k; i++)
			ck->chosen[ck->order[i]] = 1;
		break;
	}
	for (size_t b = 0; b < B; b++) {
		r->resid[b] = ck->chosen[b] || strat == FT_CKPT_FULL ? 0.0f : (float)sqrt(ck->dist[b]);
		n += ck->chosen[b];
	}
	return n;
}

static int round_reserve(struct ck_round *r, size_t n)
{
	if (n <= r->cap)
		return 0;
	size_t *blk = realloc(r->blk, n * sizeof(*blk));
	if (blk != NULL)
		r->blk = blk;
	uint8_t *slot = realloc(r->slot, n);
	if (slot != NULL)
		r->slot = slot;
	struct ft__ckpt_copy *hdr = realloc(r->hdr, n * sizeof(*hdr));
	if (hdr != NULL)
		r->hdr = hdr;
	struct ft__aio_io *io = realloc(r->io, n * sizeof(*io));
	if (io != NULL)
		r->io = io;
	struct iovec *piece = realloc(r->piece, 2 * n * sizeof(*piece));
	if (piece != NULL)
		r->piece = piece;
	if (blk == NULL || slot == NULL || hdr == NULL || io == NULL || piece == NULL)
		return -FT_ENOMEM;
	r->cap = n;
	return 0;
}

/* Sends round r to the holder (the stream's HEAD first when it starts). */
static void post_round(struct ft__ckpt *ck, struct ck_round *r, size_t commit_len)
{
	struct ft__ckpt_peer_round pr = {.round = r->round, .holder = ck->holder,
					 .piece = r->piece, .n = r->n, .commit = r->rec,
					 .commit_len = commit_len};
	char *head = NULL;
	size_t hlen = 0;

	if (ck->stream_new) {
		/* the HEAD of a journal (its geometry): the holder's mirror starts from it */
		if (ft__ckpt_build_journal(&ck->img, false, &head, &hlen) != 0)
			return;
		free(ck->stream_head);
		ck->stream_head = head;
		pr.head = head;
		pr.head_len = hlen;
	}
	if (ft__ckpt_peer_post(ck->peer, &pr) != 0) {
		ck->stream_new = true; /* the holder misses this round: start again */
		return;
	}
	ck->stream_new = false;
	r->peer_due = true;
	r->left++;
}

int ft__ckpt_start_round(struct ft__ckpt *ck, uint64_t step)
{
	size_t bb = ck->cfg.block_bytes, n, i = 0, reg = 0;
	struct ck_round *r;
	uint64_t t0, job_hash = ck->img.head.job_hash;
	int rc;

	if (ck->round - ck->done >= 2 && (rc = ft__ckpt_wait_done(ck, ck->done + 1)) < 0)
		return rc;
	r = &ck->rounds[(ck->round + 1) & 1];
	t0 = ft__now_ns();
	n = choose(ck, r);
	ck->st.select_ms += ms_since(t0);
	if ((rc = round_reserve(r, n)) < 0)
		return rc;
	for (size_t b = 0; b < ck->nblocks; b++)
		if (ck->chosen[b]) {
			/* its saved copy is still being written by the round before */
			if (ck->pend[b] != 0 && (rc = ft__ckpt_wait_done(ck, ck->pend[b])) < 0)
				return rc;
			r->blk[i++] = b;
		}
	t0 = ft__now_ns();
	r->round = ++ck->round;
	r->step = step;
	r->n = n;
	r->err = 0;
	r->left = n;
	r->phase = R_WRITING;
	ck->st.rounds++;
	ft__aio_hold(&ck->aio); /* the round's writes and COMMIT: one submission */
	for (i = 0; i < n; i++) {
		size_t gb = r->blk[i], b, off, len;
		const struct ft__ckpt_jsnap *t = &ck->img.tab[gb];
		struct ck_reg *g;
		struct ft__ckpt_copy *h = &r->hdr[i];

		while (reg + 1 < ck->nreg && gb >= ck->reg[reg + 1].first)
			reg++;
		g = &ck->reg[reg];
		b = gb - g->first;
		off = b * bb;
		len = block_len(g, b, bb);
		r->slot[i] = t->round[1] > t->round[0] ? 0 : 1; /* not the newest */
		memcpy(g->saved + off, g->ptr + off, len);
		ft__ckpt_copy_seal(h, &(struct ft__ckpt_copy){.slot = r->slot[i],
							    .region = (uint32_t)g->index,
							    .len = (uint32_t)len, .block = b,
							    .round = r->round, .step = step,
							    .job_hash = job_hash, .rank = ck->rank},
				   g->saved + off);
		ck->pend[gb] = r->round;
		ck->st.blocks++;
		ck->st.bytes += len;
		r->piece[2 * i] = (struct iovec){h, sizeof(*h)};
		r->piece[2 * i + 1] = (struct iovec){g->saved + off, len};
		if (!ck->disk)
			continue;
		set_io(&r->io[i], r, FT__AIO_WRITE, ck->img.fd[reg][r->slot[i]], h, sizeof(*h),
		       g->saved + off, len, (uint64_t)b * (FT__CKPT_HDR + bb));
		ft__aio_start(&ck->aio, &r->io[i]);
	}
	long clen = build_commit(ck, r);
	if (clen < 0)
		r->err = (int)clen;
	if (!ck->disk)
		r->left = 0;
	if (clen >= 0 && ck->peer != NULL && ck->holder >= 0 && !ck->holder_paused)
		post_round(ck, r, (size_t)clen);
	ck->st.copy_ms += ms_since(t0);
	/* without sync, the COMMIT follows the blocks at once (io_uring runs it
	 * once they completed; pwrite has completed them): rounds commit in order */
	if (ck->disk && !ck->cfg.sync && r->err == 0)
		start_commit_write(ck, r, (size_t)clen, true);
	ft__aio_release(&ck->aio);
	return ft__ckpt_progress(ck);
}
