/* schedule.h: the ring's arithmetic: which chunk, segment and byte range moves at each step. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_SCHEDULE_H
#define FTCC_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
 *
 * Every chunk but r is first overwritten in place by the reduce-scatter
 * step that receives it; chunk r (sent raw at step 0) only by the first
 * allgather receive, which cannot arrive before every rank reduced it, so
 * after this rank's step-0 send. That is what lets an in-place input be
 * saved a segment at a time, just before its first overwrite.
 *
 * Reduce-scatter and allgather are the two halves: steps 0 .. n-2, steps
 * n-1 .. 2n-3. Their buffer is n blocks of equal size, one per ring
 * position, in ring order, and they run with r one position back (the
 * engine sets s.r = r-1): so this rank ends the reduce-scatter holding
 * chunk r, its own block, and the allgather starts by sending it. The
 * arithmetic is the allreduce's own (count = n x block, so every chunk is
 * one block); how the caller's blocks map to ring positions, when a shrink
 * has left a smaller ring, is blocks.c's. A reduce-scatter never
 * overwrites the chunk it sends raw at step 0 (chunk r-1, by the shifted
 * r); every other chunk it overwrites at the step that receives it, as the
 * allreduce does. An allgather overwrites no input.
 *
 * Broadcast is one "chunk" of count bytes moving down the chain from the
 * root (step 0); steps after data_last carry one empty frame each.
 */
struct ft__sched {
	int n, r;               /* ranks, this rank's dense position */
	bool bcast;             /* broadcast: one chunk of count bytes */
	size_t count, es;       /* elements, bytes per element */
	size_t seg_elems;       /* elements per segment, >= 1 */
	uint32_t data_last;     /* steps 0 .. data_last move data */
};

static inline int ft__mod(int a, int n)
{
	a %= n;
	return a < 0 ? a + n : a;
}

static inline size_t ft__chunk_lo(const struct ft__sched *s, int c)
{
	size_t q = s->count / (size_t)s->n, rem = s->count % (size_t)s->n;
	return (size_t)c * q + ((size_t)c < rem ? (size_t)c : rem);
}

static inline size_t ft__chunk_len(const struct ft__sched *s, int c)
{
	return s->count / (size_t)s->n + ((size_t)c < s->count % (size_t)s->n ? 1 : 0);
}

static inline uint32_t ft__chunk_nseg(const struct ft__sched *s, int c)
{
	size_t len = s->bcast ? s->count : ft__chunk_len(s, c);
	return len == 0 ? 1 : (uint32_t)((len + s->seg_elems - 1) / s->seg_elems);
}

/* True when step g carries payload (not a closing or commit step). */
static inline bool ft__step_has_data(const struct ft__sched *s, uint32_t g)
{
	return g <= s->data_last && !(s->bcast && g > 0);
}

/* Frames at step g: closing and commit steps carry one empty frame. */
static inline uint32_t ft__step_nseg(const struct ft__sched *s, uint32_t g, int chunk)
{
	return ft__step_has_data(s, g) ? ft__chunk_nseg(s, chunk) : 1;
}

/* Chunk this rank receives at step g. */
static inline int ft__recv_chunk(const struct ft__sched *s, uint32_t g)
{
	if (s->bcast)
		return 0;
	return (int)g < s->n - 1 ? ft__mod(s->r - (int)g - 1, s->n)
				 : ft__mod(s->r - ((int)g - (s->n - 1)), s->n);
}

/* Chunk this rank sends at step g. */
static inline int ft__send_chunk(const struct ft__sched *s, uint32_t g)
{
	if (s->bcast)
		return 0;
	return (int)g < s->n - 1 ? ft__mod(s->r - (int)g, s->n)
				 : ft__mod(s->r + 1 - ((int)g - (s->n - 1)), s->n);
}

/* Byte offset and length of segment k of chunk c. */
static inline void ft__seg_range(const struct ft__sched *s, int c, uint32_t k, size_t *off,
				 size_t *len)
{
	size_t lo = s->bcast ? 0 : ft__chunk_lo(s, c);
	size_t clen = s->bcast ? s->count : ft__chunk_len(s, c);
	size_t first = (size_t)k * s->seg_elems;
	size_t m = clen > first ? clen - first : 0;

	if (m > s->seg_elems)
		m = s->seg_elems;
	*off = (lo + first) * s->es;
	*len = m * s->es;
}

/* Byte range of frame (g, k): empty for the closing and commit steps. */
static inline void ft__frame_range(const struct ft__sched *s, uint32_t g, int c, uint32_t k,
				   size_t *off, size_t *len)
{
	if (!ft__step_has_data(s, g)) {
		*off = *len = 0;
		return;
	}
	ft__seg_range(s, c, k, off, len);
}

#endif
