/* mr.c: the libfabric registration cache, for providers that want FI_MR_LOCAL. */
/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fabric.h"

#define FAB_MR_CACHE_MAX 32
#define FAB_MR_WINDOW ((uintptr_t)256 << 20) /* most of a mapping registered at once */

int ft__fab_reg(struct ft__transport *tp, void *p, size_t len, struct fid_mr **mr, void **desc)
{
	int rc;

	*mr = NULL;
	*desc = NULL;
	if (!tp->mr_local)
		return 0;
	rc = fi_mr_reg(tp->domain, p, len, FI_SEND | FI_RECV, 0, ++tp->mr_key, 0, mr, NULL);
	if (rc != 0) {
		ft__error("fabric: fi_mr_reg of %zu bytes: %s", len, fi_strerror(-rc));
		*mr = NULL;
		return -FT_EIO;
	}
	*desc = fi_mr_desc(*mr);
	return 0;
}

void ft__fab_unreg(struct fid_mr **mr)
{
	if (*mr != NULL)
		fi_close(&(*mr)->fid);
	*mr = NULL;
}

/* The mappings holding lo and hi-1 (0 when not found), from /proc/self/maps. */
static void mappings(uintptr_t lo, uintptr_t last, uintptr_t *lo_start, uintptr_t *last_end)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];

	*lo_start = *last_end = 0;
	if (f == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL) {
		unsigned long a, b;
		if (sscanf(line, "%lx-%lx", &a, &b) != 2)
			continue;
		if (lo >= a && lo < b)
			*lo_start = a;
		if (last >= a && last < b)
			*last_end = b;
	}
	fclose(f);
}

static void mr_flush(struct ft__transport *tp)
{
	for (struct fab_mr **pp = &tp->mrs; *pp != NULL;) {
		struct fab_mr *m = *pp;
		if (m->refs > 0) {
			pp = &m->next;
			continue;
		}
		*pp = m->next;
		ft__fab_unreg(&m->mr);
		free(m);
		tp->nmrs--;
	}
}

/*
 * Registrations of user buffers are cached while operations are in flight,
 * and each covers a window of the mapping around the buffer, so a collective
 * registers each buffer once, never each segment. The cache empties whenever
 * nothing is in flight: between collectives the user may free a buffer and
 * get other memory at the same address, which a stale registration would
 * not see.
 */
int ft__fab_mr_get(struct ft__transport *tp, const void *buf, size_t len, struct fab_mr **out)
{
	uintptr_t lo = (uintptr_t)buf, hi = lo + len, page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t wlo, whi, mlo, mhi;
	struct fab_mr *m;

	*out = NULL;
	if (!tp->mr_local || len == 0)
		return 0;
	if (tp->user_refs == 0)
		mr_flush(tp);
	for (m = tp->mrs; m != NULL; m = m->next)
		if (m->lo <= lo && hi <= m->hi)
			goto found;
	if (tp->nmrs >= FAB_MR_CACHE_MAX)
		mr_flush(tp);
	wlo = lo & ~(page - 1);
	whi = (hi + page - 1) & ~(page - 1);
	mappings(lo, hi - 1, &mlo, &mhi);
	if (mlo != 0 && mhi != 0) {
		/* A large malloc'd buffer is a mapping of its own: take all of it. */
		uintptr_t half = FAB_MR_WINDOW / 2, mid = lo + (hi - lo) / 2;
		wlo = mhi - mlo <= FAB_MR_WINDOW || mid - mlo <= half ? mlo : mid - half;
		whi = mhi - mlo <= FAB_MR_WINDOW || mhi - mid <= half ? mhi : mid + half;
		if (wlo > lo)
			wlo = lo & ~(page - 1);
		if (whi < hi)
			whi = (hi + page - 1) & ~(page - 1);
	}
	m = calloc(1, sizeof(*m));
	if (m == NULL)
		return -FT_ENOMEM;
	if (ft__fab_reg(tp, (void *)wlo, whi - wlo, &m->mr, &m->desc) != 0) {
		free(m);
		return -FT_EIO;
	}
	m->lo = wlo;
	m->hi = whi;
	m->next = tp->mrs;
	tp->mrs = m;
	tp->nmrs++;
found:
	m->refs++;
	tp->user_refs++;
	*out = m;
	return 0;
}

void ft__fab_mr_put(struct ft__transport *tp, struct fab_mr *m)
{
	if (m != NULL) {
		m->refs--;
		tp->user_refs--;
	}
}
