/* policy_abort.c: the abort policy (the vanilla ring): a failed peer ends the call and the communicator. */
/* SPDX-License-Identifier: MIT */
#include "comm.h"
#include "policy.h"

static void abort_attempt(const struct ft_comm *c, const struct ft__call *k, struct ft__attempt *a)
{
	(void)c;
	(void)k;
	a->commit = false;
	a->hooks = NULL;
}

static int abort_recover(struct ft_comm *c, struct ft__call *k, const struct ft__coll *co, int rc,
			 struct ft__run *run)
{
	(void)c;
	(void)k;
	(void)co;
	(void)run;
	return rc;
}

const struct ft__policy ft__policy_abort = {
	.name = "abort",
	.attempt = abort_attempt,
	.recover = abort_recover,
};

const struct ft__policy *ft__policy_for(enum ft_policy p)
{
	return p == FT_POLICY_ABORT    ? &ft__policy_abort
	       : p == FT_POLICY_REJOIN ? &ft__policy_rejoin
				       : &ft__policy_shrink;
}
