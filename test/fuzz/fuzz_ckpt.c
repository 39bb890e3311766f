/* fuzz_ckpt.c: feeds arbitrary bytes to the checkpoint journal reader (ft__ckpt_parse). */
/* SPDX-License-Identifier: MIT */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "crc32c.h"

#define FUZZ_NAME "fuzz_ckpt"
#include "fuzz_main.h"

/* A table the reader allocates above this from one small head is the bug
 * the bound in ckpt_read.c prevents: the fuzzer takes it for a crash. */
#define TAB_BYTES_MAX ((size_t)1 << 30)

static void check(const unsigned char *buf, size_t len)
{
	struct ft__ckpt_image img;
	int rc = ft__ckpt_parse(buf, len, &img);
	uint64_t sum = 0;

	if (rc != 0 && rc != -FT_ECORRUPT && rc != -FT_ENOMEM)
		abort();
	if (img.regs == NULL) {
		ft__ckpt_image_free(&img);
		return;
	}
	/* the reader's promises: the geometry adds up, the valid prefix is in the file */
	if (img.valid_bytes > len || img.file_bytes != len || img.first[img.nregs] != img.nblocks ||
	    img.nblocks * sizeof(*img.tab) > TAB_BYTES_MAX || (rc == 0) != (img.tail_why == NULL))
		abort();
	for (size_t i = 0; i < img.nregs; i++)
		if (img.first[i] + img.regs[i].nblocks != img.first[i + 1])
			abort();
	if (img.tab != NULL && img.nblocks <= 4096)
		for (size_t b = 0; b < img.nblocks; b++)
			sum += img.tab[b].round[0] + img.tab[b].round[1] +
			       (img.resid != NULL ? (uint64_t)img.resid[b] : 0);
	if (sum == 1)
		fputc('.', stderr); /* keeps the loop */
	ft__ckpt_image_free(&img);
}

static uint32_t rec_crc(const unsigned char *p, size_t len)
{
	struct ft__ckpt_jrec h;
	uint32_t crc;

	memcpy(&h, p, sizeof(h));
	h.crc = 0;
	crc = ft__crc32c(0, &h, sizeof(h));
	return ft__crc32c(crc, p + sizeof(h), len - sizeof(h));
}

/*
 * The same bytes with every record's CRC made right, as far as the lengths
 * chain: random bytes almost never pass the CRC, and this lets the fuzzer
 * reach the checks behind it.
 */
static void fixed(const unsigned char *buf, size_t len)
{
	static unsigned char *copy;
	size_t off = 0;

	if (copy == NULL && (copy = malloc(FUZZ_INPUT_MAX)) == NULL)
		abort();
	if (len > FUZZ_INPUT_MAX)
		len = FUZZ_INPUT_MAX;
	memcpy(copy, buf, len);
	while (len - off >= sizeof(struct ft__ckpt_jrec)) {
		struct ft__ckpt_jrec h;

		memcpy(&h, copy + off, sizeof(h));
		if (h.len < sizeof(h) || h.len > len - off)
			break;
		h.crc = rec_crc(copy + off, h.len);
		memcpy(copy + off, &h, sizeof(h));
		off += h.len;
	}
	check(copy, len);
}

static void fuzz_init(void)
{
	unsigned char warm[1] = {0};

	fixed(warm, 0);
}

static void fuzz_one(const unsigned char *buf, size_t len)
{
	check(buf, len);
	fixed(buf, len);
}
