/* detect.h: the failure detector thread: heartbeats, the failed set and its notices, and the view that follows a failure. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_DETECT_H
#define FTCC_DETECT_H

#include <stdbool.h>
#include <stdint.h>

#include "membership.h"

struct ft__det;
struct ft__trace;

struct ft__det_params {
	struct ft__mb *mb;              /* shared with the main thread (see membership.h) */
	int world_size;
	int rank;                       /* original rank */
	const char *job_id;
	const char *token;
	const char *bind_host;          /* where to listen, and what to publish (lib/util/sock.h) */
	const char *publish_host;
	const char *data_addr;          /* republished in every generation */
	int heartbeat_ms;
	int detect_timeout_ms;
	int settle_delay_ms;            /* the coordinator waits this long before settling */
	bool rejoin;                    /* rejoin policy: wait for failed ranks to come back */
	int rejoin_timeout_ms;          /* ... this long, then settle without them */
	bool grow;                      /* new incarnations of ranks outside the view are
					 * taken back (growing back: detect_grow.c) */
	struct ft__trace *trace;        /* the communicator's, or NULL; outlives the detector */
	/* Optional: called from the detector's thread for each member of a
	 * view that the settled view after it leaves out (original rank). */
	void (*left_out)(void *arg, int rank);
	void *left_out_arg;             /* outlives the detector */
};

/* Opens the control listener (so that its address can be published). */
int ft__det_create(const struct ft__det_params *p, struct ft__det **out);
const char *ft__det_addr(const struct ft__det *d);
/* Starts watching the view of generation gen (members ascending). */
int ft__det_start(struct ft__det *d, uint32_t gen, const int *members, int n);
/* Stops the thread and frees d; safe on a half-made d (a failed create).
 * clean (this rank finalized): the neighbours are told goodbye, which is no
 * failure. Otherwise (ft_init or a recovery failed, the rank was sent
 * away) the links just close: the neighbours count this rank failed, as
 * they must, since it leaves a view that still names it. */
void ft__det_destroy(struct ft__det *d, bool clean);

/* True once a failure is known that the main thread has not yet recovered from. */
bool ft__det_pending(struct ft__det *d);
/* An eventfd readable exactly while ft__det_pending is true: a wait that
 * watches it ends the moment a failure is known. */
int ft__det_wake_fd(const struct ft__det *d);
/* Whether original rank orig is in the failed set (it only grows). */
bool ft__det_failed(struct ft__det *d, int orig);
/* The main thread holds the whole result of op seq: 0, or -FT_EPEERFAILED when
 * a failure is being settled (then it must not claim it). */
int ft__det_have_result(struct ft__det *d, uint64_t seq);
/*
 * Waits up to timeout_ms for the settled view that follows generation gen:
 * 0 and *view (the caller frees it), -FT_EEXCLUDED when this rank was left
 * out, -FT_ETIMEDOUT, or what made settling impossible (-FT_ECORRUPT: a
 * malformed view).
 */
int ft__det_await(struct ft__det *d, uint32_t gen, int timeout_ms, struct ft__view *view);
/* The main thread now runs generation gen, next wanting the result of next_op. */
void ft__det_adopted(struct ft__det *d, uint32_t gen, uint64_t next_op);
/* The main thread saw a link to original rank orig fail with no failure
 * known: declare it, unless a recovery runs (the failure it recovers from
 * explains the link) and the main thread is not sure (sure: orig is gone
 * from the view's records, or sent away). */
void ft__det_suspect(struct ft__det *d, int orig, bool sure);
/*
 * Growing back (detect_grow.c). ft__det_grow_plan: the coordinator of
 * generation gen found a new incarnation waiting: the view grows before op
 * at, and every member is told (a plan only moves forward).
 *
 * ft__det_grow_due: the main thread of generation gen begins op seq, which
 * can take newcomers in (can) or not (its arguments depend on the
 * membership). FT__GROW_RUN: op seq runs as it is (no grow planned there;
 * or lead, the coordinator, cannot take them at this op: the plan moves to
 * the next op and the members are told); FT__GROW_GO: the view grows first
 * (the detector now settles the next generation, ft__det_await returns
 * it); FT__GROW_ASK (not the coordinator): whether op seq grows is the
 * coordinator's to say, the same on every member even when their programs
 * call different collectives there: ask ft__det_grow_follow until it says
 * FT__GROW_RUN (the plan moved on) or FT__GROW_GO (lead_grows: the
 * coordinator settles the next generation).
 */
enum { FT__GROW_RUN, FT__GROW_GO, FT__GROW_ASK };
void ft__det_grow_plan(struct ft__det *d, uint32_t gen, uint64_t at);
int ft__det_grow_due(struct ft__det *d, uint32_t gen, uint64_t seq, bool can, bool lead);
int ft__det_grow_follow(struct ft__det *d, uint32_t gen, uint64_t seq, bool can, bool lead_grows);
/* Monotonic ns at which this rank first knew of its latest failure, and at
 * which it last settled on a new view (0: none). */
void ft__det_times(struct ft__det *d, uint64_t *known_ns, uint64_t *settled_ns);

#endif
