/* engine.c: the ring engine: one attempt at an allreduce, barrier, broadcast, reduce-scatter or allgather on the current view. */
/* SPDX-License-Identifier: MIT */
#include <sched.h>
#include <string.h>

#include "comm.h"
#include "crc32c.h"
#include "engine.h"

/*
 * The schedule (which chunk and segment moves at each step) is in
 * schedule.h. Here is the step loop that runs it.
 *
 * Step 0's segments are queued at the start, straight from the input.
 * Frames cross every link in (step, segment) order, which is the order the
 * receiver posts them in, so each receive knows the exact header it
 * expects. Memory: reduce-scatter receives use pipeline_depth staging slots
 * of one segment each, allocated once per communicator; sends are queued
 * from the user's buffers (never copied); allgather receives land in place.
 * Receives posted ahead are capped (2 x depth) so a fast left neighbour
 * only fills socket buffers. Waiting happens inside the transport's
 * progress call, blocked in the kernel.
 *
 * Broadcast is a pipelined chain from the root around the ring; the last
 * rank answers the root with an empty frame, so the root too returns only
 * when everyone has the data, and a disagreement reaches it as an error.
 * A barrier is an allreduce of nothing (2(n-1) empty frames per link).
 * Reduce-scatter runs the allreduce's steps 0 .. n-2 only, allgather its
 * steps n-1 .. 2n-3 only (frames keep those step numbers), both with the
 * chunks shifted one ring position (schedule.h); an allgather's first
 * sends come from the output buffer, which holds this rank's block.
 *
 * Commit steps (when the policy asks for them) are n-1 empty frames around
 * the ring after the data: a rank that receives the last one knows every
 * rank holds the whole result.
 *
 * The policy's hooks (engine.h) run where a frame is sent, where one is
 * received, where an in-place input is first overwritten and where the
 * whole result is held.
 */

/* The send link broke with frames still to go: the cause (an abort frame or
 * the end of the stream) follows on the receive link, within a grace period. */
static void send_broken(struct ft__coll *co, int err)
{
	if (co->send_err == 0) {
		co->send_err = err;
		co->grace_deadline = ft__now_ms() + 2000;
	}
}

static int post_send(struct ft__coll *co, uint32_t g, uint32_t k, const char *base)
{
	struct ft_comm *c = co->c;
	struct ft__frame h = co->tmpl;
	size_t off, len;
	int rc;

	if (co->send_err != 0)
		return 0; /* the receive side will tell why the ring broke */
	ft__frame_range(&co->s, g, ft__send_chunk(&co->s, g), k, &off, &len);
	h.step = g;
	h.seg = k;
	h.offset = off;
	h.length = len;
	if (c->cfg.crc) {
		h.flags |= FT__FRAME_F_CRC;
		h.crc = ft__crc32c(0, base + off, len);
	}
	rc = c->tp_ops->post_send(c->send_link, &h, base + off, NULL);
	if (rc != 0) {
		if (ft__err_shortage(rc))
			return rc;
		send_broken(co, rc);
		return 0;
	}
	co->send_posted++;
	c->stats.bytes_sent += len;
	if (co->hooks->frame_sent != NULL)
		return co->hooks->frame_sent(co, &h, base + off);
	return 0;
}

/* Posts receives ahead, as far as slots and the cap allow. */
static int post_recvs(struct ft__coll *co)
{
	struct ft_comm *c = co->c;
	unsigned cap = 2u * (unsigned)c->cfg.pipeline_depth;

	if (cap > FT__ARRAY_SIZE(co->fifo))
		cap = FT__ARRAY_SIZE(co->fifo);
	while (co->recv_posted < co->recv_total && co->fifo_len < cap) {
		int chunk = ft__recv_chunk(&co->s, co->rg);
		bool staged = co->kind != FT__COLL_BROADCAST && (int)co->rg < co->s.n - 1;
		struct ft__frame h = co->tmpl;
		size_t off, len;
		char *buf;
		int slot = -1, rc;

		ft__frame_range(&co->s, co->rg, chunk, co->rk, &off, &len);
		if (staged) {
			if (co->nfree == 0)
				break;
			slot = co->free_slots[--co->nfree];
			buf = (char *)c->slots + (size_t)slot * c->slot_bytes;
		} else {
			buf = co->dst + off;
		}
		h.step = co->rg;
		h.seg = co->rk;
		h.offset = off;
		h.length = len;
		rc = c->tp_ops->post_recv(c->recv_link, &h, buf, NULL);
		if (rc != 0)
			return rc;
		co->fifo[(co->fifo_head + co->fifo_len++) % FT__ARRAY_SIZE(co->fifo)] =
			(struct ft__recv_entry){co->rg, co->rk, slot};
		co->recv_posted++;
		if (++co->rk == ft__step_nseg(&co->s, co->rg, chunk)) {
			co->rk = 0;
			/* a broadcast's non-root ranks receive no answer (step 1) */
			co->rg += co->kind == FT__COLL_BROADCAST && co->rg == 0 ? 2 : 1;
		}
	}
	return 0;
}

/* This rank now holds the whole result: the policy claims it; with commit
 * steps, the first of them goes out. */
static int data_complete(struct ft__coll *co)
{
	int rc;

	if (co->hooks->result_held != NULL && (rc = co->hooks->result_held(co)) != 0)
		return rc;
	co->claimed = true;
	if (co->last_step > co->s.data_last &&
	    (co->kind != FT__COLL_BROADCAST || co->root_pos == 0))
		return post_send(co, co->s.data_last + 1, 0, co->dst);
	return 0;
}

static int on_recv_broadcast(struct ft__coll *co, const struct ft__recv_entry *e)
{
	size_t off, len;
	int rc = 0;

	if (e->g == 0) {
		ft__seg_range(&co->s, 0, e->k, &off, &len);
		co->c->stats.bytes_received += len;
		if (co->hooks->frame_received != NULL) {
			struct ft__frame h = co->tmpl;
			h.step = 0;
			h.seg = e->k;
			h.offset = off;
			h.length = len;
			if ((rc = co->hooks->frame_received(co, &h, co->dst + off)) != 0)
				return rc;
		}
		if (co->root_pos != co->bcast_last)
			rc = post_send(co, 0, e->k, co->dst);
		if (rc == 0 && ++co->data_done == co->data_total) {
			rc = data_complete(co);
			/* the last rank of the whole ring answers the root */
			if (rc == 0 && co->root_pos == co->s.n - 1)
				rc = post_send(co, 1, 0, co->dst);
		}
		return rc;
	}
	if (e->g == 1) /* the root hears that every rank has the data */
		return data_complete(co);
	/* commit step: pass it on to the last rank */
	return co->root_pos != co->bcast_last ? post_send(co, 2, 0, co->dst) : 0;
}

static int on_recv(struct ft__coll *co)
{
	struct ft_comm *c = co->c;
	struct ft__recv_entry e = co->fifo[co->fifo_head];
	size_t off, len;
	int rc = 0;

	co->fifo_head = (co->fifo_head + 1) % FT__ARRAY_SIZE(co->fifo);
	co->fifo_len--;
	co->recv_done++;
	if (co->kind == FT__COLL_BROADCAST)
		return on_recv_broadcast(co, &e);
	if (e.g > co->s.data_last)
		return e.g < co->last_step ? post_send(co, e.g + 1, 0, co->dst) : 0;
	ft__seg_range(&co->s, ft__recv_chunk(&co->s, e.g), e.k, &off, &len);
	c->stats.bytes_received += len;
	if (co->hooks->frame_received != NULL) {
		struct ft__frame h = co->tmpl;
		const char *at = e.slot >= 0 ? (const char *)c->slots + (size_t)e.slot * c->slot_bytes
					     : co->dst + off;
		h.step = e.g;
		h.seg = e.k;
		h.offset = off;
		h.length = len;
		if ((rc = co->hooks->frame_received(co, &h, at)) != 0)
			return rc;
	}
	if (e.slot >= 0) {
		const char *slot = (const char *)c->slots + (size_t)e.slot * c->slot_bytes;
		size_t n = len / co->s.es;
		uint64_t t0 = ft__now_ns();
		struct ft__sum *sum = NULL;
		void *save = co->hooks->input_save_at != NULL
				     ? co->hooks->input_save_at(co, off, len, &sum)
				     : NULL;
		const char *in = co->in_place ? co->dst + off : co->src + off;
		if (save != NULL && sum != NULL && co->combine_save_sum != NULL) {
			co->combine_save_sum(co->dst + off, in, slot, save, n, sum);
		} else if (co->in_place) {
			if (save != NULL) {
				if (sum != NULL)
					ft__sum_update(sum, co->dst + off, len);
				co->accum_save(co->dst + off, slot, save, n);
			} else {
				co->accum(co->dst + off, slot, n);
			}
		} else {
			/* out of place the input stays; a policy that logs it copies it */
			if (save != NULL)
				ft__copy_stream_sum(save, co->src + off, len, sum);
			co->combine(co->dst + off, co->src + off, slot, n);
		}
		co->staged_done++;
		if (co->op == FT_AVG && (int)e.g == co->s.n - 2)
			ft__reduce_scale(co->dst + off, n, (enum ft_dtype)co->tmpl.dtype,
					 (size_t)co->s.n);
		c->stats.reduce_ms += (double)(ft__now_ns() - t0) / 1e6;
		co->free_slots[co->nfree++] = e.slot;
	}
	if (e.g < co->s.data_last)
		rc = post_send(co, e.g + 1, e.k, co->dst);
	if (rc == 0 && ++co->data_done == co->data_total)
		rc = data_complete(co);
	return rc;
}

static bool coll_done(const struct ft__coll *co)
{
	return co->recv_done == co->recv_total && co->send_done == co->send_posted &&
	       co->send_err == 0;
}

/*
 * Waits for transport events. When every local rank has a core of its own
 * (c->spin_ns > 0), polls for a short while before sleeping in the kernel:
 * a wake-up costs more than a small message's whole transfer. With more
 * ranks than cores it never spins, so waiting ranks leave the CPU to those
 * with work; but a small op's waits (yield_ns) yield and poll for a few
 * tens of microseconds first, the CPU going to a peer with work, which
 * then answers with no wake-up to pay (a large op's waits do not: that
 * polling took CPU from its peers' copies and reductions, 4 ranks 64 MiB
 * 1.2-1.35x slower; docs/performance.md).
 */
int ft__engine_wait(struct ft_comm *c, int timeout, struct ft__tp_event *ev, uint64_t yield_ns)
{
	int nev = c->tp_ops->progress(c->tp, 0, ev, FT__EV_MAX);
	uint64_t budget = c->spin_ns > 0 ? c->spin_ns : yield_ns;

	if (nev != 0 || timeout == 0)
		return nev;
	if (budget > 0) {
		uint64_t end = ft__now_ns() + budget;
		uint64_t t0 = ft__now_ns(), now = t0;
		do {
			/* After a first stretch of plain polling, yield between
			 * polls so that a peer sharing this core (a busy host) is
			 * not kept waiting by our poll. */
			if (c->spin_ns == 0 || now - t0 > c->spin_ns / 16)
				sched_yield();
			nev = c->tp_ops->progress(c->tp, 0, ev, FT__EV_MAX);
			if (nev != 0)
				return nev;
			now = ft__now_ns();
		} while (now < end);
	}
	return c->tp_ops->progress(c->tp, timeout, ev, FT__EV_MAX);
}

void ft__op_wait_init(struct ft_comm *c, struct ft__op_wait *w)
{
	/* With a detector, wake now and then to look at its flag: a hung peer
	 * breaks no link. */
	w->tick = c->det != NULL ? (c->cfg.heartbeat_ms < 50 ? c->cfg.heartbeat_ms : 50) : -1;
	w->idle_deadline = c->cfg.op_timeout_ms > 0 ? ft__now_ms() + c->cfg.op_timeout_ms : 0;
}

int ft__op_wait(struct ft_comm *c, struct ft__op_wait *w, uint64_t op_seq, int64_t grace_deadline,
		struct ft__tp_event *ev, uint64_t yield_ns)
{
	int timeout = w->tick, nev;

	if (w->idle_deadline && (timeout < 0 || ft__ms_left(w->idle_deadline) < timeout))
		timeout = ft__ms_left(w->idle_deadline);
	if (grace_deadline && (timeout < 0 || ft__ms_left(grace_deadline) < timeout))
		timeout = ft__ms_left(grace_deadline);
	uint64_t t0 = ft__now_ns();
	nev = ft__engine_wait(c, timeout, ev, yield_ns);
	c->stats.wait_ms += (double)(ft__now_ns() - t0) / 1e6;
	if (nev < 0)
		return nev;
	if (c->det != NULL && ft__det_pending(c->det))
		return -FT_EABORTED;
	if (nev == 0 && w->idle_deadline && ft__ms_left(w->idle_deadline) == 0 &&
	    (!grace_deadline || ft__ms_left(grace_deadline) > 0)) {
		ft__error("collective %llu made no progress for %d ms", (unsigned long long)op_seq,
			  c->cfg.op_timeout_ms);
		return -FT_ETIMEDOUT;
	}
	/* only progress restarts the op timeout, not a link's end */
	for (int i = 0; i < nev && w->idle_deadline; i++)
		if (ev[i].type != FT__TP_LINK_ERROR)
			w->idle_deadline = ft__now_ms() + c->cfg.op_timeout_ms;
	return nev;
}

/* Runs a collective whose first sends are queued; 0 or the error it failed with. */
static int coll_run(struct ft__coll *co)
{
	struct ft_comm *c = co->c;
	struct ft__tp_event ev[FT__EV_MAX];
	struct ft__op_wait w;
	int rc;

	ft__op_wait_init(c, &w);
	while (!coll_done(co)) {
		int nev;
		if ((rc = post_recvs(co)) != 0)
			return rc;
		nev = ft__op_wait(c, &w, co->tmpl.op_seq, co->send_err ? co->grace_deadline : 0, ev,
				  0);
		if (nev < 0)
			return nev;
		if (nev == 0 && co->send_err && ft__ms_left(co->grace_deadline) == 0) {
			co->fail_link = 2;
			return co->send_err;
		}
		for (int i = 0; i < nev; i++) {
			switch (ev[i].type) {
			case FT__TP_SEND_DONE:
				co->send_done++;
				break;
			case FT__TP_RECV_DONE:
				co->fail_link = 1;
				if (ev[i].status != 0)
					return ev[i].status;
				if ((rc = on_recv(co)) != 0)
					return rc;
				co->fail_link = 0;
				break;
			case FT__TP_LINK_ERROR:
				/* A link that broke after carrying all this collective's
				 * frames (a neighbour finished and left) fails the next
				 * collective, not this one: the transport keeps the error. */
				if (ev[i].link == c->recv_link && co->recv_done < co->recv_total) {
					co->fail_link = 1;
					return ev[i].status;
				}
				if (ev[i].link == c->send_link && co->send_done < co->send_posted)
					send_broken(co, ev[i].status);
				break;
			default:
				break;
			}
		}
	}
	return 0;
}

static const struct ft__hooks no_hooks;

static int coll_setup(struct ft__coll *co, struct ft_comm *c, const struct ft__call *k,
		      const struct ft__attempt *a, bool bcast)
{
	memset(co, 0, sizeof(*co));
	co->c = c;
	co->kind = k->kind;
	co->hooks = a->hooks != NULL ? a->hooks : &no_hooks;
	co->s.n = c->size;
	co->s.r = c->rank;
	co->s.bcast = bcast;
	co->s.count = k->count;
	co->s.es = bcast ? 1 : k->es;
	co->s.seg_elems = c->cfg.segment_bytes / co->s.es;
	co->dst = k->dst;
	co->tmpl.magic = FT__FRAME_MAGIC;
	co->tmpl.type = FT__FRAME_DATA;
	co->tmpl.kind = (uint8_t)k->kind;
	co->tmpl.dtype = (uint8_t)(bcast ? FT_UINT8 : k->dtype);
	co->tmpl.op = (uint8_t)(bcast ? 0 : k->op);
	co->tmpl.generation = c->generation;
	co->tmpl.op_seq = a->op_seq;
	co->tmpl.count = k->count;
	co->tmpl.root = bcast ? k->root : -1;
	co->nfree = c->cfg.pipeline_depth;
	for (int i = 0; i < co->nfree; i++)
		co->free_slots[i] = i;
	if (co->s.seg_elems == 0)
		return -FT_EINVAL;
	if (!bcast && (ft__reduce_lookup(k->dtype, k->op, &co->combine, &co->accum) != 0 ||
		       (co->accum_save = ft__reduce_accum_save(k->dtype, k->op)) == NULL))
		return -FT_EINVAL;
	if (!bcast)
		co->combine_save_sum = ft__reduce_combine_save_sum(k->dtype, k->op);
	return 0;
}

int ft__engine_setup(struct ft__coll *co, struct ft_comm *c, const struct ft__call *k,
		     const struct ft__attempt *a)
{
	return coll_setup(co, c, k, a, k->kind == FT__COLL_BROADCAST);
}

int ft__engine_allreduce(struct ft_comm *c, const struct ft__call *k, const struct ft__attempt *a,
			 struct ft__coll *co)
{
	bool rs = k->kind == FT__COLL_REDUCE_SCATTER, ag = k->kind == FT__COLL_ALLGATHER;
	uint32_t g0 = 0; /* first step */
	int rc = coll_setup(co, c, k, a, false);

	if (rc != 0)
		return rc;
	co->in_place = k->in_place;
	co->src = k->in_place ? k->dst : k->src;
	co->op = k->op;
	if (c->size == 1) {
		if (!k->in_place && k->count > 0)
			memcpy(k->dst, k->src, k->count * k->es);
		return data_complete(co);
	}
	co->s.data_last = (uint32_t)(2 * co->s.n - 3);
	if (rs || ag) {
		/* one half of the ring, from one position back, so that ring
		 * position r's block is chunk r (schedule.h) */
		co->s.r = ft__mod(c->rank - 1, c->size);
		if (rs)
			co->s.data_last = (uint32_t)(co->s.n - 2);
		else
			co->rg = g0 = (uint32_t)(co->s.n - 1);
	}
	co->last_step = co->s.data_last + (a->commit ? (uint32_t)(co->s.n - 1) : 0);
	for (uint32_t g = g0; g <= co->s.data_last; g++)
		co->data_total += ft__chunk_nseg(&co->s, ft__recv_chunk(&co->s, g));
	co->recv_total = co->data_total + (co->last_step - co->s.data_last);
	if (co->hooks->input_save_at != NULL && !rs && !ag) {
		/* chunk r is first overwritten by an allgather receive, posted
		 * ahead of time: its input is saved before anything is posted */
		int mine = ft__send_chunk(&co->s, 0);
		size_t lo = ft__chunk_lo(&co->s, mine) * k->es;
		size_t len = ft__chunk_len(&co->s, mine) * k->es;
		struct ft__sum *sum = NULL;
		void *save = len > 0 ? co->hooks->input_save_at(co, lo, len, &sum) : NULL;
		if (save != NULL)
			ft__copy_stream_sum(save, co->src + lo, len, sum);
		co->mine_saved = save != NULL || len == 0;
	}
	for (uint32_t s = 0; rc == 0 && s < ft__chunk_nseg(&co->s, ft__send_chunk(&co->s, g0)); s++)
		rc = post_send(co, g0, s, ag ? co->dst : co->src);
	return rc == 0 ? coll_run(co) : rc;
}

int ft__engine_broadcast(struct ft_comm *c, const struct ft__call *k, const struct ft__attempt *a,
			 struct ft__coll *co)
{
	int root = -1, rc;

	for (int i = 0; i < c->size; i++)
		if (c->members[i] == k->root)
			root = i;
	if (root < 0)
		return -FT_EROOTFAILED;
	if ((rc = coll_setup(co, c, k, a, true)) != 0)
		return rc;
	co->src = k->dst;
	if (c->size == 1)
		return data_complete(co);
	co->root_pos = ft__mod(c->rank - root, c->size);
	co->bcast_last = k->span > 0 && k->span < c->size - 1 ? k->span : c->size - 1;
	if (co->root_pos > co->bcast_last || (co->bcast_last < c->size - 1 && a->commit))
		return -FT_EINVAL; /* not a rank it reaches; a chain has no commit steps */
	co->s.data_last = 1;
	co->last_step = a->commit ? 2 : 1;
	if (co->root_pos == 0) {
		/* The root sends everything and waits for the last rank's empty
		 * frame; in a chain, only for its frames to be out. */
		co->rg = 1;
		co->recv_total = co->bcast_last == c->size - 1 ? 1 : 0;
		for (uint32_t s = 0; rc == 0 && s < ft__chunk_nseg(&co->s, 0); s++)
			rc = post_send(co, 0, s, k->dst);
		if (rc == 0 && co->recv_total == 0)
			rc = data_complete(co);
	} else {
		co->data_total = ft__chunk_nseg(&co->s, 0);
		co->recv_total = co->data_total + (co->last_step > co->s.data_last ? 1 : 0);
	}
	return rc == 0 ? coll_run(co) : rc;
}
