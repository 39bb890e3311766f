/* test_inband.c: the in-band membership backend through the membership interface: settles, quorums, partitions, a coordinator lost mid-settle, hostile messages, dead incarnations under rejoin. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctl.h"
#include "inband.h"
#include "internal.h"
#include "membership.h"
#include "served.h"
#include "testutil.h"

/*
 * The ranks of a job are membership handles opened side by side in the
 * test process, each listening on a loopback port the test holds bound
 * (not listening) so that nothing else takes it. The backend never blocks,
 * so one thread drives every handle in turn, as each rank's detector would.
 * A partition is made by the candidates each side names: a side only ever
 * speaks to its own candidates.
 */

#define N_MAX 8

static struct ft__mb mb[N_MAX];
static bool open_[N_MAX];
static int port_fd[N_MAX];
static char peers[N_MAX * 24];
static int n;
static int start_wait_ms; /* ft__mb_params.start_wait_ms of the ranks opened (rejoin: > 0) */

/* FTCC_TEST_LOG_LEVEL: a failing test's story (2: every info line) */
static void quiet(void)
{
	const char *level = getenv("FTCC_TEST_LOG_LEVEL");

	ft__log_level = level != NULL ? atoi(level) : -1;
}

static void open_rank(int r, uint32_t incarnation)
{
	struct ft__mb_params p = {.backend = "inband", .job_id = "ib", .rank = r,
				  .world_size = n, .token = "tok", .reply_wait_ms = 100,
				  .incarnation = incarnation, .start_wait_ms = start_wait_ms,
				  .book = {.how = "peers", .peers = peers, .job_id = "ib",
					   .rank = r, .world_size = n, .timeout_ms = 5000}};
	cr_assert_eq(ft__mb_open(&mb[r], &p), 0, "rank %d: open", r);
	open_[r] = true;
}

static void job(int size)
{
	n = size;
	peers[0] = '\0';
	for (int r = 0; r < n; r++) {
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		socklen_t al = sizeof(a);
		int one = 1;
		port_fd[r] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		cr_assert_geq(port_fd[r], 0);
		cr_assert_eq(setsockopt(port_fd[r], SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
		cr_assert_eq(bind(port_fd[r], (struct sockaddr *)&a, sizeof(a)), 0);
		cr_assert_eq(getsockname(port_fd[r], (struct sockaddr *)&a, &al), 0);
		snprintf(peers + strlen(peers), sizeof(peers) - strlen(peers), "%s127.0.0.1:%d",
			 r ? "," : "", ntohs(a.sin_port));
	}
	for (int r = 0; r < n; r++)
		open_rank(r, 0);
}

static void end_job(void)
{
	for (int r = 0; r < n; r++) {
		if (open_[r])
			ft__mb_close(&mb[r], 0, false);
		open_[r] = false;
		close(port_fd[r]);
	}
	start_wait_ms = 0;
}

static void publish(int r, uint32_t gen, uint64_t next_op)
{
	struct ft__member m;

	memset(&m, 0, sizeof(m));
	snprintf(m.addr, sizeof(m.addr), "127.0.0.1:%d", 7000 + r);
	snprintf(m.ctrl, sizeof(m.ctrl), "127.0.0.1:%d", 8000 + r);
	m.next_op = next_op;
	cr_assert_eq(ft__mb_publish(&mb[r], gen, &m), 0, "rank %d: publish %u", r, gen);
}

/*
 * Drives the ranks in who[] (cand[] their candidates, the same for all)
 * until each has a result or the deadline passes: rc[i] is try_settle's
 * last answer (1 settled, < 0 an error), views[i] its view. force: the
 * detector waited long enough.
 */
static void drive(const int *who, int nwho, const int *cand, int ncand, bool force, int *rc,
		  struct ft__view *views, long deadline_ms)
{
	long end = tu_now_ms() + deadline_ms;
	int left = nwho;

	for (int i = 0; i < nwho; i++)
		rc[i] = 0;
	while (left > 0 && tu_now_ms() < end) {
		for (int i = 0; i < nwho; i++) {
			if (rc[i] != 0)
				continue;
			rc[i] = ft__mb_try_settle(&mb[who[i]], views[i].generation, cand, ncand, force,
						  &views[i]);
			if (rc[i] != 0)
				left--;
		}
		tu_sleep_ms(1);
	}
}

static void settle_all(const int *who, int nwho, const int *cand, int ncand, uint32_t gen,
		       bool force, int *rc, struct ft__view *views)
{
	for (int i = 0; i < nwho; i++)
		views[i] = (struct ft__view){.generation = gen};
	drive(who, nwho, cand, ncand, force, rc, views, 5000);
}

static void expect_view(const struct ft__view *v, const int *members, int size, const char *what)
{
	cr_assert_eq(v->size, size, "%s: %d members, want %d", what, v->size, size);
	for (int i = 0; i < size; i++)
		cr_assert_eq(v->members[i], members[i], "%s: member %d is %d, want %d", what, i,
			     v->members[i], members[i]);
}

/* Generation 0 among the n ranks opened: every one settles all of them, with one nonce (returned). */
static uint64_t first_view(void)
{
	int all[N_MAX], rc[N_MAX];
	struct ft__view v[N_MAX];
	uint64_t nonce;

	for (int r = 0; r < n; r++) {
		all[r] = r;
		publish(r, 0, 0);
	}
	settle_all(all, n, all, n, 0, false, rc, v);
	for (int r = 0; r < n; r++)
		cr_assert_eq(rc[r], 1, "rank %d: generation 0 not settled (%d)", r, rc[r]);
	nonce = v[0].nonce;
	for (int r = 0; r < n; r++) {
		expect_view(&v[r], all, n, "generation 0");
		cr_assert_eq(v[r].nonce, nonce);
		ft__view_free(&v[r]);
	}
	return nonce;
}

/* A job of size ranks from a peer list, and its generation 0; returns its nonce. */
static uint64_t start(int size)
{
	uint64_t nonce;

	job(size);
	nonce = first_view();
	/* every rank knows every address from generation 0 on */
	for (int r = 0; r < n; r++)
		for (int q = 0; q < n; q++) {
			struct ft__member m;
			char want[32];
			cr_assert_eq(ft__mb_lookup(&mb[r], 0, q, &m), 0);
			snprintf(want, sizeof(want), "127.0.0.1:%d", 7000 + q);
			cr_assert_str_eq(m.addr, want);
		}
	return nonce;
}

TestSuite(inband, .init = quiet, .fini = end_job);

Test(inband, generation_0_and_a_shrink)
{
	uint64_t nonce = start(4);
	int who[3] = {0, 1, 3}, rc[3];
	struct ft__view v[3];

	/* rank 2 is gone (silent: suspicion only); 3 of 4 are a majority */
	for (int i = 0; i < 3; i++)
		publish(who[i], 1, 10 + (uint64_t)who[i]);
	settle_all(who, 3, who, 3, 1, false, rc, v);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(rc[i], 1, "rank %d: generation 1 (%d)", who[i], rc[i]);
		expect_view(&v[i], who, 3, "generation 1");
		cr_assert_eq(v[i].first_op, 10, "the lowest next op");
		cr_assert_eq(v[i].nonce, nonce, "the job's nonce carries over");
		ft__view_free(&v[i]);
	}
	/* each member's own next op, for the result holders */
	struct ft__member m;
	cr_assert_eq(ft__mb_lookup(&mb[1], 1, 3, &m), 0);
	cr_assert_eq(m.next_op, 13);
	cr_assert_neq(ft__mb_lookup(&mb[1], 1, 2, &m), 0, "rank 2 is not in generation 1");
}

/* A side without a majority of the previous view stops, with the error, under force. */
Test(inband, minority_stops)
{
	start(4);
	int alone[1] = {3}, rc[1];
	struct ft__view v[1];

	publish(3, 1, 5);
	v[0] = (struct ft__view){.generation = 1};
	drive(alone, 1, alone, 1, false, rc, v, 300);
	cr_assert_eq(rc[0], 0, "no view, and no verdict, before the detector has waited");
	drive(alone, 1, alone, 1, true, rc, v, 5000);
	cr_assert_eq(rc[0], -FT_EPARTITIONED, "one of four alone: %d", rc[0]);
}

/* 2 | 2: the side holding the lowest rank of the previous view goes on, the other stops. */
Test(inband, even_split_goes_to_the_lowest)
{
	start(4);
	int a[2] = {0, 1}, b[2] = {2, 3}, rca[2], rcb[2];
	struct ft__view va[2], vb[2];

	for (int r = 0; r < 4; r++)
		publish(r, 1, 7);
	settle_all(b, 2, b, 2, 1, true, rcb, vb);
	settle_all(a, 2, a, 2, 1, true, rca, va);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(rcb[i], -FT_EPARTITIONED, "rank %d of {2,3}: %d", b[i], rcb[i]);
		cr_assert_eq(rca[i], 1, "rank %d of {0,1}: %d", a[i], rca[i]);
		expect_view(&va[i], a, 2, "{0,1}");
		ft__view_free(&va[i]);
	}
}

/* Deaths a kernel reported do not count: one rank left of four goes on. */
Test(inband, certain_deaths_let_the_last_rank_go_on)
{
	start(4);
	int alone[1] = {1}, rc[1];
	struct ft__view v[1];

	for (int r = 0; r < 4; r++)
		if (r != 1) {
			ft__mb_close(&mb[r], 0, false); /* its listener closes: refused from now on */
			open_[r] = false;
		}
	ft__mb_certain(&mb[1], 0);
	ft__mb_certain(&mb[1], 2);
	publish(1, 1, 3);
	/* rank 3: no word from the detector, and a refusal is suspicion only:
	 * of {1, 3}, 1 is half and the lowest */
	int cand[2] = {1, 3};
	v[0] = (struct ft__view){.generation = 1};
	drive(alone, 1, cand, 2, true, rc, v, 5000);
	cr_assert_eq(rc[0], 1, "the last rank: %d", rc[0]);
	expect_view(&v[0], alone, 1, "alone");
	ft__view_free(&v[0]);
}

/* The coordinator dies once the others accepted its proposal: the next one commits the same view. */
Test(inband, coordinator_lost_mid_settle)
{
	start(4);
	int three[3] = {0, 1, 2}, rest[2] = {1, 2}, rc[3];
	struct ft__view v[3];

	for (int i = 0; i < 3; i++)
		publish(three[i], 1, 4);
	/* rank 0 collects and proposes; 1 and 2 accept; rank 0 dies before
	 * it commits: drive until both accepted, then close it */
	for (int i = 0; i < 3; i++)
		v[i] = (struct ft__view){.generation = 1};
	for (int step = 0; step < 200; step++) {
		int r0 = ft__mb_try_settle(&mb[0], 1, three, 3, false, &v[0]);
		if (r0 == 1) {
			ft__view_free(&v[0]);
			break; /* it got there first: the others must adopt the same */
		}
		for (int i = 1; i < 3; i++)
			(void)ft__mb_try_settle(&mb[three[i]], 1, three, 3, false, &v[i]);
		tu_sleep_ms(1);
	}
	ft__mb_close(&mb[0], 0, false);
	open_[0] = false;
	ft__mb_certain(&mb[1], 0);
	ft__mb_certain(&mb[2], 0);
	drive(rest, 2, rest, 2, true, rc, v + 1, 5000);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(rc[i], 1, "rank %d: %d", rest[i], rc[i]);
	cr_assert_eq(v[1].size, v[2].size, "both adopt one view");
	for (int k = 0; k < v[1].size; k++)
		cr_assert_eq(v[1].members[k], v[2].members[k]);
	ft__view_free(&v[1]);
	ft__view_free(&v[2]);
}

/* Malformed membership messages from an authenticated peer change nothing. */
Test(inband, hostile_messages)
{
	start(3);
	struct ft__ctl ctl;
	struct ft__ctl_params cp = {.rank = 2, .world_size = 3, .job_id = "ib", .token = "tok",
				    .who = "hostile", .min_payload = 4096};
	unsigned char junk[600];
	struct ft__member m;
	int i;

	cr_assert_eq(ft__ctl_open(&ctl, &cp), 0);
	/* as rank 2, to rank 0's membership listener */
	char addr[64];
	const char *p = peers;
	snprintf(addr, sizeof(addr), "%.*s", (int)(strchr(p, ',') - p), p);
	i = ft__ctl_connect(&ctl, addr, 0, 0, 2000);
	cr_assert_geq(i, 0);
	srand(7);
	for (int type = FT__CTL_MB_COLLECT; type <= FT__CTL_MB_NOQUORUM; type++)
		for (int k = 0; k < 40; k++) {
			size_t len = (size_t)(rand() % (int)sizeof(junk));
			for (size_t j = 0; j < len; j++)
				junk[j] = (unsigned char)(k < 20 ? rand() : (j % 8 == 0 ? 0xff : 0));
			(void)ft__ctl_send(&ctl, i, type, (uint32_t)(rand() % 3), junk, len);
		}
	tu_sleep_ms(50);
	(void)ft__mb_pump(&mb[0]);
	ft__ctl_close(&ctl);
	/* rank 0 still holds generation 0 as it was, and settles the next one */
	cr_assert_eq(ft__mb_lookup(&mb[0], 0, 1, &m), 0);
	cr_assert_str_eq(m.addr, "127.0.0.1:7001");
	int all[3] = {0, 1, 2}, rc[3];
	struct ft__view v[3];
	for (int r = 0; r < 3; r++)
		publish(r, 1, 2);
	settle_all(all, 3, all, 3, 1, false, rc, v);
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(rc[r], 1, "rank %d: %d", r, rc[r]);
		expect_view(&v[r], all, 3, "after the junk");
		ft__view_free(&v[r]);
	}
}

/* ---- forged messages from an authenticated peer ---- */

/* A link to rank `to`'s membership listener, as rank `as` of the job (a valid hello). */
static int fake_peer(struct ft__ctl *ctl, int as, int to)
{
	struct ft__ctl_params cp = {.rank = as, .world_size = n, .job_id = "ib", .token = "tok",
				    .who = "forger", .min_payload = 65535};
	char addr[64];
	const char *p = peers;
	int i;

	for (int k = 0; k < to; k++)
		p = strchr(p, ',') + 1;
	snprintf(addr, sizeof(addr), "%.*s", (int)strcspn(p, ","), p);
	cr_assert_eq(ft__ctl_open(ctl, &cp), 0);
	i = ft__ctl_connect(ctl, addr, to, 0, 2000);
	cr_assert_geq(i, 0);
	return i;
}

/* A view's wire form (member_inband.c, put_value): every member's next op 0. */
static size_t value_bytes(unsigned char *buf, uint64_t ballot, uint64_t nonce, const int *m,
			  int nm)
{
	uint64_t zero = 0;
	int32_t count = nm;
	size_t at = 0;

	memcpy(buf + at, &ballot, 8), at += 8;
	memcpy(buf + at, &zero, 8), at += 8;
	memcpy(buf + at, &nonce, 8), at += 8;
	memcpy(buf + at, &count, 4), at += 4;
	for (int k = 0; k < nm; k++) {
		int32_t r = m[k];
		memcpy(buf + at, &r, 4), at += 4;
	}
	for (int k = 0; k < nm; k++)
		memcpy(buf + at, &zero, 8), at += 8;
	return at;
}

static long resident_kb(void)
{
	long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	cr_assert_not_null(f);
	cr_assert_eq(fscanf(f, "%ld %ld", &size, &res), 2);
	fclose(f);
	return res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Pumps rank r's membership for ms milliseconds. */
static void pump_for(int r, long ms)
{
	long end = tu_now_ms() + ms;

	while (tu_now_ms() < end) {
		(void)ft__mb_pump(&mb[r]);
		tu_sleep_ms(2);
	}
}

/*
 * COMMITs no settle can produce here are ignored and allocate nothing: far
 * past the next generation (it once grew the views to (gen + 8) x 80 bytes),
 * at the top of the generations (gen + 8 wrapped), the next generation with
 * another job's nonce or a member outside the previous view's... Only then
 * does the next generation settle as usual.
 */
Test(inband, commits_out_of_reach_are_ignored)
{
	uint64_t nonce = start(3);
	struct ft__ctl ctl;
	unsigned char buf[256];
	int all[3] = {0, 1, 2}, two[2] = {0, 1}, rc[3], i;
	uint32_t far[] = {5000000, UINT32_MAX, UINT32_MAX - 7, 2};
	uint64_t ballot = (uint64_t)1 << 16 | 2;
	struct ft__member m;
	struct ft__view v[3];
	long before = resident_kb();

	i = fake_peer(&ctl, 2, 0);
	for (size_t k = 0; k < sizeof(far) / sizeof(far[0]); k++) {
		size_t len = value_bytes(buf, ballot, nonce, all, 3);
		cr_assert_eq(ft__ctl_send(&ctl, i, FT__CTL_MB_COMMIT, far[k], buf, len), 0);
	}
	/* generation 1, reachable, but not this job's (nonce) */
	size_t len = value_bytes(buf, ballot, nonce + 1, two, 2);
	cr_assert_eq(ft__ctl_send(&ctl, i, FT__CTL_MB_COMMIT, 1, buf, len), 0);
	/* generation 1 from a coordinator whose ballot names another rank */
	len = value_bytes(buf, (uint64_t)1 << 16 | 1, nonce, two, 2);
	cr_assert_eq(ft__ctl_send(&ctl, i, FT__CTL_MB_COMMIT, 1, buf, len), 0);
	pump_for(0, 100);
	long grown = resident_kb() - before;
	ft__ctl_close(&ctl);
	cr_assert_lt(grown, 8 * 1024, "resident memory grew by %ld kB", grown);
	for (size_t k = 0; k < sizeof(far) / sizeof(far[0]); k++)
		cr_assert_neq(ft__mb_lookup(&mb[0], far[k], 0, &m), 0, "generation %u taken",
			      far[k]);
	cr_assert_neq(ft__mb_lookup(&mb[0], 1, 0, &m), 0, "a forged generation 1 was taken");
	for (int r = 0; r < 3; r++)
		publish(r, 1, 2);
	settle_all(all, 3, all, 3, 1, false, rc, v);
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(rc[r], 1, "rank %d: %d", r, rc[r]);
		expect_view(&v[r], all, 3, "generation 1");
		ft__view_free(&v[r]);
	}
}

/*
 * Ballots and generations a forger makes up move nothing: a COLLECT about a
 * far generation does not set the detector recovering toward it, and a
 * ballot at the top of the range (a promise no coordinator could beat: the
 * next round wrapped to ballot 0) does not stop the next generation.
 */
Test(inband, forged_ballots_and_generations)
{
	start(3);
	struct ft__ctl ctl;
	uint64_t top = UINT64_MAX, ok = (uint64_t)1 << 16 | 2;
	int all[3] = {0, 1, 2}, rc[3], i;
	struct ft__view v[3];

	i = fake_peer(&ctl, 2, 0);
	cr_assert_eq(ft__ctl_send(&ctl, i, FT__CTL_MB_COLLECT, 5000000, &ok, 8), 0);
	cr_assert_eq(ft__ctl_send(&ctl, i, FT__CTL_MB_COLLECT, 1, &top, 8), 0);
	cr_assert_eq(ft__ctl_send(&ctl, i, FT__CTL_MB_NACK, 0, &top, 8), 0);
	cr_assert_eq(ft__ctl_send(&ctl, i, FT__CTL_MB_NOQUORUM, 1, &top, 8), 0);
	long end = tu_now_ms() + 100;
	uint32_t asked = 0;
	while (tu_now_ms() < end) {
		uint32_t a = ft__mb_pump(&mb[0]);
		asked = a > asked ? a : asked;
		tu_sleep_ms(2);
	}
	ft__ctl_close(&ctl);
	cr_assert_leq(asked, 1, "asked about generation %u", asked);
	for (int r = 0; r < 3; r++)
		publish(r, 1, 2);
	settle_all(all, 3, all, 3, 1, false, rc, v);
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(rc[r], 1, "rank %d: %d", r, rc[r]);
		expect_view(&v[r], all, 3, "generation 1");
		ft__view_free(&v[r]);
	}
}

static void *resume_main(void *arg)
{
	struct ft__view v = {0};
	int rc = ft__mb_resume(arg, &v);

	ft__view_free(&v);
	return (void *)(intptr_t)rc;
}

/* The next message on link i of ctl within ms: its type (-1: none). */
static int next_type(struct ft__ctl *ctl, int i, long ms, struct ft__ctl_msg *m)
{
	for (long end = tu_now_ms() + ms; tu_now_ms() < end; tu_sleep_ms(2)) {
		int rc = ft__ctl_next(ctl, i, m);
		if (rc < 0)
			return -1;
		if (rc > 0)
			return m->type;
	}
	return -1;
}

/* The next NACK on link i of ctl within ms: the ballot it names (0: none came). */
static uint64_t next_nack(struct ft__ctl *ctl, int i, long ms)
{
	struct ft__ctl_msg m;
	uint64_t b = 0;
	int type;

	while ((type = next_type(ctl, i, ms, &m)) >= 0 && type != FT__CTL_MB_NACK)
		;
	if (type != FT__CTL_MB_NACK)
		return 0;
	cr_assert_eq(m.gen, 0);
	cr_assert_eq(m.len, 8);
	memcpy(&b, m.payload, 8);
	return b;
}

/*
 * A new incarnation that asks for its job while the job's first view is
 * being settled keeps the highest COLLECT of generation 0 it got (it may
 * yet take part: start_again), and refuses the others with a NACK that
 * names the one kept, as an acceptor would: a lower one at once, and the
 * one it kept before when a higher one comes. Their coordinators ask again
 * above it (the one kept may be a dead coordinator's; unanswered, the
 * first view would wait out the connect timeout).
 */
Test(inband, a_newcomer_refuses_lower_collects_of_the_first_view, .timeout = 30)
{
	job(3);
	ft__mb_close(&mb[2], 0, false);
	open_rank(2, 1);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, resume_main, &mb[2]), 0);
	struct ft__ctl c0, c1;
	struct ft__ctl_msg m;
	uint64_t hi = (uint64_t)5 << 16, lo = (uint64_t)3 << 16 | 1, top = (uint64_t)7 << 16 | 1;
	int i0 = fake_peer(&c0, 0, 2), i1 = fake_peer(&c1, 1, 2), type;

	cr_assert_eq(ft__ctl_send(&c0, i0, FT__CTL_MB_COLLECT, 0, &hi, 8), 0);
	while ((type = next_type(&c0, i0, 100, &m)) >= 0)
		cr_assert_neq(type, FT__CTL_MB_NACK, "the highest COLLECT so far was refused");
	/* lower: refused, naming the one kept */
	cr_assert_eq(ft__ctl_send(&c1, i1, FT__CTL_MB_COLLECT, 0, &lo, 8), 0);
	cr_assert_eq(next_nack(&c1, i1, 1000), hi, "a lower COLLECT of generation 0: no NACK "
		     "naming the one kept");
	/* higher: kept, and the one kept before refused */
	cr_assert_eq(ft__ctl_send(&c1, i1, FT__CTL_MB_COLLECT, 0, &top, 8), 0);
	cr_assert_eq(next_nack(&c0, i0, 1000), top, "the COLLECT kept before a higher one: no "
		     "NACK naming the higher");
	ft__ctl_close(&c0);
	ft__ctl_close(&c1);
	void *rc;
	cr_assert_eq(pthread_join(t, &rc), 0);
	/* nobody answered its ASK: the job is over, as far as it can tell */
	cr_assert_eq((int)(intptr_t)rc, -FT_EENDED);
}

/* ---- what counts as a certain death ---- */

/*
 * Refused connections are suspicion only: a full accept table, or a new
 * incarnation at the address, refuses too. The last of four, refused by
 * the other three's listeners and told nothing certain, has no quorum.
 */
Test(inband, refusals_are_not_certain)
{
	start(4);
	int alone[1] = {3}, all[4] = {0, 1, 2, 3}, rc[1];
	struct ft__view v[1];

	for (int r = 0; r < 3; r++) {
		ft__mb_close(&mb[r], 0, false); /* refused from now on */
		open_[r] = false;
	}
	publish(3, 1, 3);
	v[0] = (struct ft__view){.generation = 1};
	drive(alone, 1, all, 4, true, rc, v, 5000);
	cr_assert_eq(rc[0], -FT_EPARTITIONED, "one of four, refused by three: %d", rc[0]);
}

/*
 * Nor is a link closed before the peer answered its hello: whatever holds
 * rank 0's address now (here a listener that accepts and closes at once)
 * is not shown to be rank 0. Ranks 1 and 2 are certainly gone; 3 and the
 * unproven 0 are half of the rest, without the lowest: no quorum.
 */
Test(inband, a_link_closed_before_the_hello_was_answered_is_not_certain)
{
	start(4);
	int alone[1] = {3}, cand[2] = {0, 3}, rc = 0;
	struct ft__view v = {.generation = 1};

	for (int r = 0; r < 3; r++) {
		ft__mb_close(&mb[r], 0, false);
		open_[r] = false;
	}
	cr_assert_eq(listen(port_fd[0], 16), 0);
	cr_assert_eq(fcntl(port_fd[0], F_SETFL, O_NONBLOCK), 0);
	ft__mb_certain(&mb[3], 1);
	ft__mb_certain(&mb[3], 2);
	publish(3, 1, 3);
	long end = tu_now_ms() + 5000;
	while (rc == 0 && tu_now_ms() < end) {
		int fd;
		while ((fd = accept(port_fd[0], NULL, NULL)) >= 0)
			close(fd);
		rc = ft__mb_try_settle(&mb[alone[0]], 1, cand, 2, true, &v);
		tu_sleep_ms(1);
	}
	if (rc == 1)
		ft__view_free(&v);
	cr_assert_eq(rc, -FT_EPARTITIONED, "rank 3 with an unproven rank 0: %d", rc);
}

/* A link on which the peer proved the token, then closed by its kernel, is proof: the last
 * of three goes on. */
Test(inband, a_proven_link_closed_is_certain)
{
	start(3);
	int alone[1] = {0}, all[3] = {0, 1, 2}, rc[1];
	struct ft__view v[1];

	for (int r = 1; r < 3; r++) {
		ft__mb_close(&mb[r], 0, false);
		open_[r] = false;
	}
	publish(0, 1, 3);
	v[0] = (struct ft__view){.generation = 1};
	drive(alone, 1, all, 3, true, rc, v, 5000);
	cr_assert_eq(rc[0], 1, "the last rank: %d", rc[0]);
	expect_view(&v[0], alone, 1, "alone");
	ft__view_free(&v[0]);
}

/* ---- dead incarnations under rejoin ---- */

/* A new incarnation's link (rejoin_as), pumped by drive_back: its REJOIN goes
 * out once the link's hello is answered. */
static struct ft__ctl *newcomer;
static int newcomer_link;

/*
 * A REJOIN of rank e's new incarnation for generation gen (inband_rejoin.c,
 * put_entry: next op 0, no log), to rank `to` on a link of its own as
 * rank e; *ctl stays open, for only a live record is awaited.
 */
static void rejoin_as(struct ft__ctl *ctl, int e, int to, uint32_t gen)
{
	unsigned char buf[256];
	const char *s[3] = {"127.0.0.1:7100", "127.0.0.1:8100", "127.0.0.1:9100"};
	int32_t rank = e;
	uint64_t next_op = 0;
	size_t at = 0;
	int i = fake_peer(ctl, e, to);

	memcpy(buf + at, &rank, 4), at += 4;
	memcpy(buf + at, &next_op, 8), at += 8;
	for (int k = 0; k < 3; k++) {
		uint16_t l = (uint16_t)strlen(s[k]);
		memcpy(buf + at, &l, 2), at += 2;
		memcpy(buf + at, s[k], l), at += l;
	}
	cr_assert_eq(ft__ctl_send(ctl, i, FT__CTL_MB_REJOIN, gen, buf, at), 0);
	newcomer = ctl;
	newcomer_link = i;
}

/* Drives ranks who[] for generation 1 (candidates cand[], awaited back[]) for
 * up to ms: each rank's last answer in rc[], its view in v[]. */
static void drive_back(const int *who, int nwho, const int *cand, int ncand, const int *back,
		       int nback, int *rc, struct ft__view *v, long ms)
{
	long end = tu_now_ms() + ms;
	int left = nwho;

	for (int i = 0; i < nwho; i++) {
		rc[i] = 0;
		v[i] = (struct ft__view){.generation = 1};
	}
	while (left > 0 && tu_now_ms() < end) {
		struct ft__ctl_msg m;
		while (newcomer != NULL && ft__ctl_next(newcomer, newcomer_link, &m) == 1)
			; /* (its answers: not read here) */
		for (int i = 0; i < nwho; i++)
			if (rc[i] == 0 && (rc[i] = ft__mb_try_settle_back(&mb[who[i]], 1, cand, ncand,
									  back, nback, false,
									  &v[i])) != 0)
				left--;
		tu_sleep_ms(1);
	}
}

/* Generation 1 holds rank 3 as a new incarnation (the REJOIN's), on every rank of who[]. */
static void expect_rank_3_new(const int *who, int nwho, const int *rc, struct ft__view *v)
{
	int all[4] = {0, 1, 2, 3};

	for (int i = 0; i < nwho; i++) {
		struct ft__member m;
		cr_assert_eq(rc[i], 1, "rank %d: generation 1 not settled (%d)", who[i], rc[i]);
		expect_view(&v[i], all, 4, "generation 1");
		ft__view_free(&v[i]);
		cr_assert_eq(ft__mb_lookup(&mb[who[i]], 1, 3, &m), 0);
		cr_assert(m.rejoining, "rank %d: generation 1 holds rank 3's dead incarnation", who[i]);
		cr_assert_str_eq(m.addr, "127.0.0.1:7100");
	}
}

/*
 * Rank 3 answers the coordinator's COLLECT of generation 1, then dies for
 * certain, and its new incarnation asks back: the view takes that one, as
 * new. Before, the answer made the dead incarnation a member as it was,
 * and its new one (the detector awaited it, back[]) was skipped as already
 * in: the next view, settled before any detector found it dead again, left
 * it out unawaited, and an op under rejoin ran short (test_inband_rejoin,
 * chains of newcomers, 1 run in 13 on a loaded machine).
 */
Test(inband, an_answer_of_a_rank_dead_since_makes_no_member, .timeout = 30)
{
	start_wait_ms = 5000;
	start(4);
	int two[2] = {0, 3}, three[3] = {0, 1, 2}, all[4] = {0, 1, 2, 3}, back[1] = {3}, rc[3];
	struct ft__view v[3] = {{.generation = 1}, {.generation = 1}};
	struct ft__ctl ctl;

	for (int r = 0; r < 4; r++)
		publish(r, 1, 5);
	/* only 0 (the coordinator) and 3 run: 0 waits for 1 and 2 */
	for (long end = tu_now_ms() + 5000; !IB(&mb[0])->r[3].replied && tu_now_ms() < end;
	     tu_sleep_ms(1))
		for (int i = 0; i < 2; i++)
			cr_assert_eq(ft__mb_try_settle(&mb[two[i]], 1, all, 4, false, &v[i]), 0);
	cr_assert(IB(&mb[0])->r[3].replied, "rank 3 did not answer the COLLECT");
	ft__mb_close(&mb[3], 0, false);
	open_[3] = false;
	for (int r = 0; r < 3; r++)
		ft__mb_certain(&mb[r], 3); /* the detectors' word: 3 failed, awaited back */
	rejoin_as(&ctl, 3, 0, 1);
	drive_back(three, 3, three, 3, back, 1, rc, v, 5000);
	ft__ctl_close(&ctl);
	newcomer = NULL;
	expect_rank_3_new(three, 3, rc, v);
}

/*
 * Rank 3 is dead for certain, but no detector named it (several died at
 * once, or the view held a dead incarnation whose death news the detector
 * took as old): a candidate still. Under rejoin its new incarnation is
 * awaited, as the file backend awaits a dead candidate; before, the view
 * settled without it at once, and the op ran short.
 */
Test(inband, a_candidate_dead_for_certain_is_awaited_under_rejoin, .timeout = 30)
{
	start_wait_ms = 5000;
	start(4);
	int three[3] = {0, 1, 2}, all[4] = {0, 1, 2, 3}, rc[3];
	struct ft__view v[3];
	struct ft__ctl ctl;

	ft__mb_close(&mb[3], 0, false);
	open_[3] = false;
	for (int r = 0; r < 3; r++) {
		ft__mb_certain(&mb[r], 3);
		publish(r, 1, 5);
	}
	drive_back(three, 3, all, 4, NULL, 0, rc, v, 300);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(rc[i], 0, "rank %d settled without rank 3's new incarnation (%d)",
			     three[i], rc[i]);
	rejoin_as(&ctl, 3, 0, 1);
	drive_back(three, 3, all, 4, NULL, 0, rc, v, 5000);
	ft__ctl_close(&ctl);
	newcomer = NULL;
	expect_rank_3_new(three, 3, rc, v);
}

/* ... for start_wait_ms at most; and not at all under shrink (0), nor a rank that finalized. */
Test(inband, a_dead_candidate_is_awaited_only_so_long, .timeout = 30)
{
	int three[3] = {0, 1, 2}, all[4] = {0, 1, 2, 3}, rc[3];
	struct ft__view v[3];
	long t0;

	for (int how = 0; how < 3; how++) {
		start_wait_ms = how == 1 ? 0 : how == 0 ? 300 : 20000;
		start(4);
		if (how == 2) {
			cr_assert_eq(ft__mb_depart(&mb[3], 5), 0); /* a goodbye, then the closes */
		} else {
			ft__mb_close(&mb[3], 0, false);
			for (int r = 0; r < 3; r++)
				ft__mb_certain(&mb[r], 3);
		}
		for (int r = 0; r < 3; r++)
			publish(r, 1, 5);
		t0 = tu_now_ms();
		drive_back(three, 3, all, 4, NULL, 0, rc, v, 5000);
		for (int i = 0; i < 3; i++) {
			cr_assert_eq(rc[i], 1, "case %d, rank %d: %d", how, three[i], rc[i]);
			expect_view(&v[i], three, 3, "without rank 3");
			ft__view_free(&v[i]);
		}
		if (how == 0)
			cr_assert_geq(tu_now_ms() - t0, 300, "rank 3 was not awaited");
		end_job();
	}
}

/* ---- the launcher's word ---- */

/*
 * A job whose first book comes from ftcc-run's store, served by a thread
 * here (served.h); each rank opens on a thread of its own, for the book
 * goes out only once every rank joined.
 */
static struct served sv = {.job = "ib-store"};
static pthread_t sv_thread;

static void say_nothing(void *arg, const char *line)
{
	(void)arg;
	(void)line;
}

static void *open_from_store(void *arg)
{
	int r = (int)(intptr_t)arg;
	struct ft__mb_params p = {.backend = "inband", .job_id = sv.job, .rank = r,
				  .world_size = n, .token = "tok", .bind_host = "127.0.0.1",
				  .reply_wait_ms = 100,
				  .book = {.how = "store", .store = sv.addr, .job_id = sv.job,
					   .token = "tok", .rank = r, .world_size = n,
					   .timeout_ms = 5000}};

	return (void *)(intptr_t)ft__mb_open(&mb[r], &p);
}

static void store_job(int size)
{
	pthread_t t[N_MAX];

	n = size;
	sv.world = (uint32_t)size;
	cr_assert_eq(ft__store_server_open(&sv.s, "127.0.0.1", "0", "tok", 0, say_nothing, NULL,
					   sv.addr, sizeof(sv.addr)), 0);
	cr_assert_eq(pthread_create(&sv_thread, NULL, serve, &sv), 0);
	for (int r = 0; r < n; r++)
		cr_assert_eq(pthread_create(&t[r], NULL, open_from_store, (void *)(intptr_t)r), 0);
	for (int r = 0; r < n; r++) {
		void *orc;
		pthread_join(t[r], &orc);
		cr_assert_eq((int)(intptr_t)orc, 0, "rank %d: open", r);
		open_[r] = true;
	}
	(void)first_view();
}

static void end_store_job(void)
{
	for (int r = 0; r < n; r++) {
		if (open_[r])
			ft__mb_close(&mb[r], 0, false);
		open_[r] = false;
	}
	if (sv.s != NULL) {
		atomic_store(&sv.stop, true);
		pthread_join(sv_thread, NULL);
		ft__store_server_close(sv.s);
		sv.s = NULL;
	}
}

/* Ranks of four (a bitmap) die: their listeners close, and the launcher tells the store. */
static void die_seen_by_the_launcher(unsigned ranks)
{
	long end = tu_now_ms() + 5000;

	for (int r = 0; r < n; r++)
		if (ranks & 1u << r) {
			ft__mb_close(&mb[r], 0, false);
			open_[r] = false;
		}
	atomic_store(&sv.died, ranks);
	while ((atomic_load(&sv.told) & ranks) != ranks && tu_now_ms() < end)
		tu_sleep_ms(1);
	cr_assert_eq(atomic_load(&sv.told) & ranks, ranks, "the store was not told in 5 s");
}

TestSuite(inband_store, .init = quiet, .fini = end_store_job);

/*
 * Ranks 0 and 1 of four die where no link of 2's or 3's own reached them
 * (under a store's book only the coordinator connects), so neither death
 * is certain to them: 2 and 3 are half of four, without the lowest. The
 * launcher saw both die and its store's book says so: 2 and 3 go on.
 * Before, both stopped with -FT_EPARTITIONED (the campaign: ranks 2, 0
 * and 4 of five killed within 65 ms left 1 and 3 so, 1 trial in 1000).
 */
Test(inband_store, the_launchers_word_makes_deaths_certain, .timeout = 30)
{
	int two[2] = {2, 3}, rc[2];
	struct ft__view v[2];

	store_job(4);
	die_seen_by_the_launcher(1u << 0 | 1u << 1);
	publish(2, 1, 3);
	publish(3, 1, 3);
	settle_all(two, 2, two, 2, 1, true, rc, v);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(rc[i], 1, "rank %d of {2,3}: %s", two[i], ft_strerror(rc[i]));
		expect_view(&v[i], two, 2, "{2,3}");
		ft__view_free(&v[i]);
	}
}

/* The word counts only for the ranks it names: rank 2 gone unseen leaves 3 half of {2, 3},
 * without the lowest. */
Test(inband_store, only_the_deaths_the_launcher_saw_are_certain, .timeout = 30)
{
	int alone[1] = {3}, all[4] = {0, 1, 2, 3}, rc[1];
	struct ft__view v[1];

	store_job(4);
	die_seen_by_the_launcher(1u << 0 | 1u << 1);
	ft__mb_close(&mb[2], 0, false);
	open_[2] = false;
	publish(3, 1, 3);
	v[0] = (struct ft__view){.generation = 1};
	drive(alone, 1, all, 4, true, rc, v, 5000);
	cr_assert_eq(rc[0], -FT_EPARTITIONED, "rank 3 with an unseen rank 2: %d", rc[0]);
}

/* Rank 63 dies after ft_init; the others sum their ranks twice, in generation 1 without it. */
static int sum_ranks(struct ft_comm *comm, int rank, int size, void *arg)
{
	(void)arg;
	if (rank == size - 1)
		raise(SIGKILL);
	for (int it = 0; it < 2; it++) {
		struct ft_op_info info;
		int64_t v = rank, want = 0;
		int rc = ft_allreduce(comm, FT_IN_PLACE, &v, 1, FT_INT64, FT_SUM, &info);
		if (rc != 0) {
			fprintf(stderr, "rank %d: allreduce %d: %s\n", rank, it, ft_strerror(rc));
			return 1;
		}
		for (int k = 0; k < ft_size(comm); k++)
			want += ft_orig_rank(comm, k);
		if (v != want || ft_size(comm) != size - 1 || info.generation != 1) {
			fprintf(stderr, "rank %d: %lld over %d ranks in generation %u, want %lld "
				"over %d in 1\n", rank, (long long)v, ft_size(comm),
				info.generation, (long long)want, size - 1);
			return 2;
		}
	}
	return 0;
}

static void shrink_policy(struct ft_config *cfg, int rank)
{
	(void)rank;
	cfg->policy = FT_POLICY_SHRINK;
}

/*
 * A real job of 64 rank processes (as many as this machine holds) starts
 * under in-band membership, and settles generation 1 among 63 once one dies.
 */
Test(inband_job, sixty_four_ranks, .timeout = 120)
{
	struct tu_job job;
	int killed[64] = {[63] = 1};
	long t0 = tu_now_ms();

	setenv("FTCC_TEST_MEMBERSHIP", "inband", 1);
	tu_job_init(&job, 64);
	for (int r = 0; r < 64; r++)
		tu_spawn(&job, r, sum_ranks, NULL, shrink_policy);
	int bad = tu_wait(&job, 90000, killed);
	tu_job_cleanup(&job);
	cr_assert_eq(bad, 0, "%d of 64 ranks failed", bad);
	cr_log_info("64 ranks, one lost: %ld ms", tu_now_ms() - t0);
}
