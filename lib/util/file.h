/* file.h: per-user directories the library makes in shared places (/tmp, /dev/shm), checked private; the one mkdir -p, the one whole write, the one directory sync. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_FILE_H
#define FTCC_FILE_H

#include <stddef.h>
#include <stdint.h>

/* What else ft__dir_private refuses: group or other access of any kind,
 * not only write (a directory of gradient logs). */
#define FT__DIR_UNREADABLE 1u

/*
 * Makes dir (mode 0700) if it is absent, then accepts it only if it is a
 * directory itself (not a symbolic link to one), owned by this effective
 * user, and neither group- nor other-writable (with FT__DIR_UNREADABLE:
 * no group or other permission at all). Its parent must exist. A
 * predictable name in a world-writable place could otherwise be made by
 * another user first: a symbolic link sending our files elsewhere, or a
 * directory where that user writes views or reads logs. 0, or -FT_EACCES
 * with an error naming the path and what is wrong with it (-FT_EIO when
 * it can be neither made nor examined).
 */
int ft__dir_private(const char *dir, unsigned flags);

/* Makes dir and its missing parents (mode 0700). 0, -FT_EINVAL for an empty
 * or too long path, or -errno (callers map it at the API: ft__errno). */
int ft__mkdir_p(const char *dir);

/* Writes all len bytes of buf at offset off of fd (pwrite may be cut
 * short or interrupted). 0, -errno, or -FT_EIO when nothing was written. */
int ft__write_all(int fd, const void *buf, size_t len, uint64_t off);

/* Syncs directory dir, so that the names renamed into it are on disk.
 * Best effort: a directory that cannot be opened is left as it is. */
void ft__fsync_dir(const char *dir);

#endif
