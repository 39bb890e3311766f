/* fdreg.h: the registry of the library's own descriptors, closed in a child forked after ft_init. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_FDREG_H
#define FTCC_FDREG_H

/*
 * A process that forks after ft_init (data loader workers) must not keep
 * the communicator's descriptors alive in the child: a child holding a
 * socket copy hides the parent's death from its peers (no FIN until the
 * child exits too), and one holding the rank's lock file blocks the
 * rank's restart. Every descriptor the library opens is owned here as soon
 * as it exists, and disowned just before it is closed; a pthread_atfork
 * child handler closes every owned descriptor in the child (close() only:
 * async-signal-safe). O_CLOEXEC covers exec; this covers fork alone.
 *
 * Known gap: a fork racing with the few instructions between a
 * descriptor's creation and ft__fd_own (or between ft__fd_disown and
 * close) leaves that one copy open in the child.
 */

/* Registers fd (>= 0) as the library's. An fd past the registry's bound
 * (2^20, the kernel's default fs.nr_open) is warned about once and left
 * to O_CLOEXEC. */
void ft__fd_own(int fd);
/* Forgets fd; a negative or unowned fd is ignored. */
void ft__fd_disown(int fd);
/* ft__fd_disown then close: close()'s result (0 or -1 with errno). */
int ft__fd_close(int fd);
/* Whether fd is registered (tests). */
int ft__fd_owned(int fd);

#endif
