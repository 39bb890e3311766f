/* test_hygiene.c: what a job leaves behind: no token in a finalized rank's memory. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "testutil.h"

/*
 * The token of each job is made here at random, so that the only copies a
 * rank holds are the library's (and the test's own struct ft_config, on
 * the main thread's stack, which is not scanned).
 */
static char token[40];

static void tweak(struct ft_config *cfg, int rank)
{
	(void)rank;
	snprintf(cfg->token, sizeof(cfg->token), "%s", token);
	cfg->policy = FT_POLICY_SHRINK; /* a detector and its control links too */
}

/* Whether any writable private mapping but the main stack holds s. */
static bool memory_holds(const char *s, char *where, size_t cap)
{
	FILE *maps = fopen("/proc/self/maps", "r");
	char line[512];
	bool found = false;

	if (maps == NULL)
		return false;
	while (!found && fgets(line, sizeof(line), maps) != NULL) {
		unsigned long lo, hi;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || strncmp(perms, "rw-p", 4) != 0 ||
		    strstr(line, "[stack]") != NULL)
			continue;
		if (memmem((const void *)lo, hi - lo, s, strlen(s)) != NULL) {
			snprintf(where, cap, "%s", line);
			found = true;
		}
	}
	fclose(maps);
	return found;
}

static int finalize_then_scan(struct ft_comm *comm, int rank, int n, void *arg)
{
	char where[512], mine[sizeof(token)];
	int rc;

	/* the test's own copy goes to this stack, which is not scanned */
	memcpy(mine, token, sizeof(mine));
	explicit_bzero(token, sizeof(token));
	(void)n;
	(void)arg;
	if ((rc = ft_allreduce(comm, FT_IN_PLACE, &rank, 1, FT_INT32, FT_SUM, NULL)) != 0)
		return 2;
	if ((rc = ft_finalize(comm)) != 0)
		return 3;
	if (memory_holds(mine, where, sizeof(where))) {
		fprintf(stderr, "rank: the token is still in memory after ft_finalize: %s", where);
		return 4;
	}
	return 0;
}

/* The token stays in no finalized communicator, nor in what it freed. */
Test(hygiene, finalized_rank_holds_no_token, .timeout = 60)
{
	struct tu_job job;
	uint8_t raw[12];

	cr_assert_eq(getentropy(raw, sizeof(raw)), 0);
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(token + 2 * i, 3, "%02x", raw[i]);
	tu_job_init(&job, 2);
	for (int r = 0; r < 2; r++)
		tu_spawn(&job, r, finalize_then_scan, NULL, tweak);
	cr_expect_eq(tu_wait(&job, 30000, NULL), 0, "a rank kept the token (or failed)");
	tu_job_cleanup(&job);
}

/* Allreduces until the job has lost a rank, then a few more. */
static int run_until_shrunk(struct ft_comm *comm, int rank, int n, void *arg)
{
	char path[400];
	int64_t v;

	(void)arg;
	for (int i = 0, after = 0; i < 100000 && after < 5; i++) {
		v = rank;
		if (ft_allreduce(comm, FT_IN_PLACE, &v, 1, FT_INT64, FT_SUM, NULL) != 0)
			return 2;
		if (i == 0) {
			snprintf(path, sizeof(path), "%s/running-%d", (const char *)arg, rank);
			close(open(path, O_CREAT | O_WRONLY, 0600));
		}
		if (ft_size(comm) < n)
			after++;
		tu_sleep_ms(2);
	}
	return 0;
}

static void shrink_only(struct ft_config *cfg, int rank)
{
	(void)rank;
	cfg->policy = FT_POLICY_SHRINK;
}

/* A few allreduces. */
static int run_few(struct ft_comm *comm, int rank, int n, void *arg)
{
	int64_t v = rank;

	(void)n;
	(void)arg;
	for (int i = 0; i < 3; i++)
		if (ft_allreduce(comm, FT_IN_PLACE, &v, 1, FT_INT64, FT_SUM, NULL) != 0)
			return 2;
	return 0;
}

/* Allreduces until <dir>/stop exists (30 s at most). */
static int run_until_stop(struct ft_comm *comm, int rank, int n, void *arg)
{
	char path[400];
	int64_t v;

	(void)n;
	snprintf(path, sizeof(path), "%s/stop", (const char *)arg);
	for (int64_t t0 = tu_now_ms(); access(path, F_OK) != 0;) {
		v = rank;
		if (ft_allreduce(comm, FT_IN_PLACE, &v, 1, FT_INT64, FT_SUM, NULL) != 0)
			return 2;
		if (tu_now_ms() - t0 > 30000)
			return 3;
		tu_sleep_ms(2);
	}
	return 0;
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f, "%s", path);
	fputs(text, f);
	fclose(f);
}

static int again_timeout_ms;

static void again(struct ft_config *cfg, int rank)
{
	(void)rank;
	cfg->policy = FT_POLICY_SHRINK;
	cfg->connect_timeout_ms = again_timeout_ms;
}

static int barrier(struct ft_comm *comm, int rank, int n, void *arg)
{
	(void)rank;
	(void)n;
	(void)arg;
	return ft_barrier(comm);
}

/* Starts rank r of job as a new process of incarnation inc (ft_init, a
 * barrier, ft_finalize; connect timeout timeout_ms); returns -FT_EENDED
 * when ft_init failed with it, 0 when all went well, -FT_EIO otherwise;
 * and its time in *ms. */
static int start_again(struct tu_job *job, int r, int inc, int timeout_ms, int64_t *ms)
{
	int rc;

	again_timeout_ms = timeout_ms;
	rc = tu_start_again(job, r, inc, again, barrier, NULL, ms);
	return rc == -FT_EENDED || rc == 0 ? rc : -FT_EIO;
}

/* Whether dir holds exactly one entry, name. */
static bool dir_is_only(const char *dir, const char *name)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int others = 0, found = 0;

	if (d == NULL)
		return false;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (strcmp(e->d_name, name) == 0)
			found++;
		else
			others++;
	}
	closedir(d);
	return found == 1 && others == 0;
}

/*
 * A clean end after a shrink leaves nothing of the job in the rendezvous
 * (the departure markers once stayed, and with them the job directory) but
 * its end marker: the lost rank, started again as a new incarnation once
 * the job is over, fails ft_init at once with FT_EENDED (it once waited out
 * its connect timeout). A new run with the same job id starts as ever,
 * removes the marker, and its clean end (nobody lost) leaves nothing.
 */
Test(hygiene, shrunk_job_leaves_only_its_end, .timeout = 120)
{
	struct tu_job job;
	int killed[4] = {0, 0, 1, 0};
	char jobdir[400], path[600];
	struct stat st;
	int64_t ms;

	tu_job_init(&job, 4);
	for (int r = 0; r < 4; r++)
		tu_spawn(&job, r, run_until_shrunk, job.dir, shrink_only);
	for (int r = 0; r < 4; r++) {
		snprintf(path, sizeof(path), "%s/running-%d", job.dir, r);
		cr_assert(tu_wait_file(path, tu_now_ms() + 30000), "rank %d never ran", r);
	}
	kill(job.pids[2], SIGKILL);
	cr_assert_eq(tu_wait(&job, 60000, killed), 0, "a survivor failed");
	snprintf(jobdir, sizeof(jobdir), "%s/%s", job.dir, job.job_id);
	cr_expect(dir_is_only(jobdir, "ended"), "the job's directory %s holds more than its end",
		  jobdir);
	cr_expect_eq(start_again(&job, 2, 1, 20000, &ms), -FT_EENDED,
		     "the lost rank, started again, did not learn that the job ended");
	cr_expect_lt(ms, 5000, "the lost rank took %lld ms to learn that the job ended",
		     (long long)ms);
	/* the marker replaced by garbage: ignored (with a warning), the new
	 * incarnation waits for its job until its connect timeout as before */
	snprintf(path, sizeof(path), "%s/ended", jobdir);
	write_text(path, "ftcc-ended zz\x01 trailing\n");
	cr_expect_neq(start_again(&job, 2, 1, 2000, &ms), -FT_EENDED,
		      "a malformed end marker was believed");
	cr_expect_geq(ms, 1500, "the new incarnation gave up before its connect timeout");
	/* a new run with the same id: every rank of incarnation 0 */
	struct tu_job again = job;
	again.nspawned = 0;
	for (int r = 0; r < 4; r++)
		tu_spawn(&again, r, run_few, NULL, shrink_only);
	cr_assert_eq(tu_wait(&again, 60000, NULL), 0, "a new run with the same job id failed");
	cr_expect_neq(stat(jobdir, &st), 0, "the new run's clean end left %s", jobdir);
	tu_job_cleanup(&job);
}

/*
 * The end marker is in a shared directory: anyone who can write there can
 * forge it. A well-formed one written while the job lives fails no one: a
 * new incarnation takes its word only when no rank of the job lives (this
 * one, under shrink, is told that the job went on without it), and the
 * job's ranks finish. (A malformed one: shrunk_job_leaves_only_its_end.)
 * The incarnation sent away leaves no departure record (it never
 * finalized), so the job's end keeps the real marker, and a third
 * incarnation started then gets -FT_EENDED at once (it once waited its
 * connect timeout: the sent-away one had marked rank 2 departed).
 */
Test(hygiene, forged_end_marker_fails_no_one, .timeout = 120)
{
	struct tu_job job;
	int killed[4] = {0, 0, 1, 0};
	char jobdir[400], path[600];
	int64_t ms;

	tu_job_init(&job, 4);
	snprintf(jobdir, sizeof(jobdir), "%s/%s", job.dir, job.job_id);
	for (int r = 0; r < 4; r++)
		tu_spawn(&job, r, run_until_stop, job.dir, shrink_only);
	cr_assert_eq(tu_wait_ready(&job, 30000), 0, "ranks not ready");
	kill(job.pids[2], SIGKILL);
	snprintf(path, sizeof(path), "%s/ended", jobdir);
	write_text(path, "ftcc-ended 1234abcd\n");
	cr_expect_neq(start_again(&job, 2, 1, 3000, &ms), -FT_EENDED,
		      "a forged end marker ended a new incarnation while its job lived");
	snprintf(path, sizeof(path), "%s/stop", job.dir);
	write_text(path, "");
	cr_assert_eq(tu_wait(&job, 60000, killed), 0, "a healthy rank was lost");
	/* the job ended without rank 2 (its second incarnation was sent away):
	 * a third one learns so at once, from the real marker */
	cr_expect(dir_is_only(jobdir, "ended"), "the ended job's directory holds more (or nothing)");
	cr_expect_eq(start_again(&job, 2, 2, 20000, &ms), -FT_EENDED,
		     "a rank started after its job ended (after an incarnation sent away)");
	cr_expect_lt(ms, 5000, "-FT_EENDED took %lld ms", (long long)ms);
	tu_job_cleanup(&job);
}

/* Whether dir holds anything but . and .. (false when it is gone). */
static bool dir_has_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	bool any = false;

	if (d == NULL)
		return false;
	while (!any && (e = readdir(d)) != NULL)
		any = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	closedir(d);
	return any;
}

/* A rejoin job killed at ftcc-run's --timeout never finalizes; its
 * pairwise logs once stayed (in /dev/shm by default) for good. */
Test(hygiene, timed_out_rejoin_job_leaves_no_logs, .timeout = 120)
{
	const char *b = getenv("FTCC_BUILD_DIR") ? getenv("FTCC_BUILD_DIR") : "build";
	char logs[] = "/tmp/ftcc-hygiene-logs-XXXXXX", cmd[1200];
	int st;

	cr_assert_not_null(mkdtemp(logs));
	snprintf(cmd, sizeof(cmd),
		 "env -u FTCC_JOB_ID -u FTCC_RENDEZVOUS FTCC_POLICY=rejoin FTCC_LOG_DIR=%s "
		 "%s/ftcc-run -n 3 --timeout 3 %s/examples/train_rejoin 1000000 1000 5 "
		 ">/dev/null 2>&1", logs, b, b);
	st = system(cmd);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) != 0, "the job was to be cut by its timeout");
	cr_expect(!dir_has_entries(logs), "the job's logs stayed in %s", logs);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", logs);
	cr_expect_eq(system(cmd), 0);
}

static void short_connect(struct ft_config *cfg, int rank)
{
	(void)rank;
	cfg->connect_timeout_ms = 4000;
	cfg->rejoin_timeout_ms = 1000;
	cfg->policy = FT_POLICY_REJOIN;
}

static int size_is_world(struct ft_comm *comm, int rank, int n, void *arg)
{
	(void)rank;
	(void)arg;
	fprintf(stderr, "ran with %d of %d ranks\n", ft_size(comm), n);
	return ft_size(comm) == n ? 0 : 3;
}

/*
 * The review's world of one: the job's ranks were restarted; rank 1's new
 * incarnation found the first view's records of the others' dead
 * incarnations, counted them out, settled a first view of its own and ran
 * the whole job alone, while the others' new incarnations lived (looking
 * for the job in a later generation). Here the others' records name a dead
 * process and their locks are held (by this test, as their new
 * incarnations would): rank 1 must not settle without them (ft_init times
 * out), never run alone.
 */
Test(hygiene, no_world_of_one, .timeout = 60)
{
	struct tu_job job;
	int skip[3] = {1, 0, 1}, locks[3] = {-1, -1, -1};
	char dir[400], path[500], host[256];
	pid_t dead = fork();

	if (dead == 0)
		_exit(0);
	cr_assert_gt(dead, 0);
	waitpid(dead, NULL, 0);
	cr_assert_eq(gethostname(host, sizeof(host)), 0);
	tu_job_init(&job, 3);
	if (job.peers[0] != '\0')
		cr_skip_test("SKIPPED: the file rendezvous is this test's subject (not in-band)");
	snprintf(dir, sizeof(dir), "%s/%s", job.dir, job.job_id);
	cr_assert_eq(mkdir(dir, 0700), 0);
	snprintf(path, sizeof(path), "%s/gen-0", dir);
	cr_assert_eq(mkdir(path, 0700), 0);
	for (int r = 0; r < 3; r += 2) {
		FILE *f;
		snprintf(path, sizeof(path), "%s/gen-0/member-%d", dir, r);
		cr_assert_not_null(f = fopen(path, "w"));
		fprintf(f, "127.0.0.1:%d %d %s 127.0.0.1:%d 0\n", 1000 + r, (int)dead, host, 2000 + r);
		fclose(f);
		snprintf(path, sizeof(path), "%s/lock-%d", dir, r);
		locks[r] = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		cr_assert_geq(locks[r], 0);
		cr_assert_eq(flock(locks[r], LOCK_EX | LOCK_NB), 0);
	}
	tu_spawn(&job, 1, size_is_world, NULL, short_connect);
	job.pids[0] = job.pids[2] = 0;
	tu_wait(&job, 30000, skip);
	cr_expect(WIFEXITED(job.status[1]) && WEXITSTATUS(job.status[1]) == 100,
		  "rank 1 alone: exit status %d, want ft_init to fail (100)",
		  WIFEXITED(job.status[1]) ? WEXITSTATUS(job.status[1]) : -1);
	for (int r = 0; r < 3; r += 2)
		close(locks[r]);
	tu_job_cleanup(&job);
}

static int size_is_four(struct ft_comm *comm, int rank, int n, void *arg)
{
	int64_t v = 1;

	(void)rank;
	(void)n;
	(void)arg;
	if (ft_allreduce(comm, FT_IN_PLACE, &v, 1, FT_INT64, FT_SUM, NULL) != 0)
		return 2;
	return ft_size(comm) == 4 && v == 4 ? 0 : 3;
}

static void shrink_long_connect(struct ft_config *cfg, int rank)
{
	(void)rank;
	cfg->policy = FT_POLICY_SHRINK;
	cfg->connect_timeout_ms = 20000;
}

/*
 * A rank killed inside ft_init after it took its lock but before it
 * published (an early kill from outside, libfabric's start being slow)
 * once made every other rank wait the connect timeout and fail: the job
 * died. Its lock file, held by no one, says it is gone: the others start
 * without it at once. (Here rank 4's lock file is made by the test and
 * never held.)
 */
Test(hygiene, rank_dead_inside_init_is_not_awaited, .timeout = 60)
{
	struct tu_job job;
	int skip[5] = {0, 0, 0, 0, 1};
	char path[500];
	long t0;

	tu_job_init(&job, 5);
	if (job.peers[0] != '\0')
		cr_skip_test("SKIPPED: the file rendezvous is this test's subject (not in-band)");
	snprintf(path, sizeof(path), "%s/%s", job.dir, job.job_id);
	cr_assert_eq(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/%s/lock-4", job.dir, job.job_id);
	close(open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
	t0 = tu_now_ms();
	for (int r = 0; r < 4; r++)
		tu_spawn(&job, r, size_is_four, NULL, shrink_long_connect);
	cr_expect_eq(tu_wait(&job, 40000, skip), 0, "a rank failed or waited for the dead one");
	cr_expect_lt(tu_now_ms() - t0, 10000, "the job waited %ld ms for a rank known dead",
		     tu_now_ms() - t0);
	tu_job_cleanup(&job);
}

/*
 * A rank killed before it could take its lock (right at its start): the
 * file rendezvous has nothing of it, and the others once waited for it
 * until their connect timeout. ftcc-run saw it die and says so (gone-<r>):
 * they start without it at once.
 */
/* Rank 2 of a 4-rank shrink job under ftcc-run ends at its start by
 * `death` (a shell command); the 3 others must finish without it, soon. */
static void rank_ends_at_start(const char *death)
{
	const char *b = getenv("FTCC_BUILD_DIR") ? getenv("FTCC_BUILD_DIR") : "build";
	char cmd[1200], out[256] = "";
	long t0 = tu_now_ms();
	FILE *p;
	int models = 0;

	snprintf(cmd, sizeof(cmd),
		 "env -u FTCC_JOB_ID -u FTCC_RENDEZVOUS FTCC_POLICY=shrink "
		 "FTCC_CONNECT_TIMEOUT_MS=20000 %s/ftcc-run -n 4 --ignore-killed sh -c "
		 "'[ \"$FTCC_RANK\" = 2 ] && %s; exec %s/examples/train_steps 20 100 1' "
		 "2>&1", b, death, b);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	while (fgets(out, sizeof(out), p) != NULL)
		models += strstr(out, "] model ") != NULL;
	pclose(p);
	cr_expect_eq(models, 3, "%d of the 3 ranks that lived finished", models);
	cr_expect_lt(tu_now_ms() - t0, 10000, "the job waited %ld ms for a rank seen dead",
		     tu_now_ms() - t0);
}

Test(hygiene, rank_dead_at_start_under_ftcc_run, .timeout = 90)
{
	rank_ends_at_start("kill -9 $$");
}

/*
 * The same for a rank that fails at its start (its ft_init out of
 * descriptors or memory, before it took its lock): ftcc-run once marked
 * only ranks killed by a signal, and the others waited for this one until
 * their connect timeout, then all failed (the nemesis campaign's fds).
 */
Test(hygiene, rank_failed_at_start_under_ftcc_run, .timeout = 90)
{
	rank_ends_at_start("exit 3");
}

/*
 * A rank that runs out of descriptors in its ft_init, at each point the
 * limit reaches (the detector, the rendezvous, the control and data
 * links): it says so (FT_EMFILE), never "out of memory", an I/O error or
 * an exclusion, and the others go on without it at once. Each limit once
 * failed another way: "out of memory" (an eventfd), "input/output error"
 * (a member file), "not a member of the current view" (its detector
 * could not accept, the others declared it), or both ranks waiting out
 * the connect timeout (its data listener could not accept, and poll
 * spun on it).
 */
Test(hygiene, rank_out_of_descriptors_says_so, .timeout = 240)
{
	const char *b = getenv("FTCC_BUILD_DIR") ? getenv("FTCC_BUILD_DIR") : "build";
	static const int limits[] = {6, 8, 10, 11, 12, 13, 14, 15};

	for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
		char cmd[1200], out[512] = "", bad[512] = "", said_all[4096] = "";
		long t0 = tu_now_ms();
		int models = 0, said = 0, other = 0;
		FILE *p;

		snprintf(cmd, sizeof(cmd),
			 "env -u FTCC_JOB_ID -u FTCC_RENDEZVOUS FTCC_POLICY=shrink "
			 "FTCC_CONNECT_TIMEOUT_MS=20000 %s/ftcc-run -n 3 sh -c "
			 "'[ \"$FTCC_RANK\" = 2 ] && ulimit -n %d; "
			 "exec %s/examples/train_steps 20 100 1' 2>&1", b, limits[i], b);
		p = popen(cmd, "r");
		cr_assert_not_null(p);
		while (fgets(out, sizeof(out), p) != NULL) {
			if (strstr(out, " digest ") == NULL &&
			    strlen(said_all) + strlen(out) < sizeof(said_all))
				strcat(said_all, out);
			models += strncmp(out, "[0] model ", 10) == 0 ||
				  strncmp(out, "[1] model ", 10) == 0;
			said += strncmp(out, "[2] model ", 10) == 0 ||
				strstr(out, "[2] ft_init: out of file descriptors") != NULL;
			if (strncmp(out, "[2] ft_init: ", 13) == 0 &&
			    strstr(out, "out of file descriptors") == NULL) {
				other++;
				snprintf(bad, sizeof(bad), "%s", out);
			}
		}
		pclose(p);
		cr_expect_eq(models, 2, "limit %d: %d of the 2 ranks with descriptors finished:\n%s",
			     limits[i], models, said_all);
		cr_expect_eq(said, 1, "limit %d: the short rank neither finished nor said why",
			     limits[i]);
		cr_expect_eq(other, 0, "limit %d: the short rank said another error: %s", limits[i],
			     bad);
		cr_expect_lt(tu_now_ms() - t0, 10000, "limit %d: the job took %ld ms", limits[i],
			     tu_now_ms() - t0);
	}
}
