/* test_bootstrap.c: which launcher started a rank and what it says, from a table of variables (no process environment). */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "bootstrap.h"

/* An environment as a NULL-terminated list of "NAME=value". */
static const char *table(const char *name, void *arg)
{
	size_t n = strlen(name);

	for (const char *const *e = arg; *e != NULL; e++)
		if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

static struct ft__boot identity(const char *const *env)
{
	struct ft__boot b;

	ft__boot_identity(table, (void *)env, &b);
	return b;
}

Test(bootstrap, nothing_set_asks_for_ftcc_variables, .timeout = 10)
{
	const char *env[] = {"PATH=/bin", NULL};
	struct ft__boot b = identity(env);

	cr_expect_eq(b.launcher, FT__LAUNCHER_NONE);
	cr_expect_str_eq(b.rank_var, "FTCC_RANK");
	cr_expect_str_eq(b.size_var, "FTCC_WORLD_SIZE");
	cr_expect_null(b.rank);
	cr_expect_null(b.size);
}

Test(bootstrap, ftcc_variables_win, .timeout = 10)
{
	const char *env[] = {"OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=8", "PMI_RANK=6",
			     "PMI_SIZE=9", "FTCC_RANK=1", "FTCC_WORLD_SIZE=2", NULL};
	struct ft__boot b = identity(env);

	cr_expect_eq(b.launcher, FT__LAUNCHER_FTCC);
	cr_expect_str_eq(b.rank, "1");
	cr_expect_str_eq(b.size, "2");
}

Test(bootstrap, open_mpi_before_mpich, .timeout = 10)
{
	const char *env[] = {"PMI_RANK=0", "PMI_SIZE=5", "OMPI_COMM_WORLD_RANK=1",
			     "OMPI_COMM_WORLD_SIZE=2", NULL};
	struct ft__boot b = identity(env);

	cr_expect_eq(b.launcher, FT__LAUNCHER_OMPI);
	cr_expect_str_eq(b.rank_var, "OMPI_COMM_WORLD_RANK");
	cr_expect_str_eq(b.size_var, "OMPI_COMM_WORLD_SIZE");
	cr_expect_str_eq(b.rank, "1");
	cr_expect_str_eq(b.size, "2");
}

Test(bootstrap, mpich, .timeout = 10)
{
	const char *env[] = {"PMI_RANK=2", NULL};
	struct ft__boot b = identity(env);

	cr_expect_eq(b.launcher, FT__LAUNCHER_MPICH);
	cr_expect_str_eq(b.size_var, "PMI_SIZE");
	cr_expect_str_eq(b.rank, "2");
	cr_expect_null(b.size, "a missing size is reported by the caller, naming PMI_SIZE");
}

Test(bootstrap, slurm_step, .timeout = 10)
{
	const char *srun[] = {"SLURM_PROCID=3", "SLURM_STEP_NUM_TASKS=8", "SLURM_JOB_ID=12",
			      "SLURM_STEP_ID=0", NULL};
	const char *pmi2[] = {"SLURM_PROCID=3", "SLURM_STEP_NUM_TASKS=8", "PMI_RANK=3", "PMI_SIZE=8",
			      NULL};
	const char *hydra[] = {"SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2", "PMI_RANK=5", "PMI_SIZE=8",
			       NULL};
	const char *batch[] = {"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_JOB_ID=12", NULL};
	const char *ompi[] = {"SLURM_PROCID=0", "SLURM_STEP_NUM_TASKS=1", "OMPI_COMM_WORLD_RANK=6",
			      "OMPI_COMM_WORLD_SIZE=8", NULL};
	char id[128];
	struct ft__boot b = identity(srun);

	cr_expect_eq(b.launcher, FT__LAUNCHER_SLURM);
	cr_expect_str_eq(b.rank, "3");
	cr_expect_str_eq(b.size, "8");
	ft__boot_job_id(&b, table, (void *)srun, id, sizeof(id));
	cr_expect_str_eq(id, "slurm-12.0");
	b = identity(pmi2);
	cr_expect_eq(b.launcher, FT__LAUNCHER_SLURM, "srun's PMI2 gives the same rank and size");
	b = identity(hydra);
	cr_expect_eq(b.launcher, FT__LAUNCHER_MPICH, "Hydra's proxies started by srun: the ranks are Hydra's");
	cr_expect_str_eq(b.rank, "5");
	b = identity(batch);
	cr_expect_eq(b.launcher, FT__LAUNCHER_NONE, "a batch script is no step's task");
	b = identity(ompi);
	cr_expect_eq(b.launcher, FT__LAUNCHER_OMPI, "mpirun inside an allocation");
}

Test(bootstrap, job_ids, .timeout = 10)
{
	const char *ompi[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_MCA_ess_base_jobid=77", NULL};
	const char *pmix[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_MCA_ess_base_jobid=77",
			      "PMIX_NAMESPACE=prterun-h-1@1", NULL};
	const char *mpich[] = {"PMI_RANK=0", NULL};
	const char *ftcc[] = {"FTCC_RANK=0", NULL};
	char id[128];
	struct ft__boot b;

	b = identity(ompi);
	ft__boot_job_id(&b, table, (void *)ompi, id, sizeof(id));
	cr_expect_str_eq(id, "ompi-77");
	b = identity(pmix);
	ft__boot_job_id(&b, table, (void *)pmix, id, sizeof(id));
	cr_expect_str_eq(id, "ompi-prterun-h-1@1", "the PMIx namespace first");
	b = identity(mpich);
	ft__boot_job_id(&b, table, (void *)mpich, id, sizeof(id));
	cr_expect(strncmp(id, "hydra-", 6) == 0 || strncmp(id, "pmi-", 4) == 0, "got '%s'", id);
	b = identity(ftcc);
	ft__boot_job_id(&b, table, (void *)ftcc, id, sizeof(id));
	cr_expect_str_eq(id, "", "ftcc-run gives FTCC_JOB_ID itself");
}

Test(bootstrap, local_ranks, .timeout = 10)
{
	const char *none[] = {NULL};
	const char *mpich[] = {"MPI_LOCALNRANKS=3", NULL};
	const char *both[] = {"MPI_LOCALNRANKS=3", "OMPI_COMM_WORLD_LOCAL_SIZE=4", NULL};
	const char *junk[] = {"OMPI_COMM_WORLD_LOCAL_SIZE=x", "MPI_LOCALNRANKS=0", NULL};

	cr_expect_eq(ft__boot_local_ranks(table, (void *)none), 0);
	cr_expect_eq(ft__boot_local_ranks(table, (void *)mpich), 3);
	cr_expect_eq(ft__boot_local_ranks(table, (void *)both), 4, "Open MPI's first");
	cr_expect_eq(ft__boot_local_ranks(table, (void *)junk), 0, "no usable value: not known");
	{
#define STEP "SLURM_PROCID=0", "SLURM_STEP_NUM_TASKS=13"
		const char *tpn = "SLURM_STEP_TASKS_PER_NODE=3(x2),1,2(x3)";
		const char *n0[] = {STEP, tpn, "SLURM_NODEID=0", NULL};
		const char *n1[] = {STEP, tpn, "SLURM_NODEID=1", NULL};
		const char *n2[] = {STEP, tpn, "SLURM_NODEID=2", NULL};
		const char *n5[] = {STEP, tpn, "SLURM_NODEID=5", NULL};
		const char *n6[] = {STEP, tpn, "SLURM_NODEID=6", NULL};
		const char *bad1[] = {STEP, "SLURM_STEP_TASKS_PER_NODE=2(x", "SLURM_NODEID=0", NULL};
		const char *bad2[] = {STEP, "SLURM_STEP_TASKS_PER_NODE=2;3", "SLURM_NODEID=1", NULL};
		const char *bad3[] = {STEP, "SLURM_STEP_TASKS_PER_NODE=2", "SLURM_NODEID=-1", NULL};
		/* a replacement started by srun with its rank given by hand: the
		 * step's tasks on its node are on its host all the same */
		const char *by_hand[] = {STEP, tpn, "SLURM_NODEID=2", "FTCC_RANK=6", NULL};
		/* mpirun's ranks in an srun shell: Open MPI's count */
		const char *ompi[] = {STEP, tpn, "SLURM_NODEID=0", "OMPI_COMM_WORLD_RANK=2",
				      "OMPI_COMM_WORLD_LOCAL_SIZE=4", NULL};
		const char *ompi_none[] = {STEP, tpn, "SLURM_NODEID=0", "OMPI_COMM_WORLD_RANK=2", NULL};
		cr_expect_eq(ft__boot_local_ranks(table, (void *)n0), 3);
		cr_expect_eq(ft__boot_local_ranks(table, (void *)n1), 3);
		cr_expect_eq(ft__boot_local_ranks(table, (void *)n2), 1);
		cr_expect_eq(ft__boot_local_ranks(table, (void *)n5), 2);
		cr_expect_eq(ft__boot_local_ranks(table, (void *)n6), 0, "past the list: not known");
		cr_expect_eq(ft__boot_local_ranks(table, (void *)bad1), 0);
		cr_expect_eq(ft__boot_local_ranks(table, (void *)bad2), 0);
		cr_expect_eq(ft__boot_local_ranks(table, (void *)bad3), 0);
		cr_expect_eq(ft__boot_local_ranks(table, (void *)by_hand), 1);
		cr_expect_eq(ft__boot_local_ranks(table, (void *)ompi), 4);
		cr_expect_eq(ft__boot_local_ranks(table, (void *)ompi_none), 0,
			     "srun's count is not mpirun's ranks'");
#undef STEP
	}
}

Test(bootstrap, launcher_addrs, .timeout = 10)
{
	const char *hnp[] = {"OMPI_MCA_orte_hnp_uri=3879862272.0;tcp://10.1.2.1,172.17.0.1:53433;"
			     "tcp6://[fd00::1]:53434",
			     "OMPI_MCA_orte_local_daemon_uri=3879862272.1;tcp://10.1.2.2:51413", NULL};
	const char *daemon[] = {"OMPI_MCA_orte_local_daemon_uri=3879862272.1;tcp://10.1.2.2:51413",
				NULL};
	const char *junk[] = {"OMPI_MCA_orte_hnp_uri=1.0;usock://x;tcp://nocolon", NULL};
	const char *none[] = {NULL};
	char a[256], tiny[24];

	ft__boot_launcher_addrs(table, (void *)hnp, a, sizeof(a));
	cr_expect_str_eq(a, "10.1.2.1:53433,172.17.0.1:53433,[fd00::1]:53434", "mpirun's first");
	ft__boot_launcher_addrs(table, (void *)daemon, a, sizeof(a));
	cr_expect_str_eq(a, "10.1.2.2:51413", "else the local daemon's");
	ft__boot_launcher_addrs(table, (void *)junk, a, sizeof(a));
	cr_expect_str_eq(a, "", "nothing usable: nothing");
	ft__boot_launcher_addrs(table, (void *)none, a, sizeof(a));
	cr_expect_str_eq(a, "");
	{
		const char *srun[] = {"SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2",
				      "SLURM_SRUN_COMM_HOST=10.75.6.1", "SLURM_SRUN_COMM_PORT=42005", NULL};
		const char *in_shell[] = {"SLURM_PROCID=0", "SLURM_STEP_NUM_TASKS=1",
					  "SLURM_SRUN_COMM_HOST=10.75.6.1", "SLURM_SRUN_COMM_PORT=42005",
					  "OMPI_MCA_orte_local_daemon_uri=1.1;tcp://10.1.2.2:51413",
					  "OMPI_COMM_WORLD_RANK=3", NULL};
		ft__boot_launcher_addrs(table, (void *)srun, a, sizeof(a));
		cr_expect_str_eq(a, "10.75.6.1:42005", "srun's");
		ft__boot_launcher_addrs(table, (void *)in_shell, a, sizeof(a));
		cr_expect_str_eq(a, "10.1.2.2:51413", "mpirun's in an srun shell, not srun's");
	}
	ft__boot_launcher_addrs(table, (void *)hnp, tiny, sizeof(tiny));
	cr_expect_str_eq(tiny, "10.1.2.1:53433", "what does not fit is left out whole");
}
