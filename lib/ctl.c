/* ctl.c: control links: the listener, connect and accept, the hello, message framing, reading and writing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ctl.h"
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

struct ctl_hello {
	char job_id[FT_NAME_MAX];
	char token[FT_NAME_MAX];
	int32_t to;
	int32_t reserved;
};

/* Control links need no keepalive (heartbeats do that) nor large buffers. */
static const struct ft__sock_opts ctl_sock_opts = {.keepalive = false, .buffer = 0};

int ft__ctl_open(struct ft__ctl *ctl, const struct ft__ctl_params *p)
{
	int rc;

	memset(ctl, 0, sizeof(*ctl));
	ctl->listen_fd = -1;
	for (int i = 0; i < FT__CTL_LINKS; i++)
		ctl->links[i].fd = -1;
	ctl->rank = p->rank;
	ctl->world_size = p->world_size;
	snprintf(ctl->job_id, sizeof(ctl->job_id), "%s", p->job_id);
	snprintf(ctl->token, sizeof(ctl->token), "%s", p->token);
	ctl->msg_cap = sizeof(struct ctl_hdr) + sizeof(struct ctl_hello) +
		       (size_t)p->world_size * sizeof(int32_t);
	if (ctl->msg_cap > sizeof(struct ctl_hdr) + UINT16_MAX)
		ctl->msg_cap = sizeof(struct ctl_hdr) + UINT16_MAX;
	ctl->max_payload = ctl->msg_cap - sizeof(struct ctl_hdr);
	rc = ft__sock_listen("detector", p->bind_host, p->publish_host, 64, &ctl->listen_fd,
			     ctl->addr, sizeof(ctl->addr));
	/* an unresolvable bind host is the configuration's fault */
	return rc == -FT_EINVAL ? -FT_ECONFIG : rc;
}

void ft__ctl_drop(struct ft__ctl *ctl, int i)
{
	struct ft__ctl_link *l = &ctl->links[i];

	if (l->fd < 0)
		return;
	close(l->fd);
	free(l->in);
	*l = (struct ft__ctl_link){.fd = -1, .peer = -1};
}

void ft__ctl_close(struct ft__ctl *ctl)
{
	for (int i = 0; i < FT__CTL_LINKS; i++)
		ft__ctl_drop(ctl, i);
	if (ctl->listen_fd >= 0)
		close(ctl->listen_fd);
	ctl->listen_fd = -1;
}

/* Takes fd as a link: its index, or -1 (fd closed) when no slot or memory is left. */
static int link_new(struct ft__ctl *ctl, int fd, int peer, uint32_t gen)
{
	int64_t now = ft__now_ms();

	for (int i = 0; i < FT__CTL_LINKS; i++) {
		unsigned char *in;
		if (ctl->links[i].fd >= 0)
			continue;
		in = malloc(ctl->msg_cap);
		if (in == NULL)
			break;
		ctl->links[i] = (struct ft__ctl_link){.fd = fd, .peer = peer, .gen = gen,
						      .opened_ms = now, .last_rx_ms = now, .in = in};
		return i;
	}
	close(fd);
	return -1;
}

int ft__ctl_send(struct ft__ctl *ctl, int i, enum ft__ctl_type type, uint32_t gen,
		 const void *payload, size_t len)
{
	struct ctl_hdr h = {.magic = CTL_MAGIC, .type = (uint16_t)type, .len = (uint16_t)len,
			    .gen = gen, .from = ctl->rank};
	struct iovec iov[2] = {{&h, sizeof(h)}, {(void *)payload, len}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = len > 0 ? 2 : 1};
	ssize_t n;

	if (len > ctl->max_payload)
		return -FT_EINVAL;
	if (ctl->links[i].fd < 0)
		return -FT_EPEERFAILED;
	do
		n = sendmsg(ctl->links[i].fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)(sizeof(h) + len) ? 0 : -FT_EPEERFAILED;
}

int ft__ctl_connect(struct ft__ctl *ctl, const char *addr, int to, uint32_t gen, int timeout_ms)
{
	struct ft__sock_addr a;
	struct ctl_hello hello;
	int fd, i;

	if (ft__sock_resolve(addr, &a) != 0 ||
	    ft__sock_connect(&a, &ctl_sock_opts, ft__now_ms() + timeout_ms, &fd) != 0)
		return -FT_EPEERFAILED;
	i = link_new(ctl, fd, to, gen);
	if (i < 0)
		return -FT_ENOMEM;
	memset(&hello, 0, sizeof(hello));
	snprintf(hello.job_id, sizeof(hello.job_id), "%s", ctl->job_id);
	snprintf(hello.token, sizeof(hello.token), "%s", ctl->token);
	hello.to = to;
	if (ft__ctl_send(ctl, i, FT__CTL_HELLO, gen, &hello, sizeof(hello)) != 0) {
		ft__ctl_drop(ctl, i);
		return -FT_EPEERFAILED;
	}
	return i;
}

void ft__ctl_accept(struct ft__ctl *ctl)
{
	for (;;) {
		int fd = accept4(ctl->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		ft__sock_tune(fd, &ctl_sock_opts);
		link_new(ctl, fd, -1, 0);
	}
}

/* Whether a hello may open a link to this rank. */
static bool hello_ok(const struct ft__ctl *ctl, const struct ctl_hdr *h, const unsigned char *p)
{
	struct ctl_hello hello;

	if (h->type != FT__CTL_HELLO || h->len != sizeof(hello) || h->from < 0 ||
	    h->from >= ctl->world_size || h->from == ctl->rank)
		return false;
	memcpy(&hello, p, sizeof(hello));
	if (strncmp(hello.job_id, ctl->job_id, sizeof(hello.job_id)) != 0 ||
	    strncmp(hello.token, ctl->token, sizeof(hello.token)) != 0 || hello.to != ctl->rank) {
		ft__warn("detector: refused a control link claiming rank %d (wrong job, token or rank)",
			 h->from);
		return false;
	}
	return true;
}

int ft__ctl_next(struct ft__ctl *ctl, int i, struct ft__ctl_msg *m)
{
	struct ft__ctl_link *l = &ctl->links[i];

	for (;;) {
		struct ctl_hdr h;
		ssize_t n;

		if (l->fd < 0)
			return 0;
		if (l->used > 0) {
			memmove(l->in, l->in + l->used, l->have - l->used);
			l->have -= l->used;
			l->used = 0;
		}
		if (l->have >= sizeof(h)) {
			memcpy(&h, l->in, sizeof(h));
			if (h.magic != CTL_MAGIC || sizeof(h) + h.len > ctl->msg_cap ||
			    (h.type == FT__CTL_NOTICE && h.len % sizeof(int32_t) != 0))
				return -FT_EPROTO;
			if (l->have >= sizeof(h) + h.len) {
				const unsigned char *p = l->in + sizeof(h);
				l->used = sizeof(h) + h.len;
				l->last_rx_ms = ft__now_ms();
				if (l->peer < 0) {
					if (!hello_ok(ctl, &h, p)) {
						ft__ctl_drop(ctl, i);
						return 0;
					}
					l->peer = h.from;
					l->gen = h.gen;
				}
				*m = (struct ft__ctl_msg){.type = h.type, .gen = h.gen, .from = h.from,
							  .len = h.len, .payload = p};
				return 1;
			}
		}
		n = recv(l->fd, l->in + l->have, ctl->msg_cap - l->have, MSG_DONTWAIT);
		if (n == 0)
			return -FT_EPEERFAILED;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -FT_EIO;
		}
		l->have += (size_t)n;
	}
}

int ft__ctl_pollfds(const struct ft__ctl *ctl, struct pollfd *pfd, int *idx)
{
	int n = 0;

	pfd[n++] = (struct pollfd){.fd = ctl->listen_fd, .events = POLLIN};
	for (int i = 0; i < FT__CTL_LINKS; i++)
		if (ctl->links[i].fd >= 0) {
			idx[n - 1] = i;
			pfd[n++] = (struct pollfd){.fd = ctl->links[i].fd, .events = POLLIN};
		}
	return n;
}
