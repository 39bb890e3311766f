/* aio.h: the asynchronous file writer shared by the pairwise logs and the checkpoints: io_uring, else pwrite. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_AIO_H
#define FTCC_AIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef FTCC_HAVE_URING
#include <liburing.h>
#endif

/*
 * One write (data, then data2 right after it in the file: a header and its
 * payload from two places) or one fdatasync. The caller owns the struct and
 * the buffers, and touches neither while busy. complete() runs exactly once
 * per started io, from ft__aio_start (pwrite, or a failed submission) or
 * from the reaping call, with 0 or -errno.
 */
enum { FT__AIO_WRITE, FT__AIO_FSYNC };

struct ft__aio_io {
	int kind;
	int fd;
	const void *data;
	size_t len;
	const void *data2;      /* may be NULL (len2 0) */
	size_t len2;
	uint64_t off;
	size_t done;            /* bytes written so far */
	bool busy;              /* started, complete() not yet called */
	int res;                /* the result given to complete() */
	bool after_all;         /* io_uring: starts only once every io started
				 * before it completed (IOSQE_IO_DRAIN) */
	void (*complete)(struct ft__aio_io *io, int res);
	void *owner;            /* for complete() */
	struct ft__aio_io *next; /* the engine's: the backlog */
	struct iovec iov[2];    /* the engine's: a writev in flight */
};

struct ft__aio {
	bool uring;
#ifdef FTCC_HAVE_URING
	struct io_uring ring;
#endif
	unsigned depth;         /* ios given to the kernel at once */
	unsigned inflight;      /* given to the kernel, not reaped */
	struct ft__aio_io *backlog, *backlog_tail; /* started, waiting for room */
	size_t pending;         /* started and not completed (backlog included) */
	bool held;              /* ft__aio_hold: queued, submitted at ft__aio_release */
};

/*
 * want_uring: io_uring with depth entries, falling back to pwrite (with a
 * warning naming who) when io_uring_queue_init fails or liburing is not
 * compiled in; otherwise pwrite only. Never fails. Any thread may start and
 * reap ios, one at a time; completions (and the ios started after_all) move
 * on in the kernel while this process is elsewhere.
 */
void ft__aio_init(struct ft__aio *a, unsigned depth, bool want_uring, const char *who);
/* Between hold and release, ios started are queued and given to the kernel
 * in one submission at release (one system call for a round of writes). */
void ft__aio_hold(struct ft__aio *a);
void ft__aio_release(struct ft__aio *a);
/* Leaves ios in flight to the kernel: call ft__aio_drain first. */
void ft__aio_fini(struct ft__aio *a);
/* "io_uring" or "pwrite". */
const char *ft__aio_engine_name(const struct ft__aio *a);
/*
 * Starts io (pwrite: does it). Never blocks on io_uring: when depth ios are
 * in flight it waits in a backlog, submitted as completions are reaped.
 * Returns 0, or the error of a failed submission (also given to complete()).
 */
int ft__aio_start(struct ft__aio *a, struct ft__aio_io *io);
/* Reaps completions: those ready, and (wait) at least one if any is in flight. */
int ft__aio_reap(struct ft__aio *a, bool wait);
/*
 * As ft__aio_reap(a, false), and first enters the kernel so that it posts
 * the completions it has: one syscall when ios are in flight. For a caller
 * that must see writes finish between its calls without waiting
 * (checkpoints); the log does not.
 */
int ft__aio_poll(struct ft__aio *a);
/* Waits until io is complete. */
int ft__aio_wait(struct ft__aio *a, struct ft__aio_io *io);
/* Waits until every started io is complete. */
int ft__aio_drain(struct ft__aio *a);

#endif
