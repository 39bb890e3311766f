/* token.c: the job token when none is given: made by one rank and shared over a private channel, or refused. */
/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "bootstrap.h"
#include "file.h"
#include "internal.h"
#include "token.h"

/*
 * A token is the key of every handshake's MAC: the empty token is a key
 * anyone has. When the user gives none (FTCC_TOKEN, cfg.token), one rank
 * makes a random one and the others read it, over a channel only the job
 * can read:
 *
 * - the file rendezvous: <rendezvous>/<job>/token, 0600, in a job
 *   directory that is this user's and that no one else may write (so no
 *   one can replace the file), created under a temporary name and linked
 *   into place, so that the first rank's token is every rank's;
 * - PMIx (in-band membership under Open MPI): rank 0 puts it in the job's
 *   key-value space, every rank reads it after a fence.
 *
 * A job with neither (a hand-written peer list, a store) cannot share a
 * secret it was not given: ft_init refuses, saying how to give one, unless
 * FTCC_AUTH=none says to run unauthenticated (warned once).
 */

#define TOKEN_HEX 64 /* 32 random bytes */

static int make_hex(char *out, size_t cap)
{
	uint8_t raw[TOKEN_HEX / 2];
	int rc;

	if (cap < TOKEN_HEX + 1 || (rc = ft__auth_random(raw, sizeof(raw))) != 0)
		return -FT_EIO;
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(out + 2 * i, 3, "%02x", raw[i]);
	ft__wipe(raw, sizeof(raw));
	return 0;
}

/* Whether path is a directory of this user's that no one else may write
 * (or, for the rendezvous root, one whose sticky bit keeps others from
 * replacing what is ours in it). */
static int dir_checked(const char *path, bool root_ok_sticky)
{
	struct stat st;

	if (lstat(path, &st) != 0) {
		ft__error("token: cannot look at %s: %s", path, strerror(errno));
		return -FT_EIO;
	}
	if (!S_ISDIR(st.st_mode) ||
	    !(st.st_uid == geteuid() || (root_ok_sticky && st.st_uid == 0)) ||
	    ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 &&
	     !(root_ok_sticky && (st.st_mode & S_ISVTX) != 0))) {
		ft__error("token: %s is %s: it cannot carry a secret token (give every rank the "
			  "same FTCC_TOKEN, or use a private FTCC_RENDEZVOUS)", path,
			  !S_ISDIR(st.st_mode) ? "not a directory (a link?)"
			  : st.st_uid != geteuid() ? "another user's" : "writable by others");
		return -FT_EACCES;
	}
	return 0;
}

/* The token file of job directory dirfd: 0 (token filled), 1 when there is
 * none yet, or an error. */
static int read_token(int dirfd, const char *dir, char *token, size_t cap)
{
	char buf[TOKEN_HEX + 2];
	struct stat st;
	ssize_t n;
	int fd = openat(dirfd, "token", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0 && errno == ENOENT)
		return 1;
	if (fd < 0) {
		ft__error("token: cannot open %s/token: %s", dir, strerror(errno));
		return errno == ELOOP ? -FT_EACCES : ft__err_local(errno);
	}
	n = fstat(fd, &st) == 0 ? read(fd, buf, sizeof(buf)) : -1;
	close(fd);
	if (n < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 077) != 0) {
		ft__error("token: %s/token is not this user's private file: refused", dir);
		return -FT_EACCES;
	}
	if (n != TOKEN_HEX + 1 || buf[TOKEN_HEX] != '\n' ||
	    strspn(buf, "0123456789abcdef") != TOKEN_HEX || cap < TOKEN_HEX + 1) {
		ft__error("token: %s/token is malformed: refused", dir);
		return -FT_ECORRUPT;
	}
	memcpy(token, buf, TOKEN_HEX);
	token[TOKEN_HEX] = '\0';
	ft__wipe(buf, sizeof(buf));
	return 0;
}

/* Makes the token file unless another rank did first (link: the first wins). */
static int write_token(int dirfd, const char *dir)
{
	char tmp[64], hex[TOKEN_HEX + 2];
	int fd, rc = 0;

	snprintf(tmp, sizeof(tmp), "token.%d.tmp", (int)getpid());
	(void)unlinkat(dirfd, tmp, 0);
	if ((rc = make_hex(hex, sizeof(hex))) != 0)
		return rc;
	hex[TOKEN_HEX] = '\n';
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, hex, TOKEN_HEX + 1) != TOKEN_HEX + 1) {
		ft__error("token: cannot write %s/%s: %s", dir, tmp, strerror(errno));
		rc = ft__err_local(errno);
	}
	if (fd >= 0)
		close(fd);
	ft__wipe(hex, sizeof(hex));
	if (rc == 0 && linkat(dirfd, tmp, dirfd, "token", 0) != 0 && errno != EEXIST) {
		ft__error("token: cannot link %s/token: %s", dir, strerror(errno));
		rc = -FT_EIO;
	}
	(void)unlinkat(dirfd, tmp, 0);
	return rc;
}

static int file_token(struct ft_config *cfg)
{
	char dir[FT_PATH_MAX + FT_NAME_MAX + 2];
	int dirfd, rc;

	if (snprintf(dir, sizeof(dir), "%s/%s", cfg->rendezvous, cfg->job_id) >= (int)sizeof(dir))
		return -FT_ECONFIG;
	if ((rc = ft__mkdir_p(dir)) != 0) {
		ft__error("token: cannot make %s: %s", dir, ft_strerror(rc));
		return rc == -EACCES ? -FT_EACCES : -FT_EIO;
	}
	if ((rc = dir_checked(cfg->rendezvous, true)) != 0 || (rc = dir_checked(dir, false)) != 0)
		return rc;
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dirfd < 0)
		return ft__err_local(errno);
	rc = read_token(dirfd, dir, cfg->token, sizeof(cfg->token));
	if (rc == 1 && (rc = write_token(dirfd, dir)) == 0)
		rc = read_token(dirfd, dir, cfg->token, sizeof(cfg->token));
	close(dirfd);
	return rc == 1 ? -FT_EIO : rc;
}

int ft__token_resolve(struct ft_config *cfg)
{
	static int warned;
	struct ft__book_params p = {.job_id = cfg->job_id, .rank = cfg->rank,
				    .world_size = cfg->world_size,
				    .timeout_ms = cfg->connect_timeout_ms};
	int rc;

	if (cfg->token[0] != '\0')
		return 0;
	if (strcmp(cfg->auth, "none") == 0) {
		if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
			ft__warn("FTCC_AUTH=none: this job's links are not authenticated: anyone who "
				 "can reach its ports can take part in it");
		return 0;
	}
	if (strcmp(cfg->membership, "file") == 0)
		rc = file_token(cfg);
	else if (strcmp(cfg->bootstrap, "pmix") == 0)
		rc = ft__boot_pmix_token(&p, cfg->token, sizeof(cfg->token));
	else {
		ft__error("FTCC_TOKEN is not set, and the %s bootstrap has no private channel to "
			  "share one: give every rank the same secret in FTCC_TOKEN (or cfg.token), "
			  "or set FTCC_AUTH=none to run without authentication", cfg->bootstrap);
		return -FT_ECONFIG;
	}
	if (rc == 0)
		ft__info("token: none given: this job's was made and shared through %s",
			 strcmp(cfg->membership, "file") == 0 ? "the rendezvous" : "PMIx");
	return rc;
}
