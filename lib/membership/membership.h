/* membership.h: membership views, what a rank publishes, and the interface every membership backend implements. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_MEMBERSHIP_H
#define FTCC_MEMBERSHIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <poll.h>

#include "bootstrap.h"

/*
 * A view is (generation, ascending original ranks). Generation 0 is the
 * world at ft_init; each failure settles the next one. A backend stores
 * what each rank publishes for a generation (its addresses and the first
 * collective whose result it lacks) and settles each generation's view
 * exactly once: every rank that settles generation g gets the same view.
 *
 * Backends: "file" (member_file.c), a rendezvous directory every rank can
 * reach (one host, or NFS); "inband" (member_inband.c), views settled among
 * the ranks over links of their own, from an address book the launcher
 * gives (bootstrap.h), for hosts without a shared file system.
 *
 * Contract of every backend (checked by membership.c where it can be):
 * - A view it returns has 1 <= size <= world_size and members strictly
 *   ascending in [0, world_size): callers index arrays of world_size with
 *   them. Whatever the backend reads from outside (files, messages) it
 *   validates before use; a malformed record is -FT_ECORRUPT, or ignored
 *   with a warning where ignoring is safe (the backend says which).
 * - publish, lookup and try_settle may run on the detector thread while the
 *   main thread calls lookup: a backend keeps no state those calls share
 *   except what open and the settle of generation 0 set (before the
 *   detector starts).
 * - close is safe on a half-opened handle and after a failed open.
 */

#define FT__ADDR_MAX 256        /* data transport address, NUL included */
#define FT__CTRL_MAX 64         /* control link address, NUL included */
#define FT__BACK_MAX 64         /* ranks awaited back at once */

struct ft__view {
	uint32_t generation;
	int size;
	int *members;           /* original ranks, ascending; malloc'd */
	uint64_t first_op;      /* first collective that runs in this view */
	uint64_t nonce;         /* this job's (the view of generation 0 picks it) */
};

/* What a rank publishes for a generation. */
struct ft__member {
	char addr[FT__ADDR_MAX];        /* data transport address */
	char ctrl[FT__CTRL_MAX];        /* control (detector) address, "" if none */
	uint64_t next_op;               /* first collective whose result it does not hold;
					 * a rejoining incarnation: the first op it can take
					 * part in (its last logged input + 1, 0 without logs) */
	bool rejoining;                 /* a new incarnation asking back in (rejoin policy) */
	uint64_t owed_op;               /* lookup of a settled view (in-band): a member an
					 * earlier view took back as new, still owed the state
					 * at this op (newcomers.c); 0 none */
	int pid;                        /* filled by lookup */
};

struct ft__mb_params {
	const char *backend;    /* "file"; NULL: the default, "file" */
	const char *root;       /* file: the rendezvous directory */
	bool private_root;      /* file: root is a per-user directory in a shared place
				 * (/tmp/ftcc-<uid>): made and checked private */
	const char *job_id;
	int rank;               /* this process's original rank */
	int world_size;
	/* Generation 0 (the job's start): a rank that published and then died
	 * is awaited this long for a new incarnation before the view settles
	 * without it (rejoin policy: a rank killed inside ft_init comes back);
	 * 0: taken as gone at once. Later, so is a candidate seen dead that
	 * the detector did not name (several died at once), which back[]
	 * would have awaited: not one that finalized. */
	int start_wait_ms;
	/* This process's incarnation (FTCC_INCARNATION): a restarted one (> 0)
	 * settles the job's first view only with a majority of the world in
	 * it (file backend), never a world of its own beside ranks that are
	 * being restarted too. */
	uint32_t incarnation;
	/* inband */
	const char *token;
	const char *bind_host;  /* where its listener listens (without a peer list) */
	const char *publish_host; /* ... and the address it gives out ("": the bound one) */
	struct ft__book_params book;    /* where the first address book comes from */
	int reply_wait_ms;      /* a settle that waited long enough (force) waits this long
				 * for answers before going on without the silent */
};

struct ft__mb;

/*
 * The backend table. Every op returns 0 or a negative FT_E* code unless
 * it says otherwise. None blocks longer than a file or message round trip:
 * waiting is ft__mb_settle's, which retries try_settle.
 */
struct ft__mb_ops {
	size_t size;            /* sizeof(struct ft__mb_ops) */
	const char *name;
	/* Sets mb->be; -FT_EBUSY when this rank is held by a live process. */
	int (*open)(struct ft__mb *mb, const struct ft__mb_params *p);
	/* Publishes this rank's record for generation gen (replacing an earlier one). */
	int (*publish)(struct ft__mb *mb, uint32_t gen, const struct ft__member *m);
	/*
	 * One look at generation gen: 1 and *view once it is settled, 0 not
	 * yet. The coordinator, the lowest candidate (ascending) not known gone,
	 * settles it once every candidate has published or is gone, or, when
	 * force, with the candidates that have published; first_op is the
	 * lowest next_op they published.
	 *
	 * back (nback, may be 0) are failed ranks whose new incarnation is
	 * awaited (rejoin policy): the view waits for each until it publishes
	 * as rejoining from a live process (never taken as gone), and takes it
	 * unless the op it published is past first_op + 1 (first_op + 1: its
	 * log holds first_op's input and it replays it; anything lower: its
	 * application runs first_op); a log ahead of the others is settled
	 * without. Ranks in back never coordinate, and their
	 * next_op does not count in first_op.
	 */
	int (*try_settle)(struct ft__mb *mb, uint32_t gen, const int *cand, int ncand,
			  const int *back, int nback, bool force, struct ft__view *view);
	/*
	 * Whether the job this rank belongs to is already running (this process
	 * is a new incarnation of a rank that died): 1 and *latest, the latest
	 * settled view, when another rank of the job is alive and a view of
	 * generation 0 exists; 0 for a job that starts now.
	 */
	int (*resume)(struct ft__mb *mb, struct ft__view *latest);
	/* What original rank orig published for gen; -FT_EPEERFAILED when it has
	 * not or is gone, -FT_ECORRUPT when its record is malformed. */
	int (*lookup)(struct ft__mb *mb, uint32_t gen, int orig, struct ft__member *m);
	/* Marks this rank as finalized (next_op: its next op) so that a settle in
	 * progress neither waits for it nor counts it. */
	int (*depart)(struct ft__mb *mb, uint64_t next_op);
	/* Removes this rank's records up to generation gen (and the views when
	 * remove_view), frees mb->be. */
	void (*close)(struct ft__mb *mb, uint32_t gen, bool remove_view);
	/*
	 * Backends that talk to the other ranks (NULL in those that do not):
	 * the most pollfds pollfds writes; the descriptors to wait on for
	 * their messages; handling every message waiting (returns the newest
	 * generation another rank asked this one about: the detector starts
	 * recovering when it is ahead of its own); and news that original
	 * rank orig is gone for certain (its kernel closed its link), which
	 * counts it out of quorums.
	 */
	int (*max_pollfds)(struct ft__mb *mb);
	int (*pollfds)(struct ft__mb *mb, struct pollfd *pfd, int cap);
	uint32_t (*pump)(struct ft__mb *mb);
	void (*certain)(struct ft__mb *mb, int orig);
};

/* A membership handle: a backend and its state. Zeroed: not open. */
struct ft__mb {
	const struct ft__mb_ops *ops;
	void *be;
	int rank;
	int world_size;
	char where[640];        /* where the records are, for messages */
};

extern const struct ft__mb_ops ft__mb_file_ops;
extern const struct ft__mb_ops ft__mb_inband_ops;

/* The in-band backend's largest world (every message of it fits a control message). */
#define FT__INBAND_MAX_WORLD 4096
/* Its largest message payload for a world of `world` ranks. */
size_t ft__inband_payload_max(int world);
/* For tests: the largest COMMIT and RECORD of such a world, encoded within that payload
 * and decoded: 0 when they come back whole, -FT_EPROTO, or -FT_ENOMEM. */
int ft__inband_codec_check(int world);

#ifdef FTCC_FUZZ
struct ft__ctl_msg;
/* For test/fuzz/fuzz_inband.c: the state an in-band rank can be in when messages come. */
struct ft__inband_fuzz {
	int rank, world;
	uint32_t gen;                   /* it holds the views of generations below */
	const struct ft__view *views;   /* ... these, gen of them */
	bool active, published;         /* settling gen; published its record for it */
	int phase;                      /* coordinating gen: 1 collect, 2 propose, 0 not */
	uint64_t ballot, promised;
	bool book;                      /* every rank's addresses known */
	bool newcomer;                  /* a new incarnation looking for its job */
	int sink;                       /* every link's socket: the answers go there */
};
/* Handles msgs[0 .. n) as pump() would (each on its sender's link), then looks up
 * every rank of every generation up to gen + 1, and closes: 0 or -FT_ENOMEM. */
int ft__inband_fuzz(const struct ft__inband_fuzz *f, const struct ft__ctl_msg *msgs, int n);
/* For test/fuzz/fuzz_memberfile.c: the file backend's readers over dir (<root>/<job>,
 * its nonce 0x5eed): view_any's result (1 and *v, 0 absent, < 0), *member_rc
 * read_member's (an enum of member_file.c, or < 0), *left_rc departed()'s. */
int ft__mbf_fuzz_read(const char *dir, int world_size, uint32_t gen, int orig, struct ft__view *v,
		      struct ft__member *m, int *member_rc, int *left_rc);
#endif

int ft__mb_open(struct ft__mb *mb, const struct ft__mb_params *p);
int ft__mb_publish(struct ft__mb *mb, uint32_t gen, const struct ft__member *m);
int ft__mb_try_settle(struct ft__mb *mb, uint32_t gen, const int *cand, int ncand, bool force,
		      struct ft__view *view);
/* The same, awaiting the new incarnations of back (see try_settle above). */
int ft__mb_try_settle_back(struct ft__mb *mb, uint32_t gen, const int *cand, int ncand,
			   const int *back, int nback, bool force, struct ft__view *view);
/* See resume above. */
int ft__mb_resume(struct ft__mb *mb, struct ft__view *latest);
/* Retries try_settle (backing off) for up to timeout_ms, ft_init's connect
 * timeout (its messages say so): 0 and *view, -FT_ETIMEDOUT (naming who
 * never published), or the backend's error. */
int ft__mb_settle(struct ft__mb *mb, uint32_t gen, const int *cand, int ncand, int timeout_ms,
		  struct ft__view *view);
int ft__mb_lookup(struct ft__mb *mb, uint32_t gen, int orig, struct ft__member *m);
int ft__mb_depart(struct ft__mb *mb, uint64_t next_op);
/* See max_pollfds, pollfds, pump and certain above; harmless for backends without them. */
int ft__mb_max_pollfds(struct ft__mb *mb);
int ft__mb_pollfds(struct ft__mb *mb, struct pollfd *pfd, int cap);
uint32_t ft__mb_pump(struct ft__mb *mb);
void ft__mb_certain(struct ft__mb *mb, int orig);
/* Safe on a zeroed or closed handle. */
void ft__mb_close(struct ft__mb *mb, uint32_t gen, bool remove_view);

/* 0 when v keeps the view contract for world_size, else -FT_ECORRUPT. */
int ft__view_check(const struct ft__view *v, int world_size);
void ft__view_free(struct ft__view *v);
/* *out = a copy of v, its members the caller's to free: 0, or -FT_ENOMEM. */
int ft__view_copy(const struct ft__view *v, struct ft__view *out);

#endif
