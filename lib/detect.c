/* detect.c: the failure detector: heartbeats on control links, failure notices, the next view's settle. */
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "detect.h"
#include "internal.h"

/*
 * One thread per communicator (shrink and rejoin policies), apart from the
 * data path:
 *
 * - Control links: a small TCP connection to each ring neighbour of the
 *   current view (this rank connects to its right neighbour and accepts from
 *   its left), opened with a hello (job, token, generation, ranks). Both ends
 *   send a heartbeat every heartbeat_ms.
 * - Detection: the end of a control link without a goodbye (the kernel closes
 *   a dead process's sockets), a refused connection, or detect_timeout_ms of
 *   silence marks the neighbour failed. A rank that leaves on purpose
 *   (ft_finalize, a newer view) says goodbye first.
 * - Notice: the failed set (original ranks, cumulative) goes to both
 *   neighbours whenever it grows; each rank forwards only what is new to it,
 *   so a notice crosses each link at most once per failure and the ring carries
 *   it both ways around the hole.
 * - Settle: on its first notice the detector freezes what the main thread has
 *   finished (the first op whose result it lacks), publishes it with its
 *   addresses in the rendezvous for generation g+1, and polls until the
 *   coordinator (lowest candidate: members of g not known failed) writes the
 *   view. A coordinator that dies or hangs is itself detected, which makes the
 *   next candidate the coordinator; after 2 x detect_timeout_ms the coordinator
 *   settles with whoever has published. A view that names a rank failed in the
 *   meantime is followed at once by the next generation.
 * - The main thread learns through a flag it checks while it waits (and a
 *   condition variable when it waits for the view); it adopts the view itself.
 */

#define CTL_MAGIC 0x6c637466u /* "ftcl" */
#define MAX_CONNS 16
#define HELLO_WAIT_MS 1000

enum ctl_type { CTL_HELLO = 1, CTL_HB, CTL_NOTICE, CTL_BYE };

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

struct conn {
	int fd;                 /* -1: free */
	int peer;               /* original rank, -1 until its hello */
	uint32_t gen;
	int64_t opened_ms, last_rx_ms;
	size_t have;
	unsigned char *in;
};

struct ft__det {
	struct ft__det_params p;
	char job_id[FT_NAME_MAX], token[FT_NAME_MAX], data_addr[FT__ADDR_MAX];
	int listen_fd;
	char addr[FT__CTRL_MAX];
	int cmd[2];             /* main thread -> detector: 's' stop, 'x' suspect */
	pthread_t thread;
	bool started;
	size_t msg_cap;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	atomic_bool pending;
	/* under lock */
	bool frozen, recovering, excluded, stop;
	int fatal;
	uint64_t next_op;
	bool *failed;           /* by original rank */
	struct ft__view ready;  /* latest view this detector settled on */
	int suspect;
	uint64_t known_ns, settled_ns;

	/* detector thread only */
	uint32_t gen;
	int *members, size;
	int left, right;        /* original ranks of the neighbours, -1 none */
	int left_ci, right_ci;  /* their control links in conns[], -1 none */
	bool left_bye, right_bye;
	int64_t view_ms, next_hb_ms;
	uint32_t target;        /* generation being settled, 0 none */
	int64_t recover_ms;
	bool published;
	bool out;               /* excluded: only waits to be stopped */
	struct conn conns[MAX_CONNS];
};

static void lock(struct ft__det *d)
{
	pthread_mutex_lock(&d->lock);
}

static void unlock(struct ft__det *d)
{
	pthread_mutex_unlock(&d->lock);
}

static int split_hostport(const char *addr, char *host, size_t hlen, char *port, size_t plen)
{
	const char *colon = strrchr(addr, ':');

	if (colon == NULL || (size_t)(colon - addr) >= hlen || strlen(colon + 1) >= plen)
		return -FT_EINVAL;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = '\0';
	snprintf(port, plen, "%s", colon + 1);
	return 0;
}

static int open_listener(struct ft__det *d)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *res;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[NI_MAXHOST], port[NI_MAXSERV];
	const char *bind_host = d->p.bind_host[0] != '\0' ? d->p.bind_host : "127.0.0.1";
	int fd, one = 1;

	if (getaddrinfo(bind_host, "0", &hints, &res) != 0) {
		ft__error("detector: cannot resolve %s", bind_host);
		return -FT_ECONFIG;
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 64) != 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) != 0 ||
	    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
		ft__error("detector: cannot listen on %s: %s", bind_host, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(res);
		return -FT_EIO;
	}
	freeaddrinfo(res);
	d->listen_fd = fd;
	snprintf(d->addr, sizeof(d->addr), strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
	return 0;
}

/* ---- connections ---- */

static int conn_new(struct ft__det *d, int fd, int peer, uint32_t gen)
{
	int64_t now = ft__now_ms();

	for (int i = 0; i < MAX_CONNS; i++) {
		struct conn *c = &d->conns[i];
		if (c->fd >= 0)
			continue;
		c->in = malloc(d->msg_cap);
		if (c->in == NULL)
			break;
		c->fd = fd;
		c->peer = peer;
		c->gen = gen;
		c->opened_ms = c->last_rx_ms = now;
		c->have = 0;
		return i;
	}
	close(fd);
	return -1;
}

static void conn_close(struct ft__det *d, int i)
{
	struct conn *c = &d->conns[i];

	if (c->fd < 0)
		return;
	close(c->fd);
	free(c->in);
	c->in = NULL;
	c->fd = -1;
	c->peer = -1;
	if (d->left_ci == i)
		d->left_ci = -1;
	if (d->right_ci == i)
		d->right_ci = -1;
}

/* Sends one message whole; control messages are small, so a full socket
 * buffer means the peer stopped reading (its own detector will say why). */
static int send_msg(struct ft__det *d, int i, enum ctl_type type, const void *payload, size_t len)
{
	struct ctl_hdr h = {.magic = CTL_MAGIC, .type = (uint16_t)type, .len = (uint16_t)len,
			    .gen = d->gen, .from = d->p.rank};
	struct iovec iov[2] = {{&h, sizeof(h)}, {(void *)payload, len}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = len > 0 ? 2 : 1};
	ssize_t n = sendmsg(d->conns[i].fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);

	if (n == (ssize_t)(sizeof(h) + len))
		return 0;
	return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -FT_EPEERFAILED;
}

static void send_hello(struct ft__det *d, int i, int to)
{
	struct ctl_hello hello;

	memset(&hello, 0, sizeof(hello));
	snprintf(hello.job_id, sizeof(hello.job_id), "%s", d->job_id);
	snprintf(hello.token, sizeof(hello.token), "%s", d->token);
	hello.to = to;
	send_msg(d, i, CTL_HELLO, &hello, sizeof(hello));
}

static void failed_list(struct ft__det *d, int32_t *out, int *n)
{
	*n = 0;
	lock(d);
	for (int r = 0; r < d->p.world_size; r++)
		if (d->failed[r])
			out[(*n)++] = r;
	unlock(d);
}

static void declare(struct ft__det *d, const int32_t *ranks, int n, const char *why);

/* Sends every failure known here: to both neighbours when the set grows,
 * and to a new neighbour, which may have missed a notice that went out on
 * links a view change has since closed. */
static void send_failed_set(struct ft__det *d, int i)
{
	int32_t *all = malloc((size_t)d->p.world_size * sizeof(int32_t));
	int n;

	if (all == NULL)
		return;
	failed_list(d, all, &n);
	if (n > 0)
		send_msg(d, i, CTL_NOTICE, all, (size_t)n * sizeof(int32_t));
	free(all);
}

/* Blocks (briefly) to connect the control link to original rank `to`. */
static int connect_to(struct ft__det *d, int to)
{
	struct ft__member m;
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	char host[FT__CTRL_MAX], port[16];
	int fd = -1, one = 1, err = 0;
	socklen_t el = sizeof(err);

	if (ft__rdv_lookup(d->p.rdv, d->gen, to, &m) != 0 || m.ctrl[0] == '\0' ||
	    split_hostport(m.ctrl, host, sizeof(host), port, sizeof(port)) != 0)
		return -FT_EPEERFAILED;
	if (host[0] == '[') {
		memmove(host, host + 1, strlen(host));
		host[strcspn(host, "]")] = '\0';
	}
	if (getaddrinfo(host, port, &hints, &res) != 0)
		return -FT_EPEERFAILED;
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		if (errno != EINPROGRESS || poll(&p, 1, d->p.detect_timeout_ms) != 1 ||
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0)
		return -FT_EPEERFAILED;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	int i = conn_new(d, fd, to, d->gen);
	if (i < 0)
		return -FT_ENOMEM;
	send_hello(d, i, to);
	return i;
}

/* ---- membership ---- */

static bool in_list(const int *v, int n, int x)
{
	for (int i = 0; i < n; i++)
		if (v[i] == x)
			return true;
	return false;
}

static void set_excluded(struct ft__det *d, const char *why)
{
	lock(d);
	if (!d->excluded)
		ft__error("detector: this rank is out of the membership (%s)", why);
	d->excluded = true;
	atomic_store(&d->pending, true);
	pthread_cond_broadcast(&d->cond);
	unlock(d);
	d->target = 0;
	d->out = true;
	d->left = d->right = -1;
	for (int i = 0; i < MAX_CONNS; i++)
		conn_close(d, i);
}

static void start_recovery(struct ft__det *d)
{
	if (d->target != 0)
		return;
	d->target = d->gen + 1;
	d->recover_ms = ft__now_ms();
	d->published = false;
	lock(d);
	d->recovering = true;
	d->frozen = true;
	atomic_store(&d->pending, true);
	unlock(d);
}

/* Connects the control ring of the view just adopted. */
static void rewire(struct ft__det *d)
{
	int me = -1;

	for (int i = 0; i < d->size; i++)
		if (d->members[i] == d->p.rank)
			me = i;
	d->left = d->size > 1 ? d->members[(me + d->size - 1) % d->size] : -1;
	d->right = d->size > 1 ? d->members[(me + 1) % d->size] : -1;
	d->left_ci = d->right_ci = -1;
	d->left_bye = d->right_bye = false;
	d->view_ms = ft__now_ms();
	for (int i = 0; i < MAX_CONNS; i++) {
		struct conn *c = &d->conns[i];
		if (c->fd < 0 || c->peer < 0)
			continue;
		if (c->gen < d->gen) {
			send_msg(d, i, CTL_BYE, NULL, 0);
			conn_close(d, i);
		} else if (c->gen == d->gen && c->peer == d->left) {
			d->left_ci = i;
			send_failed_set(d, i);
		}
	}
	if (d->right >= 0) {
		int i = connect_to(d, d->right);
		if (i >= 0) {
			d->right_ci = i;
			send_failed_set(d, i);
		} else {
			int32_t r = d->right;
			declare(d, &r, 1, "its control address refused us");
		}
	}
}

static void adopt_view(struct ft__det *d, struct ft__view *v)
{
	bool stale_member = false;

	if (!in_list(v->members, v->size, d->p.rank)) {
		ft__view_free(v);
		set_excluded(d, "the settled view leaves it out");
		return;
	}
	free(d->members);
	d->members = v->members;
	d->size = v->size;
	d->gen = v->generation;
	v->members = NULL;
	lock(d);
	for (int i = 0; i < d->size; i++)
		stale_member |= d->failed[d->members[i]];
	ft__view_free(&d->ready);
	d->ready = (struct ft__view){.generation = d->gen, .size = d->size,
				     .first_op = v->first_op, .nonce = v->nonce};
	d->ready.members = malloc((size_t)d->size * sizeof(int));
	if (d->ready.members != NULL)
		memcpy(d->ready.members, d->members, (size_t)d->size * sizeof(int));
	else
		d->fatal = -FT_ENOMEM;
	d->recovering = stale_member;
	d->settled_ns = ft__now_ns();
	pthread_cond_broadcast(&d->cond);
	unlock(d);
	ft__info("detector: generation %u settled: %d members, first op %llu", d->gen, d->size,
		 (unsigned long long)v->first_op);
	d->target = 0;
	if (stale_member)
		start_recovery(d);
	rewire(d);
}

static void recovery_step(struct ft__det *d)
{
	int64_t now = ft__now_ms(), since = now - d->recover_ms;
	struct ft__view v = {0};
	int *cand, n = 0, rc;

	if (!d->published) {
		struct ft__member m;
		memset(&m, 0, sizeof(m));
		snprintf(m.addr, sizeof(m.addr), "%s", d->data_addr);
		snprintf(m.ctrl, sizeof(m.ctrl), "%s", d->addr);
		lock(d);
		m.next_op = d->next_op;
		unlock(d);
		if (ft__rdv_publish(d->p.rdv, d->target, &m) != 0)
			return;
		d->published = true;
	}
	cand = malloc((size_t)d->size * sizeof(int));
	if (cand == NULL)
		return;
	lock(d);
	for (int i = 0; i < d->size; i++)
		if (!d->failed[d->members[i]])
			cand[n++] = d->members[i];
	unlock(d);
	if (n > 0 && cand[0] == d->p.rank && since < d->p.settle_delay_ms) {
		free(cand);
		return;
	}
	rc = ft__rdv_try_settle(d->p.rdv, d->target, cand, n,
				since >= 2 * (int64_t)d->p.detect_timeout_ms + d->p.settle_delay_ms, &v);
	free(cand);
	if (rc == 1) {
		adopt_view(d, &v);
	} else if (rc < 0) {
		ft__error("detector: cannot settle generation %u: %s", d->target, ft_strerror(rc));
		lock(d);
		d->fatal = rc;
		pthread_cond_broadcast(&d->cond);
		unlock(d);
		d->target = 0;
	}
}

/* Marks ranks failed; what is new is noticed to both neighbours. */
static void declare(struct ft__det *d, const int32_t *ranks, int n, const char *why)
{
	int added = 0;
	bool self = false, member = false;

	lock(d);
	for (int i = 0; i < n; i++) {
		if (ranks[i] < 0 || ranks[i] >= d->p.world_size || d->failed[ranks[i]])
			continue;
		d->failed[ranks[i]] = true;
		added++;
		self |= ranks[i] == d->p.rank;
		member |= in_list(d->members, d->size, ranks[i]);
		if (ranks[i] != d->p.rank)
			ft__info("detector: rank %d failed (%s)", ranks[i], why);
	}
	if (added > 0)
		d->known_ns = ft__now_ns();
	unlock(d);
	if (added == 0)
		return;
	if (self) {
		set_excluded(d, "the other ranks declared it failed");
		return;
	}
	for (int i = 0; i < MAX_CONNS; i++) {
		struct conn *c = &d->conns[i];
		if (c->fd < 0 || c->peer < 0)
			continue;
		lock(d);
		bool dead = d->failed[c->peer];
		unlock(d);
		if (dead)
			conn_close(d, i);
		else if (i == d->left_ci || i == d->right_ci)
			send_failed_set(d, i);
	}
	/* a rank already outside this view (news arriving late) changes nothing */
	if (member)
		start_recovery(d);
}

/* ---- messages ---- */

static void conn_lost(struct ft__det *d, int i, const char *why)
{
	bool watched = i == d->left_ci || i == d->right_ci;
	int32_t peer = d->conns[i].peer;

	conn_close(d, i);
	if (watched)
		declare(d, &peer, 1, why);
}

static void on_hello(struct ft__det *d, int i, const struct ctl_hdr *h, const unsigned char *p)
{
	struct ctl_hello hello;
	bool dead;

	if (h->len != sizeof(hello) || h->from < 0 || h->from >= d->p.world_size ||
	    h->from == d->p.rank) {
		conn_close(d, i);
		return;
	}
	memcpy(&hello, p, sizeof(hello));
	if (strncmp(hello.job_id, d->job_id, sizeof(hello.job_id)) != 0 ||
	    strncmp(hello.token, d->token, sizeof(hello.token)) != 0 || hello.to != d->p.rank) {
		ft__warn("detector: refused a control link claiming rank %d (wrong job, token or rank)",
			 h->from);
		conn_close(d, i);
		return;
	}
	lock(d);
	dead = d->failed[h->from];
	unlock(d);
	if (dead) {
		conn_close(d, i);
		return;
	}
	d->conns[i].peer = h->from;
	d->conns[i].gen = h->gen;
	if (h->gen < d->gen) {
		/* the peer is behind: tell it the generation moved on */
		send_msg(d, i, CTL_BYE, NULL, 0);
		conn_close(d, i);
	} else if (h->gen == d->gen && h->from == d->left) {
		if (d->left_ci >= 0 && d->left_ci != i)
			conn_close(d, d->left_ci);
		d->left_ci = i;
		send_failed_set(d, i);
	}
}

static void on_msg(struct ft__det *d, int i, const struct ctl_hdr *h, const unsigned char *p)
{
	struct conn *c = &d->conns[i];

	c->last_rx_ms = ft__now_ms();
	if (c->peer < 0) {
		if (h->type == CTL_HELLO)
			on_hello(d, i, h, p);
		else
			conn_close(d, i);
		return;
	}
	switch (h->type) {
	case CTL_HB:
		break;
	case CTL_NOTICE: {
		int32_t r[256];
		size_t n = h->len / sizeof(int32_t);
		for (size_t k = 0; k < n; k += FT__ARRAY_SIZE(r)) {
			size_t m = n - k < FT__ARRAY_SIZE(r) ? n - k : FT__ARRAY_SIZE(r);
			memcpy(r, p + k * sizeof(int32_t), m * sizeof(int32_t));
			char why[64];
			snprintf(why, sizeof(why), "notice from rank %d", h->from);
			declare(d, r, (int)m, why);
		}
		break;
	}
	case CTL_BYE:
		if (i == d->left_ci)
			d->left_bye = true;
		if (i == d->right_ci)
			d->right_bye = true;
		conn_close(d, i);
		if (h->gen > d->gen)
			start_recovery(d); /* a newer view exists that we have not seen */
		break;
	default:
		conn_lost(d, i, "it sent a malformed control message");
		break;
	}
}

static void conn_read(struct ft__det *d, int i)
{
	struct conn *c = &d->conns[i];

	while (c->fd >= 0) {
		ssize_t n = recv(c->fd, c->in + c->have, d->msg_cap - c->have, MSG_DONTWAIT);
		if (n == 0) {
			conn_lost(d, i, "its control link closed");
			return;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				conn_lost(d, i, "its control link failed");
			return;
		}
		c->have += (size_t)n;
		while (c->fd >= 0 && c->have >= sizeof(struct ctl_hdr)) {
			struct ctl_hdr h;
			memcpy(&h, c->in, sizeof(h));
			if (h.magic != CTL_MAGIC || sizeof(h) + h.len > d->msg_cap ||
			    (h.type == CTL_NOTICE && h.len % sizeof(int32_t) != 0)) {
				conn_lost(d, i, "it sent a malformed control message");
				return;
			}
			if (c->have < sizeof(h) + h.len)
				break;
			on_msg(d, i, &h, c->in + sizeof(h));
			if (c->fd < 0)
				return;
			c->have -= sizeof(h) + h.len;
			memmove(c->in, c->in + sizeof(h) + h.len, c->have);
		}
	}
}

static void accept_all(struct ft__det *d)
{
	for (;;) {
		int fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		int one = 1;
		if (fd < 0)
			return;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		conn_new(d, fd, -1, 0);
	}
}

/* Silence, a missing left link, hello-less strangers; returns ms to the next check. */
static int check_time(struct ft__det *d, int64_t now)
{
	int64_t next = d->next_hb_ms;
	int64_t to = d->p.detect_timeout_ms;

	for (int i = 0; i < MAX_CONNS; i++) {
		struct conn *c = &d->conns[i];
		if (c->fd < 0)
			continue;
		if (c->peer < 0) {
			if (now - c->opened_ms >= HELLO_WAIT_MS)
				conn_close(d, i);
			else if (c->opened_ms + HELLO_WAIT_MS < next)
				next = c->opened_ms + HELLO_WAIT_MS;
			continue;
		}
		if (i != d->left_ci && i != d->right_ci)
			continue;
		if (now - c->last_rx_ms >= to) {
			char why[64];
			snprintf(why, sizeof(why), "no heartbeat for %lld ms",
				 (long long)(now - c->last_rx_ms));
			conn_lost(d, i, why);
		} else if (c->last_rx_ms + to < next) {
			next = c->last_rx_ms + to;
		}
	}
	/* A left neighbour that never connects: a backup only (a dead one refuses
	 * its own left neighbour's connection, a stopped one sends no heartbeat),
	 * so the grace is long enough for a slow start. */
	int64_t grace = 5 * to > 5000 ? 5 * to : 5000;
	if (d->left >= 0 && d->left_ci < 0 && !d->left_bye && d->target == 0) {
		if (now - d->view_ms >= grace) {
			int32_t r = d->left;
			declare(d, &r, 1, "it never opened its control link");
		} else if (d->view_ms + grace < next) {
			next = d->view_ms + grace;
		}
	}
	if (d->target != 0 && now + 2 < next)
		next = now + 2;
	return next > now ? (int)(next - now) : 0;
}

static void *det_main(void *arg)
{
	struct ft__det *d = arg;
	struct pollfd pfd[2 + MAX_CONNS];
	int idx[MAX_CONNS];

	d->next_hb_ms = ft__now_ms();
	for (;;) {
		int64_t now = ft__now_ms();
		int n = 0, timeout, k;

		if (d->out) {
			struct pollfd p = {.fd = d->cmd[0], .events = POLLIN};
			poll(&p, 1, -1);
			lock(d);
			bool stop = d->stop;
			unlock(d);
			char buf[64];
			while (read(d->cmd[0], buf, sizeof(buf)) > 0)
				;
			if (stop)
				break;
			continue;
		}
		if (now >= d->next_hb_ms) {
			for (int i = 0; i < MAX_CONNS; i++)
				if (d->conns[i].fd >= 0 && d->conns[i].peer >= 0 &&
				    d->conns[i].gen >= d->gen && send_msg(d, i, CTL_HB, NULL, 0) != 0)
					conn_lost(d, i, "its control link failed");
			d->next_hb_ms = now + d->p.heartbeat_ms;
		}
		if (d->target != 0)
			recovery_step(d);
		timeout = check_time(d, ft__now_ms());
		pfd[n++] = (struct pollfd){.fd = d->cmd[0], .events = POLLIN};
		pfd[n++] = (struct pollfd){.fd = d->listen_fd, .events = POLLIN};
		k = 0;
		for (int i = 0; i < MAX_CONNS; i++)
			if (d->conns[i].fd >= 0) {
				idx[k++] = i;
				pfd[n++] = (struct pollfd){.fd = d->conns[i].fd, .events = POLLIN};
			}
		if (poll(pfd, (nfds_t)n, timeout) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents & POLLIN) {
			char buf[64];
			int suspect;
			bool stop;
			while (read(d->cmd[0], buf, sizeof(buf)) > 0)
				;
			lock(d);
			stop = d->stop;
			suspect = d->suspect;
			d->suspect = -1;
			unlock(d);
			if (stop)
				break;
			if (suspect >= 0) {
				int32_t r = suspect;
				declare(d, &r, 1, "its data link failed");
			}
		}
		if (pfd[1].revents & POLLIN)
			accept_all(d);
		for (int j = 0; j < k; j++)
			if (pfd[2 + j].revents != 0)
				conn_read(d, idx[j]);
	}
	for (int i = 0; i < MAX_CONNS; i++) {
		if (d->conns[i].fd >= 0 && d->conns[i].peer >= 0)
			send_msg(d, i, CTL_BYE, NULL, 0);
		conn_close(d, i);
	}
	return NULL;
}

/* ---- the main thread's side ---- */

int ft__det_create(const struct ft__det_params *p, struct ft__det **out)
{
	struct ft__det *d = calloc(1, sizeof(*d));
	pthread_condattr_t ca;
	int rc;

	*out = NULL;
	if (d == NULL)
		return -FT_ENOMEM;
	d->p = *p;
	snprintf(d->job_id, sizeof(d->job_id), "%s", p->job_id);
	snprintf(d->token, sizeof(d->token), "%s", p->token);
	d->p.job_id = d->job_id;
	d->p.token = d->token;
	d->p.data_addr = d->data_addr;
	d->listen_fd = d->cmd[0] = d->cmd[1] = -1;
	d->suspect = -1;
	d->left = d->right = d->left_ci = d->right_ci = -1;
	for (int i = 0; i < MAX_CONNS; i++)
		d->conns[i].fd = -1;
	d->msg_cap = sizeof(struct ctl_hdr) + sizeof(struct ctl_hello) +
		     (size_t)p->world_size * sizeof(int32_t);
	if (d->msg_cap > sizeof(struct ctl_hdr) + UINT16_MAX)
		d->msg_cap = sizeof(struct ctl_hdr) + UINT16_MAX;
	d->failed = calloc((size_t)p->world_size, sizeof(bool));
	pthread_mutex_init(&d->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (d->failed == NULL || pipe2(d->cmd, O_NONBLOCK | O_CLOEXEC) != 0) {
		ft__det_destroy(d);
		return -FT_ENOMEM;
	}
	rc = open_listener(d);
	if (rc != 0) {
		ft__det_destroy(d);
		return rc;
	}
	*out = d;
	return 0;
}

const char *ft__det_addr(const struct ft__det *d)
{
	return d->addr;
}

int ft__det_start(struct ft__det *d, uint32_t gen, const int *members, int n)
{
	struct ft__member m;

	if (ft__rdv_lookup(d->p.rdv, gen, d->p.rank, &m) == 0)
		snprintf(d->data_addr, sizeof(d->data_addr), "%s", m.addr);
	d->members = malloc((size_t)n * sizeof(int));
	if (d->members == NULL)
		return -FT_ENOMEM;
	memcpy(d->members, members, (size_t)n * sizeof(int));
	d->size = n;
	d->gen = gen;
	rewire(d);
	if (pthread_create(&d->thread, NULL, det_main, d) != 0)
		return -FT_ENOMEM;
	d->started = true;
	return 0;
}

void ft__det_destroy(struct ft__det *d)
{
	if (d == NULL)
		return;
	if (d->started) {
		lock(d);
		d->stop = true;
		unlock(d);
		if (write(d->cmd[1], "s", 1) < 0) {
			/* the pipe is nonblocking and nearly empty: cannot fail here */
		}
		pthread_join(d->thread, NULL);
	}
	for (int i = 0; i < MAX_CONNS; i++)
		conn_close(d, i);
	if (d->listen_fd >= 0)
		close(d->listen_fd);
	if (d->cmd[0] >= 0)
		close(d->cmd[0]);
	if (d->cmd[1] >= 0)
		close(d->cmd[1]);
	pthread_mutex_destroy(&d->lock);
	pthread_cond_destroy(&d->cond);
	ft__view_free(&d->ready);
	free(d->members);
	free(d->failed);
	free(d);
}

bool ft__det_pending(struct ft__det *d)
{
	return atomic_load_explicit(&d->pending, memory_order_acquire);
}

int ft__det_have_result(struct ft__det *d, uint64_t seq)
{
	int rc = 0;

	lock(d);
	if (d->frozen)
		rc = -FT_EPEERFAILED;
	else
		d->next_op = seq + 1;
	unlock(d);
	return rc;
}

int ft__det_await(struct ft__det *d, uint32_t gen, int timeout_ms, struct ft__view *view)
{
	struct timespec ts;
	int rc = 0;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	lock(d);
	while (!d->excluded && d->fatal == 0 &&
	       (d->recovering || d->ready.members == NULL || d->ready.generation <= gen)) {
		if (pthread_cond_timedwait(&d->cond, &d->lock, &ts) != 0) {
			rc = -FT_ETIMEDOUT;
			break;
		}
	}
	if (d->excluded) {
		rc = -FT_EEXCLUDED;
	} else if (d->fatal != 0) {
		rc = d->fatal;
	} else if (rc == 0) {
		*view = d->ready;
		view->members = malloc((size_t)d->ready.size * sizeof(int));
		if (view->members == NULL)
			rc = -FT_ENOMEM;
		else
			memcpy(view->members, d->ready.members, (size_t)d->ready.size * sizeof(int));
	}
	unlock(d);
	return rc;
}

void ft__det_adopted(struct ft__det *d, uint32_t gen, uint64_t next_op)
{
	lock(d);
	d->next_op = next_op;
	if (!d->recovering && !d->excluded && d->ready.generation == gen) {
		d->frozen = false;
		atomic_store(&d->pending, false);
	}
	unlock(d);
}

void ft__det_suspect(struct ft__det *d, int orig)
{
	lock(d);
	d->suspect = orig;
	unlock(d);
	if (write(d->cmd[1], "x", 1) < 0) {
		/* a full pipe already holds a wake-up */
	}
}

void ft__det_times(struct ft__det *d, uint64_t *known_ns, uint64_t *settled_ns)
{
	lock(d);
	*known_ns = d->known_ns;
	*settled_ns = d->settled_ns;
	unlock(d);
}
