/* jnl.h: the pairwise send/recv logs: record format, the writer (io_uring or pwrite) and the reader. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_JNL_H
#define FTCC_JNL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reduce.h"

/*
 * Each rank keeps, in its log directory, two slots (op_seq & 1), so that the
 * slot of op S-1 stays whole while op S is being logged. A slot is two
 * files:
 *
 *   r<R>-s<slot>.log   the journal: a stream of records (below), starting
 *                      with a FILE record, truncated when a new op takes
 *                      the slot;
 *   r<R>-s<slot>.in    the payload: the op's input, mapped MAP_SHARED and
 *                      written by the reduction kernel as it reads each
 *                      input element (no extra pass), so it survives the
 *                      process (page cache or shared memory).
 *
 * Records (little-endian, every record a multiple of 8 bytes):
 *   struct ft__logrec head, then head.len - sizeof(head) bytes of body.
 *   crc is the CRC32C of the whole record (head with crc = 0, and body).
 *   A reader stops at the first record that does not check (magic,
 *   version, type, len within bounds, crc): that is a torn or corrupt tail.
 *
 * Types:
 *   FILE   body struct ft__logfile: job hash, rank, world size, slot.
 *   BEGIN  an op started: op_seq, gen, bytes (the input size), body struct
 *          ft__logop.
 *   SEND   a data frame was queued to the right neighbour: op_seq, gen,
 *          step, seg, off, len, crc (the frame's payload CRC when frames
 *          carry one, else 0), peer (original rank).
 *   RECV   a data frame from the left neighbour landed: same fields.
 *   INPUT  the op's whole input is in the .in file: bytes = its size (equal
 *          to BEGIN's; the head's len stays the record's length); body: nreg
 *          struct ft__logreg {off, len, crc} covering [0, bytes) exactly
 *          once (any order), crc the check value (ft__jnl_sum) of each
 *          region of the .in file.
 *   END    this rank holds the op's result.
 *
 * Every record carries the op's op_seq (FILE too). A journal's shape: FILE
 * first and once; one BEGIN, with op_seq & 1 == the FILE's slot; SEND,
 * RECV, INPUT (once), END (once) after it, with its op_seq. A record that
 * breaks the shape ends the journal like a bad CRC does.
 *
 * Bounds: one journal per slot holds at most a BEGIN, 2 x (frames of one op)
 * SEND/RECV, an INPUT with one region per segment, and an END; the .in file
 * is the op's input size. So disk (or shared memory) use per rank is about
 * 2 x the largest buffer plus two journals of O(frames) x 64 bytes.
 */

#define FT__JNL_MAGIC 0x474c5446u       /* "FTLG" */
#define FT__JNL_VERSION 1
#define FT__JNL_REC_MAX ((uint32_t)1 << 24)     /* largest record accepted */

enum ft__logrec_type {
	FT__JNL_FILE = 1,
	FT__JNL_BEGIN = 2,
	FT__JNL_SEND = 3,
	FT__JNL_RECV = 4,
	FT__JNL_INPUT = 5,
	FT__JNL_END = 6,
};

struct ft__logrec {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t len;           /* whole record, head included; multiple of 8 */
	uint32_t crc;           /* CRC32C of the record with this field 0 */
	uint64_t op_seq;
	uint32_t gen;
	uint32_t step;
	uint32_t seg;
	int32_t peer;
	uint64_t off;
	uint64_t bytes;
	uint32_t data_crc;
	uint32_t pad;
};

struct ft__logfile {
	uint64_t job_hash;      /* ft__jnl_job_hash(job_id) */
	int32_t rank, world_size;
	uint32_t slot, pad;
};

struct ft__logop {
	uint8_t kind, dtype, op, in_place;      /* enum ft__coll_kind, ft_dtype, ft_op */
	int32_t root;                          /* a broadcast's root; an allgather's blocks */
	uint64_t count;
};

struct ft__logreg {
	uint64_t off, len;
	uint32_t crc, pad;      /* crc: ft__jnl_sum of the region (see above) */
};

/* The check value of a payload region (ft__logreg.crc): ft__sum (reduce.h)
 * over the region. Records themselves carry CRC32C. */
/* init, update, final over one buffer */
uint32_t ft__jnl_sum(const void *p, size_t len);

/* FNV-1a 64 of the job id: ties a log to its job. */
uint64_t ft__jnl_job_hash(const char *job_id);

/* ---- writer ---- */

enum ft__jnl_engine { FT__JNL_URING, FT__JNL_PWRITE };

struct ft__jnl_params {
	const char *dir;        /* created (0700) if missing */
	const char *job_id;
	int rank, world_size;
	bool sync;              /* durability host: synced before an INPUT counts */
	/* FT__JNL_URING: io_uring, falling back to pwrite (with a warning) when
	 * io_uring_queue_init fails or liburing is not compiled in;
	 * FT__JNL_PWRITE: pwrite only. */
	enum ft__jnl_engine engine;
};

struct ft__jnl;

/* Opens (creates) this rank's log files; *out NULL on error. */
int ft__jnl_open(const struct ft__jnl_params *p, struct ft__jnl **out);
/* Which engine runs ("io_uring" or "pwrite"). */
const char *ft__jnl_engine_name(const struct ft__jnl *l);
void ft__jnl_close(struct ft__jnl *l);

/*
 * Starts op op_seq in slot op_seq & 1: waits for that slot's earlier
 * writes, truncates its journal, writes FILE and BEGIN (queued), and maps
 * its .in file with room for `bytes` (grown when needed). Returns the
 * mapping (NULL when bytes == 0) through *payload. The mapping stays valid
 * until the next ft__jnl_begin on the same slot or ft__jnl_close.
 */
int ft__jnl_begin(struct ft__jnl *l, uint64_t op_seq, uint32_t gen, const struct ft__logop *op,
		  void **payload);
/*
 * ft__jnl_begin with the input size given: ft__jnl_begin takes it as
 * op->count x ft_dtype_size(op->dtype) (-FT_EINVAL for an unknown dtype);
 * kinds whose input is not that (a gather's) say it here. BEGIN's bytes
 * field holds it, and INPUT's must equal it.
 */
int ft__jnl_begin_bytes(struct ft__jnl *l, uint64_t op_seq, uint32_t gen,
			const struct ft__logop *op, uint64_t bytes, void **payload);
/* Queues a SEND or RECV record (type) of the current op. Never blocks on I/O
 * unless the batch buffer is full. */
int ft__jnl_frame(struct ft__jnl *l, int type, uint32_t gen, uint32_t step, uint32_t seg,
		  int32_t peer, uint64_t off, uint64_t len, uint32_t data_crc);
/*
 * The current op's input is whole in the payload mapping: writes the INPUT
 * record (regions and their check values, computed by the caller as it
 * saved them). sync (durability host): waits until it is written and the
 * payload and journal are synced. Otherwise submits it and returns (an
 * error shows at a later call): a record lost with the process only means
 * the new incarnation cannot replay that op, and its application runs it
 * instead.
 */
int ft__jnl_input(struct ft__jnl *l, const struct ft__logreg *regs, size_t nreg);
/* The same, and returns only once it is written, whatever the durability
 * (a submitted write dies with the process that made it, when the kernel
 * had not run it yet): for an op whose input only the log can give back. */
int ft__jnl_input_written(struct ft__jnl *l, const struct ft__logreg *regs, size_t nreg);
/* The same, queued with the op's other records (submitted with END or when
 * the batch fills), not submitted now: for small ops, where a submission
 * per record is what logging costs. Durability host: as ft__jnl_input. */
int ft__jnl_input_queued(struct ft__jnl *l, const struct ft__logreg *regs, size_t nreg);
/* Queues END and submits what is queued (does not wait). */
int ft__jnl_end(struct ft__jnl *l);

/* ---- reader ---- */

/* "<dir>/r<rank>-s<slot>.<ext>" into out; -FT_EINVAL when it does not fit. */
int ft__jnl_path(char *out, size_t cap, const char *dir, int rank, int slot, const char *ext);

/*
 * 0 when the nreg regions lie in [0, bytes), do not overlap and cover it
 * exactly (empty regions allowed anywhere in range), else -FT_ECORRUPT;
 * -FT_ENOMEM when a large list cannot be sorted. regs need no alignment.
 */
int ft__jnl_check_regs(const void *regs, size_t nreg, uint64_t bytes);

/*
 * Checks the payload file at path against nreg regions (an INPUT body, no
 * alignment needed) of an input of bytes: 0, -FT_ECORRUPT (short file, a
 * CRC that differs), or -errno (-ENOENT: no payload file). When copy is not
 * NULL, the input (bytes of it) is read into copy and checked there.
 */
int ft__jnl_check_payload(const char *path, const void *regs, size_t nreg, uint64_t bytes,
			  void *copy);

struct ft__jnl_scan {
	/* from the journal */
	bool have_file;
	struct ft__logfile file;
	bool have_op;           /* a BEGIN was found */
	uint64_t op_seq;
	uint32_t gen;
	struct ft__logop op;
	bool have_input;        /* an INPUT record checked, and the payload against it */
	uint64_t input_bytes;
	bool ended;             /* an END record */
	size_t frames_sent, frames_recv;
	size_t records;         /* records that checked */
	uint64_t valid_bytes;   /* journal bytes up to the first bad record */
	uint64_t file_bytes;    /* journal size */
	const char *tail_why;   /* NULL when the whole journal checked, else why the tail is bad */
};

/*
 * Parses a journal image of len bytes: fills *s; calls each (if not NULL)
 * for every record that checks, in order (body: the record's body). Never
 * reads past len; any byte string is safe input. Returns 0 when the whole
 * image checks, -FT_ECORRUPT when a tail does not (s says where and why).
 */
int ft__jnl_parse(const void *buf, size_t len, struct ft__jnl_scan *s,
		  void (*each)(void *arg, const struct ft__logrec *h, const void *body),
		  void *arg);

/*
 * Reads slot `slot` of rank `rank` in dir: parses its journal and, when it
 * has an INPUT for job_hash, checks the payload file against its regions.
 * *s filled; 0, -ENOENT (no journal, or an empty one), -FT_ECORRUPT (bad tail, another job,
 * a payload that does not match its INPUT record: have_input is false).
 */
int ft__jnl_read_slot(const char *dir, int rank, int slot, uint64_t job_hash,
		      struct ft__jnl_scan *s);

/*
 * Of the two slots of rank in dir, the latest op whose input is whole and
 * checked: 0 and *op_seq, *op, *gen; -ENOENT when none. When buf is not NULL
 * and the input fits in cap bytes, it is copied there (re-checked).
 */
int ft__jnl_last_input(const char *dir, int rank, uint64_t job_hash, uint64_t *op_seq,
		       uint32_t *gen, struct ft__logop *op, void *buf, size_t cap);

#endif
