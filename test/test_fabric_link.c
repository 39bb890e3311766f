/* test_fabric_link.c: libfabric links made under attack: a copied MSG hello gets no link; strangers' RDM hellos never push out a neighbour's. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "crc32c.h"
#include "sock.h"
#include "ftcc.h"
#include "transport.h"
#include "internal.h"
#include "wire_test.h"

#ifdef FTCC_HAVE_FABRIC
#include "fabric/fabric.h"
#endif

#ifdef FTCC_HAVE_FABRIC
/* --- the libfabric MSG handshake's challenge ------------------------------ */

static struct ft__transport *fab_tp_open(int rank, const char *token)
{
	static struct ft__tp_env env;
	struct ft_config cfg = FT_CONFIG_INIT;
	struct ft__tp_params params = {.rank = rank, .bind_host = "127.0.0.1", .job_id = JOB,
				      .token = token, .max_payload = 4u << 20, .env = &env};
	struct ft__transport *tp = NULL;
	int rc;

	cfg.world_size = 2;
	cr_assert_eq(ft__config_tp_env(&cfg, &env), 0);
	rc = ft__transport_lookup("fabric")->open(&params, &tp);
	cr_assert_eq(rc, 0, "fabric open: %s", ft_err_name(rc));
	return tp;
}

/*
 * Over MSG endpoints (provider tcp), a hello copied off the wire and raced
 * to the acceptor ahead of the original (its link id, fields and MACs
 * intact) is challenged and cannot prove the challenge: no link for it,
 * and the original, coming later, gets the link and its frame arrives.
 * Before the challenge, the copy owned the link (accept returned it) and
 * the original was refused as a replay. The original's connector is a
 * child process held still until the copy was judged (in one process the
 * transports progress one another).
 */
Test(fabric_msg, hello_copy_raced_ahead_gets_no_link, .timeout = 60)
{
	const struct ft__transport_ops *fops = ft__transport_lookup("fabric");
	struct ft__transport *rx, *cp;
	struct ft__hello h = good_hello(), expect = good_hello(), got;
	struct ft__link *rl = NULL, *cl = NULL;
	struct ft__frame f = frame_for(10, 0);
	struct fab_hello_msg seen;
	struct ft__tp_event ev[16];
	unsigned char buf[10];
	char addr[FAB_ADDR_MAX], go = 'g';
	int rc, recvd = 0, up[2], down[2], st;
	pid_t child;

	if (fops == NULL || system("fi_info -p tcp >/dev/null 2>&1") != 0) {
		fprintf(stderr, "SKIPPED: no libfabric tcp provider\n");
		cr_skip_test("no libfabric tcp provider");
	}
	setenv("FI_PROVIDER", "tcp", 1);
	setenv("FTCC_FABRIC_EP", "msg", 1);
	rx = fab_tp_open(0, TOKEN);
	cr_assert(rx->msg, "provider %s: not MSG endpoints", rx->prov);
	cr_assert_eq(fops->local_addr(rx, addr, sizeof(addr)), 0);
	cr_assert_eq(pipe(up), 0);
	cr_assert_eq(pipe(down), 0);
	child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		/* the original: connects, shows its hello, waits, then sends a
		 * frame; a parent that failed (its ends closed) ends it */
		close(up[0]);
		close(down[1]);
		struct ft__transport *tx = fab_tp_open(1, TOKEN);
		struct ft__link *sl = NULL;
		int sent = 0;
		if (fops->connect(tx, addr, &h, WAIT_MS, &sl) != 0 ||
		    write(up[1], &sl->m.hello, sizeof(sl->m.hello)) != sizeof(sl->m.hello) ||
		    read(down[0], &go, 1) != 1 || fops->post_send(sl, &f, "0123456789", NULL) != 0)
			_exit(2);
		for (int64_t end = ft__now_ms() + WAIT_MS; !sent && ft__now_ms() < end;) {
			int n = fops->progress(tx, 10, ev, 16);
			for (int i = 0; i < n; i++)
				sent |= ev[i].type == FT__TP_SEND_DONE && ev[i].status == 0;
		}
		if (read(down[0], &go, 1) != 1) /* the parent has the frame */
			_exit(3);
		_exit(sent ? 0 : 4);
	}
	close(up[1]);
	close(down[0]);
	cr_assert_eq(read(up[0], &seen, sizeof(seen)), (ssize_t)sizeof(seen));
	cp = fab_tp_open(1, "a guess at the token");
	cr_assert_eq(fops->connect(cp, addr, &h, WAIT_MS, &cl), 0);
	cl->m.hello = seen; /* not connected yet: its hello becomes the copy */
	rc = fops->accept(rx, &expect, 1500, &rl, &got);
	cr_assert_eq(rc, -FT_ETIMEDOUT, "the copy got a link (accept: %s)", ft_err_name(rc));
	cr_assert_eq(write(down[1], &go, 1), 1);
	rc = fops->accept(rx, &expect, WAIT_MS, &rl, &got);
	cr_assert_eq(rc, 0, "the original got no link: %s", ft_err_name(rc));
	cr_expect_eq(got.from_rank, h.from_rank);
	cr_assert_eq(fops->post_recv(rl, &f, buf, NULL), 0);
	for (int64_t end = ft__now_ms() + WAIT_MS; !recvd && ft__now_ms() < end;) {
		int n = fops->progress(rx, 10, ev, 16);
		for (int i = 0; i < n; i++)
			if (ev[i].type == FT__TP_RECV_DONE && ev[i].link == rl) {
				cr_expect_eq(ev[i].status, 0);
				recvd = 1;
			}
	}
	cr_expect(recvd, "the original's frame never arrived on the link");
	cr_expect_eq(memcmp(buf, "0123456789", 10), 0);
	cr_assert_eq(write(down[1], &go, 1), 1);
	cr_assert_eq(waitpid(child, &st, 0), child);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the original's connector: status %d", st);
	fops->link_close(cl);
	fops->link_close(rl);
	fops->close(cp);
	fops->close(rx);
}

/*
 * Over RDM (provider shm), hellos that are not this job's (another token:
 * a stranger's) are answered as they arrive and take no place in the inbox
 * of hellos awaiting an accept: 40 of them after a neighbour's valid hello
 * leave it there, and the accept takes it. The inbox once kept every hello
 * and dropped the oldest when full: the neighbour's, whose link then timed
 * out (a healthy rank declared for strangers' hellos).
 */
/*
 * A child process, forked before this process opens any fabric transport
 * (shm's state does not survive a fork): it reads an address from the
 * pipe go, opens a transport with token, connects to it n times (hellos
 * sealed by token) and drives it until go ends (its parent closes it).
 */
static pid_t fab_connector(const char *token, int n, int go[2])
{
	pid_t child;

	cr_assert_eq(pipe(go), 0);
	child = fork();
	cr_assert_geq(child, 0);
	if (child != 0) {
		close(go[0]);
		return child;
	}
	close(go[1]);
	char addr[FAB_ADDR_MAX] = "", c;
	size_t len = 0;
	while (len + 1 < sizeof(addr) && read(go[0], &c, 1) == 1 && c != '\n')
		addr[len++] = c;
	const struct ft__transport_ops *fops = ft__transport_lookup("fabric");
	struct ft__transport *tp = fab_tp_open(1, token);
	struct ft__tp_event ev[16];
	struct ft__link *l;
	for (int i = 0; i < n; i++) {
		struct ft__hello h = make_hello(1, 0, GEN, JOB, token);
		if (fops->connect(tp, addr, &h, WAIT_MS, &l) != 0)
			_exit(2);
	}
	for (;;) {
		struct pollfd p = {.fd = go[0], .events = POLLIN};
		(void)fops->progress(tp, 5, ev, 16);
		if (poll(&p, 1, 0) == 1)
			_exit(0);
	}
}

static void send_addr(int fd, const char *addr)
{
	cr_assert_eq(write(fd, addr, strlen(addr)), (ssize_t)strlen(addr));
	cr_assert_eq(write(fd, "\n", 1), 1);
}

Test(fabric_rdm, strangers_hellos_never_push_out_a_neighbours, .timeout = 60)
{
	const struct ft__transport_ops *fops;
	struct ft__transport *rx;
	struct ft__hello expect = good_hello(), got;
	struct ft__link *rl = NULL;
	struct ft__tp_event ev[16];
	char addr[FAB_ADDR_MAX];
	int rc, st, ngo[2], sgo[2];
	pid_t neighbour, stranger;

	if (system("fi_info -p shm >/dev/null 2>&1") != 0) {
		fprintf(stderr, "SKIPPED: no libfabric shm provider\n");
		cr_skip_test("no libfabric shm provider");
	}
	setenv("FI_PROVIDER", "shm", 1);
	neighbour = fab_connector(TOKEN, 1, ngo);
	stranger = fab_connector("a stranger's token", 40, sgo);
	fops = ft__transport_lookup("fabric");
	cr_assert_not_null(fops);
	rx = fab_tp_open(0, TOKEN);
	cr_assert(!rx->msg, "provider %s: not RDM endpoints", rx->prov);
	cr_assert_eq(fops->local_addr(rx, addr, sizeof(addr)), 0);
	send_addr(ngo[1], addr);
	for (int64_t end = ft__now_ms() + WAIT_MS; rx->ninbox == 0 && ft__now_ms() < end;)
		(void)fops->progress(rx, 5, ev, 16);
	cr_assert_eq(rx->ninbox, 1u, "the neighbour's hello never arrived");
	send_addr(sgo[1], addr);
	for (int64_t end = ft__now_ms() + 2000; ft__now_ms() < end;)
		(void)fops->progress(rx, 5, ev, 16);
	close(sgo[1]);
	cr_assert_eq(waitpid(stranger, &st, 0), stranger);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the stranger: status %d", st);
	cr_expect_eq(rx->ninbox, 1u, "strangers' hellos took places in the inbox");
	rc = fops->accept(rx, &expect, 1000, &rl, &got);
	close(ngo[1]);
	cr_assert_eq(waitpid(neighbour, &st, 0), neighbour);
	cr_assert_eq(rc, 0, "the neighbour's link was lost: %s", ft_err_name(rc));
	cr_expect_eq(got.from_rank, 1);
	fops->close(rx);
}
/* As over TCP (test_tcp.c): a watched fd ends progress's wait at once while
 * it is readable, through shm's back-off poll. */
Test(fabric_rdm, a_watched_fd_ends_the_wait, .timeout = 30)
{
	const struct ft__transport_ops *fops = ft__transport_lookup("fabric");
	struct ft__transport *tp;
	struct ft__tp_event ev[4];
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	uint64_t one = 1;
	int64_t t0;

	if (fops == NULL || system("fi_info -p shm >/dev/null 2>&1") != 0) {
		fprintf(stderr, "SKIPPED: no libfabric shm provider\n");
		cr_skip_test("no libfabric shm provider");
	}
	setenv("FI_PROVIDER", "shm", 1);
	tp = fab_tp_open(0, TOKEN);
	cr_assert(efd >= 0);
	cr_assert_eq(fops->watch_fd(tp, efd), 0);
	t0 = ft__now_ms();
	cr_expect_eq(fops->progress(tp, 300, ev, 4), 0);
	cr_expect_geq(ft__now_ms() - t0, 250, "returned before its timeout with the fd quiet");
	cr_assert_eq(write(efd, &one, sizeof(one)), (ssize_t)sizeof(one));
	for (int i = 0; i < 3; i++) {
		t0 = ft__now_ms();
		cr_expect_eq(fops->progress(tp, 5000, ev, 4), 0);
		cr_expect_lt(ft__now_ms() - t0, 1000, "waited with the watched fd readable");
	}
	fops->close(tp);
	close(efd);
}
#endif
