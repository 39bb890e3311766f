/* ckpt_peer.h: running checkpoints kept in the memory of a rank on another host (a holder): the service each rank runs, rounds sent to it, fetches from it. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_CKPT_PEER_H
#define FTCC_CKPT_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ckpt.h"

/*
 * Every rank that enabled peer checkpoints runs a service: a thread with a
 * listener for control links (ctl.h: opened with the job token's
 * handshake, so only the job's ranks get in), which
 *   - sends this rank's rounds to its holder (a ward's stream): the
 *     journal HEAD when the holder is new to it, then per round each block
 *     copy (struct ft__ckpt_copy and its data, as the disk holds them) and
 *     the round's COMMIT record;
 *   - keeps the streams of the ranks it holds (its wards) as mirrors: their
 *     HEAD's geometry, two slots per block in memory, the table of what
 *     each slot holds, built from their COMMIT records exactly as a reader
 *     builds it from a journal; a copy is believed only once its COMMIT
 *     came, and (as on disk) a round never overwrites a block's newest
 *     committed copy;
 *   - answers fetches: the mirror's HEAD and SNAP (ft__ckpt_build_journal),
 *     then the newest committed copy of each block asked for, sent from
 *     the mirror's memory (its ward's stream is not read meanwhile, so no
 *     slot sent changes under the send); the fetcher checks every copy as
 *     it checks a file's (ckpt_read.c: heads, rounds, CRC32C), as it
 *     arrives when it has a destination for them (ft__ckpt_peer_fetch).
 * A record longer than a control message travels as PART messages and a
 * last message of its kind. Everything a peer sends is checked before use
 * (bounds against the mirror's HEAD, lengths, the ward named by the link's
 * handshake, never by the message). A holder that stops reading for
 * stall_ms, or cannot be reached, loses this rank's stream: its rounds
 * count as sent (the mirror does not have them), and lost() says so, so
 * the writer starts the stream again (a HEAD, every block).
 */

struct ft__ckpt_peer;

struct ft__ckpt_peer_params {
	int rank, world_size;
	const char *job_id, *token;
	const char *bind_host, *publish_host;
	int dead_ms;            /* the links' keepalive and TCP_USER_TIMEOUT; 0: none */
	int stall_ms;           /* a link whose output makes no progress this long is dropped */
	bool no_local;          /* fetches over the link even from a holder on this kernel
				 * (FTCC_CKPT_LOCAL=0; ckpt_peer_int.h: reading in one copy) */
};

/* Listens and starts the service thread. */
int ft__ckpt_peer_open(const struct ft__ckpt_peer_params *p, struct ft__ckpt_peer **out);
/* Stops the thread, drops every link and mirror. NULL is fine. */
void ft__ckpt_peer_close(struct ft__ckpt_peer *p);
/* The address others reach this service at ("host:port"). */
const char *ft__ckpt_peer_addr(const struct ft__ckpt_peer *p);
/* The address book of the services, by original rank ("" unknown). */
void ft__ckpt_peer_set_addr(struct ft__ckpt_peer *p, int rank, const char *addr);
void ft__ckpt_peer_get_addr(struct ft__ckpt_peer *p, int rank, char *out, size_t cap);
/* Tells every rank in the book but this one where this service is now (a new incarnation). */
void ft__ckpt_peer_announce(struct ft__ckpt_peer *p);

/* One round of this rank's stream, as the writer holds it: its pieces stay
 * unchanged until ft__ckpt_peer_sent() reaches round. */
struct ft__ckpt_peer_round {
	uint64_t round;
	int holder;                     /* original rank */
	const void *head;               /* the journal HEAD record, for a holder new to the
					 * stream (NULL: it has the stream) */
	size_t head_len;
	const struct iovec *piece;      /* 2 per block copy: its head, its data */
	size_t n;                       /* copies */
	const void *commit;             /* the round's COMMIT record */
	size_t commit_len;
};
/* Queues a round to its holder; never blocks on the network. */
int ft__ckpt_peer_post(struct ft__ckpt_peer *p, const struct ft__ckpt_peer_round *r);
/* The newest round whose every byte went out to its holder or was given up. */
uint64_t ft__ckpt_peer_sent(struct ft__ckpt_peer *p);
/* Blocks until ft__ckpt_peer_sent() >= round (at most stall_ms past the last progress). */
void ft__ckpt_peer_wait_sent(struct ft__ckpt_peer *p, uint64_t round);
/* Counts the streams to `holder` lost (it was unreachable, stalled or
 * gone): a change means it has to get the stream again from its start. */
uint64_t ft__ckpt_peer_lost(struct ft__ckpt_peer *p, int holder);

/*
 * Fetches from `holder` (this rank too) its copy of original rank owner's
 * checkpoint: into img the owner's geometry and table (HEAD, SNAP) and,
 * when nblocks > 0, the newest committed copy of blocks [first, first +
 * nblocks) of the region of registration index `region`:
 *   - dst NULL: in img->mem (read by ft__ckpt_read_block as from files,
 *     every copy checked then);
 *   - else each copy checked as it arrives and its bytes written at dst +
 *     (block - first) x block bytes, and nowhere else: no copy of the
 *     range is held in memory, and the last copy is checked while the
 *     others travel. A block whose copy does not check is not written
 *     there (img->sunk_slot says which were; ft__ckpt_read_block reports
 *     them as for files, writing nothing). A failed fetch may have written
 *     some blocks (each a copy that checked).
 * block_bytes: the block size the job agreed on (an answer of another is
 * refused), 0 any. nonce, nonzero: the run the answer must be of (its
 * job and nonce are checked before any copy is written). 0; -FT_EIO when
 * the holder cannot be reached, answers nothing within timeout_ms, or
 * holds no committed round of owner; -FT_ECORRUPT when its answer does not
 * check, or is of another run; -FT_EINVAL for a region or range the
 * owner's geometry does not have.
 */
int ft__ckpt_peer_fetch(struct ft__ckpt_peer *p, int holder, int owner, int region, size_t first,
			size_t nblocks, size_t block_bytes, void *dst, uint64_t nonce, int timeout_ms,
			struct ft__ckpt_image *img);

/*
 * The holder of original rank `ward` among the members (original ranks,
 * ward among them or not): the member at ward's place on the next host,
 * hosts (the host part of their service addresses) taken in the order of
 * their lowest member; with one host, the next member. -1 when there is
 * none but ward.
 */
int ft__ckpt_peer_holder(struct ft__ckpt_peer *p, const int *members, int n, int ward);

#endif
