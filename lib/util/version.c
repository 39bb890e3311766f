/* version.c: the library's version at run time (ft_version). */
/* SPDX-License-Identifier: MIT */
#include "ftcc.h"

#include "internal.h"

/* The library's own FTCC_VERSION, compiled in: a program built against
 * another ftcc.h than the libftcc.so it loads can tell the two apart. */
FT__EXPORT const char *ft_version(void)
{
	return FTCC_VERSION;
}
