/* bootstrap.c: the launchers ftcc knows (ftcc-run, Open MPI, Slurm's srun, MPICH's Hydra) and what each tells a rank. */
/* SPDX-License-Identifier: MIT */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"

static bool same(const char *a, const char *b)
{
	return a != NULL && b != NULL && strcmp(a, b) == 0;
}

/* A task of an srun step, with no other PMI's rank and size (srun's PMI2 gives the same). */
static bool slurm_step(ft__env_fn *env, void *arg)
{
	const char *rank = env("SLURM_PROCID", arg), *size = env("SLURM_STEP_NUM_TASKS", arg);

	if (rank == NULL || size == NULL)
		return false;
	return env("PMI_RANK", arg) == NULL ||
	       (same(env("PMI_RANK", arg), rank) && same(env("PMI_SIZE", arg), size));
}

void ft__boot_identity(ft__env_fn *env, void *arg, struct ft__boot *b)
{
	const char *ftcc = env("FTCC_RANK", arg);

	*b = (struct ft__boot){.launcher = ftcc != NULL ? FT__LAUNCHER_FTCC : FT__LAUNCHER_NONE,
			       .rank_var = "FTCC_RANK", .size_var = "FTCC_WORLD_SIZE"};
	if (ftcc == NULL && env("OMPI_COMM_WORLD_RANK", arg) != NULL)
		*b = (struct ft__boot){.launcher = FT__LAUNCHER_OMPI,
				       .rank_var = "OMPI_COMM_WORLD_RANK",
				       .size_var = "OMPI_COMM_WORLD_SIZE"};
	else if (ftcc == NULL && slurm_step(env, arg))
		*b = (struct ft__boot){.launcher = FT__LAUNCHER_SLURM, .rank_var = "SLURM_PROCID",
				       .size_var = "SLURM_STEP_NUM_TASKS"};
	else if (ftcc == NULL && env("PMI_RANK", arg) != NULL)
		*b = (struct ft__boot){.launcher = FT__LAUNCHER_MPICH, .rank_var = "PMI_RANK",
				       .size_var = "PMI_SIZE"};
	b->rank = env(b->rank_var, arg);
	b->size = env(b->size_var, arg);
}

/* Job identity under MPICH's Hydra, which exports none: the pid of the
 * hydra_pmi_proxy above us, shared by every local rank even through wrappers. */
static void hydra_job_id(char *dst, size_t cap)
{
	pid_t pid = getppid();

	for (int depth = 0; depth < 8 && pid > 1; depth++) {
		char path[64], buf[512];
		FILE *f;
		char *rp;
		int ppid;

		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		f = fopen(path, "re");
		if (f == NULL)
			break;
		if (fgets(buf, sizeof(buf), f) == NULL) {
			fclose(f);
			break;
		}
		fclose(f);
		rp = strrchr(buf, ')');
		if (rp == NULL || sscanf(rp + 2, "%*c %d", &ppid) != 1)
			break;
		if (strstr(buf, "(hydra_pmi_prox") != NULL) {
			snprintf(dst, cap, "hydra-%d", (int)pid);
			return;
		}
		pid = ppid;
	}
	snprintf(dst, cap, "pmi-%d", (int)getppid());
}

void ft__boot_job_id(const struct ft__boot *b, ft__env_fn *env, void *arg, char *dst, size_t cap)
{
	const char *id = env("PMIX_NAMESPACE", arg);

	if (b->launcher == FT__LAUNCHER_SLURM) {
		const char *job = env("SLURM_JOB_ID", arg), *step = env("SLURM_STEP_ID", arg);
		if (job != NULL && step != NULL && cap > 0)
			snprintf(dst, cap, "slurm-%s.%s", job, step);
		else if (cap > 0)
			dst[0] = '\0';
		return;
	}
	if (id == NULL)
		id = env("OMPI_MCA_ess_base_jobid", arg);
	if (id != NULL)
		snprintf(dst, cap, "ompi-%s", id);
	else if (b->launcher == FT__LAUNCHER_MPICH)
		hydra_job_id(dst, cap);
	else if (cap > 0)
		dst[0] = '\0';
}

/*
 * Tasks on node `node` per a Slurm task count list ("2(x3),1": two tasks
 * on each of three nodes, then one): 0 when the list does not say.
 */
static int slurm_tasks_on(const char *list, long node)
{
	const char *p = list;

	while (p != NULL && *p != '\0' && node >= 0) {
		char *end;
		long tasks = strtol(p, &end, 10), times = 1;
		if (end == p || tasks < 1 || tasks > (1L << 20))
			return 0;
		p = end;
		if (strncmp(p, "(x", 2) == 0) {
			times = strtol(p + 2, &end, 10);
			if (end == p + 2 || *end != ')' || times < 1)
				return 0;
			p = end + 1;
		}
		if (node < times)
			return (int)tasks;
		node -= times;
		if (*p != ',' && *p != '\0')
			return 0;
		p += *p == ',';
	}
	return 0;
}

int ft__boot_local_ranks(ft__env_fn *env, void *arg)
{
	static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
	/* read in an srun task, also one given FTCC_RANK by hand (a
	 * replacement started by srun: the step's tasks on its node are on its
	 * host); not for mpirun's ranks started from an srun shell (Open MPI's
	 * own count came first above). ftcc-run's ranks in such a shell take
	 * the shell's count (1): they then publish an address other hosts
	 * reach, never loopback, which works, only without the one-host fast
	 * paths. */
	bool slurm = env("OMPI_COMM_WORLD_RANK", arg) == NULL && slurm_step(env, arg);
	const char *tpn = slurm ? env("SLURM_STEP_TASKS_PER_NODE", arg) : NULL;
	const char *node = slurm ? env("SLURM_NODEID", arg) : NULL;

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *s = env(vars[i], arg);
		if (s != NULL && atoi(s) > 0)
			return atoi(s);
	}
	if (tpn != NULL && node != NULL) {
		char *end;
		long n = strtol(node, &end, 10);
		if (end != node && *end == '\0' && n >= 0)
			return slurm_tasks_on(tpn, n);
	}
	return 0;
}

/* Appends "host:port" ("[host]:port" for IPv6) to the comma-separated list in dst. */
static void add_addr(char *dst, size_t cap, const char *host, size_t hlen, const char *port,
		     size_t plen)
{
	size_t used = strlen(dst);
	bool v6 = memchr(host, ':', hlen) != NULL && host[0] != '[';
	int n;

	if (hlen == 0 || plen == 0)
		return;
	n = snprintf(dst + used, cap - used, "%s%s%.*s%s:%.*s", used > 0 ? "," : "", v6 ? "[" : "",
		     (int)hlen, host, v6 ? "]" : "", (int)plen, port);
	if (n < 0 || (size_t)n >= cap - used)
		dst[used] = '\0'; /* no room for it: leave it out whole */
}

/* The addresses of an ORTE contact URI: "JOB.VPID;tcp://A,B:PORT;tcp6://[C]:PORT". */
static void orte_uri_addrs(const char *uri, char *dst, size_t cap)
{
	const char *p = strchr(uri, ';');

	while (p != NULL) {
		const char *seg = p + 1, *end = strchr(seg, ';'), *colon, *a;
		size_t len = end != NULL ? (size_t)(end - seg) : strlen(seg);
		p = end;
		if (strncmp(seg, "tcp://", 6) == 0)
			seg += 6, len -= 6;
		else if (strncmp(seg, "tcp6://", 7) == 0)
			seg += 7, len -= 7;
		else
			continue;
		for (colon = seg + len; colon > seg && colon[-1] != ':'; colon--)
			;
		if (colon == seg)
			continue;
		for (a = seg; a < colon - 1;) {
			size_t n = strcspn(a, ",");
			if (a + n > colon - 1)
				n = (size_t)(colon - 1 - a);
			add_addr(dst, cap, a, n, colon, (size_t)(seg + len - colon));
			a += n + 1;
		}
	}
}

void ft__boot_launcher_addrs(ft__env_fn *env, void *arg, char *dst, size_t cap)
{
	static const char *const vars[] = {"OMPI_MCA_orte_hnp_uri", "OMPI_MCA_orte_local_daemon_uri"};

	bool slurm = env("OMPI_COMM_WORLD_RANK", arg) == NULL && slurm_step(env, arg);
	const char *srun = slurm ? env("SLURM_SRUN_COMM_HOST", arg) : NULL;
	const char *port = slurm ? env("SLURM_SRUN_COMM_PORT", arg) : NULL;

	if (cap == 0)
		return;
	dst[0] = '\0';
	if (srun != NULL && port != NULL)
		add_addr(dst, cap, srun, strlen(srun), port, strlen(port));
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]) && dst[0] == '\0'; i++) {
		const char *uri = env(vars[i], arg);
		if (uri != NULL)
			orte_uri_addrs(uri, dst, cap);
	}
}
