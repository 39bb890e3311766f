/* shm.c: libfabric peers on this host: pid liveness, shm region cleanup, stale regions, the SAR yield. */
/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fabric.h"
#include "fdreg.h"

/*
 * shm keeps a file in /dev/shm per endpoint ("fi_shm://PID:UID:IDX" names
 * "PID:UID:IDX") that only its owner removes, when it closes the endpoint
 * (ft_finalize does; so do shm's own handlers of SIGINT, SIGTERM, SIGSEGV
 * and SIGBUS): a rank killed, or exiting without ft_finalize, would leave
 * its region there for good. Its name is removed instead by a neighbour that
 * saw it die, when that neighbour closes its transport (below), by ftcc-run
 * when the job ends, or by a later process given the same pid
 * (ft__fab_enable_ep); mappings already made stay valid. The library
 * registers no exit handler for this: one would run in whatever thread
 * calls exit(), under the application's feet (its one exit handler closes
 * the PMIx client, boot_pmix.c: mpirun fails a job whose rank exits
 * without it).
 *
 * Not at once: a rank killed right after it asked a peer to connect leaves
 * that request in the peer's queue, and shm 1.17 maps the requester's region
 * by name when it takes the request, then reads it unchecked: a name removed
 * meanwhile crashed the survivor (SIGSEGV in fi_cq_read, seen in
 * test_shrink's second kill during recovery). So a dead peer's region is
 * removed FAB_REAP_AFTER_MS after its death, or when this transport closes
 * if that comes first: survivors drain their queues long before either. An
 * observer killed within that time leaves the region behind (ftcc-run still
 * removes it when the job ends).
 */
static bool shm_region(const char *prov, const uint8_t *name, size_t len, int pid, char *out)
{
	const char *p;
	int owner;

	if (strcmp(prov, "shm") != 0 || len == 0 || len > FAB_NAME_MAX)
		return false;
	memcpy(out, name, len);
	out[len] = '\0';
	p = strstr(out, "://");
	p = p != NULL ? p + 3 : out;
	if (sscanf(p, "%d:", &owner) != 1 || owner != pid || strchr(p, '/') != NULL)
		return false;
	memmove(out, p, strlen(p) + 1);
	return true;
}

/*
 * Removes the region of a process that died and those of its other
 * endpoints ("PID:UID:IDX" with the same PID:UID:, the links' own): one that
 * was killed before a peer had mapped its link's endpoint left that name
 * too. Returns how many were removed.
 */
static int reap_regions(const char *region)
{
	const char *colon = strrchr(region, ':');
	size_t plen = colon != NULL ? (size_t)(colon - region) + 1 : 0;
	struct dirent *e;
	DIR *d;
	int n = 0;

	if (plen == 0)
		return 0;
	n += shm_unlink(region) == 0;
	if ((d = opendir("/dev/shm")) == NULL)
		return n;
	while ((e = readdir(d)) != NULL) {
		const char *idx = e->d_name + plen;
		if (strncmp(e->d_name, region, plen) != 0 || *idx == '\0' ||
		    strspn(idx, "0123456789") != strlen(idx))
			continue;
		n += shm_unlink(e->d_name) == 0;
	}
	closedir(d);
	return n;
}

/* Remembers a dead process's region for ft__fab_reap_dead (the oldest is
 * removed now when the list is full: the longest dead). */
static void reap_later(struct ft__transport *tp, const char *region)
{
	size_t n = strnlen(region, FAB_NAME_MAX);

	for (unsigned i = 0; i < tp->nreap; i++)
		if (strcmp(tp->reap[i].region, region) == 0)
			return;
	if (tp->nreap == FAB_REAP_MAX) {
		tp->reap[0].at = 0;
		ft__fab_reap_dead(tp, false);
	}
	memcpy(tp->reap[tp->nreap].region, region, n);
	tp->reap[tp->nreap].region[n] = '\0';
	tp->reap[tp->nreap++].at = ft__now_ms() + FAB_REAP_AFTER_MS;
}

/* Removes the regions due (all: every one remembered). */
void ft__fab_reap_dead(struct ft__transport *tp, bool all)
{
	int64_t now = ft__now_ms();

	for (unsigned i = 0; i < tp->nreap;) {
		if (!all && tp->reap[i].at > now) {
			i++;
			continue;
		}
		if (reap_regions(tp->reap[i].region) > 0)
			ft__debug("fabric: removed the shm region %s of a rank that died",
				  tp->reap[i].region);
		tp->nreap--;
		memmove(&tp->reap[i], &tp->reap[i + 1], (tp->nreap - i) * sizeof(tp->reap[0]));
	}
}

static void reap_shm_region(const struct ft__link *l)
{
	char region[FAB_NAME_MAX + 1];

	if (shm_region(l->tp->prov, l->peer_name, l->peer_namelen, l->pid, region))
		reap_later(l->tp, region);
}

static void peer_died(struct ft__link *l, int64_t now)
{
	ft__debug("fabric: rank %d (pid %d) exited", l->peer, l->pid);
	if (!l->peer_closed)
		reap_shm_region(l);
	l->dead = true;
	if (l->grace == 0)
		l->grace = now + FAB_DEAD_GRACE_MS;
}

/*
 * shm posts a message under a spinlock that lives in the receiver's region:
 * a rank killed while holding it leaves it held, and a send to it would spin
 * for good. So nothing is sent to a shm peer once its pidfd says it exited,
 * checked right before each send (the window left is microseconds, not the
 * whole time until the next liveness check).
 */
bool ft__fab_peer_gone(struct ft__link *l)
{
	bool gone;

	if (l->dead)
		return true;
	if (!l->local || strcmp(l->tp->prov, "shm") != 0)
		return false;
	if (l->pidfd >= 0) {
		struct pollfd p = {.fd = l->pidfd, .events = POLLIN};
		gone = poll(&p, 1, 0) == 1;
	} else {
		gone = kill(l->pid, 0) != 0 && errno == ESRCH;
	}
	if (gone)
		peer_died(l, ft__now_ms());
	return gone;
}

/*
 * Watches a peer that runs on this node through a pidfd (else kill(pid, 0)),
 * and maps its bell when this transport sleeps on one (bell: the peer's
 * handle, -1 for none).
 */
void ft__fab_watch_peer(struct ft__link *l, uint64_t node, int pid, const uint8_t *name, size_t len,
			int bell)
{
	char region[FAB_NAME_MAX + 1];

	if (name != NULL && len <= sizeof(l->peer_name)) {
		memcpy(l->peer_name, name, len);
		l->peer_namelen = len;
	}
	l->pid = pid;
	l->local = node == l->tp->node && pid > 0;
	if (!l->local)
		return;
	if (l->tp->guard != NULL && pid != l->tp->pid &&
	    shm_region(l->tp->prov, l->peer_name, l->peer_namelen, pid, region))
		ft__fab_guard_add(l->tp->guard, region, pid, l->peer);
	if (l->tp->bell != NULL && bell >= 0) {
		l->peer_bell = pid == l->tp->pid ? l->tp->bell : ft__fab_bell_map(pid, bell);
		if (l->peer_bell == NULL)
			ft__warn("fabric: cannot reach the bell of rank %d (pid %d): it will "
				 "notice this rank's messages only by polling",
				 l->peer, pid);
	}
#ifdef SYS_pidfd_open
	l->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	ft__fd_own(l->pidfd);
	if (l->pidfd < 0 && errno == ESRCH) {
		l->dead = true;
		l->grace = ft__now_ms() + FAB_DEAD_GRACE_MS;
	}
#endif
}

bool ft__fab_local_peer_closed(const struct ft__link *l)
{
	if (l->pid != l->tp->pid || !l->local || l->peer_namelen == 0)
		return false;
	return !ft__fab_open_here(l->peer_name, l->peer_namelen);
}

/*
 * The links to a rank are often closed before its death shows in its pidfd
 * (the detector hears of it first, from its control link). A local shm peer
 * alive when its link closes stays watched, so that whoever last linked with
 * it removes its region if it is killed later.
 */
void ft__fab_keep_watching(struct ft__transport *tp, struct ft__link *l)
{
	struct fab_watch w = {.pidfd = l->pidfd};

	if (l->pidfd < 0 || l->dead || l->pid == tp->pid ||
	    !shm_region(tp->prov, l->peer_name, l->peer_namelen, l->pid, w.region))
		return;
	for (unsigned i = 0; i < tp->nwatch; i++)
		if (strcmp(tp->watch[i].region, w.region) == 0)
			return;
	if (tp->nwatch == FAB_WATCH_MAX) {
		ft__fd_close(tp->watch[0].pidfd);
		memmove(&tp->watch[0], &tp->watch[1], --tp->nwatch * sizeof(tp->watch[0]));
	}
	tp->watch[tp->nwatch++] = w;
	l->pidfd = -1;
}

void ft__fab_check_watched(struct ft__transport *tp)
{
	for (unsigned i = 0; i < tp->nwatch;) {
		struct pollfd p = {.fd = tp->watch[i].pidfd, .events = POLLIN};
		if (poll(&p, 1, 0) != 1) {
			i++;
			continue;
		}
		reap_later(tp, tp->watch[i].region);
		ft__fd_close(tp->watch[i].pidfd);
		tp->nwatch--;
		memmove(&tp->watch[i], &tp->watch[i + 1], (tp->nwatch - i) * sizeof(tp->watch[0]));
	}
}

void ft__fab_check_liveness(struct ft__transport *tp)
{
	int64_t now = ft__now_ms();

	if (now < tp->next_liveness)
		return;
	tp->next_liveness = now + FAB_LIVENESS_MS;
	ft__fab_check_watched(tp);
	if (tp->nreap > 0)
		ft__fab_reap_dead(tp, false);
	if (tp->npark > 0)
		ft__fab_unpark(tp, false);
	for (struct ft__link *l = tp->links; l != NULL; l = l->next) {
		bool gone;
		if (!l->local || l->dead)
			continue;
		if (l->pidfd >= 0) {
			struct pollfd p = {.fd = l->pidfd, .events = POLLIN};
			gone = poll(&p, 1, 0) == 1;
		} else {
			gone = kill(l->pid, 0) != 0 && errno == ESRCH;
		}
		if (gone)
			peer_died(l, now);
	}
}

/* Has the guard watch (or, closed, forget) the region of one of this process's shm endpoints. */
void ft__fab_guard_own(struct ft__transport *tp, const uint8_t *name, size_t len, bool open)
{
	char region[FAB_NAME_MAX + 1];

	if (tp->guard == NULL || !shm_region(tp->prov, name, len, tp->pid, region))
		return;
	if (open)
		ft__fab_guard_add(tp->guard, region, tp->pid, FT__GUARD_OWN);
	else
		ft__fab_guard_remove(tp->guard, region);
}

/*
 * shm names an endpoint's region after its process ("PID:UID:IDX") and
 * fails to enable the endpoint (-FI_EBUSY) when a file of that name exists:
 * the leftover of a process that had this pid before and was killed with no
 * neighbour left to remove it. No live process but this one names regions
 * with this pid, and this one never reuses an index, so the file is stale.
 * 1.17 removes it as it fails; whether or not, the file is removed and the
 * enable tried once more.
 */
int ft__fab_enable_ep(struct ft__transport *tp, struct fid_ep *ep)
{
	uint8_t name[FAB_NAME_MAX];
	char region[FAB_NAME_MAX + 1];
	size_t len = sizeof(name);
	int rc = fi_enable(ep);

	if (rc != -FI_EBUSY || fi_getname(&ep->fid, name, &len) != 0 ||
	    !shm_region(tp->prov, name, len, tp->pid, region) ||
	    (shm_unlink(region) != 0 && errno != ENOENT))
		return rc;
	ft__warn("fabric: /dev/shm/%s was left by an earlier process with pid %d: removed", region,
		 tp->pid);
	return fi_enable(ep);
}

/*
 * The region of a link's own shm endpoint is named only until the peer has
 * mapped it: shm refuses (-FI_EAGAIN) every send to a peer until that peer
 * has mapped the sender's region and said so, so once the hello is posted
 * the name is no longer needed, and a rank killed later leaves nothing of
 * it in /dev/shm (mappings stay valid).
 */
void ft__fab_unname_link_ep(const struct ft__link *l)
{
	char region[FAB_NAME_MAX + 1];

	if (l->own_ep && !l->tp->msg &&
	    shm_region(l->tp->prov, l->m.hello.name, l->m.hello.namelen, l->tp->pid, region))
		shm_unlink(region);
}

/*
 * Not closed at once: a link's own endpoint whose hello was never posted.
 * shm's first send to a peer puts a request to connect, naming the sender's
 * region, in the peer's queue, and refuses (-FI_EAGAIN) until the peer has
 * taken it. Closing the endpoint removes that name; a peer that takes the
 * request afterwards (one held up, say spinning 250 ms on the lock of a rank
 * killed inside shm until the guard frees it, while this rank's recovery
 * closed the link) maps the name unchecked: libfabric 1.17's
 * smr_progress_connreq reads the failed mapping (NULL) and the peer dies of
 * SIGSEGV in fi_cq_read (make tsan, two ranks killed at once over shm). So
 * such an endpoint stays open, unused, for FAB_PARK_MS or until this
 * transport closes; a dead peer takes nothing, so its link's endpoint closes
 * now. Once the hello is posted the peer has mapped the region already
 * (ft__fab_unname_link_ep).
 */
bool ft__fab_park_ep(struct ft__transport *tp, struct ft__link *l)
{
	struct fab_park *p;

	if (!l->own_ep || tp->msg || !l->sending || !l->want[C_HELLO] ||
	    strcmp(tp->prov, "shm") != 0 || ft__fab_peer_gone(l))
		return false;
	if (tp->npark == FAB_PARK_MAX) {
		tp->park[0].at = 0;
		ft__fab_unpark(tp, false);
	}
	p = &tp->park[tp->npark++];
	p->ep = l->ep;
	memcpy(p->name, l->m.hello.name, l->m.hello.namelen);
	p->namelen = l->m.hello.namelen;
	p->at = ft__now_ms() + FAB_PARK_MS;
	ft__debug("fabric: the endpoint of a link to rank %d stays open %d ms: its hello was "
		  "never posted", l->peer, FAB_PARK_MS);
	return true;
}

void ft__fab_unpark(struct ft__transport *tp, bool all)
{
	int64_t now = ft__now_ms();

	for (unsigned i = 0; i < tp->npark;) {
		if (!all && tp->park[i].at > now) {
			i++;
			continue;
		}
		fi_close(&tp->park[i].ep->fid);
		ft__fab_guard_own(tp, tp->park[i].name, tp->park[i].namelen, false);
		tp->npark--;
		memmove(&tp->park[i], &tp->park[i + 1], (tp->npark - i) * sizeof(tp->park[0]));
	}
}

/* Under SAR, whether a message is midway: shm moves it only while both ends call progress. */
bool ft__fab_sar_midway(const struct ft__transport *tp)
{
	if (!tp->sar)
		return false;
	for (const struct ft__link *l = tp->links; l != NULL; l = l->next)
		if (l->error == 0 && !l->dead && (l->s_inflight > 0 || l->user_rx > 0))
			return true;
	return false;
}

/*
 * Whether, under SAR, the waiting is better done by yielding the CPU than by
 * sleeping: a transfer is midway and moved recently. shm moves a SAR message
 * in bounce-buffer-sized pieces, each needing a progress call from the
 * sender and then from the receiver; with more ranks than cores, a sleeping
 * side stalls its partner for the whole sleep (4 ranks, 64 MiB on 2 cores:
 * 70-80 ms yielding, 80-300 ms sleeping). The yield lasts FAB_SAR_YIELD_NS
 * past the last completion or post, so a rank waiting on a slow peer still
 * goes to sleep.
 */
bool ft__fab_sar_yield(const struct ft__transport *tp)
{
	return ft__fab_sar_midway(tp) && ft__now_ns() - tp->active_ns < FAB_SAR_YIELD_NS;
}
