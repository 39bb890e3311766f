/* bootstrap.h: what a launcher tells a rank (rank, world size, job identity, ranks on its host), for every launcher ftcc knows. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_BOOTSTRAP_H
#define FTCC_BOOTSTRAP_H

#include <stddef.h>

/*
 * The launchers and their variables, in order of precedence:
 *   ftcc-run, or a user:  FTCC_RANK, FTCC_WORLD_SIZE
 *   Open MPI (mpirun):    OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
 *                         OMPI_COMM_WORLD_LOCAL_SIZE; job: PMIX_NAMESPACE,
 *                         else OMPI_MCA_ess_base_jobid
 *   Slurm (srun):         SLURM_PROCID, SLURM_STEP_NUM_TASKS (set for a
 *                         step's tasks only, not a batch script),
 *                         SLURM_STEP_TASKS_PER_NODE with SLURM_NODEID; job:
 *                         "slurm-<SLURM_JOB_ID>.<SLURM_STEP_ID>". Ahead of
 *                         MPICH's variables when srun's PMI2 sets them too
 *                         (the same rank and size), behind them when they
 *                         differ (Hydra's proxies started by srun)
 *   MPICH (Hydra):        PMI_RANK, PMI_SIZE, MPI_LOCALNRANKS; job: none
 *                         exported, so the pid of the hydra_pmi_proxy above
 *                         this process
 *
 * Bootstrap knows the names; it does not read the environment itself.
 * config.c, the one file that reads the process environment (once, at
 * ft_init or ft_config_from_env), hands it a lookup function. So every
 * getenv of the library sits in one file, and bootstrap is a plain
 * function of its input (tests give it a table).
 */

/* Returns the value of variable name, or NULL when it is not set. */
typedef const char *ft__env_fn(const char *name, void *arg);

enum ft__launcher {
	FT__LAUNCHER_NONE,      /* nothing set: FTCC_* are asked for */
	FT__LAUNCHER_FTCC,      /* FTCC_RANK set: ftcc-run, a user, or a script */
	FT__LAUNCHER_OMPI,
	FT__LAUNCHER_MPICH,
	FT__LAUNCHER_SLURM
};

struct ft__boot {
	enum ft__launcher launcher;
	const char *rank_var, *size_var;        /* the variables that give them */
	const char *rank, *size;                /* their values; NULL: unset */
};

/* Which launcher started this rank, and where its rank and size are. */
void ft__boot_identity(ft__env_fn *env, void *arg, struct ft__boot *b);
/* The job id the launcher implies ("ompi-<id>", "slurm-<job>.<step>", "hydra-<pid>"), or ""; an
 * MPICH job id is found by walking up /proc to the proxy. */
void ft__boot_job_id(const struct ft__boot *b, ft__env_fn *env, void *arg, char *dst,
		     size_t cap);
/* Ranks on this host per the launcher; 0: not known. */
int ft__boot_local_ranks(ft__env_fn *env, void *arg);
/*
 * Where the launcher's own process listens, as comma-separated host:port
 * into dst ("" when not known): a rank that routes toward it finds the
 * interface that reaches the other hosts. Slurm: srun's
 * (SLURM_SRUN_COMM_HOST:SLURM_SRUN_COMM_PORT). Open MPI: mpirun's (the HNP's)
 * out-of-band address, OMPI_MCA_orte_hnp_uri ("JOB.VPID;tcp://A,B:PORT;
 * tcp6://[C]:PORT"), else the local daemon's (OMPI_MCA_orte_local_daemon_uri,
 * which is this host's own address on that interface).
 */
void ft__boot_launcher_addrs(ft__env_fn *env, void *arg, char *dst, size_t cap);

/*
 * The first address book of in-band membership (membership.h): one entry
 * per rank, the host:port of its membership listener, at most
 * FT__BOOK_ENTRY_MAX bytes with the NUL. Three sources (docs/launchers.md, "Across
 * hosts"; config.c chooses one):
 *   "peers": the list itself is the book; mine is ignored and the rank
 *            listens where its own entry says.
 *   "pmix":  mine is put in the launcher's PMIx store, a fence waits for
 *            every rank, and every entry is read back (boot_pmix.c).
 *   "store": the same through the small store ftcc-run serves at p->store
 *            (boot_store.c; the server is tools/store_server.c).
 * Blocks up to p->timeout_ms. 0 and book[0..world_size-1] filled and
 * checked (each a host:port, or "" for a rank gone: only "store" says so,
 * when the launcher serving it saw the rank die before every rank joined;
 * every rank gets the same book, this rank's own entry never empty), or
 * -FT_ECONFIG (a malformed list or address, a store that refused this rank,
 * no PMIx server), -FT_ENOSYS (PMIx not
 * built in), -FT_ETIMEDOUT, -FT_EIO; the reason is logged.
 *
 * No secret travels: a book holds addresses only, and the in-band hellos
 * on the links it leads to check the job's token (keyed, never in clear).
 *
 * "pmix" keeps the process's PMIx client open from its first open until
 * the process exits (boot_pmix.c says why), so that an MPI_Init or
 * MPI_Finalize before or after ft_init or ft_finalize all work.
 */
#define FT__BOOK_ENTRY_MAX 64
struct ft__book_params {
	const char *how;        /* "pmix", "store" or "peers" */
	const char *store;      /* host:port */
	const char *peers;      /* comma-separated host:port, by rank */
	const char *job_id;
	const char *token;      /* the store's join proves it (NULL: the empty token) */
	int rank, world_size;
	int timeout_ms;
};
int ft__boot_book(const struct ft__book_params *p, const char *mine,
		  char (*book)[FT__BOOK_ENTRY_MAX]);
/*
 * Checks one entry, len bytes at s (no NUL needed): a host name, an IPv4
 * address or a bracketed IPv6 one ("[::1]"), ':', and a port 1..65535, in
 * fewer than FT__BOOK_ENTRY_MAX bytes. 0, or -FT_ECONFIG and *why says what
 * is wrong (a static string).
 */
int ft__boot_entry_check(const char *s, size_t len, const char **why);

/* The sources behind ft__boot_book, one file each; p is checked already. */
int ft__boot_pmix_book(const struct ft__book_params *p, const char *mine,
		       char (*book)[FT__BOOK_ENTRY_MAX]);
/* The job's token through PMIx: rank 0 makes it and puts it, every rank
 * reads it after a fence (token.c). 0 and token (cap >= 65), or an error. */
int ft__boot_pmix_token(const struct ft__book_params *p, char *token, size_t cap);
int ft__boot_store_book(const struct ft__book_params *p, const char *mine,
			char (*book)[FT__BOOK_ENTRY_MAX]);

#endif
