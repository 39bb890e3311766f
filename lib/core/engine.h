/* engine.h: one attempt at a collective on the current ring, and the hooks a recovery policy plugs into it. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_ENGINE_H
#define FTCC_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reduce.h"
#include "schedule.h"
#include "transport.h"

struct ft_comm;
struct ft__coll;

/*
 * Reduce-scatter and allgather: the block layout the call began with
 * (blocks.c). Block i of n belongs to members[i], the caller's view when it
 * called; an attempt on a smaller ring (shrink) keeps it.
 */
struct ft__blocks {
	size_t count;           /* elements per block */
	int n, me;              /* blocks, and the caller's */
	int *members;           /* original rank of block i's member */
	int *pos;               /* this attempt: block of the member at ring position p */
	bool packed;            /* this attempt runs on the members' blocks packed in c->scratch */
	int m, mine;            /* this attempt: ring size, this rank's position */
	char *res;              /* this attempt's result: blocks in ring order */
	void *out;              /* reduce-scatter: where the caller wants its block */
};

/* What the caller asked for; it outlives a recovery. */
struct ft__call {
	enum ft__coll_kind kind;
	enum ft__coll_kind meant;       /* FT__COLL_INVALID (bad arguments here): the one called */
	const void *src;        /* input: the caller's, or a kept copy of an in-place one */
	void *dst;
	size_t count, es;       /* reduce-scatter, allgather: count is n blocks' elements */
	enum ft_dtype dtype;
	enum ft_op op;
	int root;               /* broadcast: original rank of the root */
	int span;               /* broadcast: it goes only to the span ranks after the
				 * root in ring order (a chain, without commit
				 * steps); 0: to every rank */
	bool in_place;
	/* the attempt leaves the input where it is, whole: a restart needs no
	 * backup of an in-place one (allgather; a packed reduce-scatter) */
	bool input_untouched;
	struct ft__blocks *blk; /* reduce-scatter, allgather; else NULL */
};

/* Ops whose result a rank keeps under shrink, to hand over after a failure
 * (not reduce-scatter, whose result differs on every rank, nor allgather:
 * they run with commit steps, which need no hand-over of a block layout). */
#define FT__KEEP_MAX ((size_t)64 << 10)
static inline bool ft__small_op(const struct ft__call *k)
{
	return k->kind != FT__COLL_BROADCAST && k->blk == NULL && k->count * k->es <= FT__KEEP_MAX;
}

/*
 * Where a policy (or, later, the pairwise logs) hooks into an attempt. Every
 * hook may be NULL. They run on the calling thread, inside the step loop:
 * they must not block.
 */
struct ft__hooks {
	/* [off, off + len) of the input is about to be overwritten (in place)
	 * or reduced (out of place) for the first time in this attempt: where
	 * the engine must save those bytes first (it fuses the copy into the
	 * reduction that overwrites them), or NULL. When *sum is set, the
	 * engine also adds the bytes to that check value (ft__sum, fused too
	 * where a kernel exists). */
	void *(*input_save_at)(struct ft__coll *co, size_t off, size_t len, struct ft__sum **sum);
	/* A data frame was queued to the right neighbour (payload borrowed
	 * until its completion). */
	int (*frame_sent)(struct ft__coll *co, const struct ft__frame *h, const void *payload);
	/* A data frame from the left neighbour landed (payload: where it landed,
	 * before it is reduced). */
	int (*frame_received)(struct ft__coll *co, const struct ft__frame *h, const void *payload);
	/* This rank now holds the whole result: 0 to claim it, else the error
	 * that ends the attempt (a failure is being settled). */
	int (*result_held)(struct ft__coll *co);
};

struct ft__attempt {
	uint64_t op_seq;        /* carried by every frame */
	bool commit;            /* n-1 empty commit steps after the data */
	const struct ft__hooks *hooks;
};

struct ft__recv_entry {
	uint32_t g, k;
	int slot;               /* staging slot, -1 when received in place */
};

/* One attempt's state; the policy reads how far it got after a failure. */
struct ft__coll {
	struct ft_comm *c;
	struct ft__sched s;
	struct ft__frame tmpl;
	const struct ft__hooks *hooks;
	enum ft__coll_kind kind;
	const char *src;
	char *dst;
	bool in_place;
	enum ft_op op;
	ft__combine_fn combine;
	ft__accum_fn accum;
	ft__accum_save_fn accum_save;
	ft__combine_save_sum_fn combine_save_sum; /* NULL: sum apart */
	int root_pos;
	int bcast_last;         /* broadcast: root_pos of the last rank it reaches */
	uint32_t last_step;     /* commit steps after s.data_last, if any */
	size_t data_total, data_done;   /* data frames this rank receives */
	size_t staged_done;     /* reduce-scatter frames reduced (in place: input saved first) */
	bool mine_saved;        /* in place: chunk r's input was saved (input_save_at) */
	bool claimed;           /* result_held accepted */
	bool input_saved;       /* in place: the whole input was saved at the start (rdouble.c) */
	int fail_link;          /* which link failed: 1 receive, 2 send, 3 fail_peer's */
	int fail_peer;          /* original rank of the peer whose link failed (3) */

	uint32_t rg, rk;        /* next receive to post */
	size_t recv_total, recv_done, recv_posted;
	size_t send_posted, send_done;
	struct ft__recv_entry fifo[128];
	unsigned fifo_head, fifo_len;
	int free_slots[64];
	int nfree;
	int send_err;           /* the send link broke with frames still to go */
	int64_t grace_deadline; /* until then, wait for the cause on the receive link */
};

/*
 * One attempt at an allreduce or barrier (k->kind) on the current view:
 * 0 once this rank holds the result and its frames are sent, else the
 * error it failed with (co says how far it got). k->src is the input
 * unless k->in_place. Also runs one half of the ring (reduce-scatter,
 * allgather: k->count is the ring's blocks, in ring order; schedule.h);
 * ft__blocks_attempt maps the caller's blocks to it.
 */
int ft__engine_allreduce(struct ft_comm *c, const struct ft__call *k, const struct ft__attempt *a,
			 struct ft__coll *co);
/* One attempt at a broadcast of k->count bytes at k->dst from original rank
 * k->root, which must be a member of the current view; with k->span, only
 * the ranks it reaches call it (the root returns once its frames are out). */
int ft__engine_broadcast(struct ft_comm *c, const struct ft__call *k, const struct ft__attempt *a,
			 struct ft__coll *co);

/* The automatic choice (rdouble.c) over TCP: recursive doubling while
 * bytes x log2(n) is at most FT__RD_AUTO_VOLUME; above, recursive halving
 * and doubling from 3 ranks while bytes x n^2 is at most FT__RH_AUTO_SQ on
 * a power of two of ranks, FT__RH_AUTO_FOLD_SQ on others; the ring above
 * (measured at 2 to 8 ranks on 2 cores: docs/performance.md, algorithms).
 * FTCC_ALGORITHM=rh takes it up to FT__RH_MAX (its buffers: about five
 * times the message). */
#define FT__RD_AUTO_VOLUME ((uint64_t)32 << 10)
#define FT__RH_AUTO_SQ ((uint64_t)16 << 20)
#define FT__RH_AUTO_FOLD_SQ ((uint64_t)2 << 20)
#define FT__RH_MAX ((size_t)16 << 20)
/* Reduce-scatter and allgather on a power of two of ranks (4 and up): the
 * halving or the doubling alone while the whole vector's bytes x n^2 is at
 * most this. */
#define FT__BLK_AUTO_SQ ((uint64_t)16 << 20)
/* A broadcast on a binomial tree up to this (measured at 2 to 16 ranks:
 * at 256 KiB the ring was as fast, at 2 ranks twice as fast). */
#define FT__TREE_AUTO_MAX ((size_t)64 << 10)
/* Steps of the largest world's pattern, and some. */
#define FT__RD_STEPS 40
/* The algorithm k runs by on the current view (enum ft__frame_algo): a
 * function of the call and the view alone (and of settings every rank
 * shares), so that every rank makes the same choice. */
uint16_t ft__rd_algo(const struct ft_comm *c, const struct ft__call *k);
/* The original ranks this rank sends to (to) and receives from in the
 * current view's pattern, appended (at most FT__RD_STEPS each; a peer may
 * be a ring neighbour, or appear twice). */
void ft__rd_peers(const struct ft_comm *c, int *to, int *nto, int *from, int *nfrom);
/* One attempt at an allreduce or barrier by recursive doubling (FT__ALGO_RD)
 * or halving and doubling (FT__ALGO_RH), as ft__engine_allreduce. */
int ft__engine_rd(struct ft_comm *c, const struct ft__call *k, const struct ft__attempt *a,
		  struct ft__coll *co, uint16_t algo);

/* For the engines: an attempt's common set-up (not a broadcast), and the
 * wait for transport events (bounded polling while ranks fit the cores;
 * else yielding and polling for yield_ns, then sleeping). */
#define FT__EV_MAX 64
int ft__engine_setup(struct ft__coll *co, struct ft_comm *c, const struct ft__call *k,
		     const struct ft__attempt *a);
int ft__engine_wait(struct ft_comm *c, int timeout, struct ft__tp_event *ev, uint64_t yield_ns);
/* An attempt's waits: the detector's tick and the op timeout (FTCC_OP_TIMEOUT_MS). */
struct ft__op_wait {
	int tick;               /* ms between looks at the detector's flag; -1 none */
	int64_t idle_deadline;  /* 0: no op timeout */
};
void ft__op_wait_init(struct ft_comm *c, struct ft__op_wait *w);
/* Waits for events (up to grace_deadline too, when not 0): their count (0 on
 * a tick), -FT_EABORTED once the detector knows of a failure, -FT_ETIMEDOUT
 * when the op made no progress for the op timeout, or the transport's error. */
int ft__op_wait(struct ft_comm *c, struct ft__op_wait *w, uint64_t op_seq, int64_t grace_deadline,
		struct ft__tp_event *ev, uint64_t yield_ns);

/* blocks.c: reduce-scatter and allgather on the caller's block layout. */
/* Takes the layout from the membership the caller sees (n blocks of count elements). */
int ft__blocks_init(struct ft_comm *c, struct ft__blocks *b, size_t count);
void ft__blocks_fini(struct ft__blocks *b);
/* Whether the current view is the caller's layout, member for member. */
bool ft__blocks_same(const struct ft_comm *c, const struct ft__blocks *b);
/* One attempt of k on the current view (as ft__engine_allreduce). */
int ft__blocks_attempt(struct ft_comm *c, struct ft__call *k, const struct ft__attempt *a,
		       struct ft__coll *co);
/* The op is done (this rank holds the last attempt's result): puts it where the caller wants it. */
void ft__blocks_deliver(const struct ft__call *k);

#endif
