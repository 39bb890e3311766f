/* policy_rejoin.c: the rejoin policy (exact replay): survivors wait for the failed rank's new incarnation, which finishes the interrupted op from its log. */
/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "fdreg.h"
#include "file.h"
#include "policy.h"

/*
 * The protocol, and what each side writes before what.
 *
 * Every rank logs each op (jnl.h): BEGIN, a SEND or RECV record per data
 * frame, then its input, whole, in the slot's payload file, and an INPUT
 * record with each saved region's CRC32C. The input goes to the payload by
 * the reduction kernel itself, as it reads each element (the same fused
 * save as shrink's in-place backup), so logging costs no extra pass over
 * the buffer; the check value of a region (ft__sum, reduce.h: CRC32C cost
 * too much here) is taken by the same kernel, from the same loads. The INPUT record is written (and, durability
 * host, synced) as soon as the last region is saved, before this rank
 * sends a frame that depends on all of its input, and before it claims the
 * result: so a rank that any other rank could have returned a result from
 * has its input logged.
 *
 * After a failure the survivors complete their own input (from the parts of
 * the buffer not yet overwritten), settle the next generation with the
 * failed rank awaited back (detect.c, membership.h) for up to
 * rejoin_timeout_ms, and run the op again from the start on the new ring.
 * The new incarnation publishes the first op its log lets it take part in:
 * L + 1, L its last op whose input is whole and checked (0: none). The view
 * takes it unless that is past the survivors' first op F + 1 (a log ahead
 * of the job is not of this run): at F + 1 its log holds F's input and
 * ft_init runs F from it; lower (it never logged F, or has no log), its
 * application runs F, with the state a survivor sends it (state.c). The
 * ring, the inputs and so every summation order are those of the failed
 * attempt: the result is bit-identical to a failure-free run, with
 * contributors == n. Restarting the op whole rather than resuming it
 * mid-ring needs no received payload in the log (resuming would: twice the
 * buffer written per op) and no agreement on a cut, at the price of one
 * op's time after a failure.
 *
 * Ops run with commit steps (three ranks or more), so after a failure
 * either every survivor returned the op or none did. Whatever fails in the
 * log (a full disk, no io_uring and no pwrite) leaves this rank without a
 * log, with a warning: it still survives others' failures, but its own new
 * incarnation could not rejoin, and the others then go on without it
 * (shrink).
 */

/* The log failed: no more records; the payload (this op's saved input) stays
 * mapped until the next op begins, when the log is closed. */
static void log_dir(const struct ft_comm *c, char *buf, size_t len);

/* Once per log: a full log directory (its own logs, a job's checkpoints)
 * costs this rank its log, never its place in the job. */
static void log_off(struct ft_comm *c, int rc, const char *what)
{
	char dir[FT_PATH_MAX + FT_NAME_MAX + 2];

	if (!c->log_dead) {
		log_dir(c, dir, sizeof(dir));
		ft__warn("log: %s in %s failed (%s): logging is off; a new incarnation of this "
			 "rank could not rejoin", what, dir, ft_strerror(rc));
	}
	c->log_dead = true;
}

/* The region saved last has its check value now (the engine summed it as it saved it). */
static void region_done(struct ft_comm *c)
{
	if (c->sum_pending && c->nreg > 0)
		c->regs[c->nreg - 1].crc = ft__sum_final(&c->sum);
	c->sum_pending = false;
}

#define FT__INPUT_NOW ((size_t)1 << 20)

/* The INPUT record, once the payload holds the whole input. */
static void input_logged(struct ft_comm *c)
{
	int rc;

	if (c->plog == NULL || c->log_dead || c->input_logged || !c->input_whole)
		return;
	region_done(c);
	c->input_logged = true;
	/* a large op's INPUT is written at once, and waited for (a death in
	 * its allgather can then be replayed: a write only submitted dies with
	 * the process when io_uring's worker had not run it; the wait is a
	 * fraction of a millisecond against the op's); so is an allgather's,
	 * before the op sends a frame (its application may not be able to
	 * compute its input again: the shard a reduce-scatter and an update
	 * made); a small op's goes with END, one submission per op */
	rc = c->input_now || c->payload_bytes >= FT__INPUT_NOW
		     ? ft__jnl_input_written(c->plog, c->regs, c->nreg)
		     : ft__jnl_input_queued(c->plog, c->regs, c->nreg);
	if (rc != 0)
		log_off(c, rc, "writing an input record");
}

static int add_region(struct ft_comm *c, size_t off, size_t len, uint32_t crc)
{
	if (c->nreg == c->reg_cap) {
		size_t cap = c->reg_cap ? 2 * c->reg_cap : 256;
		struct ft__logreg *r = realloc(c->regs, cap * sizeof(*r));
		if (r == NULL)
			return -FT_ENOMEM;
		c->regs = r;
		c->reg_cap = cap;
	}
	c->regs[c->nreg++] = (struct ft__logreg){.off = off, .len = len, .crc = crc};
	return 0;
}

/* The payload is whole: one region for all of it. */
static void whole_region(struct ft_comm *c)
{
	c->nreg = 0;
	if (add_region(c, 0, c->payload_bytes, ft__jnl_sum(c->payload, c->payload_bytes)) == 0)
		c->input_whole = true;
}

static void *save_input(struct ft__coll *co, size_t off, size_t len, struct ft__sum **sum)
{
	struct ft_comm *c = co->c;

	region_done(c);
	if (c->input_whole && c->payload_bytes > 0)
		return NULL; /* a restart runs from the saved input itself */
	if (c->payload != NULL && off + len <= c->payload_bytes) {
		if (add_region(c, off, len, 0) != 0) {
			log_off(c, -FT_ENOMEM, "keeping the input's regions");
			return co->in_place && c->backup != NULL ? (char *)c->backup + off : NULL;
		}
		/* summed by the engine as it saves the region, final at the next hook */
		ft__sum_init(&c->sum);
		c->sum_pending = true;
		*sum = &c->sum;
		c->saved_bytes += len;
		if (c->saved_bytes == c->payload_bytes)
			c->input_whole = true; /* once this region is saved, just after */
		return (char *)c->payload + off;
	}
	return co->in_place && c->backup != NULL && off + len <= c->backup_bytes
		       ? (char *)c->backup + off
		       : NULL;
}

static int frame_logged(struct ft__coll *co, int type, const struct ft__frame *h)
{
	struct ft_comm *c = co->c;
	int peer = c->members[ft__mod(c->rank + (type == FT__JNL_SEND ? 1 : -1), c->size)];
	int rc;

	input_logged(c); /* the last region was saved since the previous hook */
	if (c->plog == NULL || c->log_dead || c->replaying)
		return 0;
	rc = ft__jnl_frame(c->plog, type, h->generation, h->step, h->seg, peer, h->offset,
			   h->length, h->crc);
	if (rc != 0)
		log_off(c, rc, "writing a frame record");
	return 0;
}

static int frame_sent(struct ft__coll *co, const struct ft__frame *h, const void *payload)
{
	(void)payload;
	return frame_logged(co, FT__JNL_SEND, h);
}

static int frame_received(struct ft__coll *co, const struct ft__frame *h, const void *payload)
{
	(void)payload;
	return frame_logged(co, FT__JNL_RECV, h);
}

static int claim(struct ft__coll *co)
{
	struct ft_comm *c = co->c;
	int rc;

	input_logged(c);
	if ((rc = ft__det_have_result(c->det, co->tmpl.op_seq)) != 0)
		return rc;
	if (c->plog != NULL && !c->log_dead && !c->replaying && (rc = ft__jnl_end(c->plog)) != 0)
		log_off(c, rc, "writing an end record");
	return 0;
}

static const struct ft__hooks rejoin_hooks = {
	.input_save_at = save_input,
	.frame_sent = frame_sent,
	.frame_received = frame_received,
	.result_held = claim,
};

static int rejoin_begin(struct ft_comm *c, struct ft__call *k, struct ft__run *run)
{
	size_t bytes = k->kind == FT__COLL_BARRIER ? 0 : k->count * k->es;
	struct ft__logop op = {.kind = (uint8_t)k->kind, .dtype = (uint8_t)k->dtype,
			       .op = (uint8_t)k->op, .in_place = k->in_place, .root = k->root,
			       .count = k->count};
	void *payload = NULL;
	int rc = ft__recover_between(c, k, run, false);

	if (rc != 0)
		return rc;
	if (c->log_dead) {
		ft__jnl_close(c->plog);
		c->plog = NULL;
		c->log_dead = false;
	}
	c->nreg = c->saved_bytes = 0;
	c->input_logged = c->input_whole = c->sum_pending = false;
	c->input_now = k->kind == FT__COLL_ALLGATHER;
	c->payload = NULL;
	c->payload_bytes = 0;
	if (c->replaying) {
		/* the log already holds this op's input: nothing to save or write */
		c->input_whole = c->input_logged = true;
		return 0;
	}
	if (c->plog != NULL) {
		/* a broadcast's input is the root's buffer; other ranks need none;
		 * an allgather's, the caller's own block (root: the blocks); a
		 * reduce-scatter is not replayed (ft__rejoin_join): its input is
		 * not logged, its frames are */
		size_t logged = bytes;
		const char *in = NULL;
		if (k->kind == FT__COLL_BROADCAST) {
			logged = k->root == c->cfg.rank ? bytes : 0;
			in = k->dst;
		} else if (k->kind == FT__COLL_REDUCE_SCATTER) {
			logged = 0;
		} else if (k->kind == FT__COLL_ALLGATHER) {
			logged = bytes / (size_t)k->blk->n;
			in = (const char *)k->dst + (size_t)k->blk->me * logged;
			op.root = k->blk->n;
		}
		rc = ft__jnl_begin_bytes(c->plog, run->seq, c->generation, &op, logged, &payload);
		if (rc != 0) {
			log_off(c, rc, "starting an op's log");
			ft__jnl_close(c->plog);
			c->plog = NULL;
			c->log_dead = false;
		} else {
			c->payload = logged > 0 ? payload : NULL;
			c->payload_bytes = logged;
			if (in != NULL && logged > 0) {
				/* saved and checked in one pass, before any frame */
				struct ft__sum sum;
				ft__sum_init(&sum);
				ft__copy_stream_sum(payload, in, logged, &sum);
				rc = add_region(c, 0, logged, ft__sum_final(&sum));
				if (rc != 0)
					return rc;
			}
			c->input_whole = k->kind != FT__COLL_ALLREDUCE || logged == 0;
			input_logged(c);
		}
	}
	/* without a logged input an in-place restart needs shrink's backup */
	return c->plog == NULL || c->payload == NULL ? ft__shrink_backup_alloc(c, k) : 0;
}

static void rejoin_attempt(const struct ft_comm *c, const struct ft__call *k, struct ft__attempt *a)
{
	(void)k;
	a->commit = c->det != NULL && c->size >= 3;
	a->hooks = c->det != NULL ? &rejoin_hooks : NULL;
}

static int rejoin_recover(struct ft_comm *c, struct ft__call *k, const struct ft__coll *co, int rc,
			  struct ft__run *run)
{
	uint64_t t0;

	if (rc == -FT_EMISMATCH && c->det != NULL)
		rc = ft__newcomers_mismatch(c, run->seq);
	if (!ft__recoverable(c, rc))
		return rc;
	t0 = ft__now_ns();
	region_done(c);
	if (k->in_place && !k->input_untouched) {
		bool was_whole = c->input_whole;
		void *into = c->payload != NULL ? c->payload : c->backup;
		if (into == NULL)
			return rc; /* nothing to restart from */
		ft__shrink_backup_complete(c, k, co, into);
		if (c->payload != NULL && !was_whole)
			whole_region(c);
	} else if (c->payload != NULL && !c->input_whole) {
		memcpy(c->payload, k->src, c->payload_bytes);
		whole_region(c);
	}
	input_logged(c);
	return ft__recover_restart(c, k, co, rc, run, t0, false);
}

const struct ft__policy ft__policy_rejoin = {
	.name = "rejoin",
	.begin = rejoin_begin,
	.view_loaded = ft__newcomers_view_loaded,
	.op_start = ft__newcomers_op_start,
	.attempt = rejoin_attempt,
	.recover = rejoin_recover,
	.finalize = ft__recover_finalize,
};

/* ---- this rank's log ---- */

static void log_dir(const struct ft_comm *c, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s",
		 c->cfg.log_dir[0] != '\0' ? c->cfg.log_dir : c->tp_env.default_log_root,
		 c->cfg.job_id);
}

/* The default root (/dev/shm/ftcc-log-<uid>) is a predictable name in a
 * shared place: logs go there, and are read back, only if it is this
 * user's alone (the logs hold gradients). A root the user chose is theirs. */
static int log_root_private(const struct ft_comm *c)
{
	if (c->cfg.log_dir[0] != '\0')
		return 0;
	return ft__dir_private(c->tp_env.default_log_root, FT__DIR_UNREADABLE);
}

/* What ties a log to this run of the job (not another with the same id). */
static void log_job(const struct ft_comm *c, char *buf, size_t len)
{
	snprintf(buf, len, "%s:%016llx", c->cfg.job_id, (unsigned long long)c->job_nonce);
}

void ft__rejoin_log_open(struct ft_comm *c)
{
	char dir[FT_PATH_MAX + FT_NAME_MAX + 2], job[FT_NAME_MAX + 20];
	struct ft__jnl_params p = {.dir = dir, .job_id = job, .rank = c->cfg.rank,
				   .world_size = c->cfg.world_size,
				   .sync = c->cfg.log_durability == FT_DURABILITY_HOST,
				   .engine = c->tp_env.log_pwrite ? FT__JNL_PWRITE : FT__JNL_URING};
	int rc;

	if (c->cfg.log_durability == FT_DURABILITY_NONE || c->plog != NULL)
		return;
	log_dir(c, dir, sizeof(dir));
	log_job(c, job, sizeof(job));
	rc = log_root_private(c);
	if (rc == 0)
		rc = ft__jnl_open(&p, &c->plog);
	if (rc != 0) {
		ft__warn("log: cannot open this rank's log in %s (%s): a new incarnation of this "
			 "rank could not rejoin", dir, ft_strerror(rc));
		c->plog = NULL;
		return;
	}
	ft__info("log: %s, %s (durability %s)", dir, ft__jnl_engine_name(c->plog),
		 p.sync ? "host" : "process");
}

void ft__rejoin_log_close(struct ft_comm *c, bool remove)
{
	char dir[FT_PATH_MAX + FT_NAME_MAX + 2], path[FT_PATH_MAX + FT_NAME_MAX + 40];
	bool had = c->plog != NULL;

	ft__jnl_close(c->plog);
	c->plog = NULL;
	c->payload = NULL;
	c->log_dead = false;
	if (!remove || !had)
		return;
	/* a clean end: nothing will replay this rank's log, nor the log of a
	 * rank outside the membership (it could only come back into a view) */
	log_dir(c, dir, sizeof(dir));
	for (int r = 0; r < c->cfg.world_size; r++) {
		bool other_member = false;
		for (int i = 0; i < c->size && c->members != NULL; i++)
			other_member |= c->members[i] == r && r != c->cfg.rank;
		if (other_member)
			continue; /* its own ft_finalize removes it */
		for (int s = 0; s < 2; s++) {
			snprintf(path, sizeof(path), "%s/r%d-s%d.log", dir, r, s);
			unlink(path);
			snprintf(path, sizeof(path), "%s/r%d-s%d.in", dir, r, s);
			unlink(path);
		}
	}
	rmdir(dir); /* the last rank's succeeds */
}

/* ---- a new incarnation joining the running job ---- */

static bool in_view(const struct ft__view *v, int orig)
{
	for (int i = 0; i < v->size; i++)
		if (v->members[i] == orig)
			return true;
	return false;
}

/* bytes of memory mapped from fd (shared when writable: its pages exist
 * already) or anonymous (fd < 0), faulted in at once. */
static void *map_whole(int fd, size_t bytes, bool write)
{
	int flags = fd < 0 ? MAP_PRIVATE | MAP_ANONYMOUS : write ? MAP_SHARED : MAP_PRIVATE;
	void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, flags | MAP_POPULATE, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* The other slot's payload file, when it can hold bytes: -1 otherwise. */
static int other_payload(const struct ft_comm *c, const char *dir, uint64_t seq, size_t bytes)
{
	char path[FT_PATH_MAX + FT_NAME_MAX + 40];
	struct stat st;
	int fd;

	if (ft__jnl_path(path, sizeof(path), dir, c->cfg.rank, (int)((seq + 1) & 1), "in") != 0)
		return -1;
	fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	ft__fd_own(fd);
	if (fd >= 0 && (fstat(fd, &st) != 0 || (uint64_t)st.st_size < bytes)) {
		ft__fd_close(fd);
		fd = -1;
	}
	return fd;
}

/*
 * Runs op F again from this rank's log (its input as logged, op as its
 * BEGIN said): the survivors are running it too. The input is mapped from
 * the payload file, checked against its INPUT record when the join read the
 * log, rather than read again: no copy. The result
 * lands in the other slot's payload file (op F - 1's input, which nothing
 * needs any more), whose pages exist: fresh memory costs a page fault per
 * page, 64 MiB of it 250 ms here, a third of a rejoin. The replay itself
 * is not logged again, so the slot keeps F's whole input should this
 * incarnation die during it.
 */
static int replay(struct ft_comm *c, const char *dir, uint64_t f, const struct ft__logop *logged)
{
	char path[FT_PATH_MAX + FT_NAME_MAX + 40];
	struct ft__logop op = *logged;
	struct ft_op_info info;
	uint64_t seq = f;
	size_t es, bytes, out_bytes;
	void *in = NULL, *out = NULL;
	bool logged_in, blocks = op.kind == FT__COLL_ALLGATHER;
	int rc = 0, fd = -1, ofd = -1;

	es = op.kind == FT__COLL_BROADCAST ? 1 : ft_dtype_size((enum ft_dtype)op.dtype);
	if (es == 0 || op.count > SIZE_MAX / 8)
		return -FT_ECORRUPT;
	bytes = op.kind == FT__COLL_BARRIER ? 0 : (size_t)op.count * es;
	out_bytes = bytes;
	if (blocks) {
		/* the blocks the call began with are those of this view: the
		 * rejoin brought the same members back */
		if (op.root != c->size || op.count % (size_t)c->size != 0) {
			ft__error("rejoin: op %llu was an allgather of %d blocks; this view has %d "
				  "members: it cannot be replayed", (unsigned long long)f, op.root,
				  c->size);
			return -FT_EPROTO;
		}
		bytes /= (size_t)c->size; /* its input: the own block */
	}
	logged_in = bytes > 0 && (op.kind == FT__COLL_ALLREDUCE || blocks ||
				  (op.kind == FT__COLL_BROADCAST && op.root == c->cfg.rank));
	if (logged_in) {
		struct stat st;
		if ((rc = ft__jnl_path(path, sizeof(path), dir, c->cfg.rank, (int)(seq & 1), "in")) != 0)
			return rc;
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		ft__fd_own(fd);
		if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_size < bytes) {
			rc = fd < 0 ? -errno : -FT_ECORRUPT;
			goto out;
		}
	}
	in = map_whole(fd, bytes, false);
	ofd = out_bytes > 0 ? other_payload(c, dir, seq, out_bytes) : -1;
	out = map_whole(ofd, out_bytes, true);
	if (out == NULL && ofd >= 0)
		out = map_whole(-1, out_bytes, true);
	if (in == NULL || out == NULL) {
		rc = -FT_ENOMEM;
		goto out;
	}
	struct ft__call k = {.kind = (enum ft__coll_kind)op.kind, .src = in, .dst = out,
			     .count = op.count, .es = es, .dtype = (enum ft_dtype)op.dtype,
			     .op = (enum ft_op)op.op, .root = op.root};
	if (k.kind == FT__COLL_BROADCAST) {
		k.dst = op.root == c->cfg.rank ? in : out;
		k.dtype = FT_UINT8;
	}
	if (k.kind == FT__COLL_BARRIER) {
		k.count = 0;
		k.es = 1;
		k.dtype = FT_UINT8;
		k.op = FT_SUM;
	}
	ft__info("rejoin: replaying op %llu (%s, %zu bytes) from the log",
		 (unsigned long long)f, k.kind == FT__COLL_ALLREDUCE ? "allreduce"
					: k.kind == FT__COLL_BROADCAST ? "broadcast"
					: k.kind == FT__COLL_ALLGATHER ? "allgather" : "barrier",
		 bytes);
	c->op_seq = f;
	c->replaying = true;
	uint64_t t0 = ft__now_ns();
	/* an allgather out of place, from the logged own block */
	rc = blocks ? ft__blocks_call(c, k.kind, in, out, op.count / (size_t)c->size, k.dtype, k.op,
				      &info)
		    : ft__collective_run(c, &k, &info);
	c->replaying = false;
	if (rc == 0)
		ft__info("rejoin: op %llu done on generation %u with %d contributors",
			 (unsigned long long)f, info.generation, info.contributors);
	char args[160];
	snprintf(args, sizeof(args), "{\"op_seq\":%llu,\"bytes\":%zu,\"rc\":%d}",
		 (unsigned long long)f, bytes, rc);
	ft__trace_complete(c->trace, "replay", "rejoin", t0, ft__now_ns(), args);
out:
	if (in != NULL)
		munmap(in, bytes ? bytes : 1);
	if (out != NULL)
		munmap(out, out_bytes ? out_bytes : 1);
	if (fd >= 0)
		ft__fd_close(fd);
	if (ofd >= 0)
		ft__fd_close(ofd);
	return rc;
}

/*
 * Publishes me into generation target and waits until a view takes this
 * rank in (0, *v). A view that settles without it (the job recovered from
 * something else, or took the newcomers it had seen) leaves it asking for
 * the one after: the survivors' next op boundary takes it (growing back,
 * detect.c), unless its log is ahead of the job (not of this run:
 * -FT_EEXCLUDED). -FT_EENDED when no other rank of the job lives any more,
 * -FT_ETIMEDOUT at deadline.
 */
static int wait_taken(struct ft_comm *c, const struct ft__member *me, uint32_t target,
		      int64_t deadline, struct ft__view *v)
{
	int64_t alive_ms = ft__now_ms();
	int rc;

	for (;;) {
		char args[80];
		if ((rc = ft__mb_publish(&c->mb, target, me)) != 0)
			return rc;
		snprintf(args, sizeof(args), "{\"generation\":%u,\"next_op\":%llu}", target,
			 (unsigned long long)me->next_op);
		ft__trace_instant(c->trace, "asks back", args);
		for (;;) {
			struct timespec ts = {0, 2000000};
			rc = ft__mb_try_settle(&c->mb, target, NULL, 0, false, v);
			if (rc != 0)
				break;
			if (ft__now_ms() >= deadline) {
				rc = -FT_ETIMEDOUT;
				break;
			}
			if (ft__now_ms() - alive_ms >= 250) {
				struct ft__view latest = {0};
				alive_ms = ft__now_ms();
				rc = ft__mb_resume(&c->mb, &latest);
				if (rc == 0) {
					ft__error("rejoin: no other rank of the job lives any more: "
						  "rank %d has no job to come back to", c->cfg.rank);
					return -FT_EENDED;
				}
				if (rc == 1)
					ft__view_free(&latest);
				rc = 0;
			}
			nanosleep(&ts, NULL);
		}
		if (rc < 0) {
			ft__error("rejoin: generation %u never settled: %s", target, ft_strerror(rc));
			return rc;
		}
		if (in_view(v, c->cfg.rank))
			return 0;
		if (me->next_op > v->first_op + 1) {
			ft__error("rejoin: generation %u settled without rank %d, whose log is ahead "
				  "of the job (op %llu against %llu): the job goes on without it",
				  target, c->cfg.rank, (unsigned long long)me->next_op,
				  (unsigned long long)v->first_op);
			ft__view_free(v);
			return -FT_EEXCLUDED;
		}
		ft__info("rejoin: generation %u settled without rank %d: it asks for the next one",
			 target, c->cfg.rank);
		target = v->generation + 1;
		ft__view_free(v);
	}
}

int ft__rejoin_join(struct ft_comm *c, struct ft__member *me, struct ft__view *latest)
{
	char dir[FT_PATH_MAX + FT_NAME_MAX + 2], job[FT_NAME_MAX + 20];
	uint32_t target = latest->generation + 1, lgen;
	int64_t deadline;
	struct ft__logop op;
	struct ft__view v = {0};
	uint64_t last = 0, first;
	bool have = false, replayable;
	int rc;

	c->job_nonce = latest->nonce;
	if (!in_view(latest, c->cfg.rank))
		ft__info("rejoin: the job went on without rank %d (generation %u): it asks to be "
			 "taken back at the job's next op", c->cfg.rank, latest->generation);
	ft__view_free(latest);
	log_dir(c, dir, sizeof(dir));
	log_job(c, job, sizeof(job));
	/* (shrink keeps no log: its newcomers come back through the application) */
	if (c->cfg.policy == FT_POLICY_REJOIN && c->cfg.log_durability != FT_DURABILITY_NONE) {
		rc = log_root_private(c);
		if (rc == 0)
			rc = ft__jnl_last_input(dir, c->cfg.rank, ft__jnl_job_hash(job), &last,
						&lgen, &op, NULL, 0);
		have = rc == 0;
		if (rc != 0)
			ft__warn("rejoin: no usable log in %s (%s): nothing to replay; the "
				 "application runs the interrupted op", dir,
				 rc == -ENOENT ? "no input recorded" : ft_strerror(rc));
	}
	/* the first op it can take part in: its application's next, or the
	 * logged one it can replay (one less); 0 says none. An allgather is
	 * replayed over the blocks of the view it began in, which the rejoin
	 * brings back (a replay over another view fails): its input may be
	 * what the application cannot compute again (the shard a
	 * reduce-scatter and an update made). A reduce-scatter is not: its
	 * application needs its result (a replay here would throw it away)
	 * and can compute its input again (gradients). When the last logged op
	 * is one, the newcomer asks for it, not past it, and its application
	 * runs the interrupted op (any op up to the survivors' first is taken
	 * back that way), with the same ring and the same inputs:
	 * bit-identical all the same. */
	replayable = have && (op.kind == FT__COLL_ALLREDUCE || op.kind == FT__COLL_BROADCAST ||
			      op.kind == FT__COLL_BARRIER || op.kind == FT__COLL_ALLGATHER);
	me->next_op = replayable ? last + 1 : have ? last : 0;
	me->rejoining = true;
	ft__info("rejoin: a new incarnation of rank %d asks back into generation %u (log: %s)",
		 c->cfg.rank, target, have ? "whole" : "none");
	deadline = ft__now_ms() + c->cfg.rejoin_timeout_ms + 2 * c->cfg.detect_timeout_ms +
		   c->cfg.connect_timeout_ms;
	if ((rc = wait_taken(c, me, target, deadline, &v)) != 0)
		return rc;
	first = v.first_op;
	if ((rc = ft__comm_load_view(c, &v)) != 0) {
		ft__view_free(&v);
		return rc;
	}
	ft__view_free(&v);
	/* its next op before its detector runs: a settle that asks it at once
	 * (another failure) takes the op it publishes as the view's first */
	if (c->det != NULL)
		ft__det_adopted(c->det, c->generation, first);
	if (c->det != NULL && (rc = ft__det_start(c->det, c->generation, c->members, c->size)) != 0)
		return rc;
	if (c->cfg.policy == FT_POLICY_REJOIN)
		ft__rejoin_log_open(c);
	c->rejoined = true;
	c->op_seq = first;
	if (c->det != NULL)
		ft__det_adopted(c->det, c->generation, first); /* what it publishes if another fails */
	if (replayable && first == last) {
		rc = replay(c, dir, first, &op); /* checked when the join read the log */
		if (rc != 0)
			return rc;
	} else if (first == 0) {
		/* the job is still in ft_init's own barrier: run it, as ft_init does */
		rc = ft_barrier(c);
		if (rc != 0)
			return rc;
	} else if (me->next_op > first + 1) {
		return -FT_EPROTO; /* the settle takes it back only up to first + 1 */
	}
	c->resume_op = c->op_seq;
	ft__info("rejoin: rank %d is back in generation %u; its next op is %llu", c->cfg.rank,
		 c->generation, (unsigned long long)c->op_seq);
	char args[160];
	snprintf(args, sizeof(args), "{\"generation\":%u,\"next_op\":%llu,\"replayed\":%s}",
		 c->generation, (unsigned long long)c->op_seq,
		 replayable && first == last ? "true" : "false");
	ft__trace_instant(c->trace, "rejoined", args);
	return 0;
}
