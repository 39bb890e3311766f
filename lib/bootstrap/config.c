/* config.c: the communicator configuration: its checks, its versioned import, and the one file that reads the environment. */
/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "bootstrap.h"
#include "config.h"
#include "fault.h"
#include "internal.h"

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

static int env_int(const char *name, long lo, long hi, int *dst, char *errbuf, size_t errlen)
{
	const char *s = getenv(name);
	long v;

	if (s == NULL)
		return 0;
	if (parse_long(s, lo, hi, &v) != 0)
		return cfg_error(errbuf, errlen, "%s='%s': expected an integer in [%ld, %ld]", name,
				 s, lo, hi);
	*dst = (int)v;
	return 0;
}

static int env_str(const char *name, char *dst, size_t cap, char *errbuf, size_t errlen)
{
	const char *s = getenv(name);

	if (s == NULL)
		return 0;
	if (strlen(s) >= cap)
		return cfg_error(errbuf, errlen, "%s is too long (at most %zu characters)", name,
				 cap - 1);
	memcpy(dst, s, strlen(s) + 1);
	return 0;
}

static int env_enum(const char *name, const char *const *names, int n, int *dst, char *errbuf,
		    size_t errlen)
{
	const char *s = getenv(name);
	char allowed[128] = "";

	if (s == NULL)
		return 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(s, names[i]) == 0) {
			*dst = i;
			return 0;
		}
		snprintf(allowed + strlen(allowed), sizeof(allowed) - strlen(allowed), "%s%s",
			 i ? ", " : "", names[i]);
	}
	return cfg_error(errbuf, errlen, "%s='%s': expected one of %s", name, s, allowed);
}

/*
 * Resolves membership and bootstrap left "" (README, "Across hosts"):
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
	static const char *const policies[] = {"abort", "shrink", "rejoin"};
	static const char *const durabilities[] = {"none", "process", "host"};
	static const char *const levels[] = {"error", "warn", "info", "debug"};
	struct ft_config init = FT_CONFIG_INIT;
	struct ft__boot boot;
	const char *s;
	long v;
	int rc, tmp;

	*cfg = init;
	ft__boot_identity(process_env, NULL, &boot);
	if (boot.size == NULL)
		return cfg_error(errbuf, errlen,
				 "%s is not set (set FTCC_RANK and FTCC_WORLD_SIZE, or run under "
				 "ftcc-run or mpirun)", boot.size_var);
	if (parse_long(boot.size, 1, 1 << 20, &v) != 0)
		return cfg_error(errbuf, errlen, "%s='%s': expected an integer in [1, %d]",
				 boot.size_var, boot.size, 1 << 20);
	cfg->world_size = (int)v;
	if (boot.rank == NULL)
		return cfg_error(errbuf, errlen, "%s is not set", boot.rank_var);
	if (parse_long(boot.rank, 0, cfg->world_size - 1, &v) != 0)
		return cfg_error(errbuf, errlen, "%s='%s': expected an integer in [0, %d]",
				 boot.rank_var, boot.rank, cfg->world_size - 1);
	cfg->rank = (int)v;

	if ((rc = env_str("FTCC_RENDEZVOUS", cfg->rendezvous, sizeof(cfg->rendezvous), errbuf,
			  errlen)) != 0 ||
	    (rc = env_str("FTCC_JOB_ID", cfg->job_id, sizeof(cfg->job_id), errbuf, errlen)) != 0 ||
	    (rc = env_str("FTCC_TOKEN", cfg->token, sizeof(cfg->token), errbuf, errlen)) != 0 ||
	    (rc = env_str("FTCC_TRANSPORT", cfg->transport, sizeof(cfg->transport), errbuf,
			  errlen)) != 0 ||
	    (rc = env_str("FTCC_BIND_HOST", cfg->bind_host, sizeof(cfg->bind_host), errbuf,
			  errlen)) != 0 ||
	    (rc = env_str("FTCC_LOG_DIR", cfg->log_dir, sizeof(cfg->log_dir), errbuf, errlen)) !=
		    0 ||
	    (rc = env_str("FTCC_FAULT", cfg->fault, sizeof(cfg->fault), errbuf, errlen)) != 0 ||
	    (rc = env_str("FTCC_TRACE", cfg->trace, sizeof(cfg->trace), errbuf, errlen)) != 0 ||
	    (rc = env_str("FTCC_MEMBERSHIP", cfg->membership, sizeof(cfg->membership), errbuf,
			  errlen)) != 0 ||
	    (rc = env_str("FTCC_BOOTSTRAP", cfg->bootstrap, sizeof(cfg->bootstrap), errbuf,
			  errlen)) != 0 ||
	    (rc = env_str("FTCC_STORE", cfg->store, sizeof(cfg->store), errbuf, errlen)) != 0 ||
	    (rc = env_str("FTCC_PEERS", cfg->peers, sizeof(cfg->peers), errbuf, errlen)) != 0 ||
	    (rc = env_str("FTCC_AUTH", cfg->auth, sizeof(cfg->auth), errbuf, errlen)) != 0)
		return rc;
	if (cfg->auth[0] != '\0' && strcmp(cfg->auth, "none") != 0)
		return cfg_error(errbuf, errlen, "FTCC_AUTH='%s': expected none (or unset)",
				 cfg->auth);
	/* Open MPI across several hosts with no rendezvous named: in-band
	 * membership, first addresses from PMIx (README, "Across hosts") */
	int local = ft__boot_local_ranks(process_env, NULL);
	if (cfg->membership[0] == '\0' && cfg->rendezvous[0] == '\0' && cfg->peers[0] == '\0' &&
	    cfg->store[0] == '\0' && boot.launcher == FT__LAUNCHER_OMPI && local > 0 &&
	    local < cfg->world_size) {
		snprintf(cfg->membership, sizeof(cfg->membership), "inband");
		if (cfg->bootstrap[0] == '\0')
			snprintf(cfg->bootstrap, sizeof(cfg->bootstrap), "pmix");
	}
	if ((rc = config_membership(cfg, errbuf, errlen)) != 0)
		return rc;

	/* Under a launcher with no rendezvous given, ranks on one host meet in a
	 * per-user directory under a job id derived from the launcher's identity. */
	if (cfg->rendezvous[0] == '\0' && strcmp(cfg->membership, "file") == 0 &&
	    (boot.launcher == FT__LAUNCHER_OMPI || boot.launcher == FT__LAUNCHER_MPICH))
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

	tmp = (int)cfg->policy;
	if ((rc = env_enum("FTCC_POLICY", policies, 3, &tmp, errbuf, errlen)) != 0)
		return rc;
	cfg->policy = (enum ft_policy)tmp;
	tmp = (int)cfg->log_durability;
	if ((rc = env_enum("FTCC_LOG_DURABILITY", durabilities, 3, &tmp, errbuf, errlen)) != 0)
		return rc;
	cfg->log_durability = (enum ft_durability)tmp;
	s = getenv("FTCC_LOG_LEVEL");
	if (s != NULL && parse_long(s, 0, 3, &v) == 0)
		cfg->log_level = (int)v;
	else if ((rc = env_enum("FTCC_LOG_LEVEL", levels, 4, &cfg->log_level, errbuf, errlen)) != 0)
		return rc;

	if ((rc = env_int("FTCC_HEARTBEAT_MS", 1, 3600000, &cfg->heartbeat_ms, errbuf, errlen)) ||
	    (rc = env_int("FTCC_DETECT_TIMEOUT_MS", 1, 3600000, &cfg->detect_timeout_ms, errbuf,
			  errlen)) ||
	    (rc = env_int("FTCC_REJOIN_TIMEOUT_MS", 0, 3600000, &cfg->rejoin_timeout_ms, errbuf,
			  errlen)) ||
	    (rc = env_int("FTCC_CONNECT_TIMEOUT_MS", 1, 3600000, &cfg->connect_timeout_ms, errbuf,
			  errlen)) ||
	    (rc = env_int("FTCC_OP_TIMEOUT_MS", 0, INT_MAX, &cfg->op_timeout_ms, errbuf, errlen)) ||
	    (rc = env_int("FTCC_PIPELINE_DEPTH", 1, 64, &cfg->pipeline_depth, errbuf, errlen)) ||
	    (rc = env_int("FTCC_CRC", 0, 1, &cfg->crc, errbuf, errlen)))
		return rc;
	s = getenv("FTCC_SEGMENT_BYTES");
	if (s != NULL && (ft__parse_size(s, &cfg->segment_bytes) != 0 ||
			  cfg->segment_bytes < 4096 || cfg->segment_bytes > FT__FRAME_MAX_PAYLOAD))
		return cfg_error(errbuf, errlen,
				 "FTCC_SEGMENT_BYTES='%s': expected a size from 4K to 64M", s);
	struct ft__fault fault;
	char ferr[400];
	if (ft__fault_parse(cfg->fault, &fault, ferr, sizeof(ferr)) != 0)
		return cfg_error(errbuf, errlen, "%s", ferr);
	if (cfg->detect_timeout_ms < cfg->heartbeat_ms)
		return cfg_error(errbuf, errlen,
				 "FTCC_DETECT_TIMEOUT_MS (%d) must be at least FTCC_HEARTBEAT_MS (%d)",
				 cfg->detect_timeout_ms, cfg->heartbeat_ms);
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

int ft__config_check(struct ft_config *cfg)
{
	if (cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size)
		return -FT_EINVAL;
	if (memchr(cfg->membership, 0, sizeof(cfg->membership)) == NULL ||
	    memchr(cfg->bootstrap, 0, sizeof(cfg->bootstrap)) == NULL ||
	    memchr(cfg->store, 0, sizeof(cfg->store)) == NULL ||
	    memchr(cfg->peers, 0, sizeof(cfg->peers)) == NULL ||
	    config_membership(cfg, NULL, 0) != 0)
		return -FT_EINVAL;
	if (cfg->world_size > 1 && cfg->job_id[0] == '\0')
		return -FT_EINVAL;
	if (cfg->world_size > 1 && cfg->rendezvous[0] == '\0' &&
	    strcmp(cfg->membership, "file") == 0)
		return -FT_EINVAL;
	if (memchr(cfg->rendezvous, 0, sizeof(cfg->rendezvous)) == NULL ||
	    memchr(cfg->job_id, 0, sizeof(cfg->job_id)) == NULL ||
	    memchr(cfg->token, 0, sizeof(cfg->token)) == NULL ||
	    memchr(cfg->transport, 0, sizeof(cfg->transport)) == NULL ||
	    memchr(cfg->bind_host, 0, sizeof(cfg->bind_host)) == NULL ||
	    memchr(cfg->auth, 0, sizeof(cfg->auth)) == NULL ||
	    (cfg->auth[0] != '\0' && strcmp(cfg->auth, "none") != 0))
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
	    cfg->detect_timeout_ms < cfg->heartbeat_ms || cfg->rejoin_timeout_ms < 0 ||
	    cfg->crc < 0 || cfg->crc > 1)
		return -FT_EINVAL;
	return 0;
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
	static const char *const waits[] = {"", "poll", "bell"}, *const bits[] = {"0", "1"},
			  *const engines[] = {"io_uring", "pwrite", "uring"};
	int spin = -1, tcp_buffer = 0, max_msg = 0, link_ep = -1, mr_local = 0, guard = 1,
	    engine = 0, rc;

	/* every value checked (README: a malformed one is FT_ECONFIG, named) */
	if ((rc = env_int("FTCC_SPIN_US", 0, 10000000, &spin, NULL, 0)) != 0 ||
	    (rc = env_int("FTCC_TCP_BUFFER", 1, INT_MAX, &tcp_buffer, NULL, 0)) != 0 ||
	    (rc = env_int("FTCC_FABRIC_MAX_MSG", 1, INT_MAX, &max_msg, NULL, 0)) != 0 ||
	    (rc = env_int("FTCC_INCARNATION", 0, INT_MAX, &e->incarnation, NULL, 0)) != 0 ||
	    (rc = env_enum("FTCC_FABRIC_WAIT", waits, 3, &e->fabric_wait, NULL, 0)) != 0 ||
	    (rc = env_enum("FTCC_FABRIC_MR_LOCAL", bits, 2, &mr_local, NULL, 0)) != 0 ||
	    (rc = env_enum("FTCC_SHM_GUARD", bits, 2, &guard, NULL, 0)) != 0 ||
	    (rc = env_enum("FTCC_LOG_ENGINE", engines, 3, &engine, NULL, 0)) != 0)
		return rc;
	if ((s = getenv("FTCC_FABRIC_LINK_EP")) != NULL && s[0] != '\0' &&
	    (rc = env_enum("FTCC_FABRIC_LINK_EP", bits, 2, &link_ep, NULL, 0)) != 0)
		return rc;
	e->spin_us = spin;
	e->tcp_buffer = (size_t)tcp_buffer;
	e->fabric_max_msg = (size_t)max_msg;
	e->fabric_link_ep = link_ep;
	e->fabric_mr_local = mr_local == 1;
	e->shm_guard = guard == 1;
	e->log_pwrite = engine == 1;
	s = getenv("FTCC_FABRIC_PROVIDER");
	if (s == NULL || s[0] == '\0')
		s = getenv("FI_PROVIDER");
	if (s != NULL && strlen(s) >= sizeof(e->fabric_provider))
		return cfg_error(NULL, 0, "the libfabric provider name is too long (at most %zu "
				 "characters)", sizeof(e->fabric_provider) - 1);
	if (s != NULL)
		snprintf(e->fabric_provider, sizeof(e->fabric_provider), "%s", s);
	if ((rc = env_str("FTCC_FABRIC_EP", e->fabric_ep, sizeof(e->fabric_ep), NULL, 0)) != 0)
		return rc;
	if ((s = getenv("FTCC_CKPT_DIR")) != NULL) {
		if (strlen(s) >= sizeof(e->ckpt_dir))
			return cfg_error(NULL, 0, "FTCC_CKPT_DIR is too long (at most %zu characters)",
					 sizeof(e->ckpt_dir) - 1);
		snprintf(e->ckpt_dir, sizeof(e->ckpt_dir), "%s", s);
	}
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
