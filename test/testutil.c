/* testutil.c: run a function as N real rank processes under a deadline, for multi-process tests (testutil.h). */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <poll.h>
#include <sys/resource.h>

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
		 * own buffers (SAR), not CMA, unless the caller chose (docs/launchers.md). */
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

/* ---- a hostile network ---- */

#define HOSTILE_IDLE 40 /* idle connections held on each port */

int tu_listening_ports(const struct tu_job *job, uint16_t *ports)
{
	int n = 0;

	for (int r = 0; r < job->n; r++) {
		char path[400], addr[256], pid[32], host[256], ctrl[256];
		FILE *f;
		snprintf(path, sizeof(path), "%s/%s/gen-0/member-%d", job->dir, job->job_id, r);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		if (fscanf(f, "%255s %31s %255s %255s", addr, pid, host, ctrl) == 4) {
			const char *a[2] = {addr, ctrl};
			for (int k = 0; k < 2 && n < TU_HOSTILE_PORTS; k++) {
				const char *colon = strrchr(a[k], ':'), *raw = strrchr(a[k], '/');
				unsigned hi, lo;
				if (strncmp(a[k], "127.0.0.1:", 10) == 0 && colon != NULL)
					ports[n++] = (uint16_t)atoi(colon + 1);
				/* a libfabric address over TCP ends in its sockaddr_in, in
				 * hex (family 2, little-endian; then the port); shm's is
				 * a name, no TCP port */
				else if (raw != NULL && strncmp(raw + 1, "0200", 4) == 0 &&
					 sscanf(raw + 5, "%2x%2x", &hi, &lo) == 2)
					ports[n++] = (uint16_t)(hi << 8 | lo);
			}
		}
		fclose(f);
	}
	for (const char *p = job->peers; *p != '\0' && n < TU_HOSTILE_PORTS;) {
		const char *colon = strchr(p, ':'), *comma = strchr(p, ',');
		if (colon == NULL)
			break;
		ports[n++] = (uint16_t)atoi(colon + 1);
		if (comma == NULL)
			break;
		p = comma + 1;
	}
	return n;
}

static int hostile_dial(uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 &&
	    errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Whether fd's peer closed it (or it never connected). */
static bool hostile_closed(int fd)
{
	char b[512];
	ssize_t r = recv(fd, b, sizeof(b), MSG_DONTWAIT);

	return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* Whether something listens on port (a connection made and closed at once). */
static bool hostile_listens(uint16_t port)
{
	int fd = hostile_dial(port), err = -1;
	socklen_t len = sizeof(err);
	struct pollfd pf = {.fd = fd, .events = POLLOUT};

	if (fd < 0)
		return false;
	if (poll(&pf, 1, 5) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
		err = -1;
	close(fd);
	return err == 0;
}

/* tu_hostile_start's attacker (testutil.h), until killed. Between rounds
 * it looks every 2 ms whether a port nobody listened on listens now, and
 * then starts the next round at once: a rank's new incarnation meets its 40
 * idle connections within a few ms of listening, while it finds its job. */
static void hostile_run(const uint16_t *ports, int np)
{
	static int idle[TU_HOSTILE_PORTS][HOSTILE_IDLE], slow[TU_HOSTILE_PORTS];
	static bool down[TU_HOSTILE_PORTS];
	unsigned char junk[4096];
	long next_slow = 0;

	for (size_t k = 0; k < sizeof(junk); k++)
		junk[k] = (unsigned char)(k * 131 + 7);
	signal(SIGPIPE, SIG_IGN);
	for (int p = 0; p < np; p++) {
		slow[p] = -1;
		for (int k = 0; k < HOSTILE_IDLE; k++)
			idle[p][k] = -1;
	}
	for (;;) {
		long now = tu_now_ms();
		for (int p = 0; p < np; p++) {
			for (int k = 0; k < HOSTILE_IDLE; k++) {
				if (idle[p][k] >= 0 && !hostile_closed(idle[p][k]))
					continue;
				if (idle[p][k] >= 0)
					close(idle[p][k]);
				idle[p][k] = hostile_dial(ports[p]);
			}
			if (slow[p] < 0 || hostile_closed(slow[p])) {
				if (slow[p] >= 0)
					close(slow[p]);
				slow[p] = hostile_dial(ports[p]);
			} else if (now >= next_slow) {
				(void)send(slow[p], junk + (now % 64), 1, MSG_NOSIGNAL);
			}
			int g = hostile_dial(ports[p]);
			if (g >= 0) {
				struct pollfd pf = {.fd = g, .events = POLLOUT};
				if (poll(&pf, 1, 50) == 1)
					(void)send(g, junk, sizeof(junk), MSG_NOSIGNAL);
				close(g);
			}
			int rs = hostile_dial(ports[p]);
			if (rs >= 0) {
				struct linger lg = {.l_onoff = 1, .l_linger = 0};
				struct pollfd pf = {.fd = rs, .events = POLLOUT};
				(void)poll(&pf, 1, 50);
				setsockopt(rs, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
				close(rs);
			}
		}
		if (now >= next_slow)
			next_slow = now + 1000;
		for (int p = 0; p < np; p++)
			down[p] = !hostile_listens(ports[p]);
		for (long end = tu_now_ms() + 50; tu_now_ms() < end;) {
			bool up = false;
			tu_sleep_ms(2);
			for (int p = 0; p < np && !up; p++)
				up = down[p] && hostile_listens(ports[p]);
			if (up)
				break;
		}
	}
}

pid_t tu_hostile_start(const uint16_t *ports, int np)
{
	pid_t parent = getpid(), pid = fork();

	cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		struct rlimit rl;
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(0); /* the test died before the line above */
		/* 41 held connections a port: as many descriptors as allowed */
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max;
			(void)setrlimit(RLIMIT_NOFILE, &rl);
		}
		hostile_run(ports, np);
		_exit(0);
	}
	return pid;
}

bool tu_hostile_stop(pid_t attacker)
{
	int st;

	if (attacker <= 0)
		return false;
	/* gone already (reaped here, or by tu_wait's waitpid(-1)): it died */
	if (waitpid(attacker, &st, WNOHANG) != 0)
		return false;
	if (kill(attacker, SIGKILL) != 0 || waitpid(attacker, &st, 0) != attacker)
		return false;
	return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
}
