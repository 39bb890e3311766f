/* sock.c: socket helpers shared by the TCP transport and the control links: listen, resolve, connect, tune, write. */
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
		return -FT_ENOMEM;
	default:
		return -FT_EPEERFAILED;
	}
}

int ft__sock_listen(const char *who, const char *bind_host, int backlog, int *fd_out, char *addr,
		    size_t addrlen)
{
	return ft__sock_listen_port(who, bind_host, "0", backlog, fd_out, addr, addrlen);
}

int ft__sock_listen_port(const char *who, const char *bind_host, const char *port_wanted,
			 int backlog, int *fd_out, char *addr, size_t addrlen)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[NI_MAXHOST], port[NI_MAXSERV];
	const char *h = bind_host != NULL && bind_host[0] != '\0' ? bind_host : "127.0.0.1";
	int fd, one = 1, n;

	*fd_out = -1;
	if (getaddrinfo(h, port_wanted, &hints, &ai) != 0) {
		ft__error("%s: cannot resolve bind address '%s'", who, h);
		return -FT_EINVAL;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	/* SO_REUSEADDR only spares a restarted rank TIME_WAIT ports: harmless if refused */
	if (fd >= 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, backlog) != 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) != 0 ||
	    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
		int err = errno;
		ft__error("%s: cannot listen on %s: %s", who, h, strerror(err));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		/* a given port another process holds: this rank runs already */
		return err == EADDRINUSE ? -FT_EBUSY : -FT_EIO;
	}
	freeaddrinfo(ai);
	n = snprintf(addr, addrlen, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
	if (n < 0 || (size_t)n >= addrlen) {
		ft__error("%s: address %s:%s does not fit in %zu bytes", who, host, port, addrlen);
		close(fd);
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
		return -FT_EIO;
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
		close(fd);
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
	return ft__sock_listen_port(who, host != NULL && host[0] != '\0' ? host : "0.0.0.0", port,
				    backlog, fd_out, addr, addrlen);
}
