/* ckpt_bench.c: what running checkpoints cost per training step, on disk and in a peer's memory, and how long restoring a rank's shard takes from each (ckpt_bench COUNT STEPS). */
/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <fcntl.h>
#include <ftcc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/*
 * Run under a launcher with FTCC_CKPT_WHERE set (disk, peer; unset: no
 * checkpoint), FTCC_CKPT_SYNC=1 for fdatasync'd disk rounds. Each rank owns a
 * shard of COUNT float32 and runs STEPS training steps: an in-place
 * allreduce of a 1 MiB gradient (the data-parallel part), then an update of
 * an eighth of its shard, then ft_ckpt_step (SCAR priority, an eighth of the
 * blocks a round). It prints the median step time over ranks' maxima.
 * Then rank 0 restores rank 1's whole shard (ft_ckpt_restore, owner 1)
 * five times and prints the median: from rank 1's holder's memory (peer),
 * or from rank 1's files with their pages dropped from the page cache
 * first (disk: what a host without them in memory reads), and with them
 * cached. Under disk+peer, rank 1's files are on this host, and they are
 * read (a rank without them here would ask the holder).
 */

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Drops the page cache of rank 1's checkpoint files under dir (recursively). */
static void drop_cache(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[4096];

	while (d != NULL && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (e->d_type == DT_DIR) {
			drop_cache(path);
		} else if (strncmp(e->d_name, "ck-r1", 5) == 0) {
			int fd = open(path, O_RDONLY);
			if (fd >= 0) {
				fdatasync(fd);
				posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
				close(fd);
			}
		}
	}
	if (d != NULL)
		closedir(d);
}

int main(int argc, char **argv)
{
	size_t count = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)16 << 20;
	int steps = argc > 2 ? atoi(argv[2]) : 30;
	const char *where = getenv("FTCC_CKPT_WHERE"), *dir = getenv("FTCC_CKPT_DIR");
	const char *sync = getenv("FTCC_CKPT_SYNC");
	bool ckpt = where != NULL && where[0] != '\0';
	struct ft_ckpt_config ck = FT_CKPT_CONFIG_INIT;
	struct ft_comm *comm;
	size_t gcount = (size_t)1 << 18;
	float *shard = malloc(count * sizeof(float)), *grad = malloc(gcount * sizeof(float));
	float *back = malloc(count * sizeof(float));
	double *t = calloc((size_t)steps, sizeof(double));
	int rc, me, n;

	if (shard == NULL || grad == NULL || back == NULL || t == NULL || steps < 1)
		return 2;
	if ((rc = ft_init(NULL, &comm)) != 0) {
		fprintf(stderr, "ft_init: %s\n", ft_strerror(rc));
		return 1;
	}
	me = ft_rank(comm);
	n = ft_size(comm);
	for (size_t j = 0; j < count; j++)
		shard[j] = (float)(me + 1) * 0.001f * (float)(j % 1000);
	ck.fraction = 0.125;
	ck.sync = sync != NULL && atoi(sync) == 1;
	if ((rc = ft_state_register(comm, shard, count * sizeof(float), FT_STATE_SHARDED)) < 0 ||
	    (ckpt && (rc = ft_ckpt_enable(comm, &ck)) != 0)) {
		fprintf(stderr, "ckpt: %s\n", ft_strerror(rc));
		return 1;
	}
	for (int s = 0; s < steps; s++) {
		double t0 = now_ms();
		for (size_t j = 0; j < gcount; j++)
			grad[j] = (float)(me + s);
		if ((rc = ft_allreduce(comm, FT_IN_PLACE, grad, gcount, FT_FLOAT32, FT_SUM, NULL)) != 0)
			break;
		size_t part = count / 8, from = (size_t)(s % 8) * part;
		for (size_t j = from; j < from + part; j++)
			shard[j] += 0.5f;
		if (ckpt && (rc = ft_ckpt_step(comm, (uint64_t)s + 1)) != 0)
			break;
		t[s] = now_ms() - t0;
	}
	if (rc == 0 && ckpt)
		rc = ft_ckpt_flush(comm);
	if (rc == 0)
		rc = ft_allreduce(comm, FT_IN_PLACE, t, (size_t)steps, FT_FLOAT64, FT_MAX, NULL);
	if (rc != 0) {
		fprintf(stderr, "step: %s\n", ft_strerror(rc));
		return 1;
	}
	if (me == 0) {
		int warm = steps > 4 ? 2 : 0; /* the first rounds save every block */
		qsort(t + warm, (size_t)(steps - warm), sizeof(double), cmp_d);
		printf("ckpt_bench: %d ranks, shard %zu MiB, where %s%s: step median %.2f ms "
		       "(p10 %.2f, p90 %.2f)\n", n, count * sizeof(float) >> 20,
		       ckpt ? where : "none", ck.sync ? " sync" : "",
		       t[warm + (steps - warm) / 2], t[warm + (steps - warm) / 10],
		       t[warm + (steps - warm) * 9 / 10]);
	}
	if (ckpt && me == 0 && n > 1) {
		size_t nb = 0;
		bool disk = strcmp(where, "disk") == 0;
		double r[5];
		for (int pass = 0; pass < (disk ? 2 : 1) && rc == 0; pass++) {
			for (int k = 0; k < 5 && rc == 0; k++) {
				if (disk && pass == 0 && dir != NULL)
					drop_cache(dir);
				double t0 = now_ms();
				if ((rc = ft_ckpt_blocks(comm, 0, 1, &nb, NULL, NULL)) == 0)
					rc = ft_ckpt_restore(comm, 0, 1, 0, nb, back, 0, NULL);
				r[k] = now_ms() - t0;
			}
			qsort(r, 5, sizeof(double), cmp_d);
			printf("ckpt_bench: restore of rank 1's shard (%zu blocks) from %s: median "
			       "%.2f ms (min %.2f, max %.2f)%s\n", nb,
			       strcmp(where, "peer") == 0 ? "its holder's memory"
			       : !disk ? "its files, found on this host (pages cached)"
			       : pass == 0 ? "disk (pages dropped)" : "disk (pages cached)",
			       r[2], r[0], r[4], rc ? ft_strerror(rc) : "");
		}
	}
	rc = ft_barrier(comm);
	ft_finalize(comm);
	free(shard);
	free(grad);
	free(back);
	free(t);
	return rc == 0 ? 0 : 1;
}
