/* config.h: the configuration's internal side: checks, sizes, the transports' knobs. */
#ifndef FTCC_CONFIG_H
#define FTCC_CONFIG_H

#include <stddef.h>

#include "ftcc.h"
#include "transport.h"

int ft__config_check(const struct ft_config *cfg);
int ft__parse_size(const char *s, size_t *out);
/* Fills e from the environment: the transports' knobs and the launcher's local size. */
int ft__config_tp_env(const struct ft_config *cfg, struct ft_tp_env *e);

#endif
