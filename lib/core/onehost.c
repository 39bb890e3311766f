/* onehost.c: the one-host path: each rank's segment in shared memory, stage words with bounded spinning then a futex, and every collective as rounds over the segments. */
/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "detect.h"
#include "engine.h"
#include "fdreg.h"
#include "file.h"
#include "reduce.h"
#include "onehost.h"

/*
 * Every rank of the view owns one segment: a header page, then two buffers
 * (rounds alternate between them), each an input area and a result area of
 * `area` bytes. A collective is cut into rounds of at most one area. In a
 * round every rank
 *   1. waits until every member is done with the round before last (its
 *      buffer is the one this round fills), copies its piece of input into
 *      its input area, writes what it called, and posts ARRIVE;
 *   2. waits for every member's ARRIVE, and checks that they all called the
 *      same thing (every rank sees the same calls, so every rank finds a
 *      disagreement: FT_EMISMATCH everywhere, never a hang);
 *   3. reduces its own slice of the piece straight from every member's input
 *      area, in rank order, into its result area, and posts REDUCED;
 *   4. waits for every member's REDUCED, copies every member's reduced slice
 *      to the output, and posts DONE.
 * Each slice is reduced by one rank and copied by all: every rank ends with
 * the same bits. Reduce-scatter writes its block straight to the output at
 * step 3; allgather and broadcast have no step 3. Each byte is copied in
 * once and out once whatever the number of ranks.
 *
 * A stage word holds the last round that stage reached (rounds only grow;
 * 31 bits, compared modulo 2^31). A waiter spins within the communicator's
 * spin budget (while the host's ranks fit its CPUs), yields a few times,
 * then sleeps on the word with a futex, counted in the word's waiters so
 * that a post wakes only when someone sleeps. Asleep, it looks every
 * SHM_TICK_MS at the member it waits for: its process exited (its pidfd),
 * it marked its segment broken (its collective failed), the detector
 * settles a view (a stopped or excluded member, a newcomer: shrink and
 * rejoin), or the op timeout passed. Then the waiter fences the word: it
 * sets its FENCE bit with a compare-and-swap, and a member posts with a
 * compare-and-swap too, so each word of each round is either posted, and
 * every waiter sees it, or fenced, and every waiter fails on it, whatever
 * the timing (a stopped member that wakes up after being given up cannot
 * post any more).
 *
 * Failures (abort simply fails the op). A rank completes an op only when
 * it has seen every member's REDUCED of the last round, so the survivors
 * either all complete it or all fail it. There it claims the result
 * through the policy's hook, as the ring does (with the detector): a rank
 * whose claim comes too late (the detector already settles a view) fails
 * the op, and recovery hands it the result of a rank that claimed (shrink's
 * small ops, kept by the policy), or runs the op again everywhere. An op
 * the policy commits (shrink: larger than a kept one; rejoin: every op)
 * has a last barrier (every member's DONE of the last round) before it
 * returns, the ring's commit steps: every rank returns it, or none. An
 * in-place input that a round overwrites is saved to the policy's backup
 * as it is copied in; after a failure the backup is completed from the
 * rest of the buffer and the op runs again out of place from it, on
 * segments made for the new view (their files are named by generation):
 * over the survivors (shrink), or with the same members, a new
 * incarnation among them, in the same order (rejoin: the same bits).
 *
 * The files live in /dev/shm/ftcc-<uid> (private: lib/util/file.h), named
 * by job id, job nonce and rank; each rank removes its own once every rank
 * has mapped every segment, so a job killed whole leaves none behind.
 */

#define SHM_MAGIC 0x3130736d63637466ull /* "ftccsm01" */
#define SHM_HEAD 4096
#define SHM_TICK_MS 10
#define SHM_YIELDS 64
#define FENCE 0x80000000u       /* a stage word's bit: given up on, never posted */
#define ROUND_MASK 0x7fffffffu

enum { W_ARRIVE, W_REDUCED, W_DONE, W_COUNT };

struct shm_word {
	_Atomic uint32_t v;        /* the last round this stage reached */
	_Atomic uint32_t waiters;  /* ranks asleep on v */
	char pad[56];
};

/* What a rank called, in the buffer of the round. */
struct shm_desc {
	uint64_t op_seq, count, es;
	uint32_t kind, meant, dtype, op;
	int32_t root;
	uint32_t pad;
};

struct shm_head {
	uint64_t magic, nonce;
	int32_t pos, n, pid;
	_Atomic uint32_t broken;   /* a collective failed here: members stop waiting */
	uint32_t gen, pad;
	uint64_t area;
	uint64_t pidns;            /* its pid namespace (inode): pid means that process here */
	uint64_t netns;            /* its network namespace (inode): another one is another host */
	struct shm_desc desc[2];
	struct shm_word w[W_COUNT] __attribute__((aligned(64)));
};
_Static_assert(sizeof(struct shm_head) <= SHM_HEAD, "the header fits its page");

struct ft__onehost {
	int n, me;
	struct ft__det *det;       /* shrink, rejoin: its view ends waits; else NULL */
	struct ft__coll *co;       /* the attempt running (its policy's hooks, claimed); set by each run */
	bool commit;               /* the attempt's commit: every member's DONE before returning */
	void *backup;              /* in place: where inputs go as they are copied in, for a rerun */
	size_t saved;              /* of each block, the elements saved there */
	size_t area, bytes;        /* one area; a whole segment */
	uint32_t round;            /* the last round opened (wraps: compared modulo 2^32) */
	uint64_t rounds;           /* rounds opened in all */
	uint64_t spin_ns;
	int op_timeout_ms;         /* a wait this long for one member fails the op; 0 never */
	char **base;               /* each member's mapped segment, by dense position */
	int *pidfd;                /* each member's process, -1 none (then kill(pid, 0)) */
	char path[512];            /* this rank's file, until removed */
};

static struct shm_head *head(const struct ft__onehost *sh, int j)
{
	return (struct shm_head *)(void *)sh->base[j];
}

/* Member j's input (res 0) or result (res 1) area of the buffer of round r. */
static char *area(const struct ft__onehost *sh, int j, uint32_t r, int res)
{
	return sh->base[j] + SHM_HEAD + (size_t)((r & 1u) * 2u + (unsigned)res) * sh->area;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static bool reached(uint32_t v, uint32_t target)
{
	return (v & FENCE) == 0 && (int32_t)((v - target) << 1) >= 0;
}

static void wake(struct shm_word *w)
{
	if (atomic_load(&w->waiters) != 0)
		syscall(SYS_futex, &w->v, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* Posts round r of a stage: 0, or -FT_EABORTED when the members gave up on this rank. */
static int post(struct ft__onehost *sh, int stage, uint32_t r)
{
	struct shm_word *w = &head(sh, sh->me)->w[stage];
	uint32_t v = atomic_load(&w->v);

	do {
		if (v & FENCE)
			return -FT_EABORTED;
	} while (!atomic_compare_exchange_weak(&w->v, &v, r & ROUND_MASK));
	wake(w);
	return 0;
}

/* Whether the waiter may go on waiting for member j: 0, or why not. */
static int member_ok(const struct ft__onehost *sh, int j)
{
	if (atomic_load(&head(sh, j)->broken) != 0)
		return -FT_EPEERFAILED;
	if (sh->pidfd[j] >= 0) {
		struct pollfd p = {.fd = sh->pidfd[j], .events = POLLIN};
		if (poll(&p, 1, 0) == 1)
			return -FT_EPEERFAILED;
	} else if (kill(head(sh, j)->pid, 0) != 0 && errno == ESRCH) {
		return -FT_EPEERFAILED;
	}
	if (sh->det != NULL && ft__det_pending(sh->det))
		return -FT_EABORTED; /* a view settles: this op is over here */
	return 0;
}

/* Gives up on a word that has not reached target: rc, or 0 if it has after all. */
static int fence(struct shm_word *w, uint32_t target, int rc)
{
	uint32_t v = atomic_load(&w->v);

	do {
		if (reached(v, target))
			return 0;
		if (v & FENCE)
			return rc;
	} while (!atomic_compare_exchange_weak(&w->v, &v, v | FENCE));
	wake(w);
	return rc;
}

static int wait_word(struct ft__onehost *sh, int j, int stage, uint32_t target)
{
	struct shm_word *w = &head(sh, j)->w[stage];
	uint64_t t0 = 0;

	int64_t since = 0;         /* read at the first sleep: most waits never sleep */
	unsigned spins = 0, yields = 0;
	int rc;

	target &= ROUND_MASK;
	for (;;) {
		uint32_t v = atomic_load_explicit(&w->v, memory_order_acquire);
		if (reached(v, target))
			return 0;
		if (v & FENCE)
			return -FT_EABORTED; /* another rank gave up on it: so does this one */
		if (sh->spin_ns > 0 && (++spins & 63u) != 0) {
			cpu_relax();
			continue;
		}
		if (sh->spin_ns > 0 && t0 == 0)
			t0 = ft__now_ns();
		if (sh->spin_ns > 0 && ft__now_ns() - t0 < sh->spin_ns)
			continue;
		if (yields++ < SHM_YIELDS) {
			sched_yield();
			continue;
		}
		struct timespec ts = {0, SHM_TICK_MS * 1000000L};
		if (since == 0)
			since = ft__now_ms();
		atomic_fetch_add(&w->waiters, 1);
		v = atomic_load(&w->v);
		if (!reached(v, target))
			syscall(SYS_futex, &w->v, FUTEX_WAIT, v, &ts, NULL, 0);
		atomic_fetch_sub(&w->waiters, 1);
		if (reached(atomic_load(&w->v), target))
			return 0;
		if ((rc = member_ok(sh, j)) != 0)
			return fence(w, target, rc);
		/* no progress (FTCC_OP_TIMEOUT_MS, as on the ring): a member that
		 * never joins the op fails it, and the others with it */
		if (sh->op_timeout_ms > 0 && ft__now_ms() - since >= sh->op_timeout_ms) {
			if ((rc = fence(w, target, -FT_ETIMEDOUT)) != 0)
				ft__error("collective %llu made no progress for %d ms",
					  (unsigned long long)sh->co->tmpl.op_seq, sh->op_timeout_ms);
			return rc;
		}
	}
}

static int wait_all(struct ft__onehost *sh, int stage, uint32_t target)
{
	int rc;

	for (int j = 0; j < sh->n; j++)
		if (j != sh->me && (rc = wait_word(sh, j, stage, target)) != 0)
			return rc;
	return 0;
}

/* Opens round r: its buffer is free once every member is done with round r-2. */
static int round_open(struct ft__onehost *sh, uint32_t *r)
{
	*r = ++sh->round;
	return ++sh->rounds > 2 ? wait_all(sh, W_DONE, *r - 2) : 0;
}

/* Step 2: d is what this rank called; its input of the round is in place. */
static int round_arrive(struct ft__onehost *sh, uint32_t r, const struct shm_desc *d)
{
	int rc;

	head(sh, sh->me)->desc[r & 1u] = *d;
	if ((rc = post(sh, W_ARRIVE, r)) != 0 || (rc = wait_all(sh, W_ARRIVE, r)) != 0)
		return rc;
	for (int j = 0; j < sh->n; j++) {
		if (memcmp(&head(sh, j)->desc[r & 1u], d, sizeof(*d)) != 0) {
			/* every rank finds it, here, at this round: none waits on */
			(void)post(sh, W_REDUCED, r);
			(void)post(sh, W_DONE, r);
			ft__error("shm: op %llu: the ranks called different collectives (kind, count, "
				  "dtype, op or root)", (unsigned long long)d->op_seq);
			return -FT_EMISMATCH;
		}
	}
	return 0;
}

/*
 * The last round's data is all there (every member's REDUCED, or ARRIVE
 * where nothing is reduced): the policy's claim (the ring's hook: under
 * shrink and rejoin, with the detector, which fails once it settles a
 * view; a rank that did not claim in time runs the op again, or is handed
 * the result). A claimed op stands even if this rank fails after it.
 */
static int claim(const struct ft__onehost *sh)
{
	const struct ft__hooks *h = sh->co->hooks;

	if (h == NULL || h->result_held == NULL)
		return 0;
	if (h->result_held(sh->co) != 0)
		return -FT_EABORTED;
	sh->co->claimed = true;
	return 0;
}

/* After this rank's DONE of the last round r: the policy's commit (shrink:
 * an op with no kept result; rejoin: every op; two ranks never: one
 * survivor cannot disagree with itself) returns only once every member
 * has its result. */
static int commit(struct ft__onehost *sh, uint32_t r)
{
	return sh->commit ? wait_all(sh, W_DONE, r) : 0;
}

/* In place, for a rerun, len bytes of input at src + off to the backup at
 * the same offset, before a round overwrites them (written past the
 * caches: nothing reads the backup unless the op fails). */
static void save(const struct ft__onehost *sh, const char *src, size_t off, size_t len)
{
	if (sh->backup != NULL && len > 0)
		ft__copy_stream((char *)sh->backup + off, src + off, len);
}

/* Slice s of m elements cut n ways: [*lo, *lo + *len). */
static void slice(size_t m, int n, int s, size_t *lo, size_t *len)
{
	size_t q = m / (size_t)n, rem = m % (size_t)n;

	*lo = (size_t)s * q + ((size_t)s < rem ? (size_t)s : rem);
	*len = q + ((size_t)s < rem ? 1 : 0);
}

/* out = the reduction of every member's input area at byte offset off, in
 * rank order; this rank's own input from mine where not NULL. */
static void reduce_from_all(const struct ft__onehost *sh, uint32_t r, size_t off, size_t len,
			    const struct ft__call *k, ft__combine_fn combine, ft__accum_fn accum,
			    const char *mine, void *out)
{
#define IN(j) ((j) == sh->me && mine != NULL ? mine : area(sh, (j), r, 0) + off)
	if (len == 0)
		return;
	combine(out, IN(0), IN(1), len);
	for (int j = 2; j < sh->n; j++)
		accum(out, IN(j), len);
#undef IN
	if (k->op == FT_AVG)
		ft__reduce_scale(out, len, k->dtype, (size_t)sh->n);
}

static int run_allreduce(struct ft__onehost *sh, const struct ft__call *k, struct shm_desc *d,
			 ft__combine_fn combine, ft__accum_fn accum)
{
	size_t es = k->es, per = sh->area / es, count = k->count, off = 0;
	const char *src = k->in_place ? (const char *)k->dst : (const char *)k->src;
	uint32_t r;
	int rc;

	do {
		size_t m = count - off < per ? count - off : per, lo, len;
		bool last = off + m >= count;
		if ((rc = round_open(sh, &r)) != 0)
			return rc;
		/* the members' slices of this rank's piece; its own it reduces
		 * straight from the input (a copy fewer: half of them at 2 ranks) */
		slice(m, sh->n, sh->me, &lo, &len);
		if (m > 0) {
			memcpy(area(sh, sh->me, r, 0), src + off * es, lo * es);
			memcpy(area(sh, sh->me, r, 0) + (lo + len) * es, src + (off + lo + len) * es,
			       (m - lo - len) * es);
		}
		save(sh, src, off * es, m * es); /* (the own slice too: overwritten in place) */
		sh->saved = off + m;
		if ((rc = round_arrive(sh, r, d)) != 0)
			return rc;
		reduce_from_all(sh, r, lo * es, len, k, combine, accum, src + (off + lo) * es,
				area(sh, sh->me, r, 1) + lo * es);
		if ((rc = post(sh, W_REDUCED, r)) != 0 || (rc = wait_all(sh, W_REDUCED, r)) != 0 ||
		    (last && (rc = claim(sh)) != 0))
			return rc;
		for (int j = 0; j < sh->n; j++) {
			slice(m, sh->n, j, &lo, &len);
			if (len > 0)
				memcpy((char *)k->dst + (off + lo) * es, area(sh, j, r, 1) + lo * es, len * es);
		}
		if ((rc = post(sh, W_DONE, r)) != 0)
			return rc;
		off += m;
	} while (off < count);
	return commit(sh, r);
}

/* Broadcast (count bytes) from dense position root, and allgather (count:
 * the n blocks' elements, this rank's block in place): no reduction. */
static int run_copy(struct ft__onehost *sh, const struct ft__call *k, struct shm_desc *d, int root)
{
	bool gather = k->kind == FT__COLL_ALLGATHER;
	size_t es = k->es, bc = gather ? k->count / (size_t)sh->n : k->count;
	size_t per = sh->area / es, off = 0;
	uint32_t r;
	int rc;

	do {
		size_t m = bc - off < per ? bc - off : per;
		if ((rc = round_open(sh, &r)) != 0)
			return rc;
		if (m > 0 && (gather || sh->me == root))
			memcpy(area(sh, sh->me, r, 0),
			       (char *)k->dst + ((gather ? (size_t)sh->me * bc : 0) + off) * es, m * es);
		if ((rc = round_arrive(sh, r, d)) != 0 || (rc = post(sh, W_REDUCED, r)) != 0 ||
		    (off + m >= bc && (rc = claim(sh)) != 0))
			return rc;
		for (int j = 0; j < sh->n && m > 0; j++)
			if (j != sh->me && (gather || j == root))
				memcpy((char *)k->dst + ((gather ? (size_t)j * bc : 0) + off) * es,
				       area(sh, j, r, 0), m * es);
		if ((rc = post(sh, W_DONE, r)) != 0)
			return rc;
		off += m;
	} while (off < bc);
	return commit(sh, r);
}

/* Reduce-scatter: count is the n blocks' elements; this rank's block goes to k->blk->out. */
static int run_reduce_scatter(struct ft__onehost *sh, const struct ft__call *k, struct shm_desc *d,
			      ft__combine_fn combine, ft__accum_fn accum)
{
	size_t es = k->es, bc = k->count / (size_t)sh->n;
	size_t per = sh->area / es / (size_t)sh->n, off = 0;
	const char *src = k->in_place ? (const char *)k->dst : (const char *)k->src;
	char *out = k->blk->out;
	uint32_t r;
	int rc;

	do {
		size_t m = bc - off < per ? bc - off : per;
		if ((rc = round_open(sh, &r)) != 0)
			return rc;
		for (int b = 0; b < sh->n && m > 0; b++) {
			memcpy(area(sh, sh->me, r, 0) + (size_t)b * m * es,
			       src + ((size_t)b * bc + off) * es, m * es);
			save(sh, src, ((size_t)b * bc + off) * es, m * es);
		}
		sh->saved = off + m;
		if ((rc = round_arrive(sh, r, d)) != 0 || (off + m >= bc && (rc = claim(sh)) != 0))
			return rc;
		reduce_from_all(sh, r, (size_t)sh->me * m * es, m, k, combine, accum, NULL,
				out + off * es);
		if ((rc = post(sh, W_REDUCED, r)) != 0 || (rc = post(sh, W_DONE, r)) != 0)
			return rc;
		off += m;
	} while (off < bc);
	return commit(sh, r);
}

/*
 * Whether an in-place input needs a backup: a policy that reruns an op
 * (its hooks) on a round that overwrites the input before the op is known
 * complete everywhere (an op with commit steps, or more rounds than one;
 * shrink's small ops in one round are handed over instead). Allgather and
 * broadcast never overwrite their input.
 */
static bool needs_backup(const struct ft__onehost *sh, const struct ft__call *k,
			 const struct ft__attempt *a)
{
	size_t bytes = k->count * k->es;

	if (a->hooks == NULL || !k->in_place || k->input_untouched || bytes == 0 ||
	    k->kind == FT__COLL_BROADCAST || k->kind == FT__COLL_ALLGATHER)
		return false;
	return a->commit || !ft__small_op(k) || bytes > sh->area;
}

/* After a failed attempt: the backup holds each block's first sh->saved
 * elements, the buffer the rest; the call runs again out of place from it. */
static void backup_complete(const struct ft__onehost *sh, struct ft__call *k)
{
	size_t nb = k->kind == FT__COLL_REDUCE_SCATTER ? (size_t)sh->n : 1, bc = k->count / nb;

	if (sh->backup == NULL)
		return;
	for (size_t b = 0; b < nb && sh->saved < bc; b++)
		memcpy((char *)sh->backup + (b * bc + sh->saved) * k->es,
		       (char *)k->dst + (b * bc + sh->saved) * k->es, (bc - sh->saved) * k->es);
	k->src = sh->backup;
	k->in_place = false;
}

int ft__onehost_run(struct ft_comm *c, struct ft__call *k, const struct ft__attempt *a,
		    struct ft__coll *co)
{
	struct ft__onehost *sh = c->onehost;
	struct shm_desc d = {.op_seq = a->op_seq, .count = k->count, .es = k->es, .kind = k->kind,
			     .meant = k->meant, .dtype = k->dtype, .op = k->op, .root = -1};
	ft__combine_fn combine = NULL;
	ft__accum_fn accum = NULL;
	int rc, root = -1;

	co->c = c;
	co->tmpl.op_seq = a->op_seq;
	co->hooks = a->hooks;
	co->in_place = k->in_place;
	sh->co = co;
	sh->commit = a->commit;
	sh->backup = NULL;
	sh->saved = 0;
	/* (a shortage here is this rank's alone, before any round: as a
	 * policy's begin that cannot reserve it, on the ring) */
	if (needs_backup(sh, k, a)) {
		if ((rc = ft__comm_backup_reserve(c, k->count * k->es)) != 0)
			return rc;
		sh->backup = c->backup;
	}
	if (k->kind == FT__COLL_BROADCAST) {
		for (int j = 0; j < c->size; j++)
			if (c->members[j] == k->root)
				root = j;
		d.root = root;
		rc = run_copy(sh, k, &d, root);
	} else if (k->kind == FT__COLL_ALLGATHER) {
		rc = run_copy(sh, k, &d, -1);
	} else if (k->kind == FT__COLL_ALLREDUCE || k->kind == FT__COLL_REDUCE_SCATTER) {
		if ((rc = ft__reduce_lookup(k->dtype, k->op, &combine, &accum)) == 0)
			rc = k->kind == FT__COLL_ALLREDUCE
				     ? run_allreduce(sh, k, &d, combine, accum)
				     : run_reduce_scatter(sh, k, &d, combine, accum);
	} else { /* barrier, or a call with bad arguments: a round with no data */
		struct ft__call none = *k;
		none.count = 0;
		none.es = 1;
		rc = run_allreduce(sh, &none, &d, NULL, NULL);
	}
	if (rc != 0 && rc != -FT_EMISMATCH) {
		struct shm_head *h = head(sh, sh->me);
		atomic_store(&h->broken, 1); /* the members stop waiting too, */
		for (int w = 0; w < W_COUNT; w++)
			wake(&h->w[w]); /* at once */
		backup_complete(sh, k);
	}
	return rc;
}

/* ---- setup ---- */

static void shm_free(struct ft__onehost *sh)
{
	if (sh == NULL)
		return;
	for (int j = 0; j < sh->n; j++) {
		if (sh->base != NULL && sh->base[j] != NULL)
			munmap(sh->base[j], sh->bytes);
		if (sh->pidfd != NULL && sh->pidfd[j] >= 0)
			ft__fd_close(sh->pidfd[j]);
	}
	if (sh->path[0] != '\0')
		unlink(sh->path);
	free(sh->base);
	free(sh->pidfd);
	free(sh);
}

/* This process's pid (or network) namespace: a member's pid names its
 * process only in the same one; a member in another network namespace is
 * taken for another host, as a container or an emulated host is meant. */
static uint64_t ns_of(const char *which)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/self/ns/%s", which);
	return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static void seg_path(const struct ft_comm *c, int orig, char *out, size_t len)
{
	snprintf(out, len, "/dev/shm/ftcc-shm-%u/%s-%016llx-g%u-%d", (unsigned)geteuid(),
		 c->cfg.job_id, (unsigned long long)c->job_nonce, c->generation, orig);
}

/*
 * Removes the segments in dir whose maker is dead: a job killed during
 * its setup (before every rank mapped every segment, when each removes its
 * own) left them, and nothing else ever would. A segment is a file whose
 * header says so (magic), made in this pid namespace by a process that no
 * longer exists; anything else stays (a live job's, another namespace's,
 * a file that is no segment).
 */
static void reclaim(const char *dir)
{
	uint64_t ns = ns_of("pid");
	DIR *d = opendir(dir);
	struct dirent *e;

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		struct shm_head h;
		struct stat st;
		int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
		if (fd < 0)
			continue;
		ft__fd_own(fd);
		bool stale = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
			     pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
			     h.magic == SHM_MAGIC && h.pidns == ns && ns != 0 && h.pid > 0 &&
			     kill(h.pid, 0) != 0 && errno == ESRCH;
		ft__fd_close(fd);
		if (stale && unlinkat(dirfd(d), e->d_name, 0) == 0)
			ft__info("shm: removed %s/%s, left by process %d, which is gone", dir,
				 e->d_name, (int)h.pid);
	}
	closedir(d);
}

/* This rank's segment, made and mapped; 0 or an error it said. */
static int make_own(struct ft_comm *c, struct ft__onehost *sh)
{
	char dir[128];
	int fd, rc;

	snprintf(dir, sizeof(dir), "/dev/shm/ftcc-shm-%u", (unsigned)geteuid());
	if ((rc = ft__dir_private(dir, FT__DIR_UNREADABLE)) != 0)
		return rc;
	reclaim(dir);
	seg_path(c, c->cfg.rank, sh->path, sizeof(sh->path));
	(void)unlink(sh->path); /* an earlier process of this job and rank: it is gone */
	fd = open(sh->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		ft__warn("shm: cannot make %s: %s", sh->path, strerror(-rc));
		sh->path[0] = '\0';
		return rc;
	}
	ft__fd_own(fd);
	/* every page now: a full /dev/shm is an error here, not a SIGBUS in an op */
	if ((rc = posix_fallocate(fd, 0, (off_t)sh->bytes)) != 0) {
		ft__warn("shm: no room for this rank's %zu-byte segment in /dev/shm (%s; "
			 "FTCC_SHM_BYTES sets it)", sh->bytes, strerror(rc));
		ft__fd_close(fd);
		return -rc;
	}
	sh->base[sh->me] = mmap(NULL, sh->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
				fd, 0);
	ft__fd_close(fd);
	if (sh->base[sh->me] == MAP_FAILED) {
		sh->base[sh->me] = NULL;
		ft__warn("shm: cannot map this rank's segment: %s", strerror(errno));
		return -FT_ENOMEM;
	}
	struct shm_head *h = head(sh, sh->me);
	h->nonce = c->job_nonce;
	h->gen = c->generation;
	h->pos = sh->me;
	h->n = sh->n;
	h->pid = (int32_t)getpid();
	h->pidns = ns_of("pid");
	h->netns = ns_of("net");
	h->area = sh->area;
	atomic_thread_fence(memory_order_release);
	h->magic = SHM_MAGIC;
	return 0;
}

/* Maps member j's segment and checks that it is the one this job's rank made. */
static int map_member(struct ft_comm *c, struct ft__onehost *sh, int j)
{
	char path[512];
	struct stat st;
	int fd;

	seg_path(c, c->members[j], path, sizeof(path));
	fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno; /* another host (or another /dev/shm): the ring it is */
	ft__fd_own(fd);
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (size_t)st.st_size != sh->bytes) {
		ft__fd_close(fd);
		ft__warn("shm: %s is not a segment of this job's (size or owner)", path);
		return -FT_EPROTO;
	}
	sh->base[j] = mmap(NULL, sh->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ft__fd_close(fd);
	if (sh->base[j] == MAP_FAILED) {
		sh->base[j] = NULL;
		return -FT_ENOMEM;
	}
	const struct shm_head *h = head(sh, j);
	if (h->magic != SHM_MAGIC || h->nonce != c->job_nonce || h->gen != c->generation || h->pos != j ||
	    h->n != sh->n || h->area != sh->area || h->pid <= 0) {
		ft__warn("shm: %s is not rank %d's segment of this job", path, c->members[j]);
		return -FT_EPROTO;
	}
	if (h->pidns != ns_of("pid") || h->pidns == 0 || h->netns != ns_of("net")) {
		/* (a container sharing /dev/shm): its death could not be seen
		 * here; (another network namespace): the network between the
		 * two is the job's, and may fail as it does between hosts */
		ft__info("shm: rank %d runs in another pid or network namespace", c->members[j]);
		return -FT_EPROTO;
	}
	sh->pidfd[j] = (int)syscall(SYS_pidfd_open, (pid_t)h->pid, 0);
	if (sh->pidfd[j] >= 0)
		ft__fd_own(sh->pidfd[j]);
	else if (errno != ENOSYS)
		return -FT_EPROTO; /* no such process here: not the member it says it is */
	return 0;
}

/* v = the minimum of every rank's v, over the ring (one attempt: abort policy).
 * Numbered past every op (and every FTCC_FAULT point, at most 2^32 - 1): the
 * application's ops keep their numbers. */
static int agree(struct ft_comm *c, int32_t *v)
{
	struct ft__call k = {.kind = FT__COLL_ALLREDUCE, .dst = v, .count = 1, .es = sizeof(*v),
			     .dtype = FT_INT32, .op = FT_MIN, .in_place = true};
	struct ft__attempt a = {.op_seq = UINT64_MAX};
	struct ft__coll co;

	memset(&co, 0, sizeof(co));
	return ft__engine_allreduce(c, &k, &a, &co);
}

int ft__onehost_open(struct ft_comm *c)
{
	struct ft__onehost *sh;
	int32_t ok = 1;
	int rc;

	if (c->onehost_view == (uint64_t)c->generation + 1)
		return 0; /* decided for this view */
	ft__onehost_close(c);
	if (c->size < 2) {
		c->onehost_view = (uint64_t)c->generation + 1;
		return 0;
	}
	sh = calloc(1, sizeof(*sh));
	if (sh != NULL) {
		sh->n = c->size;
		sh->me = c->rank;
		sh->det = c->cfg.policy != FT_POLICY_ABORT ? c->det : NULL;
		sh->area = c->tp_env.shm_bytes / 4 / 64 * 64;
		sh->bytes = SHM_HEAD + 4 * sh->area;
		sh->spin_ns = c->spin_ns;
		sh->op_timeout_ms = c->cfg.op_timeout_ms;
		sh->base = calloc((size_t)sh->n, sizeof(char *));
		sh->pidfd = malloc((size_t)sh->n * sizeof(int));
	}
	if (sh == NULL || sh->base == NULL || sh->pidfd == NULL)
		ok = 0;
	for (int j = 0; ok && j < sh->n; j++)
		sh->pidfd[j] = -1;
	/* the same two agreements on every rank, whatever each could do; an
	 * armed FTCC_FAULT keeps the ring, where its points are */
	if (ok && c->fault.armed)
		ft__info("shm: FTCC_FAULT is armed: collectives stay on the ring, where its points are");
	if (ok && (!c->tp_env.shm || c->fault.armed || make_own(c, sh) != 0))
		ok = 0;
	if ((rc = agree(c, &ok)) != 0)
		goto out;
	for (int j = 0; ok && j < sh->n; j++)
		if (j != sh->me && map_member(c, sh, j) != 0)
			ok = 0;
	if ((rc = agree(c, &ok)) != 0)
		goto out;
	if (sh != NULL && sh->path[0] != '\0' && unlink(sh->path) == 0)
		sh->path[0] = '\0'; /* every rank mapped it: nothing outlives the job */
	c->onehost_view = (uint64_t)c->generation + 1;
	if (ok) {
		ft__info("shm: the %d ranks share this host: collectives run in shared memory "
			 "(%zu bytes a rank)", sh->n, sh->bytes);
		c->onehost = sh;
		return 0;
	}
	if (c->tp_env.shm)
		ft__info("shm: some rank cannot use shared memory with every other (a warning says "
			 "why, or the ranks are on several hosts): collectives run on the ring");
out:
	shm_free(sh);
	return rc;
}

void ft__onehost_close(struct ft_comm *c)
{
	shm_free(c->onehost);
	c->onehost = NULL;
}
