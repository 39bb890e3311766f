/* test_membership.c: membership through its interface with the file rendezvous backend: publish, settle, hostile files, short writes, departures. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "membership.h"
#include "testutil.h"

/*
 * Every test runs in its own process (Criterion) in a fresh directory. The
 * ranks of a job are membership handles opened side by side in the test
 * process (each takes its own rank's lock), or forked processes where the
 * test is about processes (a race, a dead writer). Files are planted by
 * hand where a test is about what a reader makes of them.
 */

#define JOB "job"

static char root[256];

static void quiet(void)
{
	ft__log_level = -1;
	snprintf(root, sizeof(root), "%s/ftcc-mb-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	cr_assert_not_null(mkdtemp(root));
}

static void cleanup(void)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", root);
}

TestSuite(membership, .init = quiet, .fini = cleanup);
TestSuite(hostile, .init = quiet, .fini = cleanup);
TestSuite(depart, .init = quiet, .fini = cleanup);

/* ---- pwrite() that is cut short and interrupted, on demand (the library's one whole
 * write, ft__write_all, is made of pwrite calls) ---- */

static int short_writes;        /* nonzero: pwrite() moves at most 3 bytes; every other call EINTR */
static int short_write_calls;

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	static ssize_t (*real)(int, const void *, size_t, off_t);

	if (real == NULL)
		*(void **)&real = dlsym(RTLD_NEXT, "pwrite");
	if (short_writes) {
		if (short_write_calls++ % 2 == 0) {
			errno = EINTR;
			return -1;
		}
		if (n > 3)
			n = 3;
	}
	return real(fd, buf, n, off);
}

/* ---- helpers ---- */

static void mb_open(struct ft__mb *mb, int rank, int world)
{
	struct ft__mb_params p = {.root = root, .job_id = JOB, .rank = rank, .world_size = world};
	int rc = ft__mb_open(mb, &p);

	cr_assert_eq(rc, 0, "open rank %d: %s", rank, ft_err_name(rc));
}

static struct ft__member member(const char *addr, const char *ctrl, uint64_t next_op)
{
	struct ft__member m;

	memset(&m, 0, sizeof(m));
	snprintf(m.addr, sizeof(m.addr), "%s", addr);
	snprintf(m.ctrl, sizeof(m.ctrl), "%s", ctrl);
	m.next_op = next_op;
	return m;
}

static void publish(struct ft__mb *mb, uint32_t gen, uint64_t next_op)
{
	char addr[64];
	struct ft__member m;
	int rc;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", 5000 + mb->rank);
	m = member(addr, "127.0.0.1:7000", next_op);
	rc = ft__mb_publish(mb, gen, &m);
	cr_assert_eq(rc, 0, "publish rank %d gen %u: %s", mb->rank, gen, ft_err_name(rc));
}

/* Writes text (len bytes) to <root>/<job>/<rel>, creating directories. */
static void plant(const char *rel, const char *text, size_t len)
{
	char path[600], dir[600];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/%s", root, JOB, rel);
	snprintf(dir, sizeof(dir), "%s", path);
	for (char *p = dir + strlen(root) + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			mkdir(dir, 0700);
			*p = '/';
		}
	f = fopen(path, "w");
	cr_assert_not_null(f, "%s", path);
	cr_assert_eq(fwrite(text, 1, len, f), len);
	cr_assert_eq(fclose(f), 0);
}

static void plant_str(const char *rel, const char *text)
{
	plant(rel, text, strlen(text));
}

/* Dates <root>/<job>/<rel> 10 s back: a file an earlier job left. */
static void age(const char *rel)
{
	char path[600];
	struct timespec t[2];

	snprintf(path, sizeof(path), "%s/%s/%s", root, JOB, rel);
	cr_assert_eq(clock_gettime(CLOCK_REALTIME, &t[0]), 0);
	t[0].tv_sec -= 10;
	t[1] = t[0];
	cr_assert_eq(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW), 0, "%s", path);
}

static const char *host(void)
{
	static char h[256];

	if (h[0] == '\0') {
		cr_assert_eq(gethostname(h, sizeof(h)), 0);
		h[sizeof(h) - 1] = '\0';
	}
	return h;
}

/* A pid that existed on this host and is gone. */
static int dead_pid(void)
{
	pid_t p = fork();

	cr_assert_geq(p, 0);
	if (p == 0)
		_exit(0);
	cr_assert_eq(waitpid(p, NULL, 0), p);
	return (int)p;
}

static void expect_members(const struct ft__view *v, const int *want, int n)
{
	cr_assert_eq(v->size, n, "view of %d members, want %d", v->size, n);
	for (int i = 0; i < n; i++)
		cr_expect_eq(v->members[i], want[i], "member %d: %d, want %d", i, v->members[i], want[i]);
}

/* ---- publish and lookup ---- */

Test(membership, publish_lookup_round_trip, .timeout = 20)
{
	struct ft__mb a, b;
	struct ft__member m = member("[::1]:4242", "127.0.0.1:99", 1234567890123ull), got;

	mb_open(&a, 0, 2);
	mb_open(&b, 1, 2);
	cr_assert_eq(ft__mb_publish(&a, 3, &m), 0);
	cr_assert_eq(ft__mb_lookup(&b, 3, 0, &got), 0);
	cr_expect_str_eq(got.addr, "[::1]:4242");
	cr_expect_str_eq(got.ctrl, "127.0.0.1:99");
	cr_expect_eq(got.next_op, 1234567890123ull);
	cr_expect_eq(got.pid, (int)getpid());

	/* no control address round-trips as "" */
	m = member("fabric:tcp;ofi_rxm:abc", "", 0);
	cr_assert_eq(ft__mb_publish(&b, 3, &m), 0);
	cr_assert_eq(ft__mb_lookup(&a, 3, 1, &got), 0);
	cr_expect_str_eq(got.addr, "fabric:tcp;ofi_rxm:abc");
	cr_expect_str_eq(got.ctrl, "");

	/* republishing replaces */
	m = member("127.0.0.1:1", "", 7);
	cr_assert_eq(ft__mb_publish(&a, 3, &m), 0);
	cr_assert_eq(ft__mb_lookup(&b, 3, 0, &got), 0);
	cr_expect_eq(got.next_op, 7u);

	cr_expect_eq(ft__mb_lookup(&a, 4, 1, &got), -FT_EPEERFAILED, "nothing published for gen 4");
	cr_expect_eq(ft__mb_lookup(&a, 3, 2, &got), -FT_EINVAL, "rank beyond the world");
	cr_expect_eq(ft__mb_lookup(&a, 3, -1, &got), -FT_EINVAL, "negative rank");
	ft__mb_close(&a, 4, false);
	ft__mb_close(&b, 4, false);
}

Test(membership, unpublishable_addresses_refused, .timeout = 20)
{
	struct ft__mb a;
	struct ft__member m;

	mb_open(&a, 0, 1);
	m = member("", "", 0);
	cr_expect_eq(ft__mb_publish(&a, 0, &m), -FT_EINVAL, "empty address");
	m = member("127.0.0.1 :1", "", 0);
	cr_expect_eq(ft__mb_publish(&a, 0, &m), -FT_EINVAL, "space in the address");
	m = member("127.0.0.1:1", "a\nb", 0);
	cr_expect_eq(ft__mb_publish(&a, 0, &m), -FT_EINVAL, "newline in the control address");
	memset(m.addr, 'a', sizeof(m.addr));
	m.ctrl[0] = '\0';
	cr_expect_eq(ft__mb_publish(&a, 0, &m), -FT_EINVAL, "unterminated address");
	ft__mb_close(&a, 0, true);
}

Test(membership, open_errors, .timeout = 20)
{
	struct ft__mb a, b;
	struct ft__mb_params p = {.root = root, .job_id = JOB, .rank = 0, .world_size = 2};

	mb_open(&a, 0, 2);
	cr_expect_eq(ft__mb_open(&b, &p), -FT_EBUSY, "rank 0 held by a live handle");
	cr_expect_null(b.ops, "a failed open leaves the handle closed");
	ft__mb_close(&b, 0, false); /* safe on it */
	p.rank = 2;
	cr_expect_eq(ft__mb_open(&b, &p), -FT_EINVAL, "rank beyond the world");
	p.rank = 1;
	p.backend = "carrier-pigeon";
	cr_expect_eq(ft__mb_open(&b, &p), -FT_ENOSYS, "unknown backend");
	ft__mb_close(&a, 0, false);
	p.rank = 0;
	p.backend = "file";
	cr_expect_eq(ft__mb_open(&b, &p), 0, "free again once closed");
	ft__mb_close(&b, 0, false);
}

/* ---- settling ---- */

Test(membership, settle_with_every_candidate, .timeout = 20)
{
	struct ft__mb mb[3];
	struct ft__view v[3];
	const int cand[] = {0, 1, 2};

	for (int r = 0; r < 3; r++) {
		mb_open(&mb[r], r, 3);
		publish(&mb[r], 0, 10 + (uint64_t)(2 - r));
	}
	/* not the coordinator: nothing to do until the view exists */
	cr_expect_eq(ft__mb_try_settle(&mb[2], 0, cand, 3, false, &v[2]), 0);
	cr_assert_eq(ft__mb_try_settle(&mb[0], 0, cand, 3, false, &v[0]), 1);
	expect_members(&v[0], cand, 3);
	cr_expect_eq(v[0].generation, 0u);
	cr_expect_eq(v[0].first_op, 10u, "first op: the lowest next_op published");
	for (int r = 1; r < 3; r++) {
		cr_assert_eq(ft__mb_settle(&mb[r], 0, cand, 3, 5000, &v[r]), 0);
		expect_members(&v[r], cand, 3);
		cr_expect_eq(v[r].nonce, v[0].nonce, "one job, one nonce");
	}
	for (int r = 0; r < 3; r++) {
		ft__view_free(&v[r]);
		ft__mb_close(&mb[r], 0, r == 0);
	}
}

Test(membership, settle_waits_for_missing_until_forced, .timeout = 20)
{
	struct ft__mb mb[3];
	struct ft__view v = {0};
	const int cand[] = {0, 1, 2}, want[] = {0, 2};

	for (int r = 0; r < 3; r++)
		mb_open(&mb[r], r, 3);
	publish(&mb[0], 0, 0);
	publish(&mb[2], 0, 0);
	cr_expect_eq(ft__mb_try_settle(&mb[0], 0, cand, 3, false, &v), 0, "rank 1 not yet published");
	cr_expect_eq(ft__mb_try_settle(&mb[2], 0, cand, 3, true, &v), 0, "only the coordinator settles");
	cr_expect_eq(ft__mb_settle(&mb[0], 0, cand, 3, 50, &v), -FT_ETIMEDOUT);
	cr_assert_eq(ft__mb_try_settle(&mb[0], 0, cand, 3, true, &v), 1);
	expect_members(&v, want, 2);
	ft__view_free(&v);
	/* settled once: rank 1 publishing late changes nothing */
	publish(&mb[1], 0, 0);
	cr_assert_eq(ft__mb_try_settle(&mb[1], 0, cand, 3, false, &v), 1);
	expect_members(&v, want, 2);
	ft__view_free(&v);
	for (int r = 0; r < 3; r++)
		ft__mb_close(&mb[r], 0, false);
}

/* Generation 1 after a generation 0 of three: rank 0 died (its writer is
 * gone from this host), rank 2 finalized: rank 1 settles alone, unforced. */
Test(membership, settle_skips_dead_and_departed, .timeout = 20)
{
	struct ft__mb mb[3];
	struct ft__view v = {0};
	const int cand[] = {0, 1, 2}, want[] = {1};
	char text[512];

	for (int r = 0; r < 3; r++) {
		mb_open(&mb[r], r, 3);
		publish(&mb[r], 0, 0);
	}
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(ft__mb_settle(&mb[r], 0, cand, 3, 5000, &v), 0);
		ft__view_free(&v);
	}
	snprintf(text, sizeof(text), "127.0.0.1:5000 %d %s - 0\n", dead_pid(), host());
	plant_str("gen-0/member-0", text);
	cr_assert_eq(ft__mb_depart(&mb[2], 4), 0);
	publish(&mb[1], 1, 4);
	cr_assert_eq(ft__mb_try_settle(&mb[1], 1, cand, 3, false, &v), 1);
	expect_members(&v, want, 1);
	cr_expect_eq(v.first_op, 4u);
	ft__view_free(&v);
	for (int r = 0; r < 3; r++)
		ft__mb_close(&mb[r], 1, false);
}

/* Six processes each believe themselves the coordinator of generation 1
 * and force a view of their own: exactly one view is created, and every
 * process returns it. */
Test(membership, view_created_exclusively, .timeout = 60)
{
	enum { N = 6 };
	int go[2], report[2];
	pid_t pids[N];
	int first = -1;

	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(report), 0);
	for (int r = 0; r < N; r++) {
		pids[r] = fork();
		cr_assert_geq(pids[r], 0);
		if (pids[r] == 0) {
			struct ft__mb_params p = {.root = root, .job_id = JOB, .rank = r, .world_size = N};
			struct ft__mb mb;
			struct ft__view v = {0};
			int all[N], mine = r, out;
			char c;
			for (int i = 0; i < N; i++)
				all[i] = i;
			if (ft__mb_open(&mb, &p) != 0)
				_exit(101);
			struct ft__member m = member("127.0.0.1:1", "", 0);
			if (ft__mb_publish(&mb, 0, &m) != 0 || ft__mb_settle(&mb, 0, all, N, 10000, &v) != 0)
				_exit(102);
			ft__view_free(&v);
			if (ft__mb_publish(&mb, 1, &m) != 0)
				_exit(103);
			close(go[1]);
			if (read(go[0], &c, 1) != 0)
				_exit(104);
			if (ft__mb_try_settle(&mb, 1, &mine, 1, true, &v) != 1 || v.size != 1)
				_exit(105);
			out = v.members[0];
			if (write(report[1], &out, sizeof(out)) != (ssize_t)sizeof(out))
				_exit(106);
			_exit(0);
		}
	}
	/* Each child closes its copy of go[1] once it has published generation 1;
	 * EOF reaches them all when the last one has: then they race. */
	close(go[0]);
	close(report[1]);
	close(go[1]);
	for (int r = 0; r < N; r++) {
		int got;
		cr_assert_eq(read(report[0], &got, sizeof(got)), (ssize_t)sizeof(got),
			     "a process found no view");
		if (first < 0)
			first = got;
		cr_expect_eq(got, first, "two views of generation 1: %d and %d", first, got);
	}
	for (int r = 0; r < N; r++) {
		int st;
		cr_assert_eq(waitpid(pids[r], &st, 0), pids[r]);
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d: status %d", r, st);
	}
}

Test(membership, stale_views_are_replaced, .timeout = 20)
{
	struct ft__mb mb[2];
	struct ft__view v = {0};
	const int cand[] = {0, 1};
	char text[512];

	/* gen 0 left by a dead process of an earlier job with a larger world */
	snprintf(text, sizeof(text),
		 "ftcc-view 2 gen 0 size 3 writer %d %s nonce 1234 first 0 members 0 1 7\n",
		 dead_pid(), host());
	plant_str("gen-0/view", text);
	age("gen-0/view");
	for (int r = 0; r < 2; r++) {
		mb_open(&mb[r], r, 2);
		publish(&mb[r], 0, 0);
	}
	cr_assert_eq(ft__mb_try_settle(&mb[0], 0, cand, 2, false, &v), 1);
	expect_members(&v, cand, 2);
	cr_expect_neq(v.nonce, 0x1234u, "a fresh nonce");
	ft__view_free(&v);
	cr_assert_eq(ft__mb_try_settle(&mb[1], 0, cand, 2, false, &v), 1);
	ft__view_free(&v);

	/* gen 1 of another job (other nonce), live writer: not ours, replaced */
	snprintf(text, sizeof(text),
		 "ftcc-view 2 gen 1 size 1 writer %d %s nonce 1234 first 0 members 1\n",
		 (int)getpid(), host());
	plant_str("gen-1/view", text);
	publish(&mb[0], 1, 3);
	publish(&mb[1], 1, 3);
	cr_assert_eq(ft__mb_try_settle(&mb[0], 1, cand, 2, false, &v), 1);
	expect_members(&v, cand, 2);
	cr_expect_eq(v.first_op, 3u);
	ft__view_free(&v);
	for (int r = 0; r < 2; r++)
		ft__mb_close(&mb[r], 1, r == 0);
}

/*
 * The job's first view, written since these ranks took their locks by a
 * writer that died at once (rank 0 SIGKILLed just after it settled): a rank
 * slow to read it once found it stale, waited out its connect timeout (the
 * campaign's lost rank), and as coordinator could have replaced the view
 * the others had read. It stays valid for every rank.
 */
Test(membership, a_first_view_whose_writer_died_stays, .timeout = 20)
{
	struct ft__mb mb[3];
	struct ft__view v = {0};
	const int cand[] = {0, 1, 2};
	char text[512];

	for (int r = 0; r < 3; r++) {
		mb_open(&mb[r], r, 3);
		publish(&mb[r], 0, 0);
	}
	snprintf(text, sizeof(text),
		 "ftcc-view 2 gen 0 size 3 writer %d %s nonce 1234 first 0 members 0 1 2\n",
		 dead_pid(), host());
	plant_str("gen-0/view", text);
	for (int r = 2; r >= 0; r--) {
		cr_assert_eq(ft__mb_try_settle(&mb[r], 0, cand, 3, false, &v), 1, "rank %d", r);
		expect_members(&v, cand, 3);
		cr_expect_eq(v.nonce, 0x1234u, "rank %d: the view the others read", r);
		ft__view_free(&v);
	}
	for (int r = 0; r < 3; r++)
		ft__mb_close(&mb[r], 0, r == 0);
}

/* Lock files of ranks 0 and 2-4 of five, held by no one: they took them and died. */
static void plant_orphaned_locks_but_1(void)
{
	for (int r = 0; r < 5; r++) {
		char rel[32];
		snprintf(rel, sizeof(rel), "lock-%d", r);
		if (r != 1)
			plant_str(rel, "");
	}
}

static void mb_open_inc(struct ft__mb *mb, int rank, int world, uint32_t inc)
{
	struct ft__mb_params p = {.root = root, .job_id = JOB, .rank = rank, .world_size = world,
				  .incarnation = inc};
	int rc = ft__mb_open(mb, &p);

	cr_assert_eq(rc, 0, "open rank %d: %s", rank, ft_err_name(rc));
}

/*
 * A restarted incarnation never settles the job's first view with a
 * minority: the ranks whose locks it finds orphaned may be on their way
 * back (12 of issue 20: rank 1, restarted, ran the whole job as a world of
 * one). Ranks 0, 2, 3 and 4 took their locks and died (being restarted):
 * rank 1 of incarnation 1 waits; once ranks 0 and 3 are back (a majority,
 * 3 of 5) the view settles without the two still away. A first
 * incarnation leaves a rank that died in ft_init out as before.
 */
Test(membership, a_restarted_rank_needs_a_majority_for_the_first_view, .timeout = 20)
{
	struct ft__mb mb1, mb0, mb3, first;
	struct ft__view v = {0};
	const int cand[] = {0, 1, 2, 3, 4}, alone[] = {1}, three[] = {0, 1, 3};

	plant_orphaned_locks_but_1();
	mb_open_inc(&mb1, 1, 5, 1);
	publish(&mb1, 0, 0);
	cr_assert_eq(ft__mb_try_settle(&mb1, 0, cand, 5, false, &v), 0,
		     "a restarted rank settled a first view of its own");
	cr_assert_eq(ft__mb_try_settle(&mb1, 0, cand, 5, true, &v), 0, "nor forced");
	mb_open_inc(&mb0, 0, 5, 1);
	publish(&mb0, 0, 0);
	cr_assert_eq(ft__mb_try_settle(&mb0, 0, cand, 5, false, &v), 0, "2 of 5 are no majority");
	mb_open_inc(&mb3, 3, 5, 2);
	publish(&mb3, 0, 0);
	cr_assert_eq(ft__mb_try_settle(&mb0, 0, cand, 5, false, &v), 1, "3 of 5 are");
	expect_members(&v, three, 3);
	ft__view_free(&v);
	ft__mb_close(&mb0, 0, false);
	ft__mb_close(&mb1, 0, false);
	ft__mb_close(&mb3, 0, false);
	cleanup();
	quiet();
	plant_orphaned_locks_but_1();
	mb_open_inc(&first, 1, 5, 0);
	publish(&first, 0, 0);
	cr_assert_eq(ft__mb_try_settle(&first, 0, cand, 5, false, &v), 1,
		     "a first incarnation leaves the ranks that died in ft_init out");
	expect_members(&v, alone, 1);
	ft__view_free(&v);
	ft__mb_close(&first, 0, true);
}

/* pwrite() cut short and interrupted: files are still written whole. */
Test(membership, short_and_interrupted_writes, .timeout = 20)
{
	struct ft__mb mb[2];
	struct ft__view v = {0};
	struct ft__member m = member("127.0.0.1:4000", "127.0.0.1:4001", 99), got;
	const int cand[] = {0, 1};
	int rc;

	mb_open(&mb[0], 0, 2);
	mb_open(&mb[1], 1, 2);
	short_writes = 1;
	rc = ft__mb_publish(&mb[0], 0, &m);
	short_writes = 0;
	cr_assert_eq(rc, 0, "publish under short writes: %s", ft_err_name(rc));
	cr_assert_gt(short_write_calls, 10, "pwrite() was not cut short");
	cr_assert_eq(ft__mb_lookup(&mb[1], 0, 0, &got), 0);
	cr_expect_str_eq(got.addr, "127.0.0.1:4000");
	cr_expect_str_eq(got.ctrl, "127.0.0.1:4001");
	cr_expect_eq(got.next_op, 99u);
	publish(&mb[1], 0, 0);
	short_writes = 1;
	rc = ft__mb_try_settle(&mb[0], 0, cand, 2, false, &v);
	short_writes = 0;
	cr_assert_eq(rc, 1, "view written under short writes: %s", ft_err_name(rc));
	expect_members(&v, cand, 2);
	ft__view_free(&v);
	short_writes = 1;
	rc = ft__mb_depart(&mb[1], 5);
	short_writes = 0;
	cr_expect_eq(rc, 0, "depart under short writes: %s", ft_err_name(rc));
	ft__mb_close(&mb[0], 0, false);
	ft__mb_close(&mb[1], 0, false);
}

/* ---- hostile and corrupt files ---- */

/* A view file for generation 0 of a world of 3 (len bytes of text) must be
 * refused with -FT_ECORRUPT, whatever rank reads it. */
static void expect_corrupt_view(const char *what, const char *text, size_t len)
{
	struct ft__mb mb;
	struct ft__view v = {0};
	const int cand[] = {0, 1, 2};
	int rc;

	plant("gen-0/view", text, len);
	for (int r = 0; r < 3; r++) {
		mb_open(&mb, r, 3);
		publish(&mb, 0, 0);
		rc = ft__mb_try_settle(&mb, 0, cand, 3, true, &v);
		cr_expect_eq(rc, -FT_ECORRUPT, "%s (read by rank %d): got %s", what, r, ft_err_name(rc));
		if (rc == 1)
			ft__view_free(&v);
		ft__mb_close(&mb, 0, false);
	}
}

/* The header of a live view of generation 0 (this process wrote it), then
 * what follows "members". */
#define BADV(what, ...)                                                           \
	do {                                                                      \
		char t_[2048];                                                    \
		int n_ = snprintf(t_, sizeof(t_), __VA_ARGS__);                   \
		cr_assert(n_ >= 0 && (size_t)n_ < sizeof(t_));                    \
		expect_corrupt_view(what, t_, (size_t)n_);                        \
	} while (0)
#define HDR "ftcc-view 2 gen 0 size 3 writer %d %s nonce abc first 0 members"
#define ME (int)getpid(), host()

Test(hostile, view_members_out_of_range, .timeout = 30)
{
	BADV("member == world size", HDR " 0 1 3\n", ME);
	BADV("member far beyond the world", HDR " 0 1 1000000000\n", ME);
	BADV("member beyond INT_MAX", HDR " 0 1 99999999999999999999\n", ME);
	BADV("negative member", HDR " -1 0 1\n", ME);
	BADV("members descending", HDR " 2 1 0\n", ME);
	BADV("member twice", HDR " 0 0 1\n", ME);
	BADV("member not a number", HDR " 0 1 x\n", ME);
}

Test(hostile, view_counts, .timeout = 30)
{
	BADV("fewer members than its size", HDR " 0 1\n", ME);
	BADV("more members than its size",
	     "ftcc-view 2 gen 0 size 2 writer %d %s nonce abc first 0 members 0 1 2\n", ME);
	BADV("size 0", "ftcc-view 2 gen 0 size 0 writer %d %s nonce abc first 0 members\n", ME);
	BADV("size beyond the world",
	     "ftcc-view 2 gen 0 size 4 writer %d %s nonce abc first 0 members 0 1 2 3\n", ME);
	BADV("negative size", "ftcc-view 2 gen 0 size -1 writer %d %s nonce abc first 0 members 0\n", ME);
	BADV("size beyond 32 bits",
	     "ftcc-view 2 gen 0 size 4294967297 writer %d %s nonce abc first 0 members 0\n", ME);
}

Test(hostile, view_header_fields, .timeout = 30)
{
	BADV("another generation", "ftcc-view 2 gen 7 size 3 writer %d %s nonce abc first 0 members 0 1 2\n", ME);
	BADV("another version", "ftcc-view 3 gen 0 size 3 writer %d %s nonce abc first 0 members 0 1 2\n", ME);
	BADV("negative first op", "ftcc-view 2 gen 0 size 3 writer %d %s nonce abc first -1 members 0 1 2\n", ME);
	BADV("first op beyond 64 bits",
	     "ftcc-view 2 gen 0 size 3 writer %d %s nonce abc first 18446744073709551616 members 0 1 2\n", ME);
	BADV("nonce not hex", "ftcc-view 2 gen 0 size 3 writer %d %s nonce xyz first 0 members 0 1 2\n", ME);
	BADV("nonce beyond 64 bits",
	     "ftcc-view 2 gen 0 size 3 writer %d %s nonce 1ffffffffffffffff first 0 members 0 1 2\n", ME);
	BADV("keyword missing", "ftcc-view 2 gen 0 size 3 writer %d %s nonce abc first 0 0 1 2\n", ME);
}

Test(hostile, view_writer, .timeout = 30)
{
	char longhost[301];

	memset(longhost, 'h', 300);
	longhost[300] = '\0';
	BADV("writer pid 0", "ftcc-view 2 gen 0 size 3 writer 0 %s nonce abc first 0 members 0 1 2\n", host());
	BADV("negative writer pid", "ftcc-view 2 gen 0 size 3 writer -%d %s nonce abc first 0 members 0 1 2\n", ME);
	BADV("writer pid beyond int", "ftcc-view 2 gen 0 size 3 writer 99999999999 %s nonce abc first 0 members 0 1 2\n", host());
	BADV("host name of 300 characters", HDR " 0 1 2\n", (int)getpid(), longhost);
}

Test(hostile, view_framing, .timeout = 30)
{
	char t[1024];
	int n;

	expect_corrupt_view("empty", "", 0);
	BADV("garbage", "hello %d %s\n", ME);
	BADV("cut in the header", "ftcc-view 2 gen 0 size 3 writer %d %s", ME);
	BADV("no newline", HDR " 0 1 2", ME);
	BADV("a second line", HDR " 0 1 2\nmembers 0\n", ME);
	BADV("two spaces", HDR "  0 1 2\n", ME);
	BADV("a tab", HDR "\t0 1 2\n", ME);
	BADV("a space before the newline", HDR " 0 1 2 \n", ME);
	n = snprintf(t, sizeof(t), HDR " 0 1 2\n", ME);
	t[n - 4] = '\0'; /* "... 0 1\0 2\n": the NUL is part of the file */
	expect_corrupt_view("a NUL inside", t, (size_t)n);
}

Test(hostile, view_too_long, .timeout = 30)
{
	size_t cap = 200000;
	char *t = malloc(cap);
	int n;

	cr_assert_not_null(t);
	n = snprintf(t, cap, HDR " 0 1 2", ME);
	memset(t + n, ' ', 100000);
	t[n + 100000] = '\n';
	expect_corrupt_view("100000 spaces after the members", t, (size_t)n + 100001);
	free(t);
}

/* A member file of rank 1 (gen 0, world 2): lookup refuses it with
 * -FT_ECORRUPT; the coordinator leaves rank 1 out, but only when forced. */
static void expect_corrupt_member(const char *what, const char *text, size_t len)
{
	struct ft__mb mb;
	struct ft__member m;
	struct ft__view v = {0};
	const int cand[] = {0, 1}, want[] = {0};
	char path[600];
	int rc;

	plant("gen-0/member-1", text, len);
	mb_open(&mb, 0, 2);
	rc = ft__mb_lookup(&mb, 0, 1, &m);
	cr_expect_eq(rc, -FT_ECORRUPT, "%s: lookup gave %s", what, ft_err_name(rc));
	publish(&mb, 0, 0);
	rc = ft__mb_try_settle(&mb, 0, cand, 2, false, &v);
	cr_expect_eq(rc, 0, "%s: settled unforced: %s", what, ft_err_name(rc));
	if (rc == 1)
		ft__view_free(&v);
	rc = ft__mb_try_settle(&mb, 0, cand, 2, true, &v);
	cr_expect_eq(rc, 1, "%s: forced settle: %s", what, ft_err_name(rc));
	if (rc == 1) {
		expect_members(&v, want, 1);
		ft__view_free(&v);
	}
	ft__mb_close(&mb, 0, true);
	snprintf(path, sizeof(path), "%s/%s/gen-0/view", root, JOB);
	unlink(path);
}

Test(hostile, member_files, .timeout = 30)
{
	char text[1024], longs[400];
	int me = (int)getpid();
	const char *h = host();

#define BAD(what, ...)                                                \
	do {                                                          \
		int n_ = snprintf(text, sizeof(text), __VA_ARGS__);   \
		expect_corrupt_member(what, text, (size_t)n_);        \
	} while (0)

	memset(longs, 'a', 300);
	longs[300] = '\0';
	BAD("address of 300 characters", "%s 1 %s - 0\n", longs, h);
	BAD("host of 300 characters", "a:1 %d %s - 0\n", me, longs);
	longs[70] = '\0';
	BAD("control address of 70 characters", "a:1 %d %s %s 0\n", me, h, longs);
	BAD("pid 0", "a:1 0 %s - 0\n", h);
	BAD("negative pid", "a:1 -1 %s - 0\n", h);
	BAD("pid not a number", "a:1 abc %s - 0\n", h);
	BAD("pid beyond int", "a:1 4294967296 %s - 0\n", h);
	BAD("negative next op", "a:1 %d %s - -1\n", me, h);
	BAD("next op overflows", "a:1 %d %s - 18446744073709551616\n", me, h);
	BAD("next op with a suffix", "a:1 %d %s - 12x\n", me, h);
	BAD("a field missing", "a:1 %d %s -\n", me, h);
	BAD("a field too many", "a:1 %d %s - 0 0 0\n", me, h);
	BAD("rejoining neither 0 nor 1", "a:1 %d %s - 0 2\n", me, h);
	BAD("no newline", "a:1 %d %s - 0", me, h);
	BAD("empty", "%s", "");
	BAD("a tab", "a:1\t%d %s - 0\n", me, h);
	{
		int n = snprintf(text, sizeof(text), "a:1 %d %s - 0\n", me, h);
		text[3] = '\0'; /* "a:1\0..." */
		expect_corrupt_member("a NUL inside", text, (size_t)n);
	}
#undef BAD
}

Test(hostile, departure_markers_ignored_when_malformed, .timeout = 20)
{
	struct ft__mb mb[3];
	struct ft__view v = {0};
	const int cand[] = {0, 1, 2}, want[] = {0, 1};

	for (int r = 0; r < 3; r++) {
		mb_open(&mb[r], r, 3);
		publish(&mb[r], 0, 0);
	}
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(ft__mb_settle(&mb[r], 0, cand, 3, 5000, &v), 0);
		ft__view_free(&v);
	}
	publish(&mb[0], 1, 0);
	publish(&mb[1], 1, 0);
	/* a malformed marker for rank 2: not taken as its departure */
	plant_str("left-2", "garbage\n");
	cr_expect_eq(ft__mb_try_settle(&mb[0], 1, cand, 3, false, &v), 0);
	/* the real one is */
	cr_assert_eq(ft__mb_depart(&mb[2], 0), 0);
	cr_assert_eq(ft__mb_try_settle(&mb[0], 1, cand, 3, false, &v), 1);
	expect_members(&v, want, 2);
	ft__view_free(&v);
	for (int r = 0; r < 3; r++)
		ft__mb_close(&mb[r], 1, false);
}

/* ---- departures through the public API ---- */

/* Rank 1 cannot record its departure (its marker's name is taken by a
 * directory): ft_finalize says so with -FT_EIO, and finalizes all the same. */
static int run_depart(int rank, const struct tu_job *job)
{
	struct ft_config cfg;
	struct ft_comm *comm = NULL;
	int rc;

	tu_config(job, rank, &cfg);
	cfg.policy = FT_POLICY_SHRINK;
	if (ft_init(&cfg, &comm) != 0)
		return 10;
	if (ft_barrier(comm) != 0)
		return 11;
	if (rank == 1) {
		char path[600];
		snprintf(path, sizeof(path), "%s/%s/left-1", job->dir, job->job_id);
		if (mkdir(path, 0700) != 0)
			return 12;
		snprintf(path, sizeof(path), "%s/%s/left-1/x", job->dir, job->job_id);
		close(open(path, O_CREAT | O_WRONLY, 0600));
	}
	if (ft_barrier(comm) != 0)
		return 13;
	rc = ft_finalize(comm);
	if (rc != (rank == 1 ? -FT_EIO : 0)) {
		fprintf(stderr, "rank %d: ft_finalize gave %s\n", rank, ft_err_name(rc));
		return 14;
	}
	if (ft_rank(comm) != -FT_EFINALIZED)
		return 15;
	return 0;
}

Test(depart, unrecorded_departure_reported_by_finalize, .timeout = 60)
{
	struct tu_job job;
	pid_t pids[2];

	tu_job_init(&job, 2);
	for (int r = 0; r < 2; r++) {
		pids[r] = fork();
		cr_assert_geq(pids[r], 0);
		if (pids[r] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			_exit(run_depart(r, &job));
		}
		job.pids[r] = pids[r];
	}
	cr_expect_eq(tu_wait(&job, 30000, NULL), 0);
	tu_job_cleanup(&job);
}

/*
 * Rejoin: generation 1 after rank 2 of three died. With rank 2 awaited back,
 * the coordinator (rank 0) does not settle while rank 2's record is absent
 * or is the dead incarnation's (not rejoining), even forced; it takes the
 * new incarnation unless the op it published is past first_op + 1.
 */
static void rejoin_case(uint64_t can, bool taken)
{
	struct ft__mb mb[3];
	struct ft__view v = {0};
	const int cand[] = {0, 1, 2}, alive[] = {0, 1}, back[] = {2};
	char text[512];

	for (int r = 0; r < 3; r++) {
		mb_open(&mb[r], r, 3);
		publish(&mb[r], 0, 0);
	}
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(ft__mb_settle(&mb[r], 0, cand, 3, 5000, &v), 0);
		ft__view_free(&v);
	}
	publish(&mb[0], 1, 7);
	publish(&mb[1], 1, 7);
	cr_expect_eq(ft__mb_try_settle_back(&mb[0], 1, alive, 2, back, 1, false, &v), 0,
		     "rank 2 not back yet");
	/* the dead incarnation's record, not rejoining: still waited for */
	snprintf(text, sizeof(text), "127.0.0.1:5002 %d %s - 7\n", dead_pid(), host());
	plant_str("gen-1/member-2", text);
	cr_expect_eq(ft__mb_try_settle_back(&mb[0], 1, alive, 2, back, 1, false, &v), 0,
		     "a dead incarnation's record is not a rejoin");
	/* the new incarnation (this process stands in for it: a live pid) */
	snprintf(text, sizeof(text), "127.0.0.1:5002 %d %s - %llu 1\n", (int)getpid(), host(),
		 (unsigned long long)can);
	plant_str("gen-1/member-2", text);
	cr_expect_eq(ft__mb_try_settle_back(&mb[1], 1, alive, 2, back, 1, false, &v), 0,
		     "only the coordinator settles");
	cr_assert_eq(ft__mb_try_settle_back(&mb[0], 1, alive, 2, back, 1, false, &v), 1);
	if (taken) {
		const int want[] = {0, 1, 2};
		expect_members(&v, want, 3);
	} else {
		expect_members(&v, alive, 2);
	}
	cr_expect_eq(v.first_op, 7u, "first op: the survivors', not the newcomer's");
	ft__view_free(&v);
	struct ft__member m;
	cr_assert_eq(ft__mb_lookup(&mb[1], 1, 2, &m), 0);
	cr_expect(m.rejoining && m.next_op == can);
	for (int r = 0; r < 3; r++)
		ft__mb_close(&mb[r], 1, r == 0);
}

Test(membership, rejoin_takes_back_a_replayer, .timeout = 20)
{
	rejoin_case(8, true); /* its log holds op 7: it replays it */
}

Test(membership, rejoin_takes_back_a_rerunner, .timeout = 20)
{
	rejoin_case(7, true); /* it never started op 7: its application runs it */
}

Test(membership, rejoin_takes_back_one_without_a_log, .timeout = 20)
{
	rejoin_case(0, true); /* no log: its application runs op 7 */
}

Test(membership, rejoin_refuses_a_log_ahead, .timeout = 20)
{
	rejoin_case(9, false);
}
