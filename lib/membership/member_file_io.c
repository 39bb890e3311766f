/* member_file_io.c: the file rendezvous's whole-file writes (from the reserve when the file system is full) and reads. */
/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdreg.h"
#include "file.h"
#include "member_file.h"

/* Writes dir/name whole or not at all: a temporary file, then rename (or,
 * exclusive, link: fails with -EEXIST if the name exists). */
static int write_new(const char *dir, const char *name, const char *text, int exclusive)
{
	char tmp[800], path[800];
	int fd, rc;

	if (snprintf(tmp, sizeof(tmp), "%s/.%s.%d.tmp", dir, name, (int)getpid()) >= (int)sizeof(tmp) ||
	    snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
		return -FT_EINVAL;
	/* a fresh file: a name planted there (a link elsewhere) is removed, never followed */
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	ft__fd_own(fd);
	if (fd < 0)
		return -errno;
	rc = ft__write_all(fd, text, strlen(text), 0);
	/* close reports deferred write errors (NFS) */
	if (ft__fd_close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0) {
		/* link() fails if the name exists: exclusive creation of a whole file. */
		if (exclusive ? link(tmp, path) != 0 : rename(tmp, path) != 0)
			rc = -errno;
	}
	unlink(tmp);
	return rc;
}

/* write_new, and on a full file system (the temporary file, its bytes or,
 * on tmpfs, the link's inode refused) the same from reserve file spare
 * (-1: none). */
int ft__mbf_write(struct mbf *r, const char *dir, const char *name, const char *text,
			int exclusive, int spare)
{
	char path[800];
	int rc = write_new(dir, name, text, exclusive), got;

	/* a rank that left (its ft_init failed) removes a generation's
	 * directory it finds empty, which another rank may just have made:
	 * made again, a few times at most (a rank's start once failed so).
	 * Never for the job's own directory's end marker (r NULL): the
	 * directory another rank's clean end just removed stays removed */
	for (int again = 0; rc == -ENOENT && r != NULL && again < 3 && ft__mkdir_p(dir) == 0;
	     again++)
		rc = write_new(dir, name, text, exclusive);
	if (!ft__errno_full(rc) || r == NULL || spare < 0)
		return rc;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	got = ft__reserve_file(&r->spare, spare, text, strlen(text), path, exclusive != 0);
	if (got == 0)
		ft__log_gated(FT__LOG_WARN, &r->said_spare, "rendezvous: no space left on %s: %s written "
			      "from this rank's reserve", dir, name);
	return got == 0 || got == -EEXIST ? got : rc;
}

/* Says that dir/name could not be written (once per period: a settle tries
 * again and again). */
void ft__mbf_say_unwritten(struct mbf *r, const char *dir, const char *name, int rc)
{
	if (ft__errno_full(rc))
		ft__log_gated(FT__LOG_ERROR, &r->say, "rendezvous: cannot write %s/%s: no space left "
			      "on %s, and this rank has no reserve left for it (%s)", dir, name, dir,
			      ft_err_name(-FT_ENOSPC));
	else
		ft__log_gated(FT__LOG_ERROR, &r->say, "rendezvous: cannot write %s/%s: %s", dir, name,
			      strerror(-rc));
}

/* Reads a file into buf (NUL-terminated): its length, -ENOENT, -FT_E*. A
 * file longer than cap - 1 bytes is cut there and *cut set. */
int ft__mbf_read_file(const char *path, char *buf, size_t cap, bool *cut)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	ft__fd_own(fd);
	size_t have = 0;
	char extra;

	*cut = false;
	if (fd < 0)
		return errno == ENOENT ? -ENOENT : ft__err_local(errno); /* a shortage as itself */
	for (;;) {
		ssize_t n = have < cap - 1 ? read(fd, buf + have, cap - 1 - have) : read(fd, &extra, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ft__fd_close(fd);
			return -FT_EIO;
		}
		if (n == 0)
			break;
		if (have == cap - 1) {
			*cut = true;
			break;
		}
		have += (size_t)n;
	}
	ft__fd_close(fd);
	buf[have] = '\0';
	return (int)have;
}
