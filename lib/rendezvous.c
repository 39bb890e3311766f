/* rendezvous.c: file rendezvous: member files, an exclusively created view file, liveness of stale entries. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "rendezvous.h"

/*
 * Layout: <root>/<job>/lock-<r> (flock held by the live incarnation of rank
 * r), <root>/<job>/gen-<g>/member-<r> ("addr pid host ctrl next_op"), and
 * <root>/<job>/gen-<g>/view ("ftcc-view 2 gen G size N writer PID HOST nonce
 * X first K members r0 r1 ..."), created exclusively by the coordinator:
 * whoever creates it first settles generation g. Files are written under a temporary
 * name and renamed, so a reader sees a whole file or none. Entries written by
 * a process of this host that no longer exists are stale (a crashed earlier
 * job with the same id) and are ignored, so a reused job id cannot mislead.
 */

static int mkdir_p(const char *path)
{
	char tmp[700];
	size_t len = strlen(path);

	if (len >= sizeof(tmp))
		return -FT_EINVAL;
	memcpy(tmp, path, len + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static void host_name(char *buf, size_t len)
{
	if (gethostname(buf, len) != 0)
		snprintf(buf, len, "unknown");
	buf[len - 1] = '\0';
}

/* A writer is stale when it ran on this host and is gone. */
static int writer_is_stale(int pid, const char *host)
{
	char me[256];

	host_name(me, sizeof(me));
	if (strcmp(me, host) != 0 || pid <= 0)
		return 0;
	return kill(pid, 0) != 0 && errno == ESRCH;
}

static int write_atomic(const char *dir, const char *name, const char *text, int exclusive)
{
	char tmp[800], path[800];
	int fd, rc = 0;
	size_t len = strlen(text);

	snprintf(tmp, sizeof(tmp), "%s/.%s.%d.tmp", dir, name, (int)getpid());
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (write(fd, text, len) != (ssize_t)len)
		rc = -FT_EIO;
	close(fd);
	if (rc == 0) {
		/* link() fails if the name exists: exclusive creation of a whole file. */
		if (exclusive ? link(tmp, path) != 0 : rename(tmp, path) != 0)
			rc = errno == EEXIST ? -EEXIST : -errno;
	}
	unlink(tmp);
	return rc;
}

static int read_file(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, cap - 1);
	close(fd);
	if (n < 0)
		return -FT_EIO;
	buf[n] = '\0';
	return (int)n;
}

static void gen_dir(const struct ft__rdv *r, uint32_t gen, char *buf, size_t len)
{
	snprintf(buf, len, "%s/gen-%u", r->dir, gen);
}

int ft__rdv_open(struct ft__rdv *r, const char *root, const char *job, int rank)
{
	char path[800];
	int rc;

	memset(r, 0, sizeof(*r));
	r->lock_fd = -1;
	r->rank = rank;
	if (snprintf(r->dir, sizeof(r->dir), "%s/%s", root, job) >= (int)sizeof(r->dir))
		return -FT_EINVAL;
	rc = mkdir_p(r->dir);
	if (rc != 0) {
		ft__error("rendezvous: cannot create %s: %s", r->dir, strerror(-rc));
		return rc == -ENOMEM ? -FT_ENOMEM : -FT_EIO;
	}
	snprintf(path, sizeof(path), "%s/lock-%d", r->dir, rank);
	r->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (r->lock_fd < 0) {
		ft__error("rendezvous: cannot open %s: %s", path, strerror(errno));
		return -FT_EIO;
	}
	if (flock(r->lock_fd, LOCK_EX | LOCK_NB) != 0) {
		ft__error("rendezvous: rank %d of job in %s is already held by a live process",
			  rank, r->dir);
		close(r->lock_fd);
		r->lock_fd = -1;
		return -FT_EBUSY;
	}
	return 0;
}

int ft__rdv_publish(struct ft__rdv *r, uint32_t gen, const struct ft__member *m)
{
	char dir[700], name[64], text[FT__ADDR_MAX + FT__CTRL_MAX + 400], host[256];
	int rc;

	gen_dir(r, gen, dir, sizeof(dir));
	if ((rc = mkdir_p(dir)) != 0)
		return -FT_EIO;
	host_name(host, sizeof(host));
	snprintf(name, sizeof(name), "member-%d", r->rank);
	snprintf(text, sizeof(text), "%s %d %s %s %llu\n", m->addr, (int)getpid(), host,
		 m->ctrl[0] != '\0' ? m->ctrl : "-", (unsigned long long)m->next_op);
	rc = write_atomic(dir, name, text, 0);
	if (rc != 0)
		ft__error("rendezvous: cannot write %s/%s: %s", dir, name, strerror(-rc));
	return rc == 0 ? 0 : -FT_EIO;
}

enum { MEMBER_ABSENT, MEMBER_LIVE, MEMBER_DEAD };

/* Reads a member file: MEMBER_LIVE (and *m), MEMBER_ABSENT, MEMBER_DEAD (its
 * writer ran on this host and is gone), or <0 error. */
static int read_member(const struct ft__rdv *r, uint32_t gen, int orig, struct ft__member *m)
{
	char dir[700], path[800], buf[FT__ADDR_MAX + FT__CTRL_MAX + 400], host[256];
	struct ft__member tmp;
	unsigned long long next;
	int n;

	if (m == NULL)
		m = &tmp;
	gen_dir(r, gen, dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/member-%d", dir, orig);
	n = read_file(path, buf, sizeof(buf));
	if (n == -ENOENT)
		return MEMBER_ABSENT;
	if (n < 0)
		return -FT_EIO;
	if (sscanf(buf, "%255s %d %255s %63s %llu", m->addr, &m->pid, host, m->ctrl, &next) != 5) {
		ft__warn("rendezvous: malformed member file %s", path);
		return MEMBER_ABSENT;
	}
	m->next_op = next;
	if (strcmp(m->ctrl, "-") == 0)
		m->ctrl[0] = '\0';
	return writer_is_stale(m->pid, host) ? MEMBER_DEAD : MEMBER_LIVE;
}

int ft__rdv_lookup(struct ft__rdv *r, uint32_t gen, int orig, struct ft__member *m)
{
	int rc = read_member(r, gen, orig, m);

	return rc == MEMBER_LIVE ? 0 : (rc < 0 ? rc : -FT_EPEERFAILED);
}

/*
 * Parses a view file: 1 valid and live, 0 absent or stale, <0 corrupt. The
 * view of generation 0 is stale when its writer (of this host) is gone; later
 * ones when they carry another job's nonce: once settled, a view stays valid
 * after its writer dies.
 */
static int read_view(const struct ft__rdv *r, uint32_t gen, struct ft__view *v)
{
	char dir[700], path[800], host[256];
	char *buf, *p;
	unsigned long long nonce, first;
	int n, g, size, pid, used;

	gen_dir(r, gen, dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/view", dir);
	buf = malloc(1 << 20);
	if (buf == NULL)
		return -FT_ENOMEM;
	n = read_file(path, buf, 1 << 20);
	if (n == -ENOENT) {
		free(buf);
		return 0;
	}
	if (n < 0 ||
	    sscanf(buf, "ftcc-view 2 gen %d size %d writer %d %255s nonce %llx first %llu%n", &g,
		   &size, &pid, host, &nonce, &first, &used) != 6 ||
	    (uint32_t)g != gen || size < 1 || size > (1 << 20)) {
		free(buf);
		return n < 0 ? n : -FT_ECORRUPT;
	}
	if (gen == 0 ? writer_is_stale(pid, host) : nonce != r->nonce) {
		free(buf);
		return 0;
	}
	v->generation = gen;
	v->size = size;
	v->nonce = nonce;
	v->first_op = first;
	v->members = calloc((size_t)size, sizeof(int));
	if (v->members == NULL) {
		free(buf);
		return -FT_ENOMEM;
	}
	p = buf + used;
	if (strncmp(p, " members", 8) != 0)
		goto corrupt;
	p += 8;
	for (int i = 0; i < size; i++) {
		if (sscanf(p, "%d%n", &v->members[i], &used) != 1 || v->members[i] < 0 ||
		    (i > 0 && v->members[i] <= v->members[i - 1]))
			goto corrupt;
		p += used;
	}
	free(buf);
	return 1;
corrupt:
	free(buf);
	ft__view_free(v);
	return -FT_ECORRUPT;
}

static uint64_t fresh_nonce(void)
{
	uint64_t x = ft__now_ns() ^ ((uint64_t)getpid() << 32);

	/* splitmix64 finaliser: different jobs get unrelated nonces */
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static int write_view(struct ft__rdv *r, uint32_t gen, const int *members, int n,
		      uint64_t first)
{
	char dir[700], host[256], *text;
	size_t cap = 320 + (size_t)n * 12, len;
	int rc;

	text = malloc(cap);
	if (text == NULL)
		return -FT_ENOMEM;
	host_name(host, sizeof(host));
	gen_dir(r, gen, dir, sizeof(dir));
	len = (size_t)snprintf(text, cap, "ftcc-view 2 gen %u size %d writer %d %s nonce %llx first %llu members",
			       gen, n, (int)getpid(), host,
			       (unsigned long long)(gen == 0 ? fresh_nonce() : r->nonce),
			       (unsigned long long)first);
	for (int i = 0; i < n; i++)
		len += (size_t)snprintf(text + len, cap - len, " %d", members[i]);
	snprintf(text + len, cap - len, "\n");
	rc = write_atomic(dir, "view", text, 1);
	if (rc == -EEXIST) {
		/* A view exists: only a stale one may be replaced. */
		struct ft__view old = {0};
		if (read_view(r, gen, &old) == 0) {
			char path[800];
			snprintf(path, sizeof(path), "%s/view", dir);
			unlink(path);
			rc = write_atomic(dir, "view", text, 1);
		} else {
			ft__view_free(&old);
			rc = 0;
		}
	}
	free(text);
	return rc == -EEXIST ? 0 : rc;
}

int ft__rdv_depart(struct ft__rdv *r, uint64_t next_op)
{
	char name[64], text[96];

	snprintf(name, sizeof(name), "left-%d", r->rank);
	snprintf(text, sizeof(text), "%d %llu %llx\n", (int)getpid(), (unsigned long long)next_op,
		 (unsigned long long)r->nonce);
	return write_atomic(r->dir, name, text, 0) == 0 ? 0 : -FT_EIO;
}

/* Whether rank orig of this job (not of an earlier one with the same id) finalized. */
static bool departed(const struct ft__rdv *r, int orig)
{
	char path[800], buf[128];
	unsigned long long next, nonce;
	int pid;

	snprintf(path, sizeof(path), "%s/left-%d", r->dir, orig);
	return read_file(path, buf, sizeof(buf)) > 0 &&
	       sscanf(buf, "%d %llu %llx", &pid, &next, &nonce) == 3 && nonce == r->nonce;
}

int ft__rdv_try_settle(struct ft__rdv *r, uint32_t gen, const int *cand, int ncand, bool force,
		       struct ft__view *view)
{
	uint64_t first = UINT64_MAX;
	int *members, *state, n = 0, missing = 0, coordinator = -1, rc;

	rc = read_view(r, gen, view);
	if (rc != 0) {
		if (rc == 1 && gen == 0)
			r->nonce = view->nonce;
		return rc;
	}
	if (ncand < 1)
		return 0;
	members = malloc((size_t)ncand * sizeof(int));
	state = malloc((size_t)ncand * sizeof(int));
	if (members == NULL || state == NULL) {
		free(members);
		free(state);
		return -FT_ENOMEM;
	}
	/* A candidate is live (published), absent (not yet), or out: its
	 * process is gone from this host, or it finalized (left-<r>). */
	for (int i = 0; i < ncand; i++) {
		struct ft__member m;
		rc = read_member(r, gen, cand[i], &m);
		if (rc == MEMBER_ABSENT && gen > 0 &&
		    (departed(r, cand[i]) || read_member(r, gen - 1, cand[i], NULL) == MEMBER_DEAD))
			rc = MEMBER_DEAD;
		if (rc < 0)
			goto out;
		state[i] = rc;
		if (rc == MEMBER_LIVE && m.next_op < first)
			first = m.next_op;
		if (rc != MEMBER_DEAD && coordinator < 0)
			coordinator = cand[i];
	}
	rc = 0;
	if (r->rank != coordinator)
		goto out;
	for (int i = 0; i < ncand; i++) {
		if (state[i] == MEMBER_LIVE)
			members[n++] = cand[i];
		missing += state[i] == MEMBER_ABSENT;
	}
	if (n > 0 && (missing == 0 || force))
		rc = write_view(r, gen, members, n, first);
	if (rc == 0) {
		rc = read_view(r, gen, view);
		if (rc == 1 && gen == 0)
			r->nonce = view->nonce;
	}
out:
	free(members);
	free(state);
	return rc;
}

static void backoff_sleep(int *us)
{
	struct timespec ts = {0, (long)*us * 1000};

	nanosleep(&ts, NULL);
	if (*us < 20000)
		*us *= 2;
}

int ft__rdv_settle(struct ft__rdv *r, uint32_t gen, const int *cand, int ncand, int timeout_ms,
		   struct ft__view *view)
{
	int64_t deadline = ft__now_ms() + timeout_ms;
	int sleep_us = 500, rc;

	for (;;) {
		rc = ft__rdv_try_settle(r, gen, cand, ncand, false, view);
		if (rc == 1)
			return 0;
		if (rc < 0) {
			ft__error("rendezvous: cannot settle generation %u in %s: %s", gen, r->dir,
				  ft_strerror(rc));
			return rc;
		}
		if (ft__now_ms() >= deadline)
			break;
		backoff_sleep(&sleep_us);
	}
	if (r->rank == cand[0]) {
		for (int i = 0; i < ncand; i++)
			if (read_member(r, gen, cand[i], NULL) != MEMBER_LIVE)
				ft__error("rendezvous: rank %d never registered in %s (generation %u)",
					  cand[i], r->dir, gen);
	} else {
		ft__error("rendezvous: no view for generation %u in %s (coordinator rank %d)", gen,
			  r->dir, cand[0]);
	}
	return -FT_ETIMEDOUT;
}

/* Removes what a dead rank left in dir: member files of gone writers and
 * lock files nobody holds. */
static void sweep_dead(const struct ft__rdv *r, const char *dir, uint32_t gen)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[1100];
	int orig;

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (sscanf(e->d_name, "member-%d", &orig) == 1) {
			if (read_member(r, gen, orig, NULL) == MEMBER_DEAD)
				unlink(path);
		} else if (sscanf(e->d_name, "lock-%d", &orig) == 1 && orig != r->rank) {
			int fd = open(path, O_RDWR | O_CLOEXEC);
			if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0)
				unlink(path);
			if (fd >= 0)
				close(fd);
		}
	}
	closedir(d);
}

void ft__rdv_close(struct ft__rdv *r, uint32_t gen, int remove_view)
{
	char dir[700], path[800];

	if (r->dir[0] == '\0')
		return;
	if (r->lock_fd >= 0) {
		for (uint32_t g = 0; g <= gen; g++) {
			gen_dir(r, g, dir, sizeof(dir));
			snprintf(path, sizeof(path), "%s/member-%d", dir, r->rank);
			unlink(path);
			if (remove_view) {
				sweep_dead(r, dir, g);
				snprintf(path, sizeof(path), "%s/view", dir);
				unlink(path);
			}
			rmdir(dir);
		}
		if (remove_view)
			sweep_dead(r, r->dir, gen);
		snprintf(path, sizeof(path), "%s/lock-%d", r->dir, r->rank);
		unlink(path);
		close(r->lock_fd);
		r->lock_fd = -1;
		rmdir(r->dir);
	}
	r->dir[0] = '\0';
}

void ft__view_free(struct ft__view *v)
{
	free(v->members);
	v->members = NULL;
	v->size = 0;
}
