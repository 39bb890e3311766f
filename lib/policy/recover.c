/* recover.c: the recovery sequence shrink and rejoin share: tear the ring down, await the next view, adopt it, acknowledge it, hand over, reconnect. */
/* SPDX-License-Identifier: MIT */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "policy.h"

/*
 * How a failure reaches this file. The detector's thread (lib/membership/
 * detect.c) learns of it (a broken control link, heartbeat silence, a
 * peer's notice), settles the next view with the other survivors and raises
 * its pending flag. The engine returns from the op it runs: its data link
 * broke, or it saw the flag when it woke. The driver (lib/core/collective.c)
 * hands the failed attempt to the policy's recover, which saves what a
 * rerun needs (the input: policy_shrink.c, policy_rejoin.c) and calls
 * ft__recover_restart. A failure seen between calls comes here from the
 * policy's begin, through ft__recover_between.
 *
 * The sequence, in recover_view below, top to bottom:
 *
 *   1. tear down: abort frames to the ring's neighbours, links closed;
 *   2. await the next view (ft__det_await); a link that broke with no
 *      failure known gets its peer suspected after a while, so that the
 *      detector settles a view at all;
 *   3. judge the view against the op this rank is in: the survivors all
 *      returned it (it stands), or they are one op behind or ahead of it
 *      (a rank that returned a small op hands it over), or the view is of
 *      no use (this rank left out, too far apart);
 *   4. adopt it: the new dense ranks and the members' addresses
 *      (ft__comm_load_view; the policy's view_loaded runs there);
 *   5. acknowledge it to the detector (ft__det_adopted): the op this rank
 *      publishes as its next if another member fails;
 *   6. hand over: a member that returned the op broadcasts its result on
 *      the new ring to those that did not;
 *   7. reconnect: the hand-over links the new ring; otherwise the driver's
 *      next attempt does (ft__comm_connect_ring), and the op runs again.
 *
 * A member that fails during 4 to 6 sends the loop back to 2 for the view
 * after.
 */

/* The peer of the link an attempt failed on (co->fail_link: 1 receive, 2
 * send, 3 co->fail_peer's), or -1 when it failed otherwise. */
static int link_peer(const struct ft_comm *c, const struct ft__coll *co, int rc)
{
	if (rc != -FT_EPEERFAILED || co->fail_link == 0 || c->size < 2)
		return -1;
	if (co->fail_link == 3)
		return co->fail_peer;
	return c->members[ft__mod(c->rank + (co->fail_link == 1 ? -1 : 1), c->size)];
}

bool ft__recoverable(const struct ft_comm *c, int rc)
{
	/* (no view to come brings the state back: state.c) */
	return c->det != NULL && rc != -FT_ESTATELOST &&
	       (rc == -FT_EPEERFAILED || rc == -FT_EABORTED || ft__det_pending(c->det));
}

int ft__recover_claim(struct ft__coll *co)
{
	return ft__det_have_result(co->c->det, co->tmpl.op_seq);
}

static const struct ft__hooks handover_hooks = {
	.result_held = ft__recover_claim,
};

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
 * their kept copy along. No commit: the set of holders only grows. Links
 * the new ring first (step 7 of the sequence, for this path).
 */
static int handover(struct ft_comm *c, const struct ft__call *k, uint64_t op, int root,
		    bool inside, int *suspect)
{
	struct ft__call h = {.kind = FT__COLL_BROADCAST, .es = 1, .dtype = FT_UINT8, .root = root};
	struct ft__attempt a = {.op_seq = op, .commit = false, .hooks = &handover_hooks};
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
	int peer = link_peer(c, &co, rc);

	if (peer >= 0)
		*suspect = peer;
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

/* How long a view may take: never shorter than the detector's own way to
 * one. It forces a settle after 2 x detect (plus, under rejoin, the wait for
 * the lost ranks to come back), and a coordinator may then need a connect
 * timeout. A shorter wait here left a communicator broken whose detector
 * was still on its way to a view (FTCC_CONNECT_TIMEOUT_MS 5000 under
 * rejoin: -FT_ETIMEDOUT after 7 s of a 30 s wait). */
static int view_wait_ms(const struct ft_comm *c)
{
	int64_t ms = 2 * (int64_t)c->cfg.detect_timeout_ms + c->cfg.connect_timeout_ms +
		     (c->cfg.policy == FT_POLICY_REJOIN ? c->cfg.rejoin_timeout_ms : 0);

	return ms > INT_MAX ? INT_MAX : (int)ms;
}

/*
 * Steps 2 to 7: waits for the detector's next view and decides what op seq
 * does on it: FT__STANDS (this rank holds its result), FT__RETRY (the view is
 * adopted; run op seq on it), or an error (-FT_EEXCLUDED when this rank
 * was left out). suspect: the peer of a link that failed with no failure
 * known, declared if no view comes within 2 x detect.
 */
static int recover_view(struct ft_comm *c, const struct ft__call *k, uint64_t seq, int suspect,
			bool handover_ok, int wait_ms)
{
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

		/* 2. await */
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

		/* 3. judge */
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

		/* 4. adopt (the links of the view before, if a hand-over made any, go) */
		after = v.generation;
		ft__comm_abort_ring(c, -FT_EABORTED, c->op_seq);
		rc = ft__comm_load_view(c, &v);
		ft__view_free(&v);
		if (rc == -FT_EEXCLUDED || ft__err_shortage(rc) || rc == -FT_ECORRUPT)
			break;
		if (rc != 0)
			continue; /* a member of the view is gone already: wait for the next */

		/* 5. acknowledge */
		ft__det_adopted(c->det, c->generation, c->op_seq);

		/* 6. hand over */
		holder = -1;
		rc = handover_ok ? find_holder(c, first, &holder) : 0;
		/* -FT_EPEERFAILED: a member left before its record was read (as
		 * in ft__comm_load_view): wait for the next view, not fail the
		 * call (make tsan, two ranks killed at once: the second died
		 * between its view settling and this rank loading it) */
		if (rc == -FT_EPEERFAILED)
			continue;
		if (rc != 0)
			break;
		if (seq == first && (holder < 0 || !ft__small_op(k))) {
			/* nobody returned it (a holder of an op with commit steps
			 * is still inside it): 7. the driver reconnects and runs it again */
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
		if (!ft__recoverable(c, rc))
			break;
		ft__comm_abort_ring(c, -FT_EABORTED, first);
	}
	free(old.members);
	return rc;
}

int ft__recover_restart(struct ft_comm *c, const struct ft__call *k, const struct ft__coll *co,
			int rc, struct ft__run *run, uint64_t t0, bool handover_ok)
{
	int suspect = link_peer(c, co, rc), v;

	/* 1. tear down */
	ft__comm_abort_ring(c, -FT_EABORTED, run->seq);
	v = recover_view(c, k, run->seq, suspect, handover_ok, view_wait_ms(c));
	run->recovery_ms += (double)(ft__now_ns() - t0) / 1e6;
	if (v >= 0)
		c->stats.recoveries++;
	if (v == FT__RETRY)
		ft__info("op %llu restarts on generation %u with %d ranks",
			 (unsigned long long)run->seq, c->generation, c->size);
	return v;
}

/* Before op run->seq begins: it runs on the next view (0), or the error. */
static int view_before(struct ft_comm *c, struct ft__call *k, struct ft__run *run,
		       bool handover_ok, int wait_ms)
{
	uint64_t t0 = ft__now_ns();
	int rc = recover_view(c, k, run->seq, -1, handover_ok, wait_ms);

	if (rc == FT__STANDS)
		rc = -FT_EPROTO;
	if (rc != 0)
		return rc;
	c->stats.recoveries++;
	run->recovery_ms += (double)(ft__now_ns() - t0) / 1e6;
	return 0;
}


/* Whether the state still goes to a newcomer of this view at op seq or
 * later (newcomers.c), under the in-band membership. A grow waits until it
 * went (one op at most): a newcomer taken in the meanwhile would hold only
 * the view that takes it, not the one that took the other (in-band keeps
 * no older view for it; the file rendezvous shows every record), and could
 * not tell, as every member does, that the other is new too: they would
 * choose different senders of the state. */
static bool state_owed(const struct ft_comm *c, uint64_t seq)
{
	if (strcmp(c->cfg.membership, "inband") != 0)
		return false;
	for (int i = 0; i < c->nowed; i++)
		if (c->owed_op[i] >= seq)
			return true;
	return false;
}

/* Whether a new incarnation of a rank outside this view waits to be taken
 * into the next generation, and can take part from op at (its application
 * runs it, or its log replays at - 1: the settle's own rule). */
static bool newcomer_waiting(struct ft_comm *c, uint64_t at)
{
	for (int r = 0, i = 0; r < c->cfg.world_size; r++) {
		struct ft__member m;
		if (i < c->size && c->members[i] == r) {
			i++;
			continue;
		}
		if (ft__mb_lookup(&c->mb, c->generation + 1, r, &m) == 0 && m.rejoining &&
		    m.next_op <= at + 1)
			return true;
	}
	return false;
}

/*
 * Growing back (lib/membership/detect_grow.c), at the start of op seq of a
 * view short of ranks: the coordinator plans the grow before the next op
 * when a newcomer waits; at the op planned (or the first after it that
 * can take newcomers), every member settles the next view with the
 * newcomers in, then runs the op on it.
 * The wait for that view is the op's own wait for its peers (op_timeout_ms,
 * or as long as they live): a member may still compute before this op.
 */
static int recover_grow(struct ft_comm *c, struct ft__call *k, struct ft__run *run, bool handover_ok)
{
	/* an op whose arguments do not depend on the membership: a
	 * reduce-scatter's or allgather's blocks, a broadcast's root (a place
	 * in the view) were fixed by the survivors' program for the view it
	 * knew; ft_finalize's barrier would take in a newcomer only to leave.
	 * A call with bad arguments here decides by the collective called, as
	 * the other members do (it then fails on every member alike) */
	enum ft__coll_kind kind = k->kind == FT__COLL_INVALID ? k->meant : k->kind;
	bool can = (kind == FT__COLL_ALLREDUCE || kind == FT__COLL_BARRIER) && !c->finalizing;
	int rc;

	bool lead = c->members[0] == c->cfg.rank;
	int what;

	if (c->det == NULL || !c->grows || c->size >= c->cfg.world_size)
		return 0;
	what = ft__det_grow_due(c->det, c->generation, run->seq, can, lead);
	while (what == FT__GROW_ASK) {
		/* the coordinator's word: its record in the next generation (it
		 * grows), or the plan moved on (its notice); a failure meanwhile
		 * is the op's to recover from */
		struct ft__member m;
		struct timespec ts = {0, 1000000};
		bool grows = ft__mb_lookup(&c->mb, c->generation + 1, c->members[0], &m) == 0;
		what = ft__det_grow_follow(c->det, c->generation, run->seq, can, grows);
		if (what == FT__GROW_ASK && ft__det_pending(c->det))
			what = FT__GROW_RUN;
		if (what == FT__GROW_ASK)
			nanosleep(&ts, NULL);
	}
	if (what == FT__GROW_GO) {
		ft__info("op %llu: generation %u grows back first", (unsigned long long)run->seq,
			 c->generation);
		/* (a rank that returned op seq - 1 before the others, shrink's
		 * small ops, may have to hand it over if a member fails meanwhile) */
		rc = view_before(c, k, run, handover_ok,
				 c->cfg.op_timeout_ms > 0 ? c->cfg.op_timeout_ms : INT_MAX);
		if (rc != 0 || c->size >= c->cfg.world_size)
			return rc;
	}
	if (lead && !state_owed(c, run->seq) && newcomer_waiting(c, run->seq + 1))
		ft__det_grow_plan(c->det, c->generation, run->seq + 1);
	return 0;
}

int ft__recover_between(struct ft_comm *c, struct ft__call *k, struct ft__run *run, bool handover_ok)
{
	/* a failure seen between calls: this op runs on the next view */
	if (c->det != NULL && ft__det_pending(c->det)) {
		int rc = view_before(c, k, run, handover_ok, view_wait_ms(c));
		if (rc != 0)
			return rc;
	}
	return recover_grow(c, k, run, handover_ok);
}

/*
 * A rank returns an op without commit steps as soon as it holds the result,
 * its last frames perhaps still on their way: a kept small op (shrink), and
 * every op on a ring of two. Were it then to finalize and close, a
 * neighbour still lacking the result finds the link gone and the rank
 * departed, and runs the op again without it: a different result for the
 * same op (libfabric's tcp;ofi_rxm drops sends still queued at close; a
 * socket closed with unread data resets). One more barrier first: it ends
 * only once the neighbour has finished the op, and a barrier has no
 * result to disagree on if it is cut short.
 */
void ft__recover_finalize(struct ft_comm *c)
{
	struct ft__call k = {.kind = FT__COLL_BARRIER, .es = 1, .dtype = FT_UINT8, .op = FT_SUM};
	bool kept = c->kept_valid && c->kept_seq + 1 == c->op_seq && c->size >= 3;

	if (c->det != NULL && !c->broken && (kept || c->size == 2))
		ft__collective_run(c, &k, NULL);
}
