/* sock.c: socket helpers shared by the TCP transport and the control links: where to listen, listen, resolve, connect, tune, write. */
/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fdreg.h"
#include "internal.h"
#include "sock.h"

int ft__sock_error(int err)
{
	switch (err) {
	case ECONNREFUSED:
		return -FT_ECONNREFUSED;
	case ETIMEDOUT:
		return -FT_ETIMEDOUT;
	case ENOMEM:
	case ENOBUFS:
	case EMFILE:
	case ENFILE:
		return ft__err_local(err); /* ours, not the peer's */
	default:
		return -FT_EPEERFAILED;
	}
}

bool ft__sock_is_wildcard(const char *host)
{
	struct in6_addr a6;
	struct in_addr a4;

	if (host == NULL)
		return false;
	if (strcmp(host, "*") == 0)
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return a4.s_addr == htonl(INADDR_ANY);
	return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_UNSPECIFIED(&a6);
}

/* The numeric text of an address; false for one peers cannot use (link-local IPv6). */
static bool numeric(const struct sockaddr *sa, socklen_t len, char *out, size_t cap)
{
	if (sa->sa_family == AF_INET6 &&
	    IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr))
		return false;
	return (sa->sa_family == AF_INET || sa->sa_family == AF_INET6) &&
	       getnameinfo(sa, len, out, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) == 0;
}

static bool loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr) >> 24) ==
		       127;
	return sa->sa_family == AF_INET6 &&
	       IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr);
}

/*
 * The source address the kernel would use toward host:port: a UDP socket
 * connected there (a route lookup; nothing is sent).
 */
static bool route_source(const char *hostport, char *out, size_t cap)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM,
				 .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	char host[NI_MAXHOST], port[NI_MAXSERV];
	bool found = false;

	if (ft__sock_split(hostport, host, sizeof(host), port, sizeof(port)) != 0)
		return false;
	if (strcmp(port, "0") == 0)
		snprintf(port, sizeof(port), "9"); /* a route is a route, whatever the port */
	if (getaddrinfo(host, port, &hints, &ai) != 0)
		return false;
	for (struct addrinfo *a = ai; a != NULL && !found; a = a->ai_next) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		ft__fd_own(fd);
		if (fd < 0)
			continue;
		found = connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
			getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
			numeric((struct sockaddr *)&ss, sl, out, cap);
		ft__fd_close(fd);
	}
	freeaddrinfo(ai);
	return found;
}

/* Whether every address host:port resolves to is a loopback address. */
static bool loopback_host(const char *hostport)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	char host[NI_MAXHOST], port[NI_MAXSERV];
	bool all = true;

	if (ft__sock_split(hostport, host, sizeof(host), port, sizeof(port)) != 0 ||
	    getaddrinfo(host, NULL, &hints, &ai) != 0)
		return false;
	for (struct addrinfo *a = ai; a != NULL; a = a->ai_next)
		all = all && loopback(a->ai_addr);
	freeaddrinfo(ai);
	return all;
}

/* Calls fn on each comma-separated entry of list (at most 255 bytes each) until it returns true. */
static bool each_entry(const char *list, bool (*fn)(const char *entry, void *arg), void *arg)
{
	char entry[256];

	while (list != NULL && *list != '\0') {
		size_t n = strcspn(list, ",");
		if (n > 0 && n < sizeof(entry)) {
			memcpy(entry, list, n);
			entry[n] = '\0';
			if (fn(entry, arg))
				return true;
		}
		list += n + (list[n] == ',');
	}
	return false;
}

static bool not_loopback_entry(const char *entry, void *arg)
{
	(void)arg;
	return !loopback_host(entry);
}

struct route_arg {
	char *out;
	size_t cap;
};

static bool route_entry(const char *entry, void *arg)
{
	struct route_arg *r = arg;

	return route_source(entry, r->out, r->cap);
}

/*
 * An address of interface name (want == NULL), or of the first interface
 * that is up and not loopback: IPv4 first, else IPv6 that is not
 * link-local. 1 found, 0 not, -1 no interface of that name.
 */
static int iface_addr(const char *want, char *out, size_t cap)
{
	struct ifaddrs *ifs = NULL;
	int found = 0, named = 0;

	if (getifaddrs(&ifs) != 0)
		return want != NULL ? -1 : 0;
	for (int family = AF_INET; !found; family = AF_INET6) {
		for (struct ifaddrs *i = ifs; i != NULL && !found; i = i->ifa_next) {
			bool mine = want != NULL ? strcmp(i->ifa_name, want) == 0
						 : (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK);
			if (!mine)
				continue;
			named = 1;
			if (i->ifa_addr == NULL || i->ifa_addr->sa_family != family)
				continue;
			found = numeric(i->ifa_addr, family == AF_INET ? sizeof(struct sockaddr_in)
								      : sizeof(struct sockaddr_in6),
					out, cap);
		}
		if (family == AF_INET6)
			break;
	}
	freeifaddrs(ifs);
	return found ? 1 : want != NULL && !named ? -1 : 0;
}

/* The address that reaches the peers: toward them, the default route, an interface. */
static const char *reaching(const char *toward, char *out, size_t cap)
{
	struct route_arg r = {.out = out, .cap = cap};

	if (each_entry(toward, route_entry, &r))
		return "the interface toward the peers or the launcher";
	/* documentation addresses (RFC 5737, 3849): only the route to them matters */
	if (route_source("192.0.2.1:9", out, cap) || route_source("[2001:db8::1]:9", out, cap))
		return "the interface of the default route";
	if (iface_addr(NULL, out, cap) == 1)
		return "the first interface that is up";
	return NULL;
}

int ft__sock_choose_host(const char *bind_host, int local, const char *toward,
			 struct ft__sock_host *out)
{
	const char *b = bind_host != NULL ? bind_host : "";
	int rc;

	memset(out, 0, sizeof(*out));
	if (strlen(b) >= sizeof(out->listen)) {
		ft__error("FTCC_BIND_HOST='%s' is too long", b);
		return -FT_ECONFIG;
	}
	if (local < 0)
		local = !each_entry(toward, not_loopback_entry, NULL);
	if (b[0] == '\0' && local) {
		snprintf(out->listen, sizeof(out->listen), "127.0.0.1");
		out->why = "every rank on this host";
		return 0;
	}
	if (b[0] == '\0' || ft__sock_is_wildcard(b)) {
		out->why = reaching(toward, out->publish, sizeof(out->publish));
		if (out->why == NULL) {
			if (b[0] != '\0') {
				ft__error("FTCC_BIND_HOST=%s: no interface address to publish instead "
					  "of the wildcard", b);
				return -FT_ECONFIG;
			}
			ft__warn("no network interface reaches other hosts: listening on 127.0.0.1");
			snprintf(out->publish, sizeof(out->publish), "127.0.0.1");
			out->why = "no other interface";
		}
		snprintf(out->listen, sizeof(out->listen), "%s",
			 b[0] == '\0' ? out->publish : strcmp(b, "*") == 0 ? "0.0.0.0" : b);
		return 0;
	}
	rc = iface_addr(b, out->listen, sizeof(out->listen));
	if (rc == 0) {
		ft__error("FTCC_BIND_HOST=%s: the interface has no address peers can reach", b);
		return -FT_ECONFIG;
	}
	if (rc == 1) {
		snprintf(out->publish, sizeof(out->publish), "%s", out->listen);
		out->why = "the interface FTCC_BIND_HOST names";
		return 0;
	}
	snprintf(out->listen, sizeof(out->listen), "%s", b);
	out->why = "FTCC_BIND_HOST";
	return 0;
}

int ft__sock_listen(const char *who, const char *bind_host, const char *publish_host, int backlog,
		    int *fd_out, char *addr, size_t addrlen)
{
	return ft__sock_listen_port(who, bind_host, publish_host, "0", backlog, fd_out, addr,
				    addrlen);
}

/*
 * One listener held for a later ft__sock_listen_port at its very address:
 * the torch binding's membership port, listening (no SO_REUSEADDR) from
 * before its address is published until ft_init's listener takes the same
 * socket over. A port let go for ft_init to bind again could be taken in
 * between, by any process of any user. One slot: one ft_init at a time.
 */
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static int held_fd = -1;

int ft__sock_hold(int fd)
{
	int rc = 0;

	pthread_mutex_lock(&held_lock);
	if (held_fd >= 0)
		rc = -FT_EBUSY;
	else
		held_fd = fd;
	pthread_mutex_unlock(&held_lock);
	return rc;
}

int ft__sock_unhold(void)
{
	int fd;

	pthread_mutex_lock(&held_lock);
	fd = held_fd;
	held_fd = -1;
	pthread_mutex_unlock(&held_lock);
	return fd;
}

static bool same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->sa_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
		return x->sin6_port == y->sin6_port &&
		       memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
	}
	return false;
}

/* The held listener if it is bound at want (a given port), made nonblocking; else -1. */
static int take_held(const struct sockaddr *want)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd = -1;

	pthread_mutex_lock(&held_lock);
	if (held_fd >= 0 && getsockname(held_fd, (struct sockaddr *)&ss, &sl) == 0 &&
	    same_addr((struct sockaddr *)&ss, want)) {
		int fl = fcntl(held_fd, F_GETFL);
		if (fl >= 0 && fcntl(held_fd, F_SETFL, fl | O_NONBLOCK) == 0 &&
		    fcntl(held_fd, F_SETFD, FD_CLOEXEC) == 0) {
			fd = held_fd;
			held_fd = -1;
		}
	}
	pthread_mutex_unlock(&held_lock);
	return fd;
}

int ft__sock_listen_port(const char *who, const char *bind_host, const char *publish_host,
			 const char *port_wanted, int backlog, int *fd_out, char *addr, size_t addrlen)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[NI_MAXHOST], port[NI_MAXSERV];
	const char *h = bind_host != NULL && bind_host[0] != '\0' ? bind_host : "127.0.0.1";
	int fd, held, one = 1, n;

	*fd_out = -1;
	if (getaddrinfo(h, port_wanted, &hints, &ai) != 0) {
		ft__error("%s: cannot resolve bind address '%s'", who, h);
		return -FT_EINVAL;
	}
	held = strcmp(port_wanted, "0") != 0 ? take_held(ai->ai_addr) : -1;
	fd = held >= 0 ? held : socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	/* SO_REUSEADDR only spares a restarted rank TIME_WAIT ports: harmless if refused */
	if (fd >= 0 && held < 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* a held listener is bound and listening already (listen again: our backlog) */
	if (fd < 0 || (held < 0 && bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) ||
	    listen(fd, backlog) != 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) != 0 ||
	    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
		int err = errno;
		/* a given port taken says which, and that it is another socket's, not a
		 * rendezvous's rank (FT_EBUSY's message covers both) */
		if (strcmp(port_wanted, "0") != 0 && err == EADDRINUSE)
			ft__error("%s: cannot listen on %s port %s: the port is in use by another "
				  "socket (another process, or this rank still running)", who, h,
				  port_wanted);
		else if (strcmp(port_wanted, "0") != 0)
			ft__error("%s: cannot listen on %s port %s: %s", who, h, port_wanted,
				  strerror(err));
		else
			ft__error("%s: cannot listen on %s: %s", who, h, strerror(err));
		if (fd >= 0)
			ft__fd_close(fd);
		freeaddrinfo(ai);
		/* a given port another process holds: this rank runs already */
		return err == EADDRINUSE ? -FT_EBUSY : ft__err_local(err);
	}
	freeaddrinfo(ai);
	if (publish_host != NULL && publish_host[0] != '\0')
		snprintf(host, sizeof(host), "%s", publish_host);
	else if (ft__sock_is_wildcard(host)) {
		ft__error("%s: listening on the wildcard %s with no address to publish", who, h);
		ft__fd_close(fd);
		return -FT_EINVAL;
	}
	n = snprintf(addr, addrlen, strchr(host, ':') != NULL ? "[%s]:%s" : "%s:%s", host, port);
	if (n < 0 || (size_t)n >= addrlen) {
		ft__error("%s: address %s:%s does not fit in %zu bytes", who, host, port, addrlen);
		ft__fd_close(fd);
		return -FT_EINVAL;
	}
	*fd_out = fd;
	return 0;
}

int ft__sock_split(const char *addr, char *host, size_t hlen, char *port, size_t plen)
{
	const char *colon = strrchr(addr, ':');
	size_t n;

	if (colon == NULL || colon == addr || colon[1] == '\0' || strlen(colon + 1) >= plen)
		return -FT_EINVAL;
	n = (size_t)(colon - addr);
	if (addr[0] == '[') {
		if (n < 3 || addr[n - 1] != ']')
			return -FT_EINVAL;
		addr++;
		n -= 2;
	}
	if (n >= hlen)
		return -FT_EINVAL;
	memcpy(host, addr, n);
	host[n] = '\0';
	memcpy(port, colon + 1, strlen(colon + 1) + 1);
	return 0;
}

int ft__sock_resolve(const char *addr, struct ft__sock_addr *out)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	char host[NI_MAXHOST], port[NI_MAXSERV];

	if (ft__sock_split(addr, host, sizeof(host), port, sizeof(port)) != 0 ||
	    getaddrinfo(host, port, &hints, &ai) != 0)
		return -FT_EINVAL;
	if (ai->ai_addrlen > sizeof(out->ss)) {
		freeaddrinfo(ai);
		return -FT_EINVAL;
	}
	memcpy(&out->ss, ai->ai_addr, ai->ai_addrlen);
	out->len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

#define KEEPALIVE_MAX_S 65532 /* idle = total - 3 * (total / 6) stays within the kernel's 32767 */

void ft__sock_keepalive_for(int dead_ms, struct ft__sock_keepalive *k)
{
	int total = dead_ms / 1000 + (dead_ms % 1000 != 0);

	if (total < 2)
		total = 2;
	if (total > KEEPALIVE_MAX_S)
		total = KEEPALIVE_MAX_S;
	k->cnt = total >= 4 ? 3 : total - 1;
	k->intvl_s = total / (2 * k->cnt) > 1 ? total / (2 * k->cnt) : 1;
	k->idle_s = total - k->cnt * k->intvl_s;
}

void ft__sock_tune(int fd, const struct ft__sock_opts *opts)
{
	int one = 1;

	/* Every option here is an optimisation or an earlier notice of a dead
	 * peer; a kernel that refuses one still carries the data correctly. With
	 * a user timeout the kernel ends an idle link once that much time has
	 * passed and a probe went unanswered, so the two agree (callers give
	 * both or keepalive alone). */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (opts->keepalive_ms > 0) {
		struct ft__sock_keepalive k;
		ft__sock_keepalive_for(opts->keepalive_ms, &k);
		(void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
		(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &k.idle_s, sizeof(k.idle_s));
		(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &k.intvl_s, sizeof(k.intvl_s));
		(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &k.cnt, sizeof(k.cnt));
	}
	if (opts->user_timeout_ms > 0) {
		unsigned int ut = (unsigned int)opts->user_timeout_ms;
		(void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut));
	}
	if (opts->buffer > 0) {
		int bytes = opts->buffer > INT_MAX ? INT_MAX : (int)opts->buffer;
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
	}
}

int ft__sock_connect(const struct ft__sock_addr *to, const struct ft__sock_opts *opts,
		     int64_t deadline_ms, int *fd_out)
{
	int fd = socket(to->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int rc;

	*fd_out = -1;
	if (fd < 0)
		return ft__err_local(errno);
	ft__sock_tune(fd, opts);
	rc = connect(fd, (const struct sockaddr *)&to->ss, to->len);
	if (rc != 0 && errno == EINPROGRESS) {
		struct pollfd pfd = {.fd = fd, .events = POLLOUT};
		int err = 0, n;
		socklen_t el = sizeof(err);
		do
			n = poll(&pfd, 1, ft__ms_left(deadline_ms));
		while (n < 0 && errno == EINTR);
		if (n == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0)
			rc = 0;
		else
			errno = n == 0 ? ETIMEDOUT : err != 0 ? err : errno;
	}
	if (rc != 0) {
		rc = ft__sock_error(errno);
		ft__fd_close(fd);
		return rc;
	}
	*fd_out = fd;
	return 0;
}

int ft__sock_write_full(int fd, const void *buf, size_t len, int64_t deadline_ms)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return ft__sock_error(errno);
		if (n < 0 && errno == EINTR)
			continue;
		struct pollfd pfd = {.fd = fd, .events = POLLOUT};
		if (ft__ms_left(deadline_ms) == 0)
			return -FT_ETIMEDOUT;
		(void)poll(&pfd, 1, ft__ms_left(deadline_ms)); /* woken or timed out: the loop decides */
	}
	return 0;
}

int ft__sock_listen_at(const char *who, const char *host, const char *port, int backlog,
		       int *fd_out, char *addr, size_t addrlen)
{
	const char *h = host != NULL && host[0] != '\0' ? host : "0.0.0.0";
	char publish[NI_MAXHOST] = "";

	/* a wildcard publishes this host's name (ftcc-run --store prints it) */
	if (ft__sock_is_wildcard(h) && gethostname(publish, sizeof(publish)) != 0)
		publish[0] = '\0';
	publish[sizeof(publish) - 1] = '\0';
	return ft__sock_listen_port(who, h, publish, port, backlog, fd_out, addr, addrlen);
}
