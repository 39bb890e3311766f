/* inband_wire.c: the in-band membership's values and message codec: every field read is checked against the bytes the message holds, every allocation against the world's size. */
/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inband.h"

void ft__ib_value_free(struct ib_value *v)
{
	free(v->members);
	free(v->next_ops);
	free(v->fresh);
	*v = (struct ib_value){0};
}

int ft__ib_value_alloc(struct ib_value *v, int n)
{
	v->members = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
	v->next_ops = malloc((size_t)(n > 0 ? n : 1) * sizeof(uint64_t));
	v->fresh = calloc((size_t)(n > 0 ? n : 1), 1);
	if (v->members == NULL || v->next_ops == NULL || v->fresh == NULL) {
		ft__ib_value_free(v);
		return -FT_ENOMEM;
	}
	return 0;
}

int ft__ib_value_copy(struct ib_value *dst, const struct ib_value *src)
{
	struct ib_value v = *src;

	if (ft__ib_value_alloc(&v, src->n) != 0)
		return -FT_ENOMEM;
	memcpy(v.members, src->members, (size_t)src->n * sizeof(int));
	memcpy(v.next_ops, src->next_ops, (size_t)src->n * sizeof(uint64_t));
	memcpy(v.fresh, src->fresh, (size_t)src->n);
	ft__ib_value_free(dst);
	*dst = v;
	return 0;
}

/* n members, strictly ascending ranks of the world, with `more` bytes each to
 * follow (checked before anything is allocated); bad otherwise. */
static int *get_members(struct rbuf *r, int world, size_t more, int *n_out)
{
	int32_t n = get_i32(r);
	int *m;

	*n_out = 0;
	if (r->bad || n < 1 || n > world || (size_t)n * (4 + more) > r->len - r->off) {
		r->bad = true;
		return NULL;
	}
	m = malloc((size_t)n * sizeof(int));
	if (m == NULL) {
		r->bad = true;
		return NULL;
	}
	for (int i = 0; i < n; i++) {
		m[i] = get_i32(r);
		if (m[i] < 0 || m[i] >= world || (i > 0 && m[i] <= m[i - 1]))
			r->bad = true;
	}
	if (r->bad) {
		free(m);
		return NULL;
	}
	*n_out = n;
	return m;
}

void ft__ib_put_value(struct wbuf *w, const struct ib_value *v)
{
	put_u64(w, v->ballot);
	put_u64(w, v->first_op);
	put_u64(w, v->nonce);
	put_i32(w, v->n);
	for (int i = 0; i < v->n; i++)
		put_i32(w, v->members[i]);
	for (int i = 0; i < v->n; i++)
		put_u64(w, v->next_ops[i]);
	put(w, v->fresh, (size_t)v->n);
}

void ft__ib_get_value(struct rbuf *r, int world, struct ib_value *v)
{
	v->ballot = get_u64(r);
	v->first_op = get_u64(r);
	v->nonce = get_u64(r);
	v->members = get_members(r, world, sizeof(uint64_t) + 1, &v->n);
	if (r->bad)
		return;
	v->next_ops = malloc((size_t)v->n * sizeof(uint64_t));
	v->fresh = malloc((size_t)v->n);
	if (v->next_ops == NULL || v->fresh == NULL)
		r->bad = true;
	for (int i = 0; i < v->n && !r->bad; i++)
		v->next_ops[i] = get_u64(r);
	if (!r->bad)
		get(r, v->fresh, (size_t)v->n);
	for (int i = 0; i < v->n && !r->bad; i++)
		if (v->fresh[i] > IB_FRESH_OWED_NEXT)
			r->bad = true;
	if (r->bad)
		ft__ib_value_free(v);
}


/* rec without its certain map, which comes from ranks[].certain. */
void ft__ib_put_record(struct wbuf *w, const struct ib_record *rec, const struct ib_rank *ranks,
		       int world)
{
	put_u64(w, rec->ballot);
	put_u64(w, rec->next_op);
	put_str(w, rec->addr);
	put_str(w, rec->ctrl);
	for (int i = 0; i < world; i += 8) {
		unsigned char byte = 0;
		for (int k = 0; k < 8 && i + k < world; k++)
			byte |= (unsigned char)(ranks[i + k].certain << k);
		put(w, &byte, 1);
	}
	put_i32(w, rec->kind);
	if (rec->kind != 0)
		ft__ib_put_value(w, &rec->v);
}

/* rec->v is the caller's to free (it is empty when r went bad). */
void ft__ib_get_record(struct rbuf *r, int world, struct ib_record *rec)
{
	size_t map = ((size_t)world + 7) / 8;

	*rec = (struct ib_record){0};
	rec->ballot = get_u64(r);
	rec->next_op = get_u64(r);
	get_str(r, rec->addr, sizeof(rec->addr));
	get_str(r, rec->ctrl, sizeof(rec->ctrl));
	if (r->bad || map > r->len - r->off) {
		r->bad = true;
		return;
	}
	rec->certain = r->p + r->off;
	r->off += map;
	rec->kind = get_i32(r);
	if (rec->kind < 0 || rec->kind > 2)
		r->bad = true;
	if (!r->bad && rec->kind != 0)
		ft__ib_get_value(r, world, &rec->v);
}

size_t ft__inband_payload_max(int world)
{
	size_t need = RECORD_BYTES(world); /* the largest: a COMMIT or PROPOSE is VALUE_BYTES */
	size_t book = 8 + 2 + (FT__ADDR_MAX - 1) + 2 + (FT__CTRL_MAX - 1); /* one BOOK entry */

	if (need < book)
		need = book;
	return need < 4096 ? 4096 : need;
}

/* Both values hold the same view. */
bool ft__ib_value_same(const struct ib_value *a, const struct ib_value *b)
{
	return a->ballot == b->ballot && a->first_op == b->first_op && a->nonce == b->nonce &&
	       a->n == b->n && memcmp(a->members, b->members, (size_t)a->n * sizeof(int)) == 0 &&
	       memcmp(a->next_ops, b->next_ops, (size_t)a->n * sizeof(uint64_t)) == 0 &&
	       memcmp(a->fresh, b->fresh, (size_t)a->n) == 0;
}

int ft__inband_codec_check(int world)
{
	size_t cap = ft__inband_payload_max(world);
	unsigned char *buf = malloc(cap);
	struct ib_rank *ranks = calloc((size_t)world, sizeof(*ranks));
	struct ib_record rec = {.ballot = UINT64_MAX - 1, .next_op = UINT64_MAX, .kind = 2};
	struct ib_record got = {0};
	struct ib_value back = {0};
	int rc = -FT_EPROTO;

	if (buf == NULL || ranks == NULL || ft__ib_value_alloc(&rec.v, world) != 0) {
		rc = -FT_ENOMEM;
		goto out;
	}
	/* the largest of everything: the longest addresses, every rank certain */
	memset(rec.addr, 'a', sizeof(rec.addr) - 1);
	memset(rec.ctrl, 'c', sizeof(rec.ctrl) - 1);
	rec.v = (struct ib_value){.ballot = UINT64_MAX, .first_op = 1, .nonce = 2, .n = world,
				  .members = rec.v.members, .next_ops = rec.v.next_ops,
				  .fresh = rec.v.fresh};
	for (int i = 0; i < world; i++) {
		ranks[i].certain = true;
		rec.v.members[i] = i;
		rec.v.fresh[i] = (uint8_t)(i & 1);
		rec.v.next_ops[i] = UINT64_MAX - (uint64_t)i;
	}
	/* the COMMIT (and PROPOSE) */
	struct wbuf w = {.p = buf, .cap = cap};
	ft__ib_put_value(&w, &rec.v);
	if (w.bad || w.len != VALUE_BYTES(world) || w.len > UINT16_MAX)
		goto out;
	struct rbuf r = {.p = buf, .len = w.len};
	ft__ib_get_value(&r, world, &back);
	if (r.bad || r.off != r.len || !ft__ib_value_same(&back, &rec.v))
		goto out;
	/* the RECORD */
	w = (struct wbuf){.p = buf, .cap = cap};
	ft__ib_put_record(&w, &rec, ranks, world);
	if (w.bad || w.len != RECORD_BYTES(world) || w.len > UINT16_MAX)
		goto out;
	r = (struct rbuf){.p = buf, .len = w.len};
	ft__ib_get_record(&r, world, &got);
	if (r.bad || r.off != r.len || got.kind != 2 || got.ballot != rec.ballot ||
	    got.next_op != rec.next_op || strcmp(got.addr, rec.addr) != 0 ||
	    strcmp(got.ctrl, rec.ctrl) != 0 || !ft__ib_value_same(&got.v, &rec.v))
		goto out;
	rc = 0;
	for (int i = 0; i < world; i++)
		if (!bit(got.certain, i))
			rc = -FT_EPROTO;
out:
	ft__ib_value_free(&got.v);
	ft__ib_value_free(&back);
	ft__ib_value_free(&rec.v);
	free(ranks);
	free(buf);
	return rc;
}
