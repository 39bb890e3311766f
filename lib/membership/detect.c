/* detect.c: the failure detector's thread: heartbeats, the failed set and its notices, the next view's settle (its main-thread side: detect_api.c). */
/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ctl.h"
#include "detect.h"
#include "detect_thread.h"
#include "fdreg.h"
#include "internal.h"
#include "trace.h"

/* How the detector works, in one block comment: detect_thread.h. */

/* Why a neighbour is failed when its kernel closed its control link: the
 * common, certain case (any other reason a rank declares is logged louder). */
#define LINK_CLOSED "its control link closed"

/* A right neighbour's link closed before it answered (no proof of death,
 * ctl.h): connected again after this, for up to the detect timeout. */
#define RETRY_MS 20

/* ---- links ---- */

static void link_close(struct ft__det *d, int i)
{
	ft__ctl_drop(&d->ctl, i);
	if (d->owe != NULL)
		d->owe[i] = false;
	if (d->left_ci == i)
		d->left_ci = -1;
	if (d->right_ci == i)
		d->right_ci = -1;
}

/* A goodbye goes out just before its link closes: if it cannot be sent, the
 * peer sees the close without it and counts this rank failed, which is the
 * truth from where it stands (this rank is leaving its view). */
static void send_bye(struct ft__det *d, int i)
{
	(void)ft__ctl_send(&d->ctl, i, FT__CTL_BYE, d->gen, NULL, 0);
}

static void declare(struct ft__det *d, const int32_t *ranks, int n, const char *why);
static void auth_judge(struct ft__det *d);
static void declare_at(struct ft__det *d, const int32_t *ranks, int n, uint32_t gen,
		       const char *why, bool direct);

/* Link i is gone: its peer is failed if it was a neighbour this rank watches. */
static void link_lost(struct ft__det *d, int i, const char *why)
{
	bool watched = i == d->left_ci || i == d->right_ci;
	int32_t peer = d->ctl.links[i].peer;

	link_close(d, i);
	if (!watched)
		return;
	if (!d->proven && peer >= 0 && d->auth[peer] != 0) {
		/* a neighbour whose token differs from ours, gone before this
		 * rank proved its own: it may have left on finding its token
		 * the odd one, so it counts as a refusal, not as a failure */
		d->auth[peer] |= AUTH_REFUSED_US;
		auth_judge(d);
		return;
	}
	declare(d, &peer, 1, why);
}

/* The same when the peer's kernel closed the link (or refused it). Only a
 * close of a link on which the peer proved the job's token (-FT_EPEERFAILED:
 * one closed before it answered is -FT_EBUSY, right_busy) makes its death
 * certain, which membership counts out of quorums: a refusal is
 * suspicion only (a firewall's reject, across a partition, refuses a live
 * rank, and two sides that each counted the other dead would both have a
 * quorum). */
static void link_closed(struct ft__det *d, int i, bool certain, const char *why)
{
	bool watched = i == d->left_ci || i == d->right_ci;
	int32_t peer = d->ctl.links[i].peer;

	if (certain && watched && !d->left_bye && !d->right_bye)
		ft__mb_certain(d->p.mb, peer);
	link_lost(d, i, why);
}

static void read_link(struct ft__det *d, int i);

/*
 * A send on link i failed. Its peer may have moved to a newer view and
 * closed the link after a goodbye this rank has not read yet (its kernel
 * resets a link closed with data unread, and the send fails first): what
 * the link holds is read before its loss counts, and a goodbye closes it
 * without a declaration. Inside a read of that same link (a message read
 * on it made this rank send), the read under way finds the goodbye, or
 * the close, itself.
 */
static void send_failed(struct ft__det *d, int i, const char *why)
{
	if (d->reading == i)
		return;
	read_link(d, i);
	if (d->ctl.links[i].fd >= 0 && !d->out)
		link_lost(d, i, why);
}

static void failed_list(struct ft__det *d, int32_t *out, int *n)
{
	*n = 0;
	lock(d);
	for (int r = 0; r < d->p.world_size; r++)
		if (d->failed[r])
			out[(*n)++] = r;
	unlock(d);
}

/* Sends every failure known here on link i (several messages if the set is
 * larger than one can hold): to both neighbours when the set grows, and to a
 * new neighbour, which may have missed a notice that went out on links a view
 * change has since closed. A link that cannot take it is lost. */
static void send_failed_set(struct ft__det *d, int i)
{
	size_t per_msg = d->ctl.max_payload / sizeof(int32_t);
	int32_t *all;
	int n, rc = 0;

	if (d->ctl.links[i].connecting) {
		/* nothing can go yet: the whole set goes once it connects
		 * (greet). A send on it failed, and a healthy neighbour was
		 * declared for it, when a second failure was learnt while the
		 * link to the new right neighbour was being opened */
		d->owe[i] = true;
		return;
	}
	all = malloc((size_t)d->p.world_size * sizeof(int32_t));
	if (all == NULL)
		return; /* out of memory: the neighbour still learns from the link's close cascade */
	failed_list(d, all, &n);
	for (int k = 0; k < n && rc == 0; k += (int)per_msg) {
		size_t m = (size_t)(n - k) < per_msg ? (size_t)(n - k) : per_msg;
		rc = ft__ctl_send(&d->ctl, i, FT__CTL_NOTICE, d->gen, all + k, m * sizeof(int32_t));
	}
	free(all);
	if (rc != 0)
		send_failed(d, i, "it cannot take a failure notice");
}

/* The grow planned for this generation (detect_grow.c), on link i: a
 * neighbour that joined the ring after it went out may have missed it. */
static void send_grow(struct ft__det *d, int i)
{
	uint64_t at = ft__det_grow_planned(d);

	if (at != 0 && !d->ctl.links[i].connecting &&
	    ft__ctl_send(&d->ctl, i, FT__CTL_GROW, d->gen, &at, sizeof(at)) != 0)
		send_failed(d, i, "it cannot take a grow notice");
}

/* To both neighbours but the link it came on (-1: none). */
static void pass_grow(struct ft__det *d, int from)
{
	if (d->left_ci >= 0 && d->left_ci != from)
		send_grow(d, d->left_ci);
	if (d->right_ci >= 0 && d->right_ci != from && !d->out)
		send_grow(d, d->right_ci);
}

/* What a neighbour that just connected needs to know. */
static void greet(struct ft__det *d, int i)
{
	send_failed_set(d, i);
	if (d->ctl.links[i].fd >= 0 && !d->out)
		send_grow(d, i);
}

/*
 * Opens the control link to the right neighbour without waiting (the
 * detector never blocks: its heartbeats must go out meanwhile); the failed
 * set goes out once it connects, and ft__ctl_next reports a refusal. A
 * local shortage (no descriptor, no slot, no memory) is no news of the
 * neighbour: the link is tried again, never the neighbour declared for it.
 */
static void connect_right(struct ft__det *d)
{
	struct ft__member m;
	int32_t r = d->right;
	int i;

	d->right_retry_ms = 0;
	if (ft__mb_lookup(d->p.mb, d->gen, r, &m) != 0 || m.ctrl[0] == '\0') {
		declare(d, &r, 1, "it published no control address");
		return;
	}
	i = ft__ctl_connect_start(&d->ctl, m.ctrl, r, d->gen);
	if (i >= 0) {
		d->right_ci = i;
		d->owe[i] = true;
	} else if (ft__err_shortage(i)) {
		ft__error("detector: no resources for a link to rank %d: trying again", r);
		d->right_retry_ms = ft__now_ms() + RETRY_MS;
	} else {
		/* suspicion, not certainty: see link_closed */
		declare(d, &r, 1, "its control address refused us");
	}
}

/* The right neighbour's link closed before it answered our hello: its
 * listener may have closed it for room (ctl.h), or because the handshake
 * outlasted its deadline on a loaded host, so it is opened again; only two
 * detect timeouts of such closes declare it. */
static void right_busy(struct ft__det *d, int i)
{
	int64_t now = ft__now_ms();
	int32_t r = d->right;

	if (!d->proven && d->auth[r] != 0) {
		/* a neighbour whose token differs, gone before this rank proved
		 * its own: the token judgement decides (link_lost), not a retry */
		link_lost(d, i, "its control link closed before it answered");
		return;
	}
	link_close(d, i);
	if (d->right_busy_ms == 0)
		d->right_busy_ms = now;
	if (now - d->right_busy_ms >= 2 * (int64_t)d->p.detect_timeout_ms) {
		declare(d, &r, 1, "its control link kept closing before it answered");
		return;
	}
	d->right_retry_ms = now + RETRY_MS;
}

/* ---- membership ---- */

static bool in_list(const int *v, int n, int x)
{
	for (int i = 0; i < n; i++)
		if (v[i] == x)
			return true;
	return false;
}

/* This rank leaves: excluded (err -FT_EEXCLUDED) or failed with err. */
static void go_out(struct ft__det *d, int err, const char *why)
{
	why = ft__ctl_own_cause(&d->ctl, err) != err ? "declared after this rank ran short" : why;
	err = ft__ctl_own_cause(&d->ctl, err);
	lock(d);
	if (!d->excluded && d->fatal == 0)
		ft__error("detector: %s (%s)", err == -FT_EEXCLUDED ?
			  "this rank is out of the membership" : ft_strerror(err), why);
	if (err == -FT_EEXCLUDED)
		d->excluded = true;
	else if (d->fatal == 0)
		d->fatal = err;
	ft__det_raise(d);
	pthread_cond_broadcast(&d->cond);
	unlock(d);
	d->target = 0;
	d->out = true;
	d->left = d->right = -1;
	for (int i = 0; i < d->ctl.nlinks; i++)
		link_close(d, i);
}

static void start_recovery(struct ft__det *d)
{
	if (d->target != 0)
		return;
	d->target = d->gen + 1;
	d->recover_ms = ft__now_ms();
	d->published = false;
	d->grow_lost = false;
	lock(d);
	d->recovering = true;
	d->frozen = true;
	ft__det_raise(d);
	unlock(d);
}

/* Connects the control ring of the view just adopted. */
void ft__det_rewire(struct ft__det *d)
{
	int me = -1;

	for (int i = 0; i < d->size; i++)
		if (d->members[i] == d->p.rank)
			me = i;
	d->left = d->size > 1 ? d->members[(me + d->size - 1) % d->size] : -1;
	d->right = d->size > 1 ? d->members[(me + 1) % d->size] : -1;
	d->left_ci = d->right_ci = -1;
	d->left_bye = d->right_bye = false;
	d->view_ms = ft__now_ms();
	for (int i = 0; i < d->ctl.nlinks; i++) {
		struct ft__ctl_link *l = &d->ctl.links[i];
		if (l->fd < 0 || l->peer < 0)
			continue;
		if (l->gen < d->gen) {
			send_bye(d, i);
			link_close(d, i);
		} else if (l->gen == d->gen && l->peer == d->left) {
			d->left_ci = i;
			greet(d, i);
		}
	}
	d->right_retry_ms = d->right_busy_ms = 0;
	if (d->right >= 0 && !d->out)
		connect_right(d);
}

/* Takes v, settled by membership, whose members are therefore in
 * [0, world_size) (membership.h): they index failed[]. */
static void adopt_view(struct ft__det *d, struct ft__view *v)
{
	bool stale_member = false;

	if (!in_list(v->members, v->size, d->p.rank)) {
		ft__view_free(v);
		go_out(d, -FT_EEXCLUDED, "the settled view leaves it out");
		return;
	}
	for (int i = 0; d->p.left_out != NULL && i < d->size; i++) /* a transport may fence them */
		if (!in_list(v->members, v->size, d->members[i]))
			d->p.left_out(d->p.left_out_arg, d->members[i]);
	free(d->members);
	d->members = v->members;
	d->size = v->size;
	d->gen = v->generation;
	v->members = NULL;
	lock(d);
	for (int i = 0; i < d->size; i++) {
		int r = d->members[i];
		if ((d->p.rejoin || d->p.grow) && d->failed[r] && r != d->p.rank) {
			/* settled as a new incarnation: older news of its death is old */
			d->failed[r] = false;
			d->since[r] = d->gen;
		}
		stale_member |= d->failed[r];
	}
	ft__view_free(&d->ready);
	d->ready = (struct ft__view){.generation = d->gen, .size = d->size,
				     .first_op = v->first_op, .nonce = v->nonce};
	d->ready.members = malloc((size_t)d->size * sizeof(int));
	if (d->ready.members != NULL)
		memcpy(d->ready.members, d->members, (size_t)d->size * sizeof(int));
	else
		d->fatal = -FT_ENOMEM;
	d->recovering = stale_member;
	d->settled_ns = ft__now_ns();
	pthread_cond_broadcast(&d->cond);
	unlock(d);
	ft__info("detector: generation %u settled: %d members, first op %llu", d->gen, d->size,
		 (unsigned long long)v->first_op);
	ft__trace_view(d->p.trace, d->gen, d->members, d->size);
	d->target = 0;
	d->growing = false;
	if (stale_member)
		start_recovery(d);
	ft__det_rewire(d);
}

/* The next view cannot be settled by this rank: its main thread gets rc
 * (ft__det_await). */
static void recovery_failed(struct ft__det *d, int rc)
{
	ft__error("detector: cannot settle generation %u: %s", d->target, ft_strerror(rc));
	lock(d);
	d->fatal = rc;
	pthread_cond_broadcast(&d->cond);
	unlock(d);
	d->target = 0;
	d->growing = false;
	if (rc == -FT_EPARTITIONED) {
		/* the other side goes on: this rank takes no further part */
		d->out = true;
		d->left = d->right = -1;
		for (int i = 0; i < d->ctl.nlinks; i++)
			link_close(d, i);
	}
}

static void recovery_step(struct ft__det *d)
{
	int64_t now = ft__now_ms(), since;
	struct ft__view v = {0};
	int *cand, n = 0, rc;

	if (!d->published) {
		struct ft__member m;
		memset(&m, 0, sizeof(m));
		snprintf(m.addr, sizeof(m.addr), "%s", d->data_addr);
		snprintf(m.ctrl, sizeof(m.ctrl), "%s", d->ctl.addr);
		lock(d);
		m.next_op = d->next_op;
		unlock(d);
		rc = ft__mb_publish(d->p.mb, d->target, &m);
		/* Tried again on the next turns of the loop (the backend says
		 * why, once per period), for one detect timeout: then this rank
		 * fails with its own error (a full rendezvous: FT_ENOSPC). The
		 * others settle without it only after two, so it is never left
		 * out as though it had died, nor waits out a timeout of the
		 * job's. */
		if (rc != 0 && now - d->recover_ms >= d->p.detect_timeout_ms)
			recovery_failed(d, rc);
		if (rc != 0)
			return;
		d->published = true;
	}
	cand = malloc(((size_t)d->size + FT__BACK_MAX) * sizeof(int));
	if (cand == NULL)
		return;
	bool lost = false;
	lock(d);
	for (int i = 0; i < d->size; i++)
		lost |= d->failed[d->members[i]];
	unlock(d);
	ft__det_grow_lost(d, lost, now);
	since = now - d->recover_ms;
	/* rejoin: the failed members of this view are awaited back (back[])
	 * until rejoin_timeout_ms; then the view settles as under shrink */
	bool await = d->p.rejoin && since < d->p.rejoin_timeout_ms;
	int64_t force_ms = 2 * (int64_t)d->p.detect_timeout_ms + d->p.settle_delay_ms +
			   (d->p.rejoin ? d->p.rejoin_timeout_ms : 0);
	int *back = cand + d->size, nback = 0;
	lock(d);
	for (int i = 0; i < d->size; i++) {
		if (!d->failed[d->members[i]])
			cand[n++] = d->members[i];
		else if (await && nback < FT__BACK_MAX)
			back[nback++] = d->members[i];
	}
	unlock(d);
	nback = ft__det_newcomers(d, back, nback, lost);
	if (n > 0 && cand[0] == d->p.rank && since < d->p.settle_delay_ms) {
		free(cand);
		return;
	}
	/* a grow alone waits for every member (detect_grow.c) */
	bool force = since >= force_ms && (lost || !d->growing);
	rc = ft__mb_try_settle_back(d->p.mb, d->target, cand, n, back, nback, force, &v);
	free(cand);
	if (rc == 1) {
		adopt_view(d, &v);
	} else if (rc < 0) {
		recovery_failed(d, rc);
	}
}

/* Marks ranks failed on this rank's own evidence: what is new goes to both
 * neighbours and straight to every other member. */
static void declare(struct ft__det *d, const int32_t *ranks, int n, const char *why)
{
	declare_at(d, ranks, n, d->gen, why, true);
}

/*
 * Direct notices: the rank that saw a failure tells every member itself,
 * so that news reaches each in one hop, however busy the detectors on the
 * ring between them are. Links are opened without waiting; a notice waits
 * for its link to connect (owe[]). A member that cannot be reached this
 * way still learns around the ring.
 */
static void notice_members(struct ft__det *d)
{
	for (int k = 0; k < d->size && !d->out; k++) {
		int m = d->members[k], link = -1;
		struct ft__member rec;
		if (m == d->p.rank || m == d->left || m == d->right || ft__det_failed(d, m))
			continue;
		for (int i = 0; i < d->ctl.nlinks && link < 0; i++) {
			const struct ft__ctl_link *l = &d->ctl.links[i];
			if (l->fd >= 0 && l->peer == m && l->gen >= d->gen)
				link = i;
		}
		if (link < 0 && ft__mb_lookup(d->p.mb, d->gen, m, &rec) == 0 && rec.ctrl[0] != '\0')
			link = ft__ctl_connect_start(&d->ctl, rec.ctrl, m, d->gen);
		if (link < 0)
			continue;
		if (d->ctl.links[link].connecting)
			d->owe[link] = true;
		else
			send_failed_set(d, link);
	}
}

/* The same, for news from generation gen: a rank that came back after gen is
 * not named by it. direct: this rank's own evidence (notice_members). */
static void declare_at(struct ft__det *d, const int32_t *ranks, int n, uint32_t gen,
		       const char *why, bool direct)
{
	int added = 0;
	bool self = false, member = false;

	if (d->out)
		return;
	lock(d);
	for (int i = 0; i < n; i++) {
		if (ranks[i] < 0 || ranks[i] >= d->p.world_size || d->failed[ranks[i]] ||
		    gen < d->since[ranks[i]])
			continue;
		d->failed[ranks[i]] = true;
		added++;
		self |= ranks[i] == d->p.rank;
		member |= in_list(d->members, d->size, ranks[i]);
		/* on this rank's own evidence other than the kernel's word (a
		 * closed control link): rare and worth seeing in a test's log */
		if (ranks[i] != d->p.rank && direct && strcmp(why, LINK_CLOSED) != 0)
			ft__warn("detector: declaring rank %d failed (%s)", ranks[i], why);
		else if (ranks[i] != d->p.rank)
			ft__info("detector: rank %d failed (%s)", ranks[i], why);
		ft__trace_failure(d->p.trace, ranks[i], why);
	}
	if (added > 0)
		d->known_ns = ft__now_ns();
	unlock(d);
	if (added == 0)
		return;
	if (self) {
		go_out(d, -FT_EEXCLUDED, "the other ranks declared it failed");
		return;
	}
	for (int i = 0; i < d->ctl.nlinks; i++) {
		struct ft__ctl_link *l = &d->ctl.links[i];
		if (l->fd < 0 || l->peer < 0)
			continue;
		lock(d);
		bool dead = d->failed[l->peer];
		unlock(d);
		if (dead) {
			/* the news first: a rank counted out but alive (sent away,
			 * or wrongly suspected) leaves on it, instead of taking the
			 * close for its neighbours' deaths and settling a view of
			 * its own; a dead one's kernel drops it */
			if (!l->connecting)
				(void)ft__ctl_send(&d->ctl, i, FT__CTL_NOTICE, d->gen, ranks,
						   (size_t)n * sizeof(int32_t));
			link_close(d, i);
		} else if (i == d->left_ci || i == d->right_ci)
			send_failed_set(d, i);
		if (d->out)
			return;
	}
	if (direct && member)
		notice_members(d);
	/* a rank already outside this view (news arriving late) changes nothing */
	if (member)
		start_recovery(d);
}

/* ---- messages ---- */

static void on_hello(struct ft__det *d, int i, const struct ft__ctl_msg *m)
{
	bool dead;

	lock(d);
	dead = d->failed[m->from];
	unlock(d);
	/* a peer ahead of this rank may be a new incarnation its next view takes back */
	if (dead && m->gen <= d->gen) {
		link_close(d, i);
		return;
	}
	if (m->gen < d->gen) {
		/* the peer is behind: tell it the generation moved on */
		send_bye(d, i);
		link_close(d, i);
	} else if (m->gen == d->gen && m->from == d->left) {
		if (d->left_ci >= 0 && d->left_ci != i)
			link_close(d, d->left_ci);
		d->left_ci = i;
		greet(d, i);
	}
}

/* A GROW notice that came on link from (detect_grow.c). */
static void grow_news(struct ft__det *d, uint32_t gen, uint64_t at, int from)
{
	int what = ft__det_grow_note(d, gen, at);

	if (what == FT__GROW_OLD)
		return;
	ft__info("detector: generation %u grows back before op %llu", gen, (unsigned long long)at);
	pass_grow(d, from);
	if (what == FT__GROW_NOW && !d->out && d->target == 0) {
		d->growing = true; /* (a failure's settle under way stays one) */
		start_recovery(d);
	}
}

/* The main thread's 'g': its own plan to send, or its op at the grow. */
static void grow_cmd(struct ft__det *d)
{
	uint64_t at;
	int what = ft__det_grow_command(d, &at);

	if (what & FT__GROW_SEND)
		pass_grow(d, -1);
	if ((what & FT__GROW_START) && !d->out && d->target == 0) {
		ft__info("detector: the main thread is at op %llu: generation %u grows back",
			 (unsigned long long)at, d->gen + 1);
		d->growing = true;
		start_recovery(d);
	}
}

static void on_msg(struct ft__det *d, int i, const struct ft__ctl_msg *m, bool first)
{
	switch (m->type) {
	case FT__CTL_HELLO:
		if (first) {
			on_hello(d, i, m);
			break;
		}
		link_lost(d, i, "it sent a second hello");
		break;
	case FT__CTL_HB:
		break;
	case FT__CTL_NOTICE: {
		int32_t r[256];
		size_t n = m->len / sizeof(int32_t);
		char why[64];
		snprintf(why, sizeof(why), "notice from rank %d", m->from);
		for (size_t k = 0; k < n && d->ctl.links[i].fd >= 0; k += FT__ARRAY_SIZE(r)) {
			size_t c = n - k < FT__ARRAY_SIZE(r) ? n - k : FT__ARRAY_SIZE(r);
			memcpy(r, m->payload + k * sizeof(int32_t), c * sizeof(int32_t));
			declare_at(d, r, (int)c, m->gen, why, false);
		}
		break;
	}
	case FT__CTL_GROW: {
		uint64_t at;
		memcpy(&at, m->payload, sizeof(at)); /* ctl.c checked its length */
		if (m->gen >= d->gen && at != 0)
			grow_news(d, m->gen, at, i);
		break;
	}
	case FT__CTL_BYE:
		if (i == d->left_ci)
			d->left_bye = true;
		if (i == d->right_ci)
			d->right_bye = true;
		link_close(d, i);
		if (m->gen > d->gen)
			start_recovery(d); /* a newer view exists that we have not seen */
		break;
	default:
		link_lost(d, i, "it sent a malformed control message");
		break;
	}
}

/*
 * What the token mismatches seen so far mean (see the top of this file):
 * once this rank has proved its token, a neighbour that refused it is
 * declared; while it has not, a rank every neighbour refused (at least one
 * of them by answering its hello) leaves with FT_EAUTH, and otherwise it
 * waits for the other neighbour's link.
 */
static void auth_judge(struct ft__det *d)
{
	int nb[2] = {d->left, d->right};
	bool all = nb[0] >= 0 || nb[1] >= 0, refused = false;

	if (d->out)
		return;
	for (int k = 0; k < 2; k++) {
		if (nb[k] < 0)
			continue;
		if (d->proven && (d->auth[nb[k]] & AUTH_REFUSED_US)) {
			int32_t r = nb[k];
			declare(d, &r, 1, "it refused our token or could not prove its own");
			if (d->out)
				return;
		}
		all &= d->auth[nb[k]] != 0;
		refused |= (d->auth[nb[k]] & AUTH_REFUSED_US) != 0;
	}
	/* a refusal from a neighbour's own listener, not only hellos that
	 * claimed to be neighbours (anyone can send those) */
	if (!d->proven && all && refused)
		go_out(d, -FT_EAUTH, "every neighbour refused this rank's token or job id, and no "
				     "rank accepted it: it holds another token than the job's");
}

/* What reading link i told of tokens (a hello refused here, or this rank's
 * proved on it), judged at once. */
static void auth_news(struct ft__det *d, int i)
{
	struct ft__ctl_link *l = &d->ctl.links[i];
	int claim = d->ctl.refused_claim;
	bool changed = false;

	d->ctl.refused_claim = -1;
	if (claim >= 0) {
		d->auth[claim] |= AUTH_CLAIMED;
		changed = true;
	}
	if (!d->proven && l->fd >= 0 && l->peer >= 0 && !l->await_ack && !l->connecting) {
		d->proven = true;
		changed = true;
	}
	if (changed)
		auth_judge(d);
}

/* Link i's peer refused our hello or did not prove its token: link_lost
 * declares it, or leaves it to auth_judge while this rank is unproven. */
static void refused_us(struct ft__det *d, int i)
{
	int32_t peer = d->ctl.links[i].peer;

	if (peer >= 0)
		d->auth[peer] |= AUTH_REFUSED_US;
	link_lost(d, i, "it refused our token or could not prove its own");
}

/* Handles every whole message link i holds. */
static void read_msgs(struct ft__det *d, int i)
{
	struct ft__ctl_msg m;
	int rc;

	for (;;) {
		bool first = d->ctl.links[i].peer < 0;
		rc = ft__ctl_next(&d->ctl, i, &m); /* finishes a connect first */
		if (rc != -FT_EAUTH)
			auth_news(d, i);
		if (d->out)
			return;
		if (rc >= 0 && d->owe[i] && !d->ctl.links[i].connecting) {
			d->owe[i] = false; /* a direct notice waited for the connect */
			greet(d, i);
		}
		if (rc <= 0 || d->ctl.links[i].fd < 0)
			break;
		if (i == d->right_ci)
			d->right_busy_ms = 0; /* it answered */
		on_msg(d, i, &m, first);
		if (d->ctl.links[i].fd < 0 || d->out)
			return;
	}
	if (rc == -FT_EBUSY && i == d->right_ci)
		right_busy(d, i);
	else if (rc == -FT_EBUSY)
		link_close(d, i); /* a direct link: the ring carries the news all the same */
	else if (rc == -FT_EPEERFAILED || rc == -FT_ECONNREFUSED)
		link_closed(d, i, rc == -FT_EPEERFAILED,
			    rc == -FT_ECONNREFUSED ? "its control address refused us"
						   : LINK_CLOSED);
	else if (rc == -FT_EAUTH)
		refused_us(d, i);
	else if (rc < 0)
		link_lost(d, i, rc == -FT_EPROTO ? "it sent a malformed control message"
						 : "its control link failed");
}

/* Reads link i (read_msgs), noting which link is being read (send_failed). */
static void read_link(struct ft__det *d, int i)
{
	int outer = d->reading;

	d->reading = i;
	read_msgs(d, i);
	d->reading = outer;
}

/* Silence, a missing left link, the right one to open again, strangers
 * (ft__ctl_sweep); returns ms to the next check. */
static int check_time(struct ft__det *d, int64_t now)
{
	int64_t next = d->next_hb_ms;
	int64_t to = d->p.detect_timeout_ms;
	int sweep = ft__ctl_sweep(&d->ctl, now);

	if (sweep >= 0 && now + sweep < next)
		next = now + sweep;
	if (d->right >= 0 && d->right_ci < 0 && d->right_retry_ms != 0) {
		if (now >= d->right_retry_ms)
			connect_right(d);
		else if (d->right_retry_ms < next)
			next = d->right_retry_ms;
		if (d->out)
			return 0;
	}
	for (int i = 0; i < d->ctl.nlinks; i++) {
		struct ft__ctl_link *l = &d->ctl.links[i];
		if (l->fd < 0 || l->peer < 0)
			continue;
		if (i != d->left_ci && i != d->right_ci)
			continue;
		if (ft__ctl_held_by_loss(l, now, to)) {
			if (now + to / 4 < next)
				next = now + to / 4;
			continue;
		}
		/* a link still opening has had nothing to say yet: a lost SYN is
		 * sent again after 1 s, then 3 s, a lost hello or ACK after
		 * 0.2 s and on; it has the span a lossy path has (a dead
		 * process refuses it at once, a dead host is found by it) */
		int64_t allow = l->connecting || l->await_ack ? FT__CTL_LOSS_SPAN * to : to;
		if (now - l->last_rx_ms >= allow) {
			/* A thread starved longer than the timeout may not have
			 * read heartbeats that wait in the socket: read first. */
			read_link(d, i);
			if (l->fd < 0 || d->out)
				continue;
		}
		if (now - l->last_rx_ms >= allow) {
			char why[64];
			snprintf(why, sizeof(why), "no heartbeat for %lld ms",
				 (long long)(now - l->last_rx_ms));
			link_lost(d, i, why);
		} else if (l->last_rx_ms + allow < next) {
			next = l->last_rx_ms + allow;
		}
	}
	/* A left neighbour that never connects: a backup only (a dead one refuses
	 * its own left neighbour's connection, a stopped one sends no heartbeat),
	 * so the grace is long enough for a slow start, and counts from this
	 * rank's last shortage (a link it could not accept is no sign of it). */
	int64_t grace = 5 * to > 5000 ? 5 * to : 5000;
	int64_t since = d->ctl.short_ms > d->view_ms ? d->ctl.short_ms : d->view_ms;
	if (d->left >= 0 && d->left_ci < 0 && !d->left_bye && d->target == 0 &&
	    (d->proven || d->auth[d->left] == 0)) { /* else auth_judge decides */
		if (now - since >= grace) {
			int32_t r = d->left;
			declare(d, &r, 1, "it never opened its control link");
		} else if (since + grace < next) {
			next = since + grace;
		}
	}
	if (d->target != 0 && now + 2 < next)
		next = now + 2;
	return next > now ? (int)(next - now) : 0;
}

static void drain_cmd(struct ft__det *d)
{
	char buf[64];

	while (read(d->cmd[0], buf, sizeof(buf)) > 0)
		;
}

/*
 * Asks the kernel for a short time slice for this thread (0.1 ms; its
 * policy and nice value stay). Since Linux 6.12 the fair scheduler (EEVDF)
 * lets a waking thread with a shorter slice than the running one preempt
 * it at once: with every core busy reducing (more ranks than cores), a
 * notice or a closed link then reaches this thread within a wake-up, not
 * after the running threads' slices. This thread runs for microseconds
 * at a time, so the shorter slice costs it nothing. No privilege is
 * needed; older kernels ignore the field, and a kernel without the call
 * refuses it, which changes nothing.
 */
static void short_slice(void)
{
#ifdef SYS_sched_setattr
	struct {
		uint32_t size, policy;
		uint64_t flags;
		int32_t nice;
		uint32_t priority;
		uint64_t runtime, deadline, period;
	} a;

	memset(&a, 0, sizeof(a));
	if (syscall(SYS_sched_getattr, 0, &a, (unsigned)sizeof(a), 0) != 0 ||
	    (a.policy != SCHED_OTHER && a.policy != SCHED_BATCH))
		return;
	a.size = sizeof(a);
	a.flags = 0;
	a.runtime = 100000; /* ns */
	if (syscall(SYS_sched_setattr, 0, &a, 0) != 0)
		ft__debug("detector: no short time slice (%s)", strerror(errno));
#endif
}

void *ft__det_main(void *arg)
{
	struct ft__det *d = arg;
	int nmb = ft__mb_max_pollfds(d->p.mb);
	struct pollfd *pfd = calloc((size_t)(2 + d->ctl.nlinks + nmb), sizeof(*pfd));
	int *idx = calloc((size_t)d->ctl.nlinks + 1, sizeof(int));

	if (pfd == NULL || idx == NULL) {
		ft__error("detector: out of memory: it cannot watch");
		lock(d);
		d->fatal = -FT_ENOMEM;
		pthread_cond_broadcast(&d->cond);
		unlock(d);
		free(pfd);
		free(idx);
		return NULL;
	}
	d->next_hb_ms = ft__now_ms();
	short_slice();
	ft__trace_thread(d->p.trace, 1, "detector");
	for (;;) {
		int64_t now = ft__now_ms();
		int n, timeout;

		if (d->out) {
			struct pollfd p = {.fd = d->cmd[0], .events = POLLIN};
			(void)poll(&p, 1, -1); /* EINTR: the stop flag is checked all the same */
			lock(d);
			bool stop = d->stop;
			unlock(d);
			drain_cmd(d);
			if (stop)
				break;
			continue;
		}
		if (now >= d->next_hb_ms) {
			for (int i = 0; i < d->ctl.nlinks && !d->out; i++) {
				struct ft__ctl_link *l = &d->ctl.links[i];
				if (l->fd >= 0 && l->peer >= 0 && l->gen >= d->gen && !l->connecting &&
				    ft__ctl_send(&d->ctl, i, FT__CTL_HB, d->gen, NULL, 0) != 0)
					send_failed(d, i, "its control link cannot take a heartbeat");
			}
			d->next_hb_ms = now + d->p.heartbeat_ms;
		}
		if (d->target != 0)
			recovery_step(d);
		if (d->out)
			continue;
		timeout = check_time(d, ft__now_ms());
		if (d->out)
			continue;
		pfd[0] = (struct pollfd){.fd = d->cmd[0], .events = POLLIN};
		n = 1 + ft__ctl_pollfds(&d->ctl, pfd + 1, idx);
		int nm = ft__mb_pollfds(d->p.mb, pfd + n, nmb);
		if (poll(pfd, (nfds_t)(n + nm), timeout) < 0) {
			if (errno == EINTR)
				continue;
			ft__error("detector: poll failed: %s", strerror(errno));
			break;
		}
		if (pfd[0].revents & POLLIN) {
			int suspect;
			bool stop, sure;
			drain_cmd(d);
			lock(d);
			stop = d->stop;
			suspect = d->suspect;
			sure = d->suspect_sure;
			d->suspect = -1;
			unlock(d);
			if (stop)
				break;
			grow_cmd(d);
			/* a data link to a rank whose token differs: auth_judge
			 * decides; one that closed during a recovery is explained
			 * by the failure being recovered from (its peer aborted its
			 * ring on the news): the next view's ring is built anyway */
			if (suspect >= 0 && suspect < d->p.world_size && d->target != 0 && !sure) {
				ft__info("detector: rank %d's data link closed during a recovery: "
					 "not declared", suspect);
			} else if (suspect >= 0 && suspect < d->p.world_size &&
				   (d->proven || d->auth[suspect] == 0)) {
				int32_t r = suspect;
				ft__warn("detector: rank %d's data link failed with no failure known: "
					 "declaring it", suspect);
				declare(d, &r, 1, "its data link failed");
			}
		}
		if (pfd[1].revents & POLLIN)
			ft__ctl_accept(&d->ctl);
		for (int j = 0; j + 2 < n && !d->out; j++)
			if (pfd[2 + j].revents != 0)
				read_link(d, idx[j]);
		/* another rank asks about a newer generation (detect_grow.c); read
		 * at every turn: the main thread's settles pump the backend too */
		uint32_t asked = !d->out ? ft__mb_pump(d->p.mb) : 0;
		if (!d->out && ft__det_asked(d, asked, ft__now_ms())) {
			ft__info("detector: rank asked about generation %u: recovering", asked);
			start_recovery(d);
		}
	}
	free(pfd);
	free(idx);
	lock(d);
	bool bye = d->bye;
	unlock(d);
	for (int i = 0; i < d->ctl.nlinks; i++) {
		if (bye && d->ctl.links[i].fd >= 0 && d->ctl.links[i].peer >= 0 &&
		    !d->ctl.links[i].connecting)
			send_bye(d, i);
		link_close(d, i);
	}
	return NULL;
}
