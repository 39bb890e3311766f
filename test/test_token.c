/* test_token.c: a job started without a token: one made and shared where the job has a private channel, refused where not. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <sys/stat.h>

#include "ctl.h"
#include "internal.h"
#include "testutil.h"

static const char *auth_setting; /* cfg.auth for the ranks */

/* What mpirun or a hand-made start gives: no token at all. */
static void no_token(struct ft_config *cfg, int rank)
{
	(void)rank;
	cfg->token[0] = '\0';
	cfg->policy = FT_POLICY_SHRINK;
	snprintf(cfg->auth, sizeof(cfg->auth), "%s", auth_setting != NULL ? auth_setting : "");
}

/* Allreduces rank sums until <dir>/stop exists; 0 when every one was
 * exact over all n ranks (none of them excluded on the way). */
static int sum_until_stopped(struct ft_comm *comm, int rank, int n, void *arg)
{
	char path[400];

	snprintf(path, sizeof(path), "%s/stop", (const char *)arg);
	for (int i = 0; i < 100000; i++) {
		int32_t v = rank + 1, stop = access(path, F_OK) == 0;
		int rc = ft_allreduce(comm, FT_IN_PLACE, &v, 1, FT_INT32, FT_SUM, NULL);
		if (rc == 0)
			rc = ft_allreduce(comm, FT_IN_PLACE, &stop, 1, FT_INT32, FT_MAX, NULL);
		if (rc != 0) {
			fprintf(stderr, "rank %d op %d: %s\n", rank, i, ft_strerror(rc));
			return 2;
		}
		if (ft_size(comm) != n || v != n * (n + 1) / 2) {
			fprintf(stderr, "rank %d op %d: size %d sum %d\n", rank, i, ft_size(comm), v);
			return 3;
		}
		if (stop)
			return 0;
		if (i == 0) {
			snprintf(path, sizeof(path), "%s/running-%d", (const char *)arg, rank);
			close(open(path, O_CREAT | O_WRONLY, 0600));
			snprintf(path, sizeof(path), "%s/stop", (const char *)arg);
		}
		tu_sleep_ms(2);
	}
	return 4;
}

/* Rank r's control address, from the rendezvous (generation 0). */
static void ctrl_of(const struct tu_job *job, int r, char *out, size_t cap)
{
	char path[400], addr[256], pid[32], host[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/gen-0/member-%d", job->dir, job->job_id, r);
	f = fopen(path, "r");
	cr_assert_not_null(f, "no member file %s", path);
	cr_assert_eq(fscanf(f, "%255s %31s %255s %255s", addr, pid, host, out), 4);
	(void)cap;
	fclose(f);
}

/*
 * The review's attack on a job started with no token: a control hello
 * sealed with the empty token, claiming rank 2, and a notice naming ranks
 * 1 and 2 failed, sent to rank 0's detector. It once excluded both healthy
 * ranks; with a token made for the job, the hello is refused and the job
 * runs on at full size.
 */
Test(token, made_for_a_job_given_none, .timeout = 120)
{
	struct tu_job job;
	struct ft__ctl forger;
	struct ft__ctl_params cp = {.rank = 2, .world_size = 3, .token = "",
				    .bind_host = "127.0.0.1"};
	const int32_t victims[2] = {1, 2};
	char ctrl[256], path[400];
	struct stat st;
	int link;

	tu_job_init(&job, 3);
	if (job.peers[0] != '\0')
		cr_skip_test("SKIPPED: the file rendezvous is this test's channel (not in-band)");
	for (int r = 0; r < 3; r++)
		tu_spawn(&job, r, sum_until_stopped, job.dir, no_token);
	for (int r = 0; r < 3; r++) {
		snprintf(path, sizeof(path), "%s/running-%d", job.dir, r);
		cr_assert(tu_wait_file(path, tu_now_ms() + 30000), "rank %d never ran", r);
	}
	snprintf(path, sizeof(path), "%s/%s/token", job.dir, job.job_id);
	cr_assert_eq(stat(path, &st), 0, "no token file was made");
	cr_expect_eq(st.st_mode & 0777, 0600, "the token file is mode %o", st.st_mode & 0777);
	cp.job_id = job.job_id;
	cr_assert_eq(ft__ctl_open(&forger, &cp), 0);
	ctrl_of(&job, 0, ctrl, sizeof(ctrl));
	link = ft__ctl_connect(&forger, ctrl, 0, 0, 5000);
	if (link >= 0)
		(void)ft__ctl_send(&forger, link, FT__CTL_NOTICE, 0, victims, sizeof(victims));
	tu_sleep_ms(1500);
	ft__ctl_close(&forger);
	snprintf(path, sizeof(path), "%s/stop", job.dir);
	close(open(path, O_CREAT | O_WRONLY, 0600));
	cr_expect_eq(tu_wait(&job, 60000, NULL), 0, "a rank failed or was excluded");
	tu_job_cleanup(&job);
}

/* A token in a rendezvous others may write could be replaced: refused. */
Test(token, not_made_in_a_shared_rendezvous, .timeout = 60)
{
	struct tu_job job;
	int bad;

	tu_job_init(&job, 2);
	if (job.peers[0] != '\0')
		cr_skip_test("SKIPPED: the file rendezvous is this test's subject (not in-band)");
	cr_assert_eq(chmod(job.dir, 0777), 0);
	for (int r = 0; r < 2; r++)
		tu_spawn(&job, r, sum_until_stopped, job.dir, no_token);
	bad = tu_wait(&job, 30000, NULL);
	cr_expect_eq(bad, 2, "a rank started with a token in a world-writable rendezvous");
	for (int r = 0; r < 2; r++)
		cr_expect(WIFEXITED(job.status[r]) && WEXITSTATUS(job.status[r]) == 100,
			  "rank %d: ft_init was to fail", r);
	tu_job_cleanup(&job);
}

/* A hand-written peer list has no private channel: no token, no start,
 * unless FTCC_AUTH=none (cfg.auth "none") says so. */
static int one_sum(struct ft_comm *comm, int rank, int n, void *arg)
{
	int32_t v = rank + 1;

	(void)arg;
	return ft_allreduce(comm, FT_IN_PLACE, &v, 1, FT_INT32, FT_SUM, NULL) == 0 &&
			       v == n * (n + 1) / 2
		       ? 0
		       : 2;
}

Test(token, peer_list_needs_one, .timeout = 60)
{
	struct ft_config cfg = FT_CONFIG_INIT;
	struct ft_comm *c = NULL;
	struct tu_job job;

	/* refused at once, before any port is used */
	cfg.rank = 0;
	cfg.world_size = 2;
	snprintf(cfg.job_id, sizeof(cfg.job_id), "peers-no-token");
	snprintf(cfg.membership, sizeof(cfg.membership), "inband");
	snprintf(cfg.peers, sizeof(cfg.peers), "127.0.0.1:1,127.0.0.1:2");
	cfg.connect_timeout_ms = 20000;
	cfg.log_level = -1;
	long t0 = tu_now_ms();
	cr_expect_eq(ft_init(&cfg, &c), -FT_ECONFIG);
	cr_expect_lt(tu_now_ms() - t0, 5000, "refused only after a timeout");

	/* opted out: runs, unauthenticated */
	setenv("FTCC_TEST_MEMBERSHIP", "inband", 1);
	tu_job_init(&job, 2);
	unsetenv("FTCC_TEST_MEMBERSHIP");
	auth_setting = "none";
	for (int r = 0; r < 2; r++)
		tu_spawn(&job, r, one_sum, NULL, no_token);
	cr_expect_eq(tu_wait(&job, 30000, NULL), 0, "FTCC_AUTH=none did not run");
	auth_setting = NULL;
	tu_job_cleanup(&job);
}
