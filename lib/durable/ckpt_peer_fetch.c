/* ckpt_peer_fetch.c: the fetcher's side of the peer checkpoint service: a holder's answer taken (its image, its copies checked into the caller's buffer or held), and read in one copy from a holder on this host. */
/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "bigmem.h"
#include "ckpt_peer_int.h"

/* Copy k of a fetch with a destination, whole: written there if it checks. */
static void sink_copy(struct pk_fetch *f, size_t k, const unsigned char *copy)
{
	const struct ft__ckpt_jregion *r = &f->img.regs[f->img.sunk_reg];
	size_t b = f->first + k, bb = (size_t)f->img.head.block_bytes;
	size_t len = b + 1 < r->nblocks ? bb : (size_t)r->bytes - b * bb;
	struct ft__ckpt_copy h;
	const char *why = NULL;

	memcpy(&h, copy, sizeof(h));
	if (ft__ckpt_check_copy(&f->img, f->img.sunk_reg, b, h.slot <= 1 ? (int)h.slot : -1, &h,
				copy + FT__CKPT_HDR, &why) != 0) {
		f->img.sunk_why[k] = why;
		return;
	}
	memcpy(f->dst + k * bb, copy + FT__CKPT_HDR, len);
	f->img.sunk_slot[k] = (int8_t)h.slot;
}

/* Bytes [got, got + len) of a fetch's copies (at their stride): each copy
 * that is whole goes to sink_copy, from the message or, split between two,
 * from carry. */
static void sink(struct pk_fetch *f, const unsigned char *rec, size_t len)
{
	size_t stride = FT__CKPT_HDR + (size_t)f->img.head.block_bytes, at = f->got;

	while (len > 0) {
		size_t k = at / stride, off = at % stride, take = stride - off;
		const unsigned char *copy = rec;
		if (off != 0 || len < stride) {
			if (take > len)
				take = len;
			memcpy(f->carry + off, rec, take);
			copy = off + take == stride ? f->carry : NULL;
		}
		if (copy != NULL)
			sink_copy(f, k, copy);
		rec += take;
		len -= take;
		at += take;
	}
}

/*
 * A LOCAL answer (ckpt_peer_int.h): the copies read from the holder's
 * memory a chunk at a time and taken as FCOPY bytes. 0; -FT_EPROTO for a
 * record that does not fit the fetch; -FT_ENOSYS when the kernel refuses
 * the reads here, or there is no memory for them (the fetch is made again
 * over the link); -FT_ECORRUPT when
 * the holder's addresses cannot be read.
 */
static int local_read(struct ft__ckpt_peer *p, const unsigned char *rec, size_t len)
{
	struct pk_fetch *f = &p->fetch;
	size_t stride = FT__CKPT_HDR + (size_t)f->img.head.block_bytes, chunk;
	struct pk_local_msg h;
	struct iovec *remote;
	unsigned char *bounce;
	int rc = 0;

	if (len < sizeof(h))
		return -FT_EPROTO;
	memcpy(&h, rec, sizeof(h));
	if (h.pid <= 0 || h.stride != stride || h.n != f->n || len - sizeof(h) != (h.n + 7) / 8)
		return -FT_EPROTO;
	chunk = ((size_t)2 << 20) / stride;
	chunk = chunk < 1 ? 1 : chunk > 1024 ? 1024 : chunk; /* (IOV_MAX) */
	/* the service keeps the buffer the copies pass through for the next
	 * fetch (a new one per fetch costs its page faults, or a compaction) */
	if (p->bounce_len < chunk * stride) {
		ft__big_free(p->bounce, p->bounce_len);
		p->bounce_len = 0;
		if ((p->bounce = ft__big_alloc(chunk * stride)) != NULL)
			p->bounce_len = chunk * stride;
	}
	bounce = p->bounce;
	remote = malloc(chunk * sizeof(*remote));
	if (bounce == NULL || remote == NULL) {
		rc = -FT_ENOSYS; /* no memory for it: this fetch over the link */
		goto out;
	}
	for (size_t k = 0; k < h.n && rc == 0; k += chunk) {
		size_t c = h.n - k < chunk ? h.n - k : chunk;
		struct iovec here = {bounce, c * stride};
		for (size_t j = 0; j < c; j++) {
			size_t q = k + j;
			int s = (rec[sizeof(h) + q / 8] >> (q % 8)) & 1;
			uint64_t a = h.base[s] + (f->first + q) * (uint64_t)stride;
			remote[j] = (struct iovec){(void *)(uintptr_t)a, stride};
		}
		ssize_t r = process_vm_readv((pid_t)h.pid, &here, 1, remote, (unsigned long)c, 0);
		if (r < 0 && (errno == EPERM || errno == ENOSYS || errno == EACCES)) {
			ft__warn("ckpt peer: reading rank %d's memory in one copy is refused here "
				 "(%s): fetches go over the link", f->holder, strerror(errno));
			p->no_local = true;
			rc = -FT_ENOSYS;
		} else if (r != (ssize_t)(c * stride)) {
			ft__warn("ckpt peer: rank %d's copies are not where it said (%s)", f->holder,
				 r < 0 ? strerror(errno) : "a short read");
			rc = -FT_ECORRUPT;
		} else if (ft__pk_answer(p, FT__CTL_CK_FCOPY, bounce, c * stride) != 0) {
			rc = -FT_EPROTO;
		}
	}
out:
	free(remote);
	return rc;
}

int ft__pk_answer(struct ft__ckpt_peer *p, int type, const unsigned char *rec, size_t len)
{
	struct pk_fetch *f = &p->fetch;
	size_t pos, bb;
	int rc = 0;

	switch (type) {
	case FT__CTL_CK_NONE:
		f->rc = -FT_EIO;
		f->done = true;
		return 0;
	case FT__CTL_CK_END:
		f->rc = f->img.regs != NULL && f->got == f->want ? 0 : -FT_EPROTO;
		f->done = true;
		return 0;
	case FT__CTL_CK_IMAGE:
		if (f->img.regs != NULL)
			return -FT_EPROTO;
		rc = ft__ckpt_parse(rec, len, &f->img);
		if (rc == 0 && (f->img.head.job_hash != f->job_hash ||
				(f->nonce != 0 && f->img.head.nonce != f->nonce))) {
			ft__error("ckpt: rank %d's copy of rank %d's checkpoint is not this job's",
				  f->holder, f->owner);
			rc = -FT_ECORRUPT;
		} else if (rc == 0 && (f->img.head.rank != f->owner ||
				       (f->block_bytes != 0 &&
					f->img.head.block_bytes != f->block_bytes))) {
			rc = -FT_ECORRUPT; /* another rank's, or a geometry the job never had */
		}
		if (rc != 0) {
			ft__ckpt_image_free(&f->img);
			f->rc = rc == -FT_ENOMEM ? rc : -FT_ECORRUPT;
			f->done = true;
			return 0;
		}
		if (f->n == 0)
			return 0;
		for (pos = 0; pos < f->img.nregs && f->img.regs[pos].index != (uint32_t)f->region;
		     pos++)
			;
		if (pos == f->img.nregs || f->first > f->img.regs[pos].nblocks ||
		    f->n > f->img.regs[pos].nblocks - f->first) {
			f->rc = -FT_EINVAL;
			f->done = true;
			return 0;
		}
		bb = (size_t)f->img.head.block_bytes;
		f->img.mem_first = f->first;
		f->img.mem_n = f->n;
		f->want = f->n * (FT__CKPT_HDR + bb);
		f->got = 0;
		if (f->dst != NULL) {
			f->img.sunk_reg = pos;
			f->img.sunk_slot = malloc(f->n);
			f->img.sunk_why = calloc(f->n, sizeof(*f->img.sunk_why));
			f->carry = malloc(FT__CKPT_HDR + bb);
			if (f->img.sunk_slot == NULL || f->img.sunk_why == NULL || f->carry == NULL) {
				f->rc = -FT_ENOMEM;
				f->done = true;
				return 0;
			}
			memset(f->img.sunk_slot, -1, f->n);
			return 0;
		}
		f->img.mem = calloc(f->img.nregs + 1, sizeof(*f->img.mem));
		f->img.own_mem = true;
		if (f->img.mem == NULL ||
		    (f->img.mem[pos][0] = ft__big_alloc(ft__ckpt_mem_bytes(&f->img, pos))) == NULL) {
			f->rc = -FT_ENOMEM;
			f->done = true;
			return 0;
		}
		f->img.mem[pos][1] = f->img.mem[pos][0];
		f->into = f->img.mem[pos][0];
		return 0;
	case FT__CTL_CK_FCOPY:
		/* the copies at their stride, straight into the image, or checked
		 * into the destination */
		if ((f->into == NULL && f->carry == NULL) || len > f->want - f->got)
			return -FT_EPROTO;
		if (f->carry != NULL)
			sink(f, rec, len);
		else
			memcpy(f->into + f->got, rec, len);
		f->got += len;
		return 0;
	case FT__CTL_CK_LOCAL:
		/* (asked for, after the IMAGE, which set what is wanted; the END
		 * is ours) */
		if (!f->asked_local || f->got != 0 || f->want == 0)
			return -FT_EPROTO;
		rc = local_read(p, rec, len);
		if (rc == -FT_EPROTO)
			return rc;
		f->rc = rc != 0 ? rc : f->got == f->want ? 0 : -FT_EPROTO;
		f->done = true;
		return 0;
	default:
		return -FT_EPROTO;
	}
}

void ft__pk_local_id(struct pk_local_id *id)
{
	FILE *fp = fopen("/proc/sys/kernel/random/boot_id", "re");
	struct stat st;

	memset(id, 0, sizeof(*id));
	if (fp == NULL)
		return;
	if (fgets(id->boot, sizeof(id->boot), fp) == NULL || stat("/proc/self/ns/pid", &st) != 0)
		id->boot[0] = '\0';
	fclose(fp);
	id->boot[strcspn(id->boot, "\n")] = '\0';
	id->pidns_ino = (uint64_t)st.st_ino;
	id->pidns_dev = (uint64_t)st.st_dev;
}

bool ft__pk_local_same(const struct pk_local_id *a, const struct pk_local_id *b)
{
	return a->boot[0] != '\0' && strncmp(a->boot, b->boot, sizeof(a->boot)) == 0 &&
	       a->pidns_ino == b->pidns_ino && a->pidns_dev == b->pidns_dev;
}
