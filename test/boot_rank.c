/* boot_rank.c: a rank that builds the first address book from its environment and checks it; test_boot_book runs it under ftcc-run and mpirun. */
/* SPDX-License-Identifier: MIT */

/*
 * boot_rank [STEPS]: runs STEPS in order (default "b"):
 *   b  ft_config_from_env, then ft__boot_book with this rank's entry, and
 *      checks the book: rank r's entry is entry(r, 0), this rank's
 *      entry(rank, FTCC_INCARNATION)
 *   k  SIGKILL itself if this is rank FTCC_TEST_DIE_RANK, incarnation 0
 *   w  a rank that never joins, for timeouts: waits until FTCC_TEST_MARKS
 *      files are in FTCC_TEST_MARK_DIR (fails after 60 s)
 * A book that fails with the error FTCC_TEST_EXPECT names (FT_ETIMEDOUT)
 * counts as a success (so that mpirun does not end the others early), and
 * leaves the file FTCC_TEST_MARK_DIR/<rank>: the waiting rank exits only
 * after every other rank timed out, however slowly they started (mpirun
 * ends the job when one rank exits without PMIx_Finalize).
 *   t  the job's token as ft_init makes one when none is given
 *      (ft__token_resolve: through PMIx under in-band membership), the
 *      same on every rank ("token ok" and its first digits printed)
 *   j, J  ft_init from the environment (public API), an allreduce of ones
 *      (checked: "job ok"), and ft_finalize (j) or none (J: the
 *      process exits holding the communicator)
 *   x  a forked child that exits at once through exit() (a data loader's
 *      worker: the library's exit handlers run in it), waited for
 *   i, a, f  MPI_Init, an MPI_Allreduce (checked), MPI_Finalize (built
 *      with FTCC_TEST_MPI only)
 * Prints "rank R: book of N ok: <entries>" per book, "rank R: book: <error
 * name>" when one fails; exits 0 when every step did what it should.
 * Only a test reads the environment this way; the library reads it in
 * config.c.
 */
#include <dirent.h>
#include <fcntl.h>
#include <ftcc.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap.h"
#include "token.h"

#ifdef FTCC_TEST_MPI
#include <mpi.h>
#endif

#define MAX_BOOKS 8

static int incarnation(void)
{
	const char *s = getenv("FTCC_INCARNATION");
	return s != NULL ? atoi(s) : 0;
}

/* Rank r's entry in incarnation i: distinct per rank and per incarnation. */
static void entry(int r, int i, char *dst)
{
	snprintf(dst, FT__BOOK_ENTRY_MAX, "10.%d.%d.%d:%d", i, r / 256, r % 256, 20000 + r);
}

static int check(const struct ft_config *cfg, char (*book)[FT__BOOK_ENTRY_MAX])
{
	char want[FT__BOOK_ENTRY_MAX], line[4096];
	size_t at = 0;

	for (int r = 0; r < cfg->world_size; r++) {
		entry(r, r == cfg->rank ? incarnation() : 0, want);
		if (strcmp(book[r], want) != 0) {
			printf("rank %d: book[%d] is '%s', expected '%s'\n", cfg->rank, r, book[r],
			       want);
			return 1;
		}
		at += (size_t)snprintf(line + at, sizeof(line) - at, "%s%s", r ? "," : "",
				       book[r]);
		if (at >= sizeof(line))
			at = sizeof(line) - 1;
	}
	printf("rank %d: book of %d ok: %s\n", cfg->rank, cfg->world_size, line);
	return 0;
}

/* FTCC_TEST_MARK_DIR/<rank>, when that directory is given. */
static void mark(int rank)
{
	const char *dir = getenv("FTCC_TEST_MARK_DIR");
	char path[4096];

	if (dir == NULL)
		return;
	snprintf(path, sizeof(path), "%s/%d", dir, rank);
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
}

/* The 'w' step: 0 once FTCC_TEST_MARKS marks exist; 1 after 60 s without. */
static int wait_marks(void)
{
	const char *dir = getenv("FTCC_TEST_MARK_DIR"), *n = getenv("FTCC_TEST_MARKS");

	if (dir == NULL || n == NULL) {
		fprintf(stderr, "boot_rank: step 'w' needs FTCC_TEST_MARK_DIR and FTCC_TEST_MARKS\n");
		return 1;
	}
	for (int waited = 0; waited < 60000; waited += 50) {
		DIR *d = opendir(dir);
		int found = 0;
		for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
			found += e->d_name[0] != '.';
		if (d != NULL)
			closedir(d);
		if (found >= atoi(n))
			return 0;
		usleep(50000);
	}
	fprintf(stderr, "boot_rank: the other ranks left no marks in 60 s\n");
	return 1;
}

static int book_step(struct ft_config *cfg, struct ft__book_params *p)
{
	char err[512], mine[FT__BOOK_ENTRY_MAX], (*book)[FT__BOOK_ENTRY_MAX];
	int rc = ft_config_from_env(cfg, err, sizeof(err));

	if (rc != 0) {
		printf("config: %s\n", err);
		return 1;
	}
	*p = (struct ft__book_params){.how = cfg->bootstrap, .store = cfg->store,
				      .peers = cfg->peers, .job_id = cfg->job_id,
				      .token = cfg->token,
				      .rank = cfg->rank, .world_size = cfg->world_size,
				      .timeout_ms = cfg->connect_timeout_ms};
	book = calloc((size_t)cfg->world_size, sizeof(*book));
	if (book == NULL)
		return 1;
	entry(cfg->rank, incarnation(), mine);
	rc = ft__boot_book(p, mine, book);
	if (rc != 0) {
		const char *expect = getenv("FTCC_TEST_EXPECT");
		printf("rank %d: book: %s\n", cfg->rank, ft_err_name(rc));
		rc = expect != NULL && strcmp(expect, ft_err_name(rc)) == 0 ? 2 : 1;
		if (rc == 2)
			mark(cfg->rank);
	} else {
		rc = check(cfg, book);
	}
	fflush(stdout);
	free(book);
	return rc;
}

/* A token made for the job: 64 hex digits (ranks compare it by the test's output). */
static int token_step(void)
{
	struct ft_config cfg;
	char err[512];
	int rc = ft_config_from_env(&cfg, err, sizeof(err));

	if (rc != 0) {
		printf("config: %s\n", err);
		return 1;
	}
	cfg.token[0] = '\0';
	rc = ft__token_resolve(&cfg);
	if (rc != 0 || strlen(cfg.token) != 64) {
		printf("rank %d: token: %s\n", cfg.rank, ft_err_name(rc));
		return 1;
	}
	printf("token ok: %.8s\n", cfg.token);
	return 0;
}

/* The 'x' step: 0 once the child exited 0. */
static int fork_step(void)
{
	int st = 0;
	pid_t pid = fork();

	if (pid == 0)
		exit(0);
	return pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
}

/* The 'j' and 'J' steps: a job through the public API. */
static int job_step(bool finalize)
{
	struct ft_comm *c;
	float one = 1;
	int rc = ft_init(NULL, &c);

	if (rc != 0) {
		printf("ft_init: %s\n", ft_err_name(rc));
		return 1;
	}
	rc = ft_allreduce(c, &one, &one, 1, FT_FLOAT32, FT_SUM, NULL);
	if (rc != 0 || one != (float)ft_size(c)) {
		printf("ft_allreduce: %s, %g\n", ft_err_name(rc), one);
		return 1;
	}
	printf("job ok\n");
	fflush(stdout);
	return finalize ? ft_finalize(c) != 0 : 0;
}

#ifdef FTCC_TEST_MPI
static int mpi_step(char step, int *argc, char ***argv)
{
	int one = 1, sum = 0, size = 0;

	if (step == 'i')
		return MPI_Init(argc, argv) != MPI_SUCCESS;
	if (step == 'f')
		return MPI_Finalize() != MPI_SUCCESS;
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS ||
	    sum != size)
		return 1;
	printf("allreduce ok\n");
	return 0;
}
#endif

int main(int argc, char **argv)
{
	static struct ft_config cfgs[MAX_BOOKS];
	struct ft__book_params params[MAX_BOOKS];
	const char *steps = argc > 1 ? argv[1] : "b", *die = getenv("FTCC_TEST_DIE_RANK");
	int made = 0, bad = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (const char *s = steps; *s != '\0' && !bad; s++) {
		switch (*s) {
		case 'b':
			if (made == MAX_BOOKS)
				return 2;
			bad = book_step(&cfgs[made], &params[made]);
			made += bad == 0;
			if (bad == 2)
				return 0; /* failed as expected */
			break;
		case 'k':
			if (die != NULL && made > 0 && atoi(die) == cfgs[0].rank && incarnation() == 0)
				raise(SIGKILL);
			break;
		case 'w':
			bad = wait_marks();
			break;
		case 't':
			bad = token_step();
			break;
		case 'x':
			bad = fork_step();
			break;
		case 'j':
		case 'J':
			bad = job_step(*s == 'j');
			break;
#ifdef FTCC_TEST_MPI
		case 'i':
		case 'a':
		case 'f':
			bad = mpi_step(*s, &argc, &argv);
			break;
#endif
		default:
			fprintf(stderr, "boot_rank: unknown step '%c'\n", *s);
			return 2;
		}
	}
	return bad;
}
