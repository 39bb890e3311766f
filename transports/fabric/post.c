/* post.c: what a libfabric link hands to the provider: the op pool, sends, receives, control messages. */
/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <string.h>

#include "fabric.h"

/* ---- operations ---- */

struct fab_op *ft__fab_op_get(struct ft__transport *tp)
{
	struct fab_chunk *chunk;
	struct fab_op *op;

	if (tp->free_ops == NULL) {
		struct fab_chunk *c = calloc(1, sizeof(*c));
		if (c == NULL)
			return NULL;
		if (ft__fab_reg(tp, c, sizeof(*c), &c->mr, &c->desc) != 0) {
			free(c);
			return NULL;
		}
		c->next = tp->chunks;
		tp->chunks = c;
		for (int i = 0; i < FAB_CHUNK_OPS; i++) {
			c->ops[i].chunk = c;
			c->ops[i].next = tp->free_ops;
			tp->free_ops = &c->ops[i];
		}
	}
	op = tp->free_ops;
	tp->free_ops = op->next;
	chunk = op->chunk;
	memset(op, 0, sizeof(*op));
	op->chunk = chunk;
	op->hx = (struct fab_xfer){.owner = op};
	return op;
}

void ft__fab_op_put(struct ft__transport *tp, struct fab_op *op)
{
	if (op->px != NULL && op->px != &op->px1)
		free(op->px);
	op->px = NULL;
	ft__fab_mr_put(tp, op->mr);
	op->mr = NULL;
	op->next = tp->free_ops;
	tp->free_ops = op;
}

/* Splits a payload into messages the provider takes; 0 on success. */
int ft__fab_op_parts(struct ft__link *l, struct fab_op *op, uint64_t len, uint8_t kind)
{
	op->nparts = len == 0 ? 0 : (uint32_t)((len + l->piece - 1) / l->piece);
	op->hx.kind = kind == X_DATA_TX ? X_HDR_TX : X_HDR_RX;
	if (op->nparts <= 1) {
		op->px = &op->px1;
	} else {
		op->px = calloc(op->nparts, sizeof(*op->px));
		if (op->px == NULL)
			return -FT_ENOMEM;
	}
	for (uint32_t i = 0; i < op->nparts; i++)
		op->px[i] = (struct fab_xfer){.owner = op, .kind = kind};
	return 0;
}

/* ---- posting to the provider ---- */

ssize_t ft__fab_send(struct ft__link *l, const void *buf, size_t len, void *desc, uint64_t tag,
		     struct fab_xfer *x)
{
	if (ft__fab_peer_gone(l))
		return -FI_EAGAIN; /* held until the link's end is reported */
	ssize_t rc = l->tp->msg ? fi_send(l->ep, buf, len, desc, 0, &x->fctx)
				: fi_tsend(l->ep, buf, len, desc, l->addr, tag, &x->fctx);
	if (rc == 0) {
		x->posted = true;
		l->outstanding++;
		if (l->peer_bell != NULL)
			ft__fab_bell_ring(l->peer_bell);
	}
	return rc;
}

ssize_t ft__fab_recv(struct ft__link *l, void *buf, size_t len, void *desc, uint64_t tag,
		     struct fab_xfer *x)
{
	ssize_t rc = l->tp->msg ? fi_recv(l->ep, buf, len, desc, FI_ADDR_UNSPEC, &x->fctx)
				: fi_trecv(l->ep, buf, len, desc, FI_ADDR_UNSPEC, tag, 0, &x->fctx);
	if (rc == 0) {
		x->posted = true;
		l->outstanding++;
	}
	return rc;
}

bool ft__fab_ctl_is_send(const struct ft__link *l, int c)
{
	switch (c) {
	case C_HELLO:
		return l->sending;
	case C_PROOF_TX:
	case C_ACK_TX:
	case C_CLOSE_TX:
	case C_ABORT:
		return true;
	default:
		return false;
	}
}

ssize_t ft__fab_ctl_post(struct ft__link *l, int c)
{
	struct fab_msgs *m = &l->m;
	void *buf;
	size_t len;
	uint64_t tag = 0;
	ssize_t rc;

	switch (c) {
	case C_HELLO:
		buf = &m->hello;
		len = sizeof(m->hello);
		tag = TAG_HELLO;
		break;
	case C_ACK_RX:
		buf = &m->ack_rx;
		len = sizeof(m->ack_rx);
		tag = fab_tag(K_ACK, l->rx_rank, l->id);
		break;
	case C_CLOSE_RX:
		buf = &m->close_rx;
		len = sizeof(m->close_rx);
		tag = fab_tag(l->sending ? K_CLOSE_R : K_CLOSE_S, l->rx_rank, l->id);
		break;
	case C_ACK_TX:
		buf = &m->ack_tx;
		len = sizeof(m->ack_tx);
		tag = fab_tag(K_ACK, l->tx_rank, l->id);
		break;
	case C_CLOSE_TX:
		buf = &m->close_tx;
		len = sizeof(m->close_tx);
		tag = fab_tag(l->sending ? K_CLOSE_S : K_CLOSE_R, l->tx_rank, l->id);
		break;
	case C_PROOF_TX:
		buf = &m->proof_tx;
		len = sizeof(m->proof_tx);
		tag = fab_tag(K_PROOF, l->tx_rank, l->id);
		break;
	case C_PROOF_RX:
		buf = &m->proof_rx;
		len = sizeof(m->proof_rx);
		tag = fab_tag(K_PROOF, l->rx_rank, l->id);
		break;
	case C_ABORT:
		buf = &m->abort_hdr;
		len = sizeof(m->abort_hdr);
		tag = fab_tag(K_HDR, l->tx_rank, l->id);
		break;
	default:
		buf = &m->bhdr;
		len = sizeof(m->bhdr);
		break;
	}
	l->cx[c] = (struct fab_xfer){.owner = l, .kind = X_CTL, .ctl = (uint8_t)c};
	rc = ft__fab_ctl_is_send(l, c) ? ft__fab_send(l, buf, len, l->m_desc, tag, &l->cx[c])
			       : ft__fab_recv(l, buf, len, l->m_desc, tag, &l->cx[c]);
	if (rc == 0)
		l->want[c] = false;
	if (rc == 0 && c == C_PROOF_TX)
		l->proof_out = true;
	if (rc == 0 && c == C_HELLO && l->sending)
		ft__fab_unname_link_ep(l);
	return rc;
}
