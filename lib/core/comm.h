/* comm.h: the communicator's internal state, shared by the modules that act on it. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_COMM_H
#define FTCC_COMM_H

#include <stdbool.h>

#include "ftcc.h"
#include "transport.h"
#include "internal.h"
#include "config.h"
#include "detect.h"
#include "fault.h"
#include "membership.h"
#include "sock.h"
#include "jnl.h"
#include "trace.h"

struct ft__policy;
struct ft__ckpt;

/* A membership shown to the caller in place of the current one (see policy_shrink.c). */
struct ft__shown {
	bool active;
	uint32_t generation;
	int size, rank;
	int *members;
};

struct ft_comm {
	uint32_t magic;                 /* FT__COMM_MAGIC while usable */
	struct ft_config cfg;
	struct ft__tp_env tp_env;        /* transport knobs, read once at init */
	struct ft__sock_host host;      /* where the transport and the detector listen */
	bool finalized;

	/* membership: members[i] is the original rank of dense rank i */
	uint32_t generation;
	int size;
	int rank;                       /* dense rank of this process */
	int *members;
	char (*addrs)[FT__ADDR_MAX];    /* published address by original rank */

	struct ft__mb mb;               /* membership (file rendezvous) */
	const struct ft__transport_ops *tp_ops;
	struct ft__transport *tp;
	struct ft__link *send_link;      /* to dense rank + 1 */
	struct ft__link *recv_link;      /* from dense rank - 1 */
	/* recursive doubling's links to and from its other partners, by
	 * original rank (rdouble.c); NULL under rejoin and at two ranks */
	struct ft__link **mesh_to, **mesh_from;
	/* The round of links within a generation: 0 when a view is loaded, the
	 * failed op's seq + 1 after an op failed on every rank (a mismatch) and
	 * the links went down; every data hello carries it. A link a peer made
	 * for a later round (it left the failed op first) waits in ahead, by
	 * original rank, for this rank's connect of that round. */
	uint32_t link_epoch;
	struct ft__link **ahead;
	uint32_t *ahead_epoch;
	void *rd_buf;                   /* its partials and received frames */
	size_t rd_cap;

	uint64_t op_seq;                /* sequence number of the next collective */
	void *scratch;                  /* reduce-scatter, allgather: room for blocks (blocks.c) */
	size_t scratch_bytes;
	void *slots;                    /* pipeline_depth staging slots of segment_bytes */
	size_t slot_bytes;
	struct ft_stats stats;
	struct ft__trace *trace;        /* FTCC_TRACE, else NULL */
	struct ft__fault fault;         /* FTCC_FAULT, armed until it fires */
	uint64_t spin_ns;               /* poll this long before sleeping (0: never) */
	struct ft_comm *next_finalized;
	int broken;                     /* nonzero: a peer failed and the policy gives up */

	const struct ft__policy *policy;
	struct ft__det *det;            /* failure detector (shrink, rejoin), else NULL */
	struct ft__onehost *onehost;    /* the one-host path (onehost.c), else NULL */
	uint64_t onehost_view;          /* the generation + 1 the path was decided for; 0 none */
	struct ft__shown shown;         /* until the next call, what ft_size & co. report */

	/* shrink policy (policy_shrink.c) */
	void *backup;                   /* in-place input saved before its first overwrite */
	size_t backup_bytes;
	void *kept;                     /* copy of the last small result returned */
	size_t kept_cap, kept_bytes;
	uint64_t kept_seq;              /* its op */
	bool kept_valid;

	/* rejoin policy (policy_rejoin.c): this rank's pairwise log */
	struct ft__jnl *plog;           /* NULL: no log (durability none, or it failed) */
	void *payload;                  /* the current op's input, as logged */
	size_t payload_bytes;
	struct ft__logreg *regs;        /* regions of it saved so far, with their CRCs */
	size_t nreg, reg_cap, saved_bytes;
	bool input_logged, input_whole;
	bool input_now;                 /* its INPUT written at once, whatever its size */
	bool log_dead;                  /* the log failed in this op: closed at the next */
	struct ft__sum sum;             /* check value of the region being saved */
	bool sum_pending;

	uint64_t job_nonce;             /* this job's (generation 0's view) */
	bool finalizing;
	bool grows;             /* growing back is on (init.c: shrink, rejoin) */

	/* new incarnations (comm.c, state.c) */
	bool rejoined;                  /* this process rejoined a running job */
	bool replaying;                 /* ft_init runs the interrupted op from the log */
	uint64_t resume_op;             /* ... and its application's first op */
	int state_root;                 /* original rank that sends the state */
	int nowed;                      /* ops at whose start the state goes to newcomers */
	uint64_t owed_op[8];
	uint64_t *fresh_op;             /* by original rank: the op at which a newcomer
					 * takes the state (its application's first), 0 none */
	struct ft__state_region *state; /* ft_state_register */
	int nstate;
	bool state_received;            /* rejoined: the state transfer reached it */
	uint64_t ckpt_hint_step;        /* ... with the sender's latest checkpoint step */
	uint64_t ckpt_hint_total;       /* ... and the job's shard bytes (0: unknown) */
	bool ckpt_hint_on;              /* ... and whether it had enabled checkpoints */
	char *ckpt_hint_book;           /* ... and its peer services' addresses (world_size
					 * x 64 bytes), NULL: none */
	struct ft__ckpt *ckpt;          /* running checkpoints (ckpt.c), NULL until enabled */
};

/* ft_state_register's regions. */
struct ft__state_region {
	void *ptr;
	size_t bytes;
	unsigned flags;         /* FT_STATE_REPLICATED or FT_STATE_SHARDED */
	unsigned dtype;         /* enum ft_dtype of its elements */
};
#define FT__STATE_MAX 64

/* policy_rejoin.c: this rank's log, and joining a running job as a new incarnation. */
void ft__rejoin_log_open(struct ft_comm *c);
void ft__rejoin_log_close(struct ft_comm *c, bool remove);
int ft__rejoin_join(struct ft_comm *c, struct ft__member *me, struct ft__view *latest);

/* The state transfer owed at the start of op seq, if any (state.c): 0 or an error. */
int ft__state_due(struct ft_comm *c, uint64_t seq);

#define FT__COMM_MAGIC 0x6674636du

/* 0 when c may run a collective, else the error to return. */
int ft__comm_check(const struct ft_comm *c);
/* (Re)builds the ring links of the current view; blocks up to the connect deadline. */
int ft__comm_connect_ring(struct ft_comm *c);
/* Makes the links to original ranks to[] and from from[] (members of the
 * current view, not this rank) that are not there yet: the ring's
 * neighbours' or the mesh's; blocks up to the connect deadline. */
int ft__comm_link_peers(struct ft_comm *c, const int *to, int nto, const int *from, int nfrom);
/* The link to (to) or from original rank p: the ring's or the mesh's; NULL: none yet. */
struct ft__link *ft__comm_link(struct ft_comm *c, int p, bool to);
/* Tears down the ring's and the mesh's links after a failed collective, telling the peers why. */
void ft__comm_abort_ring(struct ft_comm *c, int err, uint64_t op_seq);
/* The round of links the next connect makes (c->link_epoch; a new view
 * starts at 0, ft__comm_load_view). */
void ft__comm_new_round(struct ft_comm *c, uint32_t epoch);
/* Makes *buf (64-byte aligned, *cap bytes) hold at least bytes; its content is not kept. */
int ft__comm_grow(void **buf, size_t *cap, size_t bytes);
/* Makes c->backup hold at least bytes (an in-place input saved for a rerun). */
int ft__comm_backup_reserve(struct ft_comm *c, size_t bytes);
/* Takes view v as the membership (dense ranks, addresses, rejoiners); takes v's members. */
int ft__comm_load_view(struct ft_comm *c, struct ft__view *v);

/* The membership the caller sees (a shown one, else the current one). */
int ft__comm_shown_size(const struct ft_comm *c);
uint32_t ft__comm_shown_generation(const struct ft_comm *c);
int ft__comm_shown_member(const struct ft_comm *c, int rank);
/* Drops a shown membership: the caller sees the current one again. */
void ft__comm_show_current(struct ft_comm *c);

#endif
