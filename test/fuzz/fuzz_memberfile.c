/* fuzz_memberfile.c: feeds arbitrary bytes to the file rendezvous's readers (lib/membership/member_file.c): view files, member files, left- markers. */
/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ftcc.h"
#include "membership.h"

#define FUZZ_NAME "fuzz_memberfile"
#include "fuzz_main.h"

#define ORIG 1

static char dir[64];
static pid_t owner;             /* made dir: afl's forked runs must not remove it */
static char paths[3][128];     /* view, member, left marker */

static void cleanup(void)
{
	char gen[96];

	if (getpid() != owner)
		return;
	snprintf(gen, sizeof(gen), "%s/gen-0", dir);
	rmdir(gen);
	rmdir(dir);
}

static void fuzz_init(void)
{
	char gen[96];
	/* tmpfs when there is one: a file a run */
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";

	snprintf(dir, sizeof(dir), "%s/fuzz_mbf.XXXXXX", base);
	if (mkdtemp(dir) == NULL)
		abort();
	snprintf(gen, sizeof(gen), "%s/gen-0", dir);
	if (mkdir(gen, 0700) != 0)
		abort();
	snprintf(paths[0], sizeof(paths[0]), "%s/view", gen);
	snprintf(paths[1], sizeof(paths[1]), "%s/member-%d", gen, ORIG);
	snprintf(paths[2], sizeof(paths[2]), "%s/left-%d", dir, ORIG);
	owner = getpid();
	atexit(cleanup);
}

static bool printable(const char *s, size_t cap)
{
	size_t n = strnlen(s, cap);

	if (n == cap)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] <= ' ' || s[i] > '~')
			return false;
	return true;
}

/*
 * Byte 0: which file the rest is (bits 0..1 modulo 3: the view, rank 1's member file,
 * its left- marker) and (bits 2..5) the world size - 1. The file sits in
 * generation 0's directory, the others are absent.
 */
static void fuzz_one(const unsigned char *buf, size_t len)
{
	struct ft__view v = {0};
	struct ft__member m;
	int which, world, fd, rc, mrc, lrc;

	if (len < 1)
		return;
	which = (buf[0] & 3) % 3;
	world = 2 + ((buf[0] >> 2) & 15);
	fd = open(paths[which], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, buf + 1, len - 1) != (ssize_t)(len - 1))
		abort();
	close(fd);
	rc = ft__mbf_fuzz_read(dir, world, 0, ORIG, &v, &m, &mrc, &lrc);
	unlink(paths[which]);
	/* a view read is one that keeps the view contract; a member's fields are text */
	if (rc < 0 ? rc != -FT_ECORRUPT && rc != -FT_ENOMEM
		   : rc > 1 || (rc == 1 && (ft__view_check(&v, world) != 0 || v.generation != 0)))
		abort();
	if (rc != 1 && v.members != NULL)
		abort();
	ft__view_free(&v);
	if (mrc < 0 && mrc != -FT_ECORRUPT && mrc != -FT_EIO)
		abort();
	if (mrc > 0 && mrc <= 2 && (!printable(m.addr, sizeof(m.addr)) || m.pid < 1 ||
				    (m.ctrl[0] != '\0' && !printable(m.ctrl, sizeof(m.ctrl)))))
		abort();
	if (lrc < -1 || lrc > 1)
		abort();
}
