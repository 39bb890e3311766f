/* test_inband_codec.c: the in-band membership messages fit a control message at every world the backend accepts. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ftcc.h"
#include "internal.h"
#include "membership.h"

/*
 * A PROPOSE or COMMIT carries 28 + 12n bytes and a RECORD more (its sender's
 * addresses, the certain deaths), while a control message carries at most
 * 65535: the largest of each, at the worlds around the sizes that once
 * broke (340 ranks passed the old limit) up to the largest accepted, must
 * fit the payload the backend asks for and come back whole.
 */
Test(inband_codec, largest_messages_fit_up_to_the_largest_world)
{
	int worlds[] = {1, 2, 64, 339, 340, 341, 1000, 2048, 4095, FT__INBAND_MAX_WORLD};

	cr_assert_leq(ft__inband_payload_max(FT__INBAND_MAX_WORLD), UINT16_MAX,
		      "the largest world's messages exceed a control message: %zu bytes",
		      ft__inband_payload_max(FT__INBAND_MAX_WORLD));
	for (size_t k = 0; k < sizeof(worlds) / sizeof(worlds[0]); k++) {
		int n = worlds[k];
		cr_assert_geq(ft__inband_payload_max(n), 28 + 12 * (size_t)n, "%d ranks", n);
		cr_assert_eq(ft__inband_codec_check(n), 0, "%d ranks: %s", n,
			     ft_strerror(ft__inband_codec_check(n)));
	}
}

/* A world past the largest is refused at open, not left to time out in ft_init. */
Test(inband_codec, a_larger_world_is_refused)
{
	struct ft__mb mb = {0};
	struct ft__mb_params p = {.backend = "inband", .job_id = "big", .rank = 0,
				  .world_size = FT__INBAND_MAX_WORLD + 1, .token = "tok",
				  .book = {.how = "peers", .peers = "127.0.0.1:1"}};

	ft__log_level = -1;
	cr_assert_eq(ft__mb_open(&mb, &p), -FT_ECONFIG);
	ft__mb_close(&mb, 0, false);
}

/* The largest world opens: its control links carry the payload its messages need. */
Test(inband_codec, the_largest_world_opens)
{
	size_t cap = 20 * FT__INBAND_MAX_WORLD;
	char *peers = malloc(cap);
	struct ft__mb mb = {0};
	size_t at = 0;
	/* rank 0's port, held bound (not listening) by the test, as test_inband does */
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_not_null(peers);
	cr_assert_geq(fd, 0);
	cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	for (int r = 0; r < FT__INBAND_MAX_WORLD; r++)
		at += (size_t)snprintf(peers + at, cap - at, "%s127.%d.%d.1:%d", r ? "," : "",
				       r / 256, r % 256, r == 0 ? ntohs(a.sin_port) : 1);
	struct ft__mb_params p = {.backend = "inband", .job_id = "big", .rank = 0,
				  .world_size = FT__INBAND_MAX_WORLD, .token = "tok",
				  .book = {.how = "peers", .peers = peers, .job_id = "big",
					   .world_size = FT__INBAND_MAX_WORLD}};
	cr_assert_eq(ft__mb_open(&mb, &p), 0);
	ft__mb_close(&mb, 0, false);
	close(fd);
	free(peers);
}
