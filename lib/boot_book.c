/* boot_book.c: the first address book of in-band membership: the choice of source, the peers list, the check of every entry. */
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

static int skip_blanks(const char *s, size_t i)
{
	while (s[i] == ' ' || s[i] == '\t')
		i++;
	return (int)i;
}

/*
 * The peers list: world_size entries exactly, comma-separated (blanks around
 * a comma are allowed), each checked, no two the same (two ranks cannot
 * listen at one address).
 */
static int peers_book(const struct ft__book_params *p, char (*book)[FT__BOOK_ENTRY_MAX])
{
	const char *s = p->peers, *why;
	int n = 0;
	size_t i = 0;

	for (;;) {
		size_t start = (size_t)skip_blanks(s, i), end;
		i = start + strcspn(s + start, ",");
		for (end = i; end > start && (s[end - 1] == ' ' || s[end - 1] == '\t'); end--)
			;
		if (ft__boot_entry_check(s + start, end - start, &why) != 0) {
			ft__error("FTCC_PEERS entry %d ('%.*s'): %s", n,
				  (int)(end - start > 80 ? 80 : end - start), s + start, why);
			return -FT_ECONFIG;
		}
		if (n >= p->world_size) {
			ft__error("FTCC_PEERS has more than %d entries (the world size): one "
				  "host:port per rank", p->world_size);
			return -FT_ECONFIG;
		}
		memcpy(book[n], s + start, end - start);
		book[n][end - start] = '\0';
		for (int j = 0; j < n; j++)
			if (strcmp(book[j], book[n]) == 0) {
				ft__error("FTCC_PEERS entries %d and %d are both '%s': one address "
					  "per rank", j, n, book[n]);
				return -FT_ECONFIG;
			}
		n++;
		if (s[i] == '\0')
			break;
		i++;
	}
	if (n != p->world_size) {
		ft__error("FTCC_PEERS has %d entr%s, the world size is %d: one host:port per rank",
			  n, n == 1 ? "y" : "ies", p->world_size);
		return -FT_ECONFIG;
	}
	return 0;
}

int ft__boot_book(const struct ft__book_params *p, const char *mine,
		  char (*book)[FT__BOOK_ENTRY_MAX])
{
	const char *why;

	if (p->how == NULL || p->world_size < 1 || p->rank < 0 || p->rank >= p->world_size ||
	    p->job_id == NULL)
		return -FT_EINVAL;
	if (strcmp(p->how, "peers") == 0) {
		if (p->peers == NULL || p->peers[0] == '\0') {
			ft__error("bootstrap 'peers' needs FTCC_PEERS (host:port of every rank)");
			return -FT_ECONFIG;
		}
		return peers_book(p, book);
	}
	if (strcmp(p->how, "pmix") != 0 && strcmp(p->how, "store") != 0) {
		ft__error("bootstrap '%s': expected pmix, store or peers", p->how);
		return -FT_ECONFIG;
	}
	if (mine == NULL || ft__boot_entry_check(mine, strlen(mine), &why) != 0) {
		ft__error("bootstrap: this rank's own address '%s' is no host:port: %s",
			  mine != NULL ? mine : "(none)", mine != NULL ? why : "missing");
		return -FT_ECONFIG;
	}
	if (strcmp(p->how, "pmix") == 0)
		return ft__boot_pmix_book(p, mine, book);
	if (p->store == NULL || p->store[0] == '\0') {
		ft__error("bootstrap 'store' needs FTCC_STORE (host:port of ftcc-run --store)");
		return -FT_ECONFIG;
	}
	return ft__boot_store_book(p, mine, book);
}
