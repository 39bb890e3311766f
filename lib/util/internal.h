/* internal.h: what every ftcc source file shares: export marker, logging, clocks. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_INTERNAL_H
#define FTCC_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "ftcc.h"

#define FT__EXPORT __attribute__((visibility("default")))
#define FT__UNUSED __attribute__((unused))
#define ft__container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))
#define FT__ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

enum { FT__LOG_ERROR, FT__LOG_WARN, FT__LOG_INFO, FT__LOG_DEBUG };

extern int ft__log_level;
extern int ft__log_rank;
void ft__log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * Warnings anyone can provoke (strangers' connections), and a rank's own
 * shortages met again and again (a full directory, no descriptor), pass a
 * gate: at most one line per FT__WARN_PERIOD_MS, which counts the lines
 * held back since. Threads may share a gate.
 */
#define FT__WARN_PERIOD_MS 10000
struct ft__warn_gate {
	int64_t last_ms;        /* 0: nothing printed yet */
	unsigned held;
};
void ft__warn_gated(struct ft__warn_gate *g, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* The same at any level (an error said once per period); keeps errno. */
void ft__log_gated(int level, struct ft__warn_gate *g, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Checks the level before formatting; keeps errno. */
#define ft__log(level, ...)                               \
	do {                                              \
		if ((level) <= ft__log_level) {           \
			int ft__saved_errno_ = errno;     \
			ft__log_write((level), __VA_ARGS__); \
			errno = ft__saved_errno_;         \
		}                                         \
	} while (0)
#define ft__error(...) ft__log(FT__LOG_ERROR, __VA_ARGS__)
/* What a public call returns for rc: rc when it is 0, positive or an FT_E
 * code; a shortage's code for a raw errno that names one (ft__err_local);
 * FT_EIO (logged) for another raw errno. */
int ft__err_public(int rc);
/* The code of a local failure's errno e: FT_EMFILE (no descriptor),
 * FT_ENOMEM (no memory or buffer), FT_ENOSPC (no space or quota), else
 * FT_EIO. A shortage here says nothing of any peer. */
int ft__err_local(int e);
/* rc, but -FT_EMFILE for an opaque -FT_EIO when this process cannot open a
 * descriptor right now: libfabric's providers report running out of
 * descriptors as an I/O error, which must not read as a peer's fault. */
int ft__err_probe(int rc);
/* Whether rc is such a shortage (ft__err_local's codes but FT_EIO). */
bool ft__err_shortage(int rc);
#define ft__warn(...) ft__log(FT__LOG_WARN, __VA_ARGS__)
#define ft__info(...) ft__log(FT__LOG_INFO, __VA_ARGS__)
#define ft__debug(...) ft__log(FT__LOG_DEBUG, __VA_ARGS__)

static inline uint64_t ft__now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline int64_t ft__now_ms(void)
{
	return (int64_t)(ft__now_ns() / 1000000ull);
}

/* Wipes a secret (a token) in a way the compiler cannot drop as a dead store. */
static inline void ft__wipe(void *p, size_t n)
{
	explicit_bzero(p, n);
}

/* Milliseconds left until deadline_ms (a ft__now_ms() value), at least 0. */
static inline int ft__ms_left(int64_t deadline_ms)
{
	int64_t left = deadline_ms - ft__now_ms();
	return left < 0 ? 0 : (left > 1000000000 ? 1000000000 : (int)left);
}

/* A condition variable whose timed waits are against CLOCK_MONOTONIC, like
 * every deadline here: 0 or the pthread error. */
static inline int ft__cond_init_monotonic(pthread_cond_t *cond)
{
	pthread_condattr_t ca;
	int rc = pthread_condattr_init(&ca);

	if (rc != 0)
		return rc;
	rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (rc == 0)
		rc = pthread_cond_init(cond, &ca);
	pthread_condattr_destroy(&ca);
	return rc;
}

#endif
