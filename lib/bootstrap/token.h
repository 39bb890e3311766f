/* token.h: the job token when the user gives none (token.c). */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_TOKEN_H
#define FTCC_TOKEN_H

#include "ftcc.h"

/*
 * Fills cfg->token when it is empty: from the job's private channel (the
 * file rendezvous's job directory, PMIx), or leaves it empty under
 * FTCC_AUTH=none (warned once). 0, or -FT_ECONFIG (no channel: the error
 * says how to give a token), -FT_EACCES (the rendezvous is not private),
 * -FT_EIO, -FT_ECORRUPT, -FT_ETIMEDOUT (PMIx).
 */
int ft__token_resolve(struct ft_config *cfg);

#endif
