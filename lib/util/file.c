/* file.c: the check that a per-user directory in a shared place is this user's alone. */
/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdreg.h"
#include "file.h"
#include "internal.h"

int ft__dir_private(const char *dir, unsigned flags)
{
	mode_t forbidden = flags & FT__DIR_UNREADABLE ? 0077 : 0022;
	struct stat st;

	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		ft__error("%s: cannot create the directory: %s", dir, strerror(errno));
		return ft__err_local(errno);
	}
	/* lstat: the name itself, which is what another user could have planted */
	if (lstat(dir, &st) != 0) {
		ft__error("%s: cannot examine the directory: %s", dir, strerror(errno));
		return -FT_EIO;
	}
	if (S_ISLNK(st.st_mode)) {
		ft__error("%s: refused: a symbolic link, not a directory of this user's "
			  "(remove it)", dir);
		return -FT_EACCES;
	}
	if (!S_ISDIR(st.st_mode)) {
		ft__error("%s: refused: not a directory (remove it)", dir);
		return -FT_EACCES;
	}
	if (st.st_uid != geteuid()) {
		ft__error("%s: refused: owned by uid %u, not by this user (uid %u)", dir,
			  (unsigned)st.st_uid, (unsigned)geteuid());
		return -FT_EACCES;
	}
	if (st.st_mode & forbidden) {
		ft__error("%s: refused: mode %04o gives group or others %s (chmod 700 it)", dir,
			  (unsigned)(st.st_mode & 07777),
			  flags & FT__DIR_UNREADABLE ? "access" : "write access");
		return -FT_EACCES;
	}
	return 0;
}

int ft__mkdir_p(const char *dir)
{
	char path[PATH_MAX];
	size_t n = strlen(dir);

	if (n == 0 || n >= sizeof(path))
		return -FT_EINVAL;
	memcpy(path, dir, n + 1);
	for (char *p = path + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char ch = *p;
		*p = '\0';
		if (mkdir(path, 0700) < 0 && errno != EEXIST)
			return -errno;
		*p = ch;
		if (ch == '\0')
			break;
	}
	return 0;
}

void ft__fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	ft__fd_own(fd);
	if (fd >= 0) {
		(void)fsync(fd);
		ft__fd_close(fd);
	}
}

/* Whole buffers at an offset (file.h). */
int ft__write_all(int fd, const void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(fd, (const char *)buf + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -FT_EIO;
		done += (size_t)n;
	}
	return 0;
}
