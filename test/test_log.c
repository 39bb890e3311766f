/* test_log.c: the pairwise log: both engines round trip, torn and corrupt journals and payloads, another job's log, a full disk. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftcc.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aio.h"
#include "crc32c.h"
#include "jnl.h"

#define JOB "test-log-job"
#define NSEG 4

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void tmp_dir(char *out, size_t cap)
{
	const char *t = getenv("TMPDIR");

	snprintf(out, cap, "%s/ftcc-log-XXXXXX", t != NULL && *t ? t : "/tmp");
	cr_assert_not_null(mkdtemp(out), "mkdtemp: %s", strerror(errno));
}

static void rm_dir(const char *dir)
{
	nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static struct ft__jnl *open_log(const char *dir, enum ft__jnl_engine engine, bool sync)
{
	struct ft__jnl_params p = {
		.dir = dir, .job_id = JOB, .rank = 1, .world_size = 3, .sync = sync, .engine = engine,
	};
	struct ft__jnl *l = NULL;
	int rc = ft__jnl_open(&p, &l);

	cr_assert_eq(rc, 0, "ft__jnl_open: %d", rc);
	cr_assert_not_null(l);
	return l;
}

/* The input of op s: count floats whose bytes depend on s. */
static void fill(void *payload, uint64_t seq, size_t bytes)
{
	unsigned char *p = payload;

	for (size_t i = 0; i < bytes; i++)
		p[i] = (unsigned char)(i * 31u + seq * 7u + 1u);
}

static void make_regs(const void *payload, size_t bytes, struct ft__logreg *regs, size_t nreg)
{
	size_t per = bytes / nreg;

	for (size_t i = 0; i < nreg; i++) {
		/* in reverse order: any order is allowed */
		size_t k = nreg - 1 - i;
		size_t off = k * per, len = k == nreg - 1 ? bytes - off : per;
		regs[i] = (struct ft__logreg){.off = off, .len = len};
		regs[i].crc = ft__jnl_sum((const char *)payload + off, len);
	}
}

/* Logs op seq the way an allreduce would: input, frames, end. */
static void log_op(struct ft__jnl *l, uint64_t seq, uint64_t count, size_t nframes)
{
	struct ft__logop op = {.kind = 0, .dtype = FT_FLOAT32, .op = FT_SUM, .root = -1,
			       .count = count};
	struct ft__logreg regs[NSEG];
	size_t bytes = count * 4;
	void *payload = NULL;
	int rc;

	rc = ft__jnl_begin(l, seq, 7, &op, &payload);
	cr_assert_eq(rc, 0, "begin: %d", rc);
	if (bytes == 0) {
		cr_assert_null(payload);
	} else {
		cr_assert_not_null(payload);
		fill(payload, seq, bytes);
	}
	make_regs(payload, bytes, regs, NSEG);
	rc = ft__jnl_input(l, regs, NSEG);
	cr_assert_eq(rc, 0, "input: %d", rc);
	for (size_t i = 0; i < nframes; i++) {
		rc = ft__jnl_frame(l, i % 2 ? FT__JNL_RECV : FT__JNL_SEND, 7, (uint32_t)(i / 2),
				   (uint32_t)i, i % 2 ? 0 : 2, i * 100, 100, (uint32_t)i);
		cr_assert_eq(rc, 0, "frame %zu: %d", i, rc);
	}
	rc = ft__jnl_end(l);
	cr_assert_eq(rc, 0, "end: %d", rc);
}

static void *read_whole(const char *path, size_t *len)
{
	struct stat st;
	void *buf;
	int fd = open(path, O_RDONLY);

	cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
	cr_assert_eq(fstat(fd, &st), 0);
	buf = malloc((size_t)st.st_size + 1);
	cr_assert_not_null(buf);
	cr_assert_eq(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

static void write_whole(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

static void slot_path(char *out, const char *dir, int slot, const char *ext)
{
	cr_assert_eq(ft__jnl_path(out, PATH_MAX, dir, 1, slot, ext), 0);
}

/* ---- record collection ---- */

struct seen {
	size_t n;
	struct ft__logrec h[512];
	uint64_t end[512];      /* journal offset just past each record */
	uint64_t at;
};

static void collect(void *arg, const struct ft__logrec *h, const void *body)
{
	struct seen *s = arg;

	(void)body;
	if (s->n < 512) {
		s->h[s->n] = *h;
		s->at += h->len;
		s->end[s->n++] = s->at;
	}
}

/* ---- round trip through each engine ---- */

static void round_trip(enum ft__jnl_engine engine, bool sync)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct ft__jnl *l;
	struct ft__jnl_scan s;
	struct seen seen;
	uint64_t seq = 0;
	uint32_t gen = 0;
	struct ft__logop op;
	size_t jlen;
	void *j;
	int rc;

	tmp_dir(dir, sizeof(dir));
	l = open_log(dir, engine, sync);
	if (engine == FT__JNL_URING && strcmp(ft__jnl_engine_name(l), "io_uring") != 0) {
		ft__jnl_close(l);
		rm_dir(dir);
		fprintf(stderr, "SKIPPED: log/io_uring: io_uring_queue_init failed or liburing "
				"is not compiled in; the io_uring engine was NOT tested\n");
		cr_skip_test("io_uring is not available: the io_uring engine was not tested");
	}
	if (engine == FT__JNL_PWRITE)
		cr_assert_str_eq(ft__jnl_engine_name(l), "pwrite");
	/* ops 0..2; op 1 has enough frames to fill several batch buffers */
	log_op(l, 0, 1000, 4);
	log_op(l, 1, 100000, 3000);
	log_op(l, 2, 5003, 10);
	ft__jnl_close(l);

	/* slot 0: op 2 */
	rc = ft__jnl_read_slot(dir, 1, 0, ft__jnl_job_hash(JOB), &s);
	cr_assert_eq(rc, 0, "read slot 0: %d (%s)", rc, s.tail_why ? s.tail_why : "");
	cr_assert(s.have_file && s.have_op && s.have_input && s.ended);
	cr_assert_eq(s.op_seq, 2);
	cr_assert_eq(s.gen, 7);
	cr_assert_eq(s.op.count, 5003);
	cr_assert_eq(s.input_bytes, 5003 * 4);
	cr_assert_eq(s.frames_sent, 5);
	cr_assert_eq(s.frames_recv, 5);
	cr_assert_eq(s.records, 2 + 1 + 10 + 1);
	cr_assert_eq(s.file.rank, 1);
	cr_assert_eq(s.file.world_size, 3);
	cr_assert_eq(s.file.slot, 0);
	cr_assert_eq(s.valid_bytes, s.file_bytes);
	cr_assert_null(s.tail_why);

	/* slot 1: op 1, its frames in order with their fields */
	rc = ft__jnl_read_slot(dir, 1, 1, ft__jnl_job_hash(JOB), &s);
	cr_assert_eq(rc, 0, "read slot 1: %d", rc);
	cr_assert(s.have_input && s.ended);
	cr_assert_eq(s.op_seq, 1);
	cr_assert_eq(s.frames_sent + s.frames_recv, 3000);
	slot_path(path, dir, 1, "log");
	j = read_whole(path, &jlen);
	memset(&seen, 0, sizeof(seen));
	cr_assert_eq(ft__jnl_parse(j, jlen, &s, collect, &seen), 0);
	cr_assert_eq(seen.h[0].type, FT__JNL_FILE);
	cr_assert_eq(seen.h[1].type, FT__JNL_BEGIN);
	cr_assert_eq(seen.h[2].type, FT__JNL_INPUT);
	cr_assert_eq(seen.h[2].bytes, 400000);
	for (size_t i = 0; i < 500; i++) {
		const struct ft__logrec *h = &seen.h[3 + i];
		cr_assert_eq(h->type, i % 2 ? FT__JNL_RECV : FT__JNL_SEND);
		cr_assert_eq(h->op_seq, 1);
		cr_assert_eq(h->gen, 7);
		cr_assert_eq(h->step, i / 2);
		cr_assert_eq(h->seg, i);
		cr_assert_eq(h->peer, i % 2 ? 0 : 2);
		cr_assert_eq(h->off, i * 100);
		cr_assert_eq(h->bytes, 100);
		cr_assert_eq(h->data_crc, i);
	}
	free(j);

	/* the latest whole input is op 2's, and its bytes come back */
	{
		size_t bytes = 5003 * 4;
		unsigned char *buf = malloc(bytes), *want = malloc(bytes);

		cr_assert(buf && want);
		fill(want, 2, bytes);
		rc = ft__jnl_last_input(dir, 1, ft__jnl_job_hash(JOB), &seq, &gen, &op, buf, bytes);
		cr_assert_eq(rc, 0, "last_input: %d", rc);
		cr_assert_eq(seq, 2);
		cr_assert_eq(gen, 7);
		cr_assert_eq(op.count, 5003);
		cr_assert_eq(memcmp(buf, want, bytes), 0);
		free(buf);
		free(want);
	}
	rm_dir(dir);
}

Test(log, uring_round_trip, .timeout = 60) { round_trip(FT__JNL_URING, false); }
Test(log, pwrite_round_trip, .timeout = 60) { round_trip(FT__JNL_PWRITE, false); }
Test(log, uring_sync_round_trip, .timeout = 60) { round_trip(FT__JNL_URING, true); }
Test(log, pwrite_sync_round_trip, .timeout = 60) { round_trip(FT__JNL_PWRITE, true); }

Test(log, job_hash_is_fnv1a_64)
{
	cr_assert_eq(ft__jnl_job_hash(""), 0xcbf29ce484222325ull);
	cr_assert_eq(ft__jnl_job_hash("a"), 0xaf63dc4c8601ec8cull);
	cr_assert_eq(ft__jnl_job_hash("foobar"), 0x85944171f73967e8ull);
}

Test(log, bad_arguments)
{
	struct ft__jnl_params p = {.dir = "/tmp", .job_id = "j", .rank = 3, .world_size = 3};
	struct ft__logop op = {.dtype = 200, .count = 1};
	struct ft__jnl *l = (struct ft__jnl *)&p;
	char dir[PATH_MAX];
	void *payload;

	cr_assert_eq(ft__jnl_open(&p, &l), -FT_EINVAL);
	cr_assert_null(l);
	cr_assert_eq(ft__jnl_open(NULL, &l), -FT_EINVAL);
	tmp_dir(dir, sizeof(dir));
	l = open_log(dir, FT__JNL_PWRITE, false);
	/* no op begun */
	cr_assert_eq(ft__jnl_frame(l, FT__JNL_SEND, 0, 0, 0, 0, 0, 0, 0), -FT_EINVAL);
	cr_assert_eq(ft__jnl_end(l), -FT_EINVAL);
	/* unknown dtype */
	cr_assert_eq(ft__jnl_begin(l, 0, 0, &op, &payload), -FT_EINVAL);
	op.dtype = FT_INT32;
	op.count = 10;
	cr_assert_eq(ft__jnl_begin(l, 0, 0, &op, &payload), 0);
	cr_assert_eq(ft__jnl_frame(l, FT__JNL_END, 0, 0, 0, 0, 0, 0, 0), -FT_EINVAL);
	/* regions that do not cover the input */
	struct ft__logreg r[2] = {{.off = 0, .len = 20}, {.off = 10, .len = 20}};
	cr_assert_eq(ft__jnl_input(l, r, 2), -FT_EINVAL);
	r[1].off = 20;
	r[0].crc = ft__jnl_sum(payload, 20);
	r[1].crc = ft__jnl_sum((char *)payload + 20, 20);
	cr_assert_eq(ft__jnl_input(l, r, 2), 0);
	cr_assert_eq(ft__jnl_end(l), 0);
	ft__jnl_close(l);
	ft__jnl_close(NULL);
	rm_dir(dir);
}

Test(log, check_regs)
{
	struct ft__logreg r[3] = {{.off = 50, .len = 50}, {.off = 0, .len = 50}, {.off = 100, .len = 0}};

	cr_assert_eq(ft__jnl_check_regs(r, 3, 100), 0);
	cr_assert_eq(ft__jnl_check_regs(r, 2, 100), 0);
	cr_assert_eq(ft__jnl_check_regs(r, 2, 101), -FT_ECORRUPT);     /* gap at the end */
	cr_assert_eq(ft__jnl_check_regs(r, 2, 99), -FT_ECORRUPT);      /* past the end */
	r[2] = (struct ft__logreg){.off = 40, .len = 20};
	cr_assert_eq(ft__jnl_check_regs(r, 3, 100), -FT_ECORRUPT);     /* overlap */
	r[2] = (struct ft__logreg){.off = 101, .len = 0};
	cr_assert_eq(ft__jnl_check_regs(r, 3, 100), -FT_ECORRUPT);     /* empty, out of range */
	r[0] = (struct ft__logreg){.off = 1, .len = UINT64_MAX};
	cr_assert_eq(ft__jnl_check_regs(r, 1, 100), -FT_ECORRUPT);     /* wraps */
	cr_assert_eq(ft__jnl_check_regs(NULL, 0, 0), 0);
	cr_assert_eq(ft__jnl_check_regs(NULL, 0, 1), -FT_ECORRUPT);
}

/* The mapping stays across ops of a slot and grows when it must. */
Test(log, payload_mapping_kept_and_grown)
{
	struct ft__logop op = {.dtype = FT_UINT8, .count = 4096};
	char dir[PATH_MAX], path[PATH_MAX];
	void *a, *b, *c;
	struct stat st;
	struct ft__jnl *l;

	tmp_dir(dir, sizeof(dir));
	l = open_log(dir, FT__JNL_PWRITE, false);
	cr_assert_eq(ft__jnl_begin(l, 0, 0, &op, &a), 0);
	cr_assert_eq(ft__jnl_end(l), 0);
	op.count = 100;
	cr_assert_eq(ft__jnl_begin(l, 2, 0, &op, &b), 0);
	cr_assert_eq(a, b);
	op.count = 1 << 20;
	cr_assert_eq(ft__jnl_begin(l, 4, 0, &op, &c), 0);
	memset(c, 0xab, 1 << 20);
	slot_path(path, dir, 0, "in");
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_geq(st.st_size, 1 << 20);
	op.count = 0;
	cr_assert_eq(ft__jnl_begin(l, 6, 0, &op, &c), 0);
	cr_assert_null(c);
	cr_assert_eq(ft__jnl_input(l, NULL, 0), 0);
	ft__jnl_close(l);
	rm_dir(dir);
}

/* More regions than fit in a batch buffer: the INPUT record is written alone. */
Test(log, big_input_record, .timeout = 60)
{
	enum { N = 6000 };
	struct ft__logop op = {.dtype = FT_UINT8, .count = N * 3};
	struct ft__logreg *regs = calloc(N, sizeof(*regs));
	char dir[PATH_MAX];
	struct ft__jnl_scan s;
	struct ft__jnl *l;
	void *p;

	cr_assert_not_null(regs);
	tmp_dir(dir, sizeof(dir));
	l = open_log(dir, FT__JNL_URING, false);
	cr_assert_eq(ft__jnl_begin(l, 1, 3, &op, &p), 0);
	fill(p, 1, N * 3);
	for (size_t i = 0; i < N; i++) {
		regs[i] = (struct ft__logreg){.off = i * 3, .len = 3};
		regs[i].crc = ft__jnl_sum((char *)p + i * 3, 3);
	}
	cr_assert_eq(ft__jnl_frame(l, FT__JNL_SEND, 3, 0, 0, 2, 0, 3, 0), 0);
	cr_assert_eq(ft__jnl_input(l, regs, N), 0);
	cr_assert_eq(ft__jnl_frame(l, FT__JNL_RECV, 3, 0, 0, 0, 0, 3, 0), 0);
	cr_assert_eq(ft__jnl_end(l), 0);
	ft__jnl_close(l);
	cr_assert_eq(ft__jnl_read_slot(dir, 1, 1, ft__jnl_job_hash(JOB), &s), 0);
	cr_assert(s.have_input && s.ended);
	cr_assert_eq(s.frames_sent, 1);
	cr_assert_eq(s.frames_recv, 1);
	free(regs);
	rm_dir(dir);
}

/* ---- torn and corrupt journals ---- */

/* A journal of one op (in dir, slot 1): FILE BEGIN SEND RECV INPUT SEND END. */
static void small_journal(const char *dir, struct seen *seen, void **j, size_t *jlen)
{
	struct ft__logop op = {.dtype = FT_FLOAT64, .count = 300};
	struct ft__logreg regs[NSEG];
	char path[PATH_MAX];
	struct ft__jnl_scan s;
	struct ft__jnl *l = open_log(dir, FT__JNL_PWRITE, false);
	void *p;

	cr_assert_eq(ft__jnl_begin(l, 5, 2, &op, &p), 0);
	fill(p, 5, 2400);
	make_regs(p, 2400, regs, NSEG);
	cr_assert_eq(ft__jnl_frame(l, FT__JNL_SEND, 2, 0, 1, 2, 0, 600, 11), 0);
	cr_assert_eq(ft__jnl_frame(l, FT__JNL_RECV, 2, 0, 0, 0, 600, 600, 12), 0);
	cr_assert_eq(ft__jnl_input(l, regs, NSEG), 0);
	cr_assert_eq(ft__jnl_frame(l, FT__JNL_SEND, 2, 1, 0, 2, 0, 600, 13), 0);
	cr_assert_eq(ft__jnl_end(l), 0);
	ft__jnl_close(l);
	slot_path(path, dir, 1, "log");
	*j = read_whole(path, jlen);
	memset(seen, 0, sizeof(*seen));
	cr_assert_eq(ft__jnl_parse(*j, *jlen, &s, collect, seen), 0);
	cr_assert_eq(seen->n, 7);
	cr_assert_eq(seen->h[4].type, FT__JNL_INPUT);
	cr_assert_eq(seen->end[6], *jlen);
}

Test(log, truncated_at_every_boundary_and_inside)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct ft__jnl_scan s;
	struct seen seen;
	size_t jlen;
	void *j;

	tmp_dir(dir, sizeof(dir));
	small_journal(dir, &seen, &j, &jlen);
	slot_path(path, dir, 1, "log");
	for (size_t k = 0; k <= seen.n; k++) {
		uint64_t b = k == 0 ? 0 : seen.end[k - 1];
		uint64_t next = k < seen.n ? seen.end[k] : b;
		bool input_whole = k >= 5;
		int rc;

		/* at the boundary: all checks, k records */
		rc = ft__jnl_parse(j, b, &s, NULL, NULL);
		cr_assert_eq(rc, 0, "cut at %llu: %d", (unsigned long long)b, rc);
		cr_assert_eq(s.valid_bytes, b);
		cr_assert_eq(s.records, k);
		cr_assert_null(s.tail_why);
		cr_assert_eq(s.have_input, input_whole);
		/* the same through the file: read_slot checks the payload too */
		write_whole(path, j, b);
		rc = ft__jnl_read_slot(dir, 1, 1, ft__jnl_job_hash(JOB), &s);
		if (k == 0)
			cr_assert_eq(rc, -ENOENT);       /* an empty journal: no op */
		else
			cr_assert_eq(rc, 0, "read_slot cut at %llu: %d", (unsigned long long)b, rc);
		cr_assert_eq(s.have_input, input_whole);
		/* inside the next record: a torn tail at b */
		uint64_t cuts[] = {b + 1, b + 7, b + 8, b + 32, b + 63, b + 64, next - 8, next - 1};
		for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
			if (cuts[c] <= b || cuts[c] >= next)
				continue;
			rc = ft__jnl_parse(j, cuts[c], &s, NULL, NULL);
			cr_assert_eq(rc, -FT_ECORRUPT, "cut at %llu", (unsigned long long)cuts[c]);
			cr_assert_eq(s.valid_bytes, b, "cut at %llu: valid %llu, want %llu",
				     (unsigned long long)cuts[c], (unsigned long long)s.valid_bytes,
				     (unsigned long long)b);
			cr_assert_eq(s.file_bytes, cuts[c]);
			cr_assert_not_null(s.tail_why);
			cr_assert_eq(s.records, k);
			cr_assert_eq(s.have_input, input_whole);
			write_whole(path, j, cuts[c]);
			rc = ft__jnl_read_slot(dir, 1, 1, ft__jnl_job_hash(JOB), &s);
			cr_assert_eq(rc, -FT_ECORRUPT);
			cr_assert_eq(s.have_input, input_whole);
		}
	}
	free(j);
	rm_dir(dir);
}

Test(log, every_bit_flip_in_the_journal_is_caught, .timeout = 60)
{
	char dir[PATH_MAX];
	struct ft__jnl_scan s;
	struct seen seen;
	unsigned char *c;
	size_t jlen;
	void *j;

	tmp_dir(dir, sizeof(dir));
	small_journal(dir, &seen, &j, &jlen);
	c = malloc(jlen);
	cr_assert_not_null(c);
	for (size_t i = 0; i < jlen; i++) {
		size_t rec = 0;

		while (seen.end[rec] <= i)
			rec++;
		for (int bit = 0; bit < 8; bit++) {
			memcpy(c, j, jlen);
			c[i] ^= (unsigned char)(1u << bit);
			int rc = ft__jnl_parse(c, jlen, &s, NULL, NULL);
			cr_assert_eq(rc, -FT_ECORRUPT, "flip of byte %zu bit %d not caught", i, bit);
			/* the records before the flipped one still count */
			cr_assert_eq(s.valid_bytes, rec == 0 ? 0 : seen.end[rec - 1],
				     "flip of byte %zu bit %d", i, bit);
			cr_assert_eq(s.have_input, rec > 4);
		}
	}
	free(c);
	free(j);
	rm_dir(dir);
}

Test(log, payload_bit_flip_drops_the_input)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct ft__jnl_scan s;
	struct seen seen;
	unsigned char byte;
	size_t jlen;
	void *j;
	int fd;

	tmp_dir(dir, sizeof(dir));
	small_journal(dir, &seen, &j, &jlen);
	cr_assert_eq(ft__jnl_read_slot(dir, 1, 1, ft__jnl_job_hash(JOB), &s), 0);
	cr_assert(s.have_input);
	slot_path(path, dir, 1, "in");
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &byte, 1, 1234), 1);
	byte ^= 0x10;
	cr_assert_eq(pwrite(fd, &byte, 1, 1234), 1);
	cr_assert_eq(ft__jnl_read_slot(dir, 1, 1, ft__jnl_job_hash(JOB), &s), -FT_ECORRUPT);
	cr_assert_not(s.have_input);
	cr_assert_eq(ft__jnl_last_input(dir, 1, ft__jnl_job_hash(JOB), NULL, NULL, NULL, NULL, 0),
		     -ENOENT);
	/* a payload file shorter than the input */
	byte ^= 0x10;
	cr_assert_eq(pwrite(fd, &byte, 1, 1234), 1);
	cr_assert_eq(ft__jnl_read_slot(dir, 1, 1, ft__jnl_job_hash(JOB), &s), 0);
	cr_assert_eq(ftruncate(fd, 2399), 0);
	cr_assert_eq(ft__jnl_read_slot(dir, 1, 1, ft__jnl_job_hash(JOB), &s), -FT_ECORRUPT);
	cr_assert_not(s.have_input);
	close(fd);
	/* no payload file at all */
	cr_assert_eq(unlink(path), 0);
	cr_assert_eq(ft__jnl_read_slot(dir, 1, 1, ft__jnl_job_hash(JOB), &s), -FT_ECORRUPT);
	cr_assert_not(s.have_input);
	free(j);
	rm_dir(dir);
}

Test(log, another_jobs_journal_is_refused)
{
	char dir[PATH_MAX];
	struct ft__jnl_scan s;
	struct seen seen;
	size_t jlen;
	void *j;

	tmp_dir(dir, sizeof(dir));
	small_journal(dir, &seen, &j, &jlen);
	cr_assert_eq(ft__jnl_read_slot(dir, 1, 1, ft__jnl_job_hash("another-job"), &s),
		     -FT_ECORRUPT);
	cr_assert_not(s.have_input);
	cr_assert_not_null(s.tail_why);
	cr_assert_eq(ft__jnl_last_input(dir, 1, ft__jnl_job_hash("another-job"), NULL, NULL, NULL,
					NULL, 0), -ENOENT);
	/* another rank's name on the file: rank 1's journal copied as rank 2's */
	{
		char path[PATH_MAX];
		cr_assert_eq(ft__jnl_path(path, sizeof(path), dir, 2, 1, "log"), 0);
		write_whole(path, j, jlen);
		cr_assert_eq(ft__jnl_read_slot(dir, 2, 1, ft__jnl_job_hash(JOB), &s), -FT_ECORRUPT);
		cr_assert_not(s.have_input);
	}
	/* slot 0 was never used: its journal is empty */
	cr_assert_eq(ft__jnl_read_slot(dir, 1, 0, ft__jnl_job_hash(JOB), &s), -ENOENT);
	free(j);
	rm_dir(dir);
}

/* The later op wins; a torn tail after INPUT leaves that input usable. */
Test(log, last_input_picks_the_later_whole_one)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct ft__jnl_scan s;
	struct ft__logop op;
	struct ft__jnl *l;
	uint64_t seq;
	uint32_t gen;
	size_t len;
	void *j;

	tmp_dir(dir, sizeof(dir));
	cr_assert_eq(ft__jnl_last_input(dir, 1, ft__jnl_job_hash(JOB), &seq, &gen, &op, NULL, 0),
		     -ENOENT);
	l = open_log(dir, FT__JNL_URING, false);
	log_op(l, 10, 64, 2);
	log_op(l, 11, 64, 2);
	ft__jnl_close(l);
	cr_assert_eq(ft__jnl_last_input(dir, 1, ft__jnl_job_hash(JOB), &seq, &gen, &op, NULL, 0), 0);
	cr_assert_eq(seq, 11);
	/* op 11's journal torn after its INPUT: still op 11 */
	slot_path(path, dir, 1, "log");
	j = read_whole(path, &len);
	write_whole(path, j, len - 3);
	cr_assert_eq(ft__jnl_read_slot(dir, 1, 1, ft__jnl_job_hash(JOB), &s), -FT_ECORRUPT);
	cr_assert(s.have_input);
	cr_assert_eq(ft__jnl_last_input(dir, 1, ft__jnl_job_hash(JOB), &seq, &gen, &op, NULL, 0), 0);
	cr_assert_eq(seq, 11);
	/* torn before its INPUT (FILE and BEGIN only: 64 + 24 + 64 + 16 bytes): op 10 */
	write_whole(path, j, 168);
	cr_assert_eq(ft__jnl_read_slot(dir, 1, 1, ft__jnl_job_hash(JOB), &s), 0);
	cr_assert(s.have_op && !s.have_input);
	cr_assert_eq(ft__jnl_last_input(dir, 1, ft__jnl_job_hash(JOB), &seq, &gen, &op, NULL, 0), 0);
	cr_assert_eq(seq, 10);
	free(j);
	rm_dir(dir);
}

/* Random bytes and mutations of a real journal: parse stays in bounds (run under make asan). */
Test(log, parse_survives_garbage, .timeout = 60)
{
	char dir[PATH_MAX];
	struct ft__jnl_scan s;
	struct seen seen;
	unsigned char *c;
	uint64_t x = 0x9e3779b97f4a7c15ull;
	size_t jlen;
	void *j;

	tmp_dir(dir, sizeof(dir));
	small_journal(dir, &seen, &j, &jlen);
	c = malloc(jlen);
	cr_assert_not_null(c);
	for (int round = 0; round < 20000; round++) {
		size_t n;

		memcpy(c, j, jlen);
		for (int k = 0; k < 1 + round % 8; k++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			c[x % jlen] = (unsigned char)(x >> 32);
		}
		n = (size_t)(x >> 40) % (jlen + 1);
		int rc = ft__jnl_parse(c, n, &s, NULL, NULL);
		cr_assert(rc == 0 || rc == -FT_ECORRUPT);
		cr_assert_leq(s.valid_bytes, n);
		cr_assert_eq(rc == 0, s.tail_why == NULL);
	}
	cr_assert_eq(ft__jnl_parse(NULL, 0, &s, NULL, NULL), 0);
	cr_assert_eq(s.records, 0);
	free(c);
	free(j);
	rm_dir(dir);
}

/* ---- a full disk ---- */

Test(log, full_disk_is_an_error_not_a_crash, .timeout = 60)
{
	struct ft__logop op = {.dtype = FT_UINT8, .count = 4 << 20};
	char dir[PATH_MAX];
	struct ft__jnl *l;
	void *p;
	int rc;

	tmp_dir(dir, sizeof(dir));
	if (mount("ftcc-test", dir, "tmpfs", 0, "size=1m") < 0) {
		int e = errno;
		rm_dir(dir);
		fprintf(stderr, "SKIPPED: log/full_disk: mount -t tmpfs: %s; the full-disk case "
				"was NOT tested\n", strerror(e));
		cr_skip_test("cannot mount a small tmpfs: %s", strerror(e));
	}
	for (int e = 0; e < 2; e++) {
		enum ft__jnl_engine engine = e ? FT__JNL_PWRITE : FT__JNL_URING;
		const char *sub = e ? "pw" : "ur";
		char d[PATH_MAX + 8];

		snprintf(d, sizeof(d), "%s/%s", dir, sub);
		l = open_log(d, engine, false);
		/* a 4 MiB payload on a 1 MiB disk: refused at begin */
		op.count = 4 << 20;
		rc = ft__jnl_begin(l, 0, 0, &op, &p);
		cr_assert_eq(rc, -ENOSPC, "%s: begin of 4 MiB: %d", ft__jnl_engine_name(l), rc);
		cr_assert_null(p);
		/* a payload that fits, then journal records until the disk fills */
		op.count = 600 << 10;
		rc = ft__jnl_begin(l, 2, 0, &op, &p);
		cr_assert_eq(rc, 0, "%s: begin of 600 KiB: %d", ft__jnl_engine_name(l), rc);
		memset(p, 1, op.count);
		for (int i = 0; i < 200000 && rc == 0; i++)
			rc = ft__jnl_frame(l, FT__JNL_SEND, 0, 0, (uint32_t)i, 2, 0, 1, 0);
		if (rc == 0)
			rc = ft__jnl_end(l);
		cr_assert_eq(rc, -ENOSPC, "%s: journal on a full disk: %d", ft__jnl_engine_name(l),
			     rc);
		/* sticky for the op */
		cr_assert_eq(ft__jnl_end(l), -ENOSPC);
		ft__jnl_close(l);
		/* free the disk for the other engine */
		char path[PATH_MAX];
		for (int slot = 0; slot < 2; slot++) {
			cr_assert_eq(ft__jnl_path(path, sizeof(path), d, 1, slot, "in"), 0);
			unlink(path);
			cr_assert_eq(ft__jnl_path(path, sizeof(path), d, 1, slot, "log"), 0);
			unlink(path);
		}
	}
	cr_assert_eq(umount2(dir, MNT_DETACH), 0, "umount: %s", strerror(errno));
	rm_dir(dir);
}

/* ftcc-log: 0 on a good log, 1 on a torn one or a payload that does not match, 2 on a missing file. */
Test(log, ftcc_log_tool_exit_codes, .timeout = 60)
{
	const char *b = getenv("FTCC_BUILD_DIR");
	char tool[PATH_MAX], dir[PATH_MAX], path[PATH_MAX], cmd[3 * PATH_MAX];
	struct seen seen;
	size_t jlen;
	void *j;
	int st;

	snprintf(tool, sizeof(tool), "%s/ftcc-log", b != NULL && *b ? b : "build");
	if (access(tool, X_OK) < 0) {
		fprintf(stderr, "SKIPPED: log/ftcc_log_tool: %s is not built\n", tool);
		cr_skip_test("%s is not built", tool);
	}
	tmp_dir(dir, sizeof(dir));
	small_journal(dir, &seen, &j, &jlen);
	slot_path(path, dir, 1, "log");
	snprintf(cmd, sizeof(cmd), "%s -q %s >/dev/null", tool, path);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "good log: status %d", st);
	snprintf(cmd, sizeof(cmd), "%s --dir %s --rank 1 >/dev/null", tool, dir);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "--dir: status %d", st);
	write_whole(path, j, jlen - 5);
	snprintf(cmd, sizeof(cmd), "%s -q %s >/dev/null", tool, path);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "torn log: status %d", st);
	write_whole(path, j, jlen);
	slot_path(path, dir, 1, "in");
	cr_assert_eq(truncate(path, 100), 0);
	slot_path(path, dir, 1, "log");
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "short payload: status %d", st);
	snprintf(cmd, sizeof(cmd), "%s -q %s/nothing.log 2>/dev/null", tool, dir);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "missing file: status %d", st);
	free(j);
	rm_dir(dir);
}

/* ---- the writer from another thread ---- */

static void aio_done(struct ft__aio_io *io, int res)
{
	io->res = res;
}

struct aio_turn {
	struct ft__aio *a;
	int fd;
	char text[32];
	struct ft__aio_io io;
	int rc;
};

static void *aio_turn_main(void *arg)
{
	struct aio_turn *t = arg;

	t->io = (struct ft__aio_io){.kind = FT__AIO_WRITE, .fd = t->fd, .data = t->text,
				    .len = strlen(t->text), .complete = aio_done, .res = 1};
	t->rc = ft__aio_start(t->a, &t->io);
	if (t->rc == 0)
		t->rc = ft__aio_wait(t->a, &t->io);
	return NULL;
}

/*
 * A communicator may be used from any thread, one at a time (ftcc.h): its
 * writer's ring, made on one thread, takes writes from another. Rings made
 * with IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN refused them (EEXIST), and
 * the PyTorch backend, whose ops run on a worker thread, lost its logs.
 */
Test(log, a_ring_used_from_another_thread, .timeout = 30)
{
	struct ft__aio a;
	struct aio_turn t = {.a = &a};
	char path[] = "/tmp/ftcc-aio-XXXXXX", back[32] = "";
	pthread_t th;

	ft__aio_init(&a, 8, true, "test");
	if (!a.uring) {
		ft__aio_fini(&a);
		cr_skip_test("SKIPPED: io_uring is not available here (the writer uses pwrite)");
	}
	t.fd = mkstemp(path);
	cr_assert_geq(t.fd, 0);
	snprintf(t.text, sizeof(t.text), "from another thread");
	cr_assert_eq(pthread_create(&th, NULL, aio_turn_main, &t), 0);
	pthread_join(th, NULL);
	cr_expect_eq(t.rc, 0, "the other thread's write: %s", strerror(-t.rc));
	cr_expect_eq(t.io.res, 0, "its completion: %d", t.io.res);
	cr_expect_eq(pread(t.fd, back, sizeof(back) - 1, 0), (ssize_t)strlen(t.text));
	cr_expect_str_eq(back, t.text);
	ft__aio_fini(&a);
	close(t.fd);
	unlink(path);
}
