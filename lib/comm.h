/* comm.h: the communicator's internal state, shared by the modules that act on it. */
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
#include "trace.h"

struct ft__policy;

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
	struct ft_tp_env tp_env;        /* transport knobs, read once at init */
	bool finalized;

	/* membership: members[i] is the original rank of dense rank i */
	uint32_t generation;
	int size;
	int rank;                       /* dense rank of this process */
	int *members;
	char (*addrs)[FT__ADDR_MAX];    /* published address by original rank */

	struct ft__mb mb;               /* membership (file rendezvous) */
	const struct ft_transport_ops *tp_ops;
	struct ft_transport *tp;
	struct ft_link *send_link;      /* to dense rank + 1 */
	struct ft_link *recv_link;      /* from dense rank - 1 */

	uint64_t op_seq;                /* sequence number of the next collective */
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
	struct ft__shown shown;         /* until the next call, what ft_size & co. report */

	/* shrink policy (policy_shrink.c) */
	void *backup;                   /* in-place input saved before its first overwrite */
	size_t backup_bytes;
	void *kept;                     /* copy of the last small result returned */
	size_t kept_cap, kept_bytes;
	uint64_t kept_seq;              /* its op */
	bool kept_valid;
};

#define FT__COMM_MAGIC 0x6674636du

/* 0 when c may run a collective, else the error to return. */
int ft__comm_check(const struct ft_comm *c);
/* (Re)builds the ring links of the current view; blocks up to the connect deadline. */
int ft__comm_connect_ring(struct ft_comm *c);
/* Tears down the ring links after a failed collective, telling the neighbours why. */
void ft__comm_abort_ring(struct ft_comm *c, int err, uint64_t op_seq);
/* Makes view v (settled by the detector) the current membership; takes v's members. */
int ft__comm_adopt(struct ft_comm *c, struct ft__view *v);

/* The membership the caller sees (a shown one, else the current one). */
int ft__comm_shown_size(const struct ft_comm *c);
uint32_t ft__comm_shown_generation(const struct ft_comm *c);
int ft__comm_shown_member(const struct ft_comm *c, int rank);
/* Drops a shown membership: the caller sees the current one again. */
void ft__comm_show_current(struct ft_comm *c);

#endif
