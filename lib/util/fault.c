/* fault.c: parsing FTCC_FAULT and acting on it: kill, hang or drop links at an exact point. */
/* SPDX-License-Identifier: MIT */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault.h"
#include "internal.h"

static const char *const phase_names[] = {
	[FT__PHASE_ANY] = "any",
	[FT__PHASE_BETWEEN] = "between",
	[FT__PHASE_REDUCE_SCATTER] = "reduce_scatter",
	[FT__PHASE_ALLGATHER] = "allgather",
	[FT__PHASE_BROADCAST] = "broadcast",
	[FT__PHASE_COMMIT] = "commit",
	[FT__PHASE_INIT] = "init",
	[FT__PHASE_CONNECT] = "connect",
};
static const char *const at_names[] = {
	[FT__AT_SEND] = "send",
	[FT__AT_SENT] = "sent",
	[FT__AT_RECORDED] = "recorded",
};
static const char *const action_names[] = {
	[FT__FAULT_KILL] = "kill",
	[FT__FAULT_HANG] = "hang",
	[FT__FAULT_DROP] = "drop",
};

static int lookup(const char *v, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(v, names[i]) == 0)
			return (int)i;
	return -1;
}

static int parse_u64(const char *v, uint64_t *out)
{
	char *end;

	if (*v < '0' || *v > '9')
		return -1;
	errno = 0;
	*out = strtoull(v, &end, 10);
	return errno != 0 || *end != '\0' ? -1 : 0;
}

static int parse_one(char *buf, struct ft__fault_pt *f)
{
	char *rest = buf, *item;
	bool have_rank = false;

	f->phase = FT__PHASE_ANY;
	f->action = FT__FAULT_KILL;
	f->gen = -1;
	while ((item = strsep(&rest, ",")) != NULL) {
		char *eq = strchr(item, '=');
		uint64_t v;
		int k;
		if (eq == NULL)
			return -1;
		*eq++ = '\0';
		if (strcmp(item, "at") == 0) {
			k = lookup(eq, at_names, FT__ARRAY_SIZE(at_names));
			if (k < 0)
				return -1;
			f->at = (enum ft__fault_at)k;
			continue;
		}
		if (strcmp(item, "phase") == 0 || strcmp(item, "action") == 0) {
			bool phase = item[0] == 'p';
			k = phase ? lookup(eq, phase_names, FT__ARRAY_SIZE(phase_names))
				  : lookup(eq, action_names, FT__ARRAY_SIZE(action_names));
			if (k < 0)
				return -1;
			if (phase)
				f->phase = (enum ft__fault_phase)k;
			else
				f->action = (enum ft__fault_action)k;
			continue;
		}
		if (parse_u64(eq, &v) != 0 || v > UINT32_MAX)
			return -1;
		if (strcmp(item, "rank") == 0) {
			f->rank = (int)v;
			have_rank = true;
		} else if (strcmp(item, "op") == 0) {
			f->op = v;
		} else if (strcmp(item, "step") == 0) {
			f->step = (uint32_t)v;
		} else if (strcmp(item, "seg") == 0) {
			f->seg = (uint32_t)v;
		} else if (strcmp(item, "inc") == 0) {
			f->inc = (uint32_t)v;
		} else if (strcmp(item, "gen") == 0) {
			f->gen = (int64_t)v;
		} else {
			return -1;
		}
	}
	if (!have_rank)
		return -1;
	f->armed = true;
	return 0;
}

int ft__fault_parse(const char *spec, struct ft__fault *f, char *err, size_t errlen)
{
	char buf[256], *rest, *one;

	memset(f, 0, sizeof(*f));
	if (spec == NULL || *spec == '\0')
		return 0;
	if (strlen(spec) >= sizeof(buf))
		goto bad;
	strcpy(buf, spec);
	rest = buf;
	while ((one = strsep(&rest, ";")) != NULL) {
		if (f->n == FT__FAULT_MAX || parse_one(one, &f->pt[f->n]) != 0)
			goto bad;
		f->n++;
	}
	f->armed = true;
	return 0;
bad:
	if (err != NULL)
		snprintf(err, errlen,
			 "FTCC_FAULT='%s': expected rank=R[,op=N][,phase=between|reduce_scatter|"
			 "allgather|broadcast|commit|init|connect][,step=S][,seg=K][,action=kill|hang|drop][,inc=I][,gen=G][,at=send|sent|recorded], "
			 "up to %d separated by ';'",
			 spec, FT__FAULT_MAX);
	memset(f, 0, sizeof(*f));
	return -FT_ECONFIG;
}

static void rearm(struct ft__fault *f)
{
	f->armed = false;
	for (int i = 0; i < f->n; i++)
		f->armed |= f->pt[i].armed;
}

void ft__fault_incarnation(struct ft__fault *f, uint32_t inc)
{
	for (int i = 0; i < f->n; i++)
		if (f->pt[i].inc != inc)
			f->pt[i].armed = false;
	rearm(f);
}

const struct ft__fault_pt *ft__fault_due(struct ft__fault *f, int rank, uint32_t gen, uint64_t op,
					 enum ft__fault_phase phase, uint32_t step, uint32_t seg,
					 enum ft__fault_at at)
{
	for (int i = 0; i < f->n; i++) {
		struct ft__fault_pt *p = &f->pt[i];
		if (!p->armed || p->rank != rank || p->op != op || (p->gen >= 0 && p->gen != gen) ||
		    p->at != at)
			continue;
		if (p->phase == FT__PHASE_ANY ? phase == FT__PHASE_BETWEEN : p->phase != phase)
			continue;
		if (phase != FT__PHASE_BETWEEN && (p->step != step || p->seg != seg))
			continue;
		p->armed = false;
		rearm(f);
		return p;
	}
	return NULL;
}

void ft__fault_act(const struct ft__fault_pt *f)
{
	static const char *const what[] = {"killing", "hanging", "dropping the links of"};

	ft__warn("FTCC_FAULT: %s rank %d at op %llu, %s step %u segment %u", what[f->action],
		 f->rank, (unsigned long long)f->op, phase_names[f->phase], f->step, f->seg);
	switch (f->action) {
	case FT__FAULT_KILL:
		raise(SIGKILL);
		break;
	case FT__FAULT_HANG:
		for (;;)
			pause();
	case FT__FAULT_DROP:
		break;
	}
}
