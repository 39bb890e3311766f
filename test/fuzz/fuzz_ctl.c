/* fuzz_ctl.c: feeds arbitrary bytes to a control link over a socketpair: the hello, its ACK, every message's framing. */
/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "ctl.h"
#include "ftcc.h"

#define FUZZ_NAME "fuzz_ctl"
#include "fuzz_main.h"

#define TOKEN "fuzz-token"
#define JOB "fuzz-job"
#define RANK 2
#define WORLD 8
#define PEER 5
/* ctl.c's wire layout and MAC labels, which the harness seals with */
#define HDR_BYTES 16
#define HELLO_BODY (FT_NAME_MAX + 8 + FT__AUTH_NONCE + FT__AUTH_MAC)
#define ACK_BODY (8 + FT__AUTH_NONCE + FT__AUTH_MAC)
#define HELLO_LABEL "ftcc/3 control hello"
#define ACK_LABEL "ftcc/3 control ack"

static struct ft__ctl ctl;
static const uint8_t our_nonce[FT__AUTH_NONCE] = {7, 7, 7};
static unsigned char copy[1 << 17];

static void fuzz_init(void)
{
	struct ft__ctl_params p = {.rank = RANK, .world_size = WORLD, .job_id = JOB,
				   .token = TOKEN, .links = 1, .strangers = 1, .min_payload = 4096,
				   .who = "fuzz"};

	if (ft__ctl_open(&ctl, &p) != 0)
		abort();
}

/* Makes the first message's MAC right when it is the hello (stranger) or
 * the ACK (ours) its header says: random bytes never are. */
static void seal(unsigned char *p, size_t len, bool ours)
{
	uint16_t type, blen;

	if (len < HDR_BYTES)
		return;
	memcpy(&type, p + 4, 2);
	memcpy(&blen, p + 6, 2);
	if (!ours && type == FT__CTL_HELLO && blen == HELLO_BODY && len >= HDR_BYTES + HELLO_BODY) {
		struct iovec iov[2] = {{p, HDR_BYTES}, {p + HDR_BYTES, HELLO_BODY - FT__AUTH_MAC}};
		ft__auth_mac(TOKEN, HELLO_LABEL, iov, 2, p + HDR_BYTES + HELLO_BODY - FT__AUTH_MAC);
	} else if (ours && type == FT__CTL_ACK && blen == ACK_BODY && len >= HDR_BYTES + ACK_BODY) {
		struct iovec iov[3] = {{(void *)our_nonce, sizeof(our_nonce)}, {p, HDR_BYTES},
				       {p + HDR_BYTES, 8 + FT__AUTH_NONCE}};
		ft__auth_mac(TOKEN, ACK_LABEL, iov, 3, p + HDR_BYTES + 8 + FT__AUTH_NONCE);
	}
}

/*
 * Byte 0 picks the link: bit 0, connected here (awaiting the peer's ACK)
 * or accepted here (a stranger until its hello passes); bit 1, MACs made
 * right. The rest is what the peer sent, then it closed.
 */
static void fuzz_one(const unsigned char *buf, size_t len)
{
	struct ft__ctl_link *l = &ctl.links[0];
	struct ft__ctl_msg m;
	bool ours;
	int sv[2], rc, n = 0;

	if (len < 1)
		return;
	ours = buf[0] & 1;
	len = len - 1 < sizeof(copy) ? len - 1 : sizeof(copy);
	memcpy(copy, buf + 1, len);
	if (buf[0] & 2)
		seal(copy, len, ours);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		abort();
	fcntl(sv[0], F_SETFL, O_NONBLOCK);
	fcntl(sv[1], F_SETFL, O_NONBLOCK);
	for (size_t off = 0; off < len;) {
		ssize_t w = write(sv[1], copy + off, len - off);
		if (w <= 0)
			break; /* the socket buffer is full: the rest is lost, as on a link */
		off += (size_t)w;
	}
	shutdown(sv[1], SHUT_WR);
	/* every run the same: no nonce remembered from an earlier one */
	memset(&ctl.seen, 0, sizeof(ctl.seen));
	ctl.refused_claim = -1;
	*l = (struct ft__ctl_link){.fd = sv[0], .peer = ours ? PEER : -1, .gen = 4,
				   .in = malloc(ctl.msg_cap), .ours = ours, .await_ack = ours};
	if (l->in == NULL)
		abort();
	/* the HELLO we sent, whose nonce the ACK's MAC covers (ctl.c's layout) */
	memset(l->hello, 0, sizeof(l->hello));
	memcpy(l->hello + HDR_BYTES + FT_NAME_MAX + 8, our_nonce, sizeof(our_nonce));
	while (l->fd >= 0 && (rc = ft__ctl_next(&ctl, 0, &m)) == 1) {
		const unsigned char *end = l->in + l->have;
		/* what it returns: within the buffer, within the bounds the header promised */
		if (m.len > ctl.max_payload || m.payload < l->in || m.payload + m.len > end ||
		    l->peer < 0 || l->peer >= WORLD || l->peer == RANK ||
		    (m.type == FT__CTL_NOTICE && m.len % 4 != 0) || m.type == FT__CTL_ACK)
			abort();
		for (size_t k = 0; k < m.len; k++)
			n += m.payload[k];
	}
	if (ctl.refused_claim >= WORLD || ctl.refused_claim == RANK)
		abort();
	if (l->fd >= 0)
		ft__ctl_drop(&ctl, 0);
	close(sv[1]);
	if (n == -1)
		abort(); /* keeps the reads */
}
