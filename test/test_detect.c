/* test_detect.c: the failure detector over real sockets: the failed set, notices both ways, exclusion, hostile peers and views. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "detect.h"
#include "internal.h"
#include "testutil.h"
#include "membership.h"

/*
 * A world of 5 in one process: rank 2 is a real detector (its own thread,
 * its own sockets); ranks 1 (its left neighbour) and 3 (its right) are played
 * by the test through control links of their own (ctl.c, real sockets);
 * ranks 0 and 4 only exist in the rendezvous. The test sends what a
 * neighbour would send and reads what the detector sends back.
 */

#define W 5
#define ME 2
#define LEFT 1
#define RIGHT 3
#define JOB "job"
#define TOKEN "tok"
#define WAIT_MS 10000
#ifndef FT__CTL_HELLO_MS
#define FT__CTL_HELLO_MS 1000
#endif

struct world {
	char root[256];
	struct ft__mb mb[W];
	struct ft__ctl ctl[W];          /* LEFT and RIGHT only */
	struct ft__det *d;
	int link[W];                    /* LEFT, RIGHT: their link with the detector */
	uint64_t nonce;
	int heartbeat_ms, timeout_ms;
	int rcvbuf;                     /* nonzero: RIGHT's socket receive buffer */
	const char *right_token;        /* non-NULL: RIGHT holds this token, not TOKEN */
	const char *left_token;         /* non-NULL: LEFT holds this token, not TOKEN */
};

static struct world w;

static void quiet(void)
{
	ft__log_level = getenv("DBG") ? 3 : -1;
}

TestSuite(detect, .init = quiet);
TestSuite(detect_create, .init = quiet);

/* ---- pthread initialisation that fails on demand ---- */

static int fail_mutex_init, fail_cond_init;

int pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
	static int (*real)(pthread_mutex_t *, const pthread_mutexattr_t *);

	if (real == NULL)
		*(void **)&real = dlsym(RTLD_NEXT, "pthread_mutex_init");
	return fail_mutex_init ? ENOMEM : real(m, a);
}

int pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a)
{
	static int (*real)(pthread_cond_t *, const pthread_condattr_t *);

	if (real == NULL)
		*(void **)&real = dlsym(RTLD_NEXT, "pthread_cond_init");
	return fail_cond_init ? EAGAIN : real(c, a);
}

/* ---- the world ---- */

static void open_world(int heartbeat_ms, int timeout_ms)
{
	struct ft__view v = {0};
	const char *right_token = w.right_token, *left_token = w.left_token;
	int all[W];

	memset(&w, 0, sizeof(w));
	w.right_token = right_token;
	w.left_token = left_token;
	w.heartbeat_ms = heartbeat_ms;
	w.timeout_ms = timeout_ms;
	snprintf(w.root, sizeof(w.root), "%s/ftcc-det-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	cr_assert_not_null(mkdtemp(w.root));
	for (int r = 0; r < W; r++) {
		struct ft__mb_params mp = {.root = w.root, .job_id = JOB, .rank = r, .world_size = W};
		all[r] = r;
		w.link[r] = -1;
		cr_assert_eq(ft__mb_open(&w.mb[r], &mp), 0);
	}
	for (int r = LEFT; r <= RIGHT; r += RIGHT - LEFT) {
		const char *other = r == RIGHT ? w.right_token : w.left_token;
		struct ft__ctl_params cp = {.rank = r, .world_size = W, .job_id = JOB,
					    .token = other != NULL ? other : TOKEN,
					    .bind_host = "127.0.0.1"};
		cr_assert_eq(ft__ctl_open(&w.ctl[r], &cp), 0);
	}
	struct ft__det_params dp = {
		.mb = &w.mb[ME], .world_size = W, .rank = ME, .job_id = JOB, .token = TOKEN,
		.bind_host = "127.0.0.1", .heartbeat_ms = heartbeat_ms,
		.detect_timeout_ms = timeout_ms, .settle_delay_ms = 0,
	};
	cr_assert_eq(ft__det_create(&dp, &w.d), 0);
	for (int r = 0; r < W; r++) {
		struct ft__member m;
		memset(&m, 0, sizeof(m));
		snprintf(m.addr, sizeof(m.addr), "127.0.0.1:%d", 1000 + r);
		if (r == ME)
			snprintf(m.ctrl, sizeof(m.ctrl), "%s", ft__det_addr(w.d));
		else if (r == LEFT || r == RIGHT)
			snprintf(m.ctrl, sizeof(m.ctrl), "%s", w.ctl[r].addr);
		cr_assert_eq(ft__mb_publish(&w.mb[r], 0, &m), 0);
	}
	for (int r = 0; r < W; r++) {
		cr_assert_eq(ft__mb_settle(&w.mb[r], 0, all, W, 5000, &v), 0);
		w.nonce = v.nonce;
		ft__view_free(&v);
	}
	if (w.rcvbuf > 0)
		cr_assert_eq(setsockopt(w.ctl[RIGHT].listen_fd, SOL_SOCKET, SO_RCVBUF, &w.rcvbuf,
					sizeof(w.rcvbuf)), 0);
}

/* Index of RIGHT's link from the detector once its hello passed. */
static int accept_right(void)
{
	struct ft__ctl *c = &w.ctl[RIGHT];
	int64_t end = ft__now_ms() + WAIT_MS;

	while (ft__now_ms() < end) {
		struct pollfd p = {.fd = c->listen_fd, .events = POLLIN};
		struct ft__ctl_msg m;
		(void)poll(&p, 1, 10);
		ft__ctl_accept(c);
		for (int i = 0; i < c->nlinks; i++) {
			if (c->links[i].fd < 0)
				continue;
			if (c->links[i].peer < 0 && ft__ctl_next(c, i, &m) == 1) {
				cr_assert_eq(m.type, FT__CTL_HELLO);
				cr_assert_eq(m.from, ME);
			}
			if (c->links[i].peer == ME)
				return i;
		}
	}
	cr_assert_fail("the detector never connected to its right neighbour");
	return -1;
}

/* LEFT's link to the detector, its hello answered and proved: what LEFT
 * sends before that waits in the link's outbox, and the detector takes
 * nothing from it until the proof. A link closed before its hello was
 * answered (-FT_EBUSY: the detector made room among strangers while LEFT's
 * hello was not in yet, which a loaded host makes likely) is made again,
 * as the detector's own owner does (ctl.h). */
static int connect_left(void)
{
	int64_t end = ft__now_ms() + WAIT_MS;
	struct ft__ctl *c = &w.ctl[LEFT];
	int i = ft__ctl_connect(c, ft__det_addr(w.d), ME, 0, WAIT_MS);

	while (i >= 0 && !c->links[i].proved && ft__now_ms() < end) {
		struct pollfd p = {.fd = c->links[i].fd, .events = POLLIN};
		struct ft__ctl_msg m;
		int rc;
		(void)poll(&p, 1, 10);
		rc = ft__ctl_next(c, i, &m);
		if (rc == -FT_EBUSY) {
			ft__ctl_drop(c, i);
			i = ft__ctl_connect(c, ft__det_addr(w.d), ME, 0, ft__ms_left(end));
			continue;
		}
		/* the call that reads the ACK sends the PROOF and reads on: with
		 * heartbeats every millisecond the detector's first one may come
		 * back in that same call (CI saw it once on a loaded host) */
		if (rc == 1 && c->links[i].proved)
			break;
		cr_assert_eq(rc, 0, "LEFT's link to the detector: %s", ft_err_name(rc));
	}
	cr_assert(i < 0 || c->links[i].proved, "the detector never answered LEFT's hello");
	return i;
}

/* Starts the detector on generation 0 of the whole world, both neighbours linked. */
static void start_world(int heartbeat_ms, int timeout_ms)
{
	const int all[W] = {0, 1, 2, 3, 4};

	open_world(heartbeat_ms, timeout_ms);
	cr_assert_eq(ft__det_start(w.d, 0, all, W), 0);
	w.link[RIGHT] = accept_right();
	w.link[LEFT] = connect_left();
	cr_assert_geq(w.link[LEFT], 0, "cannot link to the detector: %s", ft_err_name(w.link[LEFT]));
}

static void close_world(void)
{
	char cmd[300];

	ft__det_destroy(w.d, true); /* NULL once a test stopped it (stopped_world) */
	for (int r = 0; r < W; r++) {
		if (r == LEFT || r == RIGHT)
			ft__ctl_close(&w.ctl[r]);
		ft__mb_close(&w.mb[r], 1, false);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", w.root);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", w.root);
}

static void send_notice(int from, const int32_t *ranks, int n)
{
	int rc = ft__ctl_send(&w.ctl[from], w.link[from], FT__CTL_NOTICE, 0, ranks,
			      (size_t)n * sizeof(int32_t));
	cr_assert_eq(rc, 0, "notice from %d: %s", from, ft_err_name(rc));
}

/*
 * The next message other than a heartbeat on r's link, within ms: 1 (and
 * *m; a notice's ranks in ranks[0..*n)), 0 at the deadline, or the error
 * that ended the link. The other test links are drained meanwhile.
 */
static int next_msg(int r, long ms, struct ft__ctl_msg *m, int32_t *ranks, int *n)
{
	int64_t end = ft__now_ms() + ms;

	for (;;) {
		int rc = ft__ctl_next(&w.ctl[r], w.link[r], m);
		if (rc < 0)
			return rc;
		if (rc == 1 && m->type == FT__CTL_HB)
			continue;
		if (rc == 1) {
			if (m->type == FT__CTL_NOTICE && ranks != NULL) {
				*n = (int)(m->len / sizeof(int32_t));
				memcpy(ranks, m->payload, m->len);
			}
			return 1;
		}
		if (ft__now_ms() >= end)
			return 0;
		struct pollfd p = {.fd = w.ctl[r].links[w.link[r]].fd, .events = POLLIN};
		(void)poll(&p, 1, 10);
	}
}

/* Expects a notice on r's link listing exactly want[0..nw), ascending. */
static void expect_notice(int r, const int32_t *want, int nw, const char *what)
{
	struct ft__ctl_msg m;
	int32_t got[W * 4];
	int n = -1, rc = next_msg(r, WAIT_MS, &m, got, &n);

	cr_assert_eq(rc, 1, "%s: no message at rank %d (%s)", what, r, ft_err_name(rc));
	cr_assert_eq(m.type, FT__CTL_NOTICE, "%s: rank %d got message type %d", what, r, m.type);
	cr_assert_eq(m.from, ME);
	cr_assert_eq(n, nw, "%s: rank %d got a notice of %d ranks, want %d", what, r, n, nw);
	for (int i = 0; i < nw; i++)
		cr_expect_eq(got[i], want[i], "%s: rank %d: notice[%d] = %d, want %d", what, r, i,
			     got[i], want[i]);
}

/* Expects r's link to end (the detector closed it): on a link r opened
 * whose hello the detector never answered, that close proves nothing
 * (FT_EBUSY, ctl.h). */
static void expect_closed(int r, const char *what)
{
	struct ft__ctl_msg m;
	bool unanswered = w.ctl[r].links[w.link[r]].await_ack;
	int rc;

	do
		rc = next_msg(r, WAIT_MS, &m, NULL, NULL);
	while (rc == 1 && m.type == FT__CTL_NOTICE);
	cr_expect_eq(rc, unanswered ? -FT_EBUSY : -FT_EPEERFAILED, "%s: rank %d's link: %s, type %d",
		     what, r, ft_err_name(rc), rc == 1 ? m.type : 0);
}

/* The notices go out first, then the detector tells the main thread (a
 * failed member: it must recover). */
static void wait_pending(void)
{
	for (int64_t end = ft__now_ms() + WAIT_MS; !ft__det_pending(w.d) && ft__now_ms() < end;) {
		struct timespec ts = {0, 1000000L};
		nanosleep(&ts, NULL);
	}
	cr_assert(ft__det_pending(w.d), "the main thread was never told of the failure");
}

/* ---- the failed set and its notices ---- */

Test(detect, notice_reaches_both_neighbours, .timeout = 60)
{
	const int32_t four[] = {4}, zero[] = {0}, zero_four[] = {0, 4};

	start_world(50, 30000);
	cr_expect(!ft__det_pending(w.d));
	send_notice(LEFT, four, 1);
	expect_notice(RIGHT, four, 1, "from the left, forwarded right");
	expect_notice(LEFT, four, 1, "and back left");
	cr_expect(ft__det_failed(w.d, 4));
	wait_pending();

	/* the other way round: from the right, forwarded left */
	send_notice(RIGHT, zero, 1);
	expect_notice(LEFT, zero_four, 2, "from the right, forwarded left");
	expect_notice(RIGHT, zero_four, 2, "and back right");
	close_world();
}

/*
 * A neighbour counted out while alive (sent away, or wrongly suspected)
 * hears it before its link closes: it then leaves, instead of taking the
 * close for this rank's death (a newcomer sent away once did, and settled
 * a view of its own with the ranks that had not heard yet).
 */
Test(detect, a_rank_counted_out_hears_it_first, .timeout = 60)
{
	const int32_t right[] = {RIGHT};
	struct ft__ctl_msg m;
	int32_t got[W];
	int n = 0, rc;

	start_world(50, 30000);
	/* the right neighbour answers its hello, as a live one does */
	cr_assert_eq(ft__ctl_send(&w.ctl[RIGHT], w.link[RIGHT], FT__CTL_HB, 0, NULL, 0), 0);
	send_notice(LEFT, right, 1);
	rc = next_msg(RIGHT, WAIT_MS, &m, got, &n);
	cr_expect_eq(rc, 1, "the rank counted out got no notice before the close: %s",
		     ft_err_name(rc));
	if (rc == 1) {
		cr_expect_eq(m.type, FT__CTL_NOTICE);
		cr_expect_eq(n, 1);
		cr_expect_eq(got[0], RIGHT, "the notice names rank %d", got[0]);
	}
	close_world();
}

Test(detect, failed_set_only_grows, .timeout = 60)
{
	const int32_t four[] = {4}, zero[] = {0}, zero_four[] = {0, 4};

	start_world(50, 30000);
	send_notice(LEFT, four, 1);
	expect_notice(RIGHT, four, 1, "first notice");
	/* nothing new: not forwarded; a notice without 4 does not take it out */
	send_notice(LEFT, four, 1);
	send_notice(LEFT, zero, 1);
	expect_notice(RIGHT, zero_four, 2, "after a repeat and a new rank");
	cr_expect(ft__det_failed(w.d, 4));
	cr_expect(ft__det_failed(w.d, 0));
	cr_expect(!ft__det_failed(w.d, 1));
	cr_expect(!ft__det_failed(w.d, 3));
	close_world();
}

Test(detect, ranks_outside_the_world_ignored, .timeout = 60)
{
	const int32_t wild[] = {-1, W, 1000000, INT32_MIN, INT32_MAX}, zero[] = {0};

	start_world(50, 30000);
	send_notice(LEFT, wild, 5);
	send_notice(LEFT, zero, 1);
	/* had any wild rank counted, this notice would carry it (or come earlier) */
	expect_notice(RIGHT, zero, 1, "after ranks outside the world");
	cr_expect(!ft__det_failed(w.d, -1));
	cr_expect(!ft__det_failed(w.d, W));
	close_world();
}

Test(detect, notice_naming_self_excludes, .timeout = 60)
{
	const int32_t me[] = {ME};
	struct ft__view v = {0};

	start_world(50, 30000);
	send_notice(LEFT, me, 1);
	cr_expect_eq(ft__det_await(w.d, 0, WAIT_MS, &v), -FT_EEXCLUDED);
	cr_expect(ft__det_pending(w.d));
	expect_closed(LEFT, "excluded");
	expect_closed(RIGHT, "excluded");
	close_world();
}

Test(detect, link_closed_without_goodbye_declares, .timeout = 60)
{
	const int32_t right[] = {RIGHT};

	start_world(50, 30000);
	/* a live neighbour answers the hello with its first heartbeat */
	cr_assert_eq(ft__ctl_send(&w.ctl[RIGHT], w.link[RIGHT], FT__CTL_HB, 0, NULL, 0), 0);
	ft__ctl_drop(&w.ctl[RIGHT], w.link[RIGHT]);
	expect_notice(LEFT, right, 1, "right neighbour's link closed");
	cr_expect(ft__det_failed(w.d, RIGHT));
	close_world();
}

Test(detect, goodbye_is_no_failure, .timeout = 60)
{
	const int32_t zero[] = {0};

	start_world(50, 30000);
	cr_assert_eq(ft__ctl_send(&w.ctl[LEFT], w.link[LEFT], FT__CTL_BYE, 0, NULL, 0), 0);
	ft__ctl_drop(&w.ctl[LEFT], w.link[LEFT]);
	send_notice(RIGHT, zero, 1);
	expect_notice(RIGHT, zero, 1, "after the left said goodbye");
	cr_expect(!ft__det_failed(w.d, LEFT));
	close_world();
}

/*
 * The detector stopped: at a clean end (ft_finalize) each neighbour is told
 * goodbye, which is no failure; otherwise (ft_init failed after the job's
 * first view, a recovery failed) the links just close, and the neighbours
 * count this rank failed. A goodbye on the way out of a failed ft_init once
 * told a ring of two that the rank had left in peace: the other waited for
 * its ring link until the connect timeout (campaign trial 45).
 */
static void stopped_world(bool clean)
{
	struct ft__ctl_msg m;
	int rc;

	start_world(50, 30000);
	for (int r = LEFT; r <= RIGHT; r += RIGHT - LEFT) {
		/* a heartbeat on each link: the detector took LEFT's proof */
		int64_t end = ft__now_ms() + WAIT_MS;
		while ((rc = ft__ctl_next(&w.ctl[r], w.link[r], &m)) == 0 && ft__now_ms() < end) {
			struct pollfd p = {.fd = w.ctl[r].links[w.link[r]].fd, .events = POLLIN};
			(void)poll(&p, 1, 10);
		}
		cr_assert_eq(rc, 1, "no heartbeat on rank %d's link: %s", r, ft_err_name(rc));
	}
	ft__det_destroy(w.d, clean);
	w.d = NULL;
	for (int r = LEFT; ; r = RIGHT) {
		do
			rc = next_msg(r, WAIT_MS, &m, NULL, NULL);
		while (rc == 1 && m.type == FT__CTL_NOTICE);
		if (clean)
			cr_expect(rc == 1 && m.type == FT__CTL_BYE, "clean end: rank %d got %s, type %d",
				  r, ft_err_name(rc), rc == 1 ? m.type : 0);
		else
			cr_expect_eq(rc, -FT_EPEERFAILED, "failed end: rank %d got %s, type %d", r,
				     ft_err_name(rc), rc == 1 ? m.type : 0);
		if (r == RIGHT)
			break;
	}
	close_world();
}

Test(detect, a_clean_end_says_goodbye, .timeout = 60)
{
	stopped_world(true);
}

Test(detect, a_failed_end_says_no_goodbye, .timeout = 60)
{
	stopped_world(false);
}

/*
 * A neighbour that moved to a newer view says goodbye and closes its link
 * (a reset, when it left what this rank sent unread). Were this rank, busy
 * with the other neighbour's messages, to write on that link before it
 * read the goodbye, the write fails: that failure counted as the
 * neighbour's death ("it cannot take a failure notice"), and a healthy
 * rank was declared (shrink::second_kill_during_recovery over fabric/shm,
 * 1 run in 30 of test_shrink: "survivor 0 failed (status 42)"). RIGHT
 * keeps the detector reading a long burst of heartbeats (written at once,
 * so that the detector is still reading it when LEFT leaves); then LEFT's
 * goodbye and reset arrive, then RIGHT's notice, which the detector passes
 * on to LEFT.
 */
Test(detect, a_goodbye_unread_when_a_send_fails_is_no_failure, .timeout = 60)
{
	enum { BURST = 40000 };
	const int32_t zero[] = {0};
	struct linger reset = {.l_onoff = 1, .l_linger = 0};
	struct ft__ctl *r;
	size_t len = 0, cap = 1 << 16;
	unsigned char *burst = malloc(cap);
	int sp[2], fd;

	start_world(50, 30000);
	r = &w.ctl[RIGHT];
	fd = r->links[w.link[RIGHT]].fd;
	/* RIGHT's heartbeats, as its link seals them, caught in a socket pair */
	cr_assert_not_null(burst);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	r->links[w.link[RIGHT]].fd = sp[0];
	for (int k = 0; k < BURST; k++) {
		ssize_t n;
		cr_assert_eq(ft__ctl_send(r, w.link[RIGHT], FT__CTL_HB, 0, NULL, 0), 0);
		if (cap - len < 4096)
			cr_assert_not_null(burst = realloc(burst, cap *= 2));
		n = read(sp[1], burst + len, cap - len);
		cr_assert_gt(n, 0);
		len += (size_t)n;
	}
	r->links[w.link[RIGHT]].fd = fd;
	close(sp[0]);
	close(sp[1]);
	cr_assert_eq(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK), 0);
	cr_assert_eq(write(fd, burst, len), (ssize_t)len);
	free(burst);
	cr_assert_eq(ft__ctl_send(&w.ctl[LEFT], w.link[LEFT], FT__CTL_BYE, 0, NULL, 0), 0);
	cr_assert_eq(setsockopt(w.ctl[LEFT].links[w.link[LEFT]].fd, SOL_SOCKET, SO_LINGER, &reset,
				sizeof(reset)),
		     0);
	ft__ctl_drop(&w.ctl[LEFT], w.link[LEFT]);
	send_notice(RIGHT, zero, 1);
	expect_notice(RIGHT, zero, 1, "after the left said goodbye");
	cr_expect(!ft__det_failed(w.d, LEFT), "the left neighbour, gone with a goodbye, declared");
	close_world();
}

Test(detect, silence_declares, .timeout = 60)
{
	int64_t end;

	start_world(50, 2000);
	/* the right neighbour keeps beating, the left says nothing */
	end = ft__now_ms() + WAIT_MS;
	while (!ft__det_failed(w.d, LEFT) && ft__now_ms() < end) {
		struct ft__ctl_msg m;
		cr_assert_eq(ft__ctl_send(&w.ctl[RIGHT], w.link[RIGHT], FT__CTL_HB, 0, NULL, 0), 0);
		while (ft__ctl_next(&w.ctl[RIGHT], w.link[RIGHT], &m) == 1)
			cr_assert(m.type == FT__CTL_HB || m.type == FT__CTL_NOTICE);
		struct timespec ts = {0, 10 * 1000000L};
		nanosleep(&ts, NULL);
	}
	cr_assert(ft__det_failed(w.d, LEFT), "a silent left neighbour was never declared");
	cr_expect(!ft__det_failed(w.d, RIGHT), "the right one kept beating");
	close_world();
}

/* RIGHT beats and is read for ms; false once LEFT is declared. */
static bool beat_right(long ms)
{
	int64_t end = ft__now_ms() + ms;

	while (ft__now_ms() < end && !ft__det_failed(w.d, LEFT)) {
		struct ft__ctl_msg m;
		struct timespec ts = {0, 20 * 1000000L};
		cr_assert_eq(ft__ctl_send(&w.ctl[RIGHT], w.link[RIGHT], FT__CTL_HB, 0, NULL, 0), 0);
		while (ft__ctl_next(&w.ctl[RIGHT], w.link[RIGHT], &m) == 1)
			;
		nanosleep(&ts, NULL);
	}
	return !ft__det_failed(w.d, LEFT);
}

/*
 * A rank out of descriptors cannot accept its left neighbour's control link,
 * which waits in its listen queue: no sign of the neighbour, which is not
 * declared for never opening it (the grace, 5 s here, counts from this
 * rank's last shortage) and is taken once descriptors are back. Campaign
 * seed 20261130, trial 22: a rank out of descriptors declared its healthy
 * left neighbour, which was then sent away.
 */
Test(detect, a_left_link_this_rank_cannot_accept_is_no_failure, .timeout = 60)
{
	const int all[W] = {0, 1, 2, 3, 4};
	struct rlimit old, low;
	int fill[256], nfill = 0, fd, i;

	open_world(100, 1000);
	cr_assert_eq(ft__det_start(w.d, 0, all, W), 0);
	w.link[RIGHT] = accept_right();
	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	while ((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0 && fd < 200)
		fill[nfill++] = fd;
	if (fd >= 0)
		close(fd);
	low = old;
	low.rlim_cur = (rlim_t)fill[nfill - 1] + 1; /* every descriptor below is taken... */
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	close(fill[--nfill]); /* ...but one, for LEFT's end */
	i = ft__ctl_connect(&w.ctl[LEFT], ft__det_addr(w.d), ME, 0, WAIT_MS);
	cr_assert_geq(i, 0, "LEFT cannot connect: %s", ft_err_name(i));
	w.link[LEFT] = i;
	cr_assert(beat_right(6500), "the left neighbour was declared for a link this rank could "
				    "not accept");
	for (int k = 0; k < nfill; k++)
		close(fill[k]);
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
	/* descriptors back: LEFT's link is taken and proved */
	int64_t end = ft__now_ms() + WAIT_MS;
	while (!w.ctl[LEFT].links[i].proved && ft__now_ms() < end) {
		struct ft__ctl_msg m;
		struct pollfd p = {.fd = w.ctl[LEFT].links[i].fd, .events = POLLIN};
		(void)poll(&p, 1, 10);
		cr_assert_geq(ft__ctl_next(&w.ctl[LEFT], i, &m), 0, "LEFT's link failed");
		(void)ft__ctl_send(&w.ctl[RIGHT], w.link[RIGHT], FT__CTL_HB, 0, NULL, 0);
	}
	cr_assert(w.ctl[LEFT].links[i].proved, "LEFT's link was never taken");
	cr_expect(!ft__det_failed(w.d, LEFT) && !ft__det_failed(w.d, RIGHT));
	close_world();
}

/* ---- hostile peers ---- */

Test(detect, malformed_message_declares_its_sender, .timeout = 60)
{
	const int32_t left[] = {LEFT};
	const char odd[3] = {1, 2, 3};

	start_world(50, 30000);
	/* a notice whose length is no whole number of ranks */
	cr_assert_eq(ft__ctl_send(&w.ctl[LEFT], w.link[LEFT], FT__CTL_NOTICE, 0, odd, 3), 0);
	expect_notice(RIGHT, left, 1, "left sent a malformed notice");
	close_world();
}

Test(detect, garbage_declares_its_sender, .timeout = 60)
{
	const int32_t right[] = {RIGHT};
	char junk[64];

	memset(junk, 0x5a, sizeof(junk));
	start_world(50, 30000);
	cr_assert_eq(send(w.ctl[RIGHT].links[w.link[RIGHT]].fd, junk, sizeof(junk), MSG_NOSIGNAL),
		     (ssize_t)sizeof(junk));
	expect_notice(LEFT, right, 1, "right sent garbage");
	close_world();
}

/* Connects to the detector as `from` (a world of `world`, with token) and
 * expects the link to be refused with want (the detector's answer as the
 * connector reads it); the detector goes on unharmed. */
static void expect_refused(int from, int world, const char *token, int to, int want,
			   const char *what)
{
	struct ft__ctl c;
	struct ft__ctl_params cp = {.rank = from, .world_size = world, .job_id = JOB,
				    .token = token, .bind_host = "127.0.0.1"};
	struct ft__ctl_msg m;
	int64_t end = ft__now_ms() + WAIT_MS;
	int i, rc;

	cr_assert_eq(ft__ctl_open(&c, &cp), 0);
	i = ft__ctl_connect(&c, ft__det_addr(w.d), to, 0, WAIT_MS);
	cr_assert_geq(i, 0);
	/* a heartbeat after the hello: an accepted link would carry it */
	cr_assert_eq(ft__ctl_send(&c, i, FT__CTL_HB, 0, NULL, 0), 0);
	do {
		struct pollfd p = {.fd = c.links[i].fd, .events = POLLIN};
		(void)poll(&p, 1, 10);
		rc = ft__ctl_next(&c, i, &m);
	} while ((rc == 0 || (rc == 1 && m.type == FT__CTL_HB)) && ft__now_ms() < end);
	cr_expect_eq(rc, want, "%s: got %s, want %s", what, ft_err_name(rc), ft_err_name(want));
	ft__ctl_close(&c);
}

/* Reads exactly n bytes of fd within WAIT_MS: 0, or -1 (end, error, deadline). */
static int read_all(int fd, void *buf, size_t n)
{
	int64_t end = ft__now_ms() + WAIT_MS;
	size_t got = 0;

	while (got < n) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (ft__now_ms() >= end || poll(&p, 1, 10) < 0)
			return -1;
		ssize_t r = recv(fd, (char *)buf + got, n - got, MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
			return -1;
		if (r > 0)
			got += (size_t)r;
	}
	return 0;
}

/* One whole control message of fd (header of 16 bytes, then its length); its size. */
static size_t read_msg(int fd, unsigned char *buf, size_t cap)
{
	uint16_t len;

	cr_assert_eq(read_all(fd, buf, 16), 0, "no message header");
	memcpy(&len, buf + 6, sizeof(len));
	cr_assert_leq(16u + len, cap);
	cr_assert_eq(read_all(fd, buf + 16, len), 0, "no message body");
	return 16u + len;
}

static int dial(const char *addr)
{
	char host[64];
	const char *colon = strrchr(addr, ':');
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert_not_null(colon);
	snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
	cr_assert_eq(inet_pton(AF_INET, host, &sa.sin_addr), 1);
	sa.sin_port = htons((uint16_t)atoi(colon + 1));
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* A NOTICE naming rank r as rank `from` would send it, raw. */
static void raw_notice(int fd, int32_t from, int32_t r)
{
	unsigned char msg[20];
	uint32_t magic = 0x6c637466u, gen = 0;
	uint16_t type = FT__CTL_NOTICE, len = 4;

	memcpy(msg, &magic, 4);
	memcpy(msg + 4, &type, 2);
	memcpy(msg + 6, &len, 2);
	memcpy(msg + 8, &gen, 4);
	memcpy(msg + 12, &from, 4);
	memcpy(msg + 16, &r, 4);
	cr_assert_eq(write(fd, msg, sizeof(msg)), (ssize_t)sizeof(msg));
}

/* Rank 4's control hello to the detector, captured: rank 4 dials its own
 * listener, which the test reads raw; *c keeps rank 4's end (link *i), *fd
 * the test's. */
static size_t capture_hello(struct ft__ctl *c, int *i, int *fd, unsigned char *hello, size_t cap)
{
	struct ft__ctl_params cp = {.rank = 4, .world_size = W, .job_id = JOB, .token = TOKEN,
				    .bind_host = "127.0.0.1"};
	size_t len;

	cr_assert_eq(ft__ctl_open(c, &cp), 0);
	*i = ft__ctl_connect(c, c->addr, ME, 0, WAIT_MS);
	cr_assert_geq(*i, 0);
	*fd = accept(c->listen_fd, NULL, NULL);
	cr_assert_geq(*fd, 0);
	len = read_msg(*fd, hello, cap);
	cr_expect_null(memmem(hello, len, TOKEN, strlen(TOKEN)), "the token is in the hello");
	return len;
}

/* Whether the detector closed fd (EOF or reset) within ms. */
static bool closed_within(int fd, int ms)
{
	int64_t end = ft__now_ms() + ms;
	char b;

	while (ft__now_ms() < end) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		(void)poll(&p, 1, 20);
		ssize_t r = recv(fd, &b, 1, MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
			return true;
	}
	return false;
}

/* Waits ms, then whether the detector holds rank r failed. */
static bool failed_after(int r, int ms)
{
	usleep((useconds_t)ms * 1000);
	return ft__det_failed(w.d, r);
}

/*
 * A control hello seen on the wire (rank 4's, addressed to the detector) is
 * sent by someone without the token, with a notice behind it: it is
 * answered (with a challenge the sender cannot prove), but the link never
 * opens, so the notice is never taken, and the link is closed. Once a copy
 * owns a link, the same hello again is refused at once.
 */
Test(detect, replayed_hello_refused, .timeout = 60)
{
	struct ft__ctl c;
	unsigned char hello[512], ack[256];
	int32_t status;
	size_t len;
	int i, fd, copy;

	start_world(50, 30000);
	len = capture_hello(&c, &i, &fd, hello, sizeof(hello));
	close(fd);
	ft__ctl_close(&c);

	copy = dial(ft__det_addr(w.d));
	cr_assert_eq(write(copy, hello, len), (ssize_t)len);
	raw_notice(copy, 4, 0);
	read_msg(copy, ack, sizeof(ack));
	memcpy(&status, ack + 16, sizeof(status));
	cr_expect_eq(status, 0, "a whole hello whose MAC is good is answered");
	cr_expect(!failed_after(0, 300), "the copy's notice was taken: it owns a link");
	cr_expect(closed_within(copy, 2 * FT__CTL_HELLO_MS + WAIT_MS),
		  "the copy's link is left open");
	close(copy);
	cr_expect(!ft__det_failed(w.d, 4));
	close_world();
}

/*
 * The race: someone who sees rank 4's hello on the wire (here: a man in the
 * middle who holds it back) sends a copy ahead of the original, with a
 * notice naming rank 0 behind it. The copy must not get the link (its notice
 * is never taken); the original, relayed after it, must (its own notice
 * naming rank 0, sent behind its hello, is taken).
 */
Test(detect, hello_copy_raced_ahead_gets_no_link, .timeout = 60)
{
	struct ft__ctl c;
	struct ft__ctl_msg m;
	unsigned char hello[512];
	const int32_t zero = 0;
	size_t len;
	int i, orig, copy, fwd;
	int64_t end;

	start_world(50, 30000);
	len = capture_hello(&c, &i, &orig, hello, sizeof(hello));
	cr_assert_eq(ft__ctl_send(&c, i, FT__CTL_NOTICE, 0, &zero, sizeof(zero)), 0);
	copy = dial(ft__det_addr(w.d));
	cr_assert_eq(write(copy, hello, len), (ssize_t)len);
	raw_notice(copy, 4, 0);
	cr_expect(!failed_after(0, 300), "the copy raced ahead took the link");
	/* the original, relayed both ways while rank 4 reads its end */
	fwd = dial(ft__det_addr(w.d));
	cr_assert_eq(write(fwd, hello, len), (ssize_t)len);
	for (end = ft__now_ms() + WAIT_MS; !ft__det_failed(w.d, 0) && ft__now_ms() < end;) {
		struct pollfd p[2] = {{.fd = orig, .events = POLLIN}, {.fd = fwd, .events = POLLIN}};
		char buf[1024];
		(void)poll(p, 2, 10);
		for (int k = 0; k < 2; k++) {
			ssize_t n = recv(p[k].fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (n > 0)
				cr_assert_eq(write(k == 0 ? fwd : orig, buf, (size_t)n), n);
		}
		int rc = ft__ctl_next(&c, i, &m);
		cr_assert_geq(rc, 0, "rank 4's link: %s", ft_err_name(rc));
	}
	cr_expect(ft__det_failed(w.d, 0), "the original never got its link");
	cr_expect(!ft__det_failed(w.d, 4));
	close(copy);
	close(fwd);
	close(orig);
	ft__ctl_close(&c);
	close_world();
}

/* RIGHT refuses every hello the detector sends it (another token). */
static void refuse_right_until(bool (*done)(void))
{
	int64_t end = ft__now_ms() + WAIT_MS;

	while (!done() && ft__now_ms() < end) {
		struct ft__ctl *c = &w.ctl[RIGHT];
		struct pollfd p = {.fd = c->listen_fd, .events = POLLIN};
		struct ft__ctl_msg m;
		(void)poll(&p, 1, 10);
		ft__ctl_accept(c);
		for (int i = 0; i < c->nlinks; i++) {
			if (c->links[i].fd < 0)
				continue;
			cr_assert_leq(ft__ctl_next(c, i, &m), 0, "RIGHT took the detector's hello");
			cr_assert_lt(c->links[i].peer, 0);
		}
	}
}

static bool right_failed(void)
{
	return ft__det_failed(w.d, RIGHT);
}

/* The detector's right neighbour holds another token: it refuses the
 * detector's hello, whose answer cannot prove the detector's token. Its
 * left neighbour's hello proved the detector's token, so the detector
 * declares the right one failed (its control link refused our token). */
Test(detect, neighbour_with_another_token, .timeout = 60)
{
	const int all[W] = {0, 1, 2, 3, 4};

	w.right_token = "another-token";
	open_world(50, 30000);
	w.right_token = NULL;
	cr_assert_eq(ft__det_start(w.d, 0, all, W), 0);
	w.link[LEFT] = connect_left();
	cr_assert_geq(w.link[LEFT], 0);
	refuse_right_until(right_failed);
	cr_expect(ft__det_failed(w.d, RIGHT), "the detector kept a neighbour without the token");
	cr_expect(!ft__det_failed(w.d, LEFT));
	close_world();
}

static bool det_out(void)
{
	return ft__det_pending(w.d);
}

/* Both neighbours hold another token than the detector: the detector's is
 * the odd one. It declares no one, settles no view of its own, and its
 * owner learns FT_EAUTH (the detector once declared both, and a rank alone
 * took its own buffer for the sum). */
Test(detect, every_neighbour_with_another_token, .timeout = 60)
{
	const int all[W] = {0, 1, 2, 3, 4};
	struct ft__view v = {0};
	int link;

	w.right_token = w.left_token = "another-token";
	open_world(50, 30000);
	w.right_token = w.left_token = NULL;
	cr_assert_eq(ft__det_start(w.d, 0, all, W), 0);
	link = ft__ctl_connect(&w.ctl[LEFT], ft__det_addr(w.d), ME, 0, WAIT_MS);
	cr_assert_geq(link, 0);
	refuse_right_until(det_out);
	cr_assert(ft__det_pending(w.d), "the detector did not give up");
	cr_expect_eq(ft__det_await(w.d, 0, 1000, &v), -FT_EAUTH);
	for (int r = 0; r < W; r++)
		cr_expect(!ft__det_failed(w.d, r), "rank %d declared", r);
	cr_expect_neq(ft__mb_try_settle(&w.mb[0], 1, all, 0, false, &v), 1,
		      "a view of generation 1 was settled");
	close_world();
}

/* Strangers with another token send hellos claiming to be both neighbours
 * before the detector proved its token to anyone: claims alone neither
 * make it leave nor get a neighbour declared; the real neighbours then
 * link as usual. */
Test(detect, claims_alone_change_nothing, .timeout = 60)
{
	const int all[W] = {0, 1, 2, 3, 4};
	struct ft__ctl fake[2];

	open_world(50, 30000);
	for (int k = 0; k < 2; k++) {
		struct ft__ctl_params cp = {.rank = k == 0 ? LEFT : RIGHT, .world_size = W,
					    .job_id = JOB, .token = "another-token",
					    .bind_host = "127.0.0.1"};
		cr_assert_eq(ft__ctl_open(&fake[k], &cp), 0);
	}
	cr_assert_eq(ft__det_start(w.d, 0, all, W), 0);
	for (int k = 0; k < 2; k++)
		cr_assert_geq(ft__ctl_connect(&fake[k], ft__det_addr(w.d), ME, 0, WAIT_MS), 0);
	usleep(500 * 1000);
	cr_expect(!ft__det_pending(w.d), "the detector gave up on claims alone");
	w.link[RIGHT] = accept_right();
	w.link[LEFT] = connect_left();
	cr_assert_geq(w.link[LEFT], 0);
	usleep(300 * 1000);
	cr_expect(!ft__det_pending(w.d));
	for (int r = 0; r < W; r++)
		cr_expect(!ft__det_failed(w.d, r), "rank %d declared", r);
	for (int k = 0; k < 2; k++)
		ft__ctl_close(&fake[k]);
	close_world();
}

Test(detect, bad_hellos_refused, .timeout = 60)
{
	const int32_t zero[] = {0};

	start_world(50, 30000);
	/* its answer cannot prove our (wrong) token: EAUTH for both */
	expect_refused(0, W, "wrong-token", ME, -FT_EAUTH, "wrong token");
	expect_refused(0, W, "", ME, -FT_EAUTH, "the empty token");
	expect_refused(0, W, TOKEN, RIGHT, -FT_EPROTO, "addressed to another rank");
	expect_refused(ME, W, TOKEN, ME, -FT_EPROTO, "claiming the detector's own rank");
	expect_refused(7, 8, TOKEN, ME, -FT_EPROTO, "from a rank outside the world");
	cr_expect(!ft__det_failed(w.d, 0));
	cr_expect(!ft__det_failed(w.d, 7));
	send_notice(LEFT, zero, 1);
	expect_notice(RIGHT, zero, 1, "after the refused hellos");
	close_world();
}

/* The detector's end of a connection whose other end is fd (same process). */
/* n idle TCP connections to the detector's listener, none sending a byte. */
static void strangers_open(int *fds, int n)
{
	for (int k = 0; k < n; k++)
		fds[k] = dial(ft__det_addr(w.d));
}

/* Whether fd was closed by the detector (its read ends at once, or resets). */
static bool closed_by_detector(int fd)
{
	char b;
	ssize_t r = recv(fd, &b, 1, MSG_DONTWAIT);

	return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/*
 * Strangers that hold more idle connections than the detector has slots
 * (the review's ~40 idle connections that cost a healthy rank: they took
 * the slots of its own links) take none of its neighbours': the detector's
 * left neighbour links again, and its right neighbour's link, closed before
 * it answered, is opened again, both while the strangers hold on; nobody is
 * declared for it, and every stranger is closed within the hello deadline
 * of its accept.
 */
Test(detect, strangers_take_no_neighbours_slot, .timeout = 60)
{
	enum { N = 3 * W + 3 * FT__CTL_LINKS };
	int fds[N], closed = 0;
	struct ft__ctl_msg m;

	start_world(50, 30000);
	strangers_open(fds, N);
	/* the left neighbour's new link passes among them */
	cr_assert_eq(ft__ctl_send(&w.ctl[LEFT], w.link[LEFT], FT__CTL_BYE, 0, NULL, 0), 0);
	ft__ctl_drop(&w.ctl[LEFT], w.link[LEFT]);
	w.link[LEFT] = connect_left();
	cr_assert_geq(w.link[LEFT], 0);
	int rc = next_msg(LEFT, 1000, &m, NULL, NULL);
	cr_expect_eq(rc, 0, "the left neighbour's new link did not pass among strangers: %s",
		     ft_err_name(rc));
	cr_expect(!w.ctl[LEFT].links[w.link[LEFT]].await_ack, "its hello was never answered");
	/* the right neighbour closes the detector's link before answering */
	ft__ctl_drop(&w.ctl[RIGHT], w.link[RIGHT]);
	w.link[RIGHT] = accept_right();
	cr_expect(!ft__det_failed(w.d, RIGHT), "a neighbour was declared for want of a slot");
	cr_expect(!ft__det_failed(w.d, LEFT));
	for (int64_t end = ft__now_ms() + 2 * FT__CTL_HELLO_MS + WAIT_MS; ft__now_ms() < end;) {
		closed = 0;
		for (int k = 0; k < N; k++)
			closed += closed_by_detector(fds[k]);
		if (closed == N)
			break;
		(void)poll(NULL, 0, 20);
	}
	cr_expect_eq(closed, N, "%d of %d strangers still held a link", N - closed, N);
	for (int k = 0; k < N; k++)
		close(fds[k]);
	close_world();
}

/*
 * The detector never blocks: its right neighbour's address black-holes the
 * connect (a listen queue kept full drops the SYN), and meanwhile the left
 * neighbour's hello is answered and its heartbeats keep coming, until the
 * right one is declared: a link still opening has FT__CTL_LOSS_SPAN detect
 * timeouts (a SYN lost on a lossy path is sent again after 1 s, then 3 s),
 * and is declared then, not before.
 */
Test(detect, black_holed_neighbour_blocks_no_heartbeat, .timeout = 60)
{
	const int all[W] = {0, 1, 2, 3, 4};
	int64_t start, last, gap = 0;
	struct ft__ctl_msg m;
	int fill[4];

	open_world(50, 1000);
	cr_assert_eq(listen(w.ctl[RIGHT].listen_fd, 0), 0);
	for (int k = 0; k < 4; k++) {
		fill[k] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		const char *a = w.ctl[RIGHT].addr, *colon = strrchr(a, ':');
		struct sockaddr_in sa = {.sin_family = AF_INET,
					 .sin_port = htons((uint16_t)atoi(colon + 1))};
		inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
		(void)connect(fill[k], (struct sockaddr *)&sa, sizeof(sa));
	}
	cr_assert_eq(ft__det_start(w.d, 0, all, W), 0);
	w.link[LEFT] = connect_left();
	cr_assert_geq(w.link[LEFT], 0);
	start = last = ft__now_ms();
	while (ft__now_ms() - start < 2000) {
		struct pollfd p = {.fd = w.ctl[LEFT].links[w.link[LEFT]].fd, .events = POLLIN};
		int rc;
		(void)poll(&p, 1, 10);
		while ((rc = ft__ctl_next(&w.ctl[LEFT], w.link[LEFT], &m)) == 1)
			last = ft__now_ms();
		cr_assert_geq(rc, 0, "the left link ended: %s", ft_err_name(rc));
		(void)ft__ctl_send(&w.ctl[LEFT], w.link[LEFT], FT__CTL_HB, 0, NULL, 0);
		if (ft__now_ms() - last > gap)
			gap = ft__now_ms() - last;
	}
	cr_expect_lt(gap, 1000, "no heartbeat for %lld ms while the right neighbour black-holed",
		     (long long)gap);
	cr_expect(!ft__det_failed(w.d, RIGHT), "declared while a lost SYN could still be sent again");
	for (int64_t end = ft__now_ms() + WAIT_MS; !ft__det_failed(w.d, RIGHT) && ft__now_ms() < end;) {
		(void)ft__ctl_send(&w.ctl[LEFT], w.link[LEFT], FT__CTL_HB, 0, NULL, 0);
		(void)poll(NULL, 0, 20);
	}
	cr_expect(ft__det_failed(w.d, RIGHT), "a black-holed neighbour was never declared");
	cr_expect_lt(ft__now_ms() - start, FT__CTL_LOSS_SPAN * 1000 + 1500,
		     "declared %lld ms after its connect began", (long long)(ft__now_ms() - start));
	cr_expect(!ft__det_failed(w.d, LEFT));
	for (int k = 0; k < 4; k++)
		close(fill[k]);
	close_world();
}

/* A stranger that sends anything but a hello is closed on its header. */
Test(detect, stranger_closed_on_a_header_that_is_no_hello, .timeout = 60)
{
	const unsigned char junk[16] = {0x66, 0x74, 0x63, 0x6c, 2, 0, 40, 0}; /* HB, 40 bytes */
	int fd;

	start_world(50, 30000);
	fd = dial(ft__det_addr(w.d));
	cr_assert_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	for (int64_t end = ft__now_ms() + FT__CTL_HELLO_MS / 2; ft__now_ms() < end;) {
		if (closed_by_detector(fd))
			break;
		(void)poll(NULL, 0, 5);
	}
	cr_expect(closed_by_detector(fd), "a heartbeat header from a stranger was waited on");
	close(fd);
	close_world();
}

/* The detector's control links, connected and accepted, give up on a silent
 * peer at its detection timeout (sock.h: keepalive), and on their own data
 * unacknowledged after a lossy path's span (TCP_USER_TIMEOUT: ctl.h). */
Test(detect, links_follow_the_detect_timeout, .timeout = 60)
{
	struct ft__ctl_msg m;
	int64_t end;
	int rc;

	start_world(50, 7000);
	/* a heartbeat from the detector on LEFT's link: it has accepted it */
	end = ft__now_ms() + WAIT_MS;
	do {
		struct pollfd p = {.fd = w.ctl[LEFT].links[w.link[LEFT]].fd, .events = POLLIN};
		(void)poll(&p, 1, 10);
		rc = ft__ctl_next(&w.ctl[LEFT], w.link[LEFT], &m);
	} while (rc == 0 && ft__now_ms() < end);
	cr_assert_eq(rc, 1, "no heartbeat from the detector (%s)", ft_err_name(rc));
	for (int r = LEFT; r <= RIGHT; r += RIGHT - LEFT) {
		int fd = tu_peer_fd(w.ctl[r].links[w.link[r]].fd), v = -1;
		socklen_t l = sizeof(v);
		cr_assert_eq(getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &v, &l), 0);
		cr_expect_eq(v, FT__CTL_LOSS_SPAN * 7000, "link with rank %d: user timeout %d", r, v);
		cr_assert_eq(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &l), 0);
		cr_expect_eq(v, 1, "link with rank %d: no keepalive", r);
		cr_assert_eq(getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &l), 0);
		cr_expect_eq(v, 4, "link with rank %d: keepalive idle %d s", r, v);
	}
	close_world();
}

/*
 * A neighbour that stops reading its control link is declared once the link
 * cannot take the detector's messages. Silence is not what declares it here
 * (the timeout is a minute); heartbeats go out every millisecond, and the
 * socket buffers on both sides are made small so that they fill in a
 * fraction of a second instead of minutes.
 */
Test(detect, undeliverable_messages_declare, .timeout = 120)
{
	const int32_t right[] = {RIGHT};
	int small = 4096;

	w.rcvbuf = 1;
	start_world(1, 60000);
	cr_assert_eq(setsockopt(tu_peer_fd(w.ctl[RIGHT].links[w.link[RIGHT]].fd), SOL_SOCKET, SO_SNDBUF,
				&small, sizeof(small)), 0);
	expect_notice(LEFT, right, 1, "right stopped reading");
	close_world();
}

/* ---- the view after a failure ---- */

Test(detect, hostile_view_is_refused, .timeout = 60)
{
	const int32_t four[] = {4};
	struct ft__view v = {0};
	char path[600], text[512];
	FILE *f;

	start_world(50, 30000);
	send_notice(LEFT, four, 1);
	expect_notice(RIGHT, four, 1, "failure");
	/* generation 1's view, this job's nonce, naming a rank far outside the
	 * world (the detector indexes its failed set with every member) */
	snprintf(path, sizeof(path), "%s/%s/gen-1", w.root, JOB);
	(void)mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/%s/gen-1/.view.tmp", w.root, JOB);
	snprintf(text, sizeof(text),
		 "ftcc-view 2 gen 1 size 3 writer 1 elsewhere nonce %llx first 0 members 1 2 1000000000\n",
		 (unsigned long long)w.nonce);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	cr_assert_eq(fputs(text, f) >= 0, 1);
	cr_assert_eq(fclose(f), 0);
	char final[600];
	snprintf(final, sizeof(final), "%s/%s/gen-1/view", w.root, JOB);
	cr_assert_eq(rename(path, final), 0);
	cr_expect_eq(ft__det_await(w.d, 0, WAIT_MS, &v), -FT_ECORRUPT);
	close_world();
}

static bool wake_readable(void)
{
	struct pollfd p = {.fd = ft__det_wake_fd(w.d), .events = POLLIN};

	return poll(&p, 1, 0) == 1;
}

/* A view settled after a failure is handed to the main thread; the wake fd
 * (what an op's wait watches) is readable exactly while the failure is
 * pending, and quiet again once the view is adopted. */
Test(detect, settled_view_is_handed_over, .timeout = 60)
{
	const int32_t four[] = {4};
	const int cand[] = {0, 1, 2, 3};
	struct ft__view v = {0};
	int rc;

	start_world(50, 30000);
	cr_expect(!wake_readable(), "the wake fd is readable with nothing pending");
	send_notice(LEFT, four, 1);
	expect_notice(RIGHT, four, 1, "failure");
	wait_pending();
	cr_expect(wake_readable(), "a failure is pending, but the wake fd is quiet");
	cr_expect_eq(ft__det_have_result(w.d, 0), -FT_EPEERFAILED, "frozen while settling");
	for (int r = 0; r < W - 1; r++) {
		struct ft__member m;
		if (r == ME)
			continue;
		memset(&m, 0, sizeof(m));
		snprintf(m.addr, sizeof(m.addr), "127.0.0.1:%d", 1000 + r);
		if (r == LEFT || r == RIGHT)
			snprintf(m.ctrl, sizeof(m.ctrl), "%s", w.ctl[r].addr);
		cr_assert_eq(ft__mb_publish(&w.mb[r], 1, &m), 0);
	}
	/* rank 0 coordinates: it waits for the detector's own record */
	rc = ft__mb_settle(&w.mb[0], 1, cand, 4, WAIT_MS, &v);
	cr_assert_eq(rc, 0, "settle: %s", ft_err_name(rc));
	ft__view_free(&v);
	cr_assert_eq(ft__det_await(w.d, 0, WAIT_MS, &v), 0);
	cr_expect_eq(v.generation, 1u);
	cr_expect_eq(v.size, 4);
	ft__view_free(&v);
	cr_expect(wake_readable(), "quiet before the view is adopted");
	ft__det_adopted(w.d, 1, 0);
	cr_expect(!ft__det_pending(w.d));
	cr_expect(!wake_readable(), "the view is adopted, but the wake fd stays readable");
	close_world();
}

/* ---- creation ---- */

/* The detector touches its membership handle only once started. */
static void expect_create_fails(const char *what)
{
	struct ft__mb mb;
	struct ft__det_params dp = {.mb = &mb, .world_size = 2, .rank = 0, .job_id = JOB,
				    .token = TOKEN, .bind_host = "127.0.0.1", .heartbeat_ms = 10,
				    .detect_timeout_ms = 100};
	struct ft__det *d = (struct ft__det *)&mb;
	int rc;

	rc = ft__det_create(&dp, &d);
	fail_mutex_init = fail_cond_init = 0;
	cr_expect_eq(rc, -FT_ENOMEM, "%s: got %s", what, ft_err_name(rc));
	cr_expect_null(d, "%s", what);
	ft__det_destroy(d, false);
}

Test(detect_create, lock_init_failure_is_an_error, .timeout = 20)
{
	fail_mutex_init = 1;
	expect_create_fails("mutex");
	fail_cond_init = 1;
	expect_create_fails("condition variable");
}

Test(detect_create, bad_bind_host, .timeout = 20)
{
	struct ft__mb mb;
	struct ft__det_params dp = {.mb = &mb, .world_size = 2, .rank = 0, .job_id = JOB,
				    .token = TOKEN, .bind_host = "no-such-host.invalid",
				    .heartbeat_ms = 10, .detect_timeout_ms = 100};
	struct ft__det *d = NULL;

	cr_expect_eq(ft__det_create(&dp, &d), -FT_ECONFIG);
	cr_expect_null(d);
}
