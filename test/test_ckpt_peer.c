/* test_ckpt_peer.c: the peer checkpoint service: a ward's rounds kept by its holder and fetched back exact, and records a member forges refused without harm. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_peer.h"
#include "ckpt_peer_int.h"
#include "ctl.h"
#include "ftcc.h"
#include "internal.h"
#include "jnl.h"
#include "testutil.h"

#define JOB "pk-test"
#define TOKEN "pk-token"
#define BB 256
#define NB 10
#define BYTES (BB * NB - 100) /* the last block is short */

/* The ward (rank 0) and its holder (rank 1). */
static struct ft__ckpt_peer *ward, *holder;

static bool over_the_link; /* FTCC_CKPT_LOCAL=0's: no fetch in one copy */

static void open_both(void)
{
	struct ft__ckpt_peer_params pp = {.world_size = 2, .job_id = JOB, .token = TOKEN,
					  .bind_host = "127.0.0.1", .stall_ms = 2000,
					  .no_local = over_the_link};

	pp.rank = 0;
	cr_assert_eq(ft__ckpt_peer_open(&pp, &ward), 0);
	pp.rank = 1;
	cr_assert_eq(ft__ckpt_peer_open(&pp, &holder), 0);
	ft__ckpt_peer_set_addr(ward, 1, ft__ckpt_peer_addr(holder));
	ft__ckpt_peer_set_addr(holder, 0, ft__ckpt_peer_addr(ward));
}

/* The ward's geometry: one float32 region of BYTES. */
static void geometry(struct ft__ckpt_image *img, struct ft__ckpt_jregion *reg)
{
	memset(img, 0, sizeof(*img));
	*reg = (struct ft__ckpt_jregion){.index = 0, .dtype = FT_FLOAT32, .bytes = BYTES,
					 .nblocks = NB};
	img->head = (struct ft__ckpt_jhead){.job_hash = ft__jnl_job_hash(JOB), .nonce = 7,
					    .rank = 0, .world_size = 2, .block_bytes = BB,
					    .interval = 1, .fraction = 1, .total_bytes = 2 * BYTES};
	img->regs = reg;
	img->nregs = 1;
}

static size_t blen(size_t b)
{
	return b + 1 < NB ? BB : BYTES - b * BB;
}

/* Round `round` of every block, each filled with byte value v (slot s). */
struct round_msg {
	struct ft__ckpt_copy head[NB];
	unsigned char data[NB][BB];
	struct iovec piece[2 * NB];
	char commit[sizeof(struct ft__ckpt_jrec) + NB * sizeof(struct ft__ckpt_jentry) + NB * 4 + 8];
	size_t commit_len;
};

static void make_round(struct round_msg *m, uint64_t round, int slot, unsigned char v)
{
	size_t ent = NB * sizeof(struct ft__ckpt_jentry), res = ((NB * sizeof(float)) + 7) & ~7u;
	struct ft__ckpt_jrec h;

	for (size_t b = 0; b < NB; b++) {
		memset(m->data[b], v, BB);
		ft__ckpt_copy_seal(&m->head[b],
				   &(struct ft__ckpt_copy){.slot = (uint16_t)slot, .region = 0,
							   .len = (uint32_t)blen(b), .block = b,
							   .round = round, .step = round * 10,
							   .job_hash = ft__jnl_job_hash(JOB), .rank = 0},
				   m->data[b]);
		m->piece[2 * b] = (struct iovec){&m->head[b], sizeof(m->head[b])};
		m->piece[2 * b + 1] = (struct iovec){m->data[b], blen(b)};
	}
	m->commit_len = sizeof(h) + ent + res;
	memset(m->commit, 0, sizeof(m->commit));
	h = ft__ckpt_rec_head(FT__CKPT_JCOMMIT, m->commit_len, round, round * 10, NB, NB);
	memcpy(m->commit, &h, sizeof(h));
	for (size_t b = 0; b < NB; b++) {
		struct ft__ckpt_jentry e = {.region = 0, .slot = (uint32_t)slot, .block = b};
		memcpy(m->commit + sizeof(h) + b * sizeof(e), &e, sizeof(e));
	}
	ft__ckpt_rec_seal(m->commit, m->commit_len);
}

static void post(struct round_msg *m, uint64_t round, const char *head, size_t hlen)
{
	struct ft__ckpt_peer_round pr = {.round = round, .holder = 1, .head = head,
					 .head_len = hlen, .piece = m->piece, .n = NB,
					 .commit = m->commit, .commit_len = m->commit_len};

	cr_assert_eq(ft__ckpt_peer_post(ward, &pr), 0);
	ft__ckpt_peer_wait_sent(ward, round);
}

/* Block b of a fetched image reads as of round, and its bytes (where the
 * read leaves them: out, or the fetch's destination) are all v. */
static void expect_block(const struct ft__ckpt_image *img, size_t b, unsigned char *out,
			 const unsigned char *data, unsigned char v, uint64_t round, const char *what)
{
	uint64_t r, step;
	int slot;
	char why[160] = "";

	cr_assert_eq(ft__ckpt_read_block(img, 0, b, out, &r, &step, &slot, why, sizeof(why)), 0,
		     "%s: block %zu: %s", what, b, why);
	cr_assert_eq(r, round, "%s: block %zu", what, b);
	for (size_t j = 0; j < blen(b); j++)
		cr_assert_eq(data[j], v, "%s: block %zu byte %zu", what, b, j);
}

/* The holder's copy of the ward, fetched and read: every block v, from round. */
static void expect_held(unsigned char v, uint64_t round, const char *what)
{
	struct ft__ckpt_image img;
	unsigned char out[BB];
	long end = tu_now_ms() + 5000;
	int rc;

	/* the send returned; the holder applies what it read in its own time */
	do {
		rc = ft__ckpt_peer_fetch(ward, 1, 0, 0, 0, NB, BB, NULL, 0, 5000, &img);
		if (rc == 0 && img.last_round == round)
			break;
		if (rc == 0)
			ft__ckpt_image_free(&img);
		tu_sleep_ms(5);
	} while (tu_now_ms() < end);
	cr_assert_eq(rc, 0, "%s: fetch: %s", what, ft_strerror(rc));
	cr_assert_eq(img.last_round, round, "%s: the holder's newest round", what);
	for (size_t b = 0; b < NB; b++)
		expect_block(&img, b, out, out, v, round, what);
	ft__ckpt_image_free(&img);

	/* the same, checked into a destination as it comes (blocks 1..NB-1:
	 * the range starts inside the region), which nothing else is written */
	unsigned char dst[NB * BB + 1];
	memset(dst, 0xee, sizeof(dst));
	rc = ft__ckpt_peer_fetch(ward, 1, 0, 0, 1, NB - 1, BB, dst, 0, 5000, &img);
	cr_assert_eq(rc, 0, "%s: fetch into a destination: %s", what, ft_strerror(rc));
	cr_assert_eq(img.mem, NULL, "%s: the copies were held in memory", what);
	for (size_t b = 1; b < NB; b++)
		expect_block(&img, b, out, dst + (b - 1) * BB, v, round, what);
	for (size_t j = (NB - 2) * BB + blen(NB - 1); j < sizeof(dst); j++)
		cr_assert_eq(dst[j], 0xee, "%s: byte %zu past the range written", what, j);
	ft__ckpt_image_free(&img);
	/* of another run: refused before a byte is written */
	memset(dst, 0xee, sizeof(dst));
	cr_assert_eq(ft__ckpt_peer_fetch(ward, 1, 0, 0, 0, NB, BB, dst, 12345, 5000, &img),
		     -FT_ECORRUPT, "%s: an answer of another run", what);
	for (size_t j = 0; j < sizeof(dst); j++)
		cr_assert_eq(dst[j], 0xee, "%s: another run's byte %zu written", what, j);
}

/* A member that holds the token and sends whatever it likes, as rank 0. */
static struct ft__ctl forger;

static int forge_link(void)
{
	struct ft__ctl_params cp = {.rank = 0, .world_size = 2, .job_id = JOB, .token = TOKEN,
				    .bind_host = "127.0.0.1", .min_payload = UINT16_MAX,
				    .who = "forger"};
	struct ft__ctl_msg m;
	char addr[64];
	int i;

	cr_assert_eq(ft__ctl_open(&forger, &cp), 0);
	ft__ckpt_peer_get_addr(ward, 1, addr, sizeof(addr));
	i = ft__ctl_connect(&forger, addr, 1, 0, 5000);
	cr_assert_geq(i, 0, "connect: %s", ft_strerror(i));
	/* the handshake: our PROOF goes out when its ACK is read */
	for (long end = tu_now_ms() + 5000; !forger.links[i].proved && tu_now_ms() < end;) {
		if (ft__ctl_next(&forger, i, &m) < 0)
			break;
		tu_sleep_ms(1);
	}
	cr_assert(forger.links[i].proved, "the holder took the forger's hello");
	return i;
}

static void kept_and_fetched(void);

/* a fetcher on the holder's kernel reads its memory itself (LOCAL) */
Test(ckpt_peer_unit, rounds_kept_and_fetched_exact, .timeout = 30)
{
	kept_and_fetched();
}

/* the same over the link (a holder on another host) */
Test(ckpt_peer_unit, rounds_kept_and_fetched_exact_over_the_link, .timeout = 30)
{
	over_the_link = true;
	kept_and_fetched();
}

static void kept_and_fetched(void)
{
	struct ft__ckpt_image img;
	struct ft__ckpt_jregion reg;
	struct round_msg *m = malloc(sizeof(*m));
	char *head;
	size_t hlen;

	open_both();
	geometry(&img, &reg);
	cr_assert_eq(ft__ckpt_build_journal(&img, false, &head, &hlen), 0);
	/* nothing held yet: "none" */
	cr_assert_eq(ft__ckpt_peer_fetch(ward, 1, 0, 0, 0, NB, BB, NULL, 0, 5000, &img), -FT_EIO);
	make_round(m, 1, 0, 0x11);
	post(m, 1, head, hlen);
	expect_held(0x11, 1, "round 1");
	make_round(m, 2, 1, 0x22);
	post(m, 2, NULL, 0);
	expect_held(0x22, 2, "round 2");
	/* a range outside the geometry: -FT_EINVAL, nothing else */
	cr_assert_eq(ft__ckpt_peer_fetch(ward, 1, 0, 0, 5, NB, BB, NULL, 0, 5000, &img), -FT_EINVAL);
	cr_assert_eq(ft__ckpt_peer_fetch(ward, 1, 0, 3, 0, 1, BB, NULL, 0, 5000, &img), -FT_EINVAL);
	free(head);
	free(m);
	ft__ckpt_peer_close(ward);
	ft__ckpt_peer_close(holder);
}

struct forged {
	const char *what;
	int type;
	void *data;
	size_t len;
};

/* A forger's link on this kernel, lent the ward's mirror (its FETCH asked
 * for one copy, and LOCAL came). */
static int lent_link(void)
{
	struct pk_fetch_msg ask = {0, 0, 0, NB, {{0}, 0, 0}};
	struct ft__ctl_msg msg;
	bool lent = false;
	int i = forge_link(), rc = 0;

	ft__pk_local_id(&ask.local);
	cr_assert_eq(ft__ctl_send(&forger, i, FT__CTL_CK_FETCH, 0, &ask, sizeof(ask)), 0);
	for (long end = tu_now_ms() + 5000;
	     !lent && (rc = ft__ctl_next(&forger, i, &msg)) >= 0 && tu_now_ms() < end;) {
		lent |= rc == 1 && msg.type == FT__CTL_CK_LOCAL;
		if (rc == 0)
			tu_sleep_ms(2);
	}
	cr_assert(lent, "the holder lent its mirror to a member on its kernel");
	return i;
}

Test(ckpt_peer_unit, forged_records_are_refused_and_the_copy_stays, .timeout = 60)
{
	struct ft__ckpt_image img;
	struct ft__ckpt_jregion reg;
	struct round_msg *m = malloc(sizeof(*m));
	char *head, big[70000];
	size_t hlen;

	open_both();
	geometry(&img, &reg);
	cr_assert_eq(ft__ckpt_build_journal(&img, false, &head, &hlen), 0);
	make_round(m, 1, 0, 0x33);
	post(m, 1, head, hlen);
	expect_held(0x33, 1, "before");

	/* each forged record on a link of its own: the holder drops the link */
	struct forged bad[9];
	struct ft__ckpt_copy c = m->head[0];
	struct ft__ckpt_copy c_far = c, c_slot = c, c_len = c;
	c_far.block = NB + 5;
	c_slot.slot = 7;
	c_len.len = BB * 4;
	unsigned char rec_far[sizeof(c) + BB], rec_slot[sizeof(c) + BB], rec_len[sizeof(c) + BB];
	memcpy(rec_far, &c_far, sizeof(c));
	memcpy(rec_slot, &c_slot, sizeof(c));
	memcpy(rec_len, &c_len, sizeof(c));
	char commit_bad[sizeof(m->commit)];
	memcpy(commit_bad, m->commit, sizeof(commit_bad));
	commit_bad[sizeof(struct ft__ckpt_jrec)] ^= 0x40; /* an entry flipped: its CRC fails */
	char head_bad[512];
	memcpy(head_bad, head, hlen);
	head_bad[hlen - 3] ^= 1;
	memset(big, 'x', sizeof(big));
	int n = 0;
	bad[n++] = (struct forged){"a copy of a block beyond the region", FT__CTL_CK_COPY, rec_far,
				    sizeof(rec_far)};
	bad[n++] = (struct forged){"a copy of slot 7", FT__CTL_CK_COPY, rec_slot, sizeof(rec_slot)};
	bad[n++] = (struct forged){"a copy longer than its block", FT__CTL_CK_COPY, rec_len,
				    sizeof(rec_len)};
	bad[n++] = (struct forged){"a COMMIT that does not check", FT__CTL_CK_COMMIT, commit_bad,
				    m->commit_len};
	bad[n++] = (struct forged){"a HEAD that does not check", FT__CTL_CK_HEAD, head_bad, hlen};
	bad[n++] = (struct forged){"a fetch of the wrong length", FT__CTL_CK_FETCH, big, 5};
	bad[n++] = (struct forged){"a message of an unknown type", 99, big, 10};
	bad[n++] = (struct forged){"a copy head alone", FT__CTL_CK_COPY, big, 3};
	bad[n++] = (struct forged){"a DONE with nothing lent", FT__CTL_CK_DONE, big, 0};
	for (int k = 0; k < n; k++) {
		int i = forge_link();
		struct ft__ctl_msg msg;
		int rc = ft__ctl_send(&forger, i, (enum ft__ctl_type)bad[k].type, 0, bad[k].data,
				      bad[k].len);
		cr_assert_eq(rc, 0, "%s: sent", bad[k].what);
		/* the holder closes the link */
		for (long end = tu_now_ms() + 5000; (rc = ft__ctl_next(&forger, i, &msg)) >= 0 &&
						    tu_now_ms() < end;)
			tu_sleep_ms(2);
		cr_assert_lt(rc, 0, "%s: the holder closed the link", bad[k].what);
		ft__ctl_close(&forger);
		expect_held(0x33, 1, bad[k].what);
	}
	/* a record that grows past any the geometry allows: PART after PART */
	{
		int i = forge_link(), rc = 0;
		struct ft__ctl_msg msg;
		for (int k = 0; k < 64 && rc == 0; k++)
			rc = ft__ctl_send(&forger, i, FT__CTL_CK_PART, 0, big, 65000);
		for (long end = tu_now_ms() + 5000; (rc = ft__ctl_next(&forger, i, &msg)) >= 0 &&
						    tu_now_ms() < end;)
			tu_sleep_ms(2);
		cr_assert_lt(rc, 0, "an endless record: the holder closed the link");
		ft__ctl_close(&forger);
		expect_held(0x33, 1, "an endless record");
	}
	/* a new stream's HEAD alone (a new incarnation, say): the copy before it
	 * is served until the new stream's first round commits */
	{
		int i = forge_link();
		cr_assert_eq(ft__ctl_send(&forger, i, FT__CTL_CK_HEAD, 0, head, hlen), 0);
		tu_sleep_ms(50);
		expect_held(0x33, 1, "a new stream's HEAD alone");
		ft__ctl_close(&forger);
	}
	/* records for the ward's stream on a link its HEAD did not come on
	 * (an old link's late ones, say) are refused: the ward's own link,
	 * whose stream the forged HEAD replaced, is closed at its next round */
	uint64_t lost = ft__ckpt_peer_lost(ward, 1);
	make_round(m, 2, 1, 0x44);
	post(m, 2, NULL, 0);
	expect_held(0x33, 1, "a round on a link without the stream's HEAD");
	for (long end = tu_now_ms() + 5000; ft__ckpt_peer_lost(ward, 1) == lost && tu_now_ms() < end;)
		tu_sleep_ms(2);
	cr_assert_neq(ft__ckpt_peer_lost(ward, 1), lost, "the ward learnt its stream was lost");
	/* the ward starts its stream again, HEAD first, and it goes on */
	make_round(m, 3, 1, 0x55);
	post(m, 3, head, hlen);
	expect_held(0x55, 3, "a new stream after the forgeries");
	/* a member that asks and asks and never reads an answer: one answer at
	 * a time is queued for it, and the others are still served */
	{
		struct pk_fetch_msg ask = {0, 0, 0, NB, {{0}, 0, 0}};
		int i = forge_link();
		for (int k = 0; k < 500; k++)
			if (ft__ctl_send(&forger, i, FT__CTL_CK_FETCH, 0, &ask, sizeof(ask)) != 0)
				break;
		expect_held(0x55, 3, "a member asking without reading its answers");
		make_round(m, 4, 0, 0x66);
		post(m, 4, NULL, 0);
		expect_held(0x66, 4, "the ward's stream while a member does not read");
		ft__ctl_close(&forger);
	}
	/* a member on this kernel that is lent the mirror (LOCAL) and never
	 * gives it back: the link is dropped after stall_ms, and the ward's
	 * stream, held meanwhile, goes on */
	{
		struct ft__ctl_msg msg;
		long t0 = tu_now_ms();
		int i = lent_link(), rc = 0;
		for (long end = t0 + 8000; (rc = ft__ctl_next(&forger, i, &msg)) >= 0 &&
					   tu_now_ms() < end;)
			tu_sleep_ms(2);
		cr_assert_lt(rc, 0, "a lent mirror never given back: the link closed");
		cr_assert_geq(tu_now_ms() - t0, 1500, "the link closed before stall_ms");
		ft__ctl_close(&forger);
		make_round(m, 5, 1, 0x77);
		post(m, 5, NULL, 0);
		expect_held(0x77, 5, "the ward's stream after a lent mirror was taken back");
	}
	/* a member lent the mirror that sends a stream's HEAD and COMMIT on
	 * that link (which would free the mirror it reads): the link is
	 * closed, and the held copy stays */
	{
		struct ft__ctl_msg msg;
		int i = lent_link(), rc = 0;
		cr_assert_eq(ft__ctl_send(&forger, i, FT__CTL_CK_HEAD, 0, head, hlen), 0);
		(void)ft__ctl_send(&forger, i, FT__CTL_CK_COMMIT, 0, m->commit, m->commit_len);
		long t0 = tu_now_ms();
		for (long end = t0 + 5000; (rc = ft__ctl_next(&forger, i, &msg)) >= 0 &&
					   tu_now_ms() < end;)
			tu_sleep_ms(2);
		cr_assert_lt(rc, 0, "a stream on a lent link: the link closed");
		cr_assert_lt(tu_now_ms() - t0, 1500, "closed at once, not at the lend's end");
		ft__ctl_close(&forger);
		expect_held(0x77, 5, "a stream on a lent link");
	}
	free(head);
	free(m);
	ft__ckpt_peer_close(ward);
	ft__ckpt_peer_close(holder);
}

/* ---- a holder that lies in its LOCAL answer ---- */

/* The holder's true answer to a fetch of every block on this kernel: its
 * IMAGE and its LOCAL, as the forger (rank 0) got them. */
struct answer {
	unsigned char image[4096];
	size_t image_len;
	unsigned char local[sizeof(struct pk_local_msg) + (NB + 7) / 8];
	size_t local_len;
};

static void true_answer(struct answer *a)
{
	struct pk_fetch_msg ask = {0, 0, 0, NB, {{0}, 0, 0}};
	struct ft__ctl_msg msg;
	int i = forge_link(), rc = 0;

	memset(a, 0, sizeof(*a));
	ft__pk_local_id(&ask.local);
	cr_assert_eq(ft__ctl_send(&forger, i, FT__CTL_CK_FETCH, 0, &ask, sizeof(ask)), 0);
	for (long end = tu_now_ms() + 5000;
	     a->local_len == 0 && (rc = ft__ctl_next(&forger, i, &msg)) >= 0 && tu_now_ms() < end;) {
		if (rc == 0) {
			tu_sleep_ms(2);
		} else if (msg.type == FT__CTL_CK_IMAGE) {
			cr_assert_leq(msg.len, sizeof(a->image));
			memcpy(a->image, msg.payload, msg.len);
			a->image_len = msg.len;
		} else if (msg.type == FT__CTL_CK_LOCAL) {
			cr_assert_eq(msg.len, sizeof(a->local));
			memcpy(a->local, msg.payload, msg.len);
			a->local_len = msg.len;
		}
	}
	cr_assert(a->image_len > 0 && a->local_len > 0, "the holder answered IMAGE and LOCAL");
	ft__ctl_close(&forger); /* (the lend ends with the link) */
}

struct fetch_job {
	unsigned char dst[NB * BB];
	struct ft__ckpt_image img;
	int rc;
};

static void *fetch_main(void *arg)
{
	struct fetch_job *j = arg;

	j->rc = ft__ckpt_peer_fetch(ward, 1, 0, 0, 0, NB, BB, j->dst, 0, 3000, &j->img);
	return NULL;
}

/* The ward fetches from `liar` (in rank 1's place), which answers its FETCH
 * with the holder's true IMAGE and LOCAL, its head replaced by l: the
 * fetch's result, once nothing was found written in the destination. */
static int told(struct ft__ctl *liar, const struct answer *a, const struct pk_local_msg *l,
		struct fetch_job *j, const char *what)
{
	unsigned char lie[sizeof(a->local)];
	pthread_t t;
	bool answered = false;

	memcpy(lie, a->local, sizeof(lie));
	memcpy(lie, l, sizeof(*l));
	memset(j->dst, 0xee, sizeof(j->dst));
	cr_assert_eq(pthread_create(&t, NULL, fetch_main, j), 0);
	for (long end = tu_now_ms() + 5000; !answered && tu_now_ms() < end; tu_sleep_ms(1)) {
		ft__ctl_accept(liar);
		for (int i = 0; i < liar->nlinks && !answered; i++) {
			struct ft__ctl_msg msg;
			while (!answered && liar->links[i].fd >= 0 && ft__ctl_next(liar, i, &msg) == 1) {
				if (msg.type != FT__CTL_CK_FETCH)
					continue;
				cr_assert_eq(ft__ctl_send(liar, i, FT__CTL_CK_IMAGE, 0, a->image,
							  a->image_len), 0);
				cr_assert_eq(ft__ctl_send(liar, i, FT__CTL_CK_LOCAL, 0, lie, sizeof(lie)),
					     0);
				answered = true;
			}
		}
	}
	cr_assert(answered, "%s: the ward asked the liar", what);
	cr_assert_eq(pthread_join(t, NULL), 0);
	for (size_t k = 0; k < sizeof(j->dst); k++)
		cr_assert_eq(j->dst[k], 0xee, "%s: byte %zu written", what, k);
	return j->rc;
}

/*
 * A member on the holder's kernel reads the holder's memory where the
 * holder says its copies lie (LOCAL): a holder that lies about it (a
 * process that is gone, addresses nothing is mapped at, copies at the wrong
 * place, a count that is not the fetch's) costs that fetch only. It fails
 * at once (or every copy fails its check), nothing is written in the
 * destination, and the ward reads its true holder afterwards as before.
 */
Test(ckpt_peer_unit, a_holder_lying_in_its_one_copy_answer, .timeout = 60)
{
	struct ft__ckpt_image img;
	struct ft__ckpt_jregion reg;
	struct round_msg *m = malloc(sizeof(*m));
	struct fetch_job *j = calloc(1, sizeof(*j));
	struct answer a;
	struct pk_local_msg loc;
	char *head, holder_addr[64];
	size_t hlen;
	int rc;

	open_both();
	geometry(&img, &reg);
	cr_assert_eq(ft__ckpt_build_journal(&img, false, &head, &hlen), 0);
	make_round(m, 1, 0, 0x44);
	post(m, 1, head, hlen);
	/* (until the holder applied the round: its answer holds it) */
	for (long end = tu_now_ms() + 5000;; tu_sleep_ms(5)) {
		true_answer(&a);
		struct ft__ckpt_image held;
		if (ft__ckpt_parse(a.image, a.image_len, &held) == 0) {
			uint64_t last = held.last_round;
			ft__ckpt_image_free(&held);
			if (last == 1)
				break;
		}
		cr_assert_lt(tu_now_ms(), end, "the holder never held round 1");
	}
	memcpy(&loc, a.local, sizeof(loc));

	struct ft__ctl liar;
	struct ft__ctl_params cp = {.rank = 1, .world_size = 2, .job_id = JOB, .token = TOKEN,
				    .bind_host = "127.0.0.1", .min_payload = UINT16_MAX,
				    .who = "liar"};
	cr_assert_eq(ft__ctl_open(&liar, &cp), 0);
	ft__ckpt_peer_get_addr(ward, 1, holder_addr, sizeof(holder_addr));
	ft__ckpt_peer_set_addr(ward, 1, liar.addr);

	/* a process that is gone (a child, reaped) */
	pid_t child = fork();
	cr_assert_geq(child, 0);
	if (child == 0)
		_exit(0);
	cr_assert_eq(waitpid(child, NULL, 0), child);
	struct pk_local_msg l = loc;
	l.pid = child;
	rc = told(&liar, &a, &l, j, "a gone process");
	cr_assert_eq(rc, -FT_ECORRUPT, "a gone process: %s", ft_strerror(rc));

	/* addresses nothing is mapped at */
	l = loc;
	l.base[0] = l.base[1] = 4096;
	rc = told(&liar, &a, &l, j, "unmapped addresses");
	cr_assert_eq(rc, -FT_ECORRUPT, "unmapped addresses: %s", ft_strerror(rc));

	/* the copies a header's length off: read, each fails its check, none
	 * is written, and reading them says so */
	l = loc;
	l.base[0] += FT__CKPT_HDR;
	l.base[1] += FT__CKPT_HDR;
	rc = told(&liar, &a, &l, j, "copies at the wrong place");
	if (rc == 0) {
		unsigned char out[BB];
		for (size_t b = 0; b < NB; b++) {
			uint64_t r, step;
			int slot;
			char why[160] = "";
			cr_assert_neq(ft__ckpt_read_block(&j->img, 0, b, out, &r, &step, &slot, why,
							  sizeof(why)), 0,
				      "a copy read at the wrong place checked: block %zu", b);
		}
		ft__ckpt_image_free(&j->img);
	} else {
		cr_assert_eq(rc, -FT_ECORRUPT, "copies at the wrong place: %s", ft_strerror(rc));
	}

	/* a count that is not the fetch's: the answer is refused */
	l = loc;
	l.n = NB + 1000;
	cr_assert_neq(told(&liar, &a, &l, j, "another count"), 0, "a LOCAL of another count was taken");

	/* the true holder again: exact */
	ft__ckpt_peer_set_addr(ward, 1, holder_addr);
	ft__ctl_close(&liar);
	expect_held(0x44, 1, "after the lies");
	free(head);
	free(m);
	free(j);
	ft__ckpt_peer_close(ward);
	ft__ckpt_peer_close(holder);
}

/*
 * What a one-copy answer discloses (its pid and where its copies lie) goes
 * only to a fetcher that says it runs on the holder's own kernel and pid
 * namespace: an id with another boot, another namespace or none is never
 * "local", and then the copies go over the link. The fetcher is a token
 * holder (the job); the pid is in its member file and hello anyway, and the
 * addresses let it read nothing the kernel's ptrace rules would not let it
 * read whole (docs/security.md, "The job token").
 */
Test(ckpt_peer_unit, one_copy_answer_only_on_the_holders_kernel, .timeout = 20)
{
	struct pk_local_id mine, other;

	ft__pk_local_id(&mine);
	if (mine.boot[0] == '\0')
		cr_skip_test("SKIPPED: no /proc/sys/kernel/random/boot_id here");
	other = mine;
	cr_expect(ft__pk_local_same(&other, &mine), "this process is on its own kernel");
	other.boot[0] = other.boot[0] == '0' ? '1' : '0';
	cr_expect(!ft__pk_local_same(&other, &mine), "another boot id is local");
	other = mine;
	other.pidns_ino++;
	cr_expect(!ft__pk_local_same(&other, &mine), "another pid namespace is local");
	memset(&other, 0, sizeof(other));
	cr_expect(!ft__pk_local_same(&other, &other), "an unknown id is local");
}
