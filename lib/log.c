/* log.c: leveled diagnostics on stderr, prefixed with the rank. */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "internal.h"

int ft__log_level = FT__LOG_WARN;
int ft__log_rank = -1;

void ft__log_write(int level, const char *fmt, ...)
{
	static const char *const names[] = {"error", "warn", "info", "debug"};
	char line[1024];
	va_list ap;
	int n;

	/* at debug level the pid tells apart ranks of jobs running side by side */
	if (ft__log_level >= FT__LOG_DEBUG)
		n = snprintf(line, sizeof(line), "ftcc[%d/%d] %s: ", ft__log_rank, (int)getpid(),
			     names[level < 0 ? 0 : (level > 3 ? 3 : level)]);
	else
		n = snprintf(line, sizeof(line), "ftcc[%d] %s: ", ft__log_rank,
			     names[level < 0 ? 0 : (level > 3 ? 3 : level)]);
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", line);
}
