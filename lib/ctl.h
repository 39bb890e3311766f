/* ctl.h: control links: small TCP connections between ranks' detectors, opened with a hello, carrying framed messages. */
#ifndef FTCC_CTL_H
#define FTCC_CTL_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ftcc.h"
#include "membership.h"

/*
 * Wire format: every message is a header (magic, type, payload length,
 * sender's generation and original rank) and len payload bytes. The side
 * that connects sends a HELLO first (job id, token, the rank it wants);
 * the accepting side takes no other message from a link until a HELLO
 * passes (same job and token, addressed to this rank, from another rank of
 * the world). A message longer than the largest this world can need, or
 * with a bad magic, ends the link.
 *
 * Sending is all or nothing: messages are small and the socket buffer
 * large, so a message that does not fit means the peer has not read its
 * control link for hundreds of heartbeat periods. The link is then
 * unusable (a partial message would break the framing) and ft__ctl_send
 * says so; the caller decides what that means for the peer.
 *
 * One thread owns a struct ft__ctl; nothing here locks.
 */

#define FT__CTL_LINKS 16

enum ft__ctl_type { FT__CTL_HELLO = 1, FT__CTL_HB, FT__CTL_NOTICE, FT__CTL_BYE };

struct ft__ctl_msg {
	int type;                       /* enum ft__ctl_type */
	uint32_t gen;                   /* the sender's generation */
	int from;                       /* the sender's original rank */
	size_t len;
	const unsigned char *payload;   /* valid until the next call on the link */
};

/* The owner reads fd, peer, gen and the times; the rest is ctl.c's. */
struct ft__ctl_link {
	int fd;                 /* -1: free */
	int peer;               /* original rank; -1 until its hello passed */
	uint32_t gen;           /* generation its hello named (or ours, when we connected) */
	int64_t opened_ms;      /* ft__now_ms() at connect or accept */
	int64_t last_rx_ms;     /* ... of the latest whole message */
	size_t have, used;      /* bytes in `in`; bytes of it already returned */
	unsigned char *in;
};

struct ft__ctl {
	int rank, world_size;
	char job_id[FT_NAME_MAX], token[FT_NAME_MAX];
	int listen_fd;
	char addr[FT__CTRL_MAX];        /* to publish */
	size_t msg_cap;                 /* largest message, header included */
	size_t max_payload;             /* largest payload (at most UINT16_MAX) */
	struct ft__ctl_link links[FT__CTL_LINKS];
};

struct ft__ctl_params {
	int rank;               /* original rank */
	int world_size;
	const char *job_id;
	const char *token;
	const char *bind_host;  /* "" or NULL: 127.0.0.1 */
	const char *publish_host; /* "" or NULL: the bound address */
};

/* Listens for control links. ft__ctl_close is safe after a failure. */
int ft__ctl_open(struct ft__ctl *ctl, const struct ft__ctl_params *p);
/* Closes every link (no goodbye) and the listener. */
void ft__ctl_close(struct ft__ctl *ctl);
/*
 * Connects to original rank `to` at addr and sends the hello, waiting up to
 * timeout_ms for the connection: the link's index, -FT_EPEERFAILED (or
 * -FT_ECONNREFUSED, -FT_ETIMEDOUT) when the peer cannot be reached or took
 * no hello, -FT_ENOMEM when every link slot is taken.
 */
int ft__ctl_connect(struct ft__ctl *ctl, const char *addr, int to, uint32_t gen, int timeout_ms);
/* Accepts every pending connection as an unidentified link. */
void ft__ctl_accept(struct ft__ctl *ctl);
/* Sends one message: 0, -FT_EPEERFAILED when the link cannot carry it
 * (broken, or the peer stopped reading; the link is left open), -FT_EINVAL
 * when len exceeds max_payload. */
int ft__ctl_send(struct ft__ctl *ctl, int i, enum ft__ctl_type type, uint32_t gen,
		 const void *payload, size_t len);
/*
 * The next whole message of link i: 1 and *m, 0 when none is buffered (or
 * the link was refused and closed here: its fd is then -1), or an error
 * that ends the link, which the caller closes: -FT_EPEERFAILED (closed by
 * the peer), -FT_EIO (socket error), -FT_EPROTO (malformed message). A
 * HELLO that passes identifies the link and is returned for the owner to
 * decide; a HELLO that fails is logged and its link closed.
 */
int ft__ctl_next(struct ft__ctl *ctl, int i, struct ft__ctl_msg *m);
/* Closes link i (no goodbye). */
void ft__ctl_drop(struct ft__ctl *ctl, int i);
/* Fills pfd with the listener (first) and every open link, idx with the
 * links' indices; returns the number of pollfds written (at most
 * 1 + FT__CTL_LINKS). */
int ft__ctl_pollfds(const struct ft__ctl *ctl, struct pollfd *pfd, int *idx);

#endif
