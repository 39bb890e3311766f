/* run_env.c: the job ftcc-run makes: its environment (job id, token, rendezvous), what it leaves behind, and the address store it serves. */
/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ftcc.h"
#include "sock.h"
#include "store_server.h"
#include "ftcc-run.h"

/* ---- job environment ---------------------------------------------------------- */

static int random_bytes(unsigned char *p, size_t n)
{
	while (n > 0) {
		ssize_t r = getrandom(p, n, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			break;
		p += r;
		n -= (size_t)r;
	}
	if (n == 0)
		return 0;
	/* Kernels before 3.17 have no getrandom. */
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (n > 0) {
		ssize_t r = read(fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			int err = r < 0 ? -errno : -EIO;
			close(fd);
			return err;
		}
		p += r;
		n -= (size_t)r;
	}
	close(fd);
	return 0;
}

static int random_hex(char *out, size_t nbytes)
{
	unsigned char raw[32];
	int err;

	if (nbytes > sizeof(raw))
		return -EINVAL;
	err = random_bytes(raw, nbytes);
	if (err < 0)
		return err;
	for (size_t i = 0; i < nbytes; i++)
		snprintf(out + 2 * i, 3, "%02x", raw[i]);
	return 0;
}

static bool env_set(const char *name)
{
	const char *v = getenv(name);
	return v && *v;
}

/* Rendezvous, job id and token: made here once, inherited by every rank. */
int setup_job_env(struct launcher *L)
{
	char hex[65];
	int err;

	if (!env_set("FTCC_RENDEZVOUS")) {
		const char *tmp = getenv("TMPDIR");
		char path[PATH_MAX];

		if (!tmp || !*tmp)
			tmp = "/tmp";
		if (snprintf(path, sizeof(path), "%s/ftcc-run-XXXXXX", tmp) >= (int)sizeof(path))
			return -ENAMETOOLONG;
		if (!mkdtemp(path)) {
			err = -errno;
			msg(L, "cannot create a rendezvous directory under %s: %s", tmp,
			    strerror(-err));
			return err;
		}
		L->rendezvous_made = strdup(path);
		if (!L->rendezvous_made || setenv("FTCC_RENDEZVOUS", path, 1) < 0)
			return -ENOMEM;
	}
	if (!env_set("FTCC_JOB_ID")) {
		char id[96];

		err = random_hex(hex, 4);
		if (err < 0)
			return err;
		snprintf(id, sizeof(id), "run-%ld-%s", (long)getpid(), hex);
		if (setenv("FTCC_JOB_ID", id, 1) < 0)
			return -ENOMEM;
		L->job_made = true;
	}
	if (!env_set("FTCC_TOKEN")) {
		err = random_hex(hex, 16);
		if (err < 0)
			return err;
		if (setenv("FTCC_TOKEN", hex, 1) < 0)
			return -ENOMEM;
	}
	char ws[16];
	snprintf(ws, sizeof(ws), "%d", L->opt.nranks);
	if (setenv("FTCC_WORLD_SIZE", ws, 1) < 0)
		return -ENOMEM;
	/*
	 * libfabric's shm provider reads this once per process, and ftcc, a
	 * library, does not set its process's environment: the launcher does.
	 * SAR copies are faster here and hold no region lock while they copy
	 * (a rank killed mid-CMA-copy wedges its senders); docs/launchers.md, "Transports".
	 */
	if (setenv("FI_SHM_DISABLE_CMA", "1", 0) < 0)
		return -ENOMEM;
	return 0;
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if ((type == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT)
		return -1;
	return 0;
}

void remove_rendezvous(struct launcher *L)
{
	if (!L->rendezvous_made)
		return;
	if (nftw(L->rendezvous_made, rm_entry, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT)
		msg(L, "cannot remove rendezvous directory %s: %s", L->rendezvous_made,
		    strerror(errno));
	free(L->rendezvous_made);
	L->rendezvous_made = NULL;
}

/*
 * The pairwise logs of a job whose id this launcher made: no restart can
 * use them once it ends (a new run gets a new id), and a job killed at its
 * --timeout (or by a signal) never finalizes, which is when ranks remove
 * their own. Where the library puts them (FTCC_LOG_DIR, else its default
 * roots for either durability), under the job id.
 */
void remove_job_logs(struct launcher *L)
{
	const char *dir = getenv("FTCC_LOG_DIR"), *tmp = getenv("TMPDIR"), *job;
	char roots[3][PATH_MAX], path[PATH_MAX + 128];
	int n = 0;

	if (!L->job_made || (job = getenv("FTCC_JOB_ID")) == NULL)
		return;
	if (dir != NULL && *dir != '\0') {
		snprintf(roots[n++], sizeof(roots[0]), "%s", dir);
	} else {
		snprintf(roots[n++], sizeof(roots[0]), "/dev/shm/ftcc-log-%u", (unsigned)getuid());
		snprintf(roots[n++], sizeof(roots[0]), "%s/ftcc-log-%u",
			 tmp != NULL && *tmp != '\0' ? tmp : "/tmp", (unsigned)getuid());
	}
	for (int i = 0; i < n; i++) {
		if (snprintf(path, sizeof(path), "%s/%s", roots[i], job) >= (int)sizeof(path))
			continue;
		if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT)
			msg(L, "cannot remove the job's logs in %s: %s", path, strerror(errno));
	}
}

/* 1024 ranks need two pipes each: more than the usual soft limit of 1024 fds. */
void raise_fd_limit(struct launcher *L)
{
	struct rlimit rl;
	/* two pipes per rank, and a connection per rank to the store we may serve */
	rlim_t need = L->opt.nranks > 0 ? (rlim_t)L->opt.nranks * 3 + 64 : 65536 + 64;

	if (getrlimit(RLIMIT_NOFILE, &L->orig_nofile) < 0)
		return;
	rl = L->orig_nofile;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
		rl.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need) ? need : rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* ---- the address store ---------------------------------------------------------- */

static void store_say(void *arg, const char *line)
{
	msg(arg, "%s", line);
}

/* Ranks we launch get a store when they are to use one and name none. */
bool store_wanted(const struct launcher *L)
{
	const char *m = getenv("FTCC_MEMBERSHIP"), *b = getenv("FTCC_BOOTSTRAP");

	if (L->opt.store != NULL)
		return true;
	return m != NULL && strcmp(m, "inband") == 0 && !env_set("FTCC_PEERS") &&
	       !env_set("FTCC_STORE") && (b == NULL || *b == '\0' || strcmp(b, "store") == 0);
}

/* --store [HOST:]PORT into host and port. */
static void store_arg(const char *arg, char *host, size_t hlen, char *port, size_t plen)
{
	const char *p = strrchr(arg, ':');
	long v;

	host[0] = '\0';
	if (p == NULL)
		snprintf(port, plen, "%s", arg);
	else if (p == arg)
		snprintf(port, plen, "%s", arg + 1);
	else if (ft__sock_split(arg, host, hlen, port, plen) != 0)
		usage_error("--store %s: expected [HOST:]PORT, e.g. 0.0.0.0:5000 or [::1]:0", arg);
	if (strlen(port) >= plen - 1 || !parse_int(port, 0, 65535, &v))
		usage_error("--store %s: the port must be a number from 0 to 65535", arg);
}

/* The address to give for addr: a wildcard host becomes this host's name. */
static void store_shown(const char *addr, char *out, size_t cap)
{
	char host[256], port[16], name[256];

	if (ft__sock_split(addr, host, sizeof(host), port, sizeof(port)) == 0 &&
	    (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0) &&
	    gethostname(name, sizeof(name)) == 0) {
		name[sizeof(name) - 1] = '\0';
		snprintf(out, cap, "%s:%s", name, port);
	} else {
		snprintf(out, cap, "%s", addr);
	}
}

/*
 * Serves the store: at --store's address, else (for ranks we launch) at
 * 127.0.0.1 on a port the kernel picks. Ranks we launch find it in
 * FTCC_STORE; with no ranks, its address goes to stdout.
 */
int start_store(struct launcher *L)
{
	char host[256] = "127.0.0.1", port[16] = "0", addr[320], shown[320];
	const char *token = getenv("FTCC_TOKEN"), *auth = getenv("FTCC_AUTH");
	const char *job = getenv("FTCC_JOB_ID");
	int rc;

	if (L->opt.store != NULL)
		store_arg(L->opt.store, host, sizeof(host), port, sizeof(port));
	/* the ranks we launch always have one (setup_job_env); a store alone needs the job's */
	if (token == NULL || *token == '\0') {
		if (auth == NULL || strcmp(auth, "none") != 0) {
			msg(L, "the address store needs the job's token, to take joins only "
			       "from its ranks: set FTCC_TOKEN to the token the ranks have (or "
			       "FTCC_AUTH=none to let anyone who reaches the store join or "
			       "replace a rank)");
			return -EPERM;
		}
		msg(L, "warning: FTCC_AUTH=none: the store takes joins from anyone who reaches it");
		token = NULL;
	}
	rc = ft__store_server_open(&L->store, host, port, token, L->opt.argv == NULL, store_say, L, addr,
			sizeof(addr));
	if (rc < 0) {
		msg(L, "cannot serve the address store at %s: %s",
		    L->opt.store != NULL ? L->opt.store : "127.0.0.1", ft_strerror(rc));
		return -EADDRNOTAVAIL;
	}
	/*
	 * One job when it is known (always for the ranks we launch): jobs
	 * that share a token could otherwise push each other's books out.
	 */
	if (job != NULL && *job != '\0' && ft__store_server_serve_only(L->store, job) < 0) {
		msg(L, "FTCC_JOB_ID='%s': a job id holds 1 to %d letters, digits and -_.@:", job,
		    FT_NAME_MAX - 1);
		ft__store_server_close(L->store);
		L->store = NULL;
		return -EINVAL;
	}
	store_shown(addr, shown, sizeof(shown));
	if (L->opt.argv != NULL)
		return setenv("FTCC_STORE", shown, 1) < 0 ? -ENOMEM : 0;
	if (job != NULL && *job != '\0')
		msg(L, "serving the address store on %s, for job %s only (FTCC_JOB_ID)", addr, job);
	else
		msg(L, "serving the address store on %s, for any job (jobs that share its token "
		       "can push each other's books out; FTCC_JOB_ID=ID serves one)", addr);
	char line[400];
	int n = snprintf(line, sizeof(line), "FTCC_STORE=%s\n", shown);
	write_all(L, STDOUT_FILENO, line, (size_t)n);
	return 0;
}


/* A closed fd 0/1/2 would be reused by a pipe, and dup2(fd, fd) keeps O_CLOEXEC. */
void ensure_std_fds(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		int n = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
		if (n >= 0 && n != fd) {
			dup2(n, fd);
			close(n);
		}
	}
}
