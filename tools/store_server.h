/* store_server.h: the address store ftcc-run serves (protocol in lib/bootstrap/boot_store.h), driven by the caller's poll loop. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_STORE_SERVER_H
#define FTCC_STORE_SERVER_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

struct ft__store_server;

/* Where the store's messages go (one line, no newline). */
typedef void store_say_fn(void *arg, const char *line);

/*
 * Listens on host (NULL or "": every IPv4 interface) and port ("0": the
 * kernel picks); addr gets the address bound ("0.0.0.0:PORT" for every
 * interface). A join must prove token (lib/bootstrap/boot_store.h); NULL takes
 * any join (FTCC_AUTH=none: the caller decides, and warns). The store
 * says what it refuses and which ranks join again; with verbose, also
 * each book it settles. 0, or a negative FT_E* code
 * (the reason is said).
 */
int ft__store_server_open(struct ft__store_server **s, const char *host, const char *port, const char *token,
	       int verbose, store_say_fn *say, void *arg, char *addr, size_t addrlen);
/*
 * From now on s serves job only: a join for another job, once it proved
 * the token, is refused (FT_ECONFIG, naming the job served) and makes no
 * job, so no other job's ranks can push this job's book out of the table.
 * Without it the store serves any job, and jobs that share its token can
 * push each other's settled books out (MAX_JOBS, store_server.c). 0, or
 * -FT_EINVAL when job is no job id.
 */
int ft__store_server_serve_only(struct ft__store_server *s, const char *job);
/* How many pollfds store_poll_fill may fill (at most). */
size_t ft__store_server_poll_count(const struct ft__store_server *s);
/* Fills pfds with what the store waits for; returns how many it filled. */
size_t ft__store_server_poll_fill(struct ft__store_server *s, struct pollfd *pfds);
/* Milliseconds until the store's next deadline, -1 for none. */
int ft__store_server_poll_timeout(const struct ft__store_server *s);
/*
 * Does what the n pollfds store_poll_fill filled (and ppoll answered) ask,
 * and what deadlines have passed. Call it after every wake-up. Never
 * blocks; nothing a client sends can make it fail.
 */
void ft__store_server_handle(struct ft__store_server *s, const struct pollfd *pfds, size_t n);
/*
 * The launcher saw rank's process of job (of world_size ranks) die. While
 * the job's book is still assembling and the rank holds no live
 * connection (it never joined, or its connection is the dead process's and
 * closed), the rank counts as joined and gone: the book goes out once
 * every other rank joined, with GONE as its entry (lib/bootstrap/boot_store.h); a
 * later join of the rank (its restart) replaces the mark. Once the book
 * went out, the rank's entry in it becomes GONE too: the others, still
 * settling the job's first view, ask again for the book (member_inband.c)
 * and go on without it; a restart's join replaces the mark as before.
 * Otherwise nothing changes. Call it only for a job whose ranks the caller
 * launched: nothing proves the word to the store.
 */
void ft__store_server_rank_died(struct ft__store_server *s, const char *job, uint32_t world_size, uint32_t rank);
/* Closes every connection and the listener; NULL is fine. */
void ft__store_server_close(struct ft__store_server *s);

#endif
