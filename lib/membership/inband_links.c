/* inband_links.c: the in-band membership's links to the other ranks' listeners (what a closed one proves: member_inband.c's top) its table of settled views, and the start of a settle. */
/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inband.h"

/* ---- links ---- */

void ft__ib_drop(struct inband *b, int i)
{
	ft__ctl_drop(&b->ctl, i);
	for (int r = 0; r < b->world; r++) {
		if (b->r[r].link == i) {
			b->r[r].link = -1;
			b->r[r].sent = false; /* a newcomer's ASK or REJOIN goes again */
		}
		if (b->r[r].back.link == i)
			b->r[r].back.link = -1; /* a record, no longer live */
	}
}

/* Proof that rank r is gone (after generation 0; see the top): it counts out of quorums. */
void ft__ib_mark_certain(struct inband *b, int r, const char *why)
{
	if (r < 0 || r >= b->world || r == b->rank || b->r[r].certain)
		return;
	b->r[r].certain = true;
	ft__info("membership: rank %d is gone for certain (%s)", r, why);
}

/* Rank r died before generation 0 was settled (see member_inband.c's top): never awaited again. */
void ft__ib_late_gone(struct inband *b, int r, const char *why)
{
	if (r < 0 || r >= b->world || r == b->rank || b->r[r].gone || b->started)
		return;
	b->r[r].gone = b->r[r].late = true;
	ft__ib_mark_certain(b, r, why);
	if (b->r[r].link >= 0)
		ft__ib_drop(b, b->r[r].link);
}

/* Generation 0: rank r's listener refused a connection (see member_inband.c's top). */
static void refused_at_start(struct inband *b, int r)
{
	int64_t now = ft__now_ms();

	if (!pmix_book(b))
		return;
	if (b->r[r].refused++ == 0)
		b->r[r].refused_ms = now;
	else if (b->r[r].refused >= REFUSED_GONE && now - b->r[r].refused_ms >= REFUSED_GONE_MS)
		ft__ib_late_gone(b, r, "its listener, published in the PMIx book, refuses connections");
}

/*
 * Link i ended with error rc. Only a link of this rank's own to the peer's
 * listener, on which the peer proved the job's token (its ACK came), and
 * that the peer's kernel then closed (-FT_EPEERFAILED: FIN or RST), shows
 * the rank gone: the process that held it died or left. A refusal, or a
 * link closed before the peer answered its hello, is suspicion only (see
 * the top).
 */
void ft__ib_link_failed(struct inband *b, int i, int rc)
{
	int peer = b->ctl.links[i].peer;
	bool mine = peer >= 0 && b->r[peer].link == i;
	bool proven = !b->ctl.links[i].connecting && !b->ctl.links[i].await_ack;

	ft__ib_drop(b, i);
	if (peer < 0 || !mine)
		return; /* only a link to its listener says the rank is gone */
	if (!b->started) {
		/* generation 0: a rank not yet listening; try again soon */
		b->r[peer].retry_ms = ft__now_ms() + RETRY_MS;
		if (rc == -FT_ECONNREFUSED)
			refused_at_start(b, peer);
		return;
	}
	if (rc == -FT_EPEERFAILED && proven)
		ft__ib_mark_certain(b, peer, "its kernel closed its membership link");
	else
		b->r[peer].retry_ms = ft__now_ms() + RETRY_MS;
}

/* The link to rank r, connecting it if there is none: its index once
 * connected, -1 while connecting or when it cannot be made now. */
int ft__ib_link_to(struct inband *b, int r)
{
	struct ib_rank *p = &b->r[r];
	int64_t now = ft__now_ms();
	int i;

	if (p->link >= 0 && !b->ctl.links[p->link].connecting)
		p->refused = 0; /* it listens */
	if (p->link >= 0)
		return b->ctl.links[p->link].connecting ? -1 : p->link;
	if (p->certain || now < p->retry_ms)
		return -1;
	i = ft__ctl_connect_start(&b->ctl, b->book[r], r, b->gen);
	if (i < 0) {
		p->retry_ms = now + RETRY_MS; /* refused too: suspicion only (see member_inband.c's top) */
		if (i == -FT_ECONNREFUSED && !b->started)
			refused_at_start(b, r);
		return -1;
	}
	p->link = i;
	return -1;
}

/* 0 sent, NOT_YET (connecting), or < 0 (the link failed). */
int ft__ib_send_to(struct inband *b, int r, enum ft__ctl_type type, const struct wbuf *w)
{
	int i = ft__ib_link_to(b, r);

	if (i < 0)
		return NOT_YET;
	if (w->bad)
		return -FT_EINVAL;
	if (ft__ctl_send(&b->ctl, i, type, b->gen, w->p, w->len) != 0) {
		ft__ib_link_failed(b, i, -FT_EIO); /* perhaps only full: no certainty */
		return -FT_EPEERFAILED;
	}
	return 0;
}

/* Answers on link i, where the question came from (connected, unlike a
 * link of this rank's own that may still be connecting). */
void ft__ib_reply(struct inband *b, int i, uint32_t gen, enum ft__ctl_type type,
		  const struct wbuf *w)
{
	if (i < 0 || b->ctl.links[i].fd < 0 || w->bad)
		return;
	/* the link stays, unsent or not: closing the peer's own link would
	 * show it this rank gone (link_failed), and this rank is not; the
	 * asker asks again or goes on without the answer */
	(void)ft__ctl_send(&b->ctl, i, type, gen, w->p, w->len);
}

/* Takes a committed view for the generation being settled (v's members move). */
int ft__ib_commit(struct inband *b, uint32_t gen, struct ib_value *v)
{
	/* gen is at most the generation being settled + 1 (on_commit): the
	 * table grows with the settles made here, never with what a message says */
	if (view_of(b, gen) == NULL && (gen > b->gen + (uint64_t)1 || gen == UINT32_MAX)) {
		ft__ib_value_free(v);
		return -FT_EINVAL;
	}
	return ft__ib_hold_view(b, gen, v);
}

/* Holds view gen (v's members move); the caller bounds gen (a newcomer's
 * LATEST: NEWEST_MAX, inband_rejoin.c). */
int ft__ib_hold_view(struct inband *b, uint32_t gen, struct ib_value *v)
{
	struct ft__view *views;

	if (view_of(b, gen) != NULL) {
		ft__ib_value_free(v);
		return 0;
	}
	if (gen >= b->nviews) {
		struct ib_value *values;
		size_t cap = 2 * (size_t)b->nviews, more;
		if (cap < (size_t)gen + 1)
			cap = (size_t)gen + 1;
		if (cap < 8)
			cap = 8;
		if (cap > (size_t)UINT32_MAX)
			cap = (size_t)UINT32_MAX;
		more = cap - b->nviews;
		views = realloc(b->views, cap * sizeof(*views));
		if (views != NULL)
			b->views = views;
		values = realloc(b->values, cap * sizeof(*values));
		if (values != NULL)
			b->values = values;
		if (views == NULL || values == NULL) {
			ft__ib_value_free(v);
			return -FT_ENOMEM;
		}
		memset(b->views + b->nviews, 0, more * sizeof(*views));
		memset(b->values + b->nviews, 0, more * sizeof(*values));
		b->nviews = (uint32_t)cap;
	}
	b->views[gen] = (struct ft__view){.generation = gen, .size = v->n, .members = v->members,
					  .first_op = v->first_op, .nonce = v->nonce};
	b->values[gen] = *v;    /* shares members with the view */
	b->started = true;
	*v = (struct ib_value){0};
	return 0;
}

/* Starts settling generation gen here (forgetting the one before). */
void ft__ib_begin(struct inband *b, uint32_t gen)
{
	if (b->active && b->gen == gen)
		return;
	b->active = true;
	b->gen = gen;
	b->published = false;
	b->promised = 0;
	ft__ib_value_free(&b->accepted);
	ft__ib_value_free(&b->best);
	ft__ib_value_free(&b->proposal);
	b->owed_to = -1;
	if (b->future_gen == gen && (gen > 0 || b->future_zero)) {
		b->owed_to = b->future_from;
		b->owed_link = b->future_link;
		b->owed_ballot = b->future_ballot;
		b->promised = b->future_ballot;
		b->promised_ms = ft__now_ms();
	}
	b->noquorum = false;
	b->ballot = 0;
	b->phase = 0;
	for (int r = 0; r < b->world; r++) {
		b->r[r].asked = b->r[r].replied = b->r[r].proposed = b->r[r].accepted =
			b->r[r].told = false;
		b->r[r].awaited_ms = 0;
	}
}
