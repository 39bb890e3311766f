/* log.c: leveled diagnostics on stderr, prefixed with the rank. */
/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "internal.h"

int ft__log_level = FT__LOG_WARN;
int ft__log_rank = -1;

__attribute__((format(printf, 2, 0)))
static void log_line(int level, const char *fmt, va_list ap, const char *tail)
{
	static const char *const names[] = {"error", "warn", "info", "debug"};
	char line[1024];
	int n;

	/* at debug level the pid tells apart ranks of jobs running side by side */
	if (ft__log_level >= FT__LOG_DEBUG)
		n = snprintf(line, sizeof(line), "ftcc[%d/%d] %s: ", ft__log_rank, (int)getpid(),
			     names[level < 0 ? 0 : (level > 3 ? 3 : level)]);
	else
		n = snprintf(line, sizeof(line), "ftcc[%d] %s: ", ft__log_rank,
			     names[level < 0 ? 0 : (level > 3 ? 3 : level)]);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	fprintf(stderr, "%s%s\n", line, tail);
}

void ft__log_write(int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_line(level, fmt, ap, "");
	va_end(ap);
}

/* Gates may be shared by threads (a backend's publish and settle run on
 * the detector's thread and the main thread): one lock for all, taken only
 * on these rare paths. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((format(printf, 3, 0)))
static void log_gated(int level, struct ft__warn_gate *g, const char *fmt, va_list ap)
{
	int64_t now = ft__now_ms();
	char tail[96] = "";

	if (ft__log_level < level)
		return;
	pthread_mutex_lock(&gate_lock);
	if (g->last_ms != 0 && now - g->last_ms < FT__WARN_PERIOD_MS) {
		g->held++;
		pthread_mutex_unlock(&gate_lock);
		return;
	}
	if (g->held > 0)
		snprintf(tail, sizeof(tail), " (and %u more such in the last %d s)", g->held,
			 (int)((now - g->last_ms) / 1000));
	g->last_ms = now;
	g->held = 0;
	pthread_mutex_unlock(&gate_lock);
	log_line(level, fmt, ap, tail);
}

void ft__warn_gated(struct ft__warn_gate *g, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_gated(FT__LOG_WARN, g, fmt, ap);
	va_end(ap);
}

void ft__log_gated(int level, struct ft__warn_gate *g, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	va_start(ap, fmt);
	log_gated(level, g, fmt, ap);
	va_end(ap);
	errno = saved;
}
