/* test_file.c: per-user directories in shared places (lib/util/file.c) and the files made under them: planted links, other owners, open modes. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "internal.h"
#include "jnl.h"
#include "membership.h"

/*
 * Another user of the host can make /tmp/ftcc-<uid> (or the log root)
 * before this user does: a symbolic link to a place of theirs, a directory
 * they own, or one they can write. Each must be refused, through the
 * helper and through ft_init under a launcher (the rendezvous it picks by
 * itself); and a link planted at a file's name inside is never followed.
 */

static char base[256];

static void setup(void)
{
	snprintf(base, sizeof(base), "%s/ftcc-file-XXXXXX",
		 getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
	cr_assert_not_null(mkdtemp(base));
}

static void teardown(void)
{
	char cmd[700];

	snprintf(cmd, sizeof(cmd), "chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", base, base);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", base);
}

static void path_in(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", base, name);
}

/* <base>/ftcc-<uid>: the rendezvous ft_init picks under a launcher with TMPDIR=base. */
static void default_rendezvous(char *buf, size_t len)
{
	snprintf(buf, len, "%s/ftcc-%u", base, (unsigned)getuid());
}

/*
 * Rank 0 of 2 under Open MPI's variables, no rendezvous given: ft_init
 * meets in $TMPDIR/ftcc-<uid>. Its result (a refusal comes at once; a
 * rendezvous taken would wait for rank 1 until the 1.5 s connect timeout).
 */
static int init_under_launcher(void)
{
	static const char *const unset[] = {"FTCC_RENDEZVOUS", "FTCC_MEMBERSHIP", "FTCC_RANK",
					    "FTCC_WORLD_SIZE", "FTCC_BOOTSTRAP", "FTCC_STORE",
					    "FTCC_PEERS", "FTCC_POLICY", "PMI_RANK", "PMI_SIZE",
					    "FTCC_INCARNATION"};
	struct ft_comm *comm = NULL;
	int rc;

	for (size_t i = 0; i < FT__ARRAY_SIZE(unset); i++)
		unsetenv(unset[i]);
	setenv("OMPI_COMM_WORLD_RANK", "0", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
	setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
	setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
	setenv("TMPDIR", base, 1);
	setenv("FTCC_JOB_ID", "filetest", 1);
	setenv("FTCC_TOKEN", "file-test", 1);
	setenv("FTCC_CONNECT_TIMEOUT_MS", "1500", 1);
	setenv("FTCC_LOG_LEVEL", getenv("FTCC_TEST_LOG") ? getenv("FTCC_TEST_LOG") : "0", 1);
	rc = ft_init(NULL, &comm);
	if (rc == 0)
		ft_finalize(comm);
	return rc;
}

static void assert_refused(int rc, const char *what)
{
	cr_assert_str_eq(ft_err_name(rc), "FT_EACCES", "%s: %s (%d), want FT_EACCES", what,
			 ft_err_name(rc), rc);
}

/* What is absent is made 0700; what is ours and private is taken. */
Test(file, private_dir_made_and_taken, .init = setup, .fini = teardown)
{
	char dir[300];
	struct stat st;

	path_in(dir, sizeof(dir), "fresh");
	cr_assert_eq(ft__dir_private(dir, FT__DIR_UNREADABLE), 0);
	cr_assert_eq(lstat(dir, &st), 0);
	cr_assert(S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700, "mode %o", st.st_mode);
	cr_assert_eq(ft__dir_private(dir, FT__DIR_UNREADABLE), 0, "taken again");
	cr_assert_eq(chmod(dir, 0755), 0);
	cr_assert_eq(ft__dir_private(dir, 0), 0, "a readable rendezvous is fine");
}

/* A symbolic link at the directory's name, even to a directory of ours, is refused. */
Test(file, symlink_at_dir_refused, .init = setup, .fini = teardown)
{
	char target[300], link_path[300], job[400];
	struct stat st;

	path_in(target, sizeof(target), "elsewhere");
	cr_assert_eq(mkdir(target, 0700), 0);
	default_rendezvous(link_path, sizeof(link_path));
	cr_assert_eq(symlink(target, link_path), 0);
	cr_assert_eq(ft__dir_private(link_path, 0), -FT_EACCES);
	assert_refused(init_under_launcher(), "ft_init, a link at $TMPDIR/ftcc-<uid>");
	snprintf(job, sizeof(job), "%s/filetest", target);
	cr_assert_neq(stat(job, &st), 0, "the job's directory was made through the link");
}

/* A directory another user owns (as root: chown to nobody) is refused. */
Test(file, other_owner_refused, .init = setup, .fini = teardown)
{
	char dir[300];

	if (geteuid() != 0)
		cr_skip_test("not root: cannot make a directory another user owns");
	default_rendezvous(dir, sizeof(dir));
	cr_assert_eq(mkdir(dir, 0700), 0);
	cr_assert_eq(chown(dir, 65534, 65534), 0);
	cr_assert_eq(ft__dir_private(dir, 0), -FT_EACCES);
	assert_refused(init_under_launcher(), "ft_init, $TMPDIR/ftcc-<uid> owned by nobody");
}

/* Group or world write is refused; the log root also refuses group or world read. */
Test(file, shared_mode_refused, .init = setup, .fini = teardown)
{
	char dir[300];

	default_rendezvous(dir, sizeof(dir));
	cr_assert_eq(mkdir(dir, 0700), 0);
	cr_assert_eq(chmod(dir, 0777), 0);
	cr_assert_eq(ft__dir_private(dir, 0), -FT_EACCES, "world-writable");
	cr_assert_eq(chmod(dir, 0770), 0);
	cr_assert_eq(ft__dir_private(dir, 0), -FT_EACCES, "group-writable");
	cr_assert_eq(chmod(dir, 0750), 0);
	cr_assert_eq(ft__dir_private(dir, 0), 0, "group-readable rendezvous");
	cr_assert_eq(ft__dir_private(dir, FT__DIR_UNREADABLE), -FT_EACCES, "group-readable logs");
	cr_assert_eq(chmod(dir, 01777), 0);
	assert_refused(init_under_launcher(), "ft_init, $TMPDIR/ftcc-<uid> mode 1777");
}

static void plant(const char *link_path, const char *victim)
{
	int fd = open(victim, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "precious\n", 9), 9);
	close(fd);
	cr_assert_eq(symlink(victim, link_path), 0, "symlink %s: %s", link_path, strerror(errno));
}

static void assert_untouched(const char *victim)
{
	char buf[64] = "";
	int fd = open(victim, O_RDONLY | O_CLOEXEC);

	cr_assert_geq(fd, 0);
	cr_assert_eq(read(fd, buf, sizeof(buf) - 1), 9, "%s was written through the link", victim);
	close(fd);
	cr_assert_str_eq(buf, "precious\n");
	/* nor locked through it (flock is per open file: this one would conflict) */
	fd = open(victim, O_RDONLY | O_CLOEXEC);
	cr_assert_eq(flock(fd, LOCK_EX | LOCK_NB), 0, "%s was locked through the link", victim);
	close(fd);
}

/* Links planted at the names of the rendezvous lock, a member file being
 * written, and a log slot: none is followed. */
Test(file, symlink_at_file_not_followed, .init = setup, .fini = teardown)
{
	char root[300], job[400], gen[450], link_path[600], victim[300];
	struct ft__mb mb0, mb1;
	struct ft__member m;
	struct ft__jnl *log = NULL;
	struct stat st;
	int rc;

	path_in(root, sizeof(root), "rv");
	snprintf(job, sizeof(job), "%s/job", root);
	snprintf(gen, sizeof(gen), "%s/gen-0", job);
	cr_assert_eq(mkdir(root, 0700), 0);
	cr_assert_eq(mkdir(job, 0700), 0);
	cr_assert_eq(mkdir(gen, 0700), 0);

	/* the lock of rank 0 */
	path_in(victim, sizeof(victim), "victim-lock");
	snprintf(link_path, sizeof(link_path), "%s/lock-0", job);
	plant(link_path, victim);
	struct ft__mb_params p = {.root = root, .job_id = "job", .rank = 0, .world_size = 2};
	rc = ft__mb_open(&mb0, &p);
	cr_assert_neq(rc, 0, "rank 0 opened its lock through a planted link");
	assert_untouched(victim);

	/* rank 1's member file, written under a temporary name */
	path_in(victim, sizeof(victim), "victim-member");
	snprintf(link_path, sizeof(link_path), "%s/.member-1.%d.tmp", gen, (int)getpid());
	plant(link_path, victim);
	p.rank = 1;
	cr_assert_eq(ft__mb_open(&mb1, &p), 0);
	memset(&m, 0, sizeof(m));
	snprintf(m.addr, sizeof(m.addr), "127.0.0.1:1");
	rc = ft__mb_publish(&mb1, 0, &m);
	ft__mb_close(&mb1, 0, false);
	assert_untouched(victim);
	(void)rc; /* published (the planted name removed) or refused: either way not followed */

	/* a log slot */
	path_in(victim, sizeof(victim), "victim-log");
	snprintf(link_path, sizeof(link_path), "%s/logs", base);
	cr_assert_eq(mkdir(link_path, 0700), 0);
	snprintf(link_path, sizeof(link_path), "%s/logs/r0-s0.log", base);
	plant(link_path, victim);
	snprintf(link_path, sizeof(link_path), "%s/logs", base);
	struct ft__jnl_params lp = {.dir = link_path, .job_id = "job", .rank = 0, .world_size = 2,
				    .engine = FT__JNL_PWRITE};
	rc = ft__jnl_open(&lp, &log);
	if (rc == 0)
		ft__jnl_close(log);
	cr_assert_neq(rc, 0, "the log opened its slot through a planted link");
	assert_untouched(victim);
	snprintf(link_path, sizeof(link_path), "%s/logs/r0-s0.log", base);
	cr_assert_eq(lstat(link_path, &st), 0);
	cr_assert(S_ISLNK(st.st_mode));
}
