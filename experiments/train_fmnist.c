/* train_fmnist.c: data-parallel training on Fashion-MNIST (MLR, MLP) or synthetic ratings (MF) with replicated or sharded state, for the recovery experiment (train_fmnist --help). */
/* SPDX-License-Identifier: MIT */
#include <ftcc.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "app_ckpt.h"
#include "fmnist.h"
#include "mf.h"

/*
 * Every rank computes the gradient of its own minibatch, a fixed function
 * of (seed, original rank, step), so a failure-free run and a failed run
 * see the same data, and their loss curves differ by the failure alone.
 *
 * Replicated state (--state=replicated): every rank holds the whole model
 * and ft_allreduce averages the gradients. The policy decides what a lost
 * rank costs: shrink averages among the survivors (lossy forward); rejoin
 * restarts it and the model ends bit-identical to the failure-free one.
 *
 * Sharded state (--state=sharded): rank i owns the i-th quarter of the
 * parameter blocks (blocks of a row of W for MLR, 16 floats for the MLP,
 * spread over the ranks by a fixed random permutation, as SCAR partitions
 * rows at random). A step: allgather the shards into the full buffer,
 * gradient, reduce-scatter (average), SGD on the own shard, ft_ckpt_step.
 * Between steps a rank holds only its shard: the rest of the buffer is NaN,
 * so that reading it shows. A lost shard comes back from the running
 * checkpoint:
 *   --recovery=partial  only the lost shard (the replacement's, restored by
 *                       ft_state_sync); the survivors keep theirs (SCAR);
 *   --recovery=full     every shard goes back to the checkpoint; training
 *                       continues from the current step;
 *   --recovery=restart  policy abort: the job dies, and is started again
 *                       with --resume, every rank from its checkpoint,
 *                       redoing the steps since;
 *   --recovery=takeover policy shrink: no replacement; the survivors restore
 *                       the lost shard from its owner's checkpoint and split
 *                       it among themselves, k-th survivor the k-th chunk
 *                       (struct takeover); the ring's halves then run on
 *                       segments of own shard + taken-over chunks.
 *
 * Kills come from outside. With --progress=DIR every rank keeps
 * DIR/step.r<rank> ("pid updates") current, for a driver that kills at a
 * step, wherever the rank is then. With --hold=U too, every rank writes
 * DIR/held.r<rank> (its pid) after update U and waits for DIR/go, which the
 * driver creates once it has sent its SIGKILLs: the kill lands between two
 * steps, the same point in every run. A restarted rank never holds.
 *
 * Rank 0 prints `E step iteration loss` (loss on a fixed subset of the
 * training set) every --eval-every steps and a RESULT line at the end; a
 * rank that restored state prints a RESTORE line; every rank prints a digest
 * of the final model (MODEL).
 *
 * Steps are counted in updates: step u is the model after u updates; the
 * checkpoint of step u (ft_ckpt_step(u)) holds it.
 */

enum st_mode { ST_REPLICATED, ST_SHARDED };
enum rec_mode { REC_NONE, REC_PARTIAL, REC_FULL, REC_RESTART, REC_TAKEOVER };

struct opts {
	enum fm_model model;
	int mf;       /* --model=mf: matrix factorization (mf.h) */
	int steps, batch, eval_every, eval_n;
	double lr;
	uint64_t seed;
	enum st_mode state;
	enum rec_mode recovery;
	int ckpt; /* -1 none, else enum ft_ckpt_strategy */
	double fraction;
	unsigned interval;
	int app_ckpt; /* the application's checkpoint (app_ckpt.h) instead of ftcc's */
	const char *ckdir;
	int hold;
	const char *progdir;
	int resume, executed;
	int dump_step;
	const char *dump, *truth, *data;
};

static const char *const strategy_names[] = {"full", "rr", "random", "priority", "mfu"};

static void usage(void)
{
	fputs("usage: train_fmnist [--model=mlr|mlp|mf] [--steps=N] [--batch=B] [--lr=X] [--seed=S]\n"
	      "  [--state=replicated|sharded] [--recovery=none|partial|full|restart|takeover]\n"
	      "  [--ckpt=none|full|rr|random|priority] [--fraction=R] [--interval=K]\n"
	      "  [--ckpt-impl=lib|app] [--ckpt-dir=DIR] [--eval-every=E] [--eval-n=N] [--hold=U --progress=DIR]\n"
	      "  [--resume --executed=U] [--dump=U:FILE] [--truth=FILE] [--data=DIR]\n",
	      stderr);
}

static int parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){.model = FM_MLR, .steps = 300, .batch = 64, .eval_every = 1,
			   .eval_n = 2000, .lr = 0.1, .seed = 1, .state = ST_SHARDED,
			   .recovery = REC_NONE, .ckpt = -1, .fraction = 0.125, .interval = 1,
			   .ckdir = "", .hold = -1, .progdir = NULL, .dump_step = -1,
			   .data = FM_DIR};
	for (int i = 1; i < argc; i++) {
		char *a = argv[i], *v = strchr(a, '=');
		if (v != NULL)
			*v++ = '\0';
#define IS(name) (strcmp(a, "--" name) == 0 && v != NULL)
		if (IS("model")) {
			o->model = strcmp(v, "mlp") == 0 ? FM_MLP : FM_MLR;
			o->mf = strcmp(v, "mf") == 0;
		}
		else if (IS("steps"))
			o->steps = atoi(v);
		else if (IS("batch"))
			o->batch = atoi(v);
		else if (IS("lr"))
			o->lr = atof(v);
		else if (IS("seed"))
			o->seed = strtoull(v, NULL, 10);
		else if (IS("state"))
			o->state = strcmp(v, "replicated") == 0 ? ST_REPLICATED : ST_SHARDED;
		else if (IS("recovery"))
			o->recovery = strcmp(v, "partial") == 0   ? REC_PARTIAL
				      : strcmp(v, "full") == 0    ? REC_FULL
				      : strcmp(v, "restart") == 0 ? REC_RESTART
				      : strcmp(v, "takeover") == 0 ? REC_TAKEOVER
								  : REC_NONE;
		else if (IS("ckpt")) {
			o->ckpt = -1;
			for (int k = 0; k < FT_CKPT_STRATEGY_COUNT; k++)
				if (strcmp(v, strategy_names[k]) == 0)
					o->ckpt = k;
		} else if (IS("fraction"))
			o->fraction = atof(v);
		else if (IS("interval"))
			o->interval = (unsigned)atoi(v);
		else if (IS("ckpt-impl"))
			o->app_ckpt = strcmp(v, "app") == 0;
		else if (IS("ckpt-dir"))
			o->ckdir = v;
		else if (IS("eval-every"))
			o->eval_every = atoi(v);
		else if (IS("eval-n"))
			o->eval_n = atoi(v);
		else if (IS("hold"))
			o->hold = atoi(v);
		else if (IS("progress"))
			o->progdir = v;
		else if (strcmp(a, "--resume") == 0)
			o->resume = 1;
		else if (IS("executed"))
			o->executed = atoi(v);
		else if (IS("dump")) {
			o->dump_step = atoi(v);
			o->dump = strchr(v, ':') != NULL ? strchr(v, ':') + 1 : NULL;
		} else if (IS("truth"))
			o->truth = v;
		else if (IS("data"))
			o->data = v;
		else {
			usage();
			return -1;
		}
#undef IS
	}
	if (o->steps < 1 || o->batch < 1 || o->eval_every < 1 || o->eval_n < 1 ||
	    o->interval < 1 || (o->hold >= 0 && o->progdir == NULL) ||
	    (o->state == ST_SHARDED && o->recovery != REC_NONE && o->ckpt < 0)) {
		usage();
		return -1;
	}
	return 0;
}

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t fnv(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* The parameter layout: logical block perm[p] lives at physical block p. */
struct layout {
	size_t bs;        /* floats per block */
	size_t nparams;   /* logical floats */
	size_t nbl;       /* logical blocks */
	size_t nb;        /* physical blocks, a multiple of the world size */
	size_t sb;        /* blocks per shard */
	size_t *perm;
};

static int layout_init(struct layout *L, const struct opts *o, int world)
{
	uint64_t s = 0x5ca1ab1eull;

	L->bs = o->mf ? MF_RANK : o->model == FM_MLR ? FM_CLASSES : 16;
	L->nparams = o->mf ? mf_nparams() : fm_nparams(o->model);
	L->nbl = (L->nparams + L->bs - 1) / L->bs;
	L->nb = (L->nbl + (size_t)world - 1) / (size_t)world * (size_t)world;
	L->sb = L->nb / (size_t)world;
	L->perm = malloc(L->nb * sizeof(size_t));
	if (L->perm == NULL)
		return -1;
	for (size_t p = 0; p < L->nb; p++)
		L->perm[p] = p;
	for (size_t p = L->nb - 1; p > 0; p--) {
		size_t q = (size_t)(mix64(s++) % (p + 1)), t = L->perm[p];
		L->perm[p] = L->perm[q];
		L->perm[q] = t;
	}
	return 0;
}

static void to_logical(const struct layout *L, const float *x, float *th)
{
	for (size_t p = 0; p < L->nb; p++)
		if (L->perm[p] < L->nbl)
			memcpy(th + L->perm[p] * L->bs, x + p * L->bs, L->bs * sizeof(float));
}

static void to_physical(const struct layout *L, const float *th, float *x)
{
	for (size_t p = 0; p < L->nb; p++) {
		if (L->perm[p] < L->nbl)
			memcpy(x + p * L->bs, th + L->perm[p] * L->bs, L->bs * sizeof(float));
		else
			memset(x + p * L->bs, 0, L->bs * sizeof(float));
	}
}

/* The initial model (the same on every rank): MLR zeros, MLP Glorot-uniform, MF uniform. */
static void init_model(const struct opts *o, uint64_t seed, float *th, size_t n)
{
	enum fm_model m = o->model;

	memset(th, 0, n * sizeof(float));
	if (o->mf) {
		for (size_t i = 0; i < mf_nparams(); i++)
			th[i] = (float)((double)(mix64(seed * 31 + i) >> 11) / 9007199254740992.0 - 0.5) * 0.6f;
		return;
	}
	if (m == FM_MLR)
		return;
	uint64_t s = seed * 7919 + 17;
	float a1 = sqrtf(6.0f / (FM_PIXELS + FM_HIDDEN)), a2 = sqrtf(6.0f / (FM_HIDDEN + FM_CLASSES));
	for (size_t i = 0; i < (size_t)FM_PIXELS * FM_HIDDEN; i++)
		th[i] = a1 * ((float)(mix64(s++) >> 40) / (float)(1u << 24) * 2 - 1);
	float *w2 = th + FM_PIXELS * FM_HIDDEN + FM_HIDDEN;
	for (size_t i = 0; i < (size_t)FM_HIDDEN * FM_CLASSES; i++)
		w2[i] = a2 * ((float)(mix64(s++) >> 40) / (float)(1u << 24) * 2 - 1);
}

/* The minibatch of (original rank, step): rank r draws from the images i with i % world == r. */
static void minibatch(const struct opts *o, int rank, int world, int step, size_t ntrain, size_t *idx)
{
	size_t part = ntrain / (size_t)world;
	for (int i = 0; i < o->batch; i++) {
		uint64_t h = mix64(o->seed * 0x100000001b3ull ^ mix64((uint64_t)step << 20 ^
								     (uint64_t)rank << 12 ^ (uint64_t)i));
		idx[i] = (size_t)rank + (size_t)world * (size_t)(h % part);
	}
}

static int write_file(const char *path, const void *buf, size_t len)
{
	char tmp[FT_PATH_MAX + 64];
	int fd, ok;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -1;
	ok = write(fd, buf, len) == (ssize_t)len;
	ok &= close(fd) == 0;
	return ok && rename(tmp, path) == 0 ? 0 : -1;
}

/* DIR/step.r<rank> holds "pid step" (the updates done), rewritten every step. */
static void progress_note(const struct opts *o, int rank, int *fd, int step)
{
	char buf[64];
	int n;

	if (o->progdir == NULL)
		return;
	if (*fd < 0) {
		char path[FT_PATH_MAX + 32];
		snprintf(path, sizeof(path), "%s/step.r%d", o->progdir, rank);
		*fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (*fd < 0)
			return;
	}
	n = snprintf(buf, sizeof(buf), "%ld %10d\n", (long)getpid(), step);
	if (pwrite(*fd, buf, (size_t)n, 0) != n)
		fprintf(stderr, "progress: %s\n", strerror(errno));
}

/* After update u: tell the driver, and wait until it says go (it kills in between). */
static double hold_here(const struct opts *o, int rank)
{
	char path[FT_PATH_MAX + 32], pid[32];
	double t0 = now_ms();
	struct stat st;

	snprintf(path, sizeof(path), "%s/held.r%d", o->progdir, rank);
	snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (write_file(path, pid, strlen(pid)) != 0) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return 0;
	}
	snprintf(path, sizeof(path), "%s/go", o->progdir);
	while (stat(path, &st) != 0 && now_ms() - t0 < 30000)
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	return now_ms() - t0;
}

/* The ring's halves on the full buffer x (own shard at x + r * shard). */
static int gather(struct ft_comm *c, float *x, size_t shard, struct ft_op_info *info)
{
	return ft_allgather(c, FT_IN_PLACE, x, shard, FT_FLOAT32, info);
}

static int scatter_avg(struct ft_comm *c, float *g, size_t shard, struct ft_op_info *info)
{
	return ft_reduce_scatter(c, FT_IN_PLACE, g, shard, FT_FLOAT32, FT_AVG, info);
}

/* The running checkpoint: ftcc's, or the application's own (--ckpt-impl=app). */
static int ck_step(const struct opts *o, struct ft_comm *c, uint64_t step)
{
	return o->app_ckpt ? sk_step(step) : ft_ckpt_step(c, step);
}

/* This rank's whole shard (region `region`) back from its checkpoint into dst. */
static int ck_restore_own(const struct opts *o, struct ft_comm *c, int region, float *dst,
			  unsigned flags, uint64_t now, struct ft_restore_info *ri)
{
	size_t nblocks;
	int rc;

	if (o->app_ckpt)
		return sk_restore_own(dst, flags, now, ri);
	rc = ft_ckpt_blocks(c, region, ft_orig_rank(c, ft_rank(c)), &nblocks, NULL, NULL);
	return rc != 0 ? rc
		       : ft_ckpt_restore(c, region, ft_orig_rank(c, ft_rank(c)), 0, nblocks, dst,
					 flags, ri);
}

static void print_restore(const char *kind, int rank, const struct ft_restore_info *ri,
			  double truth_dist)
{
	printf("RESTORE kind=%s rank=%d blocks=%zu bytes=%zu perturbation=%.6g exact=%d "
	       "true=%.6g pls=%.6g ckpt_step=%" PRIu64 " oldest_step=%" PRIu64 " now_step=%" PRIu64
	       "\n",
	       kind, rank, ri->blocks, ri->bytes, ri->perturbation, ri->exact, truth_dist, ri->pls,
	       ri->ckpt_step, ri->oldest_step, ri->now_step);
}

/* ||truth - x|| over this rank's shard, -1 without a truth file. */
static double truth_distance(const struct opts *o, const struct layout *L, int rank, const float *x)
{
	size_t shard = L->sb * L->bs, n = L->nb * L->bs;
	float *t;
	FILE *f;
	double d = 0;

	if (o->truth == NULL || (f = fopen(o->truth, "rb")) == NULL)
		return -1;
	t = malloc(n * sizeof(float));
	if (t == NULL || fread(t, sizeof(float), n, f) != n) {
		fclose(f);
		free(t);
		return -1;
	}
	fclose(f);
	for (size_t i = 0; i < shard; i++) {
		double e = (double)t[(size_t)rank * shard + i] - (double)x[i];
		d += e * e;
	}
	free(t);
	return sqrt(d);
}

/* CPR-MFU clears the counters of the blocks a round saved: the ceil(r x n)
 * highest (the round's choice for these scores). */
static void clear_saved(double *counts, size_t n, double fraction)
{
	size_t m = (size_t)ceil(fraction * (double)n);

	for (size_t k = 0; k < m && k < n; k++) {
		size_t best = 0;
		for (size_t b = 1; b < n; b++)
			best = counts[b] > counts[best] ? b : best;
		if (counts[best] <= 0)
			break;
		counts[best] = 0;
	}
}

/*
 * After a shrink: member k (dense rank, n members) holds its own shard and,
 * of every lost owner's shard, the chunk of q = ceil(blocks / n) blocks at k q.
 * The collectives run on equal segments of seg floats, member by member:
 * [own shard | chunk of lost owner 1 | chunk of lost owner 2 ...], padded.
 */
#define TK_MAX 64 /* ranks */

struct takeover {
	int n, nd;
	int member[TK_MAX], dead[TK_MAX];        /* original ranks */
	size_t q, seg;                           /* blocks a chunk, floats a segment */
	float *extra;                            /* this rank's chunks, nd x q blocks */
	float *z;                                /* n segments */
};

/* Full buffer x <-> segments z, in the direction given. */
static void takeover_pack(const struct takeover *k, const struct layout *L, float *x, int to_z)
{
	size_t shard = L->sb * L->bs, cb = k->q * L->bs;

	for (int j = 0; j < k->n; j++) {
		float *seg = k->z + (size_t)j * k->seg;
		float *own = x + (size_t)k->member[j] * shard;
		if (to_z)
			memcpy(seg, own, shard * sizeof(float));
		else
			memcpy(own, seg, shard * sizeof(float));
		for (int d = 0; d < k->nd; d++) {
			size_t first = (size_t)j * k->q, nb = first < L->sb ? L->sb - first : 0;
			nb = nb > k->q ? k->q : nb;
			float *chunk = x + (size_t)k->dead[d] * shard + first * L->bs;
			float *in = seg + shard + (size_t)d * cb;
			if (to_z) {
				memcpy(in, chunk, nb * L->bs * sizeof(float));
				memset(in + nb * L->bs, 0, (cb - nb * L->bs) * sizeof(float));
			} else {
				memcpy(chunk, in, nb * L->bs * sizeof(float));
			}
		}
	}
}

int main(int argc, char **argv)
{
	struct opts o;
	struct layout L;
	struct fm_set train, test;
	struct ft_comm *comm;
	struct ft_op_info info;
	float *x, *g, *th, *gl, *mine;
	size_t *idx, shard, nx;
	uint64_t *hs;
	double *counts; /* CPR-MFU: accesses to each own block since it was last saved */
	int rc, me, world, start = 0, back = 0, region = -1, ops0 = 1, pfd = -1;
	struct takeover tk = {.n = 0};
	uint64_t next_op = 0;
	uint32_t gen;
	double t_loop, hold_ms = 0, eval_ms = 0, ckpt_ms = 0, fail_ms = 0;
	int ckpt_rounds = 0;
	const char *inc = getenv("FTCC_INCARNATION");
	int incarnation = inc != NULL ? atoi(inc) : 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 2 && strncmp(argv[1], "--pls-interval=", 15) == 0) {
		/* CPR's rule: --pls-interval=TARGET,FAILURES_PER_STEP,LOST_FRACTION */
		double t = 0, f = 0, l = 0;
		if (sscanf(argv[1] + 15, "%lf,%lf,%lf", &t, &f, &l) != 3)
			return 2;
		printf("interval %u\n", ft_ckpt_interval_for_pls(t, f, l));
		return 0;
	}
	if (parse(argc, argv, &o) != 0)
		return 2;
	static struct mf mfd;
	memset(&train, 0, sizeof(train));
	memset(&test, 0, sizeof(test));
	if (o.mf)
		mf_init(&mfd);
	else if (fm_load(o.data, "train", &train) != 0 || fm_load(o.data, "t10k", &test) != 0)
		return 1;
	if ((rc = ft_init(NULL, &comm)) != 0) {
		fprintf(stderr, "ft_init: %s\n", ft_strerror(rc));
		return 1;
	}
	me = ft_orig_rank(comm, ft_rank(comm));
	world = ft_size(comm);
	if (world > TK_MAX) {
		fprintf(stderr, "at most %d ranks\n", TK_MAX);
		return 2;
	}
	if (layout_init(&L, &o, world) != 0)
		return 1;
	shard = L.sb * L.bs;
	nx = L.nb * L.bs;
	x = malloc(nx * sizeof(float));
	g = malloc(nx * sizeof(float));
	th = malloc(L.nbl * L.bs * sizeof(float));
	gl = malloc(L.nbl * L.bs * sizeof(float));
	mine = malloc(shard * sizeof(float));
	idx = malloc((size_t)o.batch * sizeof(size_t));
	hs = malloc((size_t)o.batch * sizeof(uint64_t));
	counts = calloc(L.sb, sizeof(double));
	if (hs == NULL || counts == NULL)
		return 1;
	if (x == NULL || g == NULL || th == NULL || gl == NULL || mine == NULL || idx == NULL)
		return 1;
	init_model(&o, o.seed, th, L.nbl * L.bs);
	to_physical(&L, th, x);
	memcpy(mine, x + (size_t)me * shard, shard * sizeof(float));

	/* State, and where this process enters the job. */
	if (o.state == ST_REPLICATED)
		rc = ft_state_register(comm, x, nx * sizeof(float), FT_STATE_REPLICATED);
	else
		rc = region = ft_state_register(comm, mine, shard * sizeof(float),
						FT_STATE_SHARDED | FT_STATE_DTYPE(FT_FLOAT32));
	if (rc < 0) {
		fprintf(stderr, "ft_state_register: %s\n", ft_strerror(rc));
		return 1;
	}
	if (o.ckpt >= 0 && o.state == ST_SHARDED) {
		struct ft_ckpt_config cc = FT_CKPT_CONFIG_INIT;
		cc.strategy = (enum ft_ckpt_strategy)o.ckpt;
		cc.block_bytes = L.bs * sizeof(float);
		cc.fraction = o.ckpt == FT_CKPT_FULL ? 1.0 : o.fraction;
		cc.interval = o.interval;
		cc.seed = o.seed;
		snprintf(cc.dir, sizeof(cc.dir), "%s", o.ckdir);
		if (o.app_ckpt)
			rc = sk_enable(comm, &cc, mine, shard * sizeof(float), incarnation == 0 && !o.resume);
		else
			rc = ft_ckpt_enable(comm, &cc);
		ops0 += !o.app_ckpt; /* ftcc's enable agrees in one collective */
		if (rc != 0) {
			fprintf(stderr, "ft_ckpt_enable: %s\n", ft_strerror(rc));
			return 1;
		}
	}
	if ((rc = ft_state_sync(comm)) != 0) {
		fprintf(stderr, "ft_state_sync: %s\n", ft_strerror(rc));
		return 1;
	}
	back = ft_rejoined(comm, &next_op) == 1;
	if (back) {
		/* op 0 is ft_init's barrier (op 1 ft_ckpt_enable's agreement);
		 * a step is 1 op (replicated) or 2 (sharded) */
		int per = o.state == ST_REPLICATED ? 1 : 2;
		if (next_op < (uint64_t)ops0 || (next_op - (uint64_t)ops0) % (uint64_t)per != 0) {
			fprintf(stderr, "rank %d rejoined inside a step (op %" PRIu64 "): "
					"kills belong between steps here\n", me, next_op);
			return 1;
		}
		start = (int)((next_op - (uint64_t)ops0) / (uint64_t)per);
		if (o.state == ST_SHARDED) {
			struct ft_restore_info ri;
			if ((rc = o.app_ckpt ? sk_restore_own(mine, 0, (uint64_t)start, &ri)
					     : ft_state_restored(comm, &ri)) != 0) {
				fprintf(stderr, "ft_state_restored: %s\n", ft_strerror(rc));
				return 1;
			}
			print_restore("replacement", me, &ri, truth_distance(&o, &L, me, mine));
		}
		printf("rank %d rejoined at step %d (op %" PRIu64 ")\n", me, start, next_op);
	}
	if (o.resume) {
		/* The whole job starts again from its checkpoints: every rank from its own. */
		struct ft_restore_info ri;
		double lo, hi;
		if ((rc = ck_restore_own(&o, comm, region, mine, 0, (uint64_t)o.executed, &ri)) != 0) {
			fprintf(stderr, "restore: %s\n", ft_strerror(rc));
			return 1;
		}
		lo = hi = (double)ri.ckpt_step;
		if ((rc = ft_allreduce(comm, FT_IN_PLACE, &lo, 1, FT_FLOAT64, FT_MIN, NULL)) != 0 ||
		    (rc = ft_allreduce(comm, FT_IN_PLACE, &hi, 1, FT_FLOAT64, FT_MAX, NULL)) != 0) {
			fprintf(stderr, "resume: %s\n", ft_strerror(rc));
			return 1;
		}
		if (lo != hi || ri.oldest_step != ri.ckpt_step) {
			fprintf(stderr, "resume: the checkpoints disagree (steps %.0f..%.0f)\n", lo, hi);
			return 1;
		}
		start = (int)lo;
		print_restore("restart", me, &ri, truth_distance(&o, &L, me, mine));
	}
	gen = ft_generation(comm);

	t_loop = now_ms();
	for (int t = start; t < o.steps; t++) {
		int first = t == start && back;
		if (o.state == ST_SHARDED) {
			/* The full model for this step: the own shard, then everyone's. */
			memcpy(x + (size_t)me * shard, mine, shard * sizeof(float));
			if (tk.n > 0) {
				takeover_pack(&tk, &L, x, 1);
				rc = ft_allgather(comm, FT_IN_PLACE, tk.z, tk.seg, FT_FLOAT32, &info);
				if (rc == 0 && ft_size(comm) != tk.n)
					rc = -FT_EPEERFAILED; /* a second loss: not handled here */
				if (rc == 0)
					takeover_pack(&tk, &L, x, 0);
			} else {
				rc = gather(comm, x, shard, &info);
			}
			if (rc != 0) {
				fprintf(stderr, "step %d: allgather: %s\n", t, ft_strerror(rc));
				return 3;
			}
			if (ft_size(comm) != world && o.recovery == REC_TAKEOVER && tk.n == 0) {
				/* The lost shards come back from their owners' checkpoints,
				 * whole on every survivor for this step; each keeps its chunk. */
				double t0 = now_ms();
				int alive[TK_MAX] = {0};
				tk.n = ft_size(comm);
				for (int k = 0; k < tk.n; k++)
					alive[tk.member[k] = ft_orig_rank(comm, k)] = 1;
				for (int r = 0; r < world; r++)
					if (!alive[r])
						tk.dead[tk.nd++] = r;
				tk.q = (L.sb + (size_t)tk.n - 1) / (size_t)tk.n;
				tk.seg = shard + (size_t)tk.nd * tk.q * L.bs;
				tk.extra = calloc((size_t)tk.nd * tk.q * L.bs, sizeof(float));
				tk.z = calloc((size_t)tk.n * tk.seg, sizeof(float));
				if (tk.extra == NULL || tk.z == NULL)
					return 1;
				for (int d = 0; d < tk.nd; d++) {
					struct ft_restore_info ri;
					float *dst = x + (size_t)tk.dead[d] * shard;
					rc = ft_ckpt_restore(comm, region, tk.dead[d], 0, L.sb, dst, 0, &ri);
					if (rc != 0) {
						fprintf(stderr, "restore of rank %d's shard: %s\n", tk.dead[d],
							ft_strerror(rc));
						return 1;
					}
					if (ft_rank(comm) == 0)
						print_restore("takeover", tk.dead[d], &ri,
							      truth_distance(&o, &L, tk.dead[d], dst));
				}
				fail_ms += now_ms() - t0;
			}
			if (ft_size(comm) != world && tk.n == 0) {
				/* shrink (or a rejoin that fell back to it): a shard is gone */
				fprintf(stderr, "step %d: %d of %d ranks left and nobody holds the lost "
						"shards: stopping\n", t, ft_size(comm), world);
				return 4;
			}
			int failed = ft_generation(comm) != gen;
			if ((failed || first) && o.recovery == REC_FULL) {
				/* Full recovery: every shard back to the checkpoint; the
				 * replacement's came back in ft_state_sync. */
				double t0 = now_ms();
				if (!first) {
					struct ft_restore_info ri;
					if ((rc = ck_restore_own(&o, comm, region, mine,
								 FT_RESTORE_CURRENT, (uint64_t)t,
								 &ri)) != 0) {
						fprintf(stderr, "restore: %s\n", ft_strerror(rc));
						return 1;
					}
					print_restore("survivor", me, &ri,
						      truth_distance(&o, &L, me, mine));
				}
				memcpy(x + (size_t)me * shard, mine, shard * sizeof(float));
				if ((rc = gather(comm, x, shard, &info)) != 0) {
					fprintf(stderr, "step %d: allgather: %s\n", t, ft_strerror(rc));
					return 3;
				}
				fail_ms += now_ms() - t0;
			}
			if (failed && me == 0)
				printf("step %d: failure seen: generation %u -> %u\n", t, gen,
				       ft_generation(comm));
			gen = ft_generation(comm);
		}
		if (me == 0 && t == o.dump_step && o.dump != NULL && write_file(o.dump, x, nx * sizeof(float)) != 0)
			fprintf(stderr, "%s: %s\n", o.dump, strerror(errno));
		if (me == 0 && t % o.eval_every == 0) {
			double t0 = now_ms(), loss, acc;
			to_logical(&L, x, th);
			if (o.mf)
				loss = mf_eval(&mfd, th, (size_t)o.eval_n);
			else
				fm_eval(o.model, th, &train, (size_t)o.eval_n, train.n / (size_t)o.eval_n,
					&loss, &acc);
			printf("E %d %d %.6f\n", t, o.resume ? t + o.executed - start : t, loss);
			eval_ms += now_ms() - t0;
		}
		/* This rank's gradient, in the physical layout. */
		to_logical(&L, x, th);
		memset(gl, 0, L.nbl * L.bs * sizeof(float));
		if (o.mf) {
			for (int i = 0; i < o.batch; i++)
				hs[i] = mix64(o.seed * 0x100000001b3ull ^
					      mix64((uint64_t)t << 20 ^ (uint64_t)me << 12 ^ (uint64_t)i));
			mf_grad(&mfd, th, hs, (size_t)o.batch, gl);
		} else {
			minibatch(&o, me, world, t, train.n, idx);
			fm_grad(o.model, th, &train, idx, (size_t)o.batch, gl);
		}
		to_physical(&L, gl, g);
		if (o.state == ST_REPLICATED) {
			rc = ft_allreduce(comm, FT_IN_PLACE, g, nx, FT_FLOAT32, FT_AVG, &info);
			if (rc != 0) {
				fprintf(stderr, "step %d: allreduce: %s\n", t, ft_strerror(rc));
				return 3;
			}
			if (ft_generation(comm) != gen && me == 0)
				printf("step %d: failure seen: generation %u -> %u, %d contributors\n", t,
				       gen, ft_generation(comm), info.contributors);
			gen = ft_generation(comm);
			for (size_t i = 0; i < nx; i++)
				x[i] -= (float)o.lr * g[i];
		} else {
			if (tk.n > 0) {
				/* own shard and the taken-over chunks, in one segment each */
				takeover_pack(&tk, &L, g, 1);
				rc = ft_reduce_scatter(comm, FT_IN_PLACE, tk.z, tk.seg, FT_FLOAT32, FT_AVG,
						       &info);
				if (rc == 0 && ft_size(comm) != tk.n)
					rc = -FT_EPEERFAILED;
			} else {
				rc = scatter_avg(comm, g, shard, &info);
			}
			if (rc != 0) {
				fprintf(stderr, "step %d: reduce-scatter: %s\n", t, ft_strerror(rc));
				return 3;
			}
			const float *gm = tk.n > 0 ? tk.z + (size_t)ft_rank(comm) * tk.seg
						   : g + (size_t)ft_rank(comm) * shard;
			for (size_t i = 0; i < shard; i++)
				mine[i] -= (float)o.lr * gm[i];
			if (tk.n > 0) {
				/* the chunks: this step's values (restored or gathered) minus the update */
				int k = ft_rank(comm);
				for (int d = 0; d < tk.nd; d++) {
					size_t c0 = (size_t)k * tk.q, nb = c0 < L.sb ? L.sb - c0 : 0;
					nb = nb > tk.q ? tk.q : nb;
					float *cur = x + (size_t)tk.dead[d] * shard + c0 * L.bs;
					const float *gc = gm + shard + (size_t)d * tk.q * L.bs;
					for (size_t i = 0; i < nb * L.bs; i++)
						cur[i] -= (float)o.lr * gc[i];
				}
			}
			if (o.ckpt == FT_CKPT_APP_PRIORITY) {
				/* CPR-MFU: a block is accessed when its averaged gradient is not 0 */
				for (size_t b = 0; b < L.sb; b++)
					for (size_t i = 0; i < L.bs; i++)
						if (gm[b * L.bs + i] != 0) {
							counts[b] += 1;
							break;
						}
			}
			if (o.ckpt >= 0) {
				double t0 = now_ms();
				int round = (t + 1) % (int)o.interval == 0;
				if (round && o.ckpt == FT_CKPT_APP_PRIORITY &&
				    (rc = ft_ckpt_priority(comm, region, counts, L.sb)) != 0) {
					fprintf(stderr, "ft_ckpt_priority: %s\n", ft_strerror(rc));
					return 1;
				}
				if ((rc = ck_step(&o, comm, (uint64_t)t + 1)) != 0) {
					fprintf(stderr, "step %d: ft_ckpt_step: %s\n", t, ft_strerror(rc));
					return 1;
				}
				if (round && o.ckpt == FT_CKPT_APP_PRIORITY)
					clear_saved(counts, L.sb, o.fraction);
				ckpt_ms += now_ms() - t0;
				ckpt_rounds += round;
			}
			if (tk.n > 0) {
				/* this rank's chunks of the lost shards live in x: keep them */
				int k = ft_rank(comm);
				for (int d = 0; d < tk.nd; d++) {
					size_t c0 = (size_t)k * tk.q, nb = c0 < L.sb ? L.sb - c0 : 0;
					nb = nb > tk.q ? tk.q : nb;
					memcpy(tk.extra + (size_t)d * tk.q * L.bs,
					       x + (size_t)tk.dead[d] * shard + c0 * L.bs,
					       nb * L.bs * sizeof(float));
				}
			}
			for (size_t i = 0; i < nx; i++)
				x[i] = NAN; /* nobody's but the owner's between steps */
			if (tk.n > 0) {
				int k = ft_rank(comm);
				for (int d = 0; d < tk.nd; d++) {
					size_t c0 = (size_t)k * tk.q, nb = c0 < L.sb ? L.sb - c0 : 0;
					nb = nb > tk.q ? tk.q : nb;
					memcpy(x + (size_t)tk.dead[d] * shard + c0 * L.bs,
					       tk.extra + (size_t)d * tk.q * L.bs, nb * L.bs * sizeof(float));
				}
			}
		}
		progress_note(&o, me, &pfd, t + 1);
		if (t + 1 == o.hold && incarnation == 0 && !o.resume)
			hold_ms += hold_here(&o, me);
	}
	double loop_ms = now_ms() - t_loop;

	/* The final model on every rank, its digest, and the test accuracy. */
	if (o.state == ST_SHARDED) {
		memcpy(x + (size_t)me * shard, mine, shard * sizeof(float));
		if (tk.n > 0) {
			takeover_pack(&tk, &L, x, 1);
			rc = ft_allgather(comm, FT_IN_PLACE, tk.z, tk.seg, FT_FLOAT32, &info);
			if (rc == 0)
				takeover_pack(&tk, &L, x, 0);
		} else {
			rc = gather(comm, x, shard, &info);
		}
		if (rc != 0) {
			fprintf(stderr, "final allgather: %s\n", ft_strerror(rc));
			return 3;
		}
		if (o.ckpt >= 0 && (rc = o.app_ckpt ? sk_flush() : ft_ckpt_flush(comm)) != 0)
			fprintf(stderr, "ft_ckpt_flush: %s\n", ft_strerror(rc));
	}
	printf("MODEL %016" PRIx64 "\n", fnv(x, nx * sizeof(float)));
	if (me == 0) {
		double tl, ta, el, ea;
		int nsteps = o.steps - start;
		to_logical(&L, x, th);
		if (o.mf) {
			ta = 0;
			tl = el = mf_eval(&mfd, th, (size_t)o.eval_n);
		} else {
			fm_eval(o.model, th, &test, test.n, 1, &tl, &ta);
			fm_eval(o.model, th, &train, (size_t)o.eval_n, train.n / (size_t)o.eval_n, &el,
				&ea);
		}
		double step_ms = (loop_ms - hold_ms - eval_ms - fail_ms) / (nsteps > 0 ? nsteps : 1);
		double ck_step = nsteps > 0 ? ckpt_ms / nsteps : 0;
		printf("RESULT steps=%d test_acc=%.4f test_loss=%.5f final_loss=%.6f wall_ms=%.1f "
		       "step_ms=%.4f ckpt_ms_per_step=%.4f ckpt_pct=%.3f rounds=%d recovery_ms=%.1f "
		       "ranks=%d\n",
		       nsteps, ta, tl, el, loop_ms - hold_ms, step_ms, ck_step,
		       step_ms > ck_step ? 100.0 * ck_step / (step_ms - ck_step) : 0.0, ckpt_rounds,
		       fail_ms, ft_size(comm));
	}
	if (pfd >= 0)
		close(pfd);
	rc = ft_finalize(comm);
	free(x);
	free(g);
	free(th);
	free(gl);
	free(mine);
	free(idx);
	free(hs);
	free(counts);
	free(tk.extra);
	free(tk.z);
	free(L.perm);
	free(train.img);
	free(train.label);
	free(test.img);
	free(test.label);
	return rc == 0 ? 0 : 1;
}
