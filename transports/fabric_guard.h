/* fabric_guard.h: frees the shm region locks that a killed process left held. */
#ifndef FTCC_FABRIC_GUARD_H
#define FTCC_FABRIC_GUARD_H

#include <stdbool.h>

struct ft_guard;

/* A guard for this process's shm regions; NULL when libfabric's shm region layout is not known. */
struct ft_guard *ft__guard_open(void);
/*
 * Watches the region named region (a file in /dev/shm) of process pid: own
 * (one of this process's endpoints; it must still be named) or a peer's (its
 * lock is watched if it is still named, its death in any case). A peer's
 * death starts a vigil over the locks of this process's regions and of the
 * dead peer's. Peers stay watched until they die or the guard closes.
 * Returns whether the region is watched.
 */
bool ft__guard_add(struct ft_guard *g, const char *region, int pid, bool own);
/* Stops watching one of this process's regions (its endpoint closed). */
void ft__guard_remove(struct ft_guard *g, const char *region);
void ft__guard_close(struct ft_guard *g);

#endif /* FTCC_FABRIC_GUARD_H */
