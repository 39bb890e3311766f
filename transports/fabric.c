/* fabric.c: the libfabric transport: tagged messages on one RDM endpoint (or one MSG endpoint per link), headers checked before payloads land. */
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "crc32c.h"
#include "ftcc/transport.h"
#include "internal.h"

/*
 * RDM endpoints (shm, tcp;ofi_rxm, verbs;ofi_rxm, efa) are connectionless: the
 * transport owns one endpoint and a link is (peer fi_addr, link id,
 * direction). The connecting side picks the id, unique in its process, and
 * every message of a link carries a tag (kind, sender rank, link id), so
 * messages of different links, peers or directions never match each other's
 * receives. Kinds:
 *   HELLO    connector -> acceptor: struct ft_hello, the link id and the
 *            connector's endpoint name, node and pid (the acceptor may not
 *            know its address yet: it must be able to answer);
 *   ACK      acceptor -> connector: struct ft_hello_ack;
 *   HDR      connector -> acceptor: a frame header (abort frames too);
 *   DATA     connector -> acceptor: a frame's payload, in pieces of at most
 *            the provider's max_msg_size;
 *   CLOSE_S  connector -> acceptor: "I closed", with the number of headers
 *            sent, so the acceptor reports the end of the link only after it
 *            has read them all, as TCP reports EOF after the bytes before it;
 *   CLOSE_R  acceptor -> connector: "I closed" (the connector's EPIPE).
 *
 * Receiving: one header receive per frame the engine expects is posted into
 * that frame's own header slot; the provider matches messages of one tag in
 * order (FI_ORDER_SAS is required), so header k lands in slot k. Only after
 * ft_frame_check(expect, got) passes is the payload receive posted into the
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
 * as a CQ error (rxm) or FI_SHUTDOWN (MSG).
 *
 * Waiting: when the CQ (and EQ) offers a file descriptor, progress blocks in
 * poll() after fi_trywait, together with the peers' pidfds; otherwise it
 * polls the CQ with a back-off from 50 us to 1 ms, which keeps eight ranks
 * on two cores moving without burning them.
 *
 * Lifetime: operations posted to the provider reference memory of their link
 * (control messages, header slots) or of the user. Closing a link cancels its
 * receives and waits (bounded) until they are reported, so no byte lands in a
 * user buffer after link_close; a link whose operations are still out after
 * that is kept as a zombie until they complete or the transport closes.
 */

#define FAB_NAME_MAX 100        /* endpoint name bytes; hex-encoded in the address */
#define FAB_ADDR_MAX 256        /* what the rendezvous stores */
#define FAB_HELLO_SLOTS 8
#define FAB_INBOX_MAX 32
#define FAB_PENDING_MAX 16
#define FAB_CQ_BATCH 32
#define FAB_SEND_WINDOW 64      /* frames of a link handed to the provider at once */
#define FAB_CHUNK_OPS 64
#define FAB_CLOSE_WAIT_MS 200
#define FAB_DEAD_GRACE_MS 200
#define FAB_WAIT_CAP_MS 100     /* a missed wake-up of a wait fd costs at most this */
#define FAB_LIVENESS_MS 20
#define FAB_POLL_MIN_US 50
#define FAB_POLL_MAX_US 1000
#define FAB_MR_CACHE_MAX 32
#define FAB_MR_WINDOW ((uintptr_t)64 << 20)
#define FAB_MR_ALIGN ((uintptr_t)1 << 16)
#define FAB_CLOSE_MAGIC 0x46544345u /* "FTCE" */

enum fab_kind { K_HELLO = 1, K_ACK, K_HDR, K_DATA, K_CLOSE_S, K_CLOSE_R };

/* Tags use the low 60 bits only: some providers reserve the top ones. */
#define TAG_KIND_SHIFT 56
#define TAG_RANK_SHIFT 36
#define TAG_RANK_MASK 0xfffffull
#define TAG_ID_MASK ((1ull << TAG_RANK_SHIFT) - 1)
#define TAG_KIND_IGNORE ((1ull << TAG_KIND_SHIFT) - 1)

static inline uint64_t fab_tag(int kind, int rank, uint64_t id)
{
	return (uint64_t)kind << TAG_KIND_SHIFT |
	       ((uint64_t)(uint32_t)rank & TAG_RANK_MASK) << TAG_RANK_SHIFT | (id & TAG_ID_MASK);
}

struct fab_hello_msg {
	struct ft_hello hello;
	uint64_t link_id;
	uint64_t node;
	int32_t pid;
	uint32_t namelen;
	uint8_t name[FAB_NAME_MAX];
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
enum fab_ctl { C_HELLO, C_ACK_RX, C_CLOSE_RX, C_ACK_TX, C_CLOSE_TX, C_ABORT, C_BHDR, C_COUNT };

struct fab_chunk;
struct fab_mr;

struct fab_op {
	struct fab_op *next;
	struct fab_chunk *chunk;
	struct ft_link *link;
	struct ft_frame hdr;    /* to send, or expected */
	struct ft_frame rhdr;   /* received */
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
	struct ft_hello_ack ack_tx, ack_rx;
	struct fab_close_msg close_tx, close_rx;
	struct ft_frame abort_hdr;
	struct ft_frame bhdr;
};

enum fab_bh { BH_IDLE, BH_POSTED, BH_FULL };

struct ft_link {
	struct ft_transport *tp;
	struct ft_link *next;
	int peer;
	int tx_rank, rx_rank;   /* ranks in the tags we send and receive */
	bool sending;           /* connector: frames go out */
	uint64_t id;
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
	int64_t dead_deadline;
	bool peer_closed;
	uint64_t peer_frames, frames_sent, hdrs_got;
	size_t hello_len;       /* MSG acceptor: bytes of the hello received */
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

struct ft_transport {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_eq *eq;
	struct fid_ep *ep;
	struct fid_pep *pep;
	bool msg;               /* FI_EP_MSG */
	bool mr_local;
	bool cq_tagged;
	size_t max_msg, inject;
	int cq_fd, eq_fd;       /* -1: poll with back-off */
	unsigned idle_us;
	int rank, pid;
	uint64_t node, next_id, mr_key;
	char prov[64];
	char addr[FAB_ADDR_MAX];
	uint8_t name[FAB_NAME_MAX];
	size_t namelen;
	struct ft_link *links, *pending, *zombies;
	unsigned npending;
	struct fab_slot *slots;
	struct fid_mr *slots_mr;
	void *slots_desc;
	struct fab_inbox inbox[FAB_INBOX_MAX];
	unsigned ninbox;
	struct fab_peer *peers;
	size_t npeers, peers_cap;
	struct ft_tp_event *evq;
	size_t ev_cap, ev_head, ev_len;
	struct fab_op *free_ops;
	struct fab_chunk *chunks;
	struct fab_mr *mrs;
	unsigned nmrs, user_refs;
	int64_t next_liveness;
};

static int drive(struct ft_transport *tp);
static void fab_wait(struct ft_transport *tp, int ms);

static int fi_to_ft(int err)
{
	switch (err < 0 ? -err : err) {
	case FI_ENOMEM:
		return -FT_ENOMEM;
	case FI_ETIMEDOUT:
		return -FT_ETIMEDOUT;
	case FI_ECONNREFUSED:
		return -FT_ECONNREFUSED;
	case FI_ETRUNC:
	case FI_EMSGSIZE:
		return -FT_EPROTO;
	default:
		return -FT_EPEERFAILED;
	}
}

static void link_fail(struct ft_link *l, int err)
{
	if (l->error == 0) {
		l->error = err;
		ft__debug("fabric: link %s rank %d failed: %s", l->sending ? "to" : "from", l->peer,
			  ft_strerror(err));
	}
}

/* ---- events ---- */

static void ev_push(struct ft_transport *tp, int type, int status, struct ft_link *l, void *ctx)
{
	if (tp->ev_len == tp->ev_cap) {
		size_t cap = tp->ev_cap ? tp->ev_cap * 2 : 256;
		struct ft_tp_event *q = malloc(cap * sizeof(*q));
		if (q == NULL) {
			ft__error("fabric: out of memory for events");
			return;
		}
		for (size_t i = 0; i < tp->ev_len; i++)
			q[i] = tp->evq[(tp->ev_head + i) % tp->ev_cap];
		free(tp->evq);
		tp->evq = q;
		tp->ev_cap = cap;
		tp->ev_head = 0;
	}
	tp->evq[(tp->ev_head + tp->ev_len++) % tp->ev_cap] = (struct ft_tp_event){
		.type = type, .status = status, .link = l, .ctx = ctx, .peer = l->peer};
}

static int ev_pop(struct ft_transport *tp, struct ft_tp_event *ev, int max)
{
	int n = 0;

	while (n < max && tp->ev_len > 0) {
		ev[n++] = tp->evq[tp->ev_head];
		tp->ev_head = (tp->ev_head + 1) % tp->ev_cap;
		tp->ev_len--;
	}
	return n;
}

/* A closed link's events must not reach the engine. */
static void ev_purge(struct ft_transport *tp, struct ft_link *l)
{
	size_t k = 0;

	for (size_t i = 0; i < tp->ev_len; i++) {
		struct ft_tp_event e = tp->evq[(tp->ev_head + i) % tp->ev_cap];
		if (e.link != l)
			tp->evq[(tp->ev_head + k++) % tp->ev_cap] = e;
	}
	tp->ev_len = k;
}

/* ---- memory registration (only when the provider wants FI_MR_LOCAL) ---- */

static int reg(struct ft_transport *tp, void *p, size_t len, struct fid_mr **mr, void **desc)
{
	int rc;

	*mr = NULL;
	*desc = NULL;
	if (!tp->mr_local)
		return 0;
	rc = fi_mr_reg(tp->domain, p, len, FI_SEND | FI_RECV, 0, ++tp->mr_key, 0, mr, NULL);
	if (rc != 0) {
		ft__error("fabric: fi_mr_reg of %zu bytes: %s", len, fi_strerror(-rc));
		*mr = NULL;
		return -FT_EIO;
	}
	*desc = fi_mr_desc(*mr);
	return 0;
}

static void unreg(struct fid_mr **mr)
{
	if (*mr != NULL)
		fi_close(&(*mr)->fid);
	*mr = NULL;
}

/* The mappings holding lo and hi-1 (0 when not found), from /proc/self/maps. */
static void mappings(uintptr_t lo, uintptr_t last, uintptr_t *lo_start, uintptr_t *last_end)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];

	*lo_start = *last_end = 0;
	if (f == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL) {
		unsigned long a, b;
		if (sscanf(line, "%lx-%lx", &a, &b) != 2)
			continue;
		if (lo >= a && lo < b)
			*lo_start = a;
		if (last >= a && last < b)
			*last_end = b;
	}
	fclose(f);
}

static void mr_flush(struct ft_transport *tp)
{
	for (struct fab_mr **pp = &tp->mrs; *pp != NULL;) {
		struct fab_mr *m = *pp;
		if (m->refs > 0) {
			pp = &m->next;
			continue;
		}
		*pp = m->next;
		unreg(&m->mr);
		free(m);
		tp->nmrs--;
	}
}

/*
 * Registrations of user buffers are cached while operations are in flight,
 * and each covers a window of the mapping around the buffer, so a collective
 * registers each buffer once, never each segment. The cache empties whenever
 * nothing is in flight: between collectives the user may free a buffer and
 * get other memory at the same address, which a stale registration would
 * not see.
 */
static int mr_get(struct ft_transport *tp, const void *buf, size_t len, struct fab_mr **out)
{
	uintptr_t lo = (uintptr_t)buf, hi = lo + len, page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t wlo, whi, mlo, mhi;
	struct fab_mr *m;

	*out = NULL;
	if (!tp->mr_local || len == 0)
		return 0;
	if (tp->user_refs == 0)
		mr_flush(tp);
	for (m = tp->mrs; m != NULL; m = m->next)
		if (m->lo <= lo && hi <= m->hi)
			goto found;
	if (tp->nmrs >= FAB_MR_CACHE_MAX)
		mr_flush(tp);
	wlo = lo & ~(page - 1);
	whi = (hi + page - 1) & ~(page - 1);
	mappings(lo, hi - 1, &mlo, &mhi);
	if (mlo != 0 && mhi != 0) {
		uintptr_t a = lo & ~(FAB_MR_ALIGN - 1), b = (hi + FAB_MR_ALIGN - 1) & ~(FAB_MR_ALIGN - 1);
		if (b - a < FAB_MR_WINDOW)
			b = a + FAB_MR_WINDOW;
		wlo = a > mlo ? a : mlo;
		whi = b < mhi ? b : mhi;
	}
	m = calloc(1, sizeof(*m));
	if (m == NULL)
		return -FT_ENOMEM;
	if (reg(tp, (void *)wlo, whi - wlo, &m->mr, &m->desc) != 0) {
		free(m);
		return -FT_EIO;
	}
	m->lo = wlo;
	m->hi = whi;
	m->next = tp->mrs;
	tp->mrs = m;
	tp->nmrs++;
found:
	m->refs++;
	tp->user_refs++;
	*out = m;
	return 0;
}

static void mr_put(struct ft_transport *tp, struct fab_mr *m)
{
	if (m != NULL) {
		m->refs--;
		tp->user_refs--;
	}
}

/* ---- operations ---- */

static struct fab_op *op_get(struct ft_transport *tp)
{
	struct fab_op *op;

	if (tp->free_ops == NULL) {
		struct fab_chunk *c = calloc(1, sizeof(*c));
		if (c == NULL)
			return NULL;
		if (reg(tp, c, sizeof(*c), &c->mr, &c->desc) != 0) {
			free(c);
			return NULL;
		}
		c->next = tp->chunks;
		tp->chunks = c;
		for (int i = 0; i < FAB_CHUNK_OPS; i++) {
			c->ops[i].chunk = c;
			c->ops[i].next = tp->free_ops;
			tp->free_ops = &c->ops[i];
		}
	}
	op = tp->free_ops;
	tp->free_ops = op->next;
	struct fab_chunk *c = op->chunk;
	memset(op, 0, sizeof(*op));
	op->chunk = c;
	op->hx = (struct fab_xfer){.owner = op};
	return op;
}

static void op_put(struct ft_transport *tp, struct fab_op *op)
{
	if (op->px != NULL && op->px != &op->px1)
		free(op->px);
	op->px = NULL;
	mr_put(tp, op->mr);
	op->mr = NULL;
	op->next = tp->free_ops;
	tp->free_ops = op;
}

/* Splits a payload into messages the provider takes; 0 on success. */
static int op_parts(struct ft_transport *tp, struct fab_op *op, uint64_t len, uint8_t kind)
{
	op->nparts = len == 0 ? 0 : (uint32_t)((len + tp->max_msg - 1) / tp->max_msg);
	op->hx.kind = kind == X_DATA_TX ? X_HDR_TX : X_HDR_RX;
	if (op->nparts <= 1) {
		op->px = &op->px1;
	} else {
		op->px = calloc(op->nparts, sizeof(*op->px));
		if (op->px == NULL)
			return -FT_ENOMEM;
	}
	for (uint32_t i = 0; i < op->nparts; i++)
		op->px[i] = (struct fab_xfer){.owner = op, .kind = kind};
	return 0;
}

static inline size_t part_len(const struct ft_transport *tp, const struct fab_op *op, uint32_t i,
			      size_t *off)
{
	size_t o = (size_t)i * tp->max_msg;
	*off = o;
	return op->hdr.length - o < tp->max_msg ? op->hdr.length - o : tp->max_msg;
}

/* ---- posting to the provider ---- */

static ssize_t fab_send(struct ft_link *l, const void *buf, size_t len, void *desc, uint64_t tag,
			struct fab_xfer *x)
{
	ssize_t rc = l->tp->msg ? fi_send(l->ep, buf, len, desc, 0, &x->fctx)
				: fi_tsend(l->ep, buf, len, desc, l->addr, tag, &x->fctx);
	if (rc == 0) {
		x->posted = true;
		l->outstanding++;
	}
	return rc;
}

static ssize_t fab_recv(struct ft_link *l, void *buf, size_t len, void *desc, uint64_t tag,
			struct fab_xfer *x)
{
	ssize_t rc = l->tp->msg ? fi_recv(l->ep, buf, len, desc, FI_ADDR_UNSPEC, &x->fctx)
				: fi_trecv(l->ep, buf, len, desc, FI_ADDR_UNSPEC, tag, 0, &x->fctx);
	if (rc == 0) {
		x->posted = true;
		l->outstanding++;
	}
	return rc;
}

static bool ctl_is_send(const struct ft_link *l, int c)
{
	switch (c) {
	case C_HELLO:
		return l->sending;
	case C_ACK_TX:
	case C_CLOSE_TX:
	case C_ABORT:
		return true;
	default:
		return false;
	}
}

static ssize_t ctl_post(struct ft_link *l, int c)
{
	struct fab_msgs *m = &l->m;
	void *buf;
	size_t len;
	uint64_t tag = 0;
	ssize_t rc;

	switch (c) {
	case C_HELLO:
		buf = &m->hello;
		len = sizeof(m->hello);
		tag = fab_tag(K_HELLO, l->tx_rank, l->id);
		break;
	case C_ACK_RX:
		buf = &m->ack_rx;
		len = sizeof(m->ack_rx);
		tag = fab_tag(K_ACK, l->rx_rank, l->id);
		break;
	case C_CLOSE_RX:
		buf = &m->close_rx;
		len = sizeof(m->close_rx);
		tag = fab_tag(l->sending ? K_CLOSE_R : K_CLOSE_S, l->rx_rank, l->id);
		break;
	case C_ACK_TX:
		buf = &m->ack_tx;
		len = sizeof(m->ack_tx);
		tag = fab_tag(K_ACK, l->tx_rank, l->id);
		break;
	case C_CLOSE_TX:
		buf = &m->close_tx;
		len = sizeof(m->close_tx);
		tag = fab_tag(l->sending ? K_CLOSE_S : K_CLOSE_R, l->tx_rank, l->id);
		break;
	case C_ABORT:
		buf = &m->abort_hdr;
		len = sizeof(m->abort_hdr);
		tag = fab_tag(K_HDR, l->tx_rank, l->id);
		break;
	default:
		buf = &m->bhdr;
		len = sizeof(m->bhdr);
		break;
	}
	l->cx[c] = (struct fab_xfer){.owner = l, .kind = X_CTL, .ctl = (uint8_t)c};
	rc = ctl_is_send(l, c) ? fab_send(l, buf, len, l->m_desc, tag, &l->cx[c])
			       : fab_recv(l, buf, len, l->m_desc, tag, &l->cx[c]);
	if (rc == 0)
		l->want[c] = false;
	return rc;
}

/* ---- links ---- */

static struct ft_link *link_new(struct ft_transport *tp, int peer, bool sending, uint64_t id)
{
	struct ft_link *l = calloc(1, sizeof(*l));

	if (l == NULL)
		return NULL;
	l->tp = tp;
	l->peer = peer;
	l->sending = sending;
	l->id = id;
	l->ep = tp->ep;
	l->addr = FI_ADDR_UNSPEC;
	l->pidfd = -1;
	if (reg(tp, &l->m, sizeof(l->m), &l->m_mr, &l->m_desc) != 0) {
		free(l);
		return NULL;
	}
	return l;
}

static void link_free(struct ft_link *l)
{
	struct ft_transport *tp = l->tp;

	for (struct fab_op *op = l->sq, *next; op != NULL; op = next) {
		next = op->next;
		op_put(tp, op);
	}
	for (struct fab_op *op = l->rq, *next; op != NULL; op = next) {
		next = op->next;
		op_put(tp, op);
	}
	if (l->own_ep && l->ep != NULL)
		fi_close(&l->ep->fid);
	if (l->pidfd >= 0)
		close(l->pidfd);
	unreg(&l->m_mr);
	free(l);
}

static void list_remove(struct ft_link **head, struct ft_link *l)
{
	for (struct ft_link **pp = head; *pp != NULL; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			return;
		}
}

/* Watches a peer that runs on this node through a pidfd (else kill(pid, 0)). */
static void watch_peer(struct ft_link *l, uint64_t node, int pid)
{
	l->pid = pid;
	l->local = node == l->tp->node && pid > 0;
	if (!l->local)
		return;
#ifdef SYS_pidfd_open
	l->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (l->pidfd < 0 && errno == ESRCH) {
		l->dead = true;
		l->dead_deadline = ft__now_ms() + FAB_DEAD_GRACE_MS;
	}
#endif
}

static void check_liveness(struct ft_transport *tp)
{
	int64_t now = ft__now_ms();

	if (now < tp->next_liveness)
		return;
	tp->next_liveness = now + FAB_LIVENESS_MS;
	for (struct ft_link *l = tp->links; l != NULL; l = l->next) {
		bool gone;
		if (!l->local || l->dead)
			continue;
		if (l->pidfd >= 0) {
			struct pollfd p = {.fd = l->pidfd, .events = POLLIN};
			gone = poll(&p, 1, 0) == 1;
		} else {
			gone = kill(l->pid, 0) != 0 && errno == ESRCH;
		}
		if (gone) {
			ft__debug("fabric: rank %d (pid %d) exited", l->peer, l->pid);
			l->dead = true;
			l->dead_deadline = now + FAB_DEAD_GRACE_MS;
		}
	}
}

/* ---- the link state machine ---- */

static void advance_ctl(struct ft_link *l)
{
	static const int order[] = {C_HELLO, C_ACK_RX, C_CLOSE_RX, C_ACK_TX, C_CLOSE_TX};

	for (size_t i = 0; i < FT__ARRAY_SIZE(order) && l->error == 0; i++) {
		int c = order[i];
		ssize_t rc;
		if (!l->want[c] || (ctl_is_send(l, c) && l->tp->msg && !l->connected))
			continue;
		rc = ctl_post(l, c);
		if (rc == -FI_EAGAIN)
			break;
		if (rc != 0) {
			ft__error("fabric: posting a control message to rank %d: %s", l->peer,
				  fi_strerror((int)-rc));
			link_fail(l, fi_to_ft((int)rc));
		}
	}
}

static ssize_t send_hdr(struct ft_link *l, struct fab_op *op)
{
	struct ft_transport *tp = l->tp;
	uint64_t tag = fab_tag(K_HDR, l->tx_rank, l->id);
	ssize_t rc;

	if (sizeof(op->hdr) <= tp->inject) {
		rc = tp->msg ? fi_inject(l->ep, &op->hdr, sizeof(op->hdr), 0)
			     : fi_tinject(l->ep, &op->hdr, sizeof(op->hdr), l->addr, tag);
		if (rc == 0)
			op->hdr_done = true;
	} else {
		rc = fab_send(l, &op->hdr, sizeof(op->hdr), op->chunk->desc, tag, &op->hx);
	}
	if (rc == 0) {
		op->hdr_posted = true;
		l->frames_sent++;
	}
	return rc;
}

static void advance_send(struct ft_link *l)
{
	struct ft_transport *tp = l->tp;
	ssize_t rc = 0;

	if ((tp->msg && !l->connected) || l->want[C_HELLO])
		return;
	while (l->s_next != NULL && l->s_inflight < FAB_SEND_WINDOW) {
		struct fab_op *op = l->s_next;
		if (!op->hdr_posted && (rc = send_hdr(l, op)) != 0)
			goto out;
		while (op->parts_posted < op->nparts) {
			size_t off, len = part_len(tp, op, op->parts_posted, &off);
			rc = fab_send(l, op->buf + off, len, op->mr ? op->mr->desc : NULL,
				      fab_tag(K_DATA, l->tx_rank, l->id), &op->px[op->parts_posted]);
			if (rc != 0)
				goto out;
			op->parts_posted++;
		}
		l->s_next = op->next;
		l->s_inflight++;
	}
	if (l->s_next == NULL && l->want[C_ABORT]) {
		rc = ctl_post(l, C_ABORT);
		if (rc == 0)
			l->frames_sent++;
	}
out:
	if (rc != 0 && rc != -FI_EAGAIN) {
		ft__error("fabric: send to rank %d: %s", l->peer, fi_strerror((int)-rc));
		link_fail(l, fi_to_ft((int)rc));
		return;
	}
	while (l->sq != NULL && l->sq != l->s_next && l->sq->hdr_done &&
	       l->sq->parts_done == l->sq->nparts) {
		struct fab_op *op = l->sq;
		ev_push(tp, FT_TP_SEND_DONE, 0, l, op->ctx);
		l->sq = op->next;
		if (l->sq == NULL)
			l->sq_tail = NULL;
		l->s_inflight--;
		op_put(tp, op);
	}
}

/* Checks the next header; posts nothing on a mismatch. */
static bool check_hdr(struct ft_link *l, struct fab_op *op)
{
	int rc = ft_frame_check(&op->hdr, &op->rhdr);

	if (rc != 0) {
		ft__debug("fabric: frame from rank %d (step %u seg %u) refused: %s", l->peer,
			  op->rhdr.step, op->rhdr.seg, ft_strerror(rc));
		link_fail(l, rc);
		return false;
	}
	op->checked = true;
	return true;
}

/* Posts the payload receives of a checked frame; false while the provider is full. */
static bool post_payload(struct ft_link *l, struct fab_op *op)
{
	struct ft_transport *tp = l->tp;

	while (op->parts_posted < op->nparts) {
		size_t off, len = part_len(tp, op, op->parts_posted, &off);
		ssize_t rc = fab_recv(l, op->buf + off, len, op->mr ? op->mr->desc : NULL,
				      fab_tag(K_DATA, l->rx_rank, l->id), &op->px[op->parts_posted]);
		if (rc == -FI_EAGAIN)
			return false;
		if (rc != 0) {
			ft__error("fabric: receive from rank %d: %s", l->peer, fi_strerror((int)-rc));
			link_fail(l, fi_to_ft((int)rc));
			return false;
		}
		l->user_rx++;
		op->parts_posted++;
	}
	return true;
}

static void recv_rdm(struct ft_link *l)
{
	while (l->r_hdr != NULL) {
		struct fab_op *op = l->r_hdr;
		ssize_t rc = fab_recv(l, &op->rhdr, sizeof(op->rhdr), op->chunk->desc,
				      fab_tag(K_HDR, l->rx_rank, l->id), &op->hx);
		if (rc == -FI_EAGAIN)
			break;
		if (rc != 0) {
			ft__error("fabric: receive from rank %d: %s", l->peer, fi_strerror((int)-rc));
			link_fail(l, fi_to_ft((int)rc));
			return;
		}
		op->hdr_posted = true;
		l->r_hdr = op->next;
	}
	while (l->r_check != NULL) {
		struct fab_op *op = l->r_check;
		if (!op->checked && (!op->hdr_done || !check_hdr(l, op)))
			return;
		if (!post_payload(l, op))
			return;
		l->r_check = op->next;
	}
}

static void recv_msg(struct ft_link *l)
{
	for (;;) {
		struct fab_op *op = l->r_check;
		if (op != NULL && op->checked) {
			if (!post_payload(l, op))
				return;
			l->r_check = op->next;
			continue;
		}
		if (l->bh == BH_FULL) {
			if (op == NULL)
				return; /* held until the engine asks for it */
			op->rhdr = l->m.bhdr;
			op->hdr_done = true;
			l->bh = BH_IDLE;
			if (!check_hdr(l, op))
				return;
			continue;
		}
		if (l->bh == BH_IDLE) {
			ssize_t rc = ctl_post(l, C_BHDR);
			if (rc == -FI_EAGAIN)
				return;
			if (rc != 0) {
				link_fail(l, fi_to_ft((int)rc));
				return;
			}
			l->bh = BH_POSTED;
		}
		return;
	}
}

static void advance_recv(struct ft_link *l)
{
	struct ft_transport *tp = l->tp;

	if (tp->msg)
		recv_msg(l);
	else
		recv_rdm(l);
	while (l->error == 0 && l->rq != NULL && l->rq->checked && l->rq != l->r_check &&
	       l->rq->parts_done == l->rq->nparts) {
		struct fab_op *op = l->rq;
		int status = 0;
		if ((op->rhdr.flags & FT_FRAME_F_CRC) &&
		    ft__crc32c(0, op->buf, op->hdr.length) != op->rhdr.crc)
			status = -FT_EPROTO;
		ev_push(tp, FT_TP_RECV_DONE, status, l, op->ctx);
		l->rq = op->next;
		if (l->rq == NULL)
			l->rq_tail = NULL;
		op_put(tp, op);
		if (status != 0)
			link_fail(l, status);
	}
	if (l->error != 0 || !l->peer_closed)
		return;
	/* The end of the stream, once every frame sent before it has been read. */
	if (tp->msg ? l->bh != BH_FULL && (l->rq == NULL || !l->rq->checked)
		    : l->hdrs_got >= l->peer_frames && (l->rq == NULL || !l->rq->hdr_done))
		link_fail(l, -FT_EPEERFAILED);
}

static void advance(struct ft_link *l)
{
	if (l->error == 0) {
		advance_ctl(l);
		if (l->error == 0) {
			if (l->sending)
				advance_send(l);
			else
				advance_recv(l);
		}
		if (l->error == 0 && l->dead &&
		    (l->sending || (!l->peer_closed && ft__now_ms() >= l->dead_deadline))) {
			ft__debug("fabric: rank %d (pid %d) is gone", l->peer, l->pid);
			link_fail(l, -FT_EPEERFAILED);
		}
	}
	if (l->error != 0 && !l->error_reported) {
		l->error_reported = true;
		ev_push(l->tp, FT_TP_LINK_ERROR, l->error, l, NULL);
	}
}

/* ---- completions ---- */

static void inbox_add(struct ft_transport *tp, const struct fab_hello_msg *msg, size_t len)
{
	if (tp->ninbox == FAB_INBOX_MAX) {
		ft__warn("fabric: too many unanswered hellos; dropping the oldest");
		memmove(&tp->inbox[0], &tp->inbox[1], (FAB_INBOX_MAX - 1) * sizeof(tp->inbox[0]));
		tp->ninbox--;
	}
	tp->inbox[tp->ninbox].msg = *msg;
	tp->inbox[tp->ninbox].len = len;
	tp->ninbox++;
}

static void on_ctl(struct ft_link *l, int c, size_t len, int err)
{
	if (err == FI_ECANCELED) {
		if (c == C_BHDR)
			l->bh = BH_IDLE;
		return;
	}
	if (l->closing) {
		if (c == C_ACK_TX && l->own_ep)
			fi_shutdown(l->ep, 0);
		return;
	}
	if (err != 0) {
		ft__debug("fabric: control message %d with rank %d failed: %s", c, l->peer,
			  fi_strerror(err));
		link_fail(l, fi_to_ft(err));
		return;
	}
	switch (c) {
	case C_HELLO:
		if (!l->sending)
			l->hello_len = len;
		break;
	case C_ACK_RX:
		if (len != sizeof(l->m.ack_rx) || l->m.ack_rx.magic != FT_HELLO_MAGIC) {
			link_fail(l, -FT_EPROTO);
		} else if (l->m.ack_rx.status != 0) {
			int st = l->m.ack_rx.status;
			ft__error("fabric: rank %d refused our link: %s", l->peer, ft_strerror(st));
			link_fail(l, st < 0 && st > -2 * FT_ERR_BASE ? st : -FT_EPROTO);
		}
		break;
	case C_CLOSE_RX:
		if (len != sizeof(l->m.close_rx) || l->m.close_rx.magic != FAB_CLOSE_MAGIC) {
			link_fail(l, -FT_EPROTO);
			break;
		}
		l->peer_closed = true;
		l->peer_frames = l->m.close_rx.frames;
		if (l->sending)
			link_fail(l, -FT_EPEERFAILED);
		break;
	case C_BHDR:
		if (len != sizeof(l->m.bhdr)) {
			link_fail(l, -FT_EPROTO);
			break;
		}
		l->bh = BH_FULL;
		l->hdrs_got++;
		break;
	default:
		break;
	}
}

static void on_op(struct ft_link *l, struct fab_xfer *x, size_t len, int err)
{
	struct fab_op *op = x->owner;

	if (x->kind == X_DATA_RX)
		l->user_rx--;
	if (err == FI_ECANCELED || l->closing)
		return;
	if (err != 0) {
		ft__debug("fabric: transfer with rank %d failed: %s", l->peer, fi_strerror(err));
		link_fail(l, err == FI_ETRUNC ? -FT_EPROTO : fi_to_ft(err));
		return;
	}
	switch (x->kind) {
	case X_HDR_TX:
		op->hdr_done = true;
		break;
	case X_DATA_TX:
		op->parts_done++;
		break;
	case X_HDR_RX:
		if (len != sizeof(op->rhdr)) {
			link_fail(l, -FT_EPROTO);
			break;
		}
		op->hdr_done = true;
		l->hdrs_got++;
		break;
	case X_DATA_RX: {
		size_t off, want = part_len(l->tp, op, (uint32_t)(x - op->px), &off);
		if (len != want)
			link_fail(l, -FT_EPROTO);
		else
			op->parts_done++;
		break;
	}
	default:
		break;
	}
}

static void complete(struct ft_transport *tp, void *ctx, size_t len, int err)
{
	struct fab_xfer *x = ctx;
	struct ft_link *l;

	if (x == NULL)
		return;
	x->posted = false;
	if (x->kind == X_SLOT) {
		struct fab_slot *s = x->owner;
		if (err == 0)
			inbox_add(tp, &s->msg, len);
		else if (err != FI_ECANCELED)
			ft__warn("fabric: bad hello message: %s", fi_strerror(err));
		s->want = err != FI_ECANCELED;
		return;
	}
	if (x->kind == X_CTL) {
		l = x->owner;
		l->outstanding--;
		on_ctl(l, x->ctl, len, err);
	} else {
		struct fab_op *op = x->owner;
		l = op->link;
		l->outstanding--;
		on_op(l, x, len, err);
	}
	if (l->zombie && l->outstanding == 0) {
		list_remove(&tp->zombies, l);
		link_free(l);
	}
}

static int drive_cq(struct ft_transport *tp)
{
	struct fi_cq_tagged_entry ce[FAB_CQ_BATCH];
	struct fi_cq_msg_entry me[FAB_CQ_BATCH];
	int total = 0;

	for (int round = 0; round < 64; round++) {
		ssize_t n = tp->cq_tagged ? fi_cq_read(tp->cq, ce, FAB_CQ_BATCH)
					  : fi_cq_read(tp->cq, me, FAB_CQ_BATCH);
		if (n == -FI_EAGAIN)
			break;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry ee;
			memset(&ee, 0, sizeof(ee));
			if (fi_cq_readerr(tp->cq, &ee, 0) == 1) {
				complete(tp, ee.op_context, ee.len, ee.err ? ee.err : FI_EIO);
				total++;
			}
			continue;
		}
		if (n < 0) {
			ft__error("fabric: fi_cq_read: %s", fi_strerror((int)-n));
			break;
		}
		for (ssize_t i = 0; i < n; i++) {
			if (tp->cq_tagged)
				complete(tp, ce[i].op_context, ce[i].len, 0);
			else
				complete(tp, me[i].op_context, me[i].len, 0);
		}
		total += (int)n;
		if (n < FAB_CQ_BATCH)
			break;
	}
	return total;
}
