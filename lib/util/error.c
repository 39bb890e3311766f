/* error.c: names and messages of ftcc's error codes. */
/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "ftcc.h"

#include "internal.h"

FT__EXPORT const char *ft_strerror(int err)
{
	switch (err) { /* not -err: INT_MIN has no negation */
	case 0:
		return "success";
#define FT__ERR_MSG(name, value, msg) \
	case -FT_E##name:              \
		return msg;
		FT_ERROR_MAP(FT__ERR_MSG)
#undef FT__ERR_MSG
	default:
		return "unknown error";
	}
}

FT__EXPORT const char *ft_err_name(int err)
{
	switch (err) {
	case 0:
		return "0";
#define FT__ERR_NAME(name, value, msg) \
	case -FT_E##name:               \
		return "FT_E" #name;
		FT_ERROR_MAP(FT__ERR_NAME)
#undef FT__ERR_NAME
	default:
		return "FT_E?";
	}
}

int ft__err_local(int e)
{
	switch (e) {
	case EMFILE:
	case ENFILE:
		return -FT_EMFILE;
	case ENOMEM:
	case ENOBUFS:
		return -FT_ENOMEM;
	case ENOSPC:
	case EDQUOT:
		return -FT_ENOSPC;
	default:
		return -FT_EIO;
	}
}

int ft__err_probe(int rc)
{
	int fd;

	if (rc != -FT_EIO)
		return rc;
	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		return rc;
	}
	return errno == EMFILE || errno == ENFILE ? -FT_EMFILE : rc;
}

bool ft__err_shortage(int rc)
{
	return rc == -FT_EMFILE || rc == -FT_ENOMEM || rc == -FT_ENOSPC;
}

int ft__err_public(int rc)
{
	if (rc >= 0 || strcmp(ft_err_name(rc), "FT_E?") != 0)
		return rc;
	/* an errno a shortage names: said as itself, not as an I/O error */
	if (rc > -FT_ERR_BASE && ft__err_local(-rc) != -FT_EIO)
		return ft__err_local(-rc);
	ft__error("internal error code %d (%s) reported as FT_EIO", rc,
		  rc > -FT_ERR_BASE ? strerror(-rc) : "no errno");
	return -FT_EIO;
}
