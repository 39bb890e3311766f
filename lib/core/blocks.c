/* blocks.c: reduce-scatter and allgather: the caller's blocks on the ring of each attempt. */
/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "engine.h"

/*
 * The layout. A call's blocks are those of the members the caller saw when
 * it called (n of them, block i member i's), and stay so through a
 * recovery. The engine runs one half of the ring over a buffer of m blocks
 * in ring order (schedule.h), m the current ring. So each attempt maps:
 *
 * - the ring is the caller's view (nothing failed, or a rejoin brought the
 *   same members back): ring position p is block p, and the engine runs on
 *   the caller's buffer itself: in place (reduce-scatter FT_IN_PLACE, every
 *   allgather), or, reduce-scatter out of place, from sendbuf into
 *   c->scratch (its partial sums need every block's room), the own block
 *   then copied to recvbuf. This is the path of every op nothing
 *   interrupts: no copy but that one.
 * - a smaller ring (shrink, during the call or before it): ring position p
 *   is the block pos[p] of the caller's layout. The survivors' blocks are
 *   packed in ring order into c->scratch and the engine runs there (the
 *   caller's buffer, untouched, stays the input of any later restart); the
 *   result goes back to the caller's blocks at the end. Copies, but only
 *   in an op some failure touched.
 *
 * A restart of an in-place reduce-scatter that ran on the caller's buffer
 * reads its input from shrink's backup, saved before each overwrite as for
 * allreduce (the engine's input_save_at hook); the block the rank sends
 * raw at step 0 is never overwritten, and is taken from the buffer after
 * the failure (ft__shrink_backup_complete). An allgather's input, the own
 * block, is never overwritten (input_untouched): no backup.
 */

int ft__blocks_init(struct ft_comm *c, struct ft__blocks *b, size_t count)
{
	memset(b, 0, sizeof(*b));
	b->count = count;
	b->n = ft__comm_shown_size(c);
	b->me = -1;
	b->members = malloc(2 * (size_t)b->n * sizeof(int));
	if (b->members == NULL)
		return -FT_ENOMEM;
	b->pos = b->members + b->n;
	for (int i = 0; i < b->n; i++) {
		b->members[i] = ft__comm_shown_member(c, i);
		if (b->members[i] == c->cfg.rank)
			b->me = i;
	}
	return b->me < 0 ? -FT_EEXCLUDED : 0;
}

void ft__blocks_fini(struct ft__blocks *b)
{
	free(b->members);
	b->members = b->pos = NULL;
}

/* c->scratch of at least bytes (its contents are not kept). */
static int scratch(struct ft_comm *c, size_t bytes, char **p)
{
	if (c->scratch_bytes < bytes || c->scratch == NULL) {
		void *q = NULL;
		if (posix_memalign(&q, 64, bytes > 64 ? bytes : 64) != 0)
			return -FT_ENOMEM;
		free(c->scratch);
		c->scratch = q;
		c->scratch_bytes = bytes > 64 ? bytes : 64;
	}
	*p = c->scratch;
	return 0;
}

bool ft__blocks_same(const struct ft_comm *c, const struct ft__blocks *b)
{
	if (c->size != b->n)
		return false;
	for (int p = 0; p < c->size; p++)
		if (b->members[p] != c->members[p])
			return false;
	return true;
}

int ft__blocks_attempt(struct ft_comm *c, struct ft__call *k, const struct ft__attempt *a,
		       struct ft__coll *co)
{
	struct ft__blocks *b = k->blk;
	bool ag = k->kind == FT__COLL_ALLGATHER, same = c->size == b->n;
	size_t bb = b->count * k->es, m = (size_t)c->size;
	struct ft__call e = *k;
	char *room;
	uint16_t algo;
	int rc;

	for (int p = 0; p < c->size; p++) {
		int i = 0;
		while (i < b->n && b->members[i] != c->members[p])
			i++;
		if (i == b->n) {
			ft__error("op %llu: rank %d has no block in the view the call began in",
				  (unsigned long long)c->op_seq, c->members[p]);
			return -FT_EPROTO;
		}
		b->pos[p] = i;
		same &= i == p;
	}
	b->packed = !same;
	b->m = c->size;
	b->mine = c->rank;
	k->input_untouched = ag || b->packed || !k->in_place;
	e.input_untouched = k->input_untouched;
	if (!b->packed) {
		if (!ag && !k->in_place) {
			if ((rc = scratch(c, k->count * k->es, &room)) != 0)
				return rc;
			e.dst = room;
		}
		b->res = e.dst;
		/* (by halving or doubling alone, the blocks in place too) */
		if ((algo = ft__rd_algo(c, &e)) != FT__ALGO_RING)
			return ft__engine_rd(c, &e, a, co, algo);
		return ft__engine_allreduce(c, &e, a, co);
	}
	if ((rc = scratch(c, (ag ? 1 : 2) * m * bb, &room)) != 0)
		return rc;
	e.count = m * b->count;
	if (ag) {
		if (bb > 0)
			memcpy(room + (size_t)c->rank * bb, (char *)k->dst + (size_t)b->me * bb, bb);
		e.dst = room;
		e.in_place = true;
	} else {
		const char *in = k->in_place ? (const char *)k->dst : (const char *)k->src;
		for (size_t p = 0; p < m && bb > 0; p++)
			memcpy(room + p * bb, in + (size_t)b->pos[p] * bb, bb);
		e.src = room;
		e.dst = room + m * bb;
		e.in_place = false;
	}
	b->res = e.dst;
	return ft__engine_allreduce(c, &e, a, co);
}

void ft__blocks_deliver(const struct ft__call *k)
{
	const struct ft__blocks *b = k->blk;
	size_t bb = b->count * k->es;

	if (bb == 0)
		return;
	if (k->kind == FT__COLL_REDUCE_SCATTER) {
		const char *from = b->res + (size_t)b->mine * bb;
		if (from != b->out)
			memmove(b->out, from, bb);
		return;
	}
	if (!b->packed)
		return;
	for (int p = 0; p < b->m; p++)
		if (b->pos[p] != b->me)
			memcpy((char *)k->dst + (size_t)b->pos[p] * bb, b->res + (size_t)p * bb, bb);
}
