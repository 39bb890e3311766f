/* trace.h: the per-communicator event trace (FTCC_TRACE), in Chrome trace-event JSON for Perfetto. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_TRACE_H
#define FTCC_TRACE_H

#include <stddef.h>
#include <stdint.h>

/*
 * One file per rank, a JSON array with one event object per line:
 * collectives and recoveries as complete events ("X"), failures and settled
 * views as instants ("i"). pid is the original rank; tid 0 the calling
 * threads, 1 the failure detector (ft__trace_thread). Timestamps are
 * CLOCK_REALTIME microseconds, so the files of one job line up when loaded
 * together; times given to these functions are ft__now_ns() (monotonic)
 * values, moved onto the realtime clock by an offset taken at open.
 *
 * Every function is thread-safe and does nothing when t is NULL (no trace).
 * Writing never fails the caller: the first I/O error is warned about once
 * and turns the trace off. args_json, where taken, is a JSON object ("{...}")
 * or NULL.
 */
struct ft__trace;

/*
 * Opens the trace of original rank `rank` named by pattern (FTCC_TRACE): "%r"
 * in it is the rank, "%p" the process id, "%%" a percent sign; without "%r",
 * ".<rank>" goes before a final ".json" (or at the end). 0 with *out NULL
 * when pattern is empty; 0, or -errno with a warning and *out NULL.
 */
int ft__trace_open(const char *pattern, int rank, struct ft__trace **out);
/* Ends the array (the file is then valid JSON) and frees t. Safe on NULL. */
void ft__trace_close(struct ft__trace *t);

/* The calling thread writes as tid (0 main, 1 detector) from now on, in every trace. */
void ft__trace_thread(struct ft__trace *t, int tid, const char *name);

void ft__trace_instant(struct ft__trace *t, const char *name, const char *args_json);
void ft__trace_complete(struct ft__trace *t, const char *name, const char *cat, uint64_t t0_ns,
			uint64_t t1_ns, const char *args_json);

/* A collective (kind: enum ft__coll_kind) that began at t0_ns and ends now with rc. */
void ft__trace_op(struct ft__trace *t, int kind, uint64_t op_seq, size_t bytes, uint32_t generation,
		  int contributors, int rc, uint64_t t0_ns);
/* A recovery from t0_ns to now, ending in generation with rc (a verdict or an error);
 * its args name the ranks declared failed since the previous recovery. */
void ft__trace_recovery(struct ft__trace *t, uint64_t t0_ns, uint32_t generation, int rc);
/* Original rank `rank` declared failed, and why. */
void ft__trace_failure(struct ft__trace *t, int rank, const char *why);
/* A view settled: generation and its members (original ranks). */
void ft__trace_view(struct ft__trace *t, uint32_t generation, const int *members, int n);

#endif
