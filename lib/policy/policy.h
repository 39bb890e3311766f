/* policy.h: what a communicator does when a peer fails: the recovery policies behind one small interface. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_POLICY_H
#define FTCC_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"

struct ft_comm;

/* A recovery's verdict on the op being run (besides a negative error). */
enum ft__verdict {
	FT__RETRY = 0,          /* a new view is adopted: run the op again on it */
	FT__STANDS = 1,         /* this rank holds the op's result: return it */
};

/* What one call has been through so far (the driver fills it; policies add to it). */
struct ft__run {
	uint64_t seq;           /* the op's sequence number */
	uint64_t t0_ns;         /* when the call began */
	double recovery_ms;     /* time spent in recoveries */
	int start_size;         /* members (as the caller saw them) when it began */
	int contributors;       /* ranks whose inputs the result holds */
};

/*
 * A policy. The driver (collective.c) calls begin once, then runs attempts
 * with the policy's hooks; after each failed attempt it asks recover what
 * to do; end always runs last, with the call's outcome. An op that fails
 * with a verdict of neither kind fails the call. begin, end and finalize
 * may be NULL (nothing to do).
 */
struct ft__policy {
	const char *name;
	/* Before the first attempt: recover from a failure seen between calls,
	 * prepare what a restart needs. 0, or the error that ends the call. */
	int (*begin)(struct ft_comm *c, struct ft__call *k, struct ft__run *run);
	/* A view this rank loads (ft_init's first, each adopted one), before
	 * its ring is linked: what the policy derives from it (NULL: nothing). */
	void (*view_loaded)(struct ft_comm *c, const struct ft__view *v);
	/* Each attempt, once the ring is linked, before any frame of the op:
	 * what the op owes first (NULL: nothing). 0, or the error that fails
	 * the attempt (recovered from as any other). */
	int (*op_start)(struct ft_comm *c, uint64_t seq);
	/* The options of the next attempt (commit steps, hooks). */
	void (*attempt)(const struct ft_comm *c, const struct ft__call *k, struct ft__attempt *a);
	/* An attempt failed with rc (co: how far it got): a verdict or an error. */
	int (*recover)(struct ft_comm *c, struct ft__call *k, const struct ft__coll *co, int rc,
		       struct ft__run *run);
	/* The call ends with rc (the result is in k->dst when 0). */
	void (*end)(struct ft_comm *c, const struct ft__call *k, int rc, const struct ft__run *run);
	/* ft_finalize: anything this rank still owes the others. */
	void (*finalize)(struct ft_comm *c);
};

extern const struct ft__policy ft__policy_abort;
extern const struct ft__policy ft__policy_shrink;
extern const struct ft__policy ft__policy_rejoin;

/*
 * The recovery sequence shrink and rejoin share (recover.c). handover_ok: a
 * rank that returned the op may hand its kept result to the others
 * (shrink's small ops); rejoin runs every op with commit steps instead.
 */
/* Before op run->seq: a failure seen between calls (the op runs on the
 * next view), then growing back (recover.c; rejoin, shrink). 0, or the
 * error that ends the call. */
int ft__recover_between(struct ft_comm *c, struct ft__call *k, struct ft__run *run, bool handover_ok);
/*
 * New incarnations taken in (newcomers.c), for the rejoin and shrink
 * policies: view_loaded finds the ops at which the state goes to them,
 * op_start sends it; mismatch: an op failed with -FT_EMISMATCH at op seq:
 * a newcomer that called another collective is sent away (the survivors'
 * verdict -FT_EPEERFAILED, its own -FT_EEXCLUDED), else -FT_EMISMATCH.
 */
void ft__newcomers_view_loaded(struct ft_comm *c, const struct ft__view *v);
int ft__newcomers_op_start(struct ft_comm *c, uint64_t seq);
int ft__newcomers_mismatch(struct ft_comm *c, uint64_t seq);
/* After a failed attempt whose input is safe: tears the ring down, waits for
 * the next view, adopts and acknowledges it, hands a result over; says what
 * the op does (FT__STANDS, FT__RETRY, an error) and accounts the recovery
 * from t0. */
int ft__recover_restart(struct ft_comm *c, const struct ft__call *k, const struct ft__coll *co,
			int rc, struct ft__run *run, uint64_t t0, bool handover_ok);
/* ft_finalize under shrink and rejoin: one more barrier when a rank still
 * lacking the last op's result could be left without its holder. */
void ft__recover_finalize(struct ft_comm *c);
/* An attempt's error is a failure a recovering policy recovers from. */
bool ft__recoverable(const struct ft_comm *c, int rc);
/* The result_held hook: tells the detector this rank holds op's result. */
int ft__recover_claim(struct ft__coll *co);

/* Shrink's input side, which rejoin uses too (policy_shrink.c). */
/* Room in c->backup for an in-place input of k (when a restart may need it). */
int ft__shrink_backup_alloc(struct ft_comm *c, const struct ft__call *k);
/* After a failed in-place attempt: completes backup (what the attempt saved
 * there, and the rest of k->dst not yet overwritten) and makes k out of place from it. */
void ft__shrink_backup_complete(struct ft_comm *c, struct ft__call *k, const struct ft__coll *co,
				void *backup);
/* The policy for cfg->policy. */
const struct ft__policy *ft__policy_for(enum ft_policy p);

/* Runs a collective to its end under c's policy (collective.c). */
int ft__collective_run(struct ft_comm *c, struct ft__call *k, struct ft_op_info *info);

/* Runs a reduce-scatter or an allgather as ft_reduce_scatter and
 * ft_allgather do, count elements per block (collective.c). */
int ft__blocks_call(struct ft_comm *c, enum ft__coll_kind kind, const void *sendbuf,
		    void *recvbuf, size_t count, enum ft_dtype dtype, enum ft_op op,
		    struct ft_op_info *info);

#endif
