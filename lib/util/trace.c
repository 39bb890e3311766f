/* trace.c: the per-communicator event trace (FTCC_TRACE): Chrome trace-event JSON, one file per rank. */
/* SPDX-License-Identifier: MIT */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fdreg.h"
#include "internal.h"
#include "trace.h"
#include "transport.h"

/*
 * The file is "[" and then one event per line, each ending with ",": a
 * process killed mid-job leaves an unterminated array, which Perfetto and
 * chrome://tracing accept as it is. ft__trace_close writes a last event
 * without the comma and "]", which makes the file strict JSON.
 *
 * Events go through a 64 KiB stdio buffer, flushed when a failure, a view or
 * a recovery is written and otherwise at most every FLUSH_NS: a rank killed
 * with SIGKILL loses what it traced since its last flush (at most that
 * long), the collectives of a healthy rank cost no system call each.
 */

#define FLUSH_NS 100000000ull
#define BUF_BYTES ((size_t)64 << 10)

struct ft__trace {
	pthread_mutex_t lock;
	FILE *f;
	char path[FT_PATH_MAX + 32];
	int rank;
	int64_t off_ns;         /* CLOCK_REALTIME - CLOCK_MONOTONIC at open */
	uint64_t flushed_ns;    /* monotonic time of the last flush */
	bool dead;              /* an I/O error turned the trace off */
	int *failed, nfailed, cap_failed; /* declared since the last recovery event */
};

/* Which tid the calling thread writes as (ft__trace_thread); 0 unless set. */
static _Thread_local int trace_tid;

/* pattern with %r, %p and %% replaced, and ".<rank>" added when it has no %r. */
static int make_path(const char *pat, int rank, char *out, size_t cap)
{
	size_t n = 0, len;
	bool has_rank = false;
	int w;

	for (const char *p = pat; *p != '\0'; p++) {
		w = 0;
		if (p[0] == '%' && p[1] == 'r') {
			w = snprintf(out + n, cap - n, "%d", rank);
			has_rank = true;
			p++;
		} else if (p[0] == '%' && p[1] == 'p') {
			w = snprintf(out + n, cap - n, "%d", (int)getpid());
			p++;
		} else if (p[0] == '%' && p[1] == '%') {
			w = snprintf(out + n, cap - n, "%%");
			p++;
		} else if (n + 1 < cap) {
			out[n] = *p;
			w = 1;
		} else {
			w = (int)cap;
		}
		if (w < 0 || (size_t)w >= cap - n)
			return -ENAMETOOLONG;
		n += (size_t)w;
	}
	out[n] = '\0';
	if (has_rank)
		return 0;
	len = n >= 5 && strcmp(out + n - 5, ".json") == 0 ? n - 5 : n;
	w = snprintf(out + len, cap - len, ".%d%s", rank, n > len ? ".json" : "");
	return w < 0 || (size_t)w >= cap - len ? -ENAMETOOLONG : 0;
}

/* s as a JSON string. */
static void put_str(FILE *f, const char *s)
{
	putc('"', f);
	for (; *s != '\0'; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			putc(ch, f);
	}
	putc('"', f);
}

static void put_ts(FILE *f, const char *key, int64_t ns)
{
	if (ns < 0)
		ns = 0;
	fprintf(f, ",\"%s\":%lld.%03d", key, (long long)(ns / 1000), (int)(ns % 1000));
}

/* Starts an event line up to its args (the caller writes them, then end_event); under t->lock. */
static void begin_event(struct ft__trace *t, const char *name, const char *cat, char ph,
			uint64_t t0_ns, uint64_t t1_ns)
{
	fputs("{\"name\":", t->f);
	put_str(t->f, name);
	fputs(",\"cat\":", t->f);
	put_str(t->f, cat);
	fprintf(t->f, ",\"ph\":\"%c\"", ph);
	put_ts(t->f, "ts", (int64_t)t0_ns + t->off_ns);
	if (ph == 'X')
		put_ts(t->f, "dur", t1_ns > t0_ns ? (int64_t)(t1_ns - t0_ns) : 0);
	if (ph == 'i')
		fputs(",\"s\":\"t\"", t->f);
	fprintf(t->f, ",\"pid\":%d,\"tid\":%d,\"args\":", t->rank, trace_tid);
}

/* Ends the line; flushes when urgent or due; an error turns the trace off. */
static void end_event(struct ft__trace *t, bool urgent, const char *last)
{
	uint64_t now = ft__now_ns();

	fputs(last != NULL ? last : "},\n", t->f);
	if (urgent || now - t->flushed_ns >= FLUSH_NS) {
		fflush(t->f);
		t->flushed_ns = now;
	}
	if (ferror(t->f)) {
		ft__warn("trace %s: cannot write (%s): tracing is off", t->path, strerror(errno));
		t->dead = true;
	}
}

/* Locks t if it is on; false when there is nothing to write to. */
static bool take(struct ft__trace *t)
{
	if (t == NULL)
		return false;
	pthread_mutex_lock(&t->lock);
	if (!t->dead)
		return true;
	pthread_mutex_unlock(&t->lock);
	return false;
}

static void metadata(struct ft__trace *t, const char *name, const char *key, const char *sval,
		     int ival)
{
	fprintf(t->f, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"%s\":", name,
		t->rank, trace_tid, key);
	if (sval != NULL)
		put_str(t->f, sval);
	else
		fprintf(t->f, "%d", ival);
	end_event(t, false, "}},\n");
}

int ft__trace_open(const char *pattern, int rank, struct ft__trace **out)
{
	struct ft__trace *t;
	struct timespec rt;
	char name[32];
	int rc;

	*out = NULL;
	if (pattern == NULL || pattern[0] == '\0')
		return 0;
	t = calloc(1, sizeof(*t));
	if (t == NULL)
		return -ENOMEM;
	t->rank = rank;
	rc = make_path(pattern, rank, t->path, sizeof(t->path));
	if (rc != 0) {
		ft__warn("FTCC_TRACE=%s: the file name is too long: tracing is off", pattern);
		goto fail_path;
	}
	if ((rc = pthread_mutex_init(&t->lock, NULL)) != 0) {
		rc = -rc;
		goto fail_path;
	}
	t->f = fopen(t->path, "we");
	if (t->f == NULL) {
		rc = -errno;
		ft__warn("trace %s: cannot open (%s): tracing is off", t->path, strerror(errno));
		goto fail_open;
	}
	/* a forked child that exits would otherwise flush our buffer into the file a second time */
	ft__fd_own(fileno(t->f));
	setvbuf(t->f, NULL, _IOFBF, BUF_BYTES);
	/* the offset is taken between two monotonic readings, as near as it gets */
	t->flushed_ns = ft__now_ns();
	clock_gettime(CLOCK_REALTIME, &rt);
	t->off_ns = ((int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec) -
		    (int64_t)(t->flushed_ns + ft__now_ns()) / 2;
	fputs("[\n", t->f);
	snprintf(name, sizeof(name), "rank %d", rank);
	metadata(t, "process_name", "name", name, 0);
	metadata(t, "process_sort_index", "sort_index", NULL, rank);
	metadata(t, "thread_name", "name", "main", 0);
	*out = t;
	return 0;
fail_open:
	pthread_mutex_destroy(&t->lock);
fail_path:
	free(t);
	return rc;
}

void ft__trace_close(struct ft__trace *t)
{
	if (t == NULL)
		return;
	if (take(t)) {
		begin_event(t, "finalize", "ftcc", 'i', ft__now_ns(), 0);
		end_event(t, true, "{}}\n]\n");
		pthread_mutex_unlock(&t->lock);
	}
	ft__fd_disown(fileno(t->f));
	if (fclose(t->f) != 0 && !t->dead)
		ft__warn("trace %s: cannot write (%s)", t->path, strerror(errno));
	pthread_mutex_destroy(&t->lock);
	free(t->failed);
	free(t);
}

void ft__trace_thread(struct ft__trace *t, int tid, const char *name)
{
	trace_tid = tid;
	if (!take(t))
		return;
	metadata(t, "thread_name", "name", name, 0);
	pthread_mutex_unlock(&t->lock);
}

void ft__trace_instant(struct ft__trace *t, const char *name, const char *args_json)
{
	if (!take(t))
		return;
	begin_event(t, name, "ftcc", 'i', ft__now_ns(), 0);
	fputs(args_json != NULL ? args_json : "{}", t->f);
	end_event(t, true, NULL);
	pthread_mutex_unlock(&t->lock);
}

void ft__trace_complete(struct ft__trace *t, const char *name, const char *cat, uint64_t t0_ns,
			uint64_t t1_ns, const char *args_json)
{
	if (!take(t))
		return;
	begin_event(t, name, cat, 'X', t0_ns, t1_ns);
	fputs(args_json != NULL ? args_json : "{}", t->f);
	end_event(t, false, NULL);
	pthread_mutex_unlock(&t->lock);
}

static const char *kind_name(int kind)
{
	switch (kind) {
	case FT__COLL_ALLREDUCE:
		return "allreduce";
	case FT__COLL_BROADCAST:
		return "broadcast";
	case FT__COLL_BARRIER:
		return "barrier";
	case FT__COLL_REDUCE_SCATTER:
		return "reduce_scatter";
	case FT__COLL_ALLGATHER:
		return "allgather";
	default:
		return "invalid";
	}
}

void ft__trace_op(struct ft__trace *t, int kind, uint64_t op_seq, size_t bytes, uint32_t generation,
		  int contributors, int rc, uint64_t t0_ns)
{
	if (!take(t))
		return;
	begin_event(t, kind_name(kind), "op", 'X', t0_ns, ft__now_ns());
	fprintf(t->f, "{\"op_seq\":%llu,\"bytes\":%zu,\"generation\":%u,\"contributors\":%d,"
		      "\"rc\":%d,\"error\":\"%s\"",
		(unsigned long long)op_seq, bytes, generation, contributors, rc, ft_err_name(rc));
	end_event(t, false, "}},\n");
	pthread_mutex_unlock(&t->lock);
}

void ft__trace_recovery(struct ft__trace *t, uint64_t t0_ns, uint32_t generation, int rc)
{
	if (!take(t))
		return;
	begin_event(t, "recovery", "recovery", 'X', t0_ns, ft__now_ns());
	fputs("{\"failed\":[", t->f);
	for (int i = 0; i < t->nfailed; i++)
		fprintf(t->f, "%s%d", i > 0 ? "," : "", t->failed[i]);
	/* rc: 0 run the op again on the new view, 1 this rank holds its result */
	fprintf(t->f, "],\"generation\":%u,\"rc\":%d,\"outcome\":\"%s\"", generation, rc,
		rc == 0 ? "retry" : rc == 1 ? "stands" : ft_err_name(rc));
	t->nfailed = 0;
	end_event(t, true, "}},\n");
	pthread_mutex_unlock(&t->lock);
}

void ft__trace_failure(struct ft__trace *t, int rank, const char *why)
{
	if (!take(t))
		return;
	if (t->nfailed == t->cap_failed) {
		int cap = t->cap_failed > 0 ? 2 * t->cap_failed : 8;
		int *p = realloc(t->failed, (size_t)cap * sizeof(int));
		if (p != NULL) {
			t->failed = p;
			t->cap_failed = cap;
		}
	}
	if (t->nfailed < t->cap_failed)
		t->failed[t->nfailed++] = rank;
	begin_event(t, "failure", "detect", 'i', ft__now_ns(), 0);
	fprintf(t->f, "{\"rank\":%d,\"why\":", rank);
	put_str(t->f, why != NULL ? why : "");
	end_event(t, true, "}},\n");
	pthread_mutex_unlock(&t->lock);
}

void ft__trace_view(struct ft__trace *t, uint32_t generation, const int *members, int n)
{
	if (!take(t))
		return;
	begin_event(t, "view", "detect", 'i', ft__now_ns(), 0);
	fprintf(t->f, "{\"generation\":%u,\"size\":%d,\"members\":[", generation, n);
	for (int i = 0; i < n; i++)
		fprintf(t->f, "%s%d", i > 0 ? "," : "", members[i]);
	end_event(t, true, "]}},\n");
	pthread_mutex_unlock(&t->lock);
}
