/* boot_entry.c: the check of one address-book entry (host:port), which every source of a book applies. */
/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "bootstrap.h"
#include "internal.h"

_Static_assert(FT__BOOK_ENTRY_MAX == 64, "the messages below say 63 characters");

static int bad(const char **why, const char *reason)
{
	*why = reason;
	return -FT_ECONFIG;
}

static int is_host_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_';
}

/* Inside brackets: hex digits, colons, dots (an IPv4 tail), and a %zone. */
static int is_v6_char(char c)
{
	return (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || (c >= '0' && c <= '9') ||
	       c == ':' || c == '.';
}

static int check_host(const char *h, size_t n, const char **why)
{
	size_t i = 0;

	if (n == 0)
		return bad(why, "no host before the ':'");
	if (h[0] == '[') {
		if (n < 3 || h[n - 1] != ']')
			return bad(why, "an IPv6 address needs its closing ']'");
		for (i = 1; i < n - 1 && h[i] != '%'; i++)
			if (!is_v6_char(h[i]))
				return bad(why, "not an IPv6 address inside the brackets");
		if (i == 1 || memchr(h + 1, ':', i - 1) == NULL)
			return bad(why, "not an IPv6 address inside the brackets");
		if (i < n - 1 && i + 2 == n)
			return bad(why, "an empty IPv6 zone after the '%'");
		for (i++; i < n - 1; i++)
			if (!is_host_char(h[i]))
				return bad(why, "a bad IPv6 zone after the '%'");
		return 0;
	}
	for (i = 0; i < n; i++) {
		if (h[i] == ':')
			return bad(why, "an IPv6 address needs brackets, as in [::1]:5000");
		if (!is_host_char(h[i]))
			return bad(why, "a host name holds only letters, digits, '-', '.' and '_'");
	}
	return 0;
}

int ft__boot_entry_check(const char *s, size_t len, const char **why)
{
	const char *colon;
	unsigned long port = 0;
	size_t plen;

	if (len == 0)
		return bad(why, "empty");
	if (len >= FT__BOOK_ENTRY_MAX)
		return bad(why, "too long (at most 63 characters)");
	if (memchr(s, '\0', len) != NULL)
		return bad(why, "holds a NUL byte");
	colon = memrchr(s, ':', len);
	if (colon == NULL)
		return bad(why, "no ':PORT'");
	plen = len - (size_t)(colon + 1 - s);
	if (plen == 0 || plen > 5)
		return bad(why, "the port must be a number from 1 to 65535");
	for (size_t i = 0; i < plen; i++) {
		if (colon[1 + i] < '0' || colon[1 + i] > '9')
			return bad(why, "the port must be a number from 1 to 65535");
		port = port * 10 + (unsigned long)(colon[1 + i] - '0');
	}
	if (port < 1 || port > 65535)
		return bad(why, "the port must be a number from 1 to 65535");
	return check_host(s, (size_t)(colon - s), why);
}
