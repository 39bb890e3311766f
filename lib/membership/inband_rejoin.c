/* inband_rejoin.c: new incarnations under the in-band membership: a restarted rank finds its running job through its address book, asks back into the next generation, and the members take it in at their settle with the addresses it came with. */
/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <string.h>

#include "inband.h"

/*
 * The rest of the protocol is member_inband.c's (see its top). A new
 * incarnation (FTCC_INCARNATION > 0) of rank e has the address book its
 * bootstrap gave it (a peer list, ftcc-run's store): every other rank's
 * membership listener, as at the job's start. Its own data, detector and
 * membership addresses may be new (another host).
 *
 * - ASK (newcomer -> every rank it reaches, on its own authenticated link):
 *   a rank that holds views answers ADDRS (its newest view's members: data,
 *   detector and membership addresses), then LATEST (that view); one that
 *   holds none yet (the job's first view is being settled) an empty LATEST.
 *   The newcomer takes the newest view it hears within ANSWER_MS of the
 *   first, all of one nonce. Empty answers: the job is still starting (this
 *   rank was killed inside ft_init); it asks again until a view comes (at
 *   most its connect timeout: -FT_ETIMEDOUT). That view leaves it out: the
 *   job's first view goes on without a rank killed inside ft_init (under
 *   ftcc-run's store, whose book the newcomer joined again, the others take
 *   the moved entry as that death: inband_backend.c, moved_at_start), and
 *   the newcomer is sent away (-FT_EEXCLUDED). No answer at all within its
 *   window: the job is over, or no rank of it lives (-FT_EENDED).
 * - REJOIN (newcomer -> every member of the newest view g it holds, for
 *   generation g + 1): its next op and its new addresses. A member keeps the
 *   record, live while the link it came on is; one that holds a view of g +
 *   1 or later answers ADDRS and LATEST again, and the newcomer asks for the
 *   generation after the newest it heard of.
 * - The coordinator of g + 1 awaits each failed member its detector awaits
 *   back (rejoin policy) until that rank's live REJOIN came, and takes it
 *   as the file backend does (unless its next op is past first_op + 1), as a
 *   fresh member: the value marks it so. Under rejoin it awaits so, for
 *   start_wait_ms, a candidate whose death is certain though no detector
 *   named it (awaits_new), and a rank that answered and died since is no
 *   member as it was (choose): unawaited, such a rank went out of the view
 *   while its new incarnation asked, and the op ran without its input.
 *   Before the PROPOSE and the COMMIT to a rank, ADDRS relays the fresh
 *   members' records to it: a value with a fresh member whose record a
 *   rank does not hold does not fit there (value_fits), so no rank commits
 *   a view it could not reach. The COMMIT also goes to every newcomer with
 *   a live record, taken or not, on its own link.
 * - At the commit each rank puts the fresh members' addresses in place of
 *   the old ones (lookups, and links to their listeners, use them from then
 *   on) and forgets the old incarnation's certain death.
 *
 * What a newcomer takes on a member's word (an authenticated rank of the
 * job: the token) is what a member would take on a COMMIT: addresses, and
 * views newer than the one it holds, of one nonce, at most NEWEST_MAX
 * generations (no message grows the table of views past what a long job
 * holds).
 *
 * Growing back (detect_grow.c: a newcomer after the rejoin timeout, or
 * under shrink) needs no message of its own. A newcomer that hears a view
 * without it asks for the next generation, as above, and keeps asking. A
 * member's lookup of a generation not settled yet (ft__ib_lookup_unsettled)
 * shows the live REJOIN records of non-members, so the coordinator's main
 * thread finds a newcomer waiting and plans the grow, and its detector
 * awaits it back in the settle. It also shows each member whose COLLECT
 * for that generation came: a member's main thread, asked at the grow's op
 * whether the coordinator grows (its record in the next generation, as
 * the file backend shows it), takes that COLLECT as its word, and its
 * detector tells a grow's settle (the coordinator's COLLECT alone) from
 * another's (detect_grow.c, ft__det_asked).
 */

#define NEWEST_MAX (1u << 16)   /* the latest generation a newcomer takes on a member's word */
#define ENTRY_MAX (4 + 8 + 3 * 2 + FT__ADDR_MAX + FT__CTRL_MAX + FT__BOOK_ENTRY_MAX)

static bool value_has(const struct ib_value *v, int r)
{
	for (int i = 0; i < v->n; i++)
		if (v->members[i] == r)
			return true;
	return false;
}

static void put_entry(struct wbuf *w, int e, uint64_t next_op, const char *addr, const char *ctrl,
		      const char *mb)
{
	put_i32(w, e);
	put_u64(w, next_op);
	put_str(w, addr);
	put_str(w, ctrl);
	put_str(w, mb);
}

/* One entry into *p (rank in *e); bad unless it names a rank and both listeners. */
static void get_entry(struct rbuf *r, const struct inband *b, int *e, struct ib_back *p)
{
	*e = get_i32(r);
	p->next_op = get_u64(r);
	get_str(r, p->addr, sizeof(p->addr));
	get_str(r, p->ctrl, sizeof(p->ctrl));
	get_str(r, p->mb, sizeof(p->mb));
	if (*e < 0 || *e >= b->world || p->addr[0] == '\0' || p->mb[0] == '\0')
		r->bad = true;
}

/* ADDRS on link i of ranks[0..n): a fresh one's record (fresh[k]), else
 * what this rank knows of it; in as many messages as they need. */
static void send_addrs(struct inband *b, int i, uint32_t gen, const int *ranks,
		       const uint64_t *next_ops, const uint8_t *fresh, int n)
{
	unsigned char buf[65536];
	int k = 0;

	while (k < n) {
		struct wbuf w = {.p = buf, .cap = b->ctl.max_payload};
		int count = 0;
		size_t at;
		put_i32(&w, 0);
		for (; k < n && w.len + ENTRY_MAX <= w.cap; k++) {
			const struct ib_rank *p = &b->r[ranks[k]];
			if (fresh != NULL && fresh[k] == IB_FRESH_NEW) {
				if (!p->back.have || p->back.gen != gen)
					continue;
				put_entry(&w, ranks[k], p->back.next_op, p->back.addr, p->back.ctrl,
					  p->back.mb);
			} else if (ranks[k] == b->rank) {
				put_entry(&w, ranks[k], next_ops[k], b->mine.addr, b->mine.ctrl,
					  b->ctl.addr);
			} else if (p->have_addr) {
				put_entry(&w, ranks[k], next_ops[k], p->addr, p->ctrl,
					  b->book[ranks[k]]);
			} else {
				continue;
			}
			count++;
		}
		at = w.len;
		w.len = 0;
		put_i32(&w, count);
		w.len = at;
		if (count > 0)
			ft__ib_reply(b, i, gen, FT__CTL_MB_ADDRS, &w);
	}
}

/* The newest view here to a newcomer on link i: its members' addresses, then the view. */
static void answer(struct inband *b, int i, const struct ft__view *v)
{
	unsigned char buf[65536];
	struct wbuf w = {.p = buf, .cap = b->ctl.max_payload};
	struct ib_value val = b->values[v->generation]; /* borrowed */

	send_addrs(b, i, v->generation, val.members, val.next_ops, NULL, val.n);
	val.ballot = COMMITTED;
	ft__ib_put_value(&w, &val);
	ft__ib_reply(b, i, v->generation, FT__CTL_MB_LATEST, &w);
}

void ft__ib_on_ask(struct inband *b, int from, int link, struct rbuf *r)
{
	const struct ft__view *v = newest_view(b);
	unsigned char counts;
	struct wbuf none = {.p = &counts, .cap = 1};

	if (b->newcomer && v != NULL)
		return; /* no member: its view is its members' word */
	if (v != NULL) {
		answer(b, link, v);
		return;
	}
	/* the job's first view is not settled here yet (a newcomer too, asking
	 * as the asker does): it lives; and whether that view awaits the asker
	 * (its book entry is the asker's listener, the one its ASK names: it
	 * joined the store before the book went out) */
	counts = r->len > 0 && r->len < FT__BOOK_ENTRY_MAX && r->p[r->len - 1] == '\0' &&
		 !b->r[from].gone && strcmp(b->book[from], (const char *)r->p) == 0;
	none.len = 1;
	ft__ib_reply(b, link, 0, FT__CTL_MB_LATEST, &none);
}

void ft__ib_on_rejoin(struct inband *b, int from, int link, uint32_t gen, struct rbuf *r)
{
	const struct ft__view *v = newest_view(b);
	struct ib_back rec = {.have = true, .gen = gen, .link = link};
	struct ib_back *p = &b->r[from].back;
	int e;

	get_entry(r, b, &e, &rec);
	if (r->bad || e != from || from == b->rank || gen == 0 || gen > NEWEST_MAX)
		return;
	if (!p->have || p->gen != gen || p->link != link)
		ft__info("membership: a new incarnation of rank %d (at %s) asks back into "
			 "generation %u", from, rec.addr, gen);
	*p = rec;
	if (v != NULL && v->generation >= gen)
		answer(b, link, v); /* settled already: it asks for a later one */
}

/*
 * What this rank knew of rank e was of another process: its death (certain,
 * or gone before the job's first view), the wait before linking again, and
 * the link to it go. A view takes a new incarnation of e in
 * (ft__ib_install_fresh); or a newcomer that holds e dead is told a
 * member's listener for e that its book did not hold (its launcher's book
 * had no entry yet: e died before the book went out, and came back), and
 * its REJOIN must reach e too (the coordinator, maybe). Only then: the same
 * listener may be written otherwise (a name in a peer list, the number its
 * rank publishes), and a live link is not dropped for it.
 */
static void another_process(struct inband *b, int e)
{
	struct ib_rank *p = &b->r[e];

	p->certain = false;
	p->retry_ms = 0;
	p->gone = p->late = p->left = false;
	p->awaited_ms = 0;
	if (p->link >= 0)
		ft__ib_drop(b, p->link);
}

void ft__ib_on_addrs(struct inband *b, int from, uint32_t gen, struct rbuf *r)
{
	const struct ft__view *prev = gen > 0 ? view_of(b, gen - 1) : NULL;
	int32_t n = get_i32(r);

	/* a member takes the records of a generation it may settle, from a
	 * member of the view before it; a newcomer not yet taken, its
	 * members' word (see the top) */
	if (!b->newcomer && (gen == 0 || gen > b->gen + (uint64_t)1 || !view_has(prev, from)))
		return;
	for (int32_t k = 0; k < n && !r->bad; k++) {
		struct ib_back rec = {.have = true, .gen = gen, .link = -1};
		struct ib_rank *p;
		int e;
		get_entry(r, b, &e, &rec);
		if (r->bad || e == b->rank)
			continue;
		p = &b->r[e];
		/* its own record, on a live link, stays, unless this one is of a
		 * later generation (it asked again since) */
		if (!ft__ib_back_live(b, e, p->back.gen) || p->back.gen < gen)
			p->back = rec;
		if (b->newcomer) {
			if ((p->certain || p->gone) && strcmp(b->book[e], rec.mb) != 0)
				another_process(b, e);
			snprintf(p->addr, sizeof(p->addr), "%s", rec.addr);
			snprintf(p->ctrl, sizeof(p->ctrl), "%s", rec.ctrl);
			snprintf(b->book[e], sizeof(b->book[e]), "%s", rec.mb);
			p->have_addr = true;
		}
	}
}

/* A newcomer keeps only the newest view it was told (and those it settles
 * with its members once taken): no member's word grows its table. */
static void forget_older(struct inband *b, uint32_t gen)
{
	for (uint32_t g = 0; g < gen && g < b->nviews; g++) {
		if (b->views[g].members == NULL)
			continue;
		ft__view_free(&b->views[g]); /* the value shares its members */
		free(b->values[g].next_ops);
		free(b->values[g].fresh);
		b->values[g] = (struct ib_value){0};
	}
}

void ft__ib_on_latest(struct inband *b, int from, uint32_t gen, struct rbuf *r)
{
	struct ib_value v = {0};
	const struct ft__view *had = newest_view(b);
	/* the generation it asked for: a view that takes it (its COMMIT may
	 * come later, or never); an earlier one may hold its last incarnation
	 * as new, which is not this one */
	bool asked = b->active && b->published && gen == b->gen;

	if (!b->newcomer)
		return;
	b->r[from].heard = true;
	if (r->len <= 1) { /* no view there yet; 1: and its first view awaits this process */
		b->r[from].counts_me = r->len == 1 && r->p[0] == 1;
		return;
	}
	ft__ib_get_value(r, b->world, &v);
	if (r->bad)
		return;
	if (gen > NEWEST_MAX || !value_has(&v, from) || (had != NULL && v.nonce != had->nonce)) {
		ft__ib_value_free(&v);
		return;
	}
	b->r[from].answered = true; /* (a view it holds already, or older: answered all the same) */
	if (had != NULL && gen <= had->generation) {
		ft__ib_value_free(&v);
		return;
	}
	v.ballot = COMMITTED;
	if (ft__ib_hold_view(b, gen, &v) != 0)
		return;
	forget_older(b, gen);
	if (asked)
		ft__ib_install_fresh(b, gen, value_of(b, gen));
}

bool ft__ib_back_live(const struct inband *b, int e, uint32_t gen)
{
	const struct ib_back *p = &b->r[e].back;

	return p->have && p->gen == gen && p->link >= 0 && p->link < b->ctl.nlinks &&
	       b->ctl.links[p->link].fd >= 0 && b->ctl.links[p->link].peer == e;
}

bool ft__ib_fresh_known(const struct inband *b, int e, uint32_t gen)
{
	if (e == b->rank)
		return b->newcomer;
	return b->r[e].back.have && b->r[e].back.gen == gen;
}

void ft__ib_add_back(struct inband *b, struct ib_value *v, const int *back, int nback)
{
	for (int k = 0; k < nback; k++) {
		int e = back[k], at = 0;
		if (e < 0 || e >= b->world || !ft__ib_back_live(b, e, b->gen) ||
		    b->r[e].back.next_op > v->first_op + 1)
			continue; /* not asked yet; or a log ahead of the job: settled without */
		while (at < v->n && v->members[at] < e)
			at++;
		if (at < v->n && v->members[at] == e)
			continue;
		/* room: a proposal holds the world (choose) */
		memmove(v->members + at + 1, v->members + at, (size_t)(v->n - at) * sizeof(int));
		memmove(v->next_ops + at + 1, v->next_ops + at,
			(size_t)(v->n - at) * sizeof(uint64_t));
		memmove(v->fresh + at + 1, v->fresh + at, (size_t)(v->n - at));
		v->members[at] = e;
		v->next_ops[at] = b->r[e].back.next_op;
		v->fresh[at] = IB_FRESH_NEW;
		v->n++;
	}
}

/*
 * Who in v (being chosen for generation b->gen) is still owed the state
 * since an earlier generation took it back: a member the view before held
 * as new (or owed), whose op (newcomers.c: the first its application runs,
 * not before that view's first op, op 1 at least) is not before v's first
 * op. Every member's newcomers.c counts it from the records of the view
 * that took it; a newcomer taken later holds no view before the one before
 * its own (see the top), and without this mark found another route for
 * the state than the others (its frames then came from another root:
 * FT_EPROTO, and the abort failed every member's op). Carried from view to
 * view for as long as the op stands.
 */
void ft__ib_carry_owed(const struct inband *b, struct ib_value *v)
{
	const struct ib_value *prev = b->gen > 0 ? value_of(b, b->gen - 1) : NULL;

	if (prev == NULL || prev->members == NULL)
		return;
	for (int k = 0, j = 0; k < v->n; k++) {
		uint64_t owed;
		if (v->fresh[k] != IB_FRESH_OLD)
			continue; /* taken now */
		while (j < prev->n && prev->members[j] < v->members[k])
			j++;
		if (j == prev->n || prev->members[j] != v->members[k] ||
		    prev->fresh[j] == IB_FRESH_OLD)
			continue;
		if (prev->fresh[j] == IB_FRESH_NEW) {
			owed = prev->next_ops[j] < prev->first_op ? prev->first_op : prev->next_ops[j];
			if (owed == 0)
				owed = 1;
		} else {
			owed = prev->first_op + (prev->fresh[j] == IB_FRESH_OWED_NEXT);
		}
		if (owed == v->first_op)
			v->fresh[k] = IB_FRESH_OWED;
		else if (owed == v->first_op + 1)
			v->fresh[k] = IB_FRESH_OWED_NEXT;
		/* (before v's first op: it got the state, and that op ran) */
	}
}

/* The fresh members of v, their records on link i. */
void ft__ib_fresh_on_link(struct inband *b, int i, uint32_t gen, const struct ib_value *v)
{
	for (int k = 0; k < v->n; k++)
		if (v->fresh[k] == IB_FRESH_NEW) {
			send_addrs(b, i, gen, v->members, v->next_ops, v->fresh, v->n);
			return;
		}
}

int ft__ib_send_fresh(struct inband *b, int to, uint32_t gen, const struct ib_value *v)
{
	int i = ft__ib_link_to(b, to);

	if (i < 0)
		return NOT_YET;
	ft__ib_fresh_on_link(b, i, gen, v);
	return 0;
}

void ft__ib_tell_newcomers(struct inband *b, uint32_t gen, const struct ib_value *v)
{
	unsigned char buf[65536];
	struct wbuf w = {.p = buf, .cap = b->ctl.max_payload};

	ft__ib_put_value(&w, v);
	for (int e = 0; e < b->world; e++) {
		if (e == b->rank || !ft__ib_back_live(b, e, gen))
			continue;
		ft__ib_fresh_on_link(b, b->r[e].back.link, gen, v);
		ft__ib_reply(b, b->r[e].back.link, gen, FT__CTL_MB_COMMIT, &w);
	}
}

void ft__ib_install_fresh(struct inband *b, uint32_t gen, const struct ib_value *v)
{
	for (int k = 0; k < v->n; k++) {
		int e = v->members[k];
		struct ib_rank *p = &b->r[e];
		if (v->fresh[k] != IB_FRESH_NEW)
			continue;
		if (e == b->rank) {
			snprintf(p->addr, sizeof(p->addr), "%s", b->mine.addr);
			snprintf(p->ctrl, sizeof(p->ctrl), "%s", b->mine.ctrl);
			p->have_addr = true;
			b->newcomer = false; /* a member from now on */
			b->taken_gen = gen;
			continue;
		}
		if (!p->back.have || p->back.gen != gen) {
			/* (value_fits saw to it) Not its addresses, but what this
			 * rank held against its last incarnation goes: left
			 * "certain", it went out in this rank's next COLLECT reply,
			 * and the coordinator of the view after left the new
			 * incarnation out, unawaited, as gone (rejoin ran ops
			 * short: test_inband_rejoin, chains of newcomers) */
			p->certain = false;
			p->gone = p->late = p->left = false;
			p->awaited_ms = 0;
			continue;
		}
		snprintf(p->addr, sizeof(p->addr), "%s", p->back.addr);
		snprintf(p->ctrl, sizeof(p->ctrl), "%s", p->back.ctrl);
		snprintf(b->book[e], sizeof(b->book[e]), "%s", p->back.mb);
		p->have_addr = true;
		another_process(b, e); /* the old incarnation's marks and link go */
		ft__info("membership: rank %d is back in generation %u (a new incarnation at %s)", e,
			 gen, p->addr);
	}
}

/*
 * Its REJOIN to every member of the view before the generation it asks for,
 * again every ASK_AGAIN_MS: a member that settled that generation answers
 * with its newest view, so a lost COMMIT (its coordinator died after the
 * commit) costs one round, not the newcomer's deadline (lock held).
 */
void ft__ib_newcomer_tick(struct inband *b)
{
	const struct ft__view *prev = b->gen > 0 ? view_of(b, b->gen - 1) : NULL;
	unsigned char buf[ENTRY_MAX];
	int64_t now = ft__now_ms();

	if (!b->newcomer || !b->active || !b->published || prev == NULL || view_of(b, b->gen) != NULL)
		return;
	if (now - b->rejoin_ms >= ASK_AGAIN_MS) {
		b->rejoin_ms = now;
		for (int k = 0; k < prev->size; k++)
			b->r[prev->members[k]].sent = false;
	}
	for (int k = 0; k < prev->size; k++) {
		int m = prev->members[k], i;
		struct wbuf w = {.p = buf, .cap = sizeof(buf)};
		if (m == b->rank || b->r[m].sent || (i = ft__ib_link_to(b, m)) < 0)
			continue;
		put_entry(&w, b->rank, b->mine.next_op, b->mine.addr, b->mine.ctrl, b->ctl.addr);
		if (!w.bad && ft__ctl_send(&b->ctl, i, FT__CTL_MB_REJOIN, b->gen, w.p, w.len) == 0)
			b->r[m].sent = true;
	}
}

/*
 * What a newcomer waiting to be taken into generation gen returns (lock
 * held): 1 and *view once the newest view it holds, of gen or later, takes
 * it as new (taken) or leaves it out (the job went on without it); 0 while
 * it waits. A view that holds its rank as not new holds its last
 * incarnation (which answered before it died): the members find that one
 * dead, and this one asks for the generation after.
 */
int ft__ib_newcomer_view(struct inband *b, uint32_t gen, const struct ft__view **view)
{
	const struct ft__view *v = newest_view(b);
	const struct ib_value *val;

	ft__ib_newcomer_tick(b);
	*view = NULL;
	if (v == NULL || v->generation < gen)
		return 0;
	val = value_of(b, v->generation);
	for (int k = 0; k < val->n; k++) {
		if (val->members[k] != b->rank)
			continue;
		if (val->fresh[k] == IB_FRESH_NEW) {
			*view = v;
			return 1;
		}
		if (b->gen <= v->generation) {
			ft__info("membership: generation %u holds rank %d's last incarnation: this one "
				 "asks for the next", v->generation, b->rank);
			struct ft__member mine = b->mine;
			ft__ib_begin(b, v->generation + 1);
			b->mine = mine;
			b->published = true;
			b->rejoin_ms = 0;
		}
		return 0;
	}
	*view = v; /* left out */
	return 1;
}

/*
 * What original rank orig is known to publish for generation gen, which is
 * not settled here (lock held; see the top's growing back): the live
 * REJOIN of a rank the view before gen left out (rejoining, its next op and
 * addresses), or, for a member that sent a COLLECT for gen, its addresses
 * only (that it settles gen is all a member asks). -FT_EPEERFAILED:
 * neither.
 */
int ft__ib_lookup_unsettled(const struct inband *b, uint32_t gen, int orig, struct ft__member *m)
{
	const struct ib_rank *p = &b->r[orig];
	const struct ft__view *prev = gen > 0 ? view_of(b, gen - 1) : NULL;

	memset(m, 0, sizeof(*m));
	if (orig != b->rank && !b->newcomer && prev != NULL && !view_has(prev, orig) &&
	    ft__ib_back_live(b, orig, gen)) {
		snprintf(m->addr, sizeof(m->addr), "%s", p->back.addr);
		snprintf(m->ctrl, sizeof(m->ctrl), "%s", p->back.ctrl);
		m->next_op = p->back.next_op;
		m->rejoining = true;
		return 0;
	}
	if (orig == b->rank || gen == 0 || p->collect_gen != gen || !p->have_addr)
		return -FT_EPEERFAILED;
	snprintf(m->addr, sizeof(m->addr), "%s", p->addr);
	snprintf(m->ctrl, sizeof(m->ctrl), "%s", p->ctrl);
	return 0;
}
