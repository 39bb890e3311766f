/* bigmem.c: large buffers in huge pages where the kernel gives them (bigmem.h). */
/* SPDX-License-Identifier: MIT */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "bigmem.h"

#define HUGE_BYTES ((size_t)2 << 20)
#define SMALL_BYTES ((size_t)1 << 20)  /* below: calloc */

static size_t rounded(size_t len)
{
	return (len + HUGE_BYTES - 1) & ~(HUGE_BYTES - 1);
}

void *ft__big_alloc(size_t len)
{
	size_t n = rounded(len ? len : 1);
	char *raw, *p;

	if (len < SMALL_BYTES)
		return calloc(1, len ? len : 1); /* (not worth a huge page each) */
	if (n < len)
		return NULL;
	/* a huge page needs an aligned start: map one more, trim both ends */
	raw = mmap(NULL, n + HUGE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED)
		return NULL;
	p = (char *)(((uintptr_t)raw + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1));
	if (p > raw)
		(void)munmap(raw, (size_t)(p - raw));
	if (raw + n + HUGE_BYTES > p + n)
		(void)munmap(p + n, (size_t)(raw + n + HUGE_BYTES - (p + n)));
#ifdef MADV_HUGEPAGE
	(void)madvise(p, n, MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
	(void)madvise(p, n, MADV_POPULATE_WRITE);
#endif
	return p;
}

void ft__big_free(void *p, size_t len)
{
	if (p != NULL && len < SMALL_BYTES)
		free(p);
	else if (p != NULL)
		(void)munmap(p, rounded(len));
}
