/* policy_shrink.c: the shrink policy (lossy forward): survivors settle a smaller view and finish the op among themselves. */
/* SPDX-License-Identifier: MIT */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "policy.h"

/*
 * What a restart needs, and what it costs when nothing fails.
 *
 * Input. The op restarts on the survivors' original inputs, so an in-place
 * input must outlive its first overwrite. The engine says where it is about
 * to overwrite an in-place input for the first time (input_save_at: chunk
 * r before anything is posted, every other chunk a segment at a time as the
 * reduce-scatter reduces into it), and the policy says where in c->backup
 * it goes: the reduction kernel itself streams each input element there as
 * it reads it (ft__reduce_accum_save), so there is no separate pass over
 * the buffer and the backup is written without being read. After a failure the backup is completed
 * from the parts of the buffer not yet overwritten, and the op runs again
 * out of place from it.
 *
 * Result. Every survivor must return the same result. For a small op
 * (allreduce or barrier of at most FT__KEEP_MAX bytes) a rank returns as
 * soon as it holds the whole result and keeps a copy of it (c->kept): if a
 * failure then leaves some survivors without it, those that returned it
 * (holders: their published next op is past it) hand it to the others by a
 * broadcast on the new ring (recover.c), and the others return it, with the membership
 * it was computed in shown until their next call (as the holders do). A
 * holder keeps its copy until it completes a later op (which every rank
 * then started, so every rank had the earlier one). A rank that finalizes
 * while it holds such a copy runs one more barrier, so that nobody still
 * lacking it is left without a holder (ft__recover_finalize).
 *
 * Larger ops and broadcasts instead send n-1 empty commit frames around the
 * ring after the data (with three ranks or more): a rank returns only once
 * every rank holds the result, so after a failure either every survivor
 * holds it or none returned it. The commit costs a few empty-frame hops,
 * invisible next to a large op; the copy costs a memcpy, invisible next to
 * a small one. Two ranks need neither: one survivor cannot disagree with
 * itself.
 */

/* Ops that run without commit steps and whose result a holder keeps. */
static bool kept_op(const struct ft_comm *c, const struct ft__call *k)
{
	return c->size >= 3 && ft__small_op(k);
}

static void *save_input(struct ft__coll *co, size_t off, size_t len, struct ft__sum **sum)
{
	struct ft_comm *c = co->c;

	(void)sum;
	return co->in_place && c->backup != NULL && off + len <= c->backup_bytes
		       ? (char *)c->backup + off
		       : NULL;
}

static const struct ft__hooks shrink_hooks = {
	.input_save_at = save_input,
	.result_held = ft__recover_claim,
};

/*
 * After a failed first in-place attempt: the backup holds what was saved
 * before its overwrite (chunk r, and the first staged_done reduce-scatter
 * frames, in (step, segment) order); the rest of the buffer is still the
 * input. Completes the backup and makes the call out of place from it.
 */
void ft__shrink_backup_complete(struct ft_comm *c, struct ft__call *k, const struct ft__coll *co,
				void *backup)
{
	size_t bytes = k->count * k->es;

	(void)c;
	if (!k->in_place || k->input_untouched || backup == NULL || bytes == 0)
		return;
	if (co->input_saved) {
		/* recursive doubling saved it whole at the start */
	} else if (co->c == NULL || co->s.n < 2) {
		memcpy(backup, k->dst, bytes); /* the attempt never started */
	} else {
		size_t idx = 0, off, len;
		if (!co->mine_saved) {
			int mine = ft__send_chunk(&co->s, 0);
			memcpy((char *)backup + ft__chunk_lo(&co->s, mine) * k->es,
			       (char *)k->dst + ft__chunk_lo(&co->s, mine) * k->es,
			       ft__chunk_len(&co->s, mine) * k->es);
		}
		for (uint32_t g = 0; (int)g < co->s.n - 1; g++) {
			int ch = ft__recv_chunk(&co->s, g);
			for (uint32_t s = 0; s < ft__chunk_nseg(&co->s, ch); s++, idx++) {
				if (idx < co->staged_done)
					continue;
				ft__seg_range(&co->s, ch, s, &off, &len);
				memcpy((char *)backup + off, (char *)k->dst + off, len);
			}
		}
	}
	k->src = backup;
	k->in_place = false;
}

int ft__shrink_backup_alloc(struct ft_comm *c, const struct ft__call *k)
{
	size_t bytes = k->count * k->es;

	if (c->det == NULL || !k->in_place || k->input_untouched || bytes == 0 || c->size == 1)
		return 0;
	return ft__comm_backup_reserve(c, bytes);
}

static int shrink_begin(struct ft_comm *c, struct ft__call *k, struct ft__run *run)
{
	int rc = ft__recover_between(c, k, run, true);

	return rc != 0 ? rc : ft__shrink_backup_alloc(c, k);
}

static void shrink_attempt(const struct ft_comm *c, const struct ft__call *k, struct ft__attempt *a)
{
	a->commit = c->det != NULL && c->size >= 3 && !kept_op(c, k);
	a->hooks = c->det != NULL ? &shrink_hooks : NULL;
}

static int shrink_recover(struct ft_comm *c, struct ft__call *k, const struct ft__coll *co, int rc,
			  struct ft__run *run)
{
	uint64_t t0;

	if (rc == -FT_EMISMATCH && c->det != NULL)
		rc = ft__newcomers_mismatch(c, run->seq);
	if (!ft__recoverable(c, rc))
		return rc;
	if (co->claimed && kept_op(c, k)) {
		/* the whole result is here: return it; a survivor without it
		 * gets it from this rank's kept copy after the next view */
		ft__comm_abort_ring(c, -FT_EABORTED, run->seq);
		return FT__STANDS;
	}
	t0 = ft__now_ns();
	ft__shrink_backup_complete(c, k, co, c->backup);
	return ft__recover_restart(c, k, co, rc, run, t0, true);
}

static void shrink_end(struct ft_comm *c, const struct ft__call *k, int rc, const struct ft__run *run)
{
	size_t bytes = k->count * k->es;

	if (c->det == NULL || rc != 0 || !ft__small_op(k))
		return;
	if (c->kept_cap < bytes) {
		void *p = realloc(c->kept, bytes);
		if (p == NULL) {
			/* cannot happen for 64 KiB in practice; without the copy this
			 * rank simply cannot act as a holder */
			c->kept_valid = false;
			return;
		}
		c->kept = p;
		c->kept_cap = bytes;
	}
	if (bytes > 0)
		memcpy(c->kept, k->dst, bytes);
	c->kept_bytes = bytes;
	c->kept_seq = run->seq;
	c->kept_valid = true;
}

const struct ft__policy ft__policy_shrink = {
	.name = "shrink",
	.begin = shrink_begin,
	.view_loaded = ft__newcomers_view_loaded,
	.op_start = ft__newcomers_op_start,
	.attempt = shrink_attempt,
	.recover = shrink_recover,
	.end = shrink_end,
	.finalize = ft__recover_finalize,
};
