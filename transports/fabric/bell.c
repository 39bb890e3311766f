/* bell.c: a futex word in a memfd page that the other processes on this host map and ring. */
/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fabric.h"
#include "fdreg.h"

/*
 * libfabric's shm provider offers no wait object that another process can
 * signal: a receiver either polls its queues or sleeps blind. The bell is the
 * missing signal. Each process keeps one page (a memfd, so that nothing is
 * left behind when the process is killed); a peer maps it through
 * /proc/PID/fd/N, which needs the same ptrace access as shm's own CMA copies.
 *
 * Protocol (all atomics sequentially consistent). Ringer: publish the message
 * (the provider's queues), then seq++, then read sleepers and call FUTEX_WAKE
 * only when it is nonzero. Sleeper: sleepers++, read seq, look at the queues
 * once more, then FUTEX_WAIT on the seq it read. If the ringer saw no sleeper,
 * its message was published before the sleeper's last look; if it saw one,
 * either seq already differs from what the sleeper read (the wait returns at
 * once) or the sleeper is in the kernel and the wake reaches it.
 */

#define BELL_MAGIC 0x4c4c454243435446ull /* "FTCCBELL" */
#define BELL_BYTES 4096

struct ft_bell {
	uint64_t magic;
	int32_t pid;            /* owner */
	uint32_t reserved;
	_Atomic uint32_t seq;   /* the futex word: bumped by every ring */
	_Atomic uint32_t sleepers;
};

static pthread_mutex_t own_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ft_bell *own;
static int own_fd = -1;
static bool own_failed;

static int futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
	return (int)syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

struct ft_bell *ft__fab_bell_own(void)
{
	struct ft_bell *b;

	pthread_mutex_lock(&own_lock);
	/* A forked child shares its parent's page: it needs one of its own. */
	if (own != NULL && own->pid != (int32_t)getpid()) {
		munmap(own, BELL_BYTES);
		ft__fd_close(own_fd);
		own = NULL;
		own_fd = -1;
		own_failed = false;
	}
	if (own == NULL && !own_failed) {
		int fd = memfd_create("ftcc-bell", MFD_CLOEXEC);
		ft__fd_own(fd);
		void *p = MAP_FAILED;
		if (fd >= 0 && ftruncate(fd, BELL_BYTES) == 0)
			p = mmap(NULL, BELL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			if (fd >= 0)
				ft__fd_close(fd);
			own_failed = true;
		} else {
			own = p;
			own->pid = (int32_t)getpid();
			own->magic = BELL_MAGIC;
			own_fd = fd;
		}
	}
	b = own;
	pthread_mutex_unlock(&own_lock);
	return b;
}

int ft__fab_bell_handle(void)
{
	return ft__fab_bell_own() != NULL ? own_fd : -1;
}

struct ft_bell *ft__fab_bell_map(int pid, int handle)
{
	char path[64];
	struct stat st;
	struct ft_bell *b;
	void *p;
	int fd;

	if (pid <= 0 || handle < 0)
		return NULL;
	if (pid == (int)getpid())
		return NULL; /* ft__fab_bell_own: not to be unmapped */
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, handle);
	fd = open(path, O_RDWR | O_CLOEXEC);
	ft__fd_own(fd);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != BELL_BYTES) {
		ft__fd_close(fd);
		return NULL;
	}
	p = mmap(NULL, BELL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ft__fd_close(fd);
	if (p == MAP_FAILED)
		return NULL;
	/* Another file, or another process under a reused pid: never ring it. */
	b = p;
	if (b->magic != BELL_MAGIC || b->pid != pid) {
		munmap(p, BELL_BYTES);
		return NULL;
	}
	return b;
}

void ft__fab_bell_unmap(struct ft_bell *b)
{
	if (b != NULL && b != own)
		munmap(b, BELL_BYTES);
}

void ft__fab_bell_ring(struct ft_bell *b)
{
	atomic_fetch_add(&b->seq, 1);
	if (atomic_load(&b->sleepers) != 0)
		futex(&b->seq, FUTEX_WAKE, INT_MAX, NULL);
}

uint32_t ft__fab_bell_arm(struct ft_bell *b)
{
	atomic_fetch_add(&b->sleepers, 1);
	return atomic_load(&b->seq);
}

void ft__fab_bell_wait(struct ft_bell *b, uint32_t armed, int timeout_ms)
{
	struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};

	futex(&b->seq, FUTEX_WAIT, armed, &ts);
}

void ft__fab_bell_disarm(struct ft_bell *b)
{
	atomic_fetch_sub(&b->sleepers, 1);
}
