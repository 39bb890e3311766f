/* ftcc-run.c: the local launcher; starts, watches, restarts and fault-injects N ranks. */
/* SPDX-License-Identifier: MIT */

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
#include "ftcc-run.h"

static int sig_pipe[2] = { -1, -1 };
/* Lets the launch loop stop early on ^C; everything else goes through sig_pipe. */
static volatile sig_atomic_t stop_requested;

double elapsed(const struct launcher *L)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - L->t0.tv_sec) + (double)(now.tv_nsec - L->t0.tv_nsec) / 1e9;
}

/* Whole buffer to fd; a reader that went away (EPIPE) silences that fd, it does not kill us. */

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
		ft__store_server_rank_died(L->store, job, (uint32_t)L->opt.nranks, (uint32_t)r->id);
	/*
	 * The file rendezvous hears it too: gone-<r> in the job's directory
	 * (when the rank got as far as making it). A rank killed before it
	 * took its lock leaves nothing there, and the others would wait for it
	 * until their connect timeout; with the marker they start without it.
	 * Its new incarnation (a restart) removes the marker as it takes the lock.
	 * A rank killed by a signal, or one that failed (its ft_init out of
	 * descriptors or memory, before it took its lock: the others would
	 * have waited for it until their connect timeout, and all failed) and
	 * will not be restarted (a restart comes back for the others to wait
	 * for: marked gone, the nemesis campaign once saw such a new
	 * incarnation, alone and losing packets, run the whole job by itself);
	 * only before any rank finished: a rank that ended, or died once the
	 * job was ending, is no early death, and a mark for it let a rank
	 * restarted after the job's end start a new job of its own (the
	 * campaign's split).
	 */
	if (L->some_done || (!WIFSIGNALED(wstatus) && L->opt.restart &&
			     r->restarts < L->opt.max_restarts && !L->shutting_down))
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

		size_t need = L->nstreams + 1 + (L->store ? ft__store_server_poll_count(L->store) : 0);
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
			int ms = ft__store_server_poll_timeout(L->store);
			nstore = ft__store_server_poll_fill(L->store, pfds + sfirst);
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
			ft__store_server_handle(L->store, pfds + sfirst, nstore); /* its deadlines, too */
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

/* Serving the store is all we do: until a stop signal (0) or --timeout (124). */
static int serve_store_only(struct launcher *L)
{
	struct pollfd *pfds = NULL;
	size_t cap = 0;
	int status = 0;

	while (L->stop_signals == 0) {
		size_t need = 1 + ft__store_server_poll_count(L->store), n;
		int wait = ft__store_server_poll_timeout(L->store);
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
		n = ft__store_server_poll_fill(L->store, pfds + 1);
		for (size_t i = 0; i < 1 + n; i++)
			pfds[i].revents = 0;
		if (poll(pfds, 1 + n, wait) < 0 && errno != EINTR)
			break;
		ft__store_server_handle(L->store, pfds + 1, n);
		unsigned char sigs[64];
		ssize_t k;
		while ((k = read(sig_pipe[0], sigs, sizeof(sigs))) > 0)
			for (ssize_t i = 0; i < k; i++)
				L->stop_signals += sigs[i] != SIGCHLD;
	}
	free(pfds);
	return status;
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
		ft__store_server_close(L->store);
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
		ft__store_server_close(L->store);
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
	ft__store_server_close(L->store);

	int status = exit_status(L);
	free(L->streams);
	free(L->out.p);
	free(L->ranks);
	free(L->opt.kills);
	return status;
}
