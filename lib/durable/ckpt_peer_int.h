/* ckpt_peer_int.h: the peer checkpoint service's own state, shared by its thread (ckpt_peer.c), its fetcher's side (ckpt_peer_fetch.c) and its callers' side (ckpt_peer_api.c). */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_CKPT_PEER_INT_H
#define FTCC_CKPT_PEER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "ckpt_peer.h"
#include "ctl.h"

#define PK_POLL_MS 100
#define PK_HEAD_MAX 8192        /* a HEAD record, a fetch, an address */
#define PK_PENDING 8            /* rounds in flight (the writer has at most two) */

/*
 * Reading a holder's memory in one copy (ckpt_peer_fetch.c): a fetcher on
 * the holder's own kernel and pid namespace says so in its FETCH (local);
 * the holder then answers, after the IMAGE, with LOCAL: its pid and where
 * each copy asked for lies (struct pk_local_msg), and lends the mirror
 * (busy) until the fetcher's DONE. The fetcher reads
 * the copies with process_vm_readv and checks each as if it had come over
 * the link. A read the kernel refuses (EPERM: ptrace rules; ENOSYS) turns
 * the single copy off for this service and the fetch is made again over
 * the link; the addresses are the holder's word, and a copy read from a
 * wrong one fails its checks like any other.
 */
struct pk_local_id {
	char boot[40];          /* /proc/sys/kernel/random/boot_id; "" unknown: never local */
	uint64_t pidns_ino, pidns_dev;
};
struct pk_local_msg {
	int32_t pid;
	uint32_t stride;        /* 64 + block bytes */
	uint64_t n;
	uint64_t base[2];       /* the region's slots: block b's copy at base[s] + b x stride */
	/* then n bits, the slot of each block asked for (in one message, else no LOCAL) */
};
/* One message out: its header, then its payload: up to PK_SEGS pieces of
 * memory (borrowed, or one owned block freed once the message is written). */
#define PK_SEGS 16
struct pk_msg {
	unsigned char hdr[FT__CTL_HDR_BYTES];
	struct iovec seg[PK_SEGS];
	int nseg;
	size_t len;             /* the payload: the segments' bytes */
	void *own;
	uint64_t round;         /* nonzero: the last message of that round */
	struct pk_mirror *release; /* the last message of a reply sent from that mirror's
				    * memory: it is busy until then */
};

/* This service's side of control link i. */
struct pk_link {
	struct pk_msg *q;
	size_t head, tail, cap; /* q[head..tail) waits; off bytes of q[head] are written */
	size_t off;
	int64_t moved_ms;       /* the queue's last progress (or the time it stopped being empty) */
	unsigned char *acc;     /* the record being received */
	size_t acc_len, acc_cap;
	int target;             /* connected here: the rank; -1 */
	struct pk_mirror *lent; /* accepted here: the mirror a fetcher reads itself (LOCAL),
				 * busy until its DONE, or until lent_until_ms (then dropped) */
	int64_t lent_until_ms;
	bool held;              /* messages wait in ctl's buffer (held()) */
	bool stream;            /* connected here: this rank's rounds go on it (a fetch,
				 * an announcement: a link of their own) */
	uint64_t serial;        /* this service's number for the link (a stream is its link's) */
};

/* A ward's checkpoint as its stream built it. */
struct pk_mirror {
	struct ft__ckpt_image img;
	int busy;               /* replies still being written from its memory */
	struct pk_mirror *prev; /* the stream before this one, served until this one's
				 * first round commits (that round holds every block) */
	uint64_t serial;        /* the link its HEAD came on: the stream's records come on it */
};

enum { RQ_ROUND = 1, RQ_ANNOUNCE }; /* a fetch is the one pk_fetch, not a request */

struct pk_req {
	int kind;
	struct ft__ckpt_peer_round round;
	struct pk_req *next;
};

struct pk_fetch {
	uint64_t seq;           /* which fetch (a cancelled one's answer is nobody's) */
	bool active, done, cancel;
	int link, holder, owner, region, rc;
	size_t first, n;
	size_t got, want;       /* bytes of the copies received, expected (n x stride) */
	size_t block_bytes;     /* the block size the caller expects (0: any) */
	unsigned char *into;    /* where they go: the image's memory */
	/* or, with a destination: each copy checked as it comes and its bytes
	 * written there (the image's sunk_slot says which did) */
	unsigned char *dst;
	uint64_t nonce, job_hash; /* the run the answer must be of (nonce 0: any) */
	bool local_ok;          /* this fetch may read the holder's memory in one copy */
	bool asked_local;       /* ... and its FETCH said so (a LOCAL answer is taken only then) */
	unsigned char *carry;   /* a copy split between two messages */
	struct ft__ckpt_image img;
};

struct ft__ckpt_peer {
	struct ft__ckpt_peer_params p;
	char job_id[FT_NAME_MAX], token[FT_NAME_MAX];
	uint64_t job_hash;
	struct ft__ctl ctl;
	bool ctl_opened;
	struct pk_link *link;   /* ctl.nlinks */
	struct pk_mirror **mir; /* by ward */
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int wake_fd;
	uint64_t serials;       /* links numbered so far */
	/* under lock */
	bool stop, dead;        /* dead: the thread has ended (no round is sent any more) */
	struct pk_req *reqs, *reqs_tail;
	char (*book)[FT__CTRL_MAX];
	struct pk_fetch fetch;
	struct pk_local_id local;       /* this process's, for single-copy fetches */
	bool no_local;                  /* FTCC_CKPT_LOCAL=0, or a read was refused */
	unsigned char *bounce;          /* what single-copy reads pass through (ft__big_alloc) */
	size_t bounce_len;
	uint64_t pend[PK_PENDING];      /* rounds posted, not finished (0: free) */
	bool fin[PK_PENDING];
	_Atomic uint64_t sent;
	_Atomic uint64_t *lost; /* by holder: its streams from this rank lost */
};

static inline void pk_lock(struct ft__ckpt_peer *p)
{
	pthread_mutex_lock(&p->lock);
}

static inline void pk_unlock(struct ft__ckpt_peer *p)
{
	pthread_mutex_unlock(&p->lock);
}

static inline void pk_wake(struct ft__ckpt_peer *p)
{
	uint64_t one = 1;

	if (write(p->wake_fd, &one, sizeof(one)) < 0) {
		/* an eventfd counter cannot overflow from ones */
	}
}


/* A FETCH: the owner's region, blocks [first, first + n) (n 0: its table only). */
struct pk_fetch_msg {
	int32_t owner, region;
	uint64_t first, n;
	struct pk_local_id local;       /* the fetcher's, when it may read in one copy */
};
void ft__pk_local_id(struct pk_local_id *id);
bool ft__pk_local_same(const struct pk_local_id *a, const struct pk_local_id *b);

/* ckpt_peer.c: the service thread; a link dropped (what it queued given up); a mirror freed */
void *ft__ckpt_peer_main(void *arg);
void ft__ckpt_peer_drop(struct ft__ckpt_peer *p, int i, const char *why);
void ft__ckpt_peer_mirror_free(struct pk_mirror *m);

/* ckpt_peer_fetch.c: a record of the fetch's answer (under lock: the caller
 * reads fetch.img once done); 0, or -FT_EPROTO for one that does not fit */
int ft__pk_answer(struct ft__ckpt_peer *p, int type, const unsigned char *rec, size_t len);

#endif
