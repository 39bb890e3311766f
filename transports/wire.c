/* wire.c: checks of handshakes and frame headers, shared by every transport; the hello's MACs. */
/* SPDX-License-Identifier: MIT */
#include <stddef.h>
#include <string.h>

#include "auth.h"
#include "ftcc.h"
#include "transport.h"
#include "internal.h"

/* The MACs cover the hello's raw bytes as sent: no padding may hide in it. */
_Static_assert(offsetof(struct ft__hello, nonce) == 32 + 128 &&
		       offsetof(struct ft__hello, mac) + FT__HELLO_MAC == sizeof(struct ft__hello),
	       "struct ft__hello has padding");
_Static_assert(offsetof(struct ft__hello_ack, mac) == 8 + FT__HELLO_NONCE &&
		       sizeof(struct ft__hello_ack) == 8 + FT__HELLO_NONCE + FT__HELLO_MAC,
	       "struct ft__hello_ack has padding");
_Static_assert(offsetof(struct ft__hello_proof, mac) == 8 &&
		       sizeof(struct ft__hello_proof) == 8 + FT__HELLO_MAC,
	       "struct ft__hello_proof has padding");
_Static_assert(FT__HELLO_NONCE == FT__AUTH_NONCE && FT__HELLO_MAC == FT__AUTH_MAC,
	       "hello and auth.h disagree on sizes");

/* Labels of the data link's MACs (the control links' differ: ctl.c). */
#define HELLO_LABEL "ftcc/3 data hello"
#define ACK_LABEL "ftcc/3 data ack"
#define PROOF_LABEL "ftcc/3 data proof"
#define EXT_LABEL "ftcc/3 data hello fields"

static void hello_iov(const struct ft__hello *h, struct iovec *iov)
{
	iov->iov_base = (void *)h;
	iov->iov_len = offsetof(struct ft__hello, mac);
}

int ft__hello_seal(struct ft__hello *h, const char *token)
{
	struct iovec iov;
	int rc = ft__auth_random(h->nonce, sizeof(h->nonce));

	if (rc != 0)
		return rc;
	hello_iov(h, &iov);
	ft__auth_mac(token, HELLO_LABEL, &iov, 1, h->mac);
	return 0;
}

int ft__hello_check(const struct ft__hello *expect, const struct ft__hello *got, const char *token)
{
	struct iovec iov;

	if (got->magic != FT__HELLO_MAGIC)
		return -FT_EPROTO;
	if (got->version != FT__PROTO_VERSION)
		return -FT_EAUTH;
	if (memchr(got->job_id, 0, sizeof(got->job_id)) == NULL)
		return -FT_EPROTO;
	hello_iov(got, &iov);
	if (!ft__auth_mac_ok(token, HELLO_LABEL, &iov, 1, got->mac) ||
	    strcmp(got->job_id, expect->job_id) != 0)
		return -FT_EAUTH;
	if (got->kind != expect->kind)
		return -FT_EPROTO;
	if (got->generation < expect->generation)
		return -FT_ESTALE;
	if (got->generation != expect->generation)
		return -FT_EPROTO;
	if (got->to_rank != expect->to_rank)
		return -FT_EPROTO;
	if (expect->from_rank >= 0 && got->from_rank != expect->from_rank)
		return -FT_EPROTO;
	return 0;
}

static void ack_iov(const struct ft__hello_ack *ack, const uint8_t *nonce, struct iovec iov[2])
{
	iov[0] = (struct iovec){(void *)nonce, FT__HELLO_NONCE};
	iov[1] = (struct iovec){(void *)ack, offsetof(struct ft__hello_ack, mac)};
}

void ft__hello_ack_seal(struct ft__hello_ack *ack, const uint8_t nonce[FT__HELLO_NONCE],
		       const uint8_t challenge[FT__HELLO_NONCE], int status, const char *token)
{
	struct iovec iov[2];

	memset(ack, 0, sizeof(*ack));
	ack->magic = FT__HELLO_MAGIC;
	ack->status = status;
	if (challenge != NULL)
		memcpy(ack->challenge, challenge, sizeof(ack->challenge));
	ack_iov(ack, nonce, iov);
	ft__auth_mac(token, ACK_LABEL, iov, 2, ack->mac);
}

/* The whole hello (its nonce and MAC too), then the challenge. */
static void proof_iov(const struct ft__hello *h, const uint8_t *challenge, struct iovec iov[2])
{
	iov[0] = (struct iovec){(void *)h, sizeof(*h)};
	iov[1] = (struct iovec){(void *)challenge, FT__HELLO_NONCE};
}

void ft__hello_proof_seal(struct ft__hello_proof *p, const struct ft__hello *h,
			 const uint8_t challenge[FT__HELLO_NONCE], const char *token)
{
	struct iovec iov[2];

	memset(p, 0, sizeof(*p));
	p->magic = FT__HELLO_MAGIC;
	proof_iov(h, challenge, iov);
	ft__auth_mac(token, PROOF_LABEL, iov, 2, p->mac);
}

int ft__hello_proof_check(const struct ft__hello_proof *p, const struct ft__hello *h,
			 const uint8_t challenge[FT__HELLO_NONCE], const char *token)
{
	struct iovec iov[2];

	proof_iov(h, challenge, iov);
	if (p->magic != FT__HELLO_MAGIC || !ft__auth_mac_ok(token, PROOF_LABEL, iov, 2, p->mac))
		return -FT_EAUTH;
	return 0;
}

void ft__hello_ext_seal(const struct ft__hello *h, const void *ext, size_t len, const char *token,
		       uint8_t mac[FT__HELLO_MAC])
{
	struct iovec iov[2] = {{(void *)h, sizeof(*h)}, {(void *)ext, len}};

	ft__auth_mac(token, EXT_LABEL, iov, 2, mac);
}

int ft__hello_ext_check(const struct ft__hello *h, const void *ext, size_t len, const char *token,
		       const uint8_t mac[FT__HELLO_MAC])
{
	struct iovec iov[2] = {{(void *)h, sizeof(*h)}, {(void *)ext, len}};

	return ft__auth_mac_ok(token, EXT_LABEL, iov, 2, mac) ? 0 : -FT_EAUTH;
}

static int known_error(int32_t status)
{
	switch (status) { /* not -status: the peer may send INT32_MIN */
#define FT__ERR_CASE(name, value, msg) case -FT_E##name:
		FT_ERROR_MAP(FT__ERR_CASE)
#undef FT__ERR_CASE
		return 1;
	default:
		return 0;
	}
}

/*
 * What a neighbour's abort means here. Most of its reasons are the op's
 * (a mismatch, bad arguments: every rank fails alike) or a failure's. Some
 * are about the sender alone: it is out of the view (a newcomer sent away
 * at its first op), its side of a partition stopped, its job ended for it,
 * it finalized. Taken as they are, they once told a healthy neighbour that
 * it was out itself, which then aborted its own ring with that reason: a
 * newcomer whose program called another collective than the job
 * (test_hygiene's forged_end_marker_fails_no_one, in 1 of 15 runs) ended
 * every survivor. To this rank they say that a peer left. So does the
 * sender's own shortage or I/O error (no descriptor, memory or space):
 * taken as it was, a rank out of descriptors once made its neighbours
 * return FT_EMFILE too, and they aborted their rings with it in turn, so
 * no survivor went on (test_emfile).
 */
static int abort_status(int32_t status)
{
	switch (status) {
	case -FT_EEXCLUDED:
	case -FT_EPARTITIONED:
	case -FT_EENDED:
	case -FT_EFINALIZED:
	case -FT_EMFILE:
	case -FT_ENOMEM:
	case -FT_ENOSPC:
	case -FT_EIO:
		return -FT_EPEERFAILED;
	default:
		return status;
	}
}

int ft__frame_check(const struct ft__frame *expect, const struct ft__frame *got)
{
	if (got->magic != FT__FRAME_MAGIC)
		return -FT_EPROTO;
	if (got->generation < expect->generation)
		return -FT_ESTALE;
	if (got->generation != expect->generation)
		return -FT_EPROTO;
	if (got->type == FT__FRAME_ABORT) {
		if (got->length != 0 || got->status >= 0 || !known_error(got->status))
			return -FT_EPROTO;
		return abort_status(got->status);
	}
	if (got->type != FT__FRAME_DATA || got->op_seq != expect->op_seq)
		return -FT_EPROTO;
	if (got->kind != expect->kind || got->dtype != expect->dtype || got->op != expect->op ||
	    got->count != expect->count || got->root != expect->root || got->algo != expect->algo) {
		ft__debug("frame of op %llu: kind %u dtype %u op %u count %llu root %d algorithm "
			  "%u, expected kind %u dtype %u op %u count %llu root %d algorithm %u",
			  (unsigned long long)got->op_seq, got->kind, got->dtype, got->op,
			  (unsigned long long)got->count, got->root, got->algo, expect->kind,
			  expect->dtype, expect->op, (unsigned long long)expect->count, expect->root,
			  expect->algo);
		return -FT_EMISMATCH;
	}
	if (got->step != expect->step || got->seg != expect->seg ||
	    got->offset != expect->offset || got->length != expect->length)
		return -FT_EPROTO;
	if ((got->flags & ~FT__FRAME_F_CRC) != 0)
		return -FT_EPROTO;
	return 0;
}

int ft__hello_ack_check(const struct ft__hello_ack *ack, const uint8_t nonce[FT__HELLO_NONCE],
		       const char *token)
{
	struct iovec iov[2];

	if (ack->magic != FT__HELLO_MAGIC)
		return -FT_EPROTO;
	ack_iov(ack, nonce, iov);
	if (!ft__auth_mac_ok(token, ACK_LABEL, iov, 2, ack->mac))
		return -FT_EAUTH;
	return ack->status == 0 || known_error(ack->status) ? ack->status : -FT_EPROTO;
}
