/* boot_pmix.c: the address book through the launcher's PMIx server (Open MPI's mpirun): put, fence, get. */
/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "bootstrap.h"
#include "internal.h"

#ifdef FTCC_HAVE_PMIX
#include <pmix.h>

/*
 * Every rank puts its entry under one key, commits, and joins a fence of
 * the whole namespace that collects the data; after it every entry is in
 * the local server's cache and each get is answered there. PMIX_TIMEOUT
 * bounds the fence and the gets (whole seconds, rounded up: 0 would mean
 * forever); the server enforces it (measured: a fence a rank never joins
 * returns PMIX_ERR_TIMEOUT on time under Open MPI 4.1's orted).
 *
 * Fences are matched by their order in the namespace, so a process's n-th
 * book meets its peers' n-th: the key carries n, so a second communicator
 * of the job never reads the first one's entries.
 *
 * A process's PMIx client, once open, stays open until the process exits
 * (keep_open): a client closed and opened again lost a fence now and then
 * (PMIX_ERR_PARTIAL_SUCCESS: the server still held the closed connection
 * when the new one's fence began, about 1 run in 7 of two books in a row),
 * and Open MPI 4.1's MPI_Init fails in a process whose client was opened
 * and fully closed before ("getting local rank failed"). PMIx counts the
 * opens with the application's own (MPI_Init's), so every open of ours
 * but the kept one is closed at once, and the kept one at exit
 * (release_kept), in the process that opened it only: a forked child that
 * exits must not close its parent's connection.
 */
static unsigned books_made;
static pid_t kept_by; /* the process whose open is kept, 0 none */

/* An open that succeeded: kept if it is this process's first, else closed. */
static void keep_open(void)
{
	pid_t me = getpid();

	if (__atomic_exchange_n(&kept_by, me, __ATOMIC_RELAXED) == me)
		PMIx_Finalize(NULL, 0);
}

__attribute__((destructor)) static void release_kept(void)
{
	if (__atomic_load_n(&kept_by, __ATOMIC_RELAXED) == getpid())
		PMIx_Finalize(NULL, 0);
}

static int seconds_left(int64_t deadline_ms)
{
	int s = (ft__ms_left(deadline_ms) + 999) / 1000;

	return s > 0 ? s : 1;
}

static int pmix_error(const char *what, pmix_status_t st)
{
	ft__error("pmix bootstrap: %s: %s", what, PMIx_Error_string(st));
	return st == PMIX_ERR_TIMEOUT ? -FT_ETIMEDOUT : -FT_EIO;
}

/* The namespace must be this job: its size and our rank as ftcc knows them. */
static int check_job(const pmix_proc_t *me, const struct ft__book_params *p)
{
	pmix_proc_t job;
	pmix_value_t *v = NULL;
	pmix_status_t st;
	unsigned long size = 0;

	PMIX_PROC_LOAD(&job, me->nspace, PMIX_RANK_WILDCARD);
	st = PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &v);
	if (st != PMIX_SUCCESS)
		return pmix_error("the job's size", st);
	if (v->type == PMIX_UINT32)
		size = v->data.uint32;
	PMIX_VALUE_RELEASE(v);
	if (size != (unsigned long)p->world_size || me->rank != (pmix_rank_t)p->rank) {
		ft__error("pmix bootstrap: PMIx says rank %u of %lu, ftcc was given rank %d of %d "
			  "(FTCC_RANK/FTCC_WORLD_SIZE must agree with the launcher)", me->rank, size,
			  p->rank, p->world_size);
		return -FT_ECONFIG;
	}
	return 0;
}

static int put_mine(const char *key, const char *mine)
{
	pmix_value_t v;
	pmix_status_t st;

	PMIX_VALUE_LOAD(&v, mine, PMIX_STRING);
	st = PMIx_Put(PMIX_GLOBAL, key, &v);
	PMIX_VALUE_DESTRUCT(&v);
	if (st != PMIX_SUCCESS)
		return pmix_error("put", st);
	st = PMIx_Commit();
	return st == PMIX_SUCCESS ? 0 : pmix_error("commit", st);
}

static int fence(const pmix_proc_t *me, int64_t deadline_ms)
{
	pmix_proc_t all;
	pmix_info_t info[2];
	bool collect = true;
	int secs = seconds_left(deadline_ms);
	pmix_status_t st;

	PMIX_PROC_LOAD(&all, me->nspace, PMIX_RANK_WILDCARD);
	PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
	PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &secs, PMIX_INT);
	st = PMIx_Fence(&all, 1, info, 2);
	PMIX_INFO_DESTRUCT(&info[0]);
	PMIX_INFO_DESTRUCT(&info[1]);
	return st == PMIX_SUCCESS ? 0 : pmix_error("fence of every rank", st);
}

/* Rank r's entry into dst, checked. */
static int get_entry(const pmix_proc_t *me, int r, const char *key, int64_t deadline_ms,
		     char *dst)
{
	pmix_proc_t who;
	pmix_info_t info;
	pmix_value_t *v = NULL;
	int secs = seconds_left(deadline_ms), rc = 0;
	const char *why = "not a string";
	pmix_status_t st;
	char what[64];

	PMIX_PROC_LOAD(&who, me->nspace, (pmix_rank_t)r);
	PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &secs, PMIX_INT);
	st = PMIx_Get(&who, key, &info, 1, &v);
	PMIX_INFO_DESTRUCT(&info);
	if (st != PMIX_SUCCESS) {
		snprintf(what, sizeof(what), "rank %d's address", r);
		return pmix_error(what, st);
	}
	if (v->type != PMIX_STRING || v->data.string == NULL ||
	    ft__boot_entry_check(v->data.string, strlen(v->data.string), &why) != 0) {
		ft__error("pmix bootstrap: rank %d's address is malformed: %s", r, why);
		rc = -FT_EIO;
	} else {
		snprintf(dst, FT__BOOK_ENTRY_MAX, "%s", v->data.string);
	}
	PMIX_VALUE_RELEASE(v);
	return rc;
}

static int exchange(const pmix_proc_t *me, const struct ft__book_params *p, const char *mine,
		    char (*book)[FT__BOOK_ENTRY_MAX])
{
	int64_t deadline = ft__now_ms() + p->timeout_ms;
	char key[PMIX_MAX_KEYLEN + 1];
	int rc, n;

	n = snprintf(key, sizeof(key), "ftcc.%s.%u.mb", p->job_id,
		     __atomic_fetch_add(&books_made, 1, __ATOMIC_RELAXED));
	if (n < 0 || (size_t)n >= sizeof(key)) {
		ft__error("pmix bootstrap: job id '%s' too long for a PMIx key", p->job_id);
		return -FT_ECONFIG;
	}
	if ((rc = check_job(me, p)) != 0 || (rc = put_mine(key, mine)) != 0 ||
	    (rc = fence(me, deadline)) != 0)
		return rc;
	for (int r = 0; r < p->world_size; r++)
		if ((rc = get_entry(me, r, key, deadline, book[r])) != 0)
			return rc;
	if (strcmp(book[p->rank], mine) != 0) {
		ft__error("pmix bootstrap: PMIx returned '%s' for this rank, which put '%s'",
			  book[p->rank], mine);
		return -FT_EIO;
	}
	return 0;
}

int ft__boot_pmix_book(const struct ft__book_params *p, const char *mine,
		       char (*book)[FT__BOOK_ENTRY_MAX])
{
	pmix_proc_t me;
	pmix_status_t st;
	int rc;

	st = PMIx_Init(&me, NULL, 0);
	if (st != PMIX_SUCCESS) {
		ft__error("pmix bootstrap: no PMIx server to talk to (%s): start the job with "
			  "Open MPI's mpirun, or give FTCC_PEERS or FTCC_STORE",
			  PMIx_Error_string(st));
		return -FT_ECONFIG;
	}
	rc = exchange(&me, p, mine, book);
	keep_open();
	return rc;
}

/*
 * The token: rank 0 makes it and puts it under a key of its own, and the
 * fence collects it to every rank's server, as the book's entries. A fence
 * of its own, before the book's (ranks meet fences in the same order).
 * PMIx keeps the key-value space to the job's processes: the servers talk
 * to local clients of the job's user only.
 */
static unsigned tokens_made;

int ft__boot_pmix_token(const struct ft__book_params *p, char *token, size_t cap)
{
	int64_t deadline = ft__now_ms() + p->timeout_ms;
	char key[PMIX_MAX_KEYLEN + 1], mine[72];
	pmix_proc_t me, root;
	pmix_value_t *v = NULL;
	pmix_info_t info;
	pmix_status_t st;
	int secs, rc = 0, n;

	n = snprintf(key, sizeof(key), "ftcc.%s.%u.tok", p->job_id,
		     __atomic_fetch_add(&tokens_made, 1, __ATOMIC_RELAXED));
	if (n < 0 || (size_t)n >= sizeof(key) || cap < 65)
		return -FT_ECONFIG;
	st = PMIx_Init(&me, NULL, 0);
	if (st != PMIX_SUCCESS) {
		ft__error("pmix bootstrap: no PMIx server to share a token through (%s): set "
			  "FTCC_TOKEN", PMIx_Error_string(st));
		return -FT_ECONFIG;
	}
	if ((rc = check_job(&me, p)) != 0)
		goto out;
	if (p->rank == 0) {
		uint8_t raw[32];
		if ((rc = ft__auth_random(raw, sizeof(raw))) != 0)
			goto out;
		for (size_t i = 0; i < sizeof(raw); i++)
			snprintf(mine + 2 * i, 3, "%02x", raw[i]);
		ft__wipe(raw, sizeof(raw));
		rc = put_mine(key, mine);
		ft__wipe(mine, sizeof(mine));
		if (rc != 0)
			goto out;
	}
	if ((rc = fence(&me, deadline)) != 0)
		goto out;
	PMIX_PROC_LOAD(&root, me.nspace, 0);
	secs = seconds_left(deadline);
	PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &secs, PMIX_INT);
	st = PMIx_Get(&root, key, &info, 1, &v);
	PMIX_INFO_DESTRUCT(&info);
	if (st != PMIX_SUCCESS) {
		rc = pmix_error("rank 0's token", st);
		goto out;
	}
	if (v->type != PMIX_STRING || v->data.string == NULL || strlen(v->data.string) != 64 ||
	    strspn(v->data.string, "0123456789abcdef") != 64) {
		ft__error("pmix bootstrap: rank 0's token is malformed");
		rc = -FT_EPROTO;
	} else {
		memcpy(token, v->data.string, 65);
		ft__wipe(v->data.string, 64);
	}
	PMIX_VALUE_RELEASE(v);
out:
	keep_open();
	return rc;
}

#else

int ft__boot_pmix_book(const struct ft__book_params *p, const char *mine,
		       char (*book)[FT__BOOK_ENTRY_MAX])
{
	(void)p;
	(void)mine;
	(void)book;
	ft__error("pmix bootstrap: this ftcc was built without PMIx (install libpmix-dev and "
		  "rebuild), or give FTCC_PEERS or FTCC_STORE");
	return -FT_ENOSYS;
}

int ft__boot_pmix_token(const struct ft__book_params *p, char *token, size_t cap)
{
	(void)p;
	(void)token;
	(void)cap;
	ft__error("pmix bootstrap: this ftcc was built without PMIx, so it cannot share a token "
		  "through it: set FTCC_TOKEN");
	return -FT_ENOSYS;
}

#endif
