/* served.h: ftcc-run's address store (tools/store_server.c) served by a thread of a test. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_TEST_SERVED_H
#define FTCC_TEST_SERVED_H

#include <criterion/criterion.h>

#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "store_server.h"

struct served {
	struct ft__store_server *s;
	atomic_bool stop;
	char addr[128];
	/* ranks of job (of world ranks) whose death the launcher saw: told to
	 * the store on its own thread, a bit each (store_rank_died) */
	const char *job;
	uint32_t world;
	atomic_uint died;
	atomic_uint told;       /* ... and those told already */
};

/* The store's poll loop, as ftcc-run runs it, until sv->stop. */
static void *serve(void *arg)
{
	struct served *sv = arg;
	struct pollfd *pfds = NULL;
	size_t cap = 0;

	while (!atomic_load(&sv->stop)) {
		size_t need = ft__store_server_poll_count(sv->s), n;
		int ms = ft__store_server_poll_timeout(sv->s);
		unsigned died = atomic_exchange(&sv->died, 0);
		for (uint32_t r = 0; died != 0 && r < sv->world; r++)
			if (died & 1u << r) {
				ft__store_server_rank_died(sv->s, sv->job, sv->world, r);
				atomic_fetch_or(&sv->told, 1u << r);
			}
		if (need > cap) {
			free(pfds);
			cap = 2 * need;
			pfds = calloc(cap, sizeof(*pfds));
			cr_assert_not_null(pfds);
		}
		n = ft__store_server_poll_fill(sv->s, pfds);
		(void)poll(pfds, n, ms < 0 || ms > 50 ? 50 : ms);
		ft__store_server_handle(sv->s, pfds, n);
	}
	free(pfds);
	return NULL;
}

#endif
