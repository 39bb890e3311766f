/* ckpt_read.c: the checkpoint reader: journal parsing, block copies, verification (restore, ftcc-ckpt, tests). */
/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "bigmem.h"
#include "crc32c.h"
#include "fdreg.h"
#include "internal.h"

#define JOURNAL_MAX ((uint64_t)1 << 34) /* a larger journal is refused, not read */

int ft__ckpt_path(char *out, size_t cap, const char *dir, int rank, int region, int slot)
{
	int n = region < 0 ? snprintf(out, cap, "%s/ck-r%d.jnl", dir, rank)
			   : snprintf(out, cap, "%s/ck-r%d-g%d-%c.dat", dir, rank, region,
				      slot ? 'b' : 'a');
	return n < 0 || (size_t)n >= cap ? -FT_EINVAL : 0;
}

size_t ft__ckpt_mem_bytes(const struct ft__ckpt_image *img, size_t reg)
{
	size_t n = img->mem_n == SIZE_MAX ? (size_t)img->regs[reg].nblocks + 1 : img->mem_n;

	return n * (FT__CKPT_HDR + (size_t)img->head.block_bytes);
}

void ft__ckpt_image_free(struct ft__ckpt_image *img)
{
	if (img == NULL)
		return;
	if (img->fd != NULL && img->own_fds)
		for (size_t i = 0; i < img->nregs; i++)
			for (int s = 0; s < 2; s++)
				if (img->fd[i][s] >= 0)
					ft__fd_close(img->fd[i][s]);
	free(img->fd);
	if (img->mem != NULL && img->own_mem)
		for (size_t i = 0; i < img->nregs; i++) {
			/* (ft__big_alloc'd at ft__ckpt_mem_bytes: a holder's slots, a fetch's range) */
			size_t len = ft__ckpt_mem_bytes(img, i);
			ft__big_free(img->mem[i][0], len);
			if (img->mem[i][1] != img->mem[i][0])
				ft__big_free(img->mem[i][1], len);
		}
	free(img->mem);
	free(img->sunk_slot);
	free(img->sunk_why);
	free(img->regs);
	free(img->first);
	free(img->tab);
	free(img->resid);
	memset(img, 0, sizeof(*img));
}

static uint32_t rec_crc(const void *buf, size_t len)
{
	struct ft__ckpt_jrec h;
	uint32_t crc;

	memcpy(&h, buf, sizeof(h));
	h.crc = 0;
	crc = ft__crc32c(0, &h, sizeof(h));
	return ft__crc32c(crc, (const char *)buf + sizeof(h), len - sizeof(h));
}

/* The HEAD record at buf (len bytes): fills img's geometry. */
static int parse_head(const char *buf, size_t len, struct ft__ckpt_image *img, const char **why)
{
	struct ft__ckpt_jrec h;
	struct ft__ckpt_jhead hd;
	uint64_t total = 0;

	if (len < sizeof(h)) {
		*why = "no HEAD record";
		return -FT_ECORRUPT;
	}
	memcpy(&h, buf, sizeof(h));
	if (h.magic != FT__CKPT_JMAGIC || h.version != FT__CKPT_VERSION || h.type != FT__CKPT_JHEAD ||
	    h.count > FT__STATE_MAX_REGIONS ||
	    h.len != sizeof(h) + sizeof(hd) + h.count * sizeof(struct ft__ckpt_jregion) || h.len > len ||
	    rec_crc(buf, h.len) != h.crc) {
		*why = "bad HEAD record";
		return -FT_ECORRUPT;
	}
	memcpy(&hd, buf + sizeof(h), sizeof(hd));
	if (hd.block_bytes == 0 || hd.block_bytes > ((uint64_t)1 << 30) || hd.rank < 0 ||
	    hd.world_size <= 0 || hd.rank >= hd.world_size) {
		*why = "HEAD: bad geometry";
		return -FT_ECORRUPT;
	}
	img->head = hd;
	img->nregs = (size_t)h.count;
	img->regs = calloc(img->nregs + 1, sizeof(*img->regs));
	img->first = calloc(img->nregs + 1, sizeof(*img->first));
	if (img->regs == NULL || img->first == NULL)
		return -FT_ENOMEM;
	memcpy(img->regs, buf + sizeof(h) + sizeof(hd), img->nregs * sizeof(*img->regs));
	for (size_t i = 0; i < img->nregs; i++) {
		struct ft__ckpt_jregion *r = &img->regs[i];
		size_t es = ft_dtype_size((enum ft_dtype)r->dtype);
		if (es == 0 || r->index >= FT__STATE_MAX_REGIONS ||
		    (i > 0 && r->index <= img->regs[i - 1].index) || hd.block_bytes % es != 0 ||
		    r->bytes > ((uint64_t)1 << 60) ||
		    r->nblocks != (r->bytes + hd.block_bytes - 1) / hd.block_bytes ||
		    r->nblocks > FT__CKPT_MAX_BLOCKS - total) {
			*why = "HEAD: bad region";
			return -FT_ECORRUPT;
		}
		img->first[i] = (size_t)total;
		total += r->nblocks;
	}
	img->first[img->nregs] = (size_t)total;
	img->nblocks = (size_t)total;
	img->tab = calloc(img->nblocks + 1, sizeof(*img->tab));
	if (img->tab == NULL)
		return -FT_ENOMEM;
	img->valid_bytes = h.len;
	return 0;
}

static int parse_records(const char *buf, size_t len, size_t pos, struct ft__ckpt_image *img);

int ft__ckpt_parse(const void *vbuf, size_t len, struct ft__ckpt_image *img)
{
	const char *buf = vbuf, *why = NULL;
	int rc;

	memset(img, 0, sizeof(*img));
	img->file_bytes = len;
	rc = parse_head(buf, len, img, &why);
	if (rc < 0) {
		img->tail_why = why;
		if (rc == -FT_ECORRUPT) {
			free(img->regs);
			free(img->first);
			free(img->tab);
			img->regs = NULL;
			img->first = NULL;
			img->tab = NULL;
		}
		return rc;
	}
	return parse_records(buf, len, (size_t)img->valid_bytes, img);
}

int ft__ckpt_parse_more(struct ft__ckpt_image *img, const void *buf, size_t len)
{
	if (img->regs == NULL)
		return -FT_EINVAL;
	return parse_records(buf, len, 0, img);
}

/* The records of buf from pos on, applied to img (its HEAD parsed). */
static int parse_records(const char *buf, size_t len, size_t pos, struct ft__ckpt_image *img)
{
	const char *why = NULL;

	while (pos < len) {
		struct ft__ckpt_jrec h;
		size_t left = len - pos, ent, body;
		const char *p = buf + pos;

		if (left < sizeof(h)) {
			why = "torn record";
			break;
		}
		memcpy(&h, p, sizeof(h));
		ent = h.type == FT__CKPT_JCOMMIT ? sizeof(struct ft__ckpt_jentry) : sizeof(struct ft__ckpt_jsnap);
		if (h.magic != FT__CKPT_JMAGIC || h.version != FT__CKPT_VERSION ||
		    (h.type != FT__CKPT_JCOMMIT && h.type != FT__CKPT_JSNAP)) {
			why = "bad record head";
			break;
		}
		if ((h.nres != 0 && h.nres != img->nblocks) || h.count > img->nblocks ||
		    (h.type == FT__CKPT_JSNAP && h.count != img->nblocks)) {
			why = "record counts out of bounds";
			break;
		}
		body = (size_t)h.count * ent + (((size_t)h.nres * sizeof(float) + 7) & ~(size_t)7);
		if (h.len != sizeof(h) + body || h.len > left) {
			why = h.len > left ? "torn record" : "bad record length";
			break;
		}
		if (rec_crc(p, h.len) != h.crc) {
			why = "record CRC";
			break;
		}
		if (h.round <= img->last_round || h.round == 0 || h.step < img->last_step) {
			why = "rounds out of order";
			break;
		}
		if (h.type == FT__CKPT_JCOMMIT) {
			const char *e = p + sizeof(h);
			bool ok = true;
			for (size_t i = 0; i < h.count && ok; i++) {
				struct ft__ckpt_jentry en;
				memcpy(&en, e + i * sizeof(en), sizeof(en));
				ok = en.region < img->nregs && en.slot < 2 &&
				     en.block < img->regs[en.region].nblocks;
			}
			if (!ok) {
				why = "COMMIT names a block outside the geometry";
				break;
			}
			for (size_t i = 0; i < h.count; i++) {
				struct ft__ckpt_jentry en;
				memcpy(&en, e + i * sizeof(en), sizeof(en));
				struct ft__ckpt_jsnap *t = &img->tab[img->first[en.region] + en.block];
				t->round[en.slot] = h.round;
				t->step[en.slot] = h.step;
			}
			img->commits++;
		} else {
			memcpy(img->tab, p + sizeof(h), img->nblocks * sizeof(*img->tab));
			for (size_t b = 0; b < img->nblocks; b++)
				for (int s = 0; s < 2; s++)
					if (img->tab[b].round[s] > h.round) {
						img->tab[b].round[s] = 0; /* cannot be: never believed */
						why = why ? why : "SNAP names later rounds";
					}
		}
		if (h.nres != 0) {
			if (img->resid == NULL &&
			    (img->resid = malloc(img->nblocks * sizeof(float) + 1)) == NULL)
				return -FT_ENOMEM;
			memcpy(img->resid, p + sizeof(h) + (size_t)h.count * ent,
			       img->nblocks * sizeof(float));
		}
		img->last_round = h.round;
		img->last_step = h.step;
		pos += h.len;
		img->valid_bytes += h.len;
	}
	img->tail_why = pos < len ? why : NULL;
	return pos < len ? -FT_ECORRUPT : 0;
}

int ft__ckpt_image_open(const char *dir, int rank, struct ft__ckpt_image *img)
{
	char path[PATH_MAX];
	struct stat st;
	char *buf = NULL;
	size_t got = 0;
	int fd, rc;

	memset(img, 0, sizeof(*img));
	if ((rc = ft__ckpt_path(path, sizeof(path), dir, rank, -1, 0)) < 0)
		return rc;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	ft__fd_own(fd);
	if (fd < 0)
		return ft__err_local(errno);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > JOURNAL_MAX) {
		ft__fd_close(fd);
		return -FT_ECORRUPT;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (buf == NULL) {
		ft__fd_close(fd);
		return -FT_ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	ft__fd_close(fd);
	rc = ft__ckpt_parse(buf, got, img);
	free(buf);
	if (img->regs == NULL)
		return rc;
	img->fd = malloc((img->nregs + 1) * sizeof(*img->fd));
	if (img->fd == NULL) {
		ft__ckpt_image_free(img);
		return -FT_ENOMEM;
	}
	img->own_fds = true;
	for (size_t i = 0; i < img->nregs; i++)
		for (int s = 0; s < 2; s++) {
			img->fd[i][s] = -1;
			if (ft__ckpt_path(path, sizeof(path), dir, rank, (int)img->regs[i].index,
					s) == 0) {
				img->fd[i][s] = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
				ft__fd_own(img->fd[i][s]);
			}
		}
	return rc;
}

/* Reads and checks the copy of block in slot s; 0 or -FT_ECORRUPT with why. */
static int read_copy(const struct ft__ckpt_image *img, size_t reg, size_t block, int s, void *dst,
		     const char **why)
{
	const struct ft__ckpt_jregion *r = &img->regs[reg];
	const struct ft__ckpt_jsnap *t = &img->tab[img->first[reg] + block];
	uint64_t bb = img->head.block_bytes, off = block * (FT__CKPT_HDR + bb);
	size_t len = (size_t)(block + 1 < r->nblocks ? bb : r->bytes - block * bb);
	struct ft__ckpt_copy h;
	const unsigned char *data = dst;
	size_t got = 0;

	if (t->round[s] == 0) {
		*why = "no committed copy";
		return -FT_ECORRUPT;
	}
	if (img->mem != NULL) {
		/* checked where it lies; copied out once it checks */
		const unsigned char *src = img->mem[reg][s];
		if (src == NULL || block < img->mem_first || block - img->mem_first >= img->mem_n) {
			*why = "no copy in memory";
			return -FT_ECORRUPT;
		}
		src += (block - img->mem_first) * (FT__CKPT_HDR + bb);
		memcpy(&h, src, sizeof(h));
		data = src + FT__CKPT_HDR;
		got = sizeof(h) + len;
	} else if (img->fd == NULL || img->fd[reg][s] < 0) {
		*why = "slot file missing";
		return -FT_ECORRUPT;
	}
	while (got < sizeof(h) + len) {
		ssize_t n;
		if (got < sizeof(h))
			n = pread(img->fd[reg][s], (char *)&h + got, sizeof(h) - got, (off_t)(off + got));
		else
			n = pread(img->fd[reg][s], (char *)dst + (got - sizeof(h)),
				  sizeof(h) + len - got, (off_t)(off + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			*why = n == 0 ? "torn copy (file too short)" : "read error";
			return -FT_ECORRUPT;
		}
		got += (size_t)n;
	}
	if (ft__ckpt_check_copy(img, reg, block, s, &h, data, why) != 0)
		return -FT_ECORRUPT;
	if (data != dst)
		memcpy(dst, data, len);
	return 0;
}

int ft__ckpt_check_copy(const struct ft__ckpt_image *img, size_t reg, size_t block, int s,
			const struct ft__ckpt_copy *hp, const void *data, const char **why)
{
	const struct ft__ckpt_jregion *r = &img->regs[reg];
	const struct ft__ckpt_jsnap *t = &img->tab[img->first[reg] + block];
	uint64_t bb = img->head.block_bytes;
	size_t len = (size_t)(block + 1 < r->nblocks ? bb : r->bytes - block * bb);
	struct ft__ckpt_copy h = *hp;
	uint32_t crc;

	if (s < 0 || s > 1 || t->round[s] == 0) {
		*why = "no committed copy";
		return -FT_ECORRUPT;
	}
	if (h.magic != FT__CKPT_MAGIC || h.version != FT__CKPT_VERSION) {
		*why = "bad copy head";
		return -FT_ECORRUPT;
	}
	if (h.round != t->round[s] || h.step != t->step[s]) {
		*why = "copy of another round (overwritten by a later write)";
		return -FT_ECORRUPT;
	}
	if (h.region != r->index || h.block != block || h.len != len || h.slot != (uint16_t)s ||
	    h.rank != img->head.rank || h.job_hash != img->head.job_hash) {
		*why = "copy head names another block";
		return -FT_ECORRUPT;
	}
	crc = h.crc;
	h.crc = 0;
	if (ft__crc32c(ft__crc32c(0, &h, sizeof(h)), data, len) != crc) {
		*why = "CRC mismatch (torn or flipped)";
		return -FT_ECORRUPT;
	}
	return 0;
}

int ft__ckpt_read_block(const struct ft__ckpt_image *img, size_t reg, size_t block, void *dst,
		      uint64_t *round, uint64_t *step, int *slot, char *why, size_t whylen)
{
	const struct ft__ckpt_jsnap *t;
	const char *w[2] = {"", ""};
	int order[2];

	if (reg >= img->nregs || block >= img->regs[reg].nblocks)
		return -FT_EINVAL;
	t = &img->tab[img->first[reg] + block];
	if (img->sunk_slot != NULL) {
		/* checked as it came, and in the caller's buffer already */
		size_t k = block - img->mem_first;
		bool in = reg == img->sunk_reg && block >= img->mem_first && k < img->mem_n;
		int s = in ? img->sunk_slot[k] : -1;
		if (s < 0) {
			if (why != NULL)
				snprintf(why, whylen, "%s",
					 in && img->sunk_why[k] != NULL ? img->sunk_why[k] : "not fetched");
			return -FT_ECORRUPT;
		}
		*round = t->round[s];
		*step = t->step[s];
		*slot = s;
		return 0;
	}
	order[0] = t->round[1] > t->round[0];
	order[1] = !order[0];
	for (int i = 0; i < 2; i++) {
		int s = order[i];
		if (read_copy(img, reg, block, s, dst, &w[s]) == 0) {
			*round = t->round[s];
			*step = t->step[s];
			*slot = s;
			return 0;
		}
	}
	if (why != NULL)
		snprintf(why, whylen, "slot a: %s; slot b: %s", w[0], w[1]);
	return -FT_ECORRUPT;
}

static int by_round_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x > y ? -1 : x < y;
}

static const char *dtype_name(uint32_t d)
{
	static const char *const names[] = {"float32", "float64", "float16", "bfloat16",
					     "int32",   "int64",   "uint8"};
	return d < FT__ARRAY_SIZE(names) ? names[d] : "?";
}

int ft__ckpt_verify(const char *dir, int rank, void *vout, bool verbose)
{
	FILE *out = vout;
	struct ft__ckpt_image img;
	int rc = ft__ckpt_image_open(dir, rank, &img), bad = 0;
	size_t maxlen;
	char *buf;

	if (img.regs == NULL) {
		if (out != NULL)
			fprintf(out, "rank %d: %s\n", rank,
				rc == -FT_EIO ? "no checkpoint journal" : img.tail_why ? img.tail_why
										     : ft_strerror(rc));
		return rc == 0 ? -FT_ECORRUPT : rc;
	}
	if (out != NULL) {
		fprintf(out, "rank %d: job %016llx, block %llu bytes, %zu regions, %zu blocks; "
			"%llu commits, last round %llu at step %llu; journal %llu of %llu bytes valid\n",
			rank, (unsigned long long)img.head.job_hash,
			(unsigned long long)img.head.block_bytes, img.nregs, img.nblocks,
			(unsigned long long)img.commits, (unsigned long long)img.last_round,
			(unsigned long long)img.last_step, (unsigned long long)img.valid_bytes,
			(unsigned long long)img.file_bytes);
		if (img.tail_why != NULL)
			fprintf(out, "  journal tail: %s (an uncommitted round, or damage)\n",
				img.tail_why);
	}
	/* a bad tail no longer than one COMMIT is a round a crash (or a live
	 * writer) left uncommitted; more than that hides committed rounds */
	if (rc == -FT_ECORRUPT &&
	    img.file_bytes - img.valid_bytes > sizeof(struct ft__ckpt_jrec) + 8 +
						   img.nblocks * (sizeof(struct ft__ckpt_jentry) + sizeof(float))) {
		bad = 1;
		if (out != NULL)
			fprintf(out, "  BAD journal: %llu bytes past the last good record\n",
				(unsigned long long)(img.file_bytes - img.valid_bytes));
	}
	if (out != NULL && img.nblocks > 0) {
		/* which rounds the newest copies come from: the checkpoint's age profile */
		uint64_t *r = malloc(img.nblocks * sizeof(*r));
		if (r != NULL) {
			size_t shown = 0;
			for (size_t b = 0; b < img.nblocks; b++)
				r[b] = img.tab[b].round[img.tab[b].round[1] > img.tab[b].round[0]];
			qsort(r, img.nblocks, sizeof(*r), by_round_desc);
			fprintf(out, "  newest copies by round:");
			for (size_t b = 0; b < img.nblocks && shown < 12;) {
				size_t e = b;
				while (e < img.nblocks && r[e] == r[b])
					e++;
				if (r[b] == 0)
					fprintf(out, " never saved x%zu", e - b);
				else
					fprintf(out, " %llu x%zu", (unsigned long long)r[b], e - b);
				shown++;
				b = e;
			}
			fprintf(out, "%s\n", shown == 12 ? " ..." : "");
			free(r);
		}
	}
	maxlen = (size_t)img.head.block_bytes;
	buf = malloc(maxlen ? maxlen : 1);
	if (buf == NULL) {
		ft__ckpt_image_free(&img);
		return -FT_ENOMEM;
	}
	for (size_t i = 0; i < img.nregs; i++) {
		if (out != NULL)
			fprintf(out, "  region %u: %llu bytes, %llu blocks, %s\n", img.regs[i].index,
				(unsigned long long)img.regs[i].bytes,
				(unsigned long long)img.regs[i].nblocks,
				dtype_name(img.regs[i].dtype));
		for (size_t b = 0; b < img.regs[i].nblocks; b++) {
			const struct ft__ckpt_jsnap *t = &img.tab[img.first[i] + b];
			int newest = t->round[1] > t->round[0];
			const char *why[2] = {NULL, NULL};
			int r[2] = {0, 0};
			for (int s = 0; s < 2; s++)
				if (t->round[s] != 0)
					r[s] = read_copy(&img, i, b, s, buf, &why[s]);
			/* a failure of the newest committed copy is damage to a
			 * committed round; the older copy may be mid-overwrite */
			if (r[newest] != 0)
				bad = 1;
			for (int s = 0; s < 2 && out != NULL; s++) {
				if (t->round[s] == 0 || (r[s] == 0 && !verbose) ||
				    (s != newest && r[s] != 0 && r[newest] == 0 && !verbose))
					continue;
				fprintf(out, "  %s region %u block %zu slot %c (round %llu step %llu): %s\n",
					r[s] == 0 ? "ok " : s == newest ? "BAD" : "old",
					img.regs[i].index, b, s ? 'b' : 'a',
					(unsigned long long)t->round[s], (unsigned long long)t->step[s],
					r[s] == 0 ? "checks" : s == newest ? why[s] :
					"older copy unusable (overwritten by a later write, or damaged)");
			}
			if (t->round[0] == 0 && t->round[1] == 0 && verbose && out != NULL)
				fprintf(out, "  --- region %u block %zu: never saved\n", img.regs[i].index, b);
		}
	}
	free(buf);
	ft__ckpt_image_free(&img);
	return bad ? -FT_ECORRUPT : 0;
}
