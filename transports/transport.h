/* transport.h: the internal transport interface and the wire formats every transport carries (not installed). */
/* SPDX-License-Identifier: MIT */
/*
 * Not installed: no third party can register a transport today, so the
 * table, the frame and the handshake stay free to change. The ops table
 * still begins with its size, so that it can become a versioned plugin
 * interface later without breaking the built-in transports.
 */
#ifndef FTCC_TRANSPORT_H
#define FTCC_TRANSPORT_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FT__PROTO_VERSION 4
#define FT__HELLO_MAGIC 0x46544348u /* "FTCH" */
#define FT__FRAME_MAGIC 0x46544346u /* "FTCF" */
#define FT__FRAME_MAX_PAYLOAD (64u << 20)

/*
 * Link handshake: three messages, the first two of which cross nothing.
 *   hello   connector -> acceptor: struct ft__hello with a fresh nonce Nc and
 *           a MAC under the token over every byte before it (ft__hello_seal);
 *   answer  acceptor -> connector: struct ft__hello_ack with a fresh nonce Na
 *           of its own (the challenge) and a MAC over Nc, Na and the status
 *           (ft__hello_ack_seal), so that the connector knows the acceptor
 *           holds the token too (ft__hello_ack_check);
 *   proof   connector -> acceptor: struct ft__hello_proof, a MAC over the
 *           whole hello (Nc, both ranks, generation, kind, job) and Na
 *           (ft__hello_proof_seal), before any frame.
 * The tcp acceptor takes a link only once its proof checks out
 * (ft__hello_proof_check): a copy of a hello seen on the wire gets an answer
 * with another Na, which only the holder of the token can prove, so a copy
 * raced ahead of the original never owns a link (the replay cache is only
 * a second line now). The connector never waits for the answer in connect:
 * its peer may be connecting to its own neighbour; it answers the challenge
 * from progress and accept, and holds its frames until the proof is out.
 * (fabric: the same over MSG endpoints; RDM routes every answer to the
 * endpoint the hello's MAC names: transports/fabric/fabric.h.) Strings are
 * NUL-padded; the job id must match exactly. A wrong token on either side
 * is -FT_EAUTH on both. Fields a transport sends around the hello go under
 * a MAC of their own bound to it (ft__hello_ext_seal).
 */
#define FT__HELLO_NONCE 16
#define FT__HELLO_MAC 32

struct ft__hello {
	uint32_t magic;
	uint16_t version;
	uint16_t kind;          /* enum ft__link_kind */
	uint32_t generation;
	int32_t from_rank;      /* original rank of the connecting side */
	int32_t to_rank;        /* original rank it wants to reach */
	uint32_t incarnation;   /* restart count of the connecting rank */
	uint32_t epoch;         /* data links: the round of links within a generation (comm.c) */
	uint32_t reserved;
	char job_id[128];
	uint8_t nonce[FT__HELLO_NONCE];  /* fresh for every hello */
	uint8_t mac[FT__HELLO_MAC];      /* HMAC-SHA256(token, label || every byte above) */
};

struct ft__hello_ack {
	uint32_t magic;
	int32_t status;         /* 0 or a negative FT_E* code */
	uint8_t challenge[FT__HELLO_NONCE];      /* Na: fresh, what the proof must cover */
	uint8_t mac[FT__HELLO_MAC];      /* HMAC(token, label || hello's nonce || magic..Na) */
};

struct ft__hello_proof {
	uint32_t magic;
	uint32_t reserved;
	uint8_t mac[FT__HELLO_MAC];      /* HMAC(token, label || the whole hello || Na) */
};

enum ft__link_kind { FT__LINK_DATA = 1, FT__LINK_CONTROL = 2 };

enum ft__frame_type { FT__FRAME_DATA = 1, FT__FRAME_ABORT = 2 };

enum ft__coll_kind {
	FT__COLL_ALLREDUCE = 1,
	FT__COLL_BROADCAST = 2,
	FT__COLL_BARRIER = 3,
	FT__COLL_INVALID = 4,    /* stands in for a call with bad arguments */
	FT__COLL_REDUCE_SCATTER = 5,
	FT__COLL_ALLGATHER = 6
};

/*
 * Header of every frame on a data link. The receiver posts the header it
 * expects; the transport compares the received one (ft__frame_check) before a
 * byte of payload lands in the posted buffer. count/dtype/op/kind/root
 * describe the collective so that ranks calling with different arguments
 * are told so (FT_EMISMATCH) instead of exchanging garbage.
 */
struct ft__frame {
	uint32_t magic;
	uint16_t type;          /* enum ft__frame_type */
	uint8_t kind;           /* enum ft__coll_kind */
	uint8_t dtype;
	uint32_t generation;
	uint8_t op;
	uint8_t flags;
	uint16_t algo;          /* enum ft__frame_algo: how the sender runs the op */
	uint64_t op_seq;
	uint64_t count;         /* elements (allreduce) or bytes (broadcast) */
	int32_t root;
	uint32_t step;
	uint32_t seg;
	uint32_t crc;           /* CRC32C of the payload when FT__FRAME_F_CRC is set */
	uint64_t offset;        /* byte offset of the payload in the collective's buffer */
	uint64_t length;        /* payload bytes that follow */
	int32_t status;         /* FT__FRAME_ABORT: the negative error code carried */
	uint32_t reserved2;
};

#define FT__FRAME_F_CRC 1u

/* The algorithm a data frame belongs to: ranks that chose differently
 * (different arguments, or FTCC_ALGORITHM) disagree on it, FT_EMISMATCH. */
enum ft__frame_algo { FT__ALGO_RING = 0, FT__ALGO_RD = 1, FT__ALGO_RH = 2, FT__ALGO_TREE = 3 };

/*
 * Returns 0 when got is the frame expect describes, the (negative) code
 * carried by a well-formed abort frame, -FT_EMISMATCH when the peer runs a
 * different collective, -FT_ESTALE for an older generation and -FT_EPROTO
 * for anything else. Never trusts got's length beyond comparing it.
 */
int ft__frame_check(const struct ft__frame *expect, const struct ft__frame *got);
/* Fills h's nonce with fresh random bytes and its MAC under token: 0, or
 * -FT_EIO when the kernel gives no random bytes. Seal after the last change. */
int ft__hello_seal(struct ft__hello *h, const char *token);
/*
 * Returns 0 when got may open a link described by expect (from_rank -1:
 * any), got's MAC checked under token; -FT_EAUTH for another job, protocol
 * version or token, -FT_ESTALE for an older generation, -FT_EPROTO for
 * anything else. Pure: the caller refuses a nonce it has accepted before.
 */
int ft__hello_check(const struct ft__hello *expect, const struct ft__hello *got, const char *token);
/* The answer to the hello whose nonce is given, with status (0: accepted)
 * and challenge (NULL: none, zeros; a refusal needs none). */
void ft__hello_ack_seal(struct ft__hello_ack *ack, const uint8_t nonce[FT__HELLO_NONCE],
		       const uint8_t challenge[FT__HELLO_NONCE], int status, const char *token);
/* The connector's reading of an answer to its hello of that nonce: the
 * status it carries (0, or why the acceptor refused); -FT_EAUTH when its MAC
 * does not check out under token (the acceptor holds another token), or
 * -FT_EPROTO when it is malformed. */
int ft__hello_ack_check(const struct ft__hello_ack *ack, const uint8_t nonce[FT__HELLO_NONCE],
		       const char *token);
/* The connector's proof that it sent hello h and holds the token, for the
 * answer's challenge. */
void ft__hello_proof_seal(struct ft__hello_proof *p, const struct ft__hello *h,
			 const uint8_t challenge[FT__HELLO_NONCE], const char *token);
/* 0 when p proves h for challenge under token, else -FT_EAUTH. */
int ft__hello_proof_check(const struct ft__hello_proof *p, const struct ft__hello *h,
			 const uint8_t challenge[FT__HELLO_NONCE], const char *token);
/* A MAC under token over the sealed hello h and the len bytes of ext, the
 * fields a transport sends with it (ext must hold no padding). */
void ft__hello_ext_seal(const struct ft__hello *h, const void *ext, size_t len, const char *token,
		       uint8_t mac[FT__HELLO_MAC]);
/* 0 when mac is that MAC, else -FT_EAUTH. */
int ft__hello_ext_check(const struct ft__hello *h, const void *ext, size_t len, const char *token,
		       const uint8_t mac[FT__HELLO_MAC]);

struct ft__transport;
struct ft__link;

enum ft__tp_event_type {
	FT__TP_SEND_DONE = 1,    /* a posted send left the process (its buffer is free) */
	FT__TP_RECV_DONE = 2,    /* a posted receive holds its frame's payload */
	FT__TP_LINK_ERROR = 3    /* the link is broken; pending operations are dropped */
};

struct ft__tp_event {
	int type;
	int status;             /* 0, or negative FT_E* code (LINK_ERROR, failed RECV) */
	struct ft__link *link;
	void *ctx;              /* as given when posting */
	int peer;               /* original rank of the link's peer */
};

/* FTCC_ALGORITHM's values, in config.c's order. */
enum ft__tp_algo { FT__TP_ALGO_AUTO, FT__TP_ALGO_RING, FT__TP_ALGO_RD, FT__TP_ALGO_RH };

enum ft__tp_fabric_wait { FT__TP_FABRIC_WAIT_DEFAULT, FT__TP_FABRIC_WAIT_POLL, FT__TP_FABRIC_WAIT_BELL };

/*
 * Transport knobs from the environment, read once at ft_init by config.c
 * (ft__config_tp_env) and only there: transports never call getenv.
 */
struct ft__tp_env {
	int world_size;             /* ranks in the job */
	int local_ranks;            /* ranks on this host per the launcher; 0: not known */
	long spin_us;               /* FTCC_SPIN_US; -1: the engine's choice */
	size_t tcp_buffer;          /* FTCC_TCP_BUFFER: SO_SNDBUF/SO_RCVBUF; 0: autotuning */
	char fabric_provider[64];   /* FTCC_FABRIC_PROVIDER, else FI_PROVIDER; "": choose */
	char fabric_ep[8];          /* FTCC_FABRIC_EP: "", "rdm" or "msg" */
	int fabric_wait;            /* FTCC_FABRIC_WAIT: enum ft__tp_fabric_wait */
	int fabric_link_ep;         /* FTCC_FABRIC_LINK_EP: -1 default, 0 or 1 */
	int fabric_mr_local;        /* FTCC_FABRIC_MR_LOCAL: 1 registers even unasked */
	size_t fabric_max_msg;      /* FTCC_FABRIC_MAX_MSG: 0 the provider's */
	int shm_guard;              /* FTCC_SHM_GUARD: 1 (default) or 0 */
	int shm;                    /* FTCC_SHM: 1 (default) the one-host path, or 0 */
	int algorithm;              /* FTCC_ALGORITHM: enum ft__tp_algo */
	size_t shm_bytes;           /* FTCC_SHM_BYTES: each rank's segment */
	int shm_cma;                /* FI_SHM_DISABLE_CMA as libfabric reads it: -1 unset,
				     * 0 CMA off (SAR), 1 CMA on */
	int incarnation;            /* FTCC_INCARNATION (ftcc-run --restart counts them); 0 */
	int log_pwrite;             /* FTCC_LOG_ENGINE=pwrite: the pairwise log without io_uring */
	char default_log_root[512];    /* where logs go when FTCC_LOG_DIR is unset (checked
					* private: lib/util/file.h) */
	char default_rendezvous[512];  /* the per-user rendezvous ranks meet in under a
					* launcher when none is given (checked private) */
	char ckpt_dir[512];         /* FTCC_CKPT_DIR: checkpoints' base directory; "": the log's */
	char ckpt_from[512];        /* FTCC_CKPT_FROM: an exported checkpoint to start from; "": none */
	int ckpt_where;             /* FTCC_CKPT_WHERE: enum ft_ckpt_where; 0: unset */
	int ckpt_local;             /* FTCC_CKPT_LOCAL: 1 single-copy fetches on one kernel; 0 not */
	char launcher_addrs[256];   /* host:port of the launcher (Open MPI's mpirun), comma-
				     * separated: where a rank looks for its interface; "" */
};

struct ft__tp_params {
	int rank;               /* original rank */
	/* Where to listen and the address to publish (ft__sock_choose_host in
	 * lib/util/sock.h): bind_host NULL or "": 127.0.0.1; publish_host NULL or
	 * "": the bound address. A transport that cannot listen on a wildcard
	 * binds publish_host. */
	const char *bind_host;
	const char *publish_host;
	const char *job_id;
	const char *token;
	size_t max_payload;     /* largest frame payload the engine will post (0: not known yet) */
	int log_level;
	/* Sockets the transport makes itself (tcp; libfabric's providers keep
	 * their own): keepalive and TCP_USER_TIMEOUT, 0 the kernel's (sock.h,
	 * ft__config_data_link_timeouts). */
	int keepalive_ms;
	int user_timeout_ms;
	/* Optional: a blocking accept returns -FT_EABORTED within about 20 ms
	 * once interrupted(interrupt_arg) is true (a failure is being handled). */
	bool (*interrupted)(void *arg);
	void *interrupt_arg;
	const struct ft__tp_env *env;    /* never NULL */
};

/*
 * A transport is a table of operations. Blocking: open, connect and accept
 * block up to their deadline; post_send/post_recv never block; progress
 * blocks up to timeout_ms in the kernel (never spins). Ownership: buffers
 * given to post_* are borrowed until their completion event or the link's
 * close; the transport owns its links. link_close and close are safe on a
 * half-made object. All return 0 or a negative FT_E* code.
 */
struct ft__transport_ops {
	size_t size;            /* sizeof(struct ft__transport_ops) */
	const char *name;
	int (*open)(const struct ft__tp_params *params, struct ft__transport **out);
	/* Address to publish through the rendezvous; NUL-terminated text. */
	int (*local_addr)(struct ft__transport *tp, char *buf, size_t len);
	/* Connect to addr and send hello, sealed by the caller with params' token
	 * (deadline in ms). Never waits for the answer: a refusal, or an answer
	 * without proof of the token (-FT_EAUTH), is a link error later; the
	 * answer's challenge is proved from progress or accept (tcp), before
	 * the link's first frame. */
	int (*connect)(struct ft__transport *tp, const char *addr, const struct ft__hello *hello,
		       int timeout_ms, struct ft__link **out);
	/* Accept the next incoming link whose hello passes ft__hello_check(expect,
	 * ·, params' token) with a nonce not accepted before and (tcp) whose
	 * proof answers this side's challenge, meanwhile answering the
	 * challenges to this transport's own connects; refuses (and logs)
	 * anything else; fills *got with its hello. At the deadline: -FT_EAUTH
	 * when a hello claiming expect's from_rank failed for its token, job or
	 * version, else -FT_ETIMEDOUT. */
	int (*accept)(struct ft__transport *tp, const struct ft__hello *expect, int timeout_ms,
		      struct ft__link **out, struct ft__hello *got);
	/* Queue a frame: hdr then len bytes of buf (hdr is copied). */
	int (*post_send)(struct ft__link *link, const struct ft__frame *hdr, const void *buf,
			 void *ctx);
	/* Queue a receive of the frame described by expect into buf (expect is copied;
	 * expect->length is exactly what buf takes). Receives complete in order. */
	int (*post_recv)(struct ft__link *link, const struct ft__frame *expect, void *buf,
			 void *ctx);
	/* Make progress; wait up to timeout_ms (-1: forever, 0: poll) for at least
	 * one event; return the number of events written to ev (0 on timeout). */
	int (*progress)(struct ft__transport *tp, int timeout_ms, struct ft__tp_event *ev,
			int max_ev);
	/* Best effort: send an abort frame after the frame in flight, then close. */
	void (*link_abort)(struct ft__link *link, const struct ft__frame *abort_frame);
	void (*link_close)(struct ft__link *link);
	void (*close)(struct ft__transport *tp);
	/* Optional (NULL: the engine's default of 256 KiB): the pipeline segment
	 * size this transport moves best, used when the configuration leaves it 0. */
	size_t (*segment_bytes)(struct ft__transport *tp);
	/* Optional (NULL: a failure reaches a waiting op on the engine's tick):
	 * progress also returns, with no event, as soon as fd is readable (and
	 * again while it stays so): the detector's wake fd, so that an op waiting
	 * on peers learns of a failure at once. One fd; the caller keeps it open
	 * until close. 0 or a negative FT_E* code. */
	int (*watch_fd)(struct ft__transport *tp, int fd);
	/* Optional, from any thread (the detector's): the settled view left out
	 * original rank rank. fabric's shm guard then kills it if it still
	 * lives while a lock of a shared region stays held, since a rank
	 * stopped inside the provider would wedge this one (fabric/guard.c). */
	void (*left_out)(struct ft__transport *tp, int rank);
};

/* Whether ops has the optional operation op (a table from an older, shorter
 * struct ft__transport_ops has not). */
#define FT__TP_HAS(ops, op) \
	((ops)->size > offsetof(struct ft__transport_ops, op) && (ops)->op != NULL)

const struct ft__transport_ops *ft__transport_lookup(const char *name);
struct ft__fault;
/* Puts the fault transport (transports/fault_transport.c) around ops and tp, which it
 * then owns: FTCC_FAULT's points f strike where this rank's (original rank)
 * frames are sent and received; ring_size(arg) is the current view's size.
 * 0, or -FT_ENOMEM with ops and tp unchanged. */
int ft__fault_wrap(struct ft__fault *f, int rank, int (*ring_size)(void *arg), void *arg,
		   const struct ft__transport_ops **ops, struct ft__transport **tp);
/* tcp: answers the challenges that came back to tp's connects, reporting
 * nothing (accept and progress do it themselves): for a test that holds
 * both ends of a link and accepts on one while the other waits. Not for
 * use from another thread than tp's owner. */
void ft__tcp_answer_challenges(struct ft__transport *tp);

#ifdef __cplusplus
}
#endif

#endif /* FTCC_TRANSPORT_H */
