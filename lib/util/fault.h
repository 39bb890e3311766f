/* fault.h: failure injection at exact points of a collective (FTCC_FAULT). */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_FAULT_H
#define FTCC_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum ft__fault_phase {
	FT__PHASE_ANY,
	FT__PHASE_BETWEEN,          /* at the start of the op, before its first frame */
	FT__PHASE_REDUCE_SCATTER,
	FT__PHASE_ALLGATHER,
	FT__PHASE_BROADCAST,
	FT__PHASE_COMMIT,           /* the closing steps that tell every rank all hold the result */
	FT__PHASE_INIT,             /* ft_init, just after this rank published its record for the
				     * job's first view (op 0), before that view settles */
	FT__PHASE_CONNECT,          /* ft_init, once that view settled, before the ring's links */
	FT__PHASE_EXCHANGE,         /* recursive doubling's steps (lib/core/rdouble.c) */
};

enum ft__fault_action { FT__FAULT_KILL, FT__FAULT_HANG, FT__FAULT_DROP, FT__FAULT_FAIL };

/* Where in a frame's life a point strikes (at=). */
enum ft__fault_at {
	FT__AT_SEND,                /* before the frame is queued (default) */
	FT__AT_SENT,                /* just after it is queued, before its log record */
	FT__AT_RECORDED,            /* a received frame: just after its log record, before use */
};

/* One point where a fault strikes. */
struct ft__fault_pt {
	bool armed;
	int rank;                   /* original rank that fails */
	uint64_t op;                /* op sequence number */
	enum ft__fault_phase phase;
	uint32_t step, seg;         /* step within the phase, segment within the step */
	enum ft__fault_action action;
	uint32_t inc;               /* incarnation it fires in (FTCC_INCARNATION; default 0) */
	int64_t gen;                /* generation it fires in; -1 any */
	enum ft__fault_at at;
};

#define FT__FAULT_MAX 4

struct ft__fault {
	bool armed;                 /* some point is */
	int n;
	struct ft__fault_pt pt[FT__FAULT_MAX];
};

/* Parses up to four points separated by ';', each
 * "rank=2,op=10,phase=reduce_scatter,step=1,seg=3,action=kill[,inc=0][,gen=G][,at=send|sent|recorded]";
 * "" disarms.
 * A point fires only in incarnation inc of its rank, so that a restarted rank does not
 * kill itself again at the same point (and a second point can kill it during its replay). */
int ft__fault_parse(const char *spec, struct ft__fault *f, char *err, size_t errlen);
/* Disarms the points of other incarnations than inc. */
void ft__fault_incarnation(struct ft__fault *f, uint32_t inc);
/* The point that fires here (once), or NULL. */
const struct ft__fault_pt *ft__fault_due(struct ft__fault *f, int rank, uint32_t gen, uint64_t op,
					 enum ft__fault_phase phase, uint32_t step, uint32_t seg,
					 enum ft__fault_at at);
/* The grammar, every name and what it means, Markdown (docs/environment.md). */
void ft__fault_doc(FILE *out);
/* Kills or hangs this process; returns only for FT__FAULT_DROP and FT__FAULT_FAIL
 * (phase init or connect only: ft_init then fails as on a local error). */
void ft__fault_act(const struct ft__fault_pt *f);

#endif
