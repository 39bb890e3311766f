/* progress.c: libfabric progress and waiting (wait fds, bell, back-off), and the transports of this process. */
/* SPDX-License-Identifier: MIT */
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "fabric.h"

#define FAB_POLL_MIN_US 50
#define FAB_POLL_MAX_US 1000

/* Reads every completion and event, then moves every link along; returns how many were read. */
int ft__fab_drive(struct ft__transport *tp)
{
	int n = 0;

	/* The EQ first: a shutdown seen there is judged after the CQ entries before it. */
	if (tp->eq != NULL)
		n += ft__fab_drive_eq(tp);
	n += ft__fab_drive_cq(tp);
	if (tp->msg)
		ft__fab_sweep_pending(tp); /* after the CQ: hellos and proofs read first */
	for (int i = 0; tp->slots != NULL && i < FAB_HELLO_SLOTS; i++) {
		struct fab_slot *s = &tp->slots[i];
		if (!s->want)
			continue;
		s->x = (struct fab_xfer){.owner = s, .kind = X_SLOT};
		if (fi_trecv(tp->ep, &s->msg, sizeof(s->msg), tp->slots_desc, FI_ADDR_UNSPEC,
			     TAG_HELLO, 0, &s->x.fctx) == 0) {
			s->want = false;
			s->x.posted = true;
		}
	}
	ft__fab_check_liveness(tp);
	for (struct ft__link *l = tp->links; l != NULL; l = l->next)
		ft__fab_advance(l);
	for (struct ft__link *l = tp->pending; l != NULL; l = l->next)
		if (l->error == 0)
			ft__fab_advance_ctl(l);
	if (n > 0) {
		tp->idle_us = 0;
		tp->active_ns = ft__now_ns();
	}
	return n;
}

/* Earliest grace period still to end (INT64_MAX: none). */
static int64_t next_deadline(const struct ft__transport *tp)
{
	int64_t d = INT64_MAX, now = ft__now_ms();

	for (const struct ft__link *l = tp->links; l != NULL; l = l->next)
		if (l->grace > now && l->error == 0 && l->grace < d)
			d = l->grace;
	return d;
}

/*
 * Transports open in this process. One thread may hold both ends of a link
 * (two transports, as in tests): the connector's hello then moves only when
 * the acceptor's thread drives it, so a transport about to block first drives
 * the others it can lock. Never more than one, outside tests.
 */
static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ft__transport *all_tps;
static unsigned n_tps;

/*
 * A peer endpoint in this very process is gone once its transport closed;
 * shm has then unmapped its region, and a message sent there would fault.
 */
bool ft__fab_open_here(const uint8_t *name, size_t len)
{
	bool open = false;

	pthread_mutex_lock(&all_lock);
	for (const struct ft__transport *o = all_tps; o != NULL && !open; o = o->next_tp)
		open = o->namelen == len && memcmp(o->name, name, len) == 0;
	pthread_mutex_unlock(&all_lock);
	return open;
}

void ft__fab_tps_add(struct ft__transport *tp, bool add)
{
	pthread_mutex_lock(&all_lock);
	if (add) {
		tp->next_tp = all_tps;
		all_tps = tp;
		n_tps++;
	} else {
		for (struct ft__transport **pp = &all_tps; *pp != NULL; pp = &(*pp)->next_tp)
			if (*pp == tp) {
				*pp = tp->next_tp;
				n_tps--;
				break;
			}
	}
	pthread_mutex_unlock(&all_lock);
}

/*
 * Returns whether tp shares the process with other transports. Those locked
 * here cannot be freed (close takes the lock) while all_lock is let go, as it
 * must be: driving them may look at the list again.
 */
static bool drive_others(struct ft__transport *tp)
{
	struct ft__transport *held[16];
	int n = 0;
	bool others;

	pthread_mutex_lock(&all_lock);
	others = n_tps > 1;
	for (struct ft__transport *o = all_tps; others && o != NULL && n < 16; o = o->next_tp)
		if (o != tp && pthread_mutex_trylock(&o->lock) == 0)
			held[n++] = o;
	pthread_mutex_unlock(&all_lock);
	for (int i = 0; i < n; i++) {
		ft__fab_drive(held[i]);
		pthread_mutex_unlock(&held[i]->lock);
	}
	return others;
}

/*
 * Whether whatever this transport waits for comes with a ring of its bell:
 * every live link leads to a peer that rings it and, under SAR, no transfer
 * is midway (shm moves SAR pieces along in both processes' progress calls,
 * and nobody rings for a piece).
 */
static bool bell_covers(const struct ft__transport *tp)
{
	if (tp->bell == NULL || ft__fab_sar_midway(tp))
		return false;
	for (const struct ft__link *l = tp->links; l != NULL; l = l->next)
		if (l->error == 0 && !l->dead && l->peer_bell == NULL)
			return false;
	return true;
}

/* Sleeps on the bell up to ms, and up to FAB_LIVENESS_MS: pidfds are not watched meanwhile. */
static void bell_sleep(struct ft__transport *tp, int ms)
{
	uint32_t armed = ft__fab_bell_arm(tp->bell);

	/* The last look, after arming: a ring from now on is not lost. */
	if (ft__fab_drive(tp) == 0 && tp->ev_len == 0)
		ft__fab_bell_wait(tp->bell, armed, ms < 0 || ms > FAB_LIVENESS_MS ? FAB_LIVENESS_MS : ms);
	ft__fab_bell_disarm(tp->bell);
	tp->idle_us = 0;
}

/*
 * Blocks up to ms (-1: the cap) until the provider may have something: on
 * its wait fds after fi_trywait says nothing is pending, on its bell when
 * every peer rings it, else a back-off sleep. The pidfds of local peers wake
 * us too, and with watch the watched fd (progress's waits only: the others
 * wait for their own ends, and would spin on it). Returns whether the
 * watched fd is readable. (The bell's sleep does not watch it: its
 * FAB_LIVENESS_MS bounds the delay.)
 */
bool ft__fab_wait(struct ft__transport *tp, int ms, bool watch)
{
	int wi = -1;
	struct pollfd pfd[64];
	int n = 0, np, rc;
	int64_t d = next_deadline(tp);

	/* Another transport's progress would not wake our fds: keep waits short. */
	if (drive_others(tp) && (ms < 0 || ms > 1))
		ms = 1;
	if (d != INT64_MAX) {
		int left = ft__ms_left(d);
		if (ms < 0 || left < ms)
			ms = left > 0 ? left : 1;
	}
	if (tp->cq_fd < 0 && ms != 0 && bell_covers(tp)) {
		bell_sleep(tp, ms);
		return false;
	}
	if (tp->cq_fd >= 0) {
		struct fid *fids[2] = {&tp->cq->fid, tp->eq != NULL ? &tp->eq->fid : NULL};
		if (fi_trywait(tp->fabric, fids, tp->eq != NULL ? 2 : 1) != FI_SUCCESS)
			return false;
		pfd[n++] = (struct pollfd){.fd = tp->cq_fd, .events = POLLIN};
		if (tp->eq_fd >= 0)
			pfd[n++] = (struct pollfd){.fd = tp->eq_fd, .events = POLLIN};
	}
	if (watch && tp->watch_fd >= 0) {
		wi = n;
		pfd[n++] = (struct pollfd){.fd = tp->watch_fd, .events = POLLIN};
	}
	np = n;
	for (struct ft__link *l = tp->links; l != NULL && n < 64; l = l->next)
		if (l->pidfd >= 0 && !l->dead)
			pfd[n++] = (struct pollfd){.fd = l->pidfd, .events = POLLIN};
	if (tp->cq_fd >= 0) {
		rc = poll(pfd, (nfds_t)n, ms < 0 || ms > FAB_WAIT_CAP_MS ? FAB_WAIT_CAP_MS : ms);
	} else {
		long us;
		if (ft__fab_sar_yield(tp) || ft__now_ns() - tp->active_ns < FAB_YIELD_NS) {
			sched_yield();
			return false;
		}
		tp->idle_us = tp->idle_us == 0 ? FAB_POLL_MIN_US
					       : (tp->idle_us * 2 > FAB_POLL_MAX_US ? FAB_POLL_MAX_US
										    : tp->idle_us * 2);
		us = ms >= 0 && (long)ms * 1000 < (long)tp->idle_us ? (long)ms * 1000 : (long)tp->idle_us;
		struct timespec ts = {0, us * 1000};
		rc = ppoll(pfd, (nfds_t)n, &ts, NULL);
	}
	/* A peer's exit is looked at now, not at the next periodic check. */
	if (rc > 0)
		for (int i = np; i < n; i++)
			if (pfd[i].revents != 0)
				tp->next_liveness = 0;
	return rc > 0 && wi >= 0 && pfd[wi].revents != 0;
}

int ft__fab_progress(struct ft__transport *tp, int timeout_ms, struct ft__tp_event *ev, int max)
{
	int64_t deadline = timeout_ms < 0 ? 0 : ft__now_ms() + timeout_ms;

	for (;;) {
		ft__fab_drive(tp);
		if (tp->ev_len > 0)
			return ft__fab_ev_pop(tp, ev, max);
		if (timeout_ms == 0)
			return 0;
		if (timeout_ms > 0 && ft__ms_left(deadline) == 0)
			return 0;
		if (ft__fab_wait(tp, timeout_ms < 0 ? -1 : ft__ms_left(deadline), true))
			return 0; /* the watched fd: a failure is known */
	}
}
