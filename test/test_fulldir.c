/* test_fulldir.c: directories that fill up under a running job: the rendezvous full (blocks and inodes) at a failure, the survivors still settle and finish. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "testutil.h"

/*
 * The job's rendezvous is a small tmpfs of the test's own. Once every rank
 * runs its ops, the test fills it completely (a filler file written until
 * ENOSPC, then empty files until no inode is left) and kills one rank: the
 * survivors must settle the next view and finish every op exactly, within
 * a deadline, and say what is full without flooding their stderr. Each
 * rank's stderr goes to a file in a directory outside the tmpfs (out),
 * where it also writes its marks and its result.
 */
#define N 4
#define COUNT 1000
#define AFTER_OPS 20

static char out[256];
static int stop_size = N - 1; /* the ranks stop AFTER_OPS ops after the job is down to this */
static char log_dir[256];       /* "": the default; else rejoin, logs here */

static void mark(const char *name, int r)
{
	char path[400];

	snprintf(path, sizeof(path), "%s/%s-%d", out, name, r);
	close(open(path, O_CREAT | O_WRONLY, 0600));
}

static void to_log(struct ft_config *cfg, int r)
{
	char path[400];
	int fd;

	cfg->policy = FT_POLICY_SHRINK;
	if (log_dir[0] != '\0') {
		cfg->policy = FT_POLICY_REJOIN;
		cfg->rejoin_timeout_ms = 1000; /* none comes back: then as shrink */
		snprintf(cfg->log_dir, sizeof(cfg->log_dir), "%s", log_dir);
	}
	cfg->detect_timeout_ms = 3000;
	cfg->heartbeat_ms = 100;
	/* warnings: a flood of them shows (FTCC_TEST_LOG_LEVEL: more) */
	cfg->log_level = getenv("FTCC_TEST_LOG_LEVEL") ? atoi(getenv("FTCC_TEST_LOG_LEVEL")) : 1;
	snprintf(path, sizeof(path), "%s/stderr-%d", out, r);
	fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
	if (fd >= 0) {
		dup2(fd, 2);
		close(fd);
	}
}

/* Int64 sums of (orig + 1) * 1000 + i + j over the members after each op,
 * until AFTER_OPS ops after the job lost a rank. With logs, once the test
 * has filled their directory (<out>/full), the ops are twice as long: each
 * rank's next log needs room that is not there (a one-int MAX each op
 * tells every rank at the same op). (Ops of one length need
 * none: each op's log takes back the pages its slot's last op freed, and
 * which rank, if any, finds another's first is a race.) */
static int worker(struct ft_comm *comm, int r, int n, void *arg)
{
	int64_t buf[2 * COUNT];
	(void)n;
	int changed_at = -1, i, rc = 0, count = COUNT;
	char path[400];
	FILE *f;

	(void)arg;
	snprintf(path, sizeof(path), "%s/full", out);
	for (i = 0; i < 100000; i++) {
		if (ft_size(comm) <= stop_size && changed_at < 0)
			changed_at = i;
		if (changed_at >= 0 && i - changed_at >= AFTER_OPS)
			break;
		if (log_dir[0] != '\0' && count == COUNT) {
			/* every rank grows at the same op: one that saw the mark tells all */
			int32_t seen = access(path, F_OK) == 0;
			rc = ft_allreduce(comm, FT_IN_PLACE, &seen, 1, FT_INT32, FT_MAX, NULL);
			if (rc != 0) {
				fprintf(stderr, "rank %d op %d: %s (%s)\n", r, i, ft_strerror(rc),
					ft_err_name(rc));
				break;
			}
			if (seen) {
				count = 2 * COUNT;
				mark("grown", r);
			}
		}
		for (int j = 0; j < count; j++)
			buf[j] = (r + 1) * 1000 + i + j;
		rc = ft_allreduce(comm, FT_IN_PLACE, buf, count, FT_INT64, FT_SUM, NULL);
		if (rc != 0) {
			fprintf(stderr, "rank %d op %d: %s (%s)\n", r, i, ft_strerror(rc), ft_err_name(rc));
			break;
		}
		for (int j = 0; j < count && rc == 0; j++) {
			int64_t want = 0;
			for (int m = 0; m < ft_size(comm); m++)
				want += (ft_orig_rank(comm, m) + 1) * 1000 + i + j;
			if (buf[j] != want) {
				fprintf(stderr, "rank %d op %d: element %d is %lld, want %lld\n", r, i, j,
					(long long)buf[j], (long long)want);
				rc = -FT_EIO;
			}
		}
		if (rc != 0)
			break;
		if (i == 0)
			mark("running", r);
		if (ft_generation(comm) == 1)
			mark("gen1", r);
		usleep(2000);
	}
	snprintf(path, sizeof(path), "%s/result-%d", out, r);
	f = fopen(path, "w");
	if (f != NULL) {
		fprintf(f, "%d %u %d\n", ft_size(comm), ft_generation(comm), rc);
		fclose(f);
	}
	/* A rank that failed keeps its files until the test has seen every
	 * survivor's end (<out>/release): its finalize frees room, with which
	 * a survivor still trying would go on alone. */
	snprintf(path, sizeof(path), "%s/release", out);
	if (rc != 0 && !tu_wait_file(path, tu_now_ms() + 20000))
		fprintf(stderr, "rank %d: never released\n", r);
	return rc == 0 ? 0 : 1;
}

/* Fills dir: data until ENOSPC, then empty files until no inode is left.
 * Returns the number of files made. */
static int fill(const char *dir)
{
	static char block[64 << 10];
	char path[400];
	int fd, files = 0;

	snprintf(path, sizeof(path), "%s/filler", dir);
	fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
	cr_assert(fd >= 0, "filler: %s", strerror(errno));
	memset(block, 0x5a, sizeof(block));
	for (size_t len = sizeof(block); len > 0;) {
		if (write(fd, block, len) < 0) {
			cr_assert_eq(errno, ENOSPC, "filler: %s", strerror(errno));
			len /= 2; /* the last pages one by one */
		}
	}
	close(fd);
	for (;; files++) {
		snprintf(path, sizeof(path), "%s/inode-%d", dir, files);
		fd = open(path, O_CREAT | O_WRONLY | O_EXCL, 0600);
		if (fd < 0) {
			cr_assert_eq(errno, ENOSPC, "inodes: %s", strerror(errno));
			break;
		}
		close(fd);
	}
	/* and both are gone: no name, no byte */
	snprintf(path, sizeof(path), "%s/probe", dir);
	cr_assert(mkdir(path, 0700) != 0 && errno == ENOSPC, "the tmpfs is not full");
	return files;
}

/* Lines in file path, and the most times one line occurs (*same). */
static int lines_of(const char *path, int *same)
{
	char line[1100], prev[1100] = "";
	int n = 0, run = 0;
	FILE *f = fopen(path, "r");

	*same = 0;
	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f) != NULL) {
		n++;
		run = strcmp(line, prev) == 0 ? run + 1 : 1;
		if (run > *same)
			*same = run;
		snprintf(prev, sizeof(prev), "%s", line);
	}
	fclose(f);
	return n;
}

/* A job of N on a tmpfs of its own (its rendezvous, or with logs, its log
 * directory), running its ops; not full yet. */
struct full_job {
	char mnt[256];
	struct tu_job job;
};

static void full_start(struct full_job *f, const char *what, bool logs)
{
	snprintf(f->mnt, sizeof(f->mnt), "/tmp/ftcc-full-XXXXXX");
	cr_assert_not_null(mkdtemp(f->mnt));
	if (geteuid() != 0 ||
	    mount("ftcc-test", f->mnt, "tmpfs", 0, "size=1m,nr_inodes=200,mode=0700") < 0) {
		int e = geteuid() != 0 ? EPERM : errno;
		rmdir(f->mnt);
		fprintf(stderr, "SKIPPED: fulldir/%s: mount -t tmpfs: %s; a full rendezvous is "
			"made on a tmpfs of the test's own, which needs root\n", what, strerror(e));
		cr_skip_test("cannot mount a small tmpfs: %s", strerror(e));
	}
	snprintf(out, sizeof(out), "/tmp/ftcc-fullout-XXXXXX");
	cr_assert_not_null(mkdtemp(out));
	tu_job_init(&f->job, N);
	log_dir[0] = '\0';
	if (logs) {
		snprintf(log_dir, sizeof(log_dir), "%s", f->mnt);
	} else {
		rmdir(f->job.dir);
		snprintf(f->job.dir, sizeof(f->job.dir), "%s", f->mnt);
	}
	for (int r = 0; r < N; r++)
		tu_spawn(&f->job, r, worker, NULL, to_log);
	long end = tu_now_ms() + 30000;
	for (int r = 0; r < N; r++) {
		char path[400];
		snprintf(path, sizeof(path), "%s/running-%d", out, r);
		cr_assert(tu_wait_file(path, end), "%s: rank %d never ran its first op", what, r);
	}
}

static void full_end(struct full_job *f)
{
	char cmd[400];

	umount2(f->mnt, MNT_DETACH);
	rmdir(f->mnt);
	tu_job_cleanup(&f->job);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", out);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", out);
}

/* Every survivor's stderr: printed, no line more than 3 times in a row;
 * returns the number of lines of all. */
static int survivors_lines(const int *killed)
{
	int total = 0;

	for (int r = 0; r < N; r++) {
		char path[400], cmd[600];
		int same, n;
		if (killed[r])
			continue;
		snprintf(path, sizeof(path), "%s/stderr-%d", out, r);
		n = lines_of(path, &same);
		total += n;
		fprintf(stderr, "-- rank %d: %d lines, at most %d alike; the first ones:\n", r, n,
			same);
		snprintf(cmd, sizeof(cmd), "head -n ${FULLDIR_HEAD:-8} %s 1>&2", path);
		if (system(cmd) != 0)
			fprintf(stderr, "(head failed)\n");
		cr_expect_leq(same, 3, "rank %d: %d identical lines in a row", r, same);
	}
	return total;
}

/* Whether file path holds text. */
static bool holds(const char *path, const char *text)
{
	char line[1100];
	bool found = false;
	FILE *f = fopen(path, "r");

	while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
		found = strstr(line, text) != NULL;
	if (f != NULL)
		fclose(f);
	return found;
}

/* Survivor r's result file (in out) says it ended in generation 1 with the
 * N - 1 survivors, its last op returning 0. */
static void expect_survivor_result(int r)
{
	char path[400];
	int size = -1, rc = -1;
	unsigned gen = 0;
	FILE *fp;

	snprintf(path, sizeof(path), "%s/result-%d", out, r);
	fp = fopen(path, "r");
	cr_expect(fp != NULL && fscanf(fp, "%d %u %d", &size, &gen, &rc) == 3,
		  "no result from rank %d", r);
	if (fp != NULL)
		fclose(fp);
	cr_expect(size == N - 1 && gen == 1 && rc == 0,
		  "rank %d ends with size %d generation %u rc %d", r, size, gen, rc);
}

/*
 * The rendezvous fills (blocks and inodes) while the job runs, then rank 0,
 * the coordinator, is killed: the 3 survivors settle generation 1 from
 * their reserves and finish every op exactly, within seconds, in a few
 * lines of diagnostics (before: every survivor printed "cannot create
 * .../gen-1: No space left on device" some 12,000 times and none got a
 * view; the job hung to its deadline).
 */
Test(fulldir, rendezvous_full_at_a_failure, .timeout = 120)
{
	struct full_job f;
	int killed[N] = {[0] = 1}, bad, files, total;

	stop_size = N - 1;
	full_start(&f, "rendezvous_full_at_a_failure", false);
	files = fill(f.mnt);
	long t0 = tu_now_ms();
	kill(f.job.pids[0], SIGKILL);
	bad = tu_wait(&f.job, 25000, killed);
	long took = tu_now_ms() - t0;
	total = survivors_lines(killed);
	fprintf(stderr, "fulldir: %d files took the last inodes; the survivors ended %ld ms after "
		"the kill, with %d lines\n", files, took, total);
	cr_expect_eq(bad, 0, "%d survivors failed or hung after the rendezvous filled", bad);
	for (int r = 1; r < N; r++)
		expect_survivor_result(r);
	cr_expect_leq(total, 12, "%d lines of diagnostics from 3 survivors: a flood", total);
	full_end(&f);
}

/*
 * Full as above, and a second rank killed once the first recovery has
 * spent the reserves (no room to make them again): the two survivors
 * cannot publish, and each fails within a few seconds with FT_ENOSPC,
 * naming the full directory; not the connect timeout (20 s here), not
 * FT_ETIMEDOUT, not a peer's death.
 */
Test(fulldir, full_again_fails_each_rank_with_enospc, .timeout = 120)
{
	struct full_job f;
	int killed[N] = {[0] = 1, [1] = 1}, total;
	char release[400];

	stop_size = N - 2;
	full_start(&f, "full_again_fails_each_rank_with_enospc", false);
	fill(f.mnt);
	kill(f.job.pids[0], SIGKILL);
	long end = tu_now_ms() + 15000;
	for (int r = 1; r < N; r++) {
		char path[400];
		snprintf(path, sizeof(path), "%s/gen1-%d", out, r);
		cr_assert(tu_wait_file(path, end), "rank %d never reached generation 1", r);
	}
	long t0 = tu_now_ms();
	kill(f.job.pids[1], SIGKILL);
	end = t0 + 15000;
	for (int r = 2; r < N; r++) {
		char path[400];
		snprintf(path, sizeof(path), "%s/result-%d", out, r);
		cr_expect(tu_wait_file(path, end), "rank %d did not end its op", r);
	}
	long took = tu_now_ms() - t0;
	snprintf(release, sizeof(release), "%s/release", out);
	close(open(release, O_CREAT | O_WRONLY, 0600));
	(void)tu_wait(&f.job, 15000, killed);
	total = survivors_lines(killed);
	fprintf(stderr, "fulldir: the survivors ended %ld ms after the second kill, with %d lines\n",
		took, total);
	for (int r = 2; r < N; r++) {
		char path[400];
		cr_expect(f.job.status[r] != -1, "rank %d hung", r);
		cr_expect(WIFEXITED(f.job.status[r]) && WEXITSTATUS(f.job.status[r]) == 1,
			  "rank %d: status %d, want exit 1", r, f.job.status[r]);
		snprintf(path, sizeof(path), "%s/stderr-%d", out, r);
		cr_expect(holds(path, "(FT_ENOSPC)"), "rank %d's op did not fail with FT_ENOSPC", r);
		cr_expect(holds(path, "no reserve left for it"), "rank %d named no full directory", r);
	}
	cr_expect_lt(took, 12000, "the survivors took %ld ms to fail", took);
	cr_expect_leq(total, 20, "%d lines of diagnostics from 2 survivors: a flood", total);
	full_end(&f);
}

/*
 * Rejoin, the pairwise logs on a tmpfs that fills while the job runs, then
 * a rank killed (not restarted: the survivors wait 1 s for it, then go on
 * as under shrink). A rank whose log cannot be written keeps none and says
 * so once, naming the directory and ENOSPC; it is neither killed nor left
 * out: the 3 survivors finish every op exactly. (Before, the line named no
 * directory.)
 */
Test(fulldir, log_dir_full_under_rejoin, .timeout = 120)
{
	struct full_job f;
	int killed[N] = {[3] = 1}, bad, total, said = 0;

	stop_size = N - 1;
	full_start(&f, "log_dir_full_under_rejoin", true);
	fill(f.mnt);
	char path[400];
	snprintf(path, sizeof(path), "%s/full", out);
	close(open(path, O_CREAT | O_WRONLY, 0600));
	long end = tu_now_ms() + 15000;
	for (int r = 0; r < N; r++) {
		snprintf(path, sizeof(path), "%s/grown-%d", out, r);
		cr_assert(tu_wait_file(path, end), "rank %d never grew its ops", r);
	}
	tu_sleep_ms(100); /* a few ops on the full log directory */
	kill(f.job.pids[3], SIGKILL);
	bad = tu_wait(&f.job, 25000, killed);
	total = survivors_lines(killed);
	cr_expect_eq(bad, 0, "%d survivors failed or hung with a full log directory", bad);
	for (int r = 0; r < N - 1; r++) {
		expect_survivor_result(r);
		/* the first rank to grow its log finds no room; one that turns
		 * its logging off frees its own, which a later one may take */
		snprintf(path, sizeof(path), "%s/stderr-%d", out, r);
		if (!holds(path, "no space left"))
			continue;
		said++;
		cr_expect(holds(path, f.mnt), "rank %d did not name its log directory", r);
	}
	cr_expect_geq(said, 1, "no rank said that its log directory is full");
	cr_expect_leq(total, 15, "%d lines of diagnostics from 3 survivors: a flood", total);
	full_end(&f);
}

/* ft_init on a rendezvous with no room for its reserve fails at once with
 * FT_ENOSPC (a reserve that could not be held would fail the job's first
 * recovery instead). */
Test(fulldir, init_on_a_full_rendezvous_says_enospc, .timeout = 60)
{
	struct full_job f = {0};
	struct ft_config cfg;
	struct ft_comm *comm = NULL;
	int rc;

	snprintf(f.mnt, sizeof(f.mnt), "/tmp/ftcc-full-XXXXXX");
	cr_assert_not_null(mkdtemp(f.mnt));
	if (geteuid() != 0 ||
	    mount("ftcc-test", f.mnt, "tmpfs", 0, "size=256k,nr_inodes=64,mode=0700") < 0) {
		int e = geteuid() != 0 ? EPERM : errno;
		rmdir(f.mnt);
		fprintf(stderr, "SKIPPED: fulldir/init_on_a_full_rendezvous_says_enospc: mount -t "
			"tmpfs: %s; needs root\n", strerror(e));
		cr_skip_test("cannot mount a small tmpfs: %s", strerror(e));
	}
	tu_job_init(&f.job, 2); /* (a world of one meets no one) */
	rmdir(f.job.dir);
	snprintf(f.job.dir, sizeof(f.job.dir), "%s", f.mnt);
	char jobdir[400];
	snprintf(jobdir, sizeof(jobdir), "%s/%s", f.mnt, f.job.job_id);
	cr_assert_eq(mkdir(jobdir, 0700), 0); /* the job's directory and lock: the last inodes */
	fill(f.mnt);
	tu_config(&f.job, 0, &cfg);
	cfg.policy = FT_POLICY_SHRINK;
	cfg.connect_timeout_ms = 2000; /* rank 1 never comes */
	long t0 = tu_now_ms();
	rc = ft_init(&cfg, &comm);
	long took = tu_now_ms() - t0;
	cr_expect_eq(rc, -FT_ENOSPC, "ft_init on a full rendezvous: %s", ft_err_name(rc));
	cr_expect_lt(took, 3000, "ft_init took %ld ms to fail", took);
	if (rc == 0)
		ft_finalize(comm);
	snprintf(out, sizeof(out), "/tmp/ftcc-fullout-none");
	full_end(&f);
}
