/* detect_grow.c: growing back's state, shared by the main thread (the plan, the op it is at) and the detector's thread (the notices: detect.c), and the newcomers a settle takes in. */
/* SPDX-License-Identifier: MIT */
#include <unistd.h>

#include "detect.h"
#include "detect_thread.h"
#include "internal.h"

/*
 * Growing back (shrink and rejoin policies, file rendezvous). A view short
 * of ranks takes new incarnations of the missing ones in at an op boundary
 * every member agrees on, without a failure and without stopping an op
 * every member began:
 *
 * - A newcomer publishes as rejoining for generation g + 1 (g the latest
 *   view, which leaves it out) and waits (ft__rejoin_join).
 * - The coordinator's main thread, at the start of op s of generation g,
 *   finds it there and plans the grow before op B = s + 1: this detector
 *   sends GROW(g, B) both ways around the control ring; each rank keeps it
 *   and forwards what is new to it once. Plans only move forward: a copy
 *   of an older one changes nothing.
 * - Each main thread, at the start of op B, finds the plan (ft__det_grow_due)
 *   and asks for generation g + 1 instead of running B: its detector
 *   publishes B as its next op, and the settle takes the live rejoining
 *   records of non-members in, as awaited ranks. Only an allreduce or a
 *   barrier takes newcomers: a reduce-scatter's blocks and a broadcast's
 *   root were fixed by each survivor's program for the view it knew, so
 *   at such an op the plan moves to the next op. The coordinator decides,
 *   by its own call, and the others follow its word (its record in the
 *   next generation, or its notice of the plan moved on): members whose
 *   programs call different collectives there then fail the op together
 *   instead of waiting for each other.
 * - No member can have begun B: the coordinator planned before it took
 *   part in op s, and B begins only after s ends everywhere. A GROW that
 *   arrives after its main thread began B all the same (a neighbour's link
 *   was slow) starts the recovery at once (or postpones, as above): B is
 *   then stopped on a rank whose peers wait for the grow anyway, and runs
 *   again on the new view. The plan and the begun op share the lock, so
 *   that either the main thread sees the plan at B, or the detector sees B
 *   begun.
 * - A grow alone never forces a settle after the timeouts: a member that
 *   computes long before op B is waited for as op B would wait for it. A
 *   member lost meanwhile makes it a failure's settle, timed from then,
 *   without the newcomers (they ask for the next generation): a failure's
 *   view restarts ops and hands results over, which a newcomer has no part
 *   in.
 */

static bool member(const struct ft__det *d, int r)
{
	for (int i = 0; i < d->size; i++)
		if (d->members[i] == r)
			return true;
	return false;
}

void ft__det_command(struct ft__det *d, char what)
{
	if (write(d->cmd[1], &what, 1) < 0) {
		/* a full pipe already holds a wake-up */
	}
}

/* Under the lock: keeps plan (gen, at) when it is later than the one kept. Plans
 * only move forward: a copy of an older one (the slow way around the ring,
 * or one this rank postponed) never undoes a newer one. */
static bool take_plan(struct ft__det *d, uint32_t gen, uint64_t at)
{
	if (gen < d->grow_gen || (gen == d->grow_gen && at <= d->grow_at))
		return false;
	d->grow_gen = gen;
	d->grow_at = at;
	return true;
}

void ft__det_grow_plan(struct ft__det *d, uint32_t gen, uint64_t at)
{
	bool news;

	lock(d);
	news = take_plan(d, gen, at);
	d->grow_send |= news;
	unlock(d);
	if (news)
		ft__det_command(d, 'g');
}

int ft__det_grow_due(struct ft__det *d, uint32_t gen, uint64_t seq, bool can, bool lead)
{
	int what = FT__GROW_RUN;
	bool wake = false;

	lock(d);
	if (d->grow_at != 0 && d->grow_gen == gen && d->grow_at == seq) { /* 0: none planned */
		if (!lead) {
			what = FT__GROW_ASK;
		} else if (can) {
			what = FT__GROW_GO;
		} else {
			d->grow_at = seq + 1; /* and the members are told */
			d->grow_send = wake = true;
		}
	}
	if (what == FT__GROW_GO) {
		d->grow_now = wake = true;
	} else if (what == FT__GROW_RUN) {
		d->begun = seq;
		d->begun_can = can;
	}
	unlock(d);
	if (wake)
		ft__det_command(d, 'g');
	return what;
}

int ft__det_grow_follow(struct ft__det *d, uint32_t gen, uint64_t seq, bool can, bool lead_grows)
{
	int what = FT__GROW_ASK;

	lock(d);
	if (d->grow_gen != gen || d->grow_at != seq) {
		what = FT__GROW_RUN; /* the coordinator postponed it */
		d->begun = seq;
		d->begun_can = can;
	} else if (lead_grows) {
		what = FT__GROW_GO;
		d->grow_now = true;
	}
	unlock(d);
	if (what == FT__GROW_GO)
		ft__det_command(d, 'g');
	return what;
}

/* ---- the detector's thread ---- */

uint64_t ft__det_grow_planned(struct ft__det *d)
{
	uint64_t at;

	lock(d);
	at = d->grow_gen == d->gen ? d->grow_at : 0;
	unlock(d);
	return at;
}

int ft__det_grow_note(struct ft__det *d, uint32_t gen, uint64_t at)
{
	bool news, now = false;

	/* a detector one generation behind keeps it for when it gets there;
	 * none further behind can be, nor any member ahead */
	if (at == 0 || gen < d->gen || gen > d->gen + 1)
		return FT__GROW_OLD;
	lock(d);
	news = take_plan(d, gen, at);
	if (news) {
		/* the main thread already began op at or later: the grow starts
		 * now, or, in an op that takes no newcomer, before the next.
		 * Every op from at to the one begun took none: the coordinator
		 * grows at the first that can, which no member gets past, and
		 * the members that saw the plan at their starts follow it */
		if (gen == d->gen && d->begun >= at && !d->begun_can)
			d->grow_at = d->begun + 1;
		now = gen == d->gen && d->begun >= d->grow_at;
	}
	unlock(d);
	if (!news || gen != d->gen)
		return FT__GROW_OLD;
	return now ? FT__GROW_NOW : FT__GROW_NEWS;
}

int ft__det_grow_command(struct ft__det *d, uint64_t *at)
{
	int what = 0;

	lock(d);
	*at = d->grow_at;
	if (d->grow_send && d->grow_gen == d->gen)
		what |= FT__GROW_SEND;
	if (d->grow_now && d->grow_gen == d->gen)
		what |= FT__GROW_START;
	d->grow_send = d->grow_now = false;
	unlock(d);
	return what;
}

void ft__det_grow_lost(struct ft__det *d, bool lost, int64_t now)
{
	if (d->growing && lost && !d->grow_lost) {
		/* its settle counts from now: the grow may have waited long for
		 * a member computing before its op */
		d->grow_lost = true;
		d->recover_ms = now;
	}
}

int ft__det_newcomers(struct ft__det *d, int *back, int nback, bool lost)
{
	/* only in a grow alone, at the op planned for it: a failure's view
	 * restarts an op whose arguments (blocks, root) its callers fixed for
	 * the view before, and may hand a result over */
	if (!d->p.grow || !d->growing || lost || d->size >= d->p.world_size)
		return nback;
	for (int r = 0; r < d->p.world_size && nback < FT__BACK_MAX; r++) {
		struct ft__member m;
		if (!member(d, r) && ft__mb_lookup(d->p.mb, d->target, r, &m) == 0 && m.rejoining)
			back[nback++] = r;
	}
	return nback;
}

/*
 * Another rank asked about generation `asked` (the in-band membership: its
 * COLLECT; 0 none): a failure this rank has not heard of, or a grow, whose
 * coordinator (the view's lowest member, recover.c) asks at the grow's op.
 * Whether to start recovering now:
 * - asked by any other member: not a grow's settle, at once;
 * - asked by the lowest member alone: a grow is started by its own paths
 *   (the main thread at the grow's op, or the notice once that op began),
 *   for a COLLECT that comes before the main thread left the op before must
 *   not stop that op: the grown view begins at the op after it on every
 *   member. With neither a plan known nor another asker for
 *   detect_timeout_ms, it is a failure this rank has not heard of: it
 *   starts then, as a grow does (no forced settle on its account: the
 *   members that know of a failure force).
 */
bool ft__det_asked(struct ft__det *d, uint32_t asked, int64_t now)
{
	bool planned, other = false;

	if (asked <= d->gen || d->target != 0 || d->size == 0) {
		d->asked = 0;
		return false;
	}
	if (d->asked != asked) {
		d->asked = asked;
		d->asked_ms = now;
	}
	for (int i = 1; i < d->size && !other; i++) {
		struct ft__member m;
		other = d->members[i] != d->p.rank &&
			ft__mb_lookup(d->p.mb, asked, d->members[i], &m) == 0 && !m.rejoining;
	}
	if (other)
		return true;
	lock(d);
	planned = d->grow_gen == d->gen && d->grow_at != 0;
	unlock(d);
	if (planned || now - d->asked_ms < d->p.detect_timeout_ms)
		return false;
	d->growing = true;
	return true;
}
