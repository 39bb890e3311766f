/* test_launcher.c: ftcc-run from outside: environment, prefixes, exit status, kill, restart, timeout. */
/* SPDX-License-Identifier: MIT */

/*
 * Each test spawns the built launcher ($FTCC_BUILD_DIR/ftcc-run, default
 * build/ftcc-run) with its stdout and stderr on pipes and reads both under a
 * CLOCK_MONOTONIC deadline. Where a test must act at a point in the run
 * (send ^C once the ranks are up) it waits for the line that says so; no
 * test sleeps to synchronise.
 */

#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEADLINE_S 15.0

struct run {
	pid_t pid;
	int fd[2];          /* [0] launcher's stdout, [1] its stderr; -1 at EOF */
	char *text[2];
	size_t len[2], cap[2];
	int status;         /* exit code, 128+signal, or -1 while running */
	double elapsed;
	double start;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *launcher_path(void)
{
	static char path[PATH_MAX];
	const char *dir = getenv("FTCC_BUILD_DIR");

	if (!dir || !*dir)
		dir = "build";
	snprintf(path, sizeof(path), "%s/ftcc-run", dir);
	return path;
}

/* The caller's FTCC_* variables would change what the launcher does: start from none. */
static char **make_env(const char *const *extra)
{
	size_t n = 0, k = 0;

	while (environ[n])
		n++;
	for (const char *const *e = extra; e && *e; e++)
		k++;
	char **env = calloc(n + k + 1, sizeof(*env));
	cr_assert_not_null(env);
	size_t j = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "FTCC_", 5) != 0)
			env[j++] = environ[i];
	for (size_t i = 0; i < k; i++)
		env[j++] = (char *)extra[i];
	env[j] = NULL;
	return env;
}

static void run_start(struct run *r, const char *const *extra_env, const char *const *args)
{
	const char *path = launcher_path();
	posix_spawn_file_actions_t fa;
	int outp[2], errp[2];
	size_t nargs = 0;

	cr_assert(access(path, X_OK) == 0, "%s not found: build it with `make %s`", path, path);
	memset(r, 0, sizeof(*r));
	r->status = -1;
	while (args[nargs])
		nargs++;
	char **argv = calloc(nargs + 2, sizeof(*argv));
	cr_assert_not_null(argv);
	argv[0] = (char *)path;
	for (size_t i = 0; i < nargs; i++)
		argv[i + 1] = (char *)args[i];
	char **env = make_env(extra_env);

	cr_assert_eq(pipe2(outp, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(errp, O_CLOEXEC), 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
	posix_spawn_file_actions_adddup2(&fa, errp[1], 2);
	r->start = now_s();
	int err = posix_spawn(&r->pid, path, &fa, NULL, argv, env);
	posix_spawn_file_actions_destroy(&fa);
	free(argv);
	free(env);
	cr_assert_eq(err, 0, "posix_spawn %s: %s", path, strerror(err));
	close(outp[1]);
	close(errp[1]);
	r->fd[0] = outp[0];
	r->fd[1] = errp[0];
	for (int i = 0; i < 2; i++) {
		r->cap[i] = 4096;
		r->text[i] = calloc(1, r->cap[i]);
		cr_assert_not_null(r->text[i]);
	}
}

/* Read whatever arrives before `deadline`; false once it has passed or both pipes are closed. */
static bool run_pump(struct run *r, double deadline)
{
	struct pollfd pfd[2];

	for (int i = 0; i < 2; i++)
		pfd[i] = (struct pollfd){ .fd = r->fd[i], .events = POLLIN };
	if (r->fd[0] < 0 && r->fd[1] < 0)
		return false;
	double left = deadline - now_s();
	if (left <= 0)
		return false;
	int n = poll(pfd, 2, (int)(left * 1000) + 1);
	if (n < 0 && errno == EINTR)
		return true;
	cr_assert_geq(n, 0, "poll: %s", strerror(errno));
	for (int i = 0; i < 2; i++) {
		if (r->fd[i] < 0 || !pfd[i].revents)
			continue;
		if (r->cap[i] - r->len[i] < 4097) {
			r->cap[i] *= 2;
			r->text[i] = realloc(r->text[i], r->cap[i]);
			cr_assert_not_null(r->text[i]);
		}
		ssize_t got = read(r->fd[i], r->text[i] + r->len[i], r->cap[i] - r->len[i] - 1);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			close(r->fd[i]);
			r->fd[i] = -1;
			continue;
		}
		r->len[i] += (size_t)got;
		r->text[i][r->len[i]] = '\0';
	}
	return true;
}

/* Wait until stream `which` (0 stdout, 1 stderr) has shown `count` copies of `needle`. */
static void run_wait_for(struct run *r, int which, const char *needle, int count)
{
	double deadline = r->start + DEADLINE_S;

	for (;;) {
		int seen = 0;
		for (const char *p = r->text[which]; (p = strstr(p, needle)); p += strlen(needle))
			seen++;
		if (seen >= count)
			return;
		if (!run_pump(r, deadline))
			break;
	}
	kill(r->pid, SIGKILL);
	cr_assert_fail("launcher never printed \"%s\" x%d on %s\nstdout:\n%s\nstderr:\n%s", needle,
		       count, which ? "stderr" : "stdout", r->text[0], r->text[1]);
}

static void run_finish(struct run *r)
{
	double deadline = r->start + DEADLINE_S;
	int wstatus;

	while (r->fd[0] >= 0 || r->fd[1] >= 0) {
		if (!run_pump(r, deadline)) {
			kill(r->pid, SIGKILL);
			waitpid(r->pid, &wstatus, 0);
			cr_assert_fail("launcher still running after %.0f s\nstdout:\n%s\nstderr:\n%s",
				       DEADLINE_S, r->text[0], r->text[1]);
		}
	}
	/* Its pipes close when it exits, so this wait is short. */
	while (waitpid(r->pid, &wstatus, 0) < 0)
		cr_assert_eq(errno, EINTR, "waitpid: %s", strerror(errno));
	r->elapsed = now_s() - r->start;
	r->status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
}

static void run(struct run *r, const char *const *extra_env, const char *const *args)
{
	run_start(r, extra_env, args);
	run_finish(r);
}

static void run_free(struct run *r)
{
	free(r->text[0]);
	free(r->text[1]);
}

static int count_str(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

static int count_lines(const char *s)
{
	return count_str(s, "\n");
}

/* Every line of s starts with "[digit"; the text ends with a newline. */
static void assert_prefixed(const char *s)
{
	const char *p = s;

	while (*p) {
		const char *nl = strchr(p, '\n');
		cr_assert_not_null(nl, "unterminated output line: '%s'", p);
		cr_assert(p[0] == '[' && p[1] >= '0' && p[1] <= '9', "line without prefix: '%.*s'",
			  (int)(nl - p), p);
		p = nl + 1;
	}
}

/* A test's private directory, removed by its .fini even when an assertion fails. */
static char scratch[64];

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return type == FTW_DP ? rmdir(path) : unlink(path);
}

static void scratch_make(const char *name)
{
	snprintf(scratch, sizeof(scratch), "/tmp/ftcc-test-%s-XXXXXX", name);
	cr_assert_not_null(mkdtemp(scratch), "mkdtemp: %s", strerror(errno));
}

static void scratch_remove(void)
{
	if (scratch[0])
		nftw(scratch, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	scratch[0] = '\0';
}

#define DUMP(r) "status %d\nstdout:\n%s\nstderr:\n%s", (r).status, (r).text[0], (r).text[1]

Test(launcher, env_and_prefixes, .timeout = 20)
{
	struct run r;
	char job[3][128], tok[3][128], rdv[3][256];
	int seen[3] = { 0 };

	run(&r, NULL,
	    (const char *const[]){ "-n", "3", "sh", "-c",
				   "echo $FTCC_RANK $FTCC_WORLD_SIZE $FTCC_JOB_ID $FTCC_TOKEN "
				   "$FTCC_INCARNATION $FTCC_RENDEZVOUS",
				   NULL });
	cr_assert_eq(r.status, 0, DUMP(r));
	cr_assert_eq(count_lines(r.text[0]), 3, DUMP(r));
	assert_prefixed(r.text[0]);
	const char *p = r.text[0];
	for (int i = 0; i < 3; i++) {
		int pre, rank, size, inc, used;
		int n = sscanf(p, "[%d] %d %d %127s %127s %d %255s%n", &pre, &rank, &size, job[i],
			       tok[i], &inc, rdv[i], &used);
		cr_assert_eq(n, 7, "bad line: %s", p);
		cr_assert(pre >= 0 && pre < 3 && pre == rank, "prefix %d for rank %d", pre, rank);
		seen[rank]++;
		cr_assert_eq(size, 3);
		cr_assert_eq(inc, 0);
		cr_assert_eq(strncmp(job[i], "run-", 4), 0, "job id %s", job[i]);
		cr_assert_eq(strlen(tok[i]), 32, "token %s", tok[i]);
		cr_assert_eq(strspn(tok[i], "0123456789abcdef"), 32, "token %s", tok[i]);
		cr_assert_str_eq(job[i], job[0]);
		cr_assert_str_eq(tok[i], tok[0]);
		cr_assert_str_eq(rdv[i], rdv[0]);
		p += used + 1;
	}
	cr_assert(seen[0] == 1 && seen[1] == 1 && seen[2] == 1);
	run_free(&r);
}

Test(launcher, job_ids_differ_between_runs, .timeout = 20)
{
	struct run a, b;
	const char *const args[] = { "-n", "1", "sh", "-c", "echo $FTCC_JOB_ID $FTCC_TOKEN", NULL };

	run(&a, NULL, args);
	run(&b, NULL, args);
	cr_assert_eq(a.status, 0, DUMP(a));
	cr_assert_eq(b.status, 0, DUMP(b));
	cr_assert_str_neq(a.text[0], b.text[0]);
	run_free(&a);
	run_free(&b);
}

Test(launcher, stderr_and_partial_lines, .timeout = 20)
{
	struct run r;

	run(&r, NULL,
	    (const char *const[]){ "-n", "2", "sh", "-c",
				   "echo out $FTCC_RANK; echo err $FTCC_RANK >&2; printf tail", NULL });
	cr_assert_eq(r.status, 0, DUMP(r));
	assert_prefixed(r.text[0]);
	assert_prefixed(r.text[1]);
	cr_assert(strstr(r.text[0], "[0] out 0\n") && strstr(r.text[0], "[1] out 1\n"), DUMP(r));
	cr_assert(strstr(r.text[0], "[0] tail\n") && strstr(r.text[0], "[1] tail\n"), DUMP(r));
	cr_assert(strstr(r.text[1], "[0] err 0\n") && strstr(r.text[1], "[1] err 1\n"), DUMP(r));
	cr_assert_null(strstr(r.text[0], "err"), DUMP(r));
	cr_assert_eq(count_lines(r.text[0]), 4, DUMP(r));
	run_free(&r);
}

Test(launcher, tag_adds_incarnation, .timeout = 20)
{
	struct run r;

	run(&r, NULL, (const char *const[]){ "-n", "1", "--tag", "echo", "hello", NULL });
	cr_assert_eq(r.status, 0, DUMP(r));
	cr_assert_eq(strncmp(r.text[0], "[0.0 +", 6), 0, DUMP(r));
	cr_assert(strstr(r.text[0], "s] hello\n"), DUMP(r));
	run_free(&r);
}

Test(launcher, worst_exit_code, .timeout = 20)
{
	struct run r;

	run(&r, NULL,
	    (const char *const[]){ "-n", "3", "sh", "-c", "[ $FTCC_RANK = 1 ] && exit 3; exit 0",
				   NULL });
	cr_assert_eq(r.status, 3, DUMP(r));
	cr_assert(strstr(r.text[1], "ftcc-run: rank 1 (pid "), DUMP(r));
	cr_assert(strstr(r.text[1], "exited with status 3 after"), DUMP(r));
	run_free(&r);

	run(&r, NULL, (const char *const[]){ "-n", "4", "sh", "-c", "exit $FTCC_RANK", NULL });
	cr_assert_eq(r.status, 3, DUMP(r));
	run_free(&r);
}

Test(launcher, signal_beats_exit_code, .timeout = 20)
{
	struct run r;

	run(&r, NULL,
	    (const char *const[]){ "-n", "2", "sh", "-c",
				   "[ $FTCC_RANK = 1 ] && kill -9 $$; exit 5", NULL });
	cr_assert_eq(r.status, 137, DUMP(r));
	cr_assert(strstr(r.text[1], "rank 1 (pid "), DUMP(r));
	cr_assert(strstr(r.text[1], "killed by signal 9 (SIGKILL) after"), DUMP(r));
	run_free(&r);
}

static const char survivor_script[] =
	"if [ $FTCC_RANK = 1 ]; then echo sleeping; sleep 30; echo woke; exit 0; fi; echo done";

Test(launcher, kill_counts_by_default, .timeout = 20)
{
	struct run r;

	run(&r, NULL,
	    (const char *const[]){ "-n", "3", "--kill", "1@0.3", "sh", "-c", survivor_script,
				   NULL });
	cr_assert_eq(r.status, 137, DUMP(r));
	cr_assert_lt(r.elapsed, 10.0, "took %.1f s", r.elapsed);
	cr_assert(strstr(r.text[1], "ftcc-run: killing rank 1 (pid "), DUMP(r));
	cr_assert(strstr(r.text[1], "killed by signal 9 (SIGKILL)"), DUMP(r));
	cr_assert(strstr(r.text[0], "[0] done\n") && strstr(r.text[0], "[2] done\n"), DUMP(r));
	cr_assert_null(strstr(r.text[0], "woke"), DUMP(r));
	run_free(&r);
}

Test(launcher, ignore_killed, .timeout = 20)
{
	struct run r;

	run(&r, NULL,
	    (const char *const[]){ "-n", "3", "--ignore-killed", "--kill", "1@0.3", "sh", "-c",
				   survivor_script, NULL });
	cr_assert_eq(r.status, 0, DUMP(r));
	cr_assert_lt(r.elapsed, 10.0, "took %.1f s", r.elapsed);
	cr_assert(strstr(r.text[1], "killing rank 1"), DUMP(r));
	run_free(&r);

	/* A survivor's own failure still counts. */
	run(&r, NULL,
	    (const char *const[]){ "-n", "3", "--ignore-killed", "--kill", "1@0.3", "sh", "-c",
				   "[ $FTCC_RANK = 1 ] && exec sleep 30; [ $FTCC_RANK = 2 ] && exit 4; "
				   "exit 0",
				   NULL });
	cr_assert_eq(r.status, 4, DUMP(r));
	run_free(&r);
}

Test(launcher, kill_with_other_signals, .timeout = 20)
{
	struct run r;

	/* STOP then CONT: the rank hangs for a while and then finishes normally. */
	run(&r, NULL,
	    (const char *const[]){ "-n", "2", "--kill", "1@0.1:STOP", "--kill", "1@0.4:CONT", "sh",
				   "-c", "echo start; sleep 1; echo end", NULL });
	cr_assert_eq(r.status, 0, DUMP(r));
	cr_assert(strstr(r.text[1], "sending SIGSTOP to rank 1"), DUMP(r));
	cr_assert(strstr(r.text[1], "sending SIGCONT to rank 1"), DUMP(r));
	cr_assert_eq(count_str(r.text[0], "end\n"), 2, DUMP(r));
	run_free(&r);

	/* A number works too, and a stopped rank is still ended by --timeout. */
	run(&r, NULL,
	    (const char *const[]){ "-n", "1", "--kill", "0@0.1:19", "--timeout", "1", "sleep", "30",
				   NULL });
	cr_assert_eq(r.status, 124, DUMP(r));
	run_free(&r);

	run(&r, NULL,
	    (const char *const[]){ "-n", "1", "--kill", "0@0.2:TERM", "sleep", "30", NULL });
	cr_assert_eq(r.status, 128 + SIGTERM, DUMP(r));
	run_free(&r);
}

Test(launcher, restart_after_self_kill, .timeout = 20)
{
	struct run r;

	run(&r, NULL,
	    (const char *const[]){
		    "-n", "3", "--restart", "sh", "-c",
		    "if [ $FTCC_RANK = 1 ] && [ $FTCC_INCARNATION = 0 ]; then kill -9 $$; fi; "
		    "echo rank $FTCC_RANK incarnation $FTCC_INCARNATION",
		    NULL });
	cr_assert_eq(r.status, 0, DUMP(r));
	cr_assert(strstr(r.text[0], "[1] rank 1 incarnation 1\n"), DUMP(r));
	cr_assert(strstr(r.text[0], "[0] rank 0 incarnation 0\n"), DUMP(r));
	cr_assert_null(strstr(r.text[0], "[1] rank 1 incarnation 0"), DUMP(r));
	cr_assert(strstr(r.text[1], "restarted rank 1 as pid"), DUMP(r));
	cr_assert_eq(count_str(r.text[1], "restarted"), 1, DUMP(r));
	run_free(&r);
}

Test(launcher, restart_after_external_kill, .timeout = 20)
{
	struct run r;

	run(&r, NULL,
	    (const char *const[]){
		    "-n", "2", "--restart", "--kill", "1@0.3", "sh", "-c",
		    "if [ $FTCC_RANK = 1 ] && [ $FTCC_INCARNATION = 0 ]; then exec sleep 30; fi; "
		    "echo incarnation $FTCC_INCARNATION",
		    NULL });
	cr_assert_eq(r.status, 0, DUMP(r));
	cr_assert(strstr(r.text[0], "[1] incarnation 1\n"), DUMP(r));
	cr_assert_lt(r.elapsed, 10.0, "took %.1f s", r.elapsed);
	run_free(&r);
}

Test(launcher, restart_limit, .timeout = 20)
{
	struct run r;

	run(&r, NULL,
	    (const char *const[]){ "-n", "1", "--max-restarts", "2", "sh", "-c",
				   "echo inc $FTCC_INCARNATION; kill -9 $$", NULL });
	cr_assert_eq(r.status, 137, DUMP(r));
	cr_assert(strstr(r.text[0], "[0] inc 2\n"), DUMP(r));
	cr_assert_null(strstr(r.text[0], "inc 3"), DUMP(r));
	cr_assert_eq(count_lines(r.text[0]), 3, DUMP(r));
	run_free(&r);

	/* Clean exits and plain failures without --restart are never restarted. */
	run(&r, NULL, (const char *const[]){ "-n", "2", "sh", "-c", "echo once; exit 1", NULL });
	cr_assert_eq(r.status, 1, DUMP(r));
	cr_assert_eq(count_lines(r.text[0]), 2, DUMP(r));
	run_free(&r);
	run(&r, NULL, (const char *const[]){ "-n", "2", "--restart", "echo", "once", NULL });
	cr_assert_eq(r.status, 0, DUMP(r));
	cr_assert_eq(count_lines(r.text[0]), 2, DUMP(r));
	run_free(&r);
}

Test(launcher, timeout, .timeout = 20)
{
	struct run r;

	run(&r, NULL, (const char *const[]){ "-n", "2", "--timeout", "1", "sleep", "30", NULL });
	cr_assert_eq(r.status, 124, DUMP(r));
	cr_assert_lt(r.elapsed, 8.0, "took %.1f s", r.elapsed);
	cr_assert_geq(r.elapsed, 0.9, "took %.2f s", r.elapsed);
	cr_assert(strstr(r.text[1], "timeout"), DUMP(r));
	run_free(&r);
}

Test(launcher, usage_errors, .timeout = 20)
{
	const char *const *const bad[] = {
		(const char *const[]){ "-n", "0", "true", NULL },
		(const char *const[]){ "-n", "1025", "true", NULL },
		(const char *const[]){ "-n", "x", "true", NULL },
		(const char *const[]){ "-n", "2", NULL },
		(const char *const[]){ "true", NULL },
		(const char *const[]){ NULL },
		(const char *const[]){ "-n", "2", "--kill", "2@1", "true", NULL },
		(const char *const[]){ "-n", "2", "--kill", "1", "true", NULL },
		(const char *const[]){ "-n", "2", "--kill", "1@", "true", NULL },
		(const char *const[]){ "-n", "2", "--kill", "1@x", "true", NULL },
		(const char *const[]){ "-n", "2", "--kill", "@1", "true", NULL },
		(const char *const[]){ "-n", "2", "--kill", "1@-1", "true", NULL },
		(const char *const[]){ "-n", "2", "--kill", "1@1:BOGUS", "true", NULL },
		(const char *const[]){ "-n", "2", "--timeout", "0", "true", NULL },
		(const char *const[]){ "-n", "2", "--timeout", NULL },
		(const char *const[]){ "-n", "2", "--no-such-option", "true", NULL },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct run r;

		run(&r, NULL, bad[i]);
		cr_assert_eq(r.status, 2, "case %zu: status %d\nstderr:\n%s", i, r.status, r.text[1]);
		cr_assert(strstr(r.text[1], "ftcc-run: "), "case %zu: stderr:\n%s", i, r.text[1]);
		cr_assert_eq(r.len[0], 0, "case %zu: stdout:\n%s", i, r.text[0]);
		run_free(&r);
	}
}

Test(launcher, help, .timeout = 20)
{
	struct run r;

	run(&r, NULL, (const char *const[]){ "--help", NULL });
	cr_assert_eq(r.status, 0, DUMP(r));
	cr_assert(strstr(r.text[0], "Usage: ftcc-run -n N"), DUMP(r));
	cr_assert(strstr(r.text[0], "--ignore-killed"), DUMP(r));
	run_free(&r);
}

/* --params: every variable ftcc reads, with its value here; the token only as set. */
Test(launcher, params, .timeout = 20)
{
	struct run r;

	run(&r, (const char *const[]){ "FTCC_POLICY=shrink", "FTCC_TOKEN=do-not-print-me", NULL },
	    (const char *const[]){ "--params", NULL });
	cr_assert_eq(r.status, 0, DUMP(r));
	cr_expect(strstr(r.text[0], "FTCC_POLICY              shrink"), DUMP(r));
	cr_expect(strstr(r.text[0], "FTCC_DETECT_TIMEOUT_MS   (unset)"), DUMP(r));
	cr_expect(strstr(r.text[0], "FTCC_TOKEN               (set)"), DUMP(r));
	cr_expect_null(strstr(r.text[0], "do-not-print-me"), DUMP(r));
	run_free(&r);
}

Test(launcher, missing_program, .timeout = 20)
{
	struct run r;

	run(&r, NULL,
	    (const char *const[]){ "-n", "3", "/nonexistent/ftcc-no-such-program", NULL });
	cr_assert_eq(r.status, 127, DUMP(r));
	cr_assert(strstr(r.text[1], "ftcc-run: cannot execute /nonexistent/ftcc-no-such-program: "
				    "No such file or directory"),
		  DUMP(r));
	run_free(&r);
}

Test(launcher, rendezvous_removed, .timeout = 20, .fini = scratch_remove)
{
	char tmpenv[80], dir[PATH_MAX];
	const char *tmp = scratch;
	struct stat st;
	struct run r;

	scratch_make("tmpdir");
	snprintf(tmpenv, sizeof(tmpenv), "TMPDIR=%s", tmp);
	run(&r, (const char *const[]){ tmpenv, NULL },
	    (const char *const[]){ "-n", "2", "sh", "-c",
				   "test -d \"$FTCC_RENDEZVOUS\" || exit 9; "
				   "mkdir -p \"$FTCC_RENDEZVOUS/r$FTCC_RANK\" && "
				   "echo x > \"$FTCC_RENDEZVOUS/r$FTCC_RANK/member\" && "
				   "echo $FTCC_RENDEZVOUS",
				   NULL });
	cr_assert_eq(r.status, 0, DUMP(r));
	cr_assert_eq(sscanf(r.text[0], "[%*d] %4095s", dir), 1, DUMP(r));
	cr_assert_eq(strncmp(dir, tmp, strlen(tmp)), 0, "%s is not under TMPDIR %s", dir, tmp);
	cr_assert_eq(stat(dir, &st), -1, "%s still exists", dir);
	cr_assert_eq(errno, ENOENT);
	/* Empty again: nothing else was left behind under TMPDIR. */
	cr_assert_eq(rmdir(tmp), 0, "rmdir %s: %s", tmp, strerror(errno));
	scratch[0] = '\0';
	run_free(&r);
}

/*
 * A killed rank's libfabric shm regions ("PID:UID:IDX" in /dev/shm) stay
 * while the job runs, since a survivor may still have to map one to take the
 * dead rank's last request to connect, and are gone once the job ends.
 */
Test(launcher, dead_ranks_shm_regions_removed_when_the_job_ends, .timeout = 20)
{
	char path[128];
	int pid = 0;
	struct run r;

	run(&r, NULL,
	    (const char *const[]){ "-n", "2", "sh", "-c",
				   "u=$(id -u); if [ $FTCC_RANK = 0 ]; then "
				   ": > /dev/shm/$$:$u:0; : > /dev/shm/$$:$u:1; "
				   "echo $$ > \"$FTCC_RENDEZVOUS/pid0\"; kill -9 $$; fi; "
				   "while [ ! -s \"$FTCC_RENDEZVOUS/pid0\" ]; do sleep 0.05; done; "
				   "sleep 0.5; p=$(cat \"$FTCC_RENDEZVOUS/pid0\"); "
				   "echo during: $(ls /dev/shm | grep -c \"^$p:$u:\")",
				   NULL });
	cr_assert_eq(r.status, 137, DUMP(r));
	cr_assert(strstr(r.text[0], "[1] during: 2\n"), DUMP(r));
	cr_assert_eq(sscanf(strstr(r.text[1], "rank 0 (pid ") ? strstr(r.text[1], "rank 0 (pid ")
							    : "",
			    "rank 0 (pid %d)", &pid), 1, DUMP(r));
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "/dev/shm/%d:%u:%d", pid, (unsigned)getuid(), i);
		cr_expect_neq(access(path, F_OK), 0, "%s was left behind", path);
		unlink(path);
	}
	run_free(&r);
}

Test(launcher, user_environment_respected, .timeout = 20, .fini = scratch_remove)
{
	const char *dir = scratch;
	char rdv[96];
	struct stat st;
	struct run r;

	scratch_make("rdv");
	snprintf(rdv, sizeof(rdv), "FTCC_RENDEZVOUS=%s", dir);
	run(&r, (const char *const[]){ rdv, "FTCC_JOB_ID=myjob", "FTCC_TOKEN=mytoken", NULL },
	    (const char *const[]){ "-n", "1", "sh", "-c",
				   "echo $FTCC_RENDEZVOUS $FTCC_JOB_ID $FTCC_TOKEN", NULL });
	cr_assert_eq(r.status, 0, DUMP(r));
	char want[128];
	snprintf(want, sizeof(want), "[0] %s myjob mytoken\n", dir);
	cr_assert_str_eq(r.text[0], want);
	cr_assert_eq(stat(dir, &st), 0, "the user's rendezvous %s was removed", dir);
	run_free(&r);
}

Test(launcher, sigint_forwarded, .timeout = 20)
{
	struct run r;

	run_start(&r, NULL,
		  (const char *const[]){ "-n", "2", "sh", "-c", "echo ready; exec sleep 30", NULL });
	run_wait_for(&r, 0, "ready\n", 2);
	kill(r.pid, SIGINT);
	run_finish(&r);
	cr_assert_eq(r.status, 128 + SIGINT, DUMP(r));
	cr_assert_lt(r.elapsed, 10.0, "took %.1f s", r.elapsed);
	run_free(&r);
}

Test(launcher, second_sigint_kills, .timeout = 20)
{
	struct run r;

	/* The ranks ignore SIGINT, so only the second ^C (SIGKILL) ends them. */
	run_start(&r, NULL,
		  (const char *const[]){ "-n", "2", "sh", "-c",
					 "trap '' INT; echo ready; exec sleep 30", NULL });
	run_wait_for(&r, 0, "ready\n", 2);
	kill(r.pid, SIGINT);
	run_wait_for(&r, 1, "forwarded to 2 ranks", 1);
	kill(r.pid, SIGINT);
	run_finish(&r);
	cr_assert_eq(r.status, 128 + SIGKILL, DUMP(r));
	cr_assert_lt(r.elapsed, 10.0, "took %.1f s", r.elapsed);
	run_free(&r);
}

Test(launcher, long_and_many_lines, .timeout = 20)
{
	struct run r;

	/* 4 ranks x 3000 lines: every line arrives once, whole and prefixed. */
	run(&r, NULL,
	    (const char *const[]){ "-n", "4", "sh", "-c",
				   "i=0; while [ $i -lt 3000 ]; do echo line-$FTCC_RANK-$i; "
				   "i=$((i+1)); done",
				   NULL });
	cr_assert_eq(r.status, 0, "status %d", r.status);
	cr_assert_eq(count_lines(r.text[0]), 12000, "lines %d", count_lines(r.text[0]));
	assert_prefixed(r.text[0]);
	cr_assert(strstr(r.text[0], "[3] line-3-2999\n"));
	cr_assert(strstr(r.text[0], "[0] line-0-0\n"));
	run_free(&r);
}
