/* fabric.h: the libfabric transport's private header: its structs, tags and the functions its files share. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_FABRIC_H
#define FTCC_FABRIC_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* libfabric's exported functions are reached through dl.c (below): these
 * names stand for them everywhere, its headers' own inline calls included */
#define fi_getinfo(...) ft__fi_getinfo(__VA_ARGS__)
#define fi_freeinfo(...) ft__fi_freeinfo(__VA_ARGS__)
#define fi_dupinfo(...) ft__fi_dupinfo(__VA_ARGS__)
#define fi_fabric(...) ft__fi_fabric(__VA_ARGS__)
#define fi_strerror(...) ft__fi_strerror(__VA_ARGS__)
#define fi_version(...) ft__fi_version(__VA_ARGS__)
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "auth.h"
#include "internal.h"
#include "transport.h"

/*
 * libfabric is loaded (dlopen) when a fabric transport is first opened, not
 * linked: linking it brings libpsm_infinipath and libpsm2, whose
 * constructors sleep 0.1 s each and install crash handlers in every process
 * that links ftcc, TCP-only ones included (measured here: an empty program
 * linked with -lfabric takes 0.21 s to start, 0.00 s without). The six
 * functions libfabric exports and this transport calls go through dl.c;
 * everything else in its headers is inline and goes through the provider's
 * own tables.
 */
int ft__fab_load(void);
int ft__fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
		   const struct fi_info *hints, struct fi_info **info);
void ft__fi_freeinfo(struct fi_info *info);
struct fi_info *ft__fi_dupinfo(const struct fi_info *info);
int ft__fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
const char *ft__fi_strerror(int errnum);
uint32_t ft__fi_version(void);

/*
 * The parts, one file each:
 *   dl.c        libfabric loaded on first use, its exported functions;
 *   open.c      open and close, the operations table (each operation holds
 *               its transport's lock), the segment size;
 *   provider.c  which provider and endpoint type a transport opens;
 *   conn.c      connect and accept: addresses, the hello and its answer, MSG
 *               connection events, the AV;
 *   link.c      links: their state machine, frames posted by the engine,
 *               close and abort;
 *   post.c      what is handed to the provider: the op pool, sends,
 *               receives and a link's control messages;
 *   cq.c        completions: CQ entries to links and ops, the event queue;
 *   progress.c  progress and waiting, and the transports of this process;
 *   mr.c        the registration cache (FI_MR_LOCAL providers only);
 *   shm.c       peers on this host: pid liveness, shm region cleanup, the SAR
 *               yield;
 *   guard.c     frees the shm region locks a killed process left held, and
 *               kills a left-out one that wedges them;
 *   bell.c      a doorbell that local peers ring (providers with no wait fd).
 * What they share is declared here, named ft__fab_*; the rest is static.
 * Unless said otherwise, a function given a transport or a link is called
 * with the transport's lock held.
 */

/*
 * RDM endpoints (shm, tcp;ofi_rxm, verbs;ofi_rxm, efa) are connectionless: the
 * transport owns one endpoint and a link is (peer fi_addr, link id,
 * direction); under shm an outgoing link sends from an endpoint of its own
 * (rdm_link_ep_open in conn.c says why), which the peer answers, while it receives on
 * its published one. The connecting side picks the id, unique in its
 * process, and every message of a link after the hello carries a tag (kind,
 * sender rank, link id), so messages of different links, peers or
 * directions never match each other's receives. Kinds:
 *   HELLO    connector -> acceptor, one tag for all: struct ft__hello, the
 *            link id, the payload piece size, the name of the endpoint to
 *            answer (the acceptor may not know its address yet) and the
 *            connector's published endpoint name, node and pid. A valid
 *            hello for a newer generation than the accept waiting now is
 *            kept for the accept of its generation. The MAC of struct
 *            ft__hello proves the token (transport.h); the fields around it
 *            (link id, node, pid, names, bell) route the answer and watch
 *            the peer, and are under a MAC of their own bound to the hello
 *            (fields_mac), so none can be altered in flight. Over RDM a
 *            copy raced ahead of the original gains nothing: the link it
 *            opens is the one the MAC names (the original's endpoint and
 *            link id: answers go there; RDM frames were never
 *            authenticated, lib/util/auth.h), so RDM has no challenge. Over MSG
 *            a link is its connection, so the acceptor challenges (below);
 *   ACK      acceptor -> connector: struct ft__hello_ack, its MAC checked
 *            against the connector's hello (a wrong token: -FT_EAUTH);
 *            over MSG it carries the acceptor's fresh challenge;
 *   PROOF    MSG, connector -> acceptor: struct ft__hello_proof of the
 *            hello and that challenge, before any frame (the connector
 *            holds its frames until it is posted). The acceptor takes the
 *            link only once it checks out: a copy of a hello gets its own
 *            challenge, which only the token's holder can prove, and the
 *            original still gets its link. A connection short of its hello
 *            or proof for FAB_HANDSHAKE_MS is closed; at most
 *            FAB_PENDING_MAX wait, strangers' first to go;
 *   HDR      connector -> acceptor: a frame header (abort frames too);
 *   DATA     connector -> acceptor: a frame's payload, in pieces of at most
 *            the provider's max_msg_size (the connector's, told in the hello);
 *   CLOSE_S  connector -> acceptor: "I closed", with the number of headers
 *            sent, so the acceptor reports the end of the link only after it
 *            has read them all, as TCP reports EOF after the bytes before it;
 *   CLOSE_R  acceptor -> connector: "I closed" (the connector's EPIPE).
 *
 * Receiving: one header receive per frame the engine expects is posted into
 * that frame's own header slot; the provider matches messages of one tag in
 * order (FI_ORDER_SAS is required), so header k lands in slot k. Only after
 * ft__frame_check(expect, got) passes is the payload receive posted into the
 * user's buffer, so a disagreeing header or an abort frame never lets a byte
 * in. Payload receives are posted in frame order, so they match in order too;
 * RECV_DONE events are reported in frame order.
 *
 * MSG endpoints (tcp, verbs): one endpoint per link, untagged messages in
 * connection order. The receiver keeps one bounce receive for the next
 * header and posts the payload receives after the check and before the next
 * header's receive, so receives are matched in stream order. A closed
 * connection (FI_SHUTDOWN) is the end of the link.
 *
 * Liveness: a peer on this node (same host name, boot and pid namespace) is
 * watched through a pidfd, so a killed process is noticed at once even by a
 * provider that never says so (shm); its messages already delivered are
 * still read during a short grace period. Across nodes a dead peer shows up
 * as FI_SHUTDOWN (MSG) or as CQ errors when rxm's connection breaks; a peer
 * that hangs without dying is for op_timeout_ms (or a heartbeat detector).
 *
 * Waiting: when the CQ (and EQ) offers a file descriptor, progress blocks in
 * poll() after fi_trywait, together with the peers' pidfds; otherwise it
 * polls the CQ with a back-off from 50 us to 1 ms, which keeps eight ranks
 * on two cores moving without burning them; while a shm SAR transfer is
 * midway and moving, it yields the CPU instead (ft__fab_sar_yield in shm.c
 * says why).
 *
 * A rank killed inside shm can leave a region's spinlock held; the guard
 * thread of guard.c frees such a lock after a death. A rank stopped there
 * and left out of the view is killed first (fab_left_out).
 *
 * Lifetime: operations posted to the provider reference memory of their link
 * (control messages, header slots) or of the user. Closing a link cancels its
 * receives and waits (bounded) until they are reported, so no byte lands in a
 * user buffer after link_close; a link whose operations are still out after
 * that is kept as a zombie until they complete or the transport closes.
 *
 * Threads: each operation holds its transport's lock. Transports of one
 * process know each other only so that one thread holding both ends of a
 * link (tests) can move the other end while it waits, and so that nothing
 * is sent to an endpoint of this process that has been closed.
 */

#define FAB_NAME_MAX 100        /* endpoint name bytes; hex-encoded in the address */
#define FAB_ADDR_MAX 256        /* what the rendezvous stores */
#define FAB_HELLO_SLOTS 8
#define FAB_INBOX_MAX 32
#define FAB_PEERS_MAX 4096     /* address-vector places that hellos not of this job may take */
#define FAB_PENDING_MAX 16
#define FAB_HANDSHAKE_MS 10000 /* MSG: a connection short of its hello (or its proof) this long is closed */
#define FAB_CQ_BATCH 32
#define FAB_SEND_WINDOW 64      /* frames of a link handed to the provider at once */
#define FAB_CHUNK_OPS 64
#define FAB_CLOSE_WAIT_MS 200
#define FAB_DEAD_GRACE_MS 200
#define FAB_WAIT_CAP_MS 100     /* a missed wake-up of a wait fd costs at most this */
#define FAB_LIVENESS_MS 20
#define FAB_SAR_YIELD_NS 5000000ull /* SAR: yield, not sleep, this long after the last completion */
/* No wait fd (shm): yield, not sleep, this long after the last activity: the
 * next step's message is usually that close behind, and with more ranks than
 * cores the rank it waits for needs the CPU more than a sleep needs it back
 * (4 ranks on 2 cores, 4 KiB: 58-74 us against 2.2-3.0 ms sleeping; 64 MiB:
 * 55-61 against 92-93 ms). The engine's own poll budget over TCP is as long. */
#define FAB_YIELD_NS 1000000ull
#define FAB_WATCH_MAX 16
#define FAB_REAP_MAX 32
#define FAB_REAP_AFTER_MS 10000 /* a dead peer's region outlives it this long (shm.c) */
#define FAB_PARK_MAX 16
#define FAB_PARK_MS 10000       /* a link endpoint closed unmapped stays open this long (shm.c) */
#define FAB_CLOSE_MAGIC 0x46544345u /* "FTCE" */

enum fab_kind { K_HELLO = 1, K_ACK, K_HDR, K_DATA, K_CLOSE_S, K_CLOSE_R, K_PROOF };

/* Tags use the low 60 bits only: some providers reserve the top ones. */
#define TAG_KIND_SHIFT 56
#define TAG_RANK_SHIFT 36
#define TAG_RANK_MASK 0xfffffull
#define TAG_ID_MASK ((1ull << TAG_RANK_SHIFT) - 1)
/*
 * Every hello carries the same tag (the link id travels inside), and no
 * receive uses an ignore mask: the shm provider of libfabric 1.17 matched
 * unexpected messages against a stale mask left in its entries by earlier
 * wildcard receives, which delivered frames of a new link to an old one.
 */
#define TAG_HELLO fab_tag(K_HELLO, 0, 0)

static inline uint64_t fab_tag(int kind, int rank, uint64_t id)
{
	return (uint64_t)kind << TAG_KIND_SHIFT |
	       ((uint64_t)(uint32_t)rank & TAG_RANK_MASK) << TAG_RANK_SHIFT | (id & TAG_ID_MASK);
}

struct fab_hello_msg {
	struct ft__hello hello;
	uint64_t link_id;
	uint64_t node;
	uint64_t piece;         /* payload bytes per DATA message */
	int32_t pid;
	uint32_t namelen;
	uint8_t name[FAB_NAME_MAX];     /* the endpoint answers go to (the link's own, or home) */
	uint32_t homelen;
	uint8_t home[FAB_NAME_MAX];     /* the connector's published endpoint */
	int32_t bell;                   /* the connector's bell (bell.c), -1: none */
	uint8_t fields_mac[FT__HELLO_MAC];       /* ft__hello_ext_seal over hello, link_id..bell */
};

struct fab_close_msg {
	uint32_t magic;
	uint32_t reserved;
	uint64_t frames;        /* headers the connector posted, abort frame included */
};

enum fab_xkind { X_SLOT = 1, X_CTL, X_HDR_TX, X_DATA_TX, X_HDR_RX, X_DATA_RX };

/* Context of one provider operation. */
struct fab_xfer {
	struct fi_context2 fctx; /* first: FI_CONTEXT/FI_CONTEXT2 providers write here */
	void *owner;
	uint8_t kind;
	uint8_t ctl;
	bool posted;
};

/* A link's control messages. */
enum fab_ctl {
	C_HELLO, C_ACK_RX, C_CLOSE_RX, C_ACK_TX, C_CLOSE_TX, C_ABORT, C_BHDR,
	C_PROOF_TX, C_PROOF_RX, /* MSG: the connector's proof of the acceptor's challenge */
	C_COUNT
};

struct fab_chunk;
struct fab_mr;
struct ft_bell;
struct ft_guard;

struct fab_op {
	struct fab_op *next;
	struct fab_chunk *chunk;
	struct ft__link *link;
	struct ft__frame hdr;    /* to send, or expected */
	struct ft__frame rhdr;   /* received */
	char *buf;
	void *ctx;
	struct fab_mr *mr;      /* registration holding buf (FI_MR_LOCAL) */
	uint32_t nparts, parts_posted, parts_done;
	bool hdr_posted, hdr_done, checked;
	struct fab_xfer hx;
	struct fab_xfer *px;    /* nparts contexts: &px1, or an array */
	struct fab_xfer px1;
};

/* Operations come from registered chunks, so header slots need no registration each. */
struct fab_chunk {
	struct fab_chunk *next;
	struct fid_mr *mr;
	void *desc;
	struct fab_op ops[FAB_CHUNK_OPS];
};

struct fab_mr {
	struct fab_mr *next;
	uintptr_t lo, hi;
	struct fid_mr *mr;
	void *desc;
	unsigned refs;
};

struct fab_msgs {
	struct fab_hello_msg hello;
	struct ft__hello_ack ack_tx, ack_rx;
	struct ft__hello_proof proof_tx, proof_rx;
	struct fab_close_msg close_tx, close_rx;
	struct ft__frame abort_hdr;
	struct ft__frame bhdr;
};

enum fab_bh { BH_IDLE, BH_POSTED, BH_FULL };

struct ft__link {
	struct ft__transport *tp;
	struct ft__link *next;
	int peer;
	int tx_rank, rx_rank;   /* ranks in the tags we send and receive */
	bool sending;           /* connector: frames go out */
	uint64_t id;
	size_t piece;           /* payload bytes per message: the sender's choice */
	fi_addr_t addr;
	struct fid_ep *ep;
	bool own_ep;            /* MSG: the link's own endpoint */
	bool connected;
	bool closing;           /* link_close began: completions change nothing */
	bool zombie;            /* closed, on tp->zombies until its operations complete */
	int error;              /* nonzero once broken; reported once */
	bool error_reported;
	unsigned outstanding;   /* provider operations not yet completed */
	unsigned user_rx;       /* of which receives into user buffers */
	int pid, pidfd;
	bool local, dead;
	struct ft_bell *peer_bell; /* rung after each message to the peer and each one taken from it */
	uint8_t peer_name[FAB_NAME_MAX]; /* the peer's endpoint name (RDM) */
	size_t peer_namelen;
	int64_t grace;          /* a dead or closed peer: the end is reported by then */
	bool peer_closed;
	uint64_t peer_frames;   /* from the peer's close notice */
	uint64_t frames_sent, frames_done, hdrs_got;
	size_t hello_len;       /* MSG acceptor: bytes of the hello received */
	/* MSG: the connector holds its frames until its proof is posted; the
	 * acceptor takes the link once the proof of its challenge checks out */
	bool challenged, proof_out;
	bool stranger;          /* MSG acceptor: its hello's MACs do not check */
	size_t proof_len;       /* MSG acceptor: bytes of the proof received */
	uint8_t challenge[FT__HELLO_NONCE];
	int64_t born_ms;        /* MSG acceptor: when the connection came */
	struct fab_msgs m;
	struct fid_mr *m_mr;
	void *m_desc;
	struct fab_xfer cx[C_COUNT];
	bool want[C_COUNT];     /* control message still to post */
	enum fab_bh bh;
	struct fab_op *sq, *sq_tail, *s_next;
	unsigned s_inflight;
	struct fab_op *rq, *rq_tail, *r_hdr, *r_check;
};

struct fab_slot {
	struct fab_xfer x;
	struct fab_hello_msg msg;
	bool want;
};

struct fab_inbox {
	struct fab_hello_msg msg;
	size_t len;
};

struct fab_peer {
	uint8_t name[FAB_NAME_MAX];
	size_t len;
	fi_addr_t addr;
};

/* A local shm peer no link watches any more, whose region is removed if it dies. */
struct fab_watch {
	int pidfd;
	char region[FAB_NAME_MAX + 1];
};

struct fab_reap {
	char region[FAB_NAME_MAX + 1];
	int64_t at;             /* ms: remove it then, or at close if sooner */
};

/* A link's own shm endpoint closed before its peer had mapped it, kept open a while (shm.c). */
struct fab_park {
	struct fid_ep *ep;
	uint8_t name[FAB_NAME_MAX];
	size_t namelen;
	int64_t at;             /* ms: close it then, or at close if sooner */
};

struct ft__transport {
	bool (*interrupted)(void *arg);
	void *interrupt_arg;
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_eq *eq;
	struct fid_ep *ep;
	struct fid_pep *pep;
	bool msg;               /* FI_EP_MSG */
	bool link_eps;          /* RDM: each outgoing link sends from an endpoint of its own */
	bool mr_local;
	bool cq_tagged;
	size_t max_msg, inject;
	int cq_fd, eq_fd;       /* -1: poll with back-off */
	int watch_fd;           /* ends progress's waits when readable (watch_fd op); -1 */
	struct ft_bell *bell;   /* no fds: local peers ring this instead (bell.c) */
	struct ft_guard *guard; /* shm: frees the region locks a killed peer left held */
	bool sar;               /* shm copies through its bounce buffers, not CMA */
	unsigned idle_us;
	uint64_t active_ns;     /* last completion or post */
	int rank, pid;
	uint64_t node, next_id, mr_key;
	char prov[64];
	char token[FT_NAME_MAX];        /* the key of the hellos' MACs */
	struct ft__auth_seen seen;      /* nonces of the hellos accepted */
	bool auth_refused;              /* this accept refused the expected rank's hello for its token */
	char addr[FAB_ADDR_MAX];
	uint8_t name[FAB_NAME_MAX];
	size_t namelen;
	pthread_mutex_t lock;   /* held by every operation; others only try it */
	struct ft__transport *next_tp;
	struct ft__link *links, *pending, *zombies;
	unsigned npending;
	struct ft__warn_gate warn;      /* strangers' warnings */
	int refused_claim;      /* RDM: the rank the last hello refused at arrival claimed, -1 */
	uint32_t refused_gen;   /* ... and its generation */
	struct fab_slot *slots;
	struct fid_mr *slots_mr;
	void *slots_desc;
	struct fab_inbox inbox[FAB_INBOX_MAX];
	unsigned ninbox;
	struct fab_peer *peers;
	size_t npeers, peers_cap;
	struct fab_watch watch[FAB_WATCH_MAX];
	unsigned nwatch;
	struct fab_reap reap[FAB_REAP_MAX];     /* dead peers' regions, removed later */
	unsigned nreap;
	struct fab_park park[FAB_PARK_MAX];     /* link endpoints closed later */
	unsigned npark;
	struct ft__tp_event *evq;
	size_t ev_cap, ev_head, ev_len;
	struct fab_op *free_ops;
	struct fab_chunk *chunks;
	struct fab_mr *mrs;
	unsigned nmrs, user_refs;
	int64_t next_liveness;
};

/* Payload piece i of op: its length, and its offset in *off. */
static inline size_t ft__fab_part_len(const struct ft__link *l, const struct fab_op *op, uint32_t i,
				      size_t *off)
{
	size_t o = (size_t)i * l->piece;
	*off = o;
	return op->hdr.length - o < l->piece ? op->hdr.length - o : l->piece;
}

/* ---- provider.c ---- */

/* The provider and endpoint type to open (fi_dupinfo'd), NULL when none fits. */
struct fi_info *ft__fab_choose_info(const struct ft__tp_params *p);

/* ---- conn.c ---- */

int ft__fab_connect(struct ft__transport *tp, const char *addr, const struct ft__hello *hello,
		    int timeout_ms, struct ft__link **out);
/* MSG: closes pending connections short of a hello, or of the proof of
 * their challenge, FAB_HANDSHAKE_MS after the connection (or the hello). */
void ft__fab_sweep_pending(struct ft__transport *tp);
/* Whether an RDM or MSG hello is a token holder's (its MACs check): 0 or the error. */
int ft__fab_hello_sealed(const struct ft__transport *tp, const struct fab_hello_msg *m, size_t len);
int ft__fab_accept(struct ft__transport *tp, const struct ft__hello *expect, int timeout_ms,
		   struct ft__link **out, struct ft__hello *got);
/* Puts m's fields around its sealed hello under a MAC bound to it. */
void ft__fab_hello_fields_seal(struct fab_hello_msg *m, const char *token);
/* 0 when m's fields are as its sender sealed them, else -FT_EAUTH. */
int ft__fab_hello_fields_check(const struct fab_hello_msg *m, const char *token);
/* RDM: keeps a hello taken by a slot until an accept judges it. */
void ft__fab_inbox_add(struct ft__transport *tp, const struct fab_hello_msg *msg, size_t len);
/* MSG: reads the connection events; returns how many were read. */
int ft__fab_drive_eq(struct ft__transport *tp);

/* ---- link.c ---- */

/* The FT_E* code of a libfabric error (either sign). */
int ft__fab_fi_to_ft(int err);
/* Marks l broken with err (the first error stays); reported by ft__fab_advance. */
void ft__fab_link_fail(struct ft__link *l, int err);
struct ft__link *ft__fab_link_new(struct ft__transport *tp, int peer, bool sending, uint64_t id);
void ft__fab_link_free(struct ft__link *l);
bool ft__fab_list_remove(struct ft__link **head, struct ft__link *l);
/* Takes l off the transport's lists of links and pending connections. */
void ft__fab_unlist(struct ft__transport *tp, struct ft__link *l);
/* Posts the control messages l still wants, in order, while the provider takes them. */
void ft__fab_advance_ctl(struct ft__link *l);
/* Moves l along: control messages, frames, its end; queues its events. */
void ft__fab_advance(struct ft__link *l);
int ft__fab_post_send(struct ft__link *l, const struct ft__frame *hdr, const void *buf, void *ctx);
int ft__fab_post_recv(struct ft__link *l, const struct ft__frame *expect, void *buf, void *ctx);
void ft__fab_link_shutdown(struct ft__link *l, bool notify, int wait_ms);
void ft__fab_link_close(struct ft__link *l);
void ft__fab_link_abort(struct ft__link *l, const struct ft__frame *abort_frame);

/* ---- post.c ---- */

struct fab_op *ft__fab_op_get(struct ft__transport *tp);
void ft__fab_op_put(struct ft__transport *tp, struct fab_op *op);
/* Splits a payload into messages the provider takes; 0 on success. */
int ft__fab_op_parts(struct ft__link *l, struct fab_op *op, uint64_t len, uint8_t kind);
/* One send or receive of l handed to the provider (fi_[t]send, fi_[t]recv): 0 or -FI_*. */
ssize_t ft__fab_send(struct ft__link *l, const void *buf, size_t len, void *desc, uint64_t tag,
		     struct fab_xfer *x);
ssize_t ft__fab_recv(struct ft__link *l, void *buf, size_t len, void *desc, uint64_t tag,
		     struct fab_xfer *x);
bool ft__fab_ctl_is_send(const struct ft__link *l, int c);
/* Posts l's control message c (enum fab_ctl): 0 or -FI_*. */
ssize_t ft__fab_ctl_post(struct ft__link *l, int c);

/* ---- cq.c ---- */

void ft__fab_ev_push(struct ft__transport *tp, int type, int status, struct ft__link *l, void *ctx);
int ft__fab_ev_pop(struct ft__transport *tp, struct ft__tp_event *ev, int max);
/* A closed link's events must not reach the engine. */
void ft__fab_ev_purge(struct ft__transport *tp, struct ft__link *l);
/* Reads the CQ and hands each completion to its link or slot; returns how many were read. */
int ft__fab_drive_cq(struct ft__transport *tp);

/* ---- progress.c ---- */

/* Reads every completion and event, then moves every link along; returns how many were read. */
int ft__fab_drive(struct ft__transport *tp);
/* Blocks up to ms (-1: a cap) until the provider may have something. */
bool ft__fab_wait(struct ft__transport *tp, int ms, bool watch);
int ft__fab_progress(struct ft__transport *tp, int timeout_ms, struct ft__tp_event *ev, int max);
/* Adds tp to (or removes it from) the transports of this process; takes no tp lock. */
void ft__fab_tps_add(struct ft__transport *tp, bool add);
/* Whether an endpoint of that name is open in this process; takes no tp lock. */
bool ft__fab_open_here(const uint8_t *name, size_t len);

/* ---- mr.c ---- */

/* Registers p..p+len when the provider wants FI_MR_LOCAL (else NULLs); 0 or -FT_EIO. */
int ft__fab_reg(struct ft__transport *tp, void *p, size_t len, struct fid_mr **mr, void **desc);
void ft__fab_unreg(struct fid_mr **mr);
int ft__fab_mr_get(struct ft__transport *tp, const void *buf, size_t len, struct fab_mr **out);
void ft__fab_mr_put(struct ft__transport *tp, struct fab_mr *m);

/* ---- shm.c ---- */

/* Whether l's peer has exited (checked now, for shm peers on this host). */
bool ft__fab_peer_gone(struct ft__link *l);
void ft__fab_watch_peer(struct ft__link *l, uint64_t node, int pid, const uint8_t *name, size_t len,
			int bell);
void ft__fab_guard_own(struct ft__transport *tp, const uint8_t *name, size_t len, bool open);
int ft__fab_enable_ep(struct ft__transport *tp, struct fid_ep *ep);
void ft__fab_unname_link_ep(const struct ft__link *l);
/* Whether l's peer is a transport of this process that has closed. */
bool ft__fab_local_peer_closed(const struct ft__link *l);
void ft__fab_keep_watching(struct ft__transport *tp, struct ft__link *l);
/* Removes the regions of watched peers that exited. */
void ft__fab_check_watched(struct ft__transport *tp);
void ft__fab_reap_dead(struct ft__transport *tp, bool all);
/* Keeps l's own endpoint open a while instead of closing it now: true if it took it. */
bool ft__fab_park_ep(struct ft__transport *tp, struct ft__link *l);
/* Closes the parked endpoints due (all: every one). */
void ft__fab_unpark(struct ft__transport *tp, bool all);
/* Every FAB_LIVENESS_MS: looks whether local peers exited. */
void ft__fab_check_liveness(struct ft__transport *tp);
bool ft__fab_sar_midway(const struct ft__transport *tp);
bool ft__fab_sar_yield(const struct ft__transport *tp);

/* ---- guard.c: frees the shm region locks that a killed process left held ---- */
/* (and kills a left-out process whose held lock wedges this one) */

struct ft_guard;

/* A guard for this process's shm regions; NULL when libfabric's shm region layout is not known. */
struct ft_guard *ft__fab_guard_open(void);
#define FT__GUARD_OWN (-1)
/*
 * Watches the region named region (a file in /dev/shm) of process pid: one
 * of this process's endpoints (rank FT__GUARD_OWN; it must still be named)
 * or the region of the peer of original rank rank (its lock is watched if
 * it is still named, its death in any case). A peer's death starts a vigil
 * over the locks of this process's regions and of the dead peer's. Peers
 * stay watched until they die or the guard closes. Returns whether the
 * region is watched.
 */
bool ft__fab_guard_add(struct ft_guard *g, const char *region, int pid, int rank);
/* The settled view left out the peer of original rank rank (any thread): a
 * vigil over the locks begins, and the left-out peers that still live are
 * killed if a lock stays held (guard.c). */
void ft__fab_guard_left_out(struct ft_guard *g, int rank);
/* Stops watching one of this process's regions (its endpoint closed). */
void ft__fab_guard_remove(struct ft_guard *g, const char *region);
void ft__fab_guard_close(struct ft_guard *g);

/* ---- bell.c: a doorbell that other processes on this host ring (no wait object) ---- */

struct ft_bell;

/* This process's bell, made on first use; NULL when it cannot be. */
struct ft_bell *ft__fab_bell_own(void);
/* What a peer passes to ft__fab_bell_map to reach this process's bell (-1: none). */
int ft__fab_bell_handle(void);
/* Maps the bell of process pid (handle as that process published it); NULL if not possible. */
struct ft_bell *ft__fab_bell_map(int pid, int handle);
void ft__fab_bell_unmap(struct ft_bell *b);
/* Wakes the threads asleep on b; a system call only when one is. */
void ft__fab_bell_ring(struct ft_bell *b);
/*
 * Sleeping on one's own bell, without losing a ring that comes between the
 * last look at the queues and the sleep: arm, look once more, then wait on
 * what arm returned (it returns at once if the bell rang since), then disarm.
 */
uint32_t ft__fab_bell_arm(struct ft_bell *b);
void ft__fab_bell_wait(struct ft_bell *b, uint32_t armed, int timeout_ms);
void ft__fab_bell_disarm(struct ft_bell *b);

#endif /* FTCC_FABRIC_H */
