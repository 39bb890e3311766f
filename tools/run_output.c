/* run_output.c: ftcc-run's own messages and its ranks' output: one stream per pipe, lines tagged with the rank. */
/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ftcc.h"
#include "sock.h"
#include "store_server.h"
#include "ftcc-run.h"

void write_all(struct launcher *L, int fd, const char *p, size_t len)
{
	if (L && fd >= 0 && fd <= 2 && L->out_closed[fd])
		return;
	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n >= 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			/* An inherited nonblocking stdout: wait for room rather than drop lines. */
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };

			(void)poll(&pfd, 1, -1);
			continue;
		}
		if (L && fd >= 0 && fd <= 2)
			L->out_closed[fd] = true;
		return;
	}
}

__attribute__((format(printf, 2, 3))) void msg(struct launcher *L, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	memcpy(line, PROG ": ", sizeof(PROG ": ") - 1);
	va_start(ap, fmt);
	n = vsnprintf(line + sizeof(PROG ": ") - 1, sizeof(line) - sizeof(PROG ": "), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	size_t len = strlen(line);
	line[len++] = '\n';
	write_all(L, STDERR_FILENO, line, len);
}

static int buf_reserve(struct buf *b, size_t more)
{
	if (b->cap - b->len >= more)
		return 0;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap - b->len < more)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

static int buf_add(struct buf *b, const char *p, size_t len)
{
	if (buf_reserve(b, len) < 0)
		return -ENOMEM;
	memcpy(b->p + b->len, p, len);
	b->len += len;
	return 0;
}


/* ---- output streams ---------------------------------------------------------- */

int stream_add(struct launcher *L, int fd, int rank, int incarnation, bool is_err)
{
	if (L->nstreams == L->streams_cap) {
		size_t cap = L->streams_cap ? L->streams_cap * 2 : 64;
		struct stream *s = realloc(L->streams, cap * sizeof(*s));
		if (!s)
			return -ENOMEM;
		L->streams = s;
		L->streams_cap = cap;
	}
	L->streams[L->nstreams++] = (struct stream){
		.fd = fd, .rank = rank, .incarnation = incarnation, .is_err = is_err,
	};
	return 0;
}

/* Prefix and write every complete line; with `final`, the unterminated tail too. */
static void stream_emit(struct launcher *L, struct stream *s, bool final)
{
	char prefix[64];
	size_t plen, start = 0;

	if (L->opt.tag)
		plen = (size_t)snprintf(prefix, sizeof(prefix), "[%d.%d +%.3fs] ", s->rank,
					s->incarnation, elapsed(L));
	else
		plen = (size_t)snprintf(prefix, sizeof(prefix), "[%d] ", s->rank);
	L->out.len = 0;
	while (start < s->len) {
		char *nl = memchr(s->buf + start, '\n', s->len - start);
		size_t end;

		if (nl)
			end = (size_t)(nl - s->buf) + 1;
		else if (final || s->len - start >= LINE_LIMIT)
			end = s->len;
		else
			break;
		if (buf_add(&L->out, prefix, plen) < 0 ||
		    buf_add(&L->out, s->buf + start, end - start) < 0 ||
		    (!nl && buf_add(&L->out, "\n", 1) < 0))
			break; /* out of memory: the bytes stay queued for the next try */
		start = end;
	}
	if (start > 0) {
		memmove(s->buf, s->buf + start, s->len - start);
		s->len -= start;
	}
	write_all(L, s->is_err ? STDERR_FILENO : STDOUT_FILENO, L->out.p, L->out.len);
}

void stream_close(struct launcher *L, struct stream *s)
{
	stream_emit(L, s, true);
	close(s->fd);
	s->fd = -1;
	free(s->buf);
	s->buf = NULL;
	s->len = s->cap = 0;
}

/* One read (or, with `drain`, until the pipe is empty); closes the stream at EOF. */
void stream_read(struct launcher *L, struct stream *s, bool drain)
{
	do {
		if (s->cap - s->len < READ_CHUNK) {
			size_t cap = s->cap ? s->cap * 2 : 2 * READ_CHUNK;
			char *p = realloc(s->buf, cap);
			if (!p) {
				msg(L, "out of memory reading rank %d's output", s->rank);
				stream_close(L, s);
				return;
			}
			s->buf = p;
			s->cap = cap;
		}
		ssize_t n = read(s->fd, s->buf + s->len, s->cap - s->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			stream_close(L, s);
			return;
		}
		s->len += (size_t)n;
		stream_emit(L, s, false);
	} while (drain);
}

void streams_compact(struct launcher *L)
{
	size_t j = 0;

	for (size_t i = 0; i < L->nstreams; i++)
		if (L->streams[i].fd >= 0)
			L->streams[j++] = L->streams[i];
	L->nstreams = j;
}
