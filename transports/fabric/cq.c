/* cq.c: libfabric completions dispatched to their links and ops, and the event queue the engine reads. */
/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <string.h>

#include "fabric.h"

/* ---- events ---- */

void ft__fab_ev_push(struct ft__transport *tp, int type, int status, struct ft__link *l, void *ctx)
{
	if (tp->ev_len == tp->ev_cap) {
		size_t cap = tp->ev_cap ? tp->ev_cap * 2 : 256;
		struct ft__tp_event *q = malloc(cap * sizeof(*q));
		if (q == NULL) {
			ft__error("fabric: out of memory for events");
			return;
		}
		for (size_t i = 0; i < tp->ev_len; i++)
			q[i] = tp->evq[(tp->ev_head + i) % tp->ev_cap];
		free(tp->evq);
		tp->evq = q;
		tp->ev_cap = cap;
		tp->ev_head = 0;
	}
	tp->evq[(tp->ev_head + tp->ev_len++) % tp->ev_cap] = (struct ft__tp_event){
		.type = type, .status = status, .link = l, .ctx = ctx, .peer = l->peer};
}

int ft__fab_ev_pop(struct ft__transport *tp, struct ft__tp_event *ev, int max)
{
	int n = 0;

	while (n < max && tp->ev_len > 0) {
		ev[n++] = tp->evq[tp->ev_head];
		tp->ev_head = (tp->ev_head + 1) % tp->ev_cap;
		tp->ev_len--;
	}
	return n;
}

/* A closed link's events must not reach the engine. */
void ft__fab_ev_purge(struct ft__transport *tp, struct ft__link *l)
{
	size_t k = 0;

	for (size_t i = 0; i < tp->ev_len; i++) {
		struct ft__tp_event e = tp->evq[(tp->ev_head + i) % tp->ev_cap];
		if (e.link != l)
			tp->evq[(tp->ev_head + k++) % tp->ev_cap] = e;
	}
	tp->ev_len = k;
}

/* ---- completions ---- */

/*
 * Receives flushed while the link is open: a MSG connection went down, which
 * ends the stream as FI_SHUTDOWN does; RDM receives are only cancelled by
 * link_close.
 */
static void flushed(struct ft__link *l)
{
	if (!l->tp->msg) {
		ft__fab_link_fail(l, -FT_EPEERFAILED);
		return;
	}
	l->peer_closed = true;
	if (l->grace == 0)
		l->grace = ft__now_ms() + FAB_DEAD_GRACE_MS;
}

static void on_ctl(struct ft__link *l, int c, size_t len, int err)
{
	if (c == C_BHDR && err != 0)
		l->bh = BH_IDLE;
	if (l->closing)
		return;
	if (err == FI_ECANCELED) {
		flushed(l);
		return;
	}
	if (err != 0) {
		ft__debug("fabric: control message %d with rank %d failed: %s", c, l->peer,
			  fi_strerror(err));
		ft__fab_link_fail(l, ft__fab_fi_to_ft(err));
		return;
	}
	switch (c) {
	case C_HELLO:
		if (!l->sending) {
			l->hello_len = len;
			l->born_ms = ft__now_ms(); /* an early one waits from here */
			l->stranger = ft__fab_hello_sealed(l->tp, &l->m.hello, len) != 0;
		}
		break;
	case C_ACK_RX:
		if (len != sizeof(l->m.ack_rx)) {
			ft__fab_link_fail(l, -FT_EPROTO);
			break;
		}
		int st = ft__hello_ack_check(&l->m.ack_rx, l->m.hello.hello.nonce, l->tp->token);
		if (st != 0) {
			ft__error("fabric: rank %d refused our link: %s", l->peer, ft_strerror(st));
			ft__fab_link_fail(l, st);
		} else if (l->tp->msg) {
			/* the answer carries the acceptor's challenge: proven before any frame */
			ft__hello_proof_seal(&l->m.proof_tx, &l->m.hello.hello, l->m.ack_rx.challenge,
					    l->tp->token);
			l->want[C_PROOF_TX] = true;
		}
		break;
	case C_PROOF_RX:
		l->proof_len = len;
		break;
	case C_CLOSE_RX:
		if (len != sizeof(l->m.close_rx) || l->m.close_rx.magic != FAB_CLOSE_MAGIC) {
			ft__fab_link_fail(l, -FT_EPROTO);
			break;
		}
		l->peer_closed = true;
		l->peer_frames = l->m.close_rx.frames;
		if (l->sending)
			l->grace = ft__now_ms() + FAB_DEAD_GRACE_MS;
		break;
	case C_BHDR:
		if (len != sizeof(l->m.bhdr)) {
			ft__fab_link_fail(l, -FT_EPROTO);
			break;
		}
		l->bh = BH_FULL;
		l->hdrs_got++;
		break;
	default:
		break;
	}
}

static void on_op(struct ft__link *l, struct fab_xfer *x, size_t len, int err)
{
	struct fab_op *op = x->owner;

	if (x->kind == X_DATA_RX)
		l->user_rx--;
	if (l->closing)
		return;
	if (err == FI_ECANCELED) {
		flushed(l);
		return;
	}
	if (err != 0) {
		ft__debug("fabric: transfer with rank %d failed: %s", l->peer, fi_strerror(err));
		ft__fab_link_fail(l, err == FI_ETRUNC ? -FT_EPROTO : ft__fab_fi_to_ft(err));
		return;
	}
	switch (x->kind) {
	case X_HDR_TX:
		op->hdr_done = true;
		break;
	case X_DATA_TX:
		op->parts_done++;
		break;
	case X_HDR_RX:
		if (len != sizeof(op->rhdr)) {
			ft__fab_link_fail(l, -FT_EPROTO);
			break;
		}
		op->hdr_done = true;
		l->hdrs_got++;
		break;
	case X_DATA_RX: {
		size_t off, want = ft__fab_part_len(l, op, (uint32_t)(x - op->px), &off);
		if (len != want)
			ft__fab_link_fail(l, -FT_EPROTO);
		else
			op->parts_done++;
		break;
	}
	default:
		break;
	}
}

static void complete(struct ft__transport *tp, void *ctx, size_t len, int err)
{
	struct fab_xfer *x = ctx;
	struct ft__link *l;
	bool taken;

	if (x == NULL)
		return;
	x->posted = false;
	if (x->kind == X_SLOT) {
		struct fab_slot *s = x->owner;
		if (err == 0)
			ft__fab_inbox_add(tp, &s->msg, len);
		else if (err != FI_ECANCELED)
			ft__warn("fabric: bad hello message: %s", fi_strerror(err));
		s->want = err != FI_ECANCELED;
		return;
	}
	if (x->kind == X_CTL) {
		l = x->owner;
		l->outstanding--;
		on_ctl(l, x->ctl, len, err);
		taken = !ft__fab_ctl_is_send(l, x->ctl);
	} else {
		struct fab_op *op = x->owner;
		l = op->link;
		l->outstanding--;
		on_op(l, x, len, err);
		taken = x->kind == X_HDR_RX || x->kind == X_DATA_RX;
	}
	/* The sender of a large message completes it once it reads our answer. */
	if (taken && err == 0 && l->peer_bell != NULL)
		ft__fab_bell_ring(l->peer_bell);
	if (l->zombie && l->outstanding == 0) {
		ft__fab_list_remove(&tp->zombies, l);
		ft__fab_link_free(l);
	}
}

int ft__fab_drive_cq(struct ft__transport *tp)
{
	struct fi_cq_tagged_entry ce[FAB_CQ_BATCH];
	struct fi_cq_msg_entry me[FAB_CQ_BATCH];
	int total = 0;

	for (int round = 0; round < 64; round++) {
		ssize_t n = tp->cq_tagged ? fi_cq_read(tp->cq, ce, FAB_CQ_BATCH)
					  : fi_cq_read(tp->cq, me, FAB_CQ_BATCH);
		if (n == -FI_EAGAIN)
			break;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry ee;
			memset(&ee, 0, sizeof(ee));
			if (fi_cq_readerr(tp->cq, &ee, 0) == 1) {
				complete(tp, ee.op_context, ee.len, ee.err ? ee.err : FI_EIO);
				total++;
			}
			continue;
		}
		if (n < 0) {
			ft__error("fabric: fi_cq_read: %s", fi_strerror((int)-n));
			break;
		}
		for (ssize_t i = 0; i < n; i++) {
			if (tp->cq_tagged)
				complete(tp, ce[i].op_context, ce[i].len, 0);
			else
				complete(tp, me[i].op_context, me[i].len, 0);
		}
		total += (int)n;
		if (n < FAB_CQ_BATCH)
			break;
	}
	return total;
}
