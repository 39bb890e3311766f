/* test_schedule.c: the ring's chunk, segment and step arithmetic (lib/core/schedule.h), checked exhaustively over small cases. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "schedule.h"

static const size_t counts[] = {0, 1, 2, 3, 7, 8, 9, 64, 1000, 12345, 65537};
static const size_t segs[] = {1, 2, 3, 64, 1000, 1u << 20};

static struct ft__sched sched(int n, int r, size_t count, size_t es, size_t seg)
{
	struct ft__sched s = {.n = n, .r = r, .count = count, .es = es, .seg_elems = seg,
			      .data_last = (uint32_t)(2 * n - 3)};
	return s;
}

/* Chunks tile [0, count) in order, with lengths that differ by at most one. */
Test(schedule, chunks_tile_the_buffer)
{
	for (int n = 1; n <= 9; n++)
		for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
			struct ft__sched s = sched(n, 0, counts[ci], 4, 64);
			size_t at = 0, min = SIZE_MAX, max = 0;
			for (int c = 0; c < n; c++) {
				size_t len = ft__chunk_len(&s, c);
				cr_assert_eq(ft__chunk_lo(&s, c), at, "n=%d count=%zu chunk %d", n,
					     counts[ci], c);
				at += len;
				min = len < min ? len : min;
				max = len > max ? len : max;
			}
			cr_assert_eq(at, counts[ci], "n=%d: chunks cover %zu of %zu", n, at, counts[ci]);
			cr_assert_leq(max - min, 1, "n=%d count=%zu: uneven chunks", n, counts[ci]);
		}
}

/* A chunk's segments tile its bytes exactly; an empty chunk has one empty segment. */
Test(schedule, segments_tile_each_chunk)
{
	for (int n = 1; n <= 7; n++)
		for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
			for (size_t si = 0; si < sizeof(segs) / sizeof(segs[0]); si++) {
				struct ft__sched s = sched(n, 0, counts[ci], 8, segs[si]);
				for (int c = 0; c < n; c++) {
					uint32_t nseg = ft__chunk_nseg(&s, c);
					size_t at = ft__chunk_lo(&s, c) * 8, off, len;
					cr_assert_geq(nseg, 1);
					for (uint32_t k = 0; k < nseg; k++) {
						ft__seg_range(&s, c, k, &off, &len);
						cr_assert_eq(off, at, "n=%d count=%zu seg=%zu chunk %d seg %u",
							     n, counts[ci], segs[si], c, k);
						cr_assert_leq(len, segs[si] * 8);
						cr_assert(len > 0 || nseg == 1, "empty segment among %u", nseg);
						at += len;
					}
					cr_assert_eq(at, (ft__chunk_lo(&s, c) + ft__chunk_len(&s, c)) * 8);
				}
			}
}

/*
 * The step pattern: what rank r sends at step g is what rank r+1 receives
 * at step g; what a rank receives at step g it sends at step g+1 (the
 * pipeline); reduce-scatter receives every chunk but its own, leaving it
 * the full reduction of chunk r+1; allgather receives every chunk but r+1.
 */
Test(schedule, ring_steps)
{
	for (int n = 2; n <= 9; n++) {
		for (int r = 0; r < n; r++) {
			struct ft__sched s = sched(n, r, 100, 4, 8);
			struct ft__sched right = sched(n, (r + 1) % n, 100, 4, 8);
			int *seen = calloc((size_t)n, sizeof(int));
			for (uint32_t g = 0; g <= s.data_last; g++) {
				cr_assert_eq(ft__send_chunk(&s, g), ft__recv_chunk(&right, g),
					     "n=%d r=%d step %u: sent chunk is not the one received", n,
					     r, g);
				if (g < s.data_last)
					cr_assert_eq(ft__recv_chunk(&s, g), ft__send_chunk(&s, g + 1),
						     "n=%d r=%d step %u: received chunk not sent next",
						     n, r, g);
				int c = ft__recv_chunk(&s, g);
				cr_assert(c >= 0 && c < n);
				if ((int)g < n - 1)
					cr_assert_neq(c, r, "reduce-scatter receives its own chunk");
				else
					cr_assert_neq(c, (r + 1) % n, "allgather receives chunk r+1");
				seen[c]++;
			}
			cr_assert_eq(ft__send_chunk(&s, 0), r, "step 0 sends chunk r");
			cr_assert_eq(ft__recv_chunk(&s, (uint32_t)n - 2), (r + 1) % n,
				     "reduce-scatter ends on chunk r+1");
			for (int c = 0; c < n; c++)
				cr_assert_eq(seen[c], c == r || c == (r + 1) % n ? 1 : 2,
					     "n=%d r=%d: chunk %d received %d times", n, r, c, seen[c]);
			free(seen);
		}
	}
}

/* Commit and closing steps carry one empty frame; a broadcast is one chunk of count bytes. */
Test(schedule, empty_steps_and_broadcast)
{
	struct ft__sched s = sched(4, 1, 1000, 4, 16);
	size_t off, len;

	cr_assert(ft__step_has_data(&s, s.data_last));
	cr_assert_not(ft__step_has_data(&s, s.data_last + 1));
	cr_assert_eq(ft__step_nseg(&s, s.data_last + 1, 0), 1);
	ft__frame_range(&s, s.data_last + 2, 0, 0, &off, &len);
	cr_assert(off == 0 && len == 0);

	struct ft__sched b = {.n = 5, .r = 2, .bcast = true, .count = 1000, .es = 1,
			      .seg_elems = 300, .data_last = 1};
	cr_assert_eq(ft__chunk_nseg(&b, 0), 4);
	ft__seg_range(&b, 0, 3, &off, &len);
	cr_assert(off == 900 && len == 100);
	cr_assert_eq(ft__recv_chunk(&b, 0), 0);
	cr_assert_eq(ft__send_chunk(&b, 0), 0);
	cr_assert_not(ft__step_has_data(&b, 1));
	cr_assert_eq(ft__step_nseg(&b, 1, 0), 1);
}

/*
 * Reduce-scatter and allgather run the halves from one ring position back
 * (s.r = r - 1): over n blocks of b elements, chunk c is block c; rank r
 * receives every chunk but r - 1 during the reduce-scatter (chunk r last,
 * so it ends holding its own block), never receives chunk r - 1 (sent raw
 * at step 0, never overwritten), and the allgather starts by sending
 * chunk r and receives every other chunk once.
 */
Test(schedule, halves_shifted_one_position)
{
	for (int n = 2; n <= 9; n++)
		for (int r = 0; r < n; r++) {
			size_t b = 5;
			struct ft__sched s = sched(n, ft__mod(r - 1, n), b * (size_t)n, 4, 2);
			int seen[9] = {0}, got[9] = {0};
			for (int c = 0; c < n; c++) {
				cr_assert_eq(ft__chunk_lo(&s, c), (size_t)c * b);
				cr_assert_eq(ft__chunk_len(&s, c), b);
			}
			cr_assert_eq(ft__send_chunk(&s, 0), ft__mod(r - 1, n));
			for (uint32_t g = 0; (int)g <= n - 2; g++)
				seen[ft__recv_chunk(&s, g)]++;
			cr_assert_eq(ft__recv_chunk(&s, (uint32_t)(n - 2)), r, "n=%d r=%d", n, r);
			for (int c = 0; c < n; c++)
				cr_assert_eq(seen[c], c == ft__mod(r - 1, n) ? 0 : 1, "n=%d r=%d c=%d", n,
					     r, c);
			cr_assert_eq(ft__send_chunk(&s, (uint32_t)(n - 1)), r, "n=%d r=%d", n, r);
			for (uint32_t g = (uint32_t)(n - 1); g <= (uint32_t)(2 * n - 3); g++)
				got[ft__recv_chunk(&s, g)]++;
			for (int c = 0; c < n; c++)
				cr_assert_eq(got[c], c == r ? 0 : 1, "n=%d r=%d c=%d", n, r, c);
		}
}
