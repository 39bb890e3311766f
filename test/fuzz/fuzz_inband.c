/* fuzz_inband.c: feeds arbitrary messages to the in-band membership's own handlers, the rank in a state the input picks. */
/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctl.h"
#include "ftcc.h"
#include "membership.h"

#define FUZZ_NAME "fuzz_inband"
#include "fuzz_main.h"

#define MAX_MSGS 64
#define MAX_GEN 4
#define NONCE 0xfeedULL

static int sv[2];
static unsigned char drain[1 << 16];

static void fuzz_init(void)
{
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		abort();
	fcntl(sv[0], F_SETFL, O_NONBLOCK);
	fcntl(sv[1], F_SETFL, O_NONBLOCK);
}

/*
 * The input: 6 bytes of state, then messages.
 *   0: world size - 2 (mod 15)   1: rank (mod world)   2: generation (mod 4)
 *   3: bit 0 settling it, bit 1 published, bits 2..3 coordinating phase,
 *      bit 4 every address known, bit 5 each later view leaves a rank out,
 *      bit 6 a new incarnation looking for its job (inband_rejoin.c)
 *   4: the coordinator's round (ballot = round << 16 | rank)
 *   5: the round promised (0: none; its rank is the coordinator's, 0)
 * A message: type (0..7: the membership types, 8: a hello, 9..12: those of
 * new incarnations, else as is),
 * sender (-1 .. world), generation (0..3: gen - 1 .. gen + 2, else as is),
 * payload length (u16, little-endian, cut to what is left), payload.
 */
static void fuzz_one(const unsigned char *buf, size_t len)
{
	struct ft__ctl_msg msgs[MAX_MSGS];
	struct ft__view views[MAX_GEN];
	int members[MAX_GEN][17];
	struct ft__inband_fuzz f;
	size_t off = 6;
	int n = 0;

	if (len < 6)
		return;
	f = (struct ft__inband_fuzz){.world = 2 + buf[0] % 15, .gen = buf[2] % MAX_GEN,
				     .active = buf[3] & 1, .published = buf[3] & 2,
				     .phase = (buf[3] >> 2) & 3, .book = buf[3] & 16,
				     .newcomer = buf[3] & 64,
				     .sink = sv[0], .views = views};
	f.rank = buf[1] % f.world;
	f.phase = f.phase > 2 ? 2 : f.phase;
	f.ballot = (uint64_t)buf[4] << 16 | (uint64_t)f.rank;
	f.promised = buf[5] != 0 ? (uint64_t)buf[5] << 16 : 0;
	for (uint32_t g = 0; g < f.gen; g++) {
		int drop = g > 0 && (buf[3] & 32) ? (f.rank + 1 + (int)g) % f.world : -1;
		int k = 0;
		for (int r = 0; r < f.world; r++)
			if (r != drop)
				members[g][k++] = r;
		views[g] = (struct ft__view){.generation = g, .size = k, .members = members[g],
					     .first_op = g, .nonce = NONCE};
	}
	while (n < MAX_MSGS && len - off >= 5) {
		const unsigned char *h = buf + off;
		size_t plen = (size_t)h[3] | (size_t)h[4] << 8;
		off += 5;
		if (plen > len - off)
			plen = len - off;
		msgs[n++] = (struct ft__ctl_msg){
			.type = h[0] < 8    ? FT__CTL_MB_COLLECT + h[0]
				: h[0] == 8 ? FT__CTL_HELLO
				: h[0] < 13 ? FT__CTL_MB_ASK + h[0] - 9
					    : h[0],
			.from = h[1] % (f.world + 2) - 1,
			.gen = h[2] < 4 ? f.gen + h[2] - 1 : h[2], .len = plen,
			.payload = buf + off};
		off += plen;
	}
	if (ft__inband_fuzz(&f, msgs, n) != 0)
		abort();
	while (read(sv[1], drain, sizeof(drain)) > 0)
		; /* the answers, gone: the next run starts empty */
}
