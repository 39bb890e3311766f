/* rdouble.c: recursive doubling and halving: allreduce and barrier in log2(n) exchanges where the ring's 2(n-1) steps cost more than its pipeline saves. */
/* SPDX-License-Identifier: MIT */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "crc32c.h"
#include "engine.h"

/*
 * Butterflies on the n dense ranks of the current view, this one at r.
 * pof2 is the largest power of two not above n, rem = n - pof2, and
 * k = log2(pof2). Frames carry their step g:
 *
 *   g = 0 (the fold): the first 2 rem ranks pair up; even r sends its
 *     input to r+1, which combines the two (r-1's first) and stands for
 *     both; even r then only waits for the result;
 *   exchanges: the pof2 remaining ranks, at virtual ranks v (r/2 for the
 *     odd ranks below 2 rem, r - rem above), swap data with v xor mask;
 *   g = last (the unfold): odd r below 2 rem sends the result to r-1.
 *
 * Recursive doubling (FT__ALGO_RD), for small ops: k exchanges, g = 1 .. k,
 * mask 2^(g-1), each of the whole partial; each side computes lower v's
 * partial op higher v's: the same operands in the same order on both
 * sides, so the same bits (no commutativity is assumed, not even of a
 * float sum's NaN). last = k+1.
 *
 * Recursive halving, then doubling (FT__ALGO_RH, Rabenseifner's), for
 * medium ones: the vector is cut in pof2 blocks. Halving, g = 1 .. k, mask
 * pof2 >> g: of the blocks this rank still reduces, it sends the half its
 * partner keeps and reduces the half it keeps (lower v's op higher v's),
 * so after k steps it alone holds block v reduced over every rank. Doubling,
 * g = k+1 .. 2k, mask 2^(g-k-1): it sends the blocks it holds and gets the
 * partner's, the halving's exchanges in reverse. Each rank sends about
 * 2 (pof2-1)/pof2 of the vector, as on the ring, in 2k steps instead of
 * 2(n-1). Every block is reduced on one rank and copied to the others: the
 * same bits everywhere. last = 2k+1. A reduce-scatter runs the halving
 * alone, an allgather the doubling alone (mask 2^(g-1), from its own
 * block out), both on a power of two of ranks, the blocks the caller's;
 * a broadcast runs a binomial tree over the same pairs (tree_peer).
 *
 * Each rank sends one frame per step at most, to one peer. Under RD every
 * directed pair of ranks carries one frame of the op at most; under RH two
 * (a halving and its doubling), in that order on the link, whose receives
 * complete in order. So every receive is posted at the start, on its own
 * link and buffer: a peer may run ahead by any number of steps, and a
 * frame that disagrees is judged at once, whichever step it belongs to.
 * A doubling's blocks are received straight into the partial they belong
 * to: the partner sends them only after it got this rank's halving frame
 * of the same blocks, the last use of what was there.
 *
 * The ring's neighbours as judges. Ranks called with different arguments
 * (or FTCC_ALGORITHM) may choose different algorithms, and a rank on the
 * ring waits on its left neighbour alone, which may never send to it here.
 * So a rank whose right neighbour gets no frame of this op from it sends
 * that neighbour an empty probe (step last+1) at the start, and every rank
 * posts the receive of what its left neighbour sends it (a probe or a
 * step's frame). A rank on the ring sends its right neighbour a frame at
 * once; when that neighbour runs this algorithm the frame meets a posted
 * receive it disagrees with (algorithm, or count), FT_EMISMATCH; its abort
 * frames reach every link it holds, and each rank that fails passes them
 * on to all of its own, so every rank returns the error, none hangs. (The
 * butterflies pair the same ranks, so their probes are the same too; a
 * tree's are its own.)
 *
 * Failures. The input is never overwritten before the result is whole
 * (partials live in c->rd_buf), and the policy's input_save_at saves an
 * in-place input whole at the start (a memcpy of a small buffer) for a
 * rerun after the result was claimed (a shrink to one rank). A rank
 * claims the result (result_held) once it holds it, as on the ring; the
 * shrink policy's holders hand it over (recover.c).
 */

struct shape {
	int pof2, rem;
	uint32_t k;
};

static struct shape shape_of(int n)
{
	struct shape s = {.pof2 = 1};

	while (s.pof2 * 2 <= n) {
		s.pof2 *= 2;
		s.k++;
	}
	s.rem = n - s.pof2;
	return s;
}

/* The exchanges a call runs: recursive doubling; halving then doubling (an
 * allreduce); halving alone (a reduce-scatter); doubling of blocks alone
 * (an allgather). The last three are FT__ALGO_RH on the wire (the frame's
 * kind tells them apart). */
enum pattern { PAT_RD, PAT_RH, PAT_HALVE, PAT_GATHER, PAT_TREE };

static enum pattern pattern_of(uint16_t algo, uint8_t kind)
{
	if (algo == FT__ALGO_RD)
		return PAT_RD;
	if (algo == FT__ALGO_TREE)
		return PAT_TREE;
	return kind == FT__COLL_REDUCE_SCATTER ? PAT_HALVE
	       : kind == FT__COLL_ALLGATHER  ? PAT_GATHER
					     : PAT_RH;
}

/* Whether the pattern's partial is the caller's buffer itself (it only
 * moves data there, reducing nothing): no partial slots. */
static bool in_callers_buffer(enum pattern pat)
{
	return pat == PAT_GATHER || pat == PAT_TREE;
}

/* The unfold's step (a tree's last ack); the probe's is the next. */
static uint32_t last_step(enum pattern pat, uint32_t k)
{
	return pat == PAT_RH ? 2 * k + 1 : pat == PAT_TREE ? 2 * k + 3 : k + 1;
}

/* A virtual rank's dense rank, and the other way round (-1: a rank folded
 * out). */
static int dense_of(const struct shape *s, int v)
{
	return v < s->rem ? 2 * v + 1 : v + s->rem;
}

static int virtual_of(const struct shape *s, int r)
{
	return r < 2 * s->rem ? (r % 2 == 1 ? r / 2 : -1) : r - s->rem;
}

/*
 * A broadcast's binomial tree from dense rank root (PAT_TREE), on the same
 * pairs: a root folded out first hands the data to the rank that stands
 * for it (step 0); at step g = 1 .. k, mask pof2 >> g, every virtual rank
 * whose distance from the root's (v xor vroot) is a multiple of 2 mask
 * holds the data and sends it to v xor mask; then each odd rank below
 * 2 rem hands it to the even one it stood for (unless that is the root).
 * Then the same edges carry empty acks back up, in reverse order (steps
 * k+2 .. 2k+3): a rank acks its parent once its children acked, so the
 * root returns only when every rank holds the data, as on the ring, and a
 * rank that found the call mismatched aborts instead of acking.
 */
static int tree_peer(int n, int r, int root, uint32_t g, bool send)
{
	struct shape s = shape_of(n);
	int vroot = root < 2 * s.rem ? root / 2 : root - s.rem, v, m, rel;

	if (g >= s.k + 2 && g <= 2 * s.k + 3) /* the acks: a data step backwards */
		return tree_peer(n, r, root, g == 2 * s.k + 3 ? 0 : 2 * s.k + 3 - g, !send);

	if (g == 0) {
		bool folded = root < 2 * s.rem && root % 2 == 0;
		if (folded && send && r == root)
			return root + 1;
		if (folded && !send && r == root + 1)
			return root;
		return -1;
	}
	if (g == s.k + 1) {
		/* (a root folded out holds the data already) */
		if (r >= 2 * s.rem || (r % 2 == 0 && r == root) || (r % 2 == 1 && r - 1 == root))
			return -1;
		if (send == (r % 2 == 1))
			return r % 2 == 1 ? r - 1 : r + 1;
		return -1;
	}
	if (g > s.k || (v = virtual_of(&s, r)) < 0)
		return -1;
	m = s.pof2 >> g;
	rel = v ^ vroot;
	if (send ? (rel & (2 * m - 1)) == 0 : (rel & (2 * m - 1)) == m)
		return dense_of(&s, v ^ m);
	return -1;
}

/* The step's peer this rank sends to (send) or receives from, or -1 (root:
 * a broadcast's, dense). */
static int step_peer(int n, int r, enum pattern pat, int root, uint32_t g, bool send)
{
	struct shape s = shape_of(n);
	uint32_t last = last_step(pat, s.k);
	int v, mask;

	if (pat == PAT_TREE)
		return tree_peer(n, r, root, g, send);
	if (g == 0 || g == last) {
		bool fold_out = g != 0;
		if (r >= 2 * s.rem)
			return -1;
		/* fold: even sends, odd receives; unfold the other way round */
		if ((r % 2 == 0) == (send != fold_out))
			return r % 2 == 0 ? r + 1 : r - 1;
		return -1;
	}
	if (g > last || (v = virtual_of(&s, r)) < 0)
		return -1;
	if (pat == PAT_RD || pat == PAT_GATHER)
		mask = 1 << (g - 1);
	else if (pat == PAT_HALVE || g <= s.k)
		mask = s.pof2 >> g;
	else
		mask = 1 << (g - s.k - 1);
	return dense_of(&s, v ^ mask);
}

/* Whether dense rank r sends dense rank p a frame of the op. */
static bool sends_to(int n, int r, int p, enum pattern pat, int root)
{
	for (uint32_t g = 0; g <= last_step(pat, shape_of(n).k); g++)
		if (step_peer(n, r, pat, root, g, true) == p)
			return true;
	return false;
}

uint16_t ft__rd_algo(const struct ft_comm *c, const struct ft__call *k)
{
	size_t bytes = k->count * k->es;
	struct shape s = shape_of(c->size);
	bool blocks = k->kind == FT__COLL_REDUCE_SCATTER || k->kind == FT__COLL_ALLGATHER;

	/* (a tree's 2 log2(n) + 6 steps within FT__RD_STEPS: 2^17 ranks) */
	if (s.k > 16)
		return FT__ALGO_RING;

	/* a small broadcast: the tree takes log2(n) steps for the ring's n-1,
	 * and the ring's pipeline has nothing to overlap; not under a detector
	 * (its commit steps, and a hand-over's span, are the ring's) */
	if (k->kind == FT__COLL_BROADCAST)
		return c->tp_env.algorithm != FT__TP_ALGO_RING && c->cfg.policy != FT_POLICY_REJOIN &&
			       c->det == NULL && k->span == 0 && c->size >= 2 &&
			       (c->size == 2 || c->mesh_to != NULL) &&
			       bytes <= c->cfg.segment_bytes && bytes <= FT__TREE_AUTO_MAX
			       ? FT__ALGO_TREE
			       : FT__ALGO_RING;
	if ((k->kind != FT__COLL_ALLREDUCE && k->kind != FT__COLL_BARRIER && !blocks) ||
	    (k->blk != NULL) != blocks || c->size < 2 || c->tp_env.algorithm == FT__TP_ALGO_RING ||
	    c->cfg.policy == FT_POLICY_REJOIN)
		return FT__ALGO_RING;
	if (c->size > 2 && c->mesh_to == NULL)
		return FT__ALGO_RING;
	/* no commit steps here: a shrink's survivors of three or more agree on
	 * a larger op only through the ring's (policy_shrink.c) */
	if (c->det != NULL && c->size >= 3 && !ft__small_op(k))
		return FT__ALGO_RING;
	/* reduce-scatter and allgather: the halving alone, or the doubling
	 * alone, on a power of two of ranks (a fold would need a layout of
	 * its own) holding the caller's blocks in order (blocks.c) */
	if (blocks) {
		if (k->blk->packed || s.rem != 0 || c->size < 4 ||
		    c->tp_env.algorithm == FT__TP_ALGO_RD)
			return FT__ALGO_RING;
		if (c->tp_env.algorithm == FT__TP_ALGO_RH)
			return bytes <= FT__RH_MAX ? FT__ALGO_RH : FT__ALGO_RING;
		return bytes <= FT__BLK_AUTO_SQ / (uint64_t)c->size / (uint64_t)c->size
			       ? FT__ALGO_RH
			       : FT__ALGO_RING;
	}
	if (k->kind == FT__COLL_BARRIER)
		return FT__ALGO_RD;
	if (c->tp_env.algorithm == FT__TP_ALGO_RD)
		return bytes <= c->cfg.segment_bytes ? FT__ALGO_RD : FT__ALGO_RING;
	if (c->tp_env.algorithm == FT__TP_ALGO_RH)
		return bytes <= FT__RH_MAX ? FT__ALGO_RH : FT__ALGO_RING;
	/* each rank sends log2(n) whole copies against the ring's two: it pays
	 * while that volume is small */
	if (bytes <= c->cfg.segment_bytes && bytes * s.k <= FT__RD_AUTO_VOLUME)
		return FT__ALGO_RD;
	/* halving and doubling move what the ring moves in 2 log2(n) steps
	 * instead of 2(n-1), but without the ring's pipeline: each step's
	 * transfer, then its reduction; and a fold adds two whole copies on
	 * the critical path */
	if (c->size >= 3 && bytes <= (s.rem == 0 ? FT__RH_AUTO_SQ : FT__RH_AUTO_FOLD_SQ) /
					     (uint64_t)c->size / (uint64_t)c->size)
		return FT__ALGO_RH;
	return FT__ALGO_RING;
}

void ft__rd_peers(const struct ft_comm *c, int *to, int *nto, int *from, int *nfrom)
{
	uint32_t last = last_step(PAT_RD, shape_of(c->size).k);

	for (uint32_t g = 0; g <= last; g++) {
		int p = step_peer(c->size, c->rank, PAT_RD, 0, g, true);
		int q = step_peer(c->size, c->rank, PAT_RD, 0, g, false);
		if (p >= 0)
			to[(*nto)++] = c->members[p];
		if (q >= 0)
			from[(*nfrom)++] = c->members[q];
	}
}

/* What a step's received bytes do. */
enum { HOW_NONE, HOW_REDUCE, HOW_GATHER, HOW_TAKE };

struct rd_step {
	int to, from;           /* dense peers, -1 none */
	size_t off, len;        /* sent: [off, off + len) of this rank's partial */
	size_t roff, rlen;      /* received: for [roff, roff + rlen) */
	uint8_t how;
	char *rbuf;             /* where the received bytes land */
};

struct rd {
	struct ft__coll *co;
	uint16_t algo;
	enum pattern pat;
	int root;               /* a broadcast's, dense */
	size_t bytes, slot;
	size_t res_off, res_len; /* what of the partial is this rank's result */
	uint32_t k;             /* exchanges of recursive doubling; halvings */
	uint32_t last;          /* the unfold's step; the probe's is last+1 */
	uint32_t g;             /* the step to run next */
	bool g_sent;            /* its frame is out */
	struct rd_step st[FT__RD_STEPS];
	bool got[FT__RD_STEPS];  /* the step's frame is in */
	bool out[FT__RD_STEPS];  /* the step's frame of ours left the process */
	unsigned sends, sent;
	char *cur;              /* this rank's partial (first its input) */
	int next;               /* partial slot computed into next: 0 or 1 */
	bool held;              /* the result is in the caller's buffer, claimed */
	int send_err;           /* a link to a peer broke with a frame of ours to go ... */
	int send_peer;
	int64_t grace_deadline; /* ... its cause (an abort frame) may still come until then */
};

/* Byte offset of block i of pof2 (the first count % pof2 one element longer). */
static size_t block_at(size_t count, size_t es, int pof2, int i)
{
	size_t q = count / (size_t)pof2, m = count % (size_t)pof2;

	return ((size_t)i * q + ((size_t)i < m ? (size_t)i : m)) * es;
}

/* Fills x->st for this rank: peers, the bytes each step moves, and what the
 * received ones do (recv buffers apart), and the result's place. */
static void plan(struct rd *x, int n, int r, size_t count, size_t es)
{
	struct shape s = shape_of(n);
	int lo = 0, hi = s.pof2; /* blocks this rank reduces (halving) or holds (doubling) */
	bool folds_in = r < 2 * s.rem && r % 2 == 1;
	int v = r < 2 * s.rem ? r / 2 : r - s.rem;

	x->res_off = 0;
	x->res_len = x->bytes;
	for (uint32_t g = 0; g <= x->last + 1; g++) {
		struct rd_step *t = &x->st[g];
		t->to = g <= x->last ? step_peer(n, r, x->pat, x->root, g, true) : -1;
		t->from = g <= x->last ? step_peer(n, r, x->pat, x->root, g, false) : -1;
		t->off = t->roff = 0;
		t->len = t->rlen = x->bytes;
		t->how = g == x->last ? HOW_TAKE : g > x->last ? HOW_NONE : HOW_REDUCE;
		if (g > x->last)
			t->len = t->rlen = 0; /* the probe */
		/* a tree's data lands in the caller's buffer, its partial; its
		 * acks are empty */
		if (x->pat == PAT_TREE)
			t->how = g <= x->k + 1 ? HOW_GATHER : HOW_NONE;
		if (x->pat == PAT_TREE && g > x->k + 1)
			t->len = t->rlen = 0;
	}
	if (x->pat == PAT_RD || x->pat == PAT_TREE || (r < 2 * s.rem && !folds_in))
		return;
	if (x->pat == PAT_GATHER) {
		/* (a power of two of ranks: no fold) from this rank's block
		 * outwards, the partner's as large on the other side */
		lo = v;
		hi = v + 1;
		for (uint32_t g = 1; g <= s.k; g++) {
			struct rd_step *t = &x->st[g];
			int size = hi - lo, plo = (v & size) != 0 ? lo - size : hi;
			t->off = block_at(count, es, s.pof2, lo);
			t->len = block_at(count, es, s.pof2, hi) - t->off;
			t->roff = block_at(count, es, s.pof2, plo);
			t->rlen = block_at(count, es, s.pof2, plo + size) - t->roff;
			t->how = HOW_GATHER;
			lo = plo < lo ? plo : lo;
			hi = lo + 2 * size;
		}
		return;
	}
	for (uint32_t g = 1; g <= s.k; g++) {
		struct rd_step *t = &x->st[g];
		int mid = lo + (hi - lo) / 2;
		bool upper = (v & (s.pof2 >> g)) != 0;
		int slo = upper ? lo : mid, shi = upper ? mid : hi;
		lo = upper ? mid : lo;
		hi = upper ? hi : mid;
		t->off = block_at(count, es, s.pof2, slo);
		t->len = block_at(count, es, s.pof2, shi) - t->off;
		t->roff = block_at(count, es, s.pof2, lo);
		t->rlen = block_at(count, es, s.pof2, hi) - t->roff;
		if (x->pat == PAT_HALVE)
			continue;
		/* the doubling with the same partner, in reverse */
		struct rd_step *d = &x->st[2 * s.k + 1 - g];
		d->off = t->roff;
		d->len = t->rlen;
		d->roff = t->off;
		d->rlen = t->len;
		d->how = HOW_GATHER;
	}
	if (x->pat == PAT_HALVE) {
		/* (a power of two of ranks) block v = r, reduced here alone */
		x->res_off = x->st[s.k].roff;
		x->res_len = x->st[s.k].rlen;
	}
}

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

static char *slot_at(const struct rd *x, int i)
{
	return (char *)x->co->c->rd_buf + (size_t)i * x->slot;
}

/* Step g's frame as sent (send) or as expected. */
static struct ft__frame frame_of(const struct rd *x, uint32_t g, bool send)
{
	struct ft__frame h = x->co->tmpl;

	h.step = g;
	h.offset = send ? x->st[g].off : x->st[g].roff;
	h.length = send ? x->st[g].len : x->st[g].rlen;
	return h;
}

/* More ranks than cores: how long a wait yields and polls before it sleeps
 * (engine.c; 4 ranks on 2 cores, 4 KiB: 50-67 us against 81-95 sleeping
 * at once). FTCC_SPIN_US set: that instead. */
#define RD_YIELD_NS 50000u

/* A send's completion context: SEND_CTX + its step (a receive's: step + 1). */
#define SEND_CTX 4096u

static int send_step(struct rd *x, uint32_t g, const void *payload)
{
	struct ft_comm *c = x->co->c;
	struct ft__frame h = frame_of(x, g, true);
	int peer = c->members[x->st[g].to], rc;

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

static int post_recv_step(struct rd *x, uint32_t g)
{
	struct ft_comm *c = x->co->c;
	struct ft__frame h = frame_of(x, g, false);
	int peer = c->members[x->st[g].from];
	int rc = c->tp_ops->post_recv(ft__comm_link(c, peer, false), &h, x->st[g].rbuf,
				      (void *)(uintptr_t)(g + 1));

	if (rc != 0) {
		x->co->fail_link = 3;
		x->co->fail_peer = peer;
	}
	return rc;
}

/* Step g's received bytes combined with this rank's partial (lower rank's
 * first) into the other partial slot, which becomes the partial. */
static void reduce_step(struct rd *x, uint32_t g)
{
	struct ft__coll *co = x->co;
	struct ft_comm *c = co->c;
	const struct rd_step *t = &x->st[g];
	size_t n = t->rlen / co->s.es;
	bool theirs_first = t->from < c->rank;
	const char *mine = x->cur + t->roff;
	char *out = slot_at(x, x->next) + t->roff;
	uint64_t t0 = ft__now_ns();

	if (n > 0)
		co->combine(out, theirs_first ? t->rbuf : mine, theirs_first ? mine : t->rbuf, n);
	/* the last exchange's (halving's) result is final here: the average */
	if (g == x->k && co->op == FT_AVG && n > 0)
		ft__reduce_scale(out, n, (enum ft_dtype)co->tmpl.dtype, (size_t)c->size);
	c->stats.reduce_ms += (double)(ft__now_ns() - t0) / 1e6;
	x->cur = slot_at(x, x->next);
	x->next ^= 1;
}

/* Runs the steps as far as the frames in allow: 0, or the error. */
static int advance(struct rd *x)
{
	struct ft__coll *co = x->co;
	int rc;

	while (x->g <= x->last) {
		uint32_t g = x->g;
		const struct rd_step *t = &x->st[g];
		if (t->to >= 0 && !x->g_sent) {
			if ((rc = send_step(x, g, x->cur + t->off)) != 0)
				return rc;
			x->g_sent = true;
		}
		if (t->from >= 0) {
			if (!x->got[g])
				return 0;
			if (t->how == HOW_TAKE) {
				x->cur = t->rbuf; /* the result, from the rank that stood for this one */
			} else if (t->how == HOW_REDUCE) {
				/* the slot written now held a partial sent before */
				if (x->sent < x->sends)
					return 0;
				reduce_step(x, g);
			} /* (a doubling's blocks landed in the partial) */
		}
		x->g++;
		x->g_sent = false;
	}
	if (!x->held) {
		if (x->cur != co->dst && x->res_len > 0)
			memcpy((char *)co->dst + x->res_off, x->cur + x->res_off, x->res_len);
		x->held = true;
		if (co->hooks->result_held != NULL && (rc = co->hooks->result_held(co)) != 0)
			return rc;
		co->claimed = true;
	}
	return 0;
}

static bool rd_done(const struct rd *x)
{
	return x->held && x->sent == x->sends && x->got[x->last + 1] && x->send_err == 0;
}

/* Whether the link ev names is one this op still expects a frame on (from),
 * or one whose frame of ours has not left yet. */
static bool link_owed(const struct rd *x, const struct ft__tp_event *ev, bool from)
{
	struct ft_comm *c = x->co->c;

	for (uint32_t g = 0; g <= x->last + 1; g++) {
		int p = from ? x->st[g].from : x->st[g].to;
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
				if (ev[i].status != 0 || g > x->last + 1 || x->got[g]) {
					co->fail_link = 3;
					co->fail_peer = ev[i].peer;
					return ev[i].status != 0 ? ev[i].status : -FT_EPROTO;
				}
				x->got[g] = true;
				if (g <= x->last) {
					struct ft__frame h = frame_of(x, g, false);
					c->stats.bytes_received += h.length;
					if (co->hooks->frame_received != NULL &&
					    (rc = co->hooks->frame_received(co, &h, x->st[g].rbuf)) != 0)
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
				if (link_owed(x, &ev[i], false)) {
					send_broken(x, ev[i].peer, ev[i].status);
				} else if (x->send_err != 0 && ev[i].status != -FT_EPEERFAILED) {
					/* the cause of the broken send link, told on a
					 * link whose frames are through (an abort frame
					 * after a probe): the op's outcome */
					co->fail_link = 3;
					co->fail_peer = ev[i].peer;
					return ev[i].status;
				}
			}
		}
		if ((rc = advance(x)) != 0)
			return rc;
	}
	return 0;
}

/* Sizes c->rd_buf (two partial slots, then each received frame that does
 * not land in a partial) and points each step's receive at its place. */
static int place_receives(struct rd *x, int n, int r)
{
	struct shape s = shape_of(n);
	size_t need = 2 * x->slot, at;
	/* the slot the last halving writes, where the doubling's blocks land
	 * (an allgather's land in the caller's buffer, its partial) */
	int final_slot = (int)((s.k + (r < 2 * s.rem && r % 2 == 1) + 1) & 1);
	char *gather;
	int rc;

	for (uint32_t g = 0; g <= x->last + 1; g++)
		if (x->st[g].from >= 0 && x->st[g].how != HOW_GATHER)
			need += (x->st[g].rlen + 63) & ~(size_t)63;
	if ((rc = ft__comm_grow(&x->co->c->rd_buf, &x->co->c->rd_cap, need)) != 0)
		return rc;
	at = 2 * x->slot;
	gather = in_callers_buffer(x->pat) ? x->cur : slot_at(x, final_slot);
	for (uint32_t g = 0; g <= x->last + 1; g++) {
		struct rd_step *t = &x->st[g];
		if (t->from < 0)
			continue;
		if (t->how == HOW_GATHER) {
			t->rbuf = gather + t->roff;
		} else {
			t->rbuf = (char *)x->co->c->rd_buf + at;
			at += (t->rlen + 63) & ~(size_t)63;
		}
	}
	return 0;
}

int ft__engine_rd(struct ft_comm *c, const struct ft__call *k, const struct ft__attempt *a,
		  struct ft__coll *co, uint16_t algo)
{
	int n = c->size, r = c->rank, left = ft__mod(r - 1, n), right = ft__mod(r + 1, n);
	struct rd x = {.co = co, .algo = algo, .pat = pattern_of(algo, k->kind), .root = -1};
	int rc;

	for (int i = 0; x.pat == PAT_TREE && i < n; i++)
		if (c->members[i] == k->root)
			x.root = i;
	if (x.pat == PAT_TREE && x.root < 0)
		return -FT_EROOTFAILED;
	if ((rc = ft__engine_setup(co, c, k, a)) != 0)
		return rc;
	co->tmpl.algo = algo;
	co->in_place = k->in_place;
	co->src = k->in_place ? k->dst : k->src;
	co->op = k->op;
	x.bytes = k->count * k->es;
	x.k = shape_of(n).k;
	x.last = last_step(x.pat, x.k);
	x.slot = in_callers_buffer(x.pat) ? 0 : (x.bytes + 63) & ~(size_t)63;
	x.cur = in_callers_buffer(x.pat) ? (char *)co->dst : (char *)co->src;
	if (x.last + 3 > FT__RD_STEPS)
		return -FT_EINVAL;
	plan(&x, n, r, k->count, k->es);
	/* the ring's neighbours judge each other (above); a tree's frame to
	 * the right neighbour may wait on a frame a ring rank never sends (an
	 * ack on the data from it): a tree always probes */
	if (x.pat == PAT_TREE || !sends_to(n, r, right, x.pat, x.root))
		x.st[x.last + 1].to = right;
	if (x.pat == PAT_TREE || !sends_to(n, left, r, x.pat, x.root))
		x.st[x.last + 1].from = left;
	if ((rc = place_receives(&x, n, r)) != 0)
		return rc;
	for (uint32_t g = 0; g <= x.last + 1; g++)
		x.got[g] = x.st[g].from < 0;
	/* (ft__comm_connect_ring made every link before the op) */
	for (uint32_t g = 0; g <= x.last + 1; g++)
		if ((x.st[g].to >= 0 && ft__comm_link(c, c->members[x.st[g].to], true) == NULL) ||
		    (x.st[g].from >= 0 && ft__comm_link(c, c->members[x.st[g].from], false) == NULL))
			return -FT_EPROTO;
	/* an in-place input, whole, for a rerun: it is small */
	if (co->hooks->input_save_at != NULL && co->in_place && x.bytes > 0) {
		struct ft__sum *sum = NULL;
		void *save = co->hooks->input_save_at(co, 0, x.bytes, &sum);
		if (save != NULL)
			ft__copy_stream_sum(save, co->src, x.bytes, sum);
		co->input_saved = save != NULL;
	}
	/* the probe's receive first: it leaves first, ahead of any frame of a
	 * step on the same link (a tree's) */
	if (x.st[x.last + 1].from >= 0 && (rc = post_recv_step(&x, x.last + 1)) != 0)
		return rc;
	for (uint32_t g = 0; g <= x.last; g++)
		if (x.st[g].from >= 0 && (rc = post_recv_step(&x, g)) != 0)
			return rc;
	if (x.st[x.last + 1].to >= 0 && (rc = send_step(&x, x.last + 1, NULL)) != 0)
		return rc;
	return rd_run(&x);
}
