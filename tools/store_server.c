/* store_server.c: the address store: jobs, their ranks' entries, and the connections waiting for the book. */
/* SPDX-License-Identifier: MIT */

/*
 * A connection goes through three states and is closed:
 *
 *   READING  it got a fresh challenge at accept; its join, which must prove
 *            the job's token over that challenge, must arrive whole within
 *            JOIN_MS, in at most FT__STORE_JOIN_MAX bytes;
 *   WAITING  it holds its rank's place in a job until every rank has
 *            joined, for at most WAIT_MS (then it is closed and its client
 *            joins again: a place no live rank refreshes is given up); when
 *            it closes the place is free again;
 *   SENDING  an answer (the book, or a refusal), taken within SEND_MS.
 *
 * Until its join proves the token a connection is unauthenticated: it can
 * change nothing, and at most MAX_UNAUTH such connections are open. A new
 * one past that closes the oldest, rather than being refused, so that
 * clients that connect and stall can delay a real rank by one retry at
 * most, never lock it out. A store run without a token (FTCC_AUTH=none,
 * the caller's choice) takes any well-formed join as proven.
 *
 * When the last rank of a job joins, the book is built once and every
 * waiting connection of the job sends it (one buffer, counted references).
 * A settled job keeps its book for ranks that join again (restarted ones:
 * lib/bootstrap/boot_store.h), until MAX_JOBS newer jobs push it out; only a client
 * that proves the token can change it. Jobs that share the token trust each
 * other that far: any rank of one can make new jobs and so push the others'
 * books out (a restarted rank of a job pushed out would wait for ranks that
 * never join again). A store that serves one job (ft__store_server_serve_only:
 * ftcc-run's store for its own ranks, or one started with FTCC_JOB_ID) makes
 * no other job, so nothing pushes its book out; each push-out is said. A job not yet settled leaves when
 * its last waiting connection closes (at the latest WAIT_MS after its last
 * join), so the table holds only jobs whose ranks are still coming.
 *
 * A rank the launcher saw die before the book went out (store_rank_died)
 * holds its place with the mark GONE and no connection: it counts as
 * joined, so the others get the book without waiting for a process that
 * will never come, and a job so marked stays until its book goes out. A
 * join of that rank (its restart) takes the place back as any join does.
 * One that died after the book went out is marked GONE in the book as it
 * stands: ranks still settling the job's first view ask for it again.
 *
 * Everything a client sends is checked by ft__store_join_parse before it
 * is used; every buffer is bounded by the protocol's limits; a client that
 * breaks the protocol is answered (when it spoke it at all) and closed.
 * Memory: at most MAX_JOBS jobs of 16 bytes per rank, plus a connection's
 * few hundred bytes; the kernel's descriptor limit bounds the
 * authenticated connections (a waiting rank each), MAX_UNAUTH the others,
 * and running out of descriptors pauses accepting for a moment.
 */

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "boot_store.h"
#include "internal.h"
#include "sock.h"
#include "store_server.h"

#define JOIN_MS 2000
#define WAIT_MS 120000
#define SEND_MS 30000
#define MAX_JOBS 16
#define MAX_UNAUTH 64
#define ACCEPT_PAUSE_MS 100
/* the entry of a rank that died before the book went out (lib/bootstrap/boot_store.h) */
#define GONE FT__STORE_GONE

struct answer {
	size_t refs, len;
	unsigned char data[];
};

struct job {
	char id[FT__STORE_JOB_MAX];
	uint32_t world_size, joined;
	struct conn **holder;   /* before the book: the connection holding each rank */
	char **entry;           /* each rank's address once it joined, or GONE */
	struct answer *book;    /* once every rank has joined */
	int64_t used_ms;        /* last join: the oldest settled job leaves first */
};

enum conn_state { READING, WAITING, SENDING, CLOSED };

struct conn {
	int fd;
	enum conn_state state;
	int64_t deadline_ms;
	bool authed;            /* its join proved the token: counted in nunauth until then */
	uint8_t nonce[FT__AUTH_NONCE]; /* the challenge it was sent */
	uint8_t cnonce[FT__AUTH_NONCE]; /* its join's own nonce (zeros before the join) */
	uint8_t mac[FT__AUTH_MAC];      /* SENDING: the answer's, for this connection */
	unsigned char in[FT__STORE_JOIN_MAX];
	size_t in_len;
	struct job *job;        /* WAITING: the job and the rank it holds */
	uint32_t rank;
	struct answer *out;     /* SENDING */
	size_t out_off;
	char peer[NI_MAXHOST + NI_MAXSERV + 4];
};

struct ft__store_server {
	int fd;
	int64_t accept_at_ms;   /* out of descriptors: accept again from then */
	struct conn **conns;
	size_t nconns, cap;
	struct job *jobs[MAX_JOBS];
	size_t njobs;
	size_t nunauth;         /* open connections that proved no token */
	bool auth;              /* false: FTCC_AUTH=none, any join is taken */
	char only[FT__STORE_JOB_MAX]; /* the one job served, or "" for any */
	char token[FT_NAME_MAX];
	int verbose;
	store_say_fn *say_fn;
	void *arg;
	int64_t strangers_ms;   /* when a line about a stranger was last said, 0 never */
	unsigned strangers_held; /* such lines held back since */
};

__attribute__((format(printf, 2, 3))) static void say(struct ft__store_server *s, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	memcpy(line, "store: ", 7);
	va_start(ap, fmt);
	vsnprintf(line + 7, sizeof(line) - 7, fmt, ap);
	va_end(ap);
	s->say_fn(s->arg, line);
}

/*
 * A line about a connection that proved no token (anyone can make one):
 * at most one per STRANGER_SAY_MS, the next saying how many were held back.
 */
#define STRANGER_SAY_MS 10000

__attribute__((format(printf, 2, 3))) static void say_stranger(struct ft__store_server *s, const char *fmt,
								...)
{
	char line[400];
	int64_t now = ft__now_ms();
	va_list ap;

	if (s->strangers_ms != 0 && now - s->strangers_ms < STRANGER_SAY_MS) {
		s->strangers_held++;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (s->strangers_held > 0)
		say(s, "%s (and %u more such in the last %d s)", line, s->strangers_held,
		    (int)((now - s->strangers_ms) / 1000));
	else
		say(s, "%s", line);
	s->strangers_ms = now;
	s->strangers_held = 0;
}

static struct answer *answer_new(size_t len)
{
	struct answer *a = malloc(sizeof(*a) + len);

	if (a != NULL) {
		a->refs = 1;
		a->len = len;
	}
	return a;
}

static void answer_put(struct answer *a)
{
	if (a != NULL && --a->refs == 0)
		free(a);
}

/* ---- jobs --------------------------------------------------------------------- */

static void job_free(struct ft__store_server *s, struct job *j)
{
	for (size_t i = 0; i < s->njobs; i++)
		if (s->jobs[i] == j) {
			s->jobs[i] = s->jobs[--s->njobs];
			break;
		}
	for (uint32_t r = 0; r < j->world_size; r++)
		free(j->entry[r]);
	free(j->entry);
	free(j->holder);
	answer_put(j->book);
	free(j);
}

static struct job *job_find(struct ft__store_server *s, const char *id)
{
	for (size_t i = 0; i < s->njobs; i++)
		if (strcmp(s->jobs[i]->id, id) == 0)
			return s->jobs[i];
	return NULL;
}

/* A new job; when the table is full the settled job least recently joined leaves. */
static struct job *job_new(struct ft__store_server *s, const char *id, uint32_t world_size)
{
	struct job *j, *oldest = NULL;

	for (size_t i = 0; s->njobs == MAX_JOBS && i < s->njobs; i++)
		if (s->jobs[i]->book != NULL &&
		    (oldest == NULL || s->jobs[i]->used_ms < oldest->used_ms))
			oldest = s->jobs[i];
	if (s->njobs == MAX_JOBS && oldest == NULL)
		return NULL;
	if (oldest != NULL) {
		say(s, "job %s: its book is pushed out for job %s (%d jobs held at most): a rank "
		       "of it that joins again waits for all its ranks", oldest->id, id, MAX_JOBS);
		job_free(s, oldest);
	}
	j = calloc(1, sizeof(*j));
	if (j == NULL)
		return NULL;
	j->holder = calloc(world_size, sizeof(*j->holder));
	j->entry = calloc(world_size, sizeof(*j->entry));
	if (j->holder == NULL || j->entry == NULL) {
		free(j->holder);
		free(j->entry);
		free(j);
		return NULL;
	}
	snprintf(j->id, sizeof(j->id), "%s", id);
	j->world_size = world_size;
	s->jobs[s->njobs++] = j;
	return j;
}

/* The book, as every rank of j gets it. */
static struct answer *book_build(const struct job *j)
{
	size_t len = 0, at = FT__STORE_ANSWER_HDR;
	struct answer *a;

	for (uint32_t r = 0; r < j->world_size; r++)
		len += 1 + strlen(j->entry[r]);
	a = answer_new(FT__STORE_ANSWER_HDR + len);
	if (a == NULL)
		return NULL;
	ft__store_answer_header(a->data, FT__STORE_BOOK, j->world_size, (uint32_t)len);
	for (uint32_t r = 0; r < j->world_size; r++)
		at += ft__store_book_put(a->data + at, j->entry[r]);
	return a;
}

/* ---- connections ---------------------------------------------------------------- */

static void conn_close(struct ft__store_server *s, struct conn *c);

/* A waiting connection leaves its job: its rank's place is free again. */
static void job_leave(struct ft__store_server *s, struct conn *c)
{
	struct job *j = c->job;

	c->job = NULL;
	if (j == NULL || j->holder[c->rank] != c)
		return;
	j->holder[c->rank] = NULL;
	free(j->entry[c->rank]);
	j->entry[c->rank] = NULL;
	if (--j->joined == 0 && j->book == NULL)
		job_free(s, j);
}

/* The answer (shared by the ranks of a job), then this connection's MAC of it. */
static void conn_write(struct ft__store_server *s, struct conn *c)
{
	size_t total = c->out->len + FT__AUTH_MAC;

	while (c->out_off < total) {
		bool body = c->out_off < c->out->len;
		ssize_t n = send(c->fd,
				 body ? c->out->data + c->out_off : c->mac + (c->out_off - c->out->len),
				 body ? c->out->len - c->out_off : total - c->out_off, MSG_NOSIGNAL);
		if (n > 0) {
			c->out_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		break; /* the client went away: nothing more to do for it */
	}
	conn_close(s, c);
}

static void send_answer(struct ft__store_server *s, struct conn *c, struct answer *a)
{
	/* proves to the rank that this store holds the token, for its join */
	ft__store_answer_seal(c->mac, s->token, c->nonce, c->cnonce, a->data, a->len);
	c->state = SENDING;
	c->job = NULL;
	c->out = a;
	a->refs++;
	c->out_off = 0;
	c->deadline_ms = ft__now_ms() + SEND_MS;
	conn_write(s, c);
}

__attribute__((format(printf, 4, 5))) static void refuse(struct ft__store_server *s, struct conn *c,
							 int code, const char *fmt, ...)
{
	char why[FT__STORE_WHY_MAX];
	struct answer *a;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(why))
		n = sizeof(why) - 1;
	if (c->authed)
		say(s, "refused %s: %s", c->peer, why);
	else
		say_stranger(s, "refused %s: %s", c->peer, why);
	a = answer_new(FT__STORE_ANSWER_HDR + (size_t)n);
	if (a == NULL) {
		conn_close(s, c);
		return;
	}
	ft__store_answer_header(a->data, FT__STORE_REFUSED, (uint32_t)code, (uint32_t)n);
	memcpy(a->data + FT__STORE_ANSWER_HDR, why, (size_t)n);
	send_answer(s, c, a);
	answer_put(a);
}

static void conn_close(struct ft__store_server *s, struct conn *c)
{
	if (c->state == CLOSED)
		return;
	if (c->state == WAITING)
		job_leave(s, c);
	if (!c->authed)
		s->nunauth--;
	answer_put(c->out);
	c->out = NULL;
	close(c->fd);
	c->fd = -1;
	c->state = CLOSED;
}

static void settle(struct ft__store_server *s, struct job *j)
{
	j->book = book_build(j);
	if (j->book == NULL) {
		/*
		 * No memory for it now: the ranks see their connection close and
		 * join again. Each holder is detached before it is closed, so no
		 * close frees j under this loop; j goes after it.
		 */
		for (uint32_t r = 0; r < j->world_size; r++) {
			struct conn *c = j->holder[r];
			j->holder[r] = NULL;
			if (c != NULL) {
				c->job = NULL;
				conn_close(s, c);
			}
		}
		job_free(s, j);
		return;
	}
	if (s->verbose)
		say(s, "job %s: every one of its %u ranks joined; book sent", j->id,
		    j->world_size);
	for (uint32_t r = 0; r < j->world_size; r++) {
		struct conn *c = j->holder[r];
		j->holder[r] = NULL;
		if (c != NULL) /* NULL: a rank gone (GONE) */
			send_answer(s, c, j->book);
	}
}

/* A join to a settled job: a restarted rank (or a retry); its entry is the newest. */
static void rejoin(struct ft__store_server *s, struct job *j, struct conn *c, const struct ft__store_join *m)
{
	char *e = j->entry[m->rank];

	if (strcmp(e, m->entry) != 0) {
		struct answer *a;
		char *copy = strdup(m->entry);
		if (copy == NULL) {
			refuse(s, c, FT_ENOMEM, "out of memory");
			return;
		}
		j->entry[m->rank] = copy;
		a = book_build(j);
		if (a == NULL) {
			j->entry[m->rank] = e;
			free(copy);
			refuse(s, c, FT_ENOMEM, "out of memory");
			return;
		}
		say(s, "job %s: rank %u joined again at %s (was %s)", j->id, m->rank, m->entry, e);
		free(e);
		answer_put(j->book);
		j->book = a;
	}
	send_answer(s, c, j->book);
}

/* Whether join m fits job j: NULL, or why not (and the code to answer). */
static const char *misfit(const struct job *j, const struct ft__store_join *m, int *code,
			  char *why, size_t cap)
{
	*code = j == NULL ? FT_EBUSY : m->world_size != j->world_size ? FT_EMISMATCH : 0;
	if (j == NULL)
		snprintf(why, cap, "no room for job %s (%d jobs assembling, or out of memory)",
			 m->job, MAX_JOBS);
	else if (m->world_size != j->world_size)
		snprintf(why, cap, "rank %u says job %s has %u ranks; it has %u", m->rank, m->job,
			 m->world_size, j->world_size);
	else if (j->book == NULL && j->holder[m->rank] != NULL &&
		 strcmp(j->entry[m->rank], m->entry) != 0) {
		*code = FT_EBUSY;
		snprintf(why, cap, "rank %u of job %s is held by a live process at %s", m->rank,
			 m->job, j->entry[m->rank]);
	}
	return *code != 0 ? why : NULL;
}

/* The job takes c as the holder of rank m->rank; the book goes out when it is full. */
static void hold(struct ft__store_server *s, struct job *j, struct conn *c, const struct ft__store_join *m)
{
	struct conn *old = j->holder[m->rank];

	if (old != NULL) {
		/* the same rank and address again (a retry): the newest connection waits */
		old->job = NULL;
		conn_close(s, old);
	} else if (j->entry[m->rank] != NULL) {
		/* marked gone (no holder, yet an entry), and now restarted: its place is
		 * taken back, still counted */
		char *copy = strdup(m->entry);
		if (copy == NULL) {
			refuse(s, c, FT_ENOMEM, "out of memory");
			return;
		}
		free(j->entry[m->rank]);
		j->entry[m->rank] = copy;
		say(s, "job %s: rank %u, marked gone, joined (a restart)", j->id, m->rank);
	} else if ((j->entry[m->rank] = strdup(m->entry)) == NULL) {
		if (j->joined == 0)
			job_free(s, j);
		refuse(s, c, FT_ENOMEM, "out of memory");
		return;
	} else {
		j->joined++;
	}
	j->holder[m->rank] = c;
	c->state = WAITING;
	c->deadline_ms = ft__now_ms() + WAIT_MS;
	c->job = j;
	c->rank = m->rank;
	if (j->joined == j->world_size)
		settle(s, j);
}

/* Whether some live connection waits for j's book. */
static bool job_awaited(const struct job *j)
{
	for (uint32_t r = 0; r < j->world_size; r++)
		if (j->holder[r] != NULL)
			return true;
	return false;
}

/* A join of len bytes at c->in, parsed into m: nothing changes unless it proves the token. */
static void on_join(struct ft__store_server *s, struct conn *c, const struct ft__store_join *m, size_t len)
{
	struct job *j;
	char why[FT__STORE_WHY_MAX];
	int code;

	if (s->auth && !ft__store_join_auth_ok(c->in, len, s->token, c->nonce)) {
		refuse(s, c, FT_EAUTH,
		       "rank %u of job %s: its join does not prove the store's token", m->rank,
		       m->job);
		return;
	}
	c->authed = true;
	s->nunauth--;
	if (s->only[0] != '\0' && strcmp(m->job, s->only) != 0) {
		refuse(s, c, FT_ECONFIG, "rank %u of job %s: this store serves job %s only",
		       m->rank, m->job, s->only);
		return;
	}
	j = job_find(s, m->job);
	if (j == NULL)
		j = job_new(s, m->job, m->world_size);
	if (misfit(j, m, &code, why, sizeof(why)) != NULL) {
		refuse(s, c, code, "%s", why);
		return;
	}
	j->used_ms = ft__now_ms();
	if (j->book != NULL)
		rejoin(s, j, c, m);
	else
		hold(s, j, c, m);
}

static void read_join(struct ft__store_server *s, struct conn *c)
{
	struct ft__store_join m;
	const char *why;
	ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n <= 0) {
		conn_close(s, c);
		return;
	}
	c->in_len += (size_t)n;
	if (c->in_len >= FT__STORE_JOIN_HDR)
		memcpy(c->cnonce, c->in + 20, FT__AUTH_NONCE);
	n = ft__store_join_parse(c->in, c->in_len, &m, &why);
	if (n == -FT_EPROTO) {
		say_stranger(s, "closed %s: %s", c->peer, why);
		conn_close(s, c);
	} else if (n == -FT_EINVAL) {
		refuse(s, c, FT_EINVAL, "%s", why);
	} else if (n > 0 && (size_t)n != c->in_len) {
		refuse(s, c, FT_EPROTO, "bytes after the join");
	} else if (n > 0) {
		on_join(s, c, &m, (size_t)n);
	}
}

/* A waiting connection says nothing more: anything it sends is its end. */
static void read_waiting(struct ft__store_server *s, struct conn *c)
{
	unsigned char b;
	ssize_t n = recv(c->fd, &b, 1, 0);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n > 0)
		say_stranger(s, "closed %s: bytes after its join", c->peer);
	conn_close(s, c);
}

static void conn_event(struct ft__store_server *s, struct conn *c, short revents)
{
	if (c->state == SENDING && (revents & (POLLOUT | POLLERR | POLLHUP)))
		conn_write(s, c);
	else if (c->state == READING && (revents & (POLLIN | POLLERR | POLLHUP)))
		read_join(s, c);
	else if (c->state == WAITING && (revents & (POLLIN | POLLERR | POLLHUP)))
		read_waiting(s, c);
}

/* The oldest connection that proved no token leaves for a new one. */
static void evict_unauth(struct ft__store_server *s)
{
	for (size_t i = 0; i < s->nconns; i++) {
		struct conn *c = s->conns[i];
		if (c->state != CLOSED && !c->authed) {
			if (s->verbose)
				say_stranger(s, "closed %s: %d unauthenticated connections, it the oldest",
				    c->peer, MAX_UNAUTH);
			conn_close(s, c);
			return;
		}
	}
}

/* Sends c its challenge, a fresh nonce: 0, or -1 (c is to be closed). */
static int challenge(struct conn *c)
{
	unsigned char m[FT__STORE_CHALLENGE_LEN];

	if (ft__auth_random(c->nonce, sizeof(c->nonce)) != 0)
		return -1;
	ft__store_challenge_encode(m, c->nonce);
	/* a fresh socket's buffer takes these few bytes whole */
	return send(c->fd, m, sizeof(m), MSG_NOSIGNAL) == (ssize_t)sizeof(m) ? 0 : -1;
}

static void accept_all(struct ft__store_server *s)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		char host[NI_MAXHOST], port[NI_MAXSERV];
		struct conn *c;
		int fd = accept4(s->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			       errno == ENOMEM)) {
			say(s, "cannot accept (%s): pausing %d ms", strerror(errno), ACCEPT_PAUSE_MS);
			s->accept_at_ms = ft__now_ms() + ACCEPT_PAUSE_MS;
			return;
		}
		if (fd < 0 && (errno == EINTR || errno == ECONNABORTED || errno == EPROTO))
			continue;
		if (fd < 0)
			return; /* EAGAIN: no more waiting */
		if (s->nconns == s->cap) {
			size_t cap = s->cap ? 2 * s->cap : 64;
			struct conn **p = realloc(s->conns, cap * sizeof(*p));
			if (p == NULL) {
				close(fd);
				continue;
			}
			s->conns = p;
			s->cap = cap;
		}
		if ((c = calloc(1, sizeof(*c))) == NULL) {
			close(fd);
			continue;
		}
		/* keepalive: a waiting rank whose host vanished frees its place (in ~10 s) */
		ft__sock_tune(fd, &(struct ft__sock_opts){.keepalive_ms = FT__STORE_DEAD_MS,
							  .user_timeout_ms = FT__STORE_DEAD_MS});
		c->fd = fd;
		c->state = READING;
		c->deadline_ms = ft__now_ms() + JOIN_MS;
		if (challenge(c) != 0) {
			close(fd);
			free(c);
			continue;
		}
		if (s->nunauth >= MAX_UNAUTH)
			evict_unauth(s);
		s->nunauth++;
		if (getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port, sizeof(port),
				NI_NUMERICHOST | NI_NUMERICSERV) == 0)
			snprintf(c->peer, sizeof(c->peer), "%s:%s", host, port);
		else
			snprintf(c->peer, sizeof(c->peer), "a client");
		s->conns[s->nconns++] = c;
	}
}

/* ---- the interface ---------------------------------------------------------------- */

int ft__store_server_open(struct ft__store_server **sp, const char *host, const char *port, const char *token,
	       int verbose, store_say_fn *say_fn, void *arg, char *addr, size_t addrlen)
{
	struct ft__store_server *s;
	int rc;

	*sp = NULL;
	if (token != NULL && strlen(token) >= sizeof(s->token))
		return -FT_EINVAL;
	if ((s = calloc(1, sizeof(*s))) == NULL)
		return -FT_ENOMEM;
	s->auth = token != NULL;
	if (token != NULL)
		snprintf(s->token, sizeof(s->token), "%s", token);
	rc = ft__sock_listen_at("store", host, port, 1024, &s->fd, addr, addrlen);
	if (rc != 0) {
		free(s);
		return rc;
	}
	s->verbose = verbose;
	s->say_fn = say_fn;
	s->arg = arg;
	*sp = s;
	return 0;
}

int ft__store_server_serve_only(struct ft__store_server *s, const char *job)
{
	if (ft__store_job_check(job, strlen(job)) != 0)
		return -FT_EINVAL;
	snprintf(s->only, sizeof(s->only), "%s", job);
	return 0;
}

size_t ft__store_server_poll_count(const struct ft__store_server *s)
{
	return 1 + s->nconns;
}

size_t ft__store_server_poll_fill(struct ft__store_server *s, struct pollfd *pfds)
{
	pfds[0] = (struct pollfd){.fd = s->accept_at_ms == 0 ? s->fd : -1, .events = POLLIN};
	for (size_t i = 0; i < s->nconns; i++) {
		const struct conn *c = s->conns[i];
		pfds[1 + i] = (struct pollfd){.fd = c->fd,
					      .events = c->state == SENDING ? POLLOUT : POLLIN};
	}
	return 1 + s->nconns;
}

int ft__store_server_poll_timeout(const struct ft__store_server *s)
{
	int64_t next = s->accept_at_ms;

	for (size_t i = 0; i < s->nconns; i++) {
		const struct conn *c = s->conns[i];
		if (c->state != CLOSED && (next == 0 || c->deadline_ms < next))
			next = c->deadline_ms;
	}
	return next == 0 ? -1 : ft__ms_left(next);
}

static void expire(struct ft__store_server *s, int64_t now)
{
	for (size_t i = 0; i < s->nconns; i++) {
		struct conn *c = s->conns[i];
		if (c->state == CLOSED || now < c->deadline_ms)
			continue;
		if (c->state == READING)
			say_stranger(s, "closed %s: no join within %d ms", c->peer, JOIN_MS);
		else if (c->state == SENDING)
			say_stranger(s, "closed %s: it did not take its answer within %d ms", c->peer,
			    SEND_MS);
		else if (s->verbose)
			say(s, "closed %s: rank %u of job %s waited %d ms (it joins again)",
			    c->peer, c->rank, c->job->id, WAIT_MS);
		conn_close(s, c);
	}
}

void ft__store_server_handle(struct ft__store_server *s, const struct pollfd *pfds, size_t n)
{
	size_t j = 0;
	int64_t now = ft__now_ms();

	/* pfds[1 + i] is conns[i] as store_poll_fill saw them: new ones come after */
	for (size_t i = 1; i < n && i - 1 < s->nconns; i++) {
		struct conn *c = s->conns[i - 1];
		if (c->state != CLOSED && pfds[i].fd == c->fd && pfds[i].revents != 0)
			conn_event(s, c, pfds[i].revents);
	}
	expire(s, now);
	if (s->accept_at_ms != 0 && now >= s->accept_at_ms)
		s->accept_at_ms = 0;
	else if (n > 0 && pfds[0].fd == s->fd && (pfds[0].revents & POLLIN))
		accept_all(s);
	for (size_t i = 0; i < s->nconns; i++) {
		if (s->conns[i]->state == CLOSED)
			free(s->conns[i]);
		else
			s->conns[j++] = s->conns[i];
	}
	s->nconns = j;
}

/*
 * Rank of settled job j died: its entry in the book becomes GONE, so that
 * the others, if they are still settling the job's first view, learn it
 * when they ask again (a join with their own entry: rejoin()). No memory:
 * the book stays, and they wait as they would without the word.
 */
static void mark_settled(struct ft__store_server *s, struct job *j, uint32_t rank)
{
	char *e = j->entry[rank], *gone;
	struct answer *a;

	if (strcmp(e, GONE) == 0 || (gone = strdup(GONE)) == NULL)
		return;
	j->entry[rank] = gone;
	if ((a = book_build(j)) == NULL) {
		j->entry[rank] = e;
		free(gone);
		return;
	}
	free(e);
	answer_put(j->book);
	j->book = a;
	say(s, "job %s: rank %u died after the book went out: it is marked gone in it", j->id,
	    rank);
}

void ft__store_server_rank_died(struct ft__store_server *s, const char *job, uint32_t world_size, uint32_t rank)
{
	struct job *j;
	struct conn *c;

	if (world_size < 1 || world_size > FT__STORE_MAX_RANKS || rank >= world_size ||
	    ft__store_job_check(job, strlen(job)) != 0 ||
	    (s->only[0] != '\0' && strcmp(job, s->only) != 0))
		return;
	if ((j = job_find(s, job)) == NULL && (j = job_new(s, job, world_size)) == NULL)
		return; /* no room: the ranks wait, as they would without the word */
	if (j->world_size != world_size)
		return; /* a misfit: not ours to mark */
	if (j->book != NULL) {
		mark_settled(s, j, rank);
		return;
	}
	c = j->holder[rank];
	if (c != NULL) {
		/*
		 * Its process died after it joined: the kernel closed its
		 * connection, which the poll loop has not read yet. One that
		 * still reads as open is not the dead process's alone (a forked
		 * child may hold it): the rank stays awaited, as before.
		 */
		struct pollfd p = {.fd = c->fd, .events = POLLIN};
		if (poll(&p, 1, 0) != 1)
			return;
		read_waiting(s, c);
		if (c->state != CLOSED)
			return;
		/* its leaving may have freed the job */
		if ((j = job_find(s, job)) == NULL && (j = job_new(s, job, world_size)) == NULL)
			return;
	}
	if (j->entry[rank] != NULL)
		return; /* marked already */
	if ((j->entry[rank] = strdup(GONE)) == NULL) {
		if (j->joined == 0)
			job_free(s, j);
		return;
	}
	j->joined++;
	say(s, "job %s: rank %u died before the book went out: it is marked gone", j->id, rank);
	if (j->joined == j->world_size && job_awaited(j))
		settle(s, j);
}

void ft__store_server_close(struct ft__store_server *s)
{
	if (s == NULL)
		return;
	for (size_t i = 0; i < s->nconns; i++) {
		conn_close(s, s->conns[i]);
		free(s->conns[i]);
	}
	while (s->njobs > 0)
		job_free(s, s->jobs[0]);
	free(s->conns);
	close(s->fd);
	free(s);
}
