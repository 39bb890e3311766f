/* tcp_ring.c: the wire's own speed: a ring of plain TCP sockets moving an allreduce's (reduce-scatter's, allgather's) bytes with no reduction, the reference ftcc's TCP ring is measured against. */
/* SPDX-License-Identifier: MIT */

/*
 * Runs under ftcc-run like the other drivers (same flags, table and CSV):
 * rank and world size from FTCC_RANK and FTCC_WORLD_SIZE; each rank listens
 * on 127.0.0.1 port 0 and leaves its port in FTCC_RENDEZVOUS/tcp_ring.R,
 * connects to its right neighbour and accepts its left one.
 *
 * What one call moves is exactly what ftcc's ring moves, in the same order:
 * the vector in n chunks; step g (0 .. 2n-3 for an allreduce; the first
 * n-1 steps for a reduce-scatter, the last n-1 for an allgather) sends
 * chunk (r - g) mod n to the right and receives chunk (r - g - 1) mod n from
 * the left, into place. A step's bytes go on as soon as they came in (the
 * ring's own dependency), so steps overlap as in a pipelined ring, but
 * nothing is reduced, copied or framed: one poll loop, nonblocking send()
 * and recv() of as much as the kernel takes, woken when 128 KiB are in
 * (SO_RCVLOWAT), polling up to 1 ms before it sleeps when every rank has a
 * core (ftcc's engine does the same). The time is rank 0's (which
 * ends only when every rank has sent it everything).
 */

#include <errno.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <arpa/inet.h>

#include "bench_common.h"

struct ring {
	int rank, n;
	int right, left;        /* sockets: send to the right, receive from the left */
	int lowat;              /* SO_RCVLOWAT now set on left */
	bool spin;              /* every rank has a core: poll before sleeping, as ftcc does */
};

/* Wake-ups cost more than the bytes they bring: the receive side wakes only
 * once 128 KiB (or the rest of the step) are in, as ftcc's TCP transport
 * does. */
#define LOWAT_MAX (128 << 10)

static _Noreturn void die(const struct ring *r, const char *what)
{
	fprintf(stderr, "tcp_ring: rank %d: %s: %s\n", r->rank, what, strerror(errno));
	exit(1);
}

static int env_int(const char *name)
{
	const char *v = getenv(name);

	if (v == NULL || *v == '\0') {
		fprintf(stderr, "tcp_ring: %s is not set (run under ftcc-run)\n", name);
		exit(2);
	}
	return atoi(v);
}

static void port_path(char *buf, size_t len, const char *dir, int rank)
{
	snprintf(buf, len, "%s/tcp_ring.%d", dir, rank);
}

static void connect_ring(struct ring *r, const char *dir)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	char path[4096], tmp[4200];
	int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1, port = 0;
	FILE *f;

	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 4) != 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &alen) != 0)
		die(r, "listen");
	port_path(path, sizeof(path), dir, r->rank);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if ((f = fopen(tmp, "w")) == NULL || fprintf(f, "%d\n", ntohs(a.sin_port)) < 0 ||
	    fclose(f) != 0 || rename(tmp, path) != 0)
		die(r, "publish the port");
	port_path(path, sizeof(path), dir, (r->rank + 1) % r->n);
	for (int i = 0; i < 60000 && port == 0; i++) {
		if ((f = fopen(path, "r")) != NULL) {
			if (fscanf(f, "%d", &port) != 1)
				port = 0;
			fclose(f);
		}
		if (port == 0)
			nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
	if (port == 0) {
		fprintf(stderr, "tcp_ring: rank %d: no port from rank %d\n", r->rank,
			(r->rank + 1) % r->n);
		exit(1);
	}
	a.sin_port = htons((uint16_t)port);
	if ((r->right = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
	    connect(r->right, (struct sockaddr *)&a, sizeof(a)) != 0)
		die(r, "connect");
	if ((r->left = accept(lfd, NULL, NULL)) < 0)
		die(r, "accept");
	close(lfd);
	setsockopt(r->right, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(r->left, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	fcntl(r->right, F_SETFL, O_NONBLOCK);
	fcntl(r->left, F_SETFL, O_NONBLOCK);
}

static size_t chunk_lo(size_t bytes, int n, int c)
{
	size_t base = bytes / (size_t)n, rem = bytes % (size_t)n;

	return (size_t)c * base + ((size_t)c < rem ? (size_t)c : rem);
}

static size_t chunk_len(size_t bytes, int n, int c)
{
	return chunk_lo(bytes, n, c + 1) - chunk_lo(bytes, n, c);
}

static int mod(int a, int n)
{
	return ((a % n) + n) % n;
}

/* How much of send step gs's chunk (len bytes) may go: what step gs - 1
 * received of it (got, while gr is that step), all of it at step g0. */
static size_t sendable(int gs, int gr, int g0, size_t len, size_t got)
{
	return gs == g0 || gr > gs - 1 ? len : got;
}

/*
 * Steps g0 .. g1 of the ring over buf (bytes in all). sent/got: bytes of
 * the current send and receive step done. A send step g > g0 may go only as
 * far as step g - 1's receive came in.
 */
static void run_steps(struct ring *r, char *buf, size_t bytes, int g0, int g1)
{
	int gs = g0, gr = g0;   /* the steps being sent and received */
	size_t sent = 0, got = 0;

	while (gs <= g1 || gr <= g1) {
		struct pollfd p[2] = {{r->right, POLLOUT, 0}, {r->left, POLLIN, 0}};
		bool progressed = false;

		if (gs <= g1) {
			int c = mod(r->rank - gs, r->n);
			size_t len = chunk_len(bytes, r->n, c);
			size_t avail = sendable(gs, gr, g0, len, got);
			if (sent < avail) {
				ssize_t k = send(r->right, buf + chunk_lo(bytes, r->n, c) + sent,
						 avail - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
				if (k > 0) {
					sent += (size_t)k;
					progressed = true;
				} else if (k < 0 && errno != EAGAIN)
					die(r, "send");
			}
			if (sent == len) {
				gs++;
				sent = 0;
				progressed = true;
			}
		}
		if (gr <= g1) {
			int c = mod(r->rank - gr - 1, r->n);
			size_t len = chunk_len(bytes, r->n, c);
			if (got < len) {
				ssize_t k = recv(r->left, buf + chunk_lo(bytes, r->n, c) + got, len - got,
						 MSG_DONTWAIT);
				if (k > 0) {
					got += (size_t)k;
					progressed = true;
				} else if (k == 0) {
					fprintf(stderr, "tcp_ring: rank %d: left neighbour closed\n", r->rank);
					exit(1);
				} else if (errno != EAGAIN)
					die(r, "recv");
			}
			if (got == len) {
				gr++;
				got = 0;
				progressed = true;
			}
		}
		if (progressed)
			continue;
		if (gr <= g1) {
			size_t left = chunk_len(bytes, r->n, mod(r->rank - gr - 1, r->n)) - got;
			int want = left < LOWAT_MAX ? (int)left : LOWAT_MAX;
			if (want < 1)
				want = 1;
			if (want != r->lowat &&
			    setsockopt(r->left, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0)
				r->lowat = want;
		}
		/* room to write matters only with bytes to write: otherwise
		 * POLLOUT would wake at once, and the loop would spin */
		if (gs <= g1 &&
		    sent < sendable(gs, gr, g0, chunk_len(bytes, r->n, mod(r->rank - gs, r->n)), got))
			p[0].events = POLLOUT;
		else
			p[0].events = 0;
		p[1].events = gr <= g1 ? POLLIN : 0;
		int nfd = 0;
		if (r->spin) {
			/* up to 1 ms of polling, as ftcc's engine when ranks fit the cores */
			double end = bench_now() + 1e-3;
			while ((nfd = poll(p, 2, 0)) == 0 && bench_now() < end)
				;
		}
		if (nfd == 0 && poll(p, 2, -1) < 0 && errno != EINTR)
			die(r, "poll");
	}
}

/* A token twice around the ring: every rank is here. */
static void barrier(struct ring *r)
{
	char b = 0;
	int one = 1;

	if (r->lowat != 1 && setsockopt(r->left, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one)) == 0)
		r->lowat = 1;

	for (int round = 0; round < 2; round++) {
		struct pollfd p = {r->left, POLLIN, 0};
		if (r->rank != 0) {
			while (poll(&p, 1, -1) < 0 && errno == EINTR)
				;
			if (recv(r->left, &b, 1, MSG_WAITALL) != 1)
				die(r, "barrier");
		}
		while (send(r->right, &b, 1, MSG_NOSIGNAL) != 1)
			if (errno != EAGAIN)
				die(r, "barrier");
		if (r->rank == 0) {
			while (poll(&p, 1, -1) < 0 && errno == EINTR)
				;
			if (recv(r->left, &b, 1, MSG_WAITALL) != 1)
				die(r, "barrier");
		}
	}
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	struct ring r = {.lowat = 1};
	const char *env_rank = getenv("FTCC_RANK"), *dir = getenv("FTCC_RENDEZVOUS");
	int rc = bench_parse_args(argc, argv, &o, env_rank == NULL || strcmp(env_rank, "0") == 0);

	if (rc != 0)
		return rc > 0 ? 0 : 2;
	if (o.check) {
		fprintf(stderr, "tcp_ring: moves bytes, reduces nothing: no --check\n");
		return 2;
	}
	if (o.coll == BENCH_BROADCAST) {
		fprintf(stderr, "tcp_ring: no broadcast\n");
		return 2;
	}
	r.rank = env_int("FTCC_RANK");
	r.n = env_int("FTCC_WORLD_SIZE");
	if (dir == NULL || *dir == '\0' || r.n < 2 || r.rank < 0 || r.rank >= r.n) {
		fprintf(stderr, "tcp_ring: needs FTCC_RENDEZVOUS and 2 or more ranks (ftcc-run)\n");
		return 2;
	}
	r.spin = r.n <= sysconf(_SC_NPROCESSORS_ONLN);
	connect_ring(&r, dir);
	if (r.rank == 0)
		bench_print_header(stdout, o.label != NULL ? o.label : "tcp-ring", "tcp", r.n, &o);
	for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
		size_t es = bench_dtype_size(o.dtype), count = bytes / es;
		int g0 = o.coll == BENCH_ALLGATHER ? r.n - 1 : 0;
		int g1 = o.coll == BENCH_REDUCE_SCATTER ? r.n - 2 : 2 * r.n - 3;
		int iters = bench_iters_for(&o, bytes), warmup = bench_warmup_for(&o, iters);
		double *times = calloc((size_t)iters, sizeof(double));
		struct bench_result res;
		char *buf;

		if (o.coll != BENCH_ALLREDUCE)
			count = bench_block(count, r.n) * (size_t)r.n;
		bytes = count * es;
		buf = bench_alloc(bytes > 0 ? bytes : 1);
		if (buf == NULL || times == NULL) {
			fprintf(stderr, "tcp_ring: out of memory\n");
			return 1;
		}
		memset(buf, 0, bytes);
		for (int i = 0; i < warmup; i++)
			run_steps(&r, buf, bytes, g0, g1);
		barrier(&r);
		for (int i = 0; i < iters; i++) {
			double t0 = bench_now();
			run_steps(&r, buf, bytes, g0, g1);
			times[i] = bench_now() - t0;
		}
		bench_summarize(times, iters, bytes, count, r.n, o.coll, &res);
		if (r.rank == 0) {
			bench_print_row(stdout, &res, 0);
			if (o.csv != NULL && bench_csv_append(o.csv, o.label != NULL ? o.label : "tcp-ring",
							      "tcp", r.n, &res) != 0) {
				fprintf(stderr, "tcp_ring: cannot append to %s\n", o.csv);
				return 1;
			}
		}
		free(times);
		free(buf);
		if (bytes == 0 || bytes > SIZE_MAX / 2)
			break;
	}
	barrier(&r);
	return 0;
}
