/* test_ckpt.c: running partial checkpoints: both engines, block choice per strategy, torn and flipped copies, partial restore, CPR's rule, bad arguments, a killed rank's shard back. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <fcntl.h>
#include <ftcc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef FTCC_HAVE_URING
#include <liburing.h>
#endif

#include "ckpt.h"
#include "crc32c.h"
#include "testutil.h"

static char base[256];          /* this test's directory (checkpoints under base/<job>) */
static char job[FT_NAME_MAX];
static char jdir[FT_NAME_MAX + 300];          /* base/job */

static void mk_base(void)
{
	const char *t = getenv("TMPDIR");

	snprintf(base, sizeof(base), "%s/ftcc-ckpt-XXXXXX", t != NULL && *t ? t : "/tmp");
	cr_assert_not_null(mkdtemp(base), "mkdtemp: %s", strerror(errno));
}

static void rm_base(void)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	if (base[0] != '\0' && system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", base);
}

static bool uring_available(void)
{
#ifdef FTCC_HAVE_URING
	struct io_uring r;
	if (io_uring_queue_init(4, &r, 0) == 0) {
		io_uring_queue_exit(&r);
		return true;
	}
#endif
	return false;
}

/* A one-rank communicator of a fresh job. */
static struct ft_comm *open1(void)
{
	static int seq;
	struct ft_config cfg = FT_CONFIG_INIT;
	struct ft_comm *c = NULL;

	if (base[0] == '\0')
		mk_base();
	cfg.rank = 0;
	cfg.world_size = 1;
	cfg.log_level = 0;
	snprintf(cfg.job_id, sizeof(cfg.job_id), "tck-%d-%d", (int)getpid(), seq++);
	snprintf(job, sizeof(job), "%s", cfg.job_id);
	snprintf(jdir, sizeof(jdir), "%s/%s", base, job);
	cr_assert_eq(ft_init(&cfg, &c), 0);
	return c;
}

static struct ft_ckpt_config ckcfg(enum ft_ckpt_strategy s, size_t bb, double fraction)
{
	struct ft_ckpt_config k = FT_CKPT_CONFIG_INIT;

	k.strategy = s;
	k.block_bytes = bb;
	k.fraction = fraction;
	snprintf(k.dir, sizeof(k.dir), "%s", base);
	return k;
}

static void fill(float *p, size_t n, float v)
{
	for (size_t i = 0; i < n; i++)
		p[i] = v + (float)(i % 251) * 0.25f;
}

/* The blocks saved by round `round`, from the journal on disk. */
static size_t saved_in(size_t round, unsigned char *set, size_t nb)
{
	struct ft__ckpt_image img;
	size_t n = 0;

	cr_assert_eq(ft__ckpt_image_open(jdir, 0, &img), 0);
	cr_assert_eq(img.nblocks, nb);
	for (size_t b = 0; b < nb; b++) {
		set[b] = img.tab[b].round[0] == round || img.tab[b].round[1] == round;
		n += set[b];
	}
	ft__ckpt_image_free(&img);
	return n;
}

/* ---- both engines round trip ---- */

static void roundtrip(bool pwrite_engine, bool sync)
{
	enum { BB = 4096, BYTES = 10 * BB + 1000 };
	static float st[BYTES / 4], out[BYTES / 4], then[BYTES / 4];
	struct ft_restore_info ri;
	struct ft_comm *c;
	struct ft_ckpt_config k;
	struct ft_ckpt_stats s;
	size_t nb, bb, rb;

	if (pwrite_engine)
		setenv("FTCC_LOG_ENGINE", "pwrite", 1);
	c = open1();
	k = ckcfg(FT_CKPT_FULL, 0, 0.5);
	k.sync = sync;
	fill(st, BYTES / 4, 1);
	cr_assert_eq(ft_state_register(c, st, BYTES, FT_STATE_SHARDED), 0);
	cr_assert_eq(ft_ckpt_enable(c, &k), 0);
	cr_assert_str_eq(ft__ckpt_engine(c), pwrite_engine ? "pwrite" : "io_uring");
	cr_assert_eq(ft_ckpt_step(c, 1), 0);
	cr_assert_eq(ft_ckpt_flush(c), 0);
	memcpy(then, st, BYTES);
	fill(st, BYTES / 4, 7);
	cr_assert_eq(ft_ckpt_blocks(c, 0, 0, &nb, &bb, &rb), 0);
	cr_assert_eq(nb, 11);
	cr_assert_eq(bb, 4096);
	cr_assert_eq(rb, BYTES);
	cr_assert_eq(ft_ckpt_restore(c, 0, 0, 0, nb, out, 0, &ri), 0);
	cr_assert_eq(memcmp(out, then, BYTES), 0);
	cr_assert_eq(ri.blocks, 11);
	cr_assert_eq(ri.bytes, BYTES);
	cr_assert_eq(ri.ckpt_step, 1);
	cr_assert_eq(ri.oldest_step, 1);
	cr_assert_eq(ri.now_step, 1);
	cr_assert_eq(ri.exact, 0);
	cr_assert_eq(ri.pls, 0);
	cr_assert_eq(ft_ckpt_stats_get(c, &s), 0);
	cr_assert_eq(s.rounds, 1);
	cr_assert_eq(s.committed, 1);
	cr_assert_eq(s.blocks, 11);
	cr_assert_eq(s.bytes, BYTES);
	cr_assert_eq(ft__ckpt_verify(jdir, 0, NULL, false), 0);
	cr_assert_eq(ft_finalize(c), 0);
	rm_base();
}

Test(ckpt, roundtrip_uring, .timeout = 30)
{
	if (!uring_available())
		cr_skip_test("io_uring is not available here (kernel, seccomp or build): "
			     "the io_uring path is not tested");
	roundtrip(false, false);
}

Test(ckpt, roundtrip_pwrite, .timeout = 30)
{
	roundtrip(true, false);
}

Test(ckpt, roundtrip_sync, .timeout = 30)
{
	roundtrip(!uring_available(), true);
}

/* ft_ckpt_step completes earlier rounds' writes without waiting for them. */
/* Every public return is an FT_E code ft_strerror knows: a checkpoint
 * directory that cannot be made (a path through a regular file: ENOTDIR)
 * once came back as a raw -errno, "unknown error". */
Test(ckpt, unmakeable_dir_is_a_named_error, .timeout = 30)
{
	static float st[1024];
	struct ft_comm *c = open1();
	struct ft_ckpt_config k = ckcfg(FT_CKPT_FULL, 0, 0.5);
	int rc;

	snprintf(k.dir, sizeof(k.dir), "/dev/null/ftcc-ckpt");
	cr_assert_eq(ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED), 0);
	rc = ft_ckpt_enable(c, &k);
	cr_expect_lt(rc, 0);
	cr_expect_str_neq(ft_err_name(rc), "FT_E?", "ft_ckpt_enable returned %d, no FT_E code", rc);
	cr_expect_str_neq(ft_strerror(rc), "unknown error");
	cr_assert_eq(ft_finalize(c), 0);
	rm_base(); /* open1 made it (empty): it stayed in $TMPDIR after every run */
}

Test(ckpt, steps_reap_without_waiting, .timeout = 30)
{
	static float st[64 << 10];
	struct ft_ckpt_stats s;
	struct ft_comm *c = open1();
	struct ft_ckpt_config k = ckcfg(FT_CKPT_FULL, 0, 1);
	uint64_t step = 1;
	long end = tu_now_ms() + 10000;

	k.interval = 1000000;
	cr_assert_eq(ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED), 0);
	cr_assert_eq(ft_ckpt_enable(c, &k), 0);
	for (uint64_t i = 0; i < k.interval; i++) /* the interval-th step starts the round */
		cr_assert_eq(ft_ckpt_step(c, step++), 0);
	do {
		tu_sleep_ms(2);
		cr_assert_eq(ft_ckpt_step(c, step++), 0);
		cr_assert_eq(ft_ckpt_stats_get(c, &s), 0);
	} while (s.committed == 0 && tu_now_ms() < end);
	cr_assert_eq(s.rounds, 1);
	cr_assert_eq(s.committed, 1, "%s: the round never committed without a flush",
		     ft__ckpt_engine(c));
	cr_assert_eq(s.wait_ms, 0.0);
	cr_assert_eq(ft_finalize(c), 0);
	rm_base();
}

/* ---- partial restore touches only the blocks asked for ---- */

Test(ckpt, partial_restore_only_requested, .timeout = 30)
{
	enum { BB = 1024, NB = 12, N = NB * BB / 4 };
	static float st[N], saved[N], before[N];
	struct ft_restore_info ri;
	struct ft_comm *c = open1();
	struct ft_ckpt_config k = ckcfg(FT_CKPT_FULL, BB, 1);

	fill(st, N, 3);
	cr_assert_eq(ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED), 0);
	cr_assert_eq(ft_ckpt_enable(c, &k), 0);
	cr_assert_eq(ft_ckpt_step(c, 5), 0);
	cr_assert_eq(ft_ckpt_flush(c), 0);
	memcpy(saved, st, sizeof(st));
	for (size_t i = 0; i < N; i++)
		st[i] += 100.0f + (float)i;
	memcpy(before, st, sizeof(st));
	/* blocks 4, 5, 6 of the live region, in place, measured exactly */
	cr_assert_eq(ft_ckpt_restore(c, 0, 0, 4, 3, (char *)st + 4 * BB, FT_RESTORE_CURRENT, &ri), 0);
	cr_assert_eq(memcmp(st, before, 4 * BB), 0, "blocks before the range changed");
	cr_assert_eq(memcmp((char *)st + 7 * BB, (char *)before + 7 * BB, (NB - 7) * BB), 0,
		     "blocks after the range changed");
	cr_assert_eq(memcmp((char *)st + 4 * BB, (char *)saved + 4 * BB, 3 * BB), 0);
	double d2 = 0;
	for (size_t i = 4 * BB / 4; i < 7 * BB / 4; i++)
		d2 += ((double)before[i] - saved[i]) * ((double)before[i] - saved[i]);
	cr_assert_eq(ri.exact, 1);
	cr_assert_eq(ri.blocks, 3);
	cr_assert_float_eq(ri.perturbation, sqrt(d2), sqrt(d2) * 1e-4);
	/* an empty range, and one past the end */
	cr_assert_eq(ft_ckpt_restore(c, 0, 0, NB, 0, NULL, 0, &ri), 0);
	cr_assert_eq(ft_ckpt_restore(c, 0, 0, NB - 1, 2, st, 0, &ri), -FT_EINVAL);
	cr_assert_eq(ft_finalize(c), 0);
	rm_base();
}

/* ---- torn and flipped copies ---- */

enum { TB = 1024, TNB = 8, TBYTES = (TNB - 1) * TB + 512, TSTRIDE = FT__CKPT_HDR + TB };

/* Two full rounds: A at step 1, B at step 2. */
static struct ft_comm *two_rounds(float *st, float *A, float *B)
{
	struct ft_comm *c = open1();
	struct ft_ckpt_config k = ckcfg(FT_CKPT_FULL, TB, 1);

	fill(st, TBYTES / 4, 1);
	memcpy(A, st, TBYTES);
	cr_assert_eq(ft_state_register(c, st, TBYTES, FT_STATE_SHARDED | FT_STATE_DTYPE(FT_FLOAT32)), 0);
	cr_assert_eq(ft_ckpt_enable(c, &k), 0);
	cr_assert_eq(ft_ckpt_step(c, 1), 0);
	fill(st, TBYTES / 4, 2);
	memcpy(B, st, TBYTES);
	cr_assert_eq(ft_ckpt_step(c, 2), 0);
	cr_assert_eq(ft_ckpt_flush(c), 0);
	cr_assert_eq(ft__ckpt_verify(jdir, 0, NULL, false), 0);
	return c;
}

static void newest_path(char *path, size_t cap)
{
	struct ft__ckpt_image img;

	cr_assert_eq(ft__ckpt_image_open(jdir, 0, &img), 0);
	int s = img.tab[0].round[1] > img.tab[0].round[0];
	for (size_t b = 0; b < img.nblocks; b++)
		cr_assert_eq(img.tab[b].round[s], 2);
	ft__ckpt_image_free(&img);
	cr_assert_eq(ft__ckpt_path(path, cap, jdir, 0, 0, s), 0);
}

static char *slurp(const char *path, size_t *len)
{
	struct stat st;
	int fd = open(path, O_RDONLY);
	char *buf;

	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(fd, &st), 0);
	buf = malloc((size_t)st.st_size + 1);
	cr_assert_eq(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

static void put_back(const char *path, const char *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_TRUNC);

	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, buf, len, 0), (ssize_t)len);
	close(fd);
}

/* Restores the whole region; block b must hold B when b is in good, else A. */
static void expect_blocks(struct ft_comm *c, const float *A, const float *B, int bad_from,
			  int bad_to, const char *what)
{
	static float out[TBYTES / 4];
	struct ft_restore_info ri;

	cr_assert_eq(ft_ckpt_restore(c, 0, 0, 0, TNB, out, 0, &ri), 0, "%s", what);
	for (int b = 0; b < TNB; b++) {
		size_t len = b + 1 < TNB ? TB : TBYTES - (size_t)b * TB;
		const float *want = b >= bad_from && b < bad_to ? A : B;
		cr_assert_eq(memcmp((char *)out + (size_t)b * TB, (const char *)want + (size_t)b * TB,
				    len), 0, "%s: block %d holds the wrong round", what, b);
	}
	cr_assert_eq(ri.oldest_step, bad_from < bad_to ? 1 : 2, "%s", what);
	cr_assert_eq(ri.ckpt_step, bad_from == 0 && bad_to >= TNB ? 1 : 2, "%s", what);
}

Test(ckpt, torn_at_every_block_boundary, .timeout = 60)
{
	static float st[TBYTES / 4], A[TBYTES / 4], B[TBYTES / 4];
	struct ft_comm *c = two_rounds(st, A, B);
	char path[512], what[128];
	size_t len;
	char *orig;

	newest_path(path, sizeof(path));
	orig = slurp(path, &len);
	cr_assert_eq(len, (size_t)(TNB - 1) * TSTRIDE + FT__CKPT_HDR + 512);
	for (int k = 0; k <= TNB; k++) {
		/* cut at the boundary: the newest copies of blocks k.. are gone */
		cr_assert_eq(truncate(path, k < TNB ? (off_t)k * TSTRIDE : (off_t)len), 0);
		snprintf(what, sizeof(what), "cut at block %d", k);
		cr_assert_eq(ft__ckpt_verify(jdir, 0, NULL, false), k < TNB ? -FT_ECORRUPT : 0, "%s", what);
		expect_blocks(c, A, B, k, TNB, what);
		put_back(path, orig, len);
		if (k == TNB)
			break;
		/* torn inside the head, and inside the data */
		cr_assert_eq(truncate(path, (off_t)k * TSTRIDE + 30), 0);
		snprintf(what, sizeof(what), "cut in block %d's head", k);
		cr_assert_eq(ft__ckpt_verify(jdir, 0, NULL, false), -FT_ECORRUPT, "%s", what);
		expect_blocks(c, A, B, k, TNB, what);
		put_back(path, orig, len);
		cr_assert_eq(truncate(path, (off_t)k * TSTRIDE + FT__CKPT_HDR + 100), 0);
		snprintf(what, sizeof(what), "cut in block %d's data", k);
		cr_assert_eq(ft__ckpt_verify(jdir, 0, NULL, false), -FT_ECORRUPT, "%s", what);
		expect_blocks(c, A, B, k, TNB, what);
		put_back(path, orig, len);
		/* a write torn at the boundary: the block's start overwritten by garbage */
		int fd = open(path, O_WRONLY);
		char junk[200];
		memset(junk, 0x5a, sizeof(junk));
		cr_assert_eq(pwrite(fd, junk, sizeof(junk), (off_t)k * TSTRIDE), (ssize_t)sizeof(junk));
		close(fd);
		snprintf(what, sizeof(what), "garbage at block %d", k);
		cr_assert_eq(ft__ckpt_verify(jdir, 0, NULL, false), -FT_ECORRUPT, "%s", what);
		expect_blocks(c, A, B, k, k + 1, what);
		put_back(path, orig, len);
	}
	cr_assert_eq(ft__ckpt_verify(jdir, 0, NULL, false), 0);
	free(orig);
	cr_assert_eq(ft_finalize(c), 0);
	rm_base();
}

Test(ckpt, bit_flip, .timeout = 30)
{
	static float st[TBYTES / 4], A[TBYTES / 4], B[TBYTES / 4], out[TBYTES / 4];
	struct ft_restore_info ri;
	struct ft_comm *c = two_rounds(st, A, B);
	char path[512], other[512];
	size_t len;
	char *orig;

	newest_path(path, sizeof(path));
	orig = slurp(path, &len);
	for (int k = 0; k < TNB; k++) {
		char flipped[8];
		size_t at = (size_t)k * TSTRIDE + FT__CKPT_HDR + 37 + (size_t)k;
		memcpy(flipped, orig, 0);
		orig[at] ^= 0x10;
		put_back(path, orig, len);
		orig[at] ^= 0x10;
		cr_assert_eq(ft__ckpt_verify(jdir, 0, NULL, false), -FT_ECORRUPT, "flip in block %d", k);
		expect_blocks(c, A, B, k, k + 1, "bit flip");
	}
	put_back(path, orig, len);
	cr_assert_eq(ft__ckpt_verify(jdir, 0, NULL, false), 0);
	/* both copies of block 3 bad: no valid copy */
	orig[3 * TSTRIDE + FT__CKPT_HDR] ^= 1;
	put_back(path, orig, len);
	snprintf(other, sizeof(other), "%s", path);
	other[strlen(other) - 5] = other[strlen(other) - 5] == 'a' ? 'b' : 'a';
	size_t olen;
	char *o = slurp(other, &olen);
	o[3 * TSTRIDE + FT__CKPT_HDR] ^= 1;
	put_back(other, o, olen);
	memset(out, 0x77, sizeof(out));
	cr_assert_eq(ft_ckpt_restore(c, 0, 0, 0, TNB, out, 0, &ri), -FT_ECORRUPT);
	cr_assert_eq(ri.blocks, TNB - 1, "the other blocks are restored all the same");
	for (size_t i = 3 * TB; i < 4 * TB; i++)
		cr_assert_eq(((unsigned char *)out)[i], 0x77, "the block without a copy was written");
	cr_assert_eq(memcmp(out, B, 3 * TB), 0);
	cr_assert_eq(ft__ckpt_verify(jdir, 0, NULL, false), -FT_ECORRUPT);
	cr_assert_eq(ft_ckpt_restore(c, 0, 0, 4, TNB - 4, out, 0, &ri), 0, "other blocks restore");
	cr_assert_eq(ri.blocks, TNB - 4);
	free(o);
	free(orig);
	cr_assert_eq(ft_finalize(c), 0);
	rm_base();
}

/* A round whose COMMIT did not make it (a crash before or during it): the round before counts. */
Test(ckpt, uncommitted_round, .timeout = 60)
{
	static float st[TBYTES / 4], A[TBYTES / 4], B[TBYTES / 4], C[TBYTES / 4], out[TB];
	struct ft_comm *c = two_rounds(st, A, B);
	char jpath[512];
	size_t len2, len3;
	char *j3;
	struct stat s;

	cr_assert_eq(ft__ckpt_path(jpath, sizeof(jpath), jdir, 0, -1, 0), 0);
	cr_assert_eq(stat(jpath, &s), 0);
	len2 = (size_t)s.st_size;
	fill(st, TBYTES / 4, 3);
	memcpy(C, st, TBYTES);
	cr_assert_eq(ft_ckpt_step(c, 3), 0);
	cr_assert_eq(ft_ckpt_flush(c), 0);
	j3 = slurp(jpath, &len3);
	cr_assert_gt(len3, len2);
	for (size_t cut = len2; cut <= len3; cut += cut + 8 <= len3 || cut == len3 ? 8 : len3 - cut) {
		struct ft__ckpt_image img;
		put_back(jpath, j3, cut);
		int rc = ft__ckpt_image_open(jdir, 0, &img);
		cr_assert_eq(rc, cut == len2 || cut == len3 ? 0 : -FT_ECORRUPT, "cut %zu", cut);
		cr_assert_eq(img.last_round, cut == len3 ? 3 : 2, "cut %zu", cut);
		for (size_t b = 0; b < TNB; b++) {
			uint64_t round, step;
			int slot;
			size_t l = b + 1 < TNB ? TB : TBYTES - b * TB;
			const float *want = cut == len3 ? C : B;
			cr_assert_eq(ft__ckpt_read_block(&img, 0, b, out, &round, &step, &slot, NULL, 0), 0);
			cr_assert_eq(memcmp(out, (const char *)want + b * TB, l), 0, "cut %zu block %zu", cut, b);
			cr_assert_eq(step, cut == len3 ? 3 : 2);
		}
		ft__ckpt_image_free(&img);
		/* a crash mid-commit is no damage to a committed round */
		cr_assert_eq(ft__ckpt_verify(jdir, 0, NULL, false), 0, "cut %zu", cut);
		if (cut == len3)
			break;
	}
	free(j3);
	cr_assert_eq(ft_finalize(c), 0);
	rm_base();
}

/* A full disk: the round fails with the error, the round before stays. */
Test(ckpt, full_disk, .timeout = 60)
{
	enum { BYTES = 100 << 10 };
	static float st[BYTES / 4], A[BYTES / 4], out[BYTES / 4];
	struct ft_restore_info ri;
	struct ft_comm *c;
	struct ft_ckpt_config k;
	int rc = 0;

	mk_base();
	if (mount("ftcc-test", base, "tmpfs", 0, "size=160k") < 0) {
		int e = errno;
		fprintf(stderr, "SKIPPED: ckpt/full_disk: mount -t tmpfs: %s; the full-disk case "
				"was NOT tested\n", strerror(e));
		rm_base();
		cr_skip_test("cannot mount a small tmpfs: %s", strerror(e));
	}
	c = open1();
	k = ckcfg(FT_CKPT_FULL, 0, 1);
	fill(st, BYTES / 4, 1);
	memcpy(A, st, BYTES);
	cr_assert_eq(ft_state_register(c, st, BYTES, FT_STATE_SHARDED), 0);
	cr_assert_eq(ft_ckpt_enable(c, &k), 0);
	cr_assert_eq(ft_ckpt_step(c, 1), 0);
	cr_assert_eq(ft_ckpt_flush(c), 0);
	fill(st, BYTES / 4, 2);
	rc = ft_ckpt_step(c, 2);
	if (rc == 0)
		rc = ft_ckpt_flush(c);
	cr_assert_eq(rc, -ENOSPC, "a round on a full disk: %s", ft_err_name(rc));
	cr_assert_eq(ft_ckpt_flush(c), 0, "the error is returned once");
	struct ft_ckpt_stats s;
	cr_assert_eq(ft_ckpt_stats_get(c, &s), 0);
	cr_assert_eq(s.failed, 1);
	cr_assert_eq(s.committed, 1);
	cr_assert_eq(ft_ckpt_restore(c, 0, 0, 0, 25, out, 0, &ri), 0);
	cr_assert_eq(memcmp(out, A, BYTES), 0, "the round before a failed one");
	cr_assert_eq(ri.ckpt_step, 1);
	cr_assert_eq(ft__ckpt_verify(jdir, 0, NULL, false), 0);
	cr_assert_eq(ft_finalize(c), 0);
	umount(base);
	rm_base();
}

/* Any damage to the journal: never a crash, never a round that was not committed. */
Test(ckpt, hostile_journal, .timeout = 60)
{
	static float st[TBYTES / 4], A[TBYTES / 4], B[TBYTES / 4];
	struct ft_comm *c = two_rounds(st, A, B);
	char jpath[512];
	size_t len;
	char *j;

	cr_assert_eq(ft__ckpt_path(jpath, sizeof(jpath), jdir, 0, -1, 0), 0);
	j = slurp(jpath, &len);
	for (size_t i = 0; i < len; i++)
		for (int bit = 0; bit < 8; bit += 3) {
			struct ft__ckpt_image img;
			j[i] ^= (char)(1 << bit);
			int rc = ft__ckpt_parse(j, len, &img);
			cr_assert(rc == -FT_ECORRUPT, "flip at %zu: %d", i, rc);
			cr_assert_leq(img.last_round, 2);
			ft__ckpt_image_free(&img);
			j[i] ^= (char)(1 << bit);
		}
	for (size_t cut = 0; cut < len; cut++) {
		struct ft__ckpt_image img;
		int rc = ft__ckpt_parse(j, cut, &img);
		/* a prefix that ends at a record boundary is a shorter journal */
		cr_assert(rc == -FT_ECORRUPT || (rc == 0 && img.valid_bytes == cut), "cut %zu", cut);
		cr_assert(rc == 0 || img.valid_bytes < cut || img.regs == NULL, "cut %zu", cut);
		ft__ckpt_image_free(&img);
	}
	free(j);
	cr_assert_eq(ft_finalize(c), 0);
	rm_base();
}

enum { SB = 256, SNB = 64, SN = SNB * SB / 4 };

/* The journal stays bounded: compacted into HEAD + SNAP, still restorable. */
Test(ckpt, journal_compaction, .timeout = 60)
{
	static float st[SN], out[SN];
	struct ft_restore_info ri;
	struct ft_comm *c = open1();
	struct ft_ckpt_config k = ckcfg(FT_CKPT_PRIORITY, SB, 0.125);
	char jpath[512];
	struct stat s;
	off_t most = 0;

	ft__ckpt_journal_slack = 8192;
	cr_assert_eq(ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED), 0);
	cr_assert_eq(ft_ckpt_enable(c, &k), 0);
	cr_assert_eq(ft__ckpt_path(jpath, sizeof(jpath), jdir, 0, -1, 0), 0);
	for (int step = 1; step <= 300; step++) {
		st[(size_t)(step * 37 % SNB) * SB / 4] += 1;
		cr_assert_eq(ft_ckpt_step(c, (uint64_t)step), 0);
		if (step % 10 == 0) {
			cr_assert_eq(ft_ckpt_flush(c), 0);
			cr_assert_eq(stat(jpath, &s), 0);
			most = s.st_size > most ? s.st_size : most;
		}
	}
	cr_assert_eq(ft_ckpt_flush(c), 0);
	cr_assert_lt(most, 8192 + 2 * SNB * 40 + 2 * 1024, "the journal grew to %lld", (long long)most);
	cr_assert_eq(ft__ckpt_verify(jdir, 0, NULL, false), 0);
	struct ft__ckpt_image img;
	cr_assert_eq(ft__ckpt_image_open(jdir, 0, &img), 0);
	cr_assert_eq(img.last_round, 300);
	ft__ckpt_image_free(&img);
	/* every block reads back through the compacted journal */
	cr_assert_eq(ft_ckpt_restore(c, 0, 0, 0, SNB, out, 0, &ri), 0);
	cr_assert_eq(ri.blocks, SNB);
	/* each step's changed block was the one that changed most: saved in its round */
	cr_assert_eq(memcmp(out, st, sizeof(st)), 0);
	cr_assert_eq(ft_finalize(c), 0);
	rm_base();
}

/* ---- which blocks a round saves ---- */

Test(ckpt, priority_picks_top_r, .timeout = 60)
{
	static float st[SN], ref[SN];
	unsigned char got[SNB], want[SNB];
	struct ft_comm *c = open1();
	struct ft_ckpt_config k = ckcfg(FT_CKPT_PRIORITY, SB, 0.125);
	uint64_t seed = 12345;

	memset(st, 0, sizeof(st));
	cr_assert_eq(ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED), 0);
	cr_assert_eq(ft_ckpt_enable(c, &k), 0);
	cr_assert_eq(ft_ckpt_step(c, 1), 0); /* the first round saves every block */
	cr_assert_eq(ft_ckpt_flush(c), 0);
	cr_assert_eq(saved_in(1, got, SNB), SNB);
	memcpy(ref, st, sizeof(st));
	for (int round = 2; round <= 8; round++) {
		double d[SNB];
		size_t order[SNB];
		/* integer changes: distances exact in float, with ties */
		for (size_t b = 0; b < SNB; b++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			st[b * SB / 4 + (seed >> 40) % (SB / 4)] += (float)((seed >> 33) % 6);
		}
		for (size_t b = 0; b < SNB; b++) {
			d[b] = 0;
			for (size_t i = b * SB / 4; i < (b + 1) * SB / 4; i++)
				d[b] += ((double)st[i] - ref[i]) * ((double)st[i] - ref[i]);
			order[b] = b;
		}
		for (size_t i = 0; i < SNB; i++) /* stable selection sort: ties by index */
			for (size_t j = i + 1; j < SNB; j++)
				if (d[order[j]] > d[order[i]] ||
				    (d[order[j]] == d[order[i]] && order[j] < order[i])) {
					size_t t = order[i];
					order[i] = order[j];
					order[j] = t;
				}
		memset(want, 0, sizeof(want));
		for (size_t i = 0; i < 8; i++)
			want[order[i]] = 1;
		cr_assert_eq(ft_ckpt_step(c, (uint64_t)round), 0);
		cr_assert_eq(ft_ckpt_flush(c), 0);
		cr_assert_eq(saved_in((size_t)round, got, SNB), 8, "round %d", round);
		for (size_t b = 0; b < SNB; b++) {
			cr_assert_eq(got[b], want[b], "round %d block %zu (distance %g)", round, b, d[b]);
			if (got[b])
				memcpy(ref + b * SB / 4, st + b * SB / 4, SB);
		}
	}
	cr_assert_eq(ft_finalize(c), 0);
	rm_base();
}

Test(ckpt, round_robin_full_app_priority, .timeout = 60)
{
	static float st[SN];
	unsigned char got[SNB];
	double score[SNB];
	struct ft_comm *c;
	struct ft_ckpt_config k;

	/* round robin over 20 blocks, 6 a round (ceil 0.3 x 20) */
	c = open1();
	k = ckcfg(FT_CKPT_ROUND_ROBIN, SB, 0.3);
	cr_assert_eq(ft_state_register(c, st, 20 * SB, FT_STATE_SHARDED), 0);
	cr_assert_eq(ft_ckpt_enable(c, &k), 0);
	cr_assert_eq(ft_ckpt_step(c, 1), 0);
	cr_assert_eq(ft_ckpt_flush(c), 0);
	cr_assert_eq(saved_in(1, got, 20), 20);
	for (int round = 2, next = 0; round <= 6; round++) {
		st[0] += 1;
		cr_assert_eq(ft_ckpt_step(c, (uint64_t)round), 0);
		cr_assert_eq(ft_ckpt_flush(c), 0);
		cr_assert_eq(saved_in((size_t)round, got, 20), 6, "round %d", round);
		for (int i = 0; i < 6; i++)
			cr_assert(got[(next + i) % 20], "round %d: block %d", round, (next + i) % 20);
		next = (next + 6) % 20;
	}
	cr_assert_eq(ft_finalize(c), 0);

	/* full: every block every round, the fraction aside; interval 2 */
	c = open1();
	k = ckcfg(FT_CKPT_FULL, SB, 0.01);
	k.interval = 2;
	cr_assert_eq(ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED), 0);
	cr_assert_eq(ft_ckpt_enable(c, &k), 0);
	for (int step = 1; step <= 6; step++) {
		cr_assert_eq(ft_ckpt_step(c, (uint64_t)step), 0);
		cr_assert_eq(ft_ckpt_flush(c), 0);
		if (step % 2 == 0)
			cr_assert_eq(saved_in((size_t)step / 2, got, SNB), SNB, "full round at step %d",
				     step);
	}
	struct ft_ckpt_stats s;
	cr_assert_eq(ft_ckpt_stats_get(c, &s), 0);
	cr_assert_eq(s.rounds, 3);
	cr_assert_eq(s.blocks, 3 * SNB);
	cr_assert_eq(ft_finalize(c), 0);

	/* application priority: the highest scores, ties by index */
	c = open1();
	k = ckcfg(FT_CKPT_APP_PRIORITY, SB, 0.125);
	cr_assert_eq(ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED), 0);
	cr_assert_eq(ft_ckpt_enable(c, &k), 0);
	cr_assert_eq(ft_ckpt_step(c, 1), 0);
	for (size_t b = 0; b < SNB; b++)
		score[b] = (double)((b * 7) % 5); /* 4 at b = 2, 7, 12, ...: 13 blocks */
	cr_assert_eq(ft_ckpt_priority(c, 0, score, SNB), 0);
	cr_assert_eq(ft_ckpt_step(c, 2), 0);
	cr_assert_eq(ft_ckpt_flush(c), 0);
	cr_assert_eq(saved_in(2, got, SNB), 8);
	for (size_t b = 0, n = 0; b < SNB; b++) {
		bool want = score[b] == 4 && n < 8;
		n += want;
		cr_assert_eq(got[b], want, "app priority: block %zu", b);
	}
	cr_assert_eq(ft_finalize(c), 0);
	rm_base();
}

static void random_rounds(uint64_t seed, unsigned char sets[4][SNB])
{
	static float st[SN];
	struct ft_comm *c = open1();
	struct ft_ckpt_config k = ckcfg(FT_CKPT_RANDOM, SB, 0.125);

	k.seed = seed;
	cr_assert_eq(ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED), 0);
	cr_assert_eq(ft_ckpt_enable(c, &k), 0);
	cr_assert_eq(ft_ckpt_step(c, 1), 0);
	/* a block saved again overwrites its older copy: look right after each round */
	for (int r = 0; r < 4; r++) {
		cr_assert_eq(ft_ckpt_step(c, (uint64_t)r + 2), 0);
		cr_assert_eq(ft_ckpt_flush(c), 0);
		cr_assert_eq(saved_in((size_t)r + 2, sets[r], SNB), 8, "random round %d", r + 2);
	}
	cr_assert_eq(ft_finalize(c), 0);
}

Test(ckpt, random_is_seeded, .timeout = 60)
{
	unsigned char a[4][SNB], b[4][SNB], d[4][SNB];

	random_rounds(7, a);
	random_rounds(7, b);
	random_rounds(8, d);
	cr_assert_eq(memcmp(a, b, sizeof(a)), 0, "same seed, other blocks");
	cr_assert_neq(memcmp(a, d, sizeof(a)), 0, "another seed, the same blocks");
	cr_assert_neq(memcmp(a[0], a[1], SNB), 0, "two rounds alike");
	rm_base();
}

/* ---- what a restore reports ---- */

Test(ckpt, perturbation_and_pls, .timeout = 30)
{
	enum { NB = 16, N = NB * SB / 4 };
	static float st[N], out[SB / 4];
	struct ft_restore_info ri;
	struct ft_comm *c = open1();
	struct ft_ckpt_config k = ckcfg(FT_CKPT_PRIORITY, SB, 0.25);

	cr_assert_eq(ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED), 0);
	cr_assert_eq(ft_ckpt_enable(c, &k), 0);
	cr_assert_eq(ft_ckpt_step(c, 10), 0);
	for (size_t b = 0; b < NB; b++)
		st[b * SB / 4] += (float)(b + 1); /* blocks 12..15 change most */
	cr_assert_eq(ft_ckpt_step(c, 20), 0);
	cr_assert_eq(ft_ckpt_flush(c), 0);
	/* block 3 was not saved at step 20: its copy is step 10's, 4 away then */
	cr_assert_eq(ft_ckpt_restore(c, 0, 0, 3, 1, out, 0, &ri), 0);
	cr_assert_eq(ri.exact, 0);
	cr_assert_float_eq(ri.perturbation, 4.0, 1e-6);
	cr_assert_eq(ri.ckpt_step, 10);
	cr_assert_eq(ri.now_step, 20);
	cr_assert_float_eq(ri.pls, (20.0 - 10.0) * SB / (20.0 * NB * SB), 1e-12);
	st[3 * SB / 4 + 1] += 10;
	memcpy(out, st + 3 * SB / 4, SB);
	cr_assert_eq(ft_ckpt_restore(c, 0, 0, 3, 1, out, FT_RESTORE_CURRENT, &ri), 0);
	cr_assert_eq(ri.exact, 1);
	cr_assert_float_eq(ri.perturbation, sqrt(16.0 + 100.0), 1e-5);
	/* a saved block: no perturbation estimated, nothing lost since step 20 */
	cr_assert_eq(ft_ckpt_restore(c, 0, 0, 13, 1, out, 0, &ri), 0);
	cr_assert_float_eq(ri.perturbation, 0.0, 1e-12);
	cr_assert_eq(ri.ckpt_step, 20);
	cr_assert_float_eq(ri.pls, 0.0, 1e-12);
	cr_assert_eq(ft_state_restored(c, &ri), -FT_ENOSYS);
	cr_assert_eq(ft_finalize(c), 0);
	rm_base();
}

/* Other element types: distances in the type's values. */
Test(ckpt, dtypes, .timeout = 30)
{
	static uint16_t h[4 * 64];
	static int32_t v[4 * 32];
	unsigned char got[8];
	struct ft_comm *c = open1();
	struct ft_ckpt_config k = ckcfg(FT_CKPT_PRIORITY, 128, 0.125);

	cr_assert_eq(ft_state_register(c, h, sizeof(h), FT_STATE_SHARDED | FT_STATE_DTYPE(FT_BFLOAT16)), 0);
	cr_assert_eq(ft_state_register(c, v, sizeof(v), FT_STATE_SHARDED | FT_STATE_DTYPE(FT_INT32)), 1);
	cr_assert_eq(ft_ckpt_enable(c, &k), 0);
	cr_assert_eq(ft_ckpt_step(c, 1), 0);
	h[64 + 3] = 0x4000; /* bfloat16 2.0 in block 1 of region 0 */
	v[32 * 2 + 5] = 3;  /* 3 in block 2 of region 1 (global block 6): more */
	cr_assert_eq(ft_ckpt_step(c, 2), 0);
	cr_assert_eq(ft_ckpt_flush(c), 0);
	cr_assert_eq(saved_in(2, got, 8), 1);
	cr_assert(got[6], "the int32 block changed most");
	cr_assert_eq(ft_finalize(c), 0);
	rm_base();
}

/* ---- CPR's rule ---- */

Test(ckpt, interval_rule)
{
	/* the largest k with f x k x l / 2 <= target */
	cr_assert_eq(ft_ckpt_interval_for_pls(0.01, 0.001, 0.5), 40);
	cr_assert_eq(ft_ckpt_interval_for_pls(0.01, 0.001, 1), 20);
	cr_assert_eq(ft_ckpt_interval_for_pls(0.001, 0.0001, 0.25), 80);
	cr_assert_eq(ft_ckpt_interval_for_pls(0.01, 0.003, 0.5), 13);
	cr_assert_eq(ft_ckpt_interval_for_pls(1e-9, 0.5, 1), 1, "at least 1");
	for (unsigned k = 1; k < 200; k += 7) {
		double f = 1e-3, l = 0.3, t = f * k * l / 2;
		cr_assert_eq(ft_ckpt_interval_for_pls(t, f, l), k, "exact boundary k=%u", k);
	}
	cr_assert_eq(ft_ckpt_interval_for_pls(0, 0.001, 0.5), 0);
	cr_assert_eq(ft_ckpt_interval_for_pls(0.01, 0, 0.5), 0);
	cr_assert_eq(ft_ckpt_interval_for_pls(0.01, 0.001, 0), 0);
	cr_assert_eq(ft_ckpt_interval_for_pls(0.01, 0.001, 1.5), 0);
	cr_assert_eq(ft_ckpt_interval_for_pls(NAN, 0.001, 0.5), 0);
	cr_assert_eq(ft_ckpt_interval_for_pls(0.01, -1, 0.5), 0);
}

/* ---- bad arguments ---- */

Test(ckpt, bad_arguments, .timeout = 30)
{
	static float st[1024], rep[16];
	double score[4] = {1, 2, 3, NAN};
	struct ft_restore_info ri;
	struct ft_ckpt_stats s;
	struct ft_comm *c = open1();
	struct ft_ckpt_config k = ckcfg(FT_CKPT_PRIORITY, 1024, 0.5), bad;
	size_t nb;

	/* ft_state_register */
	cr_assert_eq(ft_state_register(c, st, sizeof(st), 0), -FT_EINVAL);
	cr_assert_eq(ft_state_register(c, st, sizeof(st), 3), -FT_EINVAL);
	cr_assert_eq(ft_state_register(c, st, sizeof(st), 4), -FT_EINVAL);
	cr_assert_eq(ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED | 0x10), -FT_EINVAL);
	cr_assert_eq(ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED | FT_STATE_DTYPE(FT_DTYPE_COUNT)), -FT_EINVAL);
	cr_assert_eq(ft_state_register(c, NULL, 16, FT_STATE_SHARDED), -FT_EINVAL);
	cr_assert_eq(ft_state_register(c, st, 6, FT_STATE_SHARDED), -FT_EINVAL, "not whole float32s");
	cr_assert_eq(ft_state_register(NULL, st, 16, FT_STATE_SHARDED), -FT_EINVAL);
	/* calls before ft_ckpt_enable */
	cr_assert_eq(ft_ckpt_step(c, 1), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_flush(c), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_priority(c, 1, score, 4), -FT_EINVAL);
	cr_assert_eq(ft_state_register(c, rep, sizeof(rep), FT_STATE_REPLICATED), 0);
	cr_assert_eq(ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED), 1);
	/* ft_ckpt_enable */
	cr_assert_eq(ft_ckpt_enable(c, NULL), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_enable(NULL, &k), -FT_EINVAL);
	bad = k; bad.struct_size = 0;
	cr_assert_eq(ft_ckpt_enable(c, &bad), -FT_EINVAL);
	bad = k; bad.strategy = FT_CKPT_STRATEGY_COUNT;
	cr_assert_eq(ft_ckpt_enable(c, &bad), -FT_EINVAL);
	bad = k; bad.fraction = 0;
	cr_assert_eq(ft_ckpt_enable(c, &bad), -FT_EINVAL);
	bad = k; bad.fraction = 1.5;
	cr_assert_eq(ft_ckpt_enable(c, &bad), -FT_EINVAL);
	bad = k; bad.fraction = NAN;
	cr_assert_eq(ft_ckpt_enable(c, &bad), -FT_EINVAL);
	bad = k; bad.interval = 0;
	cr_assert_eq(ft_ckpt_enable(c, &bad), -FT_EINVAL);
	bad = k; bad.block_bytes = 1022;
	cr_assert_eq(ft_ckpt_enable(c, &bad), -FT_EINVAL, "not whole float32s");
	bad = k; bad.sync = 2;
	cr_assert_eq(ft_ckpt_enable(c, &bad), -FT_EINVAL);
	bad = k; memset(bad.dir, 'x', sizeof(bad.dir));
	cr_assert_eq(ft_ckpt_enable(c, &bad), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_enable(c, &k), 0);
	cr_assert_eq(ft_ckpt_enable(c, &k), -FT_EINVAL, "enabled twice");
	/* ft_ckpt_step: steps increase */
	cr_assert_eq(ft_ckpt_step(NULL, 1), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_step(c, 5), 0);
	cr_assert_eq(ft_ckpt_step(c, 5), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_step(c, 4), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_flush(NULL), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_flush(c), 0);
	/* ft_ckpt_priority: a sharded region, one finite score per block */
	cr_assert_eq(ft_ckpt_priority(c, 1, score, 3), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_priority(c, 1, score, 4), -FT_EINVAL, "NaN score");
	cr_assert_eq(ft_ckpt_priority(c, 1, NULL, 4), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_priority(c, 0, score, 4), -FT_EINVAL, "replicated region");
	cr_assert_eq(ft_ckpt_priority(c, -1, score, 4), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_priority(c, 7, score, 4), -FT_EINVAL);
	score[3] = 0;
	cr_assert_eq(ft_ckpt_priority(c, 1, score, 4), 0);
	cr_assert_eq(ft_ckpt_priority(NULL, 1, score, 4), -FT_EINVAL);
	/* ft_ckpt_restore */
	cr_assert_eq(ft_ckpt_restore(c, 1, 0, 0, 4, st, 0, &ri), 0);
	cr_assert_eq(ft_ckpt_restore(NULL, 1, 0, 0, 4, st, 0, &ri), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_restore(c, 0, 0, 0, 1, st, 0, &ri), -FT_EINVAL, "replicated region");
	cr_assert_eq(ft_ckpt_restore(c, 64, 0, 0, 1, st, 0, &ri), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_restore(c, -1, 0, 0, 1, st, 0, &ri), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_restore(c, 1, 1, 0, 1, st, 0, &ri), -FT_EINVAL, "owner out of range");
	cr_assert_eq(ft_ckpt_restore(c, 1, -1, 0, 1, st, 0, &ri), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_restore(c, 1, 0, 3, 2, st, 0, &ri), -FT_EINVAL, "past the end");
	cr_assert_eq(ft_ckpt_restore(c, 1, 0, SIZE_MAX, 2, st, 0, &ri), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_restore(c, 1, 0, 1, SIZE_MAX, st, 0, &ri), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_restore(c, 1, 0, 0, 1, NULL, 0, &ri), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_restore(c, 1, 0, 0, 1, st, 2, &ri), -FT_EINVAL, "unknown flag");
	/* ft_ckpt_blocks */
	cr_assert_eq(ft_ckpt_blocks(c, 1, 0, &nb, NULL, NULL), 0);
	cr_assert_eq(nb, 4);
	cr_assert_eq(ft_ckpt_blocks(NULL, 1, 0, &nb, NULL, NULL), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_blocks(c, 0, 0, &nb, NULL, NULL), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_blocks(c, 99, 0, &nb, NULL, NULL), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_blocks(c, 1, 3, &nb, NULL, NULL), -FT_EINVAL);
	/* ft_state_restored, ft_ckpt_stats_get */
	cr_assert_eq(ft_state_restored(c, NULL), -FT_EINVAL);
	cr_assert_eq(ft_state_restored(NULL, &ri), -FT_EINVAL);
	cr_assert_eq(ft_state_restored(c, &ri), -FT_ENOSYS);
	cr_assert_eq(ft_ckpt_stats_get(c, NULL), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_stats_get(NULL, &s), -FT_EINVAL);
	cr_assert_eq(ft_ckpt_stats_get(c, &s), 0);
	cr_assert_eq(ft_finalize(c), 0);
	/* a finalized communicator */
	cr_assert_eq(ft_ckpt_step(c, 9), -FT_EFINALIZED);
	cr_assert_eq(ft_ckpt_enable(c, &k), -FT_EFINALIZED);
	cr_assert_eq(ft_ckpt_restore(c, 1, 0, 0, 1, st, 0, &ri), -FT_EFINALIZED);
	rm_base();
}

/* ---- ranks that disagree ---- */

static int run_mismatch(struct ft_comm *c, int rank, int n, void *arg)
{
	static float st[1024];
	struct ft_ckpt_config k = FT_CKPT_CONFIG_INIT;
	int rc, bad = 0;

	(void)n;
	snprintf(k.dir, sizeof(k.dir), "%s", (const char *)arg);
	if (ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED) != 0)
		return 10;
	k.interval = rank == 1 ? 2 : 1;
	rc = ft_ckpt_enable(c, &k);
	if (rc != -FT_EMISMATCH) {
		fprintf(stderr, "rank %d: interval mismatch: %s\n", rank, ft_err_name(rc));
		bad |= 1;
	}
	k.interval = 1;
	k.block_bytes = rank == 2 ? 1024 : 0;
	rc = ft_ckpt_enable(c, &k);
	if (rc != -FT_EMISMATCH) {
		fprintf(stderr, "rank %d: block size mismatch: %s\n", rank, ft_err_name(rc));
		bad |= 2;
	}
	k.block_bytes = 0;
	k.fraction = rank == 0 ? 0 : 0.125;
	rc = ft_ckpt_enable(c, &k);
	if (rc != (rank == 0 ? -FT_EINVAL : -FT_EMISMATCH)) {
		fprintf(stderr, "rank %d: a bad fraction on rank 0: %s\n", rank, ft_err_name(rc));
		bad |= 4;
	}
	k.fraction = 0.125;
	if ((rc = ft_ckpt_enable(c, &k)) != 0) {
		fprintf(stderr, "rank %d: enable: %s\n", rank, ft_err_name(rc));
		bad |= 8;
	}
	/* a survivor reads another member's shard from its files (a shared dir) */
	for (size_t i = 0; i < 1024; i++)
		st[i] = (float)(rank * 10000 + (int)i);
	if (ft_ckpt_step(c, 1) != 0 || ft_ckpt_flush(c) != 0 || ft_barrier(c) != 0)
		bad |= 16;
	if (rank == 0) {
		static float other[1024];
		struct ft_restore_info ri;
		size_t nb, bb, rb;
		for (int owner = 1; owner < 3; owner++) {
			if (ft_ckpt_blocks(c, 0, owner, &nb, &bb, &rb) != 0 || nb != 1 || bb != 4096 ||
			    rb != sizeof(other))
				bad |= 32;
			rc = ft_ckpt_restore(c, 0, owner, 0, 1, other, 0, &ri);
			for (size_t i = 0; i < 1024; i++)
				if (other[i] != (float)(owner * 10000 + (int)i))
					bad |= 64;
			if (rc != 0 || ri.blocks != 1 || ri.bytes != sizeof(other) || ri.ckpt_step != 1)
				bad |= 128;
		}
	}
	if (ft_barrier(c) != 0)
		bad |= 256;
	return bad;
}

Test(ckpt, enable_mismatch_on_every_rank, .timeout = 60)
{
	mk_base();
	cr_assert_eq(tu_run(3, 40000, run_mismatch, base), 0);
	rm_base();
}

/* ---- the tool ---- */

static int tool(const char *args)
{
	const char *b = getenv("FTCC_BUILD_DIR");
	char cmd[2048];
	int st;

	snprintf(cmd, sizeof(cmd), "%s/ftcc-ckpt %s >/dev/null 2>&1", b != NULL && *b ? b : "build",
		 args);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(ckpt, ftcc_ckpt_exit_codes, .timeout = 30)
{
	static float st[TBYTES / 4], A[TBYTES / 4], B[TBYTES / 4];
	const char *b = getenv("FTCC_BUILD_DIR");
	char path[600], exe[300], args[1200];
	size_t len;
	char *orig;

	snprintf(exe, sizeof(exe), "%s/ftcc-ckpt", b != NULL && *b ? b : "build");
	if (access(exe, X_OK) != 0)
		cr_skip_test("%s is not built", exe);
	struct ft_comm *c = two_rounds(st, A, B);
	cr_assert_eq(ft_finalize(c), 0); /* the files stay */
	snprintf(args, sizeof(args), "-v '%s'", jdir);
	cr_assert_eq(tool(args), 0);
	snprintf(args, sizeof(args), "'%s' 0", jdir);
	cr_assert_eq(tool(args), 0);
	snprintf(args, sizeof(args), "export '%s' '%s/e' 0", jdir, base);
	cr_assert_eq(tool(args), 0);
	snprintf(args, sizeof(args), "'%s/e'", base);
	cr_assert_eq(tool(args), 0, "the export verifies");
	snprintf(args, sizeof(args), "export '%s/nothing-here' '%s/e'", base, base);
	cr_assert_eq(tool(args), 2);
	snprintf(args, sizeof(args), "export '%s'", jdir);
	cr_assert_eq(tool(args), 2, "export without OUT");
	newest_path(path, sizeof(path));
	orig = slurp(path, &len);
	orig[2 * TSTRIDE + FT__CKPT_HDR + 9] ^= 4;
	put_back(path, orig, len);
	snprintf(args, sizeof(args), "'%s'", jdir);
	cr_assert_eq(tool(args), 1);
	snprintf(args, sizeof(args), "'%s/nothing-here'", base);
	cr_assert_eq(tool(args), 2);
	snprintf(args, sizeof(args), "'%s' 5", jdir);
	cr_assert_eq(tool(args), 2, "a rank without a journal");
	cr_assert_eq(tool(""), 2);
	free(orig);
	rm_base();
}

/* ---- an export: a new run's shards start from an earlier run's checkpoint ---- */

/* A new one-rank run's enable with from = dir; the shard must stay as it was on an error. */
static int seeded_enable(struct ft_comm *c, const char *dir, enum ft_ckpt_strategy s, size_t bb)
{
	struct ft_ckpt_config k = ckcfg(s, bb, 0.25);

	snprintf(k.from, sizeof(k.from), "%s", dir);
	return ft_ckpt_enable(c, &k);
}

Test(ckpt, export_seeds_a_new_run, .timeout = 60)
{
	enum { BB = 4096, N = 12 * BB / 4 + 100 }; /* 13 blocks, the last one short */
	static float st[N], want[N];
	struct ft_restore_info ri0, ri;
	struct ft__ckpt_image img;
	char src[FT_NAME_MAX + 300], exp[400];
	uint64_t blocks, bytes, step;
	char why[256];
	struct ft_comm *c = open1();
	struct ft_ckpt_config k = ckcfg(FT_CKPT_PRIORITY, BB, 0.25);

	/* a partial checkpoint: the blocks' newest copies come from different steps */
	fill(st, N, 1);
	cr_assert_eq(ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED | FT_STATE_DTYPE(FT_FLOAT32)), 0);
	cr_assert_eq(ft_ckpt_enable(c, &k), 0);
	for (uint64_t t = 1; t <= 6; t++) {
		for (size_t i = (t * 1500) % N; i < N; i += 7)
			st[i] += (float)t * 3.0f + (float)(i % 5);
		cr_assert_eq(ft_ckpt_step(c, t), 0);
	}
	cr_assert_eq(ft_ckpt_flush(c), 0);
	cr_assert_eq(ft_ckpt_restore(c, 0, 0, 0, 13, want, 0, &ri0), 0);
	cr_assert_lt(ri0.oldest_step, ri0.ckpt_step, "the test wants blocks of several steps");
	cr_assert_eq(ft_finalize(c), 0);
	snprintf(src, sizeof(src), "%s", jdir);
	snprintf(exp, sizeof(exp), "%s/exported", base);
	cr_assert_eq(ft__ckpt_export(src, 0, exp, &blocks, &bytes, &step, why, sizeof(why)), 0, "%s",
		     why);
	cr_assert_eq(blocks, 13);
	cr_assert_eq(bytes, sizeof(st));
	cr_assert_eq(step, ri0.ckpt_step);
	cr_assert_eq(ft__ckpt_verify(exp, 0, NULL, false), 0);

	/* a new run (another job, its own nonce) starts from it */
	c = open1();
	memset(st, 0, sizeof(st));
	cr_assert_eq(ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED | FT_STATE_DTYPE(FT_FLOAT32)), 0);
	cr_assert_eq(ft_state_restored(c, &ri), -FT_ENOSYS);
	cr_assert_eq(seeded_enable(c, exp, FT_CKPT_PRIORITY, BB), 0);
	cr_assert_eq(memcmp(st, want, sizeof(st)), 0, "the shard is not the export's");
	cr_assert_eq(ft_state_restored(c, &ri), 0);
	cr_assert_eq(ri.blocks, 13);
	cr_assert_eq(ri.bytes, sizeof(st));
	cr_assert_eq(ri.ckpt_step, ri0.ckpt_step);
	cr_assert_eq(ri.oldest_step, ri0.oldest_step);
	/* its own checkpoint goes on in its own directory, a running one */
	st[5] += 1;
	cr_assert_eq(ft_ckpt_step(c, ri.ckpt_step + 1), 0);
	cr_assert_eq(ft_ckpt_flush(c), 0);
	cr_assert_eq(ft__ckpt_image_open(jdir, 0, &img), 0);
	cr_assert_neq(img.head.interval, 0);
	cr_assert_eq(img.last_round, 1);
	ft__ckpt_image_free(&img);
	cr_assert_eq(ft_finalize(c), 0);
	cr_assert_eq(ft__ckpt_image_open(exp, 0, &img), 0);
	cr_assert_eq(img.head.interval, 0, "the export is still an export");
	ft__ckpt_image_free(&img);
	cr_assert_eq(ft__ckpt_verify(exp, 0, NULL, false), 0);
	rm_base();
}

Test(ckpt, export_refusals, .timeout = 60)
{
	static float st[TBYTES / 4], A[TBYTES / 4], B[TBYTES / 4], out[TBYTES / 4];
	static float keep[TBYTES / 4], small[TBYTES / 8];
	char src[FT_NAME_MAX + 300], exp[400], bad[400], path[600], other[FT_PATH_MAX];
	uint64_t blocks, bytes, step;
	size_t len;
	char why[256], *buf;
	struct ft_comm *c = two_rounds(st, A, B);

	cr_assert_eq(ft_finalize(c), 0);
	snprintf(src, sizeof(src), "%s", jdir);
	snprintf(exp, sizeof(exp), "%s/exported", base);
	snprintf(bad, sizeof(bad), "%s/bad-export", base);
	/* block 2's newest copy flipped: the export takes its older one */
	newest_path(path, sizeof(path));
	buf = slurp(path, &len);
	buf[2 * TSTRIDE + FT__CKPT_HDR + 9] ^= 4;
	put_back(path, buf, len);
	free(buf);
	cr_assert_eq(ft__ckpt_export(src, 0, exp, &blocks, &bytes, &step, why, sizeof(why)), 0, "%s",
		     why);
	cr_assert_eq(step, 2);
	/* block 5 with no valid copy at all: nothing of rank 0 is exported */
	for (int s = 0; s < 2; s++) {
		cr_assert_eq(ft__ckpt_path(path, sizeof(path), src, 0, 0, s), 0);
		buf = slurp(path, &len);
		buf[5 * TSTRIDE + FT__CKPT_HDR + 3] ^= 1;
		put_back(path, buf, len);
		free(buf);
	}
	cr_assert_eq(ft__ckpt_export(src, 0, bad, &blocks, &bytes, &step, why, sizeof(why)),
		     -FT_ECORRUPT);
	cr_assert_not_null(strstr(why, "block 5"), "why: %s", why);
	cr_assert_eq(ft__ckpt_path(path, sizeof(path), bad, 0, -1, 0), 0);
	cr_assert_neq(access(path, F_OK), 0, "a journal of a failed export was left");
	cr_assert_eq(ft__ckpt_export(src, 3, bad, &blocks, &bytes, &step, why, sizeof(why)), -FT_EIO);
	/* never over a run's checkpoint, nor into its source, nor from a misnamed journal */
	cr_assert_eq(ft__ckpt_export(exp, 0, src, &blocks, &bytes, &step, why, sizeof(why)),
		     -FT_EINVAL, "an export over a run's checkpoint");
	cr_assert_eq(ft__ckpt_export(exp, 0, exp, &blocks, &bytes, &step, why, sizeof(why)),
		     -FT_EINVAL, "an export into its source");
	{
		char from[700], to[700];
		cr_assert_eq(ft__ckpt_path(from, sizeof(from), exp, 0, -1, 0), 0);
		cr_assert_eq(ft__ckpt_path(to, sizeof(to), exp, 1, -1, 0), 0);
		buf = slurp(from, &len);
		int fd = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		cr_assert_geq(fd, 0);
		cr_assert_eq(write(fd, buf, len), (ssize_t)len);
		close(fd);
		free(buf);
		cr_assert_eq(ft__ckpt_export(exp, 1, bad, &blocks, &bytes, &step, why, sizeof(why)),
			     -FT_ECORRUPT, "rank 1's journal names rank 0");
		unlink(to);
	}

	/* a new run: refused starts leave the shard as the application set it */
	c = open1();
	fill(st, TBYTES / 4, 9);
	memcpy(keep, st, sizeof(keep));
	cr_assert_eq(ft_state_register(c, st, TBYTES, FT_STATE_SHARDED | FT_STATE_DTYPE(FT_FLOAT32)), 0);
	cr_assert_eq(seeded_enable(c, src, FT_CKPT_FULL, TB), -FT_ECORRUPT, "a run's checkpoint, not an export");
	snprintf(other, sizeof(other), "%s/nothing-here", base);
	cr_assert_eq(seeded_enable(c, other, FT_CKPT_FULL, TB), -FT_EIO);
	cr_assert_eq(memcmp(st, keep, sizeof(keep)), 0);
	/* a flipped byte in the export */
	cr_assert_eq(ft__ckpt_path(path, sizeof(path), exp, 0, 0, 0), 0);
	buf = slurp(path, &len);
	buf[6 * TSTRIDE + FT__CKPT_HDR + 1] ^= 2;
	put_back(path, buf, len);
	cr_assert_eq(seeded_enable(c, exp, FT_CKPT_FULL, TB), -FT_ECORRUPT);
	cr_assert_eq(memcmp(st, keep, sizeof(keep)), 0);
	buf[6 * TSTRIDE + FT__CKPT_HDR + 1] ^= 2;
	put_back(path, buf, len);
	free(buf);
	/* the run's own directory is the export's (an export of the export):
	 * refused, the export untouched */
	snprintf(other, sizeof(other), "%s", jdir);
	cr_assert_eq(ft__ckpt_export(exp, 0, other, &blocks, &bytes, &step, why, sizeof(why)), 0,
		     "%s", why);
	cr_assert_eq(seeded_enable(c, other, FT_CKPT_FULL, TB), -FT_EINVAL);
	cr_assert_eq(memcmp(st, keep, sizeof(keep)), 0);
	cr_assert_eq(ft__ckpt_verify(other, 0, NULL, false), 0);
	snprintf(path, sizeof(path), "rm -r '%s'", other);
	cr_assert_eq(system(path), 0);
	/* and the good one: block 2 from step 1, the others from step 2 */
	cr_assert_eq(seeded_enable(c, exp, FT_CKPT_FULL, TB), 0);
	memcpy(out, B, sizeof(out));
	memcpy((char *)out + 2 * TB, (char *)A + 2 * TB, TB);
	cr_assert_eq(memcmp(st, out, sizeof(out)), 0);
	cr_assert_eq(ft_finalize(c), 0);

	/* another geometry: every other size is refused */
	c = open1();
	fill(small, TBYTES / 8, 4);
	cr_assert_eq(ft_state_register(c, small, sizeof(small), FT_STATE_SHARDED | FT_STATE_DTYPE(FT_FLOAT32)), 0);
	cr_assert_eq(seeded_enable(c, exp, FT_CKPT_FULL, TB), -FT_EMISMATCH);
	cr_assert_eq(ft_finalize(c), 0);
	rm_base();
}

/* Three ranks: the source run, then new runs from its export. */
static int run_seed_source(struct ft_comm *c, int rank, int n, void *arg)
{
	static float st[3000];
	struct ft_ckpt_config k = FT_CKPT_CONFIG_INIT;

	(void)n;
	snprintf(k.dir, sizeof(k.dir), "%s/src", (const char *)arg);
	for (size_t i = 0; i < 3000; i++)
		st[i] = (float)(rank * 100000 + (int)i);
	if (ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED) != 0 ||
	    ft_ckpt_enable(c, &k) != 0 || ft_ckpt_step(c, 7) != 0 || ft_ckpt_flush(c) != 0)
		return 1;
	return ft_barrier(c) != 0;
}

static int run_seed_mismatch(struct ft_comm *c, int rank, int n, void *arg)
{
	static float st[3000];
	struct ft_ckpt_config k = FT_CKPT_CONFIG_INIT;
	struct ft_restore_info ri;
	int rc, bad = 0;

	(void)n;
	snprintf(k.dir, sizeof(k.dir), "%s/run", (const char *)arg);
	for (size_t i = 0; i < 3000; i++)
		st[i] = -1;
	if (ft_state_register(c, st, sizeof(st), FT_STATE_SHARDED) != 0)
		return 1;
	/* rank 1 has no export in "part" */
	snprintf(k.from, sizeof(k.from), "%s/part", (const char *)arg);
	rc = ft_ckpt_enable(c, &k);
	if (rc != (rank == 1 ? -FT_EIO : -FT_EMISMATCH)) {
		fprintf(stderr, "rank %d: a missing export on rank 1: %s\n", rank, ft_err_name(rc));
		bad |= 2;
	}
	/* rank 2 starts afresh while the others start from the export */
	snprintf(k.from, sizeof(k.from), "%s", rank == 2 ? "" : (const char *)arg);
	if (rank != 2)
		snprintf(k.from, sizeof(k.from), "%s/all", (const char *)arg);
	if ((rc = ft_ckpt_enable(c, &k)) != -FT_EMISMATCH) {
		fprintf(stderr, "rank %d: rank 2 without an export: %s\n", rank, ft_err_name(rc));
		bad |= 4;
	}
	for (size_t i = 0; i < 3000; i++)
		bad |= st[i] != -1 ? 8 : 0;
	snprintf(k.from, sizeof(k.from), "%s/all", (const char *)arg);
	if ((rc = ft_ckpt_enable(c, &k)) != 0 || ft_state_restored(c, &ri) != 0 ||
	    ri.ckpt_step != 7) {
		fprintf(stderr, "rank %d: from the export: %s\n", rank, ft_err_name(rc));
		bad |= 16;
	}
	for (size_t i = 0; i < 3000; i++)
		bad |= st[i] != (float)(rank * 100000 + (int)i) ? 32 : 0;
	return bad | (ft_barrier(c) != 0 ? 64 : 0);
}

Test(ckpt, export_start_mismatch_on_every_rank, .timeout = 60)
{
	char pat[400], dst[400];
	uint64_t blocks, bytes, step;
	char why[256];
	glob_t g;

	mk_base();
	cr_assert_eq(tu_run(3, 40000, run_seed_source, base), 0);
	snprintf(pat, sizeof(pat), "%s/src/*", base);
	cr_assert_eq(glob(pat, 0, NULL, &g), 0);
	cr_assert_eq(g.gl_pathc, 1);
	for (int r = 0; r < 3; r++) {
		snprintf(dst, sizeof(dst), "%s/all", base);
		cr_assert_eq(ft__ckpt_export(g.gl_pathv[0], r, dst, &blocks, &bytes, &step, why,
					     sizeof(why)), 0, "%s", why);
		snprintf(dst, sizeof(dst), "%s/part", base);
		if (r != 1)
			cr_assert_eq(ft__ckpt_export(g.gl_pathv[0], r, dst, &blocks, &bytes, &step, why,
						     sizeof(why)), 0, "%s", why);
	}
	globfree(&g);
	cr_assert_eq(tu_run(3, 40000, run_seed_mismatch, base), 0);
	rm_base();
}

/* ---- a killed rank's shard back from its checkpoint (rejoin) ---- */

/* The size of rank r's checkpoint journal under base/ck/<job>/; -1 while it does not exist. */
static long journal_size(int r)
{
	char pat[400];
	struct stat sb;
	glob_t g;
	long sz = -1;

	snprintf(pat, sizeof(pat), "%s/ck/*/ck-r%d.jnl", base, r);
	if (glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0 && stat(g.gl_pathv[0], &sb) == 0)
		sz = (long)sb.st_size;
	globfree(&g);
	return sz;
}

/* The pid of rank r's first incarnation in this test's job (found by its environment), or 0. */
static pid_t first_incarnation(int r)
{
	char want_rank[32], want_dir[300], path[300], env[8192];
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t found = 0;

	snprintf(want_rank, sizeof(want_rank), "FTCC_RANK=%d", r);
	snprintf(want_dir, sizeof(want_dir), "FTCC_CKPT_DIR=%s/ck", base);
	while (d != NULL && found == 0 && (e = readdir(d)) != NULL) {
		bool rank = false, dir = false, first = false;
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/environ", e->d_name);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t n = read(fd, env, sizeof(env) - 1);
		close(fd);
		if (n <= 0)
			continue;
		env[n] = '\0';
		for (ssize_t i = 0; i < n; i += (ssize_t)strlen(env + i) + 1) {
			rank |= strcmp(env + i, want_rank) == 0;
			dir |= strcmp(env + i, want_dir) == 0;
			first |= strcmp(env + i, "FTCC_INCARNATION=0") == 0;
		}
		if (rank && dir && first)
			found = (pid_t)atoi(e->d_name);
	}
	if (d != NULL)
		closedir(d);
	return found;
}

/*
 * A kill from outside the library, at a moment it does not choose, but
 * inside the job by construction: once rank r's journal has grown past what
 * it held when first seen (a round committed: r is past ft_init and
 * ft_ckpt_enable, stepping), the test SIGKILLs it. (A --kill at a fixed time
 * after launch stood in for that event, and lost to libfabric's set-up on a
 * loaded machine: the kill landed before ft_init, the new incarnation was a
 * first start, and nothing was restored.) The job, a child running cmd, has
 * steps x 5 ms of pauses still to run then. Returns the job's status.
 */
static bool file_has(const char *path, const char *what)
{
	char line[512];
	bool found = false;
	FILE *f = fopen(path, "r");

	while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
		found = strstr(line, what) != NULL;
	if (f != NULL)
		fclose(f);
	return found;
}

/* seen, seen_in: instead of the journal's growth, the kill waits for a line
 * holding seen in the file seen_in (peer checkpoints write no journal). */
static int run_with_outside_kill(const char *cmd, int r, const char *label, const char *seen,
				 const char *seen_in)
{
	long end = tu_now_ms() + 60000, first = -1, sz = -1;
	pid_t launcher = fork(), victim = 0;
	int st;

	cr_assert(launcher >= 0, "fork: %s", strerror(errno));
	if (launcher == 0) {
		setpgid(0, 0); /* the whole job goes if the test gives up on it */
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	while (waitpid(launcher, &st, WNOHANG) == 0 && tu_now_ms() < end) {
		sz = journal_size(r);
		if (first < 0 && sz > 0)
			first = sz;
		if (seen != NULL ? file_has(seen_in, seen) && (victim = first_incarnation(r)) > 0
				 : first > 0 && sz > first && (victim = first_incarnation(r)) > 0)
			break;
		tu_sleep_ms(2);
	}
	if (victim > 0 && seen != NULL) {
		/* its first round is on its way: a moment later, at random, some
		 * of its rounds have reached the holder (hundreds of steps left) */
		tu_sleep_ms(100 + (long)(tu_now_ms() % 300));
		victim = first_incarnation(r);
	}
	if (victim > 0 && kill(victim, SIGKILL) == 0)
		fprintf(stderr, "%s: killed rank %d (pid %d), its journal at %ld bytes\n", label, r,
			(int)victim, sz);
	else
		victim = 0;
	if (waitpid(launcher, &st, victim > 0 ? 0 : WNOHANG) == 0) {
		kill(-launcher, SIGKILL);
		waitpid(launcher, &st, 0);
	}
	cr_assert(victim > 0, "%s: rank %d was never seen stepping (journal %ld bytes)", label, r,
		  sz);
	return st;
}

/* The build directory, once its examples/train_sharded is built (else the test is skipped). */
static const char *sharded_build(void)
{
	const char *b = getenv("FTCC_BUILD_DIR");
	char prog[512];

	b = b != NULL && *b ? b : "build";
	snprintf(prog, sizeof(prog), "%s/examples/train_sharded", b);
	if (access(prog, X_OK) != 0)
		cr_skip_test("%s is not built", prog);
	return b;
}

/* A failed job's output, its last lines, on stderr. */
static void show_tail(const char *out)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "tail -30 '%s' 1>&2", out);
	if (system(cmd) != 0)
		fprintf(stderr, "(no output)\n");
}

/* outside: the rank to kill from outside once it is stepping (run_with_outside_kill), or -1. */
static void run_sharded(const char *env, const char *run_args, const char *fault, int steps,
			int outside, const char *late, const char *label, int want_restored)
{
	const char *b = sharded_build();
	char cmd[2048], out[512], line[512];
	int restored = 0, shard_ok = 0, bad = 0;
	FILE *f;

	mk_base();
	snprintf(out, sizeof(out), "%s/out.txt", base);
	snprintf(cmd, sizeof(cmd),
		 "FTCC_POLICY=rejoin FTCC_CKPT_DIR='%s/ck' FTCC_FAULT='%s' FTCC_LOG_LEVEL=1 %s "
		 "FTCC_REJOIN_TIMEOUT_MS=20000 timeout 100 %s/ftcc-run -n 3 %s "
		 "%s/examples/train_sharded %d 20000 5 %s >'%s' 2>&1",
		 base, fault, env, b, run_args, b, steps, late, out);
	bool peer = strstr(env, "FTCC_CKPT_WHERE=peer") != NULL;
	char seen[64];
	snprintf(seen, sizeof(seen), "ckpt: rank %d's rounds go to", outside);
	int st = outside >= 0 ? run_with_outside_kill(cmd, outside, label, peer ? seen : NULL, out)
			      : system(cmd);
	int none = 0;
	f = fopen(out, "r");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f) != NULL) {
		restored += strstr(line, "restored ok") != NULL;
		shard_ok += strstr(line, "shard ok") != NULL;
		bad += strstr(line, "BAD") != NULL || strstr(line, "DIFFERENT") != NULL;
		none += strstr(line, "restored ok: 0 blocks") != NULL;
	}
	fclose(f);
	if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0 && restored == want_restored && shard_ok == 3 &&
	      bad == 0 && !(peer && none > 0)))
		show_tail(out);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: job status %d", label, st);
	cr_assert_eq(bad, 0, "%s", label);
	cr_assert_eq(restored, want_restored, "%s: the restarted rank (and, from an export, every "
		     "rank) restored its shard", label);
	cr_assert_eq(shard_ok, 3, "%s: every shard exact at the end", label);
	if (peer) {
		/* no files: what came back came from the holder's memory */
		cr_assert_eq(none, 0, "%s: the new incarnation restored blocks from its holder", label);
		rm_base();
		return;
	}
	/* the checkpoints of all three (one of them written by two incarnations) check */
	snprintf(cmd, sizeof(cmd), "%s/ftcc-ckpt %s/ck/* >/dev/null 2>&1", b, base);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: ftcc-ckpt status %d", label, st);
	rm_base();
}

Test(ckpt_rejoin, killed_rank_restores_its_shard, .timeout = 120)
{
	run_sharded("", "--restart", "rank=1,op=30,action=kill", 60, -1, "", "kill at op 30", 1);
}

Test(ckpt_rejoin, enabled_after_sync, .timeout = 120)
{
	run_sharded("", "--restart", "rank=2,op=20,action=kill", 40, -1, "late", "enable after sync", 1);
}

Test(ckpt_rejoin, outside_kill, .timeout = 120)
{
	/* the kill lands once rank 2 is stepping, at a moment the library does
	 * not choose, with 500 steps of at least 5 ms still to run */
	run_sharded("", "--restart", "", 500, 2, "", "outside kill", 1);
}

Test(ckpt_rejoin, killed_before_the_job_checkpoints, .timeout = 200)
{
	/* killed in ft_init's barrier, and in ft_ckpt_enable's agreement: the
	 * new incarnation takes part in the agreement (nothing to restore) */
	run_sharded("", "--restart", "rank=1,op=0,phase=between", 30, -1, "",
		    "kill in ft_init's barrier", 1);
	run_sharded("", "--restart", "rank=2,op=1,phase=between", 30, -1, "",
		    "kill in ft_ckpt_enable", 1);
}

/* ---- checkpoints in a peer's memory (FTCC_CKPT_WHERE=peer: no files anywhere) ---- */

Test(ckpt_peer, rejoined_rank_restores_from_its_holder, .timeout = 120)
{
	run_sharded("FTCC_CKPT_WHERE=peer", "--restart", "rank=1,op=30,action=kill", 60, -1, "",
		    "peer: kill at op 30", 1);
}

Test(ckpt_peer, outside_kill, .timeout = 120)
{
	/* killed from outside once its rounds go to its holder (info log) */
	run_sharded("FTCC_CKPT_WHERE=peer FTCC_LOG_LEVEL=2", "--restart", "", 500, 2, "",
		    "peer: outside kill", 1);
}

/* Shrink: both survivors read the lost rank's shard back, the holder from
 * its own memory and the other over a link to it, and check every block. */
Test(ckpt_peer, survivors_take_over_a_lost_shard, .timeout = 120)
{
	const char *b = sharded_build();
	char cmd[2048], out[512];
	int st;

	mk_base();
	snprintf(out, sizeof(out), "%s/out.txt", base);
	snprintf(cmd, sizeof(cmd),
		 "FTCC_CKPT_WHERE=peer FTCC_POLICY=shrink FTCC_CKPT_DIR='%s/ck' "
		 "FTCC_FAULT=rank=1,op=30,action=kill FTCC_LOG_LEVEL=1 timeout 100 %s/ftcc-run -n 3 "
		 "%s/examples/train_sharded 60 20000 5 take >'%s' 2>&1",
		 base, b, b, out);
	st = system(cmd);
	bool ok = file_has(out, "rank 0 took rank 1's shard ok: 20 blocks") &&
		  file_has(out, "rank 2 took rank 1's shard ok: 20 blocks") &&
		  !file_has(out, "BAD") && !file_has(out, "DIFFERENT") &&
		  file_has(out, "[0] shard ok") && file_has(out, "[2] shard ok");
	if (!ok)
		show_tail(out);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 124, "the job ran out of time");
	cr_assert(ok, "both survivors took rank 1's whole shard back, exact, and went on");
	rm_base();
}

/* An export of a 3-rank train_sharded run of `steps` steps, made with the
 * tool into a directory of its own (*tmp, to remove): *out. */
static void make_export(char *tmp, size_t tcap, char *out, size_t ocap, int steps)
{
	const char *b = getenv("FTCC_BUILD_DIR"), *t = getenv("TMPDIR");
	char cmd[2048], args[1200];
	int st;

	b = b != NULL && *b ? b : "build";
	snprintf(cmd, sizeof(cmd), "%s/examples/train_sharded", b);
	if (access(cmd, X_OK) != 0)
		cr_skip_test("%s is not built", cmd);
	snprintf(tmp, tcap, "%s/ftcc-exp-XXXXXX", t != NULL && *t ? t : "/tmp");
	cr_assert_not_null(mkdtemp(tmp));
	snprintf(cmd, sizeof(cmd),
		 "FTCC_JOB_ID=src-%d FTCC_CKPT_DIR='%s/ck' FTCC_LOG_LEVEL=1 timeout 60 "
		 "%s/ftcc-run -n 3 %s/examples/train_sharded %d 20000 1 >'%s/out.txt' 2>&1",
		 (int)getpid(), tmp, b, b, steps, tmp);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the source job: status %d", st);
	snprintf(out, ocap, "%s/exp", tmp);
	snprintf(args, sizeof(args), "export '%s/ck/src-%d' '%s'", tmp, (int)getpid(), out);
	cr_assert_eq(tool(args), 0, "ftcc-ckpt %s", args);
	snprintf(args, sizeof(args), "'%s'", out);
	cr_assert_eq(tool(args), 0, "the export verifies");
}

/*
 * A new run from an export (3 ranks, rejoin): every first incarnation
 * starts its shard from it and goes on from its step; a rank killed in
 * ft_ckpt_enable's agreement or in the first step (before the run's own
 * first round) takes the export too; one killed from outside later takes
 * the run's own checkpoint. Every shard exact at the end.
 */
Test(ckpt_rejoin, new_run_from_an_export, .timeout = 200)
{
	char tmp[300], exp[400], env[600], cmd[700];

	make_export(tmp, sizeof(tmp), exp, sizeof(exp), 20);
	snprintf(env, sizeof(env), "FTCC_CKPT_FROM='%s'", exp);
	run_sharded(env, "--restart", "rank=1,op=1,phase=between", 40, -1, "",
		    "from an export: kill in ft_ckpt_enable", 3);
	run_sharded(env, "--restart", "rank=2,op=2,action=kill", 40, -1, "",
		    "from an export: kill in the first step", 4);
	run_sharded(env, "--restart", "", 500, 1, "", "from an export: outside kill", 4);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	cr_assert_eq(system(cmd), 0);
}

/* The same over libfabric: an injected kill and one from outside. */
static void fabric_or_skip(const char *prov)
{
#ifndef FTCC_HAVE_FABRIC
	(void)prov;
	cr_skip_test("SKIPPED: built without libfabric");
#else
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "fi_info -p '%s' >/dev/null 2>&1", prov);
	if (system(cmd) != 0)
		cr_skip_test("SKIPPED: libfabric provider %s is not available", prov);
#endif
}

Test(ckpt_rejoin, fabric_tcp_kills, .timeout = 200)
{
	fabric_or_skip("tcp;ofi_rxm");
	run_sharded("FTCC_TRANSPORT=fabric FI_PROVIDER='tcp;ofi_rxm'", "--restart",
		    "rank=1,op=30,action=kill", 60, -1, "", "fabric tcp: kill at op 30", 1);
	run_sharded("FTCC_TRANSPORT=fabric FI_PROVIDER='tcp;ofi_rxm'", "--restart", "", 500, 0, "",
		    "fabric tcp: outside kill", 1);
}

/* the data over libfabric, the rounds to the holder over its control link */
Test(ckpt_peer, fabric_tcp_kill, .timeout = 120)
{
	fabric_or_skip("tcp;ofi_rxm");
	run_sharded("FTCC_CKPT_WHERE=peer FTCC_TRANSPORT=fabric FI_PROVIDER='tcp;ofi_rxm'", "--restart",
		    "rank=1,op=30,action=kill", 60, -1, "", "peer, fabric tcp: kill at op 30", 1);
}

Test(ckpt_rejoin, fabric_shm_kill, .timeout = 120)
{
	fabric_or_skip("shm");
	run_sharded("FTCC_TRANSPORT=fabric FI_PROVIDER=shm", "--restart", "", 500, 1, "",
		    "fabric shm: outside kill", 1);
}

/* A HEAD of a few hundred bytes naming more blocks than a checkpoint may have
 * (the fuzzer's find: 2^32 made the reader calloc 128 GiB) is corrupt, not a
 * table to allocate. */
Test(ckpt, head_beyond_max_blocks, .timeout = 10)
{
	struct {
		struct ft__ckpt_jrec h;
		struct ft__ckpt_jhead hd;
		struct ft__ckpt_jregion r[2];
	} j;
	struct ft__ckpt_image img;
	uint32_t crc;

	memset(&j, 0, sizeof(j));
	j.h = (struct ft__ckpt_jrec){.magic = FT__CKPT_JMAGIC, .version = FT__CKPT_VERSION,
				  .type = FT__CKPT_JHEAD, .len = sizeof(j), .count = 2};
	j.hd = (struct ft__ckpt_jhead){.rank = 0, .world_size = 1, .block_bytes = 1};
	j.r[0] = (struct ft__ckpt_jregion){.index = 0, .dtype = FT_UINT8, .bytes = FT__CKPT_MAX_BLOCKS,
					.nblocks = FT__CKPT_MAX_BLOCKS};
	j.r[1] = (struct ft__ckpt_jregion){.index = 1, .dtype = FT_UINT8, .bytes = 1, .nblocks = 1};
	crc = ft__crc32c(0, &j.h, sizeof(j.h));
	j.h.crc = ft__crc32c(crc, &j.hd, sizeof(j) - sizeof(j.h));
	cr_assert_eq(ft__ckpt_parse(&j, sizeof(j), &img), -FT_ECORRUPT);
	cr_assert_null(img.tab);
	ft__ckpt_image_free(&img);
}
