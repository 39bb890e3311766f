/* comm.c: communicator lifetime: init from config or environment, rendezvous, ring links, finalize. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "comm.h"
#include "policy.h"
#include "token.h"

static int comm_usable(const struct ft_comm *c)
{
	if (c == NULL || c->magic != FT__COMM_MAGIC)
		return -FT_EINVAL;
	return c->finalized ? -FT_EFINALIZED : 0;
}

static void fill_hello(const struct ft_comm *c, struct ft_hello *h, int from, int to)
{
	memset(h, 0, sizeof(*h));
	h->magic = FT_HELLO_MAGIC;
	h->version = FT_PROTO_VERSION;
	h->kind = FT_LINK_DATA;
	h->generation = c->generation;
	h->from_rank = from;
	h->to_rank = to;
	snprintf(h->job_id, sizeof(h->job_id), "%s", c->cfg.job_id);
}

/*
 * Every rank connects to its right neighbour first and accepts from its left
 * second. Connecting completes in the peer's kernel backlog and the hello fits
 * in the socket buffer, so no rank waits on another's accept: no cycle. The
 * acceptor's challenge (lib/auth.h) is answered without waiting either: a
 * connect returns with its proof still due, and the transport answers it
 * while this rank accepts or runs an op (tcp: ft__tcp_answer_challenges).
 */
int ft__comm_connect_ring(struct ft_comm *c)
{
	int me = c->members[c->rank];
	int right = c->members[(c->rank + 1) % c->size];
	int left = c->members[(c->rank + c->size - 1) % c->size];
	struct ft_hello hello, expect, got;
	int rc;

	if (c->size == 1 || (c->send_link != NULL && c->recv_link != NULL))
		return 0;
	if (c->send_link == NULL && c->addrs[right][0] == '\0') {
		ft__det_suspect(c->det, right, true); /* load_view: only with a detector */
		return -FT_EPEERFAILED;
	}
	if (c->send_link == NULL) {
		fill_hello(c, &hello, me, right);
		if ((rc = ft_hello_seal(&hello, c->cfg.token)) != 0)
			return rc;
		rc = c->tp_ops->connect(c->tp, c->addrs[right], &hello, c->cfg.connect_timeout_ms,
					&c->send_link);
		if (rc == -FT_ECONNREFUSED) {
			/* a member's listener is gone (its process died since it
			 * published): a failure (to recover, but under abort), in
			 * ft_init as in an op */
			if (c->det != NULL)
				ft__info("rank %d at %s refused the ring's link: taken as failed",
					 right, c->addrs[right]);
			else
				ft__error("rank %d at %s refused the ring's link: it failed", right,
					  c->addrs[right]);
			return -FT_EPEERFAILED;
		}
		if (rc != 0) {
			ft__error("cannot link to rank %d at %s: %s", right, c->addrs[right],
				  ft_strerror(rc));
			return rc;
		}
	}
	if (c->recv_link == NULL) {
		fill_hello(c, &expect, left, me);
		rc = c->tp_ops->accept(c->tp, &expect, c->cfg.connect_timeout_ms, &c->recv_link,
				       &got);
		if (rc != 0)
			return rc;
	}
	return 0;
}

void ft__comm_abort_ring(struct ft_comm *c, int err, uint64_t op_seq)
{
	struct ft_frame f;

	memset(&f, 0, sizeof(f));
	f.magic = FT_FRAME_MAGIC;
	f.type = FT_FRAME_ABORT;
	f.generation = c->generation;
	f.op_seq = op_seq;
	f.status = err;
	if (c->send_link != NULL)
		c->tp_ops->link_abort(c->send_link, &f);
	if (c->recv_link != NULL)
		c->tp_ops->link_close(c->recv_link);
	c->send_link = c->recv_link = NULL;
}

/* Releases what c holds: 0, or -FT_EIO when the departure could not be
 * recorded (everything is released all the same). */
static int comm_release(struct ft_comm *c)
{
	int rc = 0;

	/* Without the depart marker, a settle in progress waits for this rank
	 * until it forces (2 x the detect timeout) instead of at once. */
	if (c->det != NULL && (rc = ft__mb_depart(&c->mb, c->op_seq)) != 0)
		ft__error("cannot record this rank's departure: the survivors' next view waits "
			  "%d ms for it", 2 * c->cfg.detect_timeout_ms);
	ft__det_destroy(c->det);
	c->det = NULL;
	ft__trace_close(c->trace); /* after the detector, which writes to it */
	c->trace = NULL;
	ft__ckpt_close(c);      /* its files stay: a restarted rank restores from them */
	ft__rejoin_log_close(c, c->finalizing);
	free(c->regs);
	c->regs = NULL;
	free(c->fresh_op);
	c->fresh_op = NULL;
	c->nreg = c->reg_cap = 0;
	free(c->state);
	c->state = NULL;
	c->nstate = 0;
	if (c->tp != NULL) {
		c->tp_ops->close(c->tp);
		c->tp = NULL;
	}
	c->send_link = c->recv_link = NULL;
	ft__mb_close(&c->mb, c->generation, c->rank == 0);
	free(c->members);
	free(c->addrs);
	free(c->slots);
	free(c->backup);
	c->backup = NULL;
	c->backup_bytes = 0;
	free(c->scratch);
	c->scratch = NULL;
	c->scratch_bytes = 0;
	free(c->kept);
	c->kept = NULL;
	c->kept_cap = c->kept_bytes = 0;
	c->kept_valid = false;
	ft__comm_show_current(c);
	c->members = NULL;
	c->addrs = NULL;
	c->slots = NULL;
	return rc;
}

/*
 * The ops at whose start the state goes to new incarnations (state.c),
 * recomputed from the records alone so that every member, a newcomer
 * included, finds the same: each live record published as rejoining, in
 * the last 16 generations, whose op (the first its application runs) is
 * not before v's first op. An op whose transfer already ran is found again
 * only when it runs again, and then the transfer runs again on every
 * member alike. The sender is the lowest member that is not such a
 * newcomer (whose application has not received the state yet).
 */
static void owed_ops(struct ft_comm *c, const struct ft__view *v)
{
	uint32_t lo = v->generation > 16 ? v->generation - 16 : 1;
	bool *fresh = calloc((size_t)c->cfg.world_size, sizeof(bool));

	c->nowed = 0;
	c->state_root = -1;
	if (c->fresh_op == NULL)
		c->fresh_op = calloc((size_t)c->cfg.world_size, sizeof(uint64_t));
	if (c->fresh_op != NULL)
		memset(c->fresh_op, 0, (size_t)c->cfg.world_size * sizeof(uint64_t));
	for (uint32_t g = lo; g <= v->generation && g > 0; g++) {
		struct ft__view gv = {0};
		uint64_t gfirst = v->first_op;
		/* the first op of the view that took it back */
		if (g != v->generation && ft__mb_try_settle(&c->mb, g, NULL, 0, false, &gv) == 1) {
			gfirst = gv.first_op;
			ft__view_free(&gv);
		}
		for (int r = 0; r < c->cfg.world_size; r++) {
			struct ft__member m;
			bool dup = false, member = false;
			/* only a member of v is owed anything: the records of one
			 * that is not may vanish (it finalized) while members load
			 * v, and a transfer some run and others not is a mismatch */
			for (int i = 0; i < v->size && !member; i++)
				member = v->members[i] == r;
			if (!member || ft__mb_lookup(&c->mb, g, r, &m) != 0 || !m.rejoining)
				continue;
			/* its application's first op: the one after the op it
			 * replays (next_op = first + 1), else that view's first op;
			 * op 0 is ft_init's barrier, which a newcomer runs itself:
			 * the state (nobody changed it yet) goes at op 1 */
			if (m.next_op < gfirst)
				m.next_op = gfirst;
			if (m.next_op == 0)
				m.next_op = 1;
			if (m.next_op < v->first_op)
				continue;
			if (fresh != NULL)
				fresh[r] = true; /* its state is not yet the job's */
			if (c->fresh_op != NULL)
				c->fresh_op[r] = m.next_op;
			for (int j = 0; j < c->nowed; j++)
				dup |= c->owed_op[j] == m.next_op;
			if (!dup && c->nowed < (int)FT__ARRAY_SIZE(c->owed_op))
				c->owed_op[c->nowed++] = m.next_op;
			if (g == v->generation)
				ft__info("generation %u takes rank %d back (a new incarnation, from op "
					 "%llu)", g, r, (unsigned long long)m.next_op);
		}
	}
	for (int i = 0; i < v->size && c->state_root < 0; i++)
		if (fresh == NULL || !fresh[v->members[i]])
			c->state_root = v->members[i];
	if (c->nowed > 0 && c->state_root < 0)
		ft__error("generation %u: every member is a new incarnation: nobody holds the state",
			  v->generation);
	free(fresh);
}

/* Takes view v as the membership: dense ranks, and the addresses the members published. */
int ft__comm_load_view(struct ft_comm *c, struct ft__view *v)
{
	char (*addrs)[FT__ADDR_MAX];
	int rank = -1, rc;

	for (int i = 0; i < v->size; i++) {
		if (v->members[i] >= c->cfg.world_size) {
			ft__error("view names rank %d beyond world size %d", v->members[i],
				  c->cfg.world_size);
			return -FT_ECORRUPT;
		}
		if (v->members[i] == c->cfg.rank)
			rank = i;
	}
	if (rank < 0) {
		ft__error("rank %d is not in the view of generation %u", c->cfg.rank, v->generation);
		return -FT_EEXCLUDED;
	}
	addrs = calloc((size_t)c->cfg.world_size, sizeof(*addrs));
	if (addrs == NULL)
		return -FT_ENOMEM;
	for (int i = 0; i < v->size; i++) {
		struct ft__member m;
		rc = ft__mb_lookup(&c->mb, v->generation, v->members[i], &m);
		if (rc == -FT_EPEERFAILED && c->det != NULL && v->members[i] != c->cfg.rank) {
			/* gone since the view settled (a new incarnation took its
			 * place): no address; the link to it fails and the
			 * detector settles the next view */
			ft__info("rank %d left the view of generation %u before this rank loaded it",
				 v->members[i], v->generation);
			continue;
		}
		if (rc != 0) {
			ft__error("no address for rank %d in the rendezvous (generation %u)",
				  v->members[i], v->generation);
			free(addrs);
			return rc;
		}
		memcpy(addrs[v->members[i]], m.addr, sizeof(m.addr));
	}
	if (c->cfg.policy == FT_POLICY_REJOIN)
		owed_ops(c, v);
	free(c->addrs);
	free(c->members);
	c->addrs = addrs;
	c->members = v->members;
	v->members = NULL;
	c->size = v->size;
	c->rank = rank;
	c->generation = v->generation;
	return 0;
}

int ft__comm_adopt(struct ft_comm *c, struct ft__view *v)
{
	int rc;

	ft__comm_abort_ring(c, -FT_EABORTED, c->op_seq);
	rc = ft__comm_load_view(c, v);
	ft__view_free(v);
	if (rc == 0)
		ft__det_adopted(c->det, c->generation, c->op_seq);
	return rc;
}

/* Ranks on this host: the launcher's local size, else the world size. */
static int local_ranks(const struct ft_comm *c)
{
	return c->tp_env.local_ranks > 0 ? c->tp_env.local_ranks : c->cfg.world_size;
}

#define DEFAULT_SEGMENT ((size_t)256 << 10)

/* Segment size when the configuration leaves it to the transport (tp NULL: none opened). */
static size_t default_segment(struct ft_comm *c)
{
	size_t s = c->tp != NULL && c->tp_ops->size > offsetof(struct ft_transport_ops, segment_bytes) &&
			   c->tp_ops->segment_bytes != NULL
		   ? c->tp_ops->segment_bytes(c->tp)
		   : 0;

	return s >= 4096 && s <= FT_FRAME_MAX_PAYLOAD ? s : DEFAULT_SEGMENT;
}

/*
 * Where this rank listens, for the transport and the detector alike
 * (lib/sock.h): with nothing named, loopback when the launcher puts every
 * rank on this host, else the interface that reaches the peers (this
 * rank's own entry in the peer list first, then the others), the store or
 * the launcher.
 */
static int choose_host(struct ft_comm *c)
{
	const struct ft_config *cfg = &c->cfg;
	size_t cap = strlen(cfg->peers) * 2 + sizeof(cfg->store) + sizeof(c->tp_env.launcher_addrs) + 4;
	char *toward = malloc(cap);
	const char *mine = cfg->peers;
	int local, rc;

	if (toward == NULL)
		return -FT_ENOMEM;
	for (int r = 0; r < cfg->rank && mine != NULL; r++) {
		mine = strchr(mine, ',');
		mine = mine != NULL ? mine + 1 : NULL;
	}
	snprintf(toward, cap, "%.*s,%s,%s,%s", mine != NULL ? (int)strcspn(mine, ",") : 0,
		 mine != NULL ? mine : "", cfg->peers, cfg->store, c->tp_env.launcher_addrs);
	local = cfg->world_size == 1 ? 1
		: c->tp_env.local_ranks > 0 ? c->tp_env.local_ranks >= cfg->world_size
		: -1;
	rc = ft__sock_choose_host(cfg->bind_host, local, toward, &c->host);
	free(toward);
	if (rc == 0)
		ft__info("listening on %s, publishing %s (%s)", c->host.listen,
			 c->host.publish[0] != '\0' ? c->host.publish : c->host.listen, c->host.why);
	return rc;
}

static bool comm_interrupted(void *arg)
{
	struct ft_comm *c = arg;

	return c->det != NULL && ft__det_pending(c->det);
}

/* FTCC_FAULT phase=init or connect: op 0's points inside ft_init. */
static void init_fault(struct ft_comm *c, enum ft__fault_phase phase)
{
	const struct ft__fault_pt *hit;

	if (c->fault.armed &&
	    (hit = ft__fault_due(&c->fault, c->cfg.rank, 0, 0, phase, 0, 0, FT__AT_SEND)) != NULL)
		ft__fault_act(hit);
}

static int comm_join(struct ft_comm *c)
{
	struct ft_tp_params params = {
		.rank = c->cfg.rank,
		.bind_host = c->host.listen,
		.publish_host = c->host.publish,
		.job_id = c->cfg.job_id,
		.token = c->cfg.token,
		.max_payload = c->cfg.segment_bytes,
		.log_level = c->cfg.log_level,
		.interrupted = comm_interrupted,
		.interrupt_arg = c,
		.env = &c->tp_env,
	};
	struct ft__mb_params mp = {
		.backend = c->cfg.membership,
		.root = c->cfg.rendezvous,
		.private_root = strcmp(c->cfg.rendezvous, c->tp_env.default_rendezvous) == 0,
		.job_id = c->cfg.job_id,
		.rank = c->cfg.rank,
		.world_size = c->cfg.world_size,
		.start_wait_ms = c->cfg.policy != FT_POLICY_REJOIN ? 0
				 : c->cfg.rejoin_timeout_ms < c->cfg.connect_timeout_ms / 2
				       ? c->cfg.rejoin_timeout_ms
				       : c->cfg.connect_timeout_ms / 2,
		.incarnation = (uint32_t)c->tp_env.incarnation,
		.token = c->cfg.token,
		.bind_host = c->host.listen,
		.publish_host = c->host.publish,
		.book = {.how = c->cfg.bootstrap, .store = c->cfg.store, .peers = c->cfg.peers,
			 .job_id = c->cfg.job_id, .token = c->cfg.token, .rank = c->cfg.rank,
			 .world_size = c->cfg.world_size, .timeout_ms = c->cfg.connect_timeout_ms},
		.reply_wait_ms = c->cfg.detect_timeout_ms,
	};
	struct ft__view view = {0};
	struct ft__member me;
	int *cand, rc;

	memset(&me, 0, sizeof(me));
	ft__config_data_link_timeouts(&c->cfg, &params.keepalive_ms, &params.user_timeout_ms);
	if (c->cfg.policy == FT_POLICY_REJOIN && strcmp(c->cfg.membership, "inband") == 0) {
		ft__error("the rejoin policy needs the file rendezvous (FTCC_MEMBERSHIP=file): a "
			  "restarted rank finds its job there");
		return -FT_ENOSYS;
	}
	if ((rc = choose_host(c)) != 0)
		return rc;
	/* before anything copies the token: the detector, the transport, membership */
	if ((rc = ft__token_resolve(&c->cfg)) != 0)
		return rc;
	rc = ft__mb_open(&c->mb, &mp);
	if (rc != 0)
		return rc;
	rc = c->tp_ops->open(&params, &c->tp);
	if (rc != 0)
		return rc;
	if (c->cfg.segment_bytes == 0)
		c->cfg.segment_bytes = default_segment(c);
	c->slot_bytes = c->cfg.segment_bytes;
	c->slots = malloc(c->slot_bytes * (size_t)c->cfg.pipeline_depth);
	if (c->slots == NULL)
		return -FT_ENOMEM;
	if ((rc = c->tp_ops->local_addr(c->tp, me.addr, sizeof(me.addr))) != 0)
		return rc;
	if (c->cfg.policy != FT_POLICY_ABORT) {
		struct ft__det_params dp = {
			.mb = &c->mb,
			.world_size = c->cfg.world_size,
			.rank = c->cfg.rank,
			.job_id = c->cfg.job_id,
			.token = c->cfg.token,
			.bind_host = c->host.listen,
			.publish_host = c->host.publish,
			.heartbeat_ms = c->cfg.heartbeat_ms,
			.detect_timeout_ms = c->cfg.detect_timeout_ms,
			.rejoin = c->cfg.policy == FT_POLICY_REJOIN,
			.rejoin_timeout_ms = c->cfg.rejoin_timeout_ms,
			.trace = c->trace,
		};
		if ((rc = ft__det_create(&dp, &c->det)) != 0)
			return rc;
		snprintf(me.ctrl, sizeof(me.ctrl), "%s", ft__det_addr(c->det));
	}
	if (c->cfg.policy == FT_POLICY_REJOIN) {
		rc = ft__mb_resume(&c->mb, &view);
		if (rc < 0)
			return rc;
		if (rc == 1)
			return ft__rejoin_join(c, &me, &view); /* a new incarnation */
	}
	if ((rc = ft__mb_publish(&c->mb, c->generation, &me)) != 0)
		return rc;
	init_fault(c, FT__PHASE_INIT); /* published, the job's first view not settled */
	cand = malloc((size_t)c->cfg.world_size * sizeof(int));
	if (cand == NULL)
		return -FT_ENOMEM;
	for (int i = 0; i < c->cfg.world_size; i++)
		cand[i] = i;
	rc = ft__mb_settle(&c->mb, c->generation, cand, c->cfg.world_size,
			   c->cfg.connect_timeout_ms, &view);
	free(cand);
	if (rc != 0)
		return rc;
	rc = ft__comm_load_view(c, &view);
	ft__view_free(&view);
	if (rc != 0)
		return rc;
	c->job_nonce = view.nonce;
	if (c->det != NULL && (rc = ft__det_start(c->det, c->generation, c->members, c->size)) != 0)
		return rc;
	if (c->cfg.policy == FT_POLICY_REJOIN)
		ft__rejoin_log_open(c);
	init_fault(c, FT__PHASE_CONNECT); /* the first view settled, the ring not linked */
	rc = ft__comm_connect_ring(c);
	if (rc != 0 && c->det != NULL &&
	    (rc == -FT_EABORTED || rc == -FT_EPEERFAILED || ft__det_pending(c->det))) {
		/* a rank failed while the ring was being connected: ft_init's
		 * barrier connects it again, and its recovery settles the next view */
		ft__info("init: a failure while connecting the ring (%s): the first op recovers",
			 ft_strerror(rc));
		rc = 0;
	}
	return rc;
}

/*
 * Polling before sleeping pays only when no other rank needs this core:
 * allowed when the ranks on this host fit the online CPUs. FTCC_SPIN_US
 * overrides.
 */
static uint64_t spin_budget(const struct ft_comm *c)
{
	if (c->tp_env.spin_us >= 0)
		return (uint64_t)c->tp_env.spin_us * 1000u;
	return local_ranks(c) <= sysconf(_SC_NPROCESSORS_ONLN) ? 1000000u : 0;
}

/* The token goes with the struct, wiped so that no freed page keeps it. */
static void comm_free(struct ft_comm *c)
{
	ft__wipe(c->cfg.token, sizeof(c->cfg.token));
	free(c);
}

static int init_call(const struct ft_config *cfg, struct ft_comm **comm)
{
	struct ft_comm *c;
	int rc;

	if (comm == NULL)
		return -FT_EINVAL;
	*comm = NULL;
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return -FT_ENOMEM;
	if (cfg == NULL)
		rc = ft_config_from_env(&c->cfg, NULL, 0);
	else
		rc = ft__config_import(cfg, &c->cfg);
	if (rc != 0) {
		comm_free(c);
		return rc;
	}
	rc = ft__config_check(&c->cfg);
	if (rc == 0)
		rc = ft__fault_parse(c->cfg.fault, &c->fault, NULL, 0);
	if (rc != 0) {
		comm_free(c);
		return rc;
	}
	ft__log_level = c->cfg.log_level;
	ft__log_rank = c->cfg.rank;
	c->tp_ops = ft_transport_lookup(c->cfg.transport);
	if (c->tp_ops == NULL) {
		ft__error("transport '%s' is not built into this library", c->cfg.transport);
		comm_free(c);
		return -FT_ENOSYS;
	}
	if ((rc = ft__config_tp_env(&c->cfg, &c->tp_env)) != 0) {
		comm_free(c);
		return rc;
	}
	ft__fault_incarnation(&c->fault, (uint32_t)c->tp_env.incarnation);
	c->spin_ns = spin_budget(c);
	c->policy = ft__policy_for(c->cfg.policy);
	c->magic = FT__COMM_MAGIC;
	(void)ft__trace_open(c->cfg.trace, c->cfg.rank, &c->trace); /* it warns; the job runs untraced */
	if (c->cfg.world_size == 1) {
		if (c->cfg.segment_bytes == 0)
			c->cfg.segment_bytes = default_segment(c);
		c->size = 1;
		c->members = calloc(1, sizeof(int));
		if (c->members == NULL) {
			ft__trace_close(c->trace);
			comm_free(c);
			return -FT_ENOMEM;
		}
		*comm = c;
		return 0;
	}
	rc = comm_join(c);
	if (rc == 0)
		ft__trace_view(c->trace, c->generation, c->members, c->size);
	if (rc == 0 && !c->rejoined)
		rc = ft_barrier(c);
	if (rc != 0) {
		(void)comm_release(c); /* init failed: that is the error to report */
		comm_free(c);
		return rc;
	}
	*comm = c;
	return 0;
}

FT__EXPORT int ft_init(const struct ft_config *cfg, struct ft_comm **comm)
{
	return ft__err_public(init_call(cfg, comm));
}

/*
 * The communicator's struct is kept (marked finalized, everything it owned
 * released) so that a call on the handle afterwards gets -FT_EFINALIZED
 * instead of touching freed memory. Kept structs stay on a list: a cost of
 * one struct per finalized communicator, deliberate and not a leak.
 */
static struct ft_comm *finalized_list;
static pthread_mutex_t finalized_lock = PTHREAD_MUTEX_INITIALIZER;

static int finalize_call(struct ft_comm *c)
{
	int rc = comm_usable(c);

	if (rc != 0)
		return rc;
	if (c->policy->finalize != NULL)
		c->policy->finalize(c);
	c->finalizing = true; /* a clean end: the logs go */
	rc = comm_release(c);
	ft__wipe(c->cfg.token, sizeof(c->cfg.token)); /* the struct outlives the call */
	c->finalized = true;
	pthread_mutex_lock(&finalized_lock);
	c->next_finalized = finalized_list;
	finalized_list = c;
	pthread_mutex_unlock(&finalized_lock);
	return rc;
}

FT__EXPORT int ft_finalize(struct ft_comm *c)
{
	return ft__err_public(finalize_call(c));
}

int ft__comm_shown_size(const struct ft_comm *c)
{
	return c->shown.active ? c->shown.size : c->size;
}

uint32_t ft__comm_shown_generation(const struct ft_comm *c)
{
	return c->shown.active ? c->shown.generation : c->generation;
}

int ft__comm_shown_member(const struct ft_comm *c, int rank)
{
	return c->shown.active ? c->shown.members[rank] : c->members[rank];
}

void ft__comm_show_current(struct ft_comm *c)
{
	free(c->shown.members);
	memset(&c->shown, 0, sizeof(c->shown));
}

FT__EXPORT int ft_rank(const struct ft_comm *c)
{
	int rc = comm_usable(c);
	return rc != 0 ? rc : (c->shown.active ? c->shown.rank : c->rank);
}

FT__EXPORT int ft_size(const struct ft_comm *c)
{
	int rc = comm_usable(c);
	return rc != 0 ? rc : ft__comm_shown_size(c);
}

FT__EXPORT int ft_orig_rank(const struct ft_comm *c, int rank)
{
	int rc = comm_usable(c);

	if (rc != 0)
		return rc;
	if (rank < 0 || rank >= ft__comm_shown_size(c))
		return -FT_EINVAL;
	return ft__comm_shown_member(c, rank);
}

FT__EXPORT uint32_t ft_generation(const struct ft_comm *c)
{
	return comm_usable(c) != 0 ? 0 : ft__comm_shown_generation(c);
}

static int stats_get_call(const struct ft_comm *c, struct ft_stats *stats)
{
	int rc = comm_usable(c);

	if (rc != 0)
		return rc;
	if (stats == NULL)
		return -FT_EINVAL;
	*stats = c->stats;
	stats->failure_known_ns = stats->view_settled_ns = 0;
	if (c->det != NULL)
		ft__det_times(c->det, &stats->failure_known_ns, &stats->view_settled_ns);
	return 0;
}

FT__EXPORT int ft_stats_get(const struct ft_comm *c, struct ft_stats *stats)
{
	return ft__err_public(stats_get_call(c, stats));
}

FT__EXPORT size_t ft_dtype_size(enum ft_dtype dtype)
{
	static const size_t sizes[FT_DTYPE_COUNT] = {
		[FT_FLOAT32] = 4, [FT_FLOAT64] = 8, [FT_FLOAT16] = 2, [FT_BFLOAT16] = 2,
		[FT_INT32] = 4,   [FT_INT64] = 8,   [FT_UINT8] = 1,
	};
	return (unsigned)dtype < FT_DTYPE_COUNT ? sizes[dtype] : 0;
}

int ft__comm_check(const struct ft_comm *c)
{
	return comm_usable(c);
}
