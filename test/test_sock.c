/* test_sock.c: socket helpers: keepalive from a timeout, the options on real sockets, a user timeout the kernel keeps, a held listener handed over. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "sock.h"

static void quiet(void)
{
	ft__log_level = -1;
}

TestSuite(keepalive, .init = quiet);
TestSuite(tune, .init = quiet);
TestSuite(hold, .init = quiet);

static void expect_keepalive(int ms, int idle, int intvl, int cnt)
{
	struct ft__sock_keepalive k;

	ft__sock_keepalive_for(ms, &k);
	cr_expect(k.idle_s == idle && k.intvl_s == intvl && k.cnt == cnt,
		  "%d ms: idle %d, interval %d, count %d; want %d, %d, %d", ms, k.idle_s, k.intvl_s,
		  k.cnt, idle, intvl, cnt);
}

Test(keepalive, from_timeouts, .timeout = 20)
{
	expect_keepalive(0, 1, 1, 1);
	expect_keepalive(1000, 1, 1, 1);       /* the default detect timeout: 2 s at best */
	expect_keepalive(2000, 1, 1, 1);
	expect_keepalive(2001, 1, 1, 2);
	expect_keepalive(4000, 1, 1, 3);
	expect_keepalive(10000, 7, 1, 3);
	expect_keepalive(30000, 15, 5, 3);     /* the default connect timeout */
	expect_keepalive(3600000, 1800, 600, 3);
	expect_keepalive(INT_MAX, 32766, 10922, 3);
}

/* Whatever the timeout: the kernel's limits, and the peer given up at about
 * that time (whole seconds, at least 2 s, at most 65532 s). */
Test(keepalive, always_within_the_kernels_limits, .timeout = 20)
{
	for (long ms = 0; ms <= INT_MAX; ms = ms < 200000 ? ms + 97 : ms * 3 + 1) {
		struct ft__sock_keepalive k;
		long want = (ms + 999) / 1000;
		ft__sock_keepalive_for((int)ms, &k);
		want = want < 2 ? 2 : want > 65532 ? 65532 : want;
		cr_assert(k.idle_s >= 1 && k.idle_s <= 32767, "%ld ms: idle %d", ms, k.idle_s);
		cr_assert(k.intvl_s >= 1 && k.intvl_s <= 32767, "%ld ms: interval %d", ms, k.intvl_s);
		cr_assert(k.cnt >= 1 && k.cnt <= 3, "%ld ms: count %d", ms, k.cnt);
		cr_assert_eq(k.idle_s + (long)k.cnt * k.intvl_s, want, "%ld ms", ms);
		cr_assert_geq(k.idle_s, k.intvl_s, "%ld ms: probes crowd the end", ms);
	}
}

/* A listening socket on loopback and its address. */
static int listener(char *addr, size_t len)
{
	int fd = -1;

	cr_assert_eq(ft__sock_listen("test", "127.0.0.1", NULL, 4, &fd, addr, len), 0);
	return fd;
}

static int get_int(int fd, int level, int opt)
{
	int v = -1;
	socklen_t l = sizeof(v);

	cr_assert_eq(getsockopt(fd, level, opt, &v, &l), 0, "getsockopt: %s", strerror(errno));
	return v;
}

Test(tune, options_reach_the_socket, .timeout = 20)
{
	struct ft__sock_opts opts = {.keepalive_ms = 10000, .user_timeout_ms = 4321};
	struct ft__sock_addr a;
	char addr[64];
	int lfd = listener(addr, sizeof(addr)), fd;

	cr_assert_eq(ft__sock_resolve(addr, &a), 0);
	cr_assert_eq(ft__sock_connect(&a, &opts, ft__now_ms() + 5000, &fd), 0);
	cr_expect_eq(get_int(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
	cr_expect_eq(get_int(fd, IPPROTO_TCP, TCP_KEEPIDLE), 7);
	cr_expect_eq(get_int(fd, IPPROTO_TCP, TCP_KEEPINTVL), 1);
	cr_expect_eq(get_int(fd, IPPROTO_TCP, TCP_KEEPCNT), 3);
	cr_expect_eq(get_int(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 4321);
	cr_expect_eq(get_int(fd, IPPROTO_TCP, TCP_NODELAY), 1);
	close(fd);

	/* none asked: the kernel's defaults */
	opts = (struct ft__sock_opts){0};
	cr_assert_eq(ft__sock_connect(&a, &opts, ft__now_ms() + 5000, &fd), 0);
	cr_expect_eq(get_int(fd, SOL_SOCKET, SO_KEEPALIVE), 0);
	cr_expect_eq(get_int(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 0);
	close(fd);
	close(lfd);
}

/*
 * Why the data links get no user timeout when a detector runs (config.c):
 * a live peer that does not read, its window closed, loses the link once
 * the user timeout has passed. Here 300 ms: the writer's link fails with
 * ETIMEDOUT within a few seconds although the reader's kernel answers.
 */
Test(tune, user_timeout_fails_a_link_whose_peer_stopped_reading, .timeout = 30)
{
	struct ft__sock_opts opts = {.user_timeout_ms = 300, .buffer = 16384};
	struct ft__sock_addr a;
	char addr[64], buf[16384];
	int lfd = listener(addr, sizeof(addr)), fd, peer, err = 0;
	int64_t end;

	cr_assert_eq(ft__sock_resolve(addr, &a), 0);
	cr_assert_eq(ft__sock_connect(&a, &opts, ft__now_ms() + 5000, &fd), 0);
	struct pollfd p = {.fd = lfd, .events = POLLIN};
	cr_assert_eq(poll(&p, 1, 5000), 1);
	peer = accept(lfd, NULL, NULL);
	cr_assert_geq(peer, 0);
	memset(buf, 7, sizeof(buf));
	end = ft__now_ms() + 20000;
	while (err == 0 && ft__now_ms() < end) {
		ssize_t n = send(fd, buf, sizeof(buf), MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno != EAGAIN) {
			err = errno;
			break;
		}
		struct pollfd q = {.fd = fd, .events = POLLOUT};
		(void)poll(&q, 1, 50);
	}
	cr_expect_eq(err, ETIMEDOUT, "the link of a peer that stopped reading: %s", strerror(err));
	close(peer);
	close(fd);
	close(lfd);
}

/* A listener on 127.0.0.1:0 without SO_REUSEADDR (the torch binding's reservation); its port. */
static int held_listener(int *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert(fd >= 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(fd, 8), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

/* Another process's try at the port: bind with SO_REUSEADDR and SO_REUSEPORT, and listen. */
static int squat(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				.sin_port = htons((uint16_t)port)};
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rc;

	cr_assert(fd >= 0);
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	rc = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fd, 8) == 0 ? 0 : -errno;
	close(fd);
	return rc;
}

Test(hold, listen_at_its_address_takes_the_very_socket, .timeout = 20)
{
	char want[16], addr[64];
	int port, fd = held_listener(&port), got = -1;

	cr_assert_eq(squat(port), -EADDRINUSE, "the held port could be taken");
	cr_assert_eq(ft__sock_hold(fd), 0);
	cr_assert_eq(ft__sock_hold(fd), -FT_EBUSY, "one slot");
	/* another address (port 0) makes a socket of its own, the hold stays */
	cr_assert_eq(ft__sock_listen("t", "127.0.0.1", NULL, 8, &got, addr, sizeof(addr)), 0);
	cr_assert_neq(got, fd);
	close(got);
	snprintf(want, sizeof(want), "%d", port);
	cr_assert_eq(ft__sock_listen_port("t", "127.0.0.1", NULL, want, 8, &got, addr, sizeof(addr)),
		     0);
	cr_assert_eq(got, fd, "a new socket (%d) instead of the held one (%d)", got, fd);
	cr_assert(fcntl(got, F_GETFL) & O_NONBLOCK, "taken over blocking");
	cr_assert_eq(ft__sock_unhold(), -1, "taken, yet still held");
	cr_assert_eq(squat(port), -EADDRINUSE, "the port could be taken once handed over");
	close(got);
}

Test(hold, unhold_gives_back_what_nothing_took, .timeout = 20)
{
	int port, fd = held_listener(&port);

	cr_assert_eq(ft__sock_hold(fd), 0);
	cr_assert_eq(ft__sock_unhold(), fd);
	cr_assert_eq(ft__sock_unhold(), -1);
	close(fd);
}
