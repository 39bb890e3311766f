/* test_fork.c: ranks that fork a child after ft_init (data loaders): killed, found, shrunk and rejoined as if they had not. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include <limits.h>
#include <sys/file.h>

#include "testutil.h"

/*
 * Each job runs test/fork_rank under ftcc-run: every rank forks a child
 * that sleeps 30 s right after ft_init, then checks exact allreduces. The
 * test SIGKILLs one rank's own process from outside (not its group: its
 * child lives on, as a loader worker whose parent crashed does). A child
 * that kept the rank's sockets would hide the death (no FIN while it
 * lives), and one that kept the lock-<r> descriptor would keep the rank's
 * flock and refuse its restart (-FT_EBUSY).
 */

struct job {
	char dir[256];
	char out[300];
	pid_t run;
	int n;
};

static const char *build_dir(void)
{
	const char *b = getenv("FTCC_BUILD_DIR");
	return b != NULL && *b != '\0' ? b : "build";
}

/* Starts ftcc-run -n n [run_args] fork_rank rank_args... DIR, output into DIR/out. */
static void job_start(struct job *j, int n, const char *const *env, const char *const *run_args,
		      const char *const *rank_args)
{
	char launcher[PATH_MAX], rank[PATH_MAX], np[16];
	const char *argv[32];
	int k = 0;

	memset(j, 0, sizeof(*j));
	j->n = n;
	snprintf(j->dir, sizeof(j->dir), "%s/ftcc-fork-XXXXXX",
		 getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
	cr_assert_not_null(mkdtemp(j->dir));
	snprintf(j->out, sizeof(j->out), "%s/out", j->dir);
	snprintf(launcher, sizeof(launcher), "%s/ftcc-run", build_dir());
	snprintf(rank, sizeof(rank), "%s/test/fork_rank", build_dir());
	snprintf(np, sizeof(np), "%d", n);
	argv[k++] = launcher;
	argv[k++] = "-n";
	argv[k++] = np;
	argv[k++] = "--tag";
	argv[k++] = "--timeout";
	argv[k++] = "150";
	for (int i = 0; run_args[i] != NULL; i++)
		argv[k++] = run_args[i];
	argv[k++] = rank;
	for (int i = 0; rank_args[i] != NULL; i++)
		argv[k++] = rank_args[i];
	argv[k++] = j->dir;
	argv[k] = NULL;
	j->run = fork();
	cr_assert_geq(j->run, 0);
	if (j->run == 0) {
		int fd = open(j->out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (int i = 0; env[i] != NULL; i++)
			putenv((char *)env[i]);
		execv(launcher, (char **)argv);
		_exit(127);
	}
}

static long read_number(const char *path)
{
	long v = -1;
	FILE *f = fopen(path, "re");

	if (f == NULL)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

static long read_long(const char *dir, const char *name, int rank, int inc)
{
	char path[400];

	snprintf(path, sizeof(path), "%s/%s-%d.%d", dir, name, rank, inc);
	return read_number(path);
}

static bool wait_mark(const struct job *j, const char *name, int rank, int inc, long deadline_ms)
{
	char path[400];

	snprintf(path, sizeof(path), "%s/%s-%d.%d", j->dir, name, rank, inc);
	return tu_wait_file(path, tu_now_ms() + deadline_ms);
}

/* The launcher's exit status, or -1 if it outlived the deadline (then killed). */
static int job_wait(struct job *j, long deadline_ms)
{
	long end = tu_now_ms() + deadline_ms;
	int st;

	while (waitpid(j->run, &st, WNOHANG) == 0) {
		if (tu_now_ms() >= end) {
			kill(j->run, SIGKILL);
			waitpid(j->run, &st, 0);
			return -1;
		}
		tu_sleep_ms(10);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The launcher's whole output (ranks' lines prefixed "[R.I +S] "); the caller frees it. */
static char *job_output(const struct job *j)
{
	FILE *f = fopen(j->out, "re");
	char *text = calloc(1, 1 << 20);
	size_t n;

	cr_assert(f != NULL && text != NULL);
	n = fread(text, 1, (1 << 20) - 1, f);
	text[n] = '\0';
	fclose(f);
	return text;
}

/* Kills every loader child the ranks recorded, and removes the directory. */
static void job_cleanup(struct job *j)
{
	char cmd[400];

	for (int r = 0; r < j->n; r++)
		for (int inc = 0; inc < 4; inc++) {
			long c = read_long(j->dir, "child", r, inc);
			if (c > 0)
				kill((pid_t)c, SIGKILL);
		}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", j->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", j->dir);
}

/* Waits until every rank ran its first op, then SIGKILLs rank victim's own process;
 * returns its child's pid, alive at the kill. */
static pid_t kill_parent(struct job *j, int victim)
{
	for (int r = 0; r < j->n; r++)
		cr_assert(wait_mark(j, "running", r, 0, 60000), "rank %d never ran its first op",
			  r);
	pid_t pid = (pid_t)read_long(j->dir, "pid", victim, 0);
	pid_t child = (pid_t)read_long(j->dir, "child", victim, 0);
	cr_assert(pid > 0 && child > 0, "rank %d recorded no pids", victim);
	cr_assert_eq(kill(child, 0), 0, "rank %d's child is not alive before the kill", victim);
	cr_assert_eq(kill(pid, SIGKILL), 0);
	return child;
}

/*
 * Shrink: the survivors must find the death when its links close, not by
 * heartbeat silence, which is set to 20 s here: the job (20 ops once
 * shrunk, 5 ms apart) must end within 6 s of the kill, with the child
 * still alive, and both survivors finish exactly at size 2.
 */
Test(fork, shrink_finds_a_killed_parent_of_a_live_child, .timeout = 180)
{
	const char *env[] = {"FTCC_POLICY=shrink", "FTCC_DETECT_TIMEOUT_MS=20000",
			     "FTCC_HEARTBEAT_MS=100", "FTCC_LOG_LEVEL=1", NULL};
	const char *run_args[] = {NULL};
	const char *rank_args[] = {"shrink", "100000", "1000", "5", NULL};
	struct job j;
	char want[64];

	job_start(&j, 3, env, run_args, rank_args);
	pid_t child = kill_parent(&j, 1);
	long t0 = tu_now_ms();
	int st = job_wait(&j, 90000);
	long took = tu_now_ms() - t0;
	bool child_alive = kill(child, 0) == 0;
	char *out = job_output(&j);
	fprintf(stderr, "fork.shrink: the survivors ended %ld ms after the kill\n", took);
	job_cleanup(&j);
	cr_assert_neq(st, -1, "the job hung:\n%s", out);
	cr_assert(child_alive, "the killed rank's child died with it: the test proves nothing");
	cr_assert_null(strstr(out, "FAIL"), "a survivor failed:\n%s", out);
	for (int r = 0; r < 3; r += 2) {
		snprintf(want, sizeof(want), "done rank %d size 2 ", r);
		cr_assert_not_null(strstr(out, want), "rank %d did not finish at size 2:\n%s", r,
				   out);
	}
	cr_assert_lt(took, 6000,
		     "the survivors ended %ld ms after the kill: the death was found by 20 s of "
		     "heartbeat silence, not by its closed links (the child kept them open)", took);
	free(out);
}

/*
 * Rejoin: the killed rank's restart must take its rank back (its child
 * holds no copy of the lock-<r> flock) and rejoin; every op of every rank
 * exact at 3 contributors, and the launcher's status 0.
 */
Test(fork, rejoin_restarts_a_killed_parent_of_a_live_child, .timeout = 240)
{
	const char *env[] = {"FTCC_POLICY=rejoin", "FTCC_REJOIN_TIMEOUT_MS=15000",
			     "FTCC_LOG_LEVEL=1", NULL};
	const char *run_args[] = {"--restart", "--max-restarts", "1", NULL};
	const char *rank_args[] = {"fixed", "300", "1000", "10", NULL};
	struct job j;
	char want[64];

	job_start(&j, 3, env, run_args, rank_args);
	pid_t child = kill_parent(&j, 1);
	/* (the child sleeps 30 s: the restart must come well before) */
	bool back = wait_mark(&j, "running", 1, 1, 25000);
	bool child_alive = kill(child, 0) == 0;
	int st = job_wait(&j, 120000);
	char *out = job_output(&j);
	job_cleanup(&j);
	cr_assert_null(strstr(out, "already held by a live process"),
		       "the restart found rank 1 held (the child kept the flock):\n%s", out);
	cr_assert(back, "the restarted rank 1 never ran an op:\n%s", out);
	cr_assert(child_alive, "the killed rank's child died before its restart: the test proves "
		  "nothing");
	cr_assert_eq(st, 0, "ftcc-run exited %d:\n%s", st, out);
	cr_assert_not_null(strstr(out, "rank 1 rejoined"), "rank 1 did not rejoin:\n%s", out);
	cr_assert_null(strstr(out, "FAIL"), "a rank failed:\n%s", out);
	cr_assert_null(strstr(out, "contributors 2"), "an op went on without rank 1:\n%s", out);
	for (int r = 0; r < 3; r++) {
		snprintf(want, sizeof(want), "done rank %d size 3 ops 301", r);
		cr_assert_not_null(strstr(out, want), "rank %d did not finish exactly:\n%s", r,
				   out);
	}
	free(out);
}

/* A rank that forks a child, records its pid in <dir>/child-<rank> and waits to be killed. */
static int fork_and_wait(struct ft_comm *comm, int rank, int n, void *arg)
{
	const char *dir = arg;
	char path[400], text[400];
	pid_t child = fork();

	(void)comm, (void)n;
	if (child == 0) {
		tu_sleep_ms(30000);
		_exit(0);
	}
	snprintf(path, sizeof(path), "%s/.child-%d", dir, rank);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int len = snprintf(text, sizeof(text), "%d\n", (int)child);
	if (fd < 0 || write(fd, text, (size_t)len) != len)
		return 1;
	close(fd);
	snprintf(text, sizeof(text), "%s/child-%d", dir, rank);
	if (rename(path, text) != 0) /* whole or not at all */
		return 1;
	tu_sleep_ms(60000);
	return 0;
}

/*
 * flock locks belong to the open file description, which the child's copy
 * of the descriptor shares: closing that copy in the child must leave the
 * rank's lock held while the rank lives, and the rank's death must free it
 * although its child lives on. The survivor probes a dead rank's lock too
 * (member_file.c, lock_held: a shared lock held for a moment), and the
 * test's own probe once found it taken (a fresh-clone make test): free
 * within 2 s is the check (a child's copy would hold it for its 30 s).
 */
Test(fork, rank_lock_held_by_the_parent_alone, .timeout = 120)
{
	struct tu_job job;
	char path[600];
	int expect[64] = {1, 1}, fd;
	pid_t children[2];

	/* two ranks: a job of one has no rendezvous lock */
	tu_job_init(&job, 2);
	for (int r = 0; r < 2; r++)
		tu_spawn(&job, r, fork_and_wait, job.dir, NULL);
	cr_assert_eq(tu_wait_ready(&job, 30000), 0);
	for (int r = 0; r < 2; r++) {
		snprintf(path, sizeof(path), "%s/child-%d", job.dir, r);
		cr_assert(tu_wait_file(path, tu_now_ms() + 30000));
		children[r] = (pid_t)read_number(path);
	}
	pid_t child = children[0];
	snprintf(path, sizeof(path), "%s/%s/lock-0", job.dir, job.job_id);
	fd = open(path, O_RDWR | O_CLOEXEC);
	cr_assert_geq(fd, 0, "no lock file %s", path);
	bool taken_while_alive = flock(fd, LOCK_EX | LOCK_NB) == 0;
	kill(job.pids[0], SIGKILL);
	long end = tu_now_ms() + 10000;
	while (waitpid(job.pids[0], &job.status[0], WNOHANG) != job.pids[0] && tu_now_ms() < end)
		tu_sleep_ms(5);
	job.pids[0] = 0;
	bool child_alive = child > 0 && kill(child, 0) == 0;
	bool taken_after = false;
	for (end = tu_now_ms() + 2000; !taken_after && tu_now_ms() < end; tu_sleep_ms(5))
		taken_after = flock(fd, LOCK_EX | LOCK_NB) == 0;
	close(fd);
	kill(job.pids[1], SIGKILL);
	tu_wait(&job, 30000, expect);
	for (int r = 0; r < 2; r++)
		if (children[r] > 0)
			kill(children[r], SIGKILL);
	tu_job_cleanup(&job);
	cr_assert_not(taken_while_alive, "the rank's lock was free while the rank lived");
	cr_assert(child_alive, "the child died with the rank: the test proves nothing");
	cr_assert(taken_after, "the rank is dead but its lock is held (by its child's copy)");
}
