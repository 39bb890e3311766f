/* log.c: leveled diagnostics on stderr, prefixed with the rank. */
/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "internal.h"

int ft__log_level = FT__LOG_WARN;
int ft__log_rank = -1;

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

void ft__warn_gated(struct ft__warn_gate *g, const char *fmt, ...)
{
	int64_t now = ft__now_ms();
	char tail[96] = "";
	va_list ap;

	if (ft__log_level < FT__LOG_WARN)
		return;
	if (g->last_ms != 0 && now - g->last_ms < FT__WARN_PERIOD_MS) {
		g->held++;
		return;
	}
	if (g->held > 0)
		snprintf(tail, sizeof(tail), " (and %u more such in the last %d s)", g->held,
			 (int)((now - g->last_ms) / 1000));
	g->last_ms = now;
	g->held = 0;
	va_start(ap, fmt);
	log_line(FT__LOG_WARN, fmt, ap, tail);
	va_end(ap);
}
