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
	uint32_t last_step;     /* steps are 0 .. last_step */

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
	seg_range(co, send_chunk(co, g), k, &off, &len);
	if (co->kind == FT_COLL_BROADCAST && g == 1)
		off = len = 0;
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

		seg_range(co, chunk, co->rk, &off, &len);
		if (co->kind == FT_COLL_BROADCAST && co->rg == 1)
			off = len = 0;
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
		if (++co->rk == chunk_nseg(co, chunk)) {
			co->rk = 0;
			co->rg++;
		}
	}
	return 0;
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
	seg_range(co, recv_chunk(co, e.g), e.k, &off, &len);
	if (co->kind == FT_COLL_BROADCAST) {
		c->stats.bytes_received += e.g == 0 ? len : 0;
		if (e.g == 0 && co->root_pos != co->n - 1)
			rc = post_send(co, 0, e.k, co->dst);
		else if (e.g == 0 && co->recv_done == co->recv_total)
			rc = post_send(co, 1, 0, co->dst);
		return rc;
	}
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
	if (e.g < co->last_step)
		rc = post_send(co, e.g + 1, e.k, co->dst);
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
	int rc;

	if (c->cfg.op_timeout_ms > 0)
		idle_deadline = ft__now_ms() + c->cfg.op_timeout_ms;
	while (!coll_done(co)) {
		int timeout = -1, nev;
		if ((rc = post_recvs(co)) != 0)
			return rc;
		if (idle_deadline)
			timeout = ft__ms_left(idle_deadline);
		if (co->send_err && (timeout < 0 || ft__ms_left(co->grace_deadline) < timeout))
			timeout = ft__ms_left(co->grace_deadline);
		uint64_t t0 = ft__now_ns();
		nev = wait_events(c, timeout, ev);
		c->stats.wait_ms += (double)(ft__now_ns() - t0) / 1e6;
		if (nev < 0)
			return nev;
		if (nev == 0) {
			if (co->send_err && ft__ms_left(co->grace_deadline) == 0)
				return co->send_err;
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
				if (ev[i].status != 0)
					return ev[i].status;
				if ((rc = on_recv(co)) != 0)
					return rc;
				break;
			case FT_TP_LINK_ERROR:
				/* A link that broke after carrying all this collective's
				 * frames (a neighbour finished and left) fails the next
				 * collective, not this one: the transport keeps the error. */
				if (ev[i].link == c->recv_link && co->recv_done < co->recv_total)
					return ev[i].status;
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

/* Ends a collective: on failure tears the ring down (the neighbours learn why). */
static int coll_finish(struct ft_comm *c, int rc, struct ft_op_info *info, uint64_t t0)
{
	uint64_t seq = c->op_seq++;

	if (rc != 0) {
		ft__comm_abort_ring(c, rc, seq);
		if (rc == -FT_EPEERFAILED || rc == -FT_ETIMEDOUT) {
			c->broken = rc;
			c->stats.failures++;
		}
	} else {
		c->stats.ops++;
	}
	if (info != NULL) {
		info->op_seq = seq;
		info->generation = c->generation;
		info->contributors = c->size;
		info->failed = 0;
		info->recovery_ms = 0;
		info->elapsed_ms = (double)(ft__now_ns() - t0) / 1e6;
	}
	return rc;
}

/* Checks that c can run a collective now (links rebuilt after an abort). */
static int coll_begin(struct ft_comm *c)
{
	int rc = ft__comm_check(c);

	if (rc != 0)
		return rc;
	if (c->broken)
		return c->broken;
	return ft__comm_connect_ring(c);
}

static int ring_allreduce(struct ft_comm *c, enum ft_coll_kind kind, const void *sendbuf,
			  void *recvbuf, size_t count, enum ft_dtype dtype, enum ft_op op,
			  struct ft_op_info *info)
{
	uint64_t t0 = ft__now_ns();
	size_t es = ft_dtype_size(dtype);
	struct coll co;
	int rc;

	rc = coll_begin(c);
	if (rc != 0)
		return rc;
	coll_setup(&co, c, kind, count, es, (uint8_t)dtype, (uint8_t)op, -1);
	co.dst = recvbuf;
	co.in_place = sendbuf == FT_IN_PLACE || sendbuf == recvbuf;
	co.src = co.in_place ? recvbuf : sendbuf;
	co.op = op;
	ft__reduce_lookup(dtype, op, &co.combine, &co.accum);
	if (c->size == 1) {
		if (!co.in_place && count > 0)
			memcpy(recvbuf, sendbuf, count * es);
		return coll_finish(c, 0, info, t0);
	}
	co.last_step = (uint32_t)(2 * co.n - 3);
	for (uint32_t g = 0; g <= co.last_step; g++)
		co.recv_total += chunk_nseg(&co, recv_chunk(&co, g));
	rc = inject(&co, FT__PHASE_BETWEEN, 0, 0);
	for (uint32_t k = 0; rc == 0 && k < chunk_nseg(&co, send_chunk(&co, 0)); k++)
		rc = post_send(&co, 0, k, co.src);
	if (rc == 0)
		rc = coll_run(&co);
	return coll_finish(c, rc, info, t0);
}

/*
 * Bad arguments: return the error, but still take part in the ring with a
 * collective of its own kind, so that ranks which called correctly meet a
 * header that disagrees (FT_EMISMATCH) instead of waiting for this rank,
 * and ranks that all erred the same way agree and stay in step.
 */
static int local_error(struct ft_comm *c, int err)
{
	if (ft__comm_check(c) == 0 && !c->broken)
		ring_allreduce(c, FT_COLL_INVALID, NULL, NULL, 0, FT_UINT8, FT_SUM, NULL);
	return err;
}

FT__EXPORT int ft_allreduce(struct ft_comm *c, const void *sendbuf, void *recvbuf, size_t count,
			    enum ft_dtype dtype, enum ft_op op, struct ft_op_info *info)
{
	int rc = ft__comm_check(c);
	size_t es = ft_dtype_size(dtype);

	if (rc != 0)
		return rc;
	if (es == 0 || (unsigned)op >= FT_OP_COUNT || count > SIZE_MAX / 8 ||
	    (count > 0 && (recvbuf == NULL || sendbuf == NULL)))
		return local_error(c, -FT_EINVAL);
	return ring_allreduce(c, FT_COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, info);
}

FT__EXPORT int ft_barrier(struct ft_comm *c)
{
	int rc = ft__comm_check(c);

	if (rc != 0)
		return rc;
	return ring_allreduce(c, FT_COLL_BARRIER, NULL, NULL, 0, FT_UINT8, FT_SUM, NULL);
}

FT__EXPORT int ft_broadcast(struct ft_comm *c, void *buf, size_t bytes, int root,
			    struct ft_op_info *info)
{
	uint64_t t0 = ft__now_ns();
	struct coll co;
	int rc = ft__comm_check(c);

	if (rc != 0)
		return rc;
	if (root < 0 || root >= c->size || (bytes > 0 && buf == NULL) || bytes > SIZE_MAX / 2)
		return local_error(c, -FT_EINVAL);
	rc = coll_begin(c);
	if (rc != 0)
		return rc;
	coll_setup(&co, c, FT_COLL_BROADCAST, bytes, 1, FT_UINT8, 0, c->members[root]);
	co.dst = buf;
	co.src = buf;
	if (c->size == 1)
		return coll_finish(c, 0, info, t0);
	co.root_pos = mod(c->rank - root, c->size);
	co.last_step = 1;
	rc = inject(&co, FT__PHASE_BETWEEN, 0, 0);
	if (rc != 0) {
		/* the fault fired */
	} else if (co.root_pos == 0) {
		/* The root sends everything and waits for the last rank's empty frame. */
		co.rg = 1;
		co.recv_total = 1;
		for (uint32_t k = 0; rc == 0 && k < chunk_nseg(&co, 0); k++)
			rc = post_send(&co, 0, k, buf);
	} else {
		co.recv_total = chunk_nseg(&co, 0);
	}
	if (rc == 0)
		rc = coll_run(&co);
	return coll_finish(c, rc, info, t0);
}
