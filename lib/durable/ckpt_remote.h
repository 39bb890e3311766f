/* ckpt_remote.h: a communicator's checkpoints in a peer's memory (ckpt_remote.c): where rounds go, where restores come from. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_CKPT_REMOTE_H
#define FTCC_CKPT_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"
#include "ckpt_peer.h"

struct ft_comm;

#define FT__CKPT_BOOK_SLOT 8    /* int64s per rank's service address in the agreement */

/* enum ft_ckpt_where of a configuration: its own, else FTCC_CKPT_WHERE, else disk. */
int ft__ckpt_where(const struct ft_comm *c, const struct ft_ckpt_config *k);
/* Starts this rank's peer service (ckpt_peer.h) on the detector's interface. */
int ft__ckpt_remote_open(struct ft_comm *c, struct ft__ckpt_peer **out);
/* The services' addresses in the agreement's allreduce: this rank's into its
 * place of slots (world_size x FT__CKPT_BOOK_SLOT), then everyone's out. */
void ft__ckpt_book_pack(const struct ft__ckpt_peer *p, int rank, int64_t *slots);
void ft__ckpt_book_unpack(struct ft__ckpt_peer *p, int world_size, const int64_t *slots);
/* The services' book for the state transfer (world_size x 64 bytes, "" unknown):
 * its size (0: no service), and a copy into out. */
size_t ft__ckpt_book_size(const struct ft_comm *c);
void ft__ckpt_book_get(struct ft_comm *c, char *out);
/* Before a round: the holder of this rank's stream in the current view, and
 * whether the stream starts again (a new holder, or a lost one). */
void ft__ckpt_route(struct ft_comm *c);
/* owner's checkpoint from its holder's memory (the holder it chose, else any
 * member that has it): its geometry and table, and blocks [first, first + n)
 * of registration index `region`, in img's memory or (dst not NULL) checked
 * into dst as they come (ft__ckpt_peer_fetch). 0, -FT_EIO (nobody has it),
 * -FT_ECORRUPT, -FT_EINVAL, -FT_ENOMEM. */
int ft__ckpt_fetch(struct ft_comm *c, int owner, int region, size_t first, size_t n, void *dst,
		   struct ft__ckpt_image *img);

#endif
