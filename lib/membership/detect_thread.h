/* detect_thread.h: the failure detector's state, shared by its thread (detect.c) and the main thread's side (detect_api.c). */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_DETECT_THREAD_H
#define FTCC_DETECT_THREAD_H

/*
 * One thread per communicator (shrink and rejoin policies), apart from the
 * data path:
 *
 * - Control links (ctl.c): a small TCP connection to each ring neighbour of
 *   the current view (this rank connects to its right neighbour and accepts
 *   from its left). Both ends send a heartbeat every heartbeat_ms.
 * - Detection: the end of a control link without a goodbye (the kernel closes
 *   a dead process's sockets), a refused connection, a link that cannot take
 *   a message (its peer stopped reading), or detect_timeout_ms of silence
 *   marks the neighbour failed. A rank that leaves on purpose (ft_finalize, a
 *   newer view) says goodbye first.
 * - A token or job id that differs is not a failure of the neighbour: either
 *   side may hold the wrong one. A rank that has proved its token on some
 *   control link (its hello was accepted, or a peer's hello passed here)
 *   declares a neighbour that refused its hello, or could not prove its
 *   own. A rank that has proved it to no one, whose every neighbour refused
 *   it (or sent hellos it refused), holds the odd token: it leaves with
 *   FT_EAUTH and settles no view of its own (a rank alone would otherwise
 *   take its own buffer for the sum).
 * - Failed set: original ranks, cumulative; it only grows. Ranks outside the
 *   world in a notice are ignored; a notice naming this rank means the others
 *   count it out, and it leaves.
 * - Notice: the failed set goes to both neighbours whenever it grows; each
 *   rank forwards only what is new to it, so a notice crosses each link at
 *   most once per failure and the ring carries it both ways around the hole.
 *   A neighbour that cannot take the notice is itself declared, and the
 *   close of its link tells it as well as the notice would have.
 * - Settle: on its first notice the detector freezes what the main thread has
 *   finished (the first op whose result it lacks), publishes it with its
 *   addresses through membership for generation g+1, and polls until the
 *   coordinator (lowest candidate: members of g not known failed) settles the
 *   view. A coordinator that dies or hangs is itself detected, which makes the
 *   next candidate the coordinator; after 2 x detect_timeout_ms the coordinator
 *   settles with whoever has published. A view that names a rank failed in the
 *   meantime is followed at once by the next generation.
 * - The main thread learns through a flag it checks while it waits (and a
 *   condition variable when it waits for the view); it adopts the view itself.
 * - Growing back, a view that takes new incarnations in with no failure:
 *   detect_grow.c.
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ctl.h"
#include "detect.h"
#include "internal.h"

struct ft__det {
	struct ft__det_params p;
	char job_id[FT_NAME_MAX], token[FT_NAME_MAX], data_addr[FT__ADDR_MAX];
	struct ft__ctl ctl;
	bool ctl_opened;
	int cmd[2];             /* main thread -> detector: 's' stop, 'x' suspect, 'g' grow */
	pthread_t thread;
	bool started;
	bool lock_made, cond_made;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	atomic_bool pending;
	int wake_fd;                    /* eventfd: readable while pending (the engine's wait watches it) */
	/* under lock */
	bool frozen, recovering, excluded, stop;
	bool bye;               /* stop: a clean end, said to the neighbours (ft__det_destroy) */
	int fatal;
	uint64_t next_op;
	bool *failed;           /* by original rank */
	uint32_t *since;        /* by original rank: notices older than this generation
				 * cannot name it (a new incarnation took it back) */
	struct ft__view ready;  /* latest view this detector settled on */
	int suspect;
	bool suspect_sure;
	uint64_t known_ns, settled_ns;
	/* growing back (detect_grow.c): generation grow_gen takes new
	 * incarnations in before op grow_at (0: none planned); begun: the op
	 * the main thread began last, begun_can: one that can take them;
	 * grow_send: the plan is this rank's, to go out; grow_now: the main
	 * thread is at grow_at */
	uint32_t grow_gen;
	uint64_t grow_at, begun;
	bool begun_can, grow_send, grow_now;

	/* detector thread only */
	uint32_t gen;
	int *members, size;
	int left, right;        /* original ranks of the neighbours, -1 none */
	int left_ci, right_ci;  /* their control links in ctl.links[], -1 none */
	bool left_bye, right_bye;
	int64_t right_retry_ms; /* connect to the right neighbour again then; 0 none */
	int64_t right_busy_ms;  /* its links closed before answering since then; 0 none */
	bool *owe;              /* by link: a direct notice waits for it to connect */
	int reading;            /* the link read_link reads now, -1 none */
	int64_t view_ms, next_hb_ms;
	uint32_t target;        /* generation being settled, 0 none */
	int64_t recover_ms;
	bool published;
	bool growing;           /* the recovery under way began as a grow (no failure) */
	uint32_t asked;         /* a later generation another rank asked about, 0 none */
	int64_t asked_ms;       /* ... since then */
	bool grow_lost;         /* ... and has since seen a member lost */
	bool out;               /* excluded: only waits to be stopped */
	bool proven;            /* some control link passed both hellos' proofs */
	uint8_t *auth;          /* by original rank: AUTH_* seen with it */
};

#define AUTH_REFUSED_US 1 /* it refused our hello, did not prove its token, or left */
#define AUTH_CLAIMED 2    /* a hello claiming to be it was refused here */

/*
 * detect_grow.c. ft__det_command: wakes the detector's thread with a
 * command ('x' suspect, 'g' grow). On the detector's thread:
 * ft__det_grow_planned: the op this generation grows before, 0 none;
 * ft__det_grow_note: a GROW notice (gen, at) arrived: FT__GROW_OLD (known,
 * or of a generation not reached yet: kept), FT__GROW_NEWS (to pass on) or
 * FT__GROW_NOW (also: the main thread already began op at: recover now);
 * ft__det_grow_command: what the main thread's 'g' asks (FT__GROW_SEND its
 * own plan, FT__GROW_START it is at the op), *at the op;
 * ft__det_grow_lost: a settle sees a member lost (lost): a grow turns into
 * a failure's settle, timed from now; ft__det_newcomers: in a grow's
 * settle with no member lost, adds to back (nback of FT__BACK_MAX used)
 * every rank outside this view whose new incarnation asks, live, to be
 * taken into the generation being settled (its record is there before it
 * is awaited: a newcomer that died since is not taken); returns the new
 * nback.
 */
enum { FT__GROW_OLD, FT__GROW_NEWS, FT__GROW_NOW };
#define FT__GROW_SEND 1
#define FT__GROW_START 2
void ft__det_command(struct ft__det *d, char what);
uint64_t ft__det_grow_planned(struct ft__det *d);
int ft__det_grow_note(struct ft__det *d, uint32_t gen, uint64_t at);
int ft__det_grow_command(struct ft__det *d, uint64_t *at);
void ft__det_grow_lost(struct ft__det *d, bool lost, int64_t now);
int ft__det_newcomers(struct ft__det *d, int *back, int nback, bool lost);
bool ft__det_asked(struct ft__det *d, uint32_t asked, int64_t now);

/* A default mutex cannot fail to lock or unlock when used correctly. */
static inline void lock(struct ft__det *d)
{
	pthread_mutex_lock(&d->lock);
}

static inline void unlock(struct ft__det *d)
{
	pthread_mutex_unlock(&d->lock);
}

/* detect.c: the detector thread, and the control ring of a view (before the thread starts, then on it) */
void *ft__det_main(void *arg);
void ft__det_rewire(struct ft__det *d);
/* detect_api.c: sets pending (under the lock) and makes the wake fd readable. */
void ft__det_raise(struct ft__det *d);

#endif
