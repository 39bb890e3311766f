/* init.c: a communicator's life: ft_init (configuration, rendezvous, the first view, the ring, op 0's barrier) and ft_finalize, above the core and the policies. */
/* SPDX-License-Identifier: MIT */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ckpt.h"
#include "comm.h"
#include "policy.h"
#include "onehost.h"
#include "token.h"

/* Releases what c holds: 0, or -FT_EIO when the departure could not be
 * recorded (everything is released all the same). */
static int comm_release(struct ft_comm *c)
{
	int rc = 0;

	/* Without the depart marker, a settle in progress waits for this rank
	 * until it forces (2 x the detect timeout) instead of at once. A new
	 * incarnation whose ft_init failed leaves none, because its rank did
	 * not finalize, which the job's end marker must say (a later
	 * incarnation then learns at once that the job ended: FT_EENDED).
	 * Sent away (FT_EEXCLUDED, a rejoin that timed out), it is no
	 * candidate of any settle: the view left it out, and an awaited rank
	 * is waited for by its rejoining record alone. Failing after it was
	 * taken in (its replay, the first barrier), it costs the survivors'
	 * next settle that wait: a delay, never a lost rank. */
	bool leaves = c->finalizing || c->tp_env.incarnation == 0;
	if (c->det != NULL && leaves && (rc = ft__mb_depart(&c->mb, c->op_seq)) != 0)
		ft__error("cannot record this rank's departure: the survivors' next view waits "
			  "%d ms for it", 2 * c->cfg.detect_timeout_ms);
	ft__onehost_close(c);
	ft__det_destroy(c->det, c->finalizing);
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
	free(c->mesh_to);
	free(c->mesh_from);
	c->mesh_to = c->mesh_from = NULL;
	free(c->ahead); /* (its links went with the transport) */
	free(c->ahead_epoch);
	c->ahead = NULL;
	c->ahead_epoch = NULL;
	free(c->rd_buf);
	c->rd_buf = NULL;
	c->rd_cap = 0;
	/* the views go with the job's clean end only: a rank whose ft_init
	 * failed (sent away, out of descriptors) once removed generation 0's
	 * view as its dense rank 0, under the job's live ranks; its next
	 * incarnation then found no job to rejoin, took the start for its own
	 * and ran the job apart from them */
	ft__mb_close(&c->mb, c->generation, c->finalizing && c->rank == 0);
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

/* Ranks on this host: the launcher's local size, else the world size. */
static int local_ranks(const struct ft_comm *c)
{
	return c->tp_env.local_ranks > 0 ? c->tp_env.local_ranks : c->cfg.world_size;
}

#define DEFAULT_SEGMENT ((size_t)256 << 10)

/* Segment size when the configuration leaves it to the transport (tp NULL: none opened). */
static size_t default_segment(struct ft_comm *c)
{
	size_t s = c->tp != NULL && FT__TP_HAS(c->tp_ops, segment_bytes)
			   ? c->tp_ops->segment_bytes(c->tp)
			   : 0;

	return s >= 4096 && s <= FT__FRAME_MAX_PAYLOAD ? s : DEFAULT_SEGMENT;
}

/*
 * Where this rank listens, for the transport and the detector alike
 * (lib/util/sock.h): with nothing named, loopback when the launcher puts every
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

/* The detector's thread: a settled view left these ranks out (a transport may fence them). */
static void tell_transport_left_out(void *arg, int rank)
{
	const struct ft_comm *c = arg;

	if (FT__TP_HAS(c->tp_ops, left_out))
		c->tp_ops->left_out(c->tp, rank);
}

static int ring_size(void *arg)
{
	return ((const struct ft_comm *)arg)->size;
}

/* FTCC_FAULT phase=init or connect: op 0's points inside ft_init (the
 * others strike in the fault transport wrapped around the real one). */
static int init_fault(struct ft_comm *c, enum ft__fault_phase phase)
{
	const struct ft__fault_pt *hit;

	if (c->fault.armed &&
	    (hit = ft__fault_due(&c->fault, c->cfg.rank, 0, 0, phase, 0, 0, FT__AT_SEND)) != NULL) {
		ft__fault_act(hit);
		if (hit->action == FT__FAULT_FAIL)
			return -FT_EIO;
	}
	return 0;
}

/* Whether a new incarnation of a rank the job went on without is taken
 * back (rejoin and shrink, over either membership: docs/rejoin.md, "Growing
 * back"): it then finds the running job in ft_init. */
static bool grows(const struct ft_comm *c)
{
	return c->cfg.policy != FT_POLICY_ABORT;
}

static int comm_join(struct ft_comm *c)
{
	struct ft__tp_params params = {
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
	if ((rc = choose_host(c)) != 0)
		return rc;
	/* before anything copies the token: the detector, the transport, membership */
	if ((rc = ft__token_resolve(&c->cfg)) != 0)
		return rc;
	rc = ft__mb_open(&c->mb, &mp);
	if (rc != 0)
		return rc;
	rc = c->tp_ops->open(&params, &c->tp);
	if (rc == 0 && c->fault.armed)
		rc = ft__fault_wrap(&c->fault, c->cfg.rank, ring_size, c, &c->tp_ops, &c->tp);
	if (rc != 0)
		return rc;
	if (c->cfg.segment_bytes == 0)
		c->cfg.segment_bytes = default_segment(c);
	c->slot_bytes = c->cfg.segment_bytes;
	c->slots = malloc(c->slot_bytes * (size_t)c->cfg.pipeline_depth);
	if (c->slots == NULL)
		return -FT_ENOMEM;
	/* recursive doubling's links beyond the ring's (rdouble.c): not under
	 * rejoin, whose logs replay the ring's pattern; with the ring forced
	 * too, so that a rank whose FTCC_ALGORITHM differs from its peers' is
	 * told so at ft_init's barrier (FT_EMISMATCH) instead of their waiting
	 * for links it never makes */
	if (c->cfg.world_size > 2 && c->cfg.policy != FT_POLICY_REJOIN) {
		c->mesh_to = calloc((size_t)c->cfg.world_size, sizeof(*c->mesh_to));
		c->mesh_from = calloc((size_t)c->cfg.world_size, sizeof(*c->mesh_from));
		if (c->mesh_to == NULL || c->mesh_from == NULL)
			return -FT_ENOMEM;
	}
	c->ahead = calloc((size_t)c->cfg.world_size, sizeof(*c->ahead));
	c->ahead_epoch = calloc((size_t)c->cfg.world_size, sizeof(*c->ahead_epoch));
	if (c->ahead == NULL || c->ahead_epoch == NULL)
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
			.grow = grows(c),
			.trace = c->trace,
			.left_out = tell_transport_left_out,
			.left_out_arg = c,
		};
		if ((rc = ft__det_create(&dp, &c->det)) != 0)
			return rc;
		/* an op waiting on its peers ends the moment a failure is known
		 * (without it, at the engine's next tick) */
		if (FT__TP_HAS(c->tp_ops, watch_fd) &&
		    c->tp_ops->watch_fd(c->tp, ft__det_wake_fd(c->det)) != 0)
			ft__info("init: the transport cannot watch the detector; ops learn of a "
				 "failure on their tick");
		snprintf(me.ctrl, sizeof(me.ctrl), "%s", ft__det_addr(c->det));
	}
	/* (shrink: a first incarnation never takes a job left in the
	 * rendezvous by a run killed whole for one of its own) */
	c->grows = grows(c);
	if (c->cfg.policy == FT_POLICY_REJOIN || (c->grows && c->tp_env.incarnation > 0)) {
		rc = ft__mb_resume(&c->mb, &view);
		if (rc < 0)
			return rc;
		if (rc == 1)
			return ft__rejoin_join(c, &me, &view); /* a new incarnation */
	}
	if ((rc = ft__mb_publish(&c->mb, c->generation, &me)) != 0)
		return rc;
	if ((rc = init_fault(c, FT__PHASE_INIT)) != 0) /* published, the first view not settled */
		return rc;
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
	if ((rc = init_fault(c, FT__PHASE_CONNECT)) != 0) /* the first view settled, no ring yet */
		return rc;
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
	ft__config_warn_unused(&c->cfg);
	c->tp_ops = ft__transport_lookup(c->cfg.transport);
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
	char args[48];
	snprintf(args, sizeof(args), "{\"incarnation\":%d}", c->tp_env.incarnation);
	ft__trace_instant(c->trace, "init", args);
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
	/* (its attempt opens the one-host path: ft__onehost_open) */
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
	int rc = ft__comm_check(c);

	if (rc != 0)
		return rc;
	c->finalizing = true; /* a clean end: the logs go; no newcomer is taken in */
	if (c->policy->finalize != NULL)
		c->policy->finalize(c);
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
