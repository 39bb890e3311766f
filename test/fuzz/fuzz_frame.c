/* fuzz_frame.c: feeds arbitrary bytes to the data link's checks (transports/wire.c): frame headers, hellos, hello ACKs, as a stream of them. */
/* SPDX-License-Identifier: MIT */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "ftcc.h"
#include "transport.h"

#define FUZZ_NAME "fuzz_frame"
#include "fuzz_main.h"

#define TOKEN "fuzz-token"
#define HELLO_LABEL "ftcc/2 data hello" /* wire.c's */
#define ACK_LABEL "ftcc/2 data ack"

/* What the receiver posted: one frame of an allreduce, generation 3. */
static const struct ft__frame expect_frame = {
	.magic = FT__FRAME_MAGIC, .type = FT__FRAME_DATA, .kind = FT__COLL_ALLREDUCE,
	.dtype = FT_FLOAT32, .generation = 3, .op = FT_SUM, .op_seq = 42, .count = 1000,
	.root = -1, .step = 2, .seg = 1, .offset = 2000, .length = 1000};
static struct ft__hello expect_hello;
static const uint8_t ack_nonce[FT__HELLO_NONCE] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

/* Codes a check may return: its own, or (abort frame, ack) a known FT_E code. */
static void code_ok(int rc)
{
	if (rc > 0 || (rc < 0 && strcmp(ft_err_name(rc), "FT_E?") == 0))
		abort();
}

static void frame(const struct ft__frame *got)
{
	int rc = ft__frame_check(&expect_frame, got);

	code_ok(rc);
	/* a frame that passes is exactly the one posted: its length may be trusted */
	if (rc == 0 && (got->length != expect_frame.length || got->offset != expect_frame.offset ||
			got->magic != FT__FRAME_MAGIC || (got->flags & ~FT__FRAME_F_CRC) != 0))
		abort();
	if (rc < 0 && rc != -FT_EPROTO && rc != -FT_ESTALE && rc != -FT_EMISMATCH &&
	    (got->type != FT__FRAME_ABORT || got->status != rc))
		abort();
}

static void hello(struct ft__hello *got, bool seal)
{
	struct iovec iov = {got, offsetof(struct ft__hello, mac)};
	int rc;

	/* a hello sealed right: the checks behind the MAC */
	if (seal)
		ft__auth_mac(TOKEN, HELLO_LABEL, &iov, 1, got->mac);
	rc = ft__hello_check(&expect_hello, got, TOKEN);
	if (rc != 0 && rc != -FT_EPROTO && rc != -FT_EAUTH && rc != -FT_ESTALE)
		abort();
	if (rc == 0 && (!seal || got->to_rank != expect_hello.to_rank ||
			strcmp(got->job_id, expect_hello.job_id) != 0))
		abort();
}

static void ack(struct ft__hello_ack *got, bool seal)
{
	struct iovec iov[2] = {{(void *)ack_nonce, FT__HELLO_NONCE},
			       {got, offsetof(struct ft__hello_ack, mac)}};
	int rc;

	if (seal)
		ft__auth_mac(TOKEN, ACK_LABEL, iov, 2, got->mac);
	rc = ft__hello_ack_check(got, ack_nonce, TOKEN);
	code_ok(rc);
	if (rc != 0 && !seal && rc != -FT_EPROTO && rc != -FT_EAUTH)
		abort();
}

static void fuzz_init(void)
{
	expect_hello = (struct ft__hello){.magic = FT__HELLO_MAGIC, .version = FT__PROTO_VERSION,
					 .kind = FT__LINK_DATA, .generation = 3, .from_rank = 1,
					 .to_rank = 2};
	strcpy(expect_hello.job_id, "fuzz-job");
}

/*
 * The input is a stream of records, each a tag byte then the struct it
 * names (zero-filled when short): tag % 5 says frame, hello, hello sealed
 * under the token, ack, ack sealed.
 */
static void fuzz_one(const unsigned char *buf, size_t len)
{
	size_t off = 0;

	while (off < len) {
		unsigned tag = buf[off++] % 5;
		size_t size = tag == 0   ? sizeof(struct ft__frame)
			      : tag <= 2 ? sizeof(struct ft__hello)
					 : sizeof(struct ft__hello_ack);
		size_t take = len - off < size ? len - off : size;
		union {
			struct ft__frame f;
			struct ft__hello h;
			struct ft__hello_ack a;
		} u;

		memset(&u, 0, sizeof(u));
		memcpy(&u, buf + off, take);
		off += take;
		if (tag == 0)
			frame(&u.f);
		else if (tag <= 2)
			hello(&u.h, tag == 2);
		else
			ack(&u.a, tag == 4);
	}
}
