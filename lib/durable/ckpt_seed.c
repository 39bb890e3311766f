/* ckpt_seed.c: a checkpoint beyond the run that wrote it: export (ftcc-ckpt export), and a new run's shards read from an export. */
/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "fdreg.h"
#include "file.h"
#include "internal.h"

/*
 * A running checkpoint is bound to its run: its HEAD carries the run's
 * nonce, a restarted rank continues it only when the nonce is its run's,
 * and a new run with the same job id and directory starts its own over
 * it. An export frees it: a directory in the same format (ckpt.h) holding,
 * per rank, one committed copy of each block, the newest one the source's
 * journal vouches for and whose CRC checks, in slot a, under the round and
 * step it was saved at (so a reader's checks are the usual ones), with a
 * journal of HEAD + SNAP whose HEAD says nonce 0 and interval 0: no run's
 * (a running checkpoint's interval is at least 1), so no run continues it,
 * and a run reads it only when told to (ft_ckpt_config.from). The files
 * are written under temporary names and synced; then an earlier export's
 * journal is removed, the copies renamed into place, and the journal
 * last: a crash mid-export leaves that rank's previous export whole, or
 * no journal (nothing believed), or the new export whole.
 */

static void say(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (why == NULL || len == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
}

static int sync_close(int fd)
{
	int rc = fsync(fd) < 0 ? -errno : 0;

	ft__fd_close(fd);
	return rc;
}

/* A new file at path + ".tmp", for writing (a name planted there is removed, never followed). */
static int open_tmp(const char *path, char *tmp, size_t cap)
{
	int fd;

	if ((size_t)snprintf(tmp, cap, "%s.tmp", path) >= cap)
		return -FT_EINVAL;
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	ft__fd_own(fd);
	return fd < 0 ? -errno : fd;
}

/*
 * dst may take rank's export: it is not src, and holds no journal of rank
 * or an export's (a run's running checkpoint there is never overwritten).
 */
static int dst_replaceable(const char *src, const char *dst, int rank, char *why, size_t whylen)
{
	struct ft__ckpt_image old;
	struct stat a, b;
	int rc;

	if (stat(src, &a) == 0 && stat(dst, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
		say(why, whylen, "the export would overwrite its source");
		return -FT_EINVAL;
	}
	rc = ft__ckpt_image_open(dst, rank, &old);
	if (rc == -FT_EIO) {
		ft__ckpt_image_free(&old);
		return 0;
	}
	rc = old.regs == NULL || (old.head.interval == 0 && old.head.nonce == 0) ? 0 : -FT_EINVAL;
	ft__ckpt_image_free(&old);
	if (rc < 0)
		say(why, whylen, "%s holds a run's checkpoint of rank %d: not overwritten", dst, rank);
	return rc;
}

struct exp_file {
	char path[PATH_MAX], tmp[PATH_MAX];
	int fd;
};

/* f's written file synced, closed and renamed to its name: 0 or -FT_EIO (why says). */
static int put_in_place(struct exp_file *f, char *why, size_t whylen)
{
	int rc = sync_close(f->fd);

	f->fd = -1;
	if (rc == 0 && rename(f->tmp, f->path) != 0)
		rc = -errno;
	if (rc == 0)
		return 0;
	say(why, whylen, "cannot write %s: %s", f->path, strerror(-rc));
	return -FT_EIO;
}

/* One region's slot files: a holds the copies, b is empty (the format has two). */
static int export_region(const struct ft__ckpt_image *src, size_t p, const char *dst,
			 struct exp_file f[2], struct ft__ckpt_jsnap *tab, char *buf,
			 uint64_t *bytes, uint64_t *step, char *why, size_t whylen)
{
	const struct ft__ckpt_jregion *r = &src->regs[p];
	uint64_t bb = src->head.block_bytes;
	int rc;

	for (int s = 0; s < 2; s++) {
		if ((rc = ft__ckpt_path(f[s].path, sizeof(f[s].path), dst, src->head.rank,
					(int)r->index, s)) < 0 ||
		    (rc = f[s].fd = open_tmp(f[s].path, f[s].tmp, sizeof(f[s].tmp))) < 0) {
			say(why, whylen, "cannot write %s: %s", f[s].path, ft_strerror(rc));
			return -FT_EIO;
		}
	}
	for (uint64_t b = 0; b < r->nblocks; b++) {
		struct ft__ckpt_copy h;
		uint64_t round, st;
		int slot;
		char w[160];
		size_t len = (size_t)(b + 1 < r->nblocks ? bb : r->bytes - b * bb);

		if (ft__ckpt_read_block(src, p, (size_t)b, buf, &round, &st, &slot, w, sizeof(w)) != 0) {
			say(why, whylen, "region %u block %llu has no valid copy (%s)", r->index,
			    (unsigned long long)b, w);
			return -FT_ECORRUPT;
		}
		ft__ckpt_copy_seal(&h, &(struct ft__ckpt_copy){.slot = 0, .region = r->index,
							      .len = (uint32_t)len, .block = b,
							      .round = round, .step = st,
							      .job_hash = src->head.job_hash,
							      .rank = src->head.rank},
				   buf);
		if ((rc = ft__write_all(f[0].fd, &h, sizeof(h), b * (FT__CKPT_HDR + bb))) < 0 ||
		    (rc = ft__write_all(f[0].fd, buf, len, b * (FT__CKPT_HDR + bb) + sizeof(h))) < 0) {
			say(why, whylen, "cannot write %s: %s", f[0].tmp, ft_strerror(rc));
			return -FT_EIO;
		}
		tab[src->first[p] + b] = (struct ft__ckpt_jsnap){.round = {round, 0}, .step = {st, 0}};
		*bytes += len;
		*step = st > *step ? st : *step;
	}
	return 0;
}

int ft__ckpt_export(const char *src, int rank, const char *dst, uint64_t *blocks, uint64_t *bytes,
		    uint64_t *step, char *why, size_t whylen)
{
	struct ft__ckpt_image img, out;
	struct exp_file(*f)[2] = NULL, j = {.fd = -1};
	char *buf = NULL, *jbuf = NULL;
	size_t jlen = 0, nf = 0;
	int rc;

	*blocks = *bytes = *step = 0;
	rc = ft__ckpt_image_open(src, rank, &img);
	if (img.regs == NULL || (rc != 0 && rc != -FT_ECORRUPT)) {
		/* a torn tail (ECORRUPT with a table) is an uncommitted round: exported without it */
		say(why, whylen, "%s", rc == -FT_EIO ? "no checkpoint journal"
				       : img.tail_why != NULL ? img.tail_why
							       : ft_strerror(rc));
		ft__ckpt_image_free(&img);
		return rc == 0 ? -FT_ECORRUPT : rc;
	}
	if (img.head.rank != rank) {
		say(why, whylen, "the journal of rank %d names rank %d", rank, img.head.rank);
		rc = -FT_ECORRUPT;
		goto out_img;
	}
	if ((rc = dst_replaceable(src, dst, rank, why, whylen)) < 0)
		goto out_img;
	if ((rc = ft__mkdir_p(dst)) < 0) {
		say(why, whylen, "cannot make %s: %s", dst, ft_strerror(rc));
		rc = -FT_EIO;
		goto out_img;
	}
	out = img;
	out.head.nonce = 0;
	out.head.interval = 0;
	out.tab = calloc(img.nblocks + 1, sizeof(*out.tab));
	f = calloc(img.nregs + 1, sizeof(*f));
	buf = malloc((size_t)img.head.block_bytes);
	if (out.tab == NULL || f == NULL || buf == NULL) {
		rc = -FT_ENOMEM;
		goto out_files;
	}
	for (nf = 0; nf < img.nregs; nf++) {
		f[nf][0].fd = f[nf][1].fd = -1;
		if ((rc = export_region(&img, nf, dst, f[nf], out.tab, buf, bytes, step, why,
					whylen)) < 0) {
			nf++;
			goto out_files;
		}
	}
	*blocks = img.nblocks;
	if ((rc = ft__ckpt_build_journal(&out, true, &jbuf, &jlen)) < 0 ||
	    (rc = ft__ckpt_path(j.path, sizeof(j.path), dst, rank, -1, 0)) < 0)
		goto out_files;
	if ((rc = j.fd = open_tmp(j.path, j.tmp, sizeof(j.tmp))) < 0 ||
	    (rc = ft__write_all(j.fd, jbuf, jlen, 0)) < 0) {
		say(why, whylen, "cannot write %s: %s", j.path, ft_strerror(rc));
		rc = -FT_EIO;
		goto out_files;
	}
	/* an earlier export's journal goes first (it would vouch for copies
	 * of the same rounds), then the copies, then the journal naming them */
	if (unlink(j.path) != 0 && errno != ENOENT) {
		say(why, whylen, "cannot replace %s: %s", j.path, strerror(errno));
		rc = -FT_EIO;
		goto out_files;
	}
	for (size_t i = 0; i < nf; i++)
		for (int s = 0; s < 2 && rc == 0; s++)
			rc = put_in_place(&f[i][s], why, whylen);
	if (rc == 0) {
		ft__fsync_dir(dst); /* the copies' names are on disk before the journal's */
		rc = put_in_place(&j, why, whylen);
	}
	if (rc < 0)
		goto out_files;
	ft__fsync_dir(dst);
	rc = 0;
out_files:
	for (size_t i = 0; i < nf; i++)
		for (int s = 0; s < 2; s++)
			if (f[i][s].fd >= 0) {
				ft__fd_close(f[i][s].fd);
				unlink(f[i][s].tmp);
			}
	if (j.fd >= 0) {
		ft__fd_close(j.fd);
		unlink(j.tmp);
	}
	if (rc < 0)
		*blocks = *bytes = *step = 0;
	free(jbuf);
	free(buf);
	free(f);
	free(out.tab);
out_img:
	ft__ckpt_image_free(&img);
	return rc;
}

int ft__ckpt_seed_read(const char *dir, int rank, int world_size,
		       const struct ft__ckpt_shape *shape, size_t n, char *const *bufs,
		       struct ft_restore_info *info)
{
	struct ft__ckpt_image img;
	double p2 = 0;
	int rc;

	memset(info, 0, sizeof(*info));
	rc = ft__ckpt_image_open(dir, rank, &img);
	if (img.regs == NULL || (rc != 0 && rc != -FT_ECORRUPT)) {
		ft__ckpt_image_free(&img);
		if (rc == -FT_EIO)
			ft__error("ckpt: no exported checkpoint of rank %d in %s", rank, dir);
		else
			ft__error("ckpt: the exported checkpoint of rank %d in %s does not check: %s",
				  rank, dir, img.tail_why != NULL ? img.tail_why : ft_strerror(rc));
		return rc == -FT_EIO || rc == -FT_ENOMEM ? rc : -FT_ECORRUPT;
	}
	if (img.head.interval != 0 || img.head.nonce != 0 || img.head.rank != rank ||
	    img.tail_why != NULL) {
		ft__error("ckpt: %s holds a run's running checkpoint of rank %d, not an export "
			  "(ftcc-ckpt export makes one)", dir, rank);
		rc = -FT_ECORRUPT;
		goto out;
	}
	if (img.head.world_size != world_size || img.nregs != n) {
		ft__error("ckpt: the export in %s is of %d ranks and %zu sharded regions; this run "
			  "has %d and %zu", dir, img.head.world_size, img.nregs, world_size, n);
		rc = -FT_EMISMATCH;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (img.regs[i].dtype != shape[i].dtype || img.regs[i].bytes != shape[i].bytes) {
			ft__error("ckpt: sharded region %zu of rank %d's export in %s is %llu bytes "
				  "of dtype %u; this run registered %zu of dtype %u", i, rank, dir,
				  (unsigned long long)img.regs[i].bytes, img.regs[i].dtype,
				  shape[i].bytes, shape[i].dtype);
			rc = -FT_EMISMATCH;
			goto out;
		}
	info->oldest_step = UINT64_MAX;
	for (size_t i = 0; i < n; i++) {
		const struct ft__ckpt_jregion *r = &img.regs[i];
		size_t bb = (size_t)img.head.block_bytes;
		for (size_t b = 0; b < r->nblocks; b++) {
			size_t len = (size_t)(b + 1 < r->nblocks ? bb : r->bytes - b * bb);
			uint64_t round, step;
			int slot;
			char why[160];
			if (ft__ckpt_read_block(&img, i, b, bufs[i] + b * bb, &round, &step, &slot, why,
						sizeof(why)) != 0) {
				ft__error("ckpt: rank %d's export in %s: region %zu block %zu: %s", rank,
					  dir, i, b, why);
				rc = -FT_ECORRUPT;
				goto out;
			}
			info->blocks++;
			info->bytes += len;
			info->ckpt_step = step > info->ckpt_step ? step : info->ckpt_step;
			info->oldest_step = step < info->oldest_step ? step : info->oldest_step;
			if (img.resid != NULL) {
				double d = img.resid[img.first[i] + b];
				p2 += d * d;
			}
		}
	}
	if (info->oldest_step == UINT64_MAX)
		info->oldest_step = 0;
	info->perturbation = sqrt(p2);
	rc = 0;
out:
	ft__ckpt_image_free(&img);
	return rc;
}
