/* ftcc.h: the public API of ftcc, a fault-tolerant collective communication library. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_H
#define FTCC_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version, defined here only: the Makefile reads it for the shared
 * library's soname (libftcc.so.MAJOR) and for ftcc.pc. */
#define FTCC_VERSION_MAJOR 0
#define FTCC_VERSION_MINOR 7
#define FTCC_VERSION_PATCH 0
#define FTCC__STR(x) #x
#define FTCC__XSTR(x) FTCC__STR(x)
#define FTCC_VERSION                                                                      \
	FTCC__XSTR(FTCC_VERSION_MAJOR) "." FTCC__XSTR(FTCC_VERSION_MINOR) "." FTCC__XSTR( \
		FTCC_VERSION_PATCH)

/* The library's version at run time ("0.7.0"): FTCC_VERSION as libftcc was
 * built, which may differ from the header a program was compiled against.
 * Never NULL; any thread, any time. */
const char *ft_version(void);

/*
 * Errors. Every call returns 0 or the negative of one of these codes.
 * Codes that have an errno equivalent use its value; ftcc's own codes sit
 * above FT_ERR_BASE. XX(name, value, message).
 */
#define FT_ERR_BASE 4096
#define FT_ERROR_MAP(XX)                                                                 \
	XX(INVAL, EINVAL, "invalid argument")                                            \
	XX(NOMEM, ENOMEM, "out of memory")                                               \
	XX(IO, EIO, "input/output error")                                                \
	XX(NOSYS, ENOSYS, "not supported by this build or transport")                    \
	XX(BUSY, EBUSY, "busy: a port or this rank is held by another process (see the log)") \
	XX(TIMEDOUT, ETIMEDOUT, "timed out")                                             \
	XX(CONNREFUSED, ECONNREFUSED, "connection refused")                              \
	XX(ACCES, EACCES, "refused: a directory or file that is not this user's")        \
	XX(NOSPC, ENOSPC, "no space left on the device")                                 \
	XX(MFILE, EMFILE, "out of file descriptors (this process's limit or the system's)") \
	XX(CONFIG, FT_ERR_BASE + 1, "bad configuration or environment variable")         \
	XX(PEERFAILED, FT_ERR_BASE + 2, "a peer failed")                                 \
	XX(EXCLUDED, FT_ERR_BASE + 3, "this rank is not a member of the current view")   \
	XX(STALE, FT_ERR_BASE + 4, "message from a stale membership generation")         \
	XX(CORRUPT, FT_ERR_BASE + 5, "corrupt log or checkpoint record")                 \
	XX(PROTO, FT_ERR_BASE + 6, "protocol error: malformed or unexpected frame")      \
	XX(MISMATCH, FT_ERR_BASE + 7, "ranks disagree on the collective's arguments")    \
	XX(AUTH, FT_ERR_BASE + 8, "handshake refused: wrong job id, token or version")   \
	XX(FINALIZED, FT_ERR_BASE + 9, "communicator is finalized")                      \
	XX(ROOTFAILED, FT_ERR_BASE + 10, "the root of the broadcast failed")             \
	XX(ABORTED, FT_ERR_BASE + 11, "collective aborted by a peer")                    \
	XX(PARTITIONED, FT_ERR_BASE + 12,                                                \
	   "this rank's side of a network partition has no quorum: it stopped")          \
	XX(ENDED, FT_ERR_BASE + 13,                                                      \
	   "the job has ended: every other rank finalized")                             \
	XX(STATELOST, FT_ERR_BASE + 14,                                                  \
	   "the registered state is lost: every member is a new incarnation awaiting it")

enum ft_error {
#define FT__ERR_ENUM(name, value, msg) FT_E##name = (value),
	FT_ERROR_MAP(FT__ERR_ENUM)
#undef FT__ERR_ENUM
};

/* Message for a (negative) error code; never NULL. */
const char *ft_strerror(int err);
/* Symbolic name ("FT_EINVAL") for a (negative) error code; never NULL. */
const char *ft_err_name(int err);

enum ft_dtype {
	FT_FLOAT32,
	FT_FLOAT64,
	FT_FLOAT16,
	FT_BFLOAT16,
	FT_INT32,
	FT_INT64,
	FT_UINT8,
	FT_DTYPE_COUNT
};

enum ft_op { FT_SUM, FT_PROD, FT_MIN, FT_MAX, FT_AVG, FT_OP_COUNT };

/* Bytes per element of a dtype, 0 for an unknown one. */
size_t ft_dtype_size(enum ft_dtype dtype);

enum ft_policy { FT_POLICY_ABORT, FT_POLICY_SHRINK, FT_POLICY_REJOIN };
enum ft_durability { FT_DURABILITY_NONE, FT_DURABILITY_PROCESS, FT_DURABILITY_HOST };

/* Pass as sendbuf to reduce in place in recvbuf. */
#define FT_IN_PLACE ((const void *)1)

#define FT_NAME_MAX 128
#define FT_PATH_MAX 512

/*
 * Configuration of one communicator. Start from FT_CONFIG_INIT (or
 * ft_config_from_env, which starts from it and applies FTCC_* variables).
 *
 * The environment with a struct: ft_init given a cfg takes every field from
 * it and reads no FTCC_* variable that has a field here; but 18 settings
 * have none and are read from the environment at every ft_init whatever it
 * is given: FTCC_SPIN_US, FTCC_TCP_BUFFER, FTCC_INCARNATION,
 * FTCC_LOG_ENGINE, FTCC_SHM_GUARD, FTCC_ALGORITHM; the one-host path's
 * FTCC_SHM and FTCC_SHM_BYTES; the libfabric ones, FTCC_FABRIC_PROVIDER,
 * FTCC_FABRIC_EP, FTCC_FABRIC_WAIT, FTCC_FABRIC_MAX_MSG,
 * FTCC_FABRIC_MR_LOCAL, FTCC_FABRIC_LINK_EP; and the checkpoints'
 * FTCC_CKPT_DIR, FTCC_CKPT_FROM, FTCC_CKPT_WHERE (each where struct
 * ft_ckpt_config leaves its field empty) and FTCC_CKPT_LOCAL.
 * docs/environment.md lists every variable: type, range, default, field.
 *
 * Versioning: struct_size is sizeof(struct ft_config) as the program was
 * compiled; FT_CONFIG_INIT and ft_config_from_env set it. New fields are only
 * ever appended, so one library serves programs built against older and
 * newer headers alike:
 * - an older, smaller struct: ft_init reads the fields it has and gives the
 *   rest their FT_CONFIG_INIT defaults;
 * - a newer, larger struct: ft_init accepts it when every field this library
 *   does not know is zero (its default), and refuses it with -FT_EINVAL
 *   otherwise (an option set that this library would silently ignore);
 * - struct_size 0 (a struct filled field by field without FT_CONFIG_INIT),
 *   or below the first versioned layout (ftcc 0.2), or absurdly large:
 *   -FT_EINVAL, and nothing past the first field is read.
 */
struct ft_config {
	size_t struct_size;             /* sizeof(struct ft_config); set by FT_CONFIG_INIT */
	int rank;                       /* this process, 0..world_size-1 */
	int world_size;                 /* ranks at ft_init */
	char rendezvous[FT_PATH_MAX];   /* rendezvous directory */
	char job_id[FT_NAME_MAX];       /* job identity, same on every rank */
	char token[FT_NAME_MAX];        /* shared secret checked in every handshake */
	char transport[32];             /* "tcp" or "fabric" */
	char bind_host[64];             /* address or interface to listen on; "" = chosen
					 * (docs/launchers.md) */
	enum ft_policy policy;
	char log_dir[FT_PATH_MAX];
	enum ft_durability log_durability;
	int heartbeat_ms;               /* the failure detector's heartbeat */
	int detect_timeout_ms;          /* heartbeat silence that declares a neighbour: at
					 * least 2 x heartbeat_ms and 50 (else -FT_EINVAL) */
	int rejoin_timeout_ms;
	int connect_timeout_ms;         /* rendezvous and link set-up deadline */
	int op_timeout_ms;              /* a collective making no progress this long fails; 0 = never */
	size_t segment_bytes;           /* pipeline segment size; 0 = the transport's choice */
	int pipeline_depth;             /* receive slots in flight per link */
	int crc;                        /* 1: CRC32C on every data frame */
	char fault[256];                /* FTCC_FAULT spec, "" = none */
	char trace[FT_PATH_MAX];        /* FTCC_TRACE file, "" = none */
	int log_level;                  /* 0 error, 1 warn, 2 info, 3 debug */
	/* ftcc 0.6: membership across hosts (docs/launchers.md); "" = chosen */
	char membership[16];            /* "file" (rendezvous directory) or "inband" */
	char bootstrap[16];             /* inband's first addresses: "pmix", "store", "peers" */
	char store[256];                /* host:port of the address store (ftcc-run --store) */
	char peers[4096];               /* host:port of each rank's membership listener, by rank,
					 * comma-separated */
	/* ftcc 0.7: with token "", "" makes one and shares it where the job has a
	 * private channel (docs/security.md); "none" runs unauthenticated */
	char auth[16];
};

/* In declaration order, not with designators: the same text is C11 and C++
 * (designated initializers are C++20), and every field is named, so that
 * -Wextra's missing-initializer warning finds none left out. */
#define FT_CONFIG_INIT                                                                   \
	{                                                                                \
		sizeof(struct ft_config), /* struct_size */                              \
		-1, -1,                   /* rank, world_size */                         \
		"", "", "",               /* rendezvous, job_id, token */                \
		"tcp", "",                /* transport, bind_host */                     \
		FT_POLICY_ABORT, "",      /* policy, log_dir */                          \
		FT_DURABILITY_PROCESS,    /* log_durability */                           \
		100, 1000, 30000,         /* heartbeat, detect_timeout, rejoin_timeout (ms) */ \
		30000, 0,                 /* connect_timeout, op_timeout (ms) */         \
		0, 4, 0,                  /* segment_bytes, pipeline_depth, crc */       \
		"", "", 1,                /* fault, trace, log_level */                  \
		"", "", "", "",           /* membership, bootstrap, store, peers */      \
		""                        /* auth */                                     \
	}

/*
 * Fill cfg from FT_CONFIG_INIT and the environment (FTCC_*, else the
 * launcher's OMPI_COMM_WORLD_* / PMI_*). On error returns -FT_ECONFIG and
 * writes a message naming the variable into errbuf (if errbuf != NULL).
 * A macro, so that the library learns how large the caller's struct is and
 * never writes past it: ft_config_from_env_size is the function behind it.
 */
#define ft_config_from_env(cfg, errbuf, errlen) \
	ft_config_from_env_size((cfg), sizeof(struct ft_config), (errbuf), (errlen))
int ft_config_from_env_size(struct ft_config *cfg, size_t cfg_size, char *errbuf, size_t errlen);

struct ft_comm;

/* What happened during one collective. */
struct ft_op_info {
	uint64_t op_seq;        /* sequence number of this collective on the communicator */
	uint32_t generation;    /* membership generation at completion */
	int contributors;       /* ranks whose inputs the result holds */
	int failed;             /* ranks lost during the call */
	double recovery_ms;     /* time spent recovering, 0 if none */
	double elapsed_ms;      /* wall time of the call */
};

/*
 * Threads. Every call on one communicator (collectives, state, checkpoints,
 * the accessors ft_rank/ft_size/ft_orig_rank/ft_generation, ft_finalize)
 * must come from one thread at a time: the caller serializes them (the
 * library's own threads, the failure detector and the shm guard, never
 * call back into the application). Calls on different communicators may
 * run on different threads at once. ft_strerror, ft_err_name, ft_version,
 * ft_dtype_size and ft_ckpt_interval_for_pls may be called from any thread
 * at any time; ft_init and ft_config_from_env read the environment (ft_init
 * even when given a cfg: the settings struct ft_config has no field for)
 * and must not race a setenv.
 *
 * Blocking. ft_init blocks until the job's first view settles (at most
 * connect_timeout_ms); collectives block until their result is held
 * (recovering from failures on the way, under the policy); ft_finalize
 * blocks as its comment below says (under shrink and rejoin it may wait for
 * the other members to finalize too). Buffers are the caller's, borrowed
 * for the call only.
 *
 * fork(). A child forked after ft_init (a data loader's workers) holds
 * none of the communicator's descriptors: the library closes them in the
 * child at fork (pthread_atfork), so that the child neither hides this
 * rank's death from its peers nor keeps its rendezvous lock from its
 * restart. The child must not call ftcc on the parent's communicator; it
 * may ft_init one of its own. (The fabric transport's libfabric-internal
 * descriptors are the exception: docs/failures.md.)
 *
 * cfg NULL: configuration from the environment.
 *
 * A new incarnation (FTCC_INCARNATION > 0) of a rank whose job has ended
 * without it (every other rank finalized) fails at once with -FT_EENDED
 * (file rendezvous: docs/rejoin.md). Under the rejoin and shrink
 * policies (file rendezvous), one whose job still runs returns once a view
 * takes it back: the next view after a failure, or, when the job went on
 * without its rank (shrink; rejoin once the rejoin timeout passed), the
 * view the survivors settle at their next allreduce or barrier (growing
 * back: docs/rejoin.md); ft_rejoined then returns 1. It blocks until then, for at
 * most rejoin_timeout_ms + 2 x detect_timeout_ms + connect_timeout_ms
 * (-FT_ETIMEDOUT), and fails with -FT_EENDED as soon as no other rank of
 * the job lives.
 *
 * In-band membership (cfg.membership "inband"; rejoin, and shrink): a new
 * incarnation finds its job by asking the ranks of its address book (a peer
 * list with its own entry where it runs now, or ftcc-run's store) and is
 * taken back by the next view after its rank's failure, or, when the job
 * went on without its rank (shrink; rejoin once the rejoin timeout passed),
 * grows back as under the file rendezvous; no rank answering within 2 x
 * detect_timeout_ms (2 s at least): -FT_EENDED; a rank killed inside
 * ft_init, before the job's first view settled (that view goes on without
 * it): -FT_EEXCLUDED at once.
 *
 * Errors (ft_init; *comm is NULL after any of them):
 * -FT_EINVAL: comm NULL; cfg whose struct_size is no version this library
 *   knows, or that sets fields it does not know; a field out of its range
 *   or inconsistent (docs/environment.md gives the ranges; the error log
 *   names the field).
 * -FT_ECONFIG: cfg NULL and a variable missing or malformed (FTCC_RANK and
 *   FTCC_WORLD_SIZE or a launcher's, FTCC_RENDEZVOUS under the file
 *   rendezvous, any FTCC_* out of its range), named in the log; one of the
 *   settings read from the environment even with a cfg malformed; a
 *   malformed fault spec; no token and no private channel to share a made
 *   one (FTCC_PEERS, FTCC_STORE: set FTCC_TOKEN); the address store refused
 *   this rank.
 * -FT_ENOSYS: the transport or bootstrap is not built in or cannot be
 *   loaded (fabric without libfabric, pmix without PMIx).
 * -FT_EBUSY: this rank is held by a live process on the rendezvous (a
 *   second ft_init of it), or the port this rank must listen on (its
 *   FTCC_PEERS entry) is taken by another socket; the log says which.
 * -FT_EACCES: the rendezvous, the job's directory or its token file is not
 *   this user's private one (another user's, a symbolic link, group- or
 *   world-writable).
 * -FT_EAUTH: a peer or the address store refused this rank's handshake:
 *   another token, job id or ftcc version.
 * -FT_ETIMEDOUT: the job's first view did not settle within
 *   connect_timeout_ms (a rank missing or unreachable); a new incarnation
 *   not taken back within its bound (above).
 * -FT_EENDED, -FT_EEXCLUDED: a new incarnation whose job ended, or went on
 *   without it (above).
 * -FT_EPEERFAILED: abort policy: a rank failed during ft_init (under shrink
 *   and rejoin the first collective recovers instead).
 * Any error of ft_barrier, which ft_init ends with (-FT_EPARTITIONED under
 *   in-band membership, ...).
 * -FT_ENOMEM, -FT_EMFILE, -FT_ENOSPC, -FT_EIO: the system's shortages and
 *   errors (logged).
 */
int ft_init(const struct ft_config *cfg, struct ft_comm **comm);
/*
 * Releases everything the communicator holds; the handle stays valid only
 * to return -FT_EFINALIZED. -FT_EIO: finalized all the same, but this rank's
 * departure could not be recorded in the rendezvous, so the survivors'
 * next view waits for it (2 x detect_timeout_ms) instead of settling at once.
 *
 * Blocking. Under abort (or on a communicator a failure broke) it only
 * records this rank's departure and closes its links. Under shrink and
 * rejoin, when the communicator has two members, or (shrink, three or
 * more) this rank's last collective was a small op it returned before the
 * others surely held the result, it first runs one more barrier with the
 * other members, so that none is left without that op's result: it then
 * returns once every other member has called ft_finalize too, or has
 * failed (a member that does neither keeps it waiting, op_timeout_ms
 * bounding the wait as for a collective). Its outcome is not returned.
 */
int ft_finalize(struct ft_comm *comm);

/*
 * The membership as this rank sees it. ft_size: how many members; ft_rank:
 * this rank's place among them (0 .. ft_size() - 1, members in the order
 * of their ranks at ft_init); ft_orig_rank: the rank at ft_init of the
 * member at place rank; ft_generation: the membership's (0 for the job's
 * first view, one more for each view settled since). They never block and
 * change only inside calls: after a collective returns 0 they describe the
 * membership its result was computed in (under shrink, possibly the
 * survivors' already: docs/failures.md; or a view that grew
 * back: ranks taken in again before the call ran). -FT_EINVAL for comm
 * NULL (ft_orig_rank: also a rank outside 0 .. ft_size() - 1),
 * -FT_EFINALIZED after ft_finalize; ft_generation returns 0 for both.
 * Threads: see "Threads." above ft_init.
 */
int ft_rank(const struct ft_comm *comm);
int ft_size(const struct ft_comm *comm);
int ft_orig_rank(const struct ft_comm *comm, int rank);
uint32_t ft_generation(const struct ft_comm *comm);

/*
 * Reduces count elements of dtype with op over every member's sendbuf into
 * every member's recvbuf. FT_IN_PLACE as sendbuf (or sendbuf == recvbuf):
 * recvbuf holds the input and gets the result; otherwise sendbuf is only
 * read and must not overlap recvbuf. Both are borrowed for the call only,
 * and may be NULL when count is 0. Blocks until every member has called it
 * and this rank holds the result: with op_timeout_ms 0, for as long as the
 * peers live (under abort the kernel may fail a link its peer leaves unread
 * for connect_timeout_ms: docs/failures.md); else -FT_ETIMEDOUT after
 * op_timeout_ms without a frame sent or received. info may be NULL; it is
 * filled whenever the collective ran, failed or not.
 *
 * Errors: -FT_EINVAL: comm NULL, an unknown dtype or op, a NULL buffer with
 * count > 0, count above SIZE_MAX / 8 (this rank still meets the others in
 * the ring, so that they get -FT_EMISMATCH instead of waiting);
 * -FT_EFINALIZED; -FT_EMISMATCH: the members disagree on count, dtype or op,
 * or call another collective (the communicator stays usable);
 * -FT_EPEERFAILED, -FT_ETIMEDOUT, -FT_EEXCLUDED (the view went on without
 * this rank): later collectives return it at once (bad arguments aside);
 * -FT_EPARTITIONED (in-band membership); the transport's and the system's
 * (-FT_EPROTO, -FT_ENOMEM, -FT_EIO, ...). After an error recvbuf is
 * undefined.
 *
 * A member lost during the call. abort: -FT_EPEERFAILED. shrink: 0, with a
 * result exact over the inputs of info->contributors members (FT_AVG
 * divides by that number): the survivors, who ran the op again from their
 * own inputs, or all of them if the result was complete before the loss.
 * rejoin: the survivors wait up to rejoin_timeout_ms for its new
 * incarnation, and the result is then the failure-free one, bit for bit;
 * nobody back: as shrink. A wait for the next view fails the call with
 * -FT_ETIMEDOUT after 2 x detect_timeout_ms + connect_timeout_ms (rejoin:
 * + rejoin_timeout_ms). Threads: see "Threads." above ft_init.
 */
int ft_allreduce(struct ft_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
		 enum ft_dtype dtype, enum ft_op op, struct ft_op_info *info);
/*
 * Copies bytes bytes of buf on member root (a place 0 .. ft_size() - 1, as
 * ft_rank numbers them) into buf on every other member. buf is borrowed for
 * the call only, read on the root and written elsewhere; it may be NULL
 * when bytes is 0. A member returns once it holds the data (shrink and
 * rejoin, three members or more: once all do), the root once all do (the
 * last answers it). Bounds, info and errors as ft_allreduce's; -FT_EINVAL
 * also for root outside 0 .. ft_size() - 1 or bytes above SIZE_MAX / 2;
 * -FT_EMISMATCH also when the members disagree on bytes or root. A member
 * lost during the call. abort: -FT_EPEERFAILED. shrink: the survivors run
 * it again and return 0, but a lost root gives -FT_EROOTFAILED on every
 * survivor (0 if the data had reached them all) and the communicator stays
 * usable. rejoin: a lost root is awaited as any rank; -FT_EROOTFAILED if
 * the view goes on without it. Threads: see "Threads." above ft_init.
 */
int ft_broadcast(struct ft_comm *comm, void *buf, size_t bytes, int root,
		 struct ft_op_info *info);
/*
 * Returns once every member has entered it: an allreduce of nothing, which
 * blocks and fails as ft_allreduce does (-FT_EINVAL only for comm NULL;
 * -FT_EMISMATCH when a member calls another collective). A member lost
 * during it. abort: -FT_EPEERFAILED. shrink: the survivors complete it
 * among themselves and return 0. rejoin: they wait for its new incarnation
 * first, as in ft_allreduce. Threads: see "Threads." above ft_init.
 */
int ft_barrier(struct ft_comm *comm);

/*
 * Sharded training: the ring's two halves. Blocks belong to the members the
 * caller sees when the call begins (ft_size() = n, ft_rank() = r): block i
 * of n is member i's.
 *
 * ft_reduce_scatter: sendbuf holds n blocks of recvcount elements; recvbuf
 * (recvcount elements) receives block r reduced over every member's input.
 * FT_IN_PLACE as sendbuf: recvbuf holds the n blocks; the result is left in
 * block r, at recvbuf + r * recvcount elements (the other blocks are then
 * undefined).
 *
 * ft_allgather: member i's sendbuf (sendcount elements) lands at recvbuf +
 * i * sendcount elements on every member. FT_IN_PLACE as sendbuf: the
 * caller's own block is already at recvbuf + r * sendcount elements.
 *
 * Same dtypes, ops, policies, errors and ft_op_info as ft_allreduce. When
 * a member is lost during the call (shrink), the block layout stays the one
 * the call began with: the survivors' blocks are exact over the survivors'
 * inputs (contributors says how many), and a lost member's block is left
 * undefined (reduce-scatter: nobody receives it; allgather: its contents
 * in recvbuf are unspecified).
 */
int ft_reduce_scatter(struct ft_comm *comm, const void *sendbuf, void *recvbuf,
		      size_t recvcount, enum ft_dtype dtype, enum ft_op op,
		      struct ft_op_info *info);
int ft_allgather(struct ft_comm *comm, const void *sendbuf, void *recvbuf, size_t sendcount,
		 enum ft_dtype dtype, struct ft_op_info *info);

/*
 * Application state.
 *
 * FT_STATE_REPLICATED: the same on every rank (e.g. model parameters and
 * optimizer state in data parallel training). A process that rejoined a
 * running job (rejoin policy) receives every replicated region from a
 * survivor, at its first collective or at ft_state_sync; the survivors send
 * it at the start of that same op, a consistent point (no rank is inside an
 * update).
 *
 * FT_STATE_SHARDED: ptr/bytes is this rank's own part (its shard), a
 * different part on every rank (a parameter server's partition, a fully
 * sharded data parallel shard). Nobody else holds it, so a death loses it:
 * it comes back from the running checkpoint (ft_ckpt_*, below): onto the
 * replacement (rejoin: ft_state_sync restores it, ft_state_restored reports
 * what that cost) or onto survivors that take it over (ft_ckpt_restore).
 * OR FT_STATE_DTYPE(dtype) into flags to say what the bytes hold (default
 * float32): checkpoint priorities measure changes as L2 distances of
 * elements of that type.
 *
 * Ranks must register the same regions, in the same order; replicated
 * regions with the same sizes. At most 64 regions; ptr must stay valid
 * until ft_finalize. Returns the region's index (0, 1, ...) or an error:
 * -FT_EINVAL for flags other than one kind, optionally OR'ed with the
 * FT_STATE_DTYPE of a known dtype, or a sharded region that is not a
 * whole number of its elements. Only replicated regions travel in the
 * live transfer.
 */
#define FT_STATE_REPLICATED 1u
#define FT_STATE_SHARDED 2u
#define FT_STATE_DTYPE(dtype) ((((unsigned)(dtype)) + 1u) << 8)
int ft_state_register(struct ft_comm *comm, void *ptr, size_t bytes, unsigned flags);
/*
 * On a process that rejoined: receives the registered state now (before it
 * computes its next input), then restores each of its sharded regions,
 * every block, from its own running checkpoint (the one its earlier
 * incarnation wrote). Order: register, ft_ckpt_enable, ft_state_sync; when
 * checkpoints are enabled only after ft_state_sync, the shards come back
 * in ft_ckpt_enable instead (and ft_ckpt_step saves nothing before). The
 * restore's error is returned (here or by that ft_ckpt_enable): -FT_ECORRUPT
 * when some block had no valid copy (the others are restored).
 * Elsewhere, and once done: returns 0 at once.
 *
 * Where to resume. The state a newcomer gets is the survivors' as they
 * entered the collective the newcomer must call next (ft_rejoined's
 * next_op), which in a step of several collectives may be its second or
 * third. So a program whose steps run more than one collective registers
 * where it is with its state (a replicated region holding the step and
 * the index of its next collective, written before each call) and resumes
 * exactly there; every collective's input must follow from registered
 * state (examples/train_steps.c). A newcomer whose next call does not
 * match the survivors' (it resumed elsewhere) gets -FT_EEXCLUDED and is
 * sent away; the survivors go on as after a crash. When every member is a
 * new incarnation awaiting the state (each rank that held it died first),
 * it is lost: -FT_ESTATELOST at once on every member (here or from the
 * collective), and the communicator is broken.
 */
int ft_state_sync(struct ft_comm *comm);
/*
 * 1 when this process is a new incarnation that rejoined a running job
 * (rejoin policy), 0 otherwise; *next_op (may be NULL): the op_seq of the
 * next collective this process must call (ft_op_info.op_seq numbering:
 * ft_init's own barrier is op 0, the application's first collective op 1),
 * counting the collectives it called since ft_init (ft_ckpt_enable's
 * agreement among them): ask after ft_ckpt_enable and ft_state_sync.
 */
int ft_rejoined(const struct ft_comm *comm, uint64_t *next_op);

/*
 * Running partial checkpoints (SCAR) of the sharded regions. Each rank
 * checkpoints its own shards, cut into blocks of block_bytes. Every
 * `interval` calls of ft_ckpt_step, a round saves a fraction of the blocks,
 * chosen by the strategy:
 *   FT_CKPT_FULL          every block;
 *   FT_CKPT_ROUND_ROBIN   the next ceil(fraction x blocks) blocks in turn;
 *   FT_CKPT_RANDOM        as many blocks drawn at random (seed);
 *   FT_CKPT_PRIORITY      the blocks that changed most since their last save
 *                         (L2 distance from the saved copy, kept in memory);
 *   FT_CKPT_APP_PRIORITY  the blocks with the highest scores given by
 *                         ft_ckpt_priority (CPR-MFU: access counts).
 * A round is written asynchronously (io_uring, pwrite where io_uring is
 * missing) and counts once every block of it is written and its commit
 * record follows; each block copy carries a CRC32C, and a block's new copy
 * never overwrites its last committed one, so a crash at any moment leaves
 * the previous round restorable. The first round saves every block (the
 * strategy's turn starts after it). Files: <dir>/<job id>/ck-r<rank>.jnl
 * (the commit journal) and ck-r<rank>-g<region>-{a,b}.dat (two copies per
 * block), format in lib/durable/ckpt.h; `ftcc-ckpt DIR/JOB` lists and verifies
 * them. dir: ft_ckpt_config.dir, else FTCC_CKPT_DIR, else the log
 * directory (FTCC_LOG_DIR, else /dev/shm or $TMPDIR as for the logs).
 * What survives what: a local directory (and /dev/shm) survives the
 * process, which is what a restarted rank restores from; a host crash
 * needs a disk directory and sync = 1; a survivor restoring a lost
 * member's shard (ft_ckpt_restore with another owner) needs a directory
 * both reach (a shared file system). The files stay after ft_finalize
 * (they are the job's last checkpoint): remove <dir>/<job id> when done.
 * FTCC_LOG_ENGINE=pwrite makes them use pwrite too. Costs: a copy of the
 * shards in memory (the saved copies, which are also the staging of the
 * writes), two on disk, and a pass over the shards per round (the
 * distances). Threads: as every call on the communicator, from any thread,
 * one at a time (see "Threads." above ft_init); the io_uring ring is not
 * bound to the thread that made it.
 */
enum ft_ckpt_strategy {
	FT_CKPT_FULL,
	FT_CKPT_ROUND_ROBIN,
	FT_CKPT_RANDOM,
	FT_CKPT_PRIORITY,
	FT_CKPT_APP_PRIORITY,
	FT_CKPT_STRATEGY_COUNT
};

/*
 * Where the rounds go. FT_CKPT_DISK: the files above. FT_CKPT_PEER: the
 * memory of another rank, its holder: the rank at this rank's place on the
 * next host (hosts told apart by their addresses; with one host, the next
 * rank), so that a lost host's shards survive on the others without a
 * shared file system and without a disk. FT_CKPT_DISK_PEER: both. A holder
 * keeps its wards' blocks (two copies of each, as the files do) and their
 * commit table; ft_ckpt_restore and ft_ckpt_blocks of an owner whose files
 * are not here (or of any owner with FT_CKPT_PEER), and a rejoined rank's
 * own restore, fetch from the owner's holder over a control link opened
 * with the job token. Each rank runs a service for it (a thread and a
 * listening port on the detector's interface); rounds go to the holder in
 * the background, and ft_ckpt_step waits for them only as it waits for
 * disk writes. When the holder changes (a failure, a new incarnation) or
 * its link breaks, the next round saves every block and sends it to the
 * new holder. A holder keeps a ward's copy while it runs (its memory: two
 * copies of each ward's shards).
 */
enum ft_ckpt_where { FT_CKPT_DISK = 1, FT_CKPT_DISK_PEER = 2, FT_CKPT_PEER = 3 };

struct ft_ckpt_config {
	size_t struct_size;             /* sizeof(struct ft_ckpt_config); set by FT_CKPT_CONFIG_INIT */
	enum ft_ckpt_strategy strategy;
	size_t block_bytes;             /* block size (a multiple of the element size); 0 = 4096;
					 * at most 2^24 blocks in all, else FT_EINVAL */
	double fraction;                /* r in (0, 1]: share of blocks per round (not FULL) */
	unsigned interval;              /* k >= 1: a round every k ft_ckpt_step calls */
	char dir[FT_PATH_MAX];          /* "" = FTCC_CKPT_DIR, else the log directory */
	uint64_t seed;                  /* FT_CKPT_RANDOM */
	int sync;                       /* 1: fdatasync before a round counts (host crashes) */
	char from[FT_PATH_MAX];         /* an exported checkpoint (ftcc-ckpt export) to start
					 * the shards from; "" = FTCC_CKPT_FROM, else none */
	int where;                      /* enum ft_ckpt_where; 0 = FTCC_CKPT_WHERE, else disk */
};

/* In declaration order, as FT_CONFIG_INIT: C and C++ alike. */
#define FT_CKPT_CONFIG_INIT                                                              \
	{                                                                                \
		sizeof(struct ft_ckpt_config), /* struct_size */                         \
		FT_CKPT_PRIORITY, 0, 0.125,    /* strategy, block_bytes, fraction */      \
		1, "", 1, 0,                   /* interval, dir, seed, sync */            \
		"", 0                          /* from, where */                          \
	}

/*
 * Starts checkpointing the sharded regions registered so far (collective:
 * every member calls it with the same strategy, interval, block size,
 * fraction and number of sharded regions; one allreduce, so it takes one
 * op_seq). Members that differ: -FT_EMISMATCH on every member; a member
 * whose values are out of range gets -FT_EINVAL, the others -FT_EMISMATCH;
 * cfg NULL or a struct_size no version knows (the struct is versioned like
 * struct ft_config): -FT_EINVAL at once, without the collective. Already
 * enabled: -FT_EINVAL. A checkpoint this rank's earlier incarnation left
 * (same job, same regions and block size) is kept and continued; anything
 * else in its files is discarded. On a process that rejoined, it first takes
 * the survivors' state (as ft_state_sync does), which says whether they had
 * enabled checkpoints: if so there is no collective (they enabled long
 * ago), and its values and regions must be those of its earlier
 * incarnation's checkpoint, else -FT_EMISMATCH (and that checkpoint is left
 * as it is); if not (it was killed inside ft_init or before their
 * ft_ckpt_enable), it takes part in their agreement like everyone, and has
 * nothing to restore.
 *
 * Starting a new run from an earlier run's checkpoint: `ftcc-ckpt export
 * DIR/JOB OUT` writes each rank's newest valid copy of every block to OUT,
 * bound to no run; with from = OUT (or FTCC_CKPT_FROM=OUT), a run that is
 * not a rejoin reads its rank's export into its sharded regions here,
 * after the agreement (which also checks that every member starts from an
 * export or none does), and ft_state_restored says what came back (its
 * ckpt_step is the step to go on from). The export must be of the same
 * world size and the same sharded regions (number, dtype, bytes, in
 * order): else -FT_EMISMATCH on every member; a member whose export is
 * missing or corrupt gets -FT_EIO or -FT_ECORRUPT, the others
 * -FT_EMISMATCH; on any of these no region is touched. A checkpoint
 * directory holding an export is -FT_EINVAL (the others -FT_EMISMATCH).
 * What fails after the agreement (no memory, this rank's own files) is
 * this rank's alone. A rank restarted (rejoin) before the run's first
 * round counted takes its shards from the export too. The run's own
 * checkpoint goes to its own directory, as ever.
 */
int ft_ckpt_enable(struct ft_comm *comm, const struct ft_ckpt_config *cfg);
/* End of training step `step` (increasing): every interval-th call selects
 * the round's blocks, copies them and starts writing them; completes the
 * writes of earlier rounds without waiting for them. It waits only when
 * two rounds are in flight already, or a chosen block's previous copy is
 * still being written (counted in ft_ckpt_stats.wait_ms). -FT_EINVAL: not
 * enabled, or step not above the last; a failed write of an earlier round
 * is returned once (that round does not count; the previous copies stay). */
int ft_ckpt_step(struct ft_comm *comm, uint64_t step);
/* FT_CKPT_APP_PRIORITY: one score per block of sharded region `region`
 * (higher is saved first), copied at the call and read at the next round;
 * does not block. -FT_EINVAL: not enabled, no such sharded region of this
 * rank, nblocks not the region's block count, score NULL or holding a NaN. */
int ft_ckpt_priority(struct ft_comm *comm, int region, const double *score, size_t nblocks);
/* Blocks until every round started is written (and synced when sync): at
 * most as long as the disk takes. Returns once a failed write of a round
 * (that round does not count), -FT_EINVAL when checkpoints are not enabled. */
int ft_ckpt_flush(struct ft_comm *comm);

/* What a restore cost. */
struct ft_restore_info {
	uint64_t ckpt_step;     /* step of the newest round a restored block came from */
	uint64_t oldest_step;   /* step of the oldest saved copy restored */
	uint64_t now_step;      /* the latest step this rank passed to ft_ckpt_step */
	size_t blocks, bytes;   /* restored */
	double perturbation;    /* ||x - checkpoint|| over the restored blocks */
	int exact;              /* 1: measured against the values replaced;
				 * 0: the lost values are gone: the distance the
				 * blocks had from their saved copies at the owner's
				 * last round (a lower bound) */
	double pls;             /* portion of lost samples: the sum over restored
				 * blocks of (now_step - step saved) x block bytes,
				 * over now_step x the bytes of every shard */
};

/* dst holds the current values of the blocks (restoring one's own shard in
 * place): the perturbation is measured exactly. */
#define FT_RESTORE_CURRENT 1u
/*
 * Reads blocks [first_block, first_block + nblocks) of sharded region
 * `region` of original rank `owner` from its running checkpoint into dst
 * (their bytes, contiguous): the newest committed copy of each block whose
 * CRC checks. The owner's checkpoint must be reachable here: its files
 * (same host, or a shared dir), or with FT_CKPT_PEER / FT_CKPT_DISK_PEER
 * its holder's memory (fetched when its files are not here; every copy is
 * checked as a file's). -FT_EIO: neither has a round of it. -FT_ECORRUPT when a block has no valid copy (its bytes in
 * dst are left as they were, the other blocks are restored, and info
 * counts them), or the files are another job's; -FT_EIO when the owner has
 * no checkpoint here; -FT_EINVAL for a range outside the region, a region
 * that is not the owner's sharded region, an unknown flag, dst NULL.
 * info may be NULL. From a holder's memory (without FT_RESTORE_CURRENT)
 * each block is written into dst as its copy arrives and checks: a fetch
 * cut short (its holder lost meanwhile; the next member is then asked)
 * may have written some blocks before, each a copy that checked, which
 * info and the result do not count.
 */
int ft_ckpt_restore(struct ft_comm *comm, int region, int owner, size_t first_block,
		    size_t nblocks, void *dst, unsigned flags, struct ft_restore_info *info);
/* Blocks of sharded region `region` of original rank `owner` (from its
 * checkpoint); any output may be NULL. -FT_EIO: no checkpoint of owner here. */
int ft_ckpt_blocks(struct ft_comm *comm, int region, int owner, size_t *nblocks,
		   size_t *block_bytes, size_t *region_bytes);
/* On a process that rejoined: what restoring its sharded regions in
 * ft_state_sync cost (summed over regions). 0, or -FT_ENOSYS if none was. */
int ft_state_restored(const struct ft_comm *comm, struct ft_restore_info *info);

/* What checkpointing cost this rank since ft_ckpt_enable. */
struct ft_ckpt_stats {
	uint64_t rounds;        /* rounds started */
	uint64_t committed;     /* rounds whose commit record is written */
	uint64_t failed;        /* rounds abandoned after a write error */
	uint64_t blocks, bytes; /* block copies written (bytes: data, heads excluded) */
	double step_ms;         /* total time inside ft_ckpt_step */
	double select_ms;       /* of it: distances and the choice of blocks */
	double copy_ms;         /* of it: copying, CRCs, submitting the writes */
	double wait_ms;         /* waiting for earlier writes (ft_ckpt_step, ft_ckpt_flush) */
};
/* Copies the counters into *stats (all zero before ft_ckpt_enable); does not
 * block. -FT_EINVAL for stats NULL, -FT_EFINALIZED after ft_finalize. */
int ft_ckpt_stats_get(const struct ft_comm *comm, struct ft_ckpt_stats *stats);

/*
 * CPR's rule for the checkpoint interval: with failures_per_step failures
 * expected per step, each losing lost_fraction of the state, a round every
 * k steps loses on average k/2 steps of updates of that fraction at each
 * failure, so over T steps the portion of lost samples is about
 * (failures_per_step x T) x (k/2) x lost_fraction / T; the largest k with
 * failures_per_step x k x lost_fraction / 2 at most target_pls.
 * Returns k >= 1 (0 for arguments out of range).
 */
unsigned ft_ckpt_interval_for_pls(double target_pls, double failures_per_step,
				  double lost_fraction);

/* Counters since ft_init. */
struct ft_stats {
	uint64_t ops;
	uint64_t bytes_sent;      /* on the data links; the one-host path (FTCC_SHM) moves
				   * none there */
	uint64_t bytes_received;
	uint64_t failures;
	uint64_t recoveries;
	double reduce_ms;      /* time in reduction kernels */
	double wait_ms;        /* time blocked waiting for the network */
	uint64_t failure_known_ns; /* CLOCK_MONOTONIC time this rank first knew of its
				    * latest failure (detector), 0 if none */
	uint64_t view_settled_ns;  /* CLOCK_MONOTONIC time its detector settled the
				    * latest membership view after a failure, 0 if none */
	double last_recovery_ms;   /* recovery time of the latest recovery */
};
/* Copies the counters into *stats; does not block. -FT_EINVAL for stats
 * NULL, -FT_EFINALIZED after ft_finalize. */
int ft_stats_get(const struct ft_comm *comm, struct ft_stats *stats);

#ifdef __cplusplus
}
#endif

#endif /* FTCC_H */
