/* reserve.c: space held in a directory for when its file system fills (reserve.h). */
/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdreg.h"
#include "file.h"
#include "reserve.h"

#define REFILL_PERIOD_MS 1000

static void file_path(const struct ft__reserve *rs, int i, char *buf, size_t len)
{
	snprintf(buf, len, "%s/f-%d", rs->dir, i);
}

static void dir_path(const struct ft__reserve *rs, char *buf, size_t len)
{
	snprintf(buf, len, "%s/d", rs->dir);
}

/* Makes reserve file i if it is absent or short: written whole under a
 * temporary name, then renamed, so that a file named f-<i> is always whole. */
static int make_file(struct ft__reserve *rs, int i)
{
	char path[800], tmp[820], block[4096];
	struct stat st;
	size_t done = 0;
	int fd, rc = 0;

	if (rs->size[i] == 0)
		return 0; /* none held */
	file_path(rs, i, path, sizeof(path));
	if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size >= rs->size[i])
		return 0;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	(void)unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	ft__fd_own(fd);
	if (fd < 0)
		return -errno;
	/* bytes written, not a hole: a hole takes no block until written,
	 * which is exactly when there would be none */
	memset(block, ' ', sizeof(block));
	while (done < rs->size[i] && rc == 0) {
		size_t n = rs->size[i] - done < sizeof(block) ? rs->size[i] - done : sizeof(block);
		rc = ft__write_all(fd, block, n, done);
		done += n;
	}
	if (ft__fd_close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -errno;
	if (rc != 0)
		(void)unlink(tmp);
	return rc;
}

/* Makes whatever is missing; rs->lock held. */
static int fill(struct ft__reserve *rs)
{
	char path[800];
	int rc = 0;

	if (mkdir(rs->dir, 0700) != 0 && errno != EEXIST)
		return -errno;
	for (int i = 0; i < rs->nfiles && rc == 0; i++)
		rc = make_file(rs, i);
	dir_path(rs, path, sizeof(path));
	if (rc == 0 && rs->with_dir && mkdir(path, 0700) != 0 && errno != EEXIST)
		rc = -errno;
	rs->whole = rc == 0;
	return rc;
}

int ft__reserve_init(struct ft__reserve *rs, const char *dir, const size_t *size, int nfiles,
		     bool with_dir)
{
	int rc;

	memset(rs, 0, sizeof(*rs));
	if (nfiles < 0 || nfiles > FT__RESERVE_FILES ||
	    snprintf(rs->dir, sizeof(rs->dir), "%s", dir) >= (int)sizeof(rs->dir)) {
		rs->dir[0] = '\0';
		return -EINVAL;
	}
	pthread_mutex_init(&rs->lock, NULL);
	rs->nfiles = nfiles;
	rs->with_dir = with_dir;
	for (int i = 0; i < nfiles; i++)
		rs->size[i] = size[i];
	pthread_mutex_lock(&rs->lock);
	rc = fill(rs);
	pthread_mutex_unlock(&rs->lock);
	return rc;
}

int ft__reserve_refill(struct ft__reserve *rs)
{
	int64_t now = ft__now_ms();
	int rc = 0;

	if (rs->dir[0] == '\0')
		return -EINVAL;
	pthread_mutex_lock(&rs->lock);
	if (!rs->whole && (rs->refill_ms == 0 || now - rs->refill_ms >= REFILL_PERIOD_MS)) {
		rc = fill(rs);
		rs->refill_ms = rc == 0 ? 0 : now;
		if (rc != 0)
			ft__log_gated(FT__LOG_WARN, &rs->gate,
				      "%s: cannot set aside again the space a next recovery needs: %s "
				      "(while this lasts, a failure that needs a new file there fails "
				      "with FT_ENOSPC)", rs->dir, strerror(-rc));
	} else if (!rs->whole) {
		rc = -ENOSPC;
	}
	pthread_mutex_unlock(&rs->lock);
	return rc;
}

/* Gives reserve file i (src) back its size after a rename that failed:
 * the bytes past len written again over what is still there. */
static void restore(struct ft__reserve *rs, int i, const char *src, size_t len)
{
	char block[4096];
	int fd = open(src, O_WRONLY | O_CLOEXEC | O_NOFOLLOW), rc = 0;

	ft__fd_own(fd);
	if (fd < 0) {
		rs->whole = false;
		return;
	}
	memset(block, ' ', sizeof(block));
	for (size_t done = len; done < rs->size[i] && rc == 0;) {
		size_t n = rs->size[i] - done < sizeof(block) ? rs->size[i] - done : sizeof(block);
		rc = ft__write_all(fd, block, n, done);
		done += n;
	}
	ft__fd_close(fd);
	if (rc != 0)
		rs->whole = false; /* short: the next refill makes it again */
}

int ft__reserve_file(struct ft__reserve *rs, int i, const char *text, size_t len, const char *path,
		     bool exclusive)
{
	char src[800];
	int fd, rc = 0;

	if (rs->dir[0] == '\0' || i < 0 || i >= rs->nfiles || rs->size[i] == 0)
		return -ENOENT;
	if (len > rs->size[i])
		return -EFBIG;
	pthread_mutex_lock(&rs->lock);
	file_path(rs, i, src, sizeof(src));
	if (exclusive && access(path, F_OK) == 0) {
		rc = -EEXIST;
		goto out;
	}
	fd = open(src, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	ft__fd_own(fd);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	/* over bytes already there, then cut: no new block is needed */
	rc = ft__write_all(fd, text, len, 0);
	if (rc == 0 && ftruncate(fd, (off_t)len) != 0)
		rc = -errno;
	if (ft__fd_close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc != 0)
		goto out;
	/* exclusive: renameat2's no-replace is what link() is elsewhere (it
	 * fails when the name exists), without the inode tmpfs counts for a link */
	if (exclusive ? renameat2(AT_FDCWD, src, AT_FDCWD, path, RENAME_NOREPLACE) != 0
		      : rename(src, path) != 0) {
		rc = -errno;
		restore(rs, i, src, len);
	} else {
		rs->whole = false;
	}
out:
	pthread_mutex_unlock(&rs->lock);
	return rc;
}

int ft__reserve_dir(struct ft__reserve *rs, const char *path)
{
	char src[800];
	int rc = 0;

	if (rs->dir[0] == '\0' || !rs->with_dir)
		return -ENOENT;
	pthread_mutex_lock(&rs->lock);
	dir_path(rs, src, sizeof(src));
	if (renameat2(AT_FDCWD, src, AT_FDCWD, path, RENAME_NOREPLACE) != 0) {
		rc = -errno;
		/* a file system without no-replace: a plain rename replaces
		 * only an empty directory, which is as good as ours */
		if (rc == -EINVAL && rename(src, path) == 0)
			rc = 0;
		else if (rc == -ENOTEMPTY)
			rc = -EEXIST;
	}
	if (rc == 0)
		rs->whole = false;
	pthread_mutex_unlock(&rs->lock);
	return rc;
}

void ft__reserve_drop(struct ft__reserve *rs)
{
	char path[820];

	if (rs->dir[0] == '\0')
		return;
	for (int i = 0; i < rs->nfiles; i++) {
		file_path(rs, i, path, sizeof(path));
		(void)unlink(path);
		snprintf(path + strlen(path), sizeof(path) - strlen(path), ".tmp");
		(void)unlink(path);
	}
	dir_path(rs, path, sizeof(path));
	(void)rmdir(path);
	(void)rmdir(rs->dir);
	pthread_mutex_destroy(&rs->lock);
	rs->dir[0] = '\0';
}
