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
	[FT__PHASE_EXCHANGE] = "exchange",
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
	[FT__FAULT_FAIL] = "fail",
};

/* What each name means, for the reference (ft__fault_doc): one per name above. */
static const char *const phase_doc[] = {
	[FT__PHASE_ANY] = "the same as between (the default)",
	[FT__PHASE_BETWEEN] = "at the start of the op, before its first frame",
	[FT__PHASE_REDUCE_SCATTER] = "the ring's reduce-scatter half (step S, segment K)",
	[FT__PHASE_ALLGATHER] = "the ring's allgather half (step S, segment K)",
	[FT__PHASE_BROADCAST] = "a broadcast's steps (step S, segment K)",
	[FT__PHASE_COMMIT] = "the closing steps that tell every rank all hold the result",
	[FT__PHASE_INIT] = "inside `ft_init` (op 0), just after the rank published its record for "
			   "the job's first view, before that view settles",
	[FT__PHASE_CONNECT] = "inside `ft_init` (op 0), once that view settled, before the rank "
			      "links the ring",
	[FT__PHASE_EXCHANGE] = "recursive doubling's and halving's steps, and a broadcast tree's "
			       "(step S: 0 the fold, then the exchanges (1 .. log2 n, or 1 .. 2 "
			       "log2 n halving then doubling), then the unfold, then the probe; "
			       "segment 0): the small and medium ops' algorithms "
			       "(`FTCC_ALGORITHM`); the ring's phases strike only in ops on the ring",
};
static const char *const at_doc[] = {
	[FT__AT_SEND] = "before the frame is queued (the default)",
	[FT__AT_SENT] = "just after the frame is queued, before its log record",
	[FT__AT_RECORDED] = "when that frame is received, just after its log record, before it "
			    "is used",
};
static const char *const action_doc[] = {
	[FT__FAULT_KILL] = "SIGKILL itself (the default)",
	[FT__FAULT_HANG] = "stop for good (after the frames it queued before that point went out)",
	[FT__FAULT_DROP] = "cut its data links without a goodbye (the process lives on)",
	[FT__FAULT_FAIL] = "`ft_init` returns `FT_EIO`, as on a local error (out of descriptors, "
			   "memory or disk), and the process lives on: phase `init` or `connect` "
			   "only",
};
_Static_assert(FT__ARRAY_SIZE(phase_doc) == FT__ARRAY_SIZE(phase_names) &&
		       FT__ARRAY_SIZE(at_doc) == FT__ARRAY_SIZE(at_names) &&
		       FT__ARRAY_SIZE(action_doc) == FT__ARRAY_SIZE(action_names),
	       "every FTCC_FAULT name is documented");

static void doc_names(FILE *out, const char *key, const char *const *names,
		      const char *const *doc, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fprintf(out, "- `%s=%s`: %s\n", key, names[i], doc[i]);
}

void ft__fault_doc(FILE *out)
{
	fprintf(out,
		"For tests: a rank fails at an exact point of a collective. The value is up to "
		"%d points separated by `;`; a point is `key=value` items separated by `,`, "
		"`rank` required, in any order:\n\n"
		"    rank=R[,op=N][,phase=P][,step=S][,seg=K][,action=A][,at=W][,inc=I][,gen=G]\n\n"
		"- `rank=R`: the rank (its rank at `ft_init`) that fails.\n"
		"- `op=N`: in collective N, numbered as `ft_op_info.op_seq` (default 0: the "
		"barrier inside `ft_init`).\n"
		"- `step=S`, `seg=K`: when about to send segment K of step S of the phase (default "
		"0, 0; not for `between`).\n"
		"- `inc=I`: only in incarnation I (`FTCC_INCARNATION`; default 0), so that a "
		"restarted rank does not fail again at the same point.\n"
		"- `gen=G`: only in membership generation G (default: any).\n\n"
		"`phase=P`, where in the op:\n\n", FT__FAULT_MAX);
	doc_names(out, "phase", phase_names, phase_doc, FT__ARRAY_SIZE(phase_names));
	fprintf(out, "\n`action=A`, what the rank does there:\n\n");
	doc_names(out, "action", action_names, action_doc, FT__ARRAY_SIZE(action_names));
	fprintf(out, "\n`at=W`, where in a frame's life:\n\n");
	doc_names(out, "at", at_names, at_doc, FT__ARRAY_SIZE(at_names));
	fprintf(out,
		"\nAn example: `FTCC_FAULT='rank=2,op=5,phase=allgather,step=1,seg=0'` kills "
		"rank 2 as it is about to send the first segment of the second allgather step of "
		"collective 5. A malformed value makes `ft_init` fail with `FT_ECONFIG`. The points "
		"are the ring's: with one armed on some rank, a job on one host keeps the ring "
		"instead of the one-host path.\n");
}

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
	if (!have_rank || (f->action == FT__FAULT_FAIL && f->phase != FT__PHASE_INIT &&
			   f->phase != FT__PHASE_CONNECT))
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
			 "allgather|broadcast|commit|init|connect|exchange][,step=S][,seg=K][,action=kill|hang|drop|fail][,inc=I][,gen=G][,at=send|sent|recorded], "
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
		/* (any: the op's first frame, step 0 on the ring; recursive
		 * doubling's first may be a later step's, a rank being idle
		 * before it) */
		if (phase != FT__PHASE_BETWEEN &&
		    !(p->phase == FT__PHASE_ANY && phase == FT__PHASE_EXCHANGE) &&
		    (p->step != step || p->seg != seg))
			continue;
		p->armed = false;
		rearm(f);
		return p;
	}
	return NULL;
}

void ft__fault_act(const struct ft__fault_pt *f)
{
	static const char *const what[] = {"killing", "hanging", "dropping the links of",
					   "failing ft_init of"};

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
	case FT__FAULT_FAIL:
		break;
	}
}
