/* fuzz_main.h: the main() every harness but fuzz_log shares: afl++ persistent mode, or, built with a plain compiler, a replay driver for files. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_FUZZ_MAIN_H
#define FTCC_FUZZ_MAIN_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/*
 * A harness defines FUZZ_NAME, fuzz_init() (one-time set-up, run before the
 * fork server so that every run takes the same paths) and fuzz_one() (one
 * input; it aborts when the code under test breaks a promise, which the
 * fuzzer counts as a crash), then includes this file.
 */
#define FUZZ_INPUT_MAX (1u << 20)

static void fuzz_init(void);
static void fuzz_one(const unsigned char *buf, size_t len);

#ifdef __AFL_FUZZ_TESTCASE_LEN
__AFL_FUZZ_INIT();

int main(void)
{
	unsigned char *buf;

	ft__log_level = -1; /* malformed input is the point: its warnings only slow the fuzzer */
	fuzz_init();
	__AFL_INIT();
	buf = __AFL_FUZZ_TESTCASE_BUF;
	while (__AFL_LOOP(100000))
		fuzz_one(buf, (size_t)__AFL_FUZZ_TESTCASE_LEN);
	return 0;
}
#else
static int fuzz_replay(FILE *f, const char *name)
{
	unsigned char *buf = malloc(FUZZ_INPUT_MAX), *exact;
	size_t len;

	if (buf == NULL)
		return -1;
	len = fread(buf, 1, FUZZ_INPUT_MAX, f);
	if (ferror(f)) {
		fprintf(stderr, "%s: %s: read error\n", FUZZ_NAME, name);
		free(buf);
		return -1;
	}
	/* exactly len bytes: a sanitizer catches a read past them */
	exact = malloc(len ? len : 1);
	if (exact == NULL) {
		free(buf);
		return -1;
	}
	memcpy(exact, buf, len);
	free(buf);
	fuzz_one(exact, len);
	free(exact);
	return 0;
}

int main(int argc, char **argv)
{
	int bad = 0;

	ft__log_level = getenv("FUZZ_VERBOSE") != NULL ? ft__log_level : -1;
	fuzz_init();
	if (argc < 2)
		return fuzz_replay(stdin, "stdin") < 0;
	for (int i = 1; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");
		if (f == NULL) {
			fprintf(stderr, "%s: %s: %s\n", FUZZ_NAME, argv[i], strerror(errno));
			bad = 1;
			continue;
		}
		if (fuzz_replay(f, argv[i]) < 0)
			bad = 1;
		fclose(f);
	}
	if (!bad)
		printf("%s: %d inputs replayed, no fault\n", FUZZ_NAME, argc - 1);
	return bad;
}
#endif

#endif
