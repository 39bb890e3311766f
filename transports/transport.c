/* transport.c: the table of built-in transports. */
/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "transport.h"
#include "internal.h"

extern const struct ft__transport_ops ft__tcp_ops;
#ifdef FTCC_HAVE_FABRIC
extern const struct ft__transport_ops ft__fabric_ops;
#endif

const struct ft__transport_ops *ft__transport_lookup(const char *name)
{
	static const struct ft__transport_ops *const all[] = {
		&ft__tcp_ops,
#ifdef FTCC_HAVE_FABRIC
		&ft__fabric_ops,
#endif
	};

	if (name == NULL)
		return NULL;
	for (size_t i = 0; i < FT__ARRAY_SIZE(all); i++)
		if (strcmp(all[i]->name, name) == 0)
			return all[i];
	return NULL;
}
