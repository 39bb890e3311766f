/* test_wire.c: the wire formats' checks: frame headers, hellos, their MACs and proofs (ft__frame_check, ft__hello_*), and the libfabric hello's fields. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "crc32c.h"
#include "sock.h"
#include "ftcc.h"
#include "transport.h"
#include "internal.h"
#include "wire_test.h"

#ifdef FTCC_HAVE_FABRIC
#include "fabric/fabric.h"
#endif

/* The checks are called directly, on frames and hellos altered one field at a time. */

TestSuite(frame, .init = quiet);
TestSuite(hello, .init = quiet);

/* ---------------------------------------------------------------------- */
/* Part one: the checks */

#define EXPECT_ALTERED(field, value, want)                                                 \
	do {                                                                               \
		struct ft__frame e_ = data_frame(), g_ = data_frame();                      \
		g_.field = (value);                                                        \
		int rc_ = ft__frame_check(&e_, &g_);                                        \
		cr_expect_eq(rc_, (want), "%s = %s: got %s, want %s", #field, #value,     \
			     ft_err_name(rc_), ft_err_name(want));                         \
	} while (0)

Test(frame, identical_passes, .timeout = 20)
{
	struct ft__frame e = data_frame(), g = data_frame();

	cr_expect_eq(ft__frame_check(&e, &g), 0);
	cr_expect_eq(ft__frame_check(&e, &e), 0);
	/* A zero-length frame, and a broadcast with a root. */
	e.length = g.length = 0;
	cr_expect_eq(ft__frame_check(&e, &g), 0);
	e.kind = g.kind = FT__COLL_BROADCAST;
	e.root = g.root = 3;
	cr_expect_eq(ft__frame_check(&e, &g), 0);
}

Test(frame, header_fields_are_protocol_errors, .timeout = 20)
{
	EXPECT_ALTERED(magic, 0u, -FT_EPROTO);
	EXPECT_ALTERED(magic, FT__FRAME_MAGIC ^ 1u, -FT_EPROTO);
	EXPECT_ALTERED(magic, FT__HELLO_MAGIC, -FT_EPROTO);
	EXPECT_ALTERED(type, 0, -FT_EPROTO);
	EXPECT_ALTERED(type, 3, -FT_EPROTO);
	EXPECT_ALTERED(type, 0xffff, -FT_EPROTO);
	EXPECT_ALTERED(op_seq, 41u, -FT_EPROTO);
	EXPECT_ALTERED(op_seq, 43u, -FT_EPROTO);
	EXPECT_ALTERED(op_seq, 0u, -FT_EPROTO);
	EXPECT_ALTERED(op_seq, UINT64_MAX, -FT_EPROTO);
	EXPECT_ALTERED(step, 2u, -FT_EPROTO);
	EXPECT_ALTERED(step, 4u, -FT_EPROTO);
	EXPECT_ALTERED(seg, 1u, -FT_EPROTO);
	EXPECT_ALTERED(seg, UINT32_MAX, -FT_EPROTO);
	EXPECT_ALTERED(offset, 0u, -FT_EPROTO);
	EXPECT_ALTERED(offset, 4097u, -FT_EPROTO);
	EXPECT_ALTERED(length, 0u, -FT_EPROTO);
	EXPECT_ALTERED(length, 1023u, -FT_EPROTO);
	EXPECT_ALTERED(length, 1025u, -FT_EPROTO);
	EXPECT_ALTERED(length, 1ull << 40, -FT_EPROTO);
	EXPECT_ALTERED(length, UINT64_MAX, -FT_EPROTO);
	EXPECT_ALTERED(flags, 2, -FT_EPROTO);
	EXPECT_ALTERED(flags, 0x80, -FT_EPROTO);
	EXPECT_ALTERED(flags, 0xff, -FT_EPROTO);
	EXPECT_ALTERED(flags, FT__FRAME_F_CRC | 4u, -FT_EPROTO);
}

Test(frame, collective_fields_are_mismatches, .timeout = 20)
{
	EXPECT_ALTERED(kind, FT__COLL_BROADCAST, -FT_EMISMATCH);
	EXPECT_ALTERED(kind, FT__COLL_BARRIER, -FT_EMISMATCH);
	EXPECT_ALTERED(kind, 0, -FT_EMISMATCH);
	EXPECT_ALTERED(kind, FT__COLL_INVALID, -FT_EMISMATCH);
	EXPECT_ALTERED(kind, FT__COLL_REDUCE_SCATTER, -FT_EMISMATCH);
	EXPECT_ALTERED(kind, FT__COLL_ALLGATHER, -FT_EMISMATCH);
	EXPECT_ALTERED(dtype, FT_FLOAT64, -FT_EMISMATCH);
	EXPECT_ALTERED(dtype, FT_UINT8, -FT_EMISMATCH);
	EXPECT_ALTERED(op, FT_SUM, -FT_EMISMATCH);
	EXPECT_ALTERED(op, FT_AVG, -FT_EMISMATCH);
	EXPECT_ALTERED(count, 999u, -FT_EMISMATCH);
	EXPECT_ALTERED(count, 1001u, -FT_EMISMATCH);
	EXPECT_ALTERED(count, 0u, -FT_EMISMATCH);
	EXPECT_ALTERED(count, (1ull << 32) + 1000u, -FT_EMISMATCH);
	EXPECT_ALTERED(root, 0, -FT_EMISMATCH);
	EXPECT_ALTERED(root, 1, -FT_EMISMATCH);
}

Test(frame, generation, .timeout = 20)
{
	EXPECT_ALTERED(generation, GEN - 1, -FT_ESTALE);
	EXPECT_ALTERED(generation, 0u, -FT_ESTALE);
	EXPECT_ALTERED(generation, GEN + 1, -FT_EPROTO);
	EXPECT_ALTERED(generation, UINT32_MAX, -FT_EPROTO);

	/* An old generation's frame is stale whatever collective it carried. */
	struct ft__frame e = data_frame(), g = data_frame();
	g.generation = GEN - 1;
	g.count = 7;
	g.op_seq = 3;
	cr_expect_eq(ft__frame_check(&e, &g), -FT_ESTALE);
	/* A bad magic is a protocol error before anything else. */
	g.magic = 0;
	cr_expect_eq(ft__frame_check(&e, &g), -FT_EPROTO);
}

Test(frame, crc_field_is_left_to_the_transport, .timeout = 20)
{
	/* The CRC covers the payload, which the check never sees; the flag is allowed. */
	EXPECT_ALTERED(crc, 0xdeadbeefu, 0);
	EXPECT_ALTERED(flags, FT__FRAME_F_CRC, 0);
}

/* An abort's reason is this rank's too (a mismatch fails every rank alike),
 * but for one about the sender alone (wire.c, abort_status). */
Test(frame, abort_returns_its_status, .timeout = 20)
{
	static const int codes[] = {
#define CODE(name, value, msg) FT_E##name,
		FT_ERROR_MAP(CODE)
#undef CODE
	};
	struct ft__frame e = data_frame();

	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		struct ft__frame g = abort_frame(-codes[i]);
		/* a reason about the sender alone (its view, or its own shortage
		 * or I/O error): to this rank, a peer that left */
		bool senders = codes[i] == FT_EEXCLUDED || codes[i] == FT_EPARTITIONED ||
			       codes[i] == FT_EENDED || codes[i] == FT_EFINALIZED ||
			       codes[i] == FT_EMFILE || codes[i] == FT_ENOMEM ||
			       codes[i] == FT_ENOSPC || codes[i] == FT_EIO;
		cr_expect_eq(ft__frame_check(&e, &g), senders ? -FT_EPEERFAILED : -codes[i],
			     "status %s", ft_err_name(-codes[i]));
	}
	/* An abort ends whatever collective is running: its other fields are free. */
	struct ft__frame g = abort_frame(-FT_EPEERFAILED);
	g.op_seq = 7;
	g.kind = FT__COLL_BARRIER;
	g.count = 0;
	g.step = g.seg = 0;
	g.offset = 0;
	cr_expect_eq(ft__frame_check(&e, &g), -FT_EPEERFAILED);
}

Test(frame, malformed_abort, .timeout = 20)
{
	struct ft__frame e = data_frame(), g;
	static const int bad_status[] = {
		0, FT_EPEERFAILED, FT_EABORTED, 1, -1, -FT_ERR_BASE, -(FT_ERR_BASE + 99),
		-100000, INT32_MIN + 1, INT32_MIN, INT32_MAX,
	};

	for (size_t i = 0; i < sizeof(bad_status) / sizeof(bad_status[0]); i++) {
		g = abort_frame(bad_status[i]);
		cr_expect_eq(ft__frame_check(&e, &g), -FT_EPROTO, "status %d", bad_status[i]);
	}
	g = abort_frame(-FT_EABORTED);
	g.length = 1;
	cr_expect_eq(ft__frame_check(&e, &g), -FT_EPROTO, "abort with a payload");
	g.length = 1ull << 40;
	cr_expect_eq(ft__frame_check(&e, &g), -FT_EPROTO, "abort with a huge payload");

	g = abort_frame(-FT_EABORTED);
	g.generation = GEN - 1;
	cr_expect_eq(ft__frame_check(&e, &g), -FT_ESTALE, "abort of an older generation");
	g.generation = GEN + 1;
	cr_expect_eq(ft__frame_check(&e, &g), -FT_EPROTO, "abort of a newer generation");
	g = abort_frame(-FT_EABORTED);
	g.magic = FT__HELLO_MAGIC;
	cr_expect_eq(ft__frame_check(&e, &g), -FT_EPROTO, "abort with a bad magic");
}

/* stmt changes the good hello g_ (or the expected e_); g_ is sealed again
 * with seal_tok (NULL: not, as a forger without the token would leave it)
 * and checked under check_tok. */
#define CHECK_HELLO(stmt, seal_tok, check_tok, want)                                       \
	do {                                                                               \
		struct ft__hello e_ = good_hello(), g_ = good_hello();                      \
		const char *seal_ = (seal_tok);                                            \
		stmt;                                                                      \
		if (seal_ != NULL)                                                         \
			cr_assert_eq(ft__hello_seal(&g_, seal_), 0);                        \
		int rc_ = ft__hello_check(&e_, &g_, (check_tok));                           \
		cr_expect_eq(rc_, (want), "%s: got %s, want %s", #stmt, ft_err_name(rc_), \
			     ft_err_name(want));                                           \
	} while (0)
#define EXPECT_HELLO(stmt, want) CHECK_HELLO(stmt, TOKEN, TOKEN, want)
#define EXPECT_FORGED(stmt) CHECK_HELLO(stmt, NULL, TOKEN, -FT_EAUTH)

Test(hello, identical_passes, .timeout = 20)
{
	EXPECT_HELLO((void)0, 0);
	EXPECT_HELLO(e_.from_rank = -1, 0);
	EXPECT_HELLO((e_.from_rank = -1, g_.from_rank = 7), 0);
	EXPECT_HELLO((e_.from_rank = -1, g_.from_rank = 0), 0);
	/* Strings compare up to their NUL; the padding behind it is not looked at. */
	EXPECT_HELLO(g_.job_id[100] = 'x', 0);
	EXPECT_HELLO(g_.incarnation = 9, 0);
	/* as sealed, untouched */
	CHECK_HELLO((void)0, NULL, TOKEN, 0);
}

Test(hello, magic_and_version, .timeout = 20)
{
	EXPECT_HELLO(g_.magic = 0, -FT_EPROTO);
	EXPECT_HELLO(g_.magic = FT__FRAME_MAGIC, -FT_EPROTO);
	EXPECT_HELLO(g_.magic = FT__HELLO_MAGIC + 1, -FT_EPROTO);
	EXPECT_HELLO(g_.version = 0, -FT_EAUTH);
	EXPECT_HELLO(g_.version = FT__PROTO_VERSION + 1, -FT_EAUTH);
	EXPECT_HELLO(g_.version = 0xffff, -FT_EAUTH);
}

Test(hello, job_and_token, .timeout = 20)
{
	EXPECT_HELLO(snprintf(g_.job_id, sizeof(g_.job_id), "other-job"), -FT_EAUTH);
	EXPECT_HELLO(snprintf(g_.job_id, sizeof(g_.job_id), "wire-jo"), -FT_EAUTH);
	EXPECT_HELLO(snprintf(g_.job_id, sizeof(g_.job_id), "wire-job2"), -FT_EAUTH);
	EXPECT_HELLO(g_.job_id[0] = '\0', -FT_EAUTH);
	CHECK_HELLO((void)0, "wrong", TOKEN, -FT_EAUTH);
	CHECK_HELLO((void)0, "wire-token ", TOKEN, -FT_EAUTH);
	CHECK_HELLO((void)0, "wire-toke", TOKEN, -FT_EAUTH);
	CHECK_HELLO((void)0, "", TOKEN, -FT_EAUTH);
	CHECK_HELLO((void)0, TOKEN, "", -FT_EAUTH);
	/* the empty token is a (weak) key like any other */
	CHECK_HELLO((void)0, "", "", 0);
}

/* A hello changed after its seal, as someone without the token would: refused
 * whatever the field, even where the change alone would pass. */
Test(hello, forged_fields, .timeout = 20)
{
	EXPECT_FORGED(g_.generation++);
	EXPECT_FORGED(g_.from_rank = 7);
	EXPECT_FORGED((e_.from_rank = -1, g_.from_rank = 7));
	EXPECT_FORGED(g_.to_rank = 1);
	EXPECT_FORGED(g_.incarnation = 1);
	EXPECT_FORGED(g_.job_id[100] = 'x');
	EXPECT_FORGED(g_.nonce[0] ^= 1);
	EXPECT_FORGED(g_.nonce[FT__HELLO_NONCE - 1] ^= 0x80);
	EXPECT_FORGED(g_.mac[0] ^= 1);
	EXPECT_FORGED(g_.mac[FT__HELLO_MAC - 1] ^= 0x80);
	EXPECT_FORGED(memset(g_.mac, 0, sizeof(g_.mac)));
}

Test(hello, seal_uses_a_fresh_nonce, .timeout = 20)
{
	struct ft__hello a = good_hello(), b = good_hello();

	cr_expect_neq(memcmp(a.nonce, b.nonce, sizeof(a.nonce)), 0);
	cr_expect_neq(memcmp(a.mac, b.mac, sizeof(a.mac)), 0);
	/* and the token is nowhere in it */
	cr_expect_null(memmem(&a, sizeof(a), TOKEN, strlen(TOKEN)));
}

Test(hello, ack_proves_the_token, .timeout = 20)
{
	struct ft__hello h = good_hello();
	struct ft__hello_ack a;
	uint8_t other[FT__HELLO_NONCE];

	ft__hello_ack_seal(&a, h.nonce, NULL, 0, TOKEN);
	cr_expect_eq(ft__hello_ack_check(&a, h.nonce, TOKEN), 0);
	cr_expect_eq(ft__hello_ack_check(&a, h.nonce, "wrong"), -FT_EAUTH, "another token");
	memcpy(other, h.nonce, sizeof(other));
	other[3] ^= 1;
	cr_expect_eq(ft__hello_ack_check(&a, other, TOKEN), -FT_EAUTH, "another hello's answer");
	a.status = -FT_ESTALE;
	cr_expect_eq(ft__hello_ack_check(&a, h.nonce, TOKEN), -FT_EAUTH, "status changed");
	ft__hello_ack_seal(&a, h.nonce, NULL, -FT_ESTALE, TOKEN);
	cr_expect_eq(ft__hello_ack_check(&a, h.nonce, TOKEN), -FT_ESTALE, "a refusal");
	a.status = 0;
	cr_expect_eq(ft__hello_ack_check(&a, h.nonce, TOKEN), -FT_EAUTH, "refusal turned to 0");
	ft__hello_ack_seal(&a, h.nonce, NULL, 5, TOKEN);
	cr_expect_eq(ft__hello_ack_check(&a, h.nonce, TOKEN), -FT_EPROTO, "a positive status");
	ft__hello_ack_seal(&a, h.nonce, NULL, INT32_MIN, TOKEN);
	cr_expect_eq(ft__hello_ack_check(&a, h.nonce, TOKEN), -FT_EPROTO, "an unknown code");
	ft__hello_ack_seal(&a, h.nonce, NULL, 0, TOKEN);
	a.magic = FT__FRAME_MAGIC;
	cr_expect_eq(ft__hello_ack_check(&a, h.nonce, TOKEN), -FT_EPROTO, "bad magic");
}

/* The answer's challenge is under its MAC, and only a proof of the whole
 * hello and that challenge, under the token, passes. */
Test(hello, proof_binds_hello_and_challenge, .timeout = 20)
{
	struct ft__hello h = good_hello(), other = good_hello();
	struct ft__hello_ack a;
	struct ft__hello_proof p;
	uint8_t na[FT__HELLO_NONCE], nb[FT__HELLO_NONCE];

	memset(na, 0x5a, sizeof(na));
	memset(nb, 0xa5, sizeof(nb));
	ft__hello_ack_seal(&a, h.nonce, na, 0, TOKEN);
	cr_expect_eq(ft__hello_ack_check(&a, h.nonce, TOKEN), 0);
	cr_expect_eq(memcmp(a.challenge, na, sizeof(na)), 0);
	a.challenge[0] ^= 1;
	cr_expect_eq(ft__hello_ack_check(&a, h.nonce, TOKEN), -FT_EAUTH, "challenge changed");

	ft__hello_proof_seal(&p, &h, na, TOKEN);
	cr_expect_eq(ft__hello_proof_check(&p, &h, na, TOKEN), 0);
	cr_expect_eq(ft__hello_proof_check(&p, &h, nb, TOKEN), -FT_EAUTH, "another challenge");
	cr_expect_eq(ft__hello_proof_check(&p, &other, na, TOKEN), -FT_EAUTH, "another hello");
	cr_expect_eq(ft__hello_proof_check(&p, &h, na, "wrong"), -FT_EAUTH, "another token");
	other = h;
	other.generation++;
	cr_expect_eq(ft__hello_proof_check(&p, &other, na, TOKEN), -FT_EAUTH, "generation");
	other = h;
	other.from_rank++;
	cr_expect_eq(ft__hello_proof_check(&p, &other, na, TOKEN), -FT_EAUTH, "rank");
	p.magic = 0;
	cr_expect_eq(ft__hello_proof_check(&p, &h, na, TOKEN), -FT_EAUTH, "bad magic");
	cr_expect_null(memmem(&p, sizeof(p), TOKEN, strlen(TOKEN)));
}

/* A transport's fields around a hello: any byte changed fails their MAC. */
Test(hello, ext_fields_under_the_mac, .timeout = 20)
{
	struct ft__hello h = good_hello(), other = good_hello();
	unsigned char ext[64];
	uint8_t mac[FT__HELLO_MAC];

	for (size_t i = 0; i < sizeof(ext); i++)
		ext[i] = (unsigned char)i;
	ft__hello_ext_seal(&h, ext, sizeof(ext), TOKEN, mac);
	cr_expect_eq(ft__hello_ext_check(&h, ext, sizeof(ext), TOKEN, mac), 0);
	cr_expect_eq(ft__hello_ext_check(&other, ext, sizeof(ext), TOKEN, mac), -FT_EAUTH,
		     "bound to another hello");
	cr_expect_eq(ft__hello_ext_check(&h, ext, sizeof(ext), "wrong", mac), -FT_EAUTH);
	for (size_t i = 0; i < sizeof(ext); i++) {
		ext[i] ^= 0x10;
		cr_expect_eq(ft__hello_ext_check(&h, ext, sizeof(ext), TOKEN, mac), -FT_EAUTH,
			     "byte %zu changed", i);
		ext[i] ^= 0x10;
	}
}

Test(hello, unterminated_strings, .timeout = 20)
{
	EXPECT_HELLO(memset(g_.job_id, 'j', sizeof(g_.job_id)), -FT_EPROTO);
	/* The longest strings that are terminated are fine. */
	EXPECT_HELLO((memset(g_.job_id, 'j', sizeof(g_.job_id) - 1),
		      memset(e_.job_id, 'j', sizeof(e_.job_id) - 1)),
		     0);
}

Test(hello, kind_generation_and_ranks, .timeout = 20)
{
	EXPECT_HELLO(g_.kind = FT__LINK_CONTROL, -FT_EPROTO);
	EXPECT_HELLO(g_.kind = 0, -FT_EPROTO);
	EXPECT_HELLO(g_.generation = GEN - 1, -FT_ESTALE);
	EXPECT_HELLO(g_.generation = 0, -FT_ESTALE);
	EXPECT_HELLO(g_.generation = GEN + 1, -FT_EPROTO);
	EXPECT_HELLO(g_.to_rank = 1, -FT_EPROTO);
	EXPECT_HELLO(g_.to_rank = -1, -FT_EPROTO);
	EXPECT_HELLO(g_.from_rank = 2, -FT_EPROTO);
	EXPECT_HELLO(g_.from_rank = -1, -FT_EPROTO);
	EXPECT_HELLO((e_.from_rank = -1, g_.to_rank = 3), -FT_EPROTO);
}

#ifdef FTCC_HAVE_FABRIC
/* --- the libfabric hello's fields ---------------------------------------- */

/*
 * The fields the libfabric transport sends around its hello route the
 * answer (link id, endpoint names) and watch the peer (node, pid, home,
 * bell): trusted, so under a MAC bound to the hello. Each one altered after
 * sealing is refused, and so is a sealed set moved onto another hello.
 */
Test(fabric_hello, altered_fields_refused, .timeout = 20)
{
	struct fab_hello_msg m, bad;

	memset(&m, 0, sizeof(m));
	m.hello = good_hello();
	m.link_id = 7;
	m.node = 0x1234;
	m.piece = 65536;
	m.pid = 4242;
	m.namelen = 4;
	memcpy(m.name, "ep-a", 4);
	m.homelen = 4;
	memcpy(m.home, "ep-h", 4);
	m.bell = 3;
	ft__fab_hello_fields_seal(&m, TOKEN);
	cr_expect_eq(ft__fab_hello_fields_check(&m, TOKEN), 0);
	cr_expect_eq(ft__fab_hello_fields_check(&m, "wrong"), -FT_EAUTH, "another token");
	cr_expect_null(memmem(&m, sizeof(m), TOKEN, strlen(TOKEN)));
#define EXPECT_FIELD_ALTERED(stmt)                                                                 \
	do {                                                                                 \
		bad = m;                                                                     \
		stmt;                                                                        \
		cr_expect_eq(ft__fab_hello_fields_check(&bad, TOKEN), -FT_EAUTH, "%s", #stmt); \
	} while (0)
	EXPECT_FIELD_ALTERED(bad.link_id++);
	EXPECT_FIELD_ALTERED(bad.node ^= 1);
	EXPECT_FIELD_ALTERED(bad.piece = 1);
	EXPECT_FIELD_ALTERED(bad.pid = 1);
	EXPECT_FIELD_ALTERED(bad.namelen = 3);
	EXPECT_FIELD_ALTERED(bad.name[0] = 'X');
	EXPECT_FIELD_ALTERED(bad.homelen = 5);
	EXPECT_FIELD_ALTERED(bad.home[3] = 'X');
	EXPECT_FIELD_ALTERED(bad.bell = -1);
	EXPECT_FIELD_ALTERED(bad.hello = good_hello());
	EXPECT_FIELD_ALTERED(bad.fields_mac[0] ^= 1);
#undef EXPECT_FIELD_ALTERED
}
#endif
