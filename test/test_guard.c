/* test_guard.c: what a killed shm process leaves behind: a held lock (the guard frees it), a stale region. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#ifdef FTCC_HAVE_FABRIC
#include "fabric/fabric.h"

/*
 * A stand-in for a region of libfabric 1.17's shm provider: a file in
 * /dev/shm whose head holds the owner's pid at byte 4 and the queues'
 * spinlock at byte 24, as transports/fabric/guard.c expects.
 */
struct fake {
	char name[64];
	char *head;
};

static void fake_make(struct fake *f, const char *what)
{
	char path[96];
	int fd, pid = getpid();

	snprintf(f->name, sizeof(f->name), "ftcc-test-guard-%s-%d", what, pid);
	snprintf(path, sizeof(path), "/dev/shm/%s", f->name);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	cr_assert_geq(fd, 0, "cannot create %s", path);
	cr_assert_eq(ftruncate(fd, 4096), 0);
	f->head = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	cr_assert_neq(f->head, MAP_FAILED);
	memcpy(f->head + 4, &pid, sizeof(pid));
	cr_assert_eq(pthread_spin_init((pthread_spinlock_t *)(void *)(f->head + 24),
				       PTHREAD_PROCESS_SHARED),
		     0);
}

static void fake_drop(struct fake *f)
{
	munmap(f->head, 4096);
	shm_unlink(f->name);
}

static pthread_spinlock_t *fake_lock(struct fake *f)
{
	return (pthread_spinlock_t *)(void *)(f->head + 24);
}

/* A child that takes the lock (when take), says so on the pipe, then waits to be killed. */
static pid_t child(struct fake *f, bool take)
{
	int p[2];
	char c = 0;
	pid_t pid;

	cr_assert_eq(pipe(p), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (take)
			pthread_spin_lock(fake_lock(f));
		if (write(p[1], &c, 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	cr_assert_eq(read(p[0], &c, 1), 1);
	close(p[0]);
	return pid;
}

static void reap(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Tries for the lock for up to ms; returns whether it was taken (and lets it go). */
static bool lock_within(struct fake *f, long ms)
{
	long end = now_ms() + ms;

	do {
		if (pthread_spin_trylock(fake_lock(f)) == 0) {
			pthread_spin_unlock(fake_lock(f));
			return true;
		}
		usleep(2000);
	} while (now_ms() < end);
	return false;
}

static struct ft_guard *guard_or_skip(void)
{
	struct ft_guard *g = ft__fab_guard_open();

	if (g == NULL) {
		uint32_t v = fi_version();
		cr_skip_test("SKIPPED: no shm lock guard for libfabric %u.%u (it knows 1.17's layout only)",
			     FI_MAJOR(v), FI_MINOR(v));
	}
	return g;
}

Test(guard, frees_the_lock_a_killed_process_held, .timeout = 30)
{
	struct ft_guard *g = guard_or_skip();
	struct fake own;
	pid_t holder;
	long t0;

	fake_make(&own, "own");
	cr_assert(ft__fab_guard_add(g, own.name, getpid(), FT__GUARD_OWN),
		  "the guard refused a well-formed region");
	holder = child(&own, true);
	/* The holder is a peer whose region is unnamed: its death alone is watched. */
	cr_assert(ft__fab_guard_add(g, "ftcc-test-guard-gone", holder, 1));
	cr_assert(!lock_within(&own, 100), "the child does not hold the lock");
	reap(holder);
	t0 = now_ms();
	cr_assert(lock_within(&own, 5000), "the lock of a killed holder is still held after 5 s");
	cr_expect_geq(now_ms() - t0, 200, "freed after %ld ms: the guard did not wait to be sure",
		      now_ms() - t0);
	ft__fab_guard_close(g);
	fake_drop(&own);
}

Test(guard, leaves_a_live_holder_alone, .timeout = 30)
{
	struct ft_guard *g = guard_or_skip();
	struct fake own;
	pid_t holder, other;

	fake_make(&own, "live");
	cr_assert(ft__fab_guard_add(g, own.name, getpid(), FT__GUARD_OWN));
	holder = child(&own, true);
	other = child(&own, false);
	cr_assert(ft__fab_guard_add(g, "ftcc-test-guard-holder", holder, 1));
	cr_assert(ft__fab_guard_add(g, "ftcc-test-guard-other", other, 2));
	/* Nobody died: a lock held for a whole second stays held. */
	cr_expect(!lock_within(&own, 1000), "the guard freed a lock whose holder is alive");
	reap(holder);
	reap(other);
	ft__fab_guard_close(g);
	fake_drop(&own);
}

/* Waits up to ms for pid to end; its wait status, or -1 if it still lives. */
static int ended_within(pid_t pid, long ms)
{
	long end = now_ms() + ms;
	int st;

	do {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return st;
		usleep(2000);
	} while (now_ms() < end);
	return -1;
}

/* A child stopped while it holds held's lock; named's head names it its owner. */
static pid_t stopped_child(struct fake *held, struct fake *named)
{
	pid_t pid = child(held, true);

	kill(pid, SIGSTOP);
	memcpy(named->head + 4, &pid, sizeof(pid));
	return pid;
}

/* A guard with a region of this process's (own, watched) and a peer's
 * (theirs, to be watched once its process exists): the fence tests' set-up. */
struct fence {
	struct ft_guard *g;
	struct fake own, theirs;
};

static void fence_open(struct fence *f, const char *own, const char *theirs)
{
	f->g = guard_or_skip();
	fake_make(&f->own, own);
	fake_make(&f->theirs, theirs);
	cr_assert(ft__fab_guard_add(f->g, f->own.name, getpid(), FT__GUARD_OWN));
}

static void fence_close(struct fence *f)
{
	ft__fab_guard_close(f->g);
	fake_drop(&f->own);
	fake_drop(&f->theirs);
}

/* A peer stopped while it holds a lock (of our region, or of its own) and
 * then left out of the view: the guard kills it, then frees the lock. */
static void fence_case(bool its_own_region)
{
	struct fence f;
	struct fake *held;
	int out = 5, st;
	pid_t holder;
	long t0;

	fence_open(&f, "fence-own", "fence-theirs");
	held = its_own_region ? &f.theirs : &f.own;
	holder = stopped_child(held, &f.theirs); /* its region names it its owner */
	cr_assert(ft__fab_guard_add(f.g, f.theirs.name, holder, out));
	cr_assert(!lock_within(held, 500), "the child does not hold the lock");
	cr_assert_eq(ended_within(holder, 0), -1, "the guard killed a peer nobody left out");
	t0 = now_ms();
	ft__fab_guard_left_out(f.g, out);
	st = ended_within(holder, 5000);
	cr_assert(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
		  "a left-out peer holding a lock for good still lives 5 s later (status %d)", st);
	cr_expect_geq(now_ms() - t0, 200, "killed after %ld ms: the guard did not wait to be sure",
		      now_ms() - t0);
	cr_assert(lock_within(held, 5000), "the lock of the killed holder is still held after 5 s");
	fence_close(&f);
}

Test(guard, kills_a_left_out_peer_stopped_with_our_lock, .timeout = 30)
{
	fence_case(false);
}

Test(guard, kills_a_left_out_peer_stopped_with_its_own_lock, .timeout = 30)
{
	fence_case(true);
}

Test(guard, leaves_a_left_out_peer_holding_no_lock_alone, .timeout = 30)
{
	struct ft_guard *g = guard_or_skip();
	struct fake own;
	int out = 3;
	pid_t peer;

	fake_make(&own, "fence-none");
	cr_assert(ft__fab_guard_add(g, own.name, getpid(), FT__GUARD_OWN));
	peer = child(&own, false);
	kill(peer, SIGSTOP);
	cr_assert(ft__fab_guard_add(g, "ftcc-test-guard-left-out", peer, out));
	ft__fab_guard_left_out(g, out);
	/* It learns from its next call that it is out: no lock wedges anyone. */
	cr_expect_eq(ended_within(peer, 1500), -1, "the guard killed a left-out peer holding no lock");
	reap(peer);
	ft__fab_guard_close(g);
	fake_drop(&own);
}

/* This process's own thread holds its lock while it waits on a left-out
 * peer's, which the peer holds, stopped: the guard kills the peer and frees
 * the peer's lock, never ours under our live thread. */
Test(guard, never_frees_our_lock_under_our_thread_while_it_fences, .timeout = 30)
{
	struct fence f;
	int out = 5, st;
	pid_t peer;
	bool ours_free;

	fence_open(&f, "fence-mine", "fence-peer");
	peer = stopped_child(&f.theirs, &f.theirs);
	cr_assert(ft__fab_guard_add(f.g, f.theirs.name, peer, out));
	pthread_spin_lock(fake_lock(&f.own));
	ft__fab_guard_left_out(f.g, out);
	st = ended_within(peer, 5000);
	cr_assert(st != -1, "the stopped left-out holder still lives 5 s later");
	cr_assert(lock_within(&f.theirs, 5000), "the lock of the killed holder is still held");
	ours_free = pthread_spin_trylock(fake_lock(&f.own)) == 0;
	cr_expect(!ours_free, "the guard freed this process's lock while its own thread held it");
	pthread_spin_unlock(fake_lock(&f.own));
	fence_close(&f);
}

/* Two left-out peers, one stopped with its own region's lock: only that one
 * is killed; the other, and a peer still in the view, live on. */
Test(guard, kills_only_the_left_out_peer_whose_lock_is_held, .timeout = 30)
{
	struct fence f;
	int holder_rank = 5, idle_rank = 6;
	pid_t holder, idle, member;

	fence_open(&f, "fence-one", "fence-one-peer");
	holder = stopped_child(&f.theirs, &f.theirs);
	idle = child(&f.own, false);
	member = child(&f.own, false);
	cr_assert(ft__fab_guard_add(f.g, f.theirs.name, holder, holder_rank));
	cr_assert(ft__fab_guard_add(f.g, "ftcc-test-guard-idle", idle, idle_rank));
	cr_assert(ft__fab_guard_add(f.g, "ftcc-test-guard-member", member, 7));
	ft__fab_guard_left_out(f.g, holder_rank);
	ft__fab_guard_left_out(f.g, idle_rank);
	cr_assert(ended_within(holder, 5000) != -1, "the stopped left-out holder still lives");
	cr_expect_eq(ended_within(idle, 1000), -1, "the guard killed a left-out peer holding no lock");
	cr_expect_eq(ended_within(member, 0), -1, "the guard killed a peer still in the view");
	reap(idle);
	reap(member);
	fence_close(&f);
}

/* A peer killed holding its own region's lock, our thread holding ours
 * while it waits on that one, and an idle left-out peer, stopped: the dead
 * peer's lock is freed, and the idle one lives. */
Test(guard, a_dead_peers_lock_kills_no_left_out_peer, .timeout = 30)
{
	struct fence f;
	int dead_rank = 4, idle_rank = 6;
	pid_t dead, idle;

	fence_open(&f, "fence-dead-own", "fence-dead-peer");
	dead = stopped_child(&f.theirs, &f.theirs);
	idle = child(&f.own, false);
	kill(idle, SIGSTOP);
	cr_assert(ft__fab_guard_add(f.g, f.theirs.name, dead, dead_rank));
	cr_assert(ft__fab_guard_add(f.g, "ftcc-test-guard-idle2", idle, idle_rank));
	pthread_spin_lock(fake_lock(&f.own));
	reap(dead);
	ft__fab_guard_left_out(f.g, dead_rank);
	ft__fab_guard_left_out(f.g, idle_rank);
	cr_assert(lock_within(&f.theirs, 5000), "the dead peer's lock is still held after 5 s");
	pthread_spin_unlock(fake_lock(&f.own)); /* our thread got it and went on */
	cr_expect_eq(ended_within(idle, 1000), -1,
		     "the guard killed an idle left-out peer for a dead one's lock");
	reap(idle);
	fence_close(&f);
}

/* A vigil that ended while our lock was held leaves nothing behind: a
 * brief hold at the next vigil's start kills no one and frees nothing. */
Test(guard, starts_each_vigil_afresh, .timeout = 30)
{
	struct ft_guard *g = guard_or_skip();
	struct fake own;
	int first = 5, second = 6;
	pid_t a, b;
	long t0;
	bool ours_free;

	fake_make(&own, "fence-afresh");
	cr_assert(ft__fab_guard_add(g, own.name, getpid(), FT__GUARD_OWN));
	a = child(&own, false);
	b = child(&own, false);
	cr_assert(ft__fab_guard_add(g, "ftcc-test-guard-first", a, first));
	cr_assert(ft__fab_guard_add(g, "ftcc-test-guard-second", b, second));
	t0 = now_ms();
	ft__fab_guard_left_out(g, first); /* a vigil of 3 s */
	while (now_ms() < t0 + 2850)
		usleep(1000);
	pthread_spin_lock(fake_lock(&own)); /* held across the vigil's end, 200 ms */
	while (now_ms() < t0 + 3050)
		usleep(1000);
	pthread_spin_unlock(fake_lock(&own));
	usleep(300000);
	pthread_spin_lock(fake_lock(&own)); /* then 30 ms as a new vigil starts */
	ft__fab_guard_left_out(g, second);
	usleep(30000);
	ours_free = pthread_spin_trylock(fake_lock(&own)) == 0;
	pthread_spin_unlock(fake_lock(&own));
	cr_expect(!ours_free, "a 30 ms hold of our lock was freed: the last vigil's look lingered");
	cr_expect_eq(ended_within(b, 500), -1, "a 30 ms hold killed a left-out peer");
	cr_expect_eq(ended_within(a, 0), -1, "a hold of 200 ms killed a left-out peer");
	reap(a);
	reap(b);
	ft__fab_guard_close(g);
	fake_drop(&own);
}

/*
 * A peer's pid is what its hello said, and its region may be unnamed: a
 * token holder could name any process of this user (another job's rank)
 * and, once left out while this process's lock is wedged, have the guard
 * kill it. A process that maps no wedged region holds no lock of it: it
 * lives.
 */
Test(guard, kills_only_a_process_that_maps_the_wedged_region, .timeout = 30)
{
	struct ft_guard *g;
	struct fake own;
	int out = 4, st;
	pid_t stranger = fork(), holder;

	cr_assert_geq(stranger, 0);
	if (stranger == 0) { /* forked before any region: maps none */
		for (;;)
			pause();
	}
	g = guard_or_skip();
	fake_make(&own, "stranger-own");
	cr_assert(ft__fab_guard_add(g, own.name, getpid(), FT__GUARD_OWN));
	/* the "peer" whose hello named the stranger's pid; its region unnamed */
	cr_assert(ft__fab_guard_add(g, "ftcc-test-guard-unnamed", stranger, out));
	pthread_spin_lock(fake_lock(&own)); /* wedged past GUARD_HELD_MS */
	ft__fab_guard_left_out(g, out);
	st = ended_within(stranger, 1500);
	pthread_spin_unlock(fake_lock(&own));
	cr_expect_eq(st, -1, "the guard killed pid %d, which maps no region of this job",
		     (int)stranger);
	/* the same wedge with a holder that does map the region: killed */
	holder = child(&own, false);
	kill(holder, SIGSTOP);
	cr_assert(ft__fab_guard_add(g, "ftcc-test-guard-unnamed-2", holder, out + 1));
	pthread_spin_lock(fake_lock(&own));
	ft__fab_guard_left_out(g, out + 1);
	st = ended_within(holder, 5000);
	pthread_spin_unlock(fake_lock(&own));
	cr_expect(st != -1, "a left-out peer that maps the wedged region still lives 5 s later");
	if (st == -1)
		reap(holder);
	reap(stranger);
	ft__fab_guard_close(g);
	fake_drop(&own);
}

Test(guard, refuses_a_region_that_names_another_owner)
{
	struct ft_guard *g = guard_or_skip();
	struct fake own;

	fake_make(&own, "other");
	cr_expect(!ft__fab_guard_add(g, own.name, getpid() + 1, FT__GUARD_OWN));
	cr_expect(!ft__fab_guard_add(g, "ftcc-test-guard-missing", getpid(), FT__GUARD_OWN));
	ft__fab_guard_close(g);
	fake_drop(&own);
}

/*
 * A rank whose pid once belonged to a process killed with its shm region
 * still in /dev/shm: shm refuses to enable an endpoint of that name, and
 * ftcc removes the stale file and goes on.
 */
static void plant_stale_region(struct ft_config *cfg, int rank)
{
	int pid = getpid();

	(void)rank;
	snprintf(cfg->transport, sizeof(cfg->transport), "fabric");
	setenv("FI_PROVIDER", "shm", 1);
	for (int i = 0; i < 2; i++) {
		char path[96];
		snprintf(path, sizeof(path), "/dev/shm/%d:%d:0", pid, i == 0 ? 0 : (int)getuid());
		int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || ftruncate(fd, 4096) != 0 || pwrite(fd, &pid, sizeof(pid), 4) != 4)
			_exit(97);
		close(fd);
	}
}

static int sum_ranks(struct ft_comm *comm, int rank, int n, void *arg)
{
	int32_t v = rank;

	(void)arg;
	return ft_allreduce(comm, &v, &v, 1, FT_INT32, FT_SUM, NULL) != 0 || v != n * (n - 1) / 2;
}

Test(stale_region, of_an_earlier_process_with_this_pid, .timeout = 60)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	struct tu_job job;

	/* fi_getinfo loads the providers here, before the ranks are forked:
	 * shm reads this now, as the ranks' transports will assume (testutil.h). */
	setenv("FI_SHM_DISABLE_CMA", "1", 0);
	cr_assert_not_null(hints);
	hints->fabric_attr->prov_name = strdup("shm");
	hints->ep_attr->type = FI_EP_RDM;
	if (fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info) != 0) {
		fi_freeinfo(hints);
		cr_skip_test("SKIPPED: libfabric has no shm provider here");
	}
	fi_freeinfo(info);
	fi_freeinfo(hints);
	tu_job_init(&job, 2);
	for (int r = 0; r < job.n; r++)
		tu_spawn(&job, r, sum_ranks, NULL, plant_stale_region);
	cr_assert_eq(tu_wait(&job, 40000, NULL), 0, "a rank failed with a stale region in the way");
}

#else
Test(guard, skipped)
{
	cr_skip_test("SKIPPED: built without libfabric");
}
#endif
