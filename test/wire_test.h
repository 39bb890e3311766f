/* wire_test.h: what the wire and transport tests share (test_wire.c, test_tcp.c, test_fabric_link.c): a job's names, good frames and hellos. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_WIRE_TEST_H
#define FTCC_WIRE_TEST_H

#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ftcc.h"
#include "internal.h"
#include "transport.h"

#define JOB "wire-job"
#define TOKEN "wire-token"
#define GEN 5u
#define WAIT_MS 5000

static inline void quiet(void)
{
	ft__log_level = -1;
}

static inline struct ft__frame data_frame(void)
{
	struct ft__frame f;

	memset(&f, 0, sizeof(f));
	f.magic = FT__FRAME_MAGIC;
	f.type = FT__FRAME_DATA;
	f.kind = FT__COLL_ALLREDUCE;
	f.dtype = FT_FLOAT32;
	f.generation = GEN;
	f.op = FT_MAX;
	f.flags = 0;
	f.op_seq = 42;
	f.count = 1000;
	f.root = -1;
	f.step = 3;
	f.seg = 2;
	f.offset = 4096;
	f.length = 1024;
	return f;
}

static inline struct ft__frame abort_frame(int status)
{
	struct ft__frame f = data_frame();

	f.type = FT__FRAME_ABORT;
	f.length = 0;
	f.status = status;
	return f;
}

static inline struct ft__hello make_hello(int from, int to, uint32_t gen, const char *job,
				  const char *token)
{
	struct ft__hello h;

	memset(&h, 0, sizeof(h));
	h.magic = FT__HELLO_MAGIC;
	h.version = FT__PROTO_VERSION;
	h.kind = FT__LINK_DATA;
	h.generation = gen;
	h.from_rank = from;
	h.to_rank = to;
	snprintf(h.job_id, sizeof(h.job_id), "%s", job);
	cr_assert_eq(ft__hello_seal(&h, token), 0);
	return h;
}

static inline struct ft__hello good_hello(void)
{
	return make_hello(1, 0, GEN, JOB, TOKEN);
}

static inline struct ft__frame frame_for(uint64_t length, uint32_t seg)
{
	struct ft__frame f = data_frame();

	f.length = length;
	f.seg = seg;
	f.offset = (uint64_t)seg * 4096;
	return f;
}

#endif
