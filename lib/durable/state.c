/* state.c: application state registered with ft_state_register, and its live transfer to a rank that rejoined. */
/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "ckpt_remote.h"
#include "comm.h"
#include "policy.h"
#include "trace.h"

/*
 * When a view takes a new incarnation back (its member record says
 * rejoining), every member notes the op at whose start the state is owed:
 * the first op the newcomer's application runs (its published next op).
 * At the start of that op, on every member, before its first attempt, a
 * member that is not new broadcasts a header (the number and sizes of its
 * regions) and then each region to the newcomers (route_of: along chains
 * of newcomers, else over the whole ring from state_root); a newcomer
 * receives them into its own registered regions and passes them on. The
 * survivors are then at the start of a collective, not in the middle of
 * an update: a consistent point. The newcomer usually takes
 * them in ft_state_sync, before computing its input, and otherwise at the
 * start of that op. The transfer carries the op's sequence number, so it
 * cannot be mistaken for another op's frames.
 *
 * Only replicated regions travel (the i-th replicated region of the root
 * into the i-th of the newcomer): a sharded region is every rank's own,
 * and comes back from the newcomer's own checkpoint (ckpt.c) once the
 * transfer reached it, with the root's latest checkpoint step (the job's
 * "now", for the portion of lost samples) and the job's shard bytes.
 */

struct state_head {
	uint64_t n;
	uint64_t now_step;      /* the root's latest ft_ckpt_step */
	uint64_t ckpt_total;    /* shard bytes of every member, 0: checkpoints off */
	uint64_t ckpt_on;       /* 1: the root had enabled checkpoints */
	uint64_t ckpt_book;     /* 1: ... with copies in peers' memory: their services'
				 * addresses follow the regions */
	uint64_t bytes[FT__STATE_MAX];
};

/* The replicated regions, in registration order. */
static int replicated(const struct ft_comm *c, int *idx)
{
	int n = 0;
	for (int i = 0; i < c->nstate; i++)
		if (c->state[i].flags == FT_STATE_REPLICATED)
			idx[n++] = i;
	return n;
}

/* Who sends op seq's transfer, and to whom (every member finds the same). */
struct route {
	int root;       /* original rank that sends it */
	int span;       /* to the span members after it in ring order; 0: to every member */
	bool in;        /* this rank takes part */
};

static bool due_at(const struct ft_comm *c, int pos, uint64_t seq)
{
	return c->fresh_op[c->members[ft__mod(pos, c->size)]] == seq;
}

/*
 * Along chains when it can: the newcomers due at seq stand in runs of
 * consecutive ring positions (a lost host's ranks are neighbours), and
 * each run gets the state from the member just before it, which forwards
 * nothing, while the members in no run go straight on to the op. A
 * broadcast over the whole ring would pass the bytes through every member
 * (n - 1 hops, each a copy in and out), and every member would wait for
 * it; a run of k newcomers takes k hops, and runs go at once. The regions
 * are replicated: every member that is not new holds the same bytes at
 * the op's start. When the member before a run is new itself (due at
 * another op), the whole ring from state_root, as before.
 */
static struct route route_of(const struct ft_comm *c, uint64_t seq)
{
	struct route whole = {.root = c->state_root, .span = 0, .in = true}, r = {.in = false};
	int n = c->size, start = -1;

	if (c->fresh_op == NULL || n < 2)
		return whole;
	for (int p = 0; p < n && start < 0; p++)
		if (!due_at(c, p, seq))
			start = p;
	if (start < 0)
		return whole; /* nobody holds it (transfer says so) */
	for (int i = 1; i <= n; i++) {
		int p = start + i, q = p - 1, len = 0;
		if (!due_at(c, p, seq) || due_at(c, q, seq))
			continue; /* not the first of a run */
		if (c->fresh_op[c->members[ft__mod(q, n)]] != 0)
			return whole; /* the member before it has no state to give */
		while (len < n && due_at(c, p + len, seq))
			len++;
		if (ft__mod(c->rank - q, n) <= len)
			r = (struct route){.root = c->members[ft__mod(q, n)], .span = len, .in = true};
	}
	return r;
}

static int bcast(struct ft_comm *c, const struct route *rt, uint64_t seq, void *buf, size_t bytes)
{
	struct ft__call k = {.kind = FT__COLL_BROADCAST, .dst = buf, .count = bytes, .es = 1,
			     .dtype = FT_UINT8, .root = rt->root, .span = rt->span};
	struct ft__attempt a = {.op_seq = seq};
	struct ft__coll co;
	int rc;

	memset(&co, 0, sizeof(co));
	rc = ft__comm_connect_ring(c);
	if (rc == 0)
		rc = ft__engine_broadcast(c, &k, &a, &co);
	if (rc == -FT_EMISMATCH) {
		/* frames of another root or size: the members found different
		 * routes (docs/design.md, "State transfer"), not a newcomer's
		 * registration, which transfer() tells apart: never taken for
		 * a state that was restored */
		ft__error("state: at op %llu, frames that another route sends (this rank expected "
			  "rank %d's, span %d)", (unsigned long long)seq, rt->root, rt->span);
		rc = -FT_EPROTO;
	}
	return rc;
}

static int transfer(struct ft_comm *c, uint64_t seq)
{
	struct route rt = route_of(c, seq);
	bool root = c->cfg.rank == rt.root;
	struct state_head h;
	int rc, mismatch = 0, idx[FT__STATE_MAX], nrep = replicated(c, idx);
	uint64_t t0 = ft__now_ns();
	char args[96];

	if (c->state_root < 0) {
		/* every member is a new incarnation awaiting it (newcomers.c):
		 * no view to come can bring it back, and a recovery would wait
		 * for one that never comes (every member, and the newcomers
		 * asking for the next generation, past their timeouts): each
		 * member fails at once, alike, and the communicator with it */
		ft__error("state: at op %llu, no member of generation %u holds the registered state "
			  "(each is a new incarnation awaiting it): it is lost",
			  (unsigned long long)seq, c->generation);
		c->broken = -FT_ESTATELOST;
		return -FT_ESTATELOST;
	}
	if (!rt.in)
		return 0;
	memset(&h, 0, sizeof(h));
	if (root) {
		h.n = (uint64_t)nrep;
		for (int i = 0; i < nrep; i++)
			h.bytes[i] = c->state[idx[i]].bytes;
		ft__ckpt_hint(c, &h.now_step, &h.ckpt_total);
		h.ckpt_on = c->ckpt != NULL;
		h.ckpt_book = ft__ckpt_book_size(c) > 0;
	}
	if ((rc = bcast(c, &rt, seq, &h, sizeof(h))) != 0)
		return rc;
	if (h.n > FT__STATE_MAX)
		return -FT_EPROTO;
	if (!root && (h.n != (uint64_t)nrep))
		mismatch = 1;
	for (uint64_t i = 0; i < h.n; i++) {
		void *into = NULL, *scratch = NULL;
		if (h.bytes[i] > SIZE_MAX / 2)
			return -FT_EPROTO;
		if (root || (i < (uint64_t)nrep && c->state[idx[i]].bytes == h.bytes[i])) {
			into = c->state[idx[i]].ptr;
		} else {
			mismatch = 1;
			into = scratch = malloc(h.bytes[i] ? h.bytes[i] : 1);
			if (into == NULL)
				return -FT_ENOMEM;
		}
		rc = bcast(c, &rt, seq, into, h.bytes[i]);
		free(scratch);
		if (rc != 0)
			return rc;
	}
	if (root)
		ft__info("state: %llu regions sent at op %llu", (unsigned long long)h.n,
			 (unsigned long long)seq);
	snprintf(args, sizeof(args),
		 "{\"op_seq\": %llu, \"regions\": %llu, \"root\": %d, \"span\": %d}",
		 (unsigned long long)seq, (unsigned long long)h.n, rt.root, rt.span);
	ft__trace_complete(c->trace, "state", "rejoin", t0, ft__now_ns(), args);
	mismatch = mismatch && c->rejoined;
	if (mismatch)
		ft__error("state: rank %d registered %d replicated regions, the survivors %llu (or "
			  "of other sizes): not restored", c->cfg.rank, nrep, (unsigned long long)h.n);
	if (h.ckpt_book == 1) {
		/* (passed on even by a newcomer that keeps nothing: the chain
		 * goes on past it) */
		size_t n = (size_t)c->cfg.world_size * FT__CKPT_BOOK_SLOT * 8;
		char *book = calloc(1, n);
		if (book == NULL)
			return -FT_ENOMEM;
		if (root)
			ft__ckpt_book_get(c, book);
		if ((rc = bcast(c, &rt, seq, book, n)) != 0) {
			free(book);
			return rc;
		}
		if (!mismatch && c->rejoined && !c->state_received) {
			free(c->ckpt_hint_book);
			c->ckpt_hint_book = book;
		} else {
			free(book);
		}
	}
	if (mismatch)
		return -FT_EMISMATCH;
	if (c->rejoined && !c->state_received)
		c->ckpt_hint_on = h.ckpt_on == 1;
	if (c->rejoined && !c->state_received)
		(void)ft__ckpt_state_received(c, h.now_step, h.ckpt_total); /* it logs; ft_state_sync returns it */
	return 0;
}

int ft__state_due(struct ft_comm *c, uint64_t seq)
{
	for (int i = 0; i < c->nowed; i++) {
		int rc;
		if (c->owed_op[i] != seq)
			continue;
		rc = transfer(c, seq);
		if (rc != 0 && rc != -FT_EMISMATCH)
			return rc; /* a failure: the op's recovery handles it, and this runs again */
		c->owed_op[i] = c->owed_op[--c->nowed];
		return rc;
	}
	return 0;
}

static int state_register_call(struct ft_comm *c, void *ptr, size_t bytes, unsigned flags)
{
	int rc = ft__comm_check(c);

	if (rc != 0)
		return rc;
	unsigned kind = flags & 0xffu, d = flags >> 8;
	enum ft_dtype dtype = d == 0 ? FT_FLOAT32 : (enum ft_dtype)(d - 1);

	if ((bytes > 0 && ptr == NULL) || (kind != FT_STATE_REPLICATED && kind != FT_STATE_SHARDED) ||
	    (d != 0 && d - 1 >= FT_DTYPE_COUNT) || bytes > SIZE_MAX / 2 ||
	    (kind == FT_STATE_SHARDED && bytes % ft_dtype_size(dtype) != 0))
		return -FT_EINVAL;
	if (c->nstate == FT__STATE_MAX)
		return -FT_ENOMEM;
	if (c->state == NULL) {
		c->state = calloc(FT__STATE_MAX, sizeof(*c->state));
		if (c->state == NULL)
			return -FT_ENOMEM;
	}
	c->state[c->nstate] = (struct ft__state_region){.ptr = ptr, .bytes = bytes, .flags = kind,
							.dtype = (unsigned)dtype};
	return c->nstate++;
}

FT__EXPORT int ft_state_register(struct ft_comm *c, void *ptr, size_t bytes, unsigned flags)
{
	return ft__err_public(state_register_call(c, ptr, bytes, flags));
}

static int state_sync_call(struct ft_comm *c)
{
	int rc = ft__comm_check(c);

	if (rc != 0)
		return rc;
	if (c->broken)
		return c->broken;
	for (;;) {
		rc = ft__state_due(c, c->op_seq);
		if (rc == 0 && c->rejoined) {
			bool owed = false;
			for (int i = 0; i < c->nowed; i++)
				owed |= c->owed_op[i] >= c->op_seq;
			/* received now or before (no transfer left): the shards next */
			if (!owed)
				rc = ft__ckpt_state_received(c, 0, 0);
			return rc;
		}
		if (rc == 0 || rc == -FT_EMISMATCH || c->det == NULL)
			return rc;
		/* a failure during the transfer: settle the next view, then again */
		struct ft__call k = {.kind = FT__COLL_BARRIER, .es = 1, .dtype = FT_UINT8};
		struct ft__run run = {.seq = c->op_seq, .t0_ns = ft__now_ns()};
		struct ft__coll co;
		memset(&co, 0, sizeof(co));
		rc = c->policy->recover(c, &k, &co, rc, &run);
		if (rc != FT__RETRY)
			return rc < 0 ? rc : -FT_EPROTO;
	}
}

FT__EXPORT int ft_state_sync(struct ft_comm *c)
{
	return ft__err_public(state_sync_call(c));
}

static int rejoined_call(const struct ft_comm *c, uint64_t *next_op)
{
	int rc = ft__comm_check(c);

	if (rc != 0)
		return rc;
	if (next_op != NULL)
		*next_op = c->op_seq;
	return c->rejoined ? 1 : 0;
}

FT__EXPORT int ft_rejoined(const struct ft_comm *c, uint64_t *next_op)
{
	return ft__err_public(rejoined_call(c, next_op));
}
