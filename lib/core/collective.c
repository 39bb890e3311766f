/* collective.c: the public collectives: argument checks, and the driver that runs an op under the communicator's policy. */
/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "comm.h"
#include "policy.h"
#include "onehost.h"

static bool is_member(const struct ft_comm *c, int orig)
{
	for (int i = 0; i < c->size; i++)
		if (c->members[i] == orig)
			return true;
	return false;
}

/* Ends a call: on failure tears the ring down (the neighbours learn why). */
static int call_finish(struct ft_comm *c, int rc, struct ft_op_info *info, const struct ft__run *run)
{
	uint64_t seq = c->op_seq++;
	int shown = ft__comm_shown_size(c);

	if (rc != 0) {
		/* (the one-host path leaves the ring as it was: unused, never torn) */
		if (c->onehost == NULL) {
			ft__comm_abort_ring(c, rc, seq);
			/* (every rank fails this op: the next one links again,
			 * and a peer that gets there first says which round) */
			ft__comm_new_round(c, (uint32_t)(seq + 1));
		}
		if (c->det != NULL)
			ft__det_have_result(c->det, seq); /* an error is this op's outcome */
		if (rc == -FT_EPEERFAILED || rc == -FT_ETIMEDOUT || rc == -FT_EEXCLUDED ||
		    rc == -FT_EABORTED || rc == -FT_ESTATELOST) {
			c->broken = rc == -FT_EABORTED ? -FT_EPEERFAILED : rc;
			c->stats.failures++;
			rc = c->broken;
		}
	} else {
		c->stats.ops++;
	}
	if (run->start_size > shown)
		c->stats.failures += (uint64_t)(run->start_size - shown);
	if (run->recovery_ms > 0)
		c->stats.last_recovery_ms = run->recovery_ms;
	if (info != NULL) {
		info->op_seq = seq;
		info->generation = ft__comm_shown_generation(c);
		info->contributors = run->contributors;
		info->failed = run->start_size > shown ? run->start_size - shown : 0;
		info->recovery_ms = run->recovery_ms;
		info->elapsed_ms = (double)(ft__now_ns() - run->t0_ns) / 1e6;
	}
	return rc;
}

/*
 * Runs a collective to its end: on the current view, and under a recovering
 * policy again on each view that follows a failure, until it completes, the
 * error is not a failure, or this rank is left out.
 */
int ft__collective_run(struct ft_comm *c, struct ft__call *k, struct ft_op_info *info)
{
	const struct ft__policy *pol = c->policy;
	struct ft__run run = {.seq = c->op_seq, .t0_ns = ft__now_ns()};
	struct ft__attempt a;
	struct ft__coll co;
	bool on_shm = false;
	uint16_t algo;
	int rc;

	if (c->broken)
		return c->broken;
	run.start_size = ft__comm_shown_size(c);
	ft__comm_show_current(c);
	rc = pol->begin != NULL ? pol->begin(c, k, &run) : 0;
	if (run.recovery_ms > 0) /* begin recovered from a failure seen between calls */
		ft__trace_recovery(c->trace, run.t0_ns, c->generation, rc);
	while (rc == 0) {
		if (k->kind == FT__COLL_BROADCAST && !is_member(c, k->root)) {
			rc = -FT_EROOTFAILED;
			break;
		}
		memset(&co, 0, sizeof(co));
		memset(&a, 0, sizeof(a));
		rc = ft__comm_connect_ring(c);
		if (rc == 0 && pol->op_start != NULL)
			rc = pol->op_start(c, run.seq);
		/* (a new view: its own segments; after op_start, whose state
		 * transfer a newcomer runs from ft_state_sync, before any op) */
		if (rc == 0)
			rc = ft__onehost_open(c);
		if (rc == 0) {
			pol->attempt(c, k, &a);
			a.op_seq = run.seq;
			/* (blocks of a smaller view than the caller's: the ring packs
			 * them. The path is every rank's: it depends on the view
			 * and the call alone) */
			on_shm = c->onehost != NULL &&
				 (k->blk == NULL || ft__blocks_same(c, k->blk));
			if (on_shm)
				rc = ft__onehost_run(c, k, &a, &co);
			else if (k->blk != NULL)
				rc = ft__blocks_attempt(c, k, &a, &co);
			else if ((algo = ft__rd_algo(c, k)) != FT__ALGO_RING)
				rc = ft__engine_rd(c, k, &a, &co, algo);
			else if (k->kind == FT__COLL_BROADCAST)
				rc = ft__engine_broadcast(c, k, &a, &co);
			else
				rc = ft__engine_allreduce(c, k, &a, &co);
		}
		run.contributors = c->size;
		if (rc == 0)
			break;
		uint64_t r0 = ft__now_ns();
		rc = pol->recover(c, k, &co, rc, &run);
		ft__trace_recovery(c->trace, r0, c->generation, rc);
		if (rc == FT__STANDS) {
			rc = 0;
			break;
		}
		/* FT__RETRY (0) runs the op again on the view just adopted */
	}
	if (rc == 0 && k->blk != NULL && !on_shm)
		ft__blocks_deliver(k); /* held since the last attempt, or its commit */
	if (pol->end != NULL)
		pol->end(c, k, rc, &run);
	rc = call_finish(c, rc, info, &run);
	ft__trace_op(c->trace, k->kind, run.seq, k->count * k->es, ft__comm_shown_generation(c),
		     run.contributors, rc, run.t0_ns);
	return rc;
}

/*
 * Bad arguments: return the error, but still take part in the ring with a
 * collective of its own kind, so that ranks which called correctly meet a
 * header that disagrees (FT_EMISMATCH) instead of waiting for this rank,
 * and ranks that all erred the same way agree and stay in step.
 */
static int local_error(struct ft_comm *c, enum ft__coll_kind meant, int err)
{
	struct ft__call k = {.kind = FT__COLL_INVALID, .meant = meant, .es = 1, .dtype = FT_UINT8,
			     .op = FT_SUM};

	if (ft__comm_check(c) == 0 && !c->broken)
		ft__collective_run(c, &k, NULL);
	return err;
}

static int allreduce_call(struct ft_comm *c, const void *sendbuf, void *recvbuf, size_t count,
			  enum ft_dtype dtype, enum ft_op op, struct ft_op_info *info)
{
	int rc = ft__comm_check(c);
	size_t es = ft_dtype_size(dtype);
	struct ft__call k = {.kind = FT__COLL_ALLREDUCE, .src = sendbuf, .dst = recvbuf,
			     .count = count, .es = es, .dtype = dtype, .op = op};

	if (rc != 0)
		return rc;
	if (es == 0 || (unsigned)op >= FT_OP_COUNT || count > SIZE_MAX / 8 ||
	    (count > 0 && (recvbuf == NULL || sendbuf == NULL)))
		return local_error(c, FT__COLL_ALLREDUCE, -FT_EINVAL);
	k.in_place = sendbuf == FT_IN_PLACE || sendbuf == recvbuf;
	return ft__collective_run(c, &k, info);
}

FT__EXPORT int ft_allreduce(struct ft_comm *c, const void *sendbuf, void *recvbuf, size_t count,
			    enum ft_dtype dtype, enum ft_op op, struct ft_op_info *info)
{
	return ft__err_public(allreduce_call(c, sendbuf, recvbuf, count, dtype, op, info));
}

static int barrier_call(struct ft_comm *c)
{
	struct ft__call k = {.kind = FT__COLL_BARRIER, .es = 1, .dtype = FT_UINT8, .op = FT_SUM};
	int rc = ft__comm_check(c);

	return rc != 0 ? rc : ft__collective_run(c, &k, NULL);
}

FT__EXPORT int ft_barrier(struct ft_comm *c)
{
	return ft__err_public(barrier_call(c));
}

static int broadcast_call(struct ft_comm *c, void *buf, size_t bytes, int root,
			  struct ft_op_info *info)
{
	struct ft__call k = {.kind = FT__COLL_BROADCAST, .dst = buf, .count = bytes, .es = 1,
			     .dtype = FT_UINT8};
	int rc = ft__comm_check(c);

	if (rc != 0)
		return rc;
	if (root < 0 || root >= ft__comm_shown_size(c) || (bytes > 0 && buf == NULL) ||
	    bytes > SIZE_MAX / 2)
		return local_error(c, FT__COLL_BROADCAST, -FT_EINVAL);
	k.root = ft__comm_shown_member(c, root);
	return ft__collective_run(c, &k, info);
}

FT__EXPORT int ft_broadcast(struct ft_comm *c, void *buf, size_t bytes, int root,
			    struct ft_op_info *info)
{
	return ft__err_public(broadcast_call(c, buf, bytes, root, info));
}

/*
 * Reduce-scatter and allgather (blocks.c). Arguments are checked as
 * ft_allreduce's; n blocks of count elements must fit a size_t. An
 * allgather's own block goes into place first, and the op then runs in
 * place (it never overwrites that block, so it stays the input of any
 * restart; memmove: sendbuf may overlap recvbuf).
 */
int ft__blocks_call(struct ft_comm *c, enum ft__coll_kind kind, const void *sendbuf,
		    void *recvbuf, size_t count, enum ft_dtype dtype, enum ft_op op,
		    struct ft_op_info *info)
{
	size_t es = ft_dtype_size(dtype);
	struct ft__blocks b;
	struct ft__call k = {.kind = kind, .es = es, .dtype = dtype, .op = op, .blk = &b};
	int rc = ft__comm_check(c), n;

	if (rc != 0)
		return rc;
	n = ft__comm_shown_size(c);
	if (es == 0 || (unsigned)op >= FT_OP_COUNT || n < 1 || count > SIZE_MAX / 8 / (size_t)n ||
	    (count > 0 && (recvbuf == NULL || sendbuf == NULL)))
		return local_error(c, kind, -FT_EINVAL);
	if ((rc = ft__blocks_init(c, &b, count)) != 0) {
		ft__blocks_fini(&b);
		return local_error(c, kind, rc);
	}
	k.count = (size_t)n * count;
	k.in_place = sendbuf == FT_IN_PLACE || kind == FT__COLL_ALLGATHER;
	k.dst = k.in_place ? recvbuf : NULL; /* out of place: each attempt's (blocks.c) */
	k.src = k.in_place ? NULL : sendbuf;
	k.input_untouched = kind == FT__COLL_ALLGATHER;
	if (kind == FT__COLL_REDUCE_SCATTER) {
		b.out = k.in_place && count > 0 ? (char *)recvbuf + (size_t)b.me * count * es : recvbuf;
	} else if (sendbuf != FT_IN_PLACE && count > 0) {
		memmove((char *)recvbuf + (size_t)b.me * count * es, sendbuf, count * es);
	}
	rc = ft__collective_run(c, &k, info);
	ft__blocks_fini(&b);
	return rc;
}

static int reduce_scatter_call(struct ft_comm *c, const void *sendbuf, void *recvbuf,
			       size_t recvcount, enum ft_dtype dtype, enum ft_op op,
			       struct ft_op_info *info)
{
	return ft__blocks_call(c, FT__COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, info);
}

FT__EXPORT int ft_reduce_scatter(struct ft_comm *c, const void *sendbuf, void *recvbuf,
				 size_t recvcount, enum ft_dtype dtype, enum ft_op op,
				 struct ft_op_info *info)
{
	return ft__err_public(reduce_scatter_call(c, sendbuf, recvbuf, recvcount, dtype, op, info));
}

static int allgather_call(struct ft_comm *c, const void *sendbuf, void *recvbuf,
			  size_t sendcount, enum ft_dtype dtype, struct ft_op_info *info)
{
	return ft__blocks_call(c, FT__COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype, FT_SUM, info);
}

FT__EXPORT int ft_allgather(struct ft_comm *c, const void *sendbuf, void *recvbuf,
			    size_t sendcount, enum ft_dtype dtype, struct ft_op_info *info)
{
	return ft__err_public(allgather_call(c, sendbuf, recvbuf, sendcount, dtype, info));
}
