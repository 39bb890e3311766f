/* rdouble.c: recursive doubling: allreduce and barrier in log2(n) exchanges, where the ring's 2(n-1) steps cost more than its bandwidth saves. */
/* SPDX-License-Identifier: MIT */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "crc32c.h"
#include "engine.h"

/*
 * The pattern, on the n dense ranks of the current view, this one at r.
 * pof2 is the largest power of two not above n, rem = n - pof2, and
 * k = log2(pof2). Frames carry their step g:
 *
 *   g = 0 (the fold): the first 2 rem ranks pair up; even r sends its
 *     input to r+1, which combines the two (r-1's first) and stands for
 *     both; even r then only waits for the result;
 *   g = 1 .. k: the pof2 remaining ranks, at virtual ranks v (r/2 for
 *     the odd ranks below 2 rem, r - rem above), swap their partials with
 *     v xor 2^(g-1), and each computes lower v's partial op higher v's:
 *     the same operands in the same order on both sides, so the same bits
 *     (no commutativity is assumed, not even of a float sum's NaN);
 *   g = k+1 (the unfold): odd r below 2 rem sends the result to r-1.
 *
 * Each rank sends one frame per step at most, to one peer, and every
 * directed pair of ranks carries one frame of the op at most, so every
 * receive is posted at the start, on its own link and buffer: a peer may
 * run ahead by any number of steps, and a frame that disagrees is judged
 * at once, whichever step it belongs to.
 *
 * The ring's neighbours as judges. Ranks called with different arguments
 * (or FTCC_ALGORITHM) may choose different algorithms, and a rank on the
 * ring waits on its left neighbour alone, which may never send to it here.
 * So a rank whose right neighbour gets no frame of this op from it sends
 * that neighbour an empty probe (step k+2) at the start, and every rank
 * posts the receive of what its left neighbour sends it (a probe or a
 * step's frame). A rank on the ring sends its right neighbour a frame at
 * once; when that neighbour runs this algorithm the frame meets a posted
 * receive it disagrees with (algorithm, or count), FT_EMISMATCH; its abort
 * frames reach every link it holds, and each rank that fails passes them
 * on to all of its own, so every rank returns the error, none hangs.
 *
 * Failures. The input is never overwritten before the result is whole
 * (partials live in c->rd_buf), and the policy's input_save_at saves an
 * in-place input whole at the start (a memcpy of a small buffer) for a
 * rerun after the result was claimed (a shrink to one rank). A rank
 * claims the result (result_held) once it holds it, as on the ring; the
 * shrink policy's holders hand it over (recover.c).
 */

/* The step's peer this rank sends to (send) or receives from, or -1. */
static int step_peer(int n, int r, uint32_t g, bool send)
{
	int pof2 = 1, k = 0, rem, v;

	while (pof2 * 2 <= n) {
		pof2 *= 2;
		k++;
	}
	rem = n - pof2;
	if (g == 0 || g == (uint32_t)k + 1) {
		bool fold_out = g != 0;
		if (r >= 2 * rem)
			return -1;
		/* fold: even sends, odd receives; unfold the other way round */
		if ((r % 2 == 0) == (send != fold_out))
			return r % 2 == 0 ? r + 1 : r - 1;
		return -1;
	}
	if (g > (uint32_t)k || (r < 2 * rem && r % 2 == 0))
		return -1;
	v = r < 2 * rem ? r / 2 : r - rem;
	v ^= 1 << (g - 1);
	return v < rem ? 2 * v + 1 : v + rem;
}

static uint32_t steps_of(int n)
{
	uint32_t k = 0;

	while ((2 << k) <= n)
		k++;
	return k; /* exchanges; steps 0 .. k+1, the probe k+2 */
}

/* Whether dense rank r sends dense rank p a frame of the op. */
static bool sends_to(int n, int r, int p)
{
	for (uint32_t g = 0; g <= steps_of(n) + 1; g++)
		if (step_peer(n, r, g, true) == p)
			return true;
	return false;
}

bool ft__rd_chosen(const struct ft_comm *c, const struct ft__call *k)
{
	size_t bytes = k->count * k->es;

	if ((k->kind != FT__COLL_ALLREDUCE && k->kind != FT__COLL_BARRIER) || k->blk != NULL ||
	    c->size < 2 || c->tp_env.algorithm == FT__TP_ALGO_RING || c->cfg.policy == FT_POLICY_REJOIN)
		return false;
	if (c->size > 2 && c->mesh_to == NULL)
		return false;
	/* no commit steps here: a shrink's survivors of three or more agree on
	 * a larger op only through the ring's (policy_shrink.c) */
	if (bytes > c->cfg.segment_bytes || (c->det != NULL && c->size >= 3 && !ft__small_op(k)))
		return false;
	/* each rank sends log2(n) whole copies against the ring's two: it pays
	 * while that volume is small (docs/performance.md, algorithms) */
	return c->tp_env.algorithm == FT__TP_ALGO_RD ||
	       (bytes <= FT__RD_AUTO_MAX && bytes * steps_of(c->size) <= FT__RD_AUTO_VOLUME);
}


void ft__rd_peers(const struct ft_comm *c, int *to, int *nto, int *from, int *nfrom)
{
	uint32_t k = steps_of(c->size);

	for (uint32_t g = 0; g <= k + 1; g++) {
		int p = step_peer(c->size, c->rank, g, true), q = step_peer(c->size, c->rank, g, false);
		if (p >= 0)
			to[(*nto)++] = c->members[p];
		if (q >= 0)
			from[(*nfrom)++] = c->members[q];
	}
}

struct rd {
	struct ft__coll *co;
	size_t bytes, slot;
	uint32_t k;              /* exchanges: steps 0 .. k+1, the probe k+2 */
	uint32_t g;              /* the step to run next */
	bool g_sent;            /* its frame is out */
	int to[FT__RD_STEPS], from[FT__RD_STEPS];     /* dense peers by step, -1 none */
	bool got[FT__RD_STEPS];  /* the step's frame is in */
	bool out[FT__RD_STEPS];  /* the step's frame of ours left the process */
	unsigned sends, sent;
	const char *cur;        /* this rank's partial (first its input) */
	int next;               /* partial slot computed into next: 0 or 1 */
	bool held;              /* the result is in the caller's buffer, claimed */
	int send_err;           /* a link to a peer broke with a frame of ours to go ... */
	int send_peer;
	int64_t grace_deadline; /* ... its cause (an abort frame) may still come until then */
};

/* A link to peer broke before our frame went out: the cause, an abort frame
 * a peer sent (a mismatch, say, said as such on every rank), may follow on
 * a link from it, so the op waits for it a while (as the ring does). */
static void send_broken(struct rd *x, int peer, int err)
{
	if (x->send_err == 0) {
		x->send_err = err;
		x->send_peer = peer;
		x->grace_deadline = ft__now_ms() + 2000;
	}
}

static char *slot_at(const struct rd *x, uint32_t i)
{
	return (char *)x->co->c->rd_buf + (size_t)i * x->slot;
}

/* The receive buffer of step g (slots 2 .. k+4). */
static char *recv_buf(const struct rd *x, uint32_t g)
{
	return slot_at(x, 2 + g);
}

static struct ft__frame frame_of(const struct rd *x, uint32_t g)
{
	struct ft__frame h = x->co->tmpl;

	h.step = g;
	h.length = g == x->k + 2 ? 0 : x->bytes;
	return h;
}

/* More ranks than cores: how long a wait yields and polls before it sleeps
 * (engine.c; 4 ranks on 2 cores, 4 KiB: 50-67 us against 81-95 sleeping
 * at once). FTCC_SPIN_US set: that instead. */
#define RD_YIELD_NS 50000u

/* A send's completion context: SEND_CTX + its step (a receive's: step + 1). */
#define SEND_CTX 4096u

static int send_step(struct rd *x, uint32_t g, int to, const void *payload)
{
	struct ft_comm *c = x->co->c;
	struct ft__frame h = frame_of(x, g);
	int peer = c->members[to], rc;

	if (c->cfg.crc && h.length > 0) {
		h.flags |= FT__FRAME_F_CRC;
		h.crc = ft__crc32c(0, payload, h.length);
	}
	rc = c->tp_ops->post_send(ft__comm_link(c, peer, true), &h, payload,
				  (void *)(uintptr_t)(SEND_CTX + g));
	if (rc != 0 && ft__err_shortage(rc))
		return rc;
	if (rc != 0) {
		send_broken(x, peer, rc);
		return 0;
	}
	x->sends++;
	c->stats.bytes_sent += h.length;
	if (x->co->hooks->frame_sent != NULL)
		return x->co->hooks->frame_sent(x->co, &h, payload);
	return 0;
}

static int post_recv_step(struct rd *x, uint32_t g, int from)
{
	struct ft_comm *c = x->co->c;
	struct ft__frame h = frame_of(x, g);
	int peer = c->members[from];
	int rc = c->tp_ops->post_recv(ft__comm_link(c, peer, false), &h, recv_buf(x, g),
				      (void *)(uintptr_t)(g + 1));

	if (rc != 0) {
		x->co->fail_link = 3;
		x->co->fail_peer = peer;
	}
	return rc;
}

/* Runs the steps as far as the frames in allow: 0, or the error. */
static int advance(struct rd *x)
{
	struct ft__coll *co = x->co;
	struct ft_comm *c = co->c;
	size_t count = x->bytes / co->s.es;
	int rc;

	while (x->g <= x->k + 1) {
		uint32_t g = x->g;
		if (x->to[g] >= 0 && !x->g_sent) {
			if (g == x->k + 1 && co->op == FT_AVG && count > 0)
				ft__reduce_scale((char *)x->cur, count, (enum ft_dtype)co->tmpl.dtype,
						 (size_t)c->size);
			if ((rc = send_step(x, g, x->to[g], x->cur)) != 0)
				return rc;
			x->g_sent = true;
		}
		if (x->from[g] >= 0) {
			if (!x->got[g])
				return 0;
			if (g == x->k + 1) {
				x->cur = recv_buf(x, g); /* the result, from the rank that stood for this one */
			} else {
				/* the partial slot written now was sent two steps ago */
				if (x->sent < x->sends)
					return 0;
				bool theirs_first = x->from[g] < c->rank;
				const char *theirs = recv_buf(x, g);
				char *out = slot_at(x, (uint32_t)x->next);
				uint64_t t0 = ft__now_ns();
				if (count > 0)
					co->combine(out, theirs_first ? theirs : x->cur,
						    theirs_first ? x->cur : theirs, count);
				c->stats.reduce_ms += (double)(ft__now_ns() - t0) / 1e6;
				x->cur = out;
				x->next ^= 1;
			}
		}
		/* the last exchange done, and no unfold to send: the average here */
		if (g == x->k && x->from[g] >= 0 && x->to[g + 1] < 0 && co->op == FT_AVG &&
		    count > 0)
			ft__reduce_scale((char *)x->cur, count, (enum ft_dtype)co->tmpl.dtype,
					 (size_t)c->size);
		x->g++;
		x->g_sent = false;
	}
	if (!x->held) {
		if (x->cur != co->dst && x->bytes > 0)
			memcpy(co->dst, x->cur, x->bytes);
		x->held = true;
		if (co->hooks->result_held != NULL && (rc = co->hooks->result_held(co)) != 0)
			return rc;
		co->claimed = true;
	}
	return 0;
}

static bool rd_done(const struct rd *x)
{
	return x->held && x->sent == x->sends && x->got[x->k + 2] && x->send_err == 0;
}

/* Whether the link ev names is one this op still expects a frame on (from),
 * or one whose frame of ours has not left yet (each link carries one frame
 * of the op at most, either way). */
static bool link_owed(const struct rd *x, const struct ft__tp_event *ev, bool from)
{
	struct ft_comm *c = x->co->c;

	for (uint32_t g = 0; g <= x->k + 2; g++) {
		int p = from ? x->from[g] : x->to[g];
		if (p >= 0 && ev->link == ft__comm_link(c, c->members[p], !from) &&
		    (from ? !x->got[g] : !x->out[g]))
			return true;
	}
	return false;
}

static int rd_run(struct rd *x)
{
	struct ft__coll *co = x->co;
	struct ft_comm *c = co->c;
	struct ft__tp_event ev[FT__EV_MAX];
	struct ft__op_wait w;
	int rc;

	ft__op_wait_init(c, &w);
	if ((rc = advance(x)) != 0)
		return rc;
	while (!rd_done(x)) {
		int nev = ft__op_wait(c, &w, co->tmpl.op_seq, x->send_err ? x->grace_deadline : 0, ev,
				      c->tp_env.spin_us < 0 ? RD_YIELD_NS : 0);
		if (nev < 0)
			return nev;
		if (nev == 0 && x->send_err && ft__ms_left(x->grace_deadline) == 0) {
			co->fail_link = 3;
			co->fail_peer = x->send_peer;
			return x->send_err;
		}
		for (int i = 0; i < nev; i++) {
			if (ev[i].type == FT__TP_SEND_DONE) {
				uint32_t g = (uint32_t)(uintptr_t)ev[i].ctx - SEND_CTX;
				x->sent++;
				if (g < FT__RD_STEPS)
					x->out[g] = true;
			} else if (ev[i].type == FT__TP_RECV_DONE) {
				uint32_t g = (uint32_t)(uintptr_t)ev[i].ctx - 1;
				if (ev[i].status != 0 || g > x->k + 2 || x->got[g]) {
					co->fail_link = 3;
					co->fail_peer = ev[i].peer;
					return ev[i].status != 0 ? ev[i].status : -FT_EPROTO;
				}
				x->got[g] = true;
				if (g <= x->k + 1) {
					struct ft__frame h = frame_of(x, g);
					c->stats.bytes_received += h.length;
					if (co->hooks->frame_received != NULL &&
					    (rc = co->hooks->frame_received(co, &h, recv_buf(x, g))) != 0)
						return rc;
				}
			} else if (ev[i].type == FT__TP_LINK_ERROR) {
				/* (a link whose frames of this op are all through fails
				 * the next op, not this one: the transport keeps it) */
				if (link_owed(x, &ev[i], true)) {
					co->fail_link = 3;
					co->fail_peer = ev[i].peer;
					return ev[i].status;
				}
				if (link_owed(x, &ev[i], false))
					send_broken(x, ev[i].peer, ev[i].status);
			}
		}
		if ((rc = advance(x)) != 0)
			return rc;
	}
	return 0;
}

int ft__engine_rd(struct ft_comm *c, const struct ft__call *k, const struct ft__attempt *a,
		  struct ft__coll *co)
{
	int n = c->size, r = c->rank, left = ft__mod(r - 1, n), right = ft__mod(r + 1, n);
	struct rd x = {.co = co};
	int rc = ft__engine_setup(co, c, k, a);

	if (rc != 0)
		return rc;
	co->tmpl.algo = FT__ALGO_RD;
	co->in_place = k->in_place;
	co->src = k->in_place ? k->dst : k->src;
	co->op = k->op;
	x.bytes = k->count * k->es;
	x.k = steps_of(n);
	x.slot = (x.bytes + 63) & ~(size_t)63;
	x.cur = co->src;
	if (x.k + 3 > FT__RD_STEPS)
		return -FT_EINVAL;
	/* two partials and a receive per step */
	if ((rc = ft__comm_grow(&c->rd_buf, &c->rd_cap, x.slot * (x.k + 5))) != 0)
		return rc;
	for (uint32_t g = 0; g <= x.k + 2; g++) {
		x.to[g] = g <= x.k + 1 ? step_peer(n, r, g, true) : -1;
		x.from[g] = g <= x.k + 1 ? step_peer(n, r, g, false) : -1;
		x.got[g] = x.from[g] < 0;
	}
	/* the ring's neighbours judge each other (above) */
	if (!sends_to(n, r, right))
		x.to[x.k + 2] = right;
	if (!sends_to(n, left, r)) {
		x.from[x.k + 2] = left;
		x.got[x.k + 2] = false;
	}
	/* (ft__comm_connect_ring made every link before the op) */
	for (uint32_t g = 0; g <= x.k + 2; g++)
		if ((x.to[g] >= 0 && ft__comm_link(c, c->members[x.to[g]], true) == NULL) ||
		    (x.from[g] >= 0 && ft__comm_link(c, c->members[x.from[g]], false) == NULL))
			return -FT_EPROTO;
	/* an in-place input, whole, for a rerun: it is small */
	if (co->hooks->input_save_at != NULL && co->in_place && x.bytes > 0) {
		struct ft__sum *sum = NULL;
		void *save = co->hooks->input_save_at(co, 0, x.bytes, &sum);
		if (save != NULL)
			ft__copy_stream_sum(save, co->src, x.bytes, sum);
		co->input_saved = save != NULL;
	}
	for (uint32_t g = 0; g <= x.k + 2; g++)
		if (x.from[g] >= 0 && (rc = post_recv_step(&x, g, x.from[g])) != 0)
			return rc;
	if (x.to[x.k + 2] >= 0 && (rc = send_step(&x, x.k + 2, x.to[x.k + 2], NULL)) != 0)
		return rc;
	return rd_run(&x);
}
