/* test_sock_host.c: where a rank listens and what it publishes (ft__sock_choose_host), and listening on it. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "sock.h"

static struct ft__sock_host choose(const char *bind_host, int local, const char *toward, int want_rc)
{
	struct ft__sock_host h;
	int rc = ft__sock_choose_host(bind_host, local, toward, &h);

	cr_assert_eq(rc, want_rc, "bind '%s' local %d toward '%s': rc %d, want %d", bind_host, local,
		     toward ? toward : "(null)", rc, want_rc);
	return h;
}

/* Listens where h says and connects to the published address. */
static void listen_and_reach(const struct ft__sock_host *h, const char *want_host)
{
	struct ft__sock_opts opts = {0};
	struct ft__sock_addr to;
	char addr[128], host[64], port[16];
	int lfd, cfd;

	cr_assert_eq(ft__sock_listen("test", h->listen, h->publish, 4, &lfd, addr, sizeof(addr)), 0);
	cr_assert_eq(ft__sock_split(addr, host, sizeof(host), port, sizeof(port)), 0, "%s", addr);
	cr_expect_str_eq(host, want_host, "published %s", addr);
	cr_assert_eq(ft__sock_resolve(addr, &to), 0);
	cr_expect_eq(ft__sock_connect(&to, &opts, ft__now_ms() + 5000, &cfd), 0, "connect to %s", addr);
	close(cfd);
	close(lfd);
}

Test(sock, wildcards, .timeout = 10)
{
	cr_expect(ft__sock_is_wildcard("0.0.0.0"));
	cr_expect(ft__sock_is_wildcard("::"));
	cr_expect(ft__sock_is_wildcard("0:0::0"));
	cr_expect(ft__sock_is_wildcard("*"));
	cr_expect_not(ft__sock_is_wildcard("127.0.0.1"));
	cr_expect_not(ft__sock_is_wildcard("::1"));
	cr_expect_not(ft__sock_is_wildcard(""));
	cr_expect_not(ft__sock_is_wildcard("lo"));
	cr_expect_not(ft__sock_is_wildcard(NULL));
}

Test(sock, one_host_keeps_loopback, .timeout = 10)
{
	struct ft__sock_host h = choose("", 1, "10.9.9.9:1", 0);

	cr_expect_str_eq(h.listen, "127.0.0.1");
	cr_expect_str_eq(h.publish, "", "the bound address");
	listen_and_reach(&h, "127.0.0.1");
	h = choose(NULL, -1, NULL, 0);
	cr_expect_str_eq(h.listen, "127.0.0.1", "not known, no peers: one host");
	h = choose("", -1, ",127.0.0.1:4000,[::1]:4001,localhost:4002,", 0);
	cr_expect_str_eq(h.listen, "127.0.0.1", "not known, every peer on loopback: one host");
}

Test(sock, given_address_or_name_as_is, .timeout = 10)
{
	struct ft__sock_host h = choose("127.0.0.1", 0, NULL, 0);

	cr_expect_str_eq(h.listen, "127.0.0.1");
	cr_expect_str_eq(h.publish, "");
	h = choose("no-such-host.invalid", 0, NULL, 0);
	cr_expect_str_eq(h.listen, "no-such-host.invalid");
	int fd;
	char addr[64];
	cr_expect_eq(ft__sock_listen("test", h.listen, h.publish, 4, &fd, addr, sizeof(addr)),
		     -FT_EINVAL, "a name that does not resolve");
	cr_expect_eq(ft__sock_choose_host("0123456789012345678901234567890123456789012345678901234567890123456789",
					  0, NULL, &h), -FT_ECONFIG, "too long");
}

Test(sock, interface_by_name, .timeout = 10)
{
	struct ft__sock_host h = choose("lo", 0, NULL, 0);

	cr_expect_str_eq(h.listen, "127.0.0.1");
	cr_expect_str_eq(h.publish, "127.0.0.1");
	listen_and_reach(&h, "127.0.0.1");
}

Test(sock, wildcard_publishes_a_concrete_address, .timeout = 10)
{
	struct ft__sock_host h = choose("0.0.0.0", 0, "127.0.0.1:9", 0);
	char addr[64];
	int fd;

	cr_expect_str_eq(h.listen, "0.0.0.0");
	cr_expect_str_eq(h.publish, "127.0.0.1", "the route toward the peer");
	listen_and_reach(&h, "127.0.0.1");
	h = choose("*", 0, "127.0.0.1:9", 0);
	cr_expect_str_eq(h.listen, "0.0.0.0");
	cr_expect_eq(ft__sock_listen("test", "0.0.0.0", NULL, 4, &fd, addr, sizeof(addr)), -FT_EINVAL,
		     "never publish a wildcard");
}

Test(sock, route_toward_loopback_peer, .timeout = 10)
{
	struct ft__sock_host h = choose("", 0, "bad-entry,127.0.0.1:4000", 0);

	cr_expect_str_eq(h.listen, "127.0.0.1", "the first entry that routes");
	cr_expect_str_eq(h.publish, "127.0.0.1");
}

/*
 * A network namespace of the test's own, with two interfaces: eth-a
 * (192.0.2.10/24, the default route) and eth-b (198.51.100.10/24). Needs
 * root and the ip command; skipped otherwise.
 */
static void private_network(bool default_route)
{
	char cmd[512];

	if (geteuid() != 0 || system("command -v ip >/dev/null 2>&1") != 0)
		cr_skip_test("needs root and the ip command (iproute2) for a network namespace");
	if (unshare(CLONE_NEWNET) != 0)
		cr_skip_test("cannot make a network namespace: %s", strerror(errno));
	snprintf(cmd, sizeof(cmd),
		 "ip link set lo up && ip link add eth-a type veth peer name eth-a2 && "
		 "ip link add eth-b type veth peer name eth-b2 && "
		 "ip addr add 192.0.2.10/24 dev eth-a && ip addr add 198.51.100.10/24 dev eth-b && "
		 "for d in eth-a eth-a2 eth-b eth-b2; do ip link set $d up || exit 1; done%s",
		 default_route ? " && ip route add default via 192.0.2.1" : "");
	cr_assert_eq(system(cmd), 0, "setting up the test's network namespace");
}

Test(sock, chooses_the_interface_toward_the_peers, .timeout = 20)
{
	struct ft__sock_host h;

	private_network(true);
	h = choose("", 0, "198.51.100.7:4000,192.0.2.7:4000", 0);
	cr_expect_str_eq(h.listen, "198.51.100.10", "toward the first peer");
	cr_expect_str_eq(h.publish, "198.51.100.10");
	h = choose("", -1, "192.0.2.7:4000", 0);
	cr_expect_str_eq(h.listen, "192.0.2.10", "not known, a peer elsewhere: not one host");
	h = choose("", 0, "203.0.113.5:4000", 0);
	cr_expect_str_eq(h.listen, "192.0.2.10", "toward a peer past the default route");
	h = choose("", 0, NULL, 0);
	cr_expect_str_eq(h.listen, "192.0.2.10", "no peers known: the default route's");
	h = choose("::", 0, "198.51.100.7:1", 0);
	cr_expect_str_eq(h.listen, "::");
	cr_expect_str_eq(h.publish, "198.51.100.10");
	listen_and_reach(&h, "198.51.100.10");
	h = choose("eth-b", 0, "192.0.2.7:1", 0);
	cr_expect_str_eq(h.listen, "198.51.100.10", "the interface named, whatever the peers");
	listen_and_reach(&h, "198.51.100.10");
	h = choose("198.51.100.10", 0, NULL, 0);
	listen_and_reach(&h, "198.51.100.10");
}

Test(sock, no_route_first_interface_up, .timeout = 20)
{
	struct ft__sock_host h;

	private_network(false);
	h = choose("", 0, "203.0.113.5:4000", 0);
	cr_expect_str_eq(h.listen, "192.0.2.10", "no route anywhere: the first interface up");
	cr_assert_eq(system("ip link set eth-a down && ip link set eth-b down"), 0);
	h = choose("", 0, NULL, 0);
	cr_expect_str_eq(h.listen, "127.0.0.1", "nothing up but loopback: loopback, with a warning");
	choose("0.0.0.0", 0, NULL, -FT_ECONFIG);
	cr_assert_eq(system("ip link add eth-c type veth peer name eth-c2"), 0);
	choose("eth-c", 0, NULL, -FT_ECONFIG);
}
