/* jnl_read.c: the pairwise log's (journal's) reader: record checks, journal and payload verification, the last whole input. */
/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "fdreg.h"
#include "internal.h"
#include "jnl.h"

/*
 * A journal is read as untrusted bytes (a crash tears its tail; anyone who
 * can write the directory can write it). A record counts when its head and
 * body check (magic, version, len in [sizeof head, FT__JNL_REC_MAX], a
 * multiple of 8 and within the image, known type, CRC, the body size of its
 * type) and it fits the journal's shape: FILE first and once; BEGIN once,
 * with an op_seq of this slot; SEND, RECV, INPUT and END after BEGIN and of
 * its op_seq; INPUT and END once each; INPUT's bytes equal to BEGIN's and
 * its regions covering them exactly. The first record that does not count
 * ends the journal: what follows it is never believed.
 */

#define JOURNAL_MAX ((uint64_t)256 << 20)
#define CHUNK (1u << 20)

uint64_t ft__jnl_job_hash(const char *job_id)
{
	uint64_t h = 0xcbf29ce484222325ull;

	if (job_id == NULL)
		job_id = "";
	for (const unsigned char *p = (const unsigned char *)job_id; *p; p++) {
		h ^= *p;
		h *= 0x100000001b3ull;
	}
	return h;
}

int ft__jnl_path(char *out, size_t cap, const char *dir, int rank, int slot, const char *ext)
{
	int n;

	if (out == NULL || dir == NULL || ext == NULL || rank < 0 || (slot != 0 && slot != 1))
		return -FT_EINVAL;
	n = snprintf(out, cap, "%s/r%d-s%d.%s", dir, rank, slot, ext);
	if (n < 0 || (size_t)n >= cap)
		return -FT_EINVAL;
	return 0;
}

struct span {
	uint64_t off, len;
};

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

int ft__jnl_check_regs(const void *regs, size_t nreg, uint64_t bytes)
{
	struct span stack[64], *sp = stack;
	const unsigned char *p = regs;
	uint64_t at = 0;
	size_t n = 0;

	if (nreg != 0 && regs == NULL)
		return -FT_ECORRUPT;
	if (nreg > SIZE_MAX / sizeof(struct span))
		return -FT_ENOMEM;
	if (nreg > FT__ARRAY_SIZE(stack)) {
		sp = malloc(nreg * sizeof(*sp));
		if (sp == NULL)
			return -FT_ENOMEM;
	}
	for (size_t i = 0; i < nreg; i++) {
		struct ft__logreg r;

		memcpy(&r, p + i * sizeof(r), sizeof(r));
		if (r.off > bytes || r.len > bytes - r.off)
			goto bad;
		if (r.len != 0)
			sp[n++] = (struct span){r.off, r.len};
	}
	qsort(sp, n, sizeof(*sp), span_cmp);
	/* sorted, each must start where the one before ended: no gap, no overlap */
	for (size_t i = 0; i < n; i++) {
		if (sp[i].off != at)
			goto bad;
		at += sp[i].len;
	}
	if (at != bytes)
		goto bad;
	if (sp != stack)
		free(sp);
	return 0;
bad:
	if (sp != stack)
		free(sp);
	return -FT_ECORRUPT;
}

/* Why h (with its body) does not count, or NULL. */
static const char *rec_check(const struct ft__logrec *h, const unsigned char *rec,
			     const struct ft__jnl_scan *s, int *err)
{
	size_t body = h->len - sizeof(*h);
	struct ft__logrec z = *h;
	uint32_t crc;

	z.crc = 0;
	crc = ft__crc32c(0, &z, sizeof(z));
	crc = ft__crc32c(crc, rec + sizeof(*h), body);
	if (crc != h->crc)
		return "CRC mismatch";
	switch (h->type) {
	case FT__JNL_FILE: {
		struct ft__logfile f;

		if (body != sizeof(f))
			return "FILE body size is wrong";
		if (s->records != 0 || s->have_file)
			return "FILE record not first";
		memcpy(&f, rec + sizeof(*h), sizeof(f));
		if (f.rank < 0 || f.world_size <= 0 || f.rank >= f.world_size || f.slot > 1)
			return "FILE record has a bad rank, world size or slot";
		return NULL;
	}
	case FT__JNL_BEGIN:
		if (body != sizeof(struct ft__logop))
			return "BEGIN body size is wrong";
		if (!s->have_file)
			return "no FILE record first";
		if (s->have_op)
			return "second BEGIN record";
		if ((h->op_seq & 1) != s->file.slot)
			return "BEGIN op_seq is not of this slot";
		return NULL;
	case FT__JNL_SEND:
	case FT__JNL_RECV:
	case FT__JNL_END:
	case FT__JNL_INPUT:
		if (!s->have_file)
			return "no FILE record first";
		if (!s->have_op)
			return "record before BEGIN";
		if (h->op_seq != s->op_seq)
			return "op_seq differs from BEGIN's";
		if (h->type == FT__JNL_END) {
			if (body != 0)
				return "END record has a body";
			if (s->ended)
				return "second END record";
		} else if (h->type != FT__JNL_INPUT) {
			if (body != 0)
				return "SEND/RECV record has a body";
		} else {
			int rc;

			if (body % sizeof(struct ft__logreg) != 0)
				return "INPUT body is not a whole number of regions";
			if (s->have_input)
				return "second INPUT record";
			if (h->bytes != s->input_bytes)
				return "INPUT bytes differ from BEGIN's";
			rc = ft__jnl_check_regs(rec + sizeof(*h), body / sizeof(struct ft__logreg),
						h->bytes);
			if (rc == -FT_ENOMEM) {
				*err = rc;
				return "out of memory checking INPUT regions";
			}
			if (rc < 0)
				return "INPUT regions do not cover the input exactly";
		}
		return NULL;
	default:
		return "unknown record type";
	}
}

int ft__jnl_parse(const void *buf, size_t len, struct ft__jnl_scan *s,
		  void (*each)(void *arg, const struct ft__logrec *h, const void *body),
		  void *arg)
{
	const unsigned char *p = buf;
	const char *why = NULL;
	size_t off = 0;
	int err = -FT_ECORRUPT;

	if (s == NULL || (buf == NULL && len != 0))
		return -FT_EINVAL;
	memset(s, 0, sizeof(*s));
	s->file_bytes = len;
	while (off < len) {
		size_t rem = len - off;
		struct ft__logrec h;

		if (rem < sizeof(h)) {
			why = "torn record head";
			break;
		}
		memcpy(&h, p + off, sizeof(h));
		if (h.magic != FT__JNL_MAGIC) {
			why = "bad magic";
			break;
		}
		if (h.version != FT__JNL_VERSION) {
			why = "unknown version";
			break;
		}
		if (h.len < sizeof(h) || h.len % 8 != 0 || h.len > FT__JNL_REC_MAX) {
			why = "bad record length";
			break;
		}
		if (h.len > rem) {
			why = "torn record (runs past the end)";
			break;
		}
		why = rec_check(&h, p + off, s, &err);
		if (why != NULL)
			break;
		switch (h.type) {
		case FT__JNL_FILE:
			s->have_file = true;
			memcpy(&s->file, p + off + sizeof(h), sizeof(s->file));
			break;
		case FT__JNL_BEGIN:
			s->have_op = true;
			s->op_seq = h.op_seq;
			s->gen = h.gen;
			s->input_bytes = h.bytes;
			memcpy(&s->op, p + off + sizeof(h), sizeof(s->op));
			break;
		case FT__JNL_SEND:
			s->frames_sent++;
			break;
		case FT__JNL_RECV:
			s->frames_recv++;
			break;
		case FT__JNL_INPUT:
			s->have_input = true;
			break;
		case FT__JNL_END:
			s->ended = true;
			break;
		}
		if (each != NULL)
			each(arg, &h, p + off + sizeof(h));
		s->records++;
		off += h.len;
	}
	s->valid_bytes = off;
	s->tail_why = why;
	return why != NULL ? err : 0;
}

/* The whole file at path, in a malloc'ed buffer (a byte more than len, never NULL). */
static int read_file(const char *path, uint64_t max, unsigned char **out, size_t *len)
{
	struct stat st;
	unsigned char *buf;
	size_t n = 0;
	int fd, rc = 0;

	*out = NULL;
	*len = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	ft__fd_own(fd);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = -FT_EINVAL;
		goto out_close;
	}
	if ((uint64_t)st.st_size > max) {
		rc = -EFBIG;
		goto out_close;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (buf == NULL) {
		rc = -FT_ENOMEM;
		goto out_close;
	}
	/* a file still being written may grow or shrink under us: take what is there */
	while (n < (size_t)st.st_size) {
		ssize_t r = pread(fd, buf + n, (size_t)st.st_size - n, (off_t)n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			free(buf);
			goto out_close;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	*out = buf;
	*len = n;
out_close:
	ft__fd_close(fd);
	return rc;
}

static int pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	size_t n = 0;

	while (n < len) {
		ssize_t r = pread(fd, (char *)buf + n, len - n, (off_t)(off + n));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -FT_ECORRUPT;     /* shorter than its INPUT says */
		n += (size_t)r;
	}
	return 0;
}

int ft__jnl_check_payload(const char *path, const void *regs, size_t nreg, uint64_t bytes,
			  void *copy)
{
	const unsigned char *rp = regs;
	unsigned char *chunk = NULL;
	struct stat st;
	int fd, rc = 0;

	if (path == NULL || (nreg != 0 && regs == NULL))
		return -FT_EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	ft__fd_own(fd);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out_close;
	}
	if (st.st_size < 0 || (uint64_t)st.st_size < bytes || bytes > SIZE_MAX) {
		rc = -FT_ECORRUPT;
		goto out_close;
	}
	if (copy != NULL) {
		rc = pread_all(fd, copy, (size_t)bytes, 0);
		if (rc < 0)
			goto out_close;
	} else {
		chunk = malloc(CHUNK);
		if (chunk == NULL) {
			rc = -FT_ENOMEM;
			goto out_close;
		}
	}
	for (size_t i = 0; i < nreg; i++) {
		struct ft__logreg r;
		uint32_t crc = 0;

		memcpy(&r, rp + i * sizeof(r), sizeof(r));
		if (r.off > bytes || r.len > bytes - r.off) {
			rc = -FT_ECORRUPT;
			goto out_free;
		}
		if (copy != NULL) {
			crc = ft__jnl_sum((const char *)copy + r.off, (size_t)r.len);
		} else {
			struct ft__sum sum;
			ft__sum_init(&sum);
			for (uint64_t done = 0; done < r.len;) {
				size_t n = r.len - done < CHUNK ? (size_t)(r.len - done) : CHUNK;
				rc = pread_all(fd, chunk, n, r.off + done);
				if (rc < 0)
					goto out_free;
				ft__sum_update(&sum, chunk, n);
				done += n;
			}
			crc = ft__sum_final(&sum);
		}
		if (crc != r.crc) {
			rc = -FT_ECORRUPT;
			goto out_free;
		}
	}
out_free:
	free(chunk);
out_close:
	ft__fd_close(fd);
	return rc;
}

uint32_t ft__jnl_sum(const void *p, size_t len)
{
	struct ft__sum s;

	ft__sum_init(&s);
	ft__sum_update(&s, p, len);
	return ft__sum_final(&s);
}

struct input_body {
	const void *regs;
	size_t nreg;
};

static void grab_input(void *arg, const struct ft__logrec *h, const void *body)
{
	struct input_body *in = arg;

	if (h->type == FT__JNL_INPUT) {
		in->regs = body;
		in->nreg = (h->len - sizeof(*h)) / sizeof(struct ft__logreg);
	}
}

/*
 * read_slot, and the payload copied into copy (bytes of it, when not NULL
 * and the input fits in cap).
 */
static int slot_read(const char *dir, int rank, int slot, uint64_t job_hash,
		     struct ft__jnl_scan *s, void *copy, size_t cap, bool verify)
{
	struct input_body in = {NULL, 0};
	char path[PATH_MAX];
	unsigned char *buf;
	size_t len;
	int rc, prc;

	if (s == NULL)
		return -FT_EINVAL;
	memset(s, 0, sizeof(*s));
	rc = ft__jnl_path(path, sizeof(path), dir, rank, slot, "log");
	if (rc < 0)
		return rc;
	rc = read_file(path, JOURNAL_MAX, &buf, &len);
	if (rc == -EFBIG) {
		s->tail_why = "journal larger than 256 MiB";
		return -FT_ECORRUPT;
	}
	if (rc < 0)
		return rc;
	if (len == 0) {
		/* opened, or truncated for an op that logged nothing yet */
		free(buf);
		return -ENOENT;
	}
	prc = ft__jnl_parse(buf, len, s, grab_input, &in);
	if (prc < 0 && prc != -FT_ECORRUPT) {
		free(buf);
		return prc;
	}
	if (!s->have_file || s->file.job_hash != job_hash || s->file.rank != rank ||
	    s->file.slot != (uint32_t)slot) {
		if (s->tail_why == NULL)
			s->tail_why = !s->have_file ? "no FILE record" : "journal of another job, rank or slot";
		s->have_input = false;
		free(buf);
		return -FT_ECORRUPT;
	}
	if (s->have_input && verify) {
		rc = ft__jnl_path(path, sizeof(path), dir, rank, slot, "in");
		if (rc == 0)
			rc = ft__jnl_check_payload(path, in.regs, in.nreg, s->input_bytes,
						   copy != NULL && s->input_bytes <= cap ? copy : NULL);
		if (rc < 0) {
			s->have_input = false;
			if (rc != -FT_ECORRUPT && rc != -ENOENT && rc != -FT_ENOMEM) {
				free(buf);
				return rc;
			}
			free(buf);
			return rc == -FT_ENOMEM ? rc : -FT_ECORRUPT;
		}
	}
	free(buf);
	return prc;
}

int ft__jnl_read_slot(const char *dir, int rank, int slot, uint64_t job_hash,
		      struct ft__jnl_scan *s)
{
	return slot_read(dir, rank, slot, job_hash, s, NULL, 0, true);
}

int ft__jnl_last_input(const char *dir, int rank, uint64_t job_hash, uint64_t *op_seq,
		       uint32_t *gen, struct ft__logop *op, void *buf, size_t cap)
{
	struct ft__jnl_scan s[2];
	int order[2] = {-1, -1}, best = -1, rc;

	/* the journals first; then the payload of the later op only (it is
	 * MiBs), and of the earlier one only if the later does not check */
	for (int i = 0; i < 2; i++) {
		rc = slot_read(dir, rank, i, job_hash, &s[i], NULL, 0, false);
		if (rc == -FT_ENOMEM)
			return rc;
	}
	if (s[0].have_input && s[1].have_input) {
		order[0] = s[0].op_seq > s[1].op_seq ? 0 : 1;
		order[1] = 1 - order[0];
	} else if (s[0].have_input || s[1].have_input) {
		order[0] = s[0].have_input ? 0 : 1;
	}
	for (int j = 0; j < 2 && order[j] >= 0 && best < 0; j++) {
		int i = order[j];
		bool copy_here = buf != NULL && s[i].input_bytes <= cap;
		/* a torn tail after INPUT still leaves the input whole */
		rc = slot_read(dir, rank, i, job_hash, &s[i], copy_here ? buf : NULL,
			       copy_here ? cap : 0, true);
		if (rc == -FT_ENOMEM)
			return rc;
		if (s[i].have_input)
			best = i;
	}
	if (best < 0)
		return -ENOENT;
	if (op_seq != NULL)
		*op_seq = s[best].op_seq;
	if (gen != NULL)
		*gen = s[best].gen;
	if (op != NULL)
		*op = s[best].op;
	return 0;
}
