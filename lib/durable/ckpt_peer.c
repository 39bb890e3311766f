/* ckpt_peer.c: running checkpoints kept in the memory of a rank on another host: the service thread, the streams to holders, the mirrors of wards, fetches (ckpt_peer.h). */
/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bigmem.h"
#include "ckpt_peer_int.h"
#include "fdreg.h"
#include "internal.h"
#include "jnl.h"

/* The mirror a fetch is answered from; NULL when no round of the ward
 * committed here (as a journal without a round: nothing to restore). */
static struct pk_mirror *served(struct pk_mirror *m)
{
	if (m != NULL && m->img.commits == 0)
		m = m->prev;
	return m != NULL && m->img.commits > 0 ? m : NULL;
}


/* The position of the region a fetch asks for, nregs when it has no such
 * region or range (the answer then has no copies; the fetcher says why). */
static size_t asked_region(const struct pk_mirror *m, const struct pk_fetch_msg *f)
{
	size_t pos;

	for (pos = 0; pos < m->img.nregs && m->img.regs[pos].index != (uint32_t)f->region; pos++)
		;
	if (pos < m->img.nregs &&
	    (f->first > m->img.regs[pos].nblocks || f->n > m->img.regs[pos].nblocks - f->first))
		pos = m->img.nregs;
	return pos;
}

/* Block b's copy in the slot of its newest committed round (head and data). */
static struct iovec newest_copy(const struct pk_mirror *m, size_t pos, uint64_t b)
{
	const struct ft__ckpt_jsnap *t = &m->img.tab[m->img.first[pos] + b];
	const struct ft__ckpt_jregion *r = &m->img.regs[pos];
	size_t bb = (size_t)m->img.head.block_bytes;
	size_t blen = (size_t)(b + 1 < r->nblocks ? bb : r->bytes - b * bb);
	int s = t->round[1] > t->round[0];

	return (struct iovec){m->img.mem[pos][s] + b * (FT__CKPT_HDR + bb), FT__CKPT_HDR + blen};
}

/* ---- rounds finishing, in order (under lock) ---- */

static void round_finished(struct ft__ckpt_peer *p, uint64_t round)
{
	uint64_t s;
	bool moved = true;

	for (int i = 0; i < PK_PENDING; i++)
		if (p->pend[i] == round)
			p->fin[i] = true;
	/* sent moves over every finished round with no unfinished one below it */
	while (moved) {
		moved = false;
		s = atomic_load(&p->sent);
		uint64_t low = UINT64_MAX;
		int at = -1;
		for (int i = 0; i < PK_PENDING; i++)
			if (p->pend[i] != 0 && p->pend[i] < low) {
				low = p->pend[i];
				at = i;
			}
		if (at >= 0 && p->fin[at]) {
			if (low > s)
				atomic_store(&p->sent, low);
			p->pend[at] = 0;
			p->fin[at] = false;
			moved = true;
		}
	}
	pthread_cond_broadcast(&p->cond);
}

/* ---- the output queue of a link ---- */

/* A new message at the tail of link i's queue. */
static struct pk_msg *q_new(struct ft__ckpt_peer *p, int i)
{
	struct pk_link *l = &p->link[i];

	if (l->tail == l->cap) {
		if (l->head > 0) {
			memmove(l->q, l->q + l->head, (l->tail - l->head) * sizeof(*l->q));
			l->tail -= l->head;
			l->head = 0;
		} else {
			size_t cap = l->cap ? 2 * l->cap : 64;
			struct pk_msg *q = realloc(l->q, cap * sizeof(*q));
			if (q == NULL)
				return NULL;
			l->q = q;
			l->cap = cap;
		}
	}
	if (l->head == l->tail)
		l->moved_ms = ft__now_ms();
	struct pk_msg *m = &l->q[l->tail++];
	memset(m, 0, sizeof(*m));
	return m;
}

static void q_seal(struct ft__ckpt_peer *p, struct pk_msg *m, enum ft__ctl_type type)
{
	ft__ctl_frame(&p->ctl, type, 0, m->len, m->hdr);
}

/*
 * A record: the bytes of iov[0..n) in messages of at most a control
 * message's payload (PART but the last, which is of the record's type and
 * owns `own`). A message takes pieces until it is full or has PK_SEGS of
 * them; a piece that continues the one before in memory extends it, so a
 * run of copies that lie end to end goes out in full messages.
 */
static int q_record(struct ft__ckpt_peer *p, int i, enum ft__ctl_type type,
		    const struct iovec *iov, int n, void *own)
{
	size_t max = p->ctl.max_payload;
	struct pk_msg *m = q_new(p, i);

	if (m == NULL) {
		free(own);
		return -FT_ENOMEM;
	}
	for (int k = 0; k < n; k++)
		for (size_t off = 0; off < iov[k].iov_len;) {
			char *base = (char *)iov[k].iov_base + off;
			size_t len = iov[k].iov_len - off;
			if (m->len == max) {
				q_seal(p, m, FT__CTL_CK_PART);
				if ((m = q_new(p, i)) == NULL) {
					free(own);
					return -FT_ENOMEM;
				}
			}
			if (len > max - m->len)
				len = max - m->len;
			struct iovec *last = m->nseg > 0 ? &m->seg[m->nseg - 1] : NULL;
			if (last != NULL && (char *)last->iov_base + last->iov_len == base) {
				last->iov_len += len;
			} else if (m->nseg == PK_SEGS) {
				q_seal(p, m, FT__CTL_CK_PART);
				if ((m = q_new(p, i)) == NULL) {
					free(own);
					return -FT_ENOMEM;
				}
				continue;
			} else {
				m->seg[m->nseg++] = (struct iovec){base, len};
			}
			m->len += len;
			off += len;
		}
	m->own = own;
	q_seal(p, m, type);
	return 0;
}

/* A record of one piece. */
static int q_push(struct ft__ckpt_peer *p, int i, enum ft__ctl_type type, const void *data,
		  size_t len, void *own)
{
	return q_record(p, i, type, &(struct iovec){(void *)data, len}, 1, own);
}

/* Drops link i: what its queue held is given up (rounds finished, mirrors released). */
void ft__ckpt_peer_drop(struct ft__ckpt_peer *p, int i, const char *why)
{
	struct pk_link *l = &p->link[i];
	bool stream = false;

	if (why != NULL && p->ctl.links[i].fd >= 0)
		ft__info("ckpt peer: link with rank %d closed: %s", p->ctl.links[i].peer, why);
	pk_lock(p);
	if (l->lent != NULL)
		l->lent->busy--;
	for (size_t k = l->head; k < l->tail; k++) {
		struct pk_msg *m = &l->q[k];
		if (m->round != 0) {
			round_finished(p, m->round);
			stream = true;
		}
		if (m->release != NULL)
			m->release->busy--;
		free(m->own);
	}
	/* a stream's link closed (its holder gone, or taking nothing): its
	 * holder must be sent the stream again; a fetch's or an announcement's
	 * link says nothing of the stream */
	if ((stream || l->stream) && l->target >= 0)
		atomic_fetch_add(&p->lost[l->target], 1);
	if (p->fetch.link == i) {
		if (p->fetch.active) {
			p->fetch.rc = -FT_EIO;
			p->fetch.done = true;
			p->fetch.active = false;
			pthread_cond_broadcast(&p->cond);
		}
		p->fetch.link = -1;
	}
	pk_unlock(p);
	free(l->q);
	free(l->acc);
	*l = (struct pk_link){.target = -1};
	ft__ctl_drop(&p->ctl, i);
}

/* Writes what link i's socket takes; drops it on an error. */
static void q_flush(struct ft__ckpt_peer *p, int i)
{
	struct pk_link *l = &p->link[i];
	const struct ft__ctl_link *cl = &p->ctl.links[i];

	if (cl->fd < 0 || cl->connecting || (cl->ours && !cl->proved))
		return;
	while (l->head < l->tail) {
		struct iovec iov[64];
		int n = 0;
		size_t off = l->off;
		for (size_t k = l->head; k < l->tail && n + 1 + PK_SEGS <= 64; k++, off = 0) {
			struct pk_msg *m = &l->q[k];
			if (off < FT__CTL_HDR_BYTES)
				iov[n++] = (struct iovec){m->hdr + off, FT__CTL_HDR_BYTES - off};
			size_t d = off > FT__CTL_HDR_BYTES ? off - FT__CTL_HDR_BYTES : 0;
			for (int g = 0; g < m->nseg; g++) {
				if (d >= m->seg[g].iov_len) {
					d -= m->seg[g].iov_len;
					continue;
				}
				iov[n++] = (struct iovec){(char *)m->seg[g].iov_base + d,
							  m->seg[g].iov_len - d};
				d = 0;
			}
		}
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
		ssize_t w = sendmsg(cl->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (w <= 0) {
			ft__ckpt_peer_drop(p, i, "write failed");
			return;
		}
		l->moved_ms = ft__now_ms();
		size_t left = (size_t)w;
		while (left > 0 && l->head < l->tail) {
			struct pk_msg *m = &l->q[l->head];
			size_t whole = FT__CTL_HDR_BYTES + m->len - l->off;
			if (left < whole) {
				l->off += left;
				break;
			}
			left -= whole;
			l->off = 0;
			l->head++;
			free(m->own);
			if (m->release != NULL)
				m->release->busy--; /* the thread's own: no lock */
			if (m->round != 0) {
				pk_lock(p);
				round_finished(p, m->round);
				pk_unlock(p);
			}
		}
	}
	l->head = l->tail = 0;
}

/*
 * A link connected here to rank `to` for this rank's stream (stream) or
 * for fetches and announcements: the open one of that kind, else a new
 * one. *fresh: a new one (a stream goes on it only from its HEAD).
 */
static int link_to(struct ft__ckpt_peer *p, int to, bool stream, bool *fresh)
{
	char addr[FT__CTRL_MAX];

	*fresh = false;
	for (int i = 0; i < p->ctl.nlinks; i++)
		if (p->ctl.links[i].fd >= 0 && p->link[i].target == to &&
		    p->link[i].stream == stream)
			return i;
	pk_lock(p);
	snprintf(addr, sizeof(addr), "%s", p->book[to]);
	pk_unlock(p);
	if (addr[0] == '\0')
		return -FT_EIO;
	int i = ft__ctl_connect_start(&p->ctl, addr, to, 0);
	if (i < 0)
		return i;
	p->link[i] = (struct pk_link){.target = to, .stream = stream, .serial = ++p->serials};
	p->link[i].moved_ms = ft__now_ms();
	*fresh = true;
	return i;
}

/* ---- requests from the writer's thread ---- */

static void do_round(struct ft__ckpt_peer *p, const struct ft__ckpt_peer_round *r)
{
	bool fresh = false;
	int i = r->holder >= 0 && r->holder != p->p.rank ? link_to(p, r->holder, true, &fresh)
							 : -FT_EIO;
	int rc = i < 0 ? i : 0;

	/* a stream lost while this round waited: a new link takes it only from
	 * a HEAD (the holder ties a stream to the link its HEAD came on) */
	if (rc == 0 && fresh && r->head == NULL)
		rc = -FT_EPEERFAILED;

	if (rc == 0 && r->head != NULL)
		rc = q_record(p, i, FT__CTL_CK_HEAD, &(struct iovec){(void *)r->head, r->head_len}, 1,
			      NULL);
	for (size_t k = 0; rc == 0 && k < r->n; k++)
		rc = q_record(p, i, FT__CTL_CK_COPY, &r->piece[2 * k], 2, NULL);
	if (rc == 0)
		rc = q_record(p, i, FT__CTL_CK_COMMIT,
			      &(struct iovec){(void *)r->commit, r->commit_len}, 1, NULL);
	if (rc == 0) {
		p->link[i].q[p->link[i].tail - 1].round = r->round;
		q_flush(p, i);
		return;
	}
	if (i >= 0 && !fresh)
		ft__ckpt_peer_drop(p, i, "cannot queue a round");
	pk_lock(p);
	round_finished(p, r->round);
	if (r->holder >= 0 && r->holder < p->p.world_size)
		atomic_fetch_add(&p->lost[r->holder], 1);
	pk_unlock(p);
}

/* A fetch this rank holds the answer to: the thread that owns the mirrors
 * gives it as a holder would send it. */
static void local_answer(struct ft__ckpt_peer *p, const struct pk_fetch_msg *f)
{
	struct pk_mirror *m = f->owner >= 0 && f->owner < p->p.world_size ? served(p->mir[f->owner])
									 : NULL;
	char *jr = NULL;
	size_t jlen, pos;

	pk_lock(p);
	if (m == NULL) {
		ft__pk_answer(p, FT__CTL_CK_NONE, NULL, 0);
	} else if (ft__ckpt_build_journal(&m->img, true, &jr, &jlen) != 0) {
		p->fetch.rc = -FT_ENOMEM;
		p->fetch.done = true;
	} else {
		ft__pk_answer(p, FT__CTL_CK_IMAGE, (const unsigned char *)jr, jlen);
		pos = asked_region(m, f);
		for (uint64_t b = f->first; pos < m->img.nregs && b < f->first + f->n && !p->fetch.done;
		     b++) {
			struct iovec c = newest_copy(m, pos, b);
			ft__pk_answer(p, FT__CTL_CK_FCOPY, c.iov_base,
				  FT__CKPT_HDR + (size_t)m->img.head.block_bytes);
		}
		if (!p->fetch.done)
			ft__pk_answer(p, FT__CTL_CK_END, NULL, 0);
	}
	free(jr);
	p->fetch.active = false;
	pthread_cond_broadcast(&p->cond);
	pk_unlock(p);
}

static void do_fetch(struct ft__ckpt_peer *p)
{
	struct pk_fetch_msg m;
	int i, rc;

	pk_lock(p);
	m = (struct pk_fetch_msg){.owner = p->fetch.owner, .region = p->fetch.region,
				  .first = p->fetch.first, .n = p->fetch.n};
	if (!p->no_local && p->fetch.local_ok) {
		m.local = p->local;
		p->fetch.asked_local = true;
	}
	int holder = p->fetch.holder;
	pk_unlock(p);
	if (holder == p->p.rank) {
		local_answer(p, &m);
		return;
	}
	bool fresh;
	i = link_to(p, holder, false, &fresh);
	struct pk_fetch_msg *own = i >= 0 ? malloc(sizeof(*own)) : NULL;
	if (own != NULL)
		*own = m;
	rc = i < 0 ? i : own == NULL ? -FT_ENOMEM
		   : q_record(p, i, FT__CTL_CK_FETCH, &(struct iovec){own, sizeof(*own)}, 1, own);
	pk_lock(p);
	if (rc == 0) {
		p->fetch.link = i;
	} else {
		p->fetch.rc = -FT_EIO;
		p->fetch.done = true;
		p->fetch.active = false;
		pthread_cond_broadcast(&p->cond);
	}
	pk_unlock(p);
	if (rc == 0)
		q_flush(p, i);
}

static void do_announce(struct ft__ckpt_peer *p)
{
	for (int r = 0; r < p->p.world_size; r++) {
		if (r == p->p.rank)
			continue;
		bool fresh;
		int i = link_to(p, r, false, &fresh);
		char *a = i >= 0 ? strdup(p->ctl.addr) : NULL;
		if (a != NULL &&
		    q_record(p, i, FT__CTL_CK_ADDR, &(struct iovec){a, strlen(a) + 1}, 1, a) == 0)
			q_flush(p, i);
	}
}

/* ---- what arrives ---- */

static size_t acc_limit(struct ft__ckpt_peer *p, int i)
{
	const struct ft__ctl_link *cl = &p->ctl.links[i];
	const struct pk_mirror *mi;

	if (cl->ours) /* a holder's answer: an image of up to the most blocks (its copies
		       * go straight into the image, copies_in) */
		return PK_HEAD_MAX + (size_t)48 * FT__CKPT_MAX_BLOCKS;
	if (cl->peer < 0 || (mi = p->mir[cl->peer]) == NULL)
		return PK_HEAD_MAX;
	return PK_HEAD_MAX + FT__CKPT_HDR + (size_t)mi->img.head.block_bytes +
	       (size_t)24 * mi->img.nblocks;
}

/* Whether m or a mirror before it is being sent from or read (busy). */
static bool chain_busy(const struct pk_mirror *m)
{
	for (; m != NULL; m = m->prev)
		if (m->busy > 0)
			return true;
	return false;
}

void ft__ckpt_peer_mirror_free(struct pk_mirror *m)
{
	if (m == NULL)
		return;
	ft__ckpt_peer_mirror_free(m->prev);
	ft__ckpt_image_free(&m->img);
	free(m);
}

/*
 * A ward's HEAD: a new mirror, its table empty (a new stream numbers its
 * rounds afresh: a new incarnation's, or after a lost link). The mirror
 * before it is served until the new one's first round, which saves every
 * block, commits.
 */
static int on_head(struct ft__ckpt_peer *p, int ward, uint64_t serial, const unsigned char *rec,
		   size_t len)
{
	struct pk_mirror *m = calloc(1, sizeof(*m)), *old = p->mir[ward];
	int rc;

	if (m == NULL)
		return -FT_ENOMEM;
	if ((rc = ft__ckpt_parse(rec, len, &m->img)) != 0 || m->img.commits != 0 ||
	    m->img.head.rank != ward || m->img.head.world_size != p->p.world_size ||
	    m->img.head.job_hash != p->job_hash) {
		ft__ckpt_peer_mirror_free(m);
		return rc != 0 ? rc : -FT_EPROTO;
	}
	m->img.mem = calloc(m->img.nregs + 1, sizeof(*m->img.mem));
	m->img.own_mem = true;
	m->img.mem_n = SIZE_MAX;
	rc = m->img.mem == NULL ? -FT_ENOMEM : 0;
	for (size_t r = 0; rc == 0 && r < m->img.nregs; r++)
		for (int s = 0; s < 2 && rc == 0; s++)
			if ((m->img.mem[r][s] = ft__big_alloc(ft__ckpt_mem_bytes(&m->img, r))) == NULL)
				rc = -FT_ENOMEM;
	if (rc != 0) {
		ft__warn("ckpt peer: no memory for rank %d's checkpoint", ward);
		ft__ckpt_peer_mirror_free(m);
		return rc;
	}
	if (old != NULL && old->img.commits == 0 && old->busy == 0) {
		/* a stream that never committed: the one before it stays */
		m->prev = old->prev;
		old->prev = NULL;
		ft__ckpt_peer_mirror_free(old);
	} else {
		m->prev = old;
	}
	m->serial = serial;
	p->mir[ward] = m;
	return 0;
}

/* A ward's block copy: into the slot it names, once its head fits the geometry. */
static int on_copy(struct ft__ckpt_peer *p, int ward, const unsigned char *rec, size_t len)
{
	struct pk_mirror *m = p->mir[ward];
	struct ft__ckpt_copy h;
	size_t pos, bb;

	if (m == NULL || len < sizeof(h))
		return -FT_EPROTO;
	memcpy(&h, rec, sizeof(h));
	bb = (size_t)m->img.head.block_bytes;
	for (pos = 0; pos < m->img.nregs && m->img.regs[pos].index != h.region; pos++)
		;
	if (pos == m->img.nregs || h.block >= m->img.regs[pos].nblocks || h.slot > 1 ||
	    h.rank != ward)
		return -FT_EPROTO;
	const struct ft__ckpt_jregion *r = &m->img.regs[pos];
	size_t want = (size_t)(h.block + 1 < r->nblocks ? bb : r->bytes - h.block * bb);
	if (h.len != want || len != sizeof(h) + want)
		return -FT_EPROTO;
	memcpy(m->img.mem[pos][h.slot] + h.block * (FT__CKPT_HDR + bb), rec, len);
	return 0;
}

/* A fetcher on this kernel reads the copies itself (ckpt_peer_int.h): where
 * they are, and mirror m lent (busy) until its DONE. */
static int lend(struct ft__ckpt_peer *p, int i, struct pk_mirror *m, size_t pos,
		const struct pk_fetch_msg *f)
{
	size_t bytes = sizeof(struct pk_local_msg) + (size_t)(f->n + 7) / 8;
	struct pk_local_msg h = {.pid = (int32_t)getpid(),
				 .stride = (uint32_t)(FT__CKPT_HDR + m->img.head.block_bytes),
				 .n = f->n,
				 .base = {(uintptr_t)m->img.mem[pos][0], (uintptr_t)m->img.mem[pos][1]}};
	unsigned char *rec;
	int rc;

	if (p->link[i].lent != NULL)
		return -FT_EPROTO; /* a fetch before the last one's DONE */
	if ((rec = calloc(1, bytes)) == NULL)
		return -FT_ENOMEM;
	memcpy(rec, &h, sizeof(h));
	for (uint64_t b = f->first; b < f->first + f->n; b++)
		if ((unsigned char *)newest_copy(m, pos, b).iov_base !=
		    m->img.mem[pos][0] + b * h.stride)
			rec[sizeof(h) + (b - f->first) / 8] |= (unsigned char)(1u << ((b - f->first) % 8));
	if ((rc = q_record(p, i, FT__CTL_CK_LOCAL, &(struct iovec){rec, bytes}, 1, rec)) != 0)
		return rc;
	m->busy++;
	p->link[i].lent = m;
	/* given back within stall_ms, and 10 ms a MiB read (100 MiB/s) */
	p->link[i].lent_until_ms = ft__now_ms() + p->p.stall_ms +
				   (int64_t)(((uint64_t)f->n * h.stride) >> 20) * 10;
	return 0;
}

/* A fetch from link i: the mirror's image, the newest copies asked for, END. */
static int on_fetch(struct ft__ckpt_peer *p, int i, const unsigned char *rec, size_t len)
{
	struct pk_fetch_msg f;
	struct pk_mirror *m;
	char *jr = NULL;
	size_t jlen, pos;
	int rc;

	if (len != sizeof(f))
		return -FT_EPROTO;
	memcpy(&f, rec, sizeof(f));
	if (f.owner < 0 || f.owner >= p->p.world_size || (m = served(p->mir[f.owner])) == NULL)
		return q_push(p, i, FT__CTL_CK_NONE, NULL, 0, NULL);
	if ((rc = ft__ckpt_build_journal(&m->img, true, &jr, &jlen)) != 0)
		return rc;
	if ((rc = q_record(p, i, FT__CTL_CK_IMAGE, &(struct iovec){jr, jlen}, 1, jr)) != 0)
		return rc;
	pos = asked_region(m, &f);
	if (pos < m->img.nregs && f.n > 0 && !p->no_local && ft__pk_local_same(&f.local, &p->local) &&
	    sizeof(struct pk_local_msg) + (f.n + 7) / 8 <= p->ctl.max_payload)
		return lend(p, i, m, pos, &f);
	if (pos < m->img.nregs && f.n > 0) {
		/* one record: each block's newest copy at a stride of 64 + block
		 * bytes (the last one's tail is the slot's zeros) */
		struct iovec *v = malloc((size_t)f.n * sizeof(*v));
		if (v == NULL)
			return -FT_ENOMEM;
		for (uint64_t b = f.first; b < f.first + f.n; b++) {
			v[b - f.first] = newest_copy(m, pos, b);
			v[b - f.first].iov_len = FT__CKPT_HDR + (size_t)m->img.head.block_bytes;
		}
		rc = q_record(p, i, FT__CTL_CK_FCOPY, v, (int)f.n, NULL);
		free(v);
	}
	if (rc == 0 && (rc = q_push(p, i, FT__CTL_CK_END, NULL, 0, NULL)) == 0) {
		/* its copies are sent from this mirror's memory: its ward's
		 * stream waits until the END is written (held()) */
		m->busy++;
		p->link[i].q[p->link[i].tail - 1].release = m;
	}
	return rc;
}

/* One whole record of kind type from link i. */
static int on_record(struct ft__ckpt_peer *p, int i, int type, const unsigned char *rec, size_t len)
{
	const struct ft__ctl_link *cl = &p->ctl.links[i];
	int from = cl->peer, rc = 0;

	if (cl->ours) {
		bool early = false;
		pk_lock(p);
		if (!p->fetch.active || p->fetch.link != i || p->fetch.done)
			rc = -FT_EPROTO; /* an answer nobody asked for */
		else if ((rc = ft__pk_answer(p, type, rec, len)) == 0 && p->fetch.done) {
			p->fetch.active = false;
			pthread_cond_broadcast(&p->cond);
			/* ended before its last record (an IMAGE refused): the
			 * rest of the answer is nobody's, and goes with the link */
			early = type != FT__CTL_CK_END && type != FT__CTL_CK_NONE &&
				type != FT__CTL_CK_LOCAL;
		}
		pk_unlock(p);
		if (early) {
			ft__ckpt_peer_drop(p, i, "the rest of an answer no longer wanted");
			return 0;
		}
		/* the holder's mirror was read where it lies: it is the holder's again */
		if (rc == 0 && type == FT__CTL_CK_LOCAL &&
		    (rc = q_push(p, i, FT__CTL_CK_DONE, NULL, 0, NULL)) == 0)
			q_flush(p, i);
		return rc;
	}
	/* a link lent a mirror is read for its DONE: no stream goes on it (a
	 * HEAD or COMMIT there could free the mirror being read) */
	if (p->link[i].lent != NULL &&
	    (type == FT__CTL_CK_HEAD || type == FT__CTL_CK_COPY || type == FT__CTL_CK_COMMIT))
		return -FT_EPROTO;
	switch (type) {
	case FT__CTL_CK_HEAD:
		return on_head(p, from, p->link[i].serial, rec, len);
	case FT__CTL_CK_COPY:
	case FT__CTL_CK_COMMIT:
		/* a stream's records come on the link its HEAD came on (an old
		 * link's late records are not the new stream's) */
		if (p->mir[from] == NULL || p->mir[from]->serial != p->link[i].serial)
			return -FT_EPROTO;
		if (type == FT__CTL_CK_COPY)
			return on_copy(p, from, rec, len);
		if (ft__ckpt_parse_more(&p->mir[from]->img, rec, len) != 0)
			return -FT_EPROTO;
		/* the new stream holds every block now (one sent from is freed
		 * at a later COMMIT) */
		if (!chain_busy(p->mir[from]->prev)) {
			ft__ckpt_peer_mirror_free(p->mir[from]->prev);
			p->mir[from]->prev = NULL;
		}
		return 0;
	case FT__CTL_CK_FETCH:
		return on_fetch(p, i, rec, len);
	case FT__CTL_CK_DONE:
		if (p->link[i].lent == NULL || len != 0)
			return -FT_EPROTO;
		p->link[i].lent->busy--;
		p->link[i].lent = NULL;
		return 0;
	case FT__CTL_CK_ADDR:
		if (len < 2 || len > FT__CTRL_MAX || rec[len - 1] != '\0' || strlen((const char *)rec) != len - 1)
			return -FT_EPROTO;
		pk_lock(p);
		snprintf(p->book[from], sizeof(p->book[from]), "%s", (const char *)rec);
		pk_unlock(p);
		ft__info("ckpt peer: rank %d's service is at %s now", from, (const char *)rec);
		return 0;
	default:
		return -FT_EPROTO;
	}
}

/*
 * Whether link i is not read for now: a link accepted here with an answer
 * still going out on it (one at a time: a member cannot queue answer on
 * answer without reading them), or a ward's link while a mirror of that
 * ward is being sent from (its stream must not change what goes out).
 */
static bool held(struct ft__ckpt_peer *p, int i)
{
	int peer = p->ctl.links[i].peer;

	if (p->ctl.links[i].ours)
		return false;
	if (p->link[i].head < p->link[i].tail)
		return true;
	if (p->link[i].lent != NULL)
		return false; /* its DONE gives the mirror back (the fetcher may be the ward) */
	if (peer < 0)
		return false;
	for (const struct pk_mirror *m = p->mir[peer]; m != NULL; m = m->prev)
		if (m->busy > 0)
			return true;
	return false;
}

/*
 * A fetch's copies arrive as one long record: its messages go straight into
 * the image's memory, not through the record buffer. 1: taken; 0: not the
 * answer's copies (the IMAGE before them, say); <0: more than were asked.
 */
static int copies_in(struct ft__ckpt_peer *p, int i, const struct ft__ctl_msg *m)
{
	struct pk_fetch *f = &p->fetch;
	int rc = 0;

	if (!p->ctl.links[i].ours || p->link[i].acc_len != 0 ||
	    (m->type != FT__CTL_CK_PART && m->type != FT__CTL_CK_FCOPY))
		return 0;
	pk_lock(p);
	if (f->active && !f->done && f->link == i && (f->into != NULL || f->carry != NULL))
		rc = ft__pk_answer(p, FT__CTL_CK_FCOPY, m->payload, m->len) == 0 ? 1 : -1;
	pk_unlock(p);
	return rc;
}

static void link_read(struct ft__ckpt_peer *p, int i)
{
	struct pk_link *l = &p->link[i];
	struct ft__ctl_msg m;
	int rc;

	l->held = false;
	while (p->ctl.links[i].fd >= 0) {
		if (held(p, i)) {
			l->held = true;
			return;
		}
		if ((rc = ft__ctl_next(&p->ctl, i, &m)) == 0)
			return;
		if (rc < 0) {
			ft__ckpt_peer_drop(p, i, ft_strerror(rc));
			return;
		}
		if (m.type == FT__CTL_HELLO) {
			l->serial = ++p->serials; /* a new link accepted here */
			continue;
		}
		if (m.type < FT__CTL_CK_PART || m.type > FT__CTL_CK_DONE) {
			ft__ckpt_peer_drop(p, i, "a message of another kind");
			return;
		}
		if ((rc = copies_in(p, i, &m)) != 0) {
			if (rc < 0) {
				ft__ckpt_peer_drop(p, i, "copies beyond the answer");
				return;
			}
			continue;
		}
		size_t need = l->acc_len + m.len;
		if (need > acc_limit(p, i)) {
			ft__ckpt_peer_drop(p, i, "a record too long");
			return;
		}
		if (need > l->acc_cap) {
			size_t cap = l->acc_cap ? l->acc_cap : 65536;
			while (cap < need)
				cap *= 2;
			unsigned char *a = realloc(l->acc, cap);
			if (a == NULL) {
				ft__ckpt_peer_drop(p, i, "no memory");
				return;
			}
			l->acc = a;
			l->acc_cap = cap;
		}
		if (m.len > 0)
			memcpy(l->acc + l->acc_len, m.payload, m.len);
		l->acc_len = need;
		if (m.type == FT__CTL_CK_PART)
			continue;
		rc = on_record(p, i, m.type, l->acc, l->acc_len);
		l->acc_len = 0;
		if (rc != 0) {
			ft__ckpt_peer_drop(p, i, rc == -FT_EPROTO ? "a record that does not check" : ft_strerror(rc));
			return;
		}
		q_flush(p, i);
	}
}

/* ---- the thread ---- */

static void take_requests(struct ft__ckpt_peer *p)
{
	struct pk_req *r;
	bool fetch;

	pk_lock(p);
	r = p->reqs;
	p->reqs = p->reqs_tail = NULL;
	fetch = p->fetch.active && p->fetch.link < 0 && !p->fetch.done;
	if (p->fetch.cancel) {
		/* its link goes, and what may still come on it with it; the
		 * caller's next fetch waits for this */
		int i = p->fetch.link;
		p->fetch.link = -1;
		pk_unlock(p);
		if (i >= 0)
			ft__ckpt_peer_drop(p, i, "a fetch took too long");
		pk_lock(p);
		p->fetch.cancel = false;
		pthread_cond_broadcast(&p->cond);
	}
	pk_unlock(p);
	if (fetch)
		do_fetch(p);
	while (r != NULL) {
		struct pk_req *next = r->next;
		if (r->kind == RQ_ROUND)
			do_round(p, &r->round);
		else if (r->kind == RQ_ANNOUNCE)
			do_announce(p);
		free(r);
		r = next;
	}
}

void *ft__ckpt_peer_main(void *arg)
{
	struct ft__ckpt_peer *p = arg;
	int n = p->ctl.nlinks + 2;
	struct pollfd *pfd = calloc((size_t)n, sizeof(*pfd));
	int *idx = calloc((size_t)n, sizeof(*idx));

	if (pfd == NULL || idx == NULL) {
		ft__error("ckpt peer: no memory for the service thread");
		n = -1;
	}
	while (n > 0) {
		uint64_t v;
		int64_t now;

		pk_lock(p);
		bool stop = p->stop;
		pk_unlock(p);
		if (stop)
			break;
		if (read(p->wake_fd, &v, sizeof(v)) < 0) {
			/* nothing pending: nonblocking */
		}
		take_requests(p);
		now = ft__now_ms();
		for (int i = 0; i < p->ctl.nlinks; i++) {
			struct pk_link *l = &p->link[i];
			if (p->ctl.links[i].fd < 0)
				continue;
			if (l->held && !held(p, i))
				link_read(p, i);
			if (l->head < l->tail && now - l->moved_ms > p->p.stall_ms)
				ft__ckpt_peer_drop(p, i, "its peer took nothing for too long");
			else if (l->lent != NULL && now > l->lent_until_ms)
				ft__ckpt_peer_drop(p, i, "its peer read our memory for too long");
		}
		int k = ft__ctl_pollfds(&p->ctl, pfd, idx);
		pfd[k++] = (struct pollfd){.fd = p->wake_fd, .events = POLLIN};
		for (int j = 1; j < k - 1; j++) {
			int i = idx[j - 1];
			if (p->link[i].head < p->link[i].tail)
				pfd[j].events |= POLLOUT;
			if (p->link[i].held) {
				/* not read now: not polled for its input either (a
				 * closed one would report POLLHUP at every poll) */
				pfd[j].events &= (short)~POLLIN;
				if (pfd[j].events == 0)
					pfd[j].fd = -1;
			}
		}
		if (poll(pfd, (nfds_t)k, PK_POLL_MS) < 0 && errno != EINTR) {
			ft__error("ckpt peer: poll: %s", strerror(errno));
			break;
		}
		if (pfd[0].revents & POLLIN)
			ft__ctl_accept(&p->ctl);
		for (int j = 1; j < k - 1; j++) {
			int i = idx[j - 1];
			if (pfd[j].revents == 0 || p->ctl.links[i].fd != pfd[j].fd)
				continue;
			if (pfd[j].revents & (POLLIN | POLLERR | POLLHUP) || p->ctl.links[i].connecting)
				link_read(p, i);
			if (p->ctl.links[i].fd >= 0)
				q_flush(p, i);
		}
	}
	/* no round goes out any more: nobody waits for one */
	pk_lock(p);
	p->dead = true;
	pthread_cond_broadcast(&p->cond);
	pk_unlock(p);
	free(pfd);
	free(idx);
	return NULL;
}

