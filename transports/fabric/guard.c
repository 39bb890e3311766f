/* guard.c: frees the shm region locks that a killed process left held; fences a left-out one that wedges them. */
/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fabric.h"
#include "fdreg.h"

/*
 * Each shm endpoint owns a region (a file in /dev/shm) that every peer maps,
 * and one spinlock in its head guards its queues. Senders copy into a
 * receiver's region under the receiver's lock (SAR: a whole message's first
 * pieces), and a receiver copies out under its own. A process killed inside
 * either leaves the lock held for good, and every process that touches that
 * region next (the survivors' progress calls, their sends) spins on it
 * forever: no error, no way out.
 *
 * The guard is a thread that sleeps on the pidfds of the peers until one
 * dies. Then, for a vigil of GUARD_VIGIL_MS, it looks every GUARD_TICK_MS at
 * the locks of this process's regions and of the dead peer's, and frees one
 * it has found held at every look for GUARD_HELD_MS: a live holder keeps it
 * for microseconds (a few milliseconds when it loses its core), so a lock
 * held that long, right after a death, is the dead one's. The guard maps the
 * region heads itself (a page each, while the files are still named) and
 * touches nothing but the lock word, with the C library's own spinlock calls.
 *
 * A peer that is stopped (SIGSTOP, a debugger) while it holds a lock wedges
 * its peers as surely, and heartbeats get it left out of the view, but it
 * lives: a lock freed under it would be taken twice the moment it runs
 * again, in a region the survivors still use. So when the settled view
 * leaves peers out (ft__fab_guard_left_out) the guard keeps a vigil too,
 * and if a lock of this process's regions or of a left-out peer's stays
 * held at every look for GUARD_HELD_MS while a left-out peer lives, it
 * kills (SIGKILL through its pidfd: no other process can be hit) the
 * left-out peer whose region it is, or, for a lock of ours, whose holder a
 * spinlock does not name, every left-out peer that lives; it frees the
 * lock only once they are dead, as after any death. Only a process that
 * maps the wedged region is killed (maps_region): a peer's pid is its
 * hello's word. A left-out peer is otherwise left alone, to learn from its
 * next call that it is out (-FT_EEXCLUDED).
 *
 * This reads libfabric's private layout (struct smr_region: the owner's pid
 * at byte 4, the lock at byte 24), which the guard checks as far as it can:
 * libfabric 1.17 only, and a region is watched only if its head names its
 * owner's pid. Anywhere else the guard is off and a death inside the
 * provider can still wedge the survivors.
 */

#define GUARD_PID_OFF 4
#define GUARD_LOCK_OFF 24
#define GUARD_PAGE 4096
#define GUARD_TICK_MS 5
#define GUARD_HELD_MS 250
#define GUARD_VIGIL_MS 3000
#define GUARD_NAME_MAX 64
#define GUARD_POLL_MAX 256

struct guard_region {
	char name[GUARD_NAME_MAX];
	int pid, pidfd;         /* pidfd: a peer's, -1 for our own regions */
	int rank;               /* a peer's original rank; FT__GUARD_OWN for our own */
	bool own, dead;
	bool left_out;          /* the settled view left its rank out; alive at the news */
	bool fenced;            /* its process was sent SIGKILL */
	char *head;             /* the region's first page, mapped here */
	int64_t held_since;     /* ms; 0: free at the last look */
};

struct ft_guard {
	pthread_t thread;
	pthread_mutex_t mu;
	int efd;                /* wakes the thread: a region added, the guard closing */
	bool stop;
	struct guard_region *r;
	unsigned n, cap;
	int64_t vigil_until;    /* ms */
};

static pthread_spinlock_t *region_lock(const struct guard_region *r)
{
	return (pthread_spinlock_t *)(void *)(r->head + GUARD_LOCK_OFF);
}

static void region_drop(struct ft_guard *g, unsigned i)
{
	struct guard_region *r = &g->r[i];

	if (r->head != NULL)
		munmap(r->head, GUARD_PAGE);
	if (r->pidfd >= 0)
		ft__fd_close(r->pidfd);
	g->r[i] = g->r[--g->n];
}

/* How long r's lock has been held at every look, this one included (0: free now). */
static int64_t held_for(struct guard_region *r, int64_t now)
{
	pthread_spinlock_t *lk = region_lock(r);

	if (pthread_spin_trylock(lk) == 0) {
		pthread_spin_unlock(lk);
		r->held_since = 0;
		return 0;
	}
	if (r->held_since == 0)
		r->held_since = now;
	return now - r->held_since;
}

/* Returns whether r's lock was freed: held at every look for GUARD_HELD_MS. */
static bool region_check(struct guard_region *r, int64_t now)
{
	if (held_for(r, now) < GUARD_HELD_MS)
		return false;
	pthread_spin_unlock(region_lock(r));
	r->held_since = 0;
	ft__warn("fabric: the lock of shm region %s (%s, pid %d) was held %d ms after a peer died: "
		 "freed it",
		 r->name, r->own ? "this process" : "a dead peer", r->pid, GUARD_HELD_MS);
	return true;
}

/* SIGKILL through r's pidfd, which no other process can be hit through
 * (ESRCH: it has just died, as wanted). */
static bool kill_peer(const struct guard_region *r)
{
#ifdef SYS_pidfd_send_signal
	if (syscall(SYS_pidfd_send_signal, r->pidfd, SIGKILL, NULL, 0) == 0 || errno == ESRCH)
		return true;
#else
	errno = ENOSYS;
#endif
	ft__warn("fabric: guard: cannot kill rank %d (pid %d), left out of the view, whose lock "
		 "wedges this rank: %s",
		 r->rank, r->pid, strerror(errno));
	return false;
}

/*
 * Whether r's process maps the shm region name, read while its pidfd pins
 * it (a pid reused meanwhile reads as no). r's pid is what the peer's
 * hello said, and its region may be unnamed already, so nothing else
 * vouches for it; but only a process that maps a region can hold its
 * lock, so a process that does not is no holder to kill, whatever pid a
 * token holder named (another job's rank, any process of this user).
 */
static bool maps_region(const struct guard_region *r, const char *name)
{
	char path[32], want[GUARD_NAME_MAX + 16], *line = NULL;
	size_t cap = 0, n = (size_t)snprintf(want, sizeof(want), "/dev/shm/%s", name);
	struct pollfd p = {.fd = r->pidfd, .events = POLLIN};
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", r->pid);
	if ((f = fopen(path, "re")) == NULL)
		return false;
	while (!found && getline(&line, &cap, f) > 0) {
		int at = -1;
		/* address, permissions, offset, device, inode, then the path */
		if (sscanf(line, "%*s %*s %*s %*s %*s %n", &at) != 0 || at < 0)
			continue;
		found = strncmp(line + at, want, n) == 0 &&
			(line[at + (int)n] == '\n' || line[at + (int)n] == ' ' || line[at + (int)n] == '\0');
	}
	free(line);
	fclose(f);
	return found && r->pidfd >= 0 && poll(&p, 1, 0) == 0;
}

/*
 * While a left-out peer lives, a lock held at every look for GUARD_HELD_MS
 * is killed for: the left-out peer whose own region it is, or, for one of
 * this process's locks, whose holder a spinlock does not name, every
 * left-out peer that lives (not while a dead peer's lock is held: ours may
 * wait on that one, which the death path frees). Returns whether a kill
 * is under way (a wedge seen now, or a killed peer not yet seen dead):
 * then no lock may be freed at this look, since its holder may live yet;
 * its death, seen at a later look, frees the lock. A peer that cannot be
 * killed is no longer fenced: the vigil goes on as after a death.
 */
static bool fence_look(struct ft_guard *g, int64_t now)
{
	struct guard_region *wedged = NULL;
	bool pending = false, dead_held = false;

	for (unsigned i = 0; i < g->n; i++)
		if (g->r[i].dead && g->r[i].head != NULL) {
			held_for(&g->r[i], now);
			dead_held |= g->r[i].held_since != 0; /* held now, if only since this look */
		}
	for (unsigned i = 0; i < g->n; i++) {
		struct guard_region *r = &g->r[i];
		pending |= r->fenced && !r->dead;
		if (((r->own && !dead_held) || (r->left_out && !r->dead && !r->fenced)) &&
		    r->head != NULL && held_for(r, now) >= GUARD_HELD_MS && wedged == NULL)
			wedged = r;
	}
	for (unsigned i = 0; wedged != NULL && i < g->n; i++) {
		struct guard_region *r = &g->r[i];
		bool killed;
		if (!r->left_out || r->dead || r->fenced || (!wedged->own && r->pid != wedged->pid))
			continue;
		if (!maps_region(r, wedged->name)) {
			ft__warn("fabric: guard: pid %d, which rank %d (left out of the view) gave as "
				 "its own, does not map shm region %s, whose lock has been held %d "
				 "ms: not killed",
				 r->pid, r->rank, wedged->name, GUARD_HELD_MS);
			killed = false;
		} else {
			killed = kill_peer(r);
		}
		for (unsigned k = i; k < g->n; k++) /* its other regions: one kill, one warning */
			if (g->r[k].pid == r->pid && !g->r[k].own) {
				g->r[k].fenced = killed;
				g->r[k].left_out = killed;
			}
		pending |= killed;
		if (killed)
			ft__warn("fabric: rank %d (pid %d), left out of the view, still lives while the "
				 "lock of shm region %s has been held %d ms: killed it, as a stopped "
				 "holder would wedge this rank for good",
				 r->rank, r->pid, wedged->name, GUARD_HELD_MS);
	}
	return pending;
}

/* One look after a wake-up; called with g->mu held. */
static void guard_look(struct ft_guard *g)
{
	int64_t now = ft__now_ms();
	bool freed = false;

	for (unsigned i = 0; i < g->n; i++) {
		struct guard_region *r = &g->r[i];
		struct pollfd p = {.fd = r->pidfd, .events = POLLIN};
		if (r->own || r->dead || r->pidfd < 0 || poll(&p, 1, 0) != 1)
			continue;
		r->dead = true;
		r->held_since = 0; /* held for GUARD_HELD_MS after the death, as every dead one's */
		g->vigil_until = now + GUARD_VIGIL_MS;
		ft__debug("fabric: guard: pid %d (shm region %s) exited", r->pid, r->name);
	}
	if (now >= g->vigil_until) {
		/* the next vigil starts from a clean slate */
		for (unsigned i = 0; i < g->n;)
			if (g->r[i].dead) {
				region_drop(g, i);
			} else {
				g->r[i].left_out = g->r[i].fenced = false;
				g->r[i++].held_since = 0;
			}
		return;
	}
	if (fence_look(g, now)) {
		for (unsigned i = 0; i < g->n; i++)
			if (g->r[i].own)
				g->r[i].held_since = 0;
		return;
	}
	/* The dead peers' locks first: a thread of ours may hold our own lock
	 * while it waits on one of theirs. */
	for (unsigned i = 0; i < g->n; i++)
		if (g->r[i].dead && g->r[i].head != NULL && region_check(&g->r[i], now))
			freed = true;
	for (unsigned i = 0; i < g->n; i++) {
		if (!g->r[i].own)
			continue;
		if (freed)
			g->r[i].held_since = 0;
		else
			region_check(&g->r[i], now);
	}
}

static void *guard_main(void *arg)
{
	struct ft_guard *g = arg;
	struct pollfd pfd[GUARD_POLL_MAX];

	for (;;) {
		nfds_t np = 0;
		int timeout;
		uint64_t v;

		pthread_mutex_lock(&g->mu);
		if (g->stop) {
			pthread_mutex_unlock(&g->mu);
			return NULL;
		}
		pfd[np++] = (struct pollfd){.fd = g->efd, .events = POLLIN};
		for (unsigned i = 0; i < g->n && np < GUARD_POLL_MAX; i++)
			if (!g->r[i].dead && g->r[i].pidfd >= 0)
				pfd[np++] = (struct pollfd){.fd = g->r[i].pidfd, .events = POLLIN};
		timeout = ft__now_ms() < g->vigil_until ? GUARD_TICK_MS : -1;
		pthread_mutex_unlock(&g->mu);
		if (poll(pfd, np, timeout) > 0 && pfd[0].revents != 0 &&
		    read(g->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			return NULL;
		pthread_mutex_lock(&g->mu);
		guard_look(g);
		pthread_mutex_unlock(&g->mu);
	}
}

static void guard_wake(struct ft_guard *g)
{
	uint64_t one = 1;

	if (write(g->efd, &one, sizeof(one)) < 0)
		ft__debug("fabric: guard: eventfd: %s", strerror(errno));
}

struct ft_guard *ft__fab_guard_open(void)
{
	uint32_t v = fi_version();
	struct ft_guard *g;

	if (FI_MAJOR(v) != 1 || FI_MINOR(v) != 17) {
		ft__info("fabric: no shm lock guard for libfabric %u.%u (its region layout is known "
			 "for 1.17 only): a rank killed inside the provider may wedge its peers",
			 FI_MAJOR(v), FI_MINOR(v));
		return NULL;
	}
	g = calloc(1, sizeof(*g));
	if (g == NULL)
		return NULL;
	g->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ft__fd_own(g->efd);
	if (g->efd < 0) {
		free(g);
		return NULL;
	}
	pthread_mutex_init(&g->mu, NULL);
	if (pthread_create(&g->thread, NULL, guard_main, g) != 0) {
		pthread_mutex_destroy(&g->mu);
		ft__fd_close(g->efd);
		free(g);
		return NULL;
	}
	return g;
}

/* Maps the head of /dev/shm/name if it names pid as its owner. */
static char *map_head(const char *name, int pid)
{
	char path[GUARD_NAME_MAX + 16];
	struct stat st;
	char *head;
	int fd, owner;

	snprintf(path, sizeof(path), "/dev/shm/%s", name);
	fd = open(path, O_RDWR | O_CLOEXEC);
	ft__fd_own(fd);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) != 0 || st.st_size < GUARD_PAGE) {
		ft__fd_close(fd);
		return NULL;
	}
	head = mmap(NULL, GUARD_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ft__fd_close(fd);
	if (head == MAP_FAILED)
		return NULL;
	memcpy(&owner, head + GUARD_PID_OFF, sizeof(owner));
	if (owner != pid) {
		munmap(head, GUARD_PAGE);
		return NULL;
	}
	return head;
}

bool ft__fab_guard_add(struct ft_guard *g, const char *region, int pid, int rank)
{
	bool own = rank == FT__GUARD_OWN;
	struct guard_region r = {.pid = pid, .pidfd = -1, .rank = rank, .own = own};
	bool ok = false;

	if (g == NULL || strlen(region) >= sizeof(r.name))
		return false;
	strcpy(r.name, region);
	pthread_mutex_lock(&g->mu);
	for (unsigned i = 0; i < g->n; i++)
		if (strcmp(g->r[i].name, region) == 0) {
			pthread_mutex_unlock(&g->mu);
			return true;
		}
	if (g->n == g->cap) {
		unsigned cap = g->cap == 0 ? 8 : g->cap * 2;
		struct guard_region *nr = realloc(g->r, cap * sizeof(*nr));
		if (nr == NULL)
			goto out;
		g->r = nr;
		g->cap = cap;
	}
	/* A peer's region may be unnamed already (a link's own endpoint): its
	 * death is still worth watching, for the locks of our regions. */
	r.head = map_head(region, pid);
	if (own && r.head == NULL)
		goto out;
	if (!own) {
#ifdef SYS_pidfd_open
		r.pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
		ft__fd_own(r.pidfd);
#endif
		if (r.pidfd < 0) {
			if (r.head != NULL)
				munmap(r.head, GUARD_PAGE);
			goto out;
		}
	}
	g->r[g->n++] = r;
	ok = true;
out:
	pthread_mutex_unlock(&g->mu);
	if (ok)
		guard_wake(g);
	else
		ft__debug("fabric: guard: cannot watch shm region %s of pid %d", region, pid);
	return ok;
}

void ft__fab_guard_remove(struct ft_guard *g, const char *region)
{
	if (g == NULL)
		return;
	pthread_mutex_lock(&g->mu);
	for (unsigned i = 0; i < g->n; i++)
		/* A dead peer's region stays until the vigil is over. */
		if (strcmp(g->r[i].name, region) == 0 && !g->r[i].dead) {
			region_drop(g, i);
			break;
		}
	pthread_mutex_unlock(&g->mu);
}

void ft__fab_guard_left_out(struct ft_guard *g, int rank)
{
	bool any = false;

	if (g == NULL)
		return;
	pthread_mutex_lock(&g->mu);
	for (unsigned i = 0; i < g->n; i++) {
		struct guard_region *r = &g->r[i];
		if (!r->own && !r->dead && r->rank == rank) {
			r->left_out = true;
			r->held_since = 0;
			any = true;
		}
	}
	if (any)
		g->vigil_until = ft__now_ms() + GUARD_VIGIL_MS;
	pthread_mutex_unlock(&g->mu);
	if (any)
		guard_wake(g);
}

void ft__fab_guard_close(struct ft_guard *g)
{
	if (g == NULL)
		return;
	pthread_mutex_lock(&g->mu);
	g->stop = true;
	pthread_mutex_unlock(&g->mu);
	guard_wake(g);
	pthread_join(g->thread, NULL);
	while (g->n > 0)
		region_drop(g, 0);
	free(g->r);
	pthread_mutex_destroy(&g->mu);
	ft__fd_close(g->efd);
	free(g);
}
