/* ftcc-run.c: the local launcher; starts, watches, restarts and fault-injects N ranks. */

/*
 * One thread, one loop. Everything that can happen (a line of output, a
 * child's death, a signal to us, a --kill or --timeout deadline) wakes a
 * single ppoll():
 *
 *   - each rank incarnation owns two pipes (stdout, stderr) whose read ends
 *     are nonblocking streams in the poll set; a stream lives until EOF or
 *     until the job ends, independently of its rank, so output of a killed
 *     incarnation is never mixed up with that of its successor;
 *   - signal handlers only write the signal number into a self-pipe;
 *     SIGCHLD makes the loop reap with waitpid(WNOHANG);
 *   - timers are absolute CLOCK_MONOTONIC deadlines; the poll timeout is
 *     the distance to the nearest one, so nothing ever spins.
 *
 * Every rank is the leader of its own process group, so a terminal's ^C
 * reaches only us (we forward it once), and a signal to a rank reaches
 * the whole rank, shell wrappers and their children included.
 *
 * When a rank's leader is reaped, all it wrote is already in its pipes
 * (a writer cannot exit while blocked on a full pipe), so we drain them
 * before printing its death: its last lines come before the obituary.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ftcc.h"
#include "sock.h"
#include "store_server.h"

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
	struct store *store;       /* the address store we serve, or NULL */
	pid_t *dead;               /* ranks' pids that exited: their shm regions go at the end */
	size_t ndead, dead_cap;
};

static int sig_pipe[2] = { -1, -1 };
/* Lets the launch loop stop early on ^C; everything else goes through sig_pipe. */
static volatile sig_atomic_t stop_requested;

static const struct {
	int sig;
	const char *name;
} sig_names[] = {
	{ SIGHUP, "HUP" },   { SIGINT, "INT" },       { SIGQUIT, "QUIT" }, { SIGILL, "ILL" },
	{ SIGTRAP, "TRAP" }, { SIGABRT, "ABRT" },     { SIGBUS, "BUS" },   { SIGFPE, "FPE" },
	{ SIGKILL, "KILL" }, { SIGUSR1, "USR1" },     { SIGSEGV, "SEGV" }, { SIGUSR2, "USR2" },
	{ SIGPIPE, "PIPE" }, { SIGALRM, "ALRM" },     { SIGTERM, "TERM" }, { SIGCHLD, "CHLD" },
	{ SIGCONT, "CONT" }, { SIGSTOP, "STOP" },     { SIGTSTP, "TSTP" }, { SIGTTIN, "TTIN" },
	{ SIGTTOU, "TTOU" }, { SIGURG, "URG" },       { SIGXCPU, "XCPU" }, { SIGXFSZ, "XFSZ" },
	{ SIGVTALRM, "VTALRM" }, { SIGPROF, "PROF" }, { SIGWINCH, "WINCH" }, { SIGIO, "IO" },
	{ SIGPWR, "PWR" },   { SIGSYS, "SYS" },
};

static const char *sig_name(int sig)
{
	for (size_t i = 0; i < sizeof(sig_names) / sizeof(sig_names[0]); i++)
		if (sig_names[i].sig == sig)
			return sig_names[i].name;
	return NULL;
}

static double elapsed(const struct launcher *L)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - L->t0.tv_sec) + (double)(now.tv_nsec - L->t0.tv_nsec) / 1e9;
}

/* Whole buffer to fd; a reader that went away (EPIPE) silences that fd, it does not kill us. */
static void write_all(struct launcher *L, int fd, const char *p, size_t len)
{
	if (L && fd >= 0 && fd <= 2 && L->out_closed[fd])
		return;
	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n >= 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			/* An inherited nonblocking stdout: wait for room rather than drop lines. */
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };

			(void)poll(&pfd, 1, -1);
			continue;
		}
		if (L && fd >= 0 && fd <= 2)
			L->out_closed[fd] = true;
		return;
	}
}

__attribute__((format(printf, 2, 3))) static void msg(struct launcher *L, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	memcpy(line, PROG ": ", sizeof(PROG ": ") - 1);
	va_start(ap, fmt);
	n = vsnprintf(line + sizeof(PROG ": ") - 1, sizeof(line) - sizeof(PROG ": "), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	size_t len = strlen(line);
	line[len++] = '\n';
	write_all(L, STDERR_FILENO, line, len);
}

static int buf_reserve(struct buf *b, size_t more)
{
	if (b->cap - b->len >= more)
		return 0;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap - b->len < more)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

static int buf_add(struct buf *b, const char *p, size_t len)
{
	if (buf_reserve(b, len) < 0)
		return -ENOMEM;
	memcpy(b->p + b->len, p, len);
	b->len += len;
	return 0;
}

/* ---- signals ------------------------------------------------------------------ */

static void on_signal(int sig)
{
	int saved = errno;
	unsigned char c = (unsigned char)sig;

	if (sig != SIGCHLD)
		stop_requested = 1;
	/* A full pipe loses a byte; SIGCHLD reaps everything anyway and one ^C is enough. */
	ssize_t r = write(sig_pipe[1], &c, 1);
	(void)r;
	errno = saved;
}

static const int caught_signals[] = { SIGCHLD, SIGINT, SIGTERM, SIGHUP };

static int setup_signals(void)
{
	struct sigaction sa;

	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(caught_signals) / sizeof(caught_signals[0]); i++)
		if (sigaction(caught_signals[i], &sa, NULL) < 0)
			return -errno;
	/* Our stdout may be a pipe to `head`; losing it must not kill the ranks' launcher. */
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

/* ---- argument parsing ------------------------------------------------------------ */

static void usage(FILE *f)
{
	fputs("Usage: " PROG " -n N [OPTIONS] [--] PROGRAM [ARGS...]\n"
	      "       " PROG " --store [HOST:]PORT [--timeout T]\n"
	      "\n"
	      "Start N local ranks of PROGRAM for ftcc, prefix every line they print with\n"
	      "\"[RANK] \", and exit with the worst rank's status.\n"
	      "\n"
	      "Options:\n"
	      "  -n, --np N            number of ranks, 1..1024\n"
	      "      --restart         restart a rank that dies abnormally (nonzero exit or\n"
	      "                        signal) under the same rank with FTCC_INCARNATION+1;\n"
	      "                        a clean exit 0 is never restarted\n"
	      "      --max-restarts K  at most K restarts per rank (default 3; implies --restart)\n"
	      "      --kill R@T[:SIG]  T seconds after launch (fractions allowed, e.g. 2@0.5),\n"
	      "                        send SIG to rank R (its whole process group). SIG is\n"
	      "                        KILL (default), TERM, STOP, CONT, another name or a\n"
	      "                        number; STOP/CONT simulate a hung rank. Repeatable.\n"
	      "      --ignore-killed   ranks that ended after a --kill do not count towards\n"
	      "                        the exit status\n"
	      "      --timeout T       after T seconds SIGKILL every rank and exit 124\n"
	      "      --tag             longer prefix: \"[RANK.INCARNATION +SECONDS] \"\n"
	      "      --store [HOST:]PORT  serve the address store (README, \"Across hosts\")\n"
	      "                        at HOST (default every interface) and PORT (0: any);\n"
	      "                        with no PROGRAM, serve only, for ranks started by\n"
	      "                        something else: print FTCC_STORE=HOST:PORT on stdout and\n"
	      "                        serve until SIGINT or SIGTERM (exit 0) or --timeout;\n"
	      "                        a store alone takes joins only from ranks that prove\n"
	      "                        FTCC_TOKEN, which must be set to the ranks' token\n"
	      "                        (FTCC_AUTH=none: no token, anyone may join; a warning)\n"
	      "  -h, --help            show this help\n"
	      "\n"
	      "Environment of each rank: FTCC_RANK, FTCC_WORLD_SIZE, FTCC_INCARNATION (0, +1 on\n"
	      "each restart), FTCC_RENDEZVOUS (a private directory made under $TMPDIR or /tmp\n"
	      "and removed at exit), FTCC_JOB_ID (run-PID-HEX) and FTCC_TOKEN (32 random hex\n"
	      "digits). FTCC_RENDEZVOUS, FTCC_JOB_ID and FTCC_TOKEN already set are passed on\n"
	      "unchanged (and a rendezvous directory given that way is not removed).\n"
	      "With FTCC_MEMBERSHIP=inband and neither FTCC_PEERS nor FTCC_STORE set (nor\n"
	      "FTCC_BOOTSTRAP other than store), or with --store, the ranks get FTCC_STORE:\n"
	      "the address store this launcher serves (on 127.0.0.1 unless --store says).\n"
	      "FI_SHM_DISABLE_CMA=1 unless set: libfabric's shm provider then copies through\n"
	      "its own buffers, not CMA (see the README). The /dev/shm files of libfabric shm\n"
	      "endpoints that a rank leaves behind (killed, or exiting without ft_finalize)\n"
	      "are removed once it has exited.\n"
	      "Standard input of the ranks is /dev/null; their stdout goes to our stdout and\n"
	      "their stderr to our stderr, line by line. SIGINT, SIGTERM and SIGHUP are\n"
	      "forwarded to the ranks; a second SIGINT or SIGTERM kills them with SIGKILL.\n"
	      "\n"
	      "Exit status: 0 if every rank exited 0; else 128+SIG of the first rank that\n"
	      "died by signal SIG (and was not restarted successfully); else the largest exit\n"
	      "code. Ranks killed with --kill count like any other, so a fault test exits 137\n"
	      "whatever the survivors did: pass --ignore-killed to get the survivors' status\n"
	      "only, and check their own output. 124 on --timeout, 127 if PROGRAM cannot be\n"
	      "executed, 2 on a usage error, 1 if the launcher itself fails.\n",
	      f);
}

__attribute__((format(printf, 1, 2))) static void usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry '" PROG " --help' for more information.\n", stderr);
	exit(EXIT_USAGE);
}

static bool parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;

	if (*s == '\0' || *s == '+' || *s == '-' || *s == ' ')
		return false;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end != '\0' || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/* Seconds: plain decimal, finite, >= 0; *endp gets what follows the number. */
static bool parse_seconds(const char *s, double *out, const char **endp)
{
	char *end;

	if (!((*s >= '0' && *s <= '9') || *s == '.'))
		return false;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v < 0 || v > 1e9)
		return false;
	*out = v;
	*endp = end;
	return true;
}

static int parse_signal(const char *s)
{
	long n;

	if (parse_int(s, 1, SIGRTMAX, &n))
		return (int)n;
	if (strncasecmp(s, "SIG", 3) == 0)
		s += 3;
	for (size_t i = 0; i < sizeof(sig_names) / sizeof(sig_names[0]); i++)
		if (strcasecmp(s, sig_names[i].name) == 0)
			return sig_names[i].sig;
	return -1;
}

static void parse_kill(const char *spec, struct kill_event *ev)
{
	const char *at = strchr(spec, '@');
	const char *rest;
	char rankbuf[16];
	long r;

	if (!at || at == spec || (size_t)(at - spec) >= sizeof(rankbuf))
		usage_error("--kill %s: expected RANK@SECONDS[:SIGNAL], e.g. 2@0.5", spec);
	memcpy(rankbuf, spec, (size_t)(at - spec));
	rankbuf[at - spec] = '\0';
	if (!parse_int(rankbuf, 0, MAX_RANKS - 1, &r))
		usage_error("--kill %s: bad rank '%s'", spec, rankbuf);
	if (!parse_seconds(at + 1, &ev->at, &rest) || (*rest != '\0' && *rest != ':'))
		usage_error("--kill %s: bad time '%s' (seconds, e.g. 0.5)", spec, at + 1);
	ev->sig = SIGKILL;
	if (*rest == ':') {
		ev->sig = parse_signal(rest + 1);
		if (ev->sig < 0)
			usage_error("--kill %s: unknown signal '%s' (STOP, CONT, TERM, KILL or a "
				    "number)",
				    spec, rest + 1);
	}
	ev->spec = spec;
	ev->rank = (int)r;
	ev->done = false;
}

enum {
	OPT_RESTART = 256, OPT_MAX_RESTARTS, OPT_KILL, OPT_TIMEOUT, OPT_TAG, OPT_IGNORE_KILLED,
	OPT_STORE
};

static void parse_args(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "np", required_argument, NULL, 'n' },
		{ "restart", no_argument, NULL, OPT_RESTART },
		{ "max-restarts", required_argument, NULL, OPT_MAX_RESTARTS },
		{ "kill", required_argument, NULL, OPT_KILL },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "tag", no_argument, NULL, OPT_TAG },
		{ "ignore-killed", no_argument, NULL, OPT_IGNORE_KILLED },
		{ "store", required_argument, NULL, OPT_STORE },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	long v;
	const char *rest;
	int c;

	memset(o, 0, sizeof(*o));
	o->nranks = -1;
	o->max_restarts = DEFAULT_MAX_RESTARTS;
	opterr = 0;
	/* '+': stop at PROGRAM, so its own options are left alone. */
	while ((c = getopt_long(argc, argv, "+:n:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (!parse_int(optarg, 1, MAX_RANKS, &v))
				usage_error("-n %s: the number of ranks must be 1..%d", optarg,
					    MAX_RANKS);
			o->nranks = (int)v;
			break;
		case OPT_RESTART:
			o->restart = true;
			break;
		case OPT_MAX_RESTARTS:
			if (!parse_int(optarg, 0, INT_MAX, &v))
				usage_error("--max-restarts %s: expected a count >= 0", optarg);
			o->max_restarts = (int)v;
			o->restart = true;
			break;
		case OPT_KILL: {
			struct kill_event *k = realloc(o->kills, (o->nkills + 1) * sizeof(*k));
			if (!k) {
				fprintf(stderr, PROG ": out of memory\n");
				exit(EXIT_LAUNCHER);
			}
			o->kills = k;
			parse_kill(optarg, &o->kills[o->nkills++]);
			break;
		}
		case OPT_TIMEOUT:
			if (!parse_seconds(optarg, &o->timeout, &rest) || *rest != '\0' ||
			    o->timeout <= 0)
				usage_error("--timeout %s: expected seconds > 0", optarg);
			break;
		case OPT_TAG:
			o->tag = true;
			break;
		case OPT_IGNORE_KILLED:
			o->ignore_killed = true;
			break;
		case OPT_STORE:
			o->store = optarg;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case ':':
			usage_error("option '%s' needs an argument", argv[optind - 1]);
			break;
		default:
			if (optopt && optopt < 256)
				usage_error("unknown option '-%c'", optopt);
			usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (o->store != NULL && o->nranks < 0 && optind >= argc) {
		if (o->restart || o->nkills > 0 || o->ignore_killed || o->tag)
			usage_error("--store with no PROGRAM serves the store only: no rank options");
		return;
	}
	if (o->nranks < 0)
		usage_error("missing -n N (number of ranks)");
	if (optind >= argc)
		usage_error("missing PROGRAM to run");
	for (size_t i = 0; i < o->nkills; i++)
		if (o->kills[i].rank >= o->nranks)
			usage_error("--kill %s: rank %d out of range 0..%d", o->kills[i].spec,
				    o->kills[i].rank, o->nranks - 1);
	o->argv = argv + optind;
}

/* ---- job environment ---------------------------------------------------------- */

static int random_bytes(unsigned char *p, size_t n)
{
	while (n > 0) {
		ssize_t r = getrandom(p, n, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			break;
		p += r;
		n -= (size_t)r;
	}
	if (n == 0)
		return 0;
	/* Kernels before 3.17 have no getrandom. */
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (n > 0) {
		ssize_t r = read(fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			int err = r < 0 ? -errno : -EIO;
			close(fd);
			return err;
		}
		p += r;
		n -= (size_t)r;
	}
	close(fd);
	return 0;
}

static int random_hex(char *out, size_t nbytes)
{
	unsigned char raw[32];
	int err;

	if (nbytes > sizeof(raw))
		return -EINVAL;
	err = random_bytes(raw, nbytes);
	if (err < 0)
		return err;
	for (size_t i = 0; i < nbytes; i++)
		snprintf(out + 2 * i, 3, "%02x", raw[i]);
	return 0;
}

static bool env_set(const char *name)
{
	const char *v = getenv(name);
	return v && *v;
}

/* Rendezvous, job id and token: made here once, inherited by every rank. */
static int setup_job_env(struct launcher *L)
{
	char hex[65];
	int err;

	if (!env_set("FTCC_RENDEZVOUS")) {
		const char *tmp = getenv("TMPDIR");
		char path[PATH_MAX];

		if (!tmp || !*tmp)
			tmp = "/tmp";
		if (snprintf(path, sizeof(path), "%s/ftcc-run-XXXXXX", tmp) >= (int)sizeof(path))
			return -ENAMETOOLONG;
		if (!mkdtemp(path)) {
			err = -errno;
			msg(L, "cannot create a rendezvous directory under %s: %s", tmp,
			    strerror(-err));
			return err;
		}
		L->rendezvous_made = strdup(path);
		if (!L->rendezvous_made || setenv("FTCC_RENDEZVOUS", path, 1) < 0)
			return -ENOMEM;
	}
	if (!env_set("FTCC_JOB_ID")) {
		char id[96];

		err = random_hex(hex, 4);
		if (err < 0)
			return err;
		snprintf(id, sizeof(id), "run-%ld-%s", (long)getpid(), hex);
		if (setenv("FTCC_JOB_ID", id, 1) < 0)
			return -ENOMEM;
		L->job_made = true;
	}
	if (!env_set("FTCC_TOKEN")) {
		err = random_hex(hex, 16);
		if (err < 0)
			return err;
		if (setenv("FTCC_TOKEN", hex, 1) < 0)
			return -ENOMEM;
	}
	char ws[16];
	snprintf(ws, sizeof(ws), "%d", L->opt.nranks);
	if (setenv("FTCC_WORLD_SIZE", ws, 1) < 0)
		return -ENOMEM;
	/*
	 * libfabric's shm provider reads this once per process, and ftcc, a
	 * library, does not set its process's environment: the launcher does.
	 * SAR copies are faster here and hold no region lock while they copy
	 * (a rank killed mid-CMA-copy wedges its senders); README, "shm copies".
	 */
	if (setenv("FI_SHM_DISABLE_CMA", "1", 0) < 0)
		return -ENOMEM;
	return 0;
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if ((type == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT)
		return -1;
	return 0;
}

static void remove_rendezvous(struct launcher *L)
{
	if (!L->rendezvous_made)
		return;
	if (nftw(L->rendezvous_made, rm_entry, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT)
		msg(L, "cannot remove rendezvous directory %s: %s", L->rendezvous_made,
		    strerror(errno));
	free(L->rendezvous_made);
	L->rendezvous_made = NULL;
}

/*
 * The pairwise logs of a job whose id this launcher made: no restart can
 * use them once it ends (a new run gets a new id), and a job killed at its
 * --timeout (or by a signal) never finalizes, which is when ranks remove
 * their own. Where the library puts them (FTCC_LOG_DIR, else its default
 * roots for either durability), under the job id.
 */
static void remove_job_logs(struct launcher *L)
{
	const char *dir = getenv("FTCC_LOG_DIR"), *tmp = getenv("TMPDIR"), *job;
	char roots[3][PATH_MAX], path[PATH_MAX + 128];
	int n = 0;

	if (!L->job_made || (job = getenv("FTCC_JOB_ID")) == NULL)
		return;
	if (dir != NULL && *dir != '\0') {
		snprintf(roots[n++], sizeof(roots[0]), "%s", dir);
	} else {
		snprintf(roots[n++], sizeof(roots[0]), "/dev/shm/ftcc-log-%u", (unsigned)getuid());
		snprintf(roots[n++], sizeof(roots[0]), "%s/ftcc-log-%u",
			 tmp != NULL && *tmp != '\0' ? tmp : "/tmp", (unsigned)getuid());
	}
	for (int i = 0; i < n; i++) {
		if (snprintf(path, sizeof(path), "%s/%s", roots[i], job) >= (int)sizeof(path))
			continue;
		if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT)
			msg(L, "cannot remove the job's logs in %s: %s", path, strerror(errno));
	}
}

/* 1024 ranks need two pipes each: more than the usual soft limit of 1024 fds. */
static void raise_fd_limit(struct launcher *L)
{
	struct rlimit rl;
	/* two pipes per rank, and a connection per rank to the store we may serve */
	rlim_t need = L->opt.nranks > 0 ? (rlim_t)L->opt.nranks * 3 + 64 : 65536 + 64;

	if (getrlimit(RLIMIT_NOFILE, &L->orig_nofile) < 0)
		return;
	rl = L->orig_nofile;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
		rl.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need) ? need : rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* ---- the address store ---------------------------------------------------------- */

static void store_say(void *arg, const char *line)
{
	msg(arg, "%s", line);
}

/* Ranks we launch get a store when they are to use one and name none. */
static bool store_wanted(const struct launcher *L)
{
	const char *m = getenv("FTCC_MEMBERSHIP"), *b = getenv("FTCC_BOOTSTRAP");

	if (L->opt.store != NULL)
		return true;
	return m != NULL && strcmp(m, "inband") == 0 && !env_set("FTCC_PEERS") &&
	       !env_set("FTCC_STORE") && (b == NULL || *b == '\0' || strcmp(b, "store") == 0);
}

/* --store [HOST:]PORT into host and port. */
static void store_arg(const char *arg, char *host, size_t hlen, char *port, size_t plen)
{
	const char *p = strrchr(arg, ':');
	long v;

	host[0] = '\0';
	if (p == NULL)
		snprintf(port, plen, "%s", arg);
	else if (p == arg)
		snprintf(port, plen, "%s", arg + 1);
	else if (ft__sock_split(arg, host, hlen, port, plen) != 0)
		usage_error("--store %s: expected [HOST:]PORT, e.g. 0.0.0.0:5000 or [::1]:0", arg);
	if (strlen(port) >= plen - 1 || !parse_int(port, 0, 65535, &v))
		usage_error("--store %s: the port must be a number from 0 to 65535", arg);
}

/* The address to give for addr: a wildcard host becomes this host's name. */
static void store_shown(const char *addr, char *out, size_t cap)
{
	char host[256], port[16], name[256];

	if (ft__sock_split(addr, host, sizeof(host), port, sizeof(port)) == 0 &&
	    (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0) &&
	    gethostname(name, sizeof(name)) == 0) {
		name[sizeof(name) - 1] = '\0';
		snprintf(out, cap, "%s:%s", name, port);
	} else {
		snprintf(out, cap, "%s", addr);
	}
}

/*
 * Serves the store: at --store's address, else (for ranks we launch) at
 * 127.0.0.1 on a port the kernel picks. Ranks we launch find it in
 * FTCC_STORE; with no ranks, its address goes to stdout.
 */
static int start_store(struct launcher *L)
{
	char host[256] = "127.0.0.1", port[16] = "0", addr[320], shown[320];
	const char *token = getenv("FTCC_TOKEN"), *auth = getenv("FTCC_AUTH");
	int rc;

	if (L->opt.store != NULL)
		store_arg(L->opt.store, host, sizeof(host), port, sizeof(port));
	/* the ranks we launch always have one (setup_job_env); a store alone needs the job's */
	if (token == NULL || *token == '\0') {
		if (auth == NULL || strcmp(auth, "none") != 0) {
			msg(L, "the address store needs the job's token, to take joins only "
			       "from its ranks: set FTCC_TOKEN to the token the ranks have (or "
			       "FTCC_AUTH=none to let anyone who reaches the store join or "
			       "replace a rank)");
			return -EPERM;
		}
		msg(L, "warning: FTCC_AUTH=none: the store takes joins from anyone who reaches it");
		token = NULL;
	}
	rc = store_open(&L->store, host, port, token, L->opt.argv == NULL, store_say, L, addr,
			sizeof(addr));
	if (rc < 0) {
		msg(L, "cannot serve the address store at %s: %s",
		    L->opt.store != NULL ? L->opt.store : "127.0.0.1", ft_strerror(rc));
		return -EADDRNOTAVAIL;
	}
	store_shown(addr, shown, sizeof(shown));
	if (L->opt.argv != NULL)
		return setenv("FTCC_STORE", shown, 1) < 0 ? -ENOMEM : 0;
	msg(L, "serving the address store on %s", addr);
	char line[400];
	int n = snprintf(line, sizeof(line), "FTCC_STORE=%s\n", shown);
	write_all(L, STDOUT_FILENO, line, (size_t)n);
	return 0;
}

/* Serving the store is all we do: until a stop signal (0) or --timeout (124). */
static int serve_store_only(struct launcher *L)
{
	struct pollfd *pfds = NULL;
	size_t cap = 0;
	int status = 0;

	while (L->stop_signals == 0) {
		size_t need = 1 + store_poll_count(L->store), n;
		int wait = store_poll_timeout(L->store);
		if (need > cap) {
			struct pollfd *p = realloc(pfds, need * sizeof(*p));
			if (p == NULL) {
				msg(L, "out of memory: the store stops");
				status = EXIT_LAUNCHER;
				break;
			}
			pfds = p;
			cap = need;
		}
		if (L->opt.timeout > 0) {
			double left = L->opt.timeout - elapsed(L);
			if (left <= 0) {
				msg(L, "timeout after %g s: the store stops", L->opt.timeout);
				status = EXIT_TIMEOUT;
				break;
			}
			if (wait < 0 || left * 1000 < wait)
				wait = (int)(left * 1000) + 1;
		}
		pfds[0] = (struct pollfd){ .fd = sig_pipe[0], .events = POLLIN };
		n = store_poll_fill(L->store, pfds + 1);
		for (size_t i = 0; i < 1 + n; i++)
			pfds[i].revents = 0;
		if (poll(pfds, 1 + n, wait) < 0 && errno != EINTR)
			break;
		store_handle(L->store, pfds + 1, n);
		unsigned char sigs[64];
		ssize_t k;
		while ((k = read(sig_pipe[0], sigs, sizeof(sigs))) > 0)
			for (ssize_t i = 0; i < k; i++)
				L->stop_signals += sigs[i] != SIGCHLD;
	}
	free(pfds);
	return status;
}

/* A closed fd 0/1/2 would be reused by a pipe, and dup2(fd, fd) keeps O_CLOEXEC. */
static void ensure_std_fds(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		int n = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
		if (n >= 0 && n != fd) {
			dup2(n, fd);
			close(n);
		}
	}
}

/* ---- output streams ---------------------------------------------------------- */

static int stream_add(struct launcher *L, int fd, int rank, int incarnation, bool is_err)
{
	if (L->nstreams == L->streams_cap) {
		size_t cap = L->streams_cap ? L->streams_cap * 2 : 64;
		struct stream *s = realloc(L->streams, cap * sizeof(*s));
		if (!s)
			return -ENOMEM;
		L->streams = s;
		L->streams_cap = cap;
	}
	L->streams[L->nstreams++] = (struct stream){
		.fd = fd, .rank = rank, .incarnation = incarnation, .is_err = is_err,
	};
	return 0;
}

/* Prefix and write every complete line; with `final`, the unterminated tail too. */
static void stream_emit(struct launcher *L, struct stream *s, bool final)
{
	char prefix[64];
	size_t plen, start = 0;

	if (L->opt.tag)
		plen = (size_t)snprintf(prefix, sizeof(prefix), "[%d.%d +%.3fs] ", s->rank,
					s->incarnation, elapsed(L));
	else
		plen = (size_t)snprintf(prefix, sizeof(prefix), "[%d] ", s->rank);
	L->out.len = 0;
	while (start < s->len) {
		char *nl = memchr(s->buf + start, '\n', s->len - start);
		size_t end;

		if (nl)
			end = (size_t)(nl - s->buf) + 1;
		else if (final || s->len - start >= LINE_LIMIT)
			end = s->len;
		else
			break;
		if (buf_add(&L->out, prefix, plen) < 0 ||
		    buf_add(&L->out, s->buf + start, end - start) < 0 ||
		    (!nl && buf_add(&L->out, "\n", 1) < 0))
			break; /* out of memory: the bytes stay queued for the next try */
		start = end;
	}
	if (start > 0) {
		memmove(s->buf, s->buf + start, s->len - start);
		s->len -= start;
	}
	write_all(L, s->is_err ? STDERR_FILENO : STDOUT_FILENO, L->out.p, L->out.len);
}

static void stream_close(struct launcher *L, struct stream *s)
{
	stream_emit(L, s, true);
	close(s->fd);
	s->fd = -1;
	free(s->buf);
	s->buf = NULL;
	s->len = s->cap = 0;
}

/* One read (or, with `drain`, until the pipe is empty); closes the stream at EOF. */
static void stream_read(struct launcher *L, struct stream *s, bool drain)
{
	do {
		if (s->cap - s->len < READ_CHUNK) {
			size_t cap = s->cap ? s->cap * 2 : 2 * READ_CHUNK;
			char *p = realloc(s->buf, cap);
			if (!p) {
				msg(L, "out of memory reading rank %d's output", s->rank);
				stream_close(L, s);
				return;
			}
			s->buf = p;
			s->cap = cap;
		}
		ssize_t n = read(s->fd, s->buf + s->len, s->cap - s->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			stream_close(L, s);
			return;
		}
		s->len += (size_t)n;
		stream_emit(L, s, false);
	} while (drain);
}

static void streams_compact(struct launcher *L)
{
	size_t j = 0;

	for (size_t i = 0; i < L->nstreams; i++)
		if (L->streams[i].fd >= 0)
			L->streams[j++] = L->streams[i];
	L->nstreams = j;
}

/* ---- ranks ----------------------------------------------------------------- */

static void signal_rank(struct rank *r, int sig)
{
	if (r->state != RANK_RUNNING)
		return;
	if (kill(-r->pid, sig) < 0)
		(void)kill(r->pid, sig);
}

static int signal_all(struct launcher *L, int sig)
{
	int n = 0;

	for (int i = 0; i < L->opt.nranks; i++)
		if (L->ranks[i].state == RANK_RUNNING) {
			signal_rank(&L->ranks[i], sig);
			n++;
		}
	return n;
}

static void set_env_int(const char *name, int v)
{
	char s[16];

	snprintf(s, sizeof(s), "%d", v);
	setenv(name, s, 1);
}

__attribute__((noreturn)) static void child_exec(struct launcher *L, struct rank *r, int out_w,
						 int err_w, int status_w)
{
	sigset_t none;
	int err;

	/* Own group: ^C reaches only the launcher, and --kill reaches the whole rank. */
	setpgid(0, 0);
	for (size_t i = 0; i < sizeof(caught_signals) / sizeof(caught_signals[0]); i++)
		signal(caught_signals[i], SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (nul < 0 || dup2(nul, STDIN_FILENO) < 0 || dup2(out_w, STDOUT_FILENO) < 0 ||
	    dup2(err_w, STDERR_FILENO) < 0)
		goto fail;
	(void)setrlimit(RLIMIT_NOFILE, &L->orig_nofile);
	set_env_int("FTCC_RANK", r->id);
	set_env_int("FTCC_INCARNATION", r->incarnation);
	execvp(L->opt.argv[0], L->opt.argv);
fail:
	err = errno;
	ssize_t n = write(status_w, &err, sizeof(err));
	(void)n;
	_exit(EXIT_NOEXEC);
}

static int make_pipe(int p[2])
{
	/* Both ends close on exec: a rank must not hold another rank's pipe open. */
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0) {
		int err = -errno;
		close(p[0]);
		close(p[1]);
		return err;
	}
	return 0;
}

/*
 * Start the current incarnation of r. Returns 0 once a child exists (even if
 * its exec failed: it then exits 127 and r->exec_failed is set), -errno if
 * no child could be made.
 */
static int launch_rank(struct launcher *L, struct rank *r)
{
	int outp[2], errp[2], stp[2];
	sigset_t all, old;
	int err;

	err = make_pipe(outp);
	if (err < 0)
		goto out;
	err = make_pipe(errp);
	if (err < 0)
		goto close_out;
	if (pipe2(stp, O_CLOEXEC) < 0) {
		err = -errno;
		goto close_err;
	}
	err = stream_add(L, outp[0], r->id, r->incarnation, false);
	if (err < 0)
		goto close_status;
	err = stream_add(L, errp[0], r->id, r->incarnation, true);
	if (err < 0) {
		L->nstreams--;
		goto close_status;
	}

	/* No handler of ours may run in the child between fork and exec. */
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	pid_t pid = fork();
	if (pid == 0)
		child_exec(L, r, outp[1], errp[1], stp[1]);
	err = pid < 0 ? -errno : 0;
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (err < 0) {
		L->nstreams -= 2;
		goto close_status;
	}
	setpgid(pid, pid); /* also here, so the group exists before we might signal it */
	close(outp[1]);
	close(errp[1]);
	close(stp[1]);

	r->pid = pid;
	r->state = RANK_RUNNING;
	r->started = elapsed(L);
	r->injected = 0;
	r->exec_failed = false;

	int child_err;
	ssize_t n;
	do
		n = read(stp[0], &child_err, sizeof(child_err));
	while (n < 0 && errno == EINTR);
	close(stp[0]);
	if (n == (ssize_t)sizeof(child_err)) {
		r->exec_failed = true;
		msg(L, "cannot execute %s: %s", L->opt.argv[0], strerror(child_err));
	}
	return 0;

close_status:
	close(stp[0]);
	close(stp[1]);
close_err:
	close(errp[0]);
	close(errp[1]);
close_out:
	close(outp[0]);
	close(outp[1]);
out:
	return err;
}

static void describe_status(char *s, size_t len, int wstatus)
{
	if (WIFSIGNALED(wstatus)) {
		int sig = WTERMSIG(wstatus);
		const char *name = sig_name(sig);

		if (name)
			snprintf(s, len, "killed by signal %d (SIG%s)", sig, name);
		else
			snprintf(s, len, "killed by signal %d", sig);
	} else {
		snprintf(s, len, "exited with status %d", WEXITSTATUS(wstatus));
	}
}

static void rank_exited(struct launcher *L, struct rank *r, int wstatus)
{
	double now = elapsed(L);
	char what[64];

	/* Its last words first: everything it wrote is in the pipes by now. */
	for (size_t i = 0; i < L->nstreams; i++) {
		struct stream *s = &L->streams[i];
		if (s->fd >= 0 && s->rank == r->id && s->incarnation == r->incarnation)
			stream_read(L, s, true);
	}

	r->wstatus = wstatus;
	r->by_kill = r->injected != 0;
	r->state = RANK_DONE;
	r->death_seq = ++L->deaths;
	if (r->exec_failed || (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0))
		return;

	describe_status(what, sizeof(what), wstatus);
	msg(L, "rank %d (pid %ld) %s after %.2f s", r->id, (long)r->pid, what, now - r->started);
	if (!L->opt.restart || L->shutting_down)
		return;
	if (r->restarts >= L->opt.max_restarts) {
		msg(L, "rank %d not restarted: it already had %d restart%s (--max-restarts)",
		    r->id, r->restarts, r->restarts == 1 ? "" : "s");
		return;
	}

	int prev_inc = r->incarnation;
	r->incarnation++;
	r->restarts++;
	int err = launch_rank(L, r);
	if (err < 0) {
		r->incarnation = prev_inc;
		r->restarts--;
		msg(L, "cannot restart rank %d: %s", r->id, strerror(-err));
		return;
	}
	msg(L, "restarted rank %d as pid %ld (incarnation %d, restart %d of %d)", r->id,
	    (long)r->pid, r->incarnation, r->restarts, L->opt.max_restarts);
}

/*
 * libfabric's shm provider keeps a file in /dev/shm per endpoint, named
 * "PID:UID:IDX" after its process, that only that process removes (closing
 * the endpoint, as ft_finalize does). A rank killed, or exiting without
 * ft_finalize, leaves them behind; they are removed when the job ends, for
 * each such pid that no process holds by then. Not at once: a survivor may
 * still hold the dead rank's request to connect, and shm 1.17 maps the
 * requester's region by name when it takes it, and crashes when the name is
 * gone (transports/fabric/shm.c).
 */
static void remove_shm_regions(pid_t pid)
{
	char prefix[48];
	size_t plen;
	struct dirent *e;
	DIR *d = opendir("/dev/shm");

	if (d == NULL)
		return;
	plen = (size_t)snprintf(prefix, sizeof(prefix), "%ld:%u:", (long)pid, (unsigned)getuid());
	while ((e = readdir(d)) != NULL) {
		const char *idx = e->d_name + plen;
		if (strncmp(e->d_name, prefix, plen) == 0 && *idx != '\0' &&
		    strspn(idx, "0123456789") == strlen(idx))
			unlinkat(dirfd(d), e->d_name, 0);
	}
	closedir(d);
}

/*
 * Rank r's process died: the store we serve for our ranks hears it. Its
 * word is the only sound one of a death before the job's first view is
 * settled (before the address book is complete no link to the rank exists
 * yet, and after it a refused connection is only suspicion), and without
 * it the others would wait for the rank until their connect timeout
 * (store_rank_died).
 */
static void tell_store(struct launcher *L, const struct rank *r, int wstatus)
{
	const char *job = getenv("FTCC_JOB_ID"), *rv = getenv("FTCC_RENDEZVOUS");
	char path[PATH_MAX + 160], text[32];
	int fd, n;

	if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
		L->some_done = true;
	/* a rank that ended well, or once another did, is no early death */
	if (L->store != NULL && L->opt.argv != NULL && job != NULL && !L->some_done)
		store_rank_died(L->store, job, (uint32_t)L->opt.nranks, (uint32_t)r->id);
	/*
	 * The file rendezvous hears it too: gone-<r> in the job's directory
	 * (when the rank got as far as making it). A rank killed before it
	 * took its lock leaves nothing there, and the others would wait for it
	 * until their connect timeout; with the marker they start without it.
	 * Its new incarnation (a restart) removes the marker as it takes the lock.
	 * Only a rank killed by a signal, and only before any rank finished: a
	 * rank that ended, or died once the job was ending, is no early death,
	 * and a mark for it let a rank restarted after the job's end start a
	 * new job of its own (the campaign's split).
	 */
	if (!WIFSIGNALED(wstatus) || L->some_done)
		return;
	if (rv == NULL || job == NULL ||
	    snprintf(path, sizeof(path), "%s/%s", rv, job) >= (int)sizeof(path) ||
	    (mkdir(path, 0700) != 0 && errno != EEXIST) ||
	    snprintf(path, sizeof(path), "%s/%s/gone-%d", rv, job, r->id) >= (int)sizeof(path))
		return;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	n = snprintf(text, sizeof(text), "%ld\n", (long)r->pid);
	if (write(fd, text, (size_t)n) != n)
		msg(L, "cannot write %s: %s", path, strerror(errno));
	close(fd);
}

static void reap(struct launcher *L)
{
	for (;;) {
		siginfo_t si;
		int wstatus;
		pid_t pid;

		/* Look first without reaping: the pid stays this child's meanwhile. */
		memset(&si, 0, sizeof(si));
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (si.si_pid == 0)
			return;
		if (L->ndead == L->dead_cap) {
			size_t cap = L->dead_cap ? 2 * L->dead_cap : 16;
			pid_t *d = realloc(L->dead, cap * sizeof(*d));
			if (d != NULL) {
				L->dead = d;
				L->dead_cap = cap;
			}
		}
		if (L->ndead < L->dead_cap)
			L->dead[L->ndead++] = si.si_pid;
		else
			remove_shm_regions(si.si_pid); /* out of memory: now, as before */
		pid = waitpid(si.si_pid, &wstatus, 0);
		if (pid < 0 && errno == EINTR)
			continue;
		if (pid <= 0)
			return;
		for (int i = 0; i < L->opt.nranks; i++) {
			struct rank *r = &L->ranks[i];
			if (r->state == RANK_RUNNING && r->pid == pid) {
				tell_store(L, r, wstatus);
				rank_exited(L, r, wstatus);
				break;
			}
		}
	}
}

static void on_stop_signal(struct launcher *L, int sig)
{
	const char *name = sig_name(sig);

	L->stop_signals++;
	L->shutting_down = true;
	if (L->stop_signals == 1 || sig == SIGHUP) {
		int n = signal_all(L, sig);
		/* A rank stopped by --kill ...:STOP would never see it otherwise. */
		signal_all(L, SIGCONT);
		msg(L, "got SIG%s: forwarded to %d rank%s (send SIGINT again to kill them)", name,
		    n, n == 1 ? "" : "s");
	} else {
		int n = signal_all(L, SIGKILL);
		msg(L, "got SIG%s again: killing %d rank%s", name, n, n == 1 ? "" : "s");
	}
}

static void handle_signals(struct launcher *L)
{
	unsigned char sigs[64];
	bool child = false;
	ssize_t n;

	while ((n = read(sig_pipe[0], sigs, sizeof(sigs))) > 0 || (n < 0 && errno == EINTR)) {
		for (ssize_t i = 0; i < n; i++) {
			if (sigs[i] == SIGCHLD)
				child = true;
			else
				on_stop_signal(L, sigs[i]);
		}
	}
	if (child)
		reap(L);
}

static void fire_kill(struct launcher *L, struct kill_event *ev, double now)
{
	struct rank *r = &L->ranks[ev->rank];
	const char *name = sig_name(ev->sig);
	char sname[32];

	ev->done = true;
	if (L->shutting_down)
		return;
	if (r->state != RANK_RUNNING) {
		msg(L, "--kill %s: rank %d is not running at %.2f s, nothing sent", ev->spec,
		    ev->rank, now);
		return;
	}
	if (name)
		snprintf(sname, sizeof(sname), "SIG%s", name);
	else
		snprintf(sname, sizeof(sname), "signal %d", ev->sig);
	if (ev->sig == SIGKILL)
		msg(L, "killing rank %d (pid %ld) at %.2f s", r->id, (long)r->pid, now);
	else
		msg(L, "sending %s to rank %d (pid %ld) at %.2f s", sname, r->id, (long)r->pid, now);
	signal_rank(r, ev->sig);
	if (ev->sig != SIGSTOP && ev->sig != SIGCONT && ev->sig != SIGTSTP &&
	    ev->sig != SIGTTIN && ev->sig != SIGTTOU && ev->sig != SIGWINCH &&
	    ev->sig != SIGCHLD && ev->sig != SIGURG)
		r->injected = ev->sig;
}

/* Handle deadlines that have passed; return seconds to the next one, or -1 for none. */
static double run_timers(struct launcher *L)
{
	double now = elapsed(L), next = -1;

	if (L->opt.timeout > 0 && !L->timed_out) {
		if (now >= L->opt.timeout) {
			L->timed_out = true;
			L->shutting_down = true;
			int n = signal_all(L, SIGKILL);
			msg(L, "timeout after %g s: killing %d rank%s", L->opt.timeout, n,
			    n == 1 ? "" : "s");
		} else {
			next = L->opt.timeout - now;
		}
	}
	for (size_t i = 0; i < L->opt.nkills; i++) {
		struct kill_event *ev = &L->opt.kills[i];

		if (ev->done)
			continue;
		if (now >= ev->at)
			fire_kill(L, ev, now);
		else if (next < 0 || ev->at - now < next)
			next = ev->at - now;
	}
	return next;
}

static bool any_running(const struct launcher *L)
{
	for (int i = 0; i < L->opt.nranks; i++)
		if (L->ranks[i].state == RANK_RUNNING)
			return true;
	return false;
}

static int event_loop(struct launcher *L)
{
	struct pollfd *pfds = NULL;
	size_t pcap = 0;

	while (any_running(L)) {
		double wait = run_timers(L);
		if (!any_running(L))
			break;

		size_t need = L->nstreams + 1 + (L->store ? store_poll_count(L->store) : 0);
		if (pcap < need) {
			struct pollfd *p = realloc(pfds, need * sizeof(*p));
			if (!p) {
				free(pfds);
				return -ENOMEM;
			}
			pfds = p;
			pcap = need;
		}
		pfds[0] = (struct pollfd){ .fd = sig_pipe[0], .events = POLLIN };
		for (size_t i = 0; i < L->nstreams; i++)
			pfds[i + 1] = (struct pollfd){ .fd = L->streams[i].fd, .events = POLLIN };
		/* the store's pollfds follow the streams' (and stay there: streams may be added) */
		size_t nfds = L->nstreams + 1, sfirst = nfds, nstore = 0;
		if (L->store) {
			int ms = store_poll_timeout(L->store);
			nstore = store_poll_fill(L->store, pfds + sfirst);
			nfds += nstore;
			if (ms >= 0 && (wait < 0 || ms / 1000.0 < wait))
				wait = ms / 1000.0;
		}

		struct timespec ts, *tsp = NULL;
		if (wait >= 0) {
			/* Round up: waking a hair late beats a wasted early wake-up. */
			ts.tv_sec = (time_t)wait;
			ts.tv_nsec = (long)((wait - (double)ts.tv_sec) * 1e9) + 1000;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			tsp = &ts;
		}
		for (size_t i = 0; i < nfds; i++)
			pfds[i].revents = 0;
		int n = ppoll(pfds, nfds, tsp, NULL);
		if (n < 0 && errno != EINTR) {
			int err = -errno;
			free(pfds);
			return err;
		}
		if (L->store)
			store_handle(L->store, pfds + sfirst, nstore); /* its deadlines, too */
		if (n <= 0)
			continue;
		/* Output first, then deaths: reaping drains, so nothing is lost either way. */
		for (size_t i = 1; i < sfirst; i++) {
			struct stream *s = &L->streams[i - 1];
			if (pfds[i].revents && s->fd >= 0)
				stream_read(L, s, false);
		}
		if (pfds[0].revents)
			handle_signals(L);
		streams_compact(L);
	}
	free(pfds);
	return 0;
}

static int exit_status(const struct launcher *L)
{
	const struct rank *first_sig = NULL;
	int worst = 0;

	if (L->timed_out)
		return EXIT_TIMEOUT;
	if (L->initial_exec_failed)
		return EXIT_NOEXEC;
	if (L->launch_error)
		return EXIT_LAUNCHER;
	for (int i = 0; i < L->opt.nranks; i++) {
		const struct rank *r = &L->ranks[i];

		if (r->state != RANK_DONE || (L->opt.ignore_killed && r->by_kill))
			continue;
		if (WIFSIGNALED(r->wstatus)) {
			if (!first_sig || r->death_seq < first_sig->death_seq)
				first_sig = r;
		} else if (WEXITSTATUS(r->wstatus) > worst) {
			worst = WEXITSTATUS(r->wstatus);
		}
	}
	if (first_sig)
		return 128 + WTERMSIG(first_sig->wstatus);
	return worst;
}

int main(int argc, char **argv)
{
	struct launcher launcher, *L = &launcher;
	int err;

	memset(L, 0, sizeof(*L));
	parse_args(argc, argv, &L->opt);
	ensure_std_fds();
	if (L->opt.argv == NULL) {
		/* --store alone */
		raise_fd_limit(L);
		clock_gettime(CLOCK_MONOTONIC, &L->t0);
		if ((err = setup_signals()) < 0) {
			msg(L, "cannot set up signal handling: %s", strerror(-err));
			return EXIT_LAUNCHER;
		}
		if (start_store(L) < 0)
			return EXIT_LAUNCHER;
		err = serve_store_only(L);
		store_close(L->store);
		return err;
	}

	L->ranks = calloc((size_t)L->opt.nranks, sizeof(*L->ranks));
	if (!L->ranks) {
		msg(L, "out of memory");
		return EXIT_LAUNCHER;
	}
	for (int i = 0; i < L->opt.nranks; i++)
		L->ranks[i].id = i;
	raise_fd_limit(L);
	err = setup_signals();
	if (err < 0) {
		msg(L, "cannot set up signal handling: %s", strerror(-err));
		return EXIT_LAUNCHER;
	}
	err = setup_job_env(L);
	if (err == 0 && store_wanted(L))
		err = start_store(L);
	if (err < 0) {
		msg(L, "cannot set up the job environment: %s", strerror(-err));
		remove_rendezvous(L);
		store_close(L->store);
		return EXIT_LAUNCHER;
	}

	clock_gettime(CLOCK_MONOTONIC, &L->t0);
	/* the launcher's clock, so that ranks can report times on the same base */
	char t0[32];
	snprintf(t0, sizeof(t0), "%lld",
		 (long long)L->t0.tv_sec * 1000000000LL + (long long)L->t0.tv_nsec);
	setenv("FTCC_RUN_T0_NS", t0, 1);
	for (int i = 0; i < L->opt.nranks && !stop_requested; i++) {
		struct rank *r = &L->ranks[i];

		err = launch_rank(L, r);
		if (err < 0) {
			msg(L, "cannot start rank %d: %s", i, strerror(-err));
			L->launch_error = true;
			break;
		}
		if (r->exec_failed) {
			/* The same exec would fail for every rank: say it once. */
			L->initial_exec_failed = true;
			break;
		}
	}
	if (L->launch_error || L->initial_exec_failed) {
		L->shutting_down = true;
		signal_all(L, SIGKILL);
	}

	err = event_loop(L);
	if (err < 0) {
		msg(L, "event loop failed: %s; killing all ranks", strerror(-err));
		signal_all(L, SIGKILL);
		L->launch_error = true;
		while (any_running(L)) {
			int wstatus;
			pid_t pid = waitpid(-1, &wstatus, 0);
			if (pid < 0 && errno != EINTR)
				break;
			for (int i = 0; pid > 0 && i < L->opt.nranks; i++)
				if (L->ranks[i].state == RANK_RUNNING && L->ranks[i].pid == pid)
					L->ranks[i].state = RANK_DONE;
		}
	}

	/* Leftover writers (a rank's background children) may keep pipes open: stop here. */
	for (size_t i = 0; i < L->nstreams; i++) {
		struct stream *s = &L->streams[i];
		if (s->fd >= 0)
			stream_read(L, s, true);
		if (s->fd >= 0)
			stream_close(L, s);
	}
	for (size_t i = 0; i < L->ndead; i++)
		if (kill(L->dead[i], 0) != 0 && errno == ESRCH)
			remove_shm_regions(L->dead[i]);
	free(L->dead);
	remove_rendezvous(L);
	remove_job_logs(L);
	store_close(L->store);

	int status = exit_status(L);
	free(L->streams);
	free(L->out.p);
	free(L->ranks);
	free(L->opt.kills);
	return status;
}
