/* ckpt_writer.h: the running checkpoint writer's state, shared by ckpt.c (enable, steps, restore: the API) and ckpt_round.c (a round: choosing blocks, writing, committing, the journal). */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_CKPT_WRITER_H
#define FTCC_CKPT_WRITER_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aio.h"
#include "ckpt.h"
#include "ckpt_peer.h"
#include "comm.h"
#include "internal.h"

/* io_uring queue depth: room for a whole round (every block, its syncs and
 * its commit) at once, so that no write of it waits in the writer's backlog
 * for a later ft_ckpt_step to be submitted; at most CK_QD_MAX */
#define CK_QD_MIN 64
#define CK_QD_MAX 4096
#define CK_DEFAULT_BLOCK 4096

enum { R_IDLE, R_WRITING, R_SYNCING, R_COMMITTING, R_JSYNC };

struct ck_round {
	int phase;
	uint64_t round, step;
	size_t n, cap;
	size_t *blk;            /* global block numbers, ascending */
	uint8_t *slot;
	struct ft__ckpt_copy *hdr;
	struct ft__aio_io *io;
	float *resid;           /* per global block */
	struct ft__aio_io *fsio;        /* sync: one per slot file */
	struct ft__aio_io jio;
	char *rec;
	size_t rec_cap;
	uint64_t jpos0;         /* where its COMMIT record starts */
	size_t left;            /* ios not complete (and the holder's send, peer_due) */
	int err;
	bool peer_due;          /* posted to the holder, not all sent yet */
	struct iovec *piece;    /* 2 per block: what the holder is sent */
};

struct ck_reg {
	int index;
	unsigned dtype;
	size_t es;
	char *ptr;
	size_t bytes, nblocks, first;
	char *saved;
};

struct ft__ckpt {
	struct ft_ckpt_config cfg;
	char dir[PATH_MAX];
	struct ft__warn_gate said_abandon; /* a full disk abandons every round: said once per period */
	int rank;
	struct ft__ckpt_image img;        /* the committed table, as the journal says */
	struct ck_reg reg[FT__STATE_MAX];
	size_t nreg, nblocks;
	uint64_t *pend;                 /* per block: round writing it, 0 none */
	double *dist;
	size_t *order;
	unsigned char *chosen;
	double *score;
	struct ck_round rounds[2];
	uint64_t round, done;           /* last round started, last finished */
	uint64_t calls, now_step, total;
	size_t rr;
	uint64_t rng;
	int jfd;
	uint64_t jpos;
	struct ft__aio aio;
	bool aio_ok;
	int err;                        /* to return once */
	bool restore_due, restored;
	bool resumed;                   /* this run's journal of this rank was found here */
	int restore_rc;
	struct ft_restore_info rinfo;
	struct ft_ckpt_stats st;
	bool disk;                      /* rounds go to the files */
	struct ft__ckpt_peer *peer;     /* rounds go to a holder too (ckpt_peer.h), else NULL */
	int holder;                     /* where this rank's stream goes; -1: none */
	uint64_t lost_seen;             /* ft__ckpt_peer_lost() as the stream started */
	bool stream_new;                /* the next round starts the stream: HEAD, every block */
	int64_t retry_ms;               /* a stream lost to the same holder starts again after */
	uint32_t route_gen;             /* the view the stream's holder was chosen in */
	bool holder_paused;             /* ... and until then rounds do not go to it */
	char *stream_head;              /* the HEAD record the stream started with */
};

static inline double ms_since(uint64_t t0)
{
	return (double)(ft__now_ns() - t0) / 1e6;
}

/* ckpt_round.c: rounds, and the helpers the API shares with them */
double ft__ckpt_dist2(const void *a, const void *b, size_t len, unsigned dt);
int ft__ckpt_dir(const struct ft_comm *c, const char *cfg_dir, char *out, size_t cap);
int ft__ckpt_start_round(struct ft__ckpt *ck, uint64_t step);
int ft__ckpt_progress(struct ft__ckpt *ck);
int ft__ckpt_wait_done(struct ft__ckpt *ck, uint64_t upto);

#endif
