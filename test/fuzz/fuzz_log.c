/* fuzz_log.c: feeds arbitrary bytes to the log reader: an afl++ harness (persistent, shared-memory input) and, built with a plain compiler, a replay driver for files. */
/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32c.h"
#include "ftcc.h"
#include "jnl.h"

#define INPUT_MAX (1u << 20)

static uint64_t touched;

/* Reads every byte the reader hands out, so a sanitizer sees an overrun. */
static void each(void *arg, const struct ft__logrec *h, const void *body)
{
	const unsigned char *p = body;
	uint64_t sum = h->len;

	(void)arg;
	for (size_t i = 0; i < h->len - sizeof(*h); i++)
		sum += p[i];
	touched += sum;
}

static void one(const unsigned char *buf, size_t len)
{
	struct ft__jnl_scan s;
	int rc = ft__jnl_parse(buf, len, &s, each, NULL);

	/* the scan must agree with itself; a disagreement is a crash to the fuzzer */
	if ((rc != 0 && rc != -FT_ECORRUPT) || s.valid_bytes > len || (rc == 0) != (s.tail_why == NULL) ||
	    (rc == 0 && s.valid_bytes != len) || s.file_bytes != len)
		abort();
}

/*
 * The same bytes with every record's CRC made right, as far as the lengths
 * chain: random bytes almost never pass the CRC, and this lets the fuzzer
 * reach the checks behind it (record shapes, INPUT regions).
 */
static void fixed(const unsigned char *buf, size_t len)
{
	static unsigned char *copy;
	size_t off = 0;

	if (copy == NULL && (copy = malloc(INPUT_MAX)) == NULL)
		abort();
	if (len > INPUT_MAX)
		len = INPUT_MAX;
	memcpy(copy, buf, len);
	while (len - off >= sizeof(struct ft__logrec)) {
		struct ft__logrec h;
		uint32_t crc;

		memcpy(&h, copy + off, sizeof(h));
		if (h.len < sizeof(h) || h.len % 8 != 0 || h.len > len - off)
			break;
		h.crc = 0;
		crc = ft__crc32c(0, &h, sizeof(h));
		h.crc = ft__crc32c(crc, copy + off + sizeof(h), h.len - sizeof(h));
		memcpy(copy + off, &h, sizeof(h));
		off += h.len;
	}
	one(copy, len);
}

#ifdef __AFL_FUZZ_TESTCASE_LEN
__AFL_FUZZ_INIT();

int main(void)
{
	unsigned char *buf, warm[1] = {0};

	/* one-time set-up (CRC tables, the copy buffer) before the fork server, so every run takes the same paths */
	fixed(warm, 0);
	__AFL_INIT();
	buf = __AFL_FUZZ_TESTCASE_BUF;
	while (__AFL_LOOP(100000)) {
		size_t len = (size_t)__AFL_FUZZ_TESTCASE_LEN;
		one(buf, len);
		fixed(buf, len);
	}
	return 0;
}
#else
static int replay(FILE *f, const char *name)
{
	unsigned char *buf = malloc(INPUT_MAX);
	size_t len;

	if (buf == NULL)
		return -1;
	len = fread(buf, 1, INPUT_MAX, f);
	if (ferror(f)) {
		fprintf(stderr, "fuzz_log: %s: read error\n", name);
		free(buf);
		return -1;
	}
	/* exactly len bytes: a sanitizer catches a read past them */
	unsigned char *exact = malloc(len ? len : 1);
	if (exact == NULL) {
		free(buf);
		return -1;
	}
	memcpy(exact, buf, len);
	free(buf);
	one(exact, len);
	fixed(exact, len);
	/* and every prefix, as a torn write would leave it */
	for (size_t cut = 0; cut < len; cut += 1 + cut / 64)
		one(exact, cut);
	free(exact);
	return 0;
}

int main(int argc, char **argv)
{
	int bad = 0;

	if (argc < 2)
		return replay(stdin, "stdin") < 0;
	for (int i = 1; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");
		if (f == NULL) {
			fprintf(stderr, "fuzz_log: %s: %s\n", argv[i], strerror(errno));
			bad = 1;
			continue;
		}
		if (replay(f, argv[i]) < 0)
			bad = 1;
		fclose(f);
	}
	if (!bad)
		printf("fuzz_log: %d inputs replayed (and their prefixes), no fault\n", argc - 1);
	return bad;
}
#endif
