/* ftcc-run.h: the launcher's state and its files' shared functions (ftcc-run.c: ranks, signals and the event loop; run_args.c: the command line; run_env.c: the job's environment and address store; run_output.c: output and streams). */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_RUN_H
#define FTCC_RUN_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <time.h>

#define PROG "ftcc-run"
#define MAX_RANKS 1024
#define DEFAULT_MAX_RESTARTS 3
#define READ_CHUNK 16384
/* A "line" longer than this is cut, so one rank cannot make us grow without bound. */
#define LINE_LIMIT (64 * 1024)

#define EXIT_USAGE 2
#define EXIT_TIMEOUT 124
#define EXIT_NOEXEC 127
#define EXIT_LAUNCHER 1

enum rank_state { RANK_UNSTARTED, RANK_RUNNING, RANK_DONE };

struct rank {
	int id;
	enum rank_state state;
	pid_t pid;                 /* current incarnation (also its process group) */
	int incarnation;
	int restarts;
	double started;            /* seconds since launch, current incarnation */
	int injected;              /* signal --kill sent to this incarnation, 0 if none */
	bool exec_failed;
	/* Outcome of the last incarnation, valid once state == RANK_DONE. */
	int wstatus;
	bool by_kill;              /* it ended after a --kill */
	unsigned long death_seq;   /* order of final deaths, for "the first such" */
};

struct stream {
	int fd;                    /* -1 once closed */
	int rank;
	int incarnation;
	bool is_err;
	char *buf;
	size_t len, cap;
};

struct kill_event {
	const char *spec;          /* as given, for messages */
	int rank;
	double at;                 /* seconds after launch */
	int sig;
	bool done;
};

struct options {
	int nranks;
	bool restart;
	int max_restarts;
	bool ignore_killed;
	bool tag;
	double timeout;            /* 0 = none */
	struct kill_event *kills;
	size_t nkills;
	const char *store;         /* --store [HOST:]PORT, or NULL */
	char **argv;               /* PROGRAM ARGS...; NULL: serve the store only */
};

struct buf {
	char *p;
	size_t len, cap;
};

struct launcher {
	struct options opt;
	struct rank *ranks;
	struct stream *streams;
	size_t nstreams, streams_cap;
	struct buf out;            /* scratch for prefixed output */
	struct timespec t0;
	char *rendezvous_made;     /* directory we created and must remove, or NULL */
	bool job_made;             /* the job id is ours: its logs go when the job ends */
	bool some_done;            /* a rank exited 0: the job is ending */
	struct rlimit orig_nofile; /* restored in children */
	bool shutting_down;        /* no more restarts or --kill */
	bool timed_out;
	bool launch_error;
	bool initial_exec_failed;
	int stop_signals;          /* INT/TERM/HUP received */
	unsigned long deaths;
	bool out_closed[3];        /* our stdout/stderr hit EPIPE: drop further output */
	struct ft__store_server *store;       /* the address store we serve, or NULL */
	pid_t *dead;               /* ranks' pids that exited: their shm regions go at the end */
	size_t ndead, dead_cap;
};

/* ftcc-run.c */
double elapsed(const struct launcher *L);

/* run_output.c: launcher messages, rank output */
void write_all(struct launcher *L, int fd, const char *p, size_t len);
__attribute__((format(printf, 2, 3))) void msg(struct launcher *L, const char *fmt, ...);
int stream_add(struct launcher *L, int fd, int rank, int incarnation, bool is_err);
void stream_close(struct launcher *L, struct stream *s);
void stream_read(struct launcher *L, struct stream *s, bool drain);
void streams_compact(struct launcher *L);

/* run_args.c: the command line, signals by name */
const char *sig_name(int sig);
void parse_args(int argc, char **argv, struct options *o);
__attribute__((format(printf, 1, 2), noreturn)) void usage_error(const char *fmt, ...);
bool parse_int(const char *s, long lo, long hi, long *out);

/* run_env.c: the job's environment, its leftovers, the address store */
int setup_job_env(struct launcher *L);
void remove_rendezvous(struct launcher *L);
void remove_job_logs(struct launcher *L);
void raise_fd_limit(struct launcher *L);
int start_store(struct launcher *L);
bool store_wanted(const struct launcher *L);
void ensure_std_fds(void);

#endif
