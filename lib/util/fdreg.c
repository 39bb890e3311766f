/* fdreg.c: the registry of the library's own descriptors and the fork child handler that closes them. */
/* SPDX-License-Identifier: MIT */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "fdreg.h"
#include "internal.h"

/*
 * One bit per descriptor number, set while the library owns it. A fixed
 * bitmap of lock-free atomic words: the child handler runs between fork()
 * and the caller's next line, where only async-signal-safe calls are
 * allowed (no malloc, no locks another thread may have held at the fork).
 * 2^20 bits (128 KiB of zeroed .bss, touched only where descriptors are)
 * cover the kernel's default fs.nr_open, the hard limit of RLIMIT_NOFILE.
 */
#define FDREG_MAX (1 << 20)
#define WORD_BITS 64

static _Atomic uint64_t owned[FDREG_MAX / WORD_BITS];
static _Atomic int too_high_warned;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "the fork handler needs lock-free 64-bit atomics");

/* In the child: every owned descriptor is the parent's, none is the child's to use. */
static void close_owned_in_child(void)
{
	for (size_t w = 0; w < FT__ARRAY_SIZE(owned); w++) {
		uint64_t bits;
		if (atomic_load_explicit(&owned[w], memory_order_relaxed) == 0)
			continue;
		bits = atomic_exchange(&owned[w], 0);
		while (bits != 0) {
			int b = __builtin_ctzll(bits);
			bits &= bits - 1;
			close((int)(w * WORD_BITS + (size_t)b));
		}
	}
}

static void install_atfork(void)
{
	/* fails only for lack of memory: descriptors then rely on O_CLOEXEC alone */
	if (pthread_atfork(NULL, NULL, close_owned_in_child) != 0)
		ft__warn("pthread_atfork failed: a child forked later keeps the library's "
			 "descriptors");
}

void ft__fd_own(int fd)
{
	if (fd < 0)
		return;
	pthread_once(&atfork_once, install_atfork);
	if (fd >= FDREG_MAX) {
		if (atomic_exchange(&too_high_warned, 1) == 0)
			ft__warn("descriptor %d is past the fork registry's %d: a child forked "
				 "after ft_init may keep it", fd, FDREG_MAX);
		return;
	}
	atomic_fetch_or(&owned[fd / WORD_BITS], UINT64_C(1) << (fd % WORD_BITS));
}

void ft__fd_disown(int fd)
{
	if (fd < 0 || fd >= FDREG_MAX)
		return;
	atomic_fetch_and(&owned[fd / WORD_BITS], ~(UINT64_C(1) << (fd % WORD_BITS)));
}

int ft__fd_close(int fd)
{
	ft__fd_disown(fd);
	return close(fd);
}

int ft__fd_owned(int fd)
{
	if (fd < 0 || fd >= FDREG_MAX)
		return 0;
	return (atomic_load(&owned[fd / WORD_BITS]) >> (fd % WORD_BITS)) & 1;
}
