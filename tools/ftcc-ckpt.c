/* ftcc-ckpt.c: lists a checkpoint directory's rounds and blocks, verifies every committed block copy, exports a checkpoint a new run can start from. */
/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "ftcc.h"

enum { OK = 0, BAD = 1, FAILED = 2 };

static void usage(FILE *f)
{
	fprintf(f, "usage: ftcc-ckpt [-v] DIR [RANK...]\n"
		   "       ftcc-ckpt export DIR OUT [RANK...]\n"
		   "DIR is a job's checkpoint directory (<dir>/<job id>, holding ck-r<R>.jnl and\n"
		   "ck-r<R>-g<I>-<a|b>.dat). For each rank (default: every journal in DIR) prints\n"
		   "its geometry and rounds, and checks the copy of every block that the journal\n"
		   "says is committed; a bad copy is named (region, block, slot a/b, round) with\n"
		   "why. -v: every copy. Exit: 0 all good, 1 a committed copy is torn or corrupt\n"
		   "(or the journal's tail does not check), 2 usage or I/O error.\n"
		   "export: writes each rank's newest valid copy of every block to OUT (made if\n"
		   "missing), bound to no run: a new run starts its shards from it with\n"
		   "FTCC_CKPT_FROM=OUT (or ft_ckpt_config.from). Exit: 0 every rank exported, 1 a\n"
		   "block of a rank has no valid copy (that rank is not exported), 2 usage or I/O.\n"
		   "--version: print the version.\n");
}

static int check(const char *dir, int rank, bool verbose)
{
	int rc = ft__ckpt_verify(dir, rank, stdout, verbose);

	if (rc == 0) {
		printf("rank %d: ok\n", rank);
		return OK;
	}
	printf("rank %d: %s\n", rank, rc == -FT_ECORRUPT ? "CORRUPT" : ft_strerror(rc));
	return rc == -FT_ECORRUPT ? BAD : FAILED;
}

static int export(const char *dir, const char *out, int rank)
{
	uint64_t blocks, bytes, step;
	char why[512] = "";
	int rc = ft__ckpt_export(dir, rank, out, &blocks, &bytes, &step, why, sizeof(why));

	if (rc == 0) {
		printf("rank %d: exported %llu blocks, %llu bytes, newest from step %llu\n", rank,
		       (unsigned long long)blocks, (unsigned long long)bytes,
		       (unsigned long long)step);
		return OK;
	}
	printf("rank %d: not exported: %s (%s)\n", rank, why[0] ? why : "?", ft_strerror(rc));
	return rc == -FT_ECORRUPT ? BAD : FAILED;
}

/* Runs the action on the ranks named in argv[i..], else on every journal in dir. */
static int each_rank(int argc, char **argv, int i, const char *dir, const char *out, bool verbose)
{
	int worst = OK, found = 0;

	if (i < argc) {
		for (; i < argc; i++) {
			char *end;
			long r = strtol(argv[i], &end, 10);
			int rc;
			if (*argv[i] == '\0' || *end != '\0' || r < 0 || r > (1 << 20)) {
				usage(stderr);
				return FAILED;
			}
			rc = out != NULL ? export(dir, out, (int)r) : check(dir, (int)r, verbose);
			worst = rc > worst ? rc : worst;
		}
		return worst;
	}
	DIR *d = opendir(dir);
	if (d == NULL) {
		fprintf(stderr, "ftcc-ckpt: %s: cannot open\n", dir);
		return FAILED;
	}
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		int r, n = 0;
		if (sscanf(e->d_name, "ck-r%d.jnl%n", &r, &n) != 1 || e->d_name[n] != '\0' || r < 0)
			continue;
		int rc = out != NULL ? export(dir, out, r) : check(dir, r, verbose);
		worst = rc > worst ? rc : worst;
		found++;
	}
	closedir(d);
	if (found == 0) {
		fprintf(stderr, "ftcc-ckpt: %s: no checkpoint journal (ck-r<R>.jnl)\n", dir);
		return FAILED;
	}
	return worst;
}

int main(int argc, char **argv)
{
	bool verbose = false;
	int i = 1;

	if (i < argc && strcmp(argv[i], "export") == 0) {
		if (argc < 4) {
			usage(stderr);
			return FAILED;
		}
		return each_rank(argc, argv, 4, argv[2], argv[3], false);
	}
	if (i < argc && strcmp(argv[i], "-v") == 0) {
		verbose = true;
		i++;
	}
	if (i < argc && (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)) {
		usage(stdout);
		return OK;
	}
	if (i < argc && strcmp(argv[i], "--version") == 0) {
		printf("ftcc-ckpt %s\n", ft_version());
		return fflush(stdout) == 0 ? OK : FAILED;
	}
	/* an option this tool does not know is no directory (./-x is one) */
	if (i >= argc || argv[i][0] == '-') {
		usage(stderr);
		return FAILED;
	}
	return each_rank(argc, argv, i + 1, argv[i], NULL, verbose);
}
