/* config.h: the configuration's internal side: checks, the versioned import, the transports' knobs. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_CONFIG_H
#define FTCC_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "ftcc.h"
#include "transport.h"

int ft__config_check(struct ft_config *cfg);
/* A setting cfg's choices make unused (docs/environment.md): its variable, and why. */
struct ft__unused {
	const char *name, *why;
};
/* Fills out with up to max of them; returns how many there are. */
size_t ft__config_unused(const struct ft_config *cfg, struct ft__unused *out, size_t max);
/* Warns of each once per process. */
void ft__config_warn_unused(const struct ft_config *cfg);
/* Copies the caller's versioned struct into out (see struct_size in ftcc.h):
 * 0, or -FT_EINVAL when its size is no version this library can read. */
int ft__config_import(const struct ft_config *user, struct ft_config *out);
int ft__parse_size(const char *s, size_t *out);
/* Fills e from the environment: the transports' knobs and the launcher's local size. */
int ft__config_tp_env(const struct ft_config *cfg, struct ft__tp_env *e);
/* The data links' keepalive and TCP_USER_TIMEOUT (sock.h), 0 the kernel's:
 * how long the kernel waits for a silent peer (docs/failures.md, "Dead hosts"). */
void ft__config_data_link_timeouts(const struct ft_config *cfg, int *keepalive_ms,
				   int *user_timeout_ms);
/* The table of every FTCC_* variable (config.c): each with its value here, its default
 * and what it means, a line each (ftcc-run --params). */
void ft__config_params(FILE *out);
/* The table's size, and entry i: its name (NULL past the end), its bounds and its kind
 * ('i' integer, 'z' size, 'e' one of names, 'l' log level, 's' string, 'b' the launcher's). */
size_t ft__config_var_count(void);
const char *ft__config_var_name(size_t i, long *lo, long *hi, int *kind);

/* Entry i of the table as the reference (docs/environment.md) shows it: 0, or -1 past
 * the end. field NULL: read from the environment only, even when ft_init is given a
 * struct ft_config. */
struct ft__var_doc {
	const char *name, *type, *field, *def, *help;
	char range[192];
};
int ft__config_var_doc(size_t i, struct ft__var_doc *d);
/* The whole reference page, Markdown (config_doc.c): ftcc-run --params=markdown. */
void ft__config_doc(FILE *out);

#endif
