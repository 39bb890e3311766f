/* boot_book_tmp.c: TEMPORARY peers-only address book until the boot branch lands. */
#include <stdio.h>
#include <string.h>

#include "bootstrap.h"
#include "internal.h"

int ft__boot_book(const struct ft__book_params *p, const char *mine,
		  char (*book)[FT__BOOK_ENTRY_MAX])
{
	const char *s = p->peers;
	int r = 0;

	(void)mine;
	if (strcmp(p->how, "peers") != 0)
		return -FT_ENOSYS;
	while (r < p->world_size && s != NULL && *s) {
		const char *e = strchr(s, ',');
		size_t n = e ? (size_t)(e - s) : strlen(s);
		if (n == 0 || n >= FT__BOOK_ENTRY_MAX)
			return -FT_ECONFIG;
		memcpy(book[r], s, n);
		book[r][n] = '\0';
		r++;
		s = e ? e + 1 : NULL;
	}
	return r == p->world_size && (s == NULL || *s == '\0') ? 0 : -FT_ECONFIG;
}
