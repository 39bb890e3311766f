/* tcp.c: the TCP transport: nonblocking sockets on one epoll set, framed links with checked headers. */
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
 * buffer), compared with the header the engine posted (ft_frame_check), and
 * only then is the payload copied or read straight into the posted buffer;
 * one readv fills the rest of the payload and the inbound buffer behind it,
 * which usually catches the next header in the same call.
 * Sending: queued frames go out with writev, several per call.
 */

#define TCP_INBUF 65536
#define TCP_IOV 64
#define TCP_PENDING_ACCEPT 16
#define TCP_LOWAT_MIN (32u << 10)
#define TCP_LOWAT_MAX (128u << 10)

struct tcp_op {
	struct ft_frame hdr;    /* to send, or expected */
	char *buf;
	void *ctx;
	size_t done;            /* bytes of header + payload transferred */
};

struct tcp_queue {
	struct tcp_op *ops;
	size_t cap, head, len;  /* ring of cap (a power of two) entries */
};

struct ft_link {
	struct ft_transport *tp;
	struct ft_link *next;
	int fd;
	int peer;
	bool sending;           /* connecting side: frames go out, ack comes in */
	bool need_ack;          /* connecting side: no answer yet, so no frame may go */
	struct ft_hello hello;  /* connecting side: its hello, which the answer and proof cover */
	struct ft_hello_proof proof;    /* connecting side: goes out before the first frame */
	size_t proof_left;      /* bytes of proof not written yet */
	bool can_read, can_write;
	bool eof;
	int error;              /* nonzero once broken; reported once */
	bool error_reported;
	struct tcp_queue sq, rq;
	struct ft_frame rhdr;   /* header of the frame being received */
	bool have_rhdr;
	char *in;               /* inbound buffer: [in_start, in_end) unread */
	size_t in_start, in_end;
	int lowat;              /* SO_RCVLOWAT now set on fd */
};

struct ft_transport {
	int listen_fd;
	int epfd;
	char addr[128];
	struct ft_link *links;
	int log_level;
	int rank;
	bool (*interrupted)(void *arg);
	void *interrupt_arg;
	struct early_conn *early;       /* handshakes for a newer generation, kept */
	int nearly;
	struct pending_conn *pend;      /* connections still short of a handshake */
	int npend;
	struct ft__sock_opts sock_opts; /* keepalive, user timeout, FTCC_TCP_BUFFER */
	char token[FT_NAME_MAX];        /* the key of the hellos' MACs */
	struct ft__warn_gate warn;      /* strangers' warnings */
	struct ft__auth_seen seen;      /* nonces of the hellos accepted */
	bool auth_refused;              /* this accept refused the expected rank's hello for its token */
};

static int tcp_open(const struct ft_tp_params *p, struct ft_transport **out)
{
	struct ft_transport *tp = calloc(1, sizeof(*tp));
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
		rc = -FT_EIO;
		goto fail;
	}
	rc = ft__sock_listen("tcp", p->bind_host, p->publish_host, 128, &tp->listen_fd, tp->addr,
			     sizeof(tp->addr));
	if (rc != 0)
		goto fail;
	ft__fd_own(tp->listen_fd);
	*out = tp;
	return 0;
fail:
	if (tp->epfd >= 0)
		ft__fd_close(tp->epfd);
	ft__wipe(tp->token, sizeof(tp->token));
	free(tp);
	return rc;
}

static int tcp_local_addr(struct ft_transport *tp, char *buf, size_t len)
{
	if (strlen(tp->addr) >= len)
		return -FT_EINVAL;
	strcpy(buf, tp->addr);
	return 0;
}

static struct ft_link *link_new(struct ft_transport *tp, int fd, int peer, bool sending)
{
	struct ft_link *l = calloc(1, sizeof(*l));
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

static int tcp_connect(struct ft_transport *tp, const char *addr, const struct ft_hello *hello,
		       int timeout_ms, struct ft_link **out)
{
	int64_t deadline = ft__now_ms() + timeout_ms;
	struct ft__sock_addr to;
	int fd = -1, rc, delay_ms = 1;

	*out = NULL;
	if (ft__sock_resolve(addr, &to) != 0) {
		ft__error("tcp: malformed or unresolvable peer address '%s'", addr);
		return -FT_EINVAL;
	}
	/* A peer may not listen yet or have a full backlog: retry until the deadline. */
	for (;;) {
		rc = ft__sock_connect(&to, &tp->sock_opts, deadline, &fd);
		if (rc == 0 || rc == -FT_EIO)
			break;
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
	if (rc != 0)
		return rc;
	ft__fd_own(fd);
	rc = ft__sock_write_full(fd, hello, sizeof(*hello), deadline);
	if (rc != 0)
		goto fail;
	*out = link_new(tp, fd, hello->to_rank, true);
	if (*out == NULL) {
		rc = -FT_ENOMEM;
		goto fail;
	}
	(*out)->hello = *hello;
	return 0;
fail:
	ft__fd_close(fd);
	return rc;
}

/* A connection short of its handshake: reading its hello, then (challenged:
 * answered with our nonce) its proof. */
struct pending_conn {
	int fd;
	size_t got;
	struct ft_hello hello;
	bool challenged;
	uint8_t challenge[FT_HELLO_NONCE];
	size_t pgot;
	struct ft_hello_proof proof;
	char from[64];
};

/* A valid handshake for a generation newer than the one accepted now
 * (a neighbour that adopted the next view first) waits for its accept. */
struct early_conn {
	int fd;
	struct ft_hello hello;
};

#define TCP_EARLY_MAX 8

/* Answers a whole hello with rc (best effort) and closes fd. */
static void refuse_fd(const struct ft_transport *tp, int fd, const struct ft_hello *hello, int rc)
{
	struct ft_hello_ack ack;

	if (hello != NULL) {
		ft_hello_ack_seal(&ack, hello->nonce, NULL, rc, tp->token);
		(void)!send(fd, &ack, sizeof(ack), MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	ft__fd_close(fd);
}

static void refuse(struct ft_transport *tp, struct pending_conn *pc, int rc, const char *why)
{
	ft__warn_gated(&tp->warn, "tcp: refused connection from %s: %s (%s)", pc->from, why,
		       ft_strerror(rc));
	/* a challenged connection has had its answer */
	refuse_fd(tp, pc->fd, pc->got == sizeof(pc->hello) && !pc->challenged ? &pc->hello : NULL,
		  rc);
	pc->fd = -1;
}

/* Keeps pc when its handshake is valid but for a later generation. */
static bool keep_early(struct ft_transport *tp, const struct ft_hello *expect,
		       struct pending_conn *pc)
{
	struct ft_hello later = *expect;

	if (pc->hello.generation <= expect->generation)
		return false;
	later.generation = pc->hello.generation;
	later.from_rank = -1;
	if (ft_hello_check(&later, &pc->hello, tp->token) != 0)
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
static int challenge(const struct ft_transport *tp, struct pending_conn *pc)
{
	struct ft_hello_ack ack;
	int rc = ft__auth_random(pc->challenge, sizeof(pc->challenge));

	if (rc != 0)
		return rc;
	ft_hello_ack_seal(&ack, pc->hello.nonce, pc->challenge, 0, tp->token);
	/* the first bytes on a fresh socket: they fit, or the peer is no rank */
	if (send(pc->fd, &ack, sizeof(ack), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(ack))
		return -FT_EPROTO;
	pc->challenged = true;
	pc->pgot = 0;
	return 0;
}

/* Makes the link of a handshake whose proof passed; fd is consumed. */
static int accept_finish(struct ft_transport *tp, int fd, const struct ft_hello *hello,
			 struct ft_link **out, struct ft_hello *got)
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

static int fill_inbuf(struct ft_link *l);
static void link_fail(struct ft_link *l, int err);

/*
 * A connecting link's answer, once whole in its inbound buffer: checked,
 * and the proof of its challenge made ready to go before any frame. Reads
 * more input when the answer is not whole yet; a link that fails is left
 * for progress to report.
 */
static void take_answer(struct ft_link *l)
{
	struct ft_hello_ack ack;
	int st;

	while (l->need_ack && !l->error) {
		if (l->in_end - l->in_start < sizeof(ack)) {
			if (!fill_inbuf(l)) {
				if (l->eof && !l->error)
					link_fail(l, -FT_EPEERFAILED);
				return;
			}
			continue;
		}
		memcpy(&ack, l->in + l->in_start, sizeof(ack));
		l->in_start += sizeof(ack);
		l->need_ack = false;
		st = ft_hello_ack_check(&ack, l->hello.nonce, l->tp->token);
		if (st != 0) {
			ft__error("tcp: rank %d refused our link: %s", l->peer, ft_strerror(st));
			link_fail(l, st);
			return;
		}
		ft_hello_proof_seal(&l->proof, &l->hello, ack.challenge, l->tp->token);
		l->proof_left = sizeof(l->proof);
	}
}

/* Writes what is left of a connecting link's proof, without waiting. */
static void send_proof(struct ft_link *l)
{
	while (l->proof_left > 0 && l->can_write && !l->error) {
		ssize_t n = send(l->fd, (char *)&l->proof + sizeof(l->proof) - l->proof_left,
				 l->proof_left, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0)
			l->proof_left -= (size_t)n;
		else if (n < 0 && errno == EAGAIN)
			l->can_write = false;
		else if (n < 0 && errno != EINTR)
			link_fail(l, ft__sock_error(errno));
	}
}

#define TCP_DRIVE_MAX 16

/* This transport's connecting links still short of an answer (at most max). */
static int awaiting_answer(struct ft_transport *tp, struct ft_link **out, int max)
{
	int n = 0;

	for (struct ft_link *l = tp->links; l != NULL && n < max; l = l->next)
		if (l->sending && (l->need_ack || l->proof_left > 0) && !l->error)
			out[n++] = l;
	return n;
}

/* Answers the challenges that came back to our own connects (the peer's
 * accept waits for the proof while we wait in ours). */
static void drive_connects(struct ft_link **drv, int n)
{
	for (int i = 0; i < n; i++) {
		drv[i]->can_read = drv[i]->can_write = true;
		take_answer(drv[i]);
		send_proof(drv[i]);
	}
}

/* Reads more of pc's hello, or of its proof once challenged: false when
 * it closed or failed (pc refused), true otherwise. */
static bool pending_read(struct ft_transport *tp, struct pending_conn *pc)
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
static bool judge_hello(struct ft_transport *tp, const struct ft_hello *expect,
			struct pending_conn *pc)
{
	int rc = ft_hello_check(expect, &pc->hello, tp->token);
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
	refuse(tp, pc, rc, pc->hello.magic == FT_HELLO_MAGIC ? why : "bad magic");
	return false;
}

/* Judges pc's whole proof: 0 when the link is made, else pc is refused. */
static int judge_proof(struct ft_transport *tp, const struct ft_hello *expect,
		       struct pending_conn *pc, struct ft_link **out, struct ft_hello *got)
{
	int rc;

	/* a failed proof is no news of the rank its hello names: anyone may
	 * copy a hello, so it never makes the accept's timeout -FT_EAUTH */
	if (ft_hello_proof_check(&pc->proof, &pc->hello, pc->challenge, tp->token) != 0) {
		refuse(tp, pc, -FT_EAUTH, "a hello whose sender could not prove it (a copy?)");
		return -FT_EAUTH;
	}
	/* challenged by an accept that was interrupted: this one may expect
	 * another generation */
	if ((rc = ft_hello_check(expect, &pc->hello, tp->token)) != 0) {
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

void ft__tcp_answer_challenges(struct ft_transport *tp)
{
	struct ft_link *drv[TCP_DRIVE_MAX];

	drive_connects(drv, awaiting_answer(tp, drv, TCP_DRIVE_MAX));
}

static int tcp_accept(struct ft_transport *tp, const struct ft_hello *expect, int timeout_ms,
		      struct ft_link **out, struct ft_hello *got)
{
	int64_t deadline = ft__now_ms() + timeout_ms;
	struct pollfd pfd[TCP_PENDING_ACCEPT + 1 + TCP_DRIVE_MAX];
	struct ft_link *drv[TCP_DRIVE_MAX];
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
			struct sockaddr_storage ss;
			socklen_t sl = sizeof(ss);
			int fd = accept4(tp->listen_fd, (struct sockaddr *)&ss, &sl,
					 SOCK_CLOEXEC | SOCK_NONBLOCK);
			if (fd >= 0) {
				ft__fd_own(fd);
				struct pending_conn *pc = &pend[npend++];
				char h[NI_MAXHOST] = "?", p[NI_MAXSERV] = "?";
				getnameinfo((struct sockaddr *)&ss, sl, h, sizeof(h), p, sizeof(p),
					    NI_NUMERICHOST | NI_NUMERICSERV);
				*pc = (struct pending_conn){.fd = fd};
				snprintf(pc->from, sizeof(pc->from), "%.46s:%.5s", h, p);
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
			if (rc == 0 || rc == -FT_ENOMEM)
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
	 * again): keep what is short of its handshake. A link made: keep what
	 * sent no whole hello yet, for the next accept to judge (a neighbour
	 * that adopted the next view first may be connecting for it: closing
	 * its connection made it take this rank for dead), drop the rest (a
	 * copy raced ahead of the original ends here). Given up: drop all. */
	tp->npend = 0;
	for (int i = 0; i < npend; i++) {
		if (pend[i].fd < 0)
			continue;
		if (rc == -FT_EABORTED ||
		    (rc == 0 && !pend[i].challenged && pend[i].got < sizeof(pend[i].hello))) {
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

static int queue_push(struct tcp_queue *q, const struct ft_frame *hdr, const void *buf,
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

static int tcp_post_send(struct ft_link *l, const struct ft_frame *hdr, const void *buf, void *ctx)
{
	if (l->error)
		return l->error;
	return queue_push(&l->sq, hdr, buf, ctx);
}

static int tcp_post_recv(struct ft_link *l, const struct ft_frame *expect, void *buf, void *ctx)
{
	if (l->error)
		return l->error;
	if (expect->length > FT_FRAME_MAX_PAYLOAD)
		return -FT_EINVAL;
	return queue_push(&l->rq, expect, buf, ctx);
}

static void link_fail(struct ft_link *l, int err)
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
static int do_send(struct ft_link *l, struct ft_tp_event *ev, int max)
{
	int nev = 0;

	for (;;) {
		while (l->sq.len > 0 && nev < max && queue_at(&l->sq, 0)->done == op_total(queue_at(&l->sq, 0))) {
			struct tcp_op *op = queue_at(&l->sq, 0);
			ev[nev++] = (struct ft_tp_event){.type = FT_TP_SEND_DONE, .link = l,
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
				link_fail(l, ft__sock_error(errno));
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
static int fill_inbuf(struct ft_link *l)
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
		link_fail(l, ft__sock_error(errno));
	return 0;
}

/*
 * While a large payload trickles in, epoll should wake us once a good part
 * of it is there, not for every packet: with more ranks than cores, each
 * needless wake-up is a context switch taken from a rank with work to do.
 */
static void set_lowat(struct ft_link *l, size_t want)
{
	int v = want >= TCP_LOWAT_MIN ? (int)(want < TCP_LOWAT_MAX ? want : TCP_LOWAT_MAX) : 1;

	if (v != l->lowat && setsockopt(l->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) == 0)
		l->lowat = v;
}

static int do_recv(struct ft_link *l, struct ft_tp_event *ev, int max)
{
	int nev = 0;

	while (!l->error && nev < max) {
		size_t avail = l->in_end - l->in_start;
		if (l->need_ack) {
			take_answer(l);
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
					int rc = ft_frame_check(&op->hdr, &l->rhdr);
					if (rc != 0) {
						link_fail(l, rc);
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
					if ((l->rhdr.flags & FT_FRAME_F_CRC) &&
					    ft__crc32c(0, op->buf, plen) != l->rhdr.crc)
						status = -FT_EPROTO;
					ev[nev++] = (struct ft_tp_event){.type = FT_TP_RECV_DONE,
									 .status = status,
									 .link = l, .ctx = op->ctx,
									 .peer = l->peer};
					l->have_rhdr = false;
					queue_pop(&l->rq);
					set_lowat(l, 1);
					if (status != 0) {
						link_fail(l, status);
						break;
					}
					continue;
				}
				/* Inbound buffer empty: read the payload straight into place,
				 * and whatever follows into the inbound buffer. */
				if (l->can_read && !l->eof) {
					struct iovec iov[2] = {
						{op->buf + op->done, plen - op->done},
						{l->in, TCP_INBUF}};
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
						link_fail(l, ft__sock_error(errno));
					continue;
				}
			}
		} else if (avail > 0 && !l->sending) {
			/* Bytes with no receive posted: wait for the engine. */
			break;
		} else if (avail > 0) {
			link_fail(l, -FT_EPROTO);
			break;
		}
		/* Need more input. */
		if (!fill_inbuf(l)) {
			if (l->eof && !l->error && l->in_end == l->in_start)
				link_fail(l, -FT_EPEERFAILED);
			break;
		}
	}
	return nev;
}

static int link_io(struct ft_link *l, struct ft_tp_event *ev, int max)
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
			send_proof(l);
			if (n < max)
				n += do_send(l, ev + n, max - n);
		}
	}
	if (l->error && !l->error_reported && n < max) {
		l->error_reported = true;
		ev[n++] = (struct ft_tp_event){.type = FT_TP_LINK_ERROR, .status = l->error,
					       .link = l, .peer = l->peer};
	}
	return n;
}

/* Folds epoll's readiness edges into the links' can_read/can_write flags. */
static void harvest(struct ft_transport *tp, int timeout_ms)
{
	struct epoll_event eev[16];
	int k = epoll_wait(tp->epfd, eev, 16, timeout_ms);

	for (int i = 0; i < k; i++) {
		struct ft_link *l = eev[i].data.ptr;
		if (eev[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			l->can_read = true;
		if (eev[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
			l->can_write = true;
	}
}

/* A link has work that waits only on an edge epoll may already hold. */
static bool link_stalled(const struct ft_link *l)
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
static int tcp_progress(struct ft_transport *tp, int timeout_ms, struct ft_tp_event *ev, int max)
{
	int n = 0;

	for (struct ft_link *l = tp->links; l != NULL; l = l->next)
		if (link_stalled(l)) {
			harvest(tp, 0);
			break;
		}
	for (struct ft_link *l = tp->links; l != NULL && n < max; l = l->next)
		n += link_io(l, ev + n, max - n);
	if (n > 0 || timeout_ms == 0)
		return n;
	harvest(tp, timeout_ms);
	for (struct ft_link *l = tp->links; l != NULL && n < max; l = l->next)
		n += link_io(l, ev + n, max - n);
	return n;
}

static void link_destroy(struct ft_link *l)
{
	struct ft_transport *tp = l->tp;

	for (struct ft_link **pp = &tp->links; *pp != NULL; pp = &(*pp)->next)
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

static void tcp_link_close(struct ft_link *l)
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
static void tcp_link_abort(struct ft_link *l, const struct ft_frame *abort_frame)
{
	int64_t deadline = ft__now_ms() + 200;

	if (l == NULL)
		return;
	if (l->sending && l->error == 0) {
		while (l->sq.len > 1)
			l->sq.len--;
		if (l->sq.len == 1 && queue_at(&l->sq, 0)->done == 0)
			l->sq.len = 0;
		if (queue_push(&l->sq, abort_frame, NULL, NULL) == 0) {
			struct ft_tp_event ev[4];
			/* the abort is a frame: it waits for the answer and the proof */
			while (l->sq.len > 0 && !l->error && ft__ms_left(deadline) > 0) {
				l->can_write = l->can_read = true;
				take_answer(l);
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

static void tcp_close(struct ft_transport *tp)
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

const struct ft_transport_ops ft__tcp_ops = {
	.size = sizeof(struct ft_transport_ops),
	.name = "tcp",
	.open = tcp_open,
	.local_addr = tcp_local_addr,
	.connect = tcp_connect,
	.accept = tcp_accept,
	.post_send = tcp_post_send,
	.post_recv = tcp_post_recv,
	.progress = tcp_progress,
	.link_abort = tcp_link_abort,
	.link_close = tcp_link_close,
	.close = tcp_close,
};
