/* ctl.c: control links: the listener, connect and accept, the hello, message framing, reading and writing. */
/* SPDX-License-Identifier: MIT */
#include <limits.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ctl.h"
#include "fdreg.h"
#include "internal.h"
#include "sock.h"

#define CTL_MAGIC 0x6c637466u /* "ftcl" */

struct ctl_hdr {
	uint32_t magic;
	uint16_t type;
	uint16_t len;           /* payload bytes */
	uint32_t gen;
	int32_t from;
};

/* MAC: over HELLO_LABEL, the message's header and every byte before mac. */
struct ctl_hello {
	char job_id[FT_NAME_MAX];
	int32_t to;
	int32_t reserved;
	uint8_t nonce[FT__AUTH_NONCE];
	uint8_t mac[FT__AUTH_MAC];
};

/* MAC: over ACK_LABEL, the hello's nonce, the message's header and every byte before mac. */
struct ctl_ack {
	int32_t status;         /* 0, or why the hello was refused */
	uint32_t reserved;
	uint8_t challenge[FT__AUTH_NONCE];      /* Na: zeros in a refusal */
	uint8_t mac[FT__AUTH_MAC];
};

/* MAC: over PROOF_LABEL, the whole HELLO message as sent, the ACK's challenge
 * and the PROOF's header. */
struct ctl_proof {
	uint8_t mac[FT__AUTH_MAC];
};

/* The MACs cover headers and bodies as sent: no padding may hide in them. */
_Static_assert(sizeof(struct ctl_hdr) == FT__CTL_HDR_BYTES &&
		       offsetof(struct ctl_hello, mac) + FT__AUTH_MAC == sizeof(struct ctl_hello) &&
		       offsetof(struct ctl_ack, mac) == 8 + FT__AUTH_NONCE &&
		       sizeof(struct ctl_ack) == 8 + FT__AUTH_NONCE + FT__AUTH_MAC,
	       "control messages have padding");
_Static_assert(sizeof(struct ctl_hdr) + sizeof(struct ctl_hello) == FT__CTL_HELLO_BYTES,
	       "FT__CTL_HELLO_BYTES is wrong");

#define HELLO_LABEL "ftcc/3 control hello"
#define ACK_LABEL "ftcc/3 control ack"
#define PROOF_LABEL "ftcc/3 control proof"

int ft__ctl_hello_ms(int detect_timeout_ms)
{
	if (detect_timeout_ms < FT__CTL_HELLO_MS)
		return FT__CTL_HELLO_MS;
	return detect_timeout_ms > 5000 ? 5000 : detect_timeout_ms;
}

int ft__ctl_open(struct ft__ctl *ctl, const struct ft__ctl_params *p)
{
	int rc;

	memset(ctl, 0, sizeof(*ctl));
	ctl->listen_fd = -1;
	ctl->refused_claim = -1;
	ctl->who = p->who != NULL ? p->who : "detector";
	ctl->out_cap = ctl->in_cap = p->links > 0 ? p->links : FT__CTL_LINKS;
	ctl->stranger_cap = p->strangers > 0 ? p->strangers : FT__CTL_LINKS;
	ctl->hello_ms = p->hello_ms > 0 ? p->hello_ms : FT__CTL_HELLO_MS;
	ctl->nlinks = ctl->out_cap + ctl->in_cap + ctl->stranger_cap;
	ctl->links = calloc((size_t)ctl->nlinks, sizeof(*ctl->links));
	if (ctl->links == NULL) {
		ctl->nlinks = 0;
		return -FT_ENOMEM;
	}
	for (int i = 0; i < ctl->nlinks; i++)
		ctl->links[i] = (struct ft__ctl_link){.fd = -1, .peer = -1};
	ctl->rank = p->rank;
	ctl->world_size = p->world_size;
	snprintf(ctl->job_id, sizeof(ctl->job_id), "%s", p->job_id);
	snprintf(ctl->token, sizeof(ctl->token), "%s", p->token);
	/* The detector's dead_ms is its detect timeout: its heartbeats keep its
	 * links busy and it reads them at once, so a closed window or an idle
	 * link that long means what heartbeat silence means. Data
	 * unacknowledged is given the span a lossy path is (FT__CTL_LOSS_SPAN):
	 * a heartbeat lost twice waits 1.4 s for its retransmission, and a dead
	 * host is found by silence meanwhile. No large buffers: the messages
	 * are small. */
	ctl->sock_opts = (struct ft__sock_opts){
		.keepalive_ms = p->dead_ms,
		.user_timeout_ms = p->dead_ms > INT_MAX / FT__CTL_LOSS_SPAN
					   ? INT_MAX
					   : p->dead_ms * FT__CTL_LOSS_SPAN};
	ctl->msg_cap = sizeof(struct ctl_hdr) + sizeof(struct ctl_hello) +
		       (size_t)p->world_size * sizeof(int32_t);
	if (ctl->msg_cap < sizeof(struct ctl_hdr) + p->min_payload)
		ctl->msg_cap = sizeof(struct ctl_hdr) + p->min_payload;
	if (ctl->msg_cap > sizeof(struct ctl_hdr) + UINT16_MAX)
		ctl->msg_cap = sizeof(struct ctl_hdr) + UINT16_MAX;
	ctl->max_payload = ctl->msg_cap - sizeof(struct ctl_hdr);
	rc = ft__sock_listen_port(ctl->who, p->bind_host, p->publish_host,
				  p->port != NULL ? p->port : "0", 64, &ctl->listen_fd, ctl->addr,
				  sizeof(ctl->addr));
	if (rc == 0)
		ft__fd_own(ctl->listen_fd); /* a forked child closes it (fdreg.h) */
	/* an unresolvable bind host is the configuration's fault */
	return rc == -FT_EINVAL ? -FT_ECONFIG : rc;
}

void ft__ctl_drop(struct ft__ctl *ctl, int i)
{
	struct ft__ctl_link *l = &ctl->links[i];

	if (l->fd < 0)
		return;
	ft__fd_close(l->fd);
	free(l->in);
	free(l->outbox);
	*l = (struct ft__ctl_link){.fd = -1, .peer = -1};
}

void ft__ctl_close(struct ft__ctl *ctl)
{
	for (int i = 0; i < ctl->nlinks; i++)
		ft__ctl_drop(ctl, i);
	free(ctl->links);
	ctl->links = NULL;
	ctl->nlinks = 0;
	if (ctl->listen_fd >= 0)
		ft__fd_close(ctl->listen_fd);
	ctl->listen_fd = -1;
	ft__wipe(ctl->token, sizeof(ctl->token));
}

/* A stranger: accepted here, its hello not passed yet. */
static bool is_stranger(const struct ft__ctl_link *l)
{
	return l->fd >= 0 && !l->ours && l->peer < 0;
}

/* Open links of one kind: connected here (ours), accepted and passed, strangers. */
static int count_kind(const struct ft__ctl *ctl, bool ours, bool stranger)
{
	int n = 0;

	for (int i = 0; i < ctl->nlinks; i++) {
		const struct ft__ctl_link *l = &ctl->links[i];
		if (l->fd >= 0 && l->ours == ours && is_stranger(l) == stranger)
			n++;
	}
	return n;
}

static void stranger_warn(struct ft__ctl *ctl, const char *what, int claim)
{
	if (claim >= 0)
		ft__warn_gated(&ctl->warn, "%s: %s (it claimed rank %d)", ctl->who, what, claim);
	else
		ft__warn_gated(&ctl->warn, "%s: %s", ctl->who, what);
}

/* Takes fd as a link of its kind: its index, or -1 (fd closed) when that
 * kind's share of the slots is taken or no memory is left. */
static int link_new(struct ft__ctl *ctl, int fd, int peer, uint32_t gen, bool ours)
{
	int64_t now = ft__now_ms();
	int cap = ours ? ctl->out_cap : ctl->stranger_cap;

	if (count_kind(ctl, ours, !ours) >= cap) {
		ft__fd_close(fd);
		return -1;
	}
	for (int i = 0; i < ctl->nlinks; i++) {
		unsigned char *in;
		if (ctl->links[i].fd >= 0)
			continue;
		in = malloc(ctl->msg_cap);
		if (in == NULL)
			break;
		ctl->links[i] = (struct ft__ctl_link){.fd = fd, .peer = peer, .gen = gen,
						      .opened_ms = now, .last_rx_ms = now, .in = in,
						      .ours = ours};
		return i;
	}
	ft__fd_close(fd);
	return -1;
}

static struct ctl_hdr make_hdr(const struct ft__ctl *ctl, enum ft__ctl_type type, uint32_t gen,
			       size_t len)
{
	return (struct ctl_hdr){.magic = CTL_MAGIC, .type = (uint16_t)type, .len = (uint16_t)len,
				.gen = gen, .from = ctl->rank};
}

void ft__ctl_frame(const struct ft__ctl *ctl, enum ft__ctl_type type, uint32_t gen, size_t len,
		   unsigned char hdr[FT__CTL_HDR_BYTES])
{
	struct ctl_hdr h = make_hdr(ctl, type, gen, len);

	memcpy(hdr, &h, sizeof(h));
}

/* Writes n pieces to link i in one call, all or nothing: 0, or -FT_EPEERFAILED. */
static int write_all(struct ft__ctl_link *l, struct iovec *iov, int n)
{
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
	size_t total = 0;
	ssize_t w;

	for (int k = 0; k < n; k++)
		total += iov[k].iov_len;
	do
		w = sendmsg(l->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (w < 0 && errno == EINTR);
	return w == (ssize_t)total ? 0 : -FT_EPEERFAILED;
}

/* What a link connected here may hold for its peer's ACK: a few of the
 * largest messages (the owner's first sends on a link follow the hello at
 * once: a failed set, a heartbeat, a ballot). */
static size_t outbox_cap(const struct ft__ctl *ctl)
{
	return 4 * ctl->msg_cap > FT__CTL_OUTBOX_MIN ? 4 * ctl->msg_cap : FT__CTL_OUTBOX_MIN;
}

int ft__ctl_send(struct ft__ctl *ctl, int i, enum ft__ctl_type type, uint32_t gen,
		 const void *payload, size_t len)
{
	struct ft__ctl_link *l = &ctl->links[i];
	struct ctl_hdr h = make_hdr(ctl, type, gen, len);
	struct iovec iov[2] = {{&h, sizeof(h)}, {(void *)payload, len}};

	if (len > ctl->max_payload)
		return -FT_EINVAL;
	if (l->fd < 0 || l->connecting)
		return -FT_EPEERFAILED;
	if (l->ours && !l->proved) {
		/* nothing but the PROOF may lead: held until the ACK's challenge */
		if (l->outbox == NULL && (l->outbox = malloc(outbox_cap(ctl))) == NULL)
			return -FT_EPEERFAILED;
		if (l->out_len + sizeof(h) + len > outbox_cap(ctl))
			return -FT_EPEERFAILED;
		memcpy(l->outbox + l->out_len, &h, sizeof(h));
		if (len > 0)
			memcpy(l->outbox + l->out_len + sizeof(h), payload, len);
		l->out_len += sizeof(h) + len;
		return 0;
	}
	return write_all(l, iov, len > 0 ? 2 : 1);
}

/* The connecting side's hello on link i, to original rank `to`, sealed under
 * the token; kept for the proof. */
static int send_hello(struct ft__ctl *ctl, int i, int to, uint32_t gen)
{
	struct ft__ctl_link *l = &ctl->links[i];
	struct ctl_hello hello;
	struct ctl_hdr h = make_hdr(ctl, FT__CTL_HELLO, gen, sizeof(hello));
	struct iovec iov[2] = {{&h, sizeof(h)}, {&hello, offsetof(struct ctl_hello, mac)}};
	int rc;

	memset(&hello, 0, sizeof(hello));
	snprintf(hello.job_id, sizeof(hello.job_id), "%s", ctl->job_id);
	hello.to = to;
	if ((rc = ft__auth_random(hello.nonce, sizeof(hello.nonce))) != 0)
		return rc;
	ft__auth_mac(ctl->token, HELLO_LABEL, iov, 2, hello.mac);
	memcpy(l->hello, &h, sizeof(h));
	memcpy(l->hello + sizeof(h), &hello, sizeof(hello));
	l->await_ack = true;
	iov[0] = (struct iovec){l->hello, sizeof(l->hello)};
	return write_all(l, iov, 1);
}

int ft__ctl_connect(struct ft__ctl *ctl, const char *addr, int to, uint32_t gen, int timeout_ms)
{
	struct ft__sock_addr a;
	int fd, i, rc;

	if (ft__sock_resolve(addr, &a) != 0)
		return -FT_EPEERFAILED;
	rc = ft__sock_connect(&a, &ctl->sock_opts, ft__now_ms() + timeout_ms, &fd);
	if (rc != 0)
		return rc == -FT_ECONNREFUSED || rc == -FT_ETIMEDOUT ? rc : -FT_EPEERFAILED;
	ft__fd_own(fd);
	i = link_new(ctl, fd, to, gen, true);
	if (i < 0)
		return -FT_ENOMEM;
	if ((rc = send_hello(ctl, i, to, gen)) != 0) {
		ft__ctl_drop(ctl, i);
		return rc == -FT_EIO ? rc : -FT_EPEERFAILED;
	}
	return i;
}

int ft__ctl_connect_start(struct ft__ctl *ctl, const char *addr, int to, uint32_t gen)
{
	struct ft__sock_addr a;
	int fd, i;

	if (ft__sock_resolve(addr, &a) != 0)
		return -FT_EPEERFAILED;
	fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		/* no descriptor or buffer here: says nothing of the peer */
		ctl->short_err = ft__err_local(errno);
		ctl->short_ms = ft__now_ms();
		return ctl->short_err;
	}
	ft__fd_own(fd);
	ft__sock_tune(fd, &ctl->sock_opts);
	if (connect(fd, (const struct sockaddr *)&a.ss, a.len) != 0 && errno != EINPROGRESS) {
		/* no local port left is a shortage here too */
		int rc = errno == EADDRNOTAVAIL || errno == EAGAIN ? -FT_ENOMEM
								   : ft__sock_error(errno);
		ft__fd_close(fd);
		return rc;
	}
	i = link_new(ctl, fd, to, gen, true);
	if (i < 0)
		return -FT_ENOMEM;
	ctl->links[i].connecting = true;
	return i;
}

/* A connecting link: 1 once connected (hello sent), 0 not yet, or the error. */
static int finish_connect(struct ft__ctl *ctl, int i)
{
	struct ft__ctl_link *l = &ctl->links[i];
	struct pollfd pfd = {.fd = l->fd, .events = POLLOUT};
	int err = 0;
	socklen_t el = sizeof(err);

	if (poll(&pfd, 1, 0) != 1)
		return 0;
	if (getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
		err = errno;
	if (err != 0)
		return ft__sock_error(err);
	l->connecting = false;
	l->opened_ms = l->last_rx_ms = ft__now_ms();
	return send_hello(ctl, i, l->peer, l->gen) == 0 ? 1 : -FT_EPEERFAILED;
}

/* What a stranger may send before its hello is judged: the hello itself;
 * once challenged, before its proof is judged: the proof. */
#define HELLO_BYTES (sizeof(struct ctl_hdr) + sizeof(struct ctl_hello))
#define PROOF_BYTES (sizeof(struct ctl_hdr) + sizeof(struct ctl_proof))

int ft__ctl_sweep(struct ft__ctl *ctl, int64_t now_ms)
{
	int64_t next = -1;

	for (int i = 0; i < ctl->nlinks; i++) {
		struct ft__ctl_link *l = &ctl->links[i];
		int64_t end = l->opened_ms + ctl->hello_ms;
		if (!is_stranger(l))
			continue;
		if (now_ms >= end) {
			stranger_warn(ctl, "closed a control link that sent no hello in time", -1);
			ft__ctl_drop(ctl, i);
		} else if (next < 0 || end - now_ms < next) {
			next = end - now_ms;
		}
	}
	return (int)next;
}

/* Whether stranger l has sent a whole hello (left in the socket, so that
 * the owner's poll still sees it), in *whole; false when it closed. */
static bool stranger_peek(const struct ft__ctl_link *l, bool *whole)
{
	unsigned char buf[HELLO_BYTES];
	ssize_t n;

	*whole = l->challenged || l->have >= HELLO_BYTES;
	if (*whole)
		return true;
	do
		n = recv(l->fd, buf, HELLO_BYTES - l->have, MSG_PEEK | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n > 0)
		*whole = l->have + (size_t)n >= HELLO_BYTES;
	return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

/* Makes room for one stranger: closes the oldest one that has not sent a
 * whole hello (those that have are judged first, by the owner's next read);
 * false when every stranger has. */
static bool stranger_evict(struct ft__ctl *ctl)
{
	int oldest = -1;

	for (int i = 0; i < ctl->nlinks; i++) {
		struct ft__ctl_link *l = &ctl->links[i];
		bool whole;
		if (!is_stranger(l))
			continue;
		if (!stranger_peek(l, &whole)) {
			ft__ctl_drop(ctl, i);
			return true;
		}
		if (!whole &&
		    (oldest < 0 || l->opened_ms < ctl->links[oldest].opened_ms))
			oldest = i;
	}
	if (oldest < 0)
		return false;
	stranger_warn(ctl, "too many control links without a hello: closed the oldest", -1);
	ft__ctl_drop(ctl, oldest);
	return true;
}

#define SHORT_RECENT_MS 10000 /* a shortage this recent explains being left out */

int ft__ctl_own_cause(const struct ft__ctl *ctl, int err)
{
	if (err == -FT_EEXCLUDED && ctl->short_err != 0 &&
	    ft__now_ms() - ctl->short_ms < SHORT_RECENT_MS)
		return ctl->short_err;
	return err;
}

#define ACCEPT_REST_FULL_MS 20   /* every slot holds a whole hello: soon judged */
#define ACCEPT_REST_SHORT_MS 100 /* no descriptor or memory: a shortage lasts */

void ft__ctl_accept(struct ft__ctl *ctl)
{
	int64_t now = ft__now_ms();

	if (now < ctl->accept_after_ms)
		return;
	(void)ft__ctl_sweep(ctl, now);
	for (;;) {
		int fd;
		/* over the share: what waits stays in the listen queue until a
		 * stranger's hello is judged */
		if (count_kind(ctl, false, true) >= ctl->stranger_cap && !stranger_evict(ctl)) {
			ctl->accept_after_ms = now + ACCEPT_REST_FULL_MS;
			return;
		}
		fd = accept4(ctl->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && ft__err_local(errno) != -FT_EIO) {
			/* this rank's shortage, said as itself: the links it has
			 * stay, and no peer is the worse for it */
			ft__warn_gated(&ctl->short_warn, "%s: cannot accept a control link: %s",
				       ctl->who, strerror(errno));
			ctl->short_err = ft__err_local(errno);
			ctl->short_ms = now;
			ctl->accept_after_ms = now + ACCEPT_REST_SHORT_MS;
			return;
		}
		if (fd < 0)
			return;
		ft__fd_own(fd);
		ft__sock_tune(fd, &ctl->sock_opts);
		link_new(ctl, fd, -1, 0, false);
	}
}

/* Whether a hello may open a link to this rank, its proof to come: 0,
 * -FT_EAUTH (another job or token, or the nonce of a link already proved),
 * -FT_EPROTO (not for this rank or world). */
static int hello_verdict(struct ft__ctl *ctl, const struct ctl_hdr *h,
			 const struct ctl_hello *hello)
{
	struct iovec iov[2] = {{(void *)h, sizeof(*h)},
			       {(void *)hello, offsetof(struct ctl_hello, mac)}};

	if (!ft__auth_mac_ok(ctl->token, HELLO_LABEL, iov, 2, hello->mac) ||
	    strncmp(hello->job_id, ctl->job_id, sizeof(hello->job_id)) != 0)
		return -FT_EAUTH;
	if (h->from < 0 || h->from >= ctl->world_size || h->from == ctl->rank ||
	    hello->to != ctl->rank)
		return -FT_EPROTO;
	return ft__auth_seen_has(&ctl->seen, hello->nonce) ? -FT_EAUTH : 0;
}

/* Judges the first message of a link accepted here and answers it if it is
 * a whole hello: 0 when it passed (ACK sent with the challenge, the hello
 * kept for the proof), else the link is closed. */
static int take_hello(struct ft__ctl *ctl, int i, const struct ctl_hdr *h, const unsigned char *p)
{
	struct ft__ctl_link *l = &ctl->links[i];
	struct ctl_hello hello;
	struct ctl_ack ack = {0};
	struct ctl_hdr ah;
	int rc;

	if (h->type != FT__CTL_HELLO || h->len != sizeof(hello)) {
		stranger_warn(ctl, "refused a control link that did not open with a hello", -1);
		ft__ctl_drop(ctl, i);
		return -FT_EPROTO;
	}
	memcpy(&hello, p, sizeof(hello));
	ack.status = rc = hello_verdict(ctl, h, &hello);
	if (rc == 0 && count_kind(ctl, false, false) >= ctl->in_cap) {
		/* members only get here, and the share holds all a world needs */
		ft__error("%s: every slot for a member's control link is taken: refused rank %d's",
			  ctl->who, h->from);
		ft__ctl_drop(ctl, i);
		return -FT_ENOMEM;
	}
	if (rc == 0 && (rc = ft__auth_random(ack.challenge, sizeof(ack.challenge))) != 0) {
		ft__ctl_drop(ctl, i);
		return rc;
	}
	ah = make_hdr(ctl, FT__CTL_ACK, h->gen, sizeof(ack));
	struct iovec iov[3] = {{hello.nonce, sizeof(hello.nonce)}, {&ah, sizeof(ah)},
			       {&ack, offsetof(struct ctl_ack, mac)}};
	ft__auth_mac(ctl->token, ACK_LABEL, iov, 3, ack.mac);
	iov[0] = (struct iovec){&ah, sizeof(ah)};
	iov[1] = (struct iovec){&ack, sizeof(ack)};
	if (rc == 0) {
		/* alone, at once: the connector needs the challenge to go on */
		if (write_all(l, iov, 2) != 0) {
			ft__ctl_drop(ctl, i);
			return -FT_EPEERFAILED;
		}
		memcpy(l->challenge, ack.challenge, sizeof(l->challenge));
		memcpy(l->hello, h, sizeof(*h));
		memcpy(l->hello + sizeof(*h), p, sizeof(hello));
		l->challenged = true;
		return 0;
	}
	(void)write_all(l, iov, 2);
	if (rc == -FT_EAUTH && h->from >= 0 && h->from < ctl->world_size && h->from != ctl->rank)
		ctl->refused_claim = h->from;
	stranger_warn(ctl, rc == -FT_EAUTH ? "refused a control hello: wrong job or token, or "
					     "a replayed hello"
					   : "refused a control hello not for this rank, or from "
					     "outside the world",
		      h->from);
	ft__ctl_drop(ctl, i);
	return rc;
}

/* The PROOF of the hello kept on link i for its challenge: 0 when it passes
 * (its nonce remembered), else the link is closed. A proof that fails
 * names no one: anyone may copy a hello, so it is no refusal of a rank. */
static int take_proof(struct ft__ctl *ctl, int i, const struct ctl_hdr *h, const unsigned char *p)
{
	struct ft__ctl_link *l = &ctl->links[i];
	struct ctl_hdr hh;
	struct ctl_hello hello;
	struct ctl_proof proof;

	memcpy(&hh, l->hello, sizeof(hh));
	memcpy(&hello, l->hello + sizeof(hh), sizeof(hello));
	if (h->type == FT__CTL_PROOF && h->len == sizeof(proof) && h->from == hh.from &&
	    h->gen == hh.gen) {
		struct iovec iov[3] = {{l->hello, sizeof(l->hello)},
				       {l->challenge, sizeof(l->challenge)},
				       {(void *)h, sizeof(*h)}};
		memcpy(&proof, p, sizeof(proof));
		if (ft__auth_mac_ok(ctl->token, PROOF_LABEL, iov, 3, proof.mac) &&
		    ft__auth_seen_add(&ctl->seen, hello.nonce) == 0)
			return 0;
	}
	stranger_warn(ctl, "closed a control link whose hello was not proved (a copy?)", -1);
	ft__ctl_drop(ctl, i);
	return -FT_EAUTH;
}

/* The peer's answer to our hello on link i: its status, or -FT_EAUTH when it
 * does not prove the token, -FT_EPROTO when it is no answer. Accepted: the
 * PROOF of its challenge and what waited for it go out in one write. */
static int take_ack(struct ft__ctl *ctl, int i, const struct ctl_hdr *h, const unsigned char *p)
{
	struct ft__ctl_link *l = &ctl->links[i];
	struct ctl_ack ack;
	struct ctl_proof proof;
	struct ctl_hdr ph = make_hdr(ctl, FT__CTL_PROOF, l->gen, sizeof(proof));
	int rc;

	if (h->type != FT__CTL_ACK || h->len != sizeof(ack))
		return -FT_EPROTO;
	memcpy(&ack, p, sizeof(ack));
	/* our hello's nonce: its place in the kept hello */
	const unsigned char *nonce = l->hello + sizeof(struct ctl_hdr) +
				     offsetof(struct ctl_hello, nonce);
	struct iovec iov[3] = {{(void *)nonce, FT__AUTH_NONCE}, {(void *)h, sizeof(*h)},
			       {&ack, offsetof(struct ctl_ack, mac)}};
	if (!ft__auth_mac_ok(ctl->token, ACK_LABEL, iov, 3, ack.mac))
		return -FT_EAUTH;
	rc = ack.status == 0 || ack.status == -FT_EAUTH || ack.status == -FT_EPROTO ? ack.status
										     : -FT_EPROTO;
	if (rc != 0)
		return rc;
	iov[0] = (struct iovec){l->hello, sizeof(l->hello)};
	iov[1] = (struct iovec){ack.challenge, sizeof(ack.challenge)};
	iov[2] = (struct iovec){&ph, sizeof(ph)};
	ft__auth_mac(ctl->token, PROOF_LABEL, iov, 3, proof.mac);
	iov[0] = (struct iovec){&ph, sizeof(ph)};
	iov[1] = (struct iovec){&proof, sizeof(proof)};
	iov[2] = (struct iovec){l->outbox, l->out_len};
	if (write_all(l, iov, l->out_len > 0 ? 3 : 2) != 0)
		return -FT_EPEERFAILED;
	l->proved = true;
	free(l->outbox);
	l->outbox = NULL;
	l->out_len = 0;
	return 0;
}

int ft__ctl_next(struct ft__ctl *ctl, int i, struct ft__ctl_msg *m)
{
	struct ft__ctl_link *l = &ctl->links[i];

	if (l->fd >= 0 && l->connecting) {
		int rc = finish_connect(ctl, i);
		if (rc <= 0)
			return rc;
	}
	for (;;) {
		struct ctl_hdr h;
		ssize_t n;

		if (l->fd < 0)
			return 0;
		/* messages are read in place from `used` on; the buffer is
		 * compacted only when it must take more bytes (a bulk stream of
		 * small messages would otherwise move it at every message) */
		if (l->have - l->used >= sizeof(h)) {
			memcpy(&h, l->in + l->used, sizeof(h));
			bool want_proof = l->challenged;
			if (is_stranger(l) &&
			    (h.magic != CTL_MAGIC ||
			     h.type != (want_proof ? FT__CTL_PROOF : FT__CTL_HELLO) ||
			     h.len != (want_proof ? sizeof(struct ctl_proof)
						  : sizeof(struct ctl_hello)))) {
				/* judged on its header: no more of it is read */
				stranger_warn(ctl, want_proof ? "closed a control link that did "
								"not prove its hello"
							      : "refused a control link that did "
								"not open with a hello", -1);
				ft__ctl_drop(ctl, i);
				return 0;
			}
			if (h.magic != CTL_MAGIC || sizeof(h) + h.len > ctl->msg_cap ||
			    (h.type == FT__CTL_NOTICE && h.len % sizeof(int32_t) != 0) ||
			    (h.type == FT__CTL_GROW && h.len != sizeof(uint64_t)))
				return -FT_EPROTO;
			if (l->have - l->used >= sizeof(h) + h.len) {
				const unsigned char *p = l->in + l->used + sizeof(h);
				l->used += sizeof(h) + h.len;
				l->last_rx_ms = ft__now_ms();
				if (l->peer < 0 && !l->challenged) {
					if (take_hello(ctl, i, &h, p) != 0)
						return 0;
					continue; /* its proof may be here already */
				} else if (l->peer < 0) {
					struct ctl_hdr hh;
					if (take_proof(ctl, i, &h, p) != 0)
						return 0;
					/* proved: the link is its sender's, and the owner
					 * hears of its hello now */
					memcpy(&hh, l->hello, sizeof(hh));
					l->challenged = false;
					l->peer = hh.from;
					l->gen = hh.gen;
					*m = (struct ft__ctl_msg){.type = hh.type, .gen = hh.gen,
								  .from = hh.from, .len = hh.len,
								  .payload = l->hello + sizeof(hh)};
					return 1;
				} else if (l->await_ack && !l->proved) {
					int rc = take_ack(ctl, i, &h, p);
					if (rc != 0) {
						ft__warn("%s: rank %d refused our control link: %s",
							 ctl->who, l->peer, ft_strerror(rc));
						return rc;
					}
					continue;
				} else if (h.type == FT__CTL_ACK) {
					/* answers our hello only, once: never the owner's */
					return -FT_EPROTO;
				} else if (l->await_ack) {
					/* the peer sends nothing between its ACK and our
					 * PROOF: a message now says the PROOF passed */
					l->await_ack = false;
				}
				*m = (struct ft__ctl_msg){.type = h.type, .gen = h.gen, .from = h.from,
							  .len = h.len, .payload = p};
				return 1;
			}
		}
		if (l->used > 0) {
			memmove(l->in, l->in + l->used, l->have - l->used);
			l->have -= l->used;
			l->used = 0;
		}
		/* a stranger is read no further than a hello */
		n = recv(l->fd, l->in + l->have,
			 (!is_stranger(l) ? ctl->msg_cap
			  : l->challenged ? PROOF_BYTES : HELLO_BYTES) - l->have, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno == ECONNRESET)) {
			if (is_stranger(l)) {
				ft__ctl_drop(ctl, i);
				return 0;
			}
			/* before its answer to our hello, a close proves nothing */
			return l->await_ack ? -FT_EBUSY : -FT_EPEERFAILED;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -FT_EIO;
		}
		l->have += (size_t)n;
	}
}

int ft__ctl_pollfds(struct ft__ctl *ctl, struct pollfd *pfd, int *idx)
{
	int n = 0;

	(void)ft__ctl_sweep(ctl, ft__now_ms());
	pfd[n++] = (struct pollfd){.fd = ctl->listen_fd,
				   .events = ft__now_ms() < ctl->accept_after_ms ? 0 : POLLIN};
	for (int i = 0; i < ctl->nlinks; i++)
		if (ctl->links[i].fd >= 0) {
			if (idx != NULL)
				idx[n - 1] = i;
			pfd[n++] = (struct pollfd){.fd = ctl->links[i].fd,
						   .events = ctl->links[i].connecting ? POLLOUT
										      : POLLIN};
		}
	return n;
}

/*
 * Whether link l's silence is a loss on the path, not a silent peer: the
 * kernel has received its segments out of order since the last whole
 * message was read (they wait behind a lost one that TCP retransmits,
 * backing off), and the silence is under FT__CTL_LOSS_SPAN detect
 * timeouts. A stopped peer's kernel fills the hole and its bytes are read,
 * a killed one's closes the link; either way nothing waits out of order
 * any more, and silence is judged at the detect timeout as ever. Under
 * 1-2% loss, a heartbeat lost twice once held a healthy neighbour's bytes
 * for 1.4 s, and it was declared; on a loaded host (make test), the
 * neighbour's own heartbeats can pause meanwhile, so the last out-of-order
 * arrival may be older than a detect timeout.
 */
bool ft__ctl_held_by_loss(struct ft__ctl_link *l, int64_t now, int64_t to)
{
	uint32_t n;

	if (ft__sock_rcv_ooo(l->fd, &n) == 0 && n != l->ooo_seen) {
		l->ooo_seen = n;
		l->ooo_ms = now;
	}
	return l->ooo_ms > l->last_rx_ms && now - l->last_rx_ms < FT__CTL_LOSS_SPAN * to;
}
