/* conn.c: connect and accept over libfabric: addresses, the hello and its answer, MSG connection events. */
/* SPDX-License-Identifier: MIT */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric.h"

/* ---- addresses and endpoints ---- */

struct fab_addr {
	char prov[64];
	char ep;
	uint64_t node;
	int pid;
	int bell;
	uint8_t name[FAB_NAME_MAX];
	size_t namelen;
};

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int parse_addr(const char *s, struct fab_addr *a)
{
	int n = 0;
	size_t hl;
	const char *hex;

	memset(a, 0, sizeof(*a));
	if (sscanf(s, "%63[^/]/%c/%16" SCNx64 "/%d/%d/%n", a->prov, &a->ep, &a->node, &a->pid,
		   &a->bell, &n) != 5 ||
	    n == 0)
		return -FT_EINVAL;
	hex = s + n;
	hl = strlen(hex);
	if (hl == 0 || hl % 2 != 0 || hl / 2 > FAB_NAME_MAX)
		return -FT_EINVAL;
	for (size_t i = 0; i < hl / 2; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -FT_EINVAL;
		a->name[i] = (uint8_t)(hi << 4 | lo);
	}
	a->namelen = hl / 2;
	return 0;
}

/* The AV entry of an endpoint name, inserted once. */
static int av_lookup(struct ft__transport *tp, const uint8_t *name, size_t len, fi_addr_t *out)
{
	fi_addr_t a = FI_ADDR_NOTAVAIL;
	int rc;

	for (size_t i = 0; i < tp->npeers; i++)
		if (tp->peers[i].len == len && memcmp(tp->peers[i].name, name, len) == 0) {
			*out = tp->peers[i].addr;
			return 0;
		}
	if (tp->npeers == tp->peers_cap) {
		size_t cap = tp->peers_cap ? tp->peers_cap * 2 : 16;
		struct fab_peer *pp = realloc(tp->peers, cap * sizeof(*pp));
		if (pp == NULL)
			return -FT_ENOMEM;
		tp->peers = pp;
		tp->peers_cap = cap;
	}
	rc = fi_av_insert(tp->av, name, 1, &a, 0, NULL);
	if (rc != 1) {
		ft__error("fabric: fi_av_insert: %s", rc < 0 ? fi_strerror(-rc) : "address refused");
		return -FT_EINVAL;
	}
	memcpy(tp->peers[tp->npeers].name, name, len);
	tp->peers[tp->npeers].len = len;
	tp->peers[tp->npeers].addr = a;
	tp->npeers++;
	*out = a;
	return 0;
}

/*
 * shm completes the sends of an endpoint in the order they were posted:
 * its sender reads the answers to its large (CMA or SAR) messages from one
 * queue and stops at the first one not yet answered. A message that will
 * never be taken (its receiver died, or closed its end of the link) would
 * thus hold back every later send of the endpoint, to any peer, for good.
 * So each outgoing link sends from an endpoint of its own (bound to the
 * transport's AV and CQ), closed with the link: what a failure leaves
 * unanswered dies with it. The hello names that endpoint, for the answers.
 */
static int rdm_link_ep_open(struct ft__transport *tp, struct ft__link *l)
{
	size_t len = sizeof(l->m.hello.name);
	int rc = fi_endpoint(tp->domain, tp->info, &l->ep, NULL);

	if (rc != 0) {
		l->ep = NULL;
		ft__error("fabric: fi_endpoint for a link to rank %d: %s", l->peer,
			  fi_strerror(-rc));
		return ft__err_probe(-FT_EIO);
	}
	l->own_ep = true;
	if ((rc = fi_ep_bind(l->ep, &tp->av->fid, 0)) != 0 ||
	    (rc = fi_ep_bind(l->ep, &tp->cq->fid, FI_TRANSMIT | FI_RECV)) != 0 ||
	    (rc = ft__fab_enable_ep(tp, l->ep)) != 0 ||
	    (rc = fi_getname(&l->ep->fid, l->m.hello.name, &len)) != 0) {
		ft__error("fabric: cannot enable an endpoint for a link to rank %d: %s", l->peer,
			  fi_strerror(-rc));
		return -FT_EIO;
	}
	l->m.hello.namelen = (uint32_t)len;
	ft__fab_guard_own(tp, l->m.hello.name, len, true);
	return 0;
}

static int msg_ep_open(struct ft__transport *tp, struct fi_info *info, struct ft__link *l)
{
	int rc = fi_endpoint(tp->domain, info, &l->ep, l);

	if (rc != 0) {
		l->ep = NULL;
		return rc;
	}
	l->own_ep = true;
	if ((rc = fi_ep_bind(l->ep, &tp->eq->fid, 0)) != 0 ||
	    (rc = fi_ep_bind(l->ep, &tp->cq->fid, FI_TRANSMIT | FI_RECV)) != 0 ||
	    (rc = fi_enable(l->ep)) != 0)
		return rc;
	return 0;
}

/* ---- connecting ---- */

/*
 * The hello goes out without waiting for the peer: it may be connecting to
 * its own right neighbour now, and accepts only after that. Its answer (and
 * a refusal) arrives through progress as the link's first event.
 */
int ft__fab_connect(struct ft__transport *tp, const char *addr, const struct ft__hello *hello,
		    int timeout_ms, struct ft__link **out)
{
	struct fab_addr pa;
	struct ft__link *l;
	int rc;

	(void)timeout_ms;
	*out = NULL;
	if (parse_addr(addr, &pa) != 0) {
		ft__error("fabric: malformed peer address '%s'", addr);
		return -FT_EINVAL;
	}
	if (strcmp(pa.prov, tp->prov) != 0 || pa.ep != (tp->msg ? 'm' : 'r')) {
		ft__error("fabric: rank %d uses provider %s (%s), this rank %s (%s)", hello->to_rank,
			  pa.prov, pa.ep == 'm' ? "MSG" : "RDM", tp->prov, tp->msg ? "MSG" : "RDM");
		return -FT_EINVAL;
	}
	/* The owner of the address is gone (shm also faults on a name whose
	 * endpoint in this process was closed): nobody will answer. */
	if (pa.node == tp->node && pa.pid > 0 &&
	    (pa.pid == tp->pid ? !tp->msg && !ft__fab_open_here(pa.name, pa.namelen)
			       : kill(pa.pid, 0) != 0 && errno == ESRCH)) {
		ft__error("fabric: rank %d at %s is gone (pid %d)", hello->to_rank, addr, pa.pid);
		return -FT_ECONNREFUSED;
	}
	l = ft__fab_link_new(tp, hello->to_rank, true, tp->next_id++ & TAG_ID_MASK);
	if (l == NULL)
		return -FT_ENOMEM;
	l->tx_rank = hello->from_rank;
	l->rx_rank = hello->to_rank;
	l->m.hello.hello = *hello;
	l->m.hello.link_id = l->id;
	l->m.hello.node = tp->node;
	l->m.hello.piece = l->piece;
	l->m.hello.pid = tp->pid;
	l->m.hello.bell = tp->bell != NULL ? ft__fab_bell_handle() : -1;
	l->m.hello.homelen = (uint32_t)tp->namelen;
	memcpy(l->m.hello.home, tp->name, tp->namelen);
	if (!tp->msg) {
		l->m.hello.namelen = (uint32_t)tp->namelen;
		memcpy(l->m.hello.name, tp->name, tp->namelen);
		if (tp->link_eps && (rc = rdm_link_ep_open(tp, l)) != 0)
			goto fail;
		if ((rc = av_lookup(tp, pa.name, pa.namelen, &l->addr)) != 0)
			goto fail;
		l->want[C_CLOSE_RX] = true;
	} else {
		struct fi_info *info = fi_dupinfo(tp->info);
		if (info == NULL) {
			rc = -FT_ENOMEM;
			goto fail;
		}
		free(info->src_addr);
		info->src_addr = NULL;
		info->src_addrlen = 0;
		free(info->dest_addr);
		info->dest_addr = malloc(pa.namelen);
		if (info->dest_addr != NULL) {
			memcpy(info->dest_addr, pa.name, pa.namelen);
			info->dest_addrlen = pa.namelen;
		}
		rc = info->dest_addr == NULL ? -FI_ENOMEM : msg_ep_open(tp, info, l);
		if (rc == 0)
			rc = fi_connect(l->ep, pa.name, NULL, 0);
		fi_freeinfo(info);
		if (rc != 0) {
			ft__error("fabric: cannot connect to rank %d: %s", hello->to_rank,
				  fi_strerror(-rc));
			rc = ft__fab_fi_to_ft(rc);
			goto fail;
		}
	}
	ft__fab_hello_fields_seal(&l->m.hello, tp->token);
	ft__fab_watch_peer(l, pa.node, pa.pid, pa.name, pa.namelen, pa.bell);
	l->want[C_HELLO] = true;
	l->want[C_ACK_RX] = true;
	l->next = tp->links;
	tp->links = l;
	ft__fab_advance(l);
	*out = l;
	return 0;
fail:
	ft__fab_link_free(l);
	return rc;
}

/* The fields around the hello, from link_id to bell: what the MAC of
 * fields_mac covers besides the hello itself. */
#define FIELDS_AT offsetof(struct fab_hello_msg, link_id)
#define FIELDS_LEN (offsetof(struct fab_hello_msg, fields_mac) - FIELDS_AT)

_Static_assert(FIELDS_AT == sizeof(struct ft__hello) &&
		       offsetof(struct fab_hello_msg, fields_mac) + FT__HELLO_MAC ==
			       sizeof(struct fab_hello_msg),
	       "struct fab_hello_msg has padding");

void ft__fab_hello_fields_seal(struct fab_hello_msg *m, const char *token)
{
	ft__hello_ext_seal(&m->hello, (const char *)m + FIELDS_AT, FIELDS_LEN, token, m->fields_mac);
}

int ft__fab_hello_fields_check(const struct fab_hello_msg *m, const char *token)
{
	return ft__hello_ext_check(&m->hello, (const char *)m + FIELDS_AT, FIELDS_LEN, token,
				  m->fields_mac);
}

/* ---- accepting ---- */

static void refuse_rdm(struct ft__transport *tp, const struct fab_inbox *in, int rc);

/* Whether an RDM hello is a token holder's: whole, and its MAC and its
 * fields' MAC check under this job's token (what it asks for is judged by
 * the accept that takes it). */
int ft__fab_hello_sealed(const struct ft__transport *tp, const struct fab_hello_msg *m, size_t len)
{
	int rc;

	if (len != sizeof(*m))
		return -FT_EPROTO;
	if ((rc = ft__hello_check(&m->hello, &m->hello, tp->token)) != 0)
		return rc;
	return ft__fab_hello_fields_check(m, tp->token);
}

/*
 * An RDM hello as it arrives: a token holder's waits in the inbox for the
 * accept of its generation; anything else is answered at once (a peer with
 * another token learns it: -FT_EAUTH) and takes no place there, so
 * strangers' hellos never push out a neighbour's. The answer goes to the
 * endpoint the unauthenticated hello names, which takes a place in the
 * address vector: at most FAB_PEERS_MAX such places, then it is dropped
 * unanswered.
 */
void ft__fab_inbox_add(struct ft__transport *tp, const struct fab_hello_msg *msg, size_t len)
{
	int rc = ft__fab_hello_sealed(tp, msg, len);

	if (rc != 0) {
		struct fab_inbox in = {.msg = *msg, .len = len};
		if (len == sizeof(*msg) && msg->hello.magic == FT__HELLO_MAGIC) {
			tp->refused_claim = msg->hello.from_rank;
			tp->refused_gen = msg->hello.generation;
		}
		if (tp->npeers < FAB_PEERS_MAX)
			refuse_rdm(tp, &in, rc);
		else
			ft__warn_gated(&tp->warn, "fabric: dropped a hello that is not this job's: "
				       "%s", ft_strerror(rc));
		return;
	}
	if (tp->ninbox == FAB_INBOX_MAX) {
		ft__warn("fabric: too many unanswered hellos; dropping the oldest");
		memmove(&tp->inbox[0], &tp->inbox[1], (FAB_INBOX_MAX - 1) * sizeof(tp->inbox[0]));
		tp->ninbox--;
	}
	tp->inbox[tp->ninbox].msg = *msg;
	tp->inbox[tp->ninbox].len = len;
	tp->ninbox++;
}

static void describe(const struct ft__hello *h, char *buf, size_t len)
{
	snprintf(buf, len, "handshake of rank %d for rank %d, generation %u, kind %u", h->from_rank,
		 h->to_rank, h->generation, h->kind);
}

/* RDM: answers a hello that failed its check; best effort, never waits. */
static void refuse_rdm(struct ft__transport *tp, const struct fab_inbox *in, int rc)
{
	const struct fab_hello_msg *m = &in->msg;
	struct ft__link *l;
	char why[160];

	if (in->len != sizeof(*m) || m->namelen == 0 || m->namelen > FAB_NAME_MAX) {
		ft__warn_gated(&tp->warn, "fabric: dropped a malformed hello (%zu bytes)", in->len);
		return;
	}
	describe(&m->hello, why, sizeof(why));
	ft__warn_gated(&tp->warn, "fabric: refused %s: %s",
		       m->hello.magic == FT__HELLO_MAGIC ? why : "bad magic", ft_strerror(rc));
	l = ft__fab_link_new(tp, m->hello.from_rank, false, m->link_id);
	if (l == NULL)
		return;
	l->tx_rank = m->hello.to_rank;
	ft__hello_ack_seal(&l->m.ack_tx, m->hello.nonce, NULL, rc, tp->token);
	ft__fab_watch_peer(l, m->node, m->pid, NULL, 0, -1);
	if (av_lookup(tp, m->name, m->namelen, &l->addr) == 0)
		ft__fab_ctl_post(l, C_ACK_TX);
	ft__fab_link_shutdown(l, false, 0);
}

/* Judges a hello (not its nonce: that is for the accept that takes it). A
 * hello that fails for its token while claiming the expected rank makes
 * the accept's timeout -FT_EAUTH. */
static int hello_verdict(struct ft__transport *tp, const struct ft__hello *expect,
			 const struct fab_hello_msg *m, size_t len)
{
	int rc;

	if (len != sizeof(*m))
		return -FT_EPROTO;
	if (!tp->msg && (m->namelen == 0 || m->namelen > FAB_NAME_MAX || m->homelen == 0 ||
			 m->homelen > FAB_NAME_MAX))
		return -FT_EPROTO;
	rc = ft__hello_check(expect, &m->hello, tp->token);
	if (rc == -FT_EAUTH && (expect->from_rank < 0 || m->hello.from_rank == expect->from_rank))
		tp->auth_refused = true;
	/* the fields that route answers and watch the peer are trusted too */
	if (rc == 0 && ft__fab_hello_fields_check(m, tp->token) != 0) {
		ft__warn_gated(&tp->warn, "fabric: refused a hello of rank %d whose fields were "
			       "altered", m->hello.from_rank);
		rc = -FT_EAUTH;
	}
	/* judged once it is a token holder's, so that no stranger's is logged */
	if (rc == 0 && (m->piece == 0 || m->piece > tp->max_msg)) {
		ft__error("fabric: rank %d splits payloads at %" PRIu64 " bytes; this provider takes %zu",
			  m->hello.from_rank, m->piece, tp->max_msg);
		return -FT_EPROTO;
	}
	return rc;
}

/*
 * A valid hello for a generation newer than the one accepted now: a
 * neighbour adopted the next view first. It waits (in the inbox, or as a
 * pending connection) for the accept of its generation, as tcp keeps it.
 */
static bool hello_early(const struct ft__transport *tp, const struct ft__hello *expect,
			const struct ft__hello *got)
{
	struct ft__hello later = *expect;

	if (got->generation <= expect->generation)
		return false;
	later.generation = got->generation;
	later.from_rank = -1;
	return ft__hello_check(&later, got, tp->token) == 0;
}

static void inbox_remove(struct ft__transport *tp, unsigned i)
{
	memmove(&tp->inbox[i], &tp->inbox[i + 1], (tp->ninbox - i - 1) * sizeof(tp->inbox[0]));
	tp->ninbox--;
}

/* RDM: the newest valid hello in the inbox (its index, or -1); others are refused. */
static int pick_rdm(struct ft__transport *tp, const struct ft__hello *expect)
{
	int pick = -1;

	for (unsigned i = 0; i < tp->ninbox;) {
		struct fab_inbox *in = &tp->inbox[i];
		int rc = hello_verdict(tp, expect, &in->msg, in->len);
		if (rc != 0 && in->len == sizeof(in->msg) &&
		    hello_early(tp, expect, &in->msg.hello)) {
			i++;
			continue;
		}
		if (rc != 0) {
			refuse_rdm(tp, in, rc);
			inbox_remove(tp, i);
			continue;
		}
		if (pick >= 0 && tp->inbox[pick].msg.hello.from_rank == in->msg.hello.from_rank) {
			/* An older hello of the same rank: its link was given up. */
			refuse_rdm(tp, &tp->inbox[pick], -FT_ESTALE);
			inbox_remove(tp, (unsigned)pick);
			pick = (int)i - 1;
			continue;
		}
		if (pick < 0)
			pick = (int)i;
		i++;
	}
	return pick;
}

/* RDM: the hello pick_rdm chose becomes a link unless its nonce was seen. */
static struct ft__link *accept_rdm(struct ft__transport *tp, const struct ft__hello *expect)
{
	struct ft__link *l;
	int pick;

	while ((pick = pick_rdm(tp, expect)) >= 0 &&
	       ft__auth_seen_add(&tp->seen, tp->inbox[pick].msg.hello.nonce) != 0) {
		ft__warn("fabric: refused a replayed handshake of rank %d",
			 tp->inbox[pick].msg.hello.from_rank);
		refuse_rdm(tp, &tp->inbox[pick], -FT_EAUTH);
		inbox_remove(tp, (unsigned)pick);
	}
	if (pick < 0)
		return NULL;
	const struct fab_hello_msg *m = &tp->inbox[pick].msg;
	l = ft__fab_link_new(tp, m->hello.from_rank, false, m->link_id);
	if (l == NULL)
		return NULL;
	l->tx_rank = m->hello.to_rank;
	l->rx_rank = m->hello.from_rank;
	if (av_lookup(tp, m->name, m->namelen, &l->addr) != 0) {
		ft__fab_link_free(l);
		inbox_remove(tp, (unsigned)pick);
		return NULL;
	}
	l->m.hello = *m;
	ft__fab_watch_peer(l, m->node, m->pid, m->home, m->homelen, m->bell);
	inbox_remove(tp, (unsigned)pick);
	return l;
}

/* MSG: a pending connection that has not sent its hello, or the proof of its challenge. */
static bool short_of_handshake(const struct ft__link *l)
{
	return l->hello_len == 0 || (l->challenged && l->proof_len == 0);
}

/* MSG: refuses a pending connection (an answer when its hello was not answered yet). */
static void refuse_msg(struct ft__transport *tp, struct ft__link *l, int rc, const char *what)
{
	char why[160];

	ft__fab_unlist(tp, l);
	describe(&l->m.hello.hello, why, sizeof(why));
	ft__warn_gated(&tp->warn, "fabric: refused %s: %s",
		       l->hello_len == sizeof(l->m.hello) && l->m.hello.hello.magic == FT__HELLO_MAGIC
			       ? why : what, ft_strerror(rc));
	bool answer = !l->challenged && l->hello_len > 0 && l->connected;
	if (answer) {
		ft__hello_ack_seal(&l->m.ack_tx, l->m.hello.hello.nonce, NULL, rc, tp->token);
		answer = ft__fab_ctl_post(l, C_ACK_TX) == 0;
	}
	/* an answer posted goes out before the close; nothing else is waited for */
	ft__fab_link_shutdown(l, false, answer ? FAB_CLOSE_WAIT_MS : 0);
}

/* MSG: a valid hello gets the answer with a fresh challenge, and a receive
 * for its proof (posted first: MSG matches receives in order). */
static int challenge_msg(struct ft__transport *tp, struct ft__link *l)
{
	int rc = ft__auth_random(l->challenge, sizeof(l->challenge));

	if (rc != 0)
		return rc;
	ft__hello_ack_seal(&l->m.ack_tx, l->m.hello.hello.nonce, l->challenge, 0, tp->token);
	l->challenged = true;
	l->born_ms = ft__now_ms(); /* the proof's time counts from the challenge */
	l->want[C_PROOF_RX] = true;
	l->want[C_ACK_TX] = true;
	ft__fab_advance_ctl(l);
	return 0;
}

/*
 * MSG: a pending connection whose hello passes is challenged; one whose
 * proof of the challenge checks out becomes the link. A copy of a hello
 * raced ahead of the original is challenged too, and cannot prove it: the
 * original still gets its link. What fails, or sent no hello (or no proof
 * of a hello no longer expected) within FAB_HANDSHAKE_MS, is closed.
 */
static struct ft__link *accept_msg(struct ft__transport *tp, const struct ft__hello *expect)
{
	for (struct ft__link *l = tp->pending, *next; l != NULL; l = next) {
		int rc;
		next = l->next;
		if (l->error != 0 || l->peer_closed) {
			ft__fab_link_shutdown(l, false, 0);
			next = tp->pending;
			continue;
		}
		if (short_of_handshake(l))
			continue;
		rc = hello_verdict(tp, expect, &l->m.hello, l->hello_len);
		if (rc != 0 && l->hello_len == sizeof(l->m.hello) &&
		    hello_early(tp, expect, &l->m.hello.hello))
			continue;
		if (rc == 0 && ft__auth_seen_has(&tp->seen, l->m.hello.hello.nonce)) {
			ft__warn("fabric: refused a replayed handshake of rank %d",
				 l->m.hello.hello.from_rank);
			rc = -FT_EAUTH;
		}
		if (rc == 0 && !l->challenged) {
			if ((rc = challenge_msg(tp, l)) == 0)
				continue;
		}
		if (rc == 0 && (l->proof_len != sizeof(l->m.proof_rx) ||
				ft__hello_proof_check(&l->m.proof_rx, &l->m.hello.hello, l->challenge,
						     tp->token) != 0)) {
			ft__warn("fabric: refused a link of rank %d that did not prove its challenge",
				 l->m.hello.hello.from_rank);
			rc = -FT_EAUTH;
		}
		if (rc == 0 && ft__auth_seen_add(&tp->seen, l->m.hello.hello.nonce) != 0)
			rc = -FT_EAUTH;
		if (rc != 0) {
			refuse_msg(tp, l, rc, "bad magic");
			next = tp->pending; /* a refusal drives the transport: start again */
			continue;
		}
		ft__fab_unlist(tp, l);
		l->peer = l->m.hello.hello.from_rank;
		l->id = l->m.hello.link_id;
		ft__fab_watch_peer(l, l->m.hello.node, l->m.hello.pid, NULL, 0, -1);
		return l;
	}
	return NULL;
}

/* MSG: refuses each pending connection pick chooses (arg: its cutoff), from
 * the list's head again after each: a refusal drives the transport, which
 * may change the list. */
static void refuse_pending(struct ft__transport *tp, bool (*pick)(const struct ft__link *, int64_t),
			   int64_t arg, int rc, const char *what)
{
	for (struct ft__link *l = tp->pending; l != NULL;) {
		if (pick(l, arg)) {
			refuse_msg(tp, l, rc, what);
			l = tp->pending;
		} else {
			l = l->next;
		}
	}
}

/* Short of its handshake and come before born_before. */
static bool overdue(const struct ft__link *l, int64_t born_before)
{
	return short_of_handshake(l) && l->born_ms <= born_before;
}

static bool challenged(const struct ft__link *l, int64_t unused)
{
	(void)unused;
	return l->challenged;
}

/* MSG, whenever the transport is driven: connections short of a hello, or
 * of the proof of their challenge, for FAB_HANDSHAKE_MS are closed. */
void ft__fab_sweep_pending(struct ft__transport *tp)
{
	if (tp->pending == NULL)
		return; /* the common case, on every drive: no clock read */
	refuse_pending(tp, overdue, ft__now_ms() - FAB_HANDSHAKE_MS, -FT_ETIMEDOUT,
		       "a connection short of a handshake");
}

/* MSG, once an accept gave up: the connections it challenged go (a copy
 * raced ahead of the original ends here). */
static void drop_challenged(struct ft__transport *tp)
{
	refuse_pending(tp, challenged, 0, -FT_EAUTH, "a challenged connection");
}

int ft__fab_accept(struct ft__transport *tp, const struct ft__hello *expect, int timeout_ms,
		   struct ft__link **out, struct ft__hello *got)
{
	int64_t deadline = ft__now_ms() + timeout_ms;
	struct ft__link *l;

	*out = NULL;
	tp->auth_refused = false;
	for (;;) {
		ft__fab_drive(tp);
		l = tp->msg ? accept_msg(tp, expect) : accept_rdm(tp, expect);
		if (l != NULL)
			break;
		if (ft__ms_left(deadline) == 0 &&
		    (tp->auth_refused || (tp->refused_claim == expect->from_rank &&
					  tp->refused_gen == expect->generation))) {
			ft__error("fabric: rank %d's handshakes failed for their token, job or version",
				  expect->from_rank);
			if (tp->msg)
				drop_challenged(tp);
			return -FT_EAUTH;
		}
		if (ft__ms_left(deadline) == 0) {
			ft__error("fabric: no valid handshake from rank %d within %d ms",
				  expect->from_rank, timeout_ms);
			if (tp->msg)
				drop_challenged(tp);
			return -FT_ETIMEDOUT;
		}
		if (tp->interrupted != NULL && tp->interrupted(tp->interrupt_arg))
			return -FT_EABORTED;
		ft__fab_wait(tp, tp->interrupted != NULL && ft__ms_left(deadline) > 20
			     ? 20 : ft__ms_left(deadline), false);
	}
	if (!tp->msg) { /* MSG: its answer went out with the challenge */
		ft__hello_ack_seal(&l->m.ack_tx, l->m.hello.hello.nonce, NULL, 0, tp->token);
		l->want[C_ACK_TX] = true;
	}
	l->want[C_CLOSE_RX] = !tp->msg;
	l->piece = (size_t)l->m.hello.piece;
	*got = l->m.hello.hello;
	l->next = tp->links;
	tp->links = l; /* listed before anything drives: its events find it */
	/* (MSG: the other challenged connections stay for the next accept:
	 * several peers link to this rank at once, recursive doubling's mesh;
	 * a copy of a hello never proves it, and the sweep closes it) */
	ft__fab_advance(l);
	*out = l;
	return 0;
}

/* ---- connection events (MSG endpoints) ---- */

/* The link whose endpoint is fid; compares pointers only (a closed fid is gone). */
static struct ft__link *link_of_fid(struct ft__transport *tp, const struct fid *fid)
{
	for (struct ft__link *l = tp->links; l != NULL; l = l->next)
		if (l->ep != NULL && &l->ep->fid == fid)
			return l;
	for (struct ft__link *l = tp->pending; l != NULL; l = l->next)
		if (l->ep != NULL && &l->ep->fid == fid)
			return l;
	return NULL;
}

/* An incoming connection: accepted at once, judged by the hello it sends. */
static void on_connreq(struct ft__transport *tp, struct fi_info *info)
{
	struct ft__link *l = ft__fab_link_new(tp, -1, false, 0);
	int rc;

	if (l == NULL) {
		fi_reject(tp->pep, info->handle, NULL, 0);
		fi_freeinfo(info);
		return;
	}
	rc = msg_ep_open(tp, info, l);
	if (rc == 0) {
		l->want[C_HELLO] = true;
		rc = (int)ft__fab_ctl_post(l, C_HELLO);
	}
	if (rc == 0)
		rc = fi_accept(l->ep, NULL, 0);
	if (rc != 0) {
		ft__warn("fabric: cannot take an incoming connection: %s", fi_strerror(-rc));
		if (l->ep == NULL)
			fi_reject(tp->pep, info->handle, NULL, 0);
		fi_freeinfo(info);
		ft__fab_link_shutdown(l, false, 0);
		return;
	}
	fi_freeinfo(info);
	l->born_ms = ft__now_ms();
	if (tp->npending >= FAB_PENDING_MAX) {
		/* the oldest that sent no hello yet or one not of this job (a
		 * stranger's), else the oldest not challenged, else the oldest:
		 * strangers go first (newest first in the list) */
		struct ft__link *drop = NULL, *unchallenged = NULL, *last = NULL;
		for (struct ft__link *p = tp->pending; p != NULL; p = p->next) {
			last = p;
			if (p->hello_len == 0 || p->stranger)
				drop = p;
			if (!p->challenged)
				unchallenged = p;
		}
		ft__warn_gated(&tp->warn, "fabric: too many connections without a handshake; "
			       "dropping one");
		ft__fab_link_shutdown(drop != NULL ? drop : unchallenged != NULL ? unchallenged : last,
				      false, 0);
	}
	l->next = tp->pending;
	tp->pending = l;
	tp->npending++;
}

int ft__fab_drive_eq(struct ft__transport *tp)
{
	uint64_t buf[(sizeof(struct fi_eq_cm_entry) + 256) / sizeof(uint64_t)];
	struct fi_eq_cm_entry *e = (struct fi_eq_cm_entry *)buf;
	int n = 0;

	for (;;) {
		uint32_t event;
		ssize_t rc = fi_eq_read(tp->eq, &event, buf, sizeof(buf), 0);
		struct ft__link *l;
		if (rc == -FI_EAGAIN)
			break;
		if (rc == -FI_EAVAIL) {
			struct fi_eq_err_entry ee;
			memset(&ee, 0, sizeof(ee));
			if (fi_eq_readerr(tp->eq, &ee, 0) > 0) {
				l = link_of_fid(tp, ee.fid);
				ft__debug("fabric: connection event error: %s", fi_strerror(ee.err));
				if (l != NULL) {
					l->peer_closed = true;
					ft__fab_link_fail(l, -FT_EPEERFAILED);
				}
			}
			n++;
			continue;
		}
		if (rc < 0) {
			ft__error("fabric: fi_eq_read: %s", fi_strerror((int)-rc));
			break;
		}
		n++;
		switch (event) {
		case FI_CONNREQ:
			on_connreq(tp, e->info);
			break;
		case FI_CONNECTED:
			if ((l = link_of_fid(tp, e->fid)) != NULL)
				l->connected = true;
			break;
		case FI_SHUTDOWN:
			if ((l = link_of_fid(tp, e->fid)) != NULL) {
				l->peer_closed = true;
				if (l->grace == 0)
					l->grace = ft__now_ms() + FAB_DEAD_GRACE_MS;
			}
			break;
		default:
			break;
		}
	}
	return n;
}
