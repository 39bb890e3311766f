/* onehost.h: the one-host path: ranks of one host run every collective through shared memory, each reducing its own slice straight from every member's segment. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_ONEHOST_H
#define FTCC_ONEHOST_H

#include <stdbool.h>
#include <stdint.h>

struct ft_comm;
struct ft__call;

/*
 * Makes this rank's segment and maps every member's, once ft_init has
 * linked the ring (which carries the two agreements): 0 with c->onehost set
 * when every rank of the view could, 0 with c->onehost NULL when the path does
 * not apply (FTCC_SHM=0, a policy that recovers, one rank) or some rank
 * could not map it (every rank then stays on the ring, and says why), or
 * the ring's error.
 */
int ft__onehost_open(struct ft_comm *c);
/* Unmaps every segment (the files are gone already: ft__onehost_open). */
void ft__onehost_close(struct ft_comm *c);

/*
 * One collective (any kind, k as the driver holds it) on the segments:
 * 0; -FT_EMISMATCH on every rank when their calls differ (kind, count,
 * dtype, op, root); -FT_EPEERFAILED when a member died (its process
 * exited) while this rank waited for it.
 */
int ft__onehost_run(struct ft_comm *c, const struct ft__call *k, uint64_t op_seq);

#endif
