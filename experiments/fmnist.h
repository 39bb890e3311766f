/* fmnist.h: Fashion-MNIST from its gzipped IDX files, and two small models on it (MLR, a 784-64-10 MLP) for the training examples. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_EXAMPLES_FMNIST_H
#define FTCC_EXAMPLES_FMNIST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define FM_PIXELS 784
#define FM_CLASSES 10
#define FM_HIDDEN 64
#define FM_DIR "/usr/share/datasets/fashion-mnist" /* Debian's dataset-fashion-mnist */

struct fm_set {
	size_t n;
	uint8_t *img;   /* n x 784 */
	uint8_t *label; /* n */
};

static uint32_t fm_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads one gzipped IDX file: magic 0x801 (labels) or 0x803 (images of 28x28). */
static uint8_t *fm_read_idx(const char *path, uint32_t magic, size_t *n)
{
	uint8_t head[16];
	size_t hlen = magic == 0x803 ? 16 : 8, item = magic == 0x803 ? FM_PIXELS : 1;
	gzFile f = gzopen(path, "rb");
	uint8_t *data = NULL;

	if (f == NULL) {
		fprintf(stderr, "%s: cannot open (install dataset-fashion-mnist)\n", path);
		return NULL;
	}
	gzbuffer(f, 1 << 17);
	if (gzread(f, head, (unsigned)hlen) != (int)hlen || fm_be32(head) != magic ||
	    (magic == 0x803 && (fm_be32(head + 8) != 28 || fm_be32(head + 12) != 28))) {
		fprintf(stderr, "%s: not an IDX file of the expected kind\n", path);
		goto close;
	}
	*n = fm_be32(head + 4);
	data = malloc(*n * item);
	if (data == NULL || gzread(f, data, (unsigned)(*n * item)) != (int)(*n * item)) {
		fprintf(stderr, "%s: short read\n", path);
		free(data);
		data = NULL;
	}
close:
	gzclose(f);
	return data;
}

/* DIR/NAME, or DIR/NAME.gz when there is no uncompressed copy (zlib reads both). */
static void fm_path(char *path, size_t len, const char *dir, const char *which, const char *kind)
{
	FILE *f;

	snprintf(path, len, "%s/%s-%s-ubyte", dir, which, kind);
	if ((f = fopen(path, "rb")) != NULL)
		fclose(f);
	else
		snprintf(path, len, "%s/%s-%s-ubyte.gz", dir, which, kind);
}

/* which: "train" or "t10k". Returns 0 or -1 (message printed). */
static int fm_load(const char *dir, const char *which, struct fm_set *s)
{
	char path[512];
	size_t ni = 0, nl = 0;

	fm_path(path, sizeof(path), dir, which, "images-idx3");
	s->img = fm_read_idx(path, 0x803, &ni);
	fm_path(path, sizeof(path), dir, which, "labels-idx1");
	s->label = fm_read_idx(path, 0x801, &nl);
	if (s->img == NULL || s->label == NULL || ni != nl) {
		free(s->img);
		free(s->label);
		return -1;
	}
	s->n = ni;
	return 0;
}

/*
 * Models. The parameters are one float vector theta; the layouts:
 *   MLR  W[784][10], b[10]                         (7,850)
 *   MLP  W1[784][64], b1[64], W2[64][10], b2[10]   (50,890)
 * A row of W (one pixel's weights) is contiguous, so that blocks of 10
 * (MLR) are SCAR's rows.
 */
enum fm_model { FM_MLR, FM_MLP };

static size_t fm_nparams(enum fm_model m)
{
	return m == FM_MLR ? (size_t)FM_PIXELS * FM_CLASSES + FM_CLASSES
			   : (size_t)FM_PIXELS * FM_HIDDEN + FM_HIDDEN + FM_HIDDEN * FM_CLASSES +
				     FM_CLASSES;
}

/* Softmax cross-entropy of logits z for label y; dz = softmax - onehot. */
static double fm_softmax_ce(const float *z, int y, float *dz)
{
	float mx = z[0], sum = 0;
	for (int k = 1; k < FM_CLASSES; k++)
		mx = z[k] > mx ? z[k] : mx;
	for (int k = 0; k < FM_CLASSES; k++)
		sum += expf(z[k] - mx);
	if (dz != NULL)
		for (int k = 0; k < FM_CLASSES; k++)
			dz[k] = expf(z[k] - mx) / sum - (k == y ? 1.0f : 0.0f);
	return (double)(logf(sum) + mx - z[y]);
}

/* Logits of one image; h (FM_HIDDEN floats) receives the MLP's hidden layer. */
static void fm_forward(enum fm_model m, const float *th, const float *x, float *z, float *h)
{
	if (m == FM_MLR) {
		const float *b = th + FM_PIXELS * FM_CLASSES;
		for (int k = 0; k < FM_CLASSES; k++)
			z[k] = b[k];
		for (int i = 0; i < FM_PIXELS; i++) {
			if (x[i] == 0)
				continue;
			const float *w = th + i * FM_CLASSES;
			for (int k = 0; k < FM_CLASSES; k++)
				z[k] += w[k] * x[i];
		}
		return;
	}
	const float *b1 = th + FM_PIXELS * FM_HIDDEN, *w2 = b1 + FM_HIDDEN,
		    *b2 = w2 + FM_HIDDEN * FM_CLASSES;
	for (int j = 0; j < FM_HIDDEN; j++)
		h[j] = b1[j];
	for (int i = 0; i < FM_PIXELS; i++) {
		if (x[i] == 0)
			continue;
		const float *w = th + i * FM_HIDDEN;
		for (int j = 0; j < FM_HIDDEN; j++)
			h[j] += w[j] * x[i];
	}
	for (int j = 0; j < FM_HIDDEN; j++)
		h[j] = h[j] > 0 ? h[j] : 0;
	for (int k = 0; k < FM_CLASSES; k++)
		z[k] = b2[k];
	for (int j = 0; j < FM_HIDDEN; j++)
		for (int k = 0; k < FM_CLASSES; k++)
			z[k] += w2[j * FM_CLASSES + k] * h[j];
}

static void fm_pixels(const struct fm_set *s, size_t idx, float *x)
{
	for (int i = 0; i < FM_PIXELS; i++)
		x[i] = (float)s->img[idx * FM_PIXELS + i] / 255.0f;
}

/* Adds the gradient of the mean loss over the n images idx[] to g (zeroed by the caller); returns the mean loss. */
static double fm_grad(enum fm_model m, const float *th, const struct fm_set *s, const size_t *idx,
		      size_t n, float *g)
{
	float x[FM_PIXELS], z[FM_CLASSES], dz[FM_CLASSES], h[FM_HIDDEN], dh[FM_HIDDEN];
	double loss = 0;
	float inv = 1.0f / (float)n;

	for (size_t s_ = 0; s_ < n; s_++) {
		int y = s->label[idx[s_]];
		fm_pixels(s, idx[s_], x);
		fm_forward(m, th, x, z, h);
		loss += fm_softmax_ce(z, y, dz);
		for (int k = 0; k < FM_CLASSES; k++)
			dz[k] *= inv;
		if (m == FM_MLR) {
			float *gb = g + FM_PIXELS * FM_CLASSES;
			for (int k = 0; k < FM_CLASSES; k++)
				gb[k] += dz[k];
			for (int i = 0; i < FM_PIXELS; i++) {
				if (x[i] == 0)
					continue;
				float *gw = g + i * FM_CLASSES;
				for (int k = 0; k < FM_CLASSES; k++)
					gw[k] += dz[k] * x[i];
			}
			continue;
		}
		const float *w2 = th + FM_PIXELS * FM_HIDDEN + FM_HIDDEN;
		float *gb1 = g + FM_PIXELS * FM_HIDDEN, *gw2 = gb1 + FM_HIDDEN,
		      *gb2 = gw2 + FM_HIDDEN * FM_CLASSES;
		for (int k = 0; k < FM_CLASSES; k++)
			gb2[k] += dz[k];
		for (int j = 0; j < FM_HIDDEN; j++) {
			float acc = 0;
			for (int k = 0; k < FM_CLASSES; k++) {
				gw2[j * FM_CLASSES + k] += dz[k] * h[j];
				acc += w2[j * FM_CLASSES + k] * dz[k];
			}
			dh[j] = h[j] > 0 ? acc : 0;
			gb1[j] += dh[j];
		}
		for (int i = 0; i < FM_PIXELS; i++) {
			if (x[i] == 0)
				continue;
			float *gw = g + i * FM_HIDDEN;
			for (int j = 0; j < FM_HIDDEN; j++)
				gw[j] += dh[j] * x[i];
		}
	}
	return loss / (double)n;
}

/* Mean loss and accuracy over images [first, first + n) taken every `stride`. */
static void fm_eval(enum fm_model m, const float *th, const struct fm_set *s, size_t n,
		    size_t stride, double *loss, double *acc)
{
	float x[FM_PIXELS], z[FM_CLASSES], h[FM_HIDDEN];
	double l = 0;
	size_t right = 0;

	for (size_t k = 0; k < n; k++) {
		size_t idx = (k * stride) % s->n;
		int y = s->label[idx], best = 0;
		fm_pixels(s, idx, x);
		fm_forward(m, th, x, z, h);
		l += fm_softmax_ce(z, y, NULL);
		for (int c = 1; c < FM_CLASSES; c++)
			best = z[c] > z[best] ? c : best;
		right += best == y;
	}
	*loss = l / (double)n;
	*acc = (double)right / (double)n;
}

#endif /* FTCC_EXAMPLES_FMNIST_H */
