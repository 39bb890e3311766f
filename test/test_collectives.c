/* test_collectives.c: broadcast, barrier, disagreeing ranks, bad arguments, lifetime and hostile peers, over real processes. */
/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "transport.h"
#include "testutil.h"

#define DEADLINE_MS 60000

static int run_broadcast(struct ft_comm *comm, int rank, int n, void *arg)
{
	static const size_t sizes[] = {0, 1, 4095, 100003, (3u << 20) + 1};
	(void)arg;
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		size_t bytes = sizes[si];
		unsigned char *buf = malloc(bytes + 8);
		for (int root = 0; root < n; root++) {
			for (size_t i = 0; i < bytes + 8; i++)
				buf[i] = rank == root || i >= bytes ? (unsigned char)(i * 31 + (size_t)root) : 0;
			struct ft_op_info info;
			int rc = ft_broadcast(comm, buf, bytes, root, &info);
			if (rc != 0) {
				fprintf(stderr, "rank %d: broadcast %zu from %d: %s\n", rank, bytes, root,
					ft_strerror(rc));
				return 1;
			}
			for (size_t i = 0; i < bytes + 8; i++)
				if (buf[i] != (unsigned char)(i * 31 + (size_t)root)) {
					fprintf(stderr, "rank %d: broadcast %zu from %d: byte %zu wrong\n",
						rank, bytes, root, i);
					return 2;
				}
		}
		free(buf);
	}
	return 0;
}

Test(broadcast, every_root_and_size, .timeout = 120)
{
	for (int n = 1; n <= 5; n += (n < 3 ? 1 : 2))
		cr_assert_eq(tu_run(n, DEADLINE_MS, run_broadcast, NULL), 0, "n=%d", n);
}

/* Each rank leaves a file, staggered, then passes a barrier: after it every file must exist. */
static int run_barrier(struct ft_comm *comm, int rank, int n, void *arg)
{
	const char *dir = arg;
	char path[512];

	for (int round = 0; round < 3; round++) {
		tu_sleep_ms(((rank * 37 + round * 11) % 5) * 20);
		snprintf(path, sizeof(path), "%s/r%d-%d", dir, rank, round);
		close(open(path, O_CREAT | O_WRONLY, 0600));
		if (ft_barrier(comm) != 0)
			return 1;
		for (int r = 0; r < n; r++) {
			snprintf(path, sizeof(path), "%s/r%d-%d", dir, r, round);
			if (access(path, F_OK) != 0) {
				fprintf(stderr, "rank %d passed the barrier before rank %d reached it\n",
					rank, r);
				return 2;
			}
		}
	}
	return 0;
}

Test(barrier, nobody_leaves_early, .timeout = 60)
{
	char dir[] = "/tmp/ftcc-barrier-XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(tu_run(4, DEADLINE_MS, run_barrier, dir), 0);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

/*
 * One rank calls with different arguments: every rank must get an error
 * (no hang, no corruption), and the next, agreeing collective must work.
 */
enum disagreement { D_COUNT, D_DTYPE, D_OP, D_KIND, D_ROOT, D_NULL_ONE, D_COUNT_ZERO,
		   D_RS_VS_ALLREDUCE, D_RS_VS_ALLGATHER, D_RS_COUNT, D_AG_COUNT, D_RS_DTYPE,
		   D_AG_DTYPE, D_RS_OP, D_RS_NULL_ONE };

static int run_disagree(struct ft_comm *comm, int rank, int n, void *arg)
{
	enum disagreement d = *(enum disagreement *)arg;
	const int odd = 1;
	size_t count = 1000, bc = 200; /* bc: blocks' elements (n <= 5: 1000 in all) */
	float buf[2000], out[2000];
	int rc;

	for (int i = 0; i < 2000; i++)
		buf[i] = (float)rank;
	switch (d) {
	case D_COUNT:
		rc = ft_allreduce(comm, buf, out, rank == odd ? count + 1 : count, FT_FLOAT32, FT_SUM, NULL);
		break;
	case D_COUNT_ZERO:
		rc = ft_allreduce(comm, buf, out, rank == odd ? 0 : count, FT_FLOAT32, FT_SUM, NULL);
		break;
	case D_DTYPE:
		rc = ft_allreduce(comm, buf, out, count, rank == odd ? FT_INT32 : FT_FLOAT32, FT_SUM, NULL);
		break;
	case D_OP:
		rc = ft_allreduce(comm, buf, out, count, FT_FLOAT32, rank == odd ? FT_MAX : FT_SUM, NULL);
		break;
	case D_KIND:
		rc = rank == odd ? ft_barrier(comm)
				 : ft_allreduce(comm, buf, out, count, FT_FLOAT32, FT_SUM, NULL);
		break;
	case D_ROOT:
		rc = ft_broadcast(comm, buf, sizeof(buf), rank == odd ? 1 : 0, NULL);
		break;
	case D_NULL_ONE:
		rc = ft_allreduce(comm, buf, rank == odd ? NULL : out, count, FT_FLOAT32, FT_SUM, NULL);
		if (rank == odd && rc != -FT_EINVAL) {
			fprintf(stderr, "rank %d: NULL buffer gave %s\n", rank, ft_err_name(rc));
			return 1;
		}
		if (rank == odd)
			rc = -FT_EMISMATCH;
		break;
	case D_RS_VS_ALLREDUCE:
		rc = rank == odd ? ft_allreduce(comm, buf, out, bc * (size_t)n, FT_FLOAT32, FT_SUM, NULL)
				 : ft_reduce_scatter(comm, buf, out, bc, FT_FLOAT32, FT_SUM, NULL);
		break;
	case D_RS_VS_ALLGATHER:
		rc = rank == odd ? ft_allgather(comm, buf, out, bc, FT_FLOAT32, NULL)
				 : ft_reduce_scatter(comm, buf, out, bc, FT_FLOAT32, FT_SUM, NULL);
		break;
	case D_RS_COUNT:
		rc = ft_reduce_scatter(comm, buf, out, rank == odd ? bc - 1 : bc, FT_FLOAT32, FT_SUM, NULL);
		break;
	case D_AG_COUNT:
		rc = ft_allgather(comm, buf, out, rank == odd ? 0 : bc, FT_FLOAT32, NULL);
		break;
	case D_RS_DTYPE:
		rc = ft_reduce_scatter(comm, buf, out, bc, rank == odd ? FT_INT32 : FT_FLOAT32, FT_SUM,
				       NULL);
		break;
	case D_AG_DTYPE:
		rc = ft_allgather(comm, FT_IN_PLACE, out, bc, rank == odd ? FT_INT32 : FT_FLOAT32, NULL);
		break;
	case D_RS_OP:
		rc = ft_reduce_scatter(comm, FT_IN_PLACE, buf, bc, FT_FLOAT32, rank == odd ? FT_MIN : FT_SUM,
				       NULL);
		break;
	case D_RS_NULL_ONE:
		rc = ft_reduce_scatter(comm, rank == odd ? NULL : buf, out, bc, FT_FLOAT32, FT_SUM, NULL);
		if (rank == odd && rc != -FT_EINVAL) {
			fprintf(stderr, "rank %d: NULL buffer gave %s\n", rank, ft_err_name(rc));
			return 1;
		}
		if (rank == odd)
			rc = -FT_EMISMATCH;
		break;
	default:
		return 9;
	}
	if (rc != -FT_EMISMATCH) {
		fprintf(stderr, "rank %d: disagreement %d gave %s, want FT_EMISMATCH\n", rank, d,
			ft_err_name(rc));
		return 3;
	}
	/* The communicator is still good. */
	for (int i = 0; i < 2000; i++)
		buf[i] = (float)rank;
	rc = ft_allreduce(comm, buf, out, count, FT_FLOAT32, FT_SUM, NULL);
	if (rc != 0) {
		fprintf(stderr, "rank %d: allreduce after the disagreement: %s\n", rank, ft_strerror(rc));
		return 4;
	}
	for (size_t i = 0; i < count; i++)
		if (out[i] != (float)(n * (n - 1) / 2))
			return 5;
	/* and so is the block layout */
	rc = ft_reduce_scatter(comm, buf, out, bc, FT_FLOAT32, FT_SUM, NULL);
	if (rc != 0) {
		fprintf(stderr, "rank %d: reduce-scatter after the disagreement: %s\n", rank,
			ft_strerror(rc));
		return 6;
	}
	for (size_t i = 0; i < bc; i++)
		if (out[i] != (float)(n * (n - 1) / 2))
			return 7;
	return 0;
}

static void disagree(enum disagreement d)
{
	for (int n = 2; n <= 5; n += 3)
		cr_assert_eq(tu_run(n, 30000, run_disagree, &d), 0, "disagreement %d, n=%d", d, n);
}

Test(mismatch, count, .timeout = 60) { disagree(D_COUNT); }
Test(mismatch, count_zero, .timeout = 60) { disagree(D_COUNT_ZERO); }
Test(mismatch, dtype, .timeout = 60) { disagree(D_DTYPE); }
Test(mismatch, op, .timeout = 60) { disagree(D_OP); }
Test(mismatch, barrier_vs_allreduce, .timeout = 60) { disagree(D_KIND); }
Test(mismatch, broadcast_root, .timeout = 60) { disagree(D_ROOT); }
Test(mismatch, null_buffer_on_one_rank, .timeout = 60) { disagree(D_NULL_ONE); }
Test(mismatch, reduce_scatter_vs_allreduce, .timeout = 60) { disagree(D_RS_VS_ALLREDUCE); }
Test(mismatch, reduce_scatter_vs_allgather, .timeout = 60) { disagree(D_RS_VS_ALLGATHER); }
Test(mismatch, reduce_scatter_count, .timeout = 60) { disagree(D_RS_COUNT); }
Test(mismatch, allgather_count_zero, .timeout = 60) { disagree(D_AG_COUNT); }
Test(mismatch, reduce_scatter_dtype, .timeout = 60) { disagree(D_RS_DTYPE); }
Test(mismatch, allgather_dtype, .timeout = 60) { disagree(D_AG_DTYPE); }
Test(mismatch, reduce_scatter_op, .timeout = 60) { disagree(D_RS_OP); }
Test(mismatch, reduce_scatter_null_buffer_on_one_rank, .timeout = 60) { disagree(D_RS_NULL_ONE); }

static int run_bad_args(struct ft_comm *comm, int rank, int n, void *arg)
{
	float buf[16] = {0};
	(void)arg;
	(void)n;
#define EXPECT(call, code)                                                                 \
	do {                                                                               \
		int rc_ = (call);                                                          \
		if (rc_ != (code)) {                                                       \
			fprintf(stderr, "rank %d: %s gave %s\n", rank, #call, ft_err_name(rc_)); \
			return 1;                                                          \
		}                                                                          \
	} while (0)
	EXPECT(ft_allreduce(comm, NULL, buf, 16, FT_FLOAT32, FT_SUM, NULL), -FT_EINVAL);
	EXPECT(ft_allreduce(comm, buf, NULL, 16, FT_FLOAT32, FT_SUM, NULL), -FT_EINVAL);
	EXPECT(ft_allreduce(comm, buf, buf, 16, (enum ft_dtype)99, FT_SUM, NULL), -FT_EINVAL);
	EXPECT(ft_allreduce(comm, buf, buf, 16, FT_FLOAT32, (enum ft_op)-1, NULL), -FT_EINVAL);
	EXPECT(ft_allreduce(comm, buf, buf, SIZE_MAX / 2, FT_FLOAT32, FT_SUM, NULL), -FT_EINVAL);
	EXPECT(ft_reduce_scatter(comm, NULL, buf, 4, FT_FLOAT32, FT_SUM, NULL), -FT_EINVAL);
	EXPECT(ft_reduce_scatter(comm, buf, NULL, 4, FT_FLOAT32, FT_SUM, NULL), -FT_EINVAL);
	EXPECT(ft_reduce_scatter(comm, buf, buf, 4, (enum ft_dtype)99, FT_SUM, NULL), -FT_EINVAL);
	EXPECT(ft_reduce_scatter(comm, buf, buf, 4, FT_FLOAT32, FT_OP_COUNT, NULL), -FT_EINVAL);
	/* n blocks of it overflow, though one does not */
	EXPECT(ft_reduce_scatter(comm, FT_IN_PLACE, buf, SIZE_MAX / 8 / 2, FT_FLOAT64, FT_SUM, NULL),
	       -FT_EINVAL);
	EXPECT(ft_allgather(comm, NULL, buf, 4, FT_FLOAT32, NULL), -FT_EINVAL);
	EXPECT(ft_allgather(comm, buf, NULL, 4, FT_FLOAT32, NULL), -FT_EINVAL);
	EXPECT(ft_allgather(comm, buf, buf, 4, (enum ft_dtype)-1, NULL), -FT_EINVAL);
	EXPECT(ft_allgather(comm, FT_IN_PLACE, buf, SIZE_MAX / 8 / 2, FT_FLOAT64, NULL), -FT_EINVAL);
	EXPECT(ft_reduce_scatter(NULL, buf, buf, 4, FT_FLOAT32, FT_SUM, NULL), -FT_EINVAL);
	EXPECT(ft_allgather(NULL, buf, buf, 4, FT_FLOAT32, NULL), -FT_EINVAL);
	EXPECT(ft_broadcast(comm, NULL, 16, 0, NULL), -FT_EINVAL);
	EXPECT(ft_broadcast(comm, buf, 16, n, NULL), -FT_EINVAL);
	EXPECT(ft_broadcast(comm, buf, 16, -1, NULL), -FT_EINVAL);
	EXPECT(ft_orig_rank(comm, n), -FT_EINVAL);
	EXPECT(ft_allreduce(NULL, buf, buf, 16, FT_FLOAT32, FT_SUM, NULL), -FT_EINVAL);
	EXPECT(ft_barrier(NULL), -FT_EINVAL);
	/* Zero elements need no buffers. */
	EXPECT(ft_allreduce(comm, NULL, NULL, 0, FT_FLOAT32, FT_SUM, NULL), 0);
	EXPECT(ft_reduce_scatter(comm, NULL, NULL, 0, FT_FLOAT32, FT_AVG, NULL), 0);
	EXPECT(ft_allgather(comm, NULL, NULL, 0, FT_FLOAT32, NULL), 0);
	EXPECT(ft_allreduce(comm, buf, buf, 16, FT_FLOAT32, FT_SUM, NULL), 0);
	for (int i = 0; i < 16; i++)
		if (buf[i] != 0)
			return 2;
	EXPECT(ft_finalize(comm), 0);
	EXPECT(ft_allreduce(comm, buf, buf, 16, FT_FLOAT32, FT_SUM, NULL), -FT_EFINALIZED);
	EXPECT(ft_broadcast(comm, buf, 16, 0, NULL), -FT_EFINALIZED);
	EXPECT(ft_barrier(comm), -FT_EFINALIZED);
	EXPECT(ft_reduce_scatter(comm, buf, buf, 4, FT_FLOAT32, FT_SUM, NULL), -FT_EFINALIZED);
	EXPECT(ft_allgather(comm, buf, buf, 4, FT_FLOAT32, NULL), -FT_EFINALIZED);
	EXPECT(ft_size(comm), -FT_EFINALIZED);
	EXPECT(ft_rank(comm), -FT_EFINALIZED);
	EXPECT(ft_finalize(comm), -FT_EFINALIZED);
	return 0;
}

Test(bad_input, arguments_and_finalized, .timeout = 60)
{
	cr_assert_eq(tu_run(3, 30000, run_bad_args, NULL), 0);
}

static int run_info(struct ft_comm *comm, int rank, int n, void *arg)
{
	int v = rank, sum;
	struct ft_op_info info;
	(void)arg;
	for (uint64_t i = 0; i < 5; i++) {
		if (ft_allreduce(comm, &v, &sum, 1, FT_INT32, FT_SUM, &info) != 0)
			return 1;
		/* ft_init runs one barrier, which is collective 0 */
		if (info.op_seq != i + 1 || info.contributors != n || info.failed != 0 ||
		    info.generation != 0 || sum != n * (n - 1) / 2)
			return 2;
	}
	if (ft_size(comm) != n || ft_rank(comm) != rank || ft_orig_rank(comm, rank) != rank ||
	    ft_generation(comm) != 0)
		return 3;
	return 0;
}

Test(comm, op_info_and_ranks, .timeout = 60)
{
	cr_assert_eq(tu_run(3, 30000, run_info, NULL), 0);
}

/* A second ft_init of a live rank on the same rendezvous is refused. */
static int run_second_init(struct ft_comm *comm, int rank, int n, void *arg)
{
	struct tu_job *job = arg;
	struct ft_config cfg;
	struct ft_comm *again = NULL;
	int rc;
	(void)comm;
	(void)n;
	tu_config(job, rank, &cfg);
	rc = ft_init(&cfg, &again);
	if (rc != -FT_EBUSY || again != NULL) {
		fprintf(stderr, "second ft_init gave %s\n", ft_err_name(rc));
		return 1;
	}
	return ft_barrier(comm) == 0 ? 0 : 2;
}

Test(comm, second_init_same_rank_is_busy, .timeout = 60)
{
	struct tu_job job;
	tu_job_init(&job, 2);
	for (int r = 0; r < 2; r++)
		tu_spawn(&job, r, run_second_init, &job, NULL);
	cr_assert_eq(tu_wait(&job, 30000, NULL), 0);
	tu_job_cleanup(&job);
}

static int run_sum_check(struct ft_comm *comm, int rank, int n, void *arg)
{
	int v = rank + 1, sum = 0;
	(void)arg;
	if (ft_allreduce(comm, &v, &sum, 1, FT_INT32, FT_SUM, NULL) != 0)
		return 1;
	return sum == n * (n + 1) / 2 ? 0 : 2;
}

/* Reads rank r's published address from the rendezvous, waiting for it. */
static int member_addr(const struct tu_job *job, int r, struct sockaddr_in *sa)
{
	char path[512], buf[512];
	long end = tu_now_ms() + 10000;

	snprintf(path, sizeof(path), "%s/%s/gen-0/member-%d", job->dir, job->job_id, r);
	while (tu_now_ms() < end) {
		FILE *f = fopen(path, "r");
		if (f != NULL) {
			char host[64];
			int port;
			int ok = fgets(buf, sizeof(buf), f) != NULL &&
				 sscanf(buf, "%63[^:]:%d", host, &port) == 2;
			fclose(f);
			if (ok) {
				memset(sa, 0, sizeof(*sa));
				sa->sin_family = AF_INET;
				sa->sin_port = htons((uint16_t)port);
				inet_pton(AF_INET, host, &sa->sin_addr);
				return 0;
			}
		}
		tu_sleep_ms(5);
	}
	return -1;
}

static int dial(const struct sockaddr_in *sa)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) != 0)
		return -1;
	return fd;
}

/*
 * Hostile connections reach rank 1's listening port before its left
 * neighbour does: garbage, a handshake with the wrong token, one for another
 * job, a stalled partial handshake. Each is refused; the ring still forms.
 */
Test(hostile, stray_connections_are_refused, .timeout = 60)
{
	struct tu_job job;
	struct sockaddr_in sa;
	struct ft__hello h;
	int fds[4];
	const char *tp = getenv("FTCC_TEST_TRANSPORT");

	if (tp != NULL && strcmp(tp, "tcp") != 0)
		cr_skip_test("dials the tcp transport's listening socket; transport is %s", tp);

	tu_job_init(&job, 3);
	tu_spawn(&job, 1, run_sum_check, NULL, NULL);
	cr_assert_eq(member_addr(&job, 1, &sa), 0);
	for (int i = 0; i < 4; i++)
		cr_assert_geq(fds[i] = dial(&sa), 0);
	cr_assert_eq(write(fds[0], "GET / HTTP/1.0\r\n\r\n", 18), 18);
	char junk[600];
	memset(junk, 0x5a, sizeof(junk));
	cr_assert_eq(write(fds[0], junk, sizeof(junk)), (ssize_t)sizeof(junk));
	memset(&h, 0, sizeof(h));
	h.magic = FT__HELLO_MAGIC;
	h.version = FT__PROTO_VERSION;
	h.kind = FT__LINK_DATA;
	h.from_rank = 0;
	h.to_rank = 1;
	snprintf(h.job_id, sizeof(h.job_id), "%s", job.job_id);
	cr_assert_eq(ft__hello_seal(&h, "wrong-token"), 0);
	cr_assert_eq(write(fds[1], &h, sizeof(h)), (ssize_t)sizeof(h));
	snprintf(h.job_id, sizeof(h.job_id), "another-job");
	cr_assert_eq(ft__hello_seal(&h, "test-token"), 0);
	cr_assert_eq(write(fds[2], &h, sizeof(h)), (ssize_t)sizeof(h));
	cr_assert_eq(write(fds[3], &h, 10), 10);
	tu_spawn(&job, 0, run_sum_check, NULL, NULL);
	tu_spawn(&job, 2, run_sum_check, NULL, NULL);
	cr_assert_eq(tu_wait(&job, 30000, NULL), 0);
	/* The refused handshakes got an answer saying why. */
	struct ft__hello_ack ack;
	cr_assert_eq(read(fds[1], &ack, sizeof(ack)), (ssize_t)sizeof(ack));
	cr_assert_eq(ack.status, -FT_EAUTH);
	for (int i = 0; i < 4; i++)
		close(fds[i]);
	tu_job_cleanup(&job);
}

static void wrong_token(struct ft_config *cfg, int rank)
{
	if (rank == 2)
		snprintf(cfg->token, sizeof(cfg->token), "not-the-token");
	cfg->connect_timeout_ms = 1500;
}

/* A rank with the wrong token cannot join: ft_init fails everywhere, no hang. */
Test(hostile, wrong_token_fails_init_everywhere, .timeout = 60)
{
	struct tu_job job;
	tu_job_init(&job, 3);
	for (int r = 0; r < 3; r++)
		tu_spawn(&job, r, run_sum_check, NULL, wrong_token);
	tu_wait(&job, 20000, NULL);
	for (int r = 0; r < 3; r++) {
		cr_assert(job.status[r] != -1, "rank %d hung", r);
		cr_assert(WIFEXITED(job.status[r]) && WEXITSTATUS(job.status[r]) == 100,
			  "rank %d: ft_init should have failed", r);
	}
	tu_job_cleanup(&job);
}

/* Abort policy: a rank killed from outside mid-allreduce; every survivor gets FT_EPEERFAILED. */
static int run_until_failure(struct ft_comm *comm, int rank, int n, void *arg)
{
	size_t count = 1 << 18;
	float *buf = malloc(count * sizeof(float));
	(void)n;
	(void)arg;
	for (int it = 0; it < 1000000; it++) {
		for (size_t i = 0; i < count; i++)
			buf[i] = 1;
		int rc = ft_allreduce(comm, FT_IN_PLACE, buf, count, FT_FLOAT32, FT_SUM, NULL);
		if (rc == -FT_EPEERFAILED) {
			/* The failure is sticky under the abort policy. */
			if (ft_barrier(comm) != -FT_EPEERFAILED)
				return 3;
			return 0;
		}
		if (rc != 0) {
			fprintf(stderr, "rank %d: %s\n", rank, ft_err_name(rc));
			return 1;
		}
	}
	return 2;
}

Test(abort_policy, killed_rank_fails_every_survivor, .timeout = 120)
{
	srand((unsigned)getpid());
	for (int trial = 0; trial < 6; trial++) {
		struct tu_job job;
		int n = 3 + trial % 3, victim = rand() % n, killed[64] = {0};
		tu_job_init(&job, n);
		for (int r = 0; r < n; r++)
			tu_spawn(&job, r, run_until_failure, NULL, NULL);
		/* Kill mid-collective, not mid-ft_init (whose cost depends on the transport). */
		cr_assert_eq(tu_wait_ready(&job, 10000), 0, "trial %d: ranks not ready", trial);
		tu_sleep_ms(300 + rand() % 400);
		kill(job.pids[victim], SIGKILL);
		killed[victim] = 1;
		cr_assert_eq(tu_wait(&job, 15000, killed), 0, "trial %d: n=%d victim %d", trial, n,
			     victim);
		tu_job_cleanup(&job);
	}
}
