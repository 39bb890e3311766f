/* reserve.h: space held in a directory for when its file system fills: pre-made files and a directory, renamed into place. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_RESERVE_H
#define FTCC_RESERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/*
 * A reserve is a directory of this process's (dir) that holds nfiles files
 * f-<i>, each of size[i] bytes really written (none for a size of 0) (their blocks or pages and
 * their inodes are taken now, not hoped for later), and, with_dir, an
 * empty directory d. When the file system is full (ENOSPC, EDQUOT), a file
 * whose text fits is written over f-<i> in place (no new block: the pages
 * are there; no new inode) and renamed to its name; a directory is d
 * renamed. A rename takes no inode, unlike link(), which tmpfs counts as
 * one. What was used is made again by ft__reserve_refill when there is
 * room. A file system that writes a copy of every block it overwrites
 * (btrfs, ZFS) may still refuse an overwrite: the reserve helps where
 * blocks are overwritten in place (tmpfs, ext4, xfs).
 *
 * Threads may share a reserve: every call takes its lock.
 */
#define FT__RESERVE_FILES 4

struct ft__reserve {
	char dir[700];
	size_t size[FT__RESERVE_FILES];
	int nfiles;
	bool with_dir;
	bool whole;             /* nothing used since the last refill */
	int64_t refill_ms;      /* when a refill last failed (0: never) */
	pthread_mutex_t lock;
	struct ft__warn_gate gate; /* its refill's failures */
};

/* Makes dir (its parent must exist) and everything in it that is missing.
 * 0, or -errno of what could not be made (the reserve is then not held:
 * call ft__reserve_drop). */
int ft__reserve_init(struct ft__reserve *rs, const char *dir, const size_t *size, int nfiles,
		     bool with_dir);

/* Makes again what was used, at most once a second while that fails: 0
 * when whole, else -errno (the first refill that fails says so, gated). */
int ft__reserve_refill(struct ft__reserve *rs);

/* Writes len bytes of text as file path from reserve file i: 0; -EEXIST
 * when exclusive and path exists (the reserve file is kept); -ENOENT when
 * that file was used and not made again; -EFBIG when len exceeds its size;
 * else -errno. */
int ft__reserve_file(struct ft__reserve *rs, int i, const char *text, size_t len, const char *path,
		     bool exclusive);

/* Puts the reserve's directory at path: 0; -EEXIST when path exists (the
 * reserve keeps it); -ENOENT when it was used; else -errno. */
int ft__reserve_dir(struct ft__reserve *rs, const char *path);

/* Removes the reserve's files and directories; safe on a half-made one and
 * on one never made (zeroed). */
void ft__reserve_drop(struct ft__reserve *rs);

/* Whether rc (a -errno) says that the file system or the quota is full. */
static inline bool ft__errno_full(int rc)
{
	return rc == -ENOSPC || rc == -EDQUOT;
}

#endif
