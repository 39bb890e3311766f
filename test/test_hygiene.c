/* test_hygiene.c: what a job leaves behind: no token in a finalized rank's memory. */
#include <criterion/criterion.h>

#include "testutil.h"

/*
 * The token of each job is made here at random, so that the only copies a
 * rank holds are the library's (and the test's own struct ft_config, on
 * the main thread's stack, which is not scanned).
 */
static char token[40];

static void tweak(struct ft_config *cfg, int rank)
{
	(void)rank;
	snprintf(cfg->token, sizeof(cfg->token), "%s", token);
	cfg->policy = FT_POLICY_SHRINK; /* a detector and its control links too */
}

/* Whether any writable private mapping but the main stack holds s. */
static bool memory_holds(const char *s, char *where, size_t cap)
{
	FILE *maps = fopen("/proc/self/maps", "r");
	char line[512];
	bool found = false;

	if (maps == NULL)
		return false;
	while (!found && fgets(line, sizeof(line), maps) != NULL) {
		unsigned long lo, hi;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || strncmp(perms, "rw-p", 4) != 0 ||
		    strstr(line, "[stack]") != NULL)
			continue;
		if (memmem((const void *)lo, hi - lo, s, strlen(s)) != NULL) {
			snprintf(where, cap, "%s", line);
			found = true;
		}
	}
	fclose(maps);
	return found;
}

static int finalize_then_scan(struct ft_comm *comm, int rank, int n, void *arg)
{
	char where[512], mine[sizeof(token)];
	int rc;

	/* the test's own copy goes to this stack, which is not scanned */
	memcpy(mine, token, sizeof(mine));
	explicit_bzero(token, sizeof(token));
	(void)n;
	(void)arg;
	if ((rc = ft_allreduce(comm, FT_IN_PLACE, &rank, 1, FT_INT32, FT_SUM, NULL)) != 0)
		return 2;
	if ((rc = ft_finalize(comm)) != 0)
		return 3;
	if (memory_holds(mine, where, sizeof(where))) {
		fprintf(stderr, "rank: the token is still in memory after ft_finalize: %s", where);
		return 4;
	}
	return 0;
}

/* The token stays in no finalized communicator, nor in what it freed. */
Test(hygiene, finalized_rank_holds_no_token, .timeout = 60)
{
	struct tu_job job;
	uint8_t raw[12];

	cr_assert_eq(getentropy(raw, sizeof(raw)), 0);
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(token + 2 * i, 3, "%02x", raw[i]);
	tu_job_init(&job, 2);
	for (int r = 0; r < 2; r++)
		tu_spawn(&job, r, finalize_then_scan, NULL, tweak);
	cr_expect_eq(tu_wait(&job, 30000, NULL), 0, "a rank kept the token (or failed)");
	tu_job_cleanup(&job);
}
