/* inband_backend.c: the in-band membership's backend operations (open, publish, settle, lookup, depart, close), the launcher's word and the probes of a job's start. */
/* SPDX-License-Identifier: MIT */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "inband.h"
#include "sock.h"

/* ---- the backend's operations ---- */

#define ANSWER_MS 50 /* a newcomer, after the first answer: how long the others are awaited */

static void lock_ib(struct inband *b)
{
	pthread_mutex_lock(&b->lock);
}

static void unlock_ib(struct inband *b)
{
	pthread_mutex_unlock(&b->lock);
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
	b->incarnation = p->incarnation;
	b->start_wait_ms = p->start_wait_ms > 0 ? p->start_wait_ms : 0;
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
	if (rc == -FT_EBUSY && cp.port != NULL)
		ft__error("membership: rank %d cannot listen at its own FTCC_PEERS entry %s: its "
			  "port is taken by another socket", b->rank, b->book[b->rank]);
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
			ft__ib_mark_certain(b, r, "its launcher saw it die before it joined");
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
	ft__ib_begin(b, gen);
	b->mine = *m;
	b->published = true;
	ft__ib_pump(b);
	if (b->owed_to >= 0)
		ft__ib_answer_collect(b, b->owed_to, b->owed_link, b->owed_ballot);
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
 * An entry of the store's book that moved is a new incarnation of its rank:
 * the store takes a rank's new address only once the connection of the
 * process that held it ended (docs/launchers.md, "Across hosts"), so the process this
 * rank knew is dead, the launcher's word as a mark is. Before the job's
 * first view it is gone as if marked (the first view settles without it;
 * its new incarnation hears so: inband_rejoin.c); later its death is
 * certain (its new incarnation is awaited back by the detector's settle).
 * Lock held.
 */
static void moved(struct inband *b, int r, const char *entry)
{
	if (r == b->rank || strcmp(b->book[r], entry) == 0)
		return;
	if (!b->started)
		ft__ib_late_gone(b, r, "a new incarnation of it joined the store before the job's "
			      "first view");
	else
		ft__ib_mark_certain(b, r, "a new incarnation of it joined its launcher's store");
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
			if (book[r][0] != '\0') {
				moved(b, r, book[r]);
				continue;
			}
			if (!b->started)
				ft__ib_late_gone(b, r, "its launcher saw it die before the job's first view");
			else
				ft__ib_mark_certain(b, r, "its launcher saw it die");
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
	due = store_book(b) && b->published && !b->started && b->recheck_ms != 0 &&
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
bool ft__ib_launchers_word(struct inband *b)
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
			(void)ft__ib_link_to(b, c);
		return;
	}
	for (int k = 0; k < ncand; k++) {
		int r = cand[k];
		if (r >= 0 && r < b->world && r != b->rank && !b->r[r].gone)
			(void)ft__ib_link_to(b, r);
	}
}

/*
 * A promise of this rank's that no message of its coordinator followed for
 * 2 x reply_wait_ms: that coordinator may have died unseen (no detector
 * watches it: after earlier deaths it is no ring neighbour here), and a
 * settle whose candidates all promised it waited for ever (the campaign,
 * three ranks killed within 150 ms). Any rank may then start a higher
 * round: Paxos keeps one value whoever proposes; the quorum rule is as
 * ever.
 */
static bool stale_promise(const struct inband *b)
{
	return ft__now_ms() - b->promised_ms >= 2 * (int64_t)b->reply_wait_ms;
}

static int ib_try_settle(struct ft__mb *mb, uint32_t gen, const int *cand, int ncand,
			 const int *back, int nback, bool force, struct ft__view *view)
{
	struct inband *b = IB(mb);
	const struct ft__view *done;
	int rc = 0;

	if (gen == 0 && ncand > 0)
		recheck_book(b);
	lock_ib(b);
	if (ncand > 0 && !(b->active && b->gen > gen))
		ft__ib_begin(b, gen);
	ft__ib_pump(b);
	if (ncand > 0 && b->owed_to >= 0 && b->published)
		ft__ib_answer_collect(b, b->owed_to, b->owed_link, b->owed_ballot);
	done = view_of(b, gen);
	/* a newcomer: while it waits, the newest view it heard (inband_rejoin.c).
	 * Once taken, each view as it was settled (newcomers.c counts the
	 * newcomers of each), but for one before the view that took it that it
	 * does not hold, or that holds its last incarnation: it asked for that
	 * one and was taken by a later (ft__ib_newcomer_view), which answers */
	if (ncand == 0 && b->incarnation > 0 && b->mine.rejoining) {
		if (b->newcomer)
			rc = ft__ib_newcomer_view(b, gen, &done);
		else if (gen < b->taken_gen && (done == NULL || view_has(done, b->rank)) &&
			 view_of(b, b->taken_gen) != NULL)
			done = view_of(b, b->taken_gen);
	}
	if (done == NULL && gen == 0 && b->published && ncand > 0)
		probe_at_start(b, cand, ncand);
	if (done == NULL && b->active && b->gen == gen && ncand > 0) {
		if (b->noquorum) {
			rc = -FT_EPARTITIONED;
		} else if (b->published &&
			   (lead(b, gen, cand, ncand) == b->rank || b->ballot != 0 ||
			    (force && gen > 0 && (b->promised == 0 || stale_promise(b))))) {
			/* the coordinator, or, once the detector waited long
			 * enough, a candidate no coordinator has reached, or one
			 * whose coordinator went silent after it promised */
			rc = ft__ib_coordinate(b, cand, ncand, back, nback, force);
			done = view_of(b, gen);
		}
	}
	if (done != NULL)
		rc = ft__view_copy(done, view) == 0 ? 1 : -FT_ENOMEM;
	unlock_ib(b);
	return rc;
}

/* A link of this rank's own, answered (the peer took it), to a member of v. */
static bool reaches(const struct inband *b, const struct ft__view *v)
{
	for (int k = 0; k < v->size; k++) {
		int i = b->r[v->members[k]].link;
		if (v->members[k] != b->rank && i >= 0 && !b->ctl.links[i].connecting &&
		    !b->ctl.links[i].await_ack)
			return true;
	}
	return false;
}

/* Every other member of v answered this newcomer's ASK: none of them holds
 * a newer view (a later one is settled among v's members), so the ranks
 * left (dead, or newcomers, which answer nothing) are not waited for. */
static bool members_answered(const struct inband *b, const struct ft__view *v)
{
	for (int k = 0; k < v->size; k++)
		if (v->members[k] != b->rank && !b->r[v->members[k]].answered)
			return false;
	return true;
}

/*
 * A new incarnation whose job is still starting, and whose first view
 * awaits this very process: it joined ftcc-run's store again before the
 * book went out (its last incarnation died first), so every rank's book
 * holds this process's listener and counts it in the first view, maybe as
 * its coordinator (every rank the book holds answered its ASK, which names
 * that listener, and said so). It takes part in the job's start as a first
 * incarnation would: waiting for a view instead, every rank would wait for
 * it until the connect timeout, and the whole job would fail. Only under
 * the store: a peer list gives every incarnation the same listener, so the
 * answer says nothing of which one the first view counts.
 */
static void start_again(struct inband *b)
{
	ft__info("membership: rank %d's job is still starting and its first view awaits this "
		 "new incarnation: it takes part as at the start", b->rank);
	b->newcomer = false;
}

/*
 * Until one of the control links (or the listener) has something, at most
 * ms (lock held, dropped meanwhile). A newcomer's asking is a few round
 * trips per rank (connect, hello, ASK, answers): sleeping a fixed 2 ms
 * between looks cost up to 2 ms a trip, some 10 ms of the 20 from its
 * ft_init to its ASK back.
 */
static void wait_links(struct inband *b, int ms)
{
	struct pollfd *pfd = calloc((size_t)b->ctl.nlinks + 1, sizeof(*pfd));
	int n = pfd != NULL ? ft__ctl_pollfds(&b->ctl, pfd, NULL) : 0;

	unlock_ib(b);
	if (n > 0) {
		(void)poll(pfd, (nfds_t)n, ms);
	} else {
		struct timespec ts = {0, (long)ms * 1000000L};
		nanosleep(&ts, NULL);
	}
	free(pfd);
	lock_ib(b);
}

/*
 * A new incarnation's look for its job (inband_rejoin.c's top): 1 and *latest, the
 * newest view its members told; 0 for a first incarnation; -FT_EENDED when
 * no rank answered within the window, -FT_ETIMEDOUT when they answered but
 * the job's first view never settled. Asked again
 * (wait_taken, while it waits to be taken): 1 while a member still holds
 * the link to it, else 0.
 */
static int ib_resume(struct ft__mb *mb, struct ft__view *latest)
{
	struct inband *b = IB(mb);
	int64_t start = ft__now_ms(), first = 0, asked_ms = start, marks_ms = start;
	int64_t window = 2 * (int64_t)b->reply_wait_ms > 2000 ? 2 * (int64_t)b->reply_wait_ms : 2000;
	int64_t start_ms = b->book_params.timeout_ms > window ? b->book_params.timeout_ms : window;
	bool heard = false;
	int rc = 0;

	if (b->incarnation == 0)
		return 0;
	lock_ib(b);
	if (newest_view(b) != NULL) { /* asked again (wait_taken) */
		ft__ib_pump(b);
		if (!reaches(b, newest_view(b)))
			rc = 0; /* no member holds its link any more */
		else
			rc = ft__view_copy(newest_view(b), latest) == 0 ? 1 : -FT_ENOMEM;
		unlock_ib(b);
		return rc;
	}
	b->newcomer = true;
	for (;;) {
		int64_t now = ft__now_ms();
		bool all = true, again = now - asked_ms >= ASK_AGAIN_MS, awaited = true,
		     all_heard = true;
		if (now - marks_ms >= RECHECK_MS && store_book(b) && newest_view(b) == NULL) {
			/* the store's marks too: a rank of this book that died since
			 * (or whose new incarnation joined) is no rank to hear from */
			struct ft__book_params p = b->book_params;
			char mine[FT__BOOK_ENTRY_MAX];
			snprintf(mine, sizeof(mine), "%s", b->ctl.addr);
			marks_ms = now;
			unlock_ib(b);
			take_marks(b, p, mine, RECHECK_MS);
			lock_ib(b);
		}
		ft__ib_pump(b);
		for (int r = 0; r < b->world; r++) {
			int i;
			if (r == b->rank || b->book[r][0] == '\0' || b->r[r].answered || b->r[r].gone)
				continue;
			all = false;
			all_heard &= b->r[r].heard;
			heard |= b->r[r].heard;
			awaited &= !b->r[r].heard || b->r[r].counts_me;
			if (again && b->r[r].heard)
				b->r[r].sent = false; /* it held no view: asked again */
			/* (its ASK names its listener: see start_again) */
			if (!b->r[r].sent && (i = ft__ib_link_to(b, r)) >= 0 &&
			    ft__ctl_send(&b->ctl, i, FT__CTL_MB_ASK, 0, b->ctl.addr,
					 (uint32_t)strlen(b->ctl.addr) + 1) == 0)
				b->r[r].sent = true;
		}
		bool held = newest_view(b) != NULL;
		if (held && first == 0)
			first = now;
		if (again)
			asked_ms = now;
		if (held && (all || members_answered(b, newest_view(b)) || now - first >= ANSWER_MS))
			break;
		if (!held && heard && awaited && all_heard && store_book(b)) {
			start_again(b);
			unlock_ib(b);
			return 0;
		}
		/* nobody answers: the job is over; its ranks answer but hold no
		 * view yet: the job is still starting (this rank was killed inside
		 * ft_init), its first view is awaited */
		if (now - start >= (heard ? start_ms : window))
			break;
		wait_links(b, 2);
	}
	if (newest_view(b) != NULL) {
		const struct ft__view *v = newest_view(b);
		ft__info("membership: rank %d's job runs: generation %u, %d members", b->rank,
			 v->generation, v->size);
		rc = ft__view_copy(v, latest) == 0 ? 1 : -FT_ENOMEM;
	} else if (heard) {
		ft__error("membership: the job's first view never settled within %lld ms: this new "
			  "incarnation of rank %d has no job to come back to", (long long)start_ms,
			  b->rank);
		rc = -FT_ETIMEDOUT;
	} else {
		ft__error("membership: no rank of job answered this new incarnation of rank %d "
			  "within %lld ms: the job is over (or none of its ranks lives)", b->rank,
			  (long long)window);
		rc = -FT_EENDED;
	}
	unlock_ib(b);
	return rc;
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
	} else if (v == NULL && orig >= 0 && orig < b->world) {
		rc = ft__ib_lookup_unsettled(b, gen, orig, m); /* growing back */
	}
	for (int i = 0; v != NULL && i < v->size; i++)
		if (v->members[i] == orig && b->r[orig].have_addr) {
			memset(m, 0, sizeof(*m));
			snprintf(m->addr, sizeof(m->addr), "%s", b->r[orig].addr);
			snprintf(m->ctrl, sizeof(m->ctrl), "%s", b->r[orig].ctrl);
			const struct ib_value *val = value_of(b, gen);
			m->next_op = val->next_ops[i];
			m->rejoining = val->fresh[i] == IB_FRESH_NEW; /* a new incarnation taken in */
			if (val->fresh[i] == IB_FRESH_OWED || val->fresh[i] == IB_FRESH_OWED_NEXT)
				m->owed_op = val->first_op + (val->fresh[i] == IB_FRESH_OWED_NEXT);
			rc = 0;
		}
	unlock_ib(b);
	return rc;
}

/* Leaving: the listener and every link close, which the others' kernels
 * report: a settle in progress counts this rank out at once. A goodbye on
 * each link first: to a coordinator under rejoin, a close alone is a death
 * whose new incarnation it awaits (member_inband.c, awaits_new), and a
 * rank that finalized has none. */
static int ib_depart(struct ft__mb *mb, uint64_t next_op)
{
	struct inband *b = IB(mb);

	(void)next_op;
	lock_ib(b);
	b->departed = true;
	for (int i = 0; b->ctl_open && i < b->ctl.nlinks; i++)
		if (b->ctl.links[i].fd >= 0 && b->ctl.links[i].peer >= 0 &&
		    !b->ctl.links[i].connecting)
			(void)ft__ctl_send(&b->ctl, i, FT__CTL_BYE, b->gen, NULL, 0);
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
		free(b->values[g].fresh);
	}
	free(b->views);
	free(b->values);
	ft__ib_value_free(&b->accepted);
	ft__ib_value_free(&b->best);
	ft__ib_value_free(&b->proposal);
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
		ft__ib_pump(b);
	asked = b->newest_asked;
	unlock_ib(b);
	return asked;
}

static void ib_certain(struct ft__mb *mb, int orig)
{
	struct inband *b = IB(mb);

	lock_ib(b);
	ft__ib_mark_certain(b, orig, "its detector link was closed by its kernel");
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
		if ((rc = ft__ib_value_alloc(&v, f->views[g].size)) != 0)
			break;
		v.n = f->views[g].size;
		memcpy(v.members, f->views[g].members, (size_t)v.n * sizeof(int));
		memset(v.next_ops, 0, (size_t)v.n * sizeof(uint64_t));
		rc = ft__ib_commit(b, g, &v);
	}
	if (rc == 0 && f->active) {
		ft__ib_begin(b, f->gen);
		b->promised = f->promised;
		if (f->phase > 0) {
			b->ballot = f->ballot;
			b->phase = f->phase;
		}
	}
	b->newcomer = f->newcomer;
	b->incarnation = f->newcomer;
	if (rc == 0 && f->published) {
		snprintf(b->mine.addr, sizeof(b->mine.addr), "h:%d", f->rank + 1);
		b->mine.next_op = 7;
		b->published = true;
	}
	/* as ft__ib_pump() takes them: the header's sender is the link's peer */
	for (int k = 0; rc == 0 && k < n; k++)
		if (msgs[k].type != FT__CTL_HELLO && msgs[k].from >= 0 && msgs[k].from < b->world &&
		    msgs[k].from != b->rank)
			ft__ib_on_msg(b, msgs[k].from, &msgs[k]);
	if (rc == 0 && b->owed_to >= 0 && b->published)
		ft__ib_answer_collect(b, b->owed_to, b->owed_link, b->owed_ballot);
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
