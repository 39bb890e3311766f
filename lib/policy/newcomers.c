/* newcomers.c: what a view owes the new incarnations it took in (rejoin, and growing back under rejoin and shrink): the op at which each gets the state, and a newcomer that resumed at another collective. */
/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "policy.h"

/*
 * The ops at whose start the state goes to new incarnations (state.c),
 * recomputed from the records alone so that every member, a newcomer
 * included, finds the same: each live record published as rejoining, in
 * the last 16 generations, whose op (the first its application runs) is
 * not before v's first op (in-band, v itself also names those an earlier
 * view took and the state is still owed: a newcomer holds no view before
 * the one before its own, inband_rejoin.c). An op whose transfer already ran is found again
 * only when it runs again, and then the transfer runs again on every
 * member alike. The sender is the lowest member that is not such a
 * newcomer (whose application has not received the state yet). The
 * policies' view_loaded (rejoin, shrink): every view this rank loads.
 */
void ft__newcomers_view_loaded(struct ft_comm *c, const struct ft__view *v)
{
	/* In-band, v carries what earlier views still owe (owed_op,
	 * inband_rejoin.c), and a newcomer's idea of a view before its own is
	 * not the others': it once raised the op of the previous view's
	 * newcomer, who had the state already, to v's first op, and routed
	 * the state through it (the others did not: on the one-host path
	 * every rank failed, FT_EPROTO; on the ring that newcomer was sent
	 * away). So v's records alone, there. */
	bool carried = c->mb.ops == &ft__mb_inband_ops;
	uint32_t lo = carried ? v->generation : v->generation > 16 ? v->generation - 16 : 1;
	bool *fresh = calloc((size_t)c->cfg.world_size, sizeof(bool));

	c->nowed = 0;
	c->state_root = -1;
	if (c->fresh_op == NULL)
		c->fresh_op = calloc((size_t)c->cfg.world_size, sizeof(uint64_t));
	if (c->fresh_op != NULL)
		memset(c->fresh_op, 0, (size_t)c->cfg.world_size * sizeof(uint64_t));
	for (uint32_t g = lo; g <= v->generation && g > 0; g++) {
		struct ft__view gv = {0};
		uint64_t gfirst = v->first_op;
		/* the first op of the view that took it back */
		if (g != v->generation && ft__mb_try_settle(&c->mb, g, NULL, 0, false, &gv) == 1) {
			gfirst = gv.first_op;
			ft__view_free(&gv);
		}
		for (int r = 0; r < c->cfg.world_size; r++) {
			struct ft__member m = {0};
			bool dup = false, member = false;
			/* only a member of v is owed anything: the records of one
			 * that is not may vanish (it finalized) while members load
			 * v, and a transfer some run and others not is a mismatch */
			for (int i = 0; i < v->size && !member; i++)
				member = v->members[i] == r;
			if (!member || ft__mb_lookup(&c->mb, g, r, &m) != 0 ||
			    !(m.rejoining || m.owed_op != 0))
				continue;
			/* (in-band: one an earlier view took, carried by this
			 * one for a newcomer that holds no view before it) */
			if (!m.rejoining)
				m.next_op = m.owed_op;
			/* its application's first op: the one after the op it
			 * replays (next_op = first + 1), else that view's first op;
			 * op 0 is ft_init's barrier, which a newcomer runs itself:
			 * the state (nobody changed it yet) goes at op 1 */
			if (m.next_op < gfirst)
				m.next_op = gfirst;
			if (m.next_op == 0)
				m.next_op = 1;
			if (m.next_op < v->first_op)
				continue;
			if (fresh != NULL)
				fresh[r] = true; /* its state is not yet the job's */
			if (c->fresh_op != NULL)
				c->fresh_op[r] = m.next_op;
			for (int j = 0; j < c->nowed; j++)
				dup |= c->owed_op[j] == m.next_op;
			if (!dup && c->nowed < (int)FT__ARRAY_SIZE(c->owed_op))
				c->owed_op[c->nowed++] = m.next_op;
			if (g == v->generation && m.rejoining)
				ft__info("generation %u takes rank %d back (a new incarnation, from op "
					 "%llu)", g, r, (unsigned long long)m.next_op);
		}
	}
	/* a member gone since v settled (its record dead or removed: it
	 * finalized after finding the state lost, or died) gives nothing: when
	 * every member left is awaiting the state, it is lost now for this rank
	 * as for those that loaded v before the departure (a newcomer once
	 * took the gone one for the holder and waited out the rejoin timeout
	 * for a view that could only say the same) */
	for (int i = 0; i < v->size && c->state_root < 0; i++) {
		struct ft__member m = {0};
		int r = v->members[i];
		if ((fresh == NULL || !fresh[r]) &&
		    (r == c->cfg.rank || ft__mb_lookup(&c->mb, v->generation, r, &m) != -FT_EPEERFAILED))
			c->state_root = r;
	}
	if (c->nowed > 0 && c->state_root < 0)
		ft__error("generation %u: every live member is a new incarnation: nobody holds the state "
			  "(its op fails with FT_ESTATELOST)", v->generation);
	free(fresh);
}

/* A new incarnation's state goes first, at the op it awaits it (state.c). */
int ft__newcomers_op_start(struct ft_comm *c, uint64_t seq)
{
	int rc = ft__state_due(c, seq);

	return rc == -FT_EMISMATCH ? 0 : rc; /* the newcomer's, told by ft_state_sync */
}

/*
 * A newcomer's first op that does not match the survivors' (its program
 * resumed at another collective than the one the job stands at: the
 * state it got was taken there) is the newcomer's mistake: it is sent away
 * (FT_EEXCLUDED, and the survivors declare it, so that its detector learns
 * it is out), and the survivors run the op again as after a crash, never
 * failing with FT_EMISMATCH because of it. A mismatch among ranks that are
 * not new is the caller's, as ever. One newcomer at a time: if several
 * came back at this op, the next attempt finds the next one.
 */
int ft__newcomers_mismatch(struct ft_comm *c, uint64_t seq)
{
	if (c->fresh_op == NULL)
		return -FT_EMISMATCH;
	if (c->rejoined && c->fresh_op[c->cfg.rank] == seq) {
		ft__error("rejoin: this rank's program called another collective than the job "
			  "stands at (op %llu, where the state it got was taken): it is sent "
			  "away; resume where the registered state says (ftcc.h, ft_state_sync)",
			  (unsigned long long)seq);
		c->broken = -FT_EEXCLUDED;
		return -FT_EEXCLUDED;
	}
	for (int i = 0; i < c->size; i++) {
		int r = c->members[i];
		if (r == c->cfg.rank || c->fresh_op[r] != seq)
			continue;
		ft__warn("rejoin: rank %d, just back, called another collective than op %llu: "
			 "sent away", r, (unsigned long long)seq);
		c->fresh_op[r] = 0;
		ft__det_suspect(c->det, r, true);
		return -FT_EPEERFAILED;
	}
	return -FT_EMISMATCH;
}
