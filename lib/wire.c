/* wire.c: checks of handshakes and frame headers, shared by every transport. */
#include <string.h>

#include "ftcc.h"
#include "transport.h"
#include "internal.h"

int ft_hello_check(const struct ft_hello *expect, const struct ft_hello *got)
{
	if (got->magic != FT_HELLO_MAGIC)
		return -FT_EPROTO;
	if (got->version != FT_PROTO_VERSION)
		return -FT_EAUTH;
	if (memchr(got->job_id, 0, sizeof(got->job_id)) == NULL ||
	    memchr(got->token, 0, sizeof(got->token)) == NULL)
		return -FT_EPROTO;
	if (strcmp(got->job_id, expect->job_id) != 0 || strcmp(got->token, expect->token) != 0)
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

int ft_frame_check(const struct ft_frame *expect, const struct ft_frame *got)
{
	if (got->magic != FT_FRAME_MAGIC)
		return -FT_EPROTO;
	if (got->generation < expect->generation)
		return -FT_ESTALE;
	if (got->generation != expect->generation)
		return -FT_EPROTO;
	if (got->type == FT_FRAME_ABORT) {
		if (got->length != 0 || got->status >= 0 || !known_error(got->status))
			return -FT_EPROTO;
		return got->status;
	}
	if (got->type != FT_FRAME_DATA || got->op_seq != expect->op_seq)
		return -FT_EPROTO;
	if (got->kind != expect->kind || got->dtype != expect->dtype || got->op != expect->op ||
	    got->count != expect->count || got->root != expect->root) {
		ft__debug("frame of op %llu: kind %u dtype %u op %u count %llu root %d, expected "
			  "kind %u dtype %u op %u count %llu root %d",
			  (unsigned long long)got->op_seq, got->kind, got->dtype, got->op,
			  (unsigned long long)got->count, got->root, expect->kind, expect->dtype,
			  expect->op, (unsigned long long)expect->count, expect->root);
		return -FT_EMISMATCH;
	}
	if (got->step != expect->step || got->seg != expect->seg ||
	    got->offset != expect->offset || got->length != expect->length)
		return -FT_EPROTO;
	if ((got->flags & ~FT_FRAME_F_CRC) != 0)
		return -FT_EPROTO;
	return 0;
}
