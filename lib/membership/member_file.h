/* member_file.h: the file rendezvous's state and its whole-file reads and writes, shared by member_file.c and member_file_io.c. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_MEMBER_FILE_H
#define FTCC_MEMBER_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "internal.h"
#include "membership.h"
#include "reserve.h"

#define HOST_MAX 256
#define MEMBER_FILE_MAX (FT__ADDR_MAX + FT__CTRL_MAX + HOST_MAX + 64)
#define LEFT_FILE_MAX 96
#define VIEW_FILE_MAX(world) (512 + 12 * (size_t)(world))
/* A view's reserve is held by every rank while it takes a page at most
 * (worlds up to 298 ranks); in larger worlds by the lowest ranks alone,
 * the likeliest coordinators, so that a world's reserves stay small. */
#define VIEW_SPARE_ALL 4096
#define VIEW_SPARE_RANKS 8
#define ENDED_FILE "ended"
/* the reserve's files (reserve.h) */
enum { SPARE_MEMBER, SPARE_VIEW, SPARE_LEFT, SPARE_FILES };

struct mbf {
	char dir[600];          /* <root>/<job> */
	int rank;               /* original rank */
	int world_size;
	int lock_fd;            /* flock held while this rank lives */
	struct timespec started; /* its stamp when taken: this incarnation's start */
	uint64_t nonce;         /* this job's, from the view of generation 0 */
	int start_wait_ms;      /* ft__mb_params.start_wait_ms */
	uint32_t incarnation;   /* ft__mb_params.incarnation */
	bool said_quorum;       /* the wait for a first view's majority was logged */
	int64_t *dead_since;    /* generation 0: when each rank was first seen dead (ms), 0 */
	struct ft__reserve spare; /* the next recovery's files, held (reserve.h) */
	struct ft__warn_gate say; /* writes that fail, said once per period */
	struct ft__warn_gate said_spare; /* writes the reserve took */
};

/* Writes dir/name whole or not at all (exclusive: only if it does not
 * exist); on a full file system from reserve file spare of r (r NULL or
 * spare -1: none). 0, or a negative errno. */
int ft__mbf_write(struct mbf *r, const char *dir, const char *name, const char *text,
		  int exclusive, int spare);
/* Says that dir/name could not be written (rc), once per period. */
void ft__mbf_say_unwritten(struct mbf *r, const char *dir, const char *name, int rc);
/* Reads a file into buf (NUL-terminated): its length, -ENOENT, -FT_E*. A
 * file longer than cap - 1 bytes is cut there and *cut set. */
int ft__mbf_read_file(const char *path, char *buf, size_t cap, bool *cut);

#endif
