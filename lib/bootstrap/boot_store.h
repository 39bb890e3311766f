/* boot_store.h: the address store's messages, shared by its client (boot_store.c) and its server (tools/store_server.c). */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_BOOT_STORE_H
#define FTCC_BOOT_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "auth.h"
#include "bootstrap.h"
#include "ftcc.h"

/*
 * One exchange per connection; integers are big-endian.
 *
 *   challenge (store to rank, at once on accept):
 *     u32 magic "FTBS", u16 version 3, u16 type 4, 16-byte nonce (fresh)
 *   join (rank to store): a header, then the job id, the entry and a MAC
 *     u32 magic, u16 version, u16 type 1,
 *     u32 rank, u32 world size, u16 job id length, u16 entry length,
 *     16-byte nonce of the rank's (fresh),
 *     job id, entry, MAC: HMAC-SHA256(token, FT__STORE_LABEL || the
 *     challenge's nonce || every byte of the join before the MAC)
 *   answer (store to rank): a header, then the body, then a MAC
 *     u32 magic, u16 version, u16 type 2 (book) or 3 (refused),
 *     u32 world size (book) or a positive FT_E* code (refused),
 *     u32 body length
 *     book:    for each rank in order, u8 length and its entry, or
 *              FT__STORE_GONE ("-", length 1): the launcher that serves the
 *              store saw the rank's process die before the book went out
 *              (tools/store_server.h, store_rank_died)
 *     refused: why, in words
 *     MAC: HMAC-SHA256(token, FT__STORE_ANSWER_LABEL || the challenge's
 *     nonce || the join's nonce || header || body)
 *
 * The MAC proves that the joining process holds the job's token (the
 * store is started with it) without sending it, and binds the job id, rank
 * and address to this connection's nonce: a captured join sent again, on
 * another connection, proves nothing. A join whose MAC does not check out
 * is refused (FT_EAUTH) and changes nothing. The answer's MAC proves
 * that the store holds the token too, for this join (the rank's fresh
 * nonce): a process that is not the store (one that took its port, or
 * answers in its place) cannot make the ranks believe a book, a rank
 * marked gone, or a refusal, nor replay an old answer; the rank fails
 * with FT_EAUTH naming the store. A book once cut a 4-rank job into two
 * jobs of 2 that summed half the inputs each, all of them exiting 0. The
 * one answer a rank cannot check is a refusal for its token (FT_EAUTH):
 * the store's MAC is then under another token; it ends the rank's
 * ft_init with FT_EAUTH either way.
 *
 * The store answers a join once every rank of its job has joined, all at
 * once, with the same book; or at once with a refusal when the join does
 * not fit the job (another world size, a rank out of range), or must wait
 * (FT_EBUSY: a rank held by a live connection with another entry, which
 * may be its earlier incarnation's on a host that vanished, until
 * keepalive closes it; or no room for another job): the client tries
 * again until its deadline. A rank whose connection closes before the
 * book is complete has left: its place is free again. After the book is
 * settled, a rank that joins again (a restarted rank, with its new
 * listener) gets the book at once, with its own entry replaced; the store
 * keeps it, so a later restart sees it too. The survivors keep the book
 * they got; the new incarnation's hello tells them where it is.
 *
 * Both ends check every field they read; the sizes below bound what
 * either will accept.
 */
#define FT__STORE_MAGIC 0x46544253u /* "FTBS" */
#define FT__STORE_VERSION 3
enum { FT__STORE_JOIN = 1, FT__STORE_BOOK = 2, FT__STORE_REFUSED = 3, FT__STORE_CHALLENGE = 4 };
#define FT__STORE_LABEL "ftcc store join v3"
#define FT__STORE_ANSWER_LABEL "ftcc store answer v3"
#define FT__STORE_CHALLENGE_LEN (8 + FT__AUTH_NONCE)
#define FT__STORE_JOIN_HDR (20 + FT__AUTH_NONCE)
#define FT__STORE_ANSWER_HDR 16
#define FT__STORE_JOB_MAX FT_NAME_MAX /* job id, NUL included */
#define FT__STORE_JOIN_MAX \
	(FT__STORE_JOIN_HDR + FT__STORE_JOB_MAX + FT__BOOK_ENTRY_MAX + FT__AUTH_MAC)
#define FT__STORE_MAX_RANKS 65536
#define FT__STORE_WHY_MAX 256
/* A gone rank's entry in a book: no host:port (ft__boot_entry_check) reads so. */
#define FT__STORE_GONE "-"
/* Both ends give up on a silent peer after this long (keepalive and
 * TCP_USER_TIMEOUT, sock.h): a store host or a waiting rank's host that
 * vanished. No configuration reaches the store, so one fixed value. */
#define FT__STORE_DEAD_MS 10000

struct ft__store_join {
	uint32_t rank, world_size;
	char job[FT__STORE_JOB_MAX];
	char entry[FT__BOOK_ENTRY_MAX];
	uint8_t cnonce[FT__AUTH_NONCE]; /* the rank's: the answer's MAC covers it */
	uint8_t mac[FT__AUTH_MAC];      /* as parsed; ft__store_join_seal computes it */
};

/* Encodes j into buf (FT__STORE_JOIN_MAX bytes at least) but its MAC; returns its length. */
size_t ft__store_join_encode(const struct ft__store_join *j, unsigned char *buf);
/* Appends the MAC of the len-byte join at buf for a challenge's nonce; returns the new length. */
size_t ft__store_join_seal(unsigned char *buf, size_t len, const char *token,
			   const uint8_t nonce[FT__AUTH_NONCE]);
/* Whether the join at buf (len bytes, MAC included) was sealed with token for nonce. */
bool ft__store_join_auth_ok(const unsigned char *buf, size_t len, const char *token,
			    const uint8_t nonce[FT__AUTH_NONCE]);
/* The MAC of the len-byte answer at ans (header and body) to a join with
 * cnonce on a connection challenged with nonce. */
void ft__store_answer_seal(uint8_t mac[FT__AUTH_MAC], const char *token,
			   const uint8_t nonce[FT__AUTH_NONCE], const uint8_t cnonce[FT__AUTH_NONCE],
			   const unsigned char *ans, size_t len);
/* Writes a challenge (FT__STORE_CHALLENGE_LEN bytes) for nonce. */
void ft__store_challenge_encode(unsigned char *buf, const uint8_t nonce[FT__AUTH_NONCE]);
/*
 * Parses a join (MAC included) from the first len bytes at buf: its
 * length when complete and valid (the MAC is not checked here), 0 while
 * more bytes are needed, -FT_EPROTO when the magic is wrong (not this
 * protocol: no answer is due), -FT_EINVAL when a field is out of range
 * (*why says which; an answer is due).
 */
ssize_t ft__store_join_parse(const unsigned char *buf, size_t len, struct ft__store_join *j,
			     const char **why);
/* A job id: 1..FT__STORE_JOB_MAX-1 of the characters FTCC_JOB_ID allows. */
int ft__store_job_check(const char *s, size_t len);
/* Writes an answer's header. */
void ft__store_answer_header(unsigned char *hdr, unsigned type, uint32_t value,
			     uint32_t body_len);
/* Appends entry e to a book body at buf; returns the bytes written (1 + its length). */
size_t ft__store_book_put(unsigned char *buf, const char *e);

#ifdef FTCC_FUZZ
/* For test/fuzz/fuzz_store.c: what store_try reads on fd (the challenge, then the
 * answer), as store_try returns it; why as there (FT__STORE_WHY_MAX bytes). */
int ft__store_fuzz_reply(int fd, const struct ft__book_params *p, const char *mine,
			 char (*book)[FT__BOOK_ENTRY_MAX], char *why);
#endif

#endif
