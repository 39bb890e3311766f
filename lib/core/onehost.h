/* onehost.h: the one-host path: ranks of one host run every collective through shared memory, each reducing its own slice straight from every member's segment. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_ONEHOST_H
#define FTCC_ONEHOST_H

#include <stdbool.h>
#include <stdint.h>

struct ft_comm;
struct ft__call;
struct ft__attempt;
struct ft__coll;

/*
 * Makes this rank's segment for the current view and maps every member's,
 * once the view's ring is linked (it carries the two agreements); the
 * driver calls it before each attempt, and it does nothing where this view
 * is decided already. 0 with c->onehost set when every rank of the view
 * could, 0 with c->onehost NULL when the path does not apply (FTCC_SHM=0,
 * one rank) or some rank could not map it (every rank
 * then stays on the ring, and says why), or the ring's error (then it
 * tries again at the next attempt).
 */
int ft__onehost_open(struct ft_comm *c);
/* Unmaps every segment (the files are gone already: ft__onehost_open). */
void ft__onehost_close(struct ft_comm *c);

/*
 * One collective (any kind, k as the driver holds it) on the segments,
 * under the attempt's policy (a: its hooks claim the result, its commit
 * makes the last round wait for every member's DONE; co: the attempt's
 * state the policy reads after a failure, claimed): 0; -FT_EMISMATCH on
 * every rank when their calls differ (kind, count, dtype, op, root);
 * -FT_EPEERFAILED when a member died (its process exited) or failed its op
 * while this rank waited for it; -FT_EABORTED when the detector settles a
 * view first; -FT_ENOMEM when the backup an in-place input needs (c->backup,
 * reserved here) cannot be had. Then an in-place call whose input a round
 * overwrote runs out of place from the backup (k->src) at its next attempt.
 */
int ft__onehost_run(struct ft_comm *c, struct ft__call *k, const struct ft__attempt *a,
		    struct ft__coll *co);

#endif
