/* rendezvous.h: the file rendezvous that settles membership views. */
#ifndef FTCC_RENDEZVOUS_H
#define FTCC_RENDEZVOUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FT__ADDR_MAX 256

#define FT__CTRL_MAX 64

struct ft__rdv {
	char dir[600];          /* <rendezvous>/<job> */
	int rank;               /* original rank */
	int lock_fd;            /* flock held while this rank lives */
	uint64_t nonce;         /* this job's, from the view of generation 0 */
};

struct ft__view {
	uint32_t generation;
	int size;
	int *members;           /* original ranks, ascending; malloc'd */
	uint64_t first_op;      /* first collective that runs in this view */
	uint64_t nonce;
};

/* What a rank publishes for a generation. */
struct ft__member {
	char addr[FT__ADDR_MAX];        /* data transport address */
	char ctrl[FT__CTRL_MAX];        /* control (detector) address, "-" if none */
	uint64_t next_op;               /* first collective whose result it does not hold */
	int pid;
};

/* Creates the job directory and takes this rank's lock (-FT_EBUSY if held). */
int ft__rdv_open(struct ft__rdv *r, const char *root, const char *job, int rank);
/* Writes this rank's member file for generation gen (temp name + rename). */
int ft__rdv_publish(struct ft__rdv *r, uint32_t gen, const struct ft__member *m);
/*
 * One look at generation gen: 1 (and *view) once it is settled, 0 not yet,
 * <0 error. The coordinator, the lowest candidate (ascending) not known
 * gone (dead on this host, or finalized), writes the view once every
 * candidate has published or is gone, or, when force, with the candidates
 * that have published; first_op is the lowest next_op they published.
 */
int ft__rdv_try_settle(struct ft__rdv *r, uint32_t gen, const int *candidates, int ncand,
		       bool force, struct ft__view *view);
/* Waits (backing off) for the view of generation gen, up to timeout_ms. */
int ft__rdv_settle(struct ft__rdv *r, uint32_t gen, const int *candidates, int ncand,
		   int timeout_ms, struct ft__view *view);
/* Marks this rank as finalized (its next op: next_op), so that a settle
 * in progress neither waits for it nor counts it. */
int ft__rdv_depart(struct ft__rdv *r, uint64_t next_op);
/* Reads what original rank `orig` published for generation gen. */
int ft__rdv_lookup(struct ft__rdv *r, uint32_t gen, int orig, struct ft__member *m);
/* Removes this rank's files and releases the lock; safe on a half-opened r. */
void ft__rdv_close(struct ft__rdv *r, uint32_t gen, int remove_view);
void ft__view_free(struct ft__view *v);

#endif
