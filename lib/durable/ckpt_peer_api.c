/* ckpt_peer_api.c: the peer checkpoint service as its callers see it: start and stop, the address book, rounds posted, fetches waited for, who holds whom (the thread: ckpt_peer.c). */
/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>

#include "bigmem.h"
#include "ckpt_peer_int.h"
#include "fdreg.h"
#include "internal.h"
#include "jnl.h"


int ft__ckpt_peer_open(const struct ft__ckpt_peer_params *pp, struct ft__ckpt_peer **out)
{
	struct ft__ckpt_peer *p = calloc(1, sizeof(*p));
	int rc;

	*out = NULL;
	if (p == NULL)
		return -FT_ENOMEM;
	p->p = *pp;
	p->wake_fd = -1;
	snprintf(p->job_id, sizeof(p->job_id), "%s", pp->job_id);
	snprintf(p->token, sizeof(p->token), "%s", pp->token);
	p->p.job_id = p->job_id;
	p->p.token = p->token;
	p->job_hash = ft__jnl_job_hash(pp->job_id);
	if (pthread_mutex_init(&p->lock, NULL) != 0) {
		free(p);
		return -FT_ENOMEM;
	}
	if (ft__cond_init_monotonic(&p->cond) != 0) {
		pthread_mutex_destroy(&p->lock);
		free(p);
		return -FT_ENOMEM;
	}
	p->book = calloc((size_t)pp->world_size, sizeof(*p->book));
	p->mir = calloc((size_t)pp->world_size, sizeof(*p->mir));
	p->lost = calloc((size_t)pp->world_size, sizeof(*p->lost));
	p->fetch.link = -1;
	p->no_local = pp->no_local;
	ft__pk_local_id(&p->local);
	if (p->book == NULL || p->mir == NULL || p->lost == NULL) {
		ft__ckpt_peer_close(p);
		return -FT_ENOMEM;
	}
	if ((p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
		rc = ft__err_local(errno);
		ft__ckpt_peer_close(p);
		return rc;
	}
	ft__fd_own(p->wake_fd);
	struct ft__ctl_params cp = {.rank = pp->rank, .world_size = pp->world_size,
				    .job_id = p->job_id, .token = p->token,
				    .bind_host = pp->bind_host, .publish_host = pp->publish_host,
				    .links = pp->world_size + 4, .strangers = pp->world_size + 4,
				    .min_payload = UINT16_MAX, .who = "ckpt peer",
				    .dead_ms = pp->dead_ms};
	p->ctl_opened = true;
	if ((rc = ft__ctl_open(&p->ctl, &cp)) != 0 ||
	    (p->link = calloc((size_t)p->ctl.nlinks, sizeof(*p->link))) == NULL) {
		ft__ckpt_peer_close(p);
		return rc != 0 ? rc : -FT_ENOMEM;
	}
	/* its links carry whole checkpoints: room for a few megabytes in flight
	 * (fewer wake-ups of either side per megabyte) */
	p->ctl.sock_opts.buffer = (size_t)4 << 20;
	for (int i = 0; i < p->ctl.nlinks; i++)
		p->link[i].target = -1;
	snprintf(p->book[pp->rank], sizeof(p->book[pp->rank]), "%s", p->ctl.addr);
	if ((rc = pthread_create(&p->thread, NULL, ft__ckpt_peer_main, p)) != 0) {
		ft__ckpt_peer_close(p);
		return -FT_ENOMEM;
	}
	p->started = true;
	*out = p;
	return 0;
}

void ft__ckpt_peer_close(struct ft__ckpt_peer *p)
{
	if (p == NULL)
		return;
	if (p->started) {
		pk_lock(p);
		p->stop = true;
		pk_unlock(p);
		pk_wake(p);
		pthread_join(p->thread, NULL);
	}
	if (p->link != NULL)
		for (int i = 0; i < p->ctl.nlinks; i++)
			if (p->ctl.links[i].fd >= 0)
				ft__ckpt_peer_drop(p, i, NULL);
	if (p->ctl_opened)
		ft__ctl_close(&p->ctl);
	if (p->wake_fd >= 0)
		ft__fd_close(p->wake_fd);
	while (p->reqs != NULL) {
		struct pk_req *n = p->reqs->next;
		free(p->reqs);
		p->reqs = n;
	}
	for (int r = 0; p->mir != NULL && r < p->p.world_size; r++)
		ft__ckpt_peer_mirror_free(p->mir[r]);
	ft__ckpt_image_free(&p->fetch.img);
	free(p->fetch.carry);
	ft__big_free(p->bounce, p->bounce_len);
	free(p->mir);
	free((void *)p->lost);
	free(p->book);
	free(p->link);
	ft__wipe(p->token, sizeof(p->token));
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
	free(p);
}

const char *ft__ckpt_peer_addr(const struct ft__ckpt_peer *p)
{
	return p->ctl.addr;
}

void ft__ckpt_peer_set_addr(struct ft__ckpt_peer *p, int rank, const char *addr)
{
	if (rank < 0 || rank >= p->p.world_size || rank == p->p.rank)
		return;
	pk_lock(p);
	snprintf(p->book[rank], sizeof(p->book[rank]), "%s", addr);
	pk_unlock(p);
}

void ft__ckpt_peer_get_addr(struct ft__ckpt_peer *p, int rank, char *out, size_t cap)
{
	pk_lock(p);
	snprintf(out, cap, "%s", rank >= 0 && rank < p->p.world_size ? p->book[rank] : "");
	pk_unlock(p);
}

static int request(struct ft__ckpt_peer *p, int kind, const struct ft__ckpt_peer_round *r)
{
	struct pk_req *q = calloc(1, sizeof(*q));

	if (q == NULL)
		return -FT_ENOMEM;
	q->kind = kind;
	if (r != NULL)
		q->round = *r;
	pk_lock(p);
	if (kind == RQ_ROUND) {
		int at = -1;
		for (int i = 0; i < PK_PENDING && at < 0; i++)
			if (p->pend[i] == 0)
				at = i;
		if (at < 0) {
			pk_unlock(p);
			free(q);
			return -FT_ENOMEM;
		}
		p->pend[at] = r->round;
		p->fin[at] = false;
	}
	if (p->reqs_tail != NULL)
		p->reqs_tail->next = q;
	else
		p->reqs = q;
	p->reqs_tail = q;
	pk_unlock(p);
	pk_wake(p);
	return 0;
}

void ft__ckpt_peer_announce(struct ft__ckpt_peer *p)
{
	if (request(p, RQ_ANNOUNCE, NULL) != 0)
		ft__warn("ckpt peer: cannot tell the others where this service is");
}

int ft__ckpt_peer_post(struct ft__ckpt_peer *p, const struct ft__ckpt_peer_round *r)
{
	return request(p, RQ_ROUND, r);
}

uint64_t ft__ckpt_peer_sent(struct ft__ckpt_peer *p)
{
	return atomic_load(&p->sent);
}

uint64_t ft__ckpt_peer_lost(struct ft__ckpt_peer *p, int holder)
{
	return holder >= 0 && holder < p->p.world_size ? atomic_load(&p->lost[holder]) : 0;
}

void ft__ckpt_peer_wait_sent(struct ft__ckpt_peer *p, uint64_t round)
{
	pk_lock(p);
	while (atomic_load(&p->sent) < round && !p->stop && !p->dead)
		pthread_cond_wait(&p->cond, &p->lock);
	pk_unlock(p);
}

static int fetch_once(struct ft__ckpt_peer *p, int holder, int owner, int region, size_t first,
		      size_t nblocks, size_t block_bytes, void *dst, uint64_t nonce, int timeout_ms,
		      bool local_ok, struct ft__ckpt_image *img)
{
	struct timespec end;
	int rc;

	memset(img, 0, sizeof(*img));
	if (holder < 0 || holder >= p->p.world_size)
		return -FT_EIO;
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += timeout_ms / 1000;
	end.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (end.tv_nsec >= 1000000000L) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000L;
	}
	pk_lock(p);
	while (p->fetch.cancel && !p->dead)
		pthread_cond_wait(&p->cond, &p->lock); /* the last one's link is not gone yet */
	ft__ckpt_image_free(&p->fetch.img);
	free(p->fetch.carry);
	p->fetch = (struct pk_fetch){.seq = p->fetch.seq + 1, .active = true, .link = -1,
				     .holder = holder, .owner = owner, .region = region,
				     .first = first, .n = nblocks, .block_bytes = block_bytes,
				     .dst = dst, .nonce = nonce, .job_hash = p->job_hash,
				     .local_ok = local_ok};
	pk_unlock(p);
	pk_wake(p);
	pk_lock(p);
	while (!p->fetch.done && !p->stop && !p->dead)
		if (pthread_cond_timedwait(&p->cond, &p->lock, &end) == ETIMEDOUT && !p->fetch.done) {
			p->fetch.cancel = true;
			p->fetch.rc = -FT_EIO;
			p->fetch.done = true;
			p->fetch.active = false;
			ft__warn("ckpt peer: rank %d did not answer a fetch of rank %d's checkpoint "
				 "within %d ms", holder, owner, timeout_ms);
		}
	rc = p->fetch.done ? p->fetch.rc : -FT_EIO;
	if (rc == 0) {
		*img = p->fetch.img;
		memset(&p->fetch.img, 0, sizeof(p->fetch.img));
	}
	ft__ckpt_image_free(&p->fetch.img);
	free(p->fetch.carry);
	p->fetch.carry = NULL;
	p->fetch.dst = NULL; /* (done: nothing is written there any more) */
	bool cancel = p->fetch.cancel;
	pk_unlock(p);
	if (cancel)
		pk_wake(p);
	return rc;
}

int ft__ckpt_peer_fetch(struct ft__ckpt_peer *p, int holder, int owner, int region, size_t first,
			size_t nblocks, size_t block_bytes, void *dst, uint64_t nonce, int timeout_ms,
			struct ft__ckpt_image *img)
{
	int rc = fetch_once(p, holder, owner, region, first, nblocks, block_bytes, dst, nonce,
			    timeout_ms, true, img);

	/* the holder's memory could not be read in one copy here: over the link */
	if (rc == -FT_ENOSYS)
		rc = fetch_once(p, holder, owner, region, first, nblocks, block_bytes, dst, nonce,
				timeout_ms, false, img);
	return rc;
}

/* ---- who holds whom ---- */

/* The host part of rank r's service address (before its last ':'). */
static size_t host_len(const char *addr)
{
	const char *c = strrchr(addr, ':');
	return c != NULL ? (size_t)(c - addr) : strlen(addr);
}

static bool same_host(const char *a, const char *b)
{
	size_t n = host_len(a);
	return n == host_len(b) && strncmp(a, b, n) == 0;
}

static int by_rank(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

int ft__ckpt_peer_holder(struct ft__ckpt_peer *p, const int *members, int n, int ward)
{
	int *set = malloc(((size_t)n + 1) * sizeof(int)), m = 0, pos = 0, next = -1, size = 0;
	int holder = -1;

	if (set == NULL)
		return -1;
	/* the members and ward, in rank order */
	for (int i = 0; i < n; i++)
		if (members[i] != ward)
			set[m++] = members[i];
	set[m++] = ward;
	qsort(set, (size_t)m, sizeof(int), by_rank);
	pk_lock(p);
	/* ward's place on its host; the next host: the first member after
	 * ward (cyclically) on another host, and its host's members in order */
	for (int i = 0; i < m; i++)
		if (set[i] < ward && same_host(p->book[set[i]], p->book[ward]))
			pos++;
	int at = 0;
	while (set[at] != ward)
		at++;
	for (int k = 1; k < m && next < 0; k++) {
		int r = set[(at + k) % m];
		if (!same_host(p->book[r], p->book[ward]))
			next = r;
	}
	if (next < 0) {
		holder = m > 1 ? set[(at + 1) % m] : -1;
	} else {
		for (int i = 0; i < m; i++)
			if (same_host(p->book[set[i]], p->book[next]))
				size++;
		for (int i = 0, k = 0; i < m && holder < 0; i++)
			if (same_host(p->book[set[i]], p->book[next]) && k++ == pos % size)
				holder = set[i];
	}
	pk_unlock(p);
	free(set);
	return holder;
}
