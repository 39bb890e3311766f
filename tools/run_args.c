/* run_args.c: ftcc-run's command line: usage, numbers, times, signals and --kill specs, checked. */
/* SPDX-License-Identifier: MIT */
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
#include "config.h"
#include "ftcc-run.h"

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

const char *sig_name(int sig)
{
	for (size_t i = 0; i < sizeof(sig_names) / sizeof(sig_names[0]); i++)
		if (sig_names[i].sig == sig)
			return sig_names[i].name;
	return NULL;
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
	      "      --store [HOST:]PORT  serve the address store (docs/launchers.md)\n"
	      "                        at HOST (default every interface) and PORT (0: any);\n"
	      "                        with no PROGRAM, serve only, for ranks started by\n"
	      "                        something else: print FTCC_STORE=HOST:PORT on stdout and\n"
	      "                        serve until SIGINT or SIGTERM (exit 0) or --timeout;\n"
	      "                        a store alone takes joins only from ranks that prove\n"
	      "                        FTCC_TOKEN, which must be set to the ranks' token\n"
	      "                        (FTCC_AUTH=none: no token, anyone may join; a warning)\n"
	      "      --params          print every FTCC_* variable ftcc reads: its value here,\n"
	      "                        its default and what it means; then exit\n"
	      "      --params=markdown the reference page of every variable (type, range,\n"
	      "                        default, struct ft_config field); then exit\n"
	      "      --version         print the version; then exit\n"
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
	      "its own buffers, not CMA (see docs/launchers.md). The /dev/shm files of libfabric shm\n"
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

__attribute__((format(printf, 1, 2), noreturn)) void usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry '" PROG " --help' for more information.\n", stderr);
	exit(EXIT_USAGE);
}

bool parse_int(const char *s, long lo, long hi, long *out)
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
	OPT_STORE, OPT_PARAMS, OPT_VERSION
};

void parse_args(int argc, char **argv, struct options *o)
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
		{ "params", optional_argument, NULL, OPT_PARAMS },
		{ "version", no_argument, NULL, OPT_VERSION },
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
		case OPT_PARAMS:
			if (optarg != NULL && strcmp(optarg, "markdown") != 0)
				usage_error("--params=%s: expected --params or --params=markdown",
					    optarg);
			if (optarg != NULL)
				ft__config_doc(stdout);
			else
				ft__config_params(stdout);
			exit(fflush(stdout) == 0 ? 0 : EXIT_LAUNCHER);
		case OPT_VERSION:
			printf(PROG " %s\n", ft_version());
			exit(fflush(stdout) == 0 ? 0 : EXIT_LAUNCHER);
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
