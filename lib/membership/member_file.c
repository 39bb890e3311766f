/* member_file.c: the file rendezvous membership backend: member files, an exclusively created view file, stale entries. */
/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdreg.h"
#include "file.h"
#include "reserve.h"
#include "scan.h"
#include "internal.h"
#include "membership.h"

/*
 * Layout: <root>/<job>/lock-<r> (flock held by the live incarnation of rank
 * r), <root>/<job>/left-<r> ("pid next_op nonce": rank r finalized),
 * <root>/<job>/gen-<g>/member-<r> ("addr pid host ctrl next_op [rejoining]", the
 * last field 1 for a new incarnation asking back, absent or 0 otherwise), and
 * <root>/<job>/gen-<g>/view ("ftcc-view 2 gen G size N writer PID HOST nonce
 * X first K members r0 r1 ..."), created exclusively by the coordinator:
 * whoever creates it first settles generation g. <root>/<job>/ended
 * ("ftcc-ended X", X the run's nonce): the job ended with a rank that never
 * finalized (it died), whose new incarnation would otherwise wait for a job
 * that is over; it is all the last rank to leave keeps of the job, and a
 * new run with the same id removes it. Files are written under a
 * temporary name and renamed, so a reader sees a whole file or none. Entries
 * written by a process of this host that no longer exists are stale (a
 * crashed earlier job with the same id) and are ignored, so a reused job id
 * cannot mislead.
 *
 * A full file system (ENOSPC, EDQUOT: the rendezvous is under /tmp by
 * default, which a job's own logs or checkpoints can fill) must not cost a
 * recovery: each rank holds, from its open on, what its part of the next
 * settle needs, in <root>/<job>/reserve-<r>/ (reserve.h): a member file, a
 * view file of the world's size, a departure marker, each written whole,
 * and a directory for gen-<g>. A write that finds no room takes its file
 * from there (renamed into place: no new inode, no new block), and the
 * reserve is made again once a view settles and there is room. When the
 * reserve is spent too, the write fails with FT_ENOSPC, said once per
 * period with the path: never taken for a peer's silence.
 *
 * Every file is read as untrusted text (anyone who can write the directory
 * can write it): single spaces between fields, one newline at the end,
 * nothing else; numbers in range, ranks in [0, world_size), view members
 * strictly ascending, strings no longer than their fields. A malformed view
 * is -FT_ECORRUPT. A malformed member file is -FT_ECORRUPT to lookup, and
 * absent to a settle: the coordinator settles without that rank when it
 * forces (and warns), which is what it does for a rank that never
 * published. A malformed left- marker is ignored likewise: the settle waits
 * for that rank until it forces.
 */

#include "member_file.h"


static struct mbf *be(struct ft__mb *mb)
{
	return mb->be;
}

static void host_name(char *buf, size_t len)
{
	if (gethostname(buf, len) != 0)
		snprintf(buf, len, "unknown");
	buf[len - 1] = '\0';
}

/* A writer is stale when it ran on this host and is gone. */
static int writer_is_stale(int pid, const char *host)
{
	char me[HOST_MAX];

	host_name(me, sizeof(me));
	if (strcmp(me, host) != 0 || pid <= 0)
		return 0;
	return kill(pid, 0) != 0 && errno == ESRCH;
}


static void gen_dir(const struct mbf *r, uint32_t gen, char *buf, size_t len)
{
	snprintf(buf, len, "%s/gen-%u", r->dir, gen);
}

/* ---- open, publish, lookup ---- */

/*
 * Takes this rank's lock-<r> (held while the process lives) so that the
 * file never stands unheld for a live rank: a new file is made under a
 * temporary name, locked, then linked into place; an existing one (an
 * earlier incarnation's) is locked where it is. Then its time is stamped:
 * a lock file unheld but stamped lately is a rank of this run that died
 * (lock_orphaned); an old one may be an earlier job's.
 */
static int lock_take(struct mbf *r, const char *path)
{
	char tmp[900];
	struct stat st;
	int fd = -1, err;

	for (int tries = 0; tries < 3; tries++) {
		fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0 && errno == ENOENT) {
			if (snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid()) >=
			    (int)sizeof(tmp))
				return -FT_EINVAL;
			(void)unlink(tmp);
			fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
			if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && link(tmp, path) != 0) {
				err = errno;
				close(fd);
				(void)unlink(tmp);
				if (err == EEXIST)
					continue; /* another took the name first: lock that one */
				errno = err;
				fd = -1;
			} else if (fd >= 0) {
				(void)unlink(tmp);
			}
		}
		break;
	}
	if (fd < 0) {
		err = errno;
		ft__error("rendezvous: cannot open %s: %s", path,
			  err == ELOOP ? "refused: a symbolic link (remove it)" : strerror(err));
		return err == ELOOP ? -FT_EACCES : ft__err_local(err);
	}
	ft__fd_own(fd);
	/* another rank's probe (lock_held) holds it shared for a moment: only a
	 * holder that stays is a live process */
	for (int tries = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; tries++) {
		struct timespec ms = {0, 1000000};
		if (errno == EWOULDBLOCK && tries < 50) {
			nanosleep(&ms, NULL);
			continue;
		}
		ft__error("rendezvous: rank %d of job in %s is already held by a live process",
			  r->rank, r->dir);
		ft__fd_close(fd);
		return -FT_EBUSY;
	}
	(void)futimens(fd, NULL);
	if (fstat(fd, &st) == 0)
		r->started = st.st_mtim;
	r->lock_fd = fd;
	/* a new incarnation: its launcher's word of the last one's death is old */
	snprintf(tmp, sizeof(tmp), "%s/gone-%d", r->dir, r->rank);
	(void)unlink(tmp);
	return 0;
}

static bool other_alive(const struct mbf *r);

/* Whether the job this new incarnation belongs to is over: its end marker
 * (path) is whole, and no other rank of the job lives. */
static bool job_ended(const struct mbf *r, const char *path)
{
	char buf[64];
	struct ft__scan s;
	uint64_t nonce;
	bool cut;
	int n = ft__mbf_read_file(path, buf, sizeof(buf), &cut);

	if (n < 0 || cut)
		return false;
	s = (struct ft__scan){.p = buf, .end = buf + n, .first = true};
	if (!ft__scan_keyword(&s, "ftcc-ended") || !ft__scan_num(&s, 16, 0, UINT64_MAX, &nonce) ||
	    !ft__scan_at_end(&s)) {
		ft__warn("rendezvous: %s is malformed: ignored", path);
		return false;
	}
	return !other_alive(r);
}

static int mbf_open(struct ft__mb *mb, const struct ft__mb_params *p)
{
	struct mbf *r = calloc(1, sizeof(*r));
	char path[800];
	int rc;

	if (r == NULL)
		return -FT_ENOMEM;
	mb->be = r;
	r->lock_fd = -1;
	r->rank = p->rank;
	r->world_size = p->world_size;
	r->start_wait_ms = p->start_wait_ms;
	r->incarnation = p->incarnation;
	if (p->world_size > 0 && (r->dead_since = calloc((size_t)p->world_size, sizeof(int64_t))) == NULL)
		return -FT_ENOMEM;
	if (p->root == NULL || p->job_id == NULL ||
	    snprintf(r->dir, sizeof(r->dir), "%s/%s", p->root, p->job_id) >= (int)sizeof(r->dir))
		return -FT_EINVAL;
	snprintf(mb->where, sizeof(mb->where), "in %s", r->dir);
	if (p->private_root && (rc = ft__dir_private(p->root, 0)) != 0)
		return rc;
	rc = ft__mkdir_p(r->dir);
	if (rc != 0) {
		ft__error("rendezvous: cannot create %s: %s", r->dir, strerror(-rc));
		return rc > -FT_ERR_BASE ? ft__err_local(-rc) : rc;
	}
	snprintf(path, sizeof(path), "%s/lock-%d", r->dir, r->rank);
	rc = lock_take(r, path);
	if (rc != 0)
		return rc;
	snprintf(path, sizeof(path), "%s/" ENDED_FILE, r->dir);
	if (r->incarnation == 0) {
		(void)unlink(path); /* a new run of this job id */
	} else if (job_ended(r, path)) {
		ft__error("rendezvous: the job in %s has ended (every other rank finalized): this "
			  "new incarnation of rank %d has no job to rejoin", r->dir, r->rank);
		return -FT_EENDED;
	}
	/* held now, while there is room, or the job does not start: a
	 * reserve only hoped for would fail the first recovery on a full
	 * directory instead */
	size_t view = VIEW_FILE_MAX(r->world_size);
	size_t sizes[SPARE_FILES] = {
		[SPARE_MEMBER] = MEMBER_FILE_MAX,
		[SPARE_VIEW] = view <= VIEW_SPARE_ALL || r->rank < VIEW_SPARE_RANKS ? view : 0,
		[SPARE_LEFT] = LEFT_FILE_MAX};
	snprintf(path, sizeof(path), "%s/reserve-%d", r->dir, r->rank);
	rc = ft__reserve_init(&r->spare, path, sizes, SPARE_FILES, true);
	if (rc != 0) {
		ft__error("rendezvous: cannot set aside in %s the space of a recovery: %s", path,
			  strerror(-rc));
		return ft__err_local(-rc);
	}
	return 0;
}

static int mbf_publish(struct ft__mb *mb, uint32_t gen, const struct ft__member *m)
{
	struct mbf *r = be(mb);
	char dir[700], name[64], text[MEMBER_FILE_MAX], host[HOST_MAX];
	int rc;

	if (!ft__field_text(m->addr, sizeof(m->addr)) ||
	    (m->ctrl[0] != '\0' && !ft__field_text(m->ctrl, sizeof(m->ctrl)))) {
		ft__error("rendezvous: rank %d's address cannot be published", r->rank);
		return -FT_EINVAL;
	}
	gen_dir(r, gen, dir, sizeof(dir));
	rc = ft__mkdir_p(dir);
	if (ft__errno_full(rc)) {
		int got = ft__reserve_dir(&r->spare, dir);
		if (got == 0)
			ft__log_gated(FT__LOG_WARN, &r->said_spare, "rendezvous: no space left on %s: "
				      "%s made from this rank's reserve", r->dir, dir);
		rc = got == 0 || got == -EEXIST ? 0 : rc;
	}
	if (rc != 0) {
		if (ft__errno_full(rc))
			ft__log_gated(FT__LOG_ERROR, &r->say, "rendezvous: cannot create %s: no space "
				      "left on %s, and this rank has no reserve left for it (%s)", dir,
				      r->dir, ft_err_name(-FT_ENOSPC));
		else
			ft__log_gated(FT__LOG_ERROR, &r->say, "rendezvous: cannot create %s: %s", dir,
				      strerror(-rc));
		return rc > -FT_ERR_BASE ? ft__err_local(-rc) : rc;
	}
	host_name(host, sizeof(host));
	snprintf(name, sizeof(name), "member-%d", r->rank);
	snprintf(text, sizeof(text), "%s %d %s %s %llu %d\n", m->addr, (int)getpid(), host,
		 m->ctrl[0] != '\0' ? m->ctrl : "-", (unsigned long long)m->next_op,
		 m->rejoining ? 1 : 0);
	rc = ft__mbf_write(r, dir, name, text, 0, SPARE_MEMBER);
	if (rc != 0)
		ft__mbf_say_unwritten(r, dir, name, rc);
	return rc == 0 ? 0 : ft__err_local(-rc);
}

/* What a settle makes of a candidate: the last two count as absent. */
enum { MEMBER_ABSENT, MEMBER_LIVE, MEMBER_DEAD, MEMBER_CORRUPT, MEMBER_BAD_MARKER };

/* Reads a member file: MEMBER_LIVE (and *m), MEMBER_ABSENT, MEMBER_DEAD (its
 * writer ran on this host and is gone), -FT_ECORRUPT, -FT_EIO. */
static int read_member(const struct mbf *r, uint32_t gen, int orig, struct ft__member *m)
{
	char dir[700], path[800], buf[MEMBER_FILE_MAX], host[HOST_MAX];
	struct ft__member tmp;
	struct ft__scan s;
	uint64_t next;
	bool cut;
	int n, back = 0;

	if (m == NULL)
		m = &tmp;
	memset(m, 0, sizeof(*m));
	gen_dir(r, gen, dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/member-%d", dir, orig);
	n = ft__mbf_read_file(path, buf, sizeof(buf), &cut);
	if (n == -ENOENT)
		return MEMBER_ABSENT;
	if (n < 0)
		return n;
	s = (struct ft__scan){.p = buf, .end = buf + n, .first = true};
	if (cut || !ft__scan_str(&s, m->addr, sizeof(m->addr)) ||
	    !ft__scan_int(&s, 1, INT_MAX, &m->pid) || !ft__scan_str(&s, host, sizeof(host)) ||
	    !ft__scan_str(&s, m->ctrl, sizeof(m->ctrl)) || !ft__scan_num(&s, 10, 0, UINT64_MAX, &next) ||
	    !(ft__scan_at_end(&s) || (ft__scan_int(&s, 0, 1, &back) && ft__scan_at_end(&s)))) {
		memset(m, 0, sizeof(*m));
		return -FT_ECORRUPT;
	}
	m->next_op = next;
	m->rejoining = back == 1;
	if (strcmp(m->ctrl, "-") == 0)
		m->ctrl[0] = '\0';
	return writer_is_stale(m->pid, host) ? MEMBER_DEAD : MEMBER_LIVE;
}

static int mbf_lookup(struct ft__mb *mb, uint32_t gen, int orig, struct ft__member *m)
{
	int rc = read_member(be(mb), gen, orig, m);

	if (rc == -FT_ECORRUPT)
		ft__error("rendezvous: malformed member file of rank %d (generation %u) in %s", orig,
			  gen, be(mb)->dir);
	return rc == MEMBER_LIVE ? 0 : (rc < 0 ? rc : -FT_EPEERFAILED);
}

/* ---- views ---- */

/* Whether file path was last written before this incarnation took its lock. */
static bool before_start(const struct mbf *r, const char *path)
{
	struct stat st;

	if (lstat(path, &st) != 0)
		return false;
	return st.st_mtim.tv_sec < r->started.tv_sec ||
	       (st.st_mtim.tv_sec == r->started.tv_sec && st.st_mtim.tv_nsec < r->started.tv_nsec);
}

/*
 * Parses a view file: 1 valid and live, 0 absent or stale, <0 corrupt. The
 * view of generation 0 is stale when its writer (of this host) is gone and
 * it was written before this rank took its lock (an earlier job's, left by
 * a crash: a view of this run written since stays valid when its writer
 * dies, as a rank slow to read it once found it stale, waited out its
 * connect timeout, and could have replaced the view the others had read);
 * later ones when they carry another job's nonce: once settled, a view
 * stays valid after its writer dies. Staleness is decided on the header
 * alone, so that a stale view of an earlier job with a larger world is
 * replaced, not refused; nothing of a stale view is used.
 */
static int read_view_opt(const struct mbf *r, uint32_t gen, struct ft__view *v, bool any)
{
	char dir[700], path[800], host[HOST_MAX];
	size_t cap = VIEW_FILE_MAX(r->world_size);
	struct ft__view got = {0};
	struct ft__scan s;
	uint64_t g, size, nonce, first;
	bool cut;
	int n, pid;
	char *buf;

	gen_dir(r, gen, dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/view", dir);
	buf = malloc(cap);
	if (buf == NULL)
		return -FT_ENOMEM;
	n = ft__mbf_read_file(path, buf, cap, &cut);
	if (n < 0) {
		free(buf);
		if (n == -ENOENT)
			return 0;
		ft__error("rendezvous: cannot read %s", path);
		return n;
	}
	s = (struct ft__scan){.p = buf, .end = buf + n, .first = true};
	if (!ft__scan_keyword(&s, "ftcc-view") || !ft__scan_keyword(&s, "2") || !ft__scan_keyword(&s, "gen") ||
	    !ft__scan_num(&s, 10, gen, gen, &g) || !ft__scan_keyword(&s, "size") ||
	    !ft__scan_num(&s, 10, 1, INT_MAX, &size) || !ft__scan_keyword(&s, "writer") ||
	    !ft__scan_int(&s, 1, INT_MAX, &pid) || !ft__scan_str(&s, host, sizeof(host)) ||
	    !ft__scan_keyword(&s, "nonce") || !ft__scan_num(&s, 16, 0, UINT64_MAX, &nonce) ||
	    !ft__scan_keyword(&s, "first") || !ft__scan_num(&s, 10, 0, UINT64_MAX, &first) ||
	    !ft__scan_keyword(&s, "members"))
		goto corrupt;
	if (!any && (gen == 0 ? writer_is_stale(pid, host) && before_start(r, path)
			      : nonce != r->nonce)) {
		free(buf);
		return 0;
	}
	if (cut || size > (uint64_t)r->world_size)
		goto corrupt;
	got.members = malloc((size_t)size * sizeof(int));
	if (got.members == NULL) {
		free(buf);
		return -FT_ENOMEM;
	}
	got.size = (int)size;
	for (int i = 0; i < got.size; i++) {
		int lo = i > 0 ? got.members[i - 1] + 1 : 0;
		if (lo >= r->world_size || !ft__scan_int(&s, lo, r->world_size - 1, &got.members[i]))
			goto corrupt;
	}
	if (!ft__scan_at_end(&s))
		goto corrupt;
	free(buf);
	got.generation = gen;
	got.nonce = nonce;
	got.first_op = first;
	*v = got;
	return 1;
corrupt:
	ft__error("rendezvous: malformed view file %s", path);
	free(buf);
	ft__view_free(&got);
	return -FT_ECORRUPT;
}

static int read_view(const struct mbf *r, uint32_t gen, struct ft__view *v)
{
	return read_view_opt(r, gen, v, false);
}

/* A view even when its writer is gone (generation 0) or its nonce is not known yet. */
static int read_view_any(const struct mbf *r, uint32_t gen, struct ft__view *v)
{
	return read_view_opt(r, gen, v, true);
}

static uint64_t fresh_nonce(void)
{
	uint64_t x = ft__now_ns() ^ ((uint64_t)getpid() << 32);

	/* splitmix64 finaliser: different jobs get unrelated nonces */
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static int write_view(struct mbf *r, uint32_t gen, const int *members, int n, uint64_t first)
{
	char dir[700], host[HOST_MAX], *text;
	size_t cap = VIEW_FILE_MAX(n), len;
	int rc;

	text = malloc(cap);
	if (text == NULL)
		return -FT_ENOMEM;
	host_name(host, sizeof(host));
	gen_dir(r, gen, dir, sizeof(dir));
	len = (size_t)snprintf(text, cap, "ftcc-view 2 gen %u size %d writer %d %s nonce %llx first %llu members",
			       gen, n, (int)getpid(), host,
			       (unsigned long long)(gen == 0 ? fresh_nonce() : r->nonce),
			       (unsigned long long)first);
	for (int i = 0; i < n; i++)
		len += (size_t)snprintf(text + len, cap - len, " %d", members[i]);
	snprintf(text + len, cap - len, "\n");
	rc = ft__mbf_write(r, dir, "view", text, 1, SPARE_VIEW);
	if (rc == -EEXIST) {
		/* A view exists: only a stale one may be replaced. */
		struct ft__view old = {0};
		if (read_view(r, gen, &old) == 0) {
			char path[800];
			snprintf(path, sizeof(path), "%s/view", dir);
			unlink(path);
			rc = ft__mbf_write(r, dir, "view", text, 1, SPARE_VIEW);
		} else {
			ft__view_free(&old);
			rc = 0;
		}
	}
	free(text);
	if (rc == 0 || rc == -EEXIST)
		return 0;
	ft__mbf_say_unwritten(r, dir, "view", rc);
	return ft__err_local(-rc);
}

static int mbf_depart(struct ft__mb *mb, uint64_t next_op)
{
	struct mbf *r = be(mb);
	char name[64], text[LEFT_FILE_MAX];
	int rc;

	snprintf(name, sizeof(name), "left-%d", r->rank);
	snprintf(text, sizeof(text), "%d %llu %llx\n", (int)getpid(), (unsigned long long)next_op,
		 (unsigned long long)r->nonce);
	rc = ft__mbf_write(r, r->dir, name, text, 0, SPARE_LEFT);
	if (rc != 0)
		ft__mbf_say_unwritten(r, r->dir, name, rc);
	return rc == 0 ? 0 : ft__err_local(-rc);
}

/* Whether rank orig of this job (not of an earlier one with the same id)
 * finalized: 1 yes, 0 no, -1 its marker is malformed (taken as no). */
static int departed(const struct mbf *r, int orig)
{
	char path[800], buf[LEFT_FILE_MAX];
	struct ft__scan s;
	uint64_t next, nonce;
	bool cut;
	int pid, n;

	snprintf(path, sizeof(path), "%s/left-%d", r->dir, orig);
	n = ft__mbf_read_file(path, buf, sizeof(buf), &cut);
	if (n == -ENOENT)
		return 0;
	s = (struct ft__scan){.p = buf, .end = buf + (n > 0 ? n : 0), .first = true};
	if (n < 0 || cut || !ft__scan_int(&s, 1, INT_MAX, &pid) ||
	    !ft__scan_num(&s, 10, 0, UINT64_MAX, &next) || !ft__scan_num(&s, 16, 0, UINT64_MAX, &nonce) ||
	    !ft__scan_at_end(&s))
		return -1;
	return nonce == r->nonce;
}

#ifdef FTCC_FUZZ
int ft__mbf_fuzz_read(const char *dir, int world_size, uint32_t gen, int orig, struct ft__view *v,
		      struct ft__member *m, int *member_rc, int *left_rc)
{
	struct mbf r = {.world_size = world_size, .lock_fd = -1, .nonce = 0x5eed};

	snprintf(r.dir, sizeof(r.dir), "%s", dir);
	*member_rc = read_member(&r, gen, orig, m);
	*left_rc = departed(&r, orig);
	return read_view_any(&r, gen, v);
}
#endif

/* Whether rank who, a candidate seen dead, is still awaited for a new
 * incarnation (ft__mb_params.start_wait_ms from when this rank first saw
 * it dead, since it was last seen live; a dead candidate is absent until
 * then, so a coordinator that died waits for its successor too). */
static bool awaited_at_start(struct mbf *r, int who)
{
	int64_t now = ft__now_ms();

	if (r->start_wait_ms <= 0 || r->dead_since == NULL)
		return false;
	if (r->dead_since[who] == 0) {
		r->dead_since[who] = now;
		ft__info("rendezvous: rank %d died%s: awaiting a new incarnation for %d ms", who,
			 r->nonce == 0 ? " before the job started" : "", r->start_wait_ms);
	}
	return now - r->dead_since[who] < r->start_wait_ms;
}

static bool lock_held(const char *path);

/* Whether rank who took its lock (lock-<r>, first thing in ft_init) in this
 * run, or its launcher wrote that it died (gone-<r>, ftcc-run), and no
 * process holds its lock now: it died, or left (a departure marker says
 * which). A file stamped long ago may be an earlier job's (same id): not
 * taken for this run's. */
#define LOCK_RECENT_S 60 /* a rank of this run took its lock within this of now */

static bool lock_orphaned(const struct mbf *r, int who)
{
	char path[800], gone[800];
	struct stat st;

	snprintf(path, sizeof(path), "%s/lock-%d", r->dir, who);
	snprintf(gone, sizeof(gone), "%s/gone-%d", r->dir, who);
	if (who == r->rank)
		return false;
	/* or its launcher (ftcc-run) saw it die, perhaps before it took it */
	if ((lstat(path, &st) == 0 || (lstat(gone, &st) == 0 && st.st_uid == geteuid())) &&
	    S_ISREG(st.st_mode) && st.st_mtime >= time(NULL) - LOCK_RECENT_S)
		return !lock_held(path);
	return false;
}

/*
 * Whether rank who of this job is alive in a new incarnation (it holds its
 * lock-<r>, taken first in ft_init) although its record here is of a dead
 * one. At the job's first view such a rank is not gone: it may be looking
 * for the job elsewhere (a later generation, after a restart). Counting it
 * out once let a restarted rank settle a first view of its own while its
 * job's other ranks lived, take its own buffer for the job's sum and run
 * the whole job alone.
 */
static bool lives_again(const struct mbf *r, int who)
{
	char path[800];

	snprintf(path, sizeof(path), "%s/lock-%d", r->dir, who);
	return who != r->rank && lock_held(path);
}

static int mbf_try_settle(struct ft__mb *mb, uint32_t gen, const int *cand, int ncand,
			  const int *back, int nback, bool force, struct ft__view *view)
{
	struct mbf *r = be(mb);
	uint64_t first = UINT64_MAX;
	int *members, *state, n = 0, missing = 0, coordinator = -1, all = ncand + nback, rc;
	uint64_t *ops; /* each one's published next op */
	bool *newinc;

	if (nback < 0 || nback > FT__BACK_MAX)
		return -FT_EINVAL;
	rc = read_view(r, gen, view);
	if (rc != 0) {
		if (rc == 1 && gen == 0)
			r->nonce = view->nonce;
		if (rc == 1)
			(void)ft__reserve_refill(&r->spare); /* for the next one */
		return rc;
	}
	if (ncand < 1)
		return 0;
	members = malloc((size_t)all * sizeof(int));
	state = malloc((size_t)all * sizeof(int));
	newinc = calloc((size_t)all, sizeof(bool));
	ops = calloc((size_t)all, sizeof(uint64_t));
	if (members == NULL || state == NULL || newinc == NULL || ops == NULL) {
		free(members);
		free(state);
		free(newinc);
		free(ops);
		return -FT_ENOMEM;
	}
	/* A candidate is live (published), absent (not yet; or its file is
	 * malformed, which only a forced settle gets past), or out: its process
	 * is gone from this host, or it finalized (left-<r>). What is malformed
	 * is ignored, and said so when it shapes the view. An awaited rank
	 * (back) is live once its new incarnation published as rejoining, and
	 * absent until then. */
	for (int i = 0; i < all; i++) {
		bool awaited = i >= ncand;
		int who = awaited ? back[i - ncand] : cand[i];
		struct ft__member m;
		rc = read_member(r, gen, who, &m);
		if (rc == -FT_ECORRUPT)
			rc = MEMBER_CORRUPT;
		if (awaited) {
			/* a record of the dead incarnation, or none yet: wait */
			if (rc != MEMBER_LIVE || !m.rejoining)
				rc = MEMBER_ABSENT;
			state[i] = rc;
			ops[i] = m.next_op;
			continue;
		}
		/* died inside ft_init before it published: its lock file, taken
		 * first, is there and held by no one (waiting for it until the
		 * connect timeout failed every rank's ft_init) */
		if (rc == MEMBER_ABSENT && gen == 0 && lock_orphaned(r, who))
			rc = MEMBER_DEAD;
		if ((rc == MEMBER_ABSENT || rc == MEMBER_CORRUPT) && gen > 0) {
			int left = departed(r, who);
			if (left == 1 || read_member(r, gen - 1, who, NULL) == MEMBER_DEAD)
				rc = MEMBER_DEAD;
			else if (left < 0)
				rc = MEMBER_BAD_MARKER;
		}
		/* rejoin: a dead candidate (not one that finalized) is awaited
		 * for a new incarnation too: at the job's start, or when this
		 * rank did not see it die (several died at once) */
		if (rc == MEMBER_DEAD && departed(r, who) != 1 &&
		    (awaited_at_start(r, who) || (gen == 0 && lives_again(r, who))))
			rc = MEMBER_ABSENT;
		else if (rc == MEMBER_LIVE && r->dead_since != NULL)
			r->dead_since[who] = 0;
		if (rc < 0)
			goto out;
		state[i] = rc;
		/* a new incarnation of a candidate whose death this rank did not
		 * see (several died at once): taken as an awaited one, its next
		 * op not the others' first, and not the coordinator */
		newinc[i] = gen > 0 && rc == MEMBER_LIVE && m.rejoining;
		ops[i] = m.next_op;
		if (newinc[i])
			continue;
		if (rc == MEMBER_LIVE && m.next_op < first)
			first = m.next_op;
		if (rc != MEMBER_DEAD && coordinator < 0)
			coordinator = who;
	}
	rc = 0;
	if (r->rank != coordinator)
		goto out;
	/* an awaited rank whose log is ahead of the others is not of this run */
	for (int i = 0; i < all; i++) {
		bool awaited = i >= ncand;
		if (state[i] != MEMBER_LIVE || (!awaited && !newinc[i]))
			continue;
		uint64_t op = ops[i];
		if (first == UINT64_MAX || op > first + 1) {
			ft__warn("rendezvous: generation %u settles without rank %d: its new "
				 "incarnation can take part from op %llu, the others are at op %llu",
				 gen, awaited ? back[i - ncand] : cand[i], (unsigned long long)op,
				 (unsigned long long)first);
			state[i] = MEMBER_DEAD;
		}
	}
	for (int i = 0; i < all; i++) {
		if (i >= ncand && state[i] == MEMBER_ABSENT && force)
			state[i] = MEMBER_DEAD;
		missing += state[i] != MEMBER_LIVE && state[i] != MEMBER_DEAD;
	}
	n = 0;
	for (int i = 0; i < all; i++)
		if (state[i] == MEMBER_LIVE)
			members[n++] = i < ncand ? cand[i] : back[i - ncand];
	/* A restarted incarnation at the job's first view: the job's start
	 * failed once, and the ranks it does not see may be on their way back
	 * (its launcher restarts them). A world of its own, or of a few, would
	 * run the job apart from them (12 of issue 20: a rank restarted in
	 * ft_init ran the whole job alone, size 1, while the others were being
	 * restarted): it settles only with a majority of the world. */
	if (gen == 0 && r->incarnation > 0 && n < r->world_size && 2 * n <= r->world_size) {
		if (!r->said_quorum)
			ft__warn("rendezvous: this restarted rank (incarnation %u) settles the job's "
				 "first view only with a majority of its %d ranks; %d are here: waiting "
				 "for the others", r->incarnation, r->world_size, n);
		r->said_quorum = true;
		n = 0;
	}
	if (n > 0 && first != UINT64_MAX && (missing == 0 || force)) {
		for (int i = 0; i < ncand; i++)
			if (state[i] == MEMBER_CORRUPT)
				ft__warn("rendezvous: generation %u settles without rank %d: its member "
					 "file in %s/gen-%u is malformed", gen, cand[i], r->dir, gen);
			else if (state[i] == MEMBER_BAD_MARKER)
				ft__warn("rendezvous: generation %u settles without rank %d, whose "
					 "departure marker in %s is malformed", gen, cand[i], r->dir);
		/* ascending, as every view */
		for (int i = 1; i < n; i++)
			for (int j = i; j > 0 && members[j - 1] > members[j]; j--) {
				int t = members[j];
				members[j] = members[j - 1];
				members[j - 1] = t;
			}
		rc = write_view(r, gen, members, n, first);
	}
	if (rc == 0) {
		rc = read_view(r, gen, view);
		if (rc == 1 && gen == 0)
			r->nonce = view->nonce;
		if (rc == 1)
			(void)ft__reserve_refill(&r->spare);
	}
out:
	free(members);
	free(state);
	free(newinc);
	free(ops);
	return rc;
}

/* Whether a live process holds lock file path (a rank of this job alive). */
static bool lock_held(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	bool held;

	if (fd < 0)
		return false;
	ft__fd_own(fd);
	held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
	ft__fd_close(fd); /* drops the probe's shared lock at once */
	return held;
}

/* Whether another rank of this job holds its lock (is alive). */
static bool other_alive(const struct mbf *r)
{
	char path[800];

	for (int i = 0; i < r->world_size; i++) {
		snprintf(path, sizeof(path), "%s/lock-%d", r->dir, i);
		if (i != r->rank && lock_held(path))
			return true;
	}
	return false;
}

static int mbf_resume(struct ft__mb *mb, struct ft__view *latest)
{
	struct mbf *r = be(mb);
	struct ft__view v = {0};
	uint32_t g;
	int rc;

	if (!other_alive(r))
		return 0;
	/* generation 0's view, whoever wrote it (its writer may be the rank
	 * that died): the job's nonce */
	rc = read_view_any(r, 0, &v);
	if (rc <= 0)
		return rc;
	r->nonce = v.nonce;
	ft__view_free(&v);
	for (g = 1;; g++) {
		struct ft__view next = {0};
		rc = read_view(r, g, &next);
		if (rc < 0)
			return rc;
		if (rc == 0)
			break;
		ft__view_free(&next);
	}
	return read_view_any(r, g - 1, latest);
}

/* Removes what a dead rank left in dir: member files of gone writers and
 * lock files nobody holds. */
static void sweep_dead(const struct mbf *r, const char *dir, uint32_t gen)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[1100];
	int orig;

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (sscanf(e->d_name, "member-%d", &orig) == 1) {
			if (orig >= 0 && orig < r->world_size &&
			    read_member(r, gen, orig, NULL) == MEMBER_DEAD)
				unlink(path);
		} else if (sscanf(e->d_name, "lock-%d", &orig) == 1 && orig != r->rank) {
			int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
			ft__fd_own(fd);
			if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0)
				unlink(path);
			if (fd >= 0)
				ft__fd_close(fd);
		}
	}
	closedir(d);
}

/* Unlinks every entry of dir (no subdirectories but gen-<g> and reserve-<r>,
 * emptied first, and the reserve's d, empty). */
static void empty_dir(const char *dir, int depth)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[1100];

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path))
			continue;
		if (depth == 0 && (strncmp(e->d_name, "gen-", 4) == 0 ||
				   strncmp(e->d_name, "reserve-", 8) == 0)) {
			empty_dir(path, 1);
			rmdir(path);
		} else if (unlink(path) != 0 && errno == EISDIR && depth == 1) {
			rmdir(path); /* a reserve's directory, or one renamed into a gen-<g> */
		}
	}
	closedir(d);
}

/*
 * The job's last rank to leave takes the job's directory with it (the
 * departure markers, views and member files the others left): every rank
 * unlinks its own lock file before it looks, so whichever looks last finds
 * no lock held and removes it (two that look at once both remove: harmless).
 * While any rank of the job lives (holds its lock), everything stays: a
 * settle in progress reads the departure markers. When a rank of the job
 * never finalized (it died and was not back), the end marker stays, so that
 * a new incarnation of it started later learns at once that the job is
 * over (ft_init: -FT_EENDED), instead of waiting for its connect timeout.
 */
static void remove_job_if_last(const struct mbf *r)
{
	DIR *d = opendir(r->dir);
	struct dirent *e;
	char path[1100];
	bool lost = false;
	int orig;

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		snprintf(path, sizeof(path), "%s/%s", r->dir, e->d_name);
		if (sscanf(e->d_name, "lock-%d", &orig) == 1 && lock_held(path)) {
			closedir(d);
			return;
		}
	}
	closedir(d);
	for (int i = 0; i < r->world_size && r->nonce != 0; i++)
		lost |= departed(r, i) != 1;
	empty_dir(r->dir, 0);
	if (lost) {
		char text[64];
		snprintf(text, sizeof(text), "ftcc-ended %llx\n", (unsigned long long)r->nonce);
		if (ft__mbf_write(NULL, r->dir, ENDED_FILE, text, 0, -1) == 0)
			return;
	}
	rmdir(r->dir);
}

static void mbf_close(struct ft__mb *mb, uint32_t gen, bool remove_view)
{
	struct mbf *r = be(mb);
	char dir[700], path[800];

	if (r == NULL)
		return;
	if (r->lock_fd >= 0) {
		for (uint32_t g = 0; g <= gen; g++) {
			gen_dir(r, g, dir, sizeof(dir));
			snprintf(path, sizeof(path), "%s/member-%d", dir, r->rank);
			unlink(path);
			if (remove_view) {
				sweep_dead(r, dir, g);
				snprintf(path, sizeof(path), "%s/view", dir);
				unlink(path);
			}
			rmdir(dir);
		}
		if (remove_view)
			sweep_dead(r, r->dir, gen);
		ft__reserve_drop(&r->spare);
		snprintf(path, sizeof(path), "%s/lock-%d", r->dir, r->rank);
		unlink(path);
		ft__fd_close(r->lock_fd);
		r->lock_fd = -1;
		/* only a rank that said goodbye (a clean end) of a job that ran
		 * (a first view read) cleans up after it: one whose ft_init failed
		 * before that once took the directory from under ranks that had
		 * not yet taken their lock */
		if (departed(r, r->rank) == 1 && r->nonce != 0)
			remove_job_if_last(r);
	}
	free(r->dead_since);
	free(r);
	mb->be = NULL;
}

const struct ft__mb_ops ft__mb_file_ops = {
	.size = sizeof(struct ft__mb_ops),
	.name = "file",
	.open = mbf_open,
	.publish = mbf_publish,
	.try_settle = mbf_try_settle,
	.resume = mbf_resume,
	.lookup = mbf_lookup,
	.depart = mbf_depart,
	.close = mbf_close,
};
