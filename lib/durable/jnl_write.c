/* jnl_write.c: the pairwise log's (journal's) writer: batched journal records through io_uring or pwrite, and the mapped payload file. */
/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aio.h"
#include "file.h"
#include "crc32c.h"
#include "fdreg.h"
#include "internal.h"
#include "jnl.h"

/*
 * What is on disk before an ack, and why (the invariant the reader relies
 * on):
 *
 * - Records are appended to a batch buffer and written at explicit offsets
 *   of the slot's journal (this writer tracks the append offset; nothing is
 *   written with O_APPEND). Buffers in flight are never touched until their
 *   completion is reaped, so a record is either in a buffer being filled,
 *   in flight, or written.
 * - ft__jnl_input returns only when every record of the op so far, INPUT
 *   included, has been written (sync: and the payload msync'ed and the
 *   journal fdatasync'ed). The payload is in the MAP_SHARED mapping before
 *   INPUT is queued (the caller wrote it), so once INPUT is in the journal
 *   the payload it describes is in the page cache (or on disk, sync) too.
 * - A write that fails leaves a hole or a short journal: the reader stops at
 *   the first record that does not check, so nothing after a lost record is
 *   believed. The error is sticky for the slot's op: every later call of
 *   that op returns it, and the next op to take the slot starts afresh.
 * - ft__jnl_begin waits for the slot's earlier writes before truncating its
 *   journal, so a late write of op S-2 cannot land in op S's journal.
 */

#define LOG_QD 32               /* io_uring queue depth */
#define LOG_NBUF 4              /* batch buffers: one being filled, the rest in flight */
#define LOG_BUF_SIZE (64 * 1024)

/* One write or fsync through the shared engine (aio.c), and its slot. */
struct logio {
	struct ft__aio_io aio;  /* aio.owner: this logio */
	struct ft__jnl *log;
	int slot;
};

struct logbuf {
	char *data;
	size_t len;             /* bytes of records in data */
	struct logio io;
};

struct logslot {
	int jfd, infd;
	uint64_t jpos;          /* append offset of the journal */
	void *map;
	size_t map_len;
	uint64_t in_alloc;      /* bytes of the .in file this writer has allocated */
	unsigned inflight;      /* its ios submitted and not reaped */
	int err;                /* first failed write of the slot's current op */
};

struct ft__jnl {
	char *dir;
	uint64_t job_hash;
	int rank, world_size;
	bool sync;
	struct ft__aio aio;
	struct logslot slots[2];
	struct logbuf bufs[LOG_NBUF];
	struct logbuf big;      /* an INPUT record too big for a batch buffer */
	struct logio fsync_io;
	bool leak;              /* a wait failed with ios in flight: their memory must stay */
	int cur;                /* the buffer being filled */
	bool active;            /* between ft__jnl_begin and the next one */
	int slot;               /* the current op's slot */
	uint64_t op_seq;
	uint32_t gen;
	uint64_t in_bytes;      /* the current op's input size */
};

const char *ft__jnl_engine_name(const struct ft__jnl *l)
{
	return l != NULL ? ft__aio_engine_name(&l->aio) : "pwrite";
}

/* ---- the engine (aio.c): an io's completion lands in its slot ---- */

static void io_done(struct ft__aio_io *aio, int err)
{
	struct logio *io = aio->owner;
	struct ft__jnl *l = io->log;
	struct logslot *s = &l->slots[io->slot];

	s->inflight--;
	if (err < 0 && s->err == 0) {
		s->err = err;
		if (!(l->active && io->slot == l->slot))
			ft__warn("log: a late write of rank %d slot %d failed: %s", l->rank, io->slot,
				 strerror(-err));
	}
}

/* A write (data, len at off) or an fsync (data NULL) of slot on fd. */
static void io_set(struct ft__jnl *l, struct logio *io, int slot, int fd, const void *data,
		   size_t len, uint64_t off)
{
	memset(io, 0, sizeof(*io));
	io->aio.kind = data != NULL ? FT__AIO_WRITE : FT__AIO_FSYNC;
	io->aio.fd = fd;
	io->aio.data = data;
	io->aio.len = len;
	io->aio.off = off;
	io->aio.complete = io_done;
	io->aio.owner = io;
	io->log = l;
	io->slot = slot;
}

/* Starts io (pwrite: does it); its result lands in the slot's err. */
static int io_start(struct ft__jnl *l, struct logio *io)
{
	l->slots[io->slot].inflight++;
	return ft__aio_start(&l->aio, &io->aio);
}

/* Waits until io is reaped. */
static int io_wait(struct ft__jnl *l, struct logio *io)
{
	return ft__aio_wait(&l->aio, &io->aio);
}

/* Waits until every io of slot (or of both, slot -1) is reaped. */
static int slot_wait(struct ft__jnl *l, int slot)
{
	while (slot < 0 ? l->slots[0].inflight + l->slots[1].inflight : l->slots[slot].inflight) {
		int rc = ft__aio_reap(&l->aio, true);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int reap_ready(struct ft__jnl *l)
{
	return ft__aio_reap(&l->aio, false);
}

/* ---- the batch buffers ---- */

/* Submits the buffer being filled (if it holds records) and moves on to a free one. */
static int buf_flush(struct ft__jnl *l)
{
	struct logbuf *b = &l->bufs[l->cur];
	struct logslot *s = &l->slots[l->slot];
	int rc;

	if (b->len == 0)
		return 0;
	io_set(l, &b->io, l->slot, s->jfd, b->data, b->len, s->jpos - b->len);
	rc = io_start(l, &b->io);
	if (rc < 0)
		return rc;
	l->cur = (l->cur + 1) % LOG_NBUF;
	b = &l->bufs[l->cur];
	rc = io_wait(l, &b->io);
	b->len = 0;
	return rc;
}

/* Room for n bytes in the buffer being filled: a pointer to them. */
static int buf_reserve(struct ft__jnl *l, size_t n, char **out)
{
	struct logbuf *b = &l->bufs[l->cur];
	int rc;

	if (b->len + n > LOG_BUF_SIZE) {
		rc = buf_flush(l);
		if (rc < 0)
			return rc;
		b = &l->bufs[l->cur];
	}
	*out = b->data + b->len;
	b->len += n;
	l->slots[l->slot].jpos += n;
	return 0;
}

static void rec_seal(struct ft__logrec *h, const void *body, size_t body_len)
{
	uint32_t crc;

	h->crc = 0;
	crc = ft__crc32c(0, h, sizeof(*h));
	h->crc = ft__crc32c(crc, body, body_len);
}

/* A record of the current op with its head filled from the fields given. */
static struct ft__logrec rec_head(const struct ft__jnl *l, int type, size_t body_len)
{
	struct ft__logrec h;

	memset(&h, 0, sizeof(h));
	h.magic = FT__JNL_MAGIC;
	h.version = FT__JNL_VERSION;
	h.type = (uint16_t)type;
	h.len = (uint32_t)(sizeof(h) + body_len);
	h.op_seq = l->op_seq;
	h.gen = l->gen;
	h.peer = -1;
	return h;
}

/* Queues a record whose head h is filled but for crc. */
static int rec_queue(struct ft__jnl *l, struct ft__logrec *h, const void *body, size_t body_len)
{
	char *p;
	int rc;

	rec_seal(h, body, body_len);
	rc = buf_reserve(l, sizeof(*h) + body_len, &p);
	if (rc < 0)
		return rc;
	memcpy(p, h, sizeof(*h));
	if (body_len)
		memcpy(p + sizeof(*h), body, body_len);
	return 0;
}

/* ---- open, close ---- */


static int slot_open(struct ft__jnl *l, int slot)
{
	struct logslot *s = &l->slots[slot];
	char path[PATH_MAX];
	int rc;

	/* no O_TRUNC: the files may hold the last incarnation's logs, still to be read */
	rc = ft__jnl_path(path, sizeof(path), l->dir, l->rank, slot, "log");
	if (rc < 0)
		return rc;
	s->jfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	ft__fd_own(s->jfd);
	if (s->jfd < 0)
		return -errno;
	rc = ft__jnl_path(path, sizeof(path), l->dir, l->rank, slot, "in");
	if (rc < 0)
		return rc;
	s->infd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	ft__fd_own(s->infd);
	if (s->infd < 0)
		return -errno;
	return 0;
}

int ft__jnl_open(const struct ft__jnl_params *p, struct ft__jnl **out)
{
	struct ft__jnl *l;
	int rc;

	if (out == NULL)
		return -FT_EINVAL;
	*out = NULL;
	if (p == NULL || p->dir == NULL || p->rank < 0 || p->world_size <= 0 ||
	    p->rank >= p->world_size || (p->engine != FT__JNL_URING && p->engine != FT__JNL_PWRITE))
		return -FT_EINVAL;
	l = calloc(1, sizeof(*l));
	if (l == NULL)
		return -FT_ENOMEM;
	for (int i = 0; i < 2; i++)
		l->slots[i].jfd = l->slots[i].infd = -1;
	l->dir = strdup(p->dir);
	if (l->dir == NULL) {
		rc = -FT_ENOMEM;
		goto err_close;
	}
	l->job_hash = ft__jnl_job_hash(p->job_id != NULL ? p->job_id : "");
	l->rank = p->rank;
	l->world_size = p->world_size;
	l->sync = p->sync;
	for (int i = 0; i < LOG_NBUF; i++) {
		l->bufs[i].data = malloc(LOG_BUF_SIZE);
		if (l->bufs[i].data == NULL) {
			rc = -FT_ENOMEM;
			goto err_close;
		}
	}
	rc = ft__mkdir_p(l->dir);
	if (rc < 0)
		goto err_close;
	for (int i = 0; i < 2; i++) {
		rc = slot_open(l, i);
		if (rc < 0)
			goto err_close;
	}
	ft__aio_init(&l->aio, LOG_QD, p->engine == FT__JNL_URING, "log");
	*out = l;
	return 0;

err_close:
	ft__jnl_close(l);
	return rc;
}

void ft__jnl_close(struct ft__jnl *l)
{
	if (l == NULL)
		return;
	if (l->active && l->bufs[l->cur].data != NULL && buf_flush(l) < 0)
		ft__warn("log: rank %d: the last records could not be written", l->rank);
	if (slot_wait(l, -1) < 0) {
		ft__warn("log: rank %d: waiting for the log's writes failed", l->rank);
		l->leak = true;
	}
	ft__aio_fini(&l->aio);
	for (int i = 0; i < 2; i++) {
		struct logslot *s = &l->slots[i];
		if (s->map != NULL)
			munmap(s->map, s->map_len);
		if (s->jfd >= 0)
			ft__fd_close(s->jfd);
		if (s->infd >= 0)
			ft__fd_close(s->infd);
	}
	if (l->leak)
		return;         /* the kernel may still read the buffers: better lost than reused */
	for (int i = 0; i < LOG_NBUF; i++)
		free(l->bufs[i].data);
	free(l->big.data);
	free(l->dir);
	free(l);
}

/* ---- ops ---- */

/*
 * Allocates the payload file up to bytes and maps it. posix_fallocate, not
 * ftruncate, so that a full disk (or tmpfs) fails here with -ENOSPC rather
 * than later, as SIGBUS, in the reduction kernel's stores.
 */
static int payload_map(struct logslot *s, uint64_t bytes)
{
	void *map;
	int rc;

	if (bytes > SIZE_MAX || bytes > (uint64_t)INT64_MAX)
		return -FT_ENOMEM;
	if (bytes > s->in_alloc) {
		rc = posix_fallocate(s->infd, 0, (off_t)bytes);
		if (rc == EOPNOTSUPP || rc == ENOSYS) {
			struct stat st;
			if (fstat(s->infd, &st) < 0)
				return -errno;
			if ((uint64_t)st.st_size < bytes && ftruncate(s->infd, (off_t)bytes) < 0)
				return -errno;
		} else if (rc != 0) {
			return -rc;
		}
		s->in_alloc = bytes;
	}
	if (bytes <= s->map_len)
		return 0;
	if (s->map != NULL) {
		munmap(s->map, s->map_len);
		s->map = NULL;
		s->map_len = 0;
	}
	map = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->infd, 0);
	if (map == MAP_FAILED)
		return -errno;
	s->map = map;
	s->map_len = (size_t)bytes;
	return 0;
}

int ft__jnl_begin_bytes(struct ft__jnl *l, uint64_t op_seq, uint32_t gen,
			const struct ft__logop *op, uint64_t bytes, void **payload)
{
	struct ft__logfile file;
	struct ft__logrec h;
	struct logslot *s;
	int slot = (int)(op_seq & 1);
	int rc;

	if (payload != NULL)
		*payload = NULL;
	if (l == NULL || op == NULL || payload == NULL)
		return -FT_EINVAL;
	rc = reap_ready(l);
	if (rc < 0)
		return rc;
	/* the previous op's unsent records go to its own journal first */
	if (l->active) {
		rc = buf_flush(l);
		if (rc < 0)
			return rc;
	}
	l->active = false;
	rc = slot_wait(l, slot);
	if (rc < 0)
		return rc;
	s = &l->slots[slot];
	s->err = 0;
	if (ftruncate(s->jfd, 0) < 0)
		return -errno;
	s->jpos = 0;
	rc = payload_map(s, bytes);
	if (rc < 0)
		return rc;

	l->slot = slot;
	l->op_seq = op_seq;
	l->gen = gen;
	l->in_bytes = bytes;
	l->active = true;
	memset(&file, 0, sizeof(file));
	file.job_hash = l->job_hash;
	file.rank = l->rank;
	file.world_size = l->world_size;
	file.slot = (uint32_t)slot;
	h = rec_head(l, FT__JNL_FILE, sizeof(file));
	rc = rec_queue(l, &h, &file, sizeof(file));
	if (rc < 0)
		return rc;
	h = rec_head(l, FT__JNL_BEGIN, sizeof(*op));
	h.bytes = bytes;
	rc = rec_queue(l, &h, op, sizeof(*op));
	if (rc < 0)
		return rc;
	*payload = bytes != 0 ? s->map : NULL;
	return 0;
}

int ft__jnl_begin(struct ft__jnl *l, uint64_t op_seq, uint32_t gen, const struct ft__logop *op,
		  void **payload)
{
	size_t es;

	if (payload != NULL)
		*payload = NULL;
	if (op == NULL)
		return -FT_EINVAL;
	es = ft_dtype_size((enum ft_dtype)op->dtype);
	if (es == 0 || op->count > UINT64_MAX / es)
		return -FT_EINVAL;
	return ft__jnl_begin_bytes(l, op_seq, gen, op, op->count * es, payload);
}

/* The current op's calls: no op, or an op whose writes failed, refuses. */
static int op_check(struct ft__jnl *l)
{
	int rc;

	if (l == NULL || !l->active)
		return -FT_EINVAL;
	rc = reap_ready(l);
	if (rc < 0)
		return rc;
	return l->slots[l->slot].err;
}

int ft__jnl_frame(struct ft__jnl *l, int type, uint32_t gen, uint32_t step, uint32_t seg,
		  int32_t peer, uint64_t off, uint64_t len, uint32_t data_crc)
{
	struct ft__logrec h;
	int rc;

	if (type != FT__JNL_SEND && type != FT__JNL_RECV)
		return -FT_EINVAL;
	rc = op_check(l);
	if (rc < 0)
		return rc;
	h = rec_head(l, type, 0);
	h.gen = gen;
	h.step = step;
	h.seg = seg;
	h.peer = peer;
	h.off = off;
	h.bytes = len;
	h.data_crc = data_crc;
	return rec_queue(l, &h, NULL, 0);
}

int ft__jnl_input_written(struct ft__jnl *l, const struct ft__logreg *regs, size_t nreg)
{
	int rc = ft__jnl_input(l, regs, nreg);

	if (rc < 0 || l->sync)
		return rc;
	rc = slot_wait(l, l->slot);
	return rc < 0 ? rc : l->slots[l->slot].err;
}

int ft__jnl_input_queued(struct ft__jnl *l, const struct ft__logreg *regs, size_t nreg)
{
	struct ft__logrec h;
	size_t body = nreg * sizeof(*regs);
	int rc;

	if (l == NULL || l->sync || sizeof(h) + body > LOG_BUF_SIZE)
		return ft__jnl_input(l, regs, nreg);
	rc = op_check(l);
	if (rc < 0)
		return rc;
	if ((nreg != 0 && regs == NULL) || ft__jnl_check_regs(regs, nreg, l->in_bytes) < 0)
		return -FT_EINVAL;
	h = rec_head(l, FT__JNL_INPUT, body);
	h.bytes = l->in_bytes;
	return rec_queue(l, &h, regs, body);
}

int ft__jnl_input(struct ft__jnl *l, const struct ft__logreg *regs, size_t nreg)
{
	struct ft__logrec h;
	struct logslot *s;
	size_t body;
	int rc;

	rc = op_check(l);
	if (rc < 0)
		return rc;
	if ((nreg != 0 && regs == NULL) ||
	    nreg > (FT__JNL_REC_MAX - sizeof(h)) / sizeof(struct ft__logreg))
		return -FT_EINVAL;
	rc = ft__jnl_check_regs(regs, nreg, l->in_bytes);
	if (rc < 0)
		return -FT_EINVAL;
	s = &l->slots[l->slot];
	body = nreg * sizeof(*regs);
	h = rec_head(l, FT__JNL_INPUT, body);
	h.bytes = l->in_bytes;
	if (sizeof(h) + body <= LOG_BUF_SIZE) {
		rc = rec_queue(l, &h, regs, body);
		if (rc == 0)
			rc = buf_flush(l);
	} else {
		/* too big for a batch buffer: written alone, after what is queued */
		rc = buf_flush(l);
		if (rc == 0)
			rc = io_wait(l, &l->big.io);
		if (rc < 0)
			return rc;
		free(l->big.data);
		l->big.data = malloc(sizeof(h) + body);
		if (l->big.data == NULL)
			return -FT_ENOMEM;
		rec_seal(&h, regs, body);
		memcpy(l->big.data, &h, sizeof(h));
		memcpy(l->big.data + sizeof(h), regs, body);
		io_set(l, &l->big.io, l->slot, s->jfd, l->big.data, sizeof(h) + body, s->jpos);
		s->jpos += l->big.io.aio.len;
		rc = io_start(l, &l->big.io);
	}
	if (rc < 0)
		return rc;
	if (!l->sync)
		return s->err; /* submitted; a failed write shows at the next call */
	rc = slot_wait(l, l->slot);
	if (rc < 0)
		return rc;
	if (s->err < 0)
		return s->err;
	if (l->sync) {
		struct logio *io = &l->fsync_io;

		if (l->in_bytes != 0 && msync(s->map, (size_t)l->in_bytes, MS_SYNC) < 0)
			return -errno;
		rc = io_wait(l, io);    /* an earlier one whose wait failed */
		if (rc < 0)
			return rc;
		io_set(l, io, l->slot, s->jfd, NULL, 0, 0);
		rc = io_start(l, io);
		if (rc == 0)
			rc = io_wait(l, io);
		if (rc < 0)
			return rc;
		if (io->aio.res < 0)
			return io->aio.res;
	}
	return 0;
}

int ft__jnl_end(struct ft__jnl *l)
{
	struct ft__logrec h;
	int rc;

	rc = op_check(l);
	if (rc < 0)
		return rc;
	h = rec_head(l, FT__JNL_END, 0);
	rc = rec_queue(l, &h, NULL, 0);
	if (rc < 0)
		return rc;
	return buf_flush(l);
}
