/* test_onehost.c: the one-host path: every collective through shared memory at 1-16 ranks, in rounds smaller than the message, the same bits on every rank, and the ring when the path cannot be had. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define DEADLINE_MS 120000

struct plan {
	size_t counts[8];
	int ncounts;
	bool want_shm;          /* the job must run on the one-host path (no byte on a link) */
};

static uint64_t fnv(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* Whether every rank holds the same bits (hash h): the min and max of h agree. */
static int same_everywhere(struct ft_comm *comm, uint64_t h, const char *what, int rank)
{
	int64_t lo = (int64_t)(h >> 1), hi = lo;
	int rc = ft_allreduce(comm, FT_IN_PLACE, &lo, 1, FT_INT64, FT_MIN, NULL);

	if (rc == 0)
		rc = ft_allreduce(comm, FT_IN_PLACE, &hi, 1, FT_INT64, FT_MAX, NULL);
	if (rc != 0 || lo != hi) {
		fprintf(stderr, "rank %d: %s: %s\n", rank, what,
			rc != 0 ? ft_strerror(rc) : "the ranks hold different bits");
		return 1;
	}
	return 0;
}

static int one_count(struct ft_comm *comm, int rank, int n, size_t count)
{
	size_t blocks = count * (size_t)n + 1;
	float *f = malloc((count + 1) * sizeof(float));
	int64_t *v = malloc(blocks * sizeof(int64_t));
	int32_t *g = malloc(blocks * sizeof(int32_t));
	unsigned char *b = malloc(count + 1);
	int bad = 0, rc;

	/* float32 sums whose value depends on the order of the additions: each
	 * slice is reduced once, in one order, and copied to all */
	for (size_t i = 0; i < count; i++)
		f[i] = (float)((i % 7 == 0 ? 1e8 : 1.0) * (rank + 1) + 0.1 * (double)(i % 13));
	rc = ft_allreduce(comm, FT_IN_PLACE, f, count, FT_FLOAT32, FT_SUM, NULL);
	bad |= rc != 0 || same_everywhere(comm, fnv(f, count * sizeof(float)), "float32 sum", rank);
	/* exact integers: in place, out of place, every block */
	for (size_t i = 0; i < count * (size_t)n; i++)
		v[i] = (int64_t)(i % 1000) * (rank + 1) - rank;
	rc = ft_reduce_scatter(comm, FT_IN_PLACE, v, count, FT_INT64, FT_SUM, NULL);
	for (size_t i = 0; rc == 0 && i < count; i++) {
		size_t at = (size_t)rank * count + i;
		int64_t want = (int64_t)(at % 1000) * n * (n + 1) / 2 - (int64_t)n * (n - 1) / 2;
		if (v[at] != want) {
			fprintf(stderr, "rank %d: reduce-scatter [%zu] = %lld, want %lld\n", rank, i,
				(long long)v[at], (long long)want);
			bad = 1;
			break;
		}
	}
	bad |= rc != 0;
	for (size_t i = 0; i < count; i++)
		g[(size_t)rank * count + i] = (int32_t)(rank * 100000 + (int)(i % 99991));
	g[count * (size_t)n] = 0x5a5a5a5a; /* guard */
	rc = ft_allgather(comm, FT_IN_PLACE, g, count, FT_INT32, NULL);
	for (int r = 0; rc == 0 && r < n && !bad; r++)
		for (size_t i = 0; i < count; i++)
			if (g[(size_t)r * count + i] != (int32_t)(r * 100000 + (int)(i % 99991))) {
				fprintf(stderr, "rank %d: allgather block %d [%zu] wrong\n", rank, r, i);
				bad = 1;
				break;
			}
	bad |= rc != 0 || g[count * (size_t)n] != 0x5a5a5a5a;
	for (size_t i = 0; i < count; i++)
		b[i] = rank == n - 1 ? (unsigned char)(i * 7 + 3) : 0;
	rc = ft_broadcast(comm, b, count, n - 1, NULL);
	for (size_t i = 0; rc == 0 && i < count; i++)
		if (b[i] != (unsigned char)(i * 7 + 3)) {
			fprintf(stderr, "rank %d: broadcast byte %zu wrong\n", rank, i);
			bad = 1;
			break;
		}
	bad |= rc != 0 || ft_barrier(comm) != 0;
	if (rc != 0)
		fprintf(stderr, "rank %d: count %zu: %s\n", rank, count, ft_strerror(rc));
	free(f);
	free(v);
	free(g);
	free(b);
	return bad;
}

static int run_plan(struct ft_comm *comm, int rank, int n, void *arg)
{
	const struct plan *p = arg;
	struct ft_stats st0, st;

	if (ft_stats_get(comm, &st0) != 0)
		return 2;
	for (int k = 0; k < p->ncounts; k++)
		if (one_count(comm, rank, n, p->counts[k]) != 0)
			return 1;
	if (ft_stats_get(comm, &st) != 0)
		return 2;
	st.bytes_sent -= st0.bytes_sent; /* (ft_init's own ops are not the plan's) */
	if (n > 1 && p->want_shm != (st.bytes_sent == 0)) {
		fprintf(stderr, "rank %d: %llu bytes on the data links: the job ran %s\n", rank,
			(unsigned long long)st.bytes_sent, p->want_shm ? "on the ring" : "in shm");
		return 3;
	}
	return 0;
}

/* Rounds of a quarter of 256 KiB: 16384 floats, so 50001 elements take several. */
static void matrix(int n, const char *shm, bool want)
{
	struct plan p = {.counts = {0, 1, 7, (size_t)n + 1, 50001}, .ncounts = 5, .want_shm = want};

	setenv("FTCC_SHM_BYTES", "256K", 1);
	if (shm != NULL)
		setenv("FTCC_SHM", shm, 1);
	cr_assert_eq(tu_run(n, DEADLINE_MS, run_plan, &p), 0, "some rank failed or hung (n=%d)", n);
	unsetenv("FTCC_SHM_BYTES");
	unsetenv("FTCC_SHM");
}

Test(onehost, world_1) { matrix(1, NULL, true); }
Test(onehost, world_2) { matrix(2, NULL, true); }
Test(onehost, world_3) { matrix(3, NULL, true); }
Test(onehost, world_5) { matrix(5, NULL, true); }
Test(onehost, world_8) { matrix(8, NULL, true); }
Test(onehost, world_16, .timeout = 240) { matrix(16, NULL, true); }

/* FTCC_SHM=0: the same calls on the ring */
Test(onehost, off_runs_the_ring) { matrix(3, "0", false); }

/*
 * Runs the 3-rank plan with a /dev/shm of its own (a tmpfs mounted with
 * opts in a mount namespace of the test's): needs root, else skipped.
 */
static void private_shm(const char *opts, bool open_dir, bool want)
{
	struct plan p = {.counts = {0, 1, 50001}, .ncounts = 3, .want_shm = want};
	int status;
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		char dir[128];
		if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
		    mount("tmpfs", "/dev/shm", "tmpfs", 0, opts) != 0)
			_exit(77);
		snprintf(dir, sizeof(dir), "/dev/shm/ftcc-shm-%u", (unsigned)geteuid());
		if (open_dir && (mkdir(dir, 0777) != 0 || chmod(dir, 0777) != 0))
			_exit(78);
		setenv("FTCC_SHM_BYTES", "256K", 1);
		_exit(tu_run(3, DEADLINE_MS, run_plan, &p) == 0 ? 0 : 1);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
		cr_skip_test("SKIPPED: a private /dev/shm needs root (unshare, mount)");
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the job failed (status %d)",
		  status);
}

/*
 * Files in the segment directory before the job: a segment whose maker is
 * dead (a job killed in its setup, before the ranks removed their files),
 * a segment of a live process, and a file that is no segment. The job
 * removes the first and leaves the others, and runs in shared memory. The
 * header's layout is lib/core/onehost.c's struct shm_head: magic at 0, the
 * maker's pid at 24, its pid namespace at 48.
 */
static void put_segment(const char *dir, const char *name, uint64_t magic, int32_t pid)
{
	char path[256], page[4096] = {0};
	struct stat st;
	uint64_t ns = stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	memcpy(page, &magic, 8);
	memcpy(page + 24, &pid, 4);
	memcpy(page + 48, &ns, 8);
	fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
	if (fd < 0 || write(fd, page, sizeof(page)) != (ssize_t)sizeof(page))
		_exit(79);
	close(fd);
}

static void stale_segments(void)
{
	struct plan p = {.counts = {1, 50001}, .ncounts = 2, .want_shm = true};
	int status;
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		char dir[128], path[256];
		pid_t dead = fork();
		if (dead == 0)
			_exit(0);
		waitpid(dead, NULL, 0); /* a pid nobody holds now */
		if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
		    mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=16m,mode=1777") != 0)
			_exit(77);
		snprintf(dir, sizeof(dir), "/dev/shm/ftcc-shm-%u", (unsigned)geteuid());
		if (mkdir(dir, 0700) != 0)
			_exit(78);
		put_segment(dir, "old-job-dead", 0x3130736d63637466ull, (int32_t)dead);
		put_segment(dir, "old-job-live", 0x3130736d63637466ull, (int32_t)getpid());
		put_segment(dir, "no-segment", 0x1234, (int32_t)dead);
		setenv("FTCC_SHM_BYTES", "256K", 1);
		if (tu_run(3, DEADLINE_MS, run_plan, &p) != 0)
			_exit(1);
		snprintf(path, sizeof(path), "%s/old-job-dead", dir);
		if (access(path, F_OK) == 0)
			_exit(2);
		snprintf(path, sizeof(path), "%s/old-job-live", dir);
		if (access(path, F_OK) != 0)
			_exit(3);
		snprintf(path, sizeof(path), "%s/no-segment", dir);
		_exit(access(path, F_OK) != 0 ? 4 : 0);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
		cr_skip_test("SKIPPED: a private /dev/shm needs root (unshare, mount)");
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "status %d (1: the job failed; 2: the dead maker's segment stayed; 3: a live "
		  "one's went; 4: a file that is no segment went)", status);
}

Test(onehost, a_segment_left_by_a_killed_job_is_removed) { stale_segments(); }

/* Another user's segment directory (here: one anyone may write in) is
 * refused: every rank stays on the ring, and the job is right. */
Test(onehost, a_directory_others_can_write_is_refused)
{
	private_shm("size=16m,mode=1777", true, false);
}

/* No room in /dev/shm for the segments: the ring, and the job is right. */
Test(onehost, a_full_dev_shm_keeps_the_ring)
{
	private_shm("size=64k,mode=1777", false, false);
}

/* ... and with room, the same job runs in shared memory. */
Test(onehost, a_private_dev_shm_with_room)
{
	private_shm("size=16m,mode=1777", false, true);
}

static void op_timeout_1s(struct ft_config *cfg, int rank)
{
	(void)rank;
	cfg->op_timeout_ms = 1000;
}

/* A member that never joins the op: FTCC_OP_TIMEOUT_MS fails it for the
 * others, as on the ring (the PyTorch backend's group timeout relies on it). */
static int never_joins(struct ft_comm *comm, int rank, int n, void *arg)
{
	float v[3] = {1, 1, 1};
	long t0 = tu_now_ms();
	int rc;

	(void)n;
	(void)arg;
	if (rank == 1) {
		tu_sleep_ms(3000);
		return 0;
	}
	rc = ft_allreduce(comm, FT_IN_PLACE, v, 3, FT_FLOAT32, FT_SUM, NULL);
	if (rc != -FT_ETIMEDOUT || tu_now_ms() - t0 > 2500) {
		fprintf(stderr, "rank 0: %s after %ld ms, want FT_ETIMEDOUT after about 1 s\n",
			ft_err_name(rc), tu_now_ms() - t0);
		return 1;
	}
	return 0;
}

Test(onehost, a_member_that_never_joins_times_the_op_out)
{
	struct tu_job job;

	tu_job_init(&job, 2);
	for (int r = 0; r < 2; r++)
		tu_spawn(&job, r, never_joins, NULL, op_timeout_1s);
	cr_assert_eq(tu_wait(&job, 20000, NULL), 0, "rank 0 did not time out as it should");
	tu_job_cleanup(&job);
}
