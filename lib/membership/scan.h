/* scan.h: strict fields of the one-line files the file rendezvous reads (views, member files, departure markers): exactly one space between fields, printable text, numbers in range. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_SCAN_H
#define FTCC_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A line being read: p to end, first until the first field is read. */
struct ft__scan {
	const char *p, *end;
	bool first;
};

/* The next field: printable ASCII without spaces, after exactly one space
 * (none before the first). */
bool ft__scan_field(struct ft__scan *s, const char **f, size_t *len);

/* The file ends here: one newline, nothing after it. */
bool ft__scan_at_end(const struct ft__scan *s);

/* The next field is word, exactly. */
bool ft__scan_keyword(struct ft__scan *s, const char *word);

/* The next field, copied into dst (it must fit cap with its NUL). */
bool ft__scan_str(struct ft__scan *s, char *dst, size_t cap);

/* A decimal (base 10) or hex (base 16) number in [lo, hi], digits only. */
bool ft__scan_num(struct ft__scan *s, int base, uint64_t lo, uint64_t hi, uint64_t *out);

/* A decimal int in [lo, hi]. */
bool ft__scan_int(struct ft__scan *s, int lo, int hi, int *out);

/* A string that a record may carry as one field. */
bool ft__field_text(const char *s, size_t cap);

#endif
