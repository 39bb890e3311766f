/* scan.c: strict fields of the file rendezvous's one-line files (scan.h): whatever a file holds, a field is read whole and checked, or the line is refused. */
/* SPDX-License-Identifier: MIT */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scan.h"

/* The next field: printable ASCII without spaces, after exactly one space
 * (none before the first). */
bool ft__scan_field(struct ft__scan *s, const char **f, size_t *len)
{
	const char *q;

	if (!s->first) {
		if (s->p == s->end || *s->p != ' ')
			return false;
		s->p++;
	}
	s->first = false;
	for (q = s->p; q < s->end && *q > ' ' && *q <= '~'; q++)
		;
	if (q == s->p)
		return false;
	*f = s->p;
	*len = (size_t)(q - s->p);
	s->p = q;
	return true;
}

/* The file ends here: one newline, nothing after it. */
bool ft__scan_at_end(const struct ft__scan *s)
{
	return s->end - s->p == 1 && *s->p == '\n';
}

bool ft__scan_keyword(struct ft__scan *s, const char *word)
{
	const char *f;
	size_t len;

	return ft__scan_field(s, &f, &len) && len == strlen(word) && memcmp(f, word, len) == 0;
}

bool ft__scan_str(struct ft__scan *s, char *dst, size_t cap)
{
	const char *f;
	size_t len;

	if (!ft__scan_field(s, &f, &len) || len >= cap)
		return false;
	memcpy(dst, f, len);
	dst[len] = '\0';
	return true;
}

/* A decimal (base 10) or hex (base 16) number in [lo, hi], digits only. */
bool ft__scan_num(struct ft__scan *s, int base, uint64_t lo, uint64_t hi, uint64_t *out)
{
	const char *f;
	size_t len;
	uint64_t v = 0;

	if (!ft__scan_field(s, &f, &len))
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = f[i];
		unsigned d;
		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (base == 16 && c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else
			return false;
		if (v > (UINT64_MAX - d) / (unsigned)base)
			return false;
		v = v * (unsigned)base + d;
	}
	if (v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

bool ft__scan_int(struct ft__scan *s, int lo, int hi, int *out)
{
	uint64_t v;

	if (!ft__scan_num(s, 10, (uint64_t)lo, (uint64_t)hi, &v))
		return false;
	*out = (int)v;
	return true;
}

/* A string that a record may carry as one field. */
bool ft__field_text(const char *s, size_t cap)
{
	size_t n = strnlen(s, cap);

	if (n == 0 || n == cap)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] <= ' ' || s[i] > '~')
			return false;
	return true;
}
