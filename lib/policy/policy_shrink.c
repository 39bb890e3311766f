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
 * broadcast on the new ring, and the others return it, with the membership
 * it was computed in shown until their next call (as the holders do). A
 * holder keeps its copy until it completes a later op (which every rank
 * then started, so every rank had the earlier one). A rank that finalizes
 * while it holds such a copy runs one more barrier, so that nobody still
 * lacking it is left without a holder.
 *
 * Larger ops and broadcasts instead send n-1 empty commit frames around the
 * ring after the data (with three ranks or more): a rank returns only once
 * every rank holds the result, so after a failure either every survivor
 * holds it or none returned it. The commit costs a few empty-frame hops,
 * invisible next to a large op; the copy costs a memcpy, invisible next to
 * a small one. Two ranks need neither: one survivor cannot disagree with
 * itself.
 */

#define FT__KEEP_MAX ((size_t)64 << 10)

/* (Not reduce-scatter, whose result differs on every rank, nor allgather:
 * they run with commit steps, which need no handover of a block layout.) */
static bool small_op(const struct ft__call *k)
{
	return k->kind != FT__COLL_BROADCAST && k->blk == NULL && k->count * k->es <= FT__KEEP_MAX;
}

/* Ops that run without commit steps and whose result a holder keeps. */
static bool kept_op(const struct ft_comm *c, const struct ft__call *k)
{
	return c->size >= 3 && small_op(k);
}

static void *save_input(struct ft__coll *co, size_t off, size_t len, struct ft__sum **sum)
{
	struct ft_comm *c = co->c;

	(void)sum;
	return co->in_place && c->backup != NULL && off + len <= c->backup_bytes
		       ? (char *)c->backup + off
		       : NULL;
}

static int claim(struct ft__coll *co)
{
	return ft__det_have_result(co->c->det, co->tmpl.op_seq);
}

static const struct ft__hooks shrink_hooks = {
	.input_save_at = save_input,
	.result_held = claim,
};

static bool recoverable(struct ft_comm *c, int rc)
{
	return c->det != NULL &&
	       (rc == -FT_EPEERFAILED || rc == -FT_EABORTED || ft__det_pending(c->det));
}

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
	if (co->c == NULL || co->s.n < 2) {
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

/*
 * The lowest member (dense rank order) that published a next op past op: a
 * holder of its result. A next op of op + 2 is a holder too: it returned op
 * (kept, no commit steps) while another rank still waited for op's last
 * frame, and then held the data of op + 1, an op with commit steps (a
 * broadcast) that it has not returned, for not every rank holds it. Nothing
 * further is reachable: a kept op + 1 needs every rank's input, so every
 * rank would have returned op.
 */
static int find_holder(struct ft_comm *c, uint64_t op, int *holder)
{
	*holder = -1;
	for (int i = 0; i < c->size; i++) {
		struct ft__member m;
		int rc = ft__mb_lookup(&c->mb, c->generation, c->members[i], &m);
		if (rc != 0)
			return rc;
		if (m.next_op > op + 2) {
			ft__error("rank %d published next op %llu, past op %llu + 2", c->members[i],
				  (unsigned long long)m.next_op, (unsigned long long)op);
			return -FT_EPROTO;
		}
		if (m.next_op > op && *holder < 0)
			*holder = c->members[i];
	}
	return 0;
}

/*
 * The holder `root` hands op's result to every member of the new view:
 * ranks still inside op receive it into their own buffer, holders pass
 * their kept copy along. No commit: the set of holders only grows.
 */
static int handover(struct ft_comm *c, const struct ft__call *k, uint64_t op, int root,
		    bool inside, int *suspect)
{
	struct ft__call h = {.kind = FT__COLL_BROADCAST, .es = 1, .dtype = FT_UINT8, .root = root};
	struct ft__attempt a = {.op_seq = op, .commit = false, .hooks = &shrink_hooks};
	struct ft__coll co;
	int rc;

	h.dst = inside ? k->dst : c->kept;
	h.count = inside ? k->count * k->es : c->kept_bytes;
	ft__info("op %llu: rank %d hands its result to generation %u", (unsigned long long)op, root,
		 c->generation);
	memset(&co, 0, sizeof(co));
	rc = ft__comm_connect_ring(c);
	if (rc == 0)
		rc = ft__engine_broadcast(c, &h, &a, &co);
	/* a link that failed with no failure known: its peer is suspected */
	if (rc == -FT_EPEERFAILED && co.fail_link != 0 && c->size > 1)
		*suspect = c->members[ft__mod(c->rank + (co.fail_link == 1 ? -1 : 1), c->size)];
	return rc;
}

/* The public membership stays that of the view the result was computed in until the next call. */
static int defer_view(struct ft_comm *c, const struct ft__shown *old)
{
	ft__comm_show_current(c);
	c->shown = *old;
	c->shown.members = malloc((size_t)old->size * sizeof(int));
	if (c->shown.members == NULL)
		return -FT_ENOMEM;
	memcpy(c->shown.members, old->members, (size_t)old->size * sizeof(int));
	c->shown.active = true;
	return 0;
}

/*
 * After a failure: waits for the detector's next view and decides what op
 * seq does: FT__STANDS (this rank holds its result), FT__RETRY (the view is
 * adopted; run op seq on it), or an error (-FT_EEXCLUDED when this rank
 * was left out). A link that failed with no failure known is declared
 * after a while (suspect: its peer).
 */
int ft__shrink_recover_view(struct ft_comm *c, const struct ft__call *k, uint64_t seq, int suspect,
			    bool handover_ok)
{
	/* Never shorter than the detector's own way to a view: it forces a
	 * settle after 2 x detect (plus, under rejoin, the wait for the lost
	 * ranks to come back), and a coordinator may then need a connect
	 * timeout. A shorter wait here left a communicator broken whose
	 * detector was still on its way to a view (FTCC_CONNECT_TIMEOUT_MS
	 * 5000 under rejoin: -FT_ETIMEDOUT after 7 s of a 30 s wait). */
	int64_t wait64 = 2 * (int64_t)c->cfg.detect_timeout_ms + c->cfg.connect_timeout_ms +
			 (c->cfg.policy == FT_POLICY_REJOIN ? c->cfg.rejoin_timeout_ms : 0);
	int wait_ms = wait64 > INT_MAX ? INT_MAX : (int)wait64;
	uint32_t after = c->generation;
	struct ft__shown old = {.generation = c->generation, .size = c->size, .rank = c->rank,
				.members = NULL};
	struct ft__view v = {0};
	int rc;

	old.members = malloc((size_t)c->size * sizeof(int));
	if (old.members == NULL)
		return -FT_ENOMEM;
	memcpy(old.members, c->members, (size_t)c->size * sizeof(int));
	for (;;) {
		uint64_t first;
		int holder;
		rc = ft__det_await(c->det, after,
				   suspect >= 0 ? 2 * c->cfg.detect_timeout_ms : wait_ms, &v);
		if (rc == -FT_ETIMEDOUT && suspect >= 0) {
			/* known failed by now (a rejoin wait for it, say): nothing
			 * to declare; the detector also declares nothing while it
			 * recovers from another failure, which explains the link */
			if (!ft__det_failed(c->det, suspect))
				ft__det_suspect(c->det, suspect, false);
			suspect = -1;
			continue;
		}
		if (rc != 0)
			break;
		first = v.first_op;
		if (seq < first) {
			/* every survivor holds it (commit steps): the next call adopts v */
			ft__view_free(&v);
			rc = FT__STANDS;
			break;
		}
		if (seq > first + 1 ||
		    (seq == first + 1 && !(handover_ok && c->kept_valid && c->kept_seq == first))) {
			ft__error("generation %u starts at op %llu, but this rank is at op %llu",
				  v.generation, (unsigned long long)first, (unsigned long long)seq);
			ft__view_free(&v);
			rc = -FT_EPROTO;
			break;
		}
		after = v.generation;
		rc = ft__comm_adopt(c, &v);
		if (rc == -FT_EEXCLUDED || rc == -FT_ENOMEM || rc == -FT_ECORRUPT)
			break;
		if (rc != 0)
			continue; /* a member of the view is gone already: wait for the next */
		holder = -1;
		rc = handover_ok ? find_holder(c, first, &holder) : 0;
		/* -FT_EPEERFAILED: a member left before its record was read (as
		 * in ft__comm_adopt): wait for the next view, not fail the call
		 * (make tsan, two ranks killed at once: the second died between
		 * its view settling and this rank loading it) */
		if (rc == -FT_EPEERFAILED)
			continue;
		if (rc != 0)
			break;
		if (seq == first && (holder < 0 || !small_op(k))) {
			/* nobody returned it (a holder of an op with commit steps
			 * is still inside it): it runs again */
			rc = FT__RETRY;
			break;
		}
		rc = handover(c, k, first, holder, seq == first, &suspect);
		if (rc == 0) {
			rc = seq == first ? defer_view(c, &old) : 0;
			if (rc == 0)
				rc = seq == first ? FT__STANDS : FT__RETRY;
			break;
		}
		if (!recoverable(c, rc))
			break;
		ft__comm_abort_ring(c, -FT_EABORTED, first);
	}
	free(old.members);
	return rc;
}

int ft__shrink_between(struct ft_comm *c, struct ft__call *k, struct ft__run *run, bool handover_ok)
{
	int rc;

	if (c->det != NULL && ft__det_pending(c->det)) {
		/* a failure seen between calls: this op runs on the next view */
		uint64_t t0 = ft__now_ns();
		rc = ft__shrink_recover_view(c, k, run->seq, -1, handover_ok);
		if (rc == FT__STANDS)
			rc = -FT_EPROTO;
		if (rc != 0)
			return rc;
		c->stats.recoveries++;
		run->recovery_ms += (double)(ft__now_ns() - t0) / 1e6;
	}
	return 0;
}

int ft__shrink_backup_alloc(struct ft_comm *c, const struct ft__call *k)
{
	size_t bytes = k->count * k->es;

	if (c->det == NULL || !k->in_place || k->input_untouched || bytes == 0 || c->size == 1)
		return 0;
	if (c->backup_bytes < bytes) {
		/* (Huge pages for it were measured slower here: 4 ranks, 64 MiB,
		 * 1.1-1.35x the vanilla ring against 1.00-1.02 without.) */
		void *p = NULL;
		if (posix_memalign(&p, 64, bytes) != 0)
			return -FT_ENOMEM;
		free(c->backup);
		c->backup = p;
		c->backup_bytes = bytes;
	}
	return 0;
}

static int shrink_begin(struct ft_comm *c, struct ft__call *k, struct ft__run *run)
{
	int rc = ft__shrink_between(c, k, run, true);

	return rc != 0 ? rc : ft__shrink_backup_alloc(c, k);
}

static void shrink_attempt(const struct ft_comm *c, const struct ft__call *k, struct ft__attempt *a)
{
	a->commit = c->det != NULL && c->size >= 3 && !kept_op(c, k);
	a->hooks = c->det != NULL ? &shrink_hooks : NULL;
}

int ft__shrink_restart(struct ft_comm *c, const struct ft__call *k, const struct ft__coll *co,
		       int rc, struct ft__run *run, uint64_t t0, bool handover_ok)
{
	int suspect = -1, v;

	if (rc == -FT_EPEERFAILED && co->fail_link != 0 && c->size > 1)
		suspect = c->members[ft__mod(c->rank + (co->fail_link == 1 ? -1 : 1), c->size)];
	ft__comm_abort_ring(c, -FT_EABORTED, run->seq);
	v = ft__shrink_recover_view(c, k, run->seq, suspect, handover_ok);
	run->recovery_ms += (double)(ft__now_ns() - t0) / 1e6;
	if (v >= 0)
		c->stats.recoveries++;
	if (v == FT__RETRY)
		ft__info("op %llu restarts on generation %u with %d ranks",
			 (unsigned long long)run->seq, c->generation, c->size);
	return v;
}

static int shrink_recover(struct ft_comm *c, struct ft__call *k, const struct ft__coll *co, int rc,
			  struct ft__run *run)
{
	uint64_t t0;

	if (!recoverable(c, rc))
		return rc;
	if (co->claimed && kept_op(c, k)) {
		/* the whole result is here: return it; a survivor without it
		 * gets it from this rank's kept copy after the next view */
		ft__comm_abort_ring(c, -FT_EABORTED, run->seq);
		return FT__STANDS;
	}
	t0 = ft__now_ns();
	ft__shrink_backup_complete(c, k, co, c->backup);
	return ft__shrink_restart(c, k, co, rc, run, t0, true);
}

static void shrink_end(struct ft_comm *c, const struct ft__call *k, int rc, const struct ft__run *run)
{
	size_t bytes = k->count * k->es;

	if (c->det == NULL || rc != 0 || !small_op(k))
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

static void shrink_finalize(struct ft_comm *c)
{
	struct ft__call k = {.kind = FT__COLL_BARRIER, .es = 1, .dtype = FT_UINT8, .op = FT_SUM};

	if (c->det != NULL && !c->broken && c->kept_valid && c->kept_seq + 1 == c->op_seq &&
	    c->size >= 3)
		ft__collective_run(c, &k, NULL);
}

const struct ft__policy ft__policy_shrink = {
	.name = "shrink",
	.begin = shrink_begin,
	.attempt = shrink_attempt,
	.recover = shrink_recover,
	.end = shrink_end,
	.finalize = shrink_finalize,
};
