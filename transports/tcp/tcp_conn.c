/* tcp_conn.c: the TCP transport's links made: connect, accept, the handshake (hello, challenge, proof) and the connections short of it. */
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
int ft__tcp_local_addr(struct ft__transport *tp, char *buf, size_t len)
{
	if (strlen(tp->addr) >= len)
		return -FT_EINVAL;
	strcpy(buf, tp->addr);
	return 0;
}

static struct ft__link *link_new(struct ft__transport *tp, int fd, int peer, bool sending)
{
	struct ft__link *l = calloc(1, sizeof(*l));
	struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET};

	if (l == NULL)
		return NULL;
	l->in = malloc(TCP_INBUF);
	if (l->in == NULL) {
		free(l);
		return NULL;
	}
	l->tp = tp;
	l->fd = fd;
	l->peer = peer;
	l->sending = sending;
	l->need_ack = sending;
	l->can_read = l->can_write = true;
	l->lowat = 1;
	ev.data.ptr = l;
	if (epoll_ctl(tp->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
		free(l->in);
		free(l);
		return NULL;
	}
	l->next = tp->links;
	tp->links = l;
	return l;
}

/*
 * Dials `to` and writes the hello, retrying until the deadline: a peer
 * may not listen yet (unless `again`: it listened before) or have a full
 * backlog, and a connection closed before the hello went out was refused
 * unread. Each try waits a slice (200 ms, doubling to 2 s), and this
 * rank's own listener is drained between tries: a neighbour that connects
 * to us while we connect to the next must find room in our queue, or the
 * ring of connects waits on itself.
 */
static int dial(struct ft__transport *tp, const struct ft__sock_addr *to, const char *addr,
		const struct ft__hello *hello, int64_t deadline, bool again, int *out_fd)
{
	int fd = -1, rc, delay_ms = 1, slice_ms = 200;

	for (;;) {
		int64_t until = ft__now_ms() + slice_ms;
		ft__tcp_drain(tp);
		rc = ft__sock_connect(to, &tp->sock_opts, until < deadline ? until : deadline, &fd);
		slice_ms = slice_ms < 1000 ? 2 * slice_ms : 2000;
		if (rc == 0) {
			ft__fd_own(fd);
			rc = ft__sock_write_full(fd, hello, sizeof(*hello), deadline);
			if (rc == 0) {
				*out_fd = fd;
				return 0;
			}
			ft__fd_close(fd);
			if (rc != -FT_EPEERFAILED)
				return rc;
		} else if (rc == -FT_EIO || ft__err_shortage(rc) || (again && rc == -FT_ECONNREFUSED)) {
			/* (a shortage of this rank's is said at once, as itself; a
			 * listener that took us once and refuses now is gone) */
			return rc;
		}
		if (ft__ms_left(deadline) == 0) {
			ft__error("tcp: cannot connect to %s: %s", addr, ft_strerror(rc));
			return rc;
		}
		if (tp->interrupted != NULL && tp->interrupted(tp->interrupt_arg))
			return -FT_EABORTED;
		struct timespec ts = {0, (long)delay_ms * 1000000L};
		nanosleep(&ts, NULL);
		delay_ms = delay_ms < 50 ? delay_ms * 2 : 50;
	}
}

int ft__tcp_connect(struct ft__transport *tp, const char *addr, const struct ft__hello *hello,
		       int timeout_ms, struct ft__link **out)
{
	int64_t deadline = ft__now_ms() + timeout_ms;
	struct ft__sock_addr to;
	int fd = -1, rc;

	*out = NULL;
	if (ft__sock_resolve(addr, &to) != 0) {
		ft__error("tcp: malformed or unresolvable peer address '%s'", addr);
		return -FT_EINVAL;
	}
	if ((rc = dial(tp, &to, addr, hello, deadline, false, &fd)) != 0)
		return rc;
	*out = link_new(tp, fd, hello->to_rank, true);
	if (*out == NULL) {
		ft__fd_close(fd);
		return -FT_ENOMEM;
	}
	(*out)->hello = *hello;
	(*out)->to = to;
	(*out)->redial_until = deadline;
	return 0;
}

/*
 * The connection of a link still waiting for its answer ended unanswered
 * (closed or reset): the peer's listener let it go before reading its
 * hello, as it does to make room when strangers fill its pending slots (a
 * hello that came late: this rank was descheduled between its connect and
 * its write). That is no news of the peer, so the link dials again, with
 * the same hello, until the connect's deadline; a peer that is gone
 * refuses the dial, and the link fails as before. The hello's nonce is
 * still fresh: only a proved hello is remembered.
 */
static bool redial(struct ft__link *l)
{
	struct ft__transport *tp = l->tp;
	char addr[64];
	int fd;

	if (!l->sending || !l->need_ack || ft__ms_left(l->redial_until) == 0)
		return false;
	snprintf(addr, sizeof(addr), "rank %d", l->peer);
	ft__info("tcp: rank %d let our link go unanswered: dialing it again", l->peer);
	if (dial(tp, &l->to, addr, &l->hello, l->redial_until, true, &fd) != 0)
		return false;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = l};
	if (epoll_ctl(tp->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
		ft__fd_close(fd);
		return false;
	}
	ft__fd_close(l->fd); /* (closing takes it out of the epoll set) */
	l->fd = fd;
	l->eof = false;
	l->error = 0;
	l->in_start = l->in_end = 0;
	l->can_read = l->can_write = true;
	l->lowat = 1;
	return true;
}

/* Answers a whole hello with rc (best effort) and closes fd. */
static void refuse_fd(const struct ft__transport *tp, int fd, const struct ft__hello *hello, int rc)
{
	struct ft__hello_ack ack;

	if (hello != NULL) {
		ft__hello_ack_seal(&ack, hello->nonce, NULL, rc, tp->token);
		(void)!send(fd, &ack, sizeof(ack), MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	ft__fd_close(fd);
}

static void refuse(struct ft__transport *tp, struct pending_conn *pc, int rc, const char *why)
{
	ft__warn_gated(&tp->warn, "tcp: refused connection from %s: %s (%s)", pc->from, why,
		       ft_strerror(rc));
	/* a challenged connection has had its answer */
	refuse_fd(tp, pc->fd, pc->got == sizeof(pc->hello) && !pc->challenged ? &pc->hello : NULL,
		  rc);
	pc->fd = -1;
}

/* Keeps pc when its handshake is valid but for a later generation. */
static bool keep_early(struct ft__transport *tp, const struct ft__hello *expect,
		       struct pending_conn *pc)
{
	struct ft__hello later = *expect;

	if (pc->hello.generation <= expect->generation)
		return false;
	later.generation = pc->hello.generation;
	later.from_rank = -1;
	if (ft__hello_check(&later, &pc->hello, tp->token) != 0)
		return false;
	if (tp->early == NULL)
		tp->early = calloc(TCP_EARLY_MAX, sizeof(*tp->early));
	if (tp->early == NULL || tp->nearly == TCP_EARLY_MAX)
		return false;
	tp->early[tp->nearly++] = (struct early_conn){.fd = pc->fd, .hello = pc->hello};
	pc->fd = -1;
	return true;
}

/* Answers pc's hello, which passed, with a fresh challenge: 0, or the
 * error (pc is left for the caller to refuse). */
static int challenge(const struct ft__transport *tp, struct pending_conn *pc)
{
	struct ft__hello_ack ack;
	int rc = ft__auth_random(pc->challenge, sizeof(pc->challenge));

	if (rc != 0)
		return rc;
	ft__hello_ack_seal(&ack, pc->hello.nonce, pc->challenge, 0, tp->token);
	/* the first bytes on a fresh socket: they fit, or the peer is no rank */
	if (send(pc->fd, &ack, sizeof(ack), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(ack))
		return -FT_EPROTO;
	pc->challenged = true;
	pc->pgot = 0;
	return 0;
}

/* Makes the link of a handshake whose proof passed; fd is consumed. */
static int accept_finish(struct ft__transport *tp, int fd, const struct ft__hello *hello,
			 struct ft__link **out, struct ft__hello *got)
{
	ft__sock_tune(fd, &tp->sock_opts);
	*out = link_new(tp, fd, hello->from_rank, false);
	if (*out == NULL) {
		ft__fd_close(fd);
		return -FT_ENOMEM;
	}
	*got = *hello;
	return 0;
}

/*
 * A connecting link's answer, once whole in its inbound buffer: checked,
 * and the proof of its challenge made ready to go before any frame. Reads
 * more input when the answer is not whole yet; a link that fails is left
 * for progress to report.
 */
void ft__tcp_take_answer(struct ft__link *l)
{
	struct ft__hello_ack ack;
	int st;

	while (l->need_ack && !l->error) {
		if (l->in_end - l->in_start < sizeof(ack)) {
			if (!ft__tcp_fill_inbuf(l)) {
				if ((l->eof || l->error == -FT_EPEERFAILED) && l->in_end == l->in_start &&
				    redial(l))
					continue;
				if (l->eof && !l->error)
					ft__tcp_link_fail(l, -FT_EPEERFAILED);
				return;
			}
			continue;
		}
		memcpy(&ack, l->in + l->in_start, sizeof(ack));
		l->in_start += sizeof(ack);
		l->need_ack = false;
		st = ft__hello_ack_check(&ack, l->hello.nonce, l->tp->token);
		if (st != 0) {
			ft__error("tcp: rank %d refused our link: %s", l->peer, ft_strerror(st));
			ft__tcp_link_fail(l, st);
			return;
		}
		ft__hello_proof_seal(&l->proof, &l->hello, ack.challenge, l->tp->token);
		l->proof_left = sizeof(l->proof);
	}
}

/* Writes what is left of a connecting link's proof, without waiting. */
void ft__tcp_send_proof(struct ft__link *l)
{
	while (l->proof_left > 0 && l->can_write && !l->error) {
		ssize_t n = send(l->fd, (char *)&l->proof + sizeof(l->proof) - l->proof_left,
				 l->proof_left, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0)
			l->proof_left -= (size_t)n;
		else if (n < 0 && errno == EAGAIN)
			l->can_write = false;
		else if (n < 0 && errno != EINTR)
			ft__tcp_link_fail(l, ft__sock_error(errno));
	}
}

#define TCP_DRIVE_MAX 16

/* This transport's connecting links still short of an answer (at most max). */
static int awaiting_answer(struct ft__transport *tp, struct ft__link **out, int max)
{
	int n = 0;

	for (struct ft__link *l = tp->links; l != NULL && n < max; l = l->next)
		if (l->sending && (l->need_ack || l->proof_left > 0) && !l->error)
			out[n++] = l;
	return n;
}

/* Answers the challenges that came back to our own connects (the peer's
 * accept waits for the proof while we wait in ours). */
static void drive_connects(struct ft__link **drv, int n)
{
	for (int i = 0; i < n; i++) {
		drv[i]->can_read = drv[i]->can_write = true;
		ft__tcp_take_answer(drv[i]);
		ft__tcp_send_proof(drv[i]);
	}
}

/* Reads more of pc's hello, or of its proof once challenged: false when
 * it closed or failed (pc refused), true otherwise. */
static bool pending_read(struct ft__transport *tp, struct pending_conn *pc)
{
	char *at = pc->challenged ? (char *)&pc->proof + pc->pgot : (char *)&pc->hello + pc->got;
	size_t want = pc->challenged ? sizeof(pc->proof) - pc->pgot : sizeof(pc->hello) - pc->got;
	ssize_t r = recv(pc->fd, at, want, 0);

	if (r <= 0) {
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			return true;
		refuse(tp, pc, -FT_EPROTO, "closed before its handshake");
		return false;
	}
	if (pc->challenged)
		pc->pgot += (size_t)r;
	else
		pc->got += (size_t)r;
	return true;
}

/* Judges pc's whole hello: challenged (true) when it passes, else kept for
 * a later generation or refused (false). */
static bool judge_hello(struct ft__transport *tp, const struct ft__hello *expect,
			struct pending_conn *pc)
{
	int rc = ft__hello_check(expect, &pc->hello, tp->token);
	bool replay = false;
	char why[160];

	if (rc != 0 && keep_early(tp, expect, pc))
		return false;
	if (rc == -FT_EAUTH &&
	    (expect->from_rank < 0 || pc->hello.from_rank == expect->from_rank))
		tp->auth_refused = true;
	/* a copy of a hello that owns a link already: refused at once, loudly */
	if (rc == 0 && ft__auth_seen_has(&tp->seen, pc->hello.nonce)) {
		replay = true;
		rc = -FT_EAUTH;
	}
	if (rc == 0 && (rc = challenge(tp, pc)) == 0)
		return true;
	snprintf(why, sizeof(why), "%shandshake of rank %d for rank %d, generation %u, kind %u",
		 replay ? "replayed " : "", pc->hello.from_rank, pc->hello.to_rank,
		 pc->hello.generation, pc->hello.kind);
	refuse(tp, pc, rc, pc->hello.magic == FT__HELLO_MAGIC ? why : "bad magic");
	return false;
}

/* Judges pc's whole proof: 0 when the link is made, else pc is refused. */
static int judge_proof(struct ft__transport *tp, const struct ft__hello *expect,
		       struct pending_conn *pc, struct ft__link **out, struct ft__hello *got)
{
	int rc;

	/* a failed proof is no news of the rank its hello names: anyone may
	 * copy a hello, so it never makes the accept's timeout -FT_EAUTH */
	if (ft__hello_proof_check(&pc->proof, &pc->hello, pc->challenge, tp->token) != 0) {
		refuse(tp, pc, -FT_EAUTH, "a hello whose sender could not prove it (a copy?)");
		return -FT_EAUTH;
	}
	/* challenged by an accept that was interrupted: this one may expect
	 * another generation */
	if ((rc = ft__hello_check(expect, &pc->hello, tp->token)) != 0) {
		refuse(tp, pc, rc, "a proved hello this accept does not expect");
		return rc;
	}
	if (ft__auth_seen_add(&tp->seen, pc->hello.nonce) != 0) {
		refuse(tp, pc, -FT_EAUTH, "a hello proved twice");
		return -FT_EAUTH;
	}
	rc = accept_finish(tp, pc->fd, &pc->hello, out, got);
	pc->fd = -1;
	return rc;
}

/* Takes one connection waiting on the listener into pend: 1 taken, 0 none
 * waits, or this rank's shortage (no descriptor, no memory). */
static int take_one(struct ft__transport *tp, struct pending_conn *pend, int *npend)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char h[NI_MAXHOST] = "?", p[NI_MAXSERV] = "?";
	int fd = accept4(tp->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
	struct pending_conn *pc;

	if (fd < 0)
		return ft__err_shortage(ft__err_local(errno)) ? ft__err_local(errno) : 0;
	ft__fd_own(fd);
	pc = &pend[(*npend)++];
	getnameinfo((struct sockaddr *)&ss, sl, h, sizeof(h), p, sizeof(p),
		    NI_NUMERICHOST | NI_NUMERICSERV);
	*pc = (struct pending_conn){.fd = fd};
	snprintf(pc->from, sizeof(pc->from), "%.46s:%.5s", h, p);
	return 1;
}

/* Whether pc sent a whole hello sealed with this rank's token, for this
 * rank (of any generation: the accept that takes it judges the rest). */
static bool hello_sealed(const struct ft__transport *tp, const struct pending_conn *pc)
{
	struct ft__hello e = pc->hello;

	e.to_rank = tp->rank;
	e.from_rank = -1;
	return pc->got == sizeof(pc->hello) && ft__hello_check(&e, &pc->hello, tp->token) == 0;
}

#define DRAIN_REST_SHORT_MS 100 /* after a shortage: it lasts */
#define DRAIN_REST_FULL_MS 20   /* every slot holds a sealed hello: an accept comes */

/*
 * Between accepts nobody judged the listener's queue, so a burst of
 * connections (a scan, a probe a minute for hours) filled it, and at the
 * next failure every survivor's SYN to its neighbour was dropped while it
 * waited in its own connect: all of them timed out. Now progress (on the
 * listener's edge) and the connect's retries drain it into the pending
 * slots, and what a stranger holds is bounded as in an accept: a
 * connection that closed or sent something other than a hello for this
 * rank is closed at once, and when the slots are full the oldest that
 * has not sent a hello sealed with this token makes room (a neighbour's
 * early link, sealed, is never pushed out by strangers).
 */
void ft__tcp_drain(struct ft__transport *tp)
{
	int64_t now = ft__now_ms();
	int rc, k;

	tp->listen_ready = false;
	if (now < tp->listen_rest_until)
		return;
	tp->listen_rest_until = 0;
	if (tp->pend == NULL && (tp->pend = calloc(TCP_PENDING_ACCEPT, sizeof(*tp->pend))) == NULL)
		return;
	for (;;) {
		for (int i = 0; i < tp->npend; i++) {
			struct pending_conn *pc = &tp->pend[i];
			if (pc->challenged || pc->fd < 0 || pc->got == sizeof(pc->hello))
				continue;
			/* a hello under another token stays for the accept to
			 * judge (its refusal says FT_EAUTH to both ends), the
			 * first to go when room is needed */
			if (pending_read(tp, pc) && pc->got == sizeof(pc->hello) &&
			    (pc->hello.magic != FT__HELLO_MAGIC || pc->hello.to_rank != tp->rank))
				refuse(tp, pc, -FT_EPROTO, "not a hello for this rank");
		}
		k = 0;
		for (int i = 0; i < tp->npend; i++)
			if (tp->pend[i].fd >= 0)
				tp->pend[k++] = tp->pend[i];
		tp->npend = k;
		if (tp->npend == TCP_PENDING_ACCEPT) {
			int old = 0;
			while (old < tp->npend && (tp->pend[old].challenged || hello_sealed(tp, &tp->pend[old])))
				old++;
			if (old == tp->npend) {
				tp->listen_rest_until = now + DRAIN_REST_FULL_MS;
				return;
			}
			refuse(tp, &tp->pend[old], -FT_ETIMEDOUT,
			       "too many connections short of a handshake");
			memmove(tp->pend + old, tp->pend + old + 1,
				(size_t)(--tp->npend - old) * sizeof(tp->pend[0]));
		}
		rc = take_one(tp, tp->pend, &tp->npend);
		if (rc == 0)
			return;
		if (rc < 0) {
			ft__warn_gated(&tp->short_warn, "tcp: cannot accept a connection: %s",
				       ft_strerror(rc));
			tp->listen_rest_until = now + DRAIN_REST_SHORT_MS;
			return;
		}
	}
}

void ft__tcp_answer_challenges(struct ft__transport *tp)
{
	struct ft__link *drv[TCP_DRIVE_MAX];

	drive_connects(drv, awaiting_answer(tp, drv, TCP_DRIVE_MAX));
}

int ft__tcp_accept(struct ft__transport *tp, const struct ft__hello *expect, int timeout_ms,
		      struct ft__link **out, struct ft__hello *got)
{
	int64_t deadline = ft__now_ms() + timeout_ms;
	struct pollfd pfd[TCP_PENDING_ACCEPT + 1 + TCP_DRIVE_MAX];
	struct ft__link *drv[TCP_DRIVE_MAX];
	struct pending_conn *pend;
	int npend, ndrv, rc = -FT_ETIMEDOUT;

	*out = NULL;
	/* Connections short of their handshake outlive an interrupted call: an
	 * accept cut short by a failure must not lose a neighbour's link. */
	if (tp->pend == NULL && (tp->pend = calloc(TCP_PENDING_ACCEPT, sizeof(*tp->pend))) == NULL)
		return -FT_ENOMEM;
	pend = tp->pend;
	npend = tp->npend;
	/* a neighbour of this generation may have connected before we got here */
	tp->auth_refused = false;
	for (int i = 0; i < tp->nearly; i++) {
		struct early_conn e = tp->early[i];
		if (e.hello.generation > expect->generation)
			continue;
		tp->early[i--] = tp->early[--tp->nearly];
		if (npend == TCP_PENDING_ACCEPT) {
			ft__fd_close(e.fd);
			continue;
		}
		pend[npend] = (struct pending_conn){.fd = e.fd, .got = sizeof(e.hello),
						    .hello = e.hello};
		snprintf(pend[npend].from, sizeof(pend[npend].from), "an early connection");
		if (judge_hello(tp, expect, &pend[npend]))
			npend++;
		else if (pend[npend].fd >= 0)
			ft__fd_close(pend[npend].fd); /* kept again for a later generation: not here */
	}
	/* hellos the drain read whole between accepts: judged now */
	for (int i = 0; i < npend; i++)
		if (pend[i].fd >= 0 && !pend[i].challenged && pend[i].got == sizeof(pend[i].hello))
			(void)judge_hello(tp, expect, &pend[i]);
	{
		int k = 0;
		for (int i = 0; i < npend; i++)
			if (pend[i].fd >= 0)
				pend[k++] = pend[i];
		npend = k;
	}
	rc = -FT_ETIMEDOUT;
	for (;;) {
		int n = 0, left = ft__ms_left(deadline);
		ndrv = awaiting_answer(tp, drv, TCP_DRIVE_MAX);
		drive_connects(drv, ndrv);
		pfd[n++] = (struct pollfd){.fd = tp->listen_fd, .events = POLLIN};
		for (int i = 0; i < npend; i++)
			pfd[n++] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
		for (int i = 0; i < ndrv; i++)
			pfd[n++] = (struct pollfd){.fd = drv[i]->fd,
						   .events = drv[i]->need_ack ? POLLIN : POLLOUT};
		if (left == 0)
			break;
		if (tp->interrupted != NULL) {
			if (tp->interrupted(tp->interrupt_arg)) {
				rc = -FT_EABORTED;
				break;
			}
			if (left > 20)
				left = 20;
		}
		if (poll(pfd, (nfds_t)n, left) < 0 && errno != EINTR) {
			rc = -FT_EIO;
			break;
		}
		bool backlog_blocked = (pfd[0].revents & POLLIN) && npend == TCP_PENDING_ACCEPT;
		int npolled = npend;
		if ((pfd[0].revents & POLLIN) && npend < TCP_PENDING_ACCEPT) {
			int taken = take_one(tp, pend, &npend);
			if (taken < 0) {
				/* no descriptor or memory for the connection: this
				 * rank's shortage, said as itself at once (the
				 * listener stays readable, and waiting out the
				 * deadline would make it the peer's silence) */
				rc = taken;
				ft__error("tcp: cannot accept rank %d's link: %s", expect->from_rank,
					  ft_strerror(rc));
				goto done;
			}
		}
		for (int i = 0; i < npolled; i++) {
			struct pending_conn *pc = &pend[i];
			if (!(pfd[1 + i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (!pending_read(tp, pc))
				continue;
			if (!pc->challenged) {
				if (pc->got == sizeof(pc->hello))
					(void)judge_hello(tp, expect, pc);
				continue;
			}
			if (pc->pgot < sizeof(pc->proof))
				continue;
			rc = judge_proof(tp, expect, pc, out, got);
			if (rc == 0 || ft__err_shortage(rc))
				goto done;
			rc = -FT_ETIMEDOUT;
		}
		/* Compact refused entries. */
		int k = 0;
		for (int i = 0; i < npend; i++)
			if (pend[i].fd >= 0)
				pend[k++] = pend[i];
		npend = k;
		/* Every slot holds a connection still short of its handshake while
		 * another waits in the backlog: drop the oldest that has not sent
		 * a hello whose MAC checks out (a stranger's), else the oldest, so
		 * that stalled peers cannot lock a valid one out (nor leave poll
		 * spinning on the readable listening socket until the deadline),
		 * and strangers never push out a rank's link being made (its
		 * connect would take the close for the rank's death). */
		if (backlog_blocked && npend == TCP_PENDING_ACCEPT) {
			int old = 0;
			while (old < npend - 1 && pend[old].challenged)
				old++;
			if (pend[old].challenged)
				old = 0;
			refuse(tp, &pend[old], -FT_ETIMEDOUT, "too many connections short of a handshake");
			memmove(pend + old, pend + old + 1, (size_t)(--npend - old) * sizeof(pend[0]));
		}
	}
done:
	/* Interrupted (a failure is being handled, the accept will be called
	 * again) or a link made: keep what is short of its handshake, for the
	 * next accept to judge: a neighbour that adopted the next view first
	 * may be connecting for it, and several peers link to this rank at
	 * once (recursive doubling's mesh); closing a connection made its
	 * rank take this one for dead. A copy of a hello, challenged, never
	 * proves it and ends at the accept that gives up on it. A link made
	 * drops the whole hellos it kept for later (early) that the next
	 * accept would refuse anyway. Given up: drop all. */
	tp->npend = 0;
	for (int i = 0; i < npend; i++) {
		if (pend[i].fd < 0)
			continue;
		if (rc == -FT_EABORTED ||
		    (rc == 0 && (pend[i].challenged || pend[i].got < sizeof(pend[i].hello)))) {
			pend[tp->npend++] = pend[i];
			continue;
		}
		ft__warn_gated(&tp->warn, "tcp: dropped connection from %s that completed no handshake",
			       pend[i].from);
		ft__fd_close(pend[i].fd);
	}
	/* our own connects may have been answered while we took this one */
	ndrv = awaiting_answer(tp, drv, TCP_DRIVE_MAX);
	drive_connects(drv, ndrv);
	if (rc == -FT_ETIMEDOUT && tp->auth_refused) {
		ft__error("tcp: rank %d's handshakes failed for their token, job or version",
			  expect->from_rank);
		rc = -FT_EAUTH;
	} else if (rc == -FT_ETIMEDOUT) {
		ft__error("tcp: no valid connection from rank %d within %d ms", expect->from_rank,
			  timeout_ms);
	}
	return rc;
}
