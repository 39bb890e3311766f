/* bigmem.h: large buffers (checkpoint copies in memory) in huge pages where the kernel gives them, faulted in when made. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_BIGMEM_H
#define FTCC_BIGMEM_H

#include <stddef.h>

/*
 * len zeroed bytes, NULL when there is no memory. Anonymous pages asked to
 * be transparent huge pages (MADV_HUGEPAGE: the kernel gives them under
 * its "madvise" and "always" settings) and faulted in at once
 * (MADV_POPULATE_WRITE, Linux 5.14): a 64 MiB fetch otherwise takes 16384
 * page faults as its bytes arrive, which cost more than the copy itself
 * (about 7 us each on a virtual machine with shadow page tables: 110 ms for
 * 64 MiB, against 3 ms with huge pages). Either advice refused is no error.
 * Below 1 MiB: calloc's memory (a huge page each is not worth it).
 */
void *ft__big_alloc(size_t len);
/* Frees what ft__big_alloc(len) gave (the same len); NULL is fine. */
void ft__big_free(void *p, size_t len);

#endif
