/* ckpt.h: running partial checkpoints of sharded state: on-disk format, the writer's hooks, the reader. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_CKPT_H
#define FTCC_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ftcc.h"

/*
 * On disk, in <dir>/<job id>/ (dir: ft_ckpt_config.dir, else FTCC_CKPT_DIR,
 * else the log directory), each rank R has:
 *
 *   ck-r<R>.jnl              the commit journal (records below);
 *   ck-r<R>-g<I>-a.dat       slot 0 and slot 1 of sharded region I (its
 *   ck-r<R>-g<I>-b.dat       registration index): block b's copy sits at
 *                            b x (64 + block_bytes) in either file.
 *
 * A block copy is struct ft__ckpt_copy (64 bytes) then len bytes of data; crc
 * is the CRC32C of the head (crc 0) and the data. A round writes each of its
 * blocks into the slot that does NOT hold the block's newest committed copy
 * (never over it), waits for every write (and, sync, fdatasyncs the slot
 * files), and only then appends its COMMIT record to the journal (sync:
 * fdatasync'd before the round counts). Rounds commit in order.
 *
 * The journal (records little-endian, each a multiple of 8 bytes, crc the
 * CRC32C of the record with crc 0):
 *   HEAD    first and once: job, rank, geometry (struct ft__ckpt_jhead, then
 *           nregions struct ft__ckpt_jregion);
 *   SNAP    the whole committed table (nblocks struct ft__ckpt_jsnap), then
 *           nres residuals: written when the journal is compacted (a new
 *           file HEAD + SNAP renamed over the old one);
 *   COMMIT  round, step; count struct ft__ckpt_jentry (the round's blocks and
 *           slots), then nres float residuals: the L2 distance each block
 *           had from its saved copy after the round (0 for saved blocks),
 *           over all blocks in order, for the perturbation estimate.
 * Rounds strictly increase. A reader takes the records up to the first that
 * does not check (magic, version, type, len, crc, bounds, round order): a
 * torn tail is an uncommitted round. From them it knows, per block and slot,
 * the round and step of the committed copy that slot should hold; a copy is
 * believed only when its head says exactly that round and its CRC checks.
 * Restore takes the newest believed copy of each block: a torn or flipped
 * newest copy falls back to the other slot's older committed copy, and an
 * uncommitted write (a crash mid-round) sits in a slot whose committed
 * round it does not match, or over a copy that was not the newest.
 */

#define FT__CKPT_MAGIC 0x4b435446u        /* "FTCK": a block copy */
#define FT__CKPT_JMAGIC 0x4a435446u        /* "FTCJ": a journal record */
#define FT__CKPT_VERSION 1
#define FT__CKPT_HDR 64
#define FT__STATE_MAX_REGIONS 64    /* FT__STATE_MAX of comm.h */

enum { FT__CKPT_JHEAD = 1, FT__CKPT_JCOMMIT = 2, FT__CKPT_JSNAP = 3 };

struct ft__ckpt_copy {
	uint32_t magic;
	uint16_t version;
	uint16_t slot;
	uint32_t region;        /* registration index */
	uint32_t len;           /* data bytes (the last block may be short) */
	uint64_t block;
	uint64_t round;
	uint64_t step;
	uint64_t job_hash;
	int32_t rank;
	uint32_t pad[2];
	uint32_t crc;
};

struct ft__ckpt_jrec {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t len;           /* the whole record */
	uint32_t crc;
	uint64_t round;
	uint64_t step;
	uint64_t count;         /* HEAD: regions; COMMIT: entries; SNAP: blocks */
	uint64_t nres;          /* residuals after the entries: 0 or every block */
};

struct ft__ckpt_jhead {
	uint64_t job_hash;      /* ft__jnl_job_hash(job id) */
	uint64_t nonce;         /* the job run's (ft_comm job_nonce); 0 in an export */
	int32_t rank, world_size;
	uint64_t block_bytes;
	uint32_t strategy;
	uint32_t interval;      /* >= 1; 0: an exported checkpoint (ckpt_seed.c), no run's */
	double fraction;
	uint64_t total_bytes;   /* shard bytes of every member, at ft_ckpt_enable */
	uint64_t seed;
};

struct ft__ckpt_jregion {
	uint32_t index;         /* registration index */
	uint32_t dtype;
	uint64_t bytes;
	uint64_t nblocks;
};

struct ft__ckpt_jentry {
	uint32_t region;        /* position in HEAD's region list */
	uint32_t slot;
	uint64_t block;
};

struct ft__ckpt_jsnap {
	uint64_t round[2];      /* committed round the slot holds, 0: none */
	uint64_t step[2];
};

/* A rank's checkpoint as its journal says, with its slot files open. */
struct ft__ckpt_image {
	struct ft__ckpt_jhead head;
	struct ft__ckpt_jregion *regs;
	size_t nregs;
	size_t *first;          /* global number of each region's block 0 */
	size_t nblocks;         /* over all regions */
	struct ft__ckpt_jsnap *tab; /* per global block */
	float *resid;           /* per global block, or NULL: none recorded */
	uint64_t last_round, last_step;
	uint64_t commits;       /* COMMIT records read */
	uint64_t valid_bytes, file_bytes;
	const char *tail_why;   /* NULL when the whole journal checked */
	int (*fd)[2];           /* per region: slot files, -1 when missing */
	bool own_fds;
	/* copies in memory instead of files (a holder's mirror, a fetch from it):
	 * per region and slot, block b's copy at (b - mem_first) x (64 +
	 * block_bytes), for b in [mem_first, mem_first + mem_n); NULL: none */
	unsigned char *(*mem)[2];
	size_t mem_first, mem_n;        /* mem_n SIZE_MAX: every block, and one of zeros */
	bool own_mem;                   /* its slots are ft__big_alloc's, of ft__ckpt_mem_bytes */
	/* copies already checked and written into the caller's buffer as they
	 * came (a fetch with a destination, ckpt_peer.h), for blocks [mem_first,
	 * mem_first + mem_n) of region sunk_reg: each block's slot, -1 when no
	 * valid copy came (sunk_why says why); NULL: none */
	int8_t *sunk_slot;
	const char **sunk_why;
	size_t sunk_reg;
};
/* The bytes of one slot of region reg in an image's memory. */
size_t ft__ckpt_mem_bytes(const struct ft__ckpt_image *img, size_t reg);

/*
 * The most blocks a checkpoint has over all its regions (ft_ckpt_enable
 * refuses more: FT_EINVAL). The reader sizes its table (32 bytes a block)
 * from the HEAD before any record vouches for it, so this bounds what a
 * crafted HEAD of a few hundred bytes makes it allocate: 512 MiB, where
 * 2^32 blocks asked for 128 GiB. At the default 4 KiB block it is 64 GiB
 * of sharded state per rank.
 */
#define FT__CKPT_MAX_BLOCKS ((size_t)1 << 24)

/* "<dir>/ck-r<rank>.jnl" or, region >= 0, "<dir>/ck-r<rank>-g<region>-<a|b>.dat". */
int ft__ckpt_path(char *out, size_t cap, const char *dir, int rank, int region, int slot);

/*
 * Parses a journal image of len bytes into img (regs, first, tab, resid
 * allocated; fds not opened). Any byte string is safe input. 0: the whole
 * journal checks; -FT_ECORRUPT with img filled from the valid prefix
 * (tail_why says why it stops), or with nothing usable when HEAD does not
 * check (img->regs NULL); -FT_ENOMEM.
 */
int ft__ckpt_parse(const void *buf, size_t len, struct ft__ckpt_image *img);
/* Applies the records in buf (COMMIT, SNAP) to an image whose HEAD is
 * parsed, as ft__ckpt_parse would after it: 0, or -FT_ECORRUPT at the
 * first record that does not check (the image keeps those before it). */
int ft__ckpt_parse_more(struct ft__ckpt_image *img, const void *buf, size_t len);
/* Reads rank's journal in dir and opens its slot files read-only.
 * -FT_EIO: no journal; otherwise as ft__ckpt_parse (img usable when regs != NULL). */
int ft__ckpt_image_open(const char *dir, int rank, struct ft__ckpt_image *img);
void ft__ckpt_image_free(struct ft__ckpt_image *img);
/* Whether copy head h and its data (the block's length) are the copy of
 * block `block` of region position reg in slot s that img's table believes:
 * 0, or -FT_ECORRUPT with *why. */
int ft__ckpt_check_copy(const struct ft__ckpt_image *img, size_t reg, size_t block, int s,
			const struct ft__ckpt_copy *h, const void *data, const char **why);

/*
 * Reads the newest believed copy of block `block` of region position reg
 * into dst (len bytes, the block's length). 0 with *round, *step, *slot;
 * -FT_ECORRUPT when neither slot holds one (why says what was wrong). A
 * block of an image whose copies were sunk is in the caller's buffer
 * already: dst is not written, the rest is as said.
 */
int ft__ckpt_read_block(const struct ft__ckpt_image *img, size_t reg, size_t block, void *dst,
		      uint64_t *round, uint64_t *step, int *slot, char *why, size_t whylen);

/*
 * Checks every copy the journal names in rank's checkpoint in dir; prints
 * (when out is not NULL) the rounds, and each bad copy with why, and every
 * block when verbose. 0: every block's newest committed copy checks (an
 * older one overwritten by a later write is not an error);
 * -FT_ECORRUPT: a committed copy is torn or flipped, the journal's HEAD
 * does not check, or more than one record's worth of its tail does not (a
 * shorter bad tail is the uncommitted round of a crash: reported, not an
 * error); -FT_EIO: no journal.
 */
int ft__ckpt_verify(const char *dir, int rank, void *out /* FILE * */, bool verbose);

/* A journal record's head; its CRC over the head (crc 0) and the rest of its len bytes. */
struct ft__ckpt_jrec ft__ckpt_rec_head(int type, size_t len, uint64_t round, uint64_t step,
				       uint64_t count, uint64_t nres);
void ft__ckpt_rec_seal(void *buf, size_t len);
/* A journal of img: HEAD, then (snap) a SNAP of its table (allocated, *out). */
int ft__ckpt_build_journal(const struct ft__ckpt_image *img, bool snap, char **out, size_t *len);
/* *h = *what (slot, region, len, block, round, step, job_hash, rank), then
 * magic, version and the CRC over the head and len bytes of data. */
void ft__ckpt_copy_seal(struct ft__ckpt_copy *h, const struct ft__ckpt_copy *what, const void *data);

/*
 * Exports rank's checkpoint in src (a job's checkpoint directory) to dst
 * (made if missing): its newest valid copy of every block, bound to no run
 * (ckpt_seed.c). 0 with *blocks, *bytes and *step (the newest block's
 * step); -FT_EIO no journal of rank in src, or dst cannot be written (why
 * says which); -FT_ECORRUPT a block has no valid copy or the HEAD does not
 * check (why names it). On an error dst holds rank's earlier export
 * whole, or no journal of rank (nothing a reader believes).
 */
int ft__ckpt_export(const char *src, int rank, const char *dst, uint64_t *blocks, uint64_t *bytes,
		    uint64_t *step, char *why, size_t whylen);

/* A sharded region as a seed must match it: dtype and bytes. */
struct ft__ckpt_shape {
	unsigned dtype;
	size_t bytes;
};
/*
 * Reads rank's export in dir (of a job of world_size ranks) into bufs[i]
 * (shape[i].bytes each) for the n sharded regions, in order. 0 with info
 * (blocks, bytes, ckpt_step, oldest_step, the perturbation estimate);
 * -FT_EIO no export of rank in dir; -FT_ECORRUPT not an export, or a block
 * without a valid copy; -FT_EMISMATCH another world size or other regions.
 * Any byte of the files is safe input; bufs may hold garbage on an error.
 */
int ft__ckpt_seed_read(const char *dir, int rank, int world_size,
		       const struct ft__ckpt_shape *shape, size_t n, char *const *bufs,
		       struct ft_restore_info *info);

struct ft_comm;
/* Finishes the writes in flight and frees the checkpointer (ft_finalize). */
void ft__ckpt_close(struct ft_comm *c);
/* The state transfer reached a rejoined process (state.c): restores its shards when enabled. */
int ft__ckpt_state_received(struct ft_comm *c, uint64_t now_step, uint64_t total_bytes);
/* Journal bytes past which it is compacted (default 4 MiB; tests lower it). */
extern uint64_t ft__ckpt_journal_slack;
/* "io_uring" or "pwrite" (NULL: checkpoints not enabled). */
const char *ft__ckpt_engine(const struct ft_comm *c);
/* Root side of the state header: this rank's latest step and the total shard bytes. */
void ft__ckpt_hint(const struct ft_comm *c, uint64_t *now_step, uint64_t *total_bytes);

#endif
