/* mf.h: matrix factorization on synthetic ratings with Zipf-popular rows and columns (CPR's embedding-table setting), for train_fmnist --model=mf. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_EXAMPLES_MF_H
#define FTCC_EXAMPLES_MF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * Ratings r(u, i) = <U*_u, V*_i> + noise of a hidden rank-MF_RANK model; a
 * sample draws user u and item i from Zipf(MF_ZIPF) popularity, so a few rows
 * of the tables are read in most steps and most rows rarely: the access
 * counts that CPR-MFU checkpoints by. Parameters: L (users x MF_RANK), then R
 * (items x MF_RANK); a block is one row (one embedding vector).
 */
#define MF_USERS 2000
#define MF_ITEMS 2000
#define MF_RANK 8
#define MF_ZIPF 1.1

struct mf {
	float truth[(MF_USERS + MF_ITEMS) * MF_RANK];
	double cdf_u[MF_USERS], cdf_i[MF_ITEMS];
};

static uint64_t mf_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static double mf_unit(uint64_t h) { return (double)(h >> 11) / 9007199254740992.0; }

static void mf_zipf_cdf(double *cdf, size_t n)
{
	double sum = 0;
	for (size_t k = 0; k < n; k++)
		sum += pow((double)(k + 1), -MF_ZIPF);
	double acc = 0;
	for (size_t k = 0; k < n; k++)
		cdf[k] = (acc += pow((double)(k + 1), -MF_ZIPF) / sum);
}

static size_t mf_draw(const double *cdf, size_t n, double u)
{
	size_t lo = 0, hi = n - 1;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (cdf[mid] < u)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The hidden model (fixed: the same task for every seed). */
static void mf_init(struct mf *m)
{
	for (size_t k = 0; k < (size_t)(MF_USERS + MF_ITEMS) * MF_RANK; k++)
		m->truth[k] = (float)((mf_unit(mf_mix(0x3141592653ull + k)) * 2 - 1) * 1.7 /
				      sqrt((double)MF_RANK) * 1.7);
	mf_zipf_cdf(m->cdf_u, MF_USERS);
	mf_zipf_cdf(m->cdf_i, MF_ITEMS);
}

static size_t mf_nparams(void) { return (size_t)(MF_USERS + MF_ITEMS) * MF_RANK; }

/* Sample h: user, item and rating. */
static void mf_sample(const struct mf *m, uint64_t h, size_t *u, size_t *i, float *r)
{
	const float *U = m->truth, *V = m->truth + MF_USERS * MF_RANK;
	float dot = 0;
	*u = mf_draw(m->cdf_u, MF_USERS, mf_unit(mf_mix(h)));
	*i = mf_draw(m->cdf_i, MF_ITEMS, mf_unit(mf_mix(h ^ 0xabcdefull)));
	for (int k = 0; k < MF_RANK; k++)
		dot += U[*u * MF_RANK + k] * V[*i * MF_RANK + k];
	*r = dot + (float)(mf_unit(mf_mix(h ^ 0x5555ull)) - 0.5) * 0.2f;
}

/* Adds the gradient of the mean squared error over samples h0 .. h0 + n - 1 (hashed) to g; returns the loss. */
static double mf_grad(const struct mf *m, const float *th, const uint64_t *hs, size_t n, float *g)
{
	const float *L = th, *R = th + MF_USERS * MF_RANK;
	float *gL = g, *gR = g + MF_USERS * MF_RANK;
	double loss = 0;

	for (size_t s = 0; s < n; s++) {
		size_t u, i;
		float r, e = 0;
		mf_sample(m, hs[s], &u, &i, &r);
		for (int k = 0; k < MF_RANK; k++)
			e += L[u * MF_RANK + k] * R[i * MF_RANK + k];
		e -= r;
		loss += (double)e * e;
		e *= 2.0f / (float)n;
		for (int k = 0; k < MF_RANK; k++) {
			gL[u * MF_RANK + k] += e * R[i * MF_RANK + k];
			gR[i * MF_RANK + k] += e * L[u * MF_RANK + k];
		}
	}
	return loss / (double)n;
}

/* Mean squared error over n fixed samples. */
static double mf_eval(const struct mf *m, const float *th, size_t n)
{
	const float *L = th, *R = th + MF_USERS * MF_RANK;
	double loss = 0;

	for (size_t s = 0; s < n; s++) {
		size_t u, i;
		float r, e = 0;
		mf_sample(m, 0xe7a1ull << 32 | s, &u, &i, &r);
		for (int k = 0; k < MF_RANK; k++)
			e += L[u * MF_RANK + k] * R[i * MF_RANK + k];
		e -= r;
		loss += (double)e * e;
	}
	return loss / (double)n;
}

#endif /* FTCC_EXAMPLES_MF_H */
