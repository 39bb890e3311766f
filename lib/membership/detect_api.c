/* detect_api.c: the failure detector from the main thread's side: create, start, destroy, and what it knows (pending, failed, await the view, adopted, suspect). */
/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "detect.h"
#include "detect_thread.h"
#include "fdreg.h"
#include "internal.h"
#include "trace.h"
/* ---- the main thread's side ---- */

static int pthread_error(int err)
{
	return err == ENOMEM || err == EAGAIN ? -FT_ENOMEM : -FT_EIO;
}

int ft__det_create(const struct ft__det_params *p, struct ft__det **out)
{
	struct ft__det *d = calloc(1, sizeof(*d));
	struct ft__ctl_params cp = {.rank = p->rank, .world_size = p->world_size,
				    .job_id = p->job_id, .token = p->token,
				    .bind_host = p->bind_host, .publish_host = p->publish_host,
				    .dead_ms = p->detect_timeout_ms,
				    /* each way: both neighbours, a direct link with every
				     * member, links of views being left */
				    .links = 2 * p->world_size + FT__CTL_LINKS,
				    /* at a view change every member may open one at once */
				    .strangers = p->world_size + FT__CTL_LINKS,
				    .hello_ms = ft__ctl_hello_ms(p->detect_timeout_ms)};
	int rc;

	*out = NULL;
	if (d == NULL)
		return -FT_ENOMEM;
	d->p = *p;
	snprintf(d->job_id, sizeof(d->job_id), "%s", p->job_id);
	snprintf(d->token, sizeof(d->token), "%s", p->token);
	d->p.job_id = d->job_id;
	d->p.token = d->token;
	d->p.data_addr = d->data_addr;
	d->cmd[0] = d->cmd[1] = -1;
	d->wake_fd = -1;
	d->suspect = -1;
	d->reading = -1;
	d->left = d->right = d->left_ci = d->right_ci = -1;
	rc = pthread_mutex_init(&d->lock, NULL);
	if (rc != 0)
		goto fail_pthread;
	d->lock_made = true;
	if ((rc = ft__cond_init_monotonic(&d->cond)) != 0)
		goto fail_pthread;
	d->cond_made = true;
	d->failed = calloc((size_t)p->world_size, sizeof(bool));
	d->since = calloc((size_t)p->world_size, sizeof(uint32_t));
	d->auth = calloc((size_t)p->world_size, sizeof(uint8_t));
	if (d->failed == NULL || d->since == NULL || d->auth == NULL ||
	    pipe2(d->cmd, O_NONBLOCK | O_CLOEXEC) != 0) {
		rc = d->failed == NULL || d->since == NULL || d->auth == NULL ? -FT_ENOMEM
									     : ft__err_local(errno);
		ft__det_destroy(d, false);
		return rc;
	}
	ft__fd_own(d->cmd[0]);
	ft__fd_own(d->cmd[1]);
	if ((d->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
		rc = ft__err_local(errno);
		ft__det_destroy(d, false);
		return rc;
	}
	ft__fd_own(d->wake_fd);
	d->ctl_opened = true;
	rc = ft__ctl_open(&d->ctl, &cp);
	if (rc == 0 && (d->owe = calloc((size_t)d->ctl.nlinks, sizeof(bool))) == NULL)
		rc = -FT_ENOMEM;
	if (rc != 0) {
		ft__det_destroy(d, false);
		return rc;
	}
	*out = d;
	return 0;
fail_pthread:
	ft__error("detector: cannot make its lock: %s", strerror(rc));
	ft__det_destroy(d, false);
	return pthread_error(rc);
}

int ft__det_wake_fd(const struct ft__det *d)
{
	return d->wake_fd;
}

/* Under the lock: pending and the wake fd's readiness change together. */
void ft__det_raise(struct ft__det *d)
{
	uint64_t one = 1;

	if (!atomic_load(&d->pending) && write(d->wake_fd, &one, sizeof(one)) < 0) {
		/* an eventfd's counter cannot overflow from ones: cannot fail */
	}
	atomic_store(&d->pending, true);
}

const char *ft__det_addr(const struct ft__det *d)
{
	return d->ctl.addr;
}

int ft__det_start(struct ft__det *d, uint32_t gen, const int *members, int n)
{
	struct ft__member m;
	int rc;

	if (ft__mb_lookup(d->p.mb, gen, d->p.rank, &m) == 0)
		snprintf(d->data_addr, sizeof(d->data_addr), "%s", m.addr);
	d->members = malloc((size_t)n * sizeof(int));
	if (d->members == NULL)
		return -FT_ENOMEM;
	memcpy(d->members, members, (size_t)n * sizeof(int));
	d->size = n;
	d->gen = gen;
	for (int i = 0; i < n; i++)
		d->since[members[i]] = gen; /* a new incarnation starts at gen */
	ft__det_rewire(d);
	rc = pthread_create(&d->thread, NULL, ft__det_main, d);
	if (rc != 0)
		return pthread_error(rc);
	d->started = true;
	return 0;
}

void ft__det_destroy(struct ft__det *d, bool clean)
{
	if (d == NULL)
		return;
	if (d->started) {
		lock(d);
		d->stop = true;
		d->bye = clean;
		unlock(d);
		if (write(d->cmd[1], "s", 1) < 0) {
			/* the pipe is nonblocking and nearly empty: cannot fail here */
		}
		pthread_join(d->thread, NULL);
	}
	if (d->ctl_opened)
		ft__ctl_close(&d->ctl);
	if (d->cmd[0] >= 0)
		ft__fd_close(d->cmd[0]);
	if (d->cmd[1] >= 0)
		ft__fd_close(d->cmd[1]);
	if (d->wake_fd >= 0)
		ft__fd_close(d->wake_fd);
	if (d->lock_made)
		pthread_mutex_destroy(&d->lock);
	if (d->cond_made)
		pthread_cond_destroy(&d->cond);
	ft__view_free(&d->ready);
	free(d->members);
	free(d->failed);
	free(d->since);
	free(d->auth);
	free(d->owe);
	ft__wipe(d->token, sizeof(d->token));
	free(d);
}

bool ft__det_pending(struct ft__det *d)
{
	return atomic_load_explicit(&d->pending, memory_order_acquire);
}

bool ft__det_failed(struct ft__det *d, int orig)
{
	bool f;

	if (orig < 0 || orig >= d->p.world_size)
		return false;
	lock(d);
	f = d->failed[orig];
	unlock(d);
	return f;
}

int ft__det_have_result(struct ft__det *d, uint64_t seq)
{
	int rc = 0;

	lock(d);
	if (d->frozen)
		rc = -FT_EPEERFAILED;
	else
		d->next_op = seq + 1;
	unlock(d);
	return rc;
}

int ft__det_await(struct ft__det *d, uint32_t gen, int timeout_ms, struct ft__view *view)
{
	struct timespec ts;
	int rc = 0;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	lock(d);
	while (!d->excluded && d->fatal == 0 &&
	       (d->recovering || d->ready.members == NULL || d->ready.generation <= gen)) {
		if (pthread_cond_timedwait(&d->cond, &d->lock, &ts) != 0) {
			rc = -FT_ETIMEDOUT;
			break;
		}
	}
	if (d->excluded) {
		rc = -FT_EEXCLUDED;
	} else if (d->fatal != 0) {
		rc = d->fatal;
	} else if (rc == 0) {
		rc = ft__view_copy(&d->ready, view);
	}
	unlock(d);
	return rc;
}

void ft__det_adopted(struct ft__det *d, uint32_t gen, uint64_t next_op)
{
	lock(d);
	d->next_op = next_op;
	if (!d->recovering && !d->excluded && d->ready.generation == gen) {
		uint64_t v;
		d->frozen = false;
		atomic_store(&d->pending, false);
		if (read(d->wake_fd, &v, sizeof(v)) < 0) {
			/* cannot fail: ft__det_raise wrote when it set pending */
		}
	}
	unlock(d);
}

void ft__det_suspect(struct ft__det *d, int orig, bool sure)
{
	lock(d);
	d->suspect = orig;
	d->suspect_sure = sure;
	unlock(d);
	ft__det_command(d, 'x');
}

void ft__det_times(struct ft__det *d, uint64_t *known_ns, uint64_t *settled_ns)
{
	lock(d);
	*known_ns = d->known_ns;
	*settled_ns = d->settled_ns;
	unlock(d);
}
