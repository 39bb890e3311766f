/* membership.c: picks a membership backend, checks what it returns, and waits for a view to settle. */
/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <time.h>

#include "internal.h"
#include "membership.h"

static const struct ft__mb_ops *const backends[] = {&ft__mb_file_ops, &ft__mb_inband_ops};

int ft__mb_open(struct ft__mb *mb, const struct ft__mb_params *p)
{
	const char *name = p->backend != NULL ? p->backend : "file";
	const struct ft__mb_ops *ops = NULL;
	int rc;

	memset(mb, 0, sizeof(*mb));
	if (p->world_size < 1 || p->rank < 0 || p->rank >= p->world_size)
		return -FT_EINVAL;
	for (size_t i = 0; i < FT__ARRAY_SIZE(backends); i++)
		if (strcmp(backends[i]->name, name) == 0)
			ops = backends[i];
	if (ops == NULL) {
		ft__error("membership: no backend named '%s'", name);
		return -FT_ENOSYS;
	}
	mb->rank = p->rank;
	mb->world_size = p->world_size;
	rc = ops->open(mb, p);
	if (rc != 0) {
		ops->close(mb, 0, false);
		memset(mb, 0, sizeof(*mb));
		return rc;
	}
	mb->ops = ops;
	return 0;
}

int ft__mb_publish(struct ft__mb *mb, uint32_t gen, const struct ft__member *m)
{
	return mb->ops->publish(mb, gen, m);
}

int ft__view_check(const struct ft__view *v, int world_size)
{
	if (v->members == NULL || v->size < 1 || v->size > world_size)
		return -FT_ECORRUPT;
	for (int i = 0; i < v->size; i++)
		if (v->members[i] < 0 || v->members[i] >= world_size ||
		    (i > 0 && v->members[i] <= v->members[i - 1]))
			return -FT_ECORRUPT;
	return 0;
}

int ft__mb_try_settle(struct ft__mb *mb, uint32_t gen, const int *cand, int ncand, bool force,
		      struct ft__view *view)
{
	return ft__mb_try_settle_back(mb, gen, cand, ncand, NULL, 0, force, view);
}

int ft__mb_resume(struct ft__mb *mb, struct ft__view *latest)
{
	int rc = mb->ops->resume(mb, latest);

	if (rc == 1 && ft__view_check(latest, mb->world_size) != 0) {
		ft__view_free(latest);
		return -FT_ECORRUPT;
	}
	return rc;
}

int ft__mb_try_settle_back(struct ft__mb *mb, uint32_t gen, const int *cand, int ncand,
			   const int *back, int nback, bool force, struct ft__view *view)
{
	int rc = mb->ops->try_settle(mb, gen, cand, ncand, back, nback, force, view);

	/* The backend validates what it reads; this makes the contract hold
	 * whatever the backend, since callers index arrays with the members.
	 * A newcomer's look (no candidates) may end at a later generation: the
	 * one that took it, or that the job went on with. */
	if (rc == 1 && ((ncand > 0 ? view->generation != gen : view->generation < gen) ||
			ft__view_check(view, mb->world_size) != 0)) {
		ft__error("membership: the view of generation %u breaks the view contract", gen);
		ft__view_free(view);
		return -FT_ECORRUPT;
	}
	return rc;
}

/* Sleeps (backing off), woken early by the backend's messages if it has any. */
static void backoff_sleep(struct ft__mb *mb, int *us)
{
	int cap = ft__mb_max_pollfds(mb), n = 0;
	struct pollfd *pfd = cap > 0 ? calloc((size_t)cap, sizeof(*pfd)) : NULL;

	if (pfd != NULL)
		n = ft__mb_pollfds(mb, pfd, cap);
	if (n > 0) {
		(void)poll(pfd, (nfds_t)n, *us / 1000 > 0 ? *us / 1000 : 1);
	} else {
		struct timespec ts = {0, (long)*us * 1000};
		nanosleep(&ts, NULL);
	}
	free(pfd);
	if (*us < 20000)
		*us *= 2;
}

int ft__mb_settle(struct ft__mb *mb, uint32_t gen, const int *cand, int ncand, int timeout_ms,
		  struct ft__view *view)
{
	int64_t deadline = ft__now_ms() + timeout_ms;
	int sleep_us = 500, rc;

	for (;;) {
		rc = ft__mb_try_settle(mb, gen, cand, ncand, false, view);
		if (rc == 1)
			return 0;
		if (rc < 0) {
			ft__error("membership: cannot settle generation %u %s: %s", gen, mb->where,
				  ft_strerror(rc));
			return rc;
		}
		if (ft__now_ms() >= deadline)
			break;
		backoff_sleep(mb, &sleep_us);
	}
	if (ncand > 0 && mb->rank == cand[0]) {
		for (int i = 0; i < ncand; i++) {
			struct ft__member m;
			if (ft__mb_lookup(mb, gen, cand[i], &m) != 0)
				ft__error("membership: rank %d never registered %s (generation %u) "
					  "within the connect timeout (%d ms)",
					  cand[i], mb->where, gen, timeout_ms);
		}
	} else if (ncand > 0) {
		ft__error("membership: no view for generation %u %s (coordinator rank %d) within "
			  "the connect timeout (%d ms)", gen, mb->where, cand[0], timeout_ms);
	}
	return -FT_ETIMEDOUT;
}

int ft__mb_lookup(struct ft__mb *mb, uint32_t gen, int orig, struct ft__member *m)
{
	if (orig < 0 || orig >= mb->world_size)
		return -FT_EINVAL;
	return mb->ops->lookup(mb, gen, orig, m);
}

int ft__mb_depart(struct ft__mb *mb, uint64_t next_op)
{
	return mb->ops->depart(mb, next_op);
}

int ft__mb_max_pollfds(struct ft__mb *mb)
{
	return mb->ops != NULL && mb->ops->max_pollfds != NULL ? mb->ops->max_pollfds(mb) : 0;
}

int ft__mb_pollfds(struct ft__mb *mb, struct pollfd *pfd, int cap)
{
	return mb->ops != NULL && mb->ops->pollfds != NULL ? mb->ops->pollfds(mb, pfd, cap) : 0;
}

uint32_t ft__mb_pump(struct ft__mb *mb)
{
	return mb->ops != NULL && mb->ops->pump != NULL ? mb->ops->pump(mb) : 0;
}

void ft__mb_certain(struct ft__mb *mb, int orig)
{
	if (mb->ops != NULL && mb->ops->certain != NULL && orig >= 0 && orig < mb->world_size)
		mb->ops->certain(mb, orig);
}

void ft__mb_close(struct ft__mb *mb, uint32_t gen, bool remove_view)
{
	if (mb->ops == NULL)
		return;
	mb->ops->close(mb, gen, remove_view);
	memset(mb, 0, sizeof(*mb));
}

int ft__view_copy(const struct ft__view *v, struct ft__view *out)
{
	*out = *v;
	out->members = malloc((size_t)v->size * sizeof(int));
	if (out->members == NULL)
		return -FT_ENOMEM;
	memcpy(out->members, v->members, (size_t)v->size * sizeof(int));
	return 0;
}

void ft__view_free(struct ft__view *v)
{
	free(v->members);
	v->members = NULL;
	v->size = 0;
}
