/* link.c: a libfabric link: its state machine, the frames the engine posts, close and abort. */
/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32c.h"
#include "fabric.h"
#include "fdreg.h"

int ft__fab_fi_to_ft(int err)
{
	switch (err < 0 ? -err : err) {
	case FI_ENOMEM:
	case FI_ENOBUFS:
	case FI_EMFILE:
	case ENFILE:
	case FI_ENOSPC:
		/* this rank's shortage (a provider's socket, a buffer): never
		 * taken for the peer's death */
		return ft__err_local(err < 0 ? -err : err);
	case FI_ETIMEDOUT:
		return -FT_ETIMEDOUT;
	case FI_ECONNREFUSED:
		return -FT_ECONNREFUSED;
	case FI_ETRUNC:
	case FI_EMSGSIZE:
		return -FT_EPROTO;
	default:
		return -FT_EPEERFAILED;
	}
}

void ft__fab_link_fail(struct ft__link *l, int err)
{
	if (l->error == 0) {
		l->error = err;
		ft__debug("fabric: link %s rank %d failed: %s", l->sending ? "to" : "from", l->peer,
			  ft_strerror(err));
	}
}

/* ---- links ---- */

struct ft__link *ft__fab_link_new(struct ft__transport *tp, int peer, bool sending, uint64_t id)
{
	struct ft__link *l = calloc(1, sizeof(*l));

	if (l == NULL)
		return NULL;
	l->tp = tp;
	l->peer = peer;
	l->sending = sending;
	l->id = id;
	l->ep = tp->ep;
	l->addr = FI_ADDR_UNSPEC;
	l->pidfd = -1;
	l->piece = tp->max_msg;
	if (ft__fab_reg(tp, &l->m, sizeof(l->m), &l->m_mr, &l->m_desc) != 0) {
		free(l);
		return NULL;
	}
	return l;
}

void ft__fab_link_free(struct ft__link *l)
{
	struct ft__transport *tp = l->tp;

	for (struct fab_op *op = l->sq, *next; op != NULL; op = next) {
		next = op->next;
		ft__fab_op_put(tp, op);
	}
	for (struct fab_op *op = l->rq, *next; op != NULL; op = next) {
		next = op->next;
		ft__fab_op_put(tp, op);
	}
	if (l->own_ep && l->ep != NULL) {
		fi_close(&l->ep->fid);
		ft__fab_guard_own(tp, l->m.hello.name, l->m.hello.namelen, false);
	}
	if (l->pidfd >= 0)
		ft__fd_close(l->pidfd);
	if (l->peer_bell != tp->bell)
		ft__fab_bell_unmap(l->peer_bell);
	ft__fab_unreg(&l->m_mr);
	free(l);
}

bool ft__fab_list_remove(struct ft__link **head, struct ft__link *l)
{
	for (struct ft__link **pp = head; *pp != NULL; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			return true;
		}
	return false;
}

/* Takes l off the transport's lists of links and pending connections. */
void ft__fab_unlist(struct ft__transport *tp, struct ft__link *l)
{
	ft__fab_list_remove(&tp->links, l);
	if (ft__fab_list_remove(&tp->pending, l))
		tp->npending--;
}

/* ---- the link state machine ---- */

void ft__fab_advance_ctl(struct ft__link *l)
{
	/* MSG matches receives in the order posted: the proof's before the
	 * answer that asks for it */
	static const int order[] = {C_HELLO,    C_ACK_RX, C_PROOF_TX, C_CLOSE_RX,
				    C_PROOF_RX, C_ACK_TX, C_CLOSE_TX};

	for (size_t i = 0; i < FT__ARRAY_SIZE(order) && l->error == 0; i++) {
		int c = order[i];
		ssize_t rc;
		if (!l->want[c] || (ft__fab_ctl_is_send(l, c) && l->tp->msg && !l->connected))
			continue;
		rc = ft__fab_ctl_post(l, c);
		if (rc == -FI_EAGAIN)
			break;
		if (rc != 0) {
			ft__error("fabric: posting a control message to rank %d: %s", l->peer,
				  fi_strerror((int)-rc));
			ft__fab_link_fail(l, ft__fab_fi_to_ft((int)rc));
		}
	}
}

static ssize_t send_hdr(struct ft__link *l, struct fab_op *op)
{
	struct ft__transport *tp = l->tp;
	uint64_t tag = fab_tag(K_HDR, l->tx_rank, l->id);
	ssize_t rc;

	if (ft__fab_peer_gone(l))
		return -FI_EAGAIN;
	if (sizeof(op->hdr) <= tp->inject) {
		rc = tp->msg ? fi_inject(l->ep, &op->hdr, sizeof(op->hdr), 0)
			     : fi_tinject(l->ep, &op->hdr, sizeof(op->hdr), l->addr, tag);
		if (rc == 0)
			op->hdr_done = true;
	} else {
		rc = ft__fab_send(l, &op->hdr, sizeof(op->hdr), op->chunk->desc, tag, &op->hx);
	}
	if (rc == 0) {
		op->hdr_posted = true;
		l->frames_sent++;
	}
	return rc;
}

static void advance_send(struct ft__link *l)
{
	struct ft__transport *tp = l->tp;
	ssize_t rc = 0;

	if (l->error != 0 || (tp->msg && (!l->connected || !l->proof_out)) || l->want[C_HELLO])
		goto done;
	while (l->s_next != NULL && l->s_inflight < FAB_SEND_WINDOW) {
		struct fab_op *op = l->s_next;
		if (!op->hdr_posted && (rc = send_hdr(l, op)) != 0)
			goto out;
		while (op->parts_posted < op->nparts) {
			size_t off, len = ft__fab_part_len(l, op, op->parts_posted, &off);
			rc = ft__fab_send(l, op->buf + off, len, op->mr ? op->mr->desc : NULL,
					  fab_tag(K_DATA, l->tx_rank, l->id), &op->px[op->parts_posted]);
			if (rc != 0)
				goto out;
			op->parts_posted++;
		}
		l->s_next = op->next;
		l->s_inflight++;
	}
	if (l->s_next == NULL && l->want[C_ABORT]) {
		rc = ft__fab_ctl_post(l, C_ABORT);
		if (rc == 0)
			l->frames_sent++;
	}
out:
	if (rc != 0 && rc != -FI_EAGAIN) {
		ft__error("fabric: send to rank %d: %s", l->peer, fi_strerror((int)-rc));
		ft__fab_link_fail(l, ft__fab_fi_to_ft((int)rc));
	}
done:
	/* Frames that made it are reported even on a broken link, before its error. */
	while (l->sq != NULL && l->sq != l->s_next && l->sq->hdr_done &&
	       l->sq->parts_done == l->sq->nparts) {
		struct fab_op *op = l->sq;
		ft__fab_ev_push(tp, FT__TP_SEND_DONE, 0, l, op->ctx);
		l->sq = op->next;
		if (l->sq == NULL)
			l->sq_tail = NULL;
		l->s_inflight--;
		l->frames_done++;
		ft__fab_op_put(tp, op);
	}
}

/* Checks the next header; posts nothing on a mismatch. */
static bool check_hdr(struct ft__link *l, struct fab_op *op)
{
	int rc = ft__frame_check(&op->hdr, &op->rhdr);

	if (rc != 0) {
		ft__debug("fabric: frame from rank %d (step %u seg %u) refused: %s", l->peer,
			  op->rhdr.step, op->rhdr.seg, ft_strerror(rc));
		ft__fab_link_fail(l, rc);
		return false;
	}
	op->checked = true;
	return true;
}

/* Posts the payload receives of a checked frame; false while the provider is full. */
static bool post_payload(struct ft__link *l, struct fab_op *op)
{
	while (op->parts_posted < op->nparts) {
		size_t off, len = ft__fab_part_len(l, op, op->parts_posted, &off);
		ssize_t rc = ft__fab_recv(l, op->buf + off, len, op->mr ? op->mr->desc : NULL,
					  fab_tag(K_DATA, l->rx_rank, l->id), &op->px[op->parts_posted]);
		if (rc == -FI_EAGAIN)
			return false;
		if (rc != 0) {
			ft__error("fabric: receive from rank %d: %s", l->peer, fi_strerror((int)-rc));
			ft__fab_link_fail(l, ft__fab_fi_to_ft((int)rc));
			return false;
		}
		l->user_rx++;
		op->parts_posted++;
	}
	return true;
}

static void recv_rdm(struct ft__link *l)
{
	while (l->r_hdr != NULL) {
		struct fab_op *op = l->r_hdr;
		ssize_t rc = ft__fab_recv(l, &op->rhdr, sizeof(op->rhdr), op->chunk->desc,
					  fab_tag(K_HDR, l->rx_rank, l->id), &op->hx);
		if (rc == -FI_EAGAIN)
			break;
		if (rc != 0) {
			ft__error("fabric: receive from rank %d: %s", l->peer, fi_strerror((int)-rc));
			ft__fab_link_fail(l, ft__fab_fi_to_ft((int)rc));
			return;
		}
		op->hdr_posted = true;
		l->r_hdr = op->next;
	}
	while (l->r_check != NULL) {
		struct fab_op *op = l->r_check;
		if (!op->checked && (!op->hdr_done || !check_hdr(l, op)))
			return;
		if (!post_payload(l, op))
			return;
		l->r_check = op->next;
	}
}

static void recv_msg(struct ft__link *l)
{
	for (;;) {
		struct fab_op *op = l->r_check;
		if (op != NULL && op->checked) {
			if (!post_payload(l, op))
				return;
			l->r_check = op->next;
			continue;
		}
		if (l->bh == BH_FULL) {
			if (op == NULL)
				return; /* held until the engine asks for it */
			op->rhdr = l->m.bhdr;
			op->hdr_done = true;
			l->bh = BH_IDLE;
			if (!check_hdr(l, op))
				return;
			continue;
		}
		if (l->bh == BH_IDLE && !l->peer_closed) {
			ssize_t rc = ft__fab_ctl_post(l, C_BHDR);
			if (rc == -FI_EAGAIN)
				return;
			if (rc != 0) {
				ft__fab_link_fail(l, ft__fab_fi_to_ft((int)rc));
				return;
			}
			l->bh = BH_POSTED;
		}
		return;
	}
}

static void advance_recv(struct ft__link *l)
{
	struct ft__transport *tp = l->tp;

	if (l->error == 0) {
		if (tp->msg)
			recv_msg(l);
		else
			recv_rdm(l);
	}
	while (l->rq != NULL && l->rq->checked && l->rq != l->r_check &&
	       l->rq->parts_done == l->rq->nparts) {
		struct fab_op *op = l->rq;
		int status = 0;
		if ((op->rhdr.flags & FT__FRAME_F_CRC) &&
		    ft__crc32c(0, op->buf, op->hdr.length) != op->rhdr.crc)
			status = -FT_EPROTO;
		ft__fab_ev_push(tp, FT__TP_RECV_DONE, status, l, op->ctx);
		l->rq = op->next;
		if (l->rq == NULL)
			l->rq_tail = NULL;
		l->frames_done++;
		ft__fab_op_put(tp, op);
		if (status != 0) {
			ft__fab_link_fail(l, status);
			break;
		}
	}
}

/*
 * The end of a link whose peer closed or died: a receiver reads every frame
 * sent before the close notice first; a sender waits for the completions of
 * the frames its peer said it took. A dead peer that sent no notice gets a
 * short grace for messages already on their way.
 */
static bool link_ended(const struct ft__link *l)
{
	const struct ft__transport *tp = l->tp;
	bool late = l->grace != 0 && ft__now_ms() >= l->grace;
	bool partial = l->rq != NULL && l->rq->hdr_done; /* a payload still to come */

	if (!l->peer_closed)
		return l->dead && late;
	if (l->sending)
		return late || (tp->msg ? l->sq == NULL : l->frames_done >= l->peer_frames);
	/* A header read but not yet asked for is the engine's to see first. */
	if (tp->msg)
		return l->bh != BH_FULL && (!partial || late);
	return l->hdrs_got >= l->peer_frames && (!partial || (l->dead && late));
}

void ft__fab_advance(struct ft__link *l)
{
	if (!l->dead && l->pid == l->tp->pid && ft__fab_local_peer_closed(l)) {
		l->dead = true;
		ft__fab_link_fail(l, -FT_EPEERFAILED);
	}
	if (l->error == 0)
		ft__fab_advance_ctl(l);
	if (l->sending)
		advance_send(l);
	else
		advance_recv(l);
	if (l->error == 0 && link_ended(l)) {
		if (l->dead && !l->peer_closed)
			ft__debug("fabric: rank %d (pid %d) is gone", l->peer, l->pid);
		ft__fab_link_fail(l, -FT_EPEERFAILED);
	}
	if (l->error != 0 && !l->error_reported) {
		l->error_reported = true;
		ft__fab_ev_push(l->tp, FT__TP_LINK_ERROR, l->error, l, NULL);
	}
}

/* ---- frames ---- */

int ft__fab_post_send(struct ft__link *l, const struct ft__frame *hdr, const void *buf, void *ctx)
{
	struct ft__transport *tp = l->tp;
	struct fab_op *op;
	int rc;

	if (l->error)
		return l->error;
	if (!l->sending || hdr->length > FT__FRAME_MAX_PAYLOAD)
		return -FT_EINVAL;
	op = ft__fab_op_get(tp);
	if (op == NULL)
		return -FT_ENOMEM;
	op->link = l;
	op->hdr = *hdr;
	op->buf = (char *)buf;
	op->ctx = ctx;
	if ((rc = ft__fab_op_parts(l, op, hdr->length, X_DATA_TX)) != 0 ||
	    (rc = ft__fab_mr_get(tp, buf, hdr->length, &op->mr)) != 0) {
		ft__fab_op_put(tp, op);
		return rc;
	}
	if (l->sq_tail != NULL)
		l->sq_tail->next = op;
	else
		l->sq = op;
	l->sq_tail = op;
	if (l->s_next == NULL)
		l->s_next = op;
	tp->active_ns = ft__now_ns();
	ft__fab_advance(l);
	return 0;
}

int ft__fab_post_recv(struct ft__link *l, const struct ft__frame *expect, void *buf, void *ctx)
{
	struct ft__transport *tp = l->tp;
	struct fab_op *op;
	int rc;

	if (l->error)
		return l->error;
	if (l->sending || expect->length > FT__FRAME_MAX_PAYLOAD)
		return -FT_EINVAL;
	op = ft__fab_op_get(tp);
	if (op == NULL)
		return -FT_ENOMEM;
	op->link = l;
	op->hdr = *expect;
	op->buf = buf;
	op->ctx = ctx;
	if ((rc = ft__fab_op_parts(l, op, expect->length, X_DATA_RX)) != 0 ||
	    (rc = ft__fab_mr_get(tp, buf, expect->length, &op->mr)) != 0) {
		ft__fab_op_put(tp, op);
		return rc;
	}
	if (l->rq_tail != NULL)
		l->rq_tail->next = op;
	else
		l->rq = op;
	l->rq_tail = op;
	if (l->r_hdr == NULL && !tp->msg)
		l->r_hdr = op;
	if (l->r_check == NULL)
		l->r_check = op;
	tp->active_ns = ft__now_ns();
	ft__fab_advance(l);
	return 0;
}

/* ---- closing ---- */

static bool ctl_sends_out(const struct ft__link *l)
{
	return l->cx[C_ACK_TX].posted || l->cx[C_CLOSE_TX].posted || l->cx[C_ABORT].posted ||
	       l->cx[C_PROOF_TX].posted || (l->sending && l->cx[C_HELLO].posted);
}

/*
 * Tells the peer (a CLOSE notice, or a MSG shutdown), cancels the link's
 * receives and waits up to wait_ms for them, so that no byte lands in a user
 * buffer afterwards; what the provider still holds keeps the link as a
 * zombie until it completes or the transport closes.
 */
void ft__fab_link_shutdown(struct ft__link *l, bool notify, int wait_ms)
{
	struct ft__transport *tp = l->tp;
	int64_t deadline = ft__now_ms() + wait_ms;

	ft__fab_unlist(tp, l);
	ft__fab_ev_purge(tp, l);
	l->closing = true;
	if (!l->dead && l->pid == tp->pid && ft__fab_local_peer_closed(l))
		l->dead = true;
	if (notify && !ft__fab_peer_gone(l) && l->ep != NULL && !tp->msg) {
		l->m.close_tx = (struct fab_close_msg){.magic = FAB_CLOSE_MAGIC,
						       .frames = l->sending ? l->frames_sent
									    : l->frames_done};
		if (ft__fab_ctl_post(l, C_CLOSE_TX) == -FI_EAGAIN) {
			ft__fab_drive(tp);
			ft__fab_ctl_post(l, C_CLOSE_TX);
		}
	}
	if (l->ep != NULL) {
		for (int c = 0; c < C_COUNT; c++)
			if (l->cx[c].posted && !ft__fab_ctl_is_send(l, c))
				fi_cancel(&l->ep->fid, &l->cx[c].fctx);
		for (struct fab_op *op = l->rq; op != NULL; op = op->next) {
			if (op->hx.posted)
				fi_cancel(&l->ep->fid, &op->hx.fctx);
			for (uint32_t i = 0; i < op->parts_posted; i++)
				if (op->px[i].posted)
					fi_cancel(&l->ep->fid, &op->px[i].fctx);
		}
	}
	while ((l->user_rx > 0 || (!l->dead && ctl_sends_out(l))) && ft__ms_left(deadline) > 0)
		if (ft__fab_drive(tp) == 0)
			ft__fab_wait(tp, ft__ms_left(deadline), false);
	if (l->user_rx > 0)
		ft__warn("fabric: %u receives from rank %d still held by the provider after close",
			 l->user_rx, l->peer);
	ft__fab_keep_watching(tp, l);
	if (l->own_ep && l->ep != NULL) {
		if (notify && tp->msg)
			fi_shutdown(l->ep, 0);
		if (!ft__fab_park_ep(tp, l)) {
			fi_close(&l->ep->fid);
			ft__fab_guard_own(tp, l->m.hello.name, l->m.hello.namelen, false);
		}
		l->ep = NULL;
	}
	if (l->outstanding == 0) {
		ft__fab_link_free(l);
	} else {
		l->zombie = true;
		l->next = tp->zombies;
		tp->zombies = l;
	}
}

void ft__fab_link_close(struct ft__link *l)
{
	if (l != NULL)
		ft__fab_link_shutdown(l, true, FAB_CLOSE_WAIT_MS);
}

/*
 * Abort: frames not yet handed to the provider are dropped; the one partly
 * handed over is finished (its receiver may already have taken its header);
 * then the abort frame goes out as the next header, and the close notice
 * tells the receiver how many headers to read before it sees the end.
 */
void ft__fab_link_abort(struct ft__link *l, const struct ft__frame *abort_frame)
{
	struct ft__transport *tp;
	int64_t deadline = ft__now_ms() + FAB_CLOSE_WAIT_MS;

	if (l == NULL)
		return;
	tp = l->tp;
	if (tp->msg && l->sending && !l->proof_out) {
		/* MSG, no proof out yet: the acceptor can never take this link,
		 * so there is no reader for an abort frame */
		ft__fab_link_shutdown(l, true, 0);
		return;
	}
	if (l->sending && l->error == 0 && !l->dead) {
		struct fab_op *keep = l->s_next, *op, *next;
		if (keep != NULL && !keep->hdr_posted)
			keep = NULL;
		op = keep != NULL ? keep->next : l->s_next;
		if (keep != NULL)
			keep->next = NULL;
		else if (l->s_next != NULL) {
			/* cut the queue before s_next */
			struct fab_op **pp = &l->sq;
			while (*pp != l->s_next)
				pp = &(*pp)->next;
			*pp = NULL;
		}
		for (; op != NULL; op = next) {
			next = op->next;
			ft__fab_op_put(tp, op);
		}
		l->sq_tail = NULL;
		for (struct fab_op *o = l->sq; o != NULL; o = o->next)
			l->sq_tail = o;
		l->s_next = keep;
		l->m.abort_hdr = *abort_frame;
		l->want[C_ABORT] = true;
		while (ft__ms_left(deadline) > 0 && l->error == 0 &&
		       (l->want[C_ABORT] || l->cx[C_ABORT].posted)) {
			advance_send(l);
			if (ft__fab_drive(tp) == 0 && (l->want[C_ABORT] || l->cx[C_ABORT].posted))
				ft__fab_wait(tp, ft__ms_left(deadline), false);
		}
	}
	ft__fab_link_shutdown(l, true, ft__ms_left(deadline));
}
