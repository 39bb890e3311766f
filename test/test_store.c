/* test_store.c: the address store in this process (tools/store_server.c), where its allocations can fail. */
/* SPDX-License-Identifier: MIT */

/*
 * The store runs in a thread of the test, and this binary is linked with
 * -Wl,--wrap=malloc,--wrap=free (Makefile): malloc fails once for a size
 * the test arms, on the store's thread only, and free fills every block
 * with 0xa5 before it goes back, so that a read after free sees poison
 * (a world size of 2779096485, pointers that fault) and not the old
 * values. The ranks are threads running ft__boot_book.
 */

#include <criterion/criterion.h>

#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot_store.h"
#include "bootstrap.h"
#include "served.h"
#include "store_server.h"

#define TOKEN "store-oom-token"

void *__real_malloc(size_t size);
void __real_free(void *p);
void *__wrap_malloc(size_t size);
void __wrap_free(void *p);

static atomic_size_t fail_size;         /* 0: none armed */
static atomic_int failed;
static pthread_t store_thread;
static atomic_bool store_running;

void *__wrap_malloc(size_t size)
{
	size_t want = atomic_load(&fail_size);

	if (want != 0 && size == want && atomic_load(&store_running) &&
	    pthread_equal(pthread_self(), store_thread) &&
	    atomic_compare_exchange_strong(&fail_size, &want, 0)) {
		atomic_fetch_add(&failed, 1);
		return NULL;
	}
	return __real_malloc(size);
}

void __wrap_free(void *p)
{
	if (p != NULL)
		memset(p, 0xa5, malloc_usable_size(p));
	__real_free(p);
}

static void quiet(void *arg, const char *line)
{
	(void)arg;
	fprintf(stderr, "%s\n", line);
}

struct rank {
	const char *store;
	int rank, rc;
	char book[2][FT__BOOK_ENTRY_MAX];
};

static const char *const entries[2] = {"127.0.0.1:1", "127.0.0.1:2"};

static void *rank_main(void *arg)
{
	struct rank *r = arg;
	struct ft__book_params p = {.how = "store", .store = r->store, .job_id = "t-oom",
				    .token = TOKEN, .rank = r->rank, .world_size = 2,
				    .timeout_ms = 10000};

	r->rc = ft__boot_book(&p, entries[r->rank], r->book);
	return NULL;
}

/*
 * The book cannot be built when the last rank joins: the store closes every
 * waiting rank's connection and forgets the job, reading nothing it freed;
 * the ranks join again and get the book.
 */
Test(store_oom, no_memory_for_the_book, .timeout = 30)
{
	struct served sv = {0};
	struct rank r[2];
	pthread_t t[2];

	cr_assert_eq(ft__store_server_open(&sv.s, "127.0.0.1", "0", TOKEN, 1, quiet, NULL, sv.addr,
				sizeof(sv.addr)), 0);
	/* the book's buffer: the answer's two counts, its header, each entry and its length */
	atomic_store(&fail_size, 2 * sizeof(size_t) + FT__STORE_ANSWER_HDR + 2 +
					 strlen(entries[0]) + strlen(entries[1]));
	atomic_store(&store_running, true);
	cr_assert_eq(pthread_create(&store_thread, NULL, serve, &sv), 0);
	for (int i = 0; i < 2; i++) {
		r[i] = (struct rank){.store = sv.addr, .rank = i};
		cr_assert_eq(pthread_create(&t[i], NULL, rank_main, &r[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	atomic_store(&sv.stop, true);
	pthread_join(store_thread, NULL);
	atomic_store(&store_running, false);
	cr_expect_eq(atomic_load(&failed), 1, "the book's allocation was not failed");
	for (int i = 0; i < 2; i++) {
		cr_expect_eq(r[i].rc, 0, "rank %d: %s", i, ft_strerror(r[i].rc));
		cr_expect_str_eq(r[i].book[0], entries[0]);
		cr_expect_str_eq(r[i].book[1], entries[1]);
	}
	ft__store_server_close(sv.s);
}
