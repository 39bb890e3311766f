/* test_mpi.c: ftcc under Open MPI's mpirun and MPICH's mpiexec, with no code change and no FTCC_* variables. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *build_dir(void)
{
	const char *b = getenv("FTCC_BUILD_DIR");
	return b != NULL ? b : "build";
}

/* Runs cmd under a deadline; returns its exit status and output. */
static int run(const char *cmd, char *out, size_t cap)
{
	char full[2048];
	FILE *p;
	size_t n = 0;

	snprintf(full, sizeof(full),
		 "env -u FTCC_RANK -u FTCC_WORLD_SIZE -u FTCC_RENDEZVOUS -u FTCC_JOB_ID "
		 "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
		 "timeout -k 5 60 %s 2>&1", cmd);
	p = popen(full, "r");
	cr_assert_not_null(p);
	while (n + 1 < cap) {
		size_t k = fread(out + n, 1, cap - 1 - n, p);
		if (k == 0)
			break;
		n += k;
	}
	out[n] = '\0';
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void need(const char *prog)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", prog);
	if (system(cmd) != 0)
		cr_skip_test("SKIPPED: %s is not installed (make deps installs it)", prog);
}

Test(mpi, openmpi_mpirun, .timeout = 120)
{
	char cmd[1024], out[8192];
	need("mpirun.openmpi");
	snprintf(cmd, sizeof(cmd),
		 "mpirun.openmpi --oversubscribe -np 4 %s/examples/allreduce_check 100003 5",
		 build_dir());
	int rc = run(cmd, out, sizeof(out));
	cr_assert_eq(rc, 0, "mpirun exited %d:\n%s", rc, out);
	cr_assert(strstr(out, "on 4 ranks: correct") != NULL, "output:\n%s", out);
}

Test(mpi, mpich_mpiexec, .timeout = 120)
{
	char cmd[1024], out[8192];
	need("mpiexec.mpich");
	snprintf(cmd, sizeof(cmd), "mpiexec.mpich -n 5 %s/examples/allreduce_check 77777 5",
		 build_dir());
	int rc = run(cmd, out, sizeof(out));
	cr_assert_eq(rc, 0, "mpiexec exited %d:\n%s", rc, out);
	cr_assert(strstr(out, "on 5 ranks: correct") != NULL, "output:\n%s", out);
}

/* Two jobs at once under the same launcher must not meet in the rendezvous. */
Test(mpi, two_openmpi_jobs_at_once, .timeout = 120)
{
	char cmd[2048], out[8192];
	need("mpirun.openmpi");
	snprintf(cmd, sizeof(cmd),
		 "sh -c 'mpirun.openmpi --oversubscribe -np 3 %s/examples/allreduce_check 1000 50 & "
		 "mpirun.openmpi --oversubscribe -np 2 %s/examples/allreduce_check 1000 50; a=$?; "
		 "wait $!; b=$?; exit $((a + b))'",
		 build_dir(), build_dir());
	int rc = run(cmd, out, sizeof(out));
	cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
	cr_assert(strstr(out, "on 3 ranks: correct") && strstr(out, "on 2 ranks: correct"),
		  "output:\n%s", out);
}
