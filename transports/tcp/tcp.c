/* tcp.c: the TCP transport: nonblocking sockets on one epoll set, framed links with checked headers. */
/* SPDX-License-Identifier: MIT */
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <stdbool.h>

#include "auth.h"
#include "crc32c.h"
#include "fdreg.h"
#include "internal.h"
#include "sock.h"
#include "tcp.h"
#include "transport.h"

/*
 * A link is one TCP connection used in one direction for frames (the
 * connecting side sends, the accepting side receives) plus the handshake's
 * answer coming back (transport.h). Handshake: the connector writes its
 * hello in connect and returns; the acceptor, in accept, answers a hello
 * that passes with its challenge and makes the link only once the proof
 * has come back. The connector reads the answer and writes the proof
 * wherever it runs next: progress (do_recv, then do_send), or its own
 * accept (drive_connects), which is where a ring of ranks that all
 * connected first waits; its frames stay queued until the proof is out.
 * So no rank waits on a peer that waits on it: every rank of the ring
 * reaches its accept without waiting, and answers its right neighbour's
 * challenge from there while it waits for its left one's proof.
 *
 * All sockets are nonblocking and registered once, edge-triggered, for
 * input and output; a link remembers whether it may read or write until a
 * call says EAGAIN, so no epoll_ctl happens per frame.
 *
 * Receiving: a frame's header is read (or found in the link's small inbound
 * buffer), compared with the header the engine posted (ft__frame_check), and
 * only then is the payload copied or read straight into the posted buffer;
 * one readv fills the rest of the payload and the inbound buffer behind it,
 * which usually catches the next header in the same call.
 * Sending: queued frames go out with writev, several per call.
 */

static int tcp_open(const struct ft__tp_params *p, struct ft__transport **out)
{
	struct ft__transport *tp = calloc(1, sizeof(*tp));
	int rc;

	*out = NULL;
	if (tp == NULL)
		return -FT_ENOMEM;
	tp->listen_fd = -1;
	tp->rank = p->rank;
	tp->log_level = p->log_level;
	tp->interrupted = p->interrupted;
	tp->interrupt_arg = p->interrupt_arg;
	snprintf(tp->token, sizeof(tp->token), "%s", p->token != NULL ? p->token : "");
	tp->sock_opts = (struct ft__sock_opts){.keepalive_ms = p->keepalive_ms,
					       .user_timeout_ms = p->user_timeout_ms,
					       .buffer = p->env->tcp_buffer};
	tp->epfd = epoll_create1(EPOLL_CLOEXEC);
	ft__fd_own(tp->epfd);
	if (tp->epfd < 0) {
		rc = ft__err_local(errno);
		goto fail;
	}
	rc = ft__sock_listen("tcp", p->bind_host, p->publish_host, 128, &tp->listen_fd, tp->addr,
			     sizeof(tp->addr));
	if (rc != 0)
		goto fail;
	ft__fd_own(tp->listen_fd);
	/* the listener's edges wake progress too, which drains it (ft__tcp_drain) */
	struct epoll_event lev = {.events = EPOLLIN | EPOLLET, .data.ptr = &tp->listen_fd};
	if (epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->listen_fd, &lev) != 0) {
		rc = ft__err_local(errno);
		ft__fd_close(tp->listen_fd);
		goto fail;
	}
	*out = tp;
	return 0;
fail:
	if (tp->epfd >= 0)
		ft__fd_close(tp->epfd);
	ft__wipe(tp->token, sizeof(tp->token));
	free(tp);
	return rc;
}


static int queue_push(struct tcp_queue *q, const struct ft__frame *hdr, const void *buf,
		      void *ctx)
{
	if (q->len == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 64;
		struct tcp_op *ops = malloc(cap * sizeof(*ops));
		if (ops == NULL)
			return -FT_ENOMEM;
		for (size_t i = 0; i < q->len; i++)
			ops[i] = q->ops[(q->head + i) & (q->cap - 1)];
		free(q->ops);
		q->ops = ops;
		q->cap = cap;
		q->head = 0;
	}
	struct tcp_op *op = &q->ops[(q->head + q->len) & (q->cap - 1)];
	op->hdr = *hdr;
	op->buf = (char *)buf;
	op->ctx = ctx;
	op->done = 0;
	q->len++;
	return 0;
}

static inline struct tcp_op *queue_at(struct tcp_queue *q, size_t i)
{
	return &q->ops[(q->head + i) & (q->cap - 1)];
}

static inline void queue_pop(struct tcp_queue *q)
{
	q->head = (q->head + 1) & (q->cap - 1);
	q->len--;
}

static int tcp_post_send(struct ft__link *l, const struct ft__frame *hdr, const void *buf, void *ctx)
{
	if (l->error)
		return l->error;
	return queue_push(&l->sq, hdr, buf, ctx);
}

static int tcp_post_recv(struct ft__link *l, const struct ft__frame *expect, void *buf, void *ctx)
{
	if (l->error)
		return l->error;
	if (expect->length > FT__FRAME_MAX_PAYLOAD)
		return -FT_EINVAL;
	return queue_push(&l->rq, expect, buf, ctx);
}

void ft__tcp_link_fail(struct ft__link *l, int err)
{
	if (l->error == 0) {
		l->error = err;
		ft__debug("tcp: link with rank %d failed: %s", l->peer, ft_strerror(err));
	}
}

static inline size_t op_total(const struct tcp_op *op)
{
	return sizeof(op->hdr) + op->hdr.length;
}

/* Sends queued frames until the socket is full; returns completions written. */
static int do_send(struct ft__link *l, struct ft__tp_event *ev, int max)
{
	int nev = 0;

	for (;;) {
		while (l->sq.len > 0 && nev < max && queue_at(&l->sq, 0)->done == op_total(queue_at(&l->sq, 0))) {
			struct tcp_op *op = queue_at(&l->sq, 0);
			ev[nev++] = (struct ft__tp_event){.type = FT__TP_SEND_DONE, .link = l,
							 .ctx = op->ctx, .peer = l->peer};
			queue_pop(&l->sq);
		}
		/* no frame before the proof, which goes first */
		if (!l->can_write || l->sq.len == 0 || l->error || nev == max || l->need_ack)
			break;
		struct iovec iov[TCP_IOV];
		int niov = 0;
		if (l->proof_left > 0) {
			iov[niov].iov_base = (char *)&l->proof + sizeof(l->proof) - l->proof_left;
			iov[niov++].iov_len = l->proof_left;
		}
		for (size_t i = 0; i < l->sq.len && niov + 2 <= TCP_IOV; i++) {
			struct tcp_op *op = queue_at(&l->sq, i);
			size_t hs = sizeof(op->hdr);
			if (op->done < hs) {
				iov[niov].iov_base = (char *)&op->hdr + op->done;
				iov[niov++].iov_len = hs - op->done;
			}
			if (op->hdr.length > 0) {
				size_t off = op->done > hs ? op->done - hs : 0;
				iov[niov].iov_base = op->buf + off;
				iov[niov++].iov_len = op->hdr.length - off;
			}
		}
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
		ssize_t n = sendmsg(l->fd, &mh, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN)
				l->can_write = false;
			else if (errno != EINTR)
				ft__tcp_link_fail(l, ft__sock_error(errno));
			continue;
		}
		/* Account every byte written; completions are reported above. */
		size_t left = (size_t)n, p = left < l->proof_left ? left : l->proof_left;
		l->proof_left -= p;
		left -= p;
		for (size_t i = 0; left > 0; i++) {
			struct tcp_op *op = queue_at(&l->sq, i);
			size_t take = op_total(op) - op->done;
			if (take > left)
				take = left;
			op->done += take;
			left -= take;
		}
	}
	return nev;
}

/* Reads more input into the inbound buffer (after compacting it). */
int ft__tcp_fill_inbuf(struct ft__link *l)
{
	ssize_t n;

	if (l->in_start == l->in_end)
		l->in_start = l->in_end = 0;
	else if (l->in_end == TCP_INBUF && l->in_start > 0) {
		memmove(l->in, l->in + l->in_start, l->in_end - l->in_start);
		l->in_end -= l->in_start;
		l->in_start = 0;
	}
	if (l->in_end == TCP_INBUF || !l->can_read || l->eof)
		return 0;
	n = recv(l->fd, l->in + l->in_end, TCP_INBUF - l->in_end, 0);
	if (n > 0) {
		l->in_end += (size_t)n;
		return 1;
	}
	if (n == 0)
		l->eof = true;
	else if (errno == EAGAIN)
		l->can_read = false;
	else if (errno != EINTR)
		ft__tcp_link_fail(l, ft__sock_error(errno));
	return 0;
}

/*
 * While a large payload trickles in, epoll should wake us once a good part
 * of it is there, not for every packet: with more ranks than cores, each
 * needless wake-up is a context switch taken from a rank with work to do.
 */
static void set_lowat(struct ft__link *l, size_t want)
{
	int v = want >= TCP_LOWAT_MIN ? (int)(want < TCP_LOWAT_MAX ? want : TCP_LOWAT_MAX) : 1;

	if (v != l->lowat && setsockopt(l->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) == 0)
		l->lowat = v;
}

/*
 * A frame large enough that the next one is likely large too: the read that
 * finishes its payload takes only the next header into the inbound buffer,
 * so that the next payload is read straight into place (the next frame's
 * payload was copied out of the buffer: 7% of a 64 MiB allgather's time).
 * After smaller frames, reads take whatever is there, several frames in
 * one system call.
 */
static bool bulk(size_t payload)
{
	return payload >= TCP_LOWAT_MIN;
}

static int do_recv(struct ft__link *l, struct ft__tp_event *ev, int max)
{
	int nev = 0;

	while (!l->error && nev < max) {
		size_t avail = l->in_end - l->in_start;
		if (l->need_ack) {
			ft__tcp_take_answer(l);
			if (l->need_ack || l->error)
				break;
			continue;
		} else if (l->rq.len > 0) {
			struct tcp_op *op = queue_at(&l->rq, 0);
			size_t plen = op->hdr.length;
			if (!l->have_rhdr) {
				if (avail >= sizeof(l->rhdr)) {
					memcpy(&l->rhdr, l->in + l->in_start, sizeof(l->rhdr));
					l->in_start += sizeof(l->rhdr);
					l->have_rhdr = true;
					int rc = ft__frame_check(&op->hdr, &l->rhdr);
					if (rc != 0) {
						ft__tcp_link_fail(l, rc);
						break;
					}
					continue;
				}
			} else {
				size_t take = avail < plen - op->done ? avail : plen - op->done;
				if (take > 0)
					memcpy(op->buf + op->done, l->in + l->in_start, take);
				op->done += take;
				l->in_start += take;
				if (op->done == plen) {
					int status = 0;
					if ((l->rhdr.flags & FT__FRAME_F_CRC) &&
					    ft__crc32c(0, op->buf, plen) != l->rhdr.crc)
						status = -FT_EPROTO;
					ev[nev++] = (struct ft__tp_event){.type = FT__TP_RECV_DONE,
									 .status = status,
									 .link = l, .ctx = op->ctx,
									 .peer = l->peer};
					l->have_rhdr = false;
					queue_pop(&l->rq);
					set_lowat(l, 1);
					if (status != 0) {
						ft__tcp_link_fail(l, status);
						break;
					}
					continue;
				}
				/* Inbound buffer empty: read the payload straight into place,
				 * and whatever follows into the inbound buffer. */
				if (l->can_read && !l->eof) {
					struct iovec iov[2] = {
						{op->buf + op->done, plen - op->done},
						{l->in, bulk(plen) ? sizeof(l->rhdr) : TCP_INBUF}};
					l->in_start = l->in_end = 0;
					ssize_t n = readv(l->fd, iov, 2);
					if (n > 0) {
						size_t un = (size_t)n;
						size_t pay = un < plen - op->done ? un : plen - op->done;
						op->done += pay;
						l->in_end = un - pay;
						continue;
					}
					if (n == 0)
						l->eof = true;
					else if (errno == EAGAIN) {
						l->can_read = false;
						set_lowat(l, plen - op->done);
					} else if (errno != EINTR)
						ft__tcp_link_fail(l, ft__sock_error(errno));
					continue;
				}
			}
		} else if (avail > 0 && !l->sending) {
			/* Bytes with no receive posted: wait for the engine. */
			break;
		} else if (avail > 0) {
			ft__tcp_link_fail(l, -FT_EPROTO);
			break;
		}
		/* Need more input. */
		if (!ft__tcp_fill_inbuf(l)) {
			if (l->eof && !l->error && l->in_end == l->in_start)
				ft__tcp_link_fail(l, -FT_EPEERFAILED);
			break;
		}
	}
	return nev;
}

static int link_io(struct ft__link *l, struct ft__tp_event *ev, int max)
{
	int n = 0;

	if (l->fd < 0)
		return 0;
	n += do_send(l, ev, max);
	if (n < max) {
		bool answered = !l->need_ack;
		n += do_recv(l, ev + n, max - n);
		/* the answer just came: the proof, and the frames held for it, go now */
		if (!answered && !l->need_ack) {
			ft__tcp_send_proof(l);
			if (n < max)
				n += do_send(l, ev + n, max - n);
		}
	}
	if (l->error && !l->error_reported && n < max) {
		l->error_reported = true;
		ev[n++] = (struct ft__tp_event){.type = FT__TP_LINK_ERROR, .status = l->error,
					       .link = l, .peer = l->peer};
	}
	return n;
}

/* Folds epoll's readiness edges into the links' can_read/can_write flags. */
static void harvest(struct ft__transport *tp, int timeout_ms)
{
	struct epoll_event eev[16];
	int k = epoll_wait(tp->epfd, eev, 16, timeout_ms);

	for (int i = 0; i < k; i++) {
		struct ft__link *l = eev[i].data.ptr;
		if (l == NULL)
			continue; /* the watched fd: the wait ends, that is all */
		if (eev[i].data.ptr == &tp->listen_fd) {
			tp->listen_ready = true;
			continue;
		}
		if (eev[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			l->can_read = true;
		if (eev[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
			l->can_write = true;
	}
}

/* A link has work that waits only on an edge epoll may already hold. */
static bool link_stalled(const struct ft__link *l)
{
	return (!l->can_write && (l->sq.len > 0 || l->proof_left > 0)) ||
	       (!l->can_read && (l->rq.len > 0 || l->need_ack));
}

/*
 * Edges that arrive while we were busy are picked up before the links are
 * served (a free epoll_wait with timeout 0, only when a link is stalled), so
 * that a send queued after a burst of receives goes out at once instead of
 * after the receives run dry.
 */
static int tcp_progress(struct ft__transport *tp, int timeout_ms, struct ft__tp_event *ev, int max)
{
	int n = 0;

	if (tp->listen_ready || (tp->listen_rest_until != 0 && ft__now_ms() >= tp->listen_rest_until))
		ft__tcp_drain(tp);
	for (struct ft__link *l = tp->links; l != NULL; l = l->next)
		if (link_stalled(l)) {
			harvest(tp, 0);
			break;
		}
	for (struct ft__link *l = tp->links; l != NULL && n < max; l = l->next)
		n += link_io(l, ev + n, max - n);
	if (n > 0 || timeout_ms == 0)
		return n;
	harvest(tp, timeout_ms);
	if (tp->listen_ready)
		ft__tcp_drain(tp);
	for (struct ft__link *l = tp->links; l != NULL && n < max; l = l->next)
		n += link_io(l, ev + n, max - n);
	return n;
}

static void link_destroy(struct ft__link *l)
{
	struct ft__transport *tp = l->tp;

	for (struct ft__link **pp = &tp->links; *pp != NULL; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	if (l->fd >= 0)
		ft__fd_close(l->fd);
	free(l->sq.ops);
	free(l->rq.ops);
	free(l->in);
	free(l);
}

static void tcp_link_close(struct ft__link *l)
{
	if (l != NULL)
		link_destroy(l);
}

/*
 * Abort: the frame in flight (partly written) must be finished or the peer
 * would read the abort as payload; frames not started are dropped; then the
 * abort frame goes out within a short bound and the write side is shut, so
 * the peer reads it before the end of the stream.
 */
static void tcp_link_abort(struct ft__link *l, const struct ft__frame *abort_frame)
{
	int64_t deadline = ft__now_ms() + 200;

	if (l == NULL)
		return;
	if (l->sending && l->error == 0) {
		l->redial_until = 0; /* an abort waits 200 ms at most: no dialing again */
		while (l->sq.len > 1)
			l->sq.len--;
		if (l->sq.len == 1 && queue_at(&l->sq, 0)->done == 0)
			l->sq.len = 0;
		if (queue_push(&l->sq, abort_frame, NULL, NULL) == 0) {
			struct ft__tp_event ev[4];
			/* the abort is a frame: it waits for the answer and the proof */
			while (l->sq.len > 0 && !l->error && ft__ms_left(deadline) > 0) {
				l->can_write = l->can_read = true;
				ft__tcp_take_answer(l);
				do_send(l, ev, 4);
				if (l->sq.len > 0 && !l->error) {
					struct pollfd pfd = {.fd = l->fd,
							     .events = l->need_ack ? POLLIN : POLLOUT};
					poll(&pfd, 1, ft__ms_left(deadline));
				}
			}
		}
		shutdown(l->fd, SHUT_WR);
	}
	link_destroy(l);
}

static void tcp_close(struct ft__transport *tp)
{
	if (tp == NULL)
		return;
	while (tp->links != NULL)
		link_destroy(tp->links);
	for (int i = 0; i < tp->nearly; i++)
		ft__fd_close(tp->early[i].fd);
	free(tp->early);
	for (int i = 0; i < tp->npend; i++)
		ft__fd_close(tp->pend[i].fd);
	free(tp->pend);
	if (tp->listen_fd >= 0)
		ft__fd_close(tp->listen_fd);
	if (tp->epfd >= 0)
		ft__fd_close(tp->epfd);
	ft__wipe(tp->token, sizeof(tp->token));
	free(tp);
}

/* Level-triggered, unlike the links: readable, it ends every wait. */
static int tcp_watch_fd(struct ft__transport *tp, int fd)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};

	return epoll_ctl(tp->epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -FT_EIO;
}

const struct ft__transport_ops ft__tcp_ops = {
	.size = sizeof(struct ft__transport_ops),
	.name = "tcp",
	.open = tcp_open,
	.local_addr = ft__tcp_local_addr,
	.connect = ft__tcp_connect,
	.accept = ft__tcp_accept,
	.post_send = tcp_post_send,
	.post_recv = tcp_post_recv,
	.progress = tcp_progress,
	.link_abort = tcp_link_abort,
	.link_close = tcp_link_close,
	.close = tcp_close,
	.watch_fd = tcp_watch_fd,
};
