/* ckpt_remote.c: a communicator's checkpoints in a peer's memory: the service's start and address book, the holder each round goes to, fetches of an owner's checkpoint (ckpt_peer.c carries them). */
/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_remote.h"
#include "ckpt_writer.h"
#include "comm.h"
#include "internal.h"

/* A round goes to a holder lost with its stream again no sooner than this
 * (a holder unreachable for a while would otherwise cost a whole round,
 * every block, at every step). */
#define RETRY_MS 1000

int ft__ckpt_where(const struct ft_comm *c, const struct ft_ckpt_config *k)
{
	int w = k->where != 0 ? k->where : c->tp_env.ckpt_where;

	return w == 0 ? FT_CKPT_DISK : w;
}

int ft__ckpt_remote_open(struct ft_comm *c, struct ft__ckpt_peer **out)
{
	struct ft__ckpt_peer_params pp = {
		.rank = c->cfg.rank, .world_size = c->cfg.world_size, .job_id = c->cfg.job_id,
		.token = c->cfg.token, .bind_host = c->host.listen, .publish_host = c->host.publish,
		.dead_ms = c->cfg.detect_timeout_ms,
		/* a holder that takes nothing for this long is as good as dead */
		.stall_ms = c->cfg.detect_timeout_ms > 2000 ? c->cfg.detect_timeout_ms : 2000,
		.no_local = c->tp_env.ckpt_local == 0};

	return ft__ckpt_peer_open(&pp, out);
}

/* Addresses travel in the agreement's allreduce (MAX): each rank's at its
 * place, 8 bytes of text to an int64 (ASCII: never negative), others 0. */
void ft__ckpt_book_pack(const struct ft__ckpt_peer *p, int rank, int64_t *slots)
{
	char a[FT__CKPT_BOOK_SLOT * 8] = {0};

	if (p != NULL)
		snprintf(a, sizeof(a), "%s", ft__ckpt_peer_addr(p));
	memcpy(slots + (size_t)rank * FT__CKPT_BOOK_SLOT, a, sizeof(a));
}

/* (also the book a rejoined rank gets with the survivors' state, the same
 * layout: each slot's text cut at its end, NUL or not) */
void ft__ckpt_book_unpack(struct ft__ckpt_peer *p, int world_size, const int64_t *slots)
{
	for (int r = 0; r < world_size; r++) {
		char a[FT__CKPT_BOOK_SLOT * 8 + 1];
		memcpy(a, (const char *)slots + (size_t)r * FT__CKPT_BOOK_SLOT * 8,
		       FT__CKPT_BOOK_SLOT * 8);
		a[sizeof(a) - 1] = '\0';
		ft__ckpt_peer_set_addr(p, r, a);
	}
}

size_t ft__ckpt_book_size(const struct ft_comm *c)
{
	return c->ckpt != NULL && c->ckpt->peer != NULL
		       ? (size_t)c->cfg.world_size * FT__CKPT_BOOK_SLOT * 8 : 0;
}

void ft__ckpt_book_get(struct ft_comm *c, char *out)
{
	for (int r = 0; r < c->cfg.world_size; r++)
		ft__ckpt_peer_get_addr(c->ckpt->peer, r, out + (size_t)r * FT__CKPT_BOOK_SLOT * 8,
				       FT__CKPT_BOOK_SLOT * 8);
}

void ft__ckpt_route(struct ft_comm *c)
{
	struct ft__ckpt *ck = c->ckpt;
	int h;
	uint64_t lost;

	if (ck == NULL || ck->peer == NULL)
		return;
	h = ft__ckpt_peer_holder(ck->peer, c->members, c->size, c->cfg.rank);
	if (h < 0) {
		/* nobody to hold it (this rank alone): no stream, and no round
		 * saves every block for one */
		ck->holder = -1;
		ck->stream_new = false;
		return;
	}
	lost = ft__ckpt_peer_lost(ck->peer, h);
	if (h != ck->holder || c->generation != ck->route_gen) {
		/* a new holder, or a new view (the holder may be a new incarnation) */
		ck->route_gen = c->generation;
		ck->retry_ms = 0;
		if (h >= 0)
			ft__info("ckpt: rank %d's rounds go to rank %d's memory", c->cfg.rank, h);
		ck->holder = h;
		ck->stream_new = true;
		ck->lost_seen = lost;
	} else if (lost != ck->lost_seen) {
		/* the stream broke: start it again, not at every step */
		int64_t now = ft__now_ms();
		if (ck->retry_ms == 0) {
			ck->retry_ms = now + RETRY_MS;
			ft__warn("ckpt: rank %d lost its stream to rank %d", c->cfg.rank, h);
		}
		if (now < ck->retry_ms) {
			ck->holder_paused = true;
			return;
		}
		ck->retry_ms = 0;
		ck->stream_new = true;
		ck->lost_seen = lost;
	}
	ck->holder_paused = false;
}

int ft__ckpt_fetch(struct ft_comm *c, int owner, int region, size_t first, size_t n, void *dst,
		   struct ft__ckpt_image *img)
{
	struct ft__ckpt_peer *p = c->ckpt != NULL ? c->ckpt->peer : NULL;
	int timeout = c->cfg.connect_timeout_ms > 0 ? c->cfg.connect_timeout_ms : 30000;
	int first_holder, rc = -FT_EIO;

	memset(img, 0, sizeof(*img));
	if (p == NULL)
		return -FT_EIO;
	/* its holder as the owner chose it (the owner among the members), then
	 * every member in turn: a view may have changed in between */
	first_holder = ft__ckpt_peer_holder(p, c->members, c->size, owner);
	for (int k = -1; k < c->size; k++) {
		int h = k < 0 ? first_holder : c->members[(c->rank + 1 + k) % c->size];
		if (h < 0 || (k >= 0 && h == first_holder))
			continue;
		/* (the fetch refuses an answer of another job or run) */
		rc = ft__ckpt_peer_fetch(p, h, owner, region, first, n, c->ckpt->cfg.block_bytes,
					 dst, c->job_nonce, timeout, img);
		if (rc == 0) {
			ft__info("ckpt: rank %d's checkpoint comes from rank %d's memory", owner, h);
			return 0;
		}
		if (rc == -FT_EINVAL || ft__err_shortage(rc))
			return rc;
	}
	return rc;
}
