/* fabric_bell.h: a doorbell other processes on this host can ring, for providers with no wait object. */
#ifndef FTCC_FABRIC_BELL_H
#define FTCC_FABRIC_BELL_H

#include <stdint.h>

struct ft_bell;

/* This process's bell, made on first use; NULL when it cannot be. */
struct ft_bell *ft__bell_own(void);
/* What a peer passes to ft__bell_map to reach this process's bell (-1: none). */
int ft__bell_handle(void);
/* Maps the bell of process pid (handle as that process published it); NULL if not possible. */
struct ft_bell *ft__bell_map(int pid, int handle);
void ft__bell_unmap(struct ft_bell *b);
/* Wakes the threads asleep on b; a system call only when one is. */
void ft__bell_ring(struct ft_bell *b);
/*
 * Sleeping on one's own bell, without losing a ring that comes between the
 * last look at the queues and the sleep: arm, look once more, then wait on
 * what arm returned (it returns at once if the bell rang since), then disarm.
 */
uint32_t ft__bell_arm(struct ft_bell *b);
void ft__bell_wait(struct ft_bell *b, uint32_t armed, int timeout_ms);
void ft__bell_disarm(struct ft_bell *b);

#endif /* FTCC_FABRIC_BELL_H */
