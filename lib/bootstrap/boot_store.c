/* boot_store.c: the address store's messages (boot_store.h) and its client: join, wait for the book, check it. */
/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot_store.h"
#include "fdreg.h"
#include "internal.h"
#include "sock.h"

static void put16(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 8);
	p[1] = (unsigned char)v;
}

static void put32(unsigned char *p, uint32_t v)
{
	put16(p, v >> 16);
	put16(p + 2, v);
}

static uint32_t get16(const unsigned char *p)
{
	return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t get32(const unsigned char *p)
{
	return get16(p) << 16 | get16(p + 2);
}

int ft__store_job_check(const char *s, size_t len)
{
	if (len == 0 || len >= FT__STORE_JOB_MAX)
		return -FT_EINVAL;
	for (size_t i = 0; i < len; i++)
		/* strchr finds a NUL too: the string's own end */
		if (!isalnum((unsigned char)s[i]) && (s[i] == '\0' || strchr("-_.@:", s[i]) == NULL))
			return -FT_EINVAL;
	return 0;
}

size_t ft__store_join_encode(const struct ft__store_join *j, unsigned char *buf)
{
	size_t jl = strlen(j->job), el = strlen(j->entry);

	put32(buf, FT__STORE_MAGIC);
	put16(buf + 4, FT__STORE_VERSION);
	put16(buf + 6, FT__STORE_JOIN);
	put32(buf + 8, j->rank);
	put32(buf + 12, j->world_size);
	put16(buf + 16, (uint32_t)jl);
	put16(buf + 18, (uint32_t)el);
	memcpy(buf + 20, j->cnonce, FT__AUTH_NONCE);
	memcpy(buf + FT__STORE_JOIN_HDR, j->job, jl);
	memcpy(buf + FT__STORE_JOIN_HDR + jl, j->entry, el);
	return FT__STORE_JOIN_HDR + jl + el;
}

static void join_iov(struct iovec iov[2], const uint8_t *nonce, const unsigned char *buf,
		     size_t len)
{
	iov[0] = (struct iovec){.iov_base = (void *)nonce, .iov_len = FT__AUTH_NONCE};
	iov[1] = (struct iovec){.iov_base = (void *)buf, .iov_len = len};
}

size_t ft__store_join_seal(unsigned char *buf, size_t len, const char *token,
			   const uint8_t nonce[FT__AUTH_NONCE])
{
	struct iovec iov[2];

	join_iov(iov, nonce, buf, len);
	ft__auth_mac(token, FT__STORE_LABEL, iov, 2, buf + len);
	return len + FT__AUTH_MAC;
}

bool ft__store_join_auth_ok(const unsigned char *buf, size_t len, const char *token,
			    const uint8_t nonce[FT__AUTH_NONCE])
{
	struct iovec iov[2];

	if (len < FT__STORE_JOIN_HDR + FT__AUTH_MAC)
		return false;
	join_iov(iov, nonce, buf, len - FT__AUTH_MAC);
	return ft__auth_mac_ok(token, FT__STORE_LABEL, iov, 2, buf + len - FT__AUTH_MAC);
}

void ft__store_answer_seal(uint8_t mac[FT__AUTH_MAC], const char *token,
			   const uint8_t nonce[FT__AUTH_NONCE], const uint8_t cnonce[FT__AUTH_NONCE],
			   const unsigned char *ans, size_t len)
{
	struct iovec iov[3] = {{(void *)nonce, FT__AUTH_NONCE},
			       {(void *)cnonce, FT__AUTH_NONCE},
			       {(void *)ans, len}};

	ft__auth_mac(token, FT__STORE_ANSWER_LABEL, iov, 3, mac);
}

void ft__store_challenge_encode(unsigned char *buf, const uint8_t nonce[FT__AUTH_NONCE])
{
	put32(buf, FT__STORE_MAGIC);
	put16(buf + 4, FT__STORE_VERSION);
	put16(buf + 6, FT__STORE_CHALLENGE);
	memcpy(buf + 8, nonce, FT__AUTH_NONCE);
}

static ssize_t invalid(const char **why, const char *reason)
{
	*why = reason;
	return -FT_EINVAL;
}

ssize_t ft__store_join_parse(const unsigned char *buf, size_t len, struct ft__store_join *j,
			     const char **why)
{
	uint32_t jl, el;

	*why = "not an ftcc store join";
	if (len >= 4 && get32(buf) != FT__STORE_MAGIC)
		return -FT_EPROTO;
	if (len < FT__STORE_JOIN_HDR)
		return 0;
	if (get16(buf + 4) != FT__STORE_VERSION || get16(buf + 6) != FT__STORE_JOIN)
		return invalid(why, "another version of the store's protocol");
	j->rank = get32(buf + 8);
	j->world_size = get32(buf + 12);
	jl = get16(buf + 16);
	el = get16(buf + 18);
	memcpy(j->cnonce, buf + 20, FT__AUTH_NONCE);
	if (j->world_size < 1 || j->world_size > FT__STORE_MAX_RANKS)
		return invalid(why, "world size out of range (1..65536)");
	if (j->rank >= j->world_size)
		return invalid(why, "rank out of range (0..world size - 1)");
	if (jl == 0 || jl >= FT__STORE_JOB_MAX || el == 0 || el >= FT__BOOK_ENTRY_MAX)
		return invalid(why, "job id or address length out of range");
	if (len < FT__STORE_JOIN_HDR + jl + el + FT__AUTH_MAC)
		return 0;
	if (ft__store_job_check((const char *)buf + FT__STORE_JOIN_HDR, jl) != 0)
		return invalid(why, "a job id holds only letters, digits and -_.@:");
	if (ft__boot_entry_check((const char *)buf + FT__STORE_JOIN_HDR + jl, el, why) != 0)
		return -FT_EINVAL;
	memcpy(j->job, buf + FT__STORE_JOIN_HDR, jl);
	j->job[jl] = '\0';
	memcpy(j->entry, buf + FT__STORE_JOIN_HDR + jl, el);
	j->entry[el] = '\0';
	memcpy(j->mac, buf + FT__STORE_JOIN_HDR + jl + el, FT__AUTH_MAC);
	return (ssize_t)(FT__STORE_JOIN_HDR + jl + el + FT__AUTH_MAC);
}

void ft__store_answer_header(unsigned char *hdr, unsigned type, uint32_t value, uint32_t body_len)
{
	put32(hdr, FT__STORE_MAGIC);
	put16(hdr + 4, FT__STORE_VERSION);
	put16(hdr + 6, type);
	put32(hdr + 8, value);
	put32(hdr + 12, body_len);
}

size_t ft__store_book_put(unsigned char *buf, const char *e)
{
	size_t n = strlen(e);

	buf[0] = (unsigned char)n;
	memcpy(buf + 1, e, n);
	return 1 + n;
}

/* ---- the client -------------------------------------------------------------- */

/* Reads len bytes before deadline_ms: 0, -FT_ETIMEDOUT, or -FT_EPEERFAILED at EOF or reset. */
static int read_full(int fd, void *buf, size_t len, int64_t deadline_ms)
{
	char *p = buf;

	while (len > 0) {
		ssize_t n = recv(fd, p, len, 0);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == 0)
			return -FT_EPEERFAILED;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return ft__sock_error(errno);
		if (errno == EINTR)
			continue;
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		if (ft__ms_left(deadline_ms) == 0)
			return -FT_ETIMEDOUT;
		(void)poll(&pfd, 1, ft__ms_left(deadline_ms)); /* the loop decides */
	}
	return 0;
}

/* The book's body: world_size entries, each checked or FT__STORE_GONE (an empty
 * entry in book); mine must be at my rank. */
static int parse_book(const unsigned char *b, size_t len, const struct ft__book_params *p,
		      const char *mine, char (*book)[FT__BOOK_ENTRY_MAX])
{
	const char *why;
	size_t at = 0;

	for (int r = 0; r < p->world_size; r++) {
		size_t n = at < len ? b[at] : 0;
		bool gone = at < len && n == strlen(FT__STORE_GONE) && n <= len - at - 1 &&
			    memcmp(b + at + 1, FT__STORE_GONE, n) == 0;
		if (gone) {
			book[r][0] = '\0';
			at += 1 + n;
			continue;
		}
		if (at >= len || n > len - at - 1 ||
		    ft__boot_entry_check((const char *)b + at + 1, n, &why) != 0) {
			ft__error("store %s: rank %d's address in the book is malformed", p->store,
				  r);
			return -FT_EIO;
		}
		memcpy(book[r], b + at + 1, n);
		book[r][n] = '\0';
		at += 1 + n;
	}
	if (at != len || strcmp(book[p->rank], mine) != 0) {
		ft__error("store %s: the book does not match this job (%s)", p->store,
			  at != len ? "trailing bytes" : "this rank's own address differs");
		return -FT_EIO;
	}
	return 0;
}

/*
 * A refusal: the store's reason into why. -FT_EBUSY when waiting may help
 * (the rank is held by a connection the store still thinks alive, e.g. the
 * one of this rank's earlier incarnation on a host that vanished, or the
 * store is full); -FT_EAUTH when the store found that this rank does not
 * hold its token; -FT_ECONFIG otherwise.
 */
static int refused(const unsigned char *b, uint32_t code, uint32_t len, char *why)
{
	if (len >= FT__STORE_WHY_MAX)
		len = 0;
	memcpy(why, b, len);
	why[len] = '\0';
	for (uint32_t i = 0; i < len; i++)
		if (!isprint((unsigned char)why[i]))
			why[i] = '?';
	if (len == 0)
		snprintf(why, FT__STORE_WHY_MAX, "no reason given");
	return code == FT_EBUSY ? -FT_EBUSY : code == FT_EAUTH ? -FT_EAUTH : -FT_ECONFIG;
}

/*
 * One answer on fd: 0 and the book, a refusal (why says it), -FT_EAUTH
 * (its MAC does not prove the token: not this job's store), -FT_EIO
 * (malformed), or a socket error. Nothing of it is believed before its
 * MAC checks out (nonce: the challenge; cnonce: the join's; both NULL
 * only for the fuzz harness, which reaches the parsers with any input).
 */
static int read_answer(int fd, const struct ft__book_params *p, const char *mine,
		       char (*book)[FT__BOOK_ENTRY_MAX], int64_t deadline_ms, char *why,
		       const uint8_t *nonce, const uint8_t *cnonce)
{
	unsigned char *a;
	uint8_t mac[FT__AUTH_MAC];
	uint32_t type, value, len;
	int rc;

	if ((a = malloc(FT__STORE_ANSWER_HDR)) == NULL)
		return -FT_ENOMEM;
	rc = read_full(fd, a, FT__STORE_ANSWER_HDR, deadline_ms);
	if (rc != 0)
		goto out;
	type = get16(a + 6);
	value = get32(a + 8);
	len = get32(a + 12);
	rc = -FT_EIO;
	if (get32(a) != FT__STORE_MAGIC || get16(a + 4) != FT__STORE_VERSION ||
	    (type != FT__STORE_BOOK && type != FT__STORE_REFUSED)) {
		ft__error("store %s: not an ftcc store, or another version", p->store);
		goto out;
	}
	if (type == FT__STORE_REFUSED ? len >= FT__STORE_WHY_MAX
				      : value != (uint32_t)p->world_size ||
						len > (uint32_t)p->world_size * FT__BOOK_ENTRY_MAX) {
		ft__error("store %s: an answer of %u bytes (%u) for a job of %d ranks", p->store,
			  len, value, p->world_size);
		goto out;
	}
	{
		unsigned char *bigger = realloc(a, FT__STORE_ANSWER_HDR + (size_t)len);
		if (bigger == NULL) {
			rc = -FT_ENOMEM;
			goto out;
		}
		a = bigger;
	}
	rc = read_full(fd, a + FT__STORE_ANSWER_HDR, len, deadline_ms);
	if (rc == 0)
		rc = read_full(fd, mac, sizeof(mac), deadline_ms);
	if (rc != 0)
		goto out;
	if (nonce != NULL) {
		uint8_t want[FT__AUTH_MAC];
		ft__store_answer_seal(want, p->token ? p->token : "", nonce, cnonce, a,
				      FT__STORE_ANSWER_HDR + (size_t)len);
		if (!ft__auth_equal(want, mac, sizeof(mac))) {
			if (type == FT__STORE_REFUSED && value == FT_EAUTH) {
				/* under its token, which is not ours: unprovable */
				rc = refused(a + FT__STORE_ANSWER_HDR, value, len, why);
				goto out;
			}
			ft__error("store %s: its answer does not prove this job's token: not this "
				  "job's store (a process in its place?), or another token",
				  p->store);
			why[0] = '\0'; /* said: it refused nothing */
			rc = -FT_EAUTH;
			goto out;
		}
	}
	if (type == FT__STORE_REFUSED)
		rc = refused(a + FT__STORE_ANSWER_HDR, value, len, why);
	else
		rc = parse_book(a + FT__STORE_ANSWER_HDR, len, p, mine, book);
out:
	free(a);
	return rc;
}

/* The store's challenge: 0 and its nonce, -FT_EIO when it is none, or a socket error. */
static int read_challenge(int fd, const struct ft__book_params *p, uint8_t *nonce,
			  int64_t deadline_ms)
{
	unsigned char c[FT__STORE_CHALLENGE_LEN];
	int rc = read_full(fd, c, sizeof(c), deadline_ms);

	if (rc != 0)
		return rc;
	if (get32(c) != FT__STORE_MAGIC || get16(c + 4) != FT__STORE_VERSION ||
	    get16(c + 6) != FT__STORE_CHALLENGE) {
		ft__error("store %s: not an ftcc store, or another version", p->store);
		return -FT_EIO;
	}
	memcpy(nonce, c + 8, FT__AUTH_NONCE);
	return 0;
}

/* One attempt: connect, take the challenge, join with its MAC, wait for the answer. */
static int store_try(const struct ft__sock_addr *to, unsigned char *join, size_t jlen,
		     const struct ft__book_params *p, const char *mine,
		     char (*book)[FT__BOOK_ENTRY_MAX], int64_t deadline_ms, char *why)
{
	/* keepalive: a store host that vanishes is noticed while this rank waits */
	const struct ft__sock_opts opts = {.keepalive_ms = FT__STORE_DEAD_MS,
					   .user_timeout_ms = FT__STORE_DEAD_MS};
	uint8_t nonce[FT__AUTH_NONCE], cnonce[FT__AUTH_NONCE];
	int fd, rc;

	/* a fresh nonce of ours each try: the answer's MAC covers it */
	rc = ft__auth_random(cnonce, sizeof(cnonce));
	if (rc != 0)
		return rc;
	memcpy(join + 20, cnonce, sizeof(cnonce));
	rc = ft__sock_connect(to, &opts, deadline_ms, &fd);
	if (rc != 0)
		return rc;
	ft__fd_own(fd);
	rc = read_challenge(fd, p, nonce, deadline_ms);
	if (rc == 0)
		rc = ft__sock_write_full(fd, join,
					 ft__store_join_seal(join, jlen, p->token ? p->token : "",
							     nonce),
					 deadline_ms);
	if (rc == 0)
		rc = read_answer(fd, p, mine, book, deadline_ms, why, nonce, cnonce);
	ft__fd_close(fd);
	return rc;
}

#ifdef FTCC_FUZZ
int ft__store_fuzz_reply(int fd, const struct ft__book_params *p, const char *mine,
			 char (*book)[FT__BOOK_ENTRY_MAX], char *why)
{
	int64_t deadline_ms = ft__now_ms() + 1000;
	uint8_t nonce[FT__AUTH_NONCE];
	int rc = read_challenge(fd, p, nonce, deadline_ms);

	return rc != 0 ? rc : read_answer(fd, p, mine, book, deadline_ms, why, NULL, NULL);
}
#endif

/*
 * Tries until the deadline while the store cannot be reached, drops the
 * connection (it may not be up yet, or restarting) or says to wait: it
 * counts a rank once whatever the number of its connections. Its other
 * answers are final.
 */
int ft__boot_store_book(const struct ft__book_params *p, const char *mine,
			char (*book)[FT__BOOK_ENTRY_MAX])
{
	int64_t deadline = ft__now_ms() + p->timeout_ms;
	struct ft__store_join j = {.rank = (uint32_t)p->rank, .world_size = (uint32_t)p->world_size};
	unsigned char join[FT__STORE_JOIN_MAX];
	char why[FT__STORE_WHY_MAX] = "";
	struct ft__sock_addr to;
	size_t jlen;
	int rc, pause_ms = 10;

	if (p->world_size > FT__STORE_MAX_RANKS ||
	    ft__store_job_check(p->job_id, strlen(p->job_id)) != 0) {
		ft__error("store bootstrap: a store serves jobs of at most %d ranks with a job id "
			  "of letters, digits and -_.@: (job '%s', %d ranks)", FT__STORE_MAX_RANKS,
			  p->job_id, p->world_size);
		return -FT_ECONFIG;
	}
	if (ft__sock_resolve(p->store, &to) != 0) {
		ft__error("FTCC_STORE='%s': not a host:port that resolves", p->store);
		return -FT_ECONFIG;
	}
	snprintf(j.job, sizeof(j.job), "%s", p->job_id);
	snprintf(j.entry, sizeof(j.entry), "%s", mine);
	jlen = ft__store_join_encode(&j, join);
	for (;;) {
		rc = store_try(&to, join, jlen, p, mine, book, deadline, why);
		if (rc == 0 || rc == -FT_EIO || ft__err_shortage(rc))
			return rc;
		if (rc == -FT_ECONFIG || rc == -FT_EAUTH ||
		    (rc == -FT_EBUSY && ft__ms_left(deadline) == 0)) {
			if (why[0] != '\0')
				ft__error("store %s refused rank %d of job %s: %s", p->store,
					  p->rank, p->job_id, why);
			return rc == -FT_EAUTH ? rc : -FT_ECONFIG;
		}
		if (ft__ms_left(deadline) == 0)
			break;
		ft__debug("store %s: %s; trying again", p->store,
			  rc == -FT_EBUSY ? why : ft_strerror(rc));
		(void)poll(NULL, 0, pause_ms < ft__ms_left(deadline) ? pause_ms : ft__ms_left(deadline));
		pause_ms = pause_ms < 500 ? pause_ms * 2 : 1000;
	}
	ft__error("store %s: no book for job %s within %d ms (%s): did every one of its %d ranks "
		  "start and reach the store?", p->store, p->job_id, p->timeout_ms,
		  ft_strerror(rc), p->world_size);
	return -FT_ETIMEDOUT;
}
