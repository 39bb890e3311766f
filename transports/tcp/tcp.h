/* tcp.h: the TCP transport's state, shared by its two files (tcp.c: open, the data path, close; tcp_conn.c: connect, accept and the handshake). */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_TCP_H
#define FTCC_TCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport.h"

#define TCP_INBUF 65536
#define TCP_IOV 64
#define TCP_PENDING_ACCEPT 16
#define TCP_LOWAT_MIN (32u << 10)
#define TCP_LOWAT_MAX (128u << 10)

struct tcp_op {
	struct ft__frame hdr;    /* to send, or expected */
	char *buf;
	void *ctx;
	size_t done;            /* bytes of header + payload transferred */
};

struct tcp_queue {
	struct tcp_op *ops;
	size_t cap, head, len;  /* ring of cap (a power of two) entries */
};

struct ft__link {
	struct ft__transport *tp;
	struct ft__link *next;
	int fd;
	int peer;
	bool sending;           /* connecting side: frames go out, ack comes in */
	bool need_ack;          /* connecting side: no answer yet, so no frame may go */
	struct ft__hello hello;  /* connecting side: its hello, which the answer and proof cover */
	struct ft__sock_addr to; /* connecting side: the peer's listener, for a redial */
	int64_t redial_until;   /* connecting side: the connect's deadline (redials end there) */
	struct ft__hello_proof proof;    /* connecting side: goes out before the first frame */
	size_t proof_left;      /* bytes of proof not written yet */
	bool can_read, can_write;
	bool eof;
	int error;              /* nonzero once broken; reported once */
	bool error_reported;
	struct tcp_queue sq, rq;
	struct ft__frame rhdr;   /* header of the frame being received */
	bool have_rhdr;
	char *in;               /* inbound buffer: [in_start, in_end) unread */
	size_t in_start, in_end;
	int lowat;              /* SO_RCVLOWAT now set on fd */
};

struct ft__transport {
	int listen_fd;
	int epfd;
	char addr[128];
	struct ft__link *links;
	int log_level;
	int rank;
	bool (*interrupted)(void *arg);
	void *interrupt_arg;
	struct early_conn *early;       /* handshakes for a newer generation, kept */
	int nearly;
	struct pending_conn *pend;      /* connections still short of a handshake */
	int npend;
	struct ft__sock_opts sock_opts; /* keepalive, user timeout, FTCC_TCP_BUFFER */
	char token[FT_NAME_MAX];        /* the key of the hellos' MACs */
	struct ft__warn_gate warn;      /* strangers' warnings */
	struct ft__auth_seen seen;      /* nonces of the hellos accepted */
	bool auth_refused;              /* this accept refused the expected rank's hello for its token */
	bool listen_ready;              /* epoll saw the listener readable: drain it */
	int64_t listen_rest_until;      /* no draining before (a shortage, every slot kept) */
	struct ft__warn_gate short_warn; /* this rank's own shortages at accept */
};

/* A connection short of its handshake: reading its hello, then (challenged:
 * answered with our nonce) its proof. */
struct pending_conn {
	int fd;
	size_t got;
	struct ft__hello hello;
	bool challenged;
	uint8_t challenge[FT__HELLO_NONCE];
	size_t pgot;
	struct ft__hello_proof proof;
	char from[64];
};

/* A valid handshake for a generation newer than the one accepted now
 * (a neighbour that adopted the next view first) waits for its accept. */
struct early_conn {
	int fd;
	struct ft__hello hello;
};

#define TCP_EARLY_MAX 8

/* tcp_conn.c */
int ft__tcp_local_addr(struct ft__transport *tp, char *buf, size_t len);
int ft__tcp_connect(struct ft__transport *tp, const char *addr, const struct ft__hello *hello,
		    int timeout_ms, struct ft__link **out);
int ft__tcp_accept(struct ft__transport *tp, const struct ft__hello *expect, int timeout_ms,
		   struct ft__link **out, struct ft__hello *got);
/* a connecting link's answer, once whole in its inbound buffer; the proof it owes */
void ft__tcp_take_answer(struct ft__link *l);
void ft__tcp_send_proof(struct ft__link *l);
/* Takes what waits on the listener into the pending connections, at any
 * time (not only in an accept), so that no burst fills the kernel's queue
 * for the next recovery; closes what is not a hello of this token. */
void ft__tcp_drain(struct ft__transport *tp);

/* tcp.c: the data path the handshake shares */
int ft__tcp_fill_inbuf(struct ft__link *l);
void ft__tcp_link_fail(struct ft__link *l, int err);

#endif
