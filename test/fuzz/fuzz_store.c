/* fuzz_store.c: feeds arbitrary bytes to the address store's join parser and to its client's reader of the store's answers. */
/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "boot_store.h"
#include "bootstrap.h"
#include "ftcc.h"

#define FUZZ_NAME "fuzz_store"
#include "fuzz_main.h"

#define TOKEN "fuzz-token"
#define MINE "h:1"

static const uint8_t nonce[FT__AUTH_NONCE] = {3, 1, 4, 1, 5, 9, 2, 6};
static char (*book)[FT__BOOK_ENTRY_MAX];

static void fuzz_init(void)
{
	book = calloc(16, sizeof(*book));
	if (book == NULL)
		abort();
}

/* The store's side: a join as it arrives, in pieces, as read_join parses it. */
static void join(const unsigned char *buf, size_t len)
{
	unsigned char again[FT__STORE_JOIN_MAX];
	struct ft__store_join j;
	const char *why;
	ssize_t n;

	if (len > FT__STORE_JOIN_MAX)
		len = FT__STORE_JOIN_MAX; /* the store's buffer */
	n = ft__store_join_parse(buf, len, &j, &why);
	if (n != 0 && n != -FT_EPROTO && n != -FT_EINVAL && (n < 0 || (size_t)n > len))
		abort();
	if (n <= 0)
		return;
	/* every piece of a good join asks for more, none is refused */
	for (size_t cut = 0; cut < (size_t)n; cut += 1 + cut / 4) {
		struct ft__store_join part;
		if (ft__store_join_parse(buf, cut, &part, &why) != 0)
			abort();
	}
	/* what it took is what a client encodes, and sealing it proves the token */
	if (j.rank >= j.world_size || strlen(j.job) == 0 || strlen(j.entry) == 0 ||
	    ft__store_join_encode(&j, again) != (size_t)n - FT__AUTH_MAC ||
	    memcmp(again, buf, (size_t)n - FT__AUTH_MAC) != 0 ||
	    ft__store_join_seal(again, (size_t)n - FT__AUTH_MAC, TOKEN, nonce) != (size_t)n ||
	    !ft__store_join_auth_ok(again, (size_t)n, TOKEN, nonce) ||
	    ft__store_join_auth_ok(again, (size_t)n, "another-token", nonce))
		abort();
}

/* The client's side: what the store sends on a connection, then its close. */
static void reply(const unsigned char *buf, size_t len, int rank, int world, bool challenge)
{
	struct ft__book_params p = {.how = "store", .store = "fuzz:1", .job_id = "fuzz-job",
				    .token = TOKEN, .rank = rank, .world_size = world};
	unsigned char c[FT__STORE_CHALLENGE_LEN];
	char why[FT__STORE_WHY_MAX] = "";
	int sv[2], rc;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		abort();
	fcntl(sv[1], F_SETFL, O_NONBLOCK);
	if (challenge) {
		ft__store_challenge_encode(c, nonce);
		(void)!write(sv[1], c, sizeof(c));
	}
	(void)!write(sv[1], buf, len); /* what does not fit the socket's buffer is lost */
	shutdown(sv[1], SHUT_WR);
	rc = ft__store_fuzz_reply(sv[0], &p, MINE, book, why);
	close(sv[0]);
	close(sv[1]);
	if (rc != 0 && rc != -FT_EIO && rc != -FT_EPEERFAILED && rc != -FT_EBUSY &&
	    rc != -FT_EAUTH && rc != -FT_ECONFIG && rc != -FT_ENOMEM)
		abort();
	if (memchr(why, 0, sizeof(why)) == NULL)
		abort();
	for (const char *w = why; *w != '\0'; w++)
		if (!isprint((unsigned char)*w))
			abort();
	for (int r = 0; rc == 0 && r < world; r++) {
		const char *e;
		if (memchr(book[r], 0, FT__BOOK_ENTRY_MAX) == NULL ||
		    ft__boot_entry_check(book[r], strlen(book[r]), &e) != 0 ||
		    (r == rank && strcmp(book[r], MINE) != 0))
			abort();
	}
}

/*
 * Byte 0: bit 0, the store's side (a join) or the client's (the store's
 * bytes); bit 1, the client's: a good challenge goes first; bits 2..3:
 * the client's world size - 1; bits 4..5, its rank (modulo the world).
 */
static void fuzz_one(const unsigned char *buf, size_t len)
{
	int world;

	if (len < 1)
		return;
	world = 1 + ((buf[0] >> 2) & 3);
	if (buf[0] & 1)
		join(buf + 1, len - 1);
	else
		reply(buf + 1, len - 1, (buf[0] >> 4 & 3) % world, world, buf[0] & 2);
}
