/* rendezvous.h: the file rendezvous that settles membership views. */
#ifndef FTCC_RENDEZVOUS_H
#define FTCC_RENDEZVOUS_H

#include <stdint.h>

#define FT__ADDR_MAX 256

struct ft__rdv {
	char dir[600];          /* <rendezvous>/<job> */
	int rank;               /* original rank */
	int lock_fd;            /* flock held while this rank lives */
};

struct ft__view {
	uint32_t generation;
	int size;
	int *members;           /* original ranks, ascending; malloc'd */
};

/* Creates the job directory and takes this rank's lock (-FT_EBUSY if held). */
int ft__rdv_open(struct ft__rdv *r, const char *root, const char *job, int rank);
/* Writes this rank's member file for generation gen (temp name + rename). */
int ft__rdv_publish(struct ft__rdv *r, uint32_t gen, const char *addr);
/* Waits for the view of generation gen; the coordinator (lowest of the
 * candidates) writes it once every candidate has published. */
int ft__rdv_settle(struct ft__rdv *r, uint32_t gen, const int *candidates, int ncand,
		   int timeout_ms, struct ft__view *view);
/* Reads the address that original rank `orig` published for generation gen. */
int ft__rdv_lookup(struct ft__rdv *r, uint32_t gen, int orig, char *addr, size_t len);
/* Removes this rank's files and releases the lock; safe on a half-opened r. */
void ft__rdv_close(struct ft__rdv *r, uint32_t gen, int remove_view);
void ft__view_free(struct ft__view *v);

#endif
