/* testutil.c: run a function as N real rank processes under a deadline, for multi-process tests (testutil.h). */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include "testutil.h"

long tu_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

void tu_sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

void tu_config(const struct tu_job *job, int rank, struct ft_config *cfg)
{
	struct ft_config init = FT_CONFIG_INIT;
	const char *tp = getenv("FTCC_TEST_TRANSPORT");

	*cfg = init;
	cfg->rank = rank;
	cfg->world_size = job->n;
	snprintf(cfg->rendezvous, sizeof(cfg->rendezvous), "%s", job->dir);
	snprintf(cfg->job_id, sizeof(cfg->job_id), "%s", job->job_id);
	snprintf(cfg->token, sizeof(cfg->token), "test-token");
	if (tp != NULL)
		snprintf(cfg->transport, sizeof(cfg->transport), "%s", tp);
	if (job->peers[0] != '\0') {
		snprintf(cfg->membership, sizeof(cfg->membership), "inband");
		snprintf(cfg->bootstrap, sizeof(cfg->bootstrap), "peers");
		snprintf(cfg->peers, sizeof(cfg->peers), "%s", job->peers);
	}
	cfg->connect_timeout_ms = 20000;
	/* FTCC_TEST_LOG_LEVEL: a failing test's story (3: every info line) */
	cfg->log_level = getenv("FTCC_TEST_LOG_LEVEL") != NULL ? atoi(getenv("FTCC_TEST_LOG_LEVEL")) : 0;
}

void tu_job_init(struct tu_job *job, int n)
{
	static int seq;

	memset(job, 0, sizeof(*job));
	job->n = n;
	snprintf(job->dir, sizeof(job->dir), "%s/ftcc-test-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (mkdtemp(job->dir) == NULL) {
		perror("mkdtemp");
		exit(2);
	}
	snprintf(job->job_id, sizeof(job->job_id), "t%d-%d", (int)getpid(), seq++);
	for (int r = 0; r < 64; r++)
		job->port_fd[r] = -1;
	const char *mb = getenv("FTCC_TEST_MEMBERSHIP");
	if (mb == NULL || strcmp(mb, "inband") != 0)
		return;
	for (int r = 0; r < n && r < 64; r++) {
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		socklen_t al = sizeof(a);
		int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
		    bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
		    getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
			perror("tu_job_init: a membership port");
			exit(2);
		}
		job->port_fd[r] = fd;
		snprintf(job->peers + strlen(job->peers), sizeof(job->peers) - strlen(job->peers),
			 "%s127.0.0.1:%d", r ? "," : "", ntohs(a.sin_port));
	}
}

void tu_spawn(struct tu_job *job, int r, tu_rank_fn fn, void *arg,
	      void (*tweak)(struct ft_config *, int))
{
	pid_t parent = getpid();
	pid_t pid = fork();

	if (pid == 0) {
		struct ft_config cfg;
		/* a failed assertion ends the test process: take the ranks with it */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(99);
		struct ft_comm *comm = NULL;
		int rc;
		/* As ftcc-run does for its ranks: libfabric's shm copies through its
		 * own buffers (SAR), not CMA, unless the caller chose (README). */
		setenv("FI_SHM_DISABLE_CMA", "1", 0);
		tu_config(job, r, &cfg);
		if (tweak != NULL)
			tweak(&cfg, r);
		rc = ft_init(&cfg, &comm);
		if (rc != 0) {
			fprintf(stderr, "rank %d: ft_init: %s\n", r, ft_strerror(rc));
			_exit(100);
		}
		char ready[300];
		snprintf(ready, sizeof(ready), "%s/ready-%d", job->dir, r);
		close(open(ready, O_CREAT | O_WRONLY, 0600));
		rc = fn(comm, r, job->n, arg);
		ft_finalize(comm);
		fflush(NULL);
		_exit(rc & 0xff);
	}
	job->pids[r] = pid;
	if (job->nspawned < 64)
		job->spawned[job->nspawned++] = pid;
}

void tu_dump_stack(pid_t pid)
{
	char cmd[160];

	if (getenv("FTCC_TEST_HANG_STACKS") == NULL)
		return;
	snprintf(cmd, sizeof(cmd), "gdb -p %d -batch -ex 'thread apply all bt' 1>&2 2>/dev/null",
		 (int)pid);
	if (system(cmd) != 0)
		fprintf(stderr, "(no stack for pid %d: gdb failed)\n", (int)pid);
}

int tu_wait(struct tu_job *job, long deadline_ms, const int *expect_killed)
{
	long end = tu_now_ms() + deadline_ms;
	int left = 0, bad = 0;

	for (int r = 0; r < job->n; r++)
		if (job->pids[r] > 0)
			left++;
	while (left > 0 && tu_now_ms() < end) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);
		if (p <= 0) {
			tu_sleep_ms(5);
			continue;
		}
		for (int r = 0; r < job->n; r++)
			if (job->pids[r] == p) {
				job->status[r] = st;
				job->pids[r] = 0;
				left--;
			}
	}
	for (int r = 0; r < job->n; r++) {
		if (job->pids[r] > 0) {
			tu_dump_stack(job->pids[r]);
			kill(job->pids[r], SIGKILL);
			waitpid(job->pids[r], NULL, 0);
			job->pids[r] = 0;
			job->status[r] = -1;
			fprintf(stderr, "rank %d hung past the deadline\n", r);
			bad++;
			continue;
		}
		if (expect_killed != NULL && expect_killed[r])
			continue;
		if (!WIFEXITED(job->status[r]) || WEXITSTATUS(job->status[r]) != 0) {
			fprintf(stderr, "rank %d: %s %d\n", r,
				WIFEXITED(job->status[r]) ? "exit status" : "killed by signal",
				WIFEXITED(job->status[r]) ? WEXITSTATUS(job->status[r])
							  : WTERMSIG(job->status[r]));
			bad++;
		}
	}
	return bad;
}

void tu_job_cleanup(struct tu_job *job)
{
	char cmd[300];
	for (int i = 0; i < job->nspawned; i++) {
		if (kill(job->spawned[i], 0) == 0 || errno != ESRCH)
			continue;
		snprintf(cmd, sizeof(cmd), "rm -f /dev/shm/%d:%u:[0-9]*", (int)job->spawned[i],
			 (unsigned)getuid());
		if (system(cmd) != 0)
			fprintf(stderr, "cannot run: %s\n", cmd);
	}
	job->nspawned = 0;
	for (int r = 0; r < 64; r++)
		if (job->port_fd[r] >= 0) {
			close(job->port_fd[r]);
			job->port_fd[r] = -1;
		}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", job->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", job->dir);
}

bool tu_wait_file(const char *path, long end_ms)
{
	while (access(path, F_OK) != 0) {
		if (tu_now_ms() >= end_ms)
			return false;
		tu_sleep_ms(2);
	}
	return true;
}

int tu_wait_ready(const struct tu_job *job, long deadline_ms)
{
	long end = tu_now_ms() + deadline_ms;

	for (int r = 0; r < job->n; r++) {
		char path[300];
		snprintf(path, sizeof(path), "%s/ready-%d", job->dir, r);
		if (!tu_wait_file(path, end))
			return -1;
	}
	return 0;
}

int tu_run(int n, long deadline_ms, tu_rank_fn fn, void *arg)
{
	struct tu_job job;
	int bad;

	tu_job_init(&job, n);
	for (int r = 0; r < n; r++)
		tu_spawn(&job, r, fn, arg, NULL);
	bad = tu_wait(&job, deadline_ms, NULL);
	tu_job_cleanup(&job);
	return bad;
}

int tu_peer_fd(int fd)
{
	struct sockaddr_storage a, b, c, d;
	socklen_t la = sizeof(a), lb = sizeof(b);

	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &la), 0);
	cr_assert_eq(getpeername(fd, (struct sockaddr *)&b, &lb), 0);
	for (int cand = 3; cand < 4096; cand++) {
		socklen_t lc = sizeof(c), ld = sizeof(d);
		if (cand == fd || getsockname(cand, (struct sockaddr *)&c, &lc) != 0 ||
		    getpeername(cand, (struct sockaddr *)&d, &ld) != 0)
			continue;
		if (lc == lb && ld == la && memcmp(&c, &b, lc) == 0 && memcmp(&d, &a, ld) == 0)
			return cand;
	}
	cr_assert_fail("no socket of this process is the other end of fd %d", fd);
	return -1;
}

int tu_start_again(struct tu_job *job, int r, int inc, void (*tweak)(struct ft_config *, int),
		   tu_rank_fn fn, void *arg, int64_t *ms)
{
	int64_t t0 = tu_now_ms();
	int fds[2], rc = -FT_EIO, st;
	pid_t pid;

	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct ft_config cfg;
		struct ft_comm *comm = NULL;
		char v[16];
		close(fds[0]);
		snprintf(v, sizeof(v), "%d", inc);
		setenv("FTCC_INCARNATION", v, 1);
		tu_config(job, r, &cfg);
		if (tweak != NULL)
			tweak(&cfg, r);
		rc = ft_init(&cfg, &comm);
		if (rc == 0 && (rc = fn(comm, r, job->n, arg)) == 0)
			rc = ft_finalize(comm);
		_exit(write(fds[1], &rc, sizeof(rc)) == (ssize_t)sizeof(rc) ? 0 : 1);
	}
	close(fds[1]);
	if (read(fds[0], &rc, sizeof(rc)) != (ssize_t)sizeof(rc))
		rc = -FT_EIO; /* it died before it could say */
	close(fds[0]);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	*ms = tu_now_ms() - t0;
	return rc;
}
