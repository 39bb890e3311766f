/* file.c: the check that a per-user directory in a shared place is this user's alone. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "internal.h"

int ft__dir_private(const char *dir, unsigned flags)
{
	mode_t forbidden = flags & FT__DIR_UNREADABLE ? 0077 : 0022;
	struct stat st;

	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		ft__error("%s: cannot create the directory: %s", dir, strerror(errno));
		return -FT_EIO;
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
