/* testutil.h: run a function as N real rank processes under a deadline, for multi-process tests (compiled once: testutil.c). */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_TESTUTIL_H
#define FTCC_TESTUTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <ftcc.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int (*tu_rank_fn)(struct ft_comm *comm, int rank, int n, void *arg);

struct tu_job {
	char dir[256];
	char job_id[64];
	int n;
	pid_t pids[64];
	pid_t spawned[64];      /* every process spawned, for tu_job_cleanup */
	int nspawned;
	int status[64];
	/* FTCC_TEST_MEMBERSHIP=inband: each rank's membership port, held
	 * bound (not listening) by the test so that no other socket takes it */
	char peers[4096];
	int port_fd[64];
};

/* CLOCK_MONOTONIC in milliseconds. */
long tu_now_ms(void);

/* Sleeps ms milliseconds (whole, across signals). */
void tu_sleep_ms(long ms);

/* A configuration for rank `rank` of a fresh job in job->dir. */
void tu_config(const struct tu_job *job, int rank, struct ft_config *cfg);

/* A fresh job of n ranks: its rendezvous directory, job id and (in-band) ports. */
void tu_job_init(struct tu_job *job, int n);

/* Starts rank r as a child that runs fn after ft_init (exit status = fn's result). */
void tu_spawn(struct tu_job *job, int r, tu_rank_fn fn, void *arg,
	      void (*tweak)(struct ft_config *, int));

/* FTCC_TEST_HANG_STACKS=1: print a hung rank's threads (gdb) before it is killed. */
void tu_dump_stack(pid_t pid);

/*
 * Waits for every rank until the deadline; ranks still alive then are killed
 * and reported as hung (status -1). Returns the number of ranks that did not
 * exit 0 (killed ranks in `expect_killed` are not counted).
 */
int tu_wait(struct tu_job *job, long deadline_ms, const int *expect_killed);

/*
 * As ftcc-run does when a job ends: the libfabric shm regions of ranks that
 * died without closing them ("PID:UID:IDX" in /dev/shm). The library leaves
 * a dead peer's region in place for a while (transports/fabric/shm.c), and
 * when its observers die too, no one else removes it.
 */
void tu_job_cleanup(struct tu_job *job);

/* Waits until `path` exists, polling every 2 ms; false once tu_now_ms() reaches end_ms. */
bool tu_wait_file(const char *path, long end_ms);

/* Waits until every rank of job has passed ft_init; 0, or -1 at the deadline. */
int tu_wait_ready(const struct tu_job *job, long deadline_ms);

/* The other end of socket fd: a socket of this process with the same addresses,
 * crossed (a test's own connection to a listener in this process). Fails the
 * test when there is none. */
int tu_peer_fd(int fd);

/* Runs fn on n ranks; returns the number of failed or hung ranks. */
int tu_run(int n, long deadline_ms, tu_rank_fn fn, void *arg);

/* Rank r of job again, as a new process of incarnation inc (FTCC_INCARNATION):
 * tu_config, tweak (may be NULL), ft_init, then fn when ft_init passed, then
 * ft_finalize when fn returned 0 (a rank whose fn failed leaves unfinalized,
 * as one sent away does). Returns the first error of the three, else 0; its
 * time in *ms. */
int tu_start_again(struct tu_job *job, int r, int inc, void (*tweak)(struct ft_config *, int),
		   tu_rank_fn fn, void *arg, int64_t *ms);

/* A hostile network: what anyone who can reach a port can do (no token). */
#define TU_HOSTILE_PORTS 64
/* Every port a rank of job listens on, at most TU_HOSTILE_PORTS: from the
 * rendezvous (data and control addresses of generation 0's member files)
 * and the in-band peer list (membership listeners, where new incarnations
 * listen again). Returns how many. */
int tu_listening_ports(const struct tu_job *job, uint16_t *ports);
/*
 * Forks the attacker, a process of its own until tu_hostile_stop (or this
 * process's death): on every port, it holds 40 idle connections (one opened
 * again whenever one is closed; a port nobody listens on yet is dialled
 * again and again), one slow one (a garbage byte a second), and keeps
 * opening connections that send a burst of garbage and close, and ones
 * reset at once.
 */
pid_t tu_hostile_start(const uint16_t *ports, int np);
/* Kills the attacker; false when it had died before (the attack stopped
 * early: a test that relied on it must fail). */
bool tu_hostile_stop(pid_t attacker);

#endif
