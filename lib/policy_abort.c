/* policy_abort.c: the abort policy (the vanilla ring): a failed peer ends the call and the communicator. */
#include "comm.h"
#include "policy.h"

static int abort_begin(struct ft_comm *c, struct ft__call *k, struct ft__run *run)
{
	(void)c;
	(void)k;
	(void)run;
	return 0;
}

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

static void abort_end(struct ft_comm *c, const struct ft__call *k, int rc, const struct ft__run *run)
{
	(void)run;
	(void)c;
	(void)k;
	(void)rc;
}

static void abort_finalize(struct ft_comm *c)
{
	(void)c;
}

const struct ft__policy ft__policy_abort = {
	.name = "abort",
	.begin = abort_begin,
	.attempt = abort_attempt,
	.recover = abort_recover,
	.end = abort_end,
	.finalize = abort_finalize,
};

const struct ft__policy *ft__policy_for(enum ft_policy p)
{
	return p == FT_POLICY_ABORT ? &ft__policy_abort : &ft__policy_shrink;
}
