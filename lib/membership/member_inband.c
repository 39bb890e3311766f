/* member_inband.c: the in-band membership's protocol: views settled among the ranks over control links (Paxos, quorums), no shared file system; its backend operations are in inband_backend.c, its links and table of views in inband_links.c, its new incarnations in inband_rejoin.c, its codec in inband_wire.c. */
/* SPDX-License-Identifier: MIT */
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
#include "inband.h"

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
 *   that answered, less those whose death became certain since (a view
 *   holds no incarnation known dead as a live member). It must have a
 *   quorum (below), else under force it tells those that answered
 *   NOQUORUM and every one of them, itself included, stops with
 *   -FT_EPARTITIONED.
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
 * still makes every ft_init time out (docs/design.md, "A job's first view").
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
			if ((b->r[v->members[i]].gone && !b->r[v->members[i]].late) || v->fresh[i])
				return false;
		return v->n > 0;
	}
	if (prev == NULL || !view_has(prev, from) || v->nonce != prev->nonce)
		return false;
	/* both ascending: one walk (a RECORD of every rank comes from every rank);
	 * a fresh member is a new incarnation whose record this rank holds
	 * (inband_rejoin.c) */
	for (int i = 0; i < v->n; i++) {
		if (v->fresh[i] == IB_FRESH_NEW) {
			if (!ft__ib_fresh_known(b, v->members[i], gen))
				return false;
			continue;
		}
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
			ft__ib_late_gone(b, r, "the job's first view was settled without it");
	free(in);
}

/* ---- the acceptor's side ---- */

/* This rank's answer about generation gen (the one being settled, or one
 * committed here that a late coordinator asks about) on link i; a value it
 * reports goes with its new incarnations' records (the coordinator must
 * hold them to take the value: value_fits). */
static void send_record(struct inband *b, int i, uint32_t gen, uint64_t ballot)
{
	unsigned char buf[65536];
	struct wbuf w = {.p = buf, .cap = b->ctl.max_payload};
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
	if (rec.kind != 0)
		ft__ib_fresh_on_link(b, i, gen, &rec.v);
	ft__ib_put_record(&w, &rec, b->r, b->world);
	ft__ib_reply(b, i, gen, FT__CTL_MB_RECORD, &w);
}

void ft__ib_answer_collect(struct inband *b, int from, int link, uint64_t ballot)
{
	if (!b->published) {
		b->owed_to = from; /* answered once this rank publishes */
		b->owed_link = link;
		b->owed_ballot = ballot;
		return;
	}
	b->owed_to = -1;
	if (link < 0 || b->ctl.links[link].peer != from)
		return; /* its link is gone: it asks again or is gone */
	send_record(b, link, b->gen, ballot);
}

static void answer_ballot(struct inband *b, int link, enum ft__ctl_type type, uint64_t ballot)
{
	unsigned char buf[8];
	struct wbuf w = {.p = buf, .cap = sizeof(buf)};

	put_u64(&w, ballot);
	ft__ib_reply(b, link, b->gen, type, &w);
}

static void send_ballot(struct inband *b, int to, enum ft__ctl_type type, uint64_t ballot)
{
	unsigned char buf[8];
	struct wbuf w = {.p = buf, .cap = sizeof(buf)};

	put_u64(&w, ballot);
	(void)ft__ib_send_to(b, to, type, &w);
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
	b->r[from].collect_gen = b->gen;
	if (ballot < b->promised && view_of(b, b->gen) == NULL) {
		answer_ballot(b, link, FT__CTL_MB_NACK, b->promised);
		return;
	}
	b->promised = ballot;
	b->promised_ms = ft__now_ms();
	ft__ib_answer_collect(b, from, link, ballot);
}

static void on_propose(struct inband *b, int from, int link, struct rbuf *r)
{
	struct ib_value v = {0};

	ft__ib_get_value(r, b->world, &v);
	if (r->bad)
		return;
	if (!ballot_ok(b, v.ballot, from) || !value_fits(b, b->gen, from, &v)) {
		ft__warn("membership: ignored a proposal from rank %d that no settle of generation "
			 "%u makes", from, b->gen);
		ft__ib_value_free(&v);
		return;
	}
	note_ballot(b, v.ballot);
	if (v.ballot < b->promised) {
		answer_ballot(b, link, FT__CTL_MB_NACK, b->promised);
		ft__ib_value_free(&v);
		return;
	}
	b->promised = v.ballot;
	b->promised_ms = ft__now_ms();
	ft__ib_value_free(&b->accepted);
	b->accepted = v;
	answer_ballot(b, link, FT__CTL_MB_ACCEPT, v.ballot);
}

/* Commits v (its members move), then puts its new incarnations' addresses in place. */
static int take(struct inband *b, uint32_t gen, struct ib_value *v)
{
	int rc = ft__ib_commit(b, gen, v);

	if (rc == 0 && gen > 0 && value_of(b, gen) != NULL)
		ft__ib_install_fresh(b, gen, value_of(b, gen));
	return rc;
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

	ft__ib_get_value(r, b->world, &v);
	if (r->bad)
		return;
	if (gen > b->gen + (uint64_t)1 ||
	    (v.ballot != COMMITTED && !ballot_ok(b, v.ballot, from))) {
		ft__warn("membership: ignored rank %d's commit of generation %u, which no settle "
			 "reachable from generation %u makes", from, gen, b->gen);
		ft__ib_value_free(&v);
		return;
	}
	if (view_of(b, gen) != NULL || (gen > 0 && view_of(b, gen - 1) == NULL)) {
		/* a repeat; or early, before the view it follows: this rank
		 * learns it when it settles that one (a coordinator asks it) */
		ft__ib_value_free(&v);
		return;
	}
	if (!value_fits(b, gen, from, &v)) {
		ft__warn("membership: ignored rank %d's commit of generation %u, which does not "
			 "follow the view before it", from, gen);
		ft__ib_value_free(&v);
		return;
	}
	if (gen == 0 && v.ballot != COMMITTED && v.ballot < b->promised) {
		/* a round this rank promised to outbid: not chosen (see the top) */
		ft__ib_value_free(&v);
		return;
	}
	if (gen == 0)
		gone_on_word(b, from, &v);
	(void)take(b, gen, &v);
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

	ft__ib_get_record(r, b->world, &rec);
	v = rec.v;
	kind = rec.kind;
	if (r->bad || rec.ballot != b->ballot || b->phase != 1 || rec.addr[0] == '\0' ||
	    (kind == 1 && !ballot_ok(b, v.ballot, -1)) || (kind == 2 && v.ballot != COMMITTED) ||
	    (kind != 0 && !value_fits(b, b->gen, from, &v))) {
		ft__ib_value_free(&v);
		return;
	}
	for (int c = 0; c < b->world; c++)
		if (bit(rec.certain, c) && c != b->rank)
			ft__ib_mark_certain(b, c, "another rank saw it gone");
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
		ft__ib_value_free(&b->best);
		b->best = v;
	} else if (kind == 1 && !b->best_committed && v.ballot > b->best.ballot) {
		ft__ib_value_free(&b->best);
		b->best = v;
	} else {
		ft__ib_value_free(&v);
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

	if (r->bad || !ballot_ok(b, ballot, from))
		return;
	note_ballot(b, ballot);
	if (gen > b->gen + (uint64_t)1)
		return; /* out of reach: see on_msg */
	if (gen > b->r[from].collect_gen)
		b->r[from].collect_gen = gen;
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
	send_record(b, link, gen, ballot); /* a late coordinator: tell it what was committed */
}

/* A newcomer refuses a COLLECT of the job's first view from rank `from`
 * on link i, below the ballot it keeps now, as an acceptor would: that
 * coordinator asks again above it (the one kept may be a dead
 * coordinator's, and the first view would wait out the connect timeout). */
static void nack_zero(struct inband *b, int i, int from, uint64_t kept)
{
	unsigned char buf[8];
	struct wbuf w = {.p = buf, .cap = sizeof(buf)};

	if (i < 0 || i >= b->ctl.nlinks || b->ctl.links[i].fd < 0 || b->ctl.links[i].peer != from)
		return;
	put_u64(&w, kept);
	ft__ib_reply(b, i, 0, FT__CTL_MB_NACK, &w);
}

/* A newcomer's COLLECT of the job's first view: the highest is kept, this
 * process may yet take part in that view (inband_backend.c, start_again)
 * and its coordinator asks each rank once; the others are refused. */
static void keep_zero(struct inband *b, int link, const struct ft__ctl_msg *m)
{
	bool kept = b->future_zero && b->future_gen == 0;
	uint64_t ballot;

	if (m->len < sizeof(ballot))
		return;
	memcpy(&ballot, m->payload, sizeof(ballot));
	if (!ballot_ok(b, ballot, m->from))
		return;
	if (ballot < b->future_ballot) {
		if (kept)
			nack_zero(b, link, m->from, b->future_ballot);
		return;
	}
	if (kept && ballot > b->future_ballot)
		nack_zero(b, b->future_link, b->future_from, ballot);
	b->future_zero = true;
	b->future_gen = 0;
	b->future_from = m->from;
	b->future_link = link;
	b->future_ballot = ballot;
}

/* Handles one message. */
void ft__ib_on_msg(struct inband *b, int link, const struct ft__ctl_msg *m)
{
	struct rbuf r = {.p = m->payload, .len = m->len};
	uint64_t ballot;
	bool current = b->active && m->gen == b->gen;

	if (m->from < 0 || m->from >= b->world)
		return;
	/* a new incarnation not taken back yet is no acceptor: it has none
	 * of its last incarnation's promises (inband_rejoin.c) */
	if (b->newcomer && (m->type == FT__CTL_MB_COLLECT || m->type == FT__CTL_MB_PROPOSE)) {
		if (m->type == FT__CTL_MB_COLLECT && m->gen == 0)
			keep_zero(b, link, m);
		return;
	}
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
		if (m->gen == 0 && !b->started) /* before the job's first view only */
			on_book(b, &r);
		break;
	case FT__CTL_MB_COMMIT:
		/* the next generation too: one this rank has not begun yet may
		 * leave it out (on_commit) */
		on_commit(b, m->from, m->gen, &r);
		break;
	case FT__CTL_MB_ASK:
		ft__ib_on_ask(b, m->from, link, &r);
		break;
	case FT__CTL_MB_REJOIN:
		ft__ib_on_rejoin(b, m->from, link, m->gen, &r);
		break;
	case FT__CTL_MB_ADDRS:
		ft__ib_on_addrs(b, m->from, m->gen, &r);
		break;
	case FT__CTL_MB_LATEST:
		ft__ib_on_latest(b, m->from, m->gen, &r);
		break;
	case FT__CTL_BYE:
		/* it finalizes (ib_depart): the close that follows is no death
		 * to await a new incarnation for */
		b->r[m->from].left = true;
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
void ft__ib_pump(struct inband *b)
{
	ft__ctl_accept(&b->ctl);
	for (int i = 0; i < b->ctl.nlinks; i++) {
		struct ft__ctl_msg m;
		int rc = 0;
		while (b->ctl.links[i].fd >= 0 && (rc = ft__ctl_next(&b->ctl, i, &m)) == 1) {
			/* the header's sender must be the one the hello named */
			if (m.type == FT__CTL_HELLO || m.from != b->ctl.links[i].peer)
				continue;
			ft__ib_on_msg(b, i, &m);
		}
		if (b->ctl.links[i].fd >= 0 && rc < 0)
			ft__ib_link_failed(b, i, rc);
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

/*
 * Whether the coordinator still awaits a new incarnation of candidate r,
 * whose death is certain (maybe since it answered). The detector names the
 * failed members it awaits back (back[]), but not one whose death it has
 * not heard of: several died at once, or the view holds a dead
 * incarnation (it answered, then died before the commit), whose death
 * news the adopting detector took as old. Skipped unawaited, such a rank
 * went out of the view under rejoin while its new incarnation was still
 * asking, and the op ran short (test_inband_rejoin, chains of newcomers).
 * So under rejoin (start_wait_ms) it is awaited as the file backend
 * awaits a dead candidate (member_file.c, awaited_at_start): until its
 * REJOIN is live (ft__ib_add_back takes it from cand), for start_wait_ms
 * at most; not one that said goodbye (it finalized).
 */
static bool awaits_new(struct inband *b, int r, int64_t now)
{
	struct ib_rank *p = &b->r[r];

	if (b->gen == 0 || b->start_wait_ms <= 0 || p->left || ft__ib_back_live(b, r, b->gen))
		return false;
	if (p->awaited_ms == 0) {
		p->awaited_ms = now;
		ft__info("membership: rank %d is gone for certain and generation %u awaits a new "
			 "incarnation of it for %d ms", r, b->gen, b->start_wait_ms);
	}
	return now - p->awaited_ms < b->start_wait_ms;
}

/* The value to propose once the candidates answered, with the new
 * incarnations of back that asked (inband_rejoin.c): 0, or -FT_ENOMEM. */
static int choose(struct inband *b, const int *cand, int ncand, const int *back, int nback)
{
	int n = 0;

	ft__ib_value_free(&b->proposal);
	/* (a rank gone late is one of generation 0: later, every reported
	 * value may have been chosen) */
	if (b->best_committed || (b->best.ballot != 0 && (b->gen > 0 || !holds_late(b, &b->best))))
		return ft__ib_value_copy(&b->proposal, &b->best);
	if (ft__ib_value_alloc(&b->proposal, b->world) != 0)
		return -FT_ENOMEM;
	b->proposal.first_op = b->mine.next_op;
	for (int r = 0; r < b->world; r++) {
		if (r != b->rank && (!b->r[r].replied || b->r[r].late))
			continue;
		/* answered, then died for certain (its RECORD came from the
		 * process whose death was proven since): not a member as it
		 * was, for the view would hold a dead incarnation as alive;
		 * its new incarnation, if one asked, is taken as new below */
		if (r != b->rank && b->gen > 0 && b->r[r].certain)
			continue;
		b->proposal.members[n] = r; /* ascending already */
		b->proposal.next_ops[n++] = r == b->rank ? b->mine.next_op : b->r[r].next_op;
		if (r != b->rank && b->r[r].next_op < b->proposal.first_op)
			b->proposal.first_op = b->r[r].next_op;
	}
	b->proposal.n = n;
	if (b->gen > 0) {
		ft__ib_add_back(b, &b->proposal, back, nback);
		/* a candidate that died unseen (the launcher's word) and asked back */
		ft__ib_add_back(b, &b->proposal, cand, ncand);
		/* and who is still owed the state since an earlier one took it */
		ft__ib_carry_owed(b, &b->proposal);
	}
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

	ft__ib_put_value(&w, v);
	return ft__ib_send_to(b, to, type, &w);
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
		if (ft__ib_send_to(b, to, FT__CTL_MB_BOOK, &w) != 0)
			return;
	}
}

/*
 * One step of coordinating the generation: 1 when committed here, 0 not
 * yet, -FT_EPARTITIONED when no quorum can be had.
 */
int ft__ib_coordinate(struct inband *b, const int *cand, int ncand, const int *back, int nback,
		       bool force)
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
		ft__ib_value_free(&b->best);
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
			if (ft__ib_value_copy(&b->best, value_of(b, b->gen)) != 0)
				return -FT_ENOMEM;
			b->best.ballot = UINT64_MAX;
		} else if (b->accepted.ballot != 0 && ft__ib_value_copy(&b->best, &b->accepted) != 0) {
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
			if (r == b->rank)
				continue;
			if (b->r[r].certain) {
				all &= !awaits_new(b, r, now);
				continue;
			}
			if (b->r[r].replied)
				continue;
			all = false;
			if (!b->r[r].asked) {
				unsigned char buf[8];
				struct wbuf w = {.p = buf, .cap = sizeof(buf)};
				put_u64(&w, b->ballot);
				if (ft__ib_send_to(b, r, FT__CTL_MB_COLLECT, &w) == 0)
					b->r[r].asked = true;
			}
		}
		for (int k = 0; k < nback; k++)
			all &= ft__ib_back_live(b, back[k], b->gen); /* awaited as the file backend does */
		for (int r = 0; r < b->world; r++)
			votes[r] |= b->r[r].replied;
		bool window = force && now - b->phase_ms >= b->reply_wait_ms;
		if (!all && !window)
			goto out;
		if (b->gen > 0 && !quorum(b, votes)) {
			if (!window || ft__ib_launchers_word(b))
				goto out;
			ft__error("membership: generation %u has no quorum on this side (%s): this "
				  "rank stops", b->gen, "a network partition, or most ranks lost");
			for (int r = 0; r < b->world; r++)
				if (b->r[r].replied) /* they stop too */
					send_ballot(b, r, FT__CTL_MB_NOQUORUM, b->ballot);
			rc = -FT_EPARTITIONED;
			goto out;
		}
		if ((rc = choose(b, cand, ncand, back, nback)) != 0)
			goto out;
		if (b->best_committed) {
			b->phase = 3;
		} else {
			b->phase = 2;
			b->phase_ms = now;
			ft__ib_value_free(&b->accepted);
			if ((rc = ft__ib_value_copy(&b->accepted, &b->proposal)) != 0)
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
		if (now - b->phase_ms >= PROPOSE_AGAIN_MS) {
			/* an acceptor that did not hold a fresh member's record yet
			 * ignored it (value_fits): the records and the value again */
			b->phase_ms = now;
			for (int r = 0; r < b->world; r++)
				b->r[r].proposed &= b->r[r].accepted;
		}
		votes[b->rank] = true;
		for (int r = 0; r < b->world; r++) {
			struct ib_rank *p = &b->r[r];
			if (r == b->rank || !p->replied)
				continue;
			if (!p->proposed && !p->certain &&
			    ft__ib_send_fresh(b, r, b->gen, &b->proposal) == 0 &&
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
			(void)ft__ib_send_fresh(b, r, b->gen, &b->proposal);
			(void)send_value(b, r, FT__CTL_MB_COMMIT, &b->proposal);
			b->r[r].told = true;
		}
		for (int k = 0; k < ncand; k++)
			if (cand[k] != b->rank && !b->r[cand[k]].told && b->r[cand[k]].link >= 0 &&
			    ft__ib_send_fresh(b, cand[k], b->gen, &b->proposal) == 0)
				(void)send_value(b, cand[k], FT__CTL_MB_COMMIT, &b->proposal);
		if (b->gen > 0)
			ft__ib_tell_newcomers(b, b->gen, &b->proposal);
		if ((rc = ft__ib_value_copy(&v, &b->proposal)) == 0)
			rc = take(b, b->gen, &v);
		if (rc == 0)
			rc = 1;
	}
out:
	free(votes);
	return rc;
}
