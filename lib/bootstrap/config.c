/* config.c: the communicator configuration: its checks, its versioned import, and the one file that reads the environment. */
/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <stdbool.h>
#include <stddef.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "bootstrap.h"
#include "config.h"
#include "fault.h"
#include "internal.h"

/*
 * A detect timeout must leave room for a heartbeat the scheduler delays: at
 * least twice the heartbeat (a heartbeat may come a whole period late), and
 * at least DETECT_MIN_MS. Measured with 8 ranks on 2 cores (examples/train,
 * 3 runs each, nothing killed): at the heartbeat itself (100 ms) healthy
 * neighbours were declared 17 times, at 15 and 20 ms 4 times each; from 30
 * ms up, never in those short runs. The floor keeps a margin over that edge
 * for a busier machine. A shorter one is refused, not taken: it costs
 * healthy ranks.
 */
#define DETECT_MIN_MS 50
/* The most ranks a job may have (FTCC_WORLD_SIZE and cfg.world_size alike). */
#define FT__WORLD_MAX (1 << 20)
#define DETECT_RULE                                                                        \
	"the detect timeout (FTCC_DETECT_TIMEOUT_MS, %d ms) must be at least twice the "   \
	"heartbeat (FTCC_HEARTBEAT_MS, %d ms) and at least %d ms: shorter, a neighbour whose " \
	"heartbeat the scheduler delays is declared failed"

static bool detect_timeout_ok(const struct ft_config *cfg)
{
	return cfg->detect_timeout_ms >= DETECT_MIN_MS &&
	       (int64_t)cfg->detect_timeout_ms >= 2 * (int64_t)cfg->heartbeat_ms;
}

static int cfg_error(char *errbuf, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* <$TMPDIR or /tmp>/<name>-<uid>: a per-user directory in a shared place (checked private
 * where it is used: lib/util/file.h). */
static void per_user_dir(char *buf, size_t len, const char *name)
{
	const char *t = getenv("TMPDIR");

	snprintf(buf, len, "%s/%s-%u", t != NULL && *t != '\0' ? t : "/tmp", name,
		 (unsigned)getuid());
}

static int cfg_error(char *errbuf, size_t errlen, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (errbuf != NULL && errlen > 0)
		snprintf(errbuf, errlen, "%s", msg);
	ft__error("%s", msg);
	return -FT_ECONFIG;
}

/*
 * Every environment variable the library reads, it reads here (bootstrap.c
 * knows the launchers' variables and reads them through this function), at
 * ft_init or ft_config_from_env only: getenv races with a setenv in another
 * thread, so the fewer and earlier the reads, the better.
 */
static void size_words(char *buf, size_t len, long n);

static const char *process_env(const char *name, void *arg)
{
	(void)arg;
	return getenv(name);
}

/* Parses a whole decimal integer in [lo, hi]. */
static int parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;

	if (s == NULL || *s == '\0' || isspace((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* Parses a byte size with an optional K, M or G suffix. */
int ft__parse_size(const char *s, size_t *out)
{
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	if (s == NULL || !isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0)
		return -1;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if (shift != 0 && *end == 'i')
		end++;
	if (*end == 'B')
		end++;
	/* A shift that overflows would wrap to a small, valid-looking size. */
	if (*end != '\0' || v > (SIZE_MAX >> shift))
		return -1;
	*out = (size_t)(v << shift);
	return 0;
}

/*
 * Every FTCC_* variable, once: the field it sets, its kind and range, its
 * default and what it means. config_from_env and ft__config_tp_env parse
 * through it (the same checks and messages for all), ftcc-run --params
 * prints it (ft__config_params, with the values set here), ftcc-run
 * --params=markdown makes docs/environment.md of it (config_doc.c), and
 * test_config tries every entry's bounds. A field NULL is read from the
 * environment whatever ft_init is given (ft__config_tp_env).
 */
enum var_kind {
	V_BOOT,         /* read through the launcher's variables (bootstrap.c) */
	V_STR,          /* a string of at most cap - 1 characters */
	V_INT,          /* a decimal integer in [lo, hi] */
	V_ENUM,         /* one of names: its index */
	V_SIZE,         /* a size with K, M or G, in [lo, hi] */
	V_LEVEL,        /* a log level: a name or 0..3 */
};
enum var_home { H_NONE, H_CFG, H_TP };

/* The transports' knobs as parsed, before they become struct ft__tp_env. */
struct tp_knobs {
	int spin_us, tcp_buffer, max_msg, incarnation, wait, mr_local, guard, engine, link_ep, shm;
	int algorithm;
	size_t shm_bytes;
	int ckpt_where, ckpt_local;
	char provider[64], ep[8], ckpt_dir[512], ckpt_from[512];
};

struct var {
	const char *name;
	enum var_kind kind;
	enum var_home home;
	size_t off, cap;        /* the field, and a string field's size */
	const char *field;      /* struct ft_config's field; NULL: read from the environment only */
	long lo, hi;
	const char *const *names;
	int nnames;
	bool empty_unset;       /* "" reads as unset */
	const char *def;        /* the default, in words */
	const char *help;       /* one line: what it means */
	const char *values;     /* a string's values, in words; NULL: its length bound */
};

#define CFG_STR(f) H_CFG, offsetof(struct ft_config, f), sizeof(((struct ft_config *)0)->f), #f
#define CFG_NUM(f) CFG_STR(f)
#define TP_STR(f) H_TP, offsetof(struct tp_knobs, f), sizeof(((struct tp_knobs *)0)->f), NULL
#define TP_NUM(f) H_TP, offsetof(struct tp_knobs, f), sizeof(int), NULL
#define NAMES(a) a, (int)FT__ARRAY_SIZE(a)

static const char *const policies[] = {"abort", "shrink", "rejoin"};
static const char *const durabilities[] = {"none", "process", "host"};
static const char *const levels[] = {"error", "warn", "info", "debug"};
static const char *const waits[] = {"", "poll", "bell"};
static const char *const bits[] = {"0", "1"};
static const char *const engines[] = {"io_uring", "pwrite", "uring"};
static const char *const algorithms[] = {"auto", "ring", "rd", "rh"}; /* enum ft__tp_algo */
static const char *const wheres[] = {"", "disk", "disk+peer", "peer"}; /* enum ft_ckpt_where */

_Static_assert(sizeof(enum ft_policy) == sizeof(int) && sizeof(enum ft_durability) == sizeof(int),
	       "enum fields are parsed as int");

static const struct var vars[] = {
	{"FTCC_RANK", V_BOOT, H_NONE, 0, 0, "rank", 0, 0, NULL, 0, false, "the launcher's",
	 "this rank (else OMPI_COMM_WORLD_RANK, SLURM_PROCID in an srun step, PMI_RANK)",
	 .values = "0 .. world size - 1"},
	{"FTCC_WORLD_SIZE", V_BOOT, H_NONE, 0, 0, "world_size", 1, FT__WORLD_MAX, NULL, 0, false,
	 "the launcher's",
	 "the number of ranks (else OMPI_COMM_WORLD_SIZE, SLURM_STEP_NUM_TASKS in an srun step, "
	 "PMI_SIZE)", NULL},
	{"FTCC_RENDEZVOUS", V_STR, CFG_STR(rendezvous), 0, 0, NULL, 0, false,
	 "under mpirun, MPICH's mpiexec or srun: $TMPDIR/ftcc-<uid>; ftcc-run makes one",
	 "rendezvous directory every rank can reach (file membership)", NULL},
	{"FTCC_JOB_ID", V_STR, CFG_STR(job_id), 0, 0, NULL, 0, false, "the launcher's job",
	 "job identity, the same on every rank", .values = "letters, digits and -_.@:"},
	{"FTCC_TOKEN", V_STR, CFG_STR(token), 0, 0, NULL, 0, false,
	 "made and shared (file rendezvous or PMIx)",
	 "the job's secret, proved in every handshake and never sent; unset and nowhere to share "
	 "one made: ft_init refuses", NULL},
	{"FTCC_TRANSPORT", V_STR, CFG_STR(transport), 0, 0, NULL, 0, false, "tcp",
	 "the data links' transport: TCP or libfabric", .values = "tcp, fabric"},
	{"FTCC_BIND_HOST", V_STR, CFG_STR(bind_host), 0, 0, NULL, 0, false,
	 "127.0.0.1 when every rank is on this host, else the interface that reaches the peers",
	 "where to listen: an address, an interface name (eth0) or a wildcard (0.0.0.0 or ::, "
	 "every interface, the chosen address published)", NULL},
	{"FTCC_LOG_DIR", V_STR, CFG_STR(log_dir), 0, 0, NULL, 0, false,
	 "/dev/shm/ftcc-log-<uid>; $TMPDIR/ftcc-log-<uid> for durability host",
	 "the pairwise logs' directory", NULL},
	{"FTCC_FAULT", V_STR, CFG_STR(fault), 0, 0, NULL, 0, false, "none",
	 "failure injection points, for tests: see \"FTCC_FAULT\" below", NULL},
	{"FTCC_TRACE", V_STR, CFG_STR(trace), 0, 0, NULL, 0, false, "none",
	 "event trace file per rank (Chrome trace-event JSON): %r the rank (else .<rank> "
	 "appended), %p the process id", NULL},
	{"FTCC_MEMBERSHIP", V_STR, CFG_STR(membership), 0, 0, NULL, 0, false,
	 "inband when FTCC_PEERS or FTCC_STORE is set, or under mpirun or srun --mpi=pmix "
	 "across hosts; else file",
	 "how ranks find each other and agree on views: a rendezvous directory, or in-band "
	 "messages", .values = "file, inband"},
	{"FTCC_BOOTSTRAP", V_STR, CFG_STR(bootstrap), 0, 0, NULL, 0, false,
	 "peers if FTCC_PEERS is set, else store if FTCC_STORE is, else pmix",
	 "in-band membership's first addresses", .values = "peers, store, pmix"},
	{"FTCC_STORE", V_STR, CFG_STR(store), 0, 0, NULL, 0, false,
	 "none (ftcc-run sets it for in-band ranks it starts)",
	 "host:port of the address store (ftcc-run --store)", NULL},
	{"FTCC_PEERS", V_STR, CFG_STR(peers), 0, 0, NULL, 0, false, "none",
	 "host:port of every rank's membership listener, by rank, comma-separated (at most one "
	 "per rank)", NULL},
	{"FTCC_AUTH", V_STR, CFG_STR(auth), 0, 0, NULL, 0, false, "unset",
	 "none: run without a token, unauthenticated (warned once)", .values = "none"},
	{"FTCC_POLICY", V_ENUM, CFG_NUM(policy), 0, 0, NAMES(policies), false, "abort",
	 "what a failure does: every rank fails, the survivors go on, or a new incarnation is "
	 "awaited", NULL},
	{"FTCC_LOG_DURABILITY", V_ENUM, CFG_NUM(log_durability), 0, 0, NAMES(durabilities), false,
	 "process", "pairwise logs: none, shared memory (survives the process) or disk (the host)", NULL},
	{"FTCC_LOG_LEVEL", V_LEVEL, CFG_NUM(log_level), 0, 3, NAMES(levels), false, "warn",
	 "what the library prints on stderr", NULL},
	{"FTCC_HEARTBEAT_MS", V_INT, CFG_NUM(heartbeat_ms), 1, 3600000, NULL, 0, false, "100",
	 "the failure detector's heartbeat", NULL},
	{"FTCC_DETECT_TIMEOUT_MS", V_INT, CFG_NUM(detect_timeout_ms), 1, 3600000, NULL, 0, false,
	 "1000",
	 "heartbeat silence that declares a neighbour failed: at least twice the heartbeat, and "
	 "50; under shrink and rejoin also the data links' TCP keepalive", NULL},
	{"FTCC_REJOIN_TIMEOUT_MS", V_INT, CFG_NUM(rejoin_timeout_ms), 0, 3600000, NULL, 0, false,
	 "30000", "rejoin policy: how long the survivors wait for a new incarnation before they "
	 "shrink", NULL},
	{"FTCC_CONNECT_TIMEOUT_MS", V_INT, CFG_NUM(connect_timeout_ms), 1, 3600000, NULL, 0, false,
	 "30000", "rendezvous and link set-up deadline", NULL},
	{"FTCC_OP_TIMEOUT_MS", V_INT, CFG_NUM(op_timeout_ms), 0, INT_MAX, NULL, 0, false, "0",
	 "a collective with no progress this long fails with FT_ETIMEDOUT (0: never); under abort "
	 "also the data links' socket timeouts", NULL},
	{"FTCC_PIPELINE_DEPTH", V_INT, CFG_NUM(pipeline_depth), 1, 64, NULL, 0, false, "4",
	 "staging slots per link", NULL},
	{"FTCC_CRC", V_INT, CFG_NUM(crc), 0, 1, NULL, 0, false, "0", "1: CRC32C on every data frame", NULL},
	{"FTCC_SEGMENT_BYTES", V_SIZE, CFG_NUM(segment_bytes), 4096, FT__FRAME_MAX_PAYLOAD, NULL, 0,
	 false, "the transport's: 256K over TCP and over shm with CMA, 1M over other libfabric",
	 "pipeline segment, bytes with an optional K, M or G", NULL},
	{"FTCC_SPIN_US", V_INT, TP_NUM(spin_us), 0, 10000000, NULL, 0, false,
	 "1000 when this host's ranks fit its CPUs, else 0 (50, yielding, in recursive doubling and halving)",
	 "poll this long (yielding after the first sixteenth) before sleeping in the kernel", NULL},
	{"FTCC_TCP_BUFFER", V_INT, TP_NUM(tcp_buffer), 1, INT_MAX, NULL, 0, false,
	 "the kernel's autotuning", "SO_SNDBUF and SO_RCVBUF of the TCP data links, in bytes", NULL},
	{"FTCC_FABRIC_MAX_MSG", V_INT, TP_NUM(max_msg), 1, INT_MAX, NULL, 0, false, "the provider's",
	 "largest libfabric message (a debugging knob)", NULL},
	{"FTCC_INCARNATION", V_INT, TP_NUM(incarnation), 0, INT_MAX, NULL, 0, false, "0",
	 "set by ftcc-run: 0, then +1 per restart; above 0 this process is a rank's new "
	 "incarnation", NULL},
	{"FTCC_FABRIC_WAIT", V_ENUM, TP_NUM(wait), 0, 0, NAMES(waits), false, "chosen",
	 "how libfabric ranks wait for data: polling the completion queue, or a doorbell", NULL},
	{"FTCC_FABRIC_MR_LOCAL", V_ENUM, TP_NUM(mr_local), 0, 0, NAMES(bits), false, "0",
	 "1: register memory even when the provider does not ask (a debugging knob)", NULL},
	{"FTCC_SHM", V_ENUM, TP_NUM(shm), 0, 0, NAMES(bits), false, "1",
	 "0: collectives of ranks that all share one host stay on the ring instead of running in "
	 "shared memory (every FTCC_POLICY: docs/design.md, the one-host path)",
	 NULL},
	{"FTCC_ALGORITHM", V_ENUM, TP_NUM(algorithm), 0, 0, NAMES(algorithms), false, "auto",
	 "allreduce and barrier off the one-host path: auto (recursive doubling while the "
	 "message is at most 32K / log2(ranks); recursive halving and doubling from 3 ranks "
	 "while it is at most 16M / ranks^2, or 2M / ranks^2 when ranks is not a power of "
	 "two; the ring above), ring, rd (recursive doubling up to one segment) or rh "
	 "(recursive halving and doubling up to 16M); reduce-scatter and allgather on 4, 8, "
	 "16 ... ranks take halving or doubling alone up to 16M / ranks^2 (rh: 16M), a "
	 "broadcast of at most 64K a binomial tree (not under a detector), unless "
	 "ring; every rank must set the same (docs/design.md, algorithms)", NULL},
	{"FTCC_SHM_BYTES", V_SIZE, H_TP, offsetof(struct tp_knobs, shm_bytes), sizeof(size_t), NULL,
	 256 * 1024, 1024L * 1024 * 1024, NULL, 0, false, "512K",
	 "each rank's shared-memory segment (in /dev/shm, with a 4K header), bytes with an "
	 "optional K, M or G: collectives move through it in rounds of a quarter of it (rounds "
	 "that stay in the caches beat larger ones: docs/performance.md)", NULL},
	{"FTCC_SHM_GUARD", V_ENUM, TP_NUM(guard), 0, 0, NAMES(bits), false, "1",
	 "0: no guard thread freeing the libfabric shm locks a killed rank left held", NULL},
	{"FTCC_LOG_ENGINE", V_ENUM, TP_NUM(engine), 0, 0, NAMES(engines), false, "io_uring",
	 "pwrite: logs and checkpoints without io_uring; io_uring (or uring): io_uring, pwrite "
	 "where it cannot be set up", NULL},
	{"FTCC_FABRIC_LINK_EP", V_ENUM, TP_NUM(link_ep), 0, 0, NAMES(bits), true, "chosen",
	 "1: a libfabric endpoint per link, 0: one shared (a debugging knob)", NULL},
	{"FTCC_FABRIC_PROVIDER", V_STR, TP_STR(provider), 0, 0, NULL, 0, false,
	 "FI_PROVIDER, else chosen", "the libfabric provider (shm, tcp;ofi_rxm, ...)", NULL},
	{"FTCC_FABRIC_EP", V_STR, TP_STR(ep), 0, 0, NULL, 0, false, "chosen",
	 "the libfabric endpoint type (another value: both are tried)", .values = "rdm, msg"},
	{"FTCC_CKPT_DIR", V_STR, TP_STR(ckpt_dir), 0, 0, NULL, 0, false, "the log directory",
	 "running checkpoints' directory when ft_ckpt_config.dir is empty", NULL},
	{"FTCC_CKPT_FROM", V_STR, TP_STR(ckpt_from), 0, 0, NULL, 0, false, "none",
	 "an exported checkpoint (ftcc-ckpt export) the shards start from, when "
	 "ft_ckpt_config.from is empty", NULL},
	{"FTCC_CKPT_WHERE", V_ENUM, TP_NUM(ckpt_where), 0, 0, NAMES(wheres), false, "disk",
	 "where running checkpoints go when ft_ckpt_config.where is 0 (peer: the memory of a "
	 "rank on another host)", NULL},
	{"FTCC_CKPT_LOCAL", V_ENUM, TP_NUM(ckpt_local), 0, 0, NAMES(bits), false, "1",
	 "1: a fetch from a checkpoint holder on this kernel reads its memory in one copy; 0: "
	 "over the link", NULL},
};

/* Parses variable v from the environment into base (the struct of its home);
 * unset leaves the field as it is. */
static int parse_var(const struct var *v, void *base, char *errbuf, size_t errlen)
{
	const char *s = getenv(v->name);
	char *field = (char *)base + v->off;
	char allowed[128] = "";
	long n;

	if (s == NULL || (v->empty_unset && s[0] == '\0'))
		return 0;
	switch (v->kind) {
	case V_STR:
		if (strlen(s) >= v->cap)
			return cfg_error(errbuf, errlen, "%s is too long (at most %zu characters)",
					 v->name, v->cap - 1);
		memcpy(field, s, strlen(s) + 1);
		return 0;
	case V_INT:
		if (parse_long(s, v->lo, v->hi, &n) != 0)
			return cfg_error(errbuf, errlen, "%s='%s': expected an integer in [%ld, %ld]",
					 v->name, s, v->lo, v->hi);
		*(int *)(void *)field = (int)n;
		return 0;
	case V_SIZE: {
		size_t z;
		if (ft__parse_size(s, &z) != 0 || z < (size_t)v->lo || z > (size_t)v->hi) {
			char lo[24], hi[24];
			size_words(lo, sizeof(lo), v->lo);
			size_words(hi, sizeof(hi), v->hi);
			return cfg_error(errbuf, errlen, "%s='%s': expected a size from %s to %s",
					 v->name, s, lo, hi);
		}
		*(size_t *)(void *)field = z;
		return 0;
	}
	case V_LEVEL:
		if (parse_long(s, v->lo, v->hi, &n) == 0) {
			*(int *)(void *)field = (int)n;
			return 0;
		}
		__attribute__((fallthrough)); /* a level's name */
	case V_ENUM:
		for (int i = 0; i < v->nnames; i++) {
			if (strcmp(s, v->names[i]) == 0) {
				*(int *)(void *)field = i;
				return 0;
			}
			snprintf(allowed + strlen(allowed), sizeof(allowed) - strlen(allowed), "%s%s",
				 i ? ", " : "", v->names[i]);
		}
		return cfg_error(errbuf, errlen, "%s='%s': expected one of %s", v->name, s, allowed);
	case V_BOOT:
		return 0;
	}
	return 0;
}

/* Every variable of home into base, in the table's order; the first error wins. */
static int parse_home(enum var_home home, void *base, char *errbuf, size_t errlen)
{
	int rc;

	for (size_t i = 0; i < FT__ARRAY_SIZE(vars); i++)
		if (vars[i].home == home && (rc = parse_var(&vars[i], base, errbuf, errlen)) != 0)
			return rc;
	return 0;
}

void ft__config_params(FILE *out)
{
	struct ft__var_doc d;

	for (size_t i = 0; ft__config_var_doc(i, &d) == 0; i++) {
		const char *s = getenv(d.name);
		/* the token is a secret: only whether it is set */
		if (s != NULL && strcmp(d.name, "FTCC_TOKEN") == 0)
			s = "(set)";
		fprintf(out, "%-24s %-28s %s (%s); default: %s; %s\n", d.name,
			s != NULL ? s : "(unset)", d.type, d.range, d.def, d.help);
	}
}

size_t ft__config_var_count(void)
{
	return FT__ARRAY_SIZE(vars);
}

const char *ft__config_var_name(size_t i, long *lo, long *hi, int *kind)
{
	if (i >= FT__ARRAY_SIZE(vars))
		return NULL;
	*lo = vars[i].lo;
	*hi = vars[i].hi;
	*kind = vars[i].kind == V_INT ? 'i' : vars[i].kind == V_ENUM ? 'e' :
		vars[i].kind == V_STR ? 's' : vars[i].kind == V_SIZE ? 'z' :
		vars[i].kind == V_LEVEL ? 'l' : 'b';
	return vars[i].name;
}

/* n bytes as the parser takes them: 4K, 64M. */
static void size_words(char *buf, size_t len, long n)
{
	static const char units[] = "KMG";
	int u = -1;

	while (u < 2 && n >= 1024 && n % 1024 == 0) {
		n /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%ld", n);
	else
		snprintf(buf, len, "%ld%c", n, units[u]);
}

int ft__config_var_doc(size_t i, struct ft__var_doc *d)
{
	static const char *const types[] = {
		[V_BOOT] = "integer", [V_STR] = "string", [V_INT] = "integer",
		[V_ENUM] = "choice",  [V_SIZE] = "size",  [V_LEVEL] = "choice or integer",
	};
	const struct var *v;
	char lo[32], hi[32];
	size_t used = 0;

	if (i >= FT__ARRAY_SIZE(vars))
		return -1;
	v = &vars[i];
	d->name = v->name;
	d->type = types[v->kind];
	d->field = v->field;
	d->def = v->def;
	d->help = v->help;
	d->range[0] = '\0';
	if (v->values != NULL) {
		snprintf(d->range, sizeof(d->range), "%s", v->values);
		return 0;
	}
	switch (v->kind) {
	case V_STR:
		snprintf(d->range, sizeof(d->range), "at most %zu characters", v->cap - 1);
		break;
	case V_BOOT:
	case V_INT:
		snprintf(d->range, sizeof(d->range), "%ld .. %ld", v->lo, v->hi);
		break;
	case V_SIZE:
		size_words(lo, sizeof(lo), v->lo);
		size_words(hi, sizeof(hi), v->hi);
		snprintf(d->range, sizeof(d->range), "%s .. %s", lo, hi);
		break;
	case V_LEVEL:
	case V_ENUM:
		/* "" (unset: chosen) is no value one can write */
		for (int k = 0; k < v->nnames; k++)
			if (v->names[k][0] != '\0')
				used += (size_t)snprintf(d->range + used, sizeof(d->range) - used, "%s%s",
							 used > 0 ? ", " : "", v->names[k]);
		if (v->kind == V_LEVEL)
			snprintf(d->range + used, sizeof(d->range) - used, ", %ld .. %ld", v->lo, v->hi);
		break;
	}
	return 0;
}

/*
 * Resolves membership and bootstrap left "" (docs/launchers.md, "Across hosts"):
 * peers or a store named: in-band; otherwise the file rendezvous. In-band
 * takes its first addresses from the peer list, else the store, else PMIx.
 */
static int config_membership(struct ft_config *cfg, char *errbuf, size_t errlen)
{
	static const char *const backends[] = {"file", "inband"};
	static const char *const boots[] = {"pmix", "store", "peers"};
	bool ok = false;

	if (cfg->membership[0] == '\0')
		snprintf(cfg->membership, sizeof(cfg->membership), "%s",
			 cfg->peers[0] != '\0' || cfg->store[0] != '\0' ? "inband" : "file");
	for (size_t i = 0; i < FT__ARRAY_SIZE(backends); i++)
		ok |= strcmp(cfg->membership, backends[i]) == 0;
	if (!ok)
		return cfg_error(errbuf, errlen, "FTCC_MEMBERSHIP='%s': expected file or inband",
				 cfg->membership);
	/* one host:port per rank: more can only be a list for another job or
	 * another world size, whatever the bootstrap (it also picks the
	 * interface to listen on) */
	if (cfg->peers[0] != '\0') {
		int n = 1;
		for (const char *p = cfg->peers; *p != '\0'; p++)
			n += *p == ',';
		if (n > cfg->world_size)
			return cfg_error(errbuf, errlen,
					 "FTCC_PEERS (cfg.peers) has %d entries, more than the world "
					 "size %d: one host:port per rank", n, cfg->world_size);
	}
	if (strcmp(cfg->membership, "inband") != 0)
		return 0;
	if (cfg->bootstrap[0] == '\0')
		snprintf(cfg->bootstrap, sizeof(cfg->bootstrap), "%s",
			 cfg->peers[0] != '\0' ? "peers" : cfg->store[0] != '\0' ? "store" : "pmix");
	ok = false;
	for (size_t i = 0; i < FT__ARRAY_SIZE(boots); i++)
		ok |= strcmp(cfg->bootstrap, boots[i]) == 0;
	if (!ok)
		return cfg_error(errbuf, errlen, "FTCC_BOOTSTRAP='%s': expected pmix, store or peers",
				 cfg->bootstrap);
	if (strcmp(cfg->bootstrap, "peers") == 0 && cfg->peers[0] == '\0')
		return cfg_error(errbuf, errlen, "FTCC_BOOTSTRAP=peers needs FTCC_PEERS");
	if (strcmp(cfg->bootstrap, "store") == 0 && cfg->store[0] == '\0')
		return cfg_error(errbuf, errlen, "FTCC_BOOTSTRAP=store needs FTCC_STORE");
	return 0;
}

static int config_from_env(struct ft_config *cfg, char *errbuf, size_t errlen)
{
	struct ft_config init = FT_CONFIG_INIT;
	struct ft__boot boot;
	long v;
	int rc;

	*cfg = init;
	ft__boot_identity(process_env, NULL, &boot);
	if (boot.size == NULL)
		return cfg_error(errbuf, errlen,
				 "%s is not set (set FTCC_RANK and FTCC_WORLD_SIZE, or run under "
				 "ftcc-run or mpirun)", boot.size_var);
	if (parse_long(boot.size, 1, FT__WORLD_MAX, &v) != 0)
		return cfg_error(errbuf, errlen, "%s='%s': expected an integer in [1, %d]",
				 boot.size_var, boot.size, FT__WORLD_MAX);
	cfg->world_size = (int)v;
	if (boot.rank == NULL)
		return cfg_error(errbuf, errlen, "%s is not set", boot.rank_var);
	if (parse_long(boot.rank, 0, cfg->world_size - 1, &v) != 0)
		return cfg_error(errbuf, errlen, "%s='%s': expected an integer in [0, %d]",
				 boot.rank_var, boot.rank, cfg->world_size - 1);
	cfg->rank = (int)v;

	if ((rc = parse_home(H_CFG, cfg, errbuf, errlen)) != 0)
		return rc;
	if (cfg->auth[0] != '\0' && strcmp(cfg->auth, "none") != 0)
		return cfg_error(errbuf, errlen, "FTCC_AUTH='%s': expected none (or unset)",
				 cfg->auth);
	/* Open MPI, or srun with its PMIx (--mpi=pmix), across several hosts
	 * with no rendezvous named: in-band membership, first addresses from
	 * PMIx (docs/launchers.md, "Across hosts") */
	int local = ft__boot_local_ranks(process_env, NULL);
	bool pmix_launcher = boot.launcher == FT__LAUNCHER_OMPI ||
			     (boot.launcher == FT__LAUNCHER_SLURM &&
			      process_env("PMIX_NAMESPACE", NULL) != NULL);
	if (cfg->membership[0] == '\0' && cfg->rendezvous[0] == '\0' && cfg->peers[0] == '\0' &&
	    cfg->store[0] == '\0' && pmix_launcher && local > 0 && local < cfg->world_size) {
		snprintf(cfg->membership, sizeof(cfg->membership), "inband");
		if (cfg->bootstrap[0] == '\0')
			snprintf(cfg->bootstrap, sizeof(cfg->bootstrap), "pmix");
	}
	if ((rc = config_membership(cfg, errbuf, errlen)) != 0)
		return rc;

	/* Under a launcher with no rendezvous given, ranks on one host meet in a
	 * per-user directory under a job id derived from the launcher's identity. */
	if (cfg->rendezvous[0] == '\0' && strcmp(cfg->membership, "file") == 0 &&
	    (boot.launcher == FT__LAUNCHER_OMPI || boot.launcher == FT__LAUNCHER_MPICH ||
	     boot.launcher == FT__LAUNCHER_SLURM))
		per_user_dir(cfg->rendezvous, sizeof(cfg->rendezvous), "ftcc");
	if (cfg->job_id[0] == '\0') {
		ft__boot_job_id(&boot, process_env, NULL, cfg->job_id, sizeof(cfg->job_id));
		if (cfg->job_id[0] == '\0' && cfg->world_size == 1)
			snprintf(cfg->job_id, sizeof(cfg->job_id), "single-%d", (int)getpid());
	}
	if (cfg->world_size > 1 && cfg->rendezvous[0] == '\0' &&
	    strcmp(cfg->membership, "file") == 0)
		return cfg_error(errbuf, errlen,
				 "FTCC_RENDEZVOUS is not set (a directory every rank can reach; across "
				 "hosts without one, FTCC_MEMBERSHIP=inband)");
	if (cfg->world_size > 1 && cfg->job_id[0] == '\0')
		return cfg_error(errbuf, errlen, "FTCC_JOB_ID is not set");
	for (const char *p = cfg->job_id; *p; p++)
		if (!isalnum((unsigned char)*p) && strchr("-_.@:", *p) == NULL)
			return cfg_error(errbuf, errlen,
					 "FTCC_JOB_ID='%s': only letters, digits and -_.@: allowed",
					 cfg->job_id);
	if (strcmp(cfg->transport, "tcp") != 0 && strcmp(cfg->transport, "fabric") != 0)
		return cfg_error(errbuf, errlen, "FTCC_TRANSPORT='%s': expected tcp or fabric",
				 cfg->transport);

	struct ft__fault fault;
	char ferr[400];
	if (ft__fault_parse(cfg->fault, &fault, ferr, sizeof(ferr)) != 0)
		return cfg_error(errbuf, errlen, "%s", ferr);
	if (!detect_timeout_ok(cfg))
		return cfg_error(errbuf, errlen, DETECT_RULE, cfg->detect_timeout_ms,
				 cfg->heartbeat_ms, DETECT_MIN_MS);
	return 0;
}

/*
 * Versions of struct ft_config: every layout since ftcc 0.2 begins with
 * struct_size, the sizeof the caller compiled, and later ones only append.
 * CONFIG_SIZE_0_2 is where the 0.2 layout's last field ends: it must not
 * change when fields are appended. A size above CONFIG_SIZE_LIMIT is no
 * struct ft_config at all (a struct from before 0.2 holds rank and world
 * size there, which read as a size_t beyond the limit), so nothing past
 * the caller's struct is read.
 */
#define CONFIG_SIZE_0_2 (offsetof(struct ft_config, log_level) + sizeof(int))
#define CONFIG_SIZE_LIMIT ((size_t)16 << 10)

static int config_from_env_size_call(struct ft_config *cfg, size_t cfg_size, char *errbuf,
				     size_t errlen)
{
	struct ft_config full;
	int rc;

	if (cfg == NULL || cfg_size < CONFIG_SIZE_0_2 || cfg_size > CONFIG_SIZE_LIMIT)
		return -FT_EINVAL;
	rc = config_from_env(&full, errbuf, errlen);
	if (cfg_size <= sizeof(full)) {
		memcpy(cfg, &full, cfg_size);
	} else {
		/* a newer header: fields this library does not know stay zero */
		memcpy(cfg, &full, sizeof(full));
		memset((char *)cfg + sizeof(full), 0, cfg_size - sizeof(full));
	}
	cfg->struct_size = cfg_size;
	return rc;
}

FT__EXPORT int ft_config_from_env_size(struct ft_config *cfg, size_t cfg_size, char *errbuf,
				       size_t errlen)
{
	return ft__err_public(config_from_env_size_call(cfg, cfg_size, errbuf, errlen));
}

int ft__config_import(const struct ft_config *user, struct ft_config *out)
{
	const struct ft_config init = FT_CONFIG_INIT;
	size_t size = user->struct_size;

	if (size < CONFIG_SIZE_0_2 || size > CONFIG_SIZE_LIMIT) {
		ft__error("ft_init: struct ft_config has struct_size %zu: fill it from FT_CONFIG_INIT "
			  "or ft_config_from_env", size);
		return -FT_EINVAL;
	}
	for (size_t i = sizeof(*out); i < size; i++)
		if (((const unsigned char *)user)[i] != 0) {
			ft__error("ft_init: struct ft_config sets options this ftcc (%s) does not "
				  "know (built against a newer ftcc.h)", FTCC_VERSION);
			return -FT_EINVAL;
		}
	*out = init;
	memcpy(out, user, size < sizeof(*out) ? size : sizeof(*out));
	out->struct_size = sizeof(*out);
	return 0;
}

/* Every string of struct ft_config, by name: each must end within its array. */
#define CFG_STRING(f) {#f, offsetof(struct ft_config, f), sizeof(((struct ft_config *)0)->f)}
static const struct {
	const char *name;
	size_t off, size;
} cfg_strings[] = {
	CFG_STRING(rendezvous), CFG_STRING(job_id), CFG_STRING(token),   CFG_STRING(transport),
	CFG_STRING(bind_host),  CFG_STRING(log_dir), CFG_STRING(fault),  CFG_STRING(trace),
	CFG_STRING(membership), CFG_STRING(bootstrap), CFG_STRING(store), CFG_STRING(peers),
	CFG_STRING(auth),
};

int ft__config_check(struct ft_config *cfg)
{
	/* the bound FTCC_WORLD_SIZE has: past it, ft_init once spent 37 s and
	 * 8 GB on INT_MAX before it failed for memory */
	if (cfg->world_size < 1 || cfg->world_size > FT__WORLD_MAX) {
		ft__error("ft_init: cfg.world_size %d is out of range [1, %d]", cfg->world_size,
			  FT__WORLD_MAX);
		return -FT_EINVAL;
	}
	if (cfg->rank < 0 || cfg->rank >= cfg->world_size)
		return -FT_EINVAL;
	for (size_t i = 0; i < sizeof(cfg_strings) / sizeof(cfg_strings[0]); i++)
		if (memchr((const char *)cfg + cfg_strings[i].off, 0, cfg_strings[i].size) == NULL) {
			ft__error("ft_init: cfg.%s has no terminating NUL within its %zu bytes",
				  cfg_strings[i].name, cfg_strings[i].size);
			return -FT_EINVAL;
		}
	if (config_membership(cfg, NULL, 0) != 0)
		return -FT_EINVAL;
	if (cfg->world_size > 1 && cfg->job_id[0] == '\0')
		return -FT_EINVAL;
	if (cfg->world_size > 1 && cfg->rendezvous[0] == '\0' &&
	    strcmp(cfg->membership, "file") == 0)
		return -FT_EINVAL;
	if (cfg->auth[0] != '\0' && strcmp(cfg->auth, "none") != 0)
		return -FT_EINVAL;
	if (strchr(cfg->job_id, '/') != NULL || strcmp(cfg->job_id, "..") == 0 ||
	    strcmp(cfg->job_id, ".") == 0)
		return -FT_EINVAL;
	if ((unsigned)cfg->policy > FT_POLICY_REJOIN ||
	    (unsigned)cfg->log_durability > FT_DURABILITY_HOST)
		return -FT_EINVAL;
	if ((cfg->segment_bytes != 0 && cfg->segment_bytes < 4096) ||
	    cfg->segment_bytes > FT__FRAME_MAX_PAYLOAD || cfg->pipeline_depth < 1 || cfg->pipeline_depth > 64)
		return -FT_EINVAL;
	if (cfg->connect_timeout_ms <= 0 || cfg->op_timeout_ms < 0 || cfg->heartbeat_ms <= 0 ||
	    cfg->rejoin_timeout_ms < 0 || cfg->crc < 0 || cfg->crc > 1)
		return -FT_EINVAL;
	if (!detect_timeout_ok(cfg)) {
		ft__error(DETECT_RULE, cfg->detect_timeout_ms, cfg->heartbeat_ms, DETECT_MIN_MS);
		return -FT_EINVAL;
	}
	return 0;
}

/*
 * Settings that belong to a mode this configuration did not choose: the
 * in-band bootstrap's under the file rendezvous, another bootstrap's
 * source, libfabric's knobs under TCP and TCP's under libfabric. Nothing
 * reads them, so a user who meant them gets silently something else: each
 * is said once per process (a mistake, not an emergency: the job runs).
 * The fields are looked at in cfg (set from the environment or by the
 * caller alike); the transports' knobs are only ever read from the
 * environment.
 */
static bool is(const char *a, const char *b)
{
	return strcmp(a, b) == 0;
}

static bool env_set(const char *name)
{
	const char *s = getenv(name);
	return s != NULL && s[0] != '\0';
}

enum unused_kind { U_BOOTSTRAP, U_STORE, U_PEERS, U_FABRIC, U_TCP };
static const struct {
	const char *name;
	enum unused_kind kind;
} settings[] = {
	{"FTCC_BOOTSTRAP", U_BOOTSTRAP},      {"FTCC_STORE", U_STORE},
	{"FTCC_PEERS", U_PEERS},              {"FTCC_FABRIC_PROVIDER", U_FABRIC},
	{"FTCC_FABRIC_EP", U_FABRIC},         {"FTCC_FABRIC_MAX_MSG", U_FABRIC},
	{"FTCC_FABRIC_WAIT", U_FABRIC},       {"FTCC_FABRIC_MR_LOCAL", U_FABRIC},
	{"FTCC_FABRIC_LINK_EP", U_FABRIC},    {"FTCC_SHM_GUARD", U_FABRIC},
	{"FTCC_TCP_BUFFER", U_TCP},
};

/* Why setting i does not apply to cfg, or NULL when it is unset or applies. */
static const char *unused_why(const struct ft_config *cfg, size_t i)
{
	bool file = is(cfg->membership, "file"), tcp = is(cfg->transport, "tcp");

	switch (settings[i].kind) {
	case U_BOOTSTRAP:
		return cfg->bootstrap[0] != '\0' && file
			       ? "the file rendezvous (FTCC_MEMBERSHIP=file) has no bootstrap"
			       : NULL;
	case U_STORE:
		if (cfg->store[0] == '\0' || (!file && is(cfg->bootstrap, "store")))
			return NULL;
		return file ? "the file rendezvous (FTCC_MEMBERSHIP=file) uses no store"
			    : "the in-band bootstrap is not 'store'";
	case U_PEERS:
		if (cfg->peers[0] == '\0' || (!file && is(cfg->bootstrap, "peers")))
			return NULL;
		return file ? "the file rendezvous (FTCC_MEMBERSHIP=file) reads no peer list (it "
			      "only helps choose the interface to listen on)"
			    : "the in-band bootstrap is not 'peers' (the list only helps choose the "
			      "interface to listen on)";
	case U_FABRIC:
		return tcp && env_set(settings[i].name)
			       ? "a libfabric setting, and the transport is tcp"
			       : NULL;
	case U_TCP:
		return !tcp && env_set(settings[i].name)
			       ? "a TCP setting, and the transport is fabric"
			       : NULL;
	}
	return NULL;
}

size_t ft__config_unused(const struct ft_config *cfg, struct ft__unused *out, size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < FT__ARRAY_SIZE(settings); i++) {
		const char *why = unused_why(cfg, i);
		if (why == NULL)
			continue;
		if (n < max)
			out[n] = (struct ft__unused){settings[i].name, why};
		n++;
	}
	return n;
}

void ft__config_warn_unused(const struct ft_config *cfg)
{
	/* once per process and setting: a program that makes another
	 * communicator (after a failure, in a test) is told once */
	static _Atomic bool warned[FT__ARRAY_SIZE(settings)];

	for (size_t i = 0; i < FT__ARRAY_SIZE(settings); i++) {
		const char *why = unused_why(cfg, i);
		if (why != NULL && !atomic_exchange(&warned[i], true))
			ft__warn("%s is set but does not apply: %s; ignored", settings[i].name, why);
	}
}

/* 1 for libfabric's spellings of true, 0 for false, -1 unset. */
static int env_bool(const char *name)
{
	const char *s = getenv(name);

	if (s == NULL || s[0] == '\0')
		return -1;
	return strcmp(s, "1") == 0 || strcasecmp(s, "on") == 0 || strcasecmp(s, "true") == 0 ||
	       strcasecmp(s, "yes") == 0;
}

int ft__config_tp_env(const struct ft_config *cfg, struct ft__tp_env *e)
{
	const char *s;
	int cma;

	memset(e, 0, sizeof(*e));
	e->world_size = cfg->world_size;
	e->local_ranks = ft__boot_local_ranks(process_env, NULL);
	ft__boot_launcher_addrs(process_env, NULL, e->launcher_addrs, sizeof(e->launcher_addrs));
	struct tp_knobs k = {.spin_us = -1, .guard = 1, .link_ep = -1, .ckpt_local = 1, .shm = 1,
			     .shm_bytes = 512u << 10};
	int rc;

	/* every value checked (docs/environment.md: a malformed one is FT_ECONFIG, named) */
	if ((rc = parse_home(H_TP, &k, NULL, 0)) != 0)
		return rc;
	e->spin_us = k.spin_us;
	e->tcp_buffer = (size_t)k.tcp_buffer;
	e->fabric_max_msg = (size_t)k.max_msg;
	e->incarnation = k.incarnation;
	e->fabric_wait = k.wait;
	e->fabric_link_ep = k.link_ep;
	e->fabric_mr_local = k.mr_local == 1;
	e->shm_guard = k.guard == 1;
	e->shm = k.shm == 1;
	e->algorithm = k.algorithm;
	e->shm_bytes = k.shm_bytes;
	e->log_pwrite = k.engine == 1;
	s = k.provider;
	if (s[0] == '\0' && (s = getenv("FI_PROVIDER")) != NULL &&
	    strlen(s) >= sizeof(e->fabric_provider))
		return cfg_error(NULL, 0, "the libfabric provider name is too long (at most %zu "
				 "characters)", sizeof(e->fabric_provider) - 1);
	if (s != NULL)
		snprintf(e->fabric_provider, sizeof(e->fabric_provider), "%s", s);
	snprintf(e->fabric_ep, sizeof(e->fabric_ep), "%s", k.ep);
	snprintf(e->ckpt_dir, sizeof(e->ckpt_dir), "%s", k.ckpt_dir);
	snprintf(e->ckpt_from, sizeof(e->ckpt_from), "%s", k.ckpt_from);
	e->ckpt_where = k.ckpt_where;
	e->ckpt_local = k.ckpt_local;
	/* process durability: shared memory (survives the process, and a
	 * mapped page cache file on disk would be written back: 64 MiB per op);
	 * host durability: the disk, under $TMPDIR */
	if (cfg->log_durability == FT_DURABILITY_PROCESS && access("/dev/shm", W_OK) == 0)
		snprintf(e->default_log_root, sizeof(e->default_log_root), "/dev/shm/ftcc-log-%u",
			 (unsigned)getuid());
	else
		per_user_dir(e->default_log_root, sizeof(e->default_log_root), "ftcc-log");
	per_user_dir(e->default_rendezvous, sizeof(e->default_rendezvous), "ftcc");
	cma = env_bool("FI_SHM_DISABLE_CMA");
	e->shm_cma = cma < 0 ? -1 : !cma;
	return 0;
}

/*
 * With a detector (shrink, rejoin) its heartbeats find a vanished host
 * within detect_timeout_ms whatever the data links do, and the survivors
 * then close their links. So the data links only get keepalive at that
 * pace (answered by the peer's kernel: a live rank never fails it) and no
 * user timeout, which would fail a live rank that is merely late to read
 * (a checkpoint, a slow step): its window stays closed meanwhile.
 * Without one (abort) the kernel is the only detector: both follow the
 * longest the library waits for a silent peer anyway, op_timeout_ms, or
 * connect_timeout_ms when collectives never time out.
 */
void ft__config_data_link_timeouts(const struct ft_config *cfg, int *keepalive_ms,
				   int *user_timeout_ms)
{
	if (cfg->policy != FT_POLICY_ABORT) {
		*keepalive_ms = cfg->detect_timeout_ms;
		*user_timeout_ms = 0;
		return;
	}
	*keepalive_ms = cfg->op_timeout_ms > 0 ? cfg->op_timeout_ms : cfg->connect_timeout_ms;
	*user_timeout_ms = *keepalive_ms;
}
