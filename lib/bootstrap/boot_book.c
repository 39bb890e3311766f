/* boot_book.c: the first address book of in-band membership: the choice of source and the peers list. */
/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "bootstrap.h"
#include "internal.h"

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
