/* gen_corpus.c: writes the seed corpus of fuzz_log: real journals from the writer, whole, torn and flipped. */
/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32c.h"
#include "ftcc.h"
#include "jnl.h"

static int log_one(const char *dir, uint64_t seq, uint64_t count, int nreg, int nframes, int end)
{
	struct ft__jnl_params p = {.dir = dir, .job_id = "fuzz-seed", .rank = 0, .world_size = 2,
				   .engine = FT__JNL_PWRITE};
	struct ft__logop op = {.dtype = FT_UINT8, .op = FT_SUM, .root = -1, .count = count};
	struct ft__logreg regs[64];
	struct ft__jnl *l;
	unsigned char *in;
	int rc;

	if (nreg > 64 || (rc = ft__jnl_open(&p, &l)) < 0)
		return -1;
	rc = ft__jnl_begin(l, seq, 1, &op, (void **)&in);
	for (uint64_t i = 0; rc == 0 && i < count; i++)
		in[i] = (unsigned char)(i * 13);
	for (int i = 0; rc == 0 && i < nreg; i++) {
		uint64_t per = count / (uint64_t)nreg, off = (uint64_t)i * per;
		uint64_t len = i == nreg - 1 ? count - off : per;
		regs[i] = (struct ft__logreg){.off = off, .len = len,
					      .crc = ft__jnl_sum(in + off, (size_t)len)};
	}
	for (int i = 0; rc == 0 && i < nframes / 2; i++)
		rc = ft__jnl_frame(l, FT__JNL_SEND, 1, (uint32_t)i, (uint32_t)i, 1, (uint64_t)i * 8, 8, 0);
	if (rc == 0 && (nreg > 0 || count == 0))
		rc = ft__jnl_input(l, regs, (size_t)nreg);
	for (int i = 0; rc == 0 && i < nframes - nframes / 2; i++)
		rc = ft__jnl_frame(l, FT__JNL_RECV, 1, (uint32_t)i, (uint32_t)i, 1, (uint64_t)i * 8, 8, 7);
	if (rc == 0 && end)
		rc = ft__jnl_end(l);
	ft__jnl_close(l);
	return rc;
}

static int copy_out(const char *dir, int slot, const char *out, long cut, long flip)
{
	char path[PATH_MAX];
	unsigned char buf[65536];
	ssize_t n;
	FILE *f;
	int fd;

	if (ft__jnl_path(path, sizeof(path), dir, 0, slot, "log") < 0)
		return -1;
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n < 0)
		return -1;
	if (cut >= 0 && cut < n)
		n = cut;
	if (flip >= 0 && flip < n)
		buf[flip] ^= 0x04;
	f = fopen(out, "wb");
	if (f == NULL || fwrite(buf, 1, (size_t)n, f) != (size_t)n) {
		if (f)
			fclose(f);
		return -1;
	}
	return fclose(f);
}

int main(int argc, char **argv)
{
	char dir[] = "/tmp/ftcc-corpus-XXXXXX", out[PATH_MAX];
	static const struct seed {
		const char *name;
		uint64_t seq, count;
		int nreg, nframes, end;
		long cut, flip;
	} seeds[] = {
		{"whole-op", 0, 256, 4, 6, 1, -1, -1},
		{"whole-op-odd-slot", 1, 100, 3, 2, 1, -1, -1},
		{"no-input", 2, 64, 0, 4, 0, -1, -1},
		{"many-regions", 3, 640, 40, 0, 1, -1, -1},
		{"torn-mid-record", 4, 256, 4, 6, 1, 300, -1},
		{"torn-at-boundary", 5, 256, 4, 6, 1, 168, -1},
		{"bit-flip", 6, 256, 4, 6, 1, -1, 200},
		{"empty-input", 7, 0, 0, 2, 1, -1, -1},
	};

	if (argc != 2) {
		fprintf(stderr, "usage: gen_corpus OUTDIR\n");
		return 2;
	}
	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
		const struct seed *s = &seeds[i];
		snprintf(out, sizeof(out), "%s/%s", argv[1], s->name);
		if (log_one(dir, s->seq, s->count, s->nreg, s->nframes, s->end) < 0 ||
		    copy_out(dir, (int)(s->seq & 1), out, s->cut, s->flip) < 0) {
			fprintf(stderr, "gen_corpus: %s failed\n", s->name);
			return 1;
		}
	}
	for (int slot = 0; slot < 2; slot++)
		for (int k = 0; k < 2; k++) {
			char path[PATH_MAX];
			if (ft__jnl_path(path, sizeof(path), dir, 0, slot, k ? "in" : "log") == 0)
				unlink(path);
		}
	rmdir(dir);
	return 0;
}
