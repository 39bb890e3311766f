/* ckpt_format.c: the checkpoint's records built: journal records sealed, a journal of an image (HEAD, SNAP), block copy heads (format: ckpt.h). */
/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "crc32c.h"

void ft__ckpt_rec_seal(void *buf, size_t len)
{
	struct ft__ckpt_jrec h;
	uint32_t crc;

	memcpy(&h, buf, sizeof(h));
	h.crc = 0;
	crc = ft__crc32c(0, &h, sizeof(h));
	h.crc = ft__crc32c(crc, (const char *)buf + sizeof(h), len - sizeof(h));
	memcpy(buf, &h, sizeof(h));
}

struct ft__ckpt_jrec ft__ckpt_rec_head(int type, size_t len, uint64_t round, uint64_t step,
				       uint64_t count, uint64_t nres)
{
	struct ft__ckpt_jrec h;

	memset(&h, 0, sizeof(h));
	h.magic = FT__CKPT_JMAGIC;
	h.version = FT__CKPT_VERSION;
	h.type = (uint16_t)type;
	h.len = (uint32_t)len;
	h.round = round;
	h.step = step;
	h.count = count;
	h.nres = nres;
	return h;
}

/* HEAD, then (snap) a SNAP of the committed table: a whole journal of img. */
int ft__ckpt_build_journal(const struct ft__ckpt_image *img, bool snap, char **out, size_t *len)
{
	size_t hl = sizeof(struct ft__ckpt_jrec) + sizeof(struct ft__ckpt_jhead) +
		    img->nregs * sizeof(struct ft__ckpt_jregion);
	size_t res = img->resid != NULL ? img->nblocks : 0;
	size_t sl = snap ? sizeof(struct ft__ckpt_jrec) + img->nblocks * sizeof(struct ft__ckpt_jsnap) +
				   ((res * sizeof(float) + 7) & ~(size_t)7)
			 : 0;
	char *buf = calloc(1, hl + sl);
	struct ft__ckpt_jrec h;

	if (buf == NULL || hl + sl > UINT32_MAX) {
		free(buf);
		return -FT_ENOMEM;
	}
	h = ft__ckpt_rec_head(FT__CKPT_JHEAD, hl, 0, 0, img->nregs, 0);
	memcpy(buf, &h, sizeof(h));
	memcpy(buf + sizeof(h), &img->head, sizeof(img->head));
	memcpy(buf + sizeof(h) + sizeof(img->head), img->regs,
	       img->nregs * sizeof(struct ft__ckpt_jregion));
	ft__ckpt_rec_seal(buf, hl);
	if (snap) {
		char *p = buf + hl;
		h = ft__ckpt_rec_head(FT__CKPT_JSNAP, sl, img->last_round, img->last_step, img->nblocks, res);
		memcpy(p, &h, sizeof(h));
		memcpy(p + sizeof(h), img->tab, img->nblocks * sizeof(struct ft__ckpt_jsnap));
		if (res)
			memcpy(p + sizeof(h) + img->nblocks * sizeof(struct ft__ckpt_jsnap), img->resid,
			       res * sizeof(float));
		ft__ckpt_rec_seal(p, sl);
	}
	*out = buf;
	*len = hl + sl;
	return 0;
}

void ft__ckpt_copy_seal(struct ft__ckpt_copy *h, const struct ft__ckpt_copy *what, const void *data)
{
	*h = *what;
	h->magic = FT__CKPT_MAGIC;
	h->version = FT__CKPT_VERSION;
	h->pad[0] = h->pad[1] = 0;
	h->crc = 0;
	h->crc = ft__crc32c(ft__crc32c(0, h, sizeof(*h)), data, h->len);
}
