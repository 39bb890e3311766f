/* member_inband.c: the in-band membership backend: views settled among the ranks over control links, no shared file system. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "bootstrap.h"
#include "ctl.h"
#include "sock.h"
#include "internal.h"
#include "membership.h"

/*
 * Every rank listens for membership links at the address the bootstrap
 * gave it (bootstrap.h: a peer list, PMIx or ftcc-run's store), so each
 * rank holds every rank's membership address from the start: the address
 * book. A generation's view is settled by a single-decree Paxos among the
 * members of the previous view (the acceptors):
 *
 * - The coordinator, the lowest candidate (a member not known failed), or
 *   any candidate once the detector says it waited long enough (force),
 *   picks a ballot (round << 16 | rank) above any it has seen and sends
 *   COLLECT to every candidate.
 * - A candidate that has published its record for the generation answers
 *   RECORD: its next op, its addresses, the ranks whose death it knows to
 *   be certain, and the view it accepted or saw committed, if any; it
 *   promises to take no lower ballot (a lower one gets NACK).
 * - Once every candidate answered (or, under force, after a reply window),
 *   the coordinator picks the value: a committed view if one was reported,
 *   else the accepted view of the highest ballot, else a new view of those
 *   that answered. It must have a quorum (below), else under force it tells
 *   those that answered NOQUORUM and every one of them, itself included,
 *   stops with -FT_EPARTITIONED.
 * - PROPOSE goes to the acceptors that answered; each ACCEPTs unless it
 *   promised a higher ballot. When every one of them accepted (or lost its
 *   link, having a quorum all the same), COMMIT goes to every candidate
 *   that answered; the view of generation 0 is preceded by BOOK messages
 *   holding every member's data and control addresses (later generations
 *   keep the addresses of generation 0: a live process keeps its
 *   listeners).
 *
 * Quorum: the acceptors in favour must be more than half of the previous
 * view's members whose death is not certain, or exactly half when they
 * include the lowest such member. Certain deaths must be true, or two sides
 * of a partition could both have a quorum; crashes alone can still shrink
 * the job to one rank. A death is certain (after generation 0) on proof:
 * - a link of this rank's own to the rank's membership listener, on which
 *   the rank proved the job's token (its ACK came), closed by the peer's
 *   kernel (FIN or RST, -FT_EPEERFAILED): the process that held it died or
 *   left (depart closes every link; a live rank keeps the links others
 *   opened to it, even when an answer does not fit: reply);
 * - the detector's word (certain(): its own link closed by the kernel);
 * - the launcher's word: ftcc-run's store marks in its book every rank
 *   whose process it saw die by a signal, and a coordinator short of a
 *   quorum at its force window asks it once a generation before it stops
 *   (launchers_word);
 * - another rank's RECORD naming it, by the same proofs there.
 * A refused connection is not proof: the listener's accept queue may be
 * full, or the address may now be a new incarnation's. Nor is a link closed
 * before the peer answered the hello (a full table or an unauthenticated
 * slot closed, a process at that address that is not the rank), nor a
 * timeout or silence: all of these are suspicion, which only a settle that
 * waited long enough (force) goes on without.
 *
 * Generation 0 needs every rank (no force): a refused connection then only
 * means the rank has not started yet, and is tried again. The one
 * exception is a rank the book marks gone (an empty entry: ftcc-run saw
 * its process die before it joined its store, bootstrap.h): its death is
 * certain from the start, it is never connected to, and the view of
 * generation 0 holds none of the ranks so marked. Every rank got the
 * same book, so all agree on that without a word, and the coordinator is
 * the lowest rank not marked.
 *
 * A rank that dies after the book went out but before generation 0 is
 * settled is marked gone by ftcc-run in the store's book as it stands
 * (store_rank_died): a rank still settling generation 0 asks the store
 * for the book again every RECHECK_MS (recheck_book), and a rank newly
 * marked there is gone here too (late_gone: certain, never awaited,
 * never the coordinator). Ranks learn it at different moments, so at
 * generation 0 a value may leave out ranks this rank still thinks alive,
 * which it takes on the sender's word (an authenticated member of the
 * job, as for a COMMIT below), and may hold a rank gone late (one that
 * answered before it died: the view then has it, and the detector
 * recovers from its death as from any other). A coordinator never picks a
 * reported value that is only accepted and holds a rank gone late, and
 * restarts a round whose proposal holds one: that value was not chosen,
 * for the dead rank never accepted (or, were it the coordinator, the ranks
 * it told report it committed), and a COMMIT of a lower ballot than the
 * one a rank promised since is ignored at generation 0.
 *
 * Under PMIx no launcher's word comes, but the book says as much: a rank
 * puts its address there only once its listener listens, and a listener
 * closes only with its process (or its ft_init, which then fails: the rank
 * is out of the job either way). So at generation 0 a rank whose listener,
 * taken from a PMIx book, refuses REFUSED_GONE connections in a row over at
 * least REFUSED_GONE_MS is gone too (late_gone). A peer list is written by hand before any rank
 * listens: a refusal there may be a rank not started yet, and such a death
 * still makes every ft_init time out (README, "A job's first view").
 *
 * What a message can move is bounded by what this rank itself settled: it
 * takes a COMMIT only for the generation it is settling or the next one,
 * once it holds the view before it, and only a view that fits that one
 * (on_commit); a COLLECT only for those (a later one neither sets the
 * detector recovering nor waits to be answered); a ballot only when a
 * coordinator can have made it (ballot_ok), so that no promise is beyond
 * every coordinator's reach. Every allocation a message drives is at most
 * the world's size, checked against the bytes the message holds.
 *
 * Sizes: the largest message is a RECORD (RECORD_BYTES: about 12 bytes a
 * rank, 50034 bytes at MAX_WORLD), within the 65535 a control message
 * carries (ft__inband_codec_check, test_inband_codec).
 *
 * Threads: one mutex guards everything; the detector thread pumps and
 * settles, the main thread looks up addresses.
 */

#define MB_VERSION 1
#define MAX_WORLD FT__INBAND_MAX_WORLD
#define RETRY_MS 20
/* generation 0, PMIx book: a listener that refused this many times over this long is gone */
#define REFUSED_GONE 3
#define REFUSED_GONE_MS 200
#define RECHECK_MS 250          /* generation 0 unsettled: ask the store again */
#define ASK_MS 1000             /* later: how long the store's marks are waited for */
#define COMMITTED UINT64_MAX    /* the ballot of a value reported as committed */
#define ROUND_MAX ((uint64_t)UINT32_MAX) /* see ballot_ok */

struct ib_rank {
	int link;               /* index in ctl.links, -1 none */
	int64_t retry_ms;       /* generation 0: when to connect again */
	int64_t refused_ms;     /* generation 0, PMIx book: its listener refuses since, 0 not */
	int refused;            /* ... this many times */
	bool certain;           /* its death is certain */
	bool gone;              /* the book marks it gone: never in generation 0 */
	bool late;              /* ... marked after the book went out (late_gone) */
	/* the generation being settled, coordinator's side */
	bool asked, replied, proposed, accepted, told;
	uint64_t next_op;
	/* addresses (of generation 0) */
	bool have_addr;
	char addr[FT__ADDR_MAX];
	char ctrl[FT__CTRL_MAX];
};

struct ib_value {
	uint64_t ballot;        /* 0: none */
	uint64_t first_op, nonce;
	int n;
	int *members;
	uint64_t *next_ops;     /* each member's first op it lacks a result of */
};

struct inband {
	pthread_mutex_t lock;
	struct ft__ctl ctl;
	bool ctl_open;
	int rank, world;
	int ngone;              /* ranks the book marks gone */
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
	struct ib_value accepted;
	int owed_to;            /* a COLLECT to answer once published, -1 none */
	int owed_link;
	uint64_t owed_ballot;
	uint32_t newest_asked;  /* highest generation a peer asked this rank about */
	uint32_t future_gen;    /* ... and the COLLECT to answer when it begins it */
	int future_from, future_link;
	uint64_t future_ballot;
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

static struct inband *IB(struct ft__mb *mb)
{
	return mb->be;
}

static void value_free(struct ib_value *v)
{
	free(v->members);
	free(v->next_ops);
	*v = (struct ib_value){0};
}

static int value_alloc(struct ib_value *v, int n)
{
	v->members = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
	v->next_ops = malloc((size_t)(n > 0 ? n : 1) * sizeof(uint64_t));
	if (v->members == NULL || v->next_ops == NULL) {
		value_free(v);
		return -FT_ENOMEM;
	}
	return 0;
}

static int value_copy(struct ib_value *dst, const struct ib_value *src)
{
	struct ib_value v = *src;

	if (value_alloc(&v, src->n) != 0)
		return -FT_ENOMEM;
	memcpy(v.members, src->members, (size_t)src->n * sizeof(int));
	memcpy(v.next_ops, src->next_ops, (size_t)src->n * sizeof(uint64_t));
	value_free(dst);
	*dst = v;
	return 0;
}

static const struct ft__view *view_of(const struct inband *b, uint32_t gen)
{
	if (gen >= b->nviews || b->views[gen].members == NULL)
		return NULL;
	return &b->views[gen];
}

/* The committed value of generation gen (NULL: none). */
static const struct ib_value *value_of(const struct inband *b, uint32_t gen)
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

static void put(struct wbuf *w, const void *v, size_t n)
{
	if (w->len + n > w->cap) {
		w->bad = true;
		return;
	}
	memcpy(w->p + w->len, v, n);
	w->len += n;
}

static void put_u64(struct wbuf *w, uint64_t v)
{
	put(w, &v, sizeof(v));
}

static void put_i32(struct wbuf *w, int32_t v)
{
	put(w, &v, sizeof(v));
}

static void put_str(struct wbuf *w, const char *s)
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

static void get(struct rbuf *r, void *v, size_t n)
{
	if (r->bad || r->off + n > r->len) {
		r->bad = true;
		memset(v, 0, n);
		return;
	}
	memcpy(v, r->p + r->off, n);
	r->off += n;
}

static uint64_t get_u64(struct rbuf *r)
{
	uint64_t v;

	get(r, &v, sizeof(v));
	return v;
}

static int32_t get_i32(struct rbuf *r)
{
	int32_t v;

	get(r, &v, sizeof(v));
	return v;
}

/* A string into dst (cap with the NUL); too long or holding a NUL: bad. */
static void get_str(struct rbuf *r, char *dst, size_t cap)
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

/* n members, strictly ascending ranks of the world, with `more` bytes each to
 * follow (checked before anything is allocated); bad otherwise. */
static int *get_members(struct rbuf *r, int world, size_t more, int *n_out)
{
	int32_t n = get_i32(r);
	int *m;

	*n_out = 0;
	if (r->bad || n < 1 || n > world || (size_t)n * (4 + more) > r->len - r->off) {
		r->bad = true;
		return NULL;
	}
	m = malloc((size_t)n * sizeof(int));
	if (m == NULL) {
		r->bad = true;
		return NULL;
	}
	for (int i = 0; i < n; i++) {
		m[i] = get_i32(r);
		if (m[i] < 0 || m[i] >= world || (i > 0 && m[i] <= m[i - 1]))
			r->bad = true;
	}
	if (r->bad) {
		free(m);
		return NULL;
	}
	*n_out = n;
	return m;
}

static void put_value(struct wbuf *w, const struct ib_value *v)
{
	put_u64(w, v->ballot);
	put_u64(w, v->first_op);
	put_u64(w, v->nonce);
	put_i32(w, v->n);
	for (int i = 0; i < v->n; i++)
		put_i32(w, v->members[i]);
	for (int i = 0; i < v->n; i++)
		put_u64(w, v->next_ops[i]);
}

static void get_value(struct rbuf *r, int world, struct ib_value *v)
{
	v->ballot = get_u64(r);
	v->first_op = get_u64(r);
	v->nonce = get_u64(r);
	v->members = get_members(r, world, sizeof(uint64_t), &v->n);
	if (r->bad)
		return;
	v->next_ops = malloc((size_t)v->n * sizeof(uint64_t));
	if (v->next_ops == NULL)
		r->bad = true;
	for (int i = 0; i < v->n && !r->bad; i++)
		v->next_ops[i] = get_u64(r);
	if (r->bad)
		value_free(v);
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

#define VALUE_BYTES(n) (28 + 12 * (size_t)(n))
#define RECORD_BYTES(n) (16 + 2 + (FT__ADDR_MAX - 1) + 2 + (FT__CTRL_MAX - 1) + \
			 ((size_t)(n) + 7) / 8 + 4 + VALUE_BYTES(n))

static bool bit(const unsigned char *map, int i)
{
	return (map[i / 8] >> (i % 8)) & 1;
}

/* rec without its certain map, which comes from ranks[].certain. */
static void put_record(struct wbuf *w, const struct ib_record *rec, const struct ib_rank *ranks,
		       int world)
{
	put_u64(w, rec->ballot);
	put_u64(w, rec->next_op);
	put_str(w, rec->addr);
	put_str(w, rec->ctrl);
	for (int i = 0; i < world; i += 8) {
		unsigned char byte = 0;
		for (int k = 0; k < 8 && i + k < world; k++)
			byte |= (unsigned char)(ranks[i + k].certain << k);
		put(w, &byte, 1);
	}
	put_i32(w, rec->kind);
	if (rec->kind != 0)
		put_value(w, &rec->v);
}

/* rec->v is the caller's to free (it is empty when r went bad). */
static void get_record(struct rbuf *r, int world, struct ib_record *rec)
{
	size_t map = ((size_t)world + 7) / 8;

	*rec = (struct ib_record){0};
	rec->ballot = get_u64(r);
	rec->next_op = get_u64(r);
	get_str(r, rec->addr, sizeof(rec->addr));
	get_str(r, rec->ctrl, sizeof(rec->ctrl));
	if (r->bad || map > r->len - r->off) {
		r->bad = true;
		return;
	}
	rec->certain = r->p + r->off;
	r->off += map;
	rec->kind = get_i32(r);
	if (rec->kind < 0 || rec->kind > 2)
		r->bad = true;
	if (!r->bad && rec->kind != 0)
		get_value(r, world, &rec->v);
}

size_t ft__inband_payload_max(int world)
{
	size_t need = RECORD_BYTES(world); /* the largest: a COMMIT or PROPOSE is VALUE_BYTES */
	size_t book = 8 + 2 + (FT__ADDR_MAX - 1) + 2 + (FT__CTRL_MAX - 1); /* one BOOK entry */

	if (need < book)
		need = book;
	return need < 4096 ? 4096 : need;
}

/* Both values hold the same view. */
static bool value_same(const struct ib_value *a, const struct ib_value *b)
{
	return a->ballot == b->ballot && a->first_op == b->first_op && a->nonce == b->nonce &&
	       a->n == b->n && memcmp(a->members, b->members, (size_t)a->n * sizeof(int)) == 0 &&
	       memcmp(a->next_ops, b->next_ops, (size_t)a->n * sizeof(uint64_t)) == 0;
}

int ft__inband_codec_check(int world)
{
	size_t cap = ft__inband_payload_max(world);
	unsigned char *buf = malloc(cap);
	struct ib_rank *ranks = calloc((size_t)world, sizeof(*ranks));
	struct ib_record rec = {.ballot = UINT64_MAX - 1, .next_op = UINT64_MAX, .kind = 2};
	struct ib_record got = {0};
	struct ib_value back = {0};
	int rc = -FT_EPROTO;

	if (buf == NULL || ranks == NULL || value_alloc(&rec.v, world) != 0) {
		rc = -FT_ENOMEM;
		goto out;
	}
	/* the largest of everything: the longest addresses, every rank certain */
	memset(rec.addr, 'a', sizeof(rec.addr) - 1);
	memset(rec.ctrl, 'c', sizeof(rec.ctrl) - 1);
	rec.v = (struct ib_value){.ballot = UINT64_MAX, .first_op = 1, .nonce = 2, .n = world,
				  .members = rec.v.members, .next_ops = rec.v.next_ops};
	for (int i = 0; i < world; i++) {
		ranks[i].certain = true;
		rec.v.members[i] = i;
		rec.v.next_ops[i] = UINT64_MAX - (uint64_t)i;
	}
	/* the COMMIT (and PROPOSE) */
	struct wbuf w = {.p = buf, .cap = cap};
	put_value(&w, &rec.v);
	if (w.bad || w.len != VALUE_BYTES(world) || w.len > UINT16_MAX)
		goto out;
	struct rbuf r = {.p = buf, .len = w.len};
	get_value(&r, world, &back);
	if (r.bad || r.off != r.len || !value_same(&back, &rec.v))
		goto out;
	/* the RECORD */
	w = (struct wbuf){.p = buf, .cap = cap};
	put_record(&w, &rec, ranks, world);
	if (w.bad || w.len != RECORD_BYTES(world) || w.len > UINT16_MAX)
		goto out;
	r = (struct rbuf){.p = buf, .len = w.len};
	get_record(&r, world, &got);
	if (r.bad || r.off != r.len || got.kind != 2 || got.ballot != rec.ballot ||
	    got.next_op != rec.next_op || strcmp(got.addr, rec.addr) != 0 ||
	    strcmp(got.ctrl, rec.ctrl) != 0 || !value_same(&got.v, &rec.v))
		goto out;
	rc = 0;
	for (int i = 0; i < world; i++)
		if (!bit(got.certain, i))
			rc = -FT_EPROTO;
out:
	value_free(&got.v);
	value_free(&back);
	value_free(&rec.v);
	free(ranks);
	free(buf);
	return rc;
}

/* ---- links ---- */

#define NOT_YET 1

static void drop(struct inband *b, int i)
{
	ft__ctl_drop(&b->ctl, i);
	for (int r = 0; r < b->world; r++)
		if (b->r[r].link == i)
			b->r[r].link = -1;
}

/* Proof that rank r is gone (after generation 0; see the top): it counts out of quorums. */
static void mark_certain(struct inband *b, int r, const char *why)
{
	if (r < 0 || r >= b->world || r == b->rank || b->r[r].certain)
		return;
	b->r[r].certain = true;
	ft__info("membership: rank %d is gone for certain (%s)", r, why);
}

/* Rank r died before generation 0 was settled (see the top): never awaited again. */
static void late_gone(struct inband *b, int r, const char *why)
{
	if (r < 0 || r >= b->world || r == b->rank || b->r[r].gone || view_of(b, 0) != NULL)
		return;
	b->r[r].gone = b->r[r].late = true;
	b->ngone++;
	mark_certain(b, r, why);
	if (b->r[r].link >= 0)
		drop(b, b->r[r].link);
}

/* Whether the book came from PMIx: each entry was put there listening (see the top). */
static bool pmix_book(const struct inband *b)
{
	return b->book_taken && strcmp(b->book_params.how, "pmix") == 0;
}

/* Whether it came from ftcc-run's store, which marks the ranks it saw die (see the top). */
static bool store_book(const struct inband *b)
{
	return b->book_taken && strcmp(b->book_params.how, "store") == 0;
}

/* Generation 0: rank r's listener refused a connection (see the top). */
static void refused_at_start(struct inband *b, int r)
{
	int64_t now = ft__now_ms();

	if (!pmix_book(b))
		return;
	if (b->r[r].refused++ == 0)
		b->r[r].refused_ms = now;
	else if (b->r[r].refused >= REFUSED_GONE && now - b->r[r].refused_ms >= REFUSED_GONE_MS)
		late_gone(b, r, "its listener, published in the PMIx book, refuses connections");
}

/*
 * Link i ended with error rc. Only a link of this rank's own to the peer's
 * listener, on which the peer proved the job's token (its ACK came), and
 * that the peer's kernel then closed (-FT_EPEERFAILED: FIN or RST), shows
 * the rank gone: the process that held it died or left. A refusal, or a
 * link closed before the peer answered its hello, is suspicion only (see
 * the top).
 */
static void link_failed(struct inband *b, int i, int rc)
{
	int peer = b->ctl.links[i].peer;
	bool mine = peer >= 0 && b->r[peer].link == i;
	bool proven = !b->ctl.links[i].connecting && !b->ctl.links[i].await_ack;

	drop(b, i);
	if (peer < 0 || !mine)
		return; /* only a link to its listener says the rank is gone */
	if (view_of(b, 0) == NULL) {
		/* generation 0: a rank not yet listening; try again soon */
		b->r[peer].retry_ms = ft__now_ms() + RETRY_MS;
		if (rc == -FT_ECONNREFUSED)
			refused_at_start(b, peer);
		return;
	}
	if (rc == -FT_EPEERFAILED && proven)
		mark_certain(b, peer, "its kernel closed its membership link");
	else
		b->r[peer].retry_ms = ft__now_ms() + RETRY_MS;
}

/* The link to rank r, connecting it if there is none: its index once
 * connected, -1 while connecting or when it cannot be made now. */
static int link_to(struct inband *b, int r)
{
	struct ib_rank *p = &b->r[r];
	int64_t now = ft__now_ms();
	int i;

	if (p->link >= 0 && !b->ctl.links[p->link].connecting)
		p->refused = 0; /* it listens */
	if (p->link >= 0)
		return b->ctl.links[p->link].connecting ? -1 : p->link;
	if (p->certain || now < p->retry_ms)
		return -1;
	i = ft__ctl_connect_start(&b->ctl, b->book[r], r, b->gen);
	if (i < 0) {
		p->retry_ms = now + RETRY_MS; /* refused too: suspicion only (see the top) */
		if (i == -FT_ECONNREFUSED && view_of(b, 0) == NULL)
			refused_at_start(b, r);
		return -1;
	}
	p->link = i;
	return -1;
}

/* 0 sent, NOT_YET (connecting), or < 0 (the link failed). */
static int send_to(struct inband *b, int r, enum ft__ctl_type type, const struct wbuf *w)
{
	int i = link_to(b, r);

	if (i < 0)
		return NOT_YET;
	if (w->bad)
		return -FT_EINVAL;
	if (ft__ctl_send(&b->ctl, i, type, b->gen, w->p, w->len) != 0) {
		link_failed(b, i, -FT_EIO); /* perhaps only full: no certainty */
		return -FT_EPEERFAILED;
	}
	return 0;
}

/* ---- what a message must show ---- */

/*
 * A ballot a coordinator can have made: rounds start at 1 and grow by one
 * per attempt, so one past ROUND_MAX was made up (and the round after the
 * top one would wrap the next ballot to 0, "none", for good), and its low
 * bits name a rank of the world; by, when >= 0: the rank that made it.
 */
static bool ballot_ok(const struct inband *b, uint64_t ballot, int by)
{
	uint64_t round = ballot >> 16;
	int rank = (int)(ballot & 0xffff);

	return round >= 1 && round <= ROUND_MAX && rank < b->world && (by < 0 || rank == by);
}

static bool in_view(const struct ft__view *v, int r)
{
	for (int i = 0; i < v->size; i++)
		if (v->members[i] == r)
			return true;
	return false;
}

/*
 * Whether v can be a view of generation gen that rank `from` sends: the
 * view of generation 0 holds no rank the first book marked gone (those
 * never ran), and any rank it leaves out is gone on the sender's word (see
 * the top); a later one
 * comes from a member of the view before it (known here), keeps the job's
 * nonce and holds only members of that view. The message of a value that
 * fails is ignored.
 */
static bool value_fits(const struct inband *b, uint32_t gen, int from, const struct ib_value *v)
{
	const struct ft__view *prev = gen > 0 ? view_of(b, gen - 1) : NULL;
	int k = 0;

	if (gen == 0) {
		for (int i = 0; i < v->n; i++)
			if (b->r[v->members[i]].gone && !b->r[v->members[i]].late)
				return false;
		return v->n > 0;
	}
	if (prev == NULL || !in_view(prev, from) || v->nonce != prev->nonce)
		return false;
	/* both ascending: one walk (a RECORD of every rank comes from every rank) */
	for (int i = 0; i < v->n; i++) {
		while (k < prev->size && prev->members[k] < v->members[i])
			k++;
		if (k == prev->size || prev->members[k] != v->members[i])
			return false;
	}
	return true;
}

/*
 * A view of generation 0 from rank `from`: the ranks it leaves out, and
 * those of its members whose addresses it did not send, are gone on the
 * sender's word (see the top; its BOOK holds every member it heard from).
 */
static void gone_on_word(struct inband *b, int from, const struct ib_value *v)
{
	bool *in = calloc((size_t)b->world, sizeof(bool));

	if (in == NULL)
		return;
	for (int i = 0; i < v->n; i++)
		in[v->members[i]] = b->r[v->members[i]].have_addr || v->members[i] == b->rank;
	for (int r = 0; r < b->world; r++)
		if (!in[r] && r != from)
			late_gone(b, r, "the job's first view was settled without it");
	free(in);
}

/* ---- the acceptor's side ---- */

/* Answers on link i, where the question came from (connected, unlike a
 * link of this rank's own that may still be connecting). */
static void reply(struct inband *b, int i, uint32_t gen, enum ft__ctl_type type,
		  const struct wbuf *w)
{
	if (i < 0 || b->ctl.links[i].fd < 0 || w->bad)
		return;
	/* the link stays, unsent or not: closing the peer's own link would
	 * show it this rank gone (link_failed), and this rank is not; the
	 * asker asks again or goes on without the answer */
	(void)ft__ctl_send(&b->ctl, i, type, gen, w->p, w->len);
}

/* This rank's answer about generation gen (the one being settled, or one
 * committed here that a late coordinator asks about). */
static void record_msg(struct inband *b, struct wbuf *w, uint32_t gen, uint64_t ballot)
{
	struct ib_record rec = {.ballot = ballot, .next_op = b->mine.next_op};

	snprintf(rec.addr, sizeof(rec.addr), "%s", b->mine.addr);
	snprintf(rec.ctrl, sizeof(rec.ctrl), "%s", b->mine.ctrl);
	if (view_of(b, gen) != NULL) {
		rec.kind = 2;
		rec.v = *value_of(b, gen); /* borrowed */
		rec.v.ballot = COMMITTED;
	} else if (b->accepted.ballot != 0) {
		rec.kind = 1;
		rec.v = b->accepted;
	}
	put_record(w, &rec, b->r, b->world);
}

static void answer_collect(struct inband *b, int from, int link, uint64_t ballot)
{
	unsigned char buf[65536];
	struct wbuf w = {.p = buf, .cap = b->ctl.max_payload};

	if (!b->published) {
		b->owed_to = from; /* answered once this rank publishes */
		b->owed_link = link;
		b->owed_ballot = ballot;
		return;
	}
	b->owed_to = -1;
	if (link < 0 || b->ctl.links[link].peer != from)
		return; /* its link is gone: it asks again or is gone */
	record_msg(b, &w, b->gen, ballot);
	reply(b, link, b->gen, FT__CTL_MB_RECORD, &w);
}

static void answer_ballot(struct inband *b, int link, enum ft__ctl_type type, uint64_t ballot)
{
	unsigned char buf[8];
	struct wbuf w = {.p = buf, .cap = sizeof(buf)};

	put_u64(&w, ballot);
	reply(b, link, b->gen, type, &w);
}

static void send_ballot(struct inband *b, int to, enum ft__ctl_type type, uint64_t ballot)
{
	unsigned char buf[8];
	struct wbuf w = {.p = buf, .cap = sizeof(buf)};

	put_u64(&w, ballot);
	(void)send_to(b, to, type, &w);
}

static void note_ballot(struct inband *b, uint64_t ballot)
{
	if (ballot >> 16 > b->max_round)
		b->max_round = ballot >> 16;
}

static void on_collect(struct inband *b, int from, int link, struct rbuf *r)
{
	uint64_t ballot = get_u64(r);

	if (r->bad || !ballot_ok(b, ballot, from))
		return;
	note_ballot(b, ballot);
	if (ballot < b->promised && view_of(b, b->gen) == NULL) {
		answer_ballot(b, link, FT__CTL_MB_NACK, b->promised);
		return;
	}
	b->promised = ballot;
	answer_collect(b, from, link, ballot);
}

static void on_propose(struct inband *b, int from, int link, struct rbuf *r)
{
	struct ib_value v = {0};

	get_value(r, b->world, &v);
	if (r->bad)
		return;
	if (!ballot_ok(b, v.ballot, from) || !value_fits(b, b->gen, from, &v)) {
		ft__warn("membership: ignored a proposal from rank %d that no settle of generation "
			 "%u makes", from, b->gen);
		value_free(&v);
		return;
	}
	note_ballot(b, v.ballot);
	if (v.ballot < b->promised) {
		answer_ballot(b, link, FT__CTL_MB_NACK, b->promised);
		value_free(&v);
		return;
	}
	b->promised = v.ballot;
	value_free(&b->accepted);
	b->accepted = v;
	answer_ballot(b, link, FT__CTL_MB_ACCEPT, v.ballot);
}

/* Takes a committed view for the generation being settled (v's members move). */
static int commit(struct inband *b, uint32_t gen, struct ib_value *v)
{
	struct ft__view *views;

	if (view_of(b, gen) != NULL) {
		value_free(v);
		return 0;
	}
	/* gen is at most the generation being settled + 1 (on_commit): the
	 * table grows with the settles made here, never with what a message says */
	if (gen > b->gen + (uint64_t)1 || gen == UINT32_MAX) {
		value_free(v);
		return -FT_EINVAL;
	}
	if (gen >= b->nviews) {
		struct ib_value *values;
		size_t cap = 2 * (size_t)b->nviews, more;
		if (cap < (size_t)gen + 1)
			cap = (size_t)gen + 1;
		if (cap < 8)
			cap = 8;
		if (cap > (size_t)UINT32_MAX)
			cap = (size_t)UINT32_MAX;
		more = cap - b->nviews;
		views = realloc(b->views, cap * sizeof(*views));
		if (views != NULL)
			b->views = views;
		values = realloc(b->values, cap * sizeof(*values));
		if (values != NULL)
			b->values = values;
		if (views == NULL || values == NULL) {
			value_free(v);
			return -FT_ENOMEM;
		}
		memset(b->views + b->nviews, 0, more * sizeof(*views));
		memset(b->values + b->nviews, 0, more * sizeof(*values));
		b->nviews = (uint32_t)cap;
	}
	b->views[gen] = (struct ft__view){.generation = gen, .size = v->n, .members = v->members,
					  .first_op = v->first_op, .nonce = v->nonce};
	b->values[gen] = *v;    /* shares members with the view */
	*v = (struct ib_value){0};
	return 0;
}

/*
 * A COMMIT is taken for the generation being settled here, or the next one
 * (this rank had not begun it when the others settled it without waiting for
 * it: the detector had not told it yet), and only once the view before it
 * is known here: those are the generations a settle can commit while this
 * rank is part of the job (a coordinator of generation g is a member of
 * view g - 1; this rank begins g + 1 only after it holds view g). It names
 * the coordinator's ballot (or is a committed value it relays) and fits the
 * view before it (value_fits). A COMMIT carries no acceptors' word (the
 * ranks share one token, nothing signs a vote): what an authenticated rank
 * commits within these bounds is taken as the others would take it.
 */
static void on_commit(struct inband *b, int from, uint32_t gen, struct rbuf *r)
{
	struct ib_value v = {0};

	get_value(r, b->world, &v);
	if (r->bad)
		return;
	if (gen > b->gen + (uint64_t)1 ||
	    (v.ballot != COMMITTED && !ballot_ok(b, v.ballot, from))) {
		ft__warn("membership: ignored rank %d's commit of generation %u, which no settle "
			 "reachable from generation %u makes", from, gen, b->gen);
		value_free(&v);
		return;
	}
	if (view_of(b, gen) != NULL || (gen > 0 && view_of(b, gen - 1) == NULL)) {
		/* a repeat; or early, before the view it follows: this rank
		 * learns it when it settles that one (a coordinator asks it) */
		value_free(&v);
		return;
	}
	if (!value_fits(b, gen, from, &v)) {
		ft__warn("membership: ignored rank %d's commit of generation %u, which does not "
			 "follow the view before it", from, gen);
		value_free(&v);
		return;
	}
	if (gen == 0 && v.ballot != COMMITTED && v.ballot < b->promised) {
		/* a round this rank promised to outbid: not chosen (see the top) */
		value_free(&v);
		return;
	}
	if (gen == 0)
		gone_on_word(b, from, &v);
	(void)commit(b, gen, &v);
}

static void on_book(struct inband *b, struct rbuf *r)
{
	int32_t n = get_i32(r);

	for (int32_t k = 0; k < n && !r->bad; k++) {
		int32_t rank = get_i32(r);
		char addr[FT__ADDR_MAX], ctrl[FT__CTRL_MAX];
		get_str(r, addr, sizeof(addr));
		get_str(r, ctrl, sizeof(ctrl));
		if (r->bad || rank < 0 || rank >= b->world || addr[0] == '\0') {
			r->bad = true;
			break;
		}
		snprintf(b->r[rank].addr, sizeof(b->r[rank].addr), "%s", addr);
		snprintf(b->r[rank].ctrl, sizeof(b->r[rank].ctrl), "%s", ctrl);
		b->r[rank].have_addr = true;
	}
}

/* ---- the coordinator's side ---- */

static void on_record(struct inband *b, int from, struct rbuf *r)
{
	struct ib_record rec;
	struct ib_value v;
	int32_t kind;

	get_record(r, b->world, &rec);
	v = rec.v;
	kind = rec.kind;
	if (r->bad || rec.ballot != b->ballot || b->phase != 1 || rec.addr[0] == '\0' ||
	    (kind == 1 && !ballot_ok(b, v.ballot, -1)) || (kind == 2 && v.ballot != COMMITTED) ||
	    (kind != 0 && !value_fits(b, b->gen, from, &v))) {
		value_free(&v);
		return;
	}
	for (int c = 0; c < b->world; c++)
		if (bit(rec.certain, c) && c != b->rank)
			mark_certain(b, c, "another rank saw it gone");
	struct ib_rank *p = &b->r[from];
	p->replied = true;
	p->next_op = rec.next_op;
	if (b->gen == 0) {
		snprintf(p->addr, sizeof(p->addr), "%s", rec.addr);
		snprintf(p->ctrl, sizeof(p->ctrl), "%s", rec.ctrl);
		p->have_addr = true;
	}
	if (kind == 2 && !b->best_committed) {
		b->best_committed = true;
		value_free(&b->best);
		b->best = v;
	} else if (kind == 1 && !b->best_committed && v.ballot > b->best.ballot) {
		value_free(&b->best);
		b->best = v;
	} else {
		value_free(&v);
	}
}

static void restart_round(struct inband *b)
{
	b->ballot = 0;
	b->phase = 0;
}

static void on_accept(struct inband *b, int from, struct rbuf *r)
{
	uint64_t ballot = get_u64(r);

	if (!r->bad && b->phase == 2 && ballot == b->ballot)
		b->r[from].accepted = true;
}

static void on_nack(struct inband *b, struct rbuf *r)
{
	uint64_t promised = get_u64(r);

	if (r->bad || !ballot_ok(b, promised, -1))
		return;
	note_ballot(b, promised);
	if (b->ballot != 0 && promised > b->ballot)
		restart_round(b);
}

/* A COLLECT about a generation other than the one being settled here. */
static void on_other_collect(struct inband *b, uint32_t gen, int from, int link, struct rbuf *r)
{
	uint64_t ballot = get_u64(r);
	unsigned char buf[65536];
	struct wbuf w = {.p = buf, .cap = b->ctl.max_payload};

	if (r->bad || !ballot_ok(b, ballot, from))
		return;
	note_ballot(b, ballot);
	if (gen > b->gen + (uint64_t)1)
		return; /* out of reach: see on_msg */
	if (gen > b->gen || !b->active) {
		/* a failure this rank has not heard of: answered once it
		 * begins that generation (the detector is told, see pump) */
		if (gen > b->future_gen || ballot > b->future_ballot) {
			b->future_gen = gen;
			b->future_from = from;
			b->future_link = link;
			b->future_ballot = ballot;
		}
		return;
	}
	if (view_of(b, gen) == NULL)
		return; /* an old generation this rank was not part of */
	record_msg(b, &w, gen, ballot); /* a late coordinator: tell it what was committed */
	reply(b, link, gen, FT__CTL_MB_RECORD, &w);
}

/* Handles one message. */
static void on_msg(struct inband *b, int link, const struct ft__ctl_msg *m)
{
	struct rbuf r = {.p = m->payload, .len = m->len};
	uint64_t ballot;
	bool current = b->active && m->gen == b->gen;

	if (m->from < 0 || m->from >= b->world)
		return;
	/* a coordinator of generation g is a member of view g - 1, which this
	 * rank holds or is settling (it begins g - 1 only once it holds g - 2):
	 * a question about a later one sets no detector recovering */
	if (m->type == FT__CTL_MB_COLLECT && m->gen > b->newest_asked &&
	    m->gen <= b->gen + (uint64_t)1 && m->len >= sizeof(ballot)) {
		memcpy(&ballot, m->payload, sizeof(ballot));
		if (ballot_ok(b, ballot, m->from))
			b->newest_asked = m->gen;
	}
	switch (m->type) {
	case FT__CTL_MB_COLLECT:
		if (current)
			on_collect(b, m->from, link, &r);
		else
			on_other_collect(b, m->gen, m->from, link, &r);
		break;
	case FT__CTL_MB_RECORD:
		if (current)
			on_record(b, m->from, &r);
		break;
	case FT__CTL_MB_PROPOSE:
		if (current)
			on_propose(b, m->from, link, &r);
		break;
	case FT__CTL_MB_ACCEPT:
		if (current)
			on_accept(b, m->from, &r);
		break;
	case FT__CTL_MB_NACK:
		if (current)
			on_nack(b, &r);
		break;
	case FT__CTL_MB_BOOK:
		if (m->gen == 0 && view_of(b, 0) == NULL) /* before the job's first view only */
			on_book(b, &r);
		break;
	case FT__CTL_MB_COMMIT:
		/* the next generation too: one this rank has not begun yet may
		 * leave it out (on_commit) */
		on_commit(b, m->from, m->gen, &r);
		break;
	case FT__CTL_MB_NOQUORUM:
		/* from the coordinator this rank promised: the one it answered */
		if (current && get_u64(&r) == b->promised && !r.bad &&
		    ballot_ok(b, b->promised, m->from))
			b->noquorum = true;
		break;
	default:
		break;
	}
	if (r.bad)
		ft__warn("membership: dropped a malformed message (type %d) from rank %d", m->type,
			 m->from);
}

/* Reads every link; returns after everything buffered was handled. */
static void pump(struct inband *b)
{
	ft__ctl_accept(&b->ctl);
	for (int i = 0; i < b->ctl.nlinks; i++) {
		struct ft__ctl_msg m;
		int rc = 0;
		while (b->ctl.links[i].fd >= 0 && (rc = ft__ctl_next(&b->ctl, i, &m)) == 1) {
			/* the header's sender must be the one the hello named */
			if (m.type == FT__CTL_HELLO || m.from != b->ctl.links[i].peer)
				continue;
			on_msg(b, i, &m);
		}
		if (b->ctl.links[i].fd >= 0 && rc < 0)
			link_failed(b, i, rc);
	}
}

/* The previous view's members in favour (votes[r]) make a quorum (see the top). */
static bool quorum(const struct inband *b, const bool *votes)
{
	const struct ft__view *prev = b->gen > 0 ? view_of(b, b->gen - 1) : NULL;
	int alive = 0, yes = 0, lowest = -1;

	if (prev == NULL)
		return false;
	for (int i = 0; i < prev->size; i++) {
		int r = prev->members[i];
		if (b->r[r].certain && !votes[r])
			continue;
		alive++;
		yes += votes[r];
		if (lowest < 0)
			lowest = r;
	}
	return 2 * yes > alive || (2 * yes == alive && lowest >= 0 && votes[lowest]);
}

/* Whether value v holds a rank gone late (see the top). */
static bool holds_late(const struct inband *b, const struct ib_value *v)
{
	for (int i = 0; i < v->n; i++)
		if (b->r[v->members[i]].late)
			return true;
	return false;
}

/* The value to propose once the candidates answered: 0, or -FT_ENOMEM. */
static int choose(struct inband *b)
{
	int n = 0;

	value_free(&b->proposal);
	if (b->best_committed || (b->best.ballot != 0 && !holds_late(b, &b->best)))
		return value_copy(&b->proposal, &b->best);
	if (value_alloc(&b->proposal, b->world) != 0)
		return -FT_ENOMEM;
	b->proposal.first_op = b->mine.next_op;
	for (int r = 0; r < b->world; r++) {
		if (r != b->rank && (!b->r[r].replied || b->r[r].late))
			continue;
		b->proposal.members[n] = r; /* ascending already */
		b->proposal.next_ops[n++] = r == b->rank ? b->mine.next_op : b->r[r].next_op;
		if (r != b->rank && b->r[r].next_op < b->proposal.first_op)
			b->proposal.first_op = b->r[r].next_op;
	}
	b->proposal.n = n;
	if (b->gen == 0) {
		if (getrandom(&b->proposal.nonce, sizeof(b->proposal.nonce), 0) !=
		    (ssize_t)sizeof(b->proposal.nonce))
			b->proposal.nonce = (uint64_t)ft__now_ns() ^ ((uint64_t)getpid() << 32);
	} else {
		b->proposal.nonce = view_of(b, b->gen - 1)->nonce;
	}
	return 0;
}

static int send_value(struct inband *b, int to, enum ft__ctl_type type, const struct ib_value *v)
{
	unsigned char buf[65536];
	struct wbuf w = {.p = buf, .cap = b->ctl.max_payload};

	put_value(&w, v);
	return send_to(b, to, type, &w);
}

/* Every member's addresses to rank `to`, in as many BOOK messages as they need. */
static void send_book(struct inband *b, int to, const struct ib_value *v)
{
	unsigned char buf[65536];
	int k = 0;

	while (k < v->n) {
		struct wbuf w = {.p = buf, .cap = b->ctl.max_payload};
		int count = 0;
		size_t at;
		put_i32(&w, 0);
		for (; k < v->n; k++, count++) {
			const struct ib_rank *p = &b->r[v->members[k]];
			size_t need = 8 + strlen(p->addr) + strlen(p->ctrl);
			if (!p->have_addr) {
				count--; /* gone late, unheard: no address (see the top) */
				continue;
			}
			if (w.len + need > w.cap && count > 0)
				break;
			put_i32(&w, v->members[k]);
			put_str(&w, p->addr);
			put_str(&w, p->ctrl);
		}
		at = w.len;
		w.len = 0;
		put_i32(&w, count);
		w.len = at;
		if (send_to(b, to, FT__CTL_MB_BOOK, &w) != 0)
			return;
	}
}

static bool launchers_word(struct inband *b);

/*
 * One step of coordinating the generation: 1 when committed here, 0 not
 * yet, -FT_EPARTITIONED when no quorum can be had.
 */
static int coordinate(struct inband *b, const int *cand, int ncand, bool force)
{
	int64_t now = ft__now_ms();
	bool *votes;
	int rc = 0;

	if (b->ballot == 0) {
		/* a new round, above every ballot seen */
		uint64_t round = b->max_round + 1;
		b->ballot = round << 16 | (uint64_t)b->rank;
		b->max_round = round;
		b->phase = 1;
		b->phase_ms = now;
		b->best_committed = false;
		value_free(&b->best);
		for (int r = 0; r < b->world; r++)
			b->r[r].asked = b->r[r].replied = b->r[r].proposed = b->r[r].accepted =
				b->r[r].told = false;
		/* this rank answers itself */
		if (b->ballot < b->promised) {
			restart_round(b);
			return 0;
		}
		b->promised = b->ballot;
		if (value_of(b, b->gen) != NULL) {
			b->best_committed = true;
			if (value_copy(&b->best, value_of(b, b->gen)) != 0)
				return -FT_ENOMEM;
			b->best.ballot = UINT64_MAX;
		} else if (b->accepted.ballot != 0 && value_copy(&b->best, &b->accepted) != 0) {
			return -FT_ENOMEM;
		}
	}
	votes = calloc((size_t)b->world, sizeof(bool));
	if (votes == NULL)
		return -FT_ENOMEM;
	votes[b->rank] = true;
	if (b->phase == 1) {
		bool all = true;
		for (int k = 0; k < ncand; k++) {
			int r = cand[k];
			if (r == b->rank || b->r[r].replied)
				continue;
			if (b->r[r].certain)
				continue;
			all = false;
			if (!b->r[r].asked) {
				unsigned char buf[8];
				struct wbuf w = {.p = buf, .cap = sizeof(buf)};
				put_u64(&w, b->ballot);
				if (send_to(b, r, FT__CTL_MB_COLLECT, &w) == 0)
					b->r[r].asked = true;
			}
		}
		for (int r = 0; r < b->world; r++)
			votes[r] |= b->r[r].replied;
		bool window = force && now - b->phase_ms >= b->reply_wait_ms;
		if (!all && !window)
			goto out;
		if (b->gen > 0 && !quorum(b, votes)) {
			if (!window || launchers_word(b))
				goto out;
			ft__error("membership: generation %u has no quorum on this side (%s): this "
				  "rank stops", b->gen, "a network partition, or most ranks lost");
			for (int r = 0; r < b->world; r++)
				if (b->r[r].replied) /* they stop too */
					send_ballot(b, r, FT__CTL_MB_NOQUORUM, b->ballot);
			rc = -FT_EPARTITIONED;
			goto out;
		}
		if ((rc = choose(b)) != 0)
			goto out;
		if (b->best_committed) {
			b->phase = 3;
		} else {
			b->phase = 2;
			b->phase_ms = now;
			value_free(&b->accepted);
			if ((rc = value_copy(&b->accepted, &b->proposal)) != 0)
				goto out;
			b->accepted.ballot = b->proposal.ballot = b->ballot;
		}
	}
	if (b->phase == 2 && b->gen == 0 && holds_late(b, &b->proposal)) {
		restart_round(b); /* not chosen: the dead rank never accepted */
		goto out;
	}
	if (b->phase == 2) {
		bool all = true;
		memset(votes, 0, (size_t)b->world * sizeof(bool));
		votes[b->rank] = true;
		for (int r = 0; r < b->world; r++) {
			struct ib_rank *p = &b->r[r];
			if (r == b->rank || !p->replied)
				continue;
			if (!p->proposed && !p->certain &&
			    send_value(b, r, FT__CTL_MB_PROPOSE, &b->proposal) == 0)
				p->proposed = true;
			votes[r] = p->accepted;
			if (!p->accepted && !p->certain)
				all = false;
		}
		if (!all || (b->gen > 0 && !quorum(b, votes)))
			goto out;
		b->phase = 3;
	}
	if (b->phase == 3) {
		struct ib_value v = {0};
		if (b->gen == 0) {
			snprintf(b->r[b->rank].addr, sizeof(b->r[b->rank].addr), "%s", b->mine.addr);
			snprintf(b->r[b->rank].ctrl, sizeof(b->r[b->rank].ctrl), "%s", b->mine.ctrl);
			b->r[b->rank].have_addr = true;
		}
		for (int r = 0; r < b->world; r++) {
			if (r == b->rank || !b->r[r].replied || b->r[r].told)
				continue;
			if (b->gen == 0)
				send_book(b, r, &b->proposal);
			(void)send_value(b, r, FT__CTL_MB_COMMIT, &b->proposal);
			b->r[r].told = true;
		}
		for (int k = 0; k < ncand; k++)
			if (cand[k] != b->rank && !b->r[cand[k]].told && b->r[cand[k]].link >= 0)
				(void)send_value(b, cand[k], FT__CTL_MB_COMMIT, &b->proposal);
		if ((rc = value_copy(&v, &b->proposal)) == 0)
			rc = commit(b, b->gen, &v);
		if (rc == 0)
			rc = 1;
	}
out:
	free(votes);
	return rc;
}

/* ---- the backend's operations ---- */

static void lock_ib(struct inband *b)
{
	pthread_mutex_lock(&b->lock);
}

static void unlock_ib(struct inband *b)
{
	pthread_mutex_unlock(&b->lock);
}

/* Starts settling generation gen here (forgetting the one before). */
static void begin(struct inband *b, uint32_t gen)
{
	if (b->active && b->gen == gen)
		return;
	b->active = true;
	b->gen = gen;
	b->published = false;
	b->promised = 0;
	value_free(&b->accepted);
	value_free(&b->best);
	value_free(&b->proposal);
	b->owed_to = -1;
	if (b->future_gen == gen && gen > 0) {
		b->owed_to = b->future_from;
		b->owed_link = b->future_link;
		b->owed_ballot = b->future_ballot;
		b->promised = b->future_ballot;
	}
	b->noquorum = false;
	b->ballot = 0;
	b->phase = 0;
	for (int r = 0; r < b->world; r++)
		b->r[r].asked = b->r[r].replied = b->r[r].proposed = b->r[r].accepted =
			b->r[r].told = false;
}

static int ib_open(struct ft__mb *mb, const struct ft__mb_params *p)
{
	struct ft__ctl_params cp = {.rank = p->rank, .world_size = p->world_size,
				    .job_id = p->job_id, .token = p->token,
				    .bind_host = p->bind_host, .publish_host = p->publish_host,
				    .links = 2 * p->world_size + 8,
				    /* at generation 0 every rank may connect at once */
				    .strangers = p->world_size + FT__CTL_LINKS,
				    /* as the detector's (its detect timeout) */
				    .hello_ms = ft__ctl_hello_ms(p->reply_wait_ms),
				    .who = "membership"};
	char host[FT__BOOK_ENTRY_MAX], port[16];
	struct inband *b;
	int rc;

	if (p->world_size > MAX_WORLD) {
		ft__error("membership: in-band membership takes at most %d ranks", MAX_WORLD);
		return -FT_ECONFIG;
	}
	b = calloc(1, sizeof(*b));
	if (b == NULL)
		return -FT_ENOMEM;
	mb->be = b;
	b->rank = p->rank;
	b->world = p->world_size;
	b->owed_to = -1;
	b->reply_wait_ms = p->reply_wait_ms > 0 ? p->reply_wait_ms : 1000;
	if ((rc = pthread_mutex_init(&b->lock, NULL)) != 0) {
		mb->be = NULL;
		free(b);
		return -FT_ENOMEM;
	}
	b->book = calloc((size_t)b->world, sizeof(*b->book));
	b->r = calloc((size_t)b->world, sizeof(*b->r));
	if (b->book == NULL || b->r == NULL)
		return -FT_ENOMEM;
	for (int r = 0; r < b->world; r++)
		b->r[r].link = -1;
	/* the largest message: a RECORD of every rank (MAX_WORLD's fits a control
	 * message, test_inband_codec checks it) */
	cp.min_payload = ft__inband_payload_max(b->world);
	/* with a peer list, this rank listens at its own entry's port */
	snprintf(port, sizeof(port), "0");
	if (strcmp(p->book.how, "peers") == 0) {
		rc = ft__boot_book(&p->book, "", b->book);
		if (rc != 0)
			return rc;
		if (ft__sock_split(b->book[b->rank], host, sizeof(host), port, sizeof(port)) != 0)
			return -FT_ECONFIG;
		cp.port = port;
		cp.bind_host = host;
		cp.publish_host = NULL;
	}
	rc = ft__ctl_open(&b->ctl, &cp);
	b->ctl_open = true;
	if (rc != 0)
		return rc;
	if (b->ctl.max_payload < cp.min_payload) {
		ft__error("membership: control messages carry %zu bytes, %zu needed for %d ranks",
			  b->ctl.max_payload, cp.min_payload, b->world);
		return -FT_ECONFIG;
	}
	if (strcmp(p->book.how, "peers") != 0) {
		rc = ft__boot_book(&p->book, b->ctl.addr, b->book);
		if (rc != 0)
			return rc;
	}
	b->book_params = p->book;
	b->book_taken = true;
	for (int r = 0; r < b->world; r++)
		if (b->book[r][0] == '\0' && r != b->rank) {
			b->r[r].gone = true;
			b->ngone++;
			mark_certain(b, r, "its launcher saw it die before it joined");
		}
	snprintf(mb->where, sizeof(mb->where), "(in-band, listening at %s)", b->ctl.addr);
	return 0;
}

static int ib_publish(struct ft__mb *mb, uint32_t gen, const struct ft__member *m)
{
	struct inband *b = IB(mb);

	lock_ib(b);
	if (b->departed) {
		unlock_ib(b);
		return -FT_EINVAL;
	}
	begin(b, gen);
	b->mine = *m;
	b->published = true;
	pump(b);
	if (b->owed_to >= 0)
		answer_collect(b, b->owed_to, b->owed_link, b->owed_ballot);
	unlock_ib(b);
	return 0;
}

/* The coordinator among cand: the first, but at generation 0 the first the book does not
 * mark gone (the same on every rank: see the top). */
static int lead(const struct inband *b, uint32_t gen, const int *cand, int ncand)
{
	for (int k = 0; gen == 0 && k < ncand; k++)
		if (cand[k] >= 0 && cand[k] < b->world && !b->r[cand[k]].gone)
			return cand[k];
	return cand[0];
}

/*
 * The book as ftcc-run's store holds it now (p, this rank's entry mine;
 * waited for up to timeout_ms, so called without the lock): a rank it
 * marks gone is one whose process its launcher saw die, gone here too
 * (late_gone before the job's first view, certain after it: see the top).
 */
static void take_marks(struct inband *b, struct ft__book_params p, const char *mine,
		       int timeout_ms)
{
	char (*book)[FT__BOOK_ENTRY_MAX] = calloc((size_t)b->world, sizeof(*book));

	p.timeout_ms = timeout_ms;
	if (book != NULL && ft__boot_book(&p, mine, book) == 0) {
		lock_ib(b);
		for (int r = 0; r < b->world; r++) {
			if (book[r][0] != '\0')
				continue;
			if (view_of(b, 0) == NULL)
				late_gone(b, r, "its launcher saw it die before the job's first view");
			else
				mark_certain(b, r, "its launcher saw it die");
		}
		unlock_ib(b);
	}
	free(book);
}

/*
 * Generation 0 not settled RECHECK_MS after this rank published: the book
 * again from the store (take_marks). Only by the thread that settles
 * generation 0 (ft_init's).
 */
static void recheck_book(struct inband *b)
{
	struct ft__book_params p;
	char mine[FT__BOOK_ENTRY_MAX];
	int64_t now = ft__now_ms();
	bool due;

	lock_ib(b);
	if (b->published && b->recheck_ms == 0)
		b->recheck_ms = now + RECHECK_MS;
	due = store_book(b) && b->published && view_of(b, 0) == NULL && b->recheck_ms != 0 &&
	      now >= b->recheck_ms && !b->departed;
	if (due) {
		b->recheck_ms = now + RECHECK_MS;
		p = b->book_params;
		snprintf(mine, sizeof(mine), "%s", b->ctl.addr);
	}
	unlock_ib(b);
	if (due)
		take_marks(b, p, mine, RECHECK_MS);
}

/* launchers_word's thread: the store's marks, then the generation they were had for. */
static void *ask_store(void *arg)
{
	struct inband *b = arg;
	struct ft__book_params p;
	char mine[FT__BOOK_ENTRY_MAX];
	uint32_t gen;

	lock_ib(b);
	p = b->book_params;
	snprintf(mine, sizeof(mine), "%s", b->ctl.addr);
	gen = b->gen;
	unlock_ib(b);
	take_marks(b, p, mine, ASK_MS);
	lock_ib(b);
	b->word_gen = gen + 1;
	b->asking = false;
	unlock_ib(b);
	return NULL;
}

/*
 * A coordinator short of a quorum once its force window passed: the
 * deaths it only suspects may be certain to the launcher. Under ftcc-run
 * the store's book marks every rank whose process died by a signal
 * (store_rank_died), so it is asked once a generation, on a thread of its
 * own (the detector, which settles, never waits), before the rank stops
 * for want of a quorum: true while the answer is awaited. Several ranks
 * killed within one recovery, before any link to them was proven, left two
 * live ranks of four without a quorum (the campaign: 1 trial in 1000).
 * Under another book no launcher's word comes, and the rule stands.
 */
static bool launchers_word(struct inband *b)
{
	if (!store_book(b) || b->departed || b->word_gen == b->gen + 1)
		return false;
	if (b->asking)
		return true;
	if (b->asker_pid != 0)
		pthread_join(b->asker, NULL); /* the last generation's, ended */
	b->asker_pid = 0;
	if (pthread_create(&b->asker, NULL, ask_store, b) != 0) {
		b->word_gen = b->gen + 1; /* no thread: no word */
		return false;
	}
	b->asker_pid = getpid();
	b->asking = true;
	return true;
}

/*
 * Generation 0 under a PMIx book: a link of this rank's own is kept (made
 * again when it ends) to the coordinator's listener, and the coordinator
 * keeps one to each candidate, answered or not, so that a rank that died is
 * found refusing (refused_at_start): the others go on without it, and the
 * next rank takes over from a coordinator that died. (Only to those that
 * had not answered, it waited out its connect timeout for a rank that
 * answered its COLLECT and died before it ACCEPTed: 1 run in 12 of
 * pmix/a_rank_dead_before_the_first_view_is_left_out.) Under another book
 * only the coordinator connects, when it asks.
 */
static void probe_at_start(struct inband *b, const int *cand, int ncand)
{
	int c = lead(b, 0, cand, ncand);

	if (!pmix_book(b))
		return;
	if (c != b->rank) {
		if (c >= 0 && c < b->world)
			(void)link_to(b, c);
		return;
	}
	for (int k = 0; k < ncand; k++) {
		int r = cand[k];
		if (r >= 0 && r < b->world && r != b->rank && !b->r[r].gone)
			(void)link_to(b, r);
	}
}

static int ib_try_settle(struct ft__mb *mb, uint32_t gen, const int *cand, int ncand,
			 const int *back, int nback, bool force, struct ft__view *view)
{
	struct inband *b = IB(mb);
	const struct ft__view *done;
	int rc = 0;

	(void)back;
	(void)nback;
	if (gen == 0 && ncand > 0)
		recheck_book(b);
	lock_ib(b);
	if (ncand > 0 && !(b->active && b->gen > gen))
		begin(b, gen);
	pump(b);
	if (ncand > 0 && b->owed_to >= 0 && b->published)
		answer_collect(b, b->owed_to, b->owed_link, b->owed_ballot);
	done = view_of(b, gen);
	if (done == NULL && gen == 0 && b->published && ncand > 0)
		probe_at_start(b, cand, ncand);
	if (done == NULL && b->active && b->gen == gen && ncand > 0) {
		if (b->noquorum) {
			rc = -FT_EPARTITIONED;
		} else if (b->published &&
			   (lead(b, gen, cand, ncand) == b->rank || b->ballot != 0 ||
			    (force && gen > 0 && b->promised == 0))) {
			/* the coordinator, or, once the detector waited long
			 * enough, a candidate no coordinator has reached */
			rc = coordinate(b, cand, ncand, force);
			done = view_of(b, gen);
		}
	}
	if (done != NULL) {
		*view = *done;
		view->members = malloc((size_t)done->size * sizeof(int));
		if (view->members == NULL) {
			rc = -FT_ENOMEM;
		} else {
			memcpy(view->members, done->members, (size_t)done->size * sizeof(int));
			rc = 1;
		}
	}
	unlock_ib(b);
	return rc;
}

static int ib_resume(struct ft__mb *mb, struct ft__view *latest)
{
	(void)mb;
	(void)latest;
	return 0; /* a new incarnation (rejoin) needs the file rendezvous: comm.c refuses it */
}

static int ib_lookup(struct ft__mb *mb, uint32_t gen, int orig, struct ft__member *m)
{
	struct inband *b = IB(mb);
	const struct ft__view *v;
	int rc = -FT_EPEERFAILED;

	lock_ib(b);
	v = view_of(b, gen);
	if (v == NULL && gen == b->gen && orig == b->rank && b->published) {
		*m = b->mine;
		rc = 0;
	}
	for (int i = 0; v != NULL && i < v->size; i++)
		if (v->members[i] == orig && b->r[orig].have_addr) {
			memset(m, 0, sizeof(*m));
			snprintf(m->addr, sizeof(m->addr), "%s", b->r[orig].addr);
			snprintf(m->ctrl, sizeof(m->ctrl), "%s", b->r[orig].ctrl);
			m->next_op = value_of(b, gen)->next_ops[i];
			rc = 0;
		}
	unlock_ib(b);
	return rc;
}

/* Leaving: the listener and every link close, which the others' kernels
 * report: a settle in progress counts this rank out at once. */
static int ib_depart(struct ft__mb *mb, uint64_t next_op)
{
	struct inband *b = IB(mb);

	(void)next_op;
	lock_ib(b);
	b->departed = true;
	ft__ctl_close(&b->ctl);
	b->ctl_open = false;
	unlock_ib(b);
	return 0;
}

static void ib_close(struct ft__mb *mb, uint32_t gen, bool remove_view)
{
	struct inband *b = IB(mb);

	(void)gen;
	(void)remove_view;
	if (b == NULL)
		return;
	if (b->asker_pid == getpid())
		pthread_join(b->asker, NULL); /* within ASK_MS */
	if (b->ctl_open)
		ft__ctl_close(&b->ctl);
	for (uint32_t g = 0; g < b->nviews; g++) {
		ft__view_free(&b->views[g]);
		free(b->values[g].next_ops);
	}
	free(b->views);
	free(b->values);
	value_free(&b->accepted);
	value_free(&b->best);
	value_free(&b->proposal);
	free(b->book);
	free(b->r);
	pthread_mutex_destroy(&b->lock);
	free(b);
	mb->be = NULL;
}

static int ib_pollfds(struct ft__mb *mb, struct pollfd *pfd, int cap)
{
	struct inband *b = IB(mb);
	int n;

	lock_ib(b);
	if (!b->ctl_open || cap < 1 + b->ctl.nlinks) {
		unlock_ib(b);
		return 0;
	}
	n = ft__ctl_pollfds(&b->ctl, pfd, NULL);
	unlock_ib(b);
	return n;
}

static uint32_t ib_pump(struct ft__mb *mb)
{
	struct inband *b = IB(mb);
	uint32_t asked;

	lock_ib(b);
	if (b->ctl_open)
		pump(b);
	asked = b->newest_asked;
	unlock_ib(b);
	return asked;
}

static void ib_certain(struct ft__mb *mb, int orig)
{
	struct inband *b = IB(mb);

	lock_ib(b);
	mark_certain(b, orig, "its detector link was closed by its kernel");
	unlock_ib(b);
}

static int ib_max_pollfds(struct ft__mb *mb)
{
	return 1 + IB(mb)->ctl.nlinks;
}

#ifdef FTCC_FUZZ
/* A backend as ib_open makes it, without a listener: one link per rank, all on f->sink. */
static struct inband *fuzz_open(const struct ft__inband_fuzz *f)
{
	struct inband *b = calloc(1, sizeof(*b));

	if (b == NULL)
		return NULL;
	b->rank = f->rank;
	b->world = f->world;
	b->owed_to = -1;
	b->reply_wait_ms = 1000;
	pthread_mutex_init(&b->lock, NULL);
	b->book = calloc((size_t)b->world, sizeof(*b->book));
	b->r = calloc((size_t)b->world, sizeof(*b->r));
	b->ctl.links = calloc((size_t)b->world, sizeof(*b->ctl.links));
	b->ctl_open = true;
	b->ctl.listen_fd = -1;
	b->ctl.nlinks = b->ctl.links != NULL ? b->world : 0;
	b->ctl.max_payload = ft__inband_payload_max(b->world);
	b->ctl.msg_cap = b->ctl.max_payload + 16;
	if (b->book == NULL || b->r == NULL || b->ctl.links == NULL)
		return b;
	for (int r = 0; r < b->world; r++) {
		b->r[r].link = -1;
		b->ctl.links[r] = (struct ft__ctl_link){.fd = r == b->rank ? -1 : f->sink,
							.peer = r};
		if (f->book) {
			snprintf(b->r[r].addr, sizeof(b->r[r].addr), "h:%d", r + 1);
			b->r[r].have_addr = true;
		}
	}
	return b;
}

int ft__inband_fuzz(const struct ft__inband_fuzz *f, const struct ft__ctl_msg *msgs, int n)
{
	struct ft__mb mb = {.be = fuzz_open(f)};
	struct inband *b = mb.be;
	struct ft__member m;
	int rc = 0;

	if (b == NULL)
		return -FT_ENOMEM;
	if (b->book == NULL || b->r == NULL || b->ctl.links == NULL)
		rc = -FT_ENOMEM;
	/* the views this rank settled before: generations below f->gen */
	b->gen = f->gen;
	for (uint32_t g = 0; rc == 0 && g < f->gen; g++) {
		struct ib_value v = {.ballot = COMMITTED, .first_op = g,
				     .nonce = f->views[g].nonce};
		if ((rc = value_alloc(&v, f->views[g].size)) != 0)
			break;
		v.n = f->views[g].size;
		memcpy(v.members, f->views[g].members, (size_t)v.n * sizeof(int));
		memset(v.next_ops, 0, (size_t)v.n * sizeof(uint64_t));
		rc = commit(b, g, &v);
	}
	if (rc == 0 && f->active) {
		begin(b, f->gen);
		b->promised = f->promised;
		if (f->phase > 0) {
			b->ballot = f->ballot;
			b->phase = f->phase;
		}
	}
	if (rc == 0 && f->published) {
		snprintf(b->mine.addr, sizeof(b->mine.addr), "h:%d", f->rank + 1);
		b->mine.next_op = 7;
		b->published = true;
	}
	/* as pump() takes them: the header's sender is the link's peer */
	for (int k = 0; rc == 0 && k < n; k++)
		if (msgs[k].type != FT__CTL_HELLO && msgs[k].from >= 0 && msgs[k].from < b->world &&
		    msgs[k].from != b->rank)
			on_msg(b, msgs[k].from, &msgs[k]);
	if (rc == 0 && b->owed_to >= 0 && b->published)
		answer_collect(b, b->owed_to, b->owed_link, b->owed_ballot);
	for (uint32_t g = 0; rc == 0 && g <= b->gen + 1; g++)
		for (int r = 0; r < b->world; r++)
			(void)ib_lookup(&mb, g, r, &m);
	for (int r = 0; r < b->ctl.nlinks; r++)
		b->ctl.links[r].fd = -1; /* the sink is the harness's */
	ib_close(&mb, 0, false);
	return rc;
}
#endif

const struct ft__mb_ops ft__mb_inband_ops = {
	.size = sizeof(struct ft__mb_ops),
	.name = "inband",
	.open = ib_open,
	.publish = ib_publish,
	.try_settle = ib_try_settle,
	.resume = ib_resume,
	.lookup = ib_lookup,
	.depart = ib_depart,
	.close = ib_close,
	.max_pollfds = ib_max_pollfds,
	.pollfds = ib_pollfds,
	.pump = ib_pump,
	.certain = ib_certain,
};
