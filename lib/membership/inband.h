/* inband.h: the in-band membership backend's own state and message codec, shared by its files (member_inband.c: the protocol; inband_links.c: links and the table of views; inband_rejoin.c: new incarnations; inband_wire.c: the codec; inband_backend.c: the backend's operations). */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_INBAND_H
#define FTCC_INBAND_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "ctl.h"
#include "internal.h"
#include "membership.h"

#define MB_VERSION 1
#define MAX_WORLD FT__INBAND_MAX_WORLD
#define RETRY_MS 20
/* generation 0, PMIx book: a listener that refused this many times over this long is gone */
#define REFUSED_GONE 3
#define REFUSED_GONE_MS 200
#define RECHECK_MS 250          /* generation 0 unsettled: ask the store again */
#define ASK_AGAIN_MS 100        /* a newcomer asks again (ASK: a rank held no view; REJOIN) */
#define PROPOSE_AGAIN_MS 200    /* a coordinator proposes again to acceptors that did not answer */
#define ASK_MS 1000             /* later: how long the store's marks are waited for */
#define NOT_YET 1               /* ft__ib_send_to: the link is still connecting */
#define COMMITTED UINT64_MAX    /* the ballot of a value reported as committed */
#define ROUND_MAX ((uint64_t)UINT32_MAX) /* see ballot_ok */

/* A new incarnation's record for a generation (inband_rejoin.c): its own (link, the one
 * it came on) or relayed by a member that settles it (link -1). */
struct ib_back {
	bool have;
	uint32_t gen;
	int link;
	uint64_t next_op;
	char addr[FT__ADDR_MAX];
	char ctrl[FT__CTRL_MAX];
	char mb[FT__BOOK_ENTRY_MAX];    /* its membership listener */
};

struct ib_rank {
	int link;               /* index in ctl.links, -1 none */
	int64_t retry_ms;       /* generation 0: when to connect again */
	int64_t refused_ms;     /* generation 0, PMIx book: its listener refuses since, 0 not */
	int refused;            /* ... this many times */
	bool certain;           /* its death is certain */
	bool left;              /* ... it said goodbye first: it finalized (ib_depart) */
	int64_t awaited_ms;     /* the generation being settled: since when its coordinator
				 * awaits a new incarnation of it (dead for certain), 0 not */
	bool gone;              /* the book marks it gone: never in generation 0 */
	bool late;              /* ... marked after the book went out (late_gone) */
	/* the generation being settled, coordinator's side */
	bool asked, replied, proposed, accepted, told;
	uint64_t next_op;
	/* addresses (of generation 0) */
	bool have_addr;
	char addr[FT__ADDR_MAX];
	char ctrl[FT__CTRL_MAX];
	struct ib_back back;    /* a new incarnation of it asking back */
	bool answered;          /* a newcomer's: it answered this rank's ASK with a view */
	bool heard;             /* ... or at least that it lives (none settled yet) */
	bool counts_me;         /* ... and that its book holds this incarnation's listener:
				 * the job's first view awaits this process */
	bool sent;              /* ... its ASK or REJOIN went to it (on the current link) */
	uint32_t collect_gen;   /* the latest generation it asked this rank about (its COLLECT) */
};

struct ib_value {
	uint64_t ballot;        /* 0: none */
	uint64_t first_op, nonce;
	int n;
	int *members;
	uint64_t *next_ops;     /* each member's first op it lacks a result of */
	uint8_t *fresh;         /* each member: IB_FRESH_* (inband_rejoin.c) */
};

/* A member of a value: old (0); a new incarnation this generation takes in,
 * whose record the value's members must hold (NEW); or one an earlier
 * generation took in that is still owed the state, at the value's first op
 * (OWED) or the op after it (OWED_NEXT): a newcomer holds no view older than
 * the one before its own, so the value carries what those said. */
enum { IB_FRESH_OLD, IB_FRESH_NEW, IB_FRESH_OWED, IB_FRESH_OWED_NEXT };

struct inband {
	pthread_mutex_t lock;
	struct ft__ctl ctl;
	bool ctl_open;
	int rank, world;
	int reply_wait_ms;
	char (*book)[FT__BOOK_ENTRY_MAX];
	struct ib_rank *r;
	bool departed;
	struct ft__book_params book_params;     /* ended at close (bootstrap.h) */
	bool book_taken;
	int64_t recheck_ms;     /* generation 0: when to ask the store again */
	/* after generation 0: the store asked for its marks (launchers_word) */
	pthread_t asker;
	pid_t asker_pid;        /* the process whose thread it is, 0 none to join */
	bool asking;
	uint32_t word_gen;      /* the generation the marks were had for, +1 (0 none) */

	/* a new incarnation looking for its running job (inband_rejoin.c) */
	uint32_t incarnation;
	int start_wait_ms;      /* rejoin: a candidate dead for certain is awaited this long
				 * for a new incarnation (ft__mb_params); 0: not awaited */
	bool newcomer;          /* it found one: views come from its members' word */
	uint32_t taken_gen;     /* ... the generation that took it (newcomer false again) */
	int64_t rejoin_ms;      /* when it last sent its REJOIN round */
	bool started;           /* a view is held here: the job's first view is past (a
				 * rank that rejoined never holds generation 0's) */

	/* views settled here, by generation, and the values they came from */
	struct ft__view *views;
	struct ib_value *values;
	uint32_t nviews;

	/* the generation being settled (0 with !active: none) */
	bool active;
	uint32_t gen;
	bool published;
	struct ft__member mine;
	uint64_t promised;
	int64_t promised_ms;    /* when this rank last promised (or accepted) a ballot */
	struct ib_value accepted;
	int owed_to;            /* a COLLECT to answer once published, -1 none */
	int owed_link;
	uint64_t owed_ballot;
	uint32_t newest_asked;  /* highest generation a peer asked this rank about */
	uint32_t future_gen;    /* ... and the COLLECT to answer when it begins it */
	int future_from, future_link;
	uint64_t future_ballot;
	bool future_zero;       /* ... a COLLECT of generation 0 a newcomer kept (start_again) */
	bool noquorum;

	/* coordinating it */
	uint64_t ballot;        /* 0: not coordinating */
	int phase;              /* 1 collect, 2 propose */
	int64_t phase_ms;
	uint64_t max_round;     /* highest round seen in any ballot */
	struct ib_value best;   /* best reported value (committed wins) */
	bool best_committed;
	struct ib_value proposal;
};

static inline struct inband *IB(struct ft__mb *mb)
{
	return mb->be;
}

static inline const struct ft__view *view_of(const struct inband *b, uint32_t gen)
{
	if (gen >= b->nviews || b->views[gen].members == NULL)
		return NULL;
	return &b->views[gen];
}

/* The newest view held here (NULL: none yet). */
static inline const struct ft__view *newest_view(const struct inband *b)
{
	for (uint32_t g = b->nviews; g-- > 0;)
		if (b->views[g].members != NULL)
			return &b->views[g];
	return NULL;
}

/* Whether view v holds rank r. */
static inline bool view_has(const struct ft__view *v, int r)
{
	for (int i = 0; v != NULL && i < v->size; i++)
		if (v->members[i] == r)
			return true;
	return false;
}

/* The committed value of generation gen (NULL: none). */
static inline const struct ib_value *value_of(const struct inband *b, uint32_t gen)
{
	return view_of(b, gen) != NULL ? &b->values[gen] : NULL;
}

/* ---- the wire ---- */

/* A little writer and reader over a payload; a short read poisons the reader. */
struct wbuf {
	unsigned char *p;
	size_t len, cap;
	bool bad;
};

static inline void put(struct wbuf *w, const void *v, size_t n)
{
	if (w->len + n > w->cap) {
		w->bad = true;
		return;
	}
	memcpy(w->p + w->len, v, n);
	w->len += n;
}

static inline void put_u64(struct wbuf *w, uint64_t v)
{
	put(w, &v, sizeof(v));
}

static inline void put_i32(struct wbuf *w, int32_t v)
{
	put(w, &v, sizeof(v));
}

static inline void put_str(struct wbuf *w, const char *s)
{
	size_t n = strlen(s);
	uint16_t l = (uint16_t)n;

	put(w, &l, sizeof(l));
	put(w, s, n);
}

struct rbuf {
	const unsigned char *p;
	size_t len, off;
	bool bad;
};

static inline void get(struct rbuf *r, void *v, size_t n)
{
	if (r->bad || r->off + n > r->len) {
		r->bad = true;
		memset(v, 0, n);
		return;
	}
	memcpy(v, r->p + r->off, n);
	r->off += n;
}

static inline uint64_t get_u64(struct rbuf *r)
{
	uint64_t v;

	get(r, &v, sizeof(v));
	return v;
}

static inline int32_t get_i32(struct rbuf *r)
{
	int32_t v;

	get(r, &v, sizeof(v));
	return v;
}

/* A string into dst (cap with the NUL); too long or holding a NUL: bad. */
static inline void get_str(struct rbuf *r, char *dst, size_t cap)
{
	uint16_t l;

	get(r, &l, sizeof(l));
	if (r->bad || l >= cap || r->off + l > r->len || memchr(r->p + r->off, 0, l) != NULL) {
		r->bad = true;
		dst[0] = '\0';
		return;
	}
	memcpy(dst, r->p + r->off, l);
	dst[l] = '\0';
	r->off += l;
}

/*
 * RECORD: the ballot it answers, the sender's next op and addresses, the
 * ranks whose death it knows to be certain (a bitmap of the world: ranks
 * listed as int32 took 4 bytes each, and with the view, 16 a rank, pushed
 * a RECORD of 4096 ranks past the 65535 bytes a control message carries),
 * and the view it accepted (kind 1) or saw committed (kind 2), if any.
 */
struct ib_record {
	uint64_t ballot, next_op;
	char addr[FT__ADDR_MAX];
	char ctrl[FT__CTRL_MAX];
	const unsigned char *certain;   /* (world + 7) / 8 bytes, in the payload */
	int32_t kind;
	struct ib_value v;
};

#define VALUE_BYTES(n) (28 + 13 * (size_t)(n))
#define RECORD_BYTES(n) (16 + 2 + (FT__ADDR_MAX - 1) + 2 + (FT__CTRL_MAX - 1) + \
			 ((size_t)(n) + 7) / 8 + 4 + VALUE_BYTES(n))

static inline bool bit(const unsigned char *map, int i)
{
	return (map[i / 8] >> (i % 8)) & 1;
}

/* Whether the book came from PMIx: each entry was put there listening (see the top). */
static inline bool pmix_book(const struct inband *b)
{
	return b->book_taken && strcmp(b->book_params.how, "pmix") == 0;
}

/* Whether it came from ftcc-run's store, which marks the ranks it saw die (see the top). */
static inline bool store_book(const struct inband *b)
{
	return b->book_taken && strcmp(b->book_params.how, "store") == 0;
}

/* inband_wire.c: values and their codec (the sizes: see member_inband.c's top) */
void ft__ib_value_free(struct ib_value *v);
int ft__ib_value_alloc(struct ib_value *v, int n);
int ft__ib_value_copy(struct ib_value *dst, const struct ib_value *src);
bool ft__ib_value_same(const struct ib_value *a, const struct ib_value *b);
void ft__ib_put_value(struct wbuf *w, const struct ib_value *v);
void ft__ib_get_value(struct rbuf *r, int world, struct ib_value *v);
void ft__ib_put_record(struct wbuf *w, const struct ib_record *rec, const struct ib_rank *ranks,
		       int world);
void ft__ib_get_record(struct rbuf *r, int world, struct ib_record *rec);


/* inband_links.c: links to the ranks' listeners, the table of views, the settle's start */
void ft__ib_drop(struct inband *b, int i);
void ft__ib_mark_certain(struct inband *b, int r, const char *why);
void ft__ib_late_gone(struct inband *b, int r, const char *why);
void ft__ib_link_failed(struct inband *b, int i, int rc);
int ft__ib_link_to(struct inband *b, int r);
int ft__ib_send_to(struct inband *b, int r, enum ft__ctl_type type, const struct wbuf *w);
void ft__ib_reply(struct inband *b, int i, uint32_t gen, enum ft__ctl_type type,
		  const struct wbuf *w);
int ft__ib_commit(struct inband *b, uint32_t gen, struct ib_value *v);
int ft__ib_hold_view(struct inband *b, uint32_t gen, struct ib_value *v);
void ft__ib_begin(struct inband *b, uint32_t gen);

/* member_inband.c: the protocol (see its top) */
void ft__ib_pump(struct inband *b);
void ft__ib_answer_collect(struct inband *b, int from, int link, uint64_t ballot);
int ft__ib_coordinate(struct inband *b, const int *cand, int ncand, const int *back, int nback,
		       bool force);
void ft__ib_on_msg(struct inband *b, int link, const struct ft__ctl_msg *m);

/* inband_rejoin.c: new incarnations (see its top) */
void ft__ib_on_ask(struct inband *b, int from, int link, struct rbuf *r);
void ft__ib_on_rejoin(struct inband *b, int from, int link, uint32_t gen, struct rbuf *r);
void ft__ib_on_addrs(struct inband *b, int from, uint32_t gen, struct rbuf *r);
void ft__ib_on_latest(struct inband *b, int from, uint32_t gen, struct rbuf *r);
bool ft__ib_back_live(const struct inband *b, int e, uint32_t gen);
bool ft__ib_fresh_known(const struct inband *b, int e, uint32_t gen);
void ft__ib_add_back(struct inband *b, struct ib_value *v, const int *back, int nback);
void ft__ib_carry_owed(const struct inband *b, struct ib_value *v);
int ft__ib_send_fresh(struct inband *b, int to, uint32_t gen, const struct ib_value *v);
void ft__ib_fresh_on_link(struct inband *b, int i, uint32_t gen, const struct ib_value *v);
void ft__ib_tell_newcomers(struct inband *b, uint32_t gen, const struct ib_value *v);
void ft__ib_install_fresh(struct inband *b, uint32_t gen, const struct ib_value *v);
void ft__ib_newcomer_tick(struct inband *b);
int ft__ib_newcomer_view(struct inband *b, uint32_t gen, const struct ft__view **view);
int ft__ib_lookup_unsettled(const struct inband *b, uint32_t gen, int orig, struct ft__member *m);

/* inband_backend.c: the launcher's word (ft__ib_coordinate asks it) */
bool ft__ib_launchers_word(struct inband *b);

#endif
