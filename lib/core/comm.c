/* comm.c: the communicator core: ring links, views loaded and adopted, the accessors. */
/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "engine.h"
#include "policy.h"

static int comm_usable(const struct ft_comm *c)
{
	if (c == NULL || c->magic != FT__COMM_MAGIC)
		return -FT_EINVAL;
	return c->finalized ? -FT_EFINALIZED : 0;
}

static void fill_hello(const struct ft_comm *c, struct ft__hello *h, int from, int to)
{
	memset(h, 0, sizeof(*h));
	h->magic = FT__HELLO_MAGIC;
	h->version = FT__PROTO_VERSION;
	h->kind = FT__LINK_DATA;
	h->generation = c->generation;
	h->epoch = c->link_epoch;
	h->from_rank = from;
	h->to_rank = to;
	snprintf(h->job_id, sizeof(h->job_id), "%s", c->cfg.job_id);
}

/* Where the link to (to) or from original rank p goes: the ring's when p is
 * the neighbour on that side, else the mesh's (rdouble.c). */
static struct ft__link **link_slot(struct ft_comm *c, int p, bool to)
{
	int right = c->members[(c->rank + 1) % c->size];
	int left = c->members[(c->rank + c->size - 1) % c->size];

	if (to)
		return p == right ? &c->send_link : &c->mesh_to[p];
	return p == left ? &c->recv_link : &c->mesh_from[p];
}

struct ft__link *ft__comm_link(struct ft_comm *c, int p, bool to)
{
	return *link_slot(c, p, to);
}

static int dial(struct ft_comm *c, int p, struct ft__link **slot)
{
	struct ft__hello hello;
	int rc;

	if (c->addrs[p][0] == '\0') {
		ft__det_suspect(c->det, p, true); /* load_view: only with a detector */
		return -FT_EPEERFAILED;
	}
	fill_hello(c, &hello, c->members[c->rank], p);
	if ((rc = ft__hello_seal(&hello, c->cfg.token)) != 0)
		return rc;
	rc = c->tp_ops->connect(c->tp, c->addrs[p], &hello, c->cfg.connect_timeout_ms, slot);
	if (rc == -FT_ECONNREFUSED) {
		/* a member's listener is gone (its process died since it
		 * published): a failure (to recover, but under abort), in ft_init
		 * as in an op */
		if (c->det != NULL)
			ft__info("rank %d at %s refused a link: taken as failed", p, c->addrs[p]);
		else
			ft__error("rank %d at %s refused a link: it failed", p, c->addrs[p]);
		return -FT_EPEERFAILED;
	}
	if (rc != 0)
		ft__error("cannot link to rank %d at %s: %s", p, c->addrs[p], ft_strerror(rc));
	return rc;
}

/* Whether original rank p is a member of the current view other than this rank. */
static bool other_member(const struct ft_comm *c, int p)
{
	for (int i = 0; i < c->size; i++)
		if (c->members[i] == p)
			return i != c->rank;
	return false;
}

/* Whether epoch a is later than b (rounds of one generation; wraps). */
static bool epoch_after(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) > 0;
}

/* Files link l from original rank p, made for round epoch: in its slot
 * (this round), in ahead (a later one's: its peer left a failed op before
 * this rank), or closed (an earlier round's, or a second link). */
static void file_link(struct ft_comm *c, struct ft__link *l, int p, uint32_t epoch,
		      struct ft__link **slot)
{
	if (epoch_after(epoch, c->link_epoch) && p >= 0 && p < c->cfg.world_size) {
		if (c->ahead[p] != NULL)
			c->tp_ops->link_close(c->ahead[p]);
		c->ahead[p] = l;
		c->ahead_epoch[p] = epoch;
		return;
	}
	if (slot == NULL || *slot != NULL || epoch != c->link_epoch) {
		ft__warn("closed a second or stray data link from rank %d (generation %u, "
			 "round %u)", p, c->generation, epoch);
		c->tp_ops->link_close(l);
		return;
	}
	*slot = l;
}

/* Links of this round that came early (file_link) go to their slots. */
static void take_ahead(struct ft_comm *c)
{
	for (int p = 0; p < c->cfg.world_size; p++) {
		struct ft__link *l = c->ahead[p];
		if (l == NULL || epoch_after(c->ahead_epoch[p], c->link_epoch))
			continue;
		c->ahead[p] = NULL;
		file_link(c, l, p, c->ahead_epoch[p],
			  other_member(c, p) ? link_slot(c, p, false) : NULL);
	}
}

/*
 * Every rank connects first and accepts second (the ring's links and, with a
 * mesh, recursive doubling's: rdouble.c). Connecting completes in the
 * peer's kernel backlog and the hello fits in the socket buffer, so no rank
 * waits on another's accept: no cycle. The acceptor's challenge
 * (lib/util/auth.h) is answered without waiting either: a connect returns
 * with its proof still due, and the transport answers it while this rank
 * accepts or runs an op (tcp: ft__tcp_answer_challenges).
 *
 * With a mesh, links come from several members at once, in any order. So
 * the accept takes a link from any member of the view, files it by its
 * sender, and goes on until the links wanted are there; a member's second
 * link of one generation is closed. Without a mesh only the left
 * neighbour's link is accepted.
 */
int ft__comm_link_peers(struct ft_comm *c, const int *to, int nto, const int *from, int nfrom)
{
	int64_t deadline = ft__now_ms() + c->cfg.connect_timeout_ms;
	int left = c->members[(c->rank + c->size - 1) % c->size];
	struct ft__hello expect, got;
	int rc;

	for (int i = 0; i < nto; i++) {
		struct ft__link **slot = link_slot(c, to[i], true);
		if (*slot == NULL && (rc = dial(c, to[i], slot)) != 0)
			return rc;
	}
	take_ahead(c);
	for (int i = 0; i < nfrom; i++) {
		while (*link_slot(c, from[i], false) == NULL) {
			struct ft__link *l = NULL;
			int wait = ft__ms_left(deadline);
			fill_hello(c, &expect, c->mesh_from != NULL ? -1 : left, c->members[c->rank]);
			rc = c->tp_ops->accept(c->tp, &expect, wait > 0 ? wait : 1, &l, &got);
			if (rc != 0)
				return rc;
			file_link(c, l, got.from_rank, got.epoch,
				  other_member(c, got.from_rank) ? link_slot(c, got.from_rank, false)
								 : NULL);
		}
	}
	return 0;
}

void ft__comm_new_round(struct ft_comm *c, uint32_t epoch)
{
	c->link_epoch = epoch;
}

int ft__comm_connect_ring(struct ft_comm *c)
{
	int to[FT__RD_STEPS + 1], from[FT__RD_STEPS + 1], nto = 1, nfrom = 1;

	if (c->size == 1)
		return 0;
	to[0] = c->members[(c->rank + 1) % c->size];
	from[0] = c->members[(c->rank + c->size - 1) % c->size];
	/* recursive doubling's links too, before any op: a rank that leaves an
	 * op early (a mismatch) leaves no link of it half made behind */
	if (c->mesh_to != NULL)
		ft__rd_peers(c, to, &nto, from, &nfrom);
	return ft__comm_link_peers(c, to, nto, from, nfrom);
}

void ft__comm_abort_ring(struct ft_comm *c, int err, uint64_t op_seq)
{
	struct ft__frame f;

	memset(&f, 0, sizeof(f));
	f.magic = FT__FRAME_MAGIC;
	f.type = FT__FRAME_ABORT;
	f.generation = c->generation;
	f.op_seq = op_seq;
	f.status = err;
	if (c->send_link != NULL)
		c->tp_ops->link_abort(c->send_link, &f);
	if (c->recv_link != NULL)
		c->tp_ops->link_close(c->recv_link);
	c->send_link = c->recv_link = NULL;
	for (int p = 0; c->mesh_to != NULL && p < c->cfg.world_size; p++) {
		if (c->mesh_to[p] != NULL)
			c->tp_ops->link_abort(c->mesh_to[p], &f);
		if (c->mesh_from[p] != NULL)
			c->tp_ops->link_close(c->mesh_from[p]);
		c->mesh_to[p] = c->mesh_from[p] = NULL;
	}
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
	if (c->policy->view_loaded != NULL)
		c->policy->view_loaded(c, v);
	free(c->addrs);
	free(c->members);
	c->addrs = addrs;
	c->members = v->members;
	v->members = NULL;
	c->size = v->size;
	c->rank = rank;
	if (c->generation != v->generation) {
		/* a new generation's first round: what waited for a later round
		 * of the old one is of no use */
		for (int p = 0; c->ahead != NULL && p < c->cfg.world_size; p++) {
			if (c->ahead[p] != NULL)
				c->tp_ops->link_close(c->ahead[p]);
			c->ahead[p] = NULL;
		}
		c->link_epoch = 0;
	}
	c->generation = v->generation;
	return 0;
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

int ft__comm_check(const struct ft_comm *c)
{
	return comm_usable(c);
}

int ft__comm_grow(void **buf, size_t *cap, size_t bytes)
{
	void *p = NULL;

	if (*cap >= bytes)
		return 0;
	if (posix_memalign(&p, 64, bytes) != 0)
		return -FT_ENOMEM;
	free(*buf);
	*buf = p;
	*cap = bytes;
	return 0;
}

int ft__comm_backup_reserve(struct ft_comm *c, size_t bytes)
{
	/* (Huge pages for it were measured slower here: 4 ranks, 64 MiB, 1.1-1.35x
	 * the vanilla ring against 1.00-1.02 without.) */
	return ft__comm_grow(&c->backup, &c->backup_bytes, bytes);
}
