/* recovery_bench.c: time from SIGKILL (or SIGSTOP) of one rank to every survivor knowing, and to the interrupted op returning. */
/* SPDX-License-Identifier: MIT */
#include <ftcc.h>
#include <arpa/inet.h>
#include <getopt.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/*
 * Each trial forks N ranks (policy shrink) that allreduce `size` bytes of
 * float32 back to back. Once all are past ft_init and have run a few ops,
 * the parent kills (or stops) a random rank and notes the time. Each
 * survivor keeps running until it has run 5 ops on the new view, then
 * writes: the time its detector knew of the failure, and the start/end
 * times of its last ops. The parent takes, over the survivors, the latest
 * "knew" time and the latest end of the op that was running at the kill.
 * All times are CLOCK_MONOTONIC, shared by the processes of one host.
 *
 * A killed process's sockets close only after the kernel has freed its
 * memory (do_exit frees the address space before the open files), so at
 * large sizes "every survivor knows" grows with the victim's buffers:
 * -H puts them in transparent huge pages (madvise), which the kernel
 * frees 512 pages at a time. -v prints each survivor's delays.
 */

#define KEEP 4096
#define HUGE ((size_t)2 << 20)

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct opts {
	int n, trials, detect_ms, heartbeat_ms;
	size_t size;
	bool stop;
	bool inband;            /* in-band membership, a peer list of ports held here */
	bool verbose;           /* -v: each survivor's delays, by ring distance from the victim */
	bool huge;              /* -H: the buffers in transparent huge pages (madvise) */
	char dir[256];
	char peers[256 * 24];
};

/* Holds a loopback port per rank (bound, not listening) and lists them. */
static int reserve_ports(struct opts *o, int *fds)
{
	o->peers[0] = '\0';
	for (int r = 0; r < o->n; r++) {
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		socklen_t al = sizeof(a);
		int one = 1;
		fds[r] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fds[r] < 0 || setsockopt(fds[r], SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
		    bind(fds[r], (struct sockaddr *)&a, sizeof(a)) != 0 ||
		    getsockname(fds[r], (struct sockaddr *)&a, &al) != 0)
			return -1;
		snprintf(o->peers + strlen(o->peers), sizeof(o->peers) - strlen(o->peers),
			 "%s127.0.0.1:%d", r ? "," : "", ntohs(a.sin_port));
	}
	return 0;
}

static int rank_main(const struct opts *o, int rank, int trial)
{
	struct ft_config cfg = FT_CONFIG_INIT;
	struct ft_comm *comm;
	size_t count = o->size / 4 > 0 ? o->size / 4 : 1;
	float *in, *out;
	static long long t_start[KEEP], t_end[KEEP];
	struct ft_op_info info;
	uint32_t gen0;
	int i, since = -1, rc;
	char path[400];
	FILE *f;

	if (o->huge) {
		/* 2 MiB pages: a killed rank's memory is freed (before the
		 * kernel closes its sockets) 512 times faster */
		size_t b = (count * 4 + HUGE - 1) & ~(HUGE - 1);
		in = aligned_alloc(HUGE, b);
		out = aligned_alloc(HUGE, b);
		if (in != NULL && out != NULL &&
		    (madvise(in, b, MADV_HUGEPAGE) != 0 || madvise(out, b, MADV_HUGEPAGE) != 0))
			fprintf(stderr, "madvise(MADV_HUGEPAGE): %s\n", strerror(errno));
	} else {
		in = malloc(count * 4);
		out = malloc(count * 4);
	}
	cfg.rank = rank;
	cfg.world_size = o->n;
	cfg.policy = FT_POLICY_SHRINK;
	cfg.log_level = 0;
	if (o->detect_ms > 0)
		cfg.detect_timeout_ms = o->detect_ms;
	if (o->heartbeat_ms > 0)
		cfg.heartbeat_ms = o->heartbeat_ms;
	snprintf(cfg.rendezvous, sizeof(cfg.rendezvous), "%s", o->dir);
	snprintf(cfg.job_id, sizeof(cfg.job_id), "rb-%d-%d", (int)getppid(), trial);
	snprintf(cfg.token, sizeof(cfg.token), "bench");
	if (o->inband) {
		snprintf(cfg.membership, sizeof(cfg.membership), "inband");
		snprintf(cfg.bootstrap, sizeof(cfg.bootstrap), "peers");
		snprintf(cfg.peers, sizeof(cfg.peers), "%s", o->peers);
	}
	if (in == NULL || out == NULL || (rc = ft_init(&cfg, &comm)) != 0)
		return 1;
	for (size_t j = 0; j < count; j++)
		in[j] = (float)(rank + 1);
	gen0 = ft_generation(comm);
	for (i = 0; i < 10000000 && (since < 0 || i - since < 5); i++) {
		t_start[i % KEEP] = now_ns();
		rc = ft_allreduce(comm, in, out, count, FT_FLOAT32, FT_SUM, &info);
		t_end[i % KEEP] = now_ns();
		if (rc != 0)
			return 2;
		if (i == 3) {
			snprintf(path, sizeof(path), "%s/ready-%d-%d", o->dir, trial, rank);
			fclose(fopen(path, "w"));
		}
		if (since < 0 && ft_generation(comm) != gen0)
			since = i;
	}
	struct ft_stats st;
	ft_stats_get(comm, &st);
	snprintf(path, sizeof(path), "%s/result-%d-%d", o->dir, trial, rank);
	f = fopen(path, "w");
	if (f == NULL)
		return 3;
	fprintf(f, "%llu %llu %d\n", (unsigned long long)st.failure_known_ns,
		(unsigned long long)st.view_settled_ns, i < KEEP ? i : KEEP);
	for (int k = i < KEEP ? 0 : i - KEEP; k < i; k++)
		fprintf(f, "%lld %lld\n", t_start[k % KEEP], t_end[k % KEEP]);
	fclose(f);
	ft_finalize(comm);
	return 0;
}

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return x < y ? -1 : x > y;
}

/* One trial: returns 0 and the three delays (ms), the op time (ms). */
static int trial_run(const struct opts *o, int trial, double *know_ms, double *settle_ms,
		     double *return_ms, double *op_ms)
{
	pid_t pids[256];
	int victim = rand() % o->n;
	long long t_kill;
	char path[400];

	for (int r = 0; r < o->n; r++) {
		pids[r] = fork();
		if (pids[r] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			_exit(rank_main(o, r, trial));
		}
	}
	for (int r = 0; r < o->n; r++) {
		snprintf(path, sizeof(path), "%s/ready-%d-%d", o->dir, trial, r);
		for (int w = 0; access(path, F_OK) != 0; w++) {
			if (w > 60000) {
				fprintf(stderr, "trial %d: rank %d never got ready\n", trial, r);
				return -1;
			}
			usleep(1000);
		}
	}
	usleep((useconds_t)(rand() % 50000));
	t_kill = now_ns();
	kill(pids[victim], o->stop ? SIGSTOP : SIGKILL);
	long long known = 0, settled = 0, ret = 0, durs[KEEP];
	int ndurs = 0, bad = 0;
	for (int r = 0; r < o->n; r++) {
		int st;
		if (r == victim)
			continue;
		waitpid(pids[r], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "trial %d: survivor %d failed\n", trial, r);
			bad++;
			continue;
		}
		snprintf(path, sizeof(path), "%s/result-%d-%d", o->dir, trial, r);
		FILE *f = fopen(path, "r");
		unsigned long long k, sv;
		int nops;
		if (f == NULL || fscanf(f, "%llu %llu %d", &k, &sv, &nops) != 3) {
			bad++;
			if (f != NULL)
				fclose(f);
			continue;
		}
		if ((long long)k > known)
			known = (long long)k;
		if (o->verbose)
			fprintf(stderr, "trial %d: rank %d (%d from the victim): knows at %.2f ms, settled at %.2f ms\n",
				trial, r, (r - victim + o->n) % o->n, ((long long)k - t_kill) / 1e6,
				((long long)sv - t_kill) / 1e6);
		if ((long long)sv > settled)
			settled = (long long)sv;
		long long end_of_interrupted = 0;
		for (int q = 0; q < nops; q++) {
			long long s, e;
			if (fscanf(f, "%lld %lld", &s, &e) != 2)
				break;
			if (e < t_kill && ndurs < KEEP)
				durs[ndurs++] = e - s;
			if (end_of_interrupted == 0 && e >= t_kill)
				end_of_interrupted = e;
		}
		fclose(f);
		if (end_of_interrupted > ret)
			ret = end_of_interrupted;
		unlink(path);
	}
	kill(pids[victim], SIGKILL);
	waitpid(pids[victim], NULL, 0);
	for (int r = 0; r < o->n; r++) {
		snprintf(path, sizeof(path), "%s/ready-%d-%d", o->dir, trial, r);
		unlink(path);
	}
	if (bad > 0 || known == 0 || ndurs == 0)
		return -1;
	qsort(durs, (size_t)ndurs, sizeof(durs[0]), cmp_ll);
	*know_ms = (double)(known - t_kill) / 1e6;
	*settle_ms = (double)(settled - t_kill) / 1e6;
	*return_ms = (double)(ret - t_kill) / 1e6;
	*op_ms = (double)durs[ndurs / 2] / 1e6;
	return 0;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	struct opts o = {.n = 8, .trials = 10, .size = 4096};
	static const struct option lo[] = {
		{"ranks", required_argument, NULL, 'n'}, {"size", required_argument, NULL, 's'},
		{"trials", required_argument, NULL, 't'}, {"stop", no_argument, NULL, 'S'},
		{"detect-ms", required_argument, NULL, 'd'}, {"heartbeat-ms", required_argument, NULL, 'h'},
		{"inband", no_argument, NULL, 'I'}, {"verbose", no_argument, NULL, 'v'},
		{"hugepages", no_argument, NULL, 'H'},
		{NULL, 0, NULL, 0}};
	double know[1000], settle[1000], ret[1000], op[1000];
	int port_fds[256];
	int c, ok = 0;

	while ((c = getopt_long(argc, argv, "n:s:t:Sd:h:IvH", lo, NULL)) != -1) {
		switch (c) {
		case 'n': o.n = atoi(optarg); break;
		case 's': o.size = strtoull(optarg, NULL, 10); break;
		case 't': o.trials = atoi(optarg); break;
		case 'S': o.stop = true; break;
		case 'd': o.detect_ms = atoi(optarg); break;
		case 'h': o.heartbeat_ms = atoi(optarg); break;
		case 'I': o.inband = true; break;
		case 'v': o.verbose = true; break;
		case 'H': o.huge = true; break;
		default:
			fprintf(stderr, "usage: recovery_bench [-n RANKS] [-s BYTES] [-t TRIALS] [--stop] "
					"[--detect-ms MS] [--heartbeat-ms MS] [--inband]\n");
			return 2;
		}
	}
	if (o.n < 2 || o.n > 256 || o.trials < 1 || o.trials > 1000) {
		fprintf(stderr, "recovery_bench: 2..256 ranks, 1..1000 trials\n");
		return 2;
	}
	snprintf(o.dir, sizeof(o.dir), "%s/ftcc-rbench-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (mkdtemp(o.dir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	srand((unsigned)now_ns());
	if (o.inband && reserve_ports(&o, port_fds) != 0) {
		perror("recovery_bench: reserving ports");
		return 1;
	}
	for (int t = 0; t < o.trials; t++)
		if (trial_run(&o, t, &know[ok], &settle[ok], &ret[ok], &op[ok]) == 0)
			ok++;
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", o.dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", o.dir);
	if (ok == 0) {
		fprintf(stderr, "recovery_bench: no trial succeeded\n");
		return 1;
	}
	qsort(know, (size_t)ok, sizeof(double), cmp_d);
	qsort(ret, (size_t)ok, sizeof(double), cmp_d);
	qsort(settle, (size_t)ok, sizeof(double), cmp_d);
	qsort(op, (size_t)ok, sizeof(double), cmp_d);
	printf("| %s | membership | ranks | size | trials ok | all know: median / max ms | all settled: median / max ms | interrupted op returned: median / max ms | op alone ms |\n",
	       o.stop ? "SIGSTOP" : "SIGKILL");
	printf("| | %s | %d | %zu | %d/%d | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | %.2f |\n",
	       o.inband ? "inband" : "file", o.n, o.size, ok, o.trials, know[ok / 2], know[ok - 1],
	       settle[ok / 2], settle[ok - 1], ret[ok / 2], ret[ok - 1], op[ok / 2]);
	return ok == o.trials ? 0 : 1;
}
