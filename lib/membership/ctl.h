/* ctl.h: control links: small TCP connections between ranks' detectors, opened with a hello, carrying framed messages. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_CTL_H
#define FTCC_CTL_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "ftcc.h"
#include "internal.h"
#include "membership.h"
#include "sock.h"

/*
 * Wire format: every message is a header (magic, type, payload length,
 * sender's generation and original rank) and len payload bytes.
 *
 * Handshake, so that a link is bound to both sides' fresh nonces before
 * any message is taken from it:
 *   HELLO  connector -> acceptor: job id, the rank it wants, a fresh nonce
 *          Nc and a MAC keyed with the token over the header (its
 *          generation and rank included) and all that (the token itself
 *          never travels, lib/util/auth.h);
 *   ACK    acceptor -> connector, at once and alone: a status, a fresh
 *          nonce Na (the challenge) and a MAC over Nc, the header, the
 *          status and Na. A HELLO that fails (another job or token, a nonce
 *          that owns a link already, not for this rank or world) is
 *          answered with its refusal and the link closed;
 *   PROOF  connector -> acceptor: a MAC over the whole HELLO as sent, Na
 *          and its own header.
 * The acceptor reads nothing of a link but its HELLO and then its PROOF;
 * only a PROOF that checks out identifies the link (peer, generation) and
 * hands the HELLO to the owner, so a HELLO copied off the wire and raced
 * ahead of the original never opens a link: its copier cannot prove Na.
 * The connecting side does not wait for the ACK (its peer may be
 * connecting to its own neighbour): what it sends before the ACK waits in
 * the link's outbox, and the PROOF and the outbox go out in one write when
 * ft__ctl_next reads an ACK of status 0 whose MAC checks out; it takes no
 * message from the link before that. Its link counts as taken by the peer
 * (await_ack false) at the peer's first message after that ACK: the peer
 * sends none before the PROOF passed, and a close before it is no news of
 * the peer's death (-FT_EBUSY below). The acceptor's ACK goes out before
 * the owner hears of the link, so the owner's first message is one write
 * (a peer that said goodbye and closed at once must not see two writes,
 * the second failing before its goodbye is read). A message longer than
 * the largest this world can need, or with a bad magic, ends the link.
 *
 * Slots: links this rank connects, links whose hello passed here, and
 * links accepted here that have not passed one yet (strangers, as far as
 * anyone knows: a link is one until its PROOF passed) each have their own
 * share of the table, so that strangers can never take the slot a
 * neighbour's link needs. A stranger holds at most a hello's bytes, for at
 * most hello_ms: a link whose proof has not passed by then is closed, and
 * when the strangers' share is full a new connection closes the oldest
 * stranger that has not sent a whole hello yet (one that has is judged
 * first, one challenged waits for its proof). A link closed before it answered our
 * own hello is no news of its peer's death (it may have closed ours to make
 * room, or been a stranger's victim): ft__ctl_next says -FT_EBUSY, and the
 * owner connects again.
 *
 * Sending is all or nothing: messages are small and the socket buffer
 * large, so a message that does not fit means the peer has not read its
 * control link for hundreds of heartbeat periods. The link is then
 * unusable (a partial message would break the framing) and ft__ctl_send
 * says so; the caller decides what that means for the peer.
 *
 * One thread owns a struct ft__ctl; nothing here locks.
 */

#define FT__CTL_LINKS 16     /* links when ft__ctl_params.links is 0 */
#define FT__CTL_HELLO_MS 1000 /* a link accepted here must pass its hello within this */
/* A lossy path: how many detect timeouts a neighbour whose segments still
 * arrive (out of order, behind a lost one) is waited for, and how long a
 * control link's own data may stay unacknowledged before the kernel fails
 * it (TCP's retransmissions back off: 0.2, 0.6, 1.4, 3 s on a loopback;
 * ft__ctl_held_by_loss) */
#define FT__CTL_LOSS_SPAN 5
#define FT__CTL_HELLO_BYTES 200 /* a HELLO message, header included */
#define FT__CTL_OUTBOX_MIN 4096 /* least a link may hold for its peer's ACK */

enum ft__ctl_type {
	FT__CTL_HELLO = 1, FT__CTL_HB, FT__CTL_NOTICE, FT__CTL_BYE,
	FT__CTL_ACK,    /* the answer to a hello; ctl.c's own, never returned */
	FT__CTL_PROOF,  /* the answer to an ACK's challenge; ctl.c's own, never returned */
	FT__CTL_GROW,   /* detect.c: the view grows back before op (8 bytes) */
	/* in-band membership (member_inband.c) */
	FT__CTL_MB_COLLECT = 16, FT__CTL_MB_RECORD, FT__CTL_MB_PROPOSE, FT__CTL_MB_ACCEPT,
	FT__CTL_MB_NACK, FT__CTL_MB_BOOK, FT__CTL_MB_COMMIT, FT__CTL_MB_NOQUORUM,
	/* ... its new incarnations (inband_rejoin.c) */
	FT__CTL_MB_ASK, FT__CTL_MB_LATEST, FT__CTL_MB_REJOIN, FT__CTL_MB_ADDRS,
	/* checkpoints in a peer's memory (lib/durable/ckpt_peer.c) */
	FT__CTL_CK_PART = 32, FT__CTL_CK_HEAD, FT__CTL_CK_COPY, FT__CTL_CK_COMMIT,
	FT__CTL_CK_FETCH, FT__CTL_CK_IMAGE, FT__CTL_CK_FCOPY, FT__CTL_CK_END, FT__CTL_CK_NONE,
	FT__CTL_CK_ADDR, FT__CTL_CK_LOCAL, FT__CTL_CK_DONE
};

#define FT__CTL_HDR_BYTES 16 /* a message's header */

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
	uint32_t ooo_seen;      /* the kernel's out-of-order count when last asked */
	int64_t ooo_ms;         /* when that count last grew (0: never) */
	bool connecting;        /* ft__ctl_connect_start: not yet connected, hello not sent */
	size_t have, used;      /* bytes in `in`; bytes of it already returned */
	unsigned char *in;
	bool await_ack;         /* connected here: the peer has not shown that it took the
				 * link (its ACK, then a message after our PROOF) */
	bool proved;            /* connected here: its ACK proved the token, our PROOF went */
	bool ours;              /* connected here (else accepted here) */
	bool challenged;        /* accepted here: its HELLO passed, ACK sent, PROOF due */
	uint8_t challenge[FT__AUTH_NONCE];      /* accepted here: Na */
	unsigned char hello[FT__CTL_HELLO_BYTES]; /* the HELLO as sent (here) or received */
	unsigned char *outbox;  /* connected here: messages sent before the ACK */
	size_t out_len;
};

struct ft__ctl {
	int rank, world_size;
	char job_id[FT_NAME_MAX], token[FT_NAME_MAX];
	int listen_fd;
	char addr[FT__CTRL_MAX];        /* to publish */
	size_t msg_cap;                 /* largest message, header included */
	size_t max_payload;             /* largest payload (at most UINT16_MAX) */
	const char *who;                /* names the owner in messages */
	int nlinks;                     /* out_cap + in_cap + stranger_cap */
	struct ft__ctl_link *links;     /* nlinks of them */
	int out_cap, in_cap, stranger_cap; /* each kind's share of the slots */
	int hello_ms;
	struct ft__warn_gate warn;      /* strangers' warnings */
	struct ft__warn_gate short_warn; /* this rank's own shortages at accept */
	int64_t accept_after_ms;        /* the listener rests until then (no slot, no
					 * descriptor): polled, it would wake at once */
	int short_err;                  /* the last shortage met here (FT_EMFILE...), 0 none */
	int64_t short_ms;               /* and when */
	struct ft__auth_seen seen;      /* nonces of the hellos accepted */
	struct ft__sock_opts sock_opts;
	int refused_claim;              /* the rank a hello refused for its token or job
					 * claimed to be (unproven), -1 none: the owner
					 * reads and resets it */
};

/* What this rank's leaving (err) comes from: its own shortage met within
 * the last 10 s (the others heard nothing from it because of that, which
 * its caller needs to hear, not a bare exclusion), else err. */
int ft__ctl_own_cause(const struct ft__ctl *ctl, int err);

struct ft__ctl_params {
	int rank;               /* original rank */
	int world_size;
	const char *job_id;
	const char *token;
	const char *bind_host;  /* "" or NULL: 127.0.0.1 */
	const char *port;       /* port to listen on; NULL: the kernel picks */
	int links;              /* slots for links connected here, and as many for links
				 * accepted whose hello passed; 0: FT__CTL_LINKS */
	int strangers;          /* slots for links accepted that have not passed a hello
				 * yet; 0: FT__CTL_LINKS */
	int hello_ms;           /* how long those have to pass it; 0: FT__CTL_HELLO_MS
				 * (ft__ctl_hello_ms: what the detect timeout implies) */
	size_t min_payload;     /* messages at least this large are carried (the largest
				 * is what the world needs, at most UINT16_MAX) */
	const char *who;        /* "detector" when NULL */
	int dead_ms;            /* the links' keepalive and TCP_USER_TIMEOUT (sock.h); 0: none */
	const char *publish_host; /* "" or NULL: the bound address */
};

/*
 * How long a stranger has to pass its hello when heartbeat silence may
 * last detect_timeout_ms: as long (a whole handshake on a loaded host; 1 s
 * once closed live neighbours' links under load, and they were declared for
 * it), within FT__CTL_HELLO_MS and 5 s.
 */
int ft__ctl_hello_ms(int detect_timeout_ms);
/* Listens for control links. ft__ctl_close is safe after a failure. */
int ft__ctl_open(struct ft__ctl *ctl, const struct ft__ctl_params *p);
/* Closes every link (no goodbye) and the listener. */
void ft__ctl_close(struct ft__ctl *ctl);
/*
 * Connects to original rank `to` at addr and sends the hello, waiting up to
 * timeout_ms for the connection (not for the ACK): the link's index,
 * -FT_EPEERFAILED (or -FT_ECONNREFUSED, -FT_ETIMEDOUT) when the peer cannot
 * be reached or took no hello, -FT_ENOMEM when every link slot is taken,
 * -FT_EIO when the kernel gives no random bytes for the nonce.
 */
int ft__ctl_connect(struct ft__ctl *ctl, const char *addr, int to, uint32_t gen, int timeout_ms);
/*
 * Starts connecting to original rank `to` at addr without waiting: the
 * link's index (connecting; ft__ctl_next finishes the connect and sends
 * the hello, or reports -FT_ECONNREFUSED or -FT_EPEERFAILED), or
 * -FT_EPEERFAILED, -FT_ECONNREFUSED, or -FT_ENOMEM when this side is short
 * of a slot, a descriptor, a local port or memory (no news of the peer).
 */
int ft__ctl_connect_start(struct ft__ctl *ctl, const char *addr, int to, uint32_t gen);
/* Accepts every pending connection as an unidentified link (strangers
 * over their share: see the top of this file). */
void ft__ctl_accept(struct ft__ctl *ctl);
/* Closes the links accepted here whose hello did not pass within hello_ms;
 * returns the ms until the next such deadline, or -1 when none is pending. */
int ft__ctl_sweep(struct ft__ctl *ctl, int64_t now_ms);
/* Sends one message: 0, -FT_EPEERFAILED when the link cannot carry it
 * (broken, or the peer stopped reading; the link is left open; on a link
 * connected here that awaits its ACK, the outbox is full), -FT_EINVAL when
 * len exceeds max_payload. */
int ft__ctl_send(struct ft__ctl *ctl, int i, enum ft__ctl_type type, uint32_t gen,
		 const void *payload, size_t len);
/* The header of a message of len payload bytes from this rank, for an
 * owner that writes a proved link's stream itself (ckpt_peer.c: bulk
 * records, written as the socket takes them). */
void ft__ctl_frame(const struct ft__ctl *ctl, enum ft__ctl_type type, uint32_t gen, size_t len,
		   unsigned char hdr[FT__CTL_HDR_BYTES]);
/*
 * The next whole message of link i: 1 and *m, 0 when none is buffered (or
 * the link was refused and closed here: its fd is then -1), or an error
 * that ends the link, which the caller closes: -FT_EPEERFAILED (closed by
 * the peer), -FT_EIO (socket error), -FT_EPROTO (malformed message), or on
 * a link connected here, the peer's refusal or -FT_EAUTH when its ACK does
 * not prove the token, -FT_EBUSY when it closed before it answered (no
 * proof of anything: connect again). A HELLO that passes identifies the link, is
 * answered and is returned for the owner to decide; a HELLO that fails is
 * answered, logged and its link closed. ACKs are never returned.
 */
int ft__ctl_next(struct ft__ctl *ctl, int i, struct ft__ctl_msg *m);
/* Closes link i (no goodbye). */
void ft__ctl_drop(struct ft__ctl *ctl, int i);
/* Sweeps (ft__ctl_sweep), then fills pfd with the listener (first) and
 * every open link (a connecting one waits for POLLOUT), idx with the links'
 * indices; returns the number of pollfds written (at most 1 + ctl->nlinks). */
int ft__ctl_pollfds(struct ft__ctl *ctl, struct pollfd *pfd, int *idx);

/* Whether link l's silence (no whole message for to ms or more) is a
 * loss on the path, not a silent peer (ctl.c says how it is told). */
bool ft__ctl_held_by_loss(struct ft__ctl_link *l, int64_t now, int64_t to);

#endif
