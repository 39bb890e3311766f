/* ring.c: the ring engine: allreduce (reduce-scatter then allgather), broadcast and barrier. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "crc32c.h"
#include "reduce.h"

/*
 * Ring allreduce over n ranks, this one at dense rank r.
 *
 * The buffer of `count` elements is cut into n chunks, chunk c holding
 * elements [lo(c), lo(c) + len(c)) with len(c) = count/n, plus one for the
 * first count%n chunks. Each chunk is cut into segments of seg_elems
 * elements (the segment size rounded down to whole elements); an empty chunk
 * still has one empty segment, so every step moves at least one frame and
 * ranks that disagree on the arguments always meet a header to disagree on.
 *
 * Steps g = 0 .. 2n-3 on every rank, each sending one chunk to the right
 * neighbour and receiving one from the left:
 *   reduce-scatter, g = 0 .. n-2: send chunk r-g, receive chunk r-g-1 into a
 *     staging slot and reduce it with our own input into the output buffer;
 *     after g = n-2 we hold the complete reduction of chunk r+1;
 *   allgather, g = n-1 .. 2n-3 (t = g-n+1): send chunk r+1-t, receive chunk
 *     r-t straight into the output buffer (its final value).
 * (all chunk numbers mod n). The chunk received at step g is the one sent at
 * step g+1, so the pipeline works per segment: as soon as segment k of step g
 * is received (and reduced), segment k of step g+1 is queued to the right.
 * Step 0's segments are queued at the start, straight from the input. Frames
 * therefore cross every link in (step, segment) order, which is the order the
 * receiver posts them in, so each receive knows the exact header it expects.
 *
 * Memory: receives of reduce-scatter use pipeline_depth staging slots of one
 * segment each, allocated once per communicator; sends are queued from the
 * user's buffers (never copied); allgather receives land in place. Receives
 * posted ahead are capped (2 x depth) so a fast left neighbour only fills
 * socket buffers. Waiting happens inside the transport's progress call,
 * blocked in the kernel.
 *
 * Broadcast is a pipelined chain from the root around the ring; the last
 * rank answers the root with an empty frame, so the root too returns only
 * when everyone has the data, and a disagreement reaches it as an error.
 * A barrier is an allreduce of nothing (2(n-1) empty frames per link).
 */

#define FT__EV_MAX 64

struct recv_entry {
	uint32_t g, k;
	int slot;               /* staging slot, -1 when received in place */
};

struct coll {
	struct ft_comm *c;
	struct ft_frame tmpl;
	enum ft_coll_kind kind;
	const char *src;
	char *dst;
	size_t count, es, seg_elems;
	bool in_place;
	enum ft_op op;
	ft__combine_fn combine;
	ft__accum_fn accum;
	int n, r, root_pos;
	uint32_t data_last;     /* steps 0 .. data_last move data */
	uint32_t last_step;     /* then commit steps up to last_step (if any) */
	size_t data_total, data_done;   /* data frames this rank receives */
	int fail_link;          /* which link failed: 1 receive, 2 send */

	uint32_t rg, rk;        /* next receive to post */
	size_t recv_total, recv_done, recv_posted;
	size_t send_posted, send_done;
	struct recv_entry fifo[128];
	unsigned fifo_head, fifo_len;
	int free_slots[64];
	int nfree;
	int send_err;           /* the send link broke with frames still to go */
	int64_t grace_deadline; /* until then, wait for the cause on the receive link */
};

static inline int mod(int a, int n)
{
	a %= n;
	return a < 0 ? a + n : a;
}

static inline size_t chunk_lo(const struct coll *co, int c)
{
	size_t q = co->count / (size_t)co->n, rem = co->count % (size_t)co->n;
	return (size_t)c * q + ((size_t)c < rem ? (size_t)c : rem);
}

static inline size_t chunk_len(const struct coll *co, int c)
{
	return co->count / (size_t)co->n + ((size_t)c < co->count % (size_t)co->n ? 1 : 0);
}

static inline uint32_t chunk_nseg(const struct coll *co, int c)
{
	size_t len = co->kind == FT_COLL_BROADCAST ? co->count : chunk_len(co, c);
	return len == 0 ? 1 : (uint32_t)((len + co->seg_elems - 1) / co->seg_elems);
}

/* Frames at step g: commit steps and the broadcast's closing steps carry one empty frame. */
static inline uint32_t step_nseg(const struct coll *co, uint32_t g, int chunk)
{
	if (g > co->data_last || (co->kind == FT_COLL_BROADCAST && g > 0))
		return 1;
	return chunk_nseg(co, chunk);
}

/* Chunk moving at step g: received by this rank, or sent by it. */
static inline int recv_chunk(const struct coll *co, uint32_t g)
{
	if (co->kind == FT_COLL_BROADCAST)
		return 0;
	return (int)g < co->n - 1 ? mod(co->r - (int)g - 1, co->n)
				  : mod(co->r - ((int)g - (co->n - 1)), co->n);
}

static inline int send_chunk(const struct coll *co, uint32_t g)
{
	if (co->kind == FT_COLL_BROADCAST)
		return 0;
	return (int)g < co->n - 1 ? mod(co->r - (int)g, co->n)
				  : mod(co->r + 1 - ((int)g - (co->n - 1)), co->n);
}

/* Byte offset and length of segment k of chunk c. */
static void seg_range(const struct coll *co, int c, uint32_t k, size_t *off, size_t *len)
{
	size_t lo = co->kind == FT_COLL_BROADCAST ? 0 : chunk_lo(co, c);
	size_t clen = co->kind == FT_COLL_BROADCAST ? co->count : chunk_len(co, c);
	size_t first = (size_t)k * co->seg_elems;
	size_t n = clen > first ? clen - first : 0;

	if (n > co->seg_elems)
		n = co->seg_elems;
	*off = (lo + first) * co->es;
	*len = n * co->es;
}

/* Byte range of frame (g, k); empty for the closing steps. */
static void frame_range(const struct coll *co, uint32_t g, int c, uint32_t k, size_t *off,
			size_t *len)
{
	if (g > co->data_last || (co->kind == FT_COLL_BROADCAST && g > 0)) {
		*off = *len = 0;
		return;
	}
	seg_range(co, c, k, off, len);
}

/* The send link broke with frames still to go: the cause (an abort frame or
 * the end of the stream) follows on the receive link, within a grace period. */
static void send_broken(struct coll *co, int err)
{
	if (co->send_err == 0) {
		co->send_err = err;
		co->grace_deadline = ft__now_ms() + 2000;
	}
}

/*
 * FTCC_FAULT: fires when this rank is about to send segment seg of a step
 * (or, phase between, when the op starts). kill and hang do not return;
 * drop closes the data links with no word to the neighbours, as a cut
 * cable would, and fails the op here.
 */
static int inject(struct coll *co, enum ft__fault_phase phase, uint32_t step, uint32_t seg)
{
	struct ft_comm *c = co->c;

	if (!c->fault.armed ||
	    !ft__fault_due(&c->fault, c->cfg.rank, co->tmpl.op_seq, phase, step, seg))
		return 0;
	ft__fault_act(&c->fault);
	if (c->send_link != NULL)
		c->tp_ops->link_close(c->send_link);
	if (c->recv_link != NULL)
		c->tp_ops->link_close(c->recv_link);
	c->send_link = c->recv_link = NULL;
	return -FT_EPEERFAILED;
}

static int send_phase(const struct coll *co, uint32_t g, uint32_t *step)
{
	if (g > co->data_last) {
		*step = g - co->data_last - 1;
		return FT__PHASE_COMMIT;
	}
	if (co->kind == FT_COLL_BROADCAST) {
		*step = g;
		return FT__PHASE_BROADCAST;
	}
	if ((int)g < co->n - 1) {
		*step = g;
		return FT__PHASE_REDUCE_SCATTER;
	}
	*step = g - (uint32_t)(co->n - 1);
	return FT__PHASE_ALLGATHER;
}

static int post_send(struct coll *co, uint32_t g, uint32_t k, const char *base)
{
	struct ft_comm *c = co->c;
	struct ft_frame h = co->tmpl;
	size_t off, len;
	int rc;

	if (co->send_err != 0)
		return 0; /* the receive side will tell why the ring broke */
	if (c->fault.armed) {
		uint32_t step;
		enum ft__fault_phase phase = (enum ft__fault_phase)send_phase(co, g, &step);
		if ((rc = inject(co, phase, step, k)) != 0)
			return rc;
	}
	frame_range(co, g, send_chunk(co, g), k, &off, &len);
	h.step = g;
	h.seg = k;
	h.offset = off;
	h.length = len;
	if (c->cfg.crc) {
		h.flags |= FT_FRAME_F_CRC;
		h.crc = ft__crc32c(0, base + off, len);
	}
	rc = c->tp_ops->post_send(c->send_link, &h, base + off, NULL);
	if (rc != 0) {
		if (rc == -FT_ENOMEM)
			return rc;
		send_broken(co, rc);
		return 0;
	}
	co->send_posted++;
	c->stats.bytes_sent += len;
	return 0;
}

/* Posts receives ahead, as far as slots and the cap allow. */
static int post_recvs(struct coll *co)
{
	struct ft_comm *c = co->c;
	unsigned cap = 2u * (unsigned)c->cfg.pipeline_depth;

	if (cap > FT__ARRAY_SIZE(co->fifo))
		cap = FT__ARRAY_SIZE(co->fifo);
	while (co->recv_posted < co->recv_total && co->fifo_len < cap) {
		int chunk = recv_chunk(co, co->rg);
		bool staged = co->kind != FT_COLL_BROADCAST && (int)co->rg < co->n - 1;
		struct ft_frame h = co->tmpl;
		size_t off, len;
		char *buf;
		int slot = -1, rc;

		frame_range(co, co->rg, chunk, co->rk, &off, &len);
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
			(struct recv_entry){co->rg, co->rk, slot};
		co->recv_posted++;
		if (++co->rk == step_nseg(co, co->rg, chunk)) {
			co->rk = 0;
			/* a broadcast's non-root ranks receive no answer (step 1) */
			co->rg += co->kind == FT_COLL_BROADCAST && co->rg == 0 ? 2 : 1;
		}
	}
	return 0;
}

/*
 * This rank now holds the whole result. Under a recovering policy the
 * detector must hear it first (unless a failure is being settled, when the
 * op is left to the recovery); with commit steps, the first of them goes out.
 */
static int data_complete(struct coll *co)
{
	struct ft_comm *c = co->c;
	int rc;

	if (c->det != NULL && (rc = ft__det_have_result(c->det, co->tmpl.op_seq)) != 0)
		return rc;
	if (co->last_step > co->data_last && (co->kind != FT_COLL_BROADCAST || co->root_pos == 0))
		return post_send(co, co->data_last + 1, 0, co->dst);
	return 0;
}

static int on_recv_broadcast(struct coll *co, const struct recv_entry *e)
{
	size_t off, len;
	int rc = 0;

	if (e->g == 0) {
		seg_range(co, 0, e->k, &off, &len);
		co->c->stats.bytes_received += len;
		if (co->root_pos != co->n - 1)
			rc = post_send(co, 0, e->k, co->dst);
		if (rc == 0 && ++co->data_done == co->data_total) {
			rc = data_complete(co);
			if (rc == 0 && co->root_pos == co->n - 1)
				rc = post_send(co, 1, 0, co->dst);
		}
		return rc;
	}
	if (e->g == 1) /* the root hears that every rank has the data */
		return data_complete(co);
	/* commit step: pass it on to the last rank */
	return co->root_pos != co->n - 1 ? post_send(co, 2, 0, co->dst) : 0;
}

static int on_recv(struct coll *co)
{
	struct ft_comm *c = co->c;
	struct recv_entry e = co->fifo[co->fifo_head];
	size_t off, len;
	int rc = 0;

	co->fifo_head = (co->fifo_head + 1) % FT__ARRAY_SIZE(co->fifo);
	co->fifo_len--;
	co->recv_done++;
	if (co->kind == FT_COLL_BROADCAST)
		return on_recv_broadcast(co, &e);
	if (e.g > co->data_last)
		return e.g < co->last_step ? post_send(co, e.g + 1, 0, co->dst) : 0;
	seg_range(co, recv_chunk(co, e.g), e.k, &off, &len);
	c->stats.bytes_received += len;
	if (e.slot >= 0) {
		const char *slot = (const char *)c->slots + (size_t)e.slot * c->slot_bytes;
		size_t n = len / co->es;
		uint64_t t0 = ft__now_ns();
		if (co->in_place)
			co->accum(co->dst + off, slot, n);
		else
			co->combine(co->dst + off, co->src + off, slot, n);
		if (co->op == FT_AVG && (int)e.g == co->n - 2)
			ft__reduce_scale(co->dst + off, n, (enum ft_dtype)co->tmpl.dtype,
					 (size_t)co->n);
		c->stats.reduce_ms += (double)(ft__now_ns() - t0) / 1e6;
		co->free_slots[co->nfree++] = e.slot;
	}
	if (e.g < co->data_last)
		rc = post_send(co, e.g + 1, e.k, co->dst);
	if (rc == 0 && ++co->data_done == co->data_total)
		rc = data_complete(co);
	return rc;
}

static bool coll_done(const struct coll *co)
{
	return co->recv_done == co->recv_total && co->send_done == co->send_posted &&
	       co->send_err == 0;
}

/*
 * Waits for transport events. When every local rank has a core of its own
 * (c->spin_ns > 0), polls for a short while before sleeping in the kernel:
 * a wake-up costs more than a small message's whole transfer. With more
 * ranks than cores it never polls, so waiting ranks leave the CPU to those
 * with work.
 */
static int wait_events(struct ft_comm *c, int timeout, struct ft_tp_event *ev)
{
	int nev = c->tp_ops->progress(c->tp, 0, ev, FT__EV_MAX);

	if (nev != 0 || timeout == 0)
		return nev;
	if (c->spin_ns > 0) {
		uint64_t end = ft__now_ns() + c->spin_ns;
		uint64_t t0 = ft__now_ns(), now = t0;
		do {
			/* After a first stretch of plain polling, yield between
			 * polls so that a peer sharing this core (a busy host) is
			 * not kept waiting by our poll. */
			if (now - t0 > c->spin_ns / 16)
				sched_yield();
			nev = c->tp_ops->progress(c->tp, 0, ev, FT__EV_MAX);
			if (nev != 0)
				return nev;
			now = ft__now_ns();
		} while (now < end);
	}
	return c->tp_ops->progress(c->tp, timeout, ev, FT__EV_MAX);
}

/* Runs a collective whose first sends are queued; 0 or the error it failed with. */
static int coll_run(struct coll *co)
{
	struct ft_comm *c = co->c;
	struct ft_tp_event ev[FT__EV_MAX];
	int64_t idle_deadline = 0;
	int tick = -1, rc;

	/* With a detector, wake now and then to look at its flag: a hung peer
	 * breaks no link. */
	if (c->det != NULL)
		tick = c->cfg.heartbeat_ms < 50 ? c->cfg.heartbeat_ms : 50;
	if (c->cfg.op_timeout_ms > 0)
		idle_deadline = ft__now_ms() + c->cfg.op_timeout_ms;
	while (!coll_done(co)) {
		int timeout = tick, nev;
		if ((rc = post_recvs(co)) != 0)
			return rc;
		if (idle_deadline && (timeout < 0 || ft__ms_left(idle_deadline) < timeout))
			timeout = ft__ms_left(idle_deadline);
		if (co->send_err && (timeout < 0 || ft__ms_left(co->grace_deadline) < timeout))
			timeout = ft__ms_left(co->grace_deadline);
		uint64_t t0 = ft__now_ns();
		nev = wait_events(c, timeout, ev);
		c->stats.wait_ms += (double)(ft__now_ns() - t0) / 1e6;
		if (nev < 0)
			return nev;
		if (c->det != NULL && ft__det_pending(c->det))
			return -FT_EABORTED;
		if (nev == 0) {
			if (co->send_err && ft__ms_left(co->grace_deadline) == 0) {
				co->fail_link = 2;
				return co->send_err;
			}
			if (idle_deadline && ft__ms_left(idle_deadline) == 0) {
				ft__error("collective %llu made no progress for %d ms",
					  (unsigned long long)co->tmpl.op_seq, c->cfg.op_timeout_ms);
				return -FT_ETIMEDOUT;
			}
			continue;
		}
		if (idle_deadline)
			idle_deadline = ft__now_ms() + c->cfg.op_timeout_ms;
		for (int i = 0; i < nev; i++) {
			switch (ev[i].type) {
			case FT_TP_SEND_DONE:
				co->send_done++;
				break;
			case FT_TP_RECV_DONE:
				co->fail_link = 1;
				if (ev[i].status != 0)
					return ev[i].status;
				if ((rc = on_recv(co)) != 0)
					return rc;
				co->fail_link = 0;
				break;
			case FT_TP_LINK_ERROR:
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

static void coll_setup(struct coll *co, struct ft_comm *c, enum ft_coll_kind kind, size_t count,
		       size_t es, uint8_t dtype, uint8_t op, int root)
{
	memset(co, 0, sizeof(*co));
	co->c = c;
	co->kind = kind;
	co->n = c->size;
	co->r = c->rank;
	co->count = count;
	co->es = es;
	co->seg_elems = c->cfg.segment_bytes / es;
	co->tmpl.magic = FT_FRAME_MAGIC;
	co->tmpl.type = FT_FRAME_DATA;
	co->tmpl.kind = (uint8_t)kind;
	co->tmpl.dtype = dtype;
	co->tmpl.op = op;
	co->tmpl.generation = c->generation;
	co->tmpl.op_seq = c->op_seq;
	co->tmpl.count = count;
	co->tmpl.root = root;
	co->nfree = c->cfg.pipeline_depth;
	for (int i = 0; i < co->nfree; i++)
		co->free_slots[i] = i;
}

/*
 * Commit steps: under a recovering policy with three ranks or more, a rank
 * returns only once it knows that every rank holds the whole result (n-1
 * empty frames around the ring after the data). Without them one survivor
 * could return op k while another still lacks part of it, and no restart
 * among the survivors could give them the same result. With them, a
 * failure leaves either every survivor holding the result (they all return
 * it, from the old view) or none having returned it (they all run the op
 * again on the new view): the first op the survivors lack, which the
 * detector publishes, is the same on all of them. Two ranks need no commit:
 * one survivor cannot disagree with itself.
 */
static bool want_commit(const struct ft_comm *c)
{
	return c->det != NULL && c->size >= 3;
}

/* What the caller asked for; it outlives a recovery. */
struct call {
	enum ft_coll_kind kind;
	const void *src;        /* input: the caller's, or the kept copy of an in-place one */
	void *dst;
	size_t count, es;
	enum ft_dtype dtype;
	enum ft_op op;
	int root;               /* broadcast: original rank of the root */
	bool in_place;
};

/* One attempt at an allreduce (or barrier) on the current view. */
static int attempt_allreduce(struct ft_comm *c, const struct call *k, struct coll *co)
{
	int rc;

	coll_setup(co, c, k->kind, k->count, k->es, (uint8_t)k->dtype, (uint8_t)k->op, -1);
	co->dst = k->dst;
	co->in_place = k->in_place;
	co->src = k->in_place ? k->dst : k->src;
	co->op = k->op;
	ft__reduce_lookup(k->dtype, k->op, &co->combine, &co->accum);
	if (c->size == 1) {
		if (!k->in_place && k->count > 0)
			memcpy(k->dst, k->src, k->count * k->es);
		return c->det != NULL ? ft__det_have_result(c->det, co->tmpl.op_seq) : 0;
	}
	co->data_last = (uint32_t)(2 * co->n - 3);
	co->last_step = co->data_last + (want_commit(c) ? (uint32_t)(co->n - 1) : 0);
	for (uint32_t g = 0; g <= co->data_last; g++)
		co->data_total += chunk_nseg(co, recv_chunk(co, g));
	co->recv_total = co->data_total + (co->last_step - co->data_last);
	rc = inject(co, FT__PHASE_BETWEEN, 0, 0);
	for (uint32_t s = 0; rc == 0 && s < chunk_nseg(co, send_chunk(co, 0)); s++)
		rc = post_send(co, 0, s, co->src);
	return rc == 0 ? coll_run(co) : rc;
}

/* One attempt at a broadcast on the current view; the root is still a member. */
static int attempt_broadcast(struct ft_comm *c, const struct call *k, struct coll *co)
{
	int root = 0, rc;

	for (int i = 0; i < c->size; i++)
		if (c->members[i] == k->root)
			root = i;
	coll_setup(co, c, FT_COLL_BROADCAST, k->count, 1, FT_UINT8, 0, k->root);
	co->dst = k->dst;
	co->src = k->dst;
	if (c->size == 1)
		return c->det != NULL ? ft__det_have_result(c->det, co->tmpl.op_seq) : 0;
	co->root_pos = mod(c->rank - root, c->size);
	co->data_last = 1;
	co->last_step = want_commit(c) ? 2 : 1;
	rc = inject(co, FT__PHASE_BETWEEN, 0, 0);
	if (rc != 0)
		return rc;
	if (co->root_pos == 0) {
		/* The root sends everything and waits for the last rank's empty frame. */
		co->rg = 1;
		co->recv_total = 1;
		for (uint32_t s = 0; rc == 0 && s < chunk_nseg(co, 0); s++)
			rc = post_send(co, 0, s, k->dst);
	} else {
		co->data_total = chunk_nseg(co, 0);
		co->recv_total = co->data_total + (co->last_step > co->data_last ? 1 : 0);
	}
	return rc == 0 ? coll_run(co) : rc;
}

static bool is_member(const struct ft_comm *c, int orig)
{
	for (int i = 0; i < c->size; i++)
		if (c->members[i] == orig)
			return true;
	return false;
}

static bool recoverable(struct ft_comm *c, int rc)
{
	return c->det != NULL &&
	       (rc == -FT_EPEERFAILED || rc == -FT_EABORTED || ft__det_pending(c->det));
}

/*
 * After a failure: waits for the detector's next view. Returns 1 when this
 * rank's result of op seq stands (every survivor holds it: the view starts
 * after it), 0 once the next view is adopted and op seq must run on it, or
 * an error (-FT_EEXCLUDED when this rank was left out). A link that failed
 * with no failure known is declared after a while (suspect: its peer).
 */
static int recover(struct ft_comm *c, uint64_t seq, int suspect)
{
	int wait_ms = 2 * c->cfg.detect_timeout_ms + c->cfg.connect_timeout_ms;
	uint32_t after = c->generation;
	struct ft__view v = {0};
	int rc;

	for (;;) {
		rc = ft__det_await(c->det, after,
				   suspect >= 0 ? 2 * c->cfg.detect_timeout_ms : wait_ms, &v);
		if (rc == -FT_ETIMEDOUT && suspect >= 0) {
			ft__warn("link to rank %d failed with no failure known: declaring it", suspect);
			ft__det_suspect(c->det, suspect);
			suspect = -1;
			continue;
		}
		if (rc != 0)
			return rc;
		if (seq < v.first_op) {
			ft__view_free(&v);
			return 1;
		}
		if (seq > v.first_op) {
			ft__error("generation %u starts at op %llu, but this rank is at op %llu",
				  v.generation, (unsigned long long)v.first_op, (unsigned long long)seq);
			ft__view_free(&v);
			return -FT_EPROTO;
		}
		after = v.generation;
		rc = ft__comm_adopt(c, &v);
		if (rc == 0 || rc == -FT_EEXCLUDED || rc == -FT_ENOMEM || rc == -FT_ECORRUPT)
			return rc;
		/* a member of the view is gone already: wait for the one after it */
	}
}

/* Ends a collective: on failure tears the ring down (the neighbours learn why). */
static int coll_finish(struct ft_comm *c, int rc, struct ft_op_info *info, uint64_t t0,
		       int start_size, int contributors, double recovery_ms)
{
	uint64_t seq = c->op_seq++;

	if (rc != 0) {
		ft__comm_abort_ring(c, rc, seq);
		if (c->det != NULL)
			ft__det_have_result(c->det, seq); /* an error is this op's outcome */
		if (rc == -FT_EPEERFAILED || rc == -FT_ETIMEDOUT || rc == -FT_EEXCLUDED ||
		    rc == -FT_EABORTED) {
			c->broken = rc == -FT_EABORTED ? -FT_EPEERFAILED : rc;
			c->stats.failures++;
			rc = c->broken;
		}
	} else {
		c->stats.ops++;
	}
	if (start_size > c->size)
		c->stats.failures += (uint64_t)(start_size - c->size);
	if (recovery_ms > 0)
		c->stats.last_recovery_ms = recovery_ms;
	if (info != NULL) {
		info->op_seq = seq;
		info->generation = c->generation;
		info->contributors = contributors;
		info->failed = start_size > c->size ? start_size - c->size : 0;
		info->recovery_ms = recovery_ms;
		info->elapsed_ms = (double)(ft__now_ns() - t0) / 1e6;
	}
	return rc;
}

/* Keeps the input of an in-place call, so that a restart can use it. */
static int keep_input(struct ft_comm *c, struct call *k)
{
	size_t bytes = k->count * k->es;

	if (c->det == NULL || !k->in_place || bytes == 0 || c->size == 1)
		return 0;
	if (c->backup_bytes < bytes) {
		void *p = realloc(c->backup, bytes);
		if (p == NULL)
			return -FT_ENOMEM;
		c->backup = p;
		c->backup_bytes = bytes;
	}
	memcpy(c->backup, k->dst, bytes);
	k->src = c->backup;
	k->in_place = false;
	return 0;
}

/*
 * Runs a collective to its end: on the current view, and under a recovering
 * policy again on each view that follows a failure, until it completes,
 * the error is not a failure, or this rank is left out.
 */
static int run_call(struct ft_comm *c, struct call *k, struct ft_op_info *info)
{
	uint64_t t0 = ft__now_ns(), seq = c->op_seq;
	double rec_ms = 0;
	int start_size = c->size, contributors = c->size, rc, r;
	struct coll co;

	if (c->broken)
		return c->broken;
	if (c->det != NULL && ft__det_pending(c->det)) {
		/* a failure seen between calls: this op runs on the next view */
		rc = recover(c, seq, -1);
		if (rc == 1)
			rc = -FT_EPROTO;
		if (rc != 0)
			return coll_finish(c, rc, info, t0, start_size, 0, 0);
		c->stats.recoveries++;
		rec_ms = (double)(ft__now_ns() - t0) / 1e6;
	}
	if (k->kind == FT_COLL_BROADCAST && !is_member(c, k->root))
		return coll_finish(c, -FT_EROOTFAILED, info, t0, start_size, 0, rec_ms);
	if ((rc = keep_input(c, k)) != 0)
		return coll_finish(c, rc, info, t0, start_size, 0, rec_ms);
	for (;;) {
		memset(&co, 0, sizeof(co));
		rc = ft__comm_connect_ring(c);
		if (rc == 0)
			rc = k->kind == FT_COLL_BROADCAST ? attempt_broadcast(c, k, &co)
							  : attempt_allreduce(c, k, &co);
		contributors = c->size;
		if (rc == 0 || !recoverable(c, rc))
			break;
		uint64_t t1 = ft__now_ns();
		int suspect = -1;
		if (rc == -FT_EPEERFAILED && co.fail_link != 0 && c->size > 1)
			suspect = c->members[mod(c->rank + (co.fail_link == 1 ? -1 : 1), c->size)];
		ft__comm_abort_ring(c, -FT_EABORTED, seq);
		r = recover(c, seq, suspect);
		rec_ms += (double)(ft__now_ns() - t1) / 1e6;
		if (r < 0) {
			rc = r;
			break;
		}
		c->stats.recoveries++;
		if (r == 1) {
			rc = 0; /* every survivor holds this result already */
			break;
		}
		if (k->kind == FT_COLL_BROADCAST && !is_member(c, k->root)) {
			rc = -FT_EROOTFAILED;
			break;
		}
		ft__info("op %llu restarts on generation %u with %d ranks",
			 (unsigned long long)seq, c->generation, c->size);
	}
	return coll_finish(c, rc, info, t0, start_size, contributors, rec_ms);
}

/*
 * Bad arguments: return the error, but still take part in the ring with a
 * collective of its own kind, so that ranks which called correctly meet a
 * header that disagrees (FT_EMISMATCH) instead of waiting for this rank,
 * and ranks that all erred the same way agree and stay in step.
 */
static int local_error(struct ft_comm *c, int err)
{
	struct call k = {.kind = FT_COLL_INVALID, .es = 1, .dtype = FT_UINT8, .op = FT_SUM};

	if (ft__comm_check(c) == 0 && !c->broken)
		run_call(c, &k, NULL);
	return err;
}

FT__EXPORT int ft_allreduce(struct ft_comm *c, const void *sendbuf, void *recvbuf, size_t count,
			    enum ft_dtype dtype, enum ft_op op, struct ft_op_info *info)
{
	int rc = ft__comm_check(c);
	size_t es = ft_dtype_size(dtype);
	struct call k = {.kind = FT_COLL_ALLREDUCE, .src = sendbuf, .dst = recvbuf,
			 .count = count, .es = es, .dtype = dtype, .op = op};

	if (rc != 0)
		return rc;
	if (es == 0 || (unsigned)op >= FT_OP_COUNT || count > SIZE_MAX / 8 ||
	    (count > 0 && (recvbuf == NULL || sendbuf == NULL)))
		return local_error(c, -FT_EINVAL);
	k.in_place = sendbuf == FT_IN_PLACE || sendbuf == recvbuf;
	return run_call(c, &k, info);
}

FT__EXPORT int ft_barrier(struct ft_comm *c)
{
	struct call k = {.kind = FT_COLL_BARRIER, .es = 1, .dtype = FT_UINT8, .op = FT_SUM};
	int rc = ft__comm_check(c);

	return rc != 0 ? rc : run_call(c, &k, NULL);
}

FT__EXPORT int ft_broadcast(struct ft_comm *c, void *buf, size_t bytes, int root,
			    struct ft_op_info *info)
{
	struct call k = {.kind = FT_COLL_BROADCAST, .dst = buf, .count = bytes, .es = 1,
			 .dtype = FT_UINT8};
	int rc = ft__comm_check(c);

	if (rc != 0)
		return rc;
	if (root < 0 || root >= c->size || (bytes > 0 && buf == NULL) || bytes > SIZE_MAX / 2)
		return local_error(c, -FT_EINVAL);
	k.root = c->members[root];
	return run_call(c, &k, info);
}
