/* fault_transport.c: a transport that wraps another and makes FTCC_FAULT's points strike where frames are sent and received. */
/* SPDX-License-Identifier: MIT */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "internal.h"
#include "transport.h"

/*
 * Like libfabric's hook providers, this transport sits between the engine
 * and the real one and passes every call through, looking at the frames on
 * their way. It is put in place by ft_init only when FTCC_FAULT names a
 * point, so a job without one pays nothing, and the engine's step loop
 * holds no injection code. Where a point strikes, by at= (lib/util/fault.h):
 *
 *   send      post_send of the named frame, before it is handed on;
 *   sent      post_send of the named frame, once the real transport queued
 *             it, before the call returns (so before the engine's policy
 *             records the send);
 *   recorded  the named frame's receive completed: the event goes up to the
 *             engine (whose policy records it), and the point strikes at
 *             the next call into the transport, before anything else moves;
 *   between   (phase) the first frame, sent or posted, of an op on a
 *             generation not seen before.
 *
 * A frame's phase and step within it follow from its kind, its step and the
 * ring's size (the schedule in lib/core/schedule.h). kill and hang never
 * return: before a hang the frames already queued go out, so a hung rank
 * stops with what it sent before the point on the wire. drop cuts every data
 * link as a pulled cable would: the real links close with no word to the
 * neighbours, the call fails with -FT_EPEERFAILED, and progress reports each
 * cut link broken once.
 */

#define FAULT_STASH 64

struct fault_expect {
	uint8_t kind;
	uint32_t generation;
	uint64_t op_seq;
	uint32_t step, seg;
	uint16_t algo;
};

struct ft__link {
	struct ft__link *inner;         /* NULL once cut */
	struct ft__transport *tp;
	struct ft__link *next;
	int kind;                       /* enum ft__link_kind */
	int peer;                       /* original rank at the other end */
	bool cut, cut_reported;
	unsigned sends;                 /* queued, not completed */
	struct fault_expect *rq;        /* receives posted, in the order they complete */
	size_t rq_cap, rq_head, rq_len;
};

struct ft__transport {
	const struct ft__transport_ops *ops;    /* the wrapped transport's */
	struct ft__transport *inner;
	struct ft__fault *fault;
	int rank;
	int (*ring_size)(void *arg);
	void *arg;
	struct ft__link *links;
	bool op_seen;                   /* the last op whose frame passed: */
	uint32_t op_gen;
	uint64_t op_seq;
	const struct ft__fault_pt *pending;     /* strikes at the next call */
	struct ft__tp_event stash[FAULT_STASH]; /* events behind a recorded point's */
	int stash_head, stash_len;
};

static const struct ft__transport_ops fault_ops;

/* The phase a frame of this kind and step belongs to on a ring of n, and its
 * step within that phase (the engine's schedule: data steps, then commit). */
static enum ft__fault_phase phase_of(uint8_t kind, uint16_t algo, uint32_t g, int n, uint32_t *step)
{
	uint32_t rs_last = (uint32_t)(n - 2), data_last = (uint32_t)(2 * n - 3);

	if (algo == FT__ALGO_RD || algo == FT__ALGO_RH || algo == FT__ALGO_TREE) {
		*step = g;
		return FT__PHASE_EXCHANGE;
	}
	if (kind == FT__COLL_BROADCAST) {
		*step = g > 1 ? g - 2 : g;
		return g > 1 ? FT__PHASE_COMMIT : FT__PHASE_BROADCAST;
	}
	if (kind == FT__COLL_REDUCE_SCATTER)
		data_last = rs_last;
	if (g > data_last) {
		*step = g - data_last - 1;
		return FT__PHASE_COMMIT;
	}
	if (g <= rs_last) {
		*step = g;
		return FT__PHASE_REDUCE_SCATTER;
	}
	*step = g - rs_last - 1;
	return FT__PHASE_ALLGATHER;
}

static void cut_all(struct ft__transport *tp)
{
	for (struct ft__link *l = tp->links; l != NULL; l = l->next) {
		if (l->kind != FT__LINK_DATA || l->cut)
			continue;
		tp->ops->link_close(l->inner);
		l->inner = NULL;
		l->cut = true;
		l->sends = 0;
		l->rq_len = 0;
	}
}

/* Before a hang: waits until the frames already queued left (or a link broke). */
static void flush(struct ft__transport *tp)
{
	struct ft__tp_event ev[FAULT_STASH];

	for (;;) {
		unsigned queued = 0;
		for (struct ft__link *l = tp->links; l != NULL; l = l->next)
			queued += l->sends;
		if (queued == 0)
			return;
		int nev = tp->ops->progress(tp->inner, 10, ev, FAULT_STASH);
		if (nev < 0)
			return;
		for (int i = 0; i < nev; i++) {
			if (ev[i].type == FT__TP_LINK_ERROR)
				return;
			for (struct ft__link *l = tp->links; l != NULL; l = l->next)
				if (l->inner == ev[i].link && ev[i].type == FT__TP_SEND_DONE && l->sends > 0)
					l->sends--;
		}
	}
}

/* Kills or hangs this process, or cuts the data links (-FT_EPEERFAILED). */
static int act(struct ft__transport *tp, const struct ft__fault_pt *hit)
{
	if (hit->action == FT__FAULT_HANG)
		flush(tp);
	ft__fault_act(hit);
	cut_all(tp);
	return -FT_EPEERFAILED;
}

static int strike(struct ft__transport *tp, const struct ft__frame *h, enum ft__fault_at at)
{
	uint32_t step;
	enum ft__fault_phase phase = phase_of(h->kind, h->algo, h->step, tp->ring_size(tp->arg), &step);
	const struct ft__fault_pt *hit =
		ft__fault_due(tp->fault, tp->rank, h->generation, h->op_seq, phase, step, h->seg, at);

	return hit != NULL ? act(tp, hit) : 0;
}

/* A recorded point's turn, at the call after its receive went up. */
static int strike_pending(struct ft__transport *tp)
{
	const struct ft__fault_pt *hit = tp->pending;

	tp->pending = NULL;
	return hit != NULL ? act(tp, hit) : 0;
}

/* The first frame of an op on a generation not seen before: phase between. */
static int op_start(struct ft__transport *tp, const struct ft__frame *h)
{
	const struct ft__fault_pt *hit;

	if (tp->op_seen && tp->op_gen == h->generation && tp->op_seq == h->op_seq)
		return 0;
	tp->op_seen = true;
	tp->op_gen = h->generation;
	tp->op_seq = h->op_seq;
	hit = ft__fault_due(tp->fault, tp->rank, h->generation, h->op_seq, FT__PHASE_BETWEEN, 0,
			    0, FT__AT_SEND);
	return hit != NULL ? act(tp, hit) : 0;
}

/* A link the real transport made (rc 0: inner) becomes one of ours in *out;
 * without memory for it, the real one is closed. */
static int wrap_link(struct ft__transport *tp, int rc, struct ft__link *inner, int kind, int peer,
		     struct ft__link **out)
{
	struct ft__link *l;

	*out = NULL;
	if (rc != 0)
		return rc;
	if ((l = calloc(1, sizeof(*l))) == NULL) {
		tp->ops->link_close(inner);
		return -FT_ENOMEM;
	}
	l->inner = inner;
	l->tp = tp;
	l->kind = kind;
	l->peer = peer;
	l->next = tp->links;
	tp->links = l;
	*out = l;
	return 0;
}

static void unwrap_link(struct ft__link *l, struct ft__transport *tp)
{
	int kept = 0;

	for (struct ft__link **p = &tp->links; *p != NULL; p = &(*p)->next)
		if (*p == l) {
			*p = l->next;
			break;
		}
	for (int i = 0; i < tp->stash_len; i++) {
		struct ft__tp_event e = tp->stash[(tp->stash_head + i) % FAULT_STASH];
		if (e.link != l)
			tp->stash[(tp->stash_head + kept++) % FAULT_STASH] = e;
	}
	tp->stash_len = kept;
	free(l->rq);
	free(l);
}

static struct ft__link *outer_of(struct ft__transport *tp, const struct ft__link *inner)
{
	for (struct ft__link *l = tp->links; l != NULL; l = l->next)
		if (l->inner == inner && inner != NULL)
			return l;
	return NULL;
}

int ft__fault_wrap(struct ft__fault *f, int rank, int (*ring_size)(void *arg), void *arg,
		   const struct ft__transport_ops **ops, struct ft__transport **tp)
{
	struct ft__transport *w = calloc(1, sizeof(*w));

	if (w == NULL)
		return -FT_ENOMEM;
	w->ops = *ops;
	w->inner = *tp;
	w->fault = f;
	w->rank = rank;
	w->ring_size = ring_size;
	w->arg = arg;
	*ops = &fault_ops;
	*tp = w;
	return 0;
}

static int fault_open(const struct ft__tp_params *params, struct ft__transport **out)
{
	(void)params;
	*out = NULL;
	return -FT_ENOSYS; /* only ft__fault_wrap makes one */
}

static int fault_local_addr(struct ft__transport *tp, char *buf, size_t len)
{
	return tp->ops->local_addr(tp->inner, buf, len);
}

static int fault_connect(struct ft__transport *tp, const char *addr, const struct ft__hello *hello,
			 int timeout_ms, struct ft__link **out)
{
	struct ft__link *inner = NULL;
	int rc = tp->ops->connect(tp->inner, addr, hello, timeout_ms, &inner);

	return wrap_link(tp, rc, inner, hello->kind, hello->to_rank, out);
}

static int fault_accept(struct ft__transport *tp, const struct ft__hello *expect, int timeout_ms,
			struct ft__link **out, struct ft__hello *got)
{
	struct ft__link *inner = NULL;
	int rc = tp->ops->accept(tp->inner, expect, timeout_ms, &inner, got);

	/* got is filled only when rc is 0; wrap_link reads kind and peer only then */
	return wrap_link(tp, rc, inner, rc == 0 ? got->kind : 0, rc == 0 ? got->from_rank : -1,
			 out);
}

static int fault_post_send(struct ft__link *l, const struct ft__frame *hdr, const void *buf,
			   void *ctx)
{
	struct ft__transport *tp = l->tp;
	bool data = l->kind == FT__LINK_DATA && hdr->type == FT__FRAME_DATA;
	int rc;

	if ((rc = strike_pending(tp)) != 0)
		return rc;
	if (l->cut)
		return -FT_EPEERFAILED;
	if (data && ((rc = op_start(tp, hdr)) != 0 ||
		     (rc = strike(tp, hdr, FT__AT_SEND)) != 0))
		return rc;
	if ((rc = tp->ops->post_send(l->inner, hdr, buf, ctx)) != 0)
		return rc;
	l->sends++;
	return data ? strike(tp, hdr, FT__AT_SENT) : 0;
}

static int fault_post_recv(struct ft__link *l, const struct ft__frame *expect, void *buf, void *ctx)
{
	struct ft__transport *tp = l->tp;
	int rc;

	if ((rc = strike_pending(tp)) != 0)
		return rc;
	if (l->cut)
		return -FT_EPEERFAILED;
	if (l->kind == FT__LINK_DATA && (rc = op_start(tp, expect)) != 0)
		return rc;
	if (l->rq_len == l->rq_cap) {
		size_t cap = l->rq_cap ? 2 * l->rq_cap : 64;
		struct fault_expect *q = malloc(cap * sizeof(*q));
		if (q == NULL)
			return -FT_ENOMEM;
		for (size_t i = 0; i < l->rq_len; i++)
			q[i] = l->rq[(l->rq_head + i) % l->rq_cap];
		free(l->rq);
		l->rq = q;
		l->rq_cap = cap;
		l->rq_head = 0;
	}
	if ((rc = tp->ops->post_recv(l->inner, expect, buf, ctx)) != 0)
		return rc;
	l->rq[(l->rq_head + l->rq_len++) % l->rq_cap] = (struct fault_expect){
		expect->kind, expect->generation, expect->op_seq, expect->step, expect->seg,
		expect->algo};
	return 0;
}

/* An event from the real transport, told in the wrapper's links and
 * counted; the recorded point whose frame's receive it completed, or NULL. */
static const struct ft__fault_pt *pass_up(struct ft__transport *tp, struct ft__tp_event *e)
{
	struct ft__link *l = outer_of(tp, e->link);

	if (l == NULL)
		return NULL;
	e->link = l;
	switch (e->type) {
	case FT__TP_SEND_DONE:
		if (l->sends > 0)
			l->sends--;
		return NULL;
	case FT__TP_LINK_ERROR:
		l->sends = 0;
		l->rq_len = 0;
		return NULL;
	case FT__TP_RECV_DONE:
		if (l->rq_len == 0)
			return NULL;
		struct fault_expect x = l->rq[l->rq_head];
		l->rq_head = (l->rq_head + 1) % l->rq_cap;
		l->rq_len--;
		if (e->status != 0 || l->kind != FT__LINK_DATA)
			return NULL;
		uint32_t step;
		enum ft__fault_phase phase =
			phase_of(x.kind, x.algo, x.step, tp->ring_size(tp->arg), &step);
		return ft__fault_due(tp->fault, tp->rank, x.generation, x.op_seq, phase, step, x.seg,
				     FT__AT_RECORDED);
	default:
		return NULL;
	}
}

static int fault_progress(struct ft__transport *tp, int timeout_ms, struct ft__tp_event *ev,
			  int max_ev)
{
	int n = 0, nev;

	(void)strike_pending(tp); /* a drop's cut links are reported below */
	for (struct ft__link *l = tp->links; l != NULL && n < max_ev; l = l->next)
		if (l->cut && !l->cut_reported) {
			l->cut_reported = true;
			ev[n++] = (struct ft__tp_event){.type = FT__TP_LINK_ERROR,
							.status = -FT_EPEERFAILED,
							.link = l,
							.peer = l->peer};
		}
	while (n < max_ev && tp->stash_len > 0) {
		struct ft__tp_event e = tp->stash[tp->stash_head];
		tp->stash_head = (tp->stash_head + 1) % FAULT_STASH;
		tp->stash_len--;
		if (!((struct ft__link *)e.link)->cut)
			ev[n++] = e;
	}
	if (n > 0)
		return n;
	if (max_ev > FAULT_STASH)
		max_ev = FAULT_STASH;
	if ((nev = tp->ops->progress(tp->inner, timeout_ms, ev, max_ev)) <= 0)
		return nev;
	for (int i = 0; i < nev; i++) {
		if ((tp->pending = pass_up(tp, &ev[i])) == NULL)
			continue;
		/* the recorded point strikes at the next call: what came
		 * behind its frame waits for the call after that (counted
		 * now; a second point among them would strike after the
		 * first, which ends the process or the links, so it is moot) */
		for (int j = i + 1; j < nev; j++) {
			if (outer_of(tp, ev[j].link) == NULL)
				continue; /* not a link of ours: cannot be */
			(void)pass_up(tp, &ev[j]);
			tp->stash[(tp->stash_head + tp->stash_len++) % FAULT_STASH] = ev[j];
		}
		return i + 1;
	}
	return nev;
}

static void fault_link_abort(struct ft__link *l, const struct ft__frame *abort_frame)
{
	struct ft__transport *tp = l->tp;

	if (!l->cut)
		tp->ops->link_abort(l->inner, abort_frame);
	unwrap_link(l, tp);
}

static void fault_link_close(struct ft__link *l)
{
	struct ft__transport *tp = l->tp;

	if (!l->cut)
		tp->ops->link_close(l->inner);
	unwrap_link(l, tp);
}

static void fault_close(struct ft__transport *tp)
{
	if (tp == NULL)
		return;
	while (tp->links != NULL)
		fault_link_close(tp->links);
	tp->ops->close(tp->inner);
	free(tp);
}

static size_t fault_segment_bytes(struct ft__transport *tp)
{
	return tp->ops->segment_bytes != NULL ? tp->ops->segment_bytes(tp->inner) : 0;
}

static int fault_watch_fd(struct ft__transport *tp, int fd)
{
	return FT__TP_HAS(tp->ops, watch_fd)
		       ? tp->ops->watch_fd(tp->inner, fd)
		       : -FT_ENOSYS;
}

static void fault_left_out(struct ft__transport *tp, int rank)
{
	if (FT__TP_HAS(tp->ops, left_out))
		tp->ops->left_out(tp->inner, rank);
}

static const struct ft__transport_ops fault_ops = {
	.size = sizeof(struct ft__transport_ops),
	.name = "fault",
	.open = fault_open,
	.local_addr = fault_local_addr,
	.connect = fault_connect,
	.accept = fault_accept,
	.post_send = fault_post_send,
	.post_recv = fault_post_recv,
	.progress = fault_progress,
	.link_abort = fault_link_abort,
	.link_close = fault_link_close,
	.close = fault_close,
	.segment_bytes = fault_segment_bytes,
	.watch_fd = fault_watch_fd,
	.left_out = fault_left_out,
};
