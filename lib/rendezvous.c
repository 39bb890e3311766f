/* rendezvous.c: file rendezvous: member files, an exclusively created view file, liveness of stale entries. */
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
 * r), <root>/<job>/gen-<g>/member-<r> ("addr pid host"), and
 * <root>/<job>/gen-<g>/view, created with O_EXCL by the coordinator: whoever
 * creates it first settles generation g. Files are written under a temporary
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

int ft__rdv_publish(struct ft__rdv *r, uint32_t gen, const char *addr)
{
	char dir[700], name[64], text[FT__ADDR_MAX + 300], host[256];
	int rc;

	gen_dir(r, gen, dir, sizeof(dir));
	if ((rc = mkdir_p(dir)) != 0)
		return -FT_EIO;
	host_name(host, sizeof(host));
	snprintf(name, sizeof(name), "member-%d", r->rank);
	snprintf(text, sizeof(text), "%s %d %s\n", addr, (int)getpid(), host);
	rc = write_atomic(dir, name, text, 0);
	if (rc != 0)
		ft__error("rendezvous: cannot write %s/%s: %s", dir, name, strerror(-rc));
	return rc == 0 ? 0 : -FT_EIO;
}

/* Reads a live member file: 1 found, 0 absent or stale, <0 error. */
static int read_member(const struct ft__rdv *r, uint32_t gen, int orig, char *addr, size_t len)
{
	char dir[700], path[800], buf[FT__ADDR_MAX + 300], a[FT__ADDR_MAX], host[256];
	int pid, n;

	gen_dir(r, gen, dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/member-%d", dir, orig);
	n = read_file(path, buf, sizeof(buf));
	if (n == -ENOENT)
		return 0;
	if (n < 0)
		return -FT_EIO;
	if (sscanf(buf, "%255s %d %255s", a, &pid, host) != 3) {
		ft__warn("rendezvous: malformed member file %s", path);
		return 0;
	}
	if (writer_is_stale(pid, host))
		return 0;
	if (addr != NULL)
		snprintf(addr, len, "%s", a);
	return 1;
}

int ft__rdv_lookup(struct ft__rdv *r, uint32_t gen, int orig, char *addr, size_t len)
{
	int rc = read_member(r, gen, orig, addr, len);

	return rc == 1 ? 0 : (rc == 0 ? -FT_EPEERFAILED : rc);
}

/* Parses a view file: 1 valid and live, 0 absent or stale, <0 corrupt. */
static int read_view(const struct ft__rdv *r, uint32_t gen, struct ft__view *v)
{
	char dir[700], path[800], host[256];
	char *buf, *p;
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
	if (n < 0 || sscanf(buf, "ftcc-view 1 gen %d size %d writer %d %255s%n", &g, &size, &pid,
			    host, &used) != 4 || (uint32_t)g != gen || size < 1 || size > (1 << 20)) {
		free(buf);
		return n < 0 ? n : -FT_ECORRUPT;
	}
	if (writer_is_stale(pid, host)) {
		free(buf);
		return 0;
	}
	v->generation = gen;
	v->size = size;
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

static int write_view(struct ft__rdv *r, uint32_t gen, const int *members, int n)
{
	char dir[700], host[256], *text;
	size_t cap = 256 + (size_t)n * 12, len;
	int rc;

	text = malloc(cap);
	if (text == NULL)
		return -FT_ENOMEM;
	host_name(host, sizeof(host));
	gen_dir(r, gen, dir, sizeof(dir));
	len = (size_t)snprintf(text, cap, "ftcc-view 1 gen %u size %d writer %d %s members", gen,
			       n, (int)getpid(), host);
	for (int i = 0; i < n; i++)
		len += (size_t)snprintf(text + len, cap - len, " %d", members[i]);
	snprintf(text + len, cap - len, "\n");
	rc = write_atomic(dir, "view", text, 1);
	if (rc == -EEXIST) {
		/* A view exists: only a stale one (its writer gone) may be replaced. */
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
	int coordinator = cand[0], written = 0, sleep_us = 500, rc;

	for (int i = 1; i < ncand; i++)
		if (cand[i] < coordinator)
			coordinator = cand[i];
	for (;;) {
		rc = read_view(r, gen, view);
		if (rc == 1)
			return 0;
		if (rc < 0) {
			ft__error("rendezvous: corrupt view file for generation %u in %s", gen,
				  r->dir);
			return rc;
		}
		if (r->rank == coordinator && !written) {
			int present = 0;
			for (int i = 0; i < ncand; i++) {
				rc = read_member(r, gen, cand[i], NULL, 0);
				if (rc < 0)
					return rc;
				present += rc;
			}
			if (present == ncand) {
				rc = write_view(r, gen, cand, ncand);
				if (rc != 0)
					return rc;
				written = 1;
				continue;
			}
		}
		if (ft__now_ms() >= deadline)
			break;
		backoff_sleep(&sleep_us);
	}
	if (r->rank == coordinator) {
		for (int i = 0; i < ncand; i++)
			if (read_member(r, gen, cand[i], NULL, 0) != 1)
				ft__error("rendezvous: rank %d never registered in %s (generation %u)",
					  cand[i], r->dir, gen);
	} else {
		ft__error("rendezvous: no view for generation %u in %s (coordinator rank %d)", gen,
			  r->dir, coordinator);
	}
	return -FT_ETIMEDOUT;
}

void ft__rdv_close(struct ft__rdv *r, uint32_t gen, int remove_view)
{
	char dir[700], path[800];

	if (r->dir[0] == '\0')
		return;
	gen_dir(r, gen, dir, sizeof(dir));
	if (r->lock_fd >= 0) {
		snprintf(path, sizeof(path), "%s/member-%d", dir, r->rank);
		unlink(path);
		if (remove_view) {
			snprintf(path, sizeof(path), "%s/view", dir);
			unlink(path);
		}
		rmdir(dir);
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
